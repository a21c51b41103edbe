"""Within-class variability collapse (NC1) per layer, tracing paper footnote 5 (after Papyan et al. 2020;
Zhu et al. 2021): ``NC1 = tr(Sigma_W Sigma_B^+) / K``, ``Sigma_W`` the within-class covariance (over all N
samples), ``Sigma_B`` the between-class covariance of the class means, ``^+`` the pseudo-inverse. Smaller is
more collapsed; invariant to rotating, translating or scaling the features. Computed in float64 without a
``d x d`` matrix (see docs/modules.md, ``layersim.measures.collapse``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layersim.measures import arrays

__all__ = ["nc1", "nc1_per_layer"]


def nc1(features: Any, labels: Any) -> float:
    """NC1 of footnote 5, ``tr(Sigma_W Sigma_B^+) / K``, of ``features [N, d]`` and ``labels [N]`` (K >= 2 classes), a
    float. ``ValueError`` for non-finite or malformed features, N < 2, mismatched labels, fewer than two classes or
    coinciding class means."""
    h, absmax = arrays.checked_2d(features, "features", min_n=2)
    return _nc1(h, absmax, labels)


def _nc1(h: np.ndarray, absmax: float, labels: Any) -> float:
    """:func:`nc1` of validated features ``h`` (any float dtype) with ``max |h| = absmax``."""
    h = arrays.scaled(h, arrays.exponent(absmax))  # a fresh float64 array, max |h| in [0.5, 1): squares stay in range
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != len(h):
        raise ValueError(f"labels must be one per sample, shape [{len(h)}], got shape {labels.shape}")
    classes, y = np.unique(labels, return_inverse=True)
    K = len(classes)
    if K < 2:
        raise ValueError(f"NC1 needs at least two classes, got {K}")
    counts = np.bincount(y, minlength=K)
    means = np.zeros((K, h.shape[1]))
    np.add.at(means, y, h)
    means /= counts[:, None]
    centred = (means - h.mean(axis=0)) / np.sqrt(K)  # rows: (m_k - m) / sqrt(K)
    u, s, _ = np.linalg.svd(centred.T, full_matrices=False)  # Sigma_B = u diag(s^2) u^T
    # Sigma_B has rank K - 1 for balanced classes (the centred means sum to 0): its null direction
    # comes out of the SVD at ~1e-16 relative, sometimes just above a machine-epsilon cut-off, and
    # would then dominate the trace. Directions below sqrt(eps) of the largest (1e-16 relative in
    # Sigma_B's eigenvalues) carry no between-class spread that float64 can resolve.
    # Nor do directions at the rounding level of the features themselves (max |h| is in [0.5, 1) here):
    # class means that differ by less than that coincide as far as float64 can tell.
    eps = np.finfo(np.float64).eps
    tol = max(s.max(initial=0.0) * np.sqrt(eps), 64 * eps * np.sqrt(h.size))
    keep = s > tol
    if not keep.any():
        raise ValueError("all class means coincide (to float64 precision at the features' scale): "
                         "Sigma_B is zero")
    proj = (h - means[y]) @ u[:, keep]  # within-class deviations along the between-class directions
    within = (proj ** 2).mean(axis=0)  # u_j^T Sigma_W u_j
    return float(np.sum(within / s[keep] ** 2) / K)


def nc1_per_layer(hidden: Any, labels: Any) -> np.ndarray:
    """NC1 (footnote 5) of every layer's features ``[L, N, d]`` (or a list of ``[N, d_l]``) → ``[L]``."""
    layers, absmax = arrays.checked_layers(hidden, min_n=2, native=True)
    return np.array([_nc1(h, m, labels) for h, m in zip(layers, absmax)])
