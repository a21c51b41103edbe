"""Block Redundancy and Redundant Blocks Approximation (the redundancy paper, eq. 1 and §3).

- **Block Redundancy** (eq. 1): ``BR_i = -MSE(h_i, h_{i-1})`` between consecutive block outputs
  (:func:`block_redundancy`); higher (closer to 0) = block ``i`` changes less.
- **RBA** (§3): block ``j``'s output approximated from block ``i``'s by a linear map ``T`` minimising
  ``||X T - Y||_F^2`` (:class:`LeastSquares`, streamed TSQR in float64); ``layersim.nets.linear_maps`` fits it
  on a model, ``layersim.nets.surgery.replace`` puts it in place of the blocks.

Blocks count 1..L; :func:`paper_span` converts the paper's 0-based spans (see docs/modules.md,
``layersim.measures.redundancy``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layersim.measures import arrays

__all__ = [
    "LeastSquares",
    "block_redundancy",
    "fit_linear_map",
    "paper_span",
    "rba_heldout_error",
    "relative_change",
    "representation_mse",
    "spread",
]


# ----------------------------------------------------------------------------- Block Redundancy


def block_redundancy(layers: Any) -> np.ndarray:
    """Block Redundancy (redundancy paper, eq. 1): ``BR_i = -MSE(h_i, h_{i-1})``, the mean over samples and
    features of ``(h_i - h_{i-1})^2`` (uncentred; scales as c^2).

    ``layers``: outputs of blocks 0..L-1, a list of ``[N, d]`` or ``[L, N, d]``. Returns ``np.ndarray [L-1]``,
    entry i-1 the BR of block i; ``ValueError`` for a BR beyond float64's range."""
    Xs, absmax = arrays.checked_layers(layers, min_n=1)
    arrays.same_dims(Xs)
    if len(Xs) < 2:
        raise ValueError("block_redundancy needs at least 2 layers")
    out = []
    for i in range(1, len(Xs)):
        e = arrays.exponent(max(absmax[i - 1], absmax[i]))
        mse = np.mean((arrays.scaled(Xs[i], e) - arrays.scaled(Xs[i - 1], e)) ** 2)
        out.append(-arrays.unscaled(mse, 2 * e, f"the MSE between layers {i - 1} and {i}"))
    return np.array(out)


# ----------------------------------------------------------------------------- the least-squares map


def paper_span(i: int, j: int) -> tuple[int, int]:
    """The paper's span ``i j`` (Tables 1, 2, 5-7; 0-based block outputs) as the ``(first, last)`` blocks of
    ``layersim.nets.surgery`` (1-based, inclusive): ``(i + 2, j + 1)``; ``paper_span(2, 3) == (4, 4)``."""
    if not (isinstance(i, (int, np.integer)) and isinstance(j, (int, np.integer))) or i < 0 or j <= i:
        raise ValueError(f"a paper span is two block outputs 0 <= i < j, got {i!r}, {j!r}")
    return int(i) + 2, int(j) + 1


