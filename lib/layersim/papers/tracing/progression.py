"""How a representation progresses towards the last layer: sample-wise COS against linear CKA (tracing paper, §2.1,
Figures 2, 10, 11; appendix B.2's Figure 12). :func:`to_last_and_all_pairs`, :func:`residual_stream_views` and
:func:`evaluate_models` compute; :func:`curves_figure`, :func:`heatmap_grid`, :func:`cos_boxes_figure`,
:func:`residual_figure` draw, for t01 :func:`vit_curves_figure` and :func:`vit_heatmaps`, for t05
:func:`mlp_curves_figure` and :func:`mlp_heatmaps`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from layersim.measures import similarity
from layersim.nets import readout
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


def evaluate_models(models: Mapping, images, device="auto", log: Callable[[str], None] | None = print
                    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Every model of ``models`` on ``images`` (:func:`layersim.nets.readout.evaluate`, hidden layers ``1..L``, no
    embedding output): ``(accuracy, S)`` by name, the last-layer classifier's accuracy at every layer (eq. 2) and
    :func:`to_last_and_all_pairs` of the hidden layers (Fig. 12); ``log`` gets each model's shape and curves."""
    acc, S = {}, {}
    for name, model in models.items():
        ev = readout.evaluate(model, images, device=device, embedding=False)
        acc[name], S[name] = ev.accuracy, to_last_and_all_pairs(ev.hidden)
        if log is not None:
            log(" ".join(str(part) for part in (
                f"{name}: hidden states {ev.hidden.shape} (layers, samples, width)\n  layer-wise accuracy:",
                np.round(acc[name], 3), "\n  COS to last        :", np.round(S[name]["cos_last"], 3),
                "\n  CKA to last        :", np.round(S[name]["cka_last"], 3))))
    return acc, S


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


def vit_curves_figure(acc: np.ndarray, S: Mapping[str, np.ndarray], layers: Sequence[int], title: str):
    """Figure 2 (a): CKA and COS of every block of ``layers`` with the last (``S``: :func:`to_last_and_all_pairs`)
    and the last-layer classifier's accuracy ``acc`` at every block, one panel titled ``title``."""
    return curves_figure([(title, {"CKA to last layer": S["cka_last"], "COS to last layer": S["cos_last"],
                                   "layer-wise accuracy": acc})], layers, panel_size=(6, 4))


def vit_heatmaps(S: Mapping[str, np.ndarray], layers: Sequence[int]):
    """Figure 2 (c): COS and linear CKA between all pairs of ``layers`` (``S``: :func:`to_last_and_all_pairs`)."""
    return heatmap_grid([[(S["cos_matrix"], "COS between all pairs of layers"),
                          (S["cka_matrix"], "linear CKA between all pairs of layers")]], layers)


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


def mlp_curves_figure(acc: Mapping[str, np.ndarray], S: Mapping[str, Mapping[str, np.ndarray]],
                      residual: Mapping[str, bool], layers: Sequence[int], suptitle: str | None = None):
    """Appendix B.2's Figure 12: a panel (a), (b), ... per MLP of ``residual`` (name: with residual connections?),
    its layer-wise accuracy ``acc[name]`` and COS and CKA to the last layer (``S[name]``:
    :func:`to_last_and_all_pairs`) over the hidden ``layers``. Returns the figure."""
    return curves_figure(
        [(f"({chr(ord('a') + i)}) {len(layers)}-layer MLP, {'with' if residual[name] else 'without'} residual "
          "connections", {"layer-wise accuracy": acc[name], "COS to last layer": S[name]["cos_last"],
                          "CKA to last layer": S[name]["cka_last"]}) for i, name in enumerate(residual)],
        layers, ylabel="accuracy / similarity", ylim=(-0.05, 1.05), suptitle=suptitle)


def mlp_heatmaps(S: Mapping[str, Mapping[str, np.ndarray]], residual: Mapping[str, bool], layers: Sequence[int]):
    """COS and linear CKA between all pairs of hidden ``layers``, a row per MLP of ``residual`` (name: with residual
    connections?), from ``S[name]`` (:func:`to_last_and_all_pairs`). Returns the figure."""
    return heatmap_grid([[(S[name][f"{m}_matrix"], f"{title}, {'with' if residual[name] else 'without'} residual")
                          for m, title in [("cos", "COS"), ("cka", "linear CKA")]] for name in residual], layers,
                        panel_size=(5.5, 4.75))
