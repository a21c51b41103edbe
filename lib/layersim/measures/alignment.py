"""Representation alignment (Imani, Hu & White, "Representation Alignment in Neural Networks", TMLR 2022).

How the labels ``y`` sit in the left singular vectors of a representation ``Phi [n, d]``:

- eq. 2, ``Alignment(Phi, y, tau) = sum_{i: sigma_i >= tau} (u_i^T y)^2``: :func:`prepare`,
  :func:`alignment_curve`, :func:`alignment_area`, :func:`curve_and_area` (one :func:`svd` can be shared), and per
  layer over pairs of classes (:func:`layer_areas`);
- Propositions 1 and 2 (§6.1, App. B): :func:`gd_loss_curve`, :func:`prop2_iterations`, :func:`gd_processes`,
  :func:`steps_to_reach`.

Arrays are float64 numpy; invalid input raises ``ValueError``, never a NaN
(see docs/modules.md, ``layersim.measures.alignment``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layersim.measures import arrays


# ----------------------------------------------------------------------------- labels, Phi


def binary_targets(t) -> np.ndarray:
    """The paper's label vector for a binary task: ``y = 2t - 1`` (t in {0, 1} -> y in {-1, +1})."""
    t = np.asarray(t, dtype=np.float64)
    if not np.all((t == 0) | (t == 1)):
        raise ValueError("binary_targets expects 0/1 labels")
    return 2.0 * t - 1.0


def center_targets(y, axis: int = 0) -> np.ndarray:
    """Regression targets with their mean removed (along samples, ``axis=0``)."""
    y = np.asarray(y, dtype=np.float64)
    return y - y.mean(axis=axis, keepdims=True)


def prepare(Phi, bias: bool = True, normalize: bool = True) -> np.ndarray:
    """The paper's form of a representation, float64 ``[n, d(+1)]``: ``bias`` appends a constant-1 column
    (§2), then ``normalize`` scales every row to unit length (§4, ``||x_i|| <= 1``), as the authors' demo does."""
    Phi = arrays.to_numpy(Phi, name="Phi")
    if Phi.ndim == 0:
        raise ValueError("Phi must be [n, d] (or [n, ...], flattened per sample), got a scalar")
    if Phi.ndim != 2:
        Phi = Phi.reshape(Phi.shape[0], int(np.prod(Phi.shape[1:])))
    Phi = _matrix(Phi)
    if bias:
        Phi = np.hstack([Phi, np.ones((Phi.shape[0], 1))])
    if normalize:
        # each row divided by a power of two near its largest entry first (exact), so that its norm
        # neither overflows (entries ~1e200) nor underflows; the unit rows do not change
        rowmax = np.abs(Phi).max(axis=1, keepdims=True)
        Phi = np.ldexp(Phi, -np.frexp(rowmax)[1])
        norms = np.linalg.norm(Phi, axis=1, keepdims=True)
        Phi = Phi / np.where(norms > 0, norms, 1.0)
    return Phi


def _matrix(Phi) -> np.ndarray:
    """``Phi`` as a finite float64 ``[n, d]`` array with ``n, d >= 1``, else one ValueError."""
    Phi = arrays.to_numpy(Phi, name="Phi")
    if Phi.ndim != 2:
        raise ValueError(f"Phi must be 2-d [n, d], got shape {Phi.shape}")
    if Phi.shape[0] < 1 or Phi.shape[1] < 1:
        raise ValueError(f"Phi is empty (shape {Phi.shape}): need at least one sample and one feature")
    if not np.all(np.isfinite(Phi)):
        raise ValueError("Phi has NaN or inf entries")
    return Phi


def label_matrix(y, n: int) -> tuple[np.ndarray, bool]:
    """``y`` as ``[n, k]`` float64 and whether it was a single vector ``[n]``; ``ValueError`` for another length or
    NaN/inf."""
    y = arrays.to_numpy(y, name="y")
    single = y.ndim == 1
    Y = y[:, None] if single else y
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"y must be [n] or [n, k] with n = {n}, got shape {y.shape}")
    if not np.all(np.isfinite(Y)):
        raise ValueError("y has NaN or inf entries")
    return Y, single


@dataclass
class Spectrum:
    """Thin SVD pieces of ``Phi`` against labels ``Y [n, k]``: ``sigma [r]`` descending, ``proj2 [k, r] =
    (u_i^T y)^2``, ``outside [k]`` (``||y||^2`` outside the thin U's span), ``norm2 [k] = ||y||^2``, ``rank``."""

    sigma: np.ndarray
    proj2: np.ndarray
    outside: np.ndarray
    norm2: np.ndarray
    rank: int


