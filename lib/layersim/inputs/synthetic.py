"""The alignment paper's synthetic data: the peaks functions (Section 7.1, after Caruana 1997: six variables, 120
tasks, their RBF input encoding, related and unrelated task pairs), Figure 4's two clusters on the unit circle
(Section 4.1) and labels made of a representation's left singular vectors (Section 6.2, Figure 9). Arrays are float64
numpy (see docs/modules.md, ``layersim.inputs.synthetic``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layersim.measures import alignment

#: The paper's six peaks variables.
PEAKS_VARIABLES = ("A", "B", "C", "D", "E", "F")
#: Centres of the 10 RBF features that encode one peaks variable (Section 7.1).
PEAKS_CENTERS = np.round(np.arange(10) * 0.1, 1)
PEAKS_HEIGHT = 0.5
PEAKS_SD = 0.1


# ----------------------------------------------------------------------------- peaks functions


def peaks_tasks() -> list[tuple[int, int, int]]:
    """The 120 peaks functions ``P_{X,Y,Z} = IF X > 0.5 THEN Y ELSE Z``: ordered triples of distinct
    variable indices (0..5 for A..F), in lexicographic order ``P_ABC, P_ABD, ..., P_FED``."""
    return list(itertools.permutations(range(6), 3))


def peaks_name(task: Sequence[int]) -> str:
    """``(0, 1, 2) -> "P_ABC"``."""
    return "P_" + "".join(PEAKS_VARIABLES[i] for i in task)


def peaks_labels(V, tasks: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """Raw peaks labels ``[n, len(tasks)]``: variable Y where variable X > 0.5, else variable Z."""
    V = np.asarray(V, dtype=np.float64)
    tasks = peaks_tasks() if tasks is None else tasks
    idx = np.asarray(tasks, dtype=int).reshape(-1, 3)
    X, Yv, Z = V[:, idx[:, 0]], V[:, idx[:, 1]], V[:, idx[:, 2]]
    return np.where(X > 0.5, Yv, Z)


def peaks_encode(V, normalize: bool = True) -> np.ndarray:
    """§7.1's input encoding: each variable by 10 RBF features ``0.5 exp(-(v - c)^2 / (2 * 0.1^2))``,
    ``c = 0.0, 0.1, ..., 0.9``; 60 inputs, variable-major, each row of unit length."""
    V = np.asarray(V, dtype=np.float64)
    F = PEAKS_HEIGHT * np.exp(-((V[:, :, None] - PEAKS_CENTERS[None, None, :]) ** 2) / (2 * PEAKS_SD ** 2))
    F = F.reshape(len(V), -1)
    if normalize:
        F = F / np.linalg.norm(F, axis=1, keepdims=True)
    return F


@dataclass
class PeaksData:
    """``V`` [n, 6] raw variables in [0, 1); ``X`` [n, 60] encoded unit-length inputs; ``Y`` [n, 120]
    labels of every task, centred over the n samples (``Y_raw`` uncentred, ``label_mean`` the
    subtracted means); ``tasks`` the 120 triples (column order of ``Y``)."""

    V: np.ndarray
    X: np.ndarray
    Y: np.ndarray
    Y_raw: np.ndarray
    label_mean: np.ndarray
    tasks: list


def peaks_dataset(n: int, seed: int = 0, label_mean=None) -> PeaksData:
    """``n`` samples of the peaks problem (§7.1): variables A-F uniform in [0, 1), encoded inputs, labels of all
    120 tasks centred (or with ``label_mean``: a training set's means for its test set)."""
    rng = np.random.default_rng(seed)
    V = rng.random((n, 6))
    tasks = peaks_tasks()
    Y_raw = peaks_labels(V, tasks)
    mean = Y_raw.mean(axis=0) if label_mean is None else np.asarray(label_mean, dtype=np.float64)
    return PeaksData(V=V, X=peaks_encode(V), Y=Y_raw - mean, Y_raw=Y_raw, label_mean=mean, tasks=tasks)


def peaks_related(a: Sequence[int], b: Sequence[int]) -> bool:
    """Section 7.1: T1 is related to S when it uses the same three variables in a different order."""
    return set(a) == set(b) and tuple(a) != tuple(b)


def peaks_unrelated(a: Sequence[int], b: Sequence[int]) -> bool:
    """Section 7.1: T2 is unrelated to S when it uses the three other variables (no variable shared)."""
    return not (set(a) & set(b))


def peaks_pairs(kind: str = "related") -> list[tuple[int, int]]:
    """Ordered pairs ``(source, target)`` of task indices (into :func:`peaks_tasks`) that are
    ``"related"`` (600 pairs: 5 per source) or ``"unrelated"`` (720 pairs: 6 per source)."""
    test = {"related": peaks_related, "unrelated": peaks_unrelated}.get(kind)
    if test is None:
        raise ValueError(f"kind must be 'related' or 'unrelated', got {kind!r}")
    tasks = peaks_tasks()
    return [(i, j) for i, a in enumerate(tasks) for j, b in enumerate(tasks) if test(a, b)]


def peaks_setup(seed: int = 0) -> dict:
    """One draw of the paper's setup: a random source S, a related T1 (same variables, another order)
    and an unrelated T2 (the three other variables, random order); task indices and names."""
    rng = np.random.default_rng(seed)
    tasks = peaks_tasks()
    s = int(rng.integers(len(tasks)))
    rel = [j for j, b in enumerate(tasks) if peaks_related(tasks[s], b)]
    unrel = [j for j, b in enumerate(tasks) if peaks_unrelated(tasks[s], b)]
    t1, t2 = int(rng.choice(rel)), int(rng.choice(unrel))
    return {"source": s, "related": t1, "unrelated": t2,
            "names": {k: peaks_name(tasks[v]) for k, v in (("source", s), ("related", t1), ("unrelated", t2))}}


# ----------------------------------------------------------------------------- Figure 4's circle


def circle_dataset(n: int = 1000, spread: float = 0.3, seed: int = 0,
                   centers: tuple[float, float] = (np.pi / 4, -3 * np.pi / 4)) -> dict:
    """§4.1's example (Figure 4): ``n`` unit 2-d points around angles ``pi/4`` and ``-3pi/4`` (angular noise
    ``spread``). Returns ``X [n, 2]``, ``cluster [n]`` and +-1 labels ``y_v1`` (separating the clusters, along
    the first principal direction) and ``y_v2`` (splitting each, along the second)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    cluster = np.r_[np.zeros(half, int), np.ones(n - half, int)]
    theta = np.where(cluster == 0, centers[0], centers[1]) + spread * rng.standard_normal(n)
    X = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    d1 = np.array([np.cos(centers[0]), np.sin(centers[0])])
    d2 = np.array([-d1[1], d1[0]])
    return {"X": X, "cluster": cluster, "theta": theta, "d1": d1, "d2": d2,
            "y_v1": np.where(X @ d1 >= 0, 1.0, -1.0), "y_v2": np.where(X @ d2 >= 0, 1.0, -1.0)}


# ----------------------------------------------------------------------------- Figure 9's labels


def singular_vector_labels(Phi, components: Sequence[Sequence[tuple[int, float]]]) -> np.ndarray:
    """Synthetic labels from left singular vectors of ``Phi`` (§6.2, Figure 9): ``components`` holds one list
    of ``(i, weight)`` per label vector, ``i`` from 1 (``[(10, 1.0)]``: the 10th). Returns ``[n, k]``,
    ``y_k = sum weight * u_i``."""
    U = alignment.as_svd(Phi).U
    out = np.zeros((U.shape[0], len(components)))
    for k, comp in enumerate(components):
        for i, w in comp:
            if not 1 <= i <= U.shape[1]:
                raise ValueError(f"singular vector {i} out of range 1..{U.shape[1]}")
            out[:, k] += w * U[:, i - 1]
    return out
