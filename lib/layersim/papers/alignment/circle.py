"""The alignment paper's two-dimensional example (Imani, Hu & White, TMLR, Section 4.1, Figure 4).

Unit-length points on a circle in two clusters (:func:`layersim.measures.alignment.circle_dataset`) and two
linearly separable labellings: along the first right singular vector ``v_1`` (the two clusters are the
classes) or along ``v_2`` (every cluster split across the line). The paper: the first labelling is better
aligned (eq. 2) at every threshold between ``sigma_2`` and ``sigma_1``, and a linear model learns it faster
(Section 6, Proposition 1).

* :func:`oriented_svd` -- the thin SVD with each ``v_i`` turned towards a given direction (singular vectors
  have no sign); :func:`singular_value_draws` -- the singular values of repeated draws of the points, and
  their mean and spread (:func:`singular_value_spread`);
* :func:`two_labellings` -- eq. 2's curves of the label vectors on a threshold grid, their projections
  ``(u_i^T y)^2`` and the alignment between the two singular values;
* :func:`convergence` -- gradient descent on the squared loss (Proposition 1's closed form, checked against
  plain gradient descent; the reducible part and the steps to remove 90 % of it) and on the logistic loss;
* :func:`labellings_figure`, :func:`alignment_figure`, :func:`learning_curves_figure` -- Figure 4 and the
  notebook's two further figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.measures import alignment as al
from layersim.notebook import plotting

#: the colour of each labelling (along v_1, along v_2) in every figure
COLORS = ("tab:red", "tab:blue")


def oriented_svd(Phi, direction) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD ``Phi = U diag(sigma) V^T`` (``numpy.linalg.svd``) with the sign of every pair ``(u_i, v_i)``
    chosen so that ``v_i . direction >= 0`` (Figure 4 draws ``v_1`` towards the ``pi/4`` cluster). Returns
    ``(U [n, r], sigma [r], Vt [r, d])``."""
    Phi = np.asarray(Phi, dtype=np.float64)
    direction = np.asarray(direction, dtype=np.float64)
    if Phi.ndim != 2 or direction.shape != (Phi.shape[1],):
        raise ValueError(f"need Phi [n, d] and a direction [d], got shapes {Phi.shape} and {direction.shape}")
    U, sigma, Vt = np.linalg.svd(Phi, full_matrices=False)
    flip = np.sign(Vt @ direction)
    flip[flip == 0] = 1
    return U * flip, sigma, Vt * flip[:, None]


def singular_value_draws(n: int, repeats: int, spread: float, seed: int = 0) -> np.ndarray:
    """The two singular values of ``repeats`` independent draws of ``n`` circle points
    (:func:`layersim.measures.alignment.circle_dataset` with angular s.d. ``spread``; draw ``r`` with seed
    ``seed + r``): ``[repeats, 2]``. For unit rows ``sigma_1^2 + sigma_2^2 = n``."""
    if int(repeats) < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return np.array([np.linalg.svd(al.circle_dataset(n, spread, seed=seed + r)["X"], compute_uv=False)
                     for r in range(int(repeats))])


def singular_value_spread(n: int, repeats: int, spread: float, seed: int = 0) -> dict:
    """Mean and standard deviation (``ddof=0``) of the two singular values over :func:`singular_value_draws`'
    ``repeats`` draws of ``n`` points: ``{"mean": [2], "std": [2], "n_draws": repeats}``."""
    S = singular_value_draws(n, repeats, spread, seed)
    return {"mean": S.mean(0), "std": S.std(0), "n_draws": len(S)}


