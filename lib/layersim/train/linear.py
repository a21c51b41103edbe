"""Linear models trained on a fixed representation ``Phi [n, d]`` (the alignment paper, Sections 3, 6 and 7): plain
gradient descent on the paper's unnormalised squared loss (:func:`gd_loss_reference`, Proposition 1's left-hand side),
full-batch learning curves on the mean squared or logistic loss (:func:`linear_training_curves`,
:func:`best_linear_curves`), test errors after small training sets (:func:`sample_size_errors`) and closed-form least
squares (:func:`least_squares_fit`). Arrays are float64 numpy (see docs/modules.md, ``layersim.train.linear``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layersim.measures import alignment


def gd_loss_reference(Phi, y, lr: float, steps: int) -> np.ndarray:
    """Proposition 1's left-hand side, ``||Phi w_t - y||^2`` for ``t = 0..steps``, by plain gradient descent
    ``w_{t+1} = w_t - lr Phi^T (Phi w_t - y)`` from ``w_0 = 0`` (the reference for
    :func:`layersim.measures.alignment.gd_loss_curve`). Returns ``[steps + 1]`` or ``[k, steps + 1]``."""
    Phi = np.asarray(Phi, dtype=np.float64)
    Y, single = alignment.label_matrix(y, Phi.shape[0])
    PhiT = np.ascontiguousarray(Phi.T)
    W = np.zeros((Phi.shape[1], Y.shape[1]))
    out = np.empty((Y.shape[1], steps + 1))
    for t in range(steps + 1):
        R = Phi @ W - Y
        out[:, t] = (R ** 2).sum(axis=0)
        W -= lr * (PhiT @ R)
    return out[0] if single else out


def linear_training_curves(Phi, y, loss: str = "squared", lr: float = 0.1, steps: int = 1000,
                           Phi_test=None, y_test=None, record: Sequence[int] | None = None) -> dict:
    """Train a zero-initialised linear model on a fixed ``Phi`` by full-batch gradient descent on the mean
    ``"squared"`` or ``"logistic"`` loss (``log(1 + exp(-y phi^T w)) / log 2``, labels +-1); ``y [n]`` or
    ``[n, k]``. Returns a dict: ``steps``, ``train`` (and ``test``) losses, ``train_error``/``test_error``,
    ``w``, ``weight_norm``."""
    if loss not in ("squared", "logistic"):
        raise ValueError(f"loss must be 'squared' or 'logistic', got {loss!r}")
    Phi = np.asarray(Phi, dtype=np.float64)
    Y, single = alignment.label_matrix(y, Phi.shape[0])
    has_test = Phi_test is not None
    if has_test:
        Pt = np.asarray(Phi_test, dtype=np.float64)
        Yt, _ = alignment.label_matrix(y_test, Pt.shape[0])
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
    Y, single = alignment.label_matrix(y, Phi.shape[0])
    W = np.linalg.lstsq(Phi, Y, rcond=None)[0]
    out = {"train_mse": ((Phi @ W - Y) ** 2).mean(axis=0), "w": W}
    out["train_sign_accuracy"] = (np.sign(Phi @ W) == np.sign(Y)).mean(axis=0)
    if Phi_test is not None:
        Pt = np.asarray(Phi_test, dtype=np.float64)
        Yt, _ = alignment.label_matrix(y_test, Pt.shape[0])
        out["test_mse"] = ((Pt @ W - Yt) ** 2).mean(axis=0)
    if single:
        out = {k: (v[..., 0] if k == "w" else v[0]) for k, v in out.items()}
    return out
