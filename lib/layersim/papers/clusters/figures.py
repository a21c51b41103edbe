"""The clusters paper's figures (notebooks c01-c03): :func:`cka_maps_figure` (Figs. 1, 2, 5, 6: the four CKA maps),
:func:`diagonals_and_block_scores` (c01), :func:`truncation_figure` (Fig. 3: UNTUNED, TUNED, TUNEDORIG) and
:func:`skip_grid_figure` (Fig. 4: every contiguous span skipped)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from layersim.measures import block_structure
from layersim.notebook import plotting

__all__ = ["CURVE_COLORS", "MAP_LABELS", "cka_maps_figure", "diagonals_and_block_scores", "skip_grid_figure",
           "truncation_figure"]

#: the colour of each truncation curve of Fig. 3
CURVE_COLORS = {"UNTUNED": "tab:green", "TUNED": "tab:blue", "TUNEDORIG": "tab:orange"}


def truncation_figure(curves: Mapping[str, Mapping[str, Any]]):
    """Fig. 3: one panel per run of ``curves`` (``{"<model>/<task>": protocol.truncation_curves(...)}``), the
    validation score against the layer fed to the head for UNTUNED, TUNED and TUNEDORIG, the full model and majority
    class as lines. Returns the figure."""
    if not curves:
        raise ValueError("truncation_figure needs at least one run's curves")
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    for ax, (key, c) in zip(axes[0], curves.items()):
        x = np.arange(len(c["UNTUNED"]))
        for name, color in CURVE_COLORS.items():
            ax.plot(x, c[name], marker="o", color=color, label=name)
        ax.axhline(c["full"], color="black", ls=":", label="full fine-tuned model")
        ax.axhline(c["majority"], color="grey", ls="--", label="majority class")
        ax.set(xlabel="layer fed to the head (0 = embeddings)", ylabel="validation accuracy", title=key, xticks=x)
        ax.grid(True)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def skip_grid_figure(grids: Mapping[str, np.ndarray], base: Mapping[str, Mapping[str, float]]):
    """Fig. 4: one heatmap per run of ``grids`` (rows: first skipped block, columns: last), coloured from
    ``base[key]["majority"]`` to ``base[key]["full"]`` (or the grid's best). Returns the figure."""
    if not grids:
        raise ValueError("skip_grid_figure needs at least one run's grid")
    missing = [k for k in grids if k not in base]
    if missing:
        raise ValueError(f"no baseline for the grids {missing}")
    fig, axes = plt.subplots(1, len(grids), figsize=(5.2 * len(grids), 4.4), squeeze=False)
    for ax, (key, G) in zip(axes[0], grids.items()):
        b = base[key]
        blocks = np.arange(1, len(G) + 1)
        plotting.layer_heatmap(G, layers=blocks, ax=ax, vmin=b["majority"], vmax=max(b["full"], np.nanmax(G)),
                               cmap="magma", xlabel="last skipped block", ylabel="first skipped block",
                               title=f"{key} (full {b['full']:.2f})", label="validation score, span skipped")
    fig.tight_layout()
    return fig


#: the axis labels of each CKA map (rows, columns); the others compare a model's blocks with its own
MAP_LABELS = {"FT-ORIG": ("FT block", "ORIG block"), "FT[1]-FT[2]": ("FT[1] block", "FT[2] block")}


def cka_maps_figure(maps: Mapping[str, np.ndarray], title: str):
    """Figs. 1, 2, 5, 6: one heatmap per map of ``maps`` (kind -> ``[L, L]``, row ``l-1`` = block ``l``), CKA from 0
    to 1, ``title`` above. Returns the figure."""
    if not maps:
        raise ValueError("cka_maps_figure needs at least one map")
    fig, axes = plt.subplots(1, len(maps), figsize=(4.4 * len(maps), 4.0), squeeze=False)
    for ax, (kind, M) in zip(axes[0], maps.items()):
        ylabel, xlabel = MAP_LABELS.get(kind, ("block", "block"))
        plotting.layer_heatmap(M, layers=np.arange(1, M.shape[0] + 1), columns=np.arange(1, M.shape[1] + 1), ax=ax,
                               vmin=0.0, vmax=1.0, title=kind, xlabel=xlabel, ylabel=ylabel, label="linear CKA")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def diagonals_and_block_scores(maps: Mapping[tuple[str, str], Mapping[str, np.ndarray]]):
    """Over the runs of ``maps``: the diagonals of FT-ORIG and FT[1]-FT[2] (left; Figs. 5, 6) and the two-cluster
    score of every split of ORIG-ORIG (dotted) and FT-FT (right). Returns the figure."""
    if not maps:
        raise ValueError("diagonals_and_block_scores needs at least one run's maps")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for (_, task), m in maps.items():
        E = len(m["FT-FT"])
        axes[0].plot(range(1, E + 1), np.diag(m["FT-ORIG"]), marker="o", label=f"{task}: FT vs ORIG")
        if "FT[1]-FT[2]" in m:
            axes[0].plot(range(1, E + 1), np.diag(m["FT[1]-FT[2]"]), marker="s", ls="--",
                         label=f"{task}: FT[1] vs FT[2]")
        for kind in ("ORIG-ORIG", "FT-FT"):
            axes[1].plot(range(1, E), block_structure.split_scores(m[kind]), marker="o",
                         ls="-" if kind == "FT-FT" else ":", label=f"{task}: {kind}")
    axes[0].set(xlabel="block", ylabel="linear CKA", title="same block, two models", ylim=(0, 1.02))
    axes[1].set(xlabel="split s: early cluster = blocks 1..s", ylabel="within - between CKA",
                title="two-cluster block-diagonal score")
    for ax in axes:
        ax.grid(True)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
