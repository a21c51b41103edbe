"""Representation alignment (Imani, Hu & White, "Representation Alignment in Neural Networks", TMLR 2022).

How the labels ``y`` sit in the left singular vectors of a representation ``Phi [n, d]``:

- eq. 2, ``Alignment(Phi, y, tau) = sum_{i: sigma_i >= tau} (u_i^T y)^2``: :func:`prepare`,
  :func:`alignment_curve`, :func:`alignment_area`, :func:`curve_and_area` (one :func:`svd` can be shared);
- Propositions 1 and 2 (§6.1, App. B): :func:`gd_loss_curve`, :func:`prop2_iterations`, :func:`gd_processes`;
- the paper's data: :func:`singular_vector_labels` (§6.2), :func:`circle_dataset` (§4.1), peaks (§7.1);
- representations and linear learning curves (§§3, 4.2, 7.2): :func:`sparse_coding_features`,
  :func:`hog_features`, :func:`rbf_features`, :func:`linear_training_curves`.

Arrays are float64 numpy; invalid input raises ``ValueError``, never a NaN
(see docs/modules.md, ``layersim.measures.alignment``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layersim.measures import arrays

#: The paper's six peaks variables.
PEAKS_VARIABLES = ("A", "B", "C", "D", "E", "F")
#: Centres of the 10 RBF features that encode one peaks variable (Section 7.1).
PEAKS_CENTERS = np.round(np.arange(10) * 0.1, 1)
PEAKS_HEIGHT = 0.5
PEAKS_SD = 0.1


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


def _labels(y, n: int) -> tuple[np.ndarray, bool]:
    """``y`` as ``[n, k]`` float64 and whether it was a single vector."""
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
    :func:`spectrum` and :func:`singular_vector_labels`."""

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


def _svd_of(Phi) -> SVD:
    return Phi if isinstance(Phi, SVD) else svd(Phi)


def spectrum(Phi, y, rtol: float | None = None) -> Spectrum:
    """Singular values of ``Phi`` (an array as given, or an :class:`SVD`) and squared label projections."""
    dec = _svd_of(Phi)
    Y, _ = _labels(y, dec.shape[0])
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
    dec = _svd_of(Phi)
    _, single = _labels(y, dec.shape[0])
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


# ----------------------------------------------------------------------------- Propositions 1-2


def gd_loss_curve(Phi, y, lr: float, steps) -> np.ndarray:
    """Proposition 1: ``||Phi w_t - y||^2`` of gradient descent ``w_{t+1} = w_t - lr Phi^T (Phi w_t - y)``,
    ``w_0 = 0``, from the SVD: ``sum_j (1 - lr sigma_j^2)^{2t} (u_j^T y)^2 + ||Phi w* - y||^2`` (rank-deficient
    ``Phi`` too). ``steps``: an int (``0..steps``) or step indices. Returns ``[T]`` or ``[k, T]``."""
    dec = _svd_of(Phi)
    _, single = _labels(y, dec.shape[0])
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


def gd_loss_reference(Phi, y, lr: float, steps: int) -> np.ndarray:
    """Proposition 1's left-hand side by plain gradient descent (the reference for tests and notebooks)."""
    Phi = np.asarray(Phi, dtype=np.float64)
    Y, single = _labels(y, Phi.shape[0])
    PhiT = np.ascontiguousarray(Phi.T)
    W = np.zeros((Phi.shape[1], Y.shape[1]))
    out = np.empty((Y.shape[1], steps + 1))
    for t in range(steps + 1):
        R = Phi @ W - Y
        out[:, t] = (R ** 2).sum(axis=0)
        W -= lr * (PhiT @ R)
    return out[0] if single else out


def singular_vector_labels(Phi, components: Sequence[Sequence[tuple[int, float]]]) -> np.ndarray:
    """Synthetic labels from left singular vectors of ``Phi`` (§6.2, Figure 9): ``components`` holds one list
    of ``(i, weight)`` per label vector, ``i`` from 1 (``[(10, 1.0)]``: the 10th). Returns ``[n, k]``,
    ``y_k = sum weight * u_i``."""
    U = _svd_of(Phi).U
    out = np.zeros((U.shape[0], len(components)))
    for k, comp in enumerate(components):
        for i, w in comp:
            if not 1 <= i <= U.shape[1]:
                raise ValueError(f"singular vector {i} out of range 1..{U.shape[1]}")
            out[:, k] += w * U[:, i - 1]
    return out


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


# ----------------------------------------------------------------------------- linear models


