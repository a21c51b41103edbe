"""The redundancy paper's figures from the notebooks' tables: :func:`block_cosine_grid` (Figs. 2, 6; r01),
:func:`br_and_output_mse` (Figs. 3, 7; r02), :func:`skip_vs_approx` (Tables 2, 7; r04), :func:`lm_cosine_and_br`,
:func:`lm_approx_vs_skip`, :func:`vit_redundancy` (r05) and :func:`accuracy_vs_blocks` (Tables 1, 5, 6)."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from layersim.notebook import plotting

__all__ = ["accuracy_vs_blocks", "block_cosine_grid", "br_and_output_mse", "lm_approx_vs_skip", "lm_cosine_and_br",
           "skip_vs_approx", "vit_redundancy"]


def accuracy_vs_blocks(table: pd.DataFrame, offset: float = 0.08):
    """One panel per model of ``table`` (``rba.span_accuracies`` rows): mean accuracy over seeds (error bar:
    standard deviation) against blocks kept, one series per data set (offset by ``offset``), the unmodified accuracy
    dotted. Returns the figure."""
    missing = {"model", "data", "span", "blocks", "accuracy", "std"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks the columns {sorted(missing)}")
    if table.empty:
        raise ValueError("accuracy_vs_blocks needs at least one row")
    names = list(dict.fromkeys(table.model))
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        datasets = list(dict.fromkeys(table[table.model == name].data))
        for dataset in datasets:
            sub = table[(table.model == name) & (table.data == dataset)]
            shift = offset if len(datasets) > 1 and dataset == datasets[1] else -offset
            ax.errorbar(sub.blocks + shift, sub.accuracy, yerr=sub["std"], fmt="o", ms=4, capsize=2, label=dataset)
            base = sub[sub.span == "none"].accuracy.item()
            ax.axhline(base, ls=":", lw=1, color=ax.lines[-1].get_color() if ax.lines else None)
        ax.set(title=name, xlabel="blocks kept (the rest approximated by one linear map)", ylabel="test accuracy")
        ax.legend()
        ax.grid(True)
    fig.tight_layout()
    return fig


def block_cosine_grid(cos: Mapping[tuple[str, str], np.ndarray]):
    """Figs. 2 and 6: one row per model, one heatmap per data set of ``cos`` (``{(model, data set): [L, L]}``), in
    key order. Returns the figure."""
    if not cos:
        raise ValueError("block_cosine_grid needs at least one cosine matrix")
    data: dict[str, list[str]] = {}
    for name, dataset in cos:
        data.setdefault(name, []).append(dataset)
    ncols = max(len(sets) for sets in data.values())
    fig, axes = plt.subplots(len(data), ncols, figsize=(4.6 * ncols, 4.0 * len(data)), squeeze=False)
    for r, (name, sets) in enumerate(data.items()):
        for c in range(ncols):
            ax = axes[r, c]
            if c >= len(sets):
                ax.axis("off")
                continue
            M = cos[(name, sets[c])]
            plotting.layer_heatmap(M, layers=np.arange(1, len(M) + 1), ax=ax, title=f"{name} on {sets[c]}",
                                   label="cosine of the [CLS] token")
    fig.suptitle("cosine similarity of the [CLS] token between blocks", y=1.0)
    fig.tight_layout()
    return fig


def skip_vs_approx(table: pd.DataFrame):
    """Tables 2 and 7: per (model, data set) of ``table`` (``skip_vs_approx.span_rows``), each span's accuracy
    skipped (x) against approximated (y), single blocks as squares, the diagonal and unmodified accuracy drawn.
    Returns the figure."""
    missing = {"model", "data", "span", "blocks", "skip", "approx"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks the columns {sorted(missing)}")
    pairs = list(dict.fromkeys(zip(table.model, table.data)))
    if not pairs:
        raise ValueError("skip_vs_approx needs at least one row")
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 4.2), squeeze=False)
    for ax, (name, dataset) in zip(axes[0], pairs):
        pair = table[(table.model == name) & (table.data == dataset)]
        sub = pair[pair.span != "none"]
        single = sub.blocks == sub.blocks.max()
        ax.scatter(sub.skip[~single], sub.approx[~single], s=18, label="multi-block spans")
        ax.scatter(sub.skip[single], sub.approx[single], s=18, marker="s", label="single blocks")
        lo = min(sub.skip.min(), sub.approx.min()) - 0.02
        hi = max(sub.skip.max(), sub.approx.max()) + 0.02
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls=":")
        ax.axhline(pair[pair.span == "none"].approx.item(), color="grey", lw=0.8)
        ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="accuracy, span skipped", ylabel="accuracy, span approximated",
               title=f"{name}, {dataset}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def br_and_output_mse(br: Mapping[tuple[str, str], np.ndarray], mse: Mapping[tuple[str, str], np.ndarray]):
    """Figs. 3 and 7: per model of ``br`` (``{(model, data set): [L]}``), BR per block (top) and the output MSE with
    that block approximated (``mse``, log scale; bottom), a line per data set. Returns the figure."""
    if not br:
        raise ValueError("br_and_output_mse needs at least one model's Block Redundancy")
    missing = [k for k in br if k not in mse]
    if missing:
        raise ValueError(f"no output MSE for {missing}")
    names = list(dict.fromkeys(m for m, _ in br))
    fig, axes = plt.subplots(2, len(names), figsize=(4.8 * len(names), 7), squeeze=False)
    for c, name in enumerate(names):
        for (m, dataset), values in br.items():
            if m != name:
                continue
            blocks = np.arange(1, len(values) + 1)
            axes[0, c].plot(blocks, values, marker="o", ms=3, label=dataset)
            axes[1, c].plot(blocks, mse[(m, dataset)], marker="o", ms=3, label=dataset)
        axes[0, c].set(title=name, ylabel="Block Redundancy (eq. 1)", xlabel="block", xticks=blocks)
        axes[1, c].set(ylabel="MSE of the final representation", xlabel="block approximated", xticks=blocks,
                       yscale="log")
        for ax in axes[:, c]:
            ax.legend(fontsize=8)
            ax.grid(True)
    fig.tight_layout()
    return fig


def lm_cosine_and_br(cos: np.ndarray, br: np.ndarray, name: str = "SmolLM2"):
    """The LM's blocks (r05): the last token's cosine between all block pairs (``cos [L, L]``) beside BR per block
    (``br [L]``). Returns the figure."""
    br = np.asarray(br)
    if np.shape(cos) != (len(br), len(br)):
        raise ValueError(f"cos must be [L, L] for the {len(br)} blocks of br, got shape {np.shape(cos)}")
    L = len(br)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    plotting.layer_heatmap(cos, layers=np.arange(1, L + 1), ax=axes[0], annotate=False,
                           title=f"{name}: cosine of the last token between blocks", label="cosine")
    axes[1].plot(np.arange(1, L + 1), br, marker="o", ms=3)
    axes[1].set(xlabel="block", ylabel="Block Redundancy (eq. 1)", title="Block Redundancy, last token")
    axes[1].grid(True)
    fig.tight_layout()
    return fig


def lm_approx_vs_skip(table: pd.DataFrame, base_perplexity: float, name: str = "SmolLM2"):
    """The LM's held-out perplexity (log) per span of ``table`` (``llm.span_scores``), approximated and skipped,
    with ``base_perplexity`` dotted. Returns the figure."""
    missing = {"span", "ppl_approx", "ppl_skip"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks the columns {sorted(missing)}")
    fig, ax = plt.subplots(figsize=(11, 4))
    x = np.arange(len(table))
    ax.bar(x - 0.2, table.ppl_approx, 0.4, label="approximated (RBA)")
    ax.bar(x + 0.2, table.ppl_skip, 0.4, label="skipped")
    ax.axhline(base_perplexity, color="grey", ls=":", label="unmodified")
    ax.set(xticks=x, xticklabels=table.span, xlabel="blocks removed", ylabel="held-out perplexity", yscale="log",
           title=f"{name} on held-out Austen sentences")
    ax.legend()
    fig.tight_layout()
    return fig


def vit_redundancy(vit_br: Mapping[str, np.ndarray], dataset: str):
    """BR per block of each ViT of ``vit_br`` (name -> ``[L]``) on ``dataset`` (r05). Returns the figure."""
    if not vit_br:
        raise ValueError("vit_redundancy needs at least one ViT's Block Redundancy")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, br in vit_br.items():
        ax.plot(np.arange(1, len(br) + 1), br, marker="o", ms=3, label=name)
    ax.set(xlabel="block", ylabel="Block Redundancy", title=f"tracing ViTs on {dataset} ([CLS] token)")
    ax.legend()
    ax.grid(True)
    fig.tight_layout()
    return fig
