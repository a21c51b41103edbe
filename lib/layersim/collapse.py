"""Within-class variability collapse (NC1) per layer, tracing paper footnote 5 (after
Papyan et al. 2020; Zhu et al. 2021):

``NC1 = tr(Sigma_W Sigma_B^+) / K`` with ``Sigma_W = 1/(nK) sum_k sum_i (h_ki - m_k)(h_ki - m_k)^T``
(within-class covariance), ``Sigma_B = 1/K sum_k (m_k - m)(m_k - m)^T`` (between-class
covariance), ``m_k`` the class means, ``m`` the global mean of the features and ``^+`` the
Moore-Penrose pseudo-inverse. With unequal class sizes ``Sigma_W`` averages over all ``N``
samples (``nK = N`` for balanced classes).

Computed without any ``d x d`` matrix: with ``M = [m_k - m]_k / sqrt(K) = U S V^T`` (rank r),
``Sigma_B^+ = U S^-2 U^T`` and ``tr(Sigma_W Sigma_B^+) = sum_j (u_j^T Sigma_W u_j) / s_j^2``,
in float64. Smaller is more collapsed; it is invariant to rotating, translating or scaling the
features.
"""

from __future__ import annotations

import numpy as np

__all__ = ["nc1", "nc1_per_layer"]


def nc1(features: np.ndarray, labels: np.ndarray) -> float:
    """NC1 of footnote 5, ``tr(Sigma_W Sigma_B^+) / K``, for features ``[N, d]`` and labels ``[N]``
    (K = the number of distinct labels, at least 2)."""
    h = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels)
    classes, y = np.unique(labels, return_inverse=True)
    K = len(classes)
    if K < 2:
        raise ValueError("NC1 needs at least two classes")
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
    tol = s.max(initial=0.0) * np.sqrt(np.finfo(np.float64).eps)
    keep = s > tol
    if not keep.any():
        raise ValueError("all class means coincide: Sigma_B is zero")
    proj = (h - means[y]) @ u[:, keep]  # within-class deviations along the between-class directions
    within = (proj ** 2).mean(axis=0)  # u_j^T Sigma_W u_j
    return float(np.sum(within / s[keep] ** 2) / K)


def nc1_per_layer(hidden: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """NC1 (footnote 5) of every layer's features ``[L, N, d]`` → ``[L]``."""
    return np.array([nc1(h, labels) for h in hidden])