def linear_training_curves(Phi, y, loss: str = "squared", lr: float = 0.1, steps: int = 1000,
                           Phi_test=None, y_test=None, record: Sequence[int] | None = None) -> dict:
    """Train a zero-initialised linear model on a fixed ``Phi`` by full-batch gradient descent on the mean
    ``"squared"`` or ``"logistic"`` loss (``log(1 + exp(-y phi^T w)) / log 2``, labels +-1); ``y [n]`` or
    ``[n, k]``. Returns a dict: ``steps``, ``train`` (and ``test``) losses, ``train_error``/``test_error``,
    ``w``, ``weight_norm``."""
    if loss not in ("squared", "logistic"):
        raise ValueError(f"loss must be 'squared' or 'logistic', got {loss!r}")
    Phi = np.asarray(Phi, dtype=np.float64)
    Y, single = _labels(y, Phi.shape[0])
    has_test = Phi_test is not None
    if has_test:
        Pt = np.asarray(Phi_test, dtype=np.float64)
        Yt, _ = _labels(y_test, Pt.shape[0])
    rec = np.arange(steps + 1) if record is None else np.unique(np.clip(np.asarray(record, int), 0, steps))
    want = np.zeros(steps + 1, bool)
    want[rec] = True
    n = Phi.shape[0]
    W = np.zeros((Phi.shape[1], Y.shape[1]))

    def loss_of(P, Yv, Wv):
        F = P @ Wv
        if loss == "squared":
            return ((F - Yv) ** 2).mean(axis=0), None
        m = Yv * F
        return np.logaddexp(0.0, -m).mean(axis=0) / np.log(2.0), (m <= 0).mean(axis=0)

    keys = ["train", "weight_norm"] + (["train_error"] if loss == "logistic" else [])
    if has_test:
        keys += ["test"] + (["test_error"] if loss == "logistic" else [])
    hist = {k: [] for k in keys}
    for t in range(steps + 1):
        if want[t]:
            lt, et = loss_of(Phi, Y, W)
            hist["train"].append(lt)
            hist["weight_norm"].append(np.linalg.norm(W, axis=0))
            if loss == "logistic":
                hist["train_error"].append(et)
            if has_test:
                lv, ev = loss_of(Pt, Yt, W)
                hist["test"].append(lv)
                if loss == "logistic":
                    hist["test_error"].append(ev)
        if t == steps:
            break
        F = Phi @ W
        if loss == "squared":
            G = Phi.T @ (2.0 * (F - Y)) / n
        else:
            # d/dF log(1 + exp(-yF)) = -y * sigmoid(-yF)
            G = Phi.T @ (-Y * _sigmoid(-Y * F)) / (n * np.log(2.0))
        W -= lr * G
    out = {"steps": rec, "w": W[:, 0] if single else W}
    for k, v in hist.items():
        arr = np.stack(v, axis=-1)  # [k, T]
        out[k] = arr[0] if single else arr
    return out


def best_linear_curves(Phi, y, lrs: Sequence[float], loss: str = "squared", steps: int = 1000, Phi_test=None,
                       y_test=None, record: Sequence[int] | None = None) -> dict:
    """:func:`linear_training_curves` for every step size in ``lrs``, keeping the lowest final training loss
    (Figure 1), with ``lr`` and ``all`` (``{lr: final loss}``, ``inf`` if diverged). ``y [n]``."""
    best, finals = None, {}
    for lr in lrs:
        with np.errstate(over="ignore", invalid="ignore"):
            out = linear_training_curves(Phi, y, loss=loss, lr=lr, steps=steps, Phi_test=Phi_test,
                                         y_test=y_test, record=record)
        final = float(out["train"][-1])
        finals[float(lr)] = final if np.all(np.isfinite(out["train"])) else float("inf")
        if np.isfinite(finals[float(lr)]) and (best is None or finals[float(lr)] < best[1]):
            best = (out, finals[float(lr)], float(lr))
    if best is None:
        raise FloatingPointError(f"every step size in {list(lrs)} diverged")
    out, _, lr = best
    return {**out, "lr": lr, "all": finals}


