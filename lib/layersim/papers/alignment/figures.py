"""The alignment paper's figures of trained networks: :func:`layer_alignment_figure` and :func:`layer_areas_figure`
(Figure 7, every layer before and after training; a05) and :func:`sweep_figure` (Figures 6, 17, 18, the architecture
sweep; a04)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.measures import trends
from layersim.notebook import plotting
from layersim.papers.alignment import sweep


def _layer_colors(n_hidden: int) -> list:
    """The input in orange, the hidden layers from light to dark blue (darker = closer to the output)."""
    return ["tab:orange"] + list(plt.cm.Blues(np.linspace(0.45, 0.95, n_hidden)))


def layer_alignment_figure(runs: Mapping[str, dict], titles: Mapping[str, str], layers: Sequence[str]):
    """Figure 7: one panel per task of ``runs`` (``{task: layers.layer_runs(...)}``), the mean alignment curve of
    each of ``layers`` with a standard-error band, before (dashed) and after (solid) training, against
    ``tau / sqrt(n)``. Returns the figure."""
    if not runs:
        raise ValueError("layer_alignment_figure needs at least one task's runs")
    colors = _layer_colors(len(layers) - 1)
    fig, axes = plt.subplots(1, len(runs), figsize=(6.2 * len(runs), 4.2), squeeze=False)
    for ax, (name, r) in zip(axes[0], runs.items()):
        tn = r["tau"] / np.sqrt(r["n"])
        for when, ls in (("init", "--"), ("trained", "-")):
            m, se = trends.mean_se(np.array(r[when]))
            plotting.layer_alignment_curves(ax, tn, m, se, ls=ls, colors=colors,
                                            labels=[f"{l}, {'before' if when == 'init' else 'after'}" for l in layers])
        ax.set_xlabel(r"threshold $\tau / \sqrt{n}$ (the demo's grid)")
        ax.set_title(f"{titles[name]}, {r['n']} points, {len(r['init'])} runs")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def layer_areas_figure(runs: Mapping[str, dict], titles: Mapping[str, str], layers: Sequence[str]):
    """Figure 7 as bars: each layer's mean normalised area (± standard error) before (grey) and after (blue)
    training, one panel per task. Returns the figure."""
    if not runs:
        raise ValueError("layer_areas_figure needs at least one task's runs")
    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.5), sharey=True, squeeze=False)
    x = np.arange(len(layers))
    for ax, (name, r) in zip(axes[0], runs.items()):
        for off, when, col in ((-0.2, "init", "lightgrey"), (0.2, "trained", "tab:blue")):
            m, se = trends.mean_se(r[f"area_{when}"])
            ax.bar(x + off, m, 0.4, yerr=se, color=col, capsize=3, label="before training" if when == "init" else "after")
        ax.set_xticks(x, layers)
        ax.set_title(titles[name])
        ax.grid(True, axis="y")
    axes[0, 0].set_ylabel("alignment area (mean ± s.e.)")
    axes[0, 0].legend()
    fig.tight_layout()
    return fig


def sweep_figure(results: Mapping, rows: Sequence[tuple[str, str, dict]], tasks: Sequence[str],
                 families: Sequence[str], split: str, title: str):
    """Figures 6, 17, 18: panels of ``families`` (rows) by ``tasks`` (columns), each the input and every setting's
    final hidden layer at init and trained on ``split``, from :func:`sweep.run_sweep`'s ``results``. Returns the
    figure."""
    present = {f for f, _, _ in rows}
    fams = [f for f in families if f in present]
    if not fams or not tasks:
        raise ValueError(f"nothing to draw: families {list(families)} (swept: {sorted(present)}), tasks {list(tasks)}")
    fig, axes = plt.subplots(len(fams), len(tasks), figsize=(4.2 * len(tasks), 3.3 * len(fams)), squeeze=False)
    for i, fam in enumerate(fams):
        fam_rows = [(label, cfg) for f, label, cfg in rows if f == fam]
        for j, task_name in enumerate(tasks):
            first = fam_rows[0][1]
            tau = results[(task_name, sweep.config_name(first))][0][split]["thresholds"]
            settings = {label: (sweep.stacked_curves(results, task_name, cfg, split, "init"),
                                sweep.stacked_curves(results, task_name, cfg, split, "trained"))
                        for label, cfg in fam_rows}
            plotting.alignment_family(axes[i, j], tau, sweep.stacked_curves(results, task_name, first, split, "input"),
                                      settings, title=f"{task_name}, {fam} ({split})")
    fig.suptitle(title, y=1.0)
    fig.tight_layout()
    return fig
