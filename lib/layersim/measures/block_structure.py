"""Block-diagonal structure of a layer-by-layer similarity matrix (the clusters paper's Fig. 1, 2; §3).

Phang et al. see, in fine-tuned encoders, "two distinct clusters of earlier and later layers that have high
intra-cluster but low inter-cluster similarity". For a symmetric ``M [E, E]``:

- :func:`split_scores`: for every contiguous split into entries ``0..s-1`` and ``s..E-1``, the mean
  off-diagonal ``M`` within the clusters minus the mean across them;
- :func:`best_split`: the highest-scoring split and its score.

No block structure scores 0; two perfect blocks score 1 at the true split
(see docs/modules.md, ``layersim.measures.block_structure``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Split", "best_split", "split_scores"]


class Split(NamedTuple):
    """The best split: the first cluster is entries ``0..at-1``, the second ``at..E-1``."""

    at: int
    score: float
    within: float
    between: float


def _matrix(M) -> np.ndarray:
    A = np.asarray(M, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"need a square [E, E] matrix, got shape {A.shape}")
    if A.shape[0] < 3:
        raise ValueError(f"need at least 3 entries to compare within- and between-cluster pairs, got {A.shape[0]}")
    if not np.isfinite(A).all():
        raise ValueError("the matrix has NaN or infinite entries")
    if not np.allclose(A, A.T, rtol=1e-9, atol=1e-12):
        raise ValueError("the matrix is not symmetric (pass a within-model matrix such as CKA between all layer pairs)")
    return A


def _within_between(A: np.ndarray, s: int) -> tuple[float, float]:
    E = len(A)
    same = np.zeros((E, E), bool)
    same[:s, :s] = True
    same[s:, s:] = True
    off = ~np.eye(E, dtype=bool)
    return float(A[same & off].mean()), float(A[~same].mean())


def split_scores(M) -> np.ndarray:
    """``[E-1]``: entry ``s-1`` is the mean within-cluster off-diagonal entry minus the mean between-cluster
    entry of the split at ``s``. ``ValueError`` unless ``M`` is square, symmetric, finite, E >= 3."""
    A = _matrix(M)
    return np.array([np.subtract(*_within_between(A, s)) for s in range(1, len(A))])


def best_split(M) -> Split:
    """The contiguous two-cluster split of ``M`` with the highest :func:`split_scores` (the first
    on ties), with its within- and between-cluster means."""
    A = _matrix(M)
    scores = split_scores(A)
    s = int(np.argmax(scores)) + 1
    within, between = _within_between(A, s)
    return Split(s, float(scores[s - 1]), within, between)
