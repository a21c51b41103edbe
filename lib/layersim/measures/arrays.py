"""The input core of every array measure: conversion, validation and exact rescaling of representations
``[N, d]`` (or stacks: a list, or ``[L, N, d]``), numpy on the host or torch on its device.

Every check raises one ``ValueError`` naming the input and the problem, so no measure returns a silent NaN.
Rescaling divides by a power of two (:func:`scaled`), exactly, so products neither over- nor underflow.
(see docs/modules.md, ``layersim.measures.arrays``)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

EPS = np.finfo(np.float64).eps
#: fewest samples of any centred measure: N - 1 >= 2 directions are left after centring
MIN_CENTRED = 3


def to_numpy(x: Any, native: bool = False, name: str = "the input") -> np.ndarray:
    """Any array-like or torch tensor -> numpy array on the CPU, float64 (``native=True``: float16/32/64 keep
    their dtype, no copy); no shape checks. ``ValueError`` naming ``name`` for complex or non-numeric entries."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if x.is_complex():
            raise ValueError(f"{name} is complex; complex tensors are not supported")
        if not (native and str(x.dtype) in ("torch.float16", "torch.float32", "torch.float64")):
            x = x.double()
        x = x.numpy()
    try:
        arr = np.asarray(x)
    except ValueError as exc:  # ragged nested sequences
        raise ValueError(f"{name} is not a rectangular array of numbers ({first_line(exc)})") from None
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} is complex; complex arrays are not supported")
    if arr.dtype.kind in "USV":  # text (even "1.5") or raw bytes are not numbers
        raise ValueError(f"{name} has entries that are not numbers (dtype {arr.dtype})")
    if native and arr.dtype in (np.float16, np.float32, np.float64):
        return arr
    try:
        return np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} has entries that are not numbers (dtype {arr.dtype}: "
                         f"{first_line(exc)})") from None


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first line (for one-line error messages)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor (checked without importing torch)."""
    return hasattr(x, "detach") and hasattr(x, "device")


def numel(x: Any) -> int:
    """The number of entries of a numpy array or a torch tensor."""
    return x.numel() if is_tensor(x) else x.size


def max_abs(arr: Any, name: str) -> float:
    """``max |x|`` of a non-empty numpy array or torch tensor; ``ValueError`` if it has NaN or inf."""
    hi, lo = float(arr.max()), float(arr.min())
    if not (math.isfinite(hi) and math.isfinite(lo)):
        finite = arr.isfinite() if is_tensor(arr) else np.isfinite(arr)
        bad = numel(arr) - int(finite.sum())
        raise ValueError(f"{name} contains NaN or inf ({bad} non-finite entries)")
    return max(hi, -lo)


def exponent(absmax: float) -> int:
    """``e`` with ``absmax * 2**-e`` in [0.5, 1) (0 for 0): the power of two to divide by."""
    return math.frexp(absmax)[1]


def scaled(x: Any, e: int, out: np.ndarray | None = None) -> Any:
    """``x * 2**-e`` in float64: a new array (into ``out`` if given), or a float64 tensor on its device. Exact
    unless an entry falls below float64's normal range."""
    k = -e
    if is_tensor(x):
        import torch

        z = x.to(torch.float64) * 2.0 ** min(k, 1000)  # a new tensor, even for float64 input
        return z * 2.0 ** (k - 1000) if k > 1000 else z
    if k > 1000:  # 2**k itself would overflow: two exact steps
        out = np.multiply(x, 2.0**1000, out=out, dtype=np.float64)
        return np.multiply(out, 2.0 ** (k - 1000), out=out)
    return np.multiply(x, 2.0**k, out=out, dtype=np.float64)


def unscaled(x: Any, e: int, what: str) -> Any:
    """``x * 2**e`` (a float or an array), for results that are not scale invariant; ``ValueError`` if it
    exceeds float64's range."""
    if np.ndim(x) == 0:
        try:
            return math.ldexp(float(x), e)
        except OverflowError:
            pass
    else:
        with np.errstate(over="ignore"):
            out = np.ldexp(x, e)
        if np.isfinite(out).all():
            return out
    raise ValueError(f"{what} is beyond the range of float64 (about 1.8e308) for inputs this large")


