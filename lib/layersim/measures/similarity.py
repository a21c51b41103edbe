"""Layer-wise representation similarity: sample-wise cosine, CKA and friends.

Every function takes numpy arrays or torch tensors ``[N, d]``, centres them in float64 before any product,
and returns floats or numpy arrays; :func:`layer_matrix` and :class:`StreamingCKA` compute on the GPU for
CUDA tensors. Scale-invariant measures give the same value for ``c X`` as for ``X``. Invalid inputs (NaN/inf,
mismatched N, too few samples, constant representations) raise ``ValueError``; biased linear CKA on few
samples warns :class:`SmallSampleWarning`.

References: the tracing paper (eqs. 1, 3; §2.1; App. B.2); Kornblith et al. 2019 (CKA, §3; CCA, Table 1);
Song et al. 2012 (HSIC_1); Nguyen et al. 2021 (minibatch CKA); Raghu et al. 2017 (SVCCA); Ding et al. 2021
(Procrustes). (see docs/modules.md, ``layersim.measures.similarity``)
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from scipy.linalg import blas as _blas

from layersim.measures import arrays

__all__ = [
    "SmallSampleWarning",
    "cosine",
    "cosine_per_sample",
    "linear_cka",
    "streamed_cosine_matrix",
    "gram_linear",
    "gram_rbf",
    "center_gram",
    "hsic",
    "gram_cka",
    "rbf_cka",
    "rbf_cka_matrix",
    "layer_matrix",
    "cross_matrix",
    "to_last",
    "adjacent_cosine",
    "residual_norm_ratio",
    "StreamingCKA",
    "minibatch_cka",
    "minibatch_cka_matrix",
    "procrustes_similarity",
    "canonical_correlations",
    "cca_r2",
    "svcca",
]

METRICS = ("cka", "debiased_cka", "cos")

# StreamingCKA rescales a layer's accumulators only when a batch exceeds its scale by more
# than 2^_STREAM_HEADROOM (values up to 2^32 cannot make float64 products overflow).
_STREAM_HEADROOM = 32
# Largest single intermediate (bytes) the batched paths build in one go (Gram stack,
# concatenated cross-covariance); beyond it they fall back to a loop over layer pairs.
_MAX_BYTES = 1 << 30
# Biased linear CKA warns where independent random features of the compared widths would
# already give more than this (see ``_random_feature_cka``).
_RANDOM_CKA_WARN = 0.9


class SmallSampleWarning(UserWarning):
    """Biased linear CKA computed on so few samples, next to the representations' widths, that
    independent random features would already score above 0.9: the value says little."""


# --------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------
















def _random_feature_cka(n: int, d1: int, d2: int) -> float:
    """Biased linear CKA of independent isotropic random features ``[n, d1]`` and ``[n, d2]``, to leading
    order: ``1 / sqrt((1 + n/d1)(1 + n/d2))``."""
    return 1.0 / math.sqrt((1.0 + n / d1) * (1.0 + n / d2))


def _widest_pair(dims: Sequence[int]) -> tuple[int, int] | None:
    """The two largest widths of ``dims`` (the pair of distinct layers whose random-feature CKA is
    highest), or None for fewer than two layers."""
    if len(dims) < 2:
        return None
    a, b = sorted(dims)[-2:]
    return a, b


def _outside_level() -> int:
    """``stacklevel`` of the first frame outside this module, seen from the function calling this
    one, so that a warning names the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    return level


def _check_samples(n: int, name: str, min_n: int = arrays.MIN_CENTRED,
                   pair: tuple[int, int] | None = None) -> None:
    """:func:`layersim.measures.arrays.check_samples`; with ``pair`` (the two widest widths a biased linear CKA
    compares) also warns :class:`SmallSampleWarning` when :func:`_random_feature_cka` exceeds ``_RANDOM_CKA_WARN``."""
    arrays.check_samples(n, name, min_n)
    if pair is not None:
        d1, d2 = pair
        base = _random_feature_cka(n, d1, d2)
        if base > _RANDOM_CKA_WARN:
            warnings.warn(SmallSampleWarning(
                f"linear CKA on N={n} samples of widths {d1} and {d2}: independent random features "
                f"would already give about {base:.3f} (1/sqrt((1 + N/d1)(1 + N/d2))), so values near "
                f"it mean little; use more samples (N well above the widths / 9) or debiased CKA"),
                stacklevel=_outside_level())






def _min_samples(metric: str, center: bool = True) -> int:
    """Fewest samples ``metric`` accepts: 4 for debiased CKA, 3 for any centred measure, 1 for
    the uncentred sample-wise cosine."""
    if metric == "debiased_cka":
        return 4
    return arrays.MIN_CENTRED if metric != "cos" or center else 1




















# --------------------------------------------------------------------------------------
# sample-wise cosine (tracing paper §2.1)
# --------------------------------------------------------------------------------------
def cosine_per_sample(X: Any, Y: Any, center: bool = True) -> np.ndarray:
    """Per-sample cosine ``<h_i, h'_i> / (||h_i|| ||h'_i||)`` between row i of X and of Y (tracing paper §2.1,
    the COS equation after eq. 3).

    ``X, Y``: same shape ``[N, d]``. ``center=True`` first subtracts each representation's mean over samples
    (footnote 2; needs N >= 3). Returns ``np.ndarray [N]`` of cosines in [-1, 1]."""
    min_n = _min_samples("cos", center)
    X = arrays.as_2d(X, "X", min_n)
    Y = arrays.as_2d(Y, "Y", min_n)
    if X.shape != Y.shape:
        raise ValueError(f"X and Y must have the same shape [N, d], got {X.shape} and {Y.shape}")
    U = arrays.unit_rows(X, center, "X")
    V = arrays.unit_rows(Y, center, "Y")
    return np.clip(np.einsum("nd,nd->n", U, V), -1.0, 1.0)


def cosine(X: Any, Y: Any, center: bool = True) -> float:
    """Mean over samples of :func:`cosine_per_sample` (tracing paper §2.1, footnote 2): a float in [-1, 1]."""
    return float(np.mean(cosine_per_sample(X, Y, center=center)))


# --------------------------------------------------------------------------------------
# HSIC on Gram matrices
# --------------------------------------------------------------------------------------
def gram_linear(X: Any) -> np.ndarray:
    """Linear-kernel Gram matrix ``K = X_c X_c^T`` ``[N, N]`` of the centred features ``X [N, d]`` (Kornblith
    et al. 2019, §3). ``ValueError`` when K exceeds float64's range (:func:`linear_cka` is scale invariant)."""
    X, absmax = arrays.checked_2d(X, "X", min_n=2)
    Xc = arrays.centred(X, "X", absmax)
    return arrays.unscaled(Xc @ Xc.T, 2 * arrays.exponent(absmax), "the Gram matrix of X")


