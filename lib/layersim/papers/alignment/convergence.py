"""Alignment and the speed of gradient descent on a fixed representation (alignment paper, Section 6, Figures 8-9,
Propositions 1-2).

Figure 8: each singular direction is its own process (:func:`processes`, :func:`processes_figure`). Figure 9: two
synthetic label vectors on a pixel representation (:func:`pixel_representation`, :func:`synthetic_labels`) whose
learning curves cross (:func:`crossing`). Proposition 1's closed form against gradient descent
(:func:`prop1_agreement`); Proposition 2's bound against the steps needed (:func:`prop2_table`). Curves come from
:mod:`layersim.measures.alignment` (see docs/modules.md, `layersim.papers.alignment.convergence`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.inputs import synthetic
from layersim.measures import alignment as al
from layersim.notebook import plotting, settings
from layersim.papers.alignment.layers import raw_images

#: Figure 8's singular values: a fast (6) and a slow (1) process
SIGMA_FIG8 = (6.0, 1.0)
#: Figure 8's two label vectors: the share of ``||y||^2 = 1`` on the fast direction
SHARES_FIG8 = {"(a) high alignment": 0.9, "(b) low alignment": 0.5}
#: Figure 8's step size, times ``1 / sigma_1^2``
LR_FACTOR_FIG8 = 0.5
#: the colours of ``y_1`` and ``y_2`` in Figure 9 and the Proposition 2 figure
COLORS = ("tab:blue", "tab:orange")

#: the rules of a06's settings (``layersim.notebook.settings``): the data set, its points (the labels use the 50th
#: singular vector), y_2's share on it, the step size in units of ``1 / sigma_1^2`` and the steps checked
RULES = {"dataset": settings.choice("fashion-mnist", "digits"),
         "n_points": settings.integer(50, meaning="the labels use the 50th singular vector"),
         "share_50": settings.real(0, 1), "lr_factor": settings.real(0, 1, open_low=True, open_high=True),
         "gd_steps": settings.integer(1), "fig8_steps": settings.integer(1)}


def _process_states(steps: int, sigma, shares: Mapping[str, float], lr_factor: float) -> dict:
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.shape != (2,) or np.any(sigma <= 0):
        raise ValueError(f"Figure 8 has two positive singular values, got {sigma}")
    if not 0 < lr_factor < 1:
        raise ValueError(f"lr_factor must lie in (0, 1) for gradient descent to converge, got {lr_factor}")
    lr = lr_factor / sigma[0] ** 2
    out = {}
    for name, share in shares.items():
        if not 0 <= share <= 1:
            raise ValueError(f"{name}: a share of ||y||^2 lies in [0, 1], got {share}")
        y_proj = np.sqrt([share, 1 - share])
        w, loss = al.gd_processes(sigma, y_proj, lr, steps)
        out[name] = {"sigma": sigma, "y_proj": y_proj, "w": w, "loss_share": loss}
    return out


def processes(steps: int, sigma=SIGMA_FIG8, shares: Mapping[str, float] = SHARES_FIG8,
              lr_factor: float = LR_FACTOR_FIG8) -> dict:
    """Figure 8's numbers per unit-norm label vector (``shares``: the fraction on the first direction): the loss at
    zero init and after ``steps`` gradient-descent steps with ``eta = lr_factor / sigma_1^2``."""
    return {name: {"loss_0": float(np.sum(s["y_proj"] ** 2)), "loss_t": float(s["loss_share"].sum())}
            for name, s in _process_states(steps, sigma, shares, lr_factor).items()}


def processes_figure(steps: int, sigma=SIGMA_FIG8, shares: Mapping[str, float] = SHARES_FIG8,
                     lr_factor: float = LR_FACTOR_FIG8):
    """Figure 8: per label vector, each process's loss share ``sigma_i^2 (w_i^V - y_i^U / sigma_i)^2`` against its
    weight, at zero init (orange) and after ``steps`` (green). Returns the figure."""
    states = _process_states(steps, sigma, shares, lr_factor)
    fig, axes = plt.subplots(1, len(states), figsize=(5.5 * len(states), 4), sharey=True, squeeze=False)
    for ax, (name, s) in zip(axes[0], states.items()):
        sig, y_proj = s["sigma"], s["y_proj"]
        for i, col in enumerate(("tab:purple", "tab:brown")):
            w = np.linspace(-0.05, 1.2 * max(y_proj / sig), 200)
            speed = "fast" if i == 0 else "slow"
            ax.plot(w, sig[i] ** 2 * (w - y_proj[i] / sig[i]) ** 2, color=col,
                    label=f"{speed} process, $\\sigma$ = {sig[i]:g}")
            ax.plot(0, y_proj[i] ** 2, "o", color="tab:orange", ms=9, zorder=3)
            ax.plot(s["w"][i], s["loss_share"][i], "o", color="tab:green", ms=9, zorder=3)
        ax.plot([], [], "o", color="tab:orange", label="zero initialisation")
        ax.plot([], [], "o", color="tab:green", label=f"after {steps} steps")
        ax.set(ylim=(-0.02, 1.0), xlabel=r"weight along the right singular vector, $w_i^V$",
               title=f"{name}: loss {np.sum(y_proj ** 2):.2f} → {s['loss_share'].sum():.2f}")
        ax.grid(True)
        ax.legend()
    axes[0, 0].set_ylabel("share of the training loss")
    return fig


def pixel_representation(dataset: str, n_points: int, seed: int = 0) -> np.ndarray:
    """Section 6.2's representation: ``n_points`` images of ``dataset`` (``fashion-mnist`` or ``digits``) drawn with
    ``seed``, pixels in ``[0, 1]``, a bias column, rows not normalised (as the paper's singular values need)."""
    images, _, top = raw_images(dataset, "train")
    if not 1 <= int(n_points) <= len(images):
        raise ValueError(f"n_points must lie in 1..{len(images)} for {dataset}, got {n_points}")
    idx = np.random.default_rng(seed).choice(len(images), size=n_points, replace=False)
    return al.prepare(images[idx].reshape(len(idx), -1) / top, bias=True, normalize=False)


def synthetic_labels(Phi, share_50: float) -> tuple[np.ndarray, list[str]]:
    """Figure 9's unit-norm label vectors on ``Phi`` (or its :class:`~layersim.measures.alignment.SVD`):
    ``y_1 = u_10`` and ``y_2 = sqrt(1 - share_50) u_5 + sqrt(share_50) u_50``
    (:func:`layersim.inputs.synthetic.singular_vector_labels`). Returns ``(Y [n, 2], names)``."""
    if not 0 <= share_50 <= 1:
        raise ValueError(f"share_50 is a share of ||y_2||^2 in [0, 1], got {share_50}")
    a, b = np.sqrt(1 - share_50), np.sqrt(share_50)
    Y = synthetic.singular_vector_labels(Phi, [[(10, 1.0)], [(5, a), (50, b)]])
    return Y, ["$y_1$ = $u_{10}$", f"$y_2$ = {a:.2f} $u_5$ + {b:.2f} $u_{{50}}$"]


def prop1_agreement(closed, gd, rel_floor: float = 1e-12) -> dict:
    """Proposition 1's ``closed [k, >= T]`` against gradient descent ``gd [k, T]``: ``max_relative_error`` over
    pairs with loss at least ``rel_floor`` of the initial, ``pairs_checked`` of ``pairs``, and
    ``max_abs_error_over_initial``."""
    gd = np.asarray(gd, dtype=np.float64)
    ref = np.asarray(closed, dtype=np.float64)[:, : gd.shape[1]]
    if ref.shape != gd.shape:
        raise ValueError(f"closed form {np.shape(closed)} does not cover gradient descent {gd.shape}")
    keep = ref >= rel_floor * ref[:, :1]
    return {"max_relative_error": float(np.max(np.abs(gd - ref)[keep] / ref[keep])),
            "max_abs_error_over_initial": float(np.max(np.abs(gd - ref)) / ref[:, 0].max()),
            "pairs_checked": int(keep.sum()), "pairs": int(keep.size)}


def crossing(closed) -> dict:
    """Where two learning curves ``closed [2, T]`` lead and cross (Figure 9, right), from ``d_t = L_1(t) - L_2(t)``:
    ``lead_y2``, ``lead_y1`` and their steps, ``crossing_step`` (first sign change from step 2; -1 if none),
    ``sign_changes`` and ``y2_leads_first``."""
    closed = np.asarray(closed, dtype=np.float64)
    if closed.ndim != 2 or closed.shape[0] != 2:
        raise ValueError(f"crossing takes two learning curves [2, T], got shape {closed.shape}")
    diff = closed[0] - closed[1]
    sign = np.sign(diff[1:])
    changes = np.flatnonzero(sign[1:] != sign[:-1]) + 2
    t_y2, t_y1 = int(np.argmax(diff)), int(np.argmax(-diff))
    return {"crossing_step": int(changes[0]) if len(changes) else -1, "sign_changes": len(changes),
            "lead_y2": float(diff.max()), "lead_y2_step": t_y2, "lead_y1": float(-diff.min()), "lead_y1_step": t_y1,
            "y2_leads_first": bool(t_y2 < t_y1)}


def prop2_table(Phi, Y, closed, lr: float, num: int = 40, omega_share: float = 0.9) -> dict:
    """Proposition 2 against gradient descent on ``num`` thresholds from ``sigma_50 / 2`` to below ``sigma_1``.

    Per label vector and ``tau`` with ``delta > 1e-12``: the bound for ``omega = omega_share * delta`` and the first
    step the curve drops by ``omega``. Returns ``thresholds``, ``rows`` ``[m, 5]`` (label, tau, delta, bound,
    steps), ``within``, ``fraction`` within the bound and ``median_ratio``.
    """
    dec = Phi if isinstance(Phi, al.SVD) else al.svd(Phi)
    closed = np.asarray(closed, dtype=np.float64)
    if len(dec.sigma) < 50:
        raise ValueError(f"the thresholds start at sigma_50 / 2, but Phi has {len(dec.sigma)} singular values")
    tau = np.geomspace(dec.sigma[49] / 2, dec.sigma[0] * (1 - 1e-9), num)
    deltas = al.alignment_curve(dec, Y, tau)
    rows = []
    for k in range(deltas.shape[0]):
        for j, tj in enumerate(tau):
            if deltas[k, j] <= 1e-12:
                continue
            omega = omega_share * deltas[k, j]
            bound = float(al.prop2_iterations(deltas[k, j], omega, lr, tj))
            needed = int(al.steps_to_reach(closed[k], closed[k, 0] - omega))
            rows.append((k, tj, deltas[k, j], bound, needed))
    rows = np.array(rows)
    within = rows[:, 4] <= closed.shape[1] - 1
    return {"thresholds": tau, "rows": rows, "within": within,
            "fraction": float(np.mean(rows[within, 4] <= np.ceil(rows[within, 3]))),
            "median_ratio": float(np.median(rows[within, 4] / rows[within, 3]))}


def alignment_figure(curves, thresholds, names: Sequence[str], sigma, dataset: str):
    """Figure 9 (left): the alignment curves of ``y_1`` and ``y_2`` (``curves [2, T]`` on ``thresholds``) with
    ``sigma_5``, ``sigma_10`` and ``sigma_50`` marked. Returns the figure."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    plotting.alignment_curves(dict(zip(names, curves)), thresholds, ax=ax,
                              title=f"alignment of the synthetic labels ({dataset} pixels)",
                              styles={names[0]: dict(color=COLORS[0], lw=2), names[1]: dict(color=COLORS[1], lw=2, ls="--")})
    for i in (5, 10, 50):
        ax.axvline(sigma[i - 1], color="grey", ls=":", lw=1)
        ax.text(sigma[i - 1], 0.5, f" $\\sigma_{{{i}}}$", color="grey")
    return fig


def learning_curves_figure(closed, gd, names: Sequence[str], crossing_step: int, lr_factor: float):
    """Figure 9 (right): Proposition 1's curves (lines) and gradient descent (circles), log-log, the crossing
    marked. Returns the figure."""
    closed, gd = np.asarray(closed), np.asarray(gd)
    t = np.arange(closed.shape[1])
    sub = np.unique(np.geomspace(1, gd.shape[1] - 1, 25).astype(int))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, (name, col) in enumerate(zip(names, COLORS)):
        ax.plot(t[1:], closed[k, 1:], color=col, lw=2, label=f"{name} (Proposition 1)")
        ax.plot(sub, gd[k, sub], "o", ms=4, mfc="none", color=col, label=f"{name} (gradient descent)")
    if crossing_step > 0:
        ax.axvline(crossing_step, color="grey", ls=":", lw=1)
        ax.text(crossing_step * 1.1, 1e-6, f"curves cross\nat step {crossing_step}", color="grey")
    ax.set(xscale="log", yscale="log", ylim=(1e-8, 2), xlabel="gradient-descent step $t$",
           ylabel=r"training loss $\|\Phi w_t - y\|^2$", title=f"learning curves, $\\eta$ = {lr_factor}/$\\sigma_1^2$")
    ax.grid(True)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def prop2_figure(table: Mapping, names: Sequence[str], lr: float, omega_share: float = 0.9):
    """Proposition 2: the steps gradient descent needs (:func:`prop2_table`) against the bound. Returns the figure."""
    rows, tau = table["rows"], table["thresholds"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, (name, col) in enumerate(zip(names, COLORS)):
        m = rows[:, 0] == k
        ax.plot(rows[m, 1], np.maximum(rows[m, 4], 0.8), "o", ms=4, color=col, label=f"{name}: steps needed")
    ax.plot(tau, [al.prop2_iterations(1.0, omega_share, lr, tj) for tj in tau], "k-",
            label=rf"bound $-\log({1 - omega_share:.1f})/(2\eta\tau^2)$ (both labels)")
    ax.set(xscale="log", yscale="log", xlabel=r"threshold $\tau$",
           ylabel=rf"steps to reduce the loss by ${omega_share:g}\,\delta$",
           title="Proposition 2: bound vs gradient descent (0 steps drawn at 0.8)")
    ax.grid(True)
    ax.legend(fontsize=8)
    return fig
