"""Statistics of layer-wise curves and matrices that the papers' claims are stated in, such as the tracing
paper's Observations 1-2 (§2.1): cosine follows CKA and accuracy, and "the cosine similarity increases as it
approaches the diagonal".
(see docs/modules.md, ``layersim.measures.trends``)
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats


def _curve(x, name: str = "curve") -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _correlatable(a, b, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Two finite, non-constant curves of equal length >= 3, or a ValueError saying which test failed."""
    a, b = _curve(a, "a"), _curve(b, "b")
    if a.shape != b.shape or a.size < 3:
        raise ValueError(f"need two curves of equal length >= 3, got {a.shape} and {b.shape}")
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        raise ValueError(f"a constant curve has no {what}")
    return a, b


def pearson(a, b) -> float:
    """Pearson correlation of two equally long curves (ValueError if either is constant)."""
    return float(stats.pearsonr(*_correlatable(a, b, "correlation")).statistic)


def spearman(a, b) -> float:
    """Spearman rank correlation of two equally long curves (ValueError if either is constant)."""
    return float(stats.spearmanr(*_correlatable(a, b, "rank correlation")).statistic)


def fraction_increasing(curve, strict: bool = True) -> float:
    """The fraction of adjacent steps ``curve[i] -> curve[i+1]`` that increase."""
    c = _curve(curve)
    if c.size < 2:
        raise ValueError("a curve needs at least two points to have steps")
    steps = np.diff(c)
    return float(np.mean(steps > 0 if strict else steps >= 0))


def diagonal_order(matrix) -> tuple[int, int]:
    """Count, over every row ``i`` and neighbouring off-diagonal columns on one side of the diagonal, the
    comparisons in which the entry nearer the diagonal is larger (the diagonal left out). Returns
    ``(agree, total)``."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"need a square matrix, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError("matrix contains NaN or inf")
    agree = total = 0
    n = m.shape[0]
    for i in range(n):
        right = m[i, i + 1:]  # moving away from the diagonal to the right
        left = m[i, :i][::-1]  # moving away to the left
        for side in (right, left):
            if side.size >= 2:
                agree += int(np.sum(side[:-1] > side[1:]))
                total += side.size - 1
    return agree, total


def closer_more_similar(matrix) -> float:
    """The fraction of :func:`diagonal_order` comparisons that agree (NaN-free; ValueError if none)."""
    agree, total = diagonal_order(matrix)
    if total == 0:
        raise ValueError("the matrix is too small for any row comparison (need at least 3 layers)")
    return agree / total


def max_drop(curve) -> float:
    """The largest decrease between adjacent entries, ``max_i (curve[i] - curve[i+1])``, or 0 if
    the curve never decreases (a monotonicity statement with a tolerance: "never drops by more
    than ...")."""
    c = _curve(curve)
    if c.size < 2:
        raise ValueError("a curve needs at least two points to have steps")
    return float(max(0.0, np.max(c[:-1] - c[1:])))


def mean_abs_gap(curve, reference) -> float:
    """Mean absolute difference between two equally long layer curves on a common scale (tracing Fig. 12:
    a similarity curve against the layer-wise accuracy)."""
    a, b = _curve(curve, "curve"), _curve(reference, "reference")
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two non-empty curves of equal length, got {a.shape} and {b.shape}")
    return float(np.mean(np.abs(a - b)))


# ----- several runs (seeds) of one measurement


def mean_se(values, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error ``std(ddof=1) / sqrt(n)`` along ``axis``, NaN left out (one value: error 0);
    ``ValueError`` for an empty axis."""
    v = np.asarray(values, dtype=np.float64)
    if v.shape[axis] == 0:
        raise ValueError("mean_se needs at least one value")
    n = np.sum(np.isfinite(v), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column with one finite value: se set to 0 below
        mean = np.nanmean(v, axis=axis)
        sd = np.nanstd(v, axis=axis, ddof=1) if v.shape[axis] > 1 else np.zeros_like(mean)
        se = np.where(n > 1, sd / np.sqrt(np.maximum(n, 1)), 0.0)
    return mean, se


def lower_bound(values, k: float = 2.0) -> float:
    """``mean - k * standard error`` of a 1-d sample: positive when the mean is ``k`` errors above 0."""
    m, se = mean_se(np.ravel(values))
    return float(m - k * se)
