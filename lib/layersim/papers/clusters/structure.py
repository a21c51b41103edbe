"""The clusters paper's CKA structure of fine-tuned encoders (§3, Figs. 1, 2, 5, 6, 7; notebook c01).

:func:`task_maps` fine-tunes (or loads from the cache) one encoder on one task once per restart, reads the CLS token
of every layer of each restart and of the pretrained encoder on the validation set, and returns the paper's four
CKA maps (``protocol.cka_maps``: ORIG-ORIG, FT-ORIG, FT-FT, FT[1]-FT[2]) with each restart's validation score and
checkpoint record. :func:`split_table` holds the best two-cluster split of ORIG-ORIG and FT-FT
(``layersim.measures.block_structure``), :func:`early_late` and :func:`structure_gaps` the numbers of the paper's
three statements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from layersim.inputs import text_tasks
from layersim.measures import block_structure
from layersim.papers.clusters import protocol
from layersim.train import finetune

__all__ = ["early_late", "late_likeness_to_orig", "late_restart_margin", "split_table", "structure_gaps",
           "task_maps", "third"]


def task_maps(model_name: str, task: str, settings: Mapping[str, Any], seed: int = 0,
              device: Any = "auto") -> tuple[dict[str, np.ndarray], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Fig. 1 for one encoder and task: ``(maps, scores, records)``.

    The task's splits (``finetune.task_data``); for every restart ``1..settings["restarts"]`` the fine-tuned model
    (``finetune.fine_tuned``: trained with the settings' budget, or loaded from the checkpoint cache), its CLS
    features of every layer on the validation set (``finetune.cls_features``) and its validation score
    (``finetune.evaluate``); then the pretrained encoder's features (``protocol.original``) and the CKA maps
    (``protocol.cka_maps``, FT = restart 1, FT[1]-FT[2] when there are two restarts). ``scores``: one row per
    restart (``model``, ``task``, ``restart``, ``validation``, ``majority`` (the majority-class baseline),
    ``train_seconds``, ``from_cache``); ``records``: ``{"<model>/<task>/<restart>": {"checkpoint",
    "weights_sha256", "train_seconds", "loss"}}`` (the loss of every logged step)."""
    train, val = finetune.task_data(task, settings, seed=seed)
    feats, scores, records = [], [], {}
    for restart in range(1, settings["restarts"] + 1):
        model, meta = finetune.fine_tuned(model_name, train, settings, restart=restart, seed=seed, device=device)
        feats.append(finetune.cls_features(model, val, settings, device=device))
        score = finetune.evaluate(model, val, max_length=settings["max_length"], device=device)
        scores.append({"model": model_name, "task": task, "restart": restart, "validation": score,
                       "majority": text_tasks.majority_baseline(val), "train_seconds": meta["train_seconds"],
                       "from_cache": meta["from_cache"]})
        records[f"{model_name}/{task}/{restart}"] = {
            "checkpoint": meta["key"], "weights_sha256": meta["weights_sha256"], "train_seconds": meta["train_seconds"],
            "loss": [h["loss"] for h in meta["history"]]}
    orig = finetune.cls_features(protocol.original(model_name, train.num_labels, seed=seed), val, settings,
                                 device=device)
    return protocol.cka_maps(feats[0], feats[1] if len(feats) > 1 else None, orig), scores, records


def split_table(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """The best two-cluster split (``block_structure.best_split``) of ORIG-ORIG and FT-FT per ``(model, task)`` of
    ``maps`` (``{(model, task): task_maps(...)[0]}``): one row each, with ``model``, ``task``, ``matrix``, the last
    block of the early cluster (``"early cluster: blocks 1 to"``), the ``score`` (within minus between), and the
    mean CKA ``within`` the clusters and ``between`` them."""
    rows = []
    for (model_name, task), m in maps.items():
        for kind in ("ORIG-ORIG", "FT-FT"):
            best = block_structure.best_split(m[kind])
            rows.append({"model": model_name, "task": task, "matrix": kind, "early cluster: blocks 1 to": best.at,
                         "score": best.score, "within": best.within, "between": best.between})
    return pd.DataFrame(rows)


def early_late(d: Any) -> tuple[float, float]:
    """The mean of the first and of the last third of a diagonal ``d`` (``ceil(L/3)`` blocks each: blocks 1-2
    and 5-6 of a 6-block model), the paper's "early" and "late" layers."""
    d = np.asarray(d)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"early_late needs a non-empty diagonal (one value per block), got shape {d.shape}")
    k = third(len(d))
    return float(np.mean(d[:k])), float(np.mean(d[-k:]))