def two_labellings(Phi, U, sigma, Y, num: int = 211) -> dict:
    """Eq. 2 for the label vectors ``Y [n, k]`` on the representation ``Phi`` (as given) with thin SVD pieces
    ``U``, ``sigma`` (:func:`oriented_svd`).

    Returns ``thresholds`` (``num`` from 0 to ``1.05 sigma_1``), ``curves`` ``[k, num]``
    (:func:`layersim.measures.alignment.alignment_curve`), ``proj2`` ``[r, k]`` = ``(u_i^T y)^2``,
    ``fraction_mid`` ``[k]``: the alignment at ``tau = (sigma_1 + sigma_2) / 2`` over ``n``, and
    ``fraction_first_at_least_second``: the share of thresholds at which the first curve is at least the
    second (to ``1e-9``).
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    if len(sigma) < 2:
        raise ValueError(f"two_labellings needs two singular values, got {len(sigma)}")
    n = len(Phi)
    tau = np.linspace(0.0, 1.05 * sigma[0], num)
    curves = al.alignment_curve(Phi, Y, tau)
    tau_mid = 0.5 * (sigma[0] + sigma[1])
    return {"thresholds": tau, "curves": curves, "proj2": (U.T @ Y) ** 2,
            "fraction_mid": al.alignment_curve(Phi, Y, [tau_mid])[:, 0] / n,
            "fraction_first_at_least_second": float(np.mean(curves[0] >= curves[1] - 1e-9))}


def convergence(Phi, Y, lr: float, steps: int, logistic_lr: float) -> dict:
    """A zero-initialised linear model on each label vector of ``Y [n, k]`` (Section 6).

    Squared loss: ``||Phi w_t - y||^2`` by Proposition 1's closed form with step ``lr``
    (:func:`layersim.measures.alignment.gd_loss_curve`, ``squared`` ``[k, steps + 1]``), its largest relative
    difference from plain gradient descent (``prop1_max_relative_error``), the loss no linear model removes
    (``irreducible`` ``[k]`` = ``||Phi w* - y||^2``), the ``reducible`` part and ``steps_to_90pct`` ``[k]``, the
    first step at which 90 % of the reducible part is gone. Logistic loss: ``logistic``,
    :func:`layersim.measures.alignment.linear_training_curves` with step ``logistic_lr`` (mean loss in bits
    and training error at every step).
    """
    n = len(Phi)
    squared = al.gd_loss_curve(Phi, Y, lr, steps)
    reference = al.gd_loss_reference(Phi, Y, lr, steps)
    irreducible = np.array([al.least_squares_fit(Phi, Y[:, k])["train_mse"] * n for k in range(Y.shape[1])])
    reducible = squared - irreducible[:, None]
    return {"squared": squared, "prop1_max_relative_error": float(np.max(np.abs(squared - reference) / reference)),
            "irreducible": irreducible, "reducible": reducible,
            "steps_to_90pct": al.steps_to_reach(reducible, 0.1 * reducible[:, 0]),
            "logistic": al.linear_training_curves(Phi, Y, "logistic", lr=logistic_lr, steps=steps)}


def labellings_figure(X, labels: Mapping[str, np.ndarray], Vt, sigma, spread: float):
    """Figure 4: the points ``X [n, 2]`` coloured by each labelling (one panel per entry of ``labels``), with
    the right singular vectors ``v_1``, ``v_2`` drawn as arrows of length ``sigma_i / sigma_1``. Returns the
    figure."""
    X = np.asarray(X, dtype=np.float64)
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 4.8), squeeze=False)
    for ax, (name, y) in zip(axes[0], labels.items()):
        ax.scatter(*X.T, c=y, cmap="viridis", s=6, vmin=-1, vmax=1)
        for k, col in enumerate(COLORS):
            v = Vt[k] * sigma[k] / sigma[0]
            ax.annotate("", xy=v, xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=col, lw=2))
            where = v * 0.5 + np.array([0.1, -0.1]) if k == 0 else v + np.array([-0.05, 0.1])
            ax.text(*where, f"$v_{k + 1}$ ($\\sigma_{k + 1}$={sigma[k]:.2f})", color=col, fontsize=11,
                    ha="left" if k == 0 else "right")
        ax.set_aspect("equal")
        ax.set(xlim=(-1.4, 1.4), ylim=(-1.4, 1.4), xlabel="$x_1$", ylabel="$x_2$",
               title=f"{name}: yellow +1, purple −1")
    fig.suptitle(f"{len(X)} unit-length points around $\\pi/4$ and $-3\\pi/4$ (angular s.d. {spread} rad)")
    return fig


def alignment_figure(fit: Mapping, sigma, names: Sequence[str]):
    """The alignment curves of the labellings against the threshold, with ``sigma_1``, ``sigma_2`` marked
    (left), and the squared projections ``(u_i^T y)^2`` of each label vector (right); ``fit`` from
    :func:`two_labellings`, ``names`` one per label vector. Returns the figure."""
    tau, curves, proj2 = fit["thresholds"], fit["curves"], fit["proj2"]
    n = curves[0][0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    plotting.alignment_curves(dict(zip(names, curves)), tau, ax=axes[0], title="alignment vs threshold",
                              styles={name: dict(color=col) for name, col in zip(names, COLORS)})
    for k in range(2):
        axes[0].axvline(sigma[k], color="grey", ls=":", lw=1)
        axes[0].text(sigma[k], n * 0.85, f" $\\sigma_{k + 1}$", color="grey")
    axes[0].legend(loc="center", bbox_to_anchor=(0.55, 0.45))
    xs = np.arange(1, 3)
    for k, (name, col) in enumerate(zip(names, COLORS)):
        axes[1].bar(xs + (0.36 * k - 0.18), proj2[:, k], width=0.36, color=col, label=name)
    axes[1].set_xticks(xs, [f"$u_1$ ($\\sigma_1$={sigma[0]:.1f})", f"$u_2$ ($\\sigma_2$={sigma[1]:.1f})"])
    axes[1].set(ylabel=r"$(u_i^\top y)^2$", title="projection of the label vector")
    axes[1].legend()
    return fig


def learning_curves_figure(fit: Mapping, names: Sequence[str], lr_factor: float, logistic_lr: float):
    """Three panels for :func:`convergence`'s ``fit``: the reducible squared loss relative to its start (log
    scale, drawn down to ``1e-13``, below which it is rounding), the logistic loss and its training error,
    against the gradient-descent step. Returns the figure."""
    reducible, logi = fit["reducible"], fit["logistic"]
    t = np.arange(reducible.shape[1])
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for k, (name, col) in enumerate(zip(names, COLORS)):
        rel = reducible[k] / reducible[k, 0]
        axes[0].plot(t, np.where(rel > 1e-13, rel, np.nan), color=col, label=name)
        axes[1].plot(t, logi["train"][k], color=col, label=name)
        axes[2].plot(t, logi["train_error"][k], color=col, label=name)
    axes[0].set_yscale("log")
    axes[0].text(0.98, 0.02, "shown down to 1e-13 (rounding below)", transform=axes[0].transAxes, ha="right",
                 fontsize=8, color="grey")
    axes[0].set(ylabel=r"$\|\Phi w_t - \Phi w^*\|^2$ / its value at $t=0$",
                title=f"squared loss, reducible part ($\\eta$={lr_factor}/$\\sigma_1^2$)")
    axes[1].set(ylabel="mean logistic loss (bits)", title=f"logistic loss (step {logistic_lr})")
    axes[2].set(ylabel="training error (wrong sign)", title="logistic model: training error")
    for ax in axes:
        ax.set_xlabel("gradient-descent step")
        ax.grid(True)
        ax.legend()
    return fig
