"""Alignment emerges from training, even on shuffled labels (alignment paper, Sections 4 and 4.2, Figure 2).

Figure 2 plots the squared projections ``(u_i^T y)^2`` of a label vector on a representation's left singular
vectors: (a, b) raw pixels with true and shuffled labels (:func:`pixel_shares`); (c, d) the last hidden layer of a
network trained on shuffled labels, before and after (:func:`shuffled_label_runs`, :func:`network_shares`). Shares
use :func:`layersim.papers.alignment.layers.top_share`; :func:`figure2_panels` feeds the figures;
:func:`emergence_claims` states the three statements (see docs/modules.md, `layersim.papers.alignment.emergence`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from layersim.measures import alignment as al, trends
from layersim.notebook import plotting, results, settings
from layersim.papers.alignment import layers as la
from layersim.train import small_nets

#: the representations of the network runs: the input pixels of the training points, the last hidden layer at
#: initialisation and after training on the shuffled labels
NETWORK_STATES = ("input", "init", "trained")
#: the colours of the four panels' alignment curves
PANEL_COLORS = ("tab:green", "tab:red", "grey", "tab:blue")

#: the rules of a02's settings (``layersim.notebook.settings``): the data set and its two classes, the points per
#: class and those the network trains on, its width and the top singular vectors counted
RULES = {"dataset": settings.choice("fashion-mnist", "digits", "mnist"),
         "classes": settings.seq(settings.integer(0), length=2, distinct=True), "n_per_class": settings.integer(1),
         "n_train": settings.integer(1), "width": settings.integer(0, meaning="0 means as wide as the input"),
         "top_k": settings.integer(1)}
#: a02's consistency checks: the classes exist in the data set, and the network trains on at most the task's points
CHECKS = [settings.classes_exist("classes", "dataset"),
          settings.at_most("n_train", lambda s: 2 * s["n_per_class"], "the task has 2 n_per_class points")]


def shuffled_labels(y, n_seeds: int, seed: int = 0) -> list[np.ndarray]:
    """Figure 2's shuffled label vectors: shuffle ``s`` permutes ``y`` with seed ``seed + 1000 + s``
    (:func:`layersim.papers.alignment.layers.shuffled`), for ``s < n_seeds``."""
    if n_seeds < 1:
        raise ValueError(f"n_seeds must be at least 1, got {n_seeds}")
    return [la.shuffled(y, seed=seed + 1000 + s) for s in range(n_seeds)]


def pixel_shares(X, y, shuffles: Sequence, k: int) -> dict:
    """Figure 2 (a, b) as numbers: the prepared pixels' SVD (``dec``), the true labels' top-``k`` share (``true``)
    and every shuffled labelling's (``shuffled``, an array)."""
    dec = al.svd(al.prepare(X))
    return {"dec": dec, "true": la.top_share(dec, y, k),
            "shuffled": np.array([la.top_share(dec, ys, k) for ys in shuffles])}


def training_accuracy(net, X, y) -> float:
    """The fraction of ``X``'s rows whose logit (the network's first output) has the sign of the ``+-1`` label."""
    with torch.no_grad():
        logits = net(torch.as_tensor(np.asarray(X), dtype=torch.float32))[:, 0].numpy()
    return float(np.mean((logits > 0) == (np.asarray(y) > 0)))


