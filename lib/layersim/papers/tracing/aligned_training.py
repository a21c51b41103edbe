"""Aligned training against standard training, a multi-exit model and two ablations (tracing paper, §3, App. B.3,
Figures 4, 5, 14-16; notebook t03).

Aligned training minimises eq. (5), ``sum_l lambda_l CE(W h^(l), y)`` (:mod:`layersim.train.objectives`). ViTs are
trained at a *full* budget (standard, aligned) and a smaller *ablation* budget (standard, aligned, multi-exit,
CE-reg, uniform weights, shallower standard models), each ablation compared within its budget.
:func:`held_out_readings` and :func:`train_accuracy` read every block; :func:`effective_depths` gives Definition 1;
:func:`statistics` the tested values; ``fig*`` the figures (see docs/modules.md,
`layersim.papers.tracing.aligned_training`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from torch.utils.data import Subset

from layersim.inputs import image_data
from layersim.measures import collapse, trends
from layersim.measures import similarity as sim
from layersim.nets import readout
from layersim.notebook import plotting, results
from layersim.notebook.presets import ABL, shallow_depths
from layersim.train import objectives


#: the models of Figure 4 (a, b) and of the COS maps of Figure 4 (c, d), with their line styles
FIG4 = [("standard", "-"), ("aligned", "-"), ("standard" + ABL, "--"), ("aligned" + ABL, "--"),
        ("multi-exit" + ABL, "--")]




def train_accuracy_models(L: int) -> list[str]:
    """The models whose layer-wise accuracy is read on training images (Figure 5): standard and aligned at both
    budgets and the shallower standard models."""
    return ["standard", "aligned", "standard" + ABL, "aligned" + ABL,
            *[f"standard {d}-block{ABL}" for d in shallow_depths(L)]]


def _layerwise(model, images, own_heads: bool, device: Any):
    ev = readout.evaluate(model, images, device=device, logits_fn=objectives.multi_exit_logits if own_heads else None)
    return ev.hidden[1:], ev.labels, ev.accuracy


def held_out_readings(model, images, own_heads: bool = False, device: Any = "auto") -> dict[str, np.ndarray]:
    """What Figures 4, 14-16 read on held-out ``images`` at blocks ``1..L``: ``acc`` (eq. 2, or a multi-exit model's
    own heads with ``own_heads``), ``cos_last`` (centred COS of the class token with the last block), ``cos_mat``
    (all pairs) and ``nc1`` (NC1 before the final norm, footnote 5)."""
    blocks, labels, acc = _layerwise(model, images, own_heads, device)
    return {"acc": acc, "cos_last": sim.to_last(blocks, "cos"), "cos_mat": sim.layer_matrix(blocks, "cos"),
            "nc1": collapse.nc1_per_layer(blocks, labels)}


def train_subset(dataset: str, spec: Mapping, n: int, seed: int = 0) -> Subset:
    """The first ``n`` images (at most all) of the model's own seeded training set: ``spec["n_train"]`` images of
    ``dataset`` (all of them when 0 or None)."""
    full = image_data.image_dataset(dataset, "train", limit=spec["n_train"] or None, seed=seed)
    return Subset(full, range(min(n, len(full))))


def train_accuracy(model, dataset: str, spec: Mapping, n: int, seed: int = 0, device: Any = "auto") -> np.ndarray:
    """Layer-wise accuracy (eq. 2, the shared classifier) of ``model`` on the first ``n`` images of its own
    training set (:func:`train_subset`): Figure 5's train accuracy."""
    return _layerwise(model, train_subset(dataset, spec, n, seed), False, device)[2]


def describe_accuracy(test: Mapping[str, Mapping], train: Mapping[str, np.ndarray]) -> str:
    """One line per model with its test accuracy per block, then one per model read on training images."""
    return "\n".join([f"{name:40s} test accuracy per block {np.round(r['acc'], 3)}" for name, r in test.items()]
                     + [f"{name:40s} train accuracy per block {np.round(a, 3)}" for name, a in train.items()])


def effective_depths(train_acc: Mapping[str, np.ndarray], margin: float) -> dict[tuple[str, str], Any]:
    """The eps-effective depth (Definition 1) of the standard and aligned models at the ``"full"`` and
    ``"ablation"`` budgets, ``1 - eps`` being the standard model's last-block train accuracy minus ``margin``; keys
    ``(budget, "standard" | "aligned" | "eps")``."""
    depth: dict[tuple[str, str], Any] = {}
    for budget, suffix in [("full", ""), ("ablation", ABL)]:
        ref = train_acc["standard" + suffix][-1]
        for name in ["standard", "aligned"]:
            depth[(budget, name)], eps = readout.effective_depth_within(train_acc[name + suffix], ref, margin)
        depth[(budget, "eps")] = eps
    return depth


def describe_depths(depth: Mapping[tuple[str, str], Any]) -> str:
    """One line per budget: ``1 - eps`` and the effective depth of the standard and the aligned model."""
    return "\n".join(f"{b} budget: 1-eps = {1 - depth[(b, 'eps')]:.3f}; effective depth standard "
                     f"{depth[(b, 'standard')]}, aligned {depth[(b, 'aligned')]}" for b in ("full", "ablation"))