def third(blocks: int) -> int:
    """How many blocks the paper's "early" and "late" layers are: the first and the last ``ceil(L/3)``."""
    return int(np.ceil(blocks / 3))


def structure_gaps(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]
                   ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The numbers of the paper's three statements per ``"<model>/<task>"`` of ``maps`` (``{(model, task):
    task_maps(...)[0]}``): ``block_gain`` = the best two-cluster score of FT-FT minus that of ORIG-ORIG
    (``ft_block_diagonal``, Figs. 1, 2); ``ft_orig_gap`` = early minus late mean of the FT-ORIG diagonal
    (``late_ft_layers_unlike_orig``, Figs. 1, 5); ``restart_gap`` = the same of the FT[1]-FT[2] diagonal, for the
    runs with two restarts (``restarts_agree_early_not_late``, Figs. 1, 6)."""
    block_gain, ft_orig_gap, restart_gap = {}, {}, {}
    for (model_name, task), m in maps.items():
        key = f"{model_name}/{task}"
        block_gain[key] = (block_structure.best_split(m["FT-FT"]).score
                           - block_structure.best_split(m["ORIG-ORIG"]).score)
        e, l = early_late(protocol.diagonal(m["FT-ORIG"]))
        ft_orig_gap[key] = e - l
        if "FT[1]-FT[2]" in m:
            e, l = early_late(protocol.diagonal(m["FT[1]-FT[2]"]))
            restart_gap[key] = e - l
    return block_gain, ft_orig_gap, restart_gap


def late_likeness_to_orig(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]) -> dict[str, float]:
    """How much the late fine-tuned blocks resemble *any* pretrained block, per ``"<model>/<task>"`` of ``maps``:
    the largest, over the late blocks (the last third, as :func:`early_late`), of each fine-tuned block's largest
    CKA with any pretrained block (the row maximum of FT-ORIG, restart 1). The paper's Section 3 (FT-ORIG, Figs. 1,
    5): "The `CLS` representations of the later layers in the task-tuned model appear highly dissimilar to any of
    the untuned model" -- a low value when they do (``late_ft_layers_unlike_any_orig`` reads the largest over
    the tasks)."""
    out = {}
    for (model_name, task), m in maps.items():
        rows = np.asarray(m["FT-ORIG"]).max(axis=1)
        if rows.ndim != 1 or len(rows) == 0:
            raise ValueError(f"{model_name}/{task}: FT-ORIG must be a non-empty [blocks, blocks] map")
        out[f"{model_name}/{task}"] = float(rows[-third(len(rows)):].max())
    return out


def late_restart_margin(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]) -> dict[str, float]:
    """How much more the late blocks of two restarts resemble each other than the fine-tuned model resembles the
    pretrained one, per ``"<model>/<task>"`` of ``maps`` with two restarts: the mean over the late blocks (the last
    third, :func:`early_late`) of the FT[1]-FT[2] diagonal minus the mean over the same blocks of each fine-tuned
    block's *largest* CKA with any pretrained block (the rows of FT-ORIG, restart 1). The paper's Section 3
    (FT[1]-FT[2], Figs. 1, 6): "the similarity of the CLS representations in the later layers indicates that CKA is able [to] recover the
    similarity of representations for tackling the same task across random restarts"; positive when it does.
    """
    margin = {}
    for (model_name, task), m in maps.items():
        if "FT[1]-FT[2]" in m:
            agree = early_late(protocol.diagonal(m["FT[1]-FT[2]"]))[1]
            like_orig = early_late(np.asarray(m["FT-ORIG"]).max(axis=1))[1]
            margin[f"{model_name}/{task}"] = agree - like_orig
    return margin
