"""The clusters paper's protocol (notebooks c01-c03): fine-tuned encoders, their CKA maps, truncated and
layer-skipped models.

Phang, Liu & Bowman (BlackboxNLP 2021, https://aclanthology.org/2021.blackboxnlp-1.42) fine-tune an encoder (two
restarts), compare the CLS token of every layer by linear CKA (ORIG-ORIG, FT-ORIG, FT-FT, FT[1]-FT[2]; §3), feed an
intermediate layer to the head with and without re-training (UNTUNED, TUNED, TUNEDORIG; §4), and skip every
contiguous span (§4.1). Fine-tuning and features are :mod:`layersim.train.finetune`'s (see docs/modules.md,
`layersim.papers.clusters.protocol`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from layersim.core.progress import progress_bar
from layersim.inputs import text_tasks
from layersim.measures import similarity
from layersim.nets import models, readout, surgery
from layersim.train import finetune, heads

__all__ = ["cka_maps", "diagonal", "fine_tune_note", "original", "single_skip_drops", "skip_grid", "skip_grids",
           "truncation_curves", "truncation_gaps", "truncation_table", "tuned_head_curve"]

#: the three truncation curves of Fig. 3, in the order the paper lists them (§4 (a)-(c))
TRUNCATIONS = ("UNTUNED", "TUNED", "TUNEDORIG")

def original(model: str, num_labels: int, seed: int = 0) -> nn.Module:
    """The pretrained encoder (ORIG) with a fresh ``num_labels`` head (seeded), in eval mode."""
    return finetune.load_classifier(model, num_labels, seed=seed).eval()


def cka_maps(ft1: np.ndarray, ft2: np.ndarray | None, orig: np.ndarray) -> dict[str, np.ndarray]:
    """The four comparisons of Fig. 1 from CLS features ``[L+1, N, d]`` over blocks ``1..L`` (row ``l-1`` =
    block ``l``): ``"ORIG-ORIG"``, ``"FT-ORIG"`` (rows fine-tuned), ``"FT-FT"`` and, given ``ft2``,
    ``"FT[1]-FT[2]"``. Entry 0 is left out: at CLS it is constant, so its CKA is undefined."""
    ft1, orig = ft1[1:], orig[1:]
    maps = {"ORIG-ORIG": similarity.layer_matrix(orig), "FT-ORIG": similarity.cross_matrix(ft1, orig),
            "FT-FT": similarity.layer_matrix(ft1)}
    if ft2 is not None:
        maps["FT[1]-FT[2]"] = similarity.cross_matrix(ft1, ft2[1:])
    return maps


def diagonal(M: np.ndarray) -> np.ndarray:
    """The diagonal of a cross-model map: layer ``l`` of one model vs layer ``l`` of the other."""
    return np.diag(np.asarray(M)).copy()


def tuned_head_curve(model: nn.Module, train_features: np.ndarray, train: text_tasks.TextTask,
                     val_features: np.ndarray, val: text_tasks.TextTask, epochs: int, lr: float,
                     batch_size: int = 32, seed: int = 0) -> np.ndarray:
    """TUNED / TUNEDORIG (§4 (b), (c)): per layer, a copy of ``model``'s task head re-trained on that layer's
    training CLS features (standardised; ``train_head`` with ``epochs``, ``lr``) and scored on the validation
    features. Pass the fine-tuned features for TUNED, the pretrained ones for TUNEDORIG."""
    head = models.classifier_head(model)
    out = []
    for l in range(len(train_features)):
        trained = heads.train_head(copy.deepcopy(head), train_features[l], train.labels, epochs=epochs, lr=lr,
                                   batch_size=batch_size, seed=seed,
                                   loss="mse" if train.num_labels == 1 else "ce", standardize=True,
                                   choices=train.num_labels if train.multiple_choice else None)
        z = readout.layer_logits(model, val_features[l:l + 1], layers=[l], head=trained)[0]
        out.append(text_tasks.score(val, text_tasks.predictions(val, z)))
    return np.array(out)


def truncation_curves(model: nn.Module, orig: nn.Module, head_train: text_tasks.TextTask, val: text_tasks.TextTask,
                      settings: Mapping[str, Any], seed: int = 0, device: Any = "auto") -> dict[str, Any]:
    """Fig. 3 (§4) for ``model`` and its pretrained encoder ``orig``: the validation score with the encoder cut
    after every layer (entry 0 = embedding output),
    ``{"UNTUNED", "TUNED", "TUNEDORIG": [L+1], "full", "majority"}``; the heads re-trained on ``head_train`` (see
    docs/modules.md, `layersim.papers.clusters.protocol`)."""
    H_val, H_tr = finetune.cls_features(model, val, settings, device), finetune.cls_features(model, head_train,
                                                                                              settings, device)
    O_val, O_tr = finetune.cls_features(orig, val, settings, device), finetune.cls_features(orig, head_train,
                                                                                             settings, device)
    kw = dict(epochs=settings["head_epochs"], lr=settings["head_lr"], seed=seed)
    c: dict[str, Any] = {"UNTUNED": finetune.layer_scores(model, H_val, val),
                         "TUNED": tuned_head_curve(model, H_tr, head_train, H_val, val, **kw),
                         "TUNEDORIG": tuned_head_curve(model, O_tr, head_train, O_val, val, **kw)}
    c["full"], c["majority"] = float(c["UNTUNED"][-1]), text_tasks.majority_baseline(val)
    return c


def fine_tune_note(meta: Mapping[str, Any]) -> str:
    """Where a fine-tuned model came from, for a progress line: ``"from the cache"`` or ``"fine-tuned in N s"``
    (``meta``: what ``layersim.train.finetune.fine_tuned`` returns beside the model)."""
    return "from the cache" if meta["from_cache"] else f"fine-tuned in {meta['train_seconds']:.0f} s"


def truncation_table(curves: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Fig. 3's numbers as a table: one row per layer, one column per (curve, run) of ``curves``
    (``{"<model>/<task>": truncation_curves(...)}``); a model with fewer layers than another (RoBERTa's 12 beside
    ALBERT-large's 24) has empty cells below its last."""
    if not curves:
        raise ValueError("truncation_table needs at least one run's curves")
    return pd.DataFrame({(name, key): pd.Series(np.asarray(c[name], dtype=float))
                         for name in TRUNCATIONS for key, c in curves.items()}).rename_axis("layer")


