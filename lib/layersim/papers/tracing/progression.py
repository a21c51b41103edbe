"""How a representation progresses towards the last layer: sample-wise COS against linear CKA (tracing paper, §2.1,
Figures 2, 10, 11; appendix B.2's Figure 12). :func:`to_last_and_all_pairs` and :func:`residual_stream_views`
compute; :func:`curves_figure`, :func:`heatmap_grid`, :func:`cos_boxes_figure` and :func:`residual_figure` draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from layersim.measures import similarity
from layersim.notebook import plotting


def to_last_and_all_pairs(layers) -> dict[str, np.ndarray]:
    """COS and linear CKA of every layer of ``layers`` ``[L, N, d]`` with the last and between all pairs:
    ``cos_last`` (centred, footnote 2) and ``cka_last`` (eq. 3), length ``L`` (Fig. 2 a, Fig. 12), and
    ``cos_matrix``, ``cka_matrix`` ``[L, L]`` (Fig. 2 c)."""
    return {"cos_last": similarity.to_last(layers, "cos"), "cka_last": similarity.to_last(layers, "cka"),
            "cos_matrix": similarity.layer_matrix(layers, "cos"), "cka_matrix": similarity.layer_matrix(layers, "cka")}


def residual_stream_views(hidden) -> dict[str, np.ndarray]:
    """Figures 10 and 11 on ``hidden [L + 1, N, d]``: ``cos_samples`` (centred COS of each block with block ``L``),
    ``adjacent`` (raw ``COS(h^(l-1), h^(l))``) and ``norm_ratio`` (``||h^(l-1)|| / ||h^(l) - h^(l-1)||``, eq. 1),
    each ``[L, N]``."""
    shape = tuple(getattr(hidden, "shape", np.shape(hidden)))
    if len(shape) != 3 or shape[0] < 2:
        raise ValueError(f"residual_stream_views needs [L + 1, N, d] with L >= 1 (the embedding output first), "
                         f"got shape {shape}")
    blocks = hidden[1:]
    return {"cos_samples": np.stack([similarity.cosine_per_sample(h, blocks[-1]) for h in blocks]),
            "adjacent": similarity.adjacent_cosine(hidden),
            "norm_ratio": np.stack([similarity.residual_norm_ratio(hidden[l - 1], hidden[l])
                                    for l in range(1, hidden.shape[0])])}


def curves_figure(panels: Sequence[tuple[str, Mapping[str, Sequence[float]]]], layers: Sequence[int],
                  ylabel: str = "similarity / accuracy", suptitle: str | None = None, panel_size=(6, 4.2),
                  ylim: tuple[float, float] | None = None):
    """One panel of layer curves per ``(title, {label: values})``, a shared y axis (Fig. 2 a; Fig. 12 (a, b)).
    Returns the figure."""
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("curves_figure needs at least one panel")
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_size[0] * len(panels), panel_size[1]), sharey=True,
                             squeeze=False)
    for ax, (title, curves) in zip(axes[0], panels):
        plotting.layer_curves(dict(curves), layers=layers, ax=ax, ylabel=ylabel, title=title)
        if ylim is not None:
            ax.set_ylim(*ylim)
    if suptitle:
        fig.suptitle(suptitle, y=1.0)
    return fig


def heatmap_grid(rows: Sequence[Sequence[tuple[np.ndarray, str]]], layers: Sequence[int], panel_size=(5.5, 4.6),
                 label: str = "similarity (1: identical)"):
    """All-pairs layer heatmaps, ``rows`` of ``(matrix, title)`` (Fig. 2 c), colour bars labelled ``label``. Returns
    the figure."""
    import matplotlib.pyplot as plt

    if not rows or any(len(r) != len(rows[0]) or not r for r in rows):
        raise ValueError("heatmap_grid needs rows of (matrix, title) panels, every row as long as the first")
    fig, axes = plt.subplots(len(rows), len(rows[0]), figsize=(panel_size[0] * len(rows[0]), panel_size[1] * len(rows)),
                             squeeze=False)
    for row, panels in zip(axes, rows):
        for ax, (matrix, title) in zip(row, panels):
            plotting.layer_heatmap(matrix, layers=layers, ax=ax, title=title, label=label)
    fig.tight_layout()
    return fig


def cos_boxes_figure(cos_samples: Sequence[np.ndarray], layers: Sequence[int]):
    """The tracing paper's Figure 10: per-sample COS of every layer with the last layer, one box per layer."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    plotting.layer_boxes(cos_samples, layers=layers, ax=ax, ylabel="COS to the last layer", reference=0.0,
                         title="per-sample COS of each layer with the last layer")
    return fig


def residual_figure(adjacent: Sequence[np.ndarray], norm_ratio: Sequence[np.ndarray], layers: Sequence[int]):
    """Figure 11: per-sample COS of adjacent layers on the raw residual stream (left) and the skip-to-residual norm
    ratio, log scale (right)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.5))
    plotting.layer_boxes(adjacent, layers=layers, ax=axes[0], ylabel=r"COS($h^{(\ell-1)}, h^{(\ell)}$)",
                         title="adjacent layers (raw residual stream)")
    plotting.layer_boxes(norm_ratio, layers=layers, ax=axes[1], log=True, reference=1.0,
                         ylabel=r"$\|h^{(\ell-1)}\| / \|f(h^{(\ell-1)})\|$", title="skip branch / residual branch")
    return fig
