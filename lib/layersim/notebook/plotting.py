"""Plot helpers of the notebooks: layer curves, all-pairs heatmaps, per-layer boxes, and the alignment paper's
figures (alignment curves, eq. 2; label projections; the architecture sweep's panels). Each draws on a given
``Axes`` (or makes one) and returns it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from layersim.measures.trends import mean_se


def _axes(ax=None, figsize=(5, 3.5)):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def layer_curves(curves: dict[str, Sequence[float]], layers: Sequence[int] | None = None, ax=None,
                 ylabel: str = "similarity to the last layer", title: str | None = None):
    """One line per named curve against layer index (markers on every layer)."""
    ax = _axes(ax)
    for name, values in curves.items():
        values = np.asarray(values, dtype=float)
        xs = np.arange(1, len(values) + 1) if layers is None else np.asarray(layers)
        ax.plot(xs, values, marker="o", ms=4, label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    xs = np.arange(1, len(values) + 1) if layers is None else np.asarray(layers)
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax


def tick_positions(n: int, most: int = 16) -> list[int]:
    """Which of ``n`` layer labels to write: all up to ``most``, else every k-th (the smallest k leaving at most
    ``most``) and the last, which replaces the k-th before it when within k/2."""
    if n <= most:
        return list(range(n))
    step = -(-n // most)
    at = list(range(0, n, step))
    if at[-1] != n - 1:
        at[-1 if n - 1 - at[-1] <= step / 2 else len(at):] = [n - 1]
    return at


def layer_heatmap(matrix, layers: Sequence[int] | None = None, ax=None, title: str | None = None,
                  vmin: float | None = None, vmax: float = 1.0, cmap: str = "viridis", annotate: bool | None = None,
                  columns: Sequence[int] | None = None, xlabel: str = "layer", ylabel: str = "layer", fmt: str = ".2f",
                  *, label: str):
    """A layer-by-layer heatmap with a colour bar labelled ``label``, first layer top left; ``layers`` label the
    rows (and columns unless ``columns`` does); NaN cells stay blank."""
    import matplotlib.pyplot as plt

    ax = _axes(ax, figsize=(4.5, 4))
    m = np.asarray(matrix, dtype=float)
    rows = np.arange(1, m.shape[0] + 1) if layers is None else np.asarray(layers)
    cols = (rows if m.shape[1] == m.shape[0] else np.arange(1, m.shape[1] + 1)) if columns is None else np.asarray(columns)
    vmin = min(0.0, float(np.nanmin(m))) if vmin is None else vmin
    im = ax.imshow(np.ma.masked_invalid(m), vmin=vmin, vmax=vmax, cmap=cmap)
    for axis, labels in ((ax.xaxis, cols), (ax.yaxis, rows)):
        at = tick_positions(len(labels))
        axis.set_ticks(at, [str(labels[i]) for i in at])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate if annotate is not None else max(m.shape) <= 13:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if np.isfinite(m[i, j]):
                    ax.text(j, i, format(m[i, j], fmt), ha="center", va="center", fontsize=6,
                            color="white" if m[i, j] < (vmin + vmax) / 2 else "black")
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=label)
    if title:
        ax.set_title(title)
    return ax


def layer_boxes(per_layer: Sequence[np.ndarray], layers: Sequence[int] | None = None, ax=None,
                ylabel: str = "", title: str | None = None, reference: float | None = None, log: bool = False):
    """Box plots of a per-sample quantity, one box per layer (outliers drawn small)."""
    ax = _axes(ax, figsize=(6, 3.5))
    data = [np.asarray(v, dtype=float) for v in per_layer]
    labels = np.arange(1, len(data) + 1) if layers is None else np.asarray(layers)
    ax.boxplot(data, tick_labels=[str(x) for x in labels], flierprops={"markersize": 2, "alpha": 0.4})
    if reference is not None:
        ax.axhline(reference, color="grey", lw=0.8, ls="--")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title)
    return ax


def saturation_panel(ax, entries: Sequence[tuple[np.ndarray, np.ndarray, str, str]], layers: Sequence[int],
                     title: str | None = None):
    """The tracing paper's Figs. 3 and 6: bars of the fraction of samples saturating at each layer, and the COS to
    the last layer on a twin axis, which it returns. ``entries``: ``(fractions, COS, label, colour)``."""
    layers = np.asarray(layers)
    width = 0.8 / len(entries)
    ax2 = ax.twinx()
    for i, (fraction, cos, label, color) in enumerate(entries):
        ax.bar(layers + (i - (len(entries) - 1) / 2) * width, fraction, width, color=color, alpha=0.55,
               label=f"{label}: saturation events")
        ax2.plot(layers, cos, marker="o", ms=3, color=color, label=f"{label}: COS to last")
    ax.set_xlabel("layer")
    ax.set_ylabel("fraction of images saturating at the layer")
    ax2.set_ylabel("COS to the last layer")
    ax2.set_ylim(-0.05, 1.05)
    ax.set_xticks(layers)
    if title:
        ax.set_title(title)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, frameon=False, fontsize=7, loc="upper left")
    return ax2


# ----- the alignment paper --------------------------------------------------------------------


def alignment_curves(curves: dict, thresholds, ax=None, title: str | None = None, normalize: bool = False,
                     styles: dict | None = None, ylabel: str | None = None):
    """Alignment against threshold, one line per named curve (eq. 2; the alignment paper's Figures 3-7, 9, 10, 13).
    ``normalize``: divide by the value at ``tau = 0``; ``styles``: ``{name: dict(color=..., ls=...)}``."""
    ax = _axes(ax)
    t = np.asarray(thresholds, dtype=float)
    for name, c in curves.items():
        c = np.asarray(c, dtype=float)
        ax.plot(t, c / c[0] if normalize else c, label=name, **(styles or {}).get(name, {}))
    ax.set_xlabel(r"threshold $\tau$ on singular values")
    default = r"alignment / $\|y\|^2$" if normalize else r"alignment $\sum_{\sigma_i\geq\tau}(u_i^\top y)^2$"
    ax.set_ylabel(ylabel or default)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax


def label_projection_bars(sigma, proj2, ax, show: int = 50, title: str | None = None):
    """One panel of the alignment paper's Figure 2: bars of ``(u_i^T y)^2`` against the index ``i`` (the
    first ``show``), the singular values as a line on a second axis. Returns ``(ax, twin axis)``."""
    sigma, proj2 = np.asarray(sigma, float), np.asarray(proj2, float)
    m = min(show, len(proj2))
    idx = np.arange(1, m + 1)
    ax.bar(idx, proj2[:m], color="tab:blue", width=0.8, label=r"$(u_i^\top y)^2$")
    ax.set_xlabel("index $i$ of the singular value")
    ax.set_ylabel(r"$(u_i^\top y)^2$", color="tab:blue")
    ax.set_xlim(0.3, m + 0.7)
    tw = ax.twinx()
    tw.plot(idx, sigma[:m], color="tab:red", lw=1.5)
    tw.set_ylabel(r"singular value $\sigma_i$", color="tab:red")
    tw.set_ylim(0, None)
    if title:
        ax.set_title(title, fontsize=10)
    return ax, tw


def layer_alignment_curves(ax, thresholds, mean, se=None, labels: Sequence[str] | None = None, ls: str = "-",
                           colors: Sequence | None = None, normalize: bool = True):
    """The alignment paper's Figure 7: one alignment curve per layer (``mean`` ``[L, T]``) with a band of one
    standard error. ``normalize``: divide by the value at ``tau = 0``; ``colors`` default to a light-to-dark ramp."""
    import matplotlib.pyplot as plt

    mean = np.atleast_2d(np.asarray(mean, float))
    se = np.zeros_like(mean) if se is None else np.atleast_2d(np.asarray(se, float))
    t = np.asarray(thresholds, float)
    colors = colors or plt.cm.viridis_r(np.linspace(0.15, 0.95, len(mean)))
    labels = labels or [f"layer {i}" for i in range(len(mean))]
    for c, s, lab, col in zip(mean, se, labels, colors):
        scale = c[0] if normalize else 1.0
        ax.plot(t, c / scale, ls=ls, color=col, label=lab, lw=1.8)
        if np.any(s > 0):
            ax.fill_between(t, (c - s) / scale, (c + s) / scale, color=col, alpha=0.2, lw=0)
    ax.set_xlabel(r"threshold $\tau$ on singular values")
    ax.set_ylabel(r"alignment / $\|y\|^2$" if normalize else "alignment")
    ax.grid(alpha=0.3)
    return ax


def alignment_family(ax, thresholds, input_curves, settings: dict, title: str | None = None):
    """One panel of the alignment paper's Figures 6, 17, 18: the input features (mean of ``input_curves [runs, T]``)
    and, per ``settings`` entry ``{label: (init, trained)}``, the last hidden layer at initialisation (dashed) and
    trained (solid, with a standard-error band)."""
    import matplotlib.pyplot as plt

    t = np.asarray(thresholds, dtype=np.float64)
    ax.plot(t, mean_se(input_curves)[0], color="tab:orange", lw=2.5, label="input")
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, max(len(settings), 1)))
    for color, (label, (init, trained)) in zip(colors, settings.items()):
        ax.plot(t, mean_se(init)[0], ls="--", color=color, lw=1)
        m, se = mean_se(trained)
        ax.plot(t, m, color=color, lw=1.8, label=label)
        ax.fill_between(t, m - se, m + se, color=color, alpha=0.2)
    ax.set_xlabel(r"threshold $\tau$")
    ax.set_ylabel(r"alignment / $\|y\|^2$")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=7)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def task_alignment_bands(ax, runs: Sequence[dict], names: Sequence[str], thresholds, colors: dict | None = None,
                         title: str | None = None):
    """The alignment paper's Figures 13a, b and 20a: the normalised alignment curve (eq. 2, divided by
    ``||y||^2``) of each named representation, mean over the tasks with a band of one standard error.
    ``runs``: ``layersim.papers.alignment.pretrain.evaluate_task`` results."""
    t = np.asarray(thresholds, dtype=np.float64)
    for name in names:
        m, se = mean_se([r["curves"][name] / r["curves"][name][0] for r in runs])
        style = {} if colors is None or name not in colors else {"color": colors[name]}
        line, = ax.plot(t, m, lw=2, label=name, **style)
        ax.fill_between(t, m - se, m + se, color=line.get_color(), alpha=0.2)
    ax.set_xlabel(r"threshold $\tau$ on singular values")
    ax.set_ylabel(r"alignment / $\|y\|^2$")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    return ax


def linear_learning_curves(axes, runs: Sequence[dict], names: Sequence[str], colors: dict | None = None):
    """The alignment paper's Figures 13c, d and 20b, c: training (dashed) and test (solid) loss of the linear
    models, mean over tasks, against the step (log scale), one of ``axes`` per loss; ``runs``: ``evaluate_task``
    results."""
    for ax, loss, letter in zip(axes, ("squared", "logistic"), "cd"):
        for name in names:
            steps = runs[0]["gd"][name][loss]["steps"]
            style = {} if colors is None or name not in colors else {"color": colors[name]}
            for part, ls in (("train", "--"), ("test", "-")):
                m = np.mean([r["gd"][name][loss][part] for r in runs], axis=0)
                line, = ax.plot(np.maximum(steps, 0.5), m, ls, label=f"{name} {part}", **style)
                style = {"color": line.get_color()}
        ax.set_xscale("log")
        ax.set_xlabel("gradient-descent step (step 0 drawn at 0.5)")
        ax.set_ylabel("mean squared error" if loss == "squared" else "logistic loss (bits)")
        ax.set_title(f"({letter}) {loss} loss")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8, ncol=2)
    return axes


def pca_comparison(reference, others: dict, labels=None, title: str | None = None, max_points: int = 2000):
    """Scatter plots on the top two principal axes of ``reference`` ``[N, d]``: the reference, then each of
    ``others`` (name -> ``[N, d]``) on the same axes (the redundancy paper's Figs. 4, 5, 8-10). ``labels``: colours
    per sample. Returns the figure."""
    import matplotlib.pyplot as plt

    R = np.asarray(reference, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] < 3:
        raise ValueError(f"reference must be [N >= 3, d], got shape {R.shape}")
    mean = R.mean(axis=0)
    _, _, Vt = np.linalg.svd(R - mean, full_matrices=False)
    axes2 = Vt[:2].T
    keep = np.arange(len(R))[:: max(1, len(R) // max_points)]
    panels = {"original": R, **{k: np.asarray(v, dtype=np.float64) for k, v in others.items()}}
    fig, axs = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    proj = {k: (v - mean) @ axes2 for k, v in panels.items()}
    lo = np.min([p[keep].min(axis=0) for p in proj.values()], axis=0)
    hi = np.max([p[keep].max(axis=0) for p in proj.values()], axis=0)
    for ax, (name, p) in zip(axs[0], proj.items()):
        c = None if labels is None else np.asarray(labels)[keep]
        ax.scatter(p[keep, 0], p[keep, 1], c=c, s=4, cmap="tab10" if labels is not None else None, alpha=0.7)
        ax.set(title=name, xlabel="PC 1 of the original", ylabel="PC 2 of the original",
               xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]))
        ax.title.set_fontsize(9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def token_table(words, probs, ax=None, columns: Sequence[str] | None = None, title: str | None = None,
                cmap: str = "RdBu", fontsize: float = 5.5):
    """The tracing paper's Fig. 20: one row per layer (layer 0 at the bottom), one column per decoding step, each
    cell the top-1 token of ``words [L+1, S]`` coloured by ``probs [L+1, S]``."""
    import matplotlib.pyplot as plt

    W, P = np.asarray(words, dtype=object), np.asarray(probs, dtype=float)
    if W.shape != P.shape:
        raise ValueError(f"words {W.shape} and probs {P.shape} differ in shape")
    ax = _axes(ax, figsize=(max(6, 0.75 * W.shape[1]), max(4, 0.22 * W.shape[0])))
    im = ax.imshow(P, origin="lower", aspect="auto", cmap=cmap, vmin=0.0, vmax=1.0)
    for i in range(W.shape[0]):
        for j in range(W.shape[1]):
            ax.text(j, i, str(W[i, j])[:10], ha="center", va="center", fontsize=fontsize)
    ax.set_yticks(range(W.shape[0]))
    ax.set_yticklabels(range(W.shape[0]), fontsize=6)
    ax.set_xticks(range(W.shape[1]))
    ax.set_xticklabels(list(columns) if columns is not None else range(1, W.shape[1] + 1), rotation=90, fontsize=6)
    ax.set_ylabel("layer (0 = embeddings)")
    ax.set_xlabel("decoding step: the token the model generated")
    plt.colorbar(im, ax=ax, fraction=0.03, pad=0.01, label="probability of the layer's top-1 token")
    if title:
        ax.set_title(title)
    return ax


def budget_ladder(budgets: Sequence[float], values: Sequence[Sequence[float]], threshold: float, ax=None,
                  xlabel: str = "budget", ylabel: str = "claim value", title: str | None = None):
    """A claim's value against its budget (log axis): each seed's value as a dot, the mean with the seeds' standard
    deviation as an error bar, the threshold as a dashed line. ``values``: one sequence of seed values per budget."""
    ax = _axes(ax, figsize=(5, 3.5))
    x = np.asarray(budgets, dtype=float)
    if len(values) != len(x):
        raise ValueError(f"one list of seed values per budget: {len(x)} budgets, {len(values)} lists")
    for b, v in zip(x, values):
        ax.plot(np.full(len(v), b), v, "o", color="C0", alpha=0.4, ms=4)
    means = [float(np.mean(v)) for v in values]
    sds = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in values]
    ax.errorbar(x, means, yerr=sds, color="C0", marker="s", capsize=3, label="mean over seeds (± sd)")
    ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"threshold {threshold:g}")
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{b:g}" for b in x])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return ax