@dataclass
class SVD:
    """A thin SVD of a representation, ``Phi = U diag(sigma) V^T`` (``V`` not kept), computed once by
    :func:`svd` and accepted in place of ``Phi`` by :func:`alignment_curve`, :func:`gd_loss_curve`,
    :func:`spectrum` and :func:`layersim.inputs.synthetic.singular_vector_labels`."""

    U: np.ndarray
    sigma: np.ndarray
    shape: tuple


def svd(Phi, gram: bool = False) -> SVD:
    """Thin SVD of ``Phi`` as given (call :func:`prepare` first), to reuse across calls. ``gram=True``: for a
    wide ``Phi`` (``d > n``), from the eigendecomposition of ``Phi Phi^T`` instead (faster; ``U`` a full
    ``n x n`` basis, extra directions with ``sigma = 0``)."""
    Phi = _matrix(Phi)
    n, d = Phi.shape
    if gram and d > n:
        return _gram_svd(Phi)
    try:
        U, s, _ = np.linalg.svd(Phi, full_matrices=False)
    except np.linalg.LinAlgError:
        # LAPACK's divide-and-conquer SVD fails on (near) rank-one matrices when the CPU flushes
        # denormal numbers to zero (torch.set_flush_denormal(True), set by
        # layersim.train.training.cpu_for_small_models): e.g. a token that is the same in every sample.
        # The Gram route gives the same curve (its extra directions have sigma ~ 0).
        return _gram_svd(Phi)
    return SVD(U=U, sigma=s, shape=Phi.shape)


def _gram_svd(Phi: np.ndarray) -> SVD:
    """Left singular vectors and values of ``Phi [n, d]`` from the eigendecomposition of ``Phi Phi^T``."""
    lam, U = np.linalg.eigh(Phi @ Phi.T)
    order = np.argsort(lam)[::-1]
    return SVD(U=U[:, order], sigma=np.sqrt(np.maximum(lam[order], 0.0)), shape=(Phi.shape[0], Phi.shape[0]))


def as_svd(Phi) -> SVD:
    """``Phi`` itself if it is an :class:`SVD`, else :func:`svd` of it."""
    return Phi if isinstance(Phi, SVD) else svd(Phi)


def spectrum(Phi, y, rtol: float | None = None) -> Spectrum:
    """Singular values of ``Phi`` (an array as given, or an :class:`SVD`) and squared label projections."""
    dec = as_svd(Phi)
    Y, _ = label_matrix(y, dec.shape[0])
    U, s = dec.U, dec.sigma
    P = U.T @ Y  # [r, k]
    proj2 = (P ** 2).T
    norm2 = (Y ** 2).sum(axis=0)
    outside = np.maximum(norm2 - proj2.sum(axis=1), 0.0)
    tol = (rtol if rtol is not None else max(dec.shape) * np.finfo(float).eps) * (s[0] if len(s) else 0.0)
    return Spectrum(sigma=s, proj2=proj2, outside=outside, norm2=norm2, rank=int(np.sum(s > tol)))


def alignment_curve(Phi, y, thresholds) -> np.ndarray:
    """Eq. 2, ``Alignment(Phi, y, tau) = sum_{i: sigma_i >= tau} (u_i^T y)^2``, at every threshold.

    ``Phi`` as given (or its :class:`SVD`); ``y`` ``[n]`` or ``[n, k]``; returns ``[T]`` or ``[k, T]``. All n
    left singular vectors count (``sigma = 0`` beyond the rank): ``||y||^2`` at ``tau <= 0``, non-increasing."""
    dec = as_svd(Phi)
    _, single = label_matrix(y, dec.shape[0])
    sp = spectrum(dec, y)
    tau = _thresholds(thresholds, 1)
    # number of singular values >= tau (sigma is descending)
    count = np.searchsorted(-sp.sigma, -tau, side="right")
    csum = np.concatenate([np.zeros((sp.proj2.shape[0], 1)), np.cumsum(sp.proj2, axis=1)], axis=1)
    out = csum[:, count] + sp.outside[:, None] * (tau <= 0)[None, :]
    return out[0] if single else out


def alignment_loop(Phi, y, thresholds) -> np.ndarray:
    """Eq. 2 by a plain loop over a full SVD, one label vector: the reference for the tests."""
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    U, s, _ = np.linalg.svd(Phi, full_matrices=True)
    sig = np.zeros(U.shape[1])
    sig[: len(s)] = s
    out = []
    for tau in thresholds:
        total = 0.0
        for i in range(U.shape[1]):
            if sig[i] >= tau:
                total += float(U[:, i] @ y) ** 2
        out.append(total)
    return np.array(out)