def checked_2d(x: Any, name: str, min_n: int = MIN_CENTRED,
               native: bool = False) -> tuple[np.ndarray, float]:
    """Validate one representation ``[N, d]``: 2-D, finite, ``N >= min_n``, ``d >= 1``. Returns the array (as
    :func:`to_numpy`) and its ``max |x|``."""
    arr = to_numpy(x, native, name)
    check_shape(arr.shape, name, min_n)
    return arr, max_abs(arr, name)


def check_samples(n: int, name: str, min_n: int = MIN_CENTRED) -> None:
    """ValueError if ``n < min_n`` samples (``min_n``: 1 for per-sample measures, 3 for centred ones,
    4 for the unbiased HSIC), saying why that many are needed."""
    if n < min_n:
        why = ""
        if min_n == MIN_CENTRED:
            why = (" (after centring, fewer samples span at most one direction and every centred "
                   "similarity is degenerate: CKA is 1 for any data at N = 2)")
        elif min_n == 4:
            why = " (the unbiased HSIC estimator needs N >= 4)"
        raise ValueError(f"{name} has N={n} samples; need at least {min_n} samples{why}")


def check_shape(shape: tuple[int, ...], name: str, min_n: int) -> None:
    """The shape rules of one representation, numpy and torch paths: 2-D ``[N, d]``, ``d >= 1``,
    ``N >= min_n`` (:func:`_check_samples`)."""
    shape = tuple(shape)
    if len(shape) != 2:
        hint = ""
        if len(shape) == 3:
            hint = (" (a 3-D array is accepted only where a stack of layers [L, N, d] is "
                    "expected; for token features, select a token or flatten to [N*T, d])")
        raise ValueError(f"{name} must be 2-D [N, d], got {len(shape)}-D shape {shape}{hint}")
    n, d = shape
    if d < 1:
        raise ValueError(f"{name} has no features (shape {shape})")
    check_samples(n, name, min_n)


def as_2d(x: Any, name: str, min_n: int = MIN_CENTRED, native: bool = False) -> np.ndarray:
    """:func:`checked_2d` without ``max |x|``."""
    return checked_2d(x, name, min_n, native)[0]


def same_n(X: np.ndarray, Y: np.ndarray, names: str = "X and Y") -> None:
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"{names} must have the same number of samples N, got {X.shape[0]} and {Y.shape[0]}")


def checked_layers(layers: Any, min_n: int = MIN_CENTRED,
                   native: bool = False) -> tuple[list[np.ndarray], list[float]]:
    """A list of ``[N, d_l]`` arrays or a stacked ``[L, N, d]`` array -> validated list
    (float64, or the input's float dtype with ``native=True``) and each layer's ``max |x|``."""
    checked = [checked_2d(x, f"layer {i}", min_n=min_n, native=native)
               for i, x in enumerate(layer_items(layers))]
    out = [a for a, _ in checked]
    same_samples(out)
    return out, [m for _, m in checked]


def layer_items(layers: Any) -> list:
    """The layers of a list (or other iterable) of ``[N, d]`` arrays or tensors, or of a stacked
    ``[L, N, d]`` one, as a list; ValueError for another number of dimensions or no layer."""
    ndim = None if isinstance(layers, (list, tuple)) else getattr(layers, "ndim", None)
    if ndim is None:
        items = list(layers)
    elif ndim != 3:
        raise ValueError(
            f"layers must be a list of 2-D [N, d] arrays or a 3-D stacked array "
            f"[L, N, d], got a {ndim}-D array of shape {tuple(layers.shape)}")
    else:
        items = [layers[i] for i in range(layers.shape[0])]
    if len(items) == 0:
        raise ValueError("layers is empty; need at least one layer")
    return items


def same_samples(layers: Sequence[Any]) -> None:
    """ValueError unless every layer has the first one's number of samples N (and, for tensors, its device)."""
    first = layers[0]
    for i, x in enumerate(layers):
        if x.shape[0] != first.shape[0]:
            raise ValueError(
                f"all layers must have the same number of samples N: layer 0 has {first.shape[0]}, "
                f"layer {i} has {x.shape[0]}")
        if getattr(x, "device", None) != getattr(first, "device", None):
            raise ValueError(f"all layers must be on one device: layer 0 is on {first.device}, layer {i} on {x.device}")


