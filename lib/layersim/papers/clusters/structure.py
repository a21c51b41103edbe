"""The clusters paper's CKA structure of fine-tuned encoders (§3, Figs. 1, 2, 5, 6, 7; notebook c01):
:func:`task_maps` fine-tunes one encoder per restart and returns the four CKA maps (:func:`all_task_maps`: of
every model and task); :func:`split_table` gives the best two-cluster splits; :func:`early_late`,
:func:`structure_gaps`, :func:`late_likeness_to_orig` and :func:`late_restart_margin` the tested numbers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from layersim.inputs import text_tasks
from layersim.measures import block_structure
from layersim.papers.clusters import protocol
from layersim.train import finetune

__all__ = ["all_task_maps", "early_late", "late_likeness_to_orig", "late_restart_margin", "split_table",
           "structure_gaps", "task_maps", "third"]


def task_maps(model_name: str, task: str, settings: Mapping[str, Any], seed: int = 0,
              device: Any = "auto") -> tuple[dict[str, np.ndarray], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Fig. 1 for one encoder and task: ``(maps, scores, records)``.

    Each restart ``1..settings["restarts"]`` is fine-tuned (or cached) and read on the validation set; ``maps``:
    :func:`protocol.cka_maps` (FT = restart 1); ``scores``: a row per restart (``validation``, ``majority``,
    ``train_seconds``, ``from_cache``, ...); ``records``: each checkpoint's key, sha256, time and loss.
    """
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


def all_task_maps(settings: Mapping[str, Any], seed: int = 0, device: Any = "auto"
                  ) -> tuple[dict[tuple[str, str], dict[str, np.ndarray]], pd.DataFrame, dict[str, dict[str, Any]]]:
    """:func:`task_maps` for every model of ``settings["models"]`` on every task of ``settings["tasks"]``:
    ``(maps by (model, task), scores, records)``, the scores a table of one row per model, task and restart and the
    records of every checkpoint keyed ``"<model>/<task>/<restart>"``."""
    maps, scores, records = {}, [], {}
    for model_name in settings["models"]:
        for task in settings["tasks"]:
            maps[(model_name, task)], new_scores, new_records = task_maps(model_name, task, settings, seed=seed,
                                                                            device=device)
            scores += new_scores
            records.update(new_records)
    return maps, pd.DataFrame(scores), records


def split_table(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """The best two-cluster split of ORIG-ORIG and FT-FT per ``(model, task)`` of ``maps``: rows with the early
    cluster's last block, the ``score`` (within minus between) and the mean CKA ``within`` and ``between``."""
    rows = []
    for (model_name, task), m in maps.items():
        for kind in ("ORIG-ORIG", "FT-FT"):
            best = block_structure.best_split(m[kind])
            rows.append({"model": model_name, "task": task, "matrix": kind, "early cluster: blocks 1 to": best.at,
                         "score": best.score, "within": best.within, "between": best.between})
    return pd.DataFrame(rows)


def early_late(d: Any) -> tuple[float, float]:
    """The means of the first and last third of a diagonal ``d`` (``ceil(L/3)`` blocks each), the paper's "early"
    and "late" layers."""
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
    """The three statements' numbers per ``"<model>/<task>"``: ``block_gain`` (FT-FT minus ORIG-ORIG best split
    score, Figs. 1, 2), ``ft_orig_gap`` (early minus late of FT-ORIG's diagonal, Figs. 1, 5) and ``restart_gap``
    (the same for FT[1]-FT[2], Figs. 1, 6)."""
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
    """How much late fine-tuned blocks resemble any pretrained block, per ``"<model>/<task>"``: the largest over the
    last third of each FT-ORIG row's maximum; low supports §3's "highly dissimilar to any of the untuned model"
    (``late_ft_layers_unlike_any_orig``)."""
    out = {}
    for (model_name, task), m in maps.items():
        rows = np.asarray(m["FT-ORIG"]).max(axis=1)
        if rows.ndim != 1 or len(rows) == 0:
            raise ValueError(f"{model_name}/{task}: FT-ORIG must be a non-empty [blocks, blocks] map")
        out[f"{model_name}/{task}"] = float(rows[-third(len(rows)):].max())
    return out


def late_restart_margin(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Per ``"<model>/<task>"`` with two restarts: the late blocks' mean FT[1]-FT[2] diagonal minus their mean
    largest CKA with any pretrained block (FT-ORIG rows); positive supports §3's claim that CKA recovers similarity
    across restarts (Figs. 1, 6)."""
    margin = {}
    for (model_name, task), m in maps.items():
        if "FT[1]-FT[2]" in m:
            agree = early_late(protocol.diagonal(m["FT[1]-FT[2]"]))[1]
            like_orig = early_late(np.asarray(m["FT-ORIG"]).max(axis=1))[1]
            margin[f"{model_name}/{task}"] = agree - like_orig
    return margin
