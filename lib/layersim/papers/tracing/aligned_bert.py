"""AlignedBERT: an encoder fine-tuned with the standard and with the aligned loss, read at every layer by its
one shared classifier (tracing paper, §3.2 and App. C.2, Figures 8 and 21; notebook t09).

The paper fine-tunes BERT-base twice on each task, with the cross-entropy of the last layer and with eq. (5),
the cross-entropies of the shared pooler + classifier on every layer's CLS token weighted by
``2l / (L(L+1))`` (``layersim.train.finetune.aligned_loss``), and reads both with their own last-layer head on
every block's CLS token (eq. 2). The fine-tuning, its cache and the features of every layer are
``layersim.train.finetune``'s, shared with the clusters notebooks (the standard model *is* their checkpoint).

- :data:`OBJECTIVES`: the two models of a task and their losses;
- :func:`layerwise`: one model fine-tuned (or loaded) and read at every block: accuracy with the shared
  classifier and COS of the CLS token with the last block; :func:`describe` prints it;
- :func:`gains`: the statistics the paper's statements are tested on (first-half gain, last-block gap);
- :func:`checkpoint_records`: the ``checkpoints`` block of ``metrics.json``;
- :func:`layerwise_figure`: Figure 8 (accuracy and COS per block, standard vs aligned, the majority class).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layersim.inputs import text_tasks
from layersim.notebook import lenses
from layersim.train import finetune

__all__ = ["OBJECTIVES", "checkpoint_records", "describe", "gains", "layerwise", "layerwise_figure"]

#: the two fine-tunes of each (encoder, task): the model's name -> its loss (``layersim.train.finetune.OBJECTIVES``)
OBJECTIVES: dict[str, str] = {"standard": "ce", "aligned": "aligned"}


def layerwise(model: str, train: text_tasks.TextTask, val: text_tasks.TextTask, settings: Mapping[str, Any],
              name: str, seed: int = 0, device: Any = "auto") -> dict:
    """Figure 8's reading of one model: encoder ``model`` fine-tuned on ``train`` with the loss of ``name`` (a key
    of :data:`OBJECTIVES`) under ``settings`` (``presets.CLUSTERS_FINETUNE`` keys and ``epochs``; restart 1, from
    the cache when trained before: ``layersim.train.finetune.fine_tuned``), then read on ``val`` at every block's
    CLS token. Returns ``steps`` (the fine-tuning steps, :func:`layersim.train.finetune.steps_of`), ``accuracy``
    (``[L]``: the shared classifier on blocks ``1..L``, eq. 2), ``cos`` (``[L]``: mean COS of each block's CLS
    token with the last block's, the ``cos/to_last`` lens) and ``meta`` (the checkpoint's)."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown model {name!r}: choose one of {sorted(OBJECTIVES)}")
    n_steps = finetune.steps_of(settings, len(train))
    cfg = {**settings, "steps": n_steps, "objective": OBJECTIVES[name]}
    net, meta = finetune.fine_tuned(model, train, cfg, restart=1, seed=seed, device=device)
    H = finetune.cls_features(net, val, cfg, device=device)
    accuracy = finetune.layer_scores(net, H, val)[1:]  # blocks 1..L
    cos = lenses.apply("cos/to_last", lenses.LayerData(hidden=H[1:]))
    return {"steps": n_steps, "accuracy": accuracy, "cos": cos, "meta": meta}


def describe(key: str, result: Mapping) -> str:
    """One line on a :func:`layerwise` result named ``key``: its steps, whether it came from the cache (else its
    fine-tuning time) and its accuracy per block."""
    meta = result["meta"]
    how = "from the cache" if meta["from_cache"] else f"fine-tuned in {meta['train_seconds']:.0f} s"
    return (f"{key.replace('/', ' / ')}: {result['steps']} steps ({how}); accuracy per block "
            f"{np.round(result['accuracy'], 3).tolist()}")


def _pairs(results: Mapping[str, Mapping]) -> list[str]:
    """The ``"<model>/<task>"`` prefixes of the ``"<model>/<task>/<name>"`` keys, in order, each once."""
    return list(dict.fromkeys(key.rsplit("/", 1)[0] for key in results))


def gains(results: Mapping[str, Mapping]) -> tuple[dict[str, float], dict[str, float]]:
    """The tracing paper's §3.2 statements on every ``"<model>/<task>"`` of ``results`` (``"<model>/<task>/<name>"``
    -> a :func:`layerwise` result, both names present): ``mid_gain``, the mean over blocks ``1..⌊L/2⌋`` of the
    aligned minus the standard accuracy, and ``last_gap``, aligned minus standard at block ``L``."""
    mid_gain, last_gap = {}, {}
    for pair in _pairs(results):
        missing = [n for n in OBJECTIVES if f"{pair}/{n}" not in results]
        if missing:
            raise ValueError(f"gains needs the standard and the aligned model of {pair!r}; missing {missing}")
        s, a = results[f"{pair}/standard"]["accuracy"], results[f"{pair}/aligned"]["accuracy"]
        half = len(s) // 2
        mid_gain[pair] = float(np.mean(a[:half] - s[:half]))
        last_gap[pair] = float(a[-1] - s[-1])
    return mid_gain, last_gap


def checkpoint_records(results: Mapping[str, Mapping]) -> dict[str, dict]:
    """Each model's checkpoint key, fine-tuning time and whether it came from the cache (``metrics.json``)."""
    return {key: {"checkpoint": r["meta"]["key"], "train_seconds": r["meta"]["train_seconds"],
                  "from_cache": r["meta"]["from_cache"]} for key, r in results.items()}


def layerwise_figure(results: Mapping[str, Mapping], majority: Sequence[Mapping]):
    """The tracing paper's Figure 8: one column per ``majority`` row (``model``, ``task``, ``majority``: the
    majority-class score), the validation accuracy of the shared classifier on every block (top) and the COS of
    every block's CLS token with the last block's (bottom), standard (dashed) vs aligned (solid), from
    ``results`` (``"<model>/<task>/<name>"`` -> a :func:`layerwise` result). Returns the figure."""
    import matplotlib.pyplot as plt

    if not majority:
        raise ValueError("layerwise_figure needs at least one (model, task)")
    fig, axes = plt.subplots(2, len(majority), figsize=(5.5 * len(majority), 7), squeeze=False)
    for c, row in enumerate(majority):
        pair = f"{row['model']}/{row['task']}"
        blocks = np.arange(1, len(results[f"{pair}/standard"]["accuracy"]) + 1)
        for name, style in (("standard", "o--"), ("aligned", "s-")):
            axes[0, c].plot(blocks, results[f"{pair}/{name}"]["accuracy"], style, label=name)
            axes[1, c].plot(blocks, results[f"{pair}/{name}"]["cos"], style, label=name)
        axes[0, c].axhline(row["majority"], color="grey", ls=":", label="majority class")
        axes[0, c].set(title=f"{row['model']}: {row['task']}", xlabel="block", ylabel="validation accuracy",
                       xticks=blocks)
        axes[1, c].set(xlabel="block", ylabel="COS with the last block (CLS)", xticks=blocks)
        for ax in axes[:, c]:
            ax.grid()
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