def statistics(R: Mapping[str, Mapping], depth: Mapping[tuple[str, str], Any]) -> dict[str, dict]:
    """Each of the paper's statements measured (:func:`layersim.notebook.results.measure`: its value, its note and
    the numbers recorded beside it), by claim name, from the test readings ``R`` (:func:`held_out_readings` by model) and the
    :func:`effective_depths`. Blocks ``1..L/2`` are the shallow half.

    Full budget: mean shallow accuracy and mean COS to the last block (blocks ``1..L-1``), aligned minus standard;
    ``|`` last-block accuracy, aligned minus standard ``|``; the largest block-to-block drop of the aligned
    accuracy (``trends.max_drop``); effective depth, standard minus aligned; the fraction of blocks where the
    aligned model's NC1 is lower. Ablation budget: mean ``|`` aligned minus multi-exit ``|`` accuracy over all
    blocks; mean shallow accuracy, aligned minus CE-reg; last-block accuracy, linear minus uniform weights."""
    std, ali = R["standard"], R["aligned"]
    L = len(std["acc"])
    half = slice(0, L // 2)

    def stat(value, note, **extra):
        return results.measure(value, note, **extra)

    return {
        "aligned_raises_shallow_accuracy": stat(
            ali["acc"][half].mean() - std["acc"][half].mean(),
            f"mean test accuracy, blocks 1..{L // 2}, aligned - standard (full budget)"),
        "aligned_raises_similarity": stat(
            (ali["cos_last"][:-1] - std["cos_last"][:-1]).mean(),
            f"mean COS to last, blocks 1..{L - 1}, aligned - standard (full budget)"),
        "aligned_final_accuracy_close": stat(
            abs(ali["acc"][-1] - std["acc"][-1]), "|last-block test accuracy, aligned - standard| (full budget)",
            standard=std["acc"][-1], aligned=ali["acc"][-1]),
        "aligned_monotone_accuracy": stat(
            trends.max_drop(ali["acc"]), "largest block-to-block drop of aligned test accuracy"),
        "effective_depth_smaller": stat(
            depth[("full", "standard")] - depth[("full", "aligned")],
            "eps-effective depth (train images), standard - aligned (full budget)",
            standard=depth[("full", "standard")], aligned=depth[("full", "aligned")], eps=depth[("full", "eps")]),
        "shared_vs_multi_classifier_on_par": stat(
            np.abs(R["aligned" + ABL]["acc"] - R["multi-exit" + ABL]["acc"]).mean(),
            "mean |aligned - multi-exit| test accuracy over all blocks (ablation budget)"),
        "ce_reg_weaker_than_aligned": stat(
            R["aligned" + ABL]["acc"][half].mean() - R["CE-reg" + ABL]["acc"][half].mean(),
            f"mean test accuracy, blocks 1..{L // 2}, aligned - CE-reg (ablation budget)"),
        "aligned_lowers_nc1": stat(
            np.mean(ali["nc1"] < std["nc1"]), "fraction of blocks with lower NC1, aligned vs standard (full budget)"),
        "uniform_weights_hurt_last_layer": stat(
            R["aligned" + ABL]["acc"][-1] - R["aligned (uniform)" + ABL]["acc"][-1],
            "last-block test accuracy, linear - uniform weights (ablation budget); recorded either way"),
    }


def _label(name: str) -> str:
    return name.replace(ABL, ", ablation budget")


def _layer_axes(axes, ids, ylabel: str | None = None, fontsize: float = 8) -> None:
    for ax in axes:
        ax.set_xlabel("layer")
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.set_xticks(ids)
        ax.grid(True)
        ax.legend(fontsize=fontsize)


def fig4_curves(R: Mapping[str, Mapping]):
    """Figure 4 (a, b): COS to the last layer and layer-wise test accuracy of the standard, aligned and multi-exit
    models (solid: full budget, dashed: ablation). Returns the figure."""
    import matplotlib.pyplot as plt

    ids = np.arange(1, len(R["standard"]["acc"]) + 1)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for metric, ax, ylabel in [("cos_last", axes[0], "COS to the last layer"),
                               ("acc", axes[1], "layer-wise test accuracy")]:
        for name, style in FIG4:
            ax.plot(ids, R[name][metric], style, marker="o", ms=3, label=_label(name))
        _layer_axes([ax], ids, ylabel)
    axes[0].set_title("(a) cosine similarity with the last layer")
    axes[1].set_title("(b) layer-wise test accuracy")
    return fig


def fig4_heatmaps(R: Mapping[str, Mapping]):
    """Figure 4 (c, d): COS of all block pairs of the :data:`FIG4` models (top: full budget, bottom: ablation).
    Returns the figure."""
    import matplotlib.pyplot as plt

    ids = np.arange(1, len(R["standard"]["acc"]) + 1)
    fig, axes = plt.subplots(2, 3, figsize=(15, 9.5))
    for ax, name in zip(axes.flat, [name for name, _ in FIG4[:2]] + [None] + [name for name, _ in FIG4[2:]]):
        if name is None:
            ax.axis("off")
            continue
        plotting.layer_heatmap(R[name]["cos_mat"], layers=ids, ax=ax, title=f"COS, all pairs: {name}", vmin=-0.2,
                               label="COS")
    return fig


def fig5(train_acc: Mapping[str, np.ndarray], depth: Mapping[tuple[str, str], Any], histories: Mapping[str, Mapping]):
    """Figure 5: (a) train accuracy of the ablation budget's standard models of every depth and its aligned model;
    (b) the full budget's with eps-effective depths and ``1 - eps``; (c) each model's training loss per epoch from
    ``histories``. Returns the figure."""
    import matplotlib.pyplot as plt

    L = len(train_acc["standard"])
    ids = np.arange(1, L + 1)
    shallow = [f"standard {d}-block{ABL}" for d in shallow_depths(L)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4))
    for name in shallow + ["standard" + ABL, "aligned" + ABL]:
        a = train_acc[name]
        label = name.replace(ABL, "") + (f" {L}-block" if name in ("standard" + ABL, "aligned" + ABL) else "")
        axes[0].plot(np.arange(1, len(a) + 1), a, marker="o", ms=3, label=label)
    axes[0].set_title("(a) ablation budget: layer-wise train accuracy")
    for name in ["standard", "aligned"]:
        axes[1].plot(ids, train_acc[name], marker="o", ms=3, label=f"{name} {L}-block")
        axes[1].axvline(depth[("full", name)], ls=":", color=axes[1].lines[-1].get_color())
    axes[1].axhline(1 - depth[("full", "eps")], color="grey", lw=0.8, ls="--", label=r"$1-\epsilon$")
    axes[1].set_title(r"(b) full budget: train accuracy, $\epsilon$-effective depth (dotted)")
    _layer_axes(axes[:2], ids, "layer-wise train accuracy")
    for name in shallow + ["standard" + ABL, "aligned" + ABL, "standard", "aligned"]:
        hist = histories[name]["history"]
        axes[2].plot([h["epoch"] for h in hist], [h["loss"] for h in hist], "--" if ABL in name else "-", marker="o",
                     ms=3, label=_label(name))
    axes[2].set(xlabel="epoch", ylabel="training loss (own objective)", title="(c) convergence")
    axes[2].xaxis.get_major_locator().set_params(integer=True)
    axes[2].grid(True)
    axes[2].legend(fontsize=7)
    return fig


