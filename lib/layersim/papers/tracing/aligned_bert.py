"""AlignedBERT: an encoder fine-tuned with the standard and with the aligned loss, read at every layer by its one
shared classifier (tracing paper, §3.2, App. C.2, Figures 8 and 21; notebook t09).

The aligned loss is eq. (5) over every layer's CLS token (``layersim.train.finetune.aligned_loss``); fine-tuning,
cache and features are ``layersim.train.finetune``'s, so the standard model is the clusters notebooks' checkpoint.
:data:`OBJECTIVES` names the two models, :func:`layerwise` reads one at every block, :func:`gains` gives the tested
statistics, :func:`checkpoint_records` the ``metrics.json`` block and :func:`layerwise_figure` draws Figure 8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from layersim.inputs import text_tasks
from layersim.analysis import lenses
from layersim.train import finetune

__all__ = ["OBJECTIVES", "checkpoint_records", "describe", "gains", "layerwise", "layerwise_figure"]

#: the two fine-tunes of each (encoder, task): the model's name -> its loss (``layersim.train.finetune.OBJECTIVES``)
OBJECTIVES: dict[str, str] = {"standard": "ce", "aligned": "aligned"}


def layerwise(model: str, train: text_tasks.TextTask, val: text_tasks.TextTask, settings: Mapping[str, Any],
              name: str, seed: int = 0, device: Any = "auto") -> dict:
    """Figure 8's reading of one model: ``model`` fine-tuned on ``train`` with the loss of ``name``
    (:data:`OBJECTIVES`) under ``settings`` (restart 1, cached), read on ``val``. Returns ``steps``, ``accuracy``
    (``[L]``, the shared classifier on blocks ``1..L``, eq. 2), ``cos`` (``[L]``, mean COS of each block's CLS token
    with the last) and ``meta``."""
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
    """§3.2's statistics per ``"<model>/<task>"`` of ``results`` (``"<model>/<task>/<name>"`` -> :func:`layerwise`):
    ``mid_gain``, aligned minus standard accuracy averaged over blocks ``1..⌊L/2⌋``, and ``last_gap`` at
    block ``L``."""
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
    """Figure 8: one column per ``majority`` row (``model``, ``task``, majority-class score), the shared
    classifier's accuracy (top) and COS with the last block (bottom) per block, standard dashed, aligned solid.
    Returns the figure."""
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