class LeastSquares:
    """``min_T ||X T - Y||_F^2`` accumulated over row batches of ``X [n, d_in]``, ``Y [n, d_out]`` (TSQR, float64).

    :meth:`update` folds a batch in; :meth:`solve` returns the minimum-norm solution, equal to ``lstsq`` on all
    rows. ``bias=True`` fits an intercept (the solution's last row). ``ridge=λ > 0`` adds ``λ ||T||^2``
    (intercept not penalised)."""

    def __init__(self, bias: bool = False):
        self.bias = bool(bias)
        self.R: np.ndarray | None = None
        self.QtY: np.ndarray | None = None
        self.n = 0  # rows seen

    def _prepare(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        X, Y = arrays.to_numpy(X, name="X"), arrays.to_numpy(Y, name="Y")  # float64; complex or non-numeric: ValueError
        if X.ndim != 2 or Y.ndim != 2 or len(X) != len(Y):
            raise ValueError(f"X [n, d_in] and Y [n, d_out] must be 2-d with the same rows, got {X.shape}, {Y.shape}")
        if not (np.isfinite(X).all() and np.isfinite(Y).all()):
            raise ValueError("X and Y must be finite (NaN or inf found)")
        if self.bias:
            X = np.hstack([X, np.ones((len(X), 1))])
        if self.R is not None and (X.shape[1] != self.R.shape[1] or Y.shape[1] != self.QtY.shape[1]):
            raise ValueError(f"batch of widths {X.shape[1] - self.bias} -> {Y.shape[1]} after "
                             f"{self.R.shape[1] - self.bias} -> {self.QtY.shape[1]}")
        return X, Y

    def update(self, X: Any, Y: Any) -> LeastSquares:
        """Fold the rows of ``X [b, d_in]`` and ``Y [b, d_out]`` in; returns self."""
        X, Y = self._prepare(X, Y)
        if len(X) == 0:
            return self
        self.n += len(X)
        if self.R is not None:
            X, Y = np.vstack([self.R, X]), np.vstack([self.QtY, Y])
        with np.errstate(over="ignore", invalid="ignore"):  # checked just below
            Q, R = np.linalg.qr(X, mode="reduced")
            QtY = Q.T @ Y
        if not (np.isfinite(R).all() and np.isfinite(QtY).all()):
            raise ValueError(f"X and Y are too large for float64 here (max |X| = {np.abs(X).max():.3g}, "
                             f"max |Y| = {np.abs(Y).max():.3g}): rescale them")
        self.R, self.QtY = R, QtY
        return self

    def solve(self, ridge: float = 0.0, rcond: float | None = None) -> np.ndarray:
        """The map ``T [d_in (+1), d_out]`` (float64); ValueError before any row was seen, or if the map
        is beyond float64's range."""
        if self.R is None:
            raise ValueError("no rows: call update() first")
        if not (np.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
        R, QtY = self.R, self.QtY
        if ridge > 0:
            d = R.shape[1]
            pen = np.sqrt(ridge) * np.eye(d)
            if self.bias:
                pen = pen[:-1]
            R = np.vstack([R, pen])
            QtY = np.vstack([QtY, np.zeros((len(pen), QtY.shape[1]))])
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                T = np.linalg.lstsq(R, QtY, rcond=rcond)[0]
        except np.linalg.LinAlgError as exc:
            raise ValueError(f"the least-squares map cannot be computed in float64 ({exc})") from None
        if not np.isfinite(T).all():
            raise ValueError("the least-squares map is beyond the range of float64 (X is nearly 0 next to Y)")
        return T


def fit_linear_map(X: Any, Y: Any, bias: bool = False, ridge: float = 0.0) -> np.ndarray:
    """``argmin_T ||X T - Y||_F^2`` in one call (:class:`LeastSquares` on one batch)."""
    return LeastSquares(bias=bias).update(X, Y).solve(ridge=ridge)


def rba_heldout_error(layers: Any) -> np.ndarray:
    """Held-out ``1 - R^2`` of the affine least-squares map from every layer to the next (RBA, §3, one token per
    sample), ``[L-1]`` for ``layers [L, N, d]``: fitted on every other sample, scored on the rest (residual sum of
    squares over the centred sum of squares); 0 = the block is affine here, 1 = no better than the mean."""
    h = arrays.as_layers(layers, min_n=1)  # float64
    n = h[0].shape[0]
    if n < 4:
        raise ValueError(f"the held-out RBA error needs at least 4 samples (half to fit, half to score), got {n}")
    fit, test = np.arange(0, n, 2), np.arange(1, n, 2)
    out = []
    for i in range(1, len(h)):
        X, Y = h[i - 1], h[i]
        T = fit_linear_map(X[fit], Y[fit], bias=True)
        pred = X[test] @ T[:-1] + T[-1]
        resid = Y[test] - pred
        centred = Y[test] - Y[test].mean(axis=0)
        out.append(float((resid ** 2).sum() / max((centred ** 2).sum(), np.finfo(float).tiny)))
    return np.array(out)


# ----------------------------------------------------------------------------- RBA on a model


def representation_mse(a: Any, b: Any) -> float:
    """Mean over samples and features of ``(a - b)^2`` between two ``[N, d]`` representations (the paper's
    Figs. 3, 7), float64; ``ValueError`` for mismatched shapes or non-finite values."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"two [N, d] representations of one shape are needed, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("representations must be finite (NaN or inf found)")
    return float(np.mean((a - b) ** 2))


def spread(reference: Any) -> float:
    """Mean squared deviation of an ``[N, d]`` representation from its mean (variance per feature, averaged):
    what :func:`relative_change` divides by."""
    ref = np.asarray(reference, dtype=np.float64)
    return float(np.mean((ref - ref.mean(axis=0)) ** 2))


def relative_change(reference: Any, changed: Any) -> float:
    """:func:`representation_mse` of ``changed`` against ``reference`` divided by :func:`spread` of
    ``reference``: 0 = unchanged, 1 = as far as the samples are from their mean; comparable across widths
    and scales. ``ValueError`` for a constant ``reference``."""
    ref = np.asarray(reference, dtype=np.float64)
    mse = representation_mse(ref, changed)
    var = spread(ref)
    if var <= np.finfo(float).tiny:
        raise ValueError("the reference representation is the same for every sample: a relative change is undefined")
    return mse / var


