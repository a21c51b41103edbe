"""Saturation events against the similarity to the last layer, on easy and hard images (tracing paper, §2.2, §3,
Figures 3 and 6).

A sample's saturation layer is the first block from which the shared classifier's top-1 never changes
(:func:`layersim.nets.readout.saturation_layer`). :func:`subset_events` and :func:`by_subset` count the events with
COS to the last block and accuracy; :func:`cos_before_last` and :func:`easy_above_hard` are the tested statistics;
:func:`events_figure` draws Figures 3 and 6 (Figure 6: standard vs aligned, eq. 5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from layersim.measures import similarity
from layersim.nets import readout
from layersim.notebook import plotting


def subset_events(blocks, labels, logits, mask) -> dict:
    """Saturation statistics of the samples in boolean ``mask``, from ``blocks [L, N, d]``, ``labels [N]`` and
    ``logits [L, N, K]``: ``n``, ``counts`` ``[L]``, ``mean_saturation`` (1..L), ``cos_last`` ``[L]`` (centred on
    the subset) and ``accuracy`` ``[L]`` (eq. 2)."""
    logits, labels, mask = np.asarray(logits), np.asarray(labels), np.asarray(mask)
    if logits.ndim != 3 or mask.dtype != bool or mask.shape != labels.shape or labels.shape[0] != logits.shape[1]:
        raise ValueError(f"subset_events needs logits [L, N, K], labels [N] and a boolean mask [N]; got logits "
                         f"{logits.shape}, labels {labels.shape}, mask {mask.shape} of {mask.dtype}")
    if not mask.any():
        raise ValueError("subset_events: the mask selects no sample")
    L = logits.shape[0]
    sat = readout.saturation_layer(logits) + 1  # block 1..L
    return {
        "n": int(mask.sum()),
        "counts": np.bincount(sat[mask], minlength=L + 1)[1:],
        "mean_saturation": float(sat[mask].mean()),
        "cos_last": similarity.to_last(blocks[:, mask], "cos"),
        "accuracy": readout.layer_accuracy(logits[:, mask], labels[mask]),
    }


def by_subset(blocks, labels, logits, hard_classes: Sequence[int]) -> dict[str, dict]:
    """:func:`subset_events` of ``"all"``, ``"easy"`` (labels not in ``hard_classes``) and ``"hard"`` samples
    (Fig. 3)."""
    labels = np.asarray(labels)
    hard = np.isin(labels, list(hard_classes))
    return {subset: subset_events(blocks, labels, logits, mask)
            for subset, mask in [("all", np.ones(len(labels), bool)), ("easy", ~hard), ("hard", hard)]}


def cos_before_last(events: Mapping) -> float:
    """Mean COS to the last block over blocks ``1..L-1`` (the last block, 1 by definition, left out)."""
    return events["cos_last"][:-1].mean()


def easy_above_hard(easy: Mapping, hard: Mapping) -> bool:
    """Figure 3's reading for one model: the easy images have both the higher mean COS to the last block
    (:func:`cos_before_last`) and the earlier mean saturation block."""
    return cos_before_last(easy) > cos_before_last(hard) and easy["mean_saturation"] < hard["mean_saturation"]


def describe(events: Mapping) -> str:
    """One line: the subset's size, mean saturation block, mean COS to the last block and last-block accuracy."""
    L = len(events["cos_last"])
    return (f"n={events['n']:5d}  mean saturation block {events['mean_saturation']:.2f}  mean COS to last "
            f"(blocks 1..{L - 1}) {cos_before_last(events):.3f}  last-block accuracy {events['accuracy'][-1]:.3f}")


def events_figure(panels: Sequence[tuple[str, Sequence[tuple[Mapping, str, str]]]], layers: Sequence[int],
                  panel_size=(7.5, 4.3)):
    """Figures 3 and 6: one panel per ``(title, [(events, label, colour), ...])``, bars of the fraction saturating
    per block and the COS with the last block on a twin axis. Returns the figure."""
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("events_figure needs at least one panel")
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_size[0] * len(panels), panel_size[1]), squeeze=False,
                             gridspec_kw={"wspace": 0.45})
    for ax, (title, entries) in zip(axes[0], panels):
        plotting.saturation_panel(ax, [(e["counts"] / e["n"], e["cos_last"], label, color)
                                       for e, label, color in entries], layers, title)
    return fig