def default_thresholds(sigma_max: float | None = None, num: int = 62) -> np.ndarray:
    """The demo's grid (62 thresholds from 0 to 30), or ``num`` from 0 to ``sigma_max``."""
    return np.linspace(0.0, 30.0 if sigma_max is None else float(sigma_max), num)


def thresholds_for(n: int, num: int = 62) -> np.ndarray:
    """The authors' demo grid (:func:`default_thresholds`: 0 to 30, made for 1000 unit-length rows)
    scaled by ``sqrt(n / 1000)``: with ``n`` unit rows every singular value is at most ``sqrt(n)``."""
    return default_thresholds(num=num) * np.sqrt(n / 1000.0)


def alignment_area(curve, thresholds) -> np.ndarray:
    """Trapezoidal mean of an alignment curve over its ``thresholds``, as a fraction of its value at the first
    (1: all of ``||y||^2`` survives every threshold)."""
    curve = arrays.to_numpy(curve, name="curve")
    t = _thresholds(thresholds, 2)
    if curve.ndim < 1 or curve.shape[-1] != len(t) or not np.all(np.isfinite(curve)):
        raise ValueError(f"curve must be finite with one value per threshold (last axis {len(t)}), "
                         f"got shape {curve.shape}")
    width = t[-1] - t[0]
    if width == 0:
        raise ValueError(f"the thresholds span no range (first = last = {t[0]:g}): the area is a mean "
                         "over their range")
    if np.any(curve[..., 0] == 0):
        raise ValueError("the curve is 0 at the first threshold (labels y = 0, or no singular value "
                         "reaches that threshold): its area as a fraction of that value is undefined")
    area = np.sum((curve[..., 1:] + curve[..., :-1]) * np.diff(t) / 2.0, axis=-1)
    return area / (width * curve[..., 0])


def _thresholds(thresholds, least: int) -> np.ndarray:
    """``thresholds`` as a finite 1-d float64 array of at least ``least`` values, else ValueError."""
    t = arrays.to_numpy(thresholds, name="thresholds").ravel()
    if len(t) < least or not np.all(np.isfinite(t)):
        raise ValueError(f"thresholds must be at least {least} finite number(s), got {len(t)} "
                         f"value(s){'' if np.all(np.isfinite(t)) else ' with NaN or inf'}")
    return t


def curve_and_area(Phi, y, thresholds, relative: bool = False, gram: bool = False):
    """Eq. 2 on the paper's form of ``Phi`` (:func:`prepare`; an :class:`SVD` is used as given), at every
    threshold, and its :func:`alignment_area`.

    ``y [n]``: returns a curve ``[T]`` and a float; ``y [n, k]``: ``[k, T]`` and ``[k]``. ``relative``: each curve
    divided by ``||y||^2``. ``gram``: as in :func:`svd`."""
    dec = Phi if isinstance(Phi, SVD) else svd(prepare(Phi), gram=gram)
    curve = alignment_curve(dec, y, thresholds)
    if relative:
        Y = arrays.to_numpy(y, name="y")
        norm2 = float(Y @ Y) if Y.ndim == 1 else (Y ** 2).sum(axis=0)[:, None]
        if np.any(norm2 == 0):
            raise ValueError("relative=True divides by ||y||^2, but a label vector y is 0")
        curve = curve / norm2
    area = alignment_area(curve, thresholds)
    return curve, (float(area) if np.ndim(area) == 0 else area)


def class_pairs(labels, most: int = 45, seed: int = 0) -> list[tuple[int, int]]:
    """The class pairs ``(a, b)``, ``a < b``, with at least two samples each: all up to ``most`` (45 = every pair of
    ten classes), else ``most`` drawn from ``seed``. ``ValueError`` when there is none."""
    classes, counts = np.unique(labels, return_counts=True)
    usable = classes[counts >= 2]
    pairs = [(int(a), int(b)) for i, a in enumerate(usable) for b in usable[i + 1:]]
    if not pairs:
        raise ValueError("the pairwise alignment area needs at least two classes in labels, with at least two "
                         "samples each")
    if len(pairs) > most:
        keep = np.sort(np.random.default_rng(seed).choice(len(pairs), most, replace=False))
        pairs = [pairs[i] for i in keep]
    return pairs


