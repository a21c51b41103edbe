"""The figures and the HTML page of a layer report (:class:`layersim.analysis.layer_report.LayerReport`).

:func:`figures` draws the all-pairs matrices as seaborn heatmaps, the per-layer and per-step lenses as curves
(:data:`PER_LAYER`, :data:`PER_STEP`; skipping and approximating blocks in one panel, :data:`TOGETHER`) and the
saturation layers as a histogram. :func:`html_page` is one self-contained page: what was read, a row per lens
(its result or why it was skipped) and the figures embedded; every string is escaped (see docs/modules.md,
``layersim.analysis.figures``).
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

__all__ = ["MATRIX_LABELS", "PER_LAYER", "PER_STEP", "TOGETHER", "figures", "html_page"]

#: what the colour of each all-pairs matrix of the report measures
MATRIX_LABELS = {"cka/matrix": "linear CKA", "cos/matrix": "COS"}
#: per-layer lenses drawn against the layer, with their axis label
PER_LAYER = {"cos/to_last": "COS with the last layer", "cka/to_last": "CKA with the last layer",
             "alignment/area": "alignment area", "probe/accuracy": "linear-probe accuracy",
             "logit_lens/accuracy": "logit-lens accuracy", "collapse/nc1": "NC1 (log scale)"}
#: per-step lenses (entry i-1 compares layers i-1 and i); per-sample-step ones are drawn by their median
PER_STEP = {"redundancy/block": "Block Redundancy (-MSE)", "redundancy/rba_error": "RBA held-out 1 - R²",
            "clusters/block_diagonal": "two-cluster score (split after layer)",
            "cos/adjacent": "adjacent-layer cosine (median)", "residual/norm_ratio": "skip / residual norm (median)",
            "redundancy/skip_change": "final representation: relative MSE",
            "redundancy/rba_change": "final representation: relative MSE"}
#: per-step lenses drawn in one panel (the redundancy paper's skip vs approximate): panel title -> (lens, legend)
TOGETHER = {"skip vs approximate (log scale)": (("redundancy/skip_change", "blocks skipped"),
                                                ("redundancy/rba_change", "blocks approximated (RBA)"))}


def _heatmap(ax: Any, matrix: np.ndarray, layers: list[int], title: str, label: str) -> None:
    """One layer x layer matrix as a seaborn heatmap, first layer top left, values written in cells up to 13
    layers."""
    import seaborn as sns

    m = np.asarray(matrix, dtype=float)
    step = max(1, -(-len(layers) // 13))
    sns.heatmap(m, ax=ax, vmin=min(0.0, float(np.nanmin(m))), vmax=1.0, cmap="viridis", square=True,
                annot=len(layers) <= 13, fmt=".2f", annot_kws={"fontsize": 6},
                xticklabels=step, yticklabels=step, cbar_kws={"label": label, "fraction": 0.046, "pad": 0.04})
    ax.set_xticklabels([str(layers[int(t.get_text())]) for t in ax.get_xticklabels()], rotation=0)
    ax.set_yticklabels([str(layers[int(t.get_text())]) for t in ax.get_yticklabels()], rotation=0)
    ax.set_xlabel("layer")
    ax.set_ylabel("layer")
    ax.set_title(title)


def _panels(key: str, table: dict, results: dict) -> list[tuple[str, tuple]]:
    """The panels of one figure: ``(heading, ((lens, legend), ...))`` for each lens of ``table`` that ran, the
    lenses of :data:`TOGETHER` in one panel where more than one of them ran."""
    panels = [(n, ((n, None),)) for n in table if n in results]
    if key == "per_step":
        for heading, members in TOGETHER.items():
            present = tuple(m for m in members if m[0] in results)
            if len(present) > 1:
                panels = [p for p in panels if p[0] not in dict(present)] + [(heading, present)]
    return panels


def figures(report: Any, title: str = "") -> dict[str, Any]:
    """The report's figures, ``{file stem: matplotlib figure}``: ``matrices`` (CKA and COS between all pairs),
    ``per_layer`` and ``per_step`` (a panel per lens) and ``saturation`` (a histogram), each only when one of its
    lenses ran."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

    res, layers = report.results, report.layers
    out = {}
    mats = [n for n in ("cka/matrix", "cos/matrix") if n in res]
    if mats:
        fig, axes = plt.subplots(1, len(mats), figsize=(6.2 * len(mats), 5), squeeze=False)
        for ax, name in zip(axes[0], mats):
            _heatmap(ax, res[name], layers, name, MATRIX_LABELS[name])
        fig.suptitle(title)
        out["matrices"] = fig
    for key, table, xs in (("per_layer", PER_LAYER, np.asarray(layers)),
                           ("per_step", PER_STEP, np.asarray(layers[1:]))):
        panels = _panels(key, table, res)
        if not panels:
            continue
        cols = min(3, len(panels))
        rows = -(-len(panels) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
        for ax, (heading, members) in zip(axes.ravel(), panels):
            for (name, legend), color in zip(members, ("tab:blue", "tab:orange")):
                v = np.asarray(res[name], dtype=float)
                ax.plot(xs, np.median(v, axis=1) if v.ndim == 2 else v, "o-", color=color, label=legend)
            if heading == "collapse/nc1" or len(members) > 1:
                ax.set_yscale("log")
            if len(members) > 1:
                ax.legend(frameon=False, fontsize=8)
            ax.set_title(heading, fontsize=10)
            ax.set_ylabel(table[members[0][0]], fontsize=9)
            ax.set_xlabel("layer (0 = embeddings)" if key == "per_layer" else "layer i (compared with i - 1)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(panels):]:
            ax.axis("off")
        fig.suptitle(title)
        fig.tight_layout()
        out[key] = fig
    if "logit_lens/saturation" in res:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        sns.histplot(np.asarray(res["logit_lens/saturation"]), discrete=True, color="tab:orange", ax=ax)
        ax.set_xlim(min(layers) - 0.5, max(layers) + 0.5)
        ax.set_xlabel("saturation layer")
        ax.set_ylabel("samples")
        ax.set_title(f"logit_lens/saturation ({title})", fontsize=10)
        out["saturation"] = fig
    return out


def _png(fig: Any) -> str:
    """``fig`` as a base64 PNG (closed after)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_STYLE = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}"
          "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
          "img{max-width:100%}")


def html_page(report: Any, title: str = "") -> str:
    """One self-contained HTML page of ``report``: what was read (``report.meta``), one row per lens (ran: a one-line
    digest; skipped: why) and every figure of :func:`figures` as an embedded PNG; nothing loaded from the network."""
    esc = html.escape
    meta = report.meta
    lines = [f"{meta.get('n_samples')} samples, layers {', '.join(map(str, report.layers))} (0 = embedding output, "
             f"i = output of block i), width {meta.get('width')}, token: {meta.get('token')}",
             f"logits: {meta.get('logits')}", f"skip / approximate lenses: {meta.get('surgery')}"]
    if meta.get("constant_layers_left_out"):
        lines.append(f"left out: layer(s) {meta['constant_layers_left_out']}, the same vector in every sample")
    if "subsample" in meta:
        lines.append(meta["subsample"]["why"])
    rows = "".join(f"<tr><td><code>{esc(name)}</code></td><td>{esc(paper)}</td><td>{esc(text)}</td></tr>"
                   for name, paper, text in report.summary_rows())
    figs = "".join(f'<h3>{esc(stem)}</h3><img alt="{esc(stem)}" src="data:image/png;base64,{_png(fig)}">'
                   for stem, fig in figures(report, title).items())
    heading = esc(f"Layer report: {title}" if title else "Layer report")
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{heading}</title><style>{_STYLE}</style>'
            f"</head><body><h1>{heading}</h1>" + "".join(f"<p>{esc(str(x))}</p>" for x in lines)
            + f"<h2>Every lens</h2><table><tr><th>lens</th><th>paper</th><th>result</th></tr>{rows}</table>"
            + f"<h2>Figures</h2>{figs}</body></html>\n")