def shuffled_label_runs(X, shuffles: Sequence, n_train: int, depth: int, width: int, epochs: int, k: int,
                        seed: int = 0, log: Callable[[str], None] | None = None) -> list[dict]:
    """Figure 2 (c, d): per shuffle ``s``, a ``depth`` x ``width`` ReLU network without hidden biases (``width`` 0:
    as wide as the input), seeded ``seed + s``, trained on ``n_train`` rows with shuffle ``s``'s labels (BCE, Adam
    0.001, batch 64). Each run: ``dec`` (SVDs of :data:`NETWORK_STATES`), ``y``, ``hist``, ``acc``, ``seconds``,
    ``share``."""
    if not 1 <= n_train <= len(X):
        raise ValueError(f"n_train must be in 1..{len(X)}, got {n_train}")
    runs = []
    for s, ys in enumerate(shuffles):
        Xs, yt = X[:n_train], ys[:n_train]
        net = small_nets.make_mlp(X.shape[1], [width or X.shape[1]] * depth, hidden_bias=False, seed=seed + s)
        h_init = small_nets.hidden_representations(net, Xs)[-1]
        t0 = time.perf_counter()
        hist = small_nets.train_mlp(net, Xs, yt, loss="bce", epochs=epochs, batch_size=64, lr=1e-3, seed=seed + s)
        secs = time.perf_counter() - t0
        h_end = small_nets.hidden_representations(net, Xs)[-1]
        acc = training_accuracy(net, Xs, yt)
        dec = {"input": al.svd(al.prepare(Xs)), "init": al.svd(al.prepare(h_init)),
               "trained": al.svd(al.prepare(h_end))}
        runs.append(dict(dec=dec, y=yt, hist=hist, acc=acc, seconds=secs,
                         share={name: la.top_share(d, yt, k) for name, d in dec.items()}))
        if log is not None:
            log(f"seed {s}: BCE {hist[0]:.3f} -> {hist[-1]:.4f}, training accuracy {acc:.3f} ({secs:.0f} s); "
                f"top-{k} share: " + ", ".join(f"{name} {v:.3f}" for name, v in runs[-1]["share"].items()))
    return runs


def network_shares(runs: Sequence[dict]) -> dict:
    """``{state: (mean, standard error)}`` of the top-``k`` share over the runs of :func:`shuffled_label_runs`
    (:func:`layersim.measures.trends.mean_se`), for every state of :data:`NETWORK_STATES`."""
    if not runs:
        raise ValueError("no runs")
    return {name: trends.mean_se([r["share"][name] for r in runs]) for name in NETWORK_STATES}


def figure2_panels(dec_pixels, y, y_shuffled, run: Mapping, n_train: int) -> dict:
    """Figure 2's panels ``{short name: (title, SVD, label vector)}``: pixels with ``y`` (a) and ``y_shuffled`` (b),
    one run's last hidden layer at init (c) and trained (d) with its labels."""
    n = dec_pixels.shape[0]
    return {
        "(a) pixels, true": (f"(a) pixels, true labels ({n} points)", dec_pixels, y),
        "(b) pixels, shuffled": (f"(b) pixels, shuffled labels ({n} points)", dec_pixels, y_shuffled),
        "(c) network at init": (f"(c) last hidden layer at init, shuffled labels ({n_train} points)",
                                run["dec"]["init"], run["y"]),
        "(d) network trained": ("(d) last hidden layer after training on the shuffled labels", run["dec"]["trained"],
                                run["y"]),
    }


def projections_figure(panels: Mapping, k: int, show: int = 30):
    """Figure 2: per :func:`figure2_panels` entry, squared projections as bars and singular values as a line (first
    ``show``), the top-``k`` share in the title. Returns the figure."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (title, dec, lab) in zip(axes.ravel(), panels.values()):
        sigma, proj2 = la.label_projections(dec, lab)
        plotting.label_projection_bars(sigma, proj2, ax, show=show,
                                       title=f"{title}\ntop-{k} share {la.top_share(dec, lab, k):.3f}")
    fig.tight_layout()
    return fig


def panel_curves(panels: Mapping) -> dict:
    """Eq. 2's curve of every panel on its demo grid: ``{name: (thresholds / sqrt(m), curve)}``, rescaled to share
    one axis."""
    curves = {}
    for name, (_, dec, lab) in panels.items():
        m = dec.shape[0]
        tau = al.thresholds_for(m)  # the demo grid, scaled to sigma_max <= sqrt(m)
        curves[name] = (tau / np.sqrt(m), al.alignment_curve(dec, lab, tau))
    return curves


def panel_areas(curves: Mapping) -> dict:
    """The normalised area under every curve of :func:`panel_curves`
    (:func:`layersim.measures.alignment.alignment_area`)."""
    return {name: float(al.alignment_area(c, tn)) for name, (tn, c) in curves.items()}


def curves_figure(curves: Mapping):
    """The alignment curves of Figure 2's four panels (:func:`panel_curves`), each divided by ``||y||^2``,
    against ``tau / sqrt(n)``. Returns the figure."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for (name, (tn, c)), col in zip(curves.items(), PANEL_COLORS):
        ax.plot(tn, c / c[0], color=col, lw=2, label=name)
    ax.set_xlabel(r"threshold $\tau / \sqrt{n}$ (the demo's grid, 0 to 30 for n = 1000)")
    ax.set_ylabel(r"alignment / $\|y\|^2$")
    ax.set_title("eq. 2 for the four panels")
    ax.grid(True)
    ax.legend(fontsize=8)
    return fig