def truncation_gaps(curves: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """§4's two numbers per run: ``discard[key]``, the best of UNTUNED and TUNED without the last block minus the
    full model (``top_layers_discardable``); ``orig_gap[key]``, mean TUNED minus TUNEDORIG over blocks ``1..L``
    (``tunedorig_below_tuned``)."""
    discard, orig_gap = {}, {}
    for key, c in curves.items():
        if len(c["UNTUNED"]) < 2:
            raise ValueError(f"the curves of {key!r} have {len(c['UNTUNED'])} entries: truncation needs a block")
        discard[key] = float(max(c["UNTUNED"][-2], c["TUNED"][-2]) - c["full"])
        orig_gap[key] = float(np.mean(c["TUNED"][1:] - c["TUNEDORIG"][1:]))
    return discard, orig_gap


def skip_grid(model: nn.Module, task: text_tasks.TextTask, settings: Mapping[str, Any], device: Any = "auto",
              progress: bool = True) -> np.ndarray:
    """Fig. 4: ``G[i-1, j-1]`` = the task score with blocks ``i..j`` (1-based, inclusive) skipped
    (``layersim.nets.surgery.skip``, no re-training); NaN below the diagonal (``j < i``: no span)."""
    L = len(surgery.adapters.get(model).blocks(model))
    batches = text_tasks.encode(task, model.layersim_tokenizer, settings.get("eval_batch_size", 64),
                                settings["max_length"])
    G = np.full((L, L), np.nan)
    spans = [(i, j) for i in range(1, L + 1) for j in range(i, L + 1)]
    for i, j in progress_bar(spans, desc="skip spans", disable=not progress):
        with surgery.skip(model, i, j) as m:
            z = finetune.predict(m, batches, device)
        G[i - 1, j - 1] = text_tasks.score(task, text_tasks.predictions(task, z))
    return G


def skip_grids(settings: Mapping[str, Any], seed: int = 0, device: Any = "auto",
               log: Callable[[str], None] | None = print) -> tuple[dict[str, np.ndarray], dict[str, dict[str, float]]]:
    """Fig. 4 for restart 1 of every model of ``settings["models"]`` fine-tuned (or loaded) on every task of
    ``settings["tasks"]``: ``(grids, base)`` keyed ``"<model>/<task>"``, :func:`skip_grid` on the validation split
    and ``{"full", "majority"}``, the full model's and the majority class's scores; ``log`` gets a line per run."""
    grids, base = {}, {}
    for model_name in settings["models"]:
        for task in settings["tasks"]:
            train, val = finetune.task_data(task, settings, seed=seed)
            model, _ = finetune.fine_tuned(model_name, train, settings, restart=1, seed=seed, device=device)
            key = f"{model_name}/{task}"
            G = grids[key] = skip_grid(model, val, settings, device=device)
            base[key] = {"full": finetune.evaluate(model, val, max_length=settings["max_length"], device=device),
                         "majority": text_tasks.majority_baseline(val)}
            if log is not None:
                log(f"{model_name} / {task}: full model {base[key]['full']:.3f}; single blocks skipped: "
                    f"{np.round(np.diag(G), 3).tolist()}; all blocks skipped: {G[0, -1]:.3f}")
    return grids, base


def single_skip_drops(grids: Mapping[str, np.ndarray],
                      base: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """§4.1's two numbers per run, from single-block skip drops (full score minus the grid's diagonal):
    ``first_margin[key]``, block 1's drop minus the largest other (``first_layer_critical``); ``late_drop[key]``,
    the mean drop over blocks ``L//2 + 1 .. L`` (``single_late_skips_cheap``)."""
    first_margin, late_drop = {}, {}
    for key, G in grids.items():
        if key not in base:
            raise ValueError(f"no full-model score for the grid {key!r}")
        L = len(G)
        if L < 2:
            raise ValueError(f"the grid of {key!r} has {L} block(s): comparing single skips needs 2")
        drops = base[key]["full"] - np.diag(G)
        first_margin[key] = float(drops[0] - drops[1:].max())
        late_drop[key] = float(drops[L // 2:].mean())
    return first_margin, late_drop