def as_layers(layers: Any, min_n: int = MIN_CENTRED, native: bool = False) -> list[np.ndarray]:
    """:func:`checked_layers` without the ``max |x|``."""
    return checked_layers(layers, min_n, native)[0]


def norm(x: Any, axis: int | None = None) -> Any:
    """The Euclidean norm of a numpy array or torch tensor (of each row for ``axis=1``)."""
    if is_tensor(x):
        import torch

        return torch.linalg.vector_norm(x, dim=axis)
    return np.linalg.norm(x, axis=axis)


def centred(X: Any, name: str, absmax: float | None = None) -> Any:
    """Rescaled, centred float64 copy ``X 2^-e - mean``, ``max |X 2^-e|`` in [0.5, 1), of a numpy array or torch
    tensor (on its device). ``ValueError`` for a constant representation (relative to the scale)."""
    if absmax is None:
        absmax = max_abs(X, name)
    e = exponent(absmax)
    Xc = scaled(X, e)
    Xc -= Xc.mean(axis=0, keepdims=True)
    tol = 64 * EPS * math.sqrt(numel(X)) * math.ldexp(absmax, -e)
    if float(norm(Xc)) <= tol:
        raise ValueError(
            f"{name} is constant across samples (zero variance after centring); "
            "CKA and other centred similarities are undefined")
    return Xc


def unit_rows(X: Any, center: bool, name: str) -> Any:
    """Rows of X (optionally centred) at unit norm, float64 (numpy, or a torch tensor on its device);
    ``ValueError`` for zero-norm rows."""
    absmax = max_abs(X, name)
    e = exponent(absmax)
    Z = scaled(X, e)
    if center:
        Z -= Z.mean(axis=0, keepdims=True)
    norms = norm(Z, axis=1)
    tol = 64 * EPS * math.sqrt(X.shape[1]) * math.ldexp(absmax, -e)
    bad = (norms <= tol).nonzero()
    bad = bad.flatten() if is_tensor(bad) else bad[0]
    if len(bad):
        what = "after centring " if center else ""
        raise ValueError(
            f"{name} has {len(bad)} zero-norm row(s) {what}(first: sample {int(bad[0])}); "
            "cosine similarity is undefined for them")
    Z /= norms[:, None]
    return Z


def same_dims(layers: Sequence[np.ndarray]) -> None:
    """ValueError unless every layer has the same width d (a sample-wise cosine compares feature vectors)."""
    dims = {x.shape[1] for x in layers}
    if len(dims) > 1:
        raise ValueError(
            f"cosine needs the same feature dimension d in every layer, got {sorted(dims)}")


def labelled_rows(features: Any, labels: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``features`` ``[N, d]`` as finite float64 and ``labels`` ``[N]`` as int64 class indices ``>= 0``
    (the input of every probe and classifier head); a ``ValueError`` naming ``what`` otherwise."""
    X = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if X.ndim != 2:
        raise ValueError(f"{what}: features must be [N, d], got shape {X.shape}")
    if y.ndim != 1 or len(y) != len(X):
        raise ValueError(f"{what}: need one label per row: {len(X)} rows, labels of shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise ValueError(f"{what}: labels must be integers 0..K-1, got dtype {y.dtype}")
    if not np.isfinite(X).all():
        raise ValueError(f"{what}: features contain NaN or inf")
    return X, y.astype(np.int64)


def standardizer(X: np.ndarray) -> tuple[np.ndarray, float]:
    """Mean feature vector and one global scale (root mean squared deviation per feature) of ``X [N, d]``;
    a single scale keeps fits on ``(X - mean) / scale`` rotation-equivariant. A constant ``X`` gets scale 1."""
    mean = X.mean(axis=0)
    scale = float(np.sqrt(((X - mean) ** 2).sum(axis=1).mean() / X.shape[1]))
    return mean, (scale if scale > 0 else 1.0)
