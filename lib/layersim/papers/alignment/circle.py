"""The alignment paper's two-dimensional example (Section 4.1, Figure 4): unit points on a circle in two clusters,
labelled along the first or the second right singular vector. The first labelling is better aligned (eq. 2) between
``sigma_2`` and ``sigma_1`` and learnt faster (Section 6, Proposition 1). :func:`oriented_svd`,
:func:`singular_value_draws`, :func:`two_labellings` and :func:`convergence` compute; :func:`labellings_figure`,
:func:`alignment_figure` and :func:`learning_curves_figure` draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.inputs import synthetic
from layersim.measures import alignment as al
from layersim.notebook import plotting
from layersim.train import linear

#: the colour of each labelling (along v_1, along v_2) in every figure
COLORS = ("tab:red", "tab:blue")


def oriented_svd(Phi, direction) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD ``Phi = U diag(sigma) V^T`` with each pair's sign chosen so that ``v_i . direction >= 0``. Returns
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
    """The two singular values of ``repeats`` draws of ``n`` circle points (angular s.d. ``spread``,
    seed ``seed + r``): ``[repeats, 2]``."""
    if int(repeats) < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return np.array([np.linalg.svd(synthetic.circle_dataset(n, spread, seed=seed + r)["X"], compute_uv=False)
                     for r in range(int(repeats))])


def singular_value_spread(n: int, repeats: int, spread: float, seed: int = 0) -> dict:
    """Mean and standard deviation (``ddof=0``) of the two singular values over :func:`singular_value_draws`'
    ``repeats`` draws of ``n`` points: ``{"mean": [2], "std": [2], "n_draws": repeats}``."""
    S = singular_value_draws(n, repeats, spread, seed)
    return {"mean": S.mean(0), "std": S.std(0), "n_draws": len(S)}


def two_labellings(Phi, U, sigma, Y, num: int = 211) -> dict:
    """Eq. 2 for ``Y [n, k]`` on ``Phi`` with SVD pieces ``U``, ``sigma``: ``thresholds`` (0 to ``1.05 sigma_1``),
    ``curves [k, num]``, ``proj2 [r, k]``, ``fraction_mid`` (alignment at the mid threshold over ``n``) and
    ``fraction_first_at_least_second``."""
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
    """A zero-initialised linear model on each label of ``Y [n, k]`` (Section 6).

    Squared loss by Proposition 1's closed form (``squared``), its error against gradient descent, ``irreducible``,
    ``reducible`` and ``steps_to_90pct``; logistic loss (``logistic``: loss in bits and training error per step).
    """
    n = len(Phi)
    squared = al.gd_loss_curve(Phi, Y, lr, steps)
    reference = linear.gd_loss_reference(Phi, Y, lr, steps)
    irreducible = np.array([linear.least_squares_fit(Phi, Y[:, k])["train_mse"] * n for k in range(Y.shape[1])])
    reducible = squared - irreducible[:, None]
    return {"squared": squared, "prop1_max_relative_error": float(np.max(np.abs(squared - reference) / reference)),
            "irreducible": irreducible, "reducible": reducible,
            "steps_to_90pct": al.steps_to_reach(reducible, 0.1 * reducible[:, 0]),
            "logistic": linear.linear_training_curves(Phi, Y, "logistic", lr=logistic_lr, steps=steps)}


def labellings_figure(X, labels: Mapping[str, np.ndarray], Vt, sigma, spread: float):
    """Figure 4: ``X [n, 2]`` coloured by each labelling, ``v_1``, ``v_2`` as arrows of length
    ``sigma_i / sigma_1``. Returns the figure."""
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
    """The labellings' alignment curves with ``sigma_1``, ``sigma_2`` marked (left) and their squared projections
    (right), from :func:`two_labellings`. Returns the figure."""
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
    """:func:`convergence`'s reducible squared loss (relative, log), logistic loss and training error against the
    step. Returns the figure."""
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