def sample_size_errors(Phi, y, Phi_test, y_test, sizes: Sequence[int], lrs: Sequence[float], steps: int = 500,
                       repeats: int = 5, seed: int = 0) -> np.ndarray:
    """Test error (fraction of wrong signs on ``Phi_test``) of :func:`best_linear_curves`'s model trained on
    ``repeats`` label-balanced subsets of each size in ``sizes``, drawn with ``seed``. Returns
    ``[len(sizes), repeats]``: does better alignment also need fewer examples?"""
    Phi, Pt = np.asarray(Phi, dtype=np.float64), np.asarray(Phi_test, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.abs(y) == 1):
        raise ValueError("sample_size_errors expects labels +-1")
    classes = [np.flatnonzero(y < 0), np.flatnonzero(y > 0)]
    sizes = [int(m) for m in sizes]
    if any(m < 2 or m // 2 > min(len(c) for c in classes) for m in sizes):
        raise ValueError(f"sizes must be between 2 and {2 * min(len(c) for c in classes)} (balanced draws), got {sizes}")
    rng = np.random.default_rng(seed)
    out = np.empty((len(sizes), repeats))
    for i, m in enumerate(sizes):
        for r in range(repeats):
            idx = np.concatenate([rng.choice(c, m // 2, replace=False) for c in classes])
            fit = best_linear_curves(Phi[idx], y[idx], lrs, loss="logistic", steps=steps, Phi_test=Pt,
                                     y_test=y_test, record=[steps])
            out[i, r] = float(fit["test_error"][-1])
    return out


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def least_squares_fit(Phi, y, Phi_test=None, y_test=None) -> dict:
    """Closed-form least squares (minimum-norm, ``np.linalg.lstsq``): train (and test) MSE.

    Section 3 checks expressivity this way: a representation is expressive for ``y`` when the
    closed-form solution fits the training data.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    Y, single = _labels(y, Phi.shape[0])
    W = np.linalg.lstsq(Phi, Y, rcond=None)[0]
    out = {"train_mse": ((Phi @ W - Y) ** 2).mean(axis=0), "w": W}
    out["train_sign_accuracy"] = (np.sign(Phi @ W) == np.sign(Y)).mean(axis=0)
    if Phi_test is not None:
        Pt = np.asarray(Phi_test, dtype=np.float64)
        Yt, _ = _labels(y_test, Pt.shape[0])
        out["test_mse"] = ((Pt @ W - Yt) ** 2).mean(axis=0)
    if single:
        out = {k: (v[..., 0] if k == "w" else v[0]) for k, v in out.items()}
    return out


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


# ----------------------------------------------------------------------------- fixed representations


def rbf_features(X, centers, gamma: float) -> np.ndarray:
    """RBF kernel features ``exp(-gamma ||x - c||^2)`` ``[n, n_centers]``; a bandwidth ``b`` is
    ``gamma = 1 / (2 b^2)``."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    C = np.asarray(centers, dtype=np.float64).reshape(len(centers), -1)
    d2 = (X ** 2).sum(1)[:, None] + (C ** 2).sum(1)[None, :] - 2.0 * X @ C.T
    return np.exp(-gamma * np.maximum(d2, 0.0))


def hog_features(images, orientations: int = 9, pixels_per_cell=(8, 8), cells_per_block=(2, 2)) -> np.ndarray:
    """HOG descriptors (scikit-image) of grey images ``[n, H, W]``: ``[n, n_features]``; §7.2: 9
    orientations, 8 x 8 pixels per cell, 2 x 2 cells per block."""
    from skimage.feature import hog

    images = np.asarray(images, dtype=np.float64)
    return np.stack([hog(im, orientations=orientations, pixels_per_cell=tuple(pixels_per_cell),
                         cells_per_block=tuple(cells_per_block), feature_vector=True) for im in images])


def sparse_coding_features(X_fit, n_components: int, alpha: float = 1.0, seed: int = 0, others=(),
                           batch_size: int = 256, max_iter: int = 20, fit_algorithm: str = "cd",
                           transform_algorithm: str = "lasso_cd") -> list[np.ndarray]:
    """Sparse codes from dictionary learning (Mairal et al. 2009; scikit-learn, l1 penalty ``alpha``): the
    dictionary fit on ``X_fit``; returns ``[X_fit codes, *codes of others]``."""
    import warnings

    from sklearn.decomposition import MiniBatchDictionaryLearning
    from sklearn.exceptions import ConvergenceWarning

    X_fit = np.asarray(X_fit, dtype=np.float64).reshape(len(X_fit), -1)
    dl = MiniBatchDictionaryLearning(n_components=n_components, alpha=alpha, batch_size=batch_size,
                                     max_iter=max_iter, random_state=seed, fit_algorithm=fit_algorithm,
                                     transform_algorithm=transform_algorithm, transform_alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dl.fit(X_fit)
        return [dl.transform(X_fit)] + [dl.transform(np.asarray(o, dtype=np.float64).reshape(len(o), -1))
                                        for o in others]
