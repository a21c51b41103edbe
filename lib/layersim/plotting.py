"""Plot helpers shared by the notebooks: layer curves, all-pairs heatmaps, per-layer boxes.

Each helper draws on a given matplotlib ``Axes`` (or makes one) and returns it, so notebooks
compose figures with ``plt.subplots`` and keep only the layout.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


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


def layer_heatmap(matrix, layers: Sequence[int] | None = None, ax=None, title: str | None = None,
                  vmin: float | None = None, vmax: float = 1.0, cmap: str = "viridis", annotate: bool | None = None):
    """An all-pairs layer similarity heatmap with a colour bar; layer 1 at the top left."""
    import matplotlib.pyplot as plt

    ax = _axes(ax, figsize=(4.5, 4))
    m = np.asarray(matrix, dtype=float)
    labels = np.arange(1, m.shape[0] + 1) if layers is None else np.asarray(layers)
    vmin = min(0.0, float(m.min())) if vmin is None else vmin
    im = ax.imshow(m, vmin=vmin, vmax=vmax, cmap=cmap)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("layer")
    ax.set_ylabel("layer")
    if annotate if annotate is not None else m.shape[0] <= 13:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if m[i, j] < (vmin + vmax) / 2 else "black")
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
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
    """The tracing paper's Figs. 3 and 6: bars of the fraction of samples saturating at each layer
    and, on a twin axis, the COS to the last layer. ``entries``: ``(fraction per layer, COS per
    layer, label, colour)``, drawn side by side. Returns the twin axis."""
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
