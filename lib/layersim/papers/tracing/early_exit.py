"""Confidence-threshold early exit (tracing paper, §3, "Saturation events and multi-exit model with a single
classifier", Figure 7).

From layer-wise logits ``[L, N, K]`` of blocks ``1..L`` (the shared classifier on every block, or one head per
block), a sample exits at the first block whose maximum softmax probability reaches the threshold (block ``L``
otherwise), predicting its top-1 class there. The speed-up counts blocks run, ``sum_i L m_i / sum_i i m_i`` (``m_i``
samples exiting at block ``i``; classifier cost not counted, as in the paper). :func:`model_exits` and
:func:`exits_figure` serve notebook t04.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from layersim.nets import readout
from layersim.train import objectives

__all__ = ["FIG7_THRESHOLDS", "EarlyExit", "best_speedup", "confidence", "describe", "early_exit", "exit_record",
           "exits_figure", "model_exits", "speedup", "threshold_sweep"]

#: the confidence thresholds of the accuracy / speed-up sweep next to Figure 7: 0.30..0.90 by 0.05, 0.90..0.99
#: by 0.01 (0.9 twice: the first range's last step rounds to it), then 0.995, 0.999 and 1
FIG7_THRESHOLDS = np.round(np.concatenate([np.arange(0.3, 0.9, 0.05), np.arange(0.9, 0.995, 0.01),
                                           [0.995, 0.999, 1.0]]), 4)


class EarlyExit(NamedTuple):
    """Early exit at one threshold: ``exit_layer`` ``[N]`` (1..L), ``prediction`` ``[N]``, ``counts`` ``[L]``
    (``m_i``), ``accuracy`` (None without labels) and ``speedup`` (``sum L m_i / sum i m_i``)."""

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
    """Exit each sample at the first block with max softmax probability ``>= threshold`` (block ``L`` otherwise);
    ``logits [L, N, K]``; ``conf``: a precomputed :func:`confidence` ``[L, N]``."""
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
    """Accuracy vs speed-up over confidence thresholds: arrays ``threshold``, ``accuracy``, ``speedup`` and
    ``mean_exit``, one entry per threshold (default ``0.05, 0.10, ..., 1.0``)."""
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
    """The largest speed-up of a :func:`threshold_sweep` with accuracy ``>= min_accuracy``, with its threshold and
    accuracy (the lowest threshold on ties); ``(1.0, None)`` if none qualifies."""
    ok = np.asarray(sweep["accuracy"]) >= min_accuracy
    if not ok.any():
        return 1.0, None
    i = int(np.flatnonzero(ok)[np.argmax(np.asarray(sweep["speedup"])[ok])])
    return float(sweep["speedup"][i]), {"threshold": sweep["threshold"][i], "accuracy": sweep["accuracy"][i]}


def model_exits(model, images, threshold: float, thresholds: Sequence[float] | np.ndarray = FIG7_THRESHOLDS, *,
                multi_exit: bool = False, device: str = "cpu") -> tuple[EarlyExit, dict[str, np.ndarray], float]:
    """Early exit of one model on held-out ``images`` (Figure 7), the logits being the shared classifier on every
    block or, with ``multi_exit``, each block's own head. Returns the :func:`early_exit` at ``threshold``, the
    :func:`threshold_sweep` over ``thresholds`` and the full-depth accuracy."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
    ev = readout.evaluate(model, images, device=device, logits_fn=objectives.multi_exit_logits if multi_exit else None)
    return (early_exit(ev.logits, threshold, ev.labels), threshold_sweep(ev.logits, ev.labels, thresholds),
            float(readout.layer_accuracy(ev.logits, ev.labels)[-1]))


def describe(name: str, result: EarlyExit, full_accuracy: float, threshold: float) -> str:
    """One line: the model's full-depth accuracy, and its accuracy and speed-up when exiting at ``threshold``."""
    return (f"{name:10s} full depth accuracy {full_accuracy:.4f}; threshold {threshold}: accuracy "
            f"{result.accuracy:.4f}, speed-up {result.speedup:.2f}x")


def exit_record(result: EarlyExit) -> dict:
    """What ``metrics.json`` keeps of an :class:`EarlyExit`: the exits per block, the accuracy, the speed-up."""
    return {"counts": result.counts, "accuracy": result.accuracy, "speedup": result.speedup}


def exits_figure(exits: dict[str, EarlyExit], sweeps: dict[str, dict], reference: float, threshold: float,
                 max_loss: float):
    """Figure 7 and its trade-off for the models of ``exits``: bars of samples exiting per block at ``threshold``
    (left); test accuracy against speed-up per :func:`threshold_sweep` with ``reference`` and
    ``reference - max_loss`` lines (right). Returns the figure."""
    import matplotlib.pyplot as plt

    if not exits or set(exits) != set(sweeps):
        raise ValueError(f"exits_figure needs the same models in exits and sweeps, got {list(exits)} and "
                         f"{list(sweeps)}")
    L = len(next(iter(exits.values())).counts)
    ids = np.arange(1, L + 1)
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.3))
    width = 0.27
    for i, (name, e) in enumerate(exits.items()):
        axes[0].bar(ids + (i - 1) * width, e.counts, width,
                    label=f"{name}: accuracy {100 * e.accuracy:.1f} %, speed-up {e.speedup:.2f}x")
    axes[0].set(xlabel="exit layer", ylabel="number of test images", xticks=ids,
                title=f"Fig. 7: exits per layer at confidence threshold {threshold}")
    axes[0].legend(fontsize=8)
    for name, s in sweeps.items():
        axes[1].plot(s["speedup"], 100 * s["accuracy"], marker="o", ms=3, label=name)
    ref = 100 * reference
    axes[1].axhline(ref, color="grey", lw=0.8, ls="--", label="standard, full depth")
    axes[1].axhline(ref - 100 * max_loss, color="grey", lw=0.8, ls=":",
                    label=f"standard - {100 * max_loss:g} points")
    axes[1].set(xlabel="speed-up (blocks, sum L m_i / sum i m_i)", ylabel="test accuracy (%)",
                title="accuracy vs speed-up over confidence thresholds")
    axes[1].grid(True)
    axes[1].legend(fontsize=8)
    return fig