def fig14_15(R: Mapping[str, Mapping], beta: float):
    """Figures 14 and 15 (ablation budget): COS to the last layer and test accuracy of the standard, CE-reg
    (``beta``) and aligned models, and aligned training with uniform vs linear weights. Returns the figure."""
    import matplotlib.pyplot as plt

    ids = np.arange(1, len(R["standard"]["acc"]) + 1)
    fig, axes = plt.subplots(1, 3, figsize=(17, 4))
    for name in ["standard", "CE-reg", "aligned"]:
        axes[0].plot(ids, R[name + ABL]["cos_last"], marker="o", ms=3, label=name)
        axes[1].plot(ids, R[name + ABL]["acc"], marker="o", ms=3, label=name)
    axes[0].set(ylabel="COS to the last layer", title=f"Fig. 14 (a): CE-reg (beta={beta:g}) vs aligned")
    axes[1].set(ylabel="layer-wise test accuracy", title="Fig. 14 (b): layer-wise test accuracy")
    for name, label in [("standard", "standard"), ("aligned (uniform)", "aligned, uniform weights 1/L"),
                        ("aligned", "aligned, linear weights 2l/(L(L+1))")]:
        axes[2].plot(ids, R[name + ABL]["acc"], marker="o", ms=3, label=label)
    axes[2].set(ylabel="layer-wise test accuracy", title="Fig. 15: uniform vs linearly increasing weights")
    _layer_axes(axes, ids)
    return fig


def fig16(R: Mapping[str, Mapping]):
    """The tracing paper's Figure 16: NC1 per layer (log scale) of the standard and aligned models at both budgets.
    Returns the figure."""
    import matplotlib.pyplot as plt

    ids = np.arange(1, len(R["standard"]["acc"]) + 1)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, style in FIG4[:4]:
        ax.plot(ids, R[name]["nc1"], style, marker="o", ms=3, label=_label(name))
    ax.set_yscale("log")
    _layer_axes([ax], ids, r"NC1 = tr($\Sigma_W \Sigma_B^\dagger$)/K (log)")
    ax.set_title("Fig. 16: within-class variability per layer")
    return fig


def cos_maps(R: Mapping[str, Mapping]) -> dict[str, np.ndarray]:
    """The all-pairs COS matrices that ``metrics.json`` keeps: those of the models of :data:`FIG4`."""
    return {name: R[name]["cos_mat"] for name, _ in FIG4}


def by_model(R: Mapping[str, Mapping], key: str) -> dict[str, np.ndarray]:
    """One reading (``"acc"``, ``"cos_last"``, ``"nc1"``, ...) of every model of ``R``, in order."""
    return {n: r[key] for n, r in R.items()}
