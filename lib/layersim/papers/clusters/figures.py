"""The clusters paper's figures (notebooks c01-c03), one panel per fine-tuned run.

Figs. 1, 2, 5, 6 (:func:`cka_maps_figure`): the four CKA maps of one fine-tuned run (ORIG-ORIG, FT-ORIG, FT-FT,
FT[1]-FT[2]); :func:`diagonals_and_block_scores`: the diagonals of the cross-model maps and the two-cluster
block-diagonal score of every split (c01);
Fig. 3 (:func:`truncation_figure`): the task score when the encoder is cut after each layer, for the three
ways of feeding that layer to the head (UNTUNED, TUNED, TUNEDORIG; ``layersim.papers.clusters.protocol``);
Fig. 4 (:func:`skip_grid_figure`): the task score with every contiguous span of blocks skipped.
"""

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
    """Fig. 3: one panel per run of ``curves`` (``{"<model>/<task>": protocol.truncation_curves(...)}``, the
    key is the panel's title): validation score against the layer fed to the head for UNTUNED, TUNED and
    TUNEDORIG, with the full fine-tuned model and the majority class as horizontal lines. Returns the figure."""
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
    """Fig. 4: one heatmap per run of ``grids`` (``{"<model>/<task>": protocol.skip_grid(...)}``): rows the
    first skipped block, columns the last; the colour scale of each panel runs from ``base[key]["majority"]``
    (the majority-class baseline) to the full model's score ``base[key]["full"]`` (or the grid's best, if
    higher). Returns the figure."""
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
    """Figs. 1, 2, 5, 6: one heatmap per map of ``maps`` (``protocol.cka_maps``: kind -> ``[L, L]``, row/column
    ``l-1`` = block ``l``) on one colour scale, CKA from 0 to 1, as in the paper; ``title`` above them. Returns the
    figure."""
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
    """Two panels over the runs of ``maps`` (``{(model, task): protocol.cka_maps(...)}``): left, the diagonals of
    FT-ORIG and FT[1]-FT[2] (block ``l`` of one model against block ``l`` of the other; Figs. 5, 6); right, the
    two-cluster block-diagonal score of every split of ORIG-ORIG (dotted) and FT-FT
    (``block_structure.split_scores``). Returns the figure."""
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
