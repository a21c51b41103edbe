"""The figures of the alignment paper's transfer experiments (Sections 7.2-7.3): Figures 13, 14, 16, 19 and 21,
drawn from the results of :mod:`layersim.papers.alignment.transfer`. Each function returns a new matplotlib
figure (the notebook saves and shows it with ``run.finish``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from layersim.notebook import plotting
from layersim.papers.alignment.transfer import HANDCRAFTED, INIT, INPUT, PRETRAINED, TRAINED

#: a08's colours of its representations
COLORS = {INPUT: "tab:orange", INIT: "grey", PRETRAINED: "tab:red", HANDCRAFTED[0]: "tab:green",
          HANDCRAFTED[1]: "tab:purple"}


def _figure(*args, **kwargs):
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def alignment_bands(runs: Sequence[dict], thresholds, last: str, colors: Mapping[str, str] = COLORS):
    """Figure 13 (a, b): mean normalised alignment curves over tasks (band: one standard error) of the input and the
    last hidden layer ``last`` at init and pre-trained, then against hand-crafted features."""
    fig, axes = _figure(1, 2, figsize=(12, 4))
    plotting.task_alignment_bands(axes[0], runs, [INPUT, INIT, PRETRAINED], thresholds, dict(colors),
                                  f"(a) last hidden layer {last!r}, {len(runs)} tasks (mean ± s.e.)")
    plotting.task_alignment_bands(axes[1], runs, list(TRAINED), thresholds, dict(colors),
                                  "(b) CNN features vs hand-crafted features")
    return fig


def layer_profile(layers: Sequence[str], areas: Mapping[str, Sequence[float]], input_area: float):
    """Alignment across depth (Section 5, Figure 7): the alignment area of each hidden layer at initialisation and
    after pre-training (``areas["init"]``, ``areas["pre-trained"]``: :func:`transfer.layer_areas`), the input's
    for reference."""
    fig, ax = _figure(figsize=(6.5, 4))
    x = np.arange(len(layers))
    ax.plot(x, areas["init"], "o--", color="grey", label="at initialisation")
    ax.plot(x, areas["pre-trained"], "o-", color="tab:red", label="pre-trained")
    ax.axhline(input_area, color="tab:orange", ls=":", label="input pixels")
    ax.set_xticks(x, layers)
    ax.set_ylabel("alignment area (fraction of $\\|y\\|^2$)")
    ax.set_title("alignment of each hidden layer (mean over tasks)")
    ax.grid(True)
    ax.legend()
    return fig


def learning_curves(runs: Sequence[dict], names: Sequence[str] = TRAINED, colors: Mapping[str, str] = COLORS):
    """Figure 13 (c, d): training (dashed) and test (solid) loss of the linear models on ``names``, mean over the
    tasks, squared and logistic loss (:func:`layersim.notebook.plotting.linear_learning_curves`)."""
    fig, axes = _figure(1, 2, figsize=(13, 4.2))
    plotting.linear_learning_curves(axes, runs, list(names), dict(colors))
    return fig


def similarity_differences(thresholds, tasks: Sequence[dict], mean_diff: Mapping[str, np.ndarray],
                           groups: Sequence[str]):
    """Figure 14 (left): every layer's mean difference curve, similar minus dissimilar source; Figure 21 (right):
    each task's last-layer difference curve coloured by target group."""
    import matplotlib.pyplot as plt

    layers = list(mean_diff)
    fig, axes = _figure(1, 2, figsize=(13, 4.2))
    for name, col in zip(layers, plt.cm.Blues(np.linspace(0.35, 1.0, len(layers)))):
        axes[0].plot(thresholds, mean_diff[name], color=col, lw=2, label=name)
    axes[0].axhline(0, color="k", lw=0.8)
    axes[0].set_title(f"Figure 14: similar minus dissimilar source, mean over {len(tasks)} tasks")
    for ax in axes:
        ax.set_xlabel(r"threshold $\tau$")
        ax.grid(True)
    axes[0].set_ylabel(r"alignment difference / $\|y\|^2$")
    axes[0].legend(title="layer (darker = closer to output)")
    for r in tasks:
        axes[1].plot(thresholds, r["diff"][layers[-1]], color="tab:orange" if r["group"] == groups[0] else "tab:green",
                     lw=0.8, alpha=0.6)
    axes[1].plot(thresholds, mean_diff[layers[-1]], color="k", lw=2, label="mean")
    axes[1].plot([], [], color="tab:orange", label=f"target pairs of {groups[0]}")
    axes[1].plot([], [], color="tab:green", label=f"target pairs of {groups[1]}")
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_title(f"Figure 21: individual tasks, layer {layers[-1]!r}")
    axes[1].legend(fontsize=8)
    return fig


def domain_examples(train: Mapping[str, tuple], domains: Sequence[str], n: int = 8):
    """The first ``n`` training images of every domain (:func:`transfer.domain_data`), one row per domain."""
    fig, axes = _figure(len(domains), n, figsize=(10, 1.4 * len(domains)), squeeze=False)
    for row, d in zip(axes, domains):
        X = np.asarray(train[d][0])
        for j, ax in enumerate(row):
            ax.imshow(X[j, 0], cmap="gray")
            ax.set_xticks([])
            ax.set_yticks([])
        row[0].set_ylabel(d)
    fig.suptitle("the three domains (same classes, shifted inputs)")
    return fig


def drop_curves(diff: Mapping[tuple[str, str], np.ndarray], thresholds, n_pair: int, layer: str):
    """Figure 16: the alignment difference curves, None minus random-label source, of every (source, target)
    pair (:func:`transfer.alignment_drops`), against the thresholds scaled back to the demo grid."""
    fig, ax = _figure(figsize=(7, 4.2))
    for (s, t), c in diff.items():
        ax.plot(np.asarray(thresholds) / np.sqrt(n_pair / 1000), c, lw=2, label=f"{s} → {t}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel(r"threshold $\tau \cdot \sqrt{1000/n}$ (the demo grid)")
    ax.set_ylabel(r"alignment difference / $\|y\|^2$")
    ax.set_title(f"None minus random-label source, layer {layer!r}, mean over class pairs")
    ax.grid(True)
    ax.legend(fontsize=8)
    return fig