def layer_areas(layers, labels, thresholds=None, num: int = 62, most_pairs: int = 45) -> np.ndarray:
    """Area under the alignment curve (eq. 2) of every layer of ``layers [L, N, d]``, ``[L]``, on the binary task
    ``y = 2t - 1``: two classes on all samples; K > 2 classes, the mean over :func:`class_pairs` (at most
    ``most_pairs``) of each pair's area on its own samples (§5's target tasks). ``thresholds``: default
    :func:`thresholds_for` of each task's size."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if len(classes) < 2:
        raise ValueError(f"the pairwise alignment area needs at least two classes in labels, got {len(classes)} "
                         f"among N={len(labels)} samples")
    if any(np.ndim(h) != 2 or len(h) != len(labels) for h in layers):
        raise ValueError(f"labels has {len(labels)} entries; the layers' shapes are {[np.shape(h) for h in layers]}: "
                         "give one [N, d] array per layer, N samples (one per label)")
    pairs = [(int(classes[0]), int(classes[1]))] if len(classes) == 2 else class_pairs(labels, most_pairs)
    areas = np.zeros((len(pairs), len(layers)))
    for k, (a, b) in enumerate(pairs):
        rows = np.flatnonzero((labels == a) | (labels == b))
        y = binary_targets(labels[rows] == b)
        tau = thresholds_for(len(rows), num) if thresholds is None else thresholds
        areas[k] = [curve_and_area(h[rows], y, tau)[1] for h in layers]
    return areas.mean(axis=0)


# ----------------------------------------------------------------------------- Propositions 1-2


def gd_loss_curve(Phi, y, lr: float, steps) -> np.ndarray:
    """Proposition 1: ``||Phi w_t - y||^2`` of gradient descent ``w_{t+1} = w_t - lr Phi^T (Phi w_t - y)``,
    ``w_0 = 0``, from the SVD: ``sum_j (1 - lr sigma_j^2)^{2t} (u_j^T y)^2 + ||Phi w* - y||^2`` (rank-deficient
    ``Phi`` too). ``steps``: an int (``0..steps``) or step indices. Returns ``[T]`` or ``[k, T]``."""
    dec = as_svd(Phi)
    _, single = label_matrix(y, dec.shape[0])
    sp = spectrum(dec, y)
    r = sp.rank
    s, p = sp.sigma[:r], sp.proj2[:, :r]
    residual = sp.outside + sp.proj2[:, r:].sum(axis=1)
    t = np.arange(int(steps) + 1, dtype=np.float64) if np.ndim(steps) == 0 else np.asarray(steps, np.float64)
    base = 1.0 - lr * s[:, None] ** 2
    out = np.empty((p.shape[0], len(t)))
    for i in range(0, len(t), 2048):  # chunks keep the [r, T] decay matrix small
        out[:, i:i + 2048] = p @ base ** (2.0 * t[None, i:i + 2048]) + residual[:, None]
    return out[0] if single else out


def gd_processes(sigma, y_proj, lr: float, t) -> tuple[np.ndarray, np.ndarray]:
    """§6.1's fast and slow processes (Figure 8): ``w_i^V(t) = (1 - (1 - lr sigma_i^2)^t) y_i^U / sigma_i`` and its
    loss share ``(1 - lr sigma_i^2)^{2t} (y_i^U)^2``. ``sigma [r]``, ``y_proj [r]``, ``t`` scalar or ``[T]``;
    returns ``(w, loss_share)``, ``[r]`` or ``[T, r]``."""
    s = np.asarray(sigma, dtype=np.float64)
    p = np.asarray(y_proj, dtype=np.float64)
    tt = np.asarray(t, dtype=np.float64)[..., None]
    decay = (1.0 - lr * s ** 2) ** tt
    return (1.0 - decay) * p / s, decay ** 2 * p ** 2


def prop2_iterations(delta, omega, lr: float, tau: float) -> np.ndarray:
    """Proposition 2 (App. B): at most ``-log(1 - omega/delta) / (2 lr tau^2)`` iterations to reduce the loss
    by ``omega < delta = Alignment(Phi, y, tau)``, ``0 < tau <= sigma_max``, ``lr < sigma_max^-2``."""
    delta = np.asarray(delta, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    if tau <= 0:
        raise ValueError("Proposition 2 needs tau > 0")
    if np.any(omega < 0) or np.any(omega >= delta):
        raise ValueError("Proposition 2 needs 0 <= omega < delta")
    return -np.log1p(-omega / delta) / (2.0 * lr * tau ** 2)


def steps_to_reach(curve, level) -> np.ndarray:
    """First index at which a (loss) curve is ``<= level``; ``len(curve)`` where it never is.

    ``curve`` [T] or [k, T], ``level`` a scalar or [k].
    """
    curve = np.asarray(curve, dtype=np.float64)
    single = curve.ndim == 1
    C = curve[None] if single else curve
    lv = np.broadcast_to(np.asarray(level, dtype=np.float64), (C.shape[0],))
    below = C <= lv[:, None]
    idx = np.where(below.any(axis=1), below.argmax(axis=1), C.shape[1])
    return idx[0] if single else idx
