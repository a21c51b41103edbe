"""Confidence-threshold early exit (tracing paper, section 3, "Saturation events and
multi-exit model with a single classifier", Figure 7).

Input: layer-wise logits ``[L, N, K]`` of blocks ``1..L`` — the shared last-layer classifier on
every block (``readout.layer_logits(model, H)[1:]``) or one head per block
(``objectives.multi_exit_logits``). A sample exits at the first block whose confidence, the
maximum softmax probability, is at least the threshold, and at block ``L`` if there is none;
its prediction is that block's top-1 class. The paper's speed-up ratio counts blocks run:
``sum_i L m_i / sum_i i m_i`` with ``m_i`` the number of samples exiting at block ``i`` (the
cost of evaluating the classifier at each exit is not counted, as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["EarlyExit", "confidence", "early_exit", "speedup", "threshold_sweep"]


class EarlyExit(NamedTuple):
    """Outcome of early exit at one threshold.

    ``exit_layer`` ``[N]``: the block each sample exits at (1..L); ``prediction`` ``[N]``: its
    top-1 class there; ``counts`` ``[L]``: ``m_i``, samples exiting at block ``i``;
    ``accuracy``: fraction of correct predictions (None without labels); ``speedup``: the
    paper's ratio ``sum L m_i / sum i m_i``.
    """

    exit_layer: np.ndarray
    prediction: np.ndarray
    counts: np.ndarray
    accuracy: float | None
    speedup: float


def confidence(logits: np.ndarray) -> np.ndarray:
    """Maximum softmax probability ``[L, N]`` (float64) of layer-wise logits ``[L, N, K]``."""
    logits = np.asarray(logits)
    out = np.empty(logits.shape[:2])
    for layer, z in enumerate(logits):  # one layer at a time: big vocabularies stay in memory
        z = z.astype(np.float64)
        out[layer] = 1.0 / np.exp(z - z.max(axis=-1, keepdims=True)).sum(axis=-1)
    return out


def speedup(exit_layer: np.ndarray, L: int) -> float:
    """The paper's speed-up ratio ``sum_i L m_i / sum_i i m_i`` (= ``L`` / mean exit block)
    from the exit blocks ``[N]`` (1-based) of an ``L``-block model."""
    exit_layer = np.asarray(exit_layer)
    if exit_layer.size == 0:
        raise ValueError("no samples")
    if exit_layer.min() < 1 or exit_layer.max() > L:
        raise ValueError(f"exit blocks must be in 1..{L}")
    return float(L * exit_layer.size / exit_layer.sum())


def early_exit(logits: np.ndarray, threshold: float, labels: np.ndarray | None = None,
               conf: np.ndarray | None = None) -> EarlyExit:
    """Exit each sample at the first block with max softmax probability ``>= threshold``
    (block ``L`` otherwise). ``logits`` ``[L, N, K]`` for blocks ``1..L``; ``conf`` the
    precomputed :func:`confidence` (``[L, N]``) to save recomputing it in a sweep."""
    logits = np.asarray(logits)
    if logits.ndim != 3:
        raise ValueError(f"logits must be [L, N, K], got shape {logits.shape}")
    L, N = logits.shape[:2]
    conf = confidence(logits) if conf is None else np.asarray(conf)
    confident = conf >= threshold
    confident[-1] = True  # everyone leaves at the last block at the latest
    idx = np.argmax(confident, axis=0)  # first confident block, 0-based
    pred = np.argmax(logits[idx, np.arange(N)], axis=-1)
    acc = None if labels is None else float(np.mean(pred == np.asarray(labels)))
    exit_layer = idx + 1
    counts = np.bincount(exit_layer, minlength=L + 1)[1:]
    return EarlyExit(exit_layer, pred, counts, acc, speedup(exit_layer, L))


def threshold_sweep(logits: np.ndarray, labels: np.ndarray,
                    thresholds: Sequence[float] | np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Accuracy vs speed-up over confidence thresholds (the trade-off curve of early exit).

    Returns arrays ``threshold``, ``accuracy``, ``speedup`` and ``mean_exit`` (mean exit
    block), one entry per threshold (default ``0.05, 0.10, ..., 1.0``).
    """
    thresholds = np.round(np.arange(0.05, 1.0001, 0.05), 4) if thresholds is None else np.asarray(thresholds, float)
    conf = confidence(logits)
    runs = [early_exit(logits, t, labels, conf=conf) for t in thresholds]
    return {
        "threshold": thresholds,
        "accuracy": np.array([r.accuracy for r in runs]),
        "speedup": np.array([r.speedup for r in runs]),
        "mean_exit": np.array([r.exit_layer.mean() for r in runs]),
    }


def best_speedup(sweep: dict[str, np.ndarray], min_accuracy: float) -> tuple[float, dict | None]:
    """The largest speed-up of a :func:`threshold_sweep` whose accuracy is at least ``min_accuracy``,
    and the threshold and accuracy where it is reached; ``(1.0, None)`` (run every block) if no
    threshold qualifies. Ties go to the first (lowest) threshold."""
    ok = np.asarray(sweep["accuracy"]) >= min_accuracy
    if not ok.any():
        return 1.0, None
    i = int(np.flatnonzero(ok)[np.argmax(np.asarray(sweep["speedup"])[ok])])
    return float(sweep["speedup"][i]), {"threshold": sweep["threshold"][i], "accuracy": sweep["accuracy"][i]}