def _sq_distances(Xc: np.ndarray) -> np.ndarray:
    G = Xc @ Xc.T
    r = np.diag(G).copy()
    D = np.maximum(r[:, None] + r[None, :] - 2.0 * G, 0.0)
    np.fill_diagonal(D, 0.0)
    return D


def gram_rbf(X: Any, threshold: float = 0.5) -> np.ndarray:
    """RBF Gram matrix ``exp(-||x_i - x_j||^2 / (2 sigma^2))`` ``[N, N]`` of ``X [N, d]``, with ``sigma^2 =
    threshold^2 * m``, ``m`` the median squared pairwise distance over all N x N entries (Kornblith et al.'s demo)."""
    if not (threshold > 0 and np.isfinite(threshold)):
        raise ValueError(f"threshold must be a positive finite number, got {threshold}")
    X = arrays.as_2d(X, "X", min_n=2)
    D = _sq_distances(arrays.centred(X, "X"))
    med = float(np.median(D))
    if med <= 0:
        raise ValueError(
            "X has a zero median pairwise distance (more than half of all pairs coincide); "
            "the RBF bandwidth is undefined")
    return np.exp(-D / (2.0 * threshold**2 * med))


def _as_gram(K: Any, name: str, min_n: int) -> tuple[np.ndarray, int]:
    """Validated Gram matrix divided by ``2**e`` (``max |K| 2^-e`` in [0.5, 1)), and ``e``."""
    K = arrays.to_numpy(K, name=name)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{name} must be a square 2-D [N, N] Gram matrix, got shape {K.shape}")
    _check_samples(K.shape[0], name, min_n)
    e = arrays.exponent(arrays.max_abs(K, name))
    K = arrays.scaled(K, e)
    scale = max(float(np.abs(K).max()), np.finfo(np.float64).tiny)
    if float(np.abs(K - K.T).max()) > 1e-10 * scale:
        raise ValueError(f"{name} must be symmetric")
    return K, e


def center_gram(K: Any) -> np.ndarray:
    """Double-centred Gram matrix ``H K H`` with ``H = I - 11^T/N`` (Kornblith et al. §3)."""
    K, e = _as_gram(K, "K", 2)
    return arrays.unscaled(K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean(), e,
                     "H K H")


def hsic(K: Any, L: Any, debiased: bool = False) -> float:
    """HSIC of symmetric Gram matrices ``K, L [N, N]``, a float: ``tr(K H L H) / (N-1)^2`` (Kornblith et al. 2019,
    §3), or with ``debiased=True`` Song et al.'s (2012) HSIC_1 (N >= 4; may be negative),
    ``[tr(K~L~) + 1^T K~ 1 1^T L~ 1 / ((N-1)(N-2)) - 2/(N-2) 1^T K~ L~ 1] / (N(N-3))``, ``K~`` = K with a zero
    diagonal. ``ValueError`` beyond float64's range."""
    K, L, ek, el = _two_grams(K, L, 4 if debiased else 2)
    return arrays.unscaled(_hsic(K, L, debiased), ek + el, "HSIC")


