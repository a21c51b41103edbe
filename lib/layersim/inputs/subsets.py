"""What every loader of ``layersim.inputs`` shares: split names and counts checked before anything loads
(:func:`check_split`, :func:`check_count`), the cache file of a derived copy (:func:`cache_file`), and
deterministic subsets of labelled samples: seeded and stratified (:func:`subset_indices`) or class-balanced and
relabelled (:func:`class_subset`).

(see docs/modules.md, ``layersim.inputs.subsets``)
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from layersim.core.paths import cache_dir

__all__ = ["check_split", "check_count", "cache_file", "subset_indices", "class_subset"]


def check_split(name: str, split: str, allowed: Sequence[str]) -> str:
    """Return ``split`` if allowed, else a ValueError listing the valid ones."""
    if split not in allowed:
        raise ValueError(f"{name}: unknown split {split!r}; choose one of {list(allowed)}")
    return split


def cache_file(folder: str, name: str) -> Path:
    """``name`` in the cache folder ``folder`` (created); one ValueError if it cannot be created."""
    try:
        return cache_dir(folder) / name
    except OSError as err:
        raise ValueError(f"cannot create the cache folder {folder!r}: {err.strerror or err} ({err.filename}); "
                         "point LAYERSIM_CACHE at a writable folder") from err


def check_count(n: Any, available: int | None, what: str, name: str = "n", unit: str = "examples",
                at_most: bool = False) -> int | None:
    """The number of ``unit`` to take from ``what`` (holding ``available``; None: unknown): ``n`` as an int, or
    None for all. ``ValueError`` naming them for a count that is not whole, below 1, or above ``available``;
    with ``at_most=True`` a larger count means all."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"{name} must be a whole number of {unit} (or None for all), got {n!r}")
    if n < 1:
        raise ValueError(f"{name}={n}: at least 1 of the {unit} of {what} is needed (None means all of them)")
    if available is not None and n > available:
        if at_most:
            return None
        raise ValueError(f"{name}={n} is more than the {available} {unit} of {what}; "
                         f"use at most {available} (or None for all of them)")
    return int(n)


def subset_indices(labels: Sequence[int] | np.ndarray, limit: int | None, seed: int = 0,
                   stratified: bool = True, *, what: str = "the labels", at_most: bool = False) -> np.ndarray:
    """Deterministic sorted indices of ``limit`` samples (all if None), stratified by class when asked (largest
    remainders), from a ``seed``-ed permutation. ``ValueError`` for ``limit`` out of range (:func:`check_count`)."""
    labels = np.asarray(labels)
    n = len(labels)
    limit = check_count(limit, n, what, "limit", "samples", at_most)
    if limit is None or limit == n:
        return np.arange(n)
    perm = np.random.default_rng(seed).permutation(n)
    if not stratified:
        return np.sort(perm[:limit])
    classes, counts = np.unique(labels, return_counts=True)
    exact = limit * counts / n
    quota = np.floor(exact).astype(int)
    leftovers = np.argsort(-(exact - quota), kind="stable")[: limit - quota.sum()]
    quota[leftovers] += 1
    permuted = labels[perm]
    picked = [perm[permuted == c][:q] for c, q in zip(classes, quota)]
    return np.sort(np.concatenate(picked))


def class_subset(labels: Sequence[int] | np.ndarray, classes: Sequence[int], per_class: int | None = None,
                 seed: int = 0, exclude=None, draw: str = "permutation") -> tuple[np.ndarray, np.ndarray]:
    """``(indices, new labels)`` of ``per_class`` samples of each of ``classes`` (all when None), relabelled
    ``0..k-1`` in their order. ``draw="permutation"``: the first of each class in one ``seed``-ed permutation,
    sorted; ``"per_class"``: drawn class by class, then shuffled. ``exclude``: never drawn. ``ValueError`` for
    empty or repeated classes, ``per_class < 1``, too few samples."""
    labels = np.asarray(labels)
    if not len(classes) or len(set(classes)) != len(classes):
        raise ValueError(f"classes must be distinct and non-empty, got {classes}")
    if per_class is not None and per_class < 1:
        raise ValueError(f"per_class must be positive (or None for all), got {per_class}")
    rng = np.random.default_rng(seed)
    excluded = np.isin(np.arange(len(labels)), np.asarray([] if exclude is None else exclude))
    if draw == "permutation":
        perm = rng.permutation(len(labels))
        perm = perm[~excluded[perm]]
        pools = [perm[labels[perm] == c] for c in classes]
    elif draw == "per_class":
        if per_class is None:
            raise ValueError("draw='per_class' needs per_class")
        pools = [np.flatnonzero((labels == c) & ~excluded) for c in classes]
    else:
        raise ValueError(f"draw must be 'permutation' or 'per_class', got {draw!r}")
    for c, pool in zip(classes, pools):
        if per_class is not None and len(pool) < per_class:
            raise ValueError(f"class {c} has {len(pool)} samples, fewer than the {per_class} asked for")
    if draw == "permutation":
        idx = np.sort(np.concatenate([pool if per_class is None else pool[:per_class] for pool in pools]))
    else:
        idx = rng.permutation(np.concatenate([rng.choice(pool, size=per_class, replace=False) for pool in pools]))
    lookup = {c: i for i, c in enumerate(classes)}
    return idx, np.array([lookup[t] for t in labels[idx]], dtype=np.int64)