def emergence_claims(pixels: Mapping, shares: Mapping, runs: Sequence[dict], areas: Mapping, k: int,
                     n_train: int) -> dict:
    """The paper's three statements of Figure 2 measured (their thresholds, from its wording, are registered):

    * ``true_labels_aligned`` (2a): the true labels' top-``k`` share on the pixels is at least 0.5;
    * ``shuffled_labels_unaligned_in_input`` (2b): the shuffled labels' share (mean over shuffles) in units of
      chance ``k / n`` is at most 10;
    * ``training_on_shuffled_creates_alignment`` (2c, d): the trained last hidden layer's share (mean over the
      runs) is at least 0.5; the share at initialisation, on the same points' pixels and the training
      accuracies are recorded beside it.

    ``pixels``: :func:`pixel_shares`; ``shares``: :func:`network_shares`; ``areas``: :func:`panel_areas`.
    """
    n = pixels["dec"].shape[0]
    shuf = pixels["shuffled"]
    return {
        "true_labels_aligned": results.measure(pixels["true"],
                                               note=f"top-{k} share, pixels, true labels, n = {n}",
                                               chance=k / n, alignment_area=areas["(a) pixels, true"]),
        "shuffled_labels_unaligned_in_input": results.measure(
            float(shuf.mean()) / (k / n), note=f"top-{k} share, pixels, shuffled labels (mean of "
            f"{len(shuf)}), in units of chance k/n", share=float(shuf.mean()), chance=k / n, per_shuffle=shuf),
        "training_on_shuffled_creates_alignment": results.measure(
            float(shares["trained"][0]), note=f"top-{k} share, last hidden layer after training on "
            f"shuffled labels (mean of {len(runs)} seeds)", se=shares["trained"][1], at_init=shares["init"][0],
            at_init_se=shares["init"][1], input_same_points=shares["input"][0], chance=k / n_train,
            training_accuracy=[r["acc"] for r in runs]),
    }


def emergence_numbers(pixels: Mapping, shares: Mapping, runs: Sequence[dict], areas: Mapping) -> dict:
    """What a02's ``metrics.json`` records beside the claims: pixel shares, top 50 singular values, network shares,
    accuracies, losses, times, panel areas and panel (d)'s first 50 squared projections."""
    return dict(
        top_share_true=pixels["true"], top_share_shuffled=pixels["shuffled"], sigma_pixels_top=pixels["dec"].sigma[:50],
        network={name: {"mean": v[0], "se": v[1], "per_seed": [r["share"][name] for r in runs]}
                 for name, v in shares.items()},
        training_accuracy=[r["acc"] for r in runs], final_bce=[r["hist"][-1] for r in runs],
        train_seconds=[r["seconds"] for r in runs], alignment_area=dict(areas),
        projections_panel_d=la.label_projections(runs[0]["dec"]["trained"], runs[0]["y"])[1][:50],
    )