def _two_grams(K: Any, L: Any, min_n: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    K, ek = _as_gram(K, "K", min_n)
    L, el = _as_gram(L, "L", min_n)
    if K.shape != L.shape:
        raise ValueError(
            f"K and L must have the same number of samples N, got {K.shape[0]} and {L.shape[0]}")
    return K, L, ek, el


def _hsic(K: np.ndarray, L: np.ndarray, debiased: bool) -> float:
    """:func:`hsic` of validated Gram matrices."""
    n = K.shape[0]
    if not debiased:
        Kc = K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean()
        return float(np.vdot(Kc, L) / (n - 1) ** 2)  # tr(HKH L) = tr(KHLH)
    Kt = K.copy()
    Lt = L.copy()
    np.fill_diagonal(Kt, 0.0)
    np.fill_diagonal(Lt, 0.0)
    kr, lr = Kt.sum(1), Lt.sum(1)
    val = (np.vdot(Kt, Lt) + kr.sum() * lr.sum() / ((n - 1) * (n - 2))
           - 2.0 / (n - 2) * np.dot(kr, lr))
    return float(val / (n * (n - 3)))


def _normalise_hsic(kl: float, kk: float, ll: float, floor_k: float = 0.0,
                    floor_l: float = 0.0, what: str = "HSIC") -> float:
    if not (kk > floor_k and ll > floor_l):
        raise ValueError(
            f"self-{what} is not positive (K: {kk:.3g}, L: {ll:.3g}): a representation is "
            "constant, or the unbiased estimate is negative for this small sample; CKA is "
            "undefined")
    return float(kl / np.sqrt(kk * ll))


def gram_cka(K: Any, L: Any, debiased: bool = False) -> float:
    """CKA of two Gram matrices, ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` (Kornblith et al. 2019, §3);
    ``debiased=True``: every HSIC is Song et al.'s HSIC_1."""
    min_n = _min_samples("debiased_cka" if debiased else "cka")
    K, L, _, _ = _two_grams(K, L, min_n)  # divided by powers of two: CKA does not change
    kk, ll = _hsic(K, K, debiased), _hsic(L, L, debiased)
    fk = fl = 0.0
    if debiased:  # below 1e-10 of the biased value a debiased self-HSIC is rounding noise
        fk, fl = 1e-10 * abs(_hsic(K, K, False)), 1e-10 * abs(_hsic(L, L, False))
    return _normalise_hsic(_hsic(K, L, debiased), kk, ll, fk, fl)


def rbf_cka(X: Any, Y: Any, threshold: float = 0.5, debiased: bool = False) -> float:
    """CKA with RBF kernels (Kornblith et al. 2019, §3), bandwidth from :func:`gram_rbf`."""
    min_n = _min_samples("debiased_cka" if debiased else "cka")
    X = arrays.as_2d(X, "X", min_n)
    Y = arrays.as_2d(Y, "Y", min_n)
    arrays.same_n(X, Y)
    return gram_cka(gram_rbf(X, threshold), gram_rbf(Y, threshold), debiased)


def rbf_cka_matrix(layers: Any, threshold: float = 0.5) -> np.ndarray:
    """RBF-kernel CKA between all pairs of ``layers`` (``[L, N, d]`` or a list of ``[N, d_l]``), ``[L, L]`` with ones
    on the diagonal (Kornblith et al. 2019, §3): one :func:`gram_rbf` per layer, then :func:`gram_cka` per pair
    (``L`` Gram matrices of ``N x N``: keep N moderate)."""
    grams = [gram_rbf(h, threshold) for h in layers]
    M = np.eye(len(grams))
    for i in range(len(grams)):
        for j in range(i + 1, len(grams)):
            M[i, j] = M[j, i] = gram_cka(grams[i], grams[j])
    return M


# --------------------------------------------------------------------------------------
# linear CKA, batched over layers
# --------------------------------------------------------------------------------------
def _choose_form(n: int, dims: Sequence[int]) -> str:
    """'feature' (one ``Z^T Z`` of the centred stacked layers) or 'gram' (Gram matrices in row blocks), whichever
    costs fewer weighted multiply-adds: 'gram' wins roughly when ``N < sum d_l / 2``, and only if one row of all L
    Gram matrices fits in ``_MAX_BYTES``."""
    L, D = len(dims), int(sum(dims))
    gram_cost = 2.0 * n * n * D / 2 + 4.0 * n * n * L * L / 2
    feature_cost = n * D * D / 2
    if gram_cost < feature_cost and 8 * L * n <= _MAX_BYTES:
        return "gram"
    return "feature"


def _concat_centred(Xs: Sequence[np.ndarray],
                    absmax: Sequence[float]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Centre every layer (each divided by a power of two near its absmax) into one float64 ``Z [N, sum d_l]``.
    Returns ``Z`` and the per-layer views into it; ``ValueError`` for a constant layer."""
    dims = [x.shape[1] for x in Xs]
    n = Xs[0].shape[0]
    Z = np.empty((n, sum(dims)))
    views, s0 = [], 0
    for i, (x, d, m) in enumerate(zip(Xs, dims, absmax)):
        blk = Z[:, s0:s0 + d]
        e = arrays.exponent(m)
        arrays.scaled(x, e, out=blk)
        blk -= blk.mean(axis=0)
        tol = 64 * arrays.EPS * np.sqrt(x.size) * math.ldexp(m, -e)
        if np.sqrt(np.einsum("nd,nd->", blk, blk)) <= tol:
            raise ValueError(
                f"layer {i} is constant across samples (zero variance after centring); "
                "CKA and other centred similarities are undefined")
        views.append(blk)
        s0 += d
    return Z, views


def _starts(dims: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(dims)[:-1]]).astype(np.intp)


def _feature_dots(Z: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """All ``||X_i^T X_j||_F^2`` from the centred ``Z = [X_1 ... X_L]`` ``[N, D]``: one syrk ``Z^T Z`` if
    ``D x D`` fits in ``_MAX_BYTES``, else one block row ``X_i^T [X_i ... X_L]`` per layer."""
    D = Z.shape[1]
    starts = _starts(dims)
    if D * D * 8 <= _MAX_BYTES:
        C = Z.T @ Z
        np.multiply(C, C, out=C)
        return np.add.reduceat(np.add.reduceat(C, starts, axis=0), starts, axis=1)
    L = len(dims)
    T = np.empty((L, L))
    for i in range(L):
        s0 = starts[i]
        Ci = Z[:, s0:s0 + dims[i]].T @ Z[:, s0:]
        np.multiply(Ci, Ci, out=Ci)
        row = np.add.reduceat(Ci.sum(axis=0), starts[i:] - s0)
        T[i, i:] = row
        T[i:, i] = row
    return T


def _gram_dots(Xcs: Sequence[Any]) -> Any:
    """All ``<K_i, K_j>_F``, ``K_l = X_l X_l^T``, accumulated over row blocks ``r`` as
    ``<K_i[r,r], K_j[r,r]> + 2 <K_i[r,r+], K_j[r,r+]>``, so memory does not grow with ``N^2``. numpy arrays or torch
    tensors (on their device); returns the same kind."""
    L, n = len(Xcs), Xcs[0].shape[0]
    b = int(max(1, min(n, (_MAX_BYTES // 4) // (8 * L * n))))
    if arrays.is_tensor(Xcs[0]):
        import torch

        kind = dict(dtype=torch.float64, device=Xcs[0].device)
        buf, T, matmul = torch.empty(L * b * n, **kind), torch.zeros((L, L), **kind), torch.matmul
    else:
        buf, T, matmul = np.empty(L * b * n), np.zeros((L, L)), np.matmul
    for r0 in range(0, n, b):
        r1 = min(n, r0 + b)
        m, w = r1 - r0, n - r1
        Gd = buf[:L * m * m].reshape(L, m, m)
        Go = buf[L * m * m:L * m * (m + w)].reshape(L, m, w)
        for i, X in enumerate(Xcs):
            A = X[r0:r1]
            matmul(A, A.T, out=Gd[i])
            if w:
                matmul(A, X[r1:].T, out=Go[i])
        g = Gd.reshape(L, m * m)
        T += g @ g.T
        if w:
            g = Go.reshape(L, m * w)
            T += 2.0 * (g @ g.T)
    return T


def _dot_matrix(Xcs: Sequence[np.ndarray], form: str = "auto",
                Z: np.ndarray | None = None) -> np.ndarray:
    """``T[i, j] = <vec(X_i X_i^T), vec(X_j X_j^T)> = ||X_j^T X_i||_F^2`` for centred X_i.

    ``Z``, if given, is ``np.concatenate(Xcs, axis=1)`` already (saves a copy).
    """
    n = Xcs[0].shape[0]
    dims = [x.shape[1] for x in Xcs]
    if form == "auto":
        form = _choose_form(n, dims)
    if form == "gram":
        return _gram_dots(Xcs)
    if form != "feature":
        raise ValueError(f"form must be 'auto', 'feature' or 'gram', got {form!r}")
    if Z is None:
        Z = np.concatenate(Xcs, axis=1)
    return _feature_dots(Z, dims)


def _debias(T: np.ndarray, R: np.ndarray, n: int) -> np.ndarray:
    """``n(n-3) HSIC_1`` from biased dot products T and row squared norms R ``[L, n]`` of centred features:
    ``tr(KL) - n/(n-2) r_K.r_L + tr(K) tr(L) / ((n-1)(n-2))``."""
    s = R.sum(axis=1)
    return T - n / (n - 2.0) * (R @ R.T) + np.outer(s, s) / ((n - 1.0) * (n - 2.0))


def _cka_from_dots(T: np.ndarray, debiased: bool, ref: np.ndarray | None = None) -> np.ndarray:
    """Normalise dot products to CKA; ``ref`` (the biased self terms) sets the tolerance
    below which a debiased self-HSIC counts as non-positive (rounding noise)."""
    T = 0.5 * (T + T.T)  # exactly symmetric despite rounding in the batched products
    d = np.diag(T).copy()
    floor = 0.0 if ref is None else 1e-10 * np.asarray(ref)
    if not np.all(d > floor):
        bad = int(np.flatnonzero(~(d > floor))[0])
        raise ValueError(
            f"self-HSIC of layer {bad} is not positive ({d[bad]:.3g}): "
            + ("the representation is constant, or the unbiased estimate is not positive for this "
               "small sample; " if debiased else "the representation is constant; ")
            + "CKA is undefined")
    M = T / np.sqrt(np.outer(d, d))
    np.fill_diagonal(M, 1.0)
    return M


def _linear_cka_matrix(Xcs: Sequence[np.ndarray], debiased: bool, form: str,
                       Z: np.ndarray | None = None) -> np.ndarray:
    T = _dot_matrix(Xcs, form, Z)
    if not debiased:
        return _cka_from_dots(T, False)
    R = np.stack([np.einsum("nd,nd->n", X, X) for X in Xcs])
    return _cka_from_dots(_debias(T, R, Xcs[0].shape[0]), True, ref=np.diag(T))


def linear_cka(X: Any, Y: Any, debiased: bool = False, form: str = "auto") -> float:
    """Linear CKA (Kornblith et al. 2019, §3; tracing paper eq. 3) of ``X [N, d1]`` and ``Y [N, d2]``, a float:
    ``||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F)``, columns centred. ``debiased=True``: Song et al.'s
    HSIC_1 (N >= 4). Needs N >= 3; may warn :class:`SmallSampleWarning`. ``form`` ('auto', 'feature', 'gram')
    changes the computation, not the result."""
    min_n = _min_samples("debiased_cka" if debiased else "cka")
    X, mx = arrays.checked_2d(X, "X", min_n)
    Y, my = arrays.checked_2d(Y, "Y", min_n)
    arrays.same_n(X, Y)
    if not debiased:
        _check_samples(X.shape[0], "X", min_n, pair=(X.shape[1], Y.shape[1]))
    M = _linear_cka_matrix([arrays.centred(X, "X", mx), arrays.centred(Y, "Y", my)], debiased, form)
    return float(M[0, 1])


# --------------------------------------------------------------------------------------
# whole-model matrices
# --------------------------------------------------------------------------------------
def _check_metric(metric: str, center: bool) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if metric != "cos" and not center:
        raise ValueError("center=False applies only to metric='cos'; CKA always centres")




# --------------------------------------------------------------------------------------
# the device path: layers that are CUDA tensors stay on their GPU
# --------------------------------------------------------------------------------------
def _on_cuda(layers: Any) -> bool:
    """True when ``layers`` (a stacked tensor or a list of tensors) lives on a CUDA device."""
    first = layers[0] if isinstance(layers, (list, tuple)) and len(layers) else layers
    return bool(getattr(getattr(first, "device", None), "type", None) == "cuda")


def _torch_layers(layers: Any, min_n: int) -> list:
    """The device path's :func:`arrays.checked_layers`: a list of 2-D torch tensors on one device, same N,
    finite, ``N >= min_n`` (same messages as the CPU path); nothing is copied to the host."""
    import torch

    items = arrays.layer_items(layers)
    dev = next((x.device for x in items if isinstance(x, torch.Tensor)), torch.device("cpu"))
    out = []
    for i, x in enumerate(items):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            if x.is_complex():
                raise ValueError(f"layer {i} is complex; complex tensors are not supported")
            if not x.is_floating_point():  # integers and booleans are read as numbers, as on the CPU
                x = x.to(torch.float64)
        else:  # arrays and lists: the CPU path's conversion, then to the tensors' device
            x = torch.from_numpy(arrays.to_numpy(x, native=True, name=f"layer {i}")).to(dev)
        arrays.check_shape(tuple(x.shape), f"layer {i}", min_n)
        arrays.max_abs(x, f"layer {i}")  # NaN / inf named
        out.append(x)
    arrays.same_samples(out)
    return out


def _torch_layer_matrix(layers: Any, metric: str, center: bool, form: str = "auto",
                        pair: tuple[int, int] | None = None) -> np.ndarray:
    """:func:`layer_matrix` with every product in float64 on the layers' own device (a GPU), in the form
    :func:`_choose_form` picks; only the ``L x L`` sums return to the host, normalised by the CPU path's code."""
    import torch

    debiased = metric == "debiased_cka"
    min_n = _min_samples(metric, center)
    Xs = _torch_layers(layers, min_n=min_n)
    L, n = len(Xs), Xs[0].shape[0]
    _check_samples(n, "the layers", min_n, _cka_pair(metric, [x.shape[1] for x in Xs], pair))
    T = torch.empty((L, L), dtype=torch.float64, device=Xs[0].device)
    if metric == "cos":
        arrays.same_dims(Xs)
        Us = [arrays.unit_rows(x, center, f"layer {i}") for i, x in enumerate(Xs)]
        for i in range(L):
            for j in range(i, L):
                T[i, j] = T[j, i] = (Us[i] * Us[j]).sum() / n
        M = T.cpu().numpy()
        M = np.clip(0.5 * (M + M.T), -1.0, 1.0)
        np.fill_diagonal(M, 1.0)
        return M
    Xcs = [arrays.centred(x, f"layer {i}") for i, x in enumerate(Xs)]
    if form == "auto":
        form = _choose_form(n, [x.shape[1] for x in Xcs])
    if form == "gram":
        T = _gram_dots(Xcs)
    elif form == "feature":
        for i in range(L):
            for j in range(i, L):
                T[i, j] = T[j, i] = torch.square(Xcs[i].T @ Xcs[j]).sum()
    else:
        raise ValueError(f"form must be 'auto', 'feature' or 'gram', got {form!r}")
    T_host = T.cpu().numpy()
    if not debiased:
        return _cka_from_dots(T_host, False)
    R = torch.stack([torch.square(x).sum(dim=1) for x in Xcs]).cpu().numpy()
    return _cka_from_dots(_debias(T_host, R, n), True, ref=np.diag(T_host))


def layer_matrix(layers: Any, metric: str = "cka", center: bool = True,
                 form: str = "auto", device: str = "auto") -> np.ndarray:
    """Symmetric ``[L, L]`` similarity matrix (ones on the diagonal) of ``layers`` (a list of ``[N, d_l]`` or
    ``[L, N, d]``), in one batch.

    ``metric``: ``'cka'`` (tracing eq. 3; may warn :class:`SmallSampleWarning`), ``'debiased_cka'`` (HSIC_1) or
    ``'cos'`` (mean sample-wise cosine, tracing §2.1; equal widths; ``center``: footnote 2). ``form``: the CKA
    computation, not its result. ``device``: ``"auto"`` computes CUDA tensors on their GPU, ``"torch"`` any
    tensors on theirs, ``"cpu"`` on the host."""
    return _layer_matrix(layers, metric, center, form, device)


def _cka_pair(metric: str, dims: Sequence[int], pair: tuple[int, int] | None = None
              ) -> tuple[int, int] | None:
    """The widths a biased linear CKA matrix is checked against (:func:`_check_samples`): ``pair``
    if given, else the two widest layers; None for the other metrics."""
    if metric != "cka":
        return None
    return pair if pair is not None else _widest_pair(dims)


def _layer_matrix(layers: Any, metric: str, center: bool, form: str, device: str,
                  pair: tuple[int, int] | None = None) -> np.ndarray:
    """:func:`layer_matrix`; ``pair``: the widths of the layer pairs that matter to the caller
    (:func:`cross_matrix`: the widest of each stack), for the small-sample warning."""
    _check_metric(metric, center)
    if device not in ("auto", "cpu", "torch"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'torch', got {device!r}")
    if device == "torch" or (device == "auto" and _on_cuda(layers)):
        return _torch_layer_matrix(layers, metric, center, form, pair)
    debiased = metric == "debiased_cka"
    min_n = _min_samples(metric, center)
    Xs, absmax = arrays.checked_layers(layers, min_n=min_n, native=metric != "cos")
    _check_samples(Xs[0].shape[0], "the layers", min_n, _cka_pair(metric, [x.shape[1] for x in Xs], pair))
    if metric == "cos":
        arrays.same_dims(Xs)
        U = np.stack([arrays.unit_rows(x, center, f"layer {i}").ravel() for i, x in enumerate(Xs)])
        M = U @ U.T / Xs[0].shape[0]
        M = np.clip(0.5 * (M + M.T), -1.0, 1.0)
        np.fill_diagonal(M, 1.0)
        return M
    Z, Xcs = _concat_centred(Xs, absmax)
    del Xs
    return _linear_cka_matrix(Xcs, debiased, form, Z)


def streamed_cosine_matrix(layers: Any, entries: Sequence[int] | None = None, chunk: int = 4096) -> np.ndarray:
    """:func:`layer_matrix` ``(metric="cos")`` of a stack ``[L, N, d]`` too large for memory (a memmap), read
    ``chunk`` samples at a time; memory independent of N. ``entries``: the layers to use (default all)."""
    if getattr(layers, "ndim", None) != 3:
        raise ValueError(f"layers must be a stack [L, N, d], got shape {getattr(layers, 'shape', None)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples, got {chunk!r}")
    keep = list(range(layers.shape[0])) if entries is None else list(entries)
    n, d = layers.shape[1], layers.shape[2]
    arrays.check_shape((n, d), "the layers", arrays.MIN_CENTRED)
    total = np.zeros((len(keep), d))
    for s in range(0, n, chunk):
        block = np.asarray(layers[keep, s:s + chunk], dtype=np.float64)
        for i in range(len(keep)):
            arrays.max_abs(block[i], f"layer {keep[i]}")  # NaN / inf named before they reach the mean
        total += block.sum(axis=1)
    mean = total / n
    G = np.zeros((len(keep), len(keep)))
    for s in range(0, n, chunk):
        block = np.asarray(layers[keep, s:s + chunk], dtype=np.float64) - mean[:, None, :]
        U = np.stack([arrays.unit_rows(block[i], False, f"layer {keep[i]} (samples from {s})") for i in range(len(keep))])
        G += np.einsum("ibd,jbd->ij", U, U)
    M = np.clip(0.5 * (G + G.T) / n, -1.0, 1.0)
    np.fill_diagonal(M, 1.0)
    return M


def cross_matrix(layers_a: Any, layers_b: Any, metric: str = "cka") -> np.ndarray:
    """``[A, B]`` similarity of every layer of one model (rows) to every layer of another (columns) on the same
    samples: ``'cka'``, ``'debiased_cka'`` or ``'cos'`` (equal widths; tracing App. D's cross-modal COS). The
    clusters paper's FT-ORIG and FT[1]-FT[2] maps (Figs. 1, 5, 6); agrees with :func:`layer_matrix` entry for entry."""
    if metric not in ("cka", "debiased_cka", "cos"):
        raise ValueError(f"cross_matrix computes 'cka', 'debiased_cka' or 'cos', got {metric!r}")
    min_n = _min_samples(metric)
    A = arrays.checked_layers(layers_a, min_n=min_n, native=metric != "cos")[0]
    B = arrays.checked_layers(layers_b, min_n=min_n, native=metric != "cos")[0]
    if A[0].shape[0] != B[0].shape[0]:
        raise ValueError(f"the two stacks have {A[0].shape[0]} and {B[0].shape[0]} samples; "
                         "cross-model similarity needs the same samples in both")
    widest = (max(x.shape[1] for x in A), max(x.shape[1] for x in B))  # only pairs across the stacks
    M = _layer_matrix(list(A) + list(B), metric, True, "auto", "auto", pair=widest)
    return M[:len(A), len(A):].copy()


def to_last(layers: Any, metric: str = "cka", center: bool = True) -> np.ndarray:
    """Similarity of every layer to the last (tracing Fig. 1a, 2a,b), length L, from L pairwise comparisons;
    metrics as in :func:`layer_matrix`."""
    _check_metric(metric, center)
    debiased = metric == "debiased_cka"
    min_n = _min_samples(metric, center)
    Xs, absmax = arrays.checked_layers(layers, min_n=min_n)
    n = Xs[0].shape[0]
    if len(Xs) > 1:  # every layer against the last
        _check_samples(n, "the layers", min_n,
                       _cka_pair(metric, [], (max(x.shape[1] for x in Xs[:-1]), Xs[-1].shape[1])))
    if metric == "cos":
        arrays.same_dims(Xs)
        V = arrays.unit_rows(Xs[-1], center, f"layer {len(Xs) - 1}")
        out = [np.mean(np.einsum("nd,nd->n", arrays.unit_rows(x, center, f"layer {i}"), V))
               for i, x in enumerate(Xs[:-1])]
        return np.clip(np.array(out + [1.0]), -1.0, 1.0)
    Yc = arrays.centred(Xs[-1], f"layer {len(Xs) - 1}", absmax[-1])
    ry = np.einsum("nd,nd->n", Yc, Yc)
    out = []
    for i, x in enumerate(Xs[:-1]):
        Xc = arrays.centred(x, f"layer {i}", absmax[i])
        form = _choose_form(n, [Xc.shape[1], Yc.shape[1]])
        T = _dot_matrix([Xc, Yc], form)
        if debiased:
            Tu = _debias(T, np.stack([np.einsum("nd,nd->n", Xc, Xc), ry]), n)
            out.append(_cka_from_dots(Tu, True, ref=np.diag(T))[0, 1])
        else:
            out.append(_cka_from_dots(T, False)[0, 1])
    return np.array(out + [1.0])


# --------------------------------------------------------------------------------------
# residual-stream diagnostics (tracing App. B.2) and Block Redundancy
# --------------------------------------------------------------------------------------
def adjacent_cosine(layers: Any, center: bool = False) -> np.ndarray:
    """Per-sample ``COS(h^(l-1), h^(l))`` of consecutive layers (tracing Fig. 11), uncentred unless
    ``center=True``. Returns ``np.ndarray [L-1, N]``."""
    Xs = arrays.as_layers(layers, min_n=_min_samples("cos", center))
    arrays.same_dims(Xs)
    if len(Xs) < 2:
        raise ValueError("adjacent_cosine needs at least 2 layers")
    U = [arrays.unit_rows(x, center, f"layer {i}") for i, x in enumerate(Xs)]
    return np.clip(np.stack([np.einsum("nd,nd->n", a, b) for a, b in zip(U[:-1], U[1:])]),
                   -1.0, 1.0)


def residual_norm_ratio(h_prev: Any, h_next: Any) -> np.ndarray:
    """Per-sample ``||h|| / ||f(h)||`` with ``f(h) = h_next - h_prev`` (tracing App. B.2, Fig. 11): skip over
    residual branch of ``h_next = h_prev + f(h_prev)`` (eq. 1), on uncentred ``[N, d]`` arrays. Returns ``[N]``."""
    A, ma = arrays.checked_2d(h_prev, "h_prev", min_n=1)
    B, mb = arrays.checked_2d(h_next, "h_next", min_n=1)
    if A.shape != B.shape:
        raise ValueError(
            f"h_prev and h_next must have the same shape [N, d], got {A.shape} and {B.shape}")
    e = arrays.exponent(max(ma, mb))  # one common scale: the ratio is invariant to it
    A, B = arrays.scaled(A, e), arrays.scaled(B, e)
    res = np.linalg.norm(B - A, axis=1)
    tol = 64 * arrays.EPS * np.sqrt(A.shape[1]) * math.ldexp(max(ma, mb), -e)
    bad = np.flatnonzero(res <= tol)
    if bad.size:
        raise ValueError(
            f"{bad.size} sample(s) have a zero-norm residual branch h_next - h_prev "
            f"(first: sample {int(bad[0])}); the norm ratio is infinite")
    return np.linalg.norm(A, axis=1) / res


# --------------------------------------------------------------------------------------
# exact streaming CKA and the minibatch estimator
# --------------------------------------------------------------------------------------
class StreamingCKA:
    """Exact linear CKA matrix accumulated over minibatches (:meth:`update`), in memory independent of N.

    :meth:`result` equals :func:`layer_matrix` on the concatenated data to float64 rounding (``debiased=True``:
    the HSIC_1 form, exact too). Memory: ``8 (sum_l d_l)^2`` bytes. ``device`` as in :func:`layer_matrix`
    (see docs/modules.md, ``layersim.measures.similarity``)."""

    def __init__(self, debiased: bool = False, device: str = "auto"):
        if device not in ("auto", "cpu", "torch"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'torch', got {device!r}")
        self.debiased = bool(debiased)
        self.device = device
        self.n = 0
        self._dims: list[int] | None = None
        self._torch = False

    def update(self, layers: Any) -> "StreamingCKA":
        """Add one minibatch: a list of ``[b, d_l]`` arrays or a stacked ``[L, b, d]``. CUDA tensors (any torch
        tensors with ``"torch"``) are accumulated on their device; the first batch decides for the stream."""
        if self._dims is None:
            self._torch = self.device == "torch" or (self.device == "auto" and _on_cuda(layers))
        if self._torch:
            return self._update_torch(layers)
        if _on_cuda(layers):
            raise ValueError("this StreamingCKA accumulates on the CPU (its first batch was there); "
                             "keep every batch on one device")
        Xs, absmax = arrays.checked_layers(layers, min_n=1, native=True)
        dims = [x.shape[1] for x in Xs]
        exps = [arrays.exponent(m) for m in absmax]
        first = self._dims is None
        if first:
            self._dims = dims
            self._starts = _starts(dims)
            D, L = sum(dims), len(dims)
            self._e = exps                      # layer l is stored divided by 2^e_l
            self._s = np.zeros(D)
            # upper triangle of sum_n y_n y_n^T, Fortran order: updated in place by syrk
            self._Su = np.zeros((D, D), order="F")
            self._absmax = np.zeros(L)          # of the scaled layers
            if self.debiased:
                self._A = np.zeros((L, L))
                self._B = np.zeros((L, D))
                self._t = np.zeros(L)
        elif dims != self._dims:
            raise ValueError(f"layer dimensions changed between batches: {self._dims} -> {dims}")
        else:
            for i, e in enumerate(exps):
                if e > self._e[i] + _STREAM_HEADROOM:
                    self._rescale_layer(i, e - self._e[i])
        Y = np.empty((Xs[0].shape[0], sum(dims)))
        for x, s0, d, e in zip(Xs, self._starts, dims, self._e):
            arrays.scaled(x, e, out=Y[:, s0:s0 + d])
        if first:
            self._shift = Y.mean(0)
        Y -= self._shift
        self.n += Y.shape[0]
        self._s += Y.sum(0)
        # S += Y^T Y in place (upper triangle only): no D x D temporary per batch
        out = _blas.dsyrk(1.0, Y.T, beta=1.0, c=self._Su, trans=0, lower=0, overwrite_c=1)
        if not np.shares_memory(out, self._Su):  # pragma: no cover - f2py copied after all
            self._Su = out
        self._absmax = np.maximum(self._absmax,
                                  [math.ldexp(m, -e) for m, e in zip(absmax, self._e)])
        if self.debiased:
            Q = np.add.reduceat(Y * Y, self._starts, axis=1)  # [b, L] row squared norms
            self._A += Q.T @ Q
            self._B += Q.T @ Y
            self._t += Q.sum(0)
        return self

    def _update_torch(self, layers: Any) -> "StreamingCKA":
        """:meth:`update` with the batch and every accumulator on the batch's device (float64):
        the same sums as the CPU path (the full ``S``, not its upper triangle)."""
        import torch

        Xs = _torch_layers(layers, min_n=1)
        absmax = [arrays.max_abs(x, f"layer {i}") for i, x in enumerate(Xs)]
        dims = [x.shape[1] for x in Xs]
        exps = [arrays.exponent(m) for m in absmax]
        dev, f64 = Xs[0].device, torch.float64
        first = self._dims is None
        if first:
            self._dims, self._starts = dims, _starts(dims)
            D, L = sum(dims), len(dims)
            self._e = exps
            self._s = torch.zeros(D, dtype=f64, device=dev)
            self._Su = torch.zeros((D, D), dtype=f64, device=dev)
            self._absmax = np.zeros(L)
            if self.debiased:
                self._A = torch.zeros((L, L), dtype=f64, device=dev)
                self._B = torch.zeros((L, D), dtype=f64, device=dev)
                self._t = torch.zeros(L, dtype=f64, device=dev)
        elif dims != self._dims:
            raise ValueError(f"layer dimensions changed between batches: {self._dims} -> {dims}")
        elif Xs[0].device != self._Su.device:
            raise ValueError(f"this StreamingCKA accumulates on {self._Su.device}; got a batch on {Xs[0].device}")
        else:
            for i, e in enumerate(exps):
                if e > self._e[i] + _STREAM_HEADROOM:
                    self._rescale_layer(i, e - self._e[i])
        Y = torch.empty((Xs[0].shape[0], sum(dims)), dtype=f64, device=dev)
        for x, s0, d, e in zip(Xs, self._starts, dims, self._e):
            Y[:, s0:s0 + d] = arrays.scaled(x, e)
        if first:
            self._shift = Y.mean(0)
        Y -= self._shift
        self.n += Y.shape[0]
        self._s += Y.sum(0)
        self._Su.addmm_(Y.T, Y)
        self._absmax = np.maximum(self._absmax, [math.ldexp(m, -e) for m, e in zip(absmax, self._e)])
        if self.debiased:
            Q = torch.stack([torch.square(Y[:, s0:s0 + d]).sum(1) for s0, d in zip(self._starts, dims)], dim=1)
            self._A += Q.T @ Q
            self._B += Q.T @ Y
            self._t += Q.sum(0)
        return self

    def _on_host(self) -> "StreamingCKA":
        """A CPU copy of a device-accumulated state (float64 numpy accumulators), for :meth:`result`."""
        import copy

        host = copy.copy(self)
        host._torch = False
        host._Su = np.asfortranarray(self._Su.cpu().numpy())
        host._s, host._shift = self._s.cpu().numpy(), self._shift.cpu().numpy()
        if self.debiased:
            host._A, host._B, host._t = (a.cpu().numpy() for a in (self._A, self._B, self._t))
        return host

    def _rescale_layer(self, i: int, k: int) -> None:
        """Divide layer i's part of every accumulator by ``2^k`` (layer i's scale grows)."""
        def div(a, power: int) -> None:
            if isinstance(a, np.ndarray):
                np.ldexp(a, -power * k, out=a)
            else:  # a torch tensor (the device path): an exact power of two, in place
                import torch

                a.copy_(torch.ldexp(a, torch.tensor(-power * k, dtype=a.dtype, device=a.device)))
        blk = slice(self._starts[i], self._starts[i] + self._dims[i])
        div(self._Su[blk, :], 1)  # the diagonal block gets both factors
        div(self._Su[:, blk], 1)
        div(self._shift[blk], 1)
        div(self._s[blk], 1)
        self._absmax[i] = math.ldexp(self._absmax[i], -k)
        if self.debiased:  # q = ||y_i||^2 scales with the square
            div(self._A[i, :], 2)
            div(self._A[:, i], 2)
            div(self._B[i, :], 2)
            div(self._B[:, blk], 1)
            div(self._t[i:i + 1], 2)
        self._e[i] += k

    def _centred_dots(self, mu: np.ndarray) -> np.ndarray:
        """``T_ij = ||C_ij||_F^2`` for ``C = S - n mu mu^T``, one block row of the upper triangle at a time."""
        n, starts, dims = self.n, self._starts, self._dims
        L = len(dims)
        T = np.empty((L, L))
        for i in range(L):
            s0, d = starts[i], dims[i]
            Ci = self._Su[s0:s0 + d, s0:] - n * np.outer(mu[s0:s0 + d], mu[s0:])
            Ci *= Ci
            diag = np.triu(Ci[:, :d])
            row = np.add.reduceat(Ci.sum(axis=0), starts[i:] - s0)
            row[0] = 2.0 * diag.sum() - np.trace(diag)
            T[i, i:] = row
            T[i:, i] = row
        return T

    def result(self) -> np.ndarray:
        """The L x L (debiased) linear CKA matrix of all samples seen so far."""
        if self._dims is None:
            raise ValueError("no batches were added")
        if self._torch:
            return self._on_host().result()
        n = self.n
        metric = "debiased_cka" if self.debiased else "cka"
        _check_samples(n, "the stream", _min_samples(metric), _cka_pair(metric, self._dims))
        mu = self._s / n
        dims = np.array(self._dims)
        var = np.add.reduceat(np.diag(self._Su) - n * mu * mu, self._starts)  # ||X_c||_F^2
        tol = 64 * arrays.EPS * np.sqrt(n * dims) * self._absmax
        bad = np.flatnonzero(np.sqrt(np.maximum(var, 0)) <= tol)
        if bad.size:
            raise ValueError(
                f"layer {int(bad[0])} is constant across samples (zero variance after "
                "centring); CKA is undefined")
        T = self._centred_dots(mu)
        ref = np.diag(T).copy()
        if self.debiased:
            L = len(dims)
            E = np.zeros((sum(self._dims), L))
            for i, (s0, d) in enumerate(zip(self._starts, self._dims)):
                E[s0:s0 + d, i] = 1.0
            Mu = E * mu[:, None]                       # block-diagonal means, [D, L]
            m = (Mu * Mu).sum(0)                       # ||mu_i||^2
            BM = self._B @ Mu                          # sum_n q_in (y_jn . mu_j)
            SMu = _blas.dsymm(1.0, self._Su, Mu, side=0, lower=0)  # S @ Mu from S's triangle
            RR = (self._A - 2 * BM - 2 * BM.T + 4 * Mu.T @ SMu
                  + np.outer(self._t, m) + np.outer(m, self._t) - 3 * n * np.outer(m, m))
            s = self._t - n * m                        # sum_n ||x_in - mu_i||^2
            T = T - n / (n - 2.0) * RR + np.outer(s, s) / ((n - 1.0) * (n - 2.0))
        return _cka_from_dots(T, self.debiased, ref=ref)


def minibatch_cka_matrix(batches: Iterable[Any]) -> np.ndarray:
    """Minibatch CKA *estimator* for all layer pairs (Nguyen, Raghu & Kornblith 2021, §3), not the full-data CKA
    (:class:`StreamingCKA`): ``sum_b HSIC_1(K_ib, K_jb) / sqrt(sum_b HSIC_1(K_ib, K_ib) sum_b HSIC_1(K_jb, K_jb))``,
    linear kernels. ``batches``: iterable of lists of ``[b, d_l]`` (or ``[L, b, d]``), b >= 4. Returns ``[L, L]``."""
    total = ref = exps = None
    for k, batch in enumerate(batches):
        Xs, absmax = arrays.checked_layers(batch, min_n=4)
        if total is not None and len(Xs) != total.shape[0]:
            raise ValueError(f"batch {k} has {len(Xs)} layers, earlier batches {total.shape[0]}")
        b = Xs[0].shape[0]
        new = np.array([arrays.exponent(m) for m in absmax])
        if exps is None:
            exps = new
        elif (new > exps).any():  # HSIC_ij carries 2^-2(e_i + e_j), the self term 2^-4 e_i
            up = np.maximum(new - exps, 0)
            total = np.ldexp(total, -2 * (up[:, None] + up[None, :]))
            ref = np.ldexp(ref, -4 * up)
            exps = exps + up
        Xcs = [arrays.scaled(x, e) for x, e in zip(Xs, exps)]
        for x in Xcs:
            x -= x.mean(0, keepdims=True)
        R = np.stack([np.einsum("nd,nd->n", x, x) for x in Xcs])
        T = _dot_matrix(Xcs)
        H = _debias(T, R, b) / (b * (b - 3.0))
        r = np.diag(T) / (b * (b - 3.0))
        total, ref = (H, r) if total is None else (total + H, ref + r)
    if total is None:
        raise ValueError("no batches were given")
    return _cka_from_dots(total, True, ref=ref)


def minibatch_cka(pairs: Iterable[tuple[Any, Any]]) -> float:
    """Minibatch CKA estimator for one pair, from ``pairs`` of ``(X_b [b, d1], Y_b [b, d2])``
    (:func:`minibatch_cka_matrix`)."""
    M = minibatch_cka_matrix([list(p) for p in pairs])
    if M.shape != (2, 2):
        raise ValueError("minibatch_cka expects (X_b, Y_b) pairs")
    return float(M[0, 1])


# --------------------------------------------------------------------------------------
# Procrustes and CCA
# --------------------------------------------------------------------------------------
def _row_space_coords(Xc: np.ndarray) -> np.ndarray:
    """Coordinates ``X Q`` of Xc in an orthonormal basis of its row space (``X X^T`` kept): ``d <= N``."""
    n, d = Xc.shape
    if d <= n:
        return Xc
    Q, R = np.linalg.qr(Xc.T)  # Xc^T = Q R, Q: [d, n]
    return R.T                  # Xc Q = R^T


def procrustes_similarity(X: Any, Y: Any) -> float:
    """Orthogonal Procrustes similarity ``||X~^T Y~||_*`` in [0, 1], X~, Y~ centred, of unit Frobenius norm; the
    squared distance of Ding et al. (2021, §2) is ``2 - 2 ||X~^T Y~||_*``."""
    X = arrays.as_2d(X, "X")
    Y = arrays.as_2d(Y, "Y")
    arrays.same_n(X, Y)
    Xc = _row_space_coords(arrays.centred(X, "X"))
    Yc = _row_space_coords(arrays.centred(Y, "Y"))
    Xc = Xc / np.linalg.norm(Xc)
    Yc = Yc / np.linalg.norm(Yc)
    return float(min(np.linalg.svd(Xc.T @ Yc, compute_uv=False).sum(), 1.0))


def _orth_basis(Xc: np.ndarray) -> np.ndarray:
    U, s, _ = np.linalg.svd(Xc, full_matrices=False)
    r = int(np.sum(s > s[0] * max(Xc.shape) * arrays.EPS))
    return U[:, :r]


def canonical_correlations(X: Any, Y: Any) -> np.ndarray:
    """Canonical correlations ``rho_1 >= rho_2 >= ...`` of the centred X and Y (Kornblith et al. 2019, Table 1).
    ``ValueError`` if ``rank(X) + rank(Y) > N - 1`` (some would be 1 for any data)."""
    X = arrays.as_2d(X, "X")
    Y = arrays.as_2d(Y, "Y")
    arrays.same_n(X, Y)
    return _cca(arrays.centred(X, "X"), arrays.centred(Y, "Y"))


def _cca(Xc: np.ndarray, Yc: np.ndarray) -> np.ndarray:
    n = Xc.shape[0]
    Qx, Qy = _orth_basis(Xc), _orth_basis(Yc)
    if Qx.shape[1] + Qy.shape[1] > n - 1:
        raise ValueError(
            f"too few samples for CCA: rank(X) + rank(Y) = {Qx.shape[1]} + {Qy.shape[1]} "
            f"> N - 1 = {n - 1}, so canonical correlations are trivially 1; use CKA")
    return np.clip(np.linalg.svd(Qx.T @ Qy, compute_uv=False), 0.0, 1.0)


def cca_r2(X: Any, Y: Any) -> float:
    """``R^2_CCA = sum_i rho_i^2 / min(p_X, p_Y)``, the mean squared canonical correlation (Kornblith et al.
    2019, Table 1)."""
    rho = canonical_correlations(X, Y)
    return float(np.mean(rho**2))


def svcca(X: Any, Y: Any, keep: float = 0.99) -> float:
    """SVCCA (Raghu et al. 2017, §2): mean canonical correlation after keeping each centred representation's top
    singular directions explaining a ``keep`` fraction of the variance."""
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    X = arrays.as_2d(X, "X")
    Y = arrays.as_2d(Y, "Y")
    arrays.same_n(X, Y)

    def reduce(Zc: np.ndarray) -> np.ndarray:
        U, s, _ = np.linalg.svd(Zc, full_matrices=False)
        frac = np.cumsum(s**2) / np.sum(s**2)
        k = int(np.searchsorted(frac, keep - 1e-12) + 1)
        return U[:, :k] * s[:k]

    rho = _cca(reduce(arrays.centred(X, "X")), reduce(arrays.centred(Y, "Y")))
    return float(np.mean(rho))
