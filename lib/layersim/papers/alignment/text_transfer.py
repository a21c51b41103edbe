"""The alignment paper's pre-trained-network protocol on text, one step at a time (Section 7.2; Figures 13, 19, 20;
notebook a11).

A pretrained text encoder (MiniLM-L6 offline), the same at initialisation, the input and hand-crafted features are
compared on tasks between two Austen novels, with :mod:`layersim.papers.alignment.text`'s features and
:func:`~layersim.papers.alignment.pretrain.evaluate_task`. Steps: :func:`read_pools`, :func:`novel_pairs`,
:func:`task_representations`, :func:`text_transfer_runs`, :func:`layer_areas`, :func:`token_spreads`, the claims
(:func:`depth_claim`, :func:`monotone_claim`), :func:`text_numbers` and the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.measures import alignment as al, trends
from layersim.notebook import plotting, results, settings
from layersim.papers.alignment import pretrain as pt, text as at
from layersim.papers.alignment.transfer import recorded_steps
from layersim.train import linear

#: the names of the encoder's last hidden layer (mean-pooled) after pre-training and at initialisation
PRE, INIT = "MiniLM (pre-trained)", "MiniLM (init)"
#: the representations Figure 13 compares (alignment, linear models, small training sets)
MAIN = (PRE, INIT, at.INPUT, *at.HANDCRAFTED)
#: the two readings of every layer: mean-pooled over the tokens and the CLS token
TOKENS = ("mean", "cls")
#: the two states of the encoder
STATES = ("pre-trained", "init")
#: the colours of :data:`MAIN`
COLORS = {PRE: "tab:red", INIT: "grey", at.INPUT: "tab:orange", "LSA": "tab:green", "char n-grams": "tab:purple"}
#: the line style and colour of every layer reading in :func:`layers_figure`
LAYER_STYLES = {"pre-trained mean": ("o-", "tab:red"), "pre-trained cls": ("s-", "salmon"),
                "init mean": ("o--", "grey"), "init cls": ("s--", "silver")}

#: the rules of a11's settings (``layersim.notebook.settings``): the encoder, the tasks and their points, the tokens
#: read, the hand-crafted features' sizes, the linear models' steps and the small training sets
RULES = {"encoder": settings.text(), "n_tasks": settings.integer(1, 15), "n_points": settings.integer(4, 1200),
         "max_length": settings.integer(4), "lsa_dims": settings.integer(1), "char_features": settings.integer(1),
         "steps": settings.integer(1), "sizes": settings.seq(settings.integer(2), min_length=1, distinct=True),
         "repeats": settings.integer(1)}


def sizes_within_points(settings: Mapping) -> None:
    """A settings check: every small training-set size in ``settings["sizes"]`` is at most ``n_points``."""
    if max(settings["sizes"]) > settings["n_points"]:
        raise ValueError(f"parameter 'sizes': {settings['sizes']} must not exceed n_points={settings['n_points']}")


def read_pools(encoder: str, n_points: int, max_length: int, seed: int = 0, device="auto",
               progress: bool = False) -> tuple[dict, dict, float]:
    """The target tasks' sentences read once by each network: a pool of ``n_points // 2`` sentences per novel from
    the training and held-out chunks, every layer at CLS and mean-pooled. Returns ``(pools, feats, seconds)``,
    ``feats[(state, split)][token]`` float32 ``[layers + 1, N, d]`` for :data:`STATES`."""
    half = n_points // 2
    pools = {split: at.sentence_pool(split, half, seed=seed) for split in ("train", "validation")}
    pretrained, init, tokenizer = at.encoders(encoder, seed=seed)
    feats, t0 = {}, time.perf_counter()
    for tag, net in zip(STATES, (pretrained, init)):
        for split, pool in pools.items():
            feats[tag, split] = at.encoder_features(net, tokenizer, pool.text_a, tokens=("cls", "mean"),
                                                    max_length=max_length, device=device, progress=progress)
    return pools, feats, time.perf_counter() - t0


def describe_pools(encoder: str, pools: Mapping, feats: Mapping, seconds: float) -> str:
    """Two lines on :func:`read_pools`' result: the encoder's blocks and width, the sentences read and the time;
    the novels by label."""
    H = feats["pre-trained", "train"]["mean"]
    return (f"{encoder}: {H.shape[0] - 1} blocks, width {H.shape[2]}; {sum(len(p) for p in pools.values())} "
            f"sentences read by both networks in {seconds:.0f} s\n"
            f"novels: {dict(enumerate(pools['train'].label_names))}")


def novel_pairs(n_novels: int, n_tasks: int, seed: int = 0) -> list[tuple[int, int]]:
    """The target tasks: ``n_tasks`` different pairs of the ``n_novels`` novels (all pairs if there are fewer),
    drawn with ``numpy.random.default_rng(seed)`` and kept in the order of
    :func:`layersim.papers.alignment.pretrain.binary_pairs`."""
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be positive, got {n_tasks}")
    rng = np.random.default_rng(seed)
    all_pairs = pt.binary_pairs(range(n_novels))
    if not all_pairs:
        raise ValueError(f"{n_novels} novels make no pair")
    return [all_pairs[i] for i in np.sort(rng.choice(len(all_pairs), size=min(n_tasks, len(all_pairs)), replace=False))]


def task_representations(pools: Mapping, feats: Mapping, pair: Sequence[int], lsa_dims: int, char_features: int,
                         seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """One task's ``(reps, y_train, y_test)``, labels +-1: ``reps`` ``{name: (train, test)}`` holds the input and
    hand-crafted features, every layer of both networks (``"<state> <token> <layer>"``), and :data:`PRE`,
    :data:`INIT` (last layer, mean-pooled)."""
    i_tr, t_tr = at.pair_examples(pools["train"].labels, pair)
    i_te, t_te = at.pair_examples(pools["validation"].labels, pair)
    texts_tr = [pools["train"].text_a[i] for i in i_tr]
    texts_te = [pools["validation"].text_a[i] for i in i_te]
    reps = at.text_representations(texts_tr, texts_te, lsa_dims=lsa_dims, char_features=char_features, seed=seed)
    depth = feats["pre-trained", "train"]["mean"].shape[0]
    for tag in STATES:
        for tok in TOKENS:
            for layer in range(depth):
                reps[f"{tag} {tok} {layer}"] = (feats[tag, "train"][tok][layer, i_tr],
                                                feats[tag, "validation"][tok][layer, i_te])
    reps[PRE], reps[INIT] = reps[f"pre-trained mean {depth - 1}"], reps[f"init mean {depth - 1}"]
    return reps, al.binary_targets(t_tr), al.binary_targets(t_te)


def text_transfer_runs(pools: Mapping, feats: Mapping, pairs: Sequence, thresholds, lsa_dims: int, char_features: int,
                       lrs: Sequence[float], steps: int, sizes: Sequence[int], repeats: int, seed: int = 0,
                       log: Callable[[str], None] | None = None) -> tuple[list, list]:
    """Every task of Figures 13, 19, 20: :func:`task_representations`, then
    :func:`~layersim.papers.alignment.pretrain.evaluate_task` (linear models on :data:`MAIN`) and test errors after
    small training sets (``sizes``, ``repeats``). Returns ``(runs, small)``, ``small[k]`` ``{name: [len(sizes)]}``."""
    record = recorded_steps(steps, 40)
    names = pools["train"].label_names
    runs, small = [], []
    for k, pair in enumerate(pairs):
        reps, y_tr, y_te = task_representations(pools, feats, pair, lsa_dims, char_features, seed=seed)
        runs.append(pt.evaluate_task(reps, y_tr, y_te, thresholds, list(MAIN), lrs, steps, record))
        runs[-1]["pair"] = pair
        small.append({n: linear.sample_size_errors(al.prepare(reps[n][0]), y_tr, al.prepare(reps[n][1]), y_te, sizes,
                                                   lrs, steps=steps, repeats=repeats, seed=seed + k).mean(axis=1)
                      for n in MAIN})
        if log is not None:
            log(f"task {k + 1}/{len(pairs)} {names[pair[0]]} vs {names[pair[1]]}: alignment area " +
                ", ".join(f"{n} {runs[-1]['areas'][n]:.3f}" for n in MAIN))
    if log is not None and runs:
        log(f"dimensions: { {n: runs[0]['dims'][n] for n in MAIN} }")
    return runs, small


def layer_areas(mean_area: Mapping[str, float], depth: int) -> dict[str, list[float]]:
    """Alignment across depth (Section 5, Figure 7): ``{"<state> <token>": [area of layer 0 .. depth - 1]}`` from
    the mean areas over the tasks (:func:`layersim.papers.alignment.pretrain.mean_areas`)."""
    return {f"{tag} {tok}": [mean_area[f"{tag} {tok} {layer}"] for layer in range(depth)]
            for tag in STATES for tok in TOKENS}


def token_spreads(feats: Mapping) -> dict[str, np.ndarray]:
    """How much every reading varies across the training sentences, per layer
    (:func:`layersim.papers.alignment.text.relative_spread`): ``{"<state> <token>": [layers + 1]}``."""
    return {f"{tag} {tok}": at.relative_spread(feats[tag, "train"][tok]) for tag in STATES for tok in TOKENS}


def spread_summary(spread: Mapping[str, np.ndarray]) -> str:
    """:func:`token_spreads` as text, one line per reading."""
    return "\n".join(["spread of each token across sentences, per layer (variance / squared mean; "
                      "~0 = the same vector for every sentence):"] +
                     [f"  {k:18s} " + np.array2string(v, precision=6, floatmode="maxprec") for k, v in spread.items()])


def small_set_errors(small: Sequence[Mapping]) -> dict[str, np.ndarray]:
    """The test classification error after each small training-set size, mean over the tasks
    (:func:`text_transfer_runs`' ``small``), for every representation of :data:`MAIN`."""
    if not small:
        raise ValueError("no tasks")
    return {n: np.mean([s[n] for s in small], axis=0) for n in MAIN}


def final_test_errors(runs: Sequence[dict]) -> dict[str, float]:
    """The final test classification error of the logistic linear model, mean over the tasks, for :data:`MAIN`."""
    return {n: float(np.mean([r["gd"][n]["logistic"]["test_error"][-1] for r in runs])) for n in MAIN}


def learning_summary(final: Mapping, test_error: Mapping[str, float], err_small: Mapping, sizes: Sequence[int]) -> str:
    """Three lines: the final test losses (squared, logistic; :func:`layersim.papers.alignment.pretrain.final_losses`),
    the logistic model's final test error and the test error after the small training sets, for :data:`MAIN`."""
    return "\n".join([
        "final test loss (squared, logistic): " + str({n: (round(final[(n, "squared", "test")], 4),
                                                           round(final[(n, "logistic", "test")], 4)) for n in MAIN}),
        "final test classification error, logistic model: " + str({n: round(v, 3) for n, v in test_error.items()}),
        f"test error after {list(sizes)} training sentences: " + str({n: np.round(v, 3).tolist()
                                                                       for n, v in err_small.items()})])


def depth_claim(layer_area: Mapping[str, Sequence[float]]) -> dict:
    """``alignment_rises_with_depth_pretrained`` (Section 5, Figure 7): the Spearman correlation of depth and the
    pretrained network's mean-pooled area; every reading's correlation, last-minus-embedding difference and best
    layer recorded."""
    rho = {k: trends.spearman(np.arange(len(v)), v) for k, v in layer_area.items()}
    return results.measure(
        rho["pre-trained mean"],
        note="Spearman correlation of depth and mean-pooled alignment area, pre-trained",
        spearman=rho, last_minus_embedding={k: v[-1] - v[0] for k, v in layer_area.items()},
        best_layer={k: int(np.argmax(v)) for k, v in layer_area.items()})


def monotone_claim(layer_area: Mapping[str, Sequence[float]]) -> dict:
    """``no_monotone_rise_on_target_task`` (the appendix on Figure 12: "no such monotonous increase" on another
    task): the fraction of layer steps at which the pretrained mean-pooled area rises; holds below 1."""
    area = np.asarray(layer_area["pre-trained mean"], dtype=float)
    if area.size < 2:
        raise ValueError(f"a rise with depth needs at least two layers, got {area.size}")
    rises = np.diff(area) > 0
    return results.measure(float(rises.mean()), steps_rising=int(rises.sum()), steps=int(rises.size),
                           note="fraction of layer steps at which the pretrained mean-pooled area rises")


def text_numbers(pools: Mapping, pairs: Sequence, thresholds, mean_area: Mapping, layer_area: Mapping,
                 spread: Mapping, runs: Sequence[dict], final: Mapping, err_small: Mapping,
                 sizes: Sequence[int]) -> dict:
    """What a11's ``metrics.json`` records beside the claims: each task's novels, thresholds, areas (mean, by layer,
    per task), token spreads, dimensions, :data:`MAIN`'s mean curves, losses, step sizes and small-set errors."""
    names = pools["train"].label_names
    return dict(
        pairs=[[names[c] for c in p] for p in pairs], thresholds=thresholds, mean_area=dict(mean_area),
        layer_area=dict(layer_area), token_spread=dict(spread), dims=runs[0]["dims"],
        areas_per_task={n: [r["areas"][n] for r in runs] for n in MAIN},
        mean_curves={n: np.mean([r["curves"][n] for r in runs], axis=0) for n in MAIN},
        final_losses={f"{n} | {l} | {p}": v for (n, l, p), v in final.items()},
        chosen_step_sizes={n: {loss: [r["gd"][n][loss]["lr"] for r in runs] for loss in pt.LOSSES} for n in MAIN},
        small_training_sets={"sizes": sizes, "test_error": dict(err_small)},
    )


# ----------------------------------------------------------------------------- figures


def alignment_figure(runs: Sequence[dict], thresholds, depth: int):
    """Figure 13 (a, b): mean normalised alignment curves over tasks (band: one standard error) of the input and the
    mean-pooled last block at init and pretrained, then against hand-crafted features. Returns the figure."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    plotting.task_alignment_bands(axes[0], runs, [at.INPUT, INIT, PRE], thresholds, COLORS,
                                  f"(a) mean-pooled block {depth - 1}, {len(runs)} tasks (mean ± s.e.)")
    plotting.task_alignment_bands(axes[1], runs, [PRE, *at.HANDCRAFTED], thresholds, COLORS,
                                  "(b) MiniLM vs hand-crafted text features")
    return fig


def layers_figure(layer_area: Mapping[str, Sequence[float]], mean_area: Mapping[str, float]):
    """Alignment across depth (Section 5, Figure 7): every layer's mean area, pretrained and at init, mean-pooled
    and CLS, with the input and best hand-crafted feature. Returns the figure."""
    depth = len(layer_area["pre-trained mean"])
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(depth)
    for key, (marker, color) in LAYER_STYLES.items():
        ax.plot(x, layer_area[key], marker, color=color, label=key.replace("mean", "mean-pooled").replace("cls", "CLS"))
    ax.axhline(mean_area[at.INPUT], color="tab:orange", ls=":", label="input (bag of words)")
    best_hand = max(at.HANDCRAFTED, key=lambda h: mean_area[h])
    ax.axhline(mean_area[best_hand], color=COLORS[best_hand], ls=":", label=best_hand)
    ax.set_xticks(x, ["emb"] + [f"block {i}" for i in range(1, depth)])
    ax.set_ylabel("alignment area (fraction of $\\|y\\|^2$)")
    ax.set_title("alignment of every layer (mean over tasks)")
    ax.grid(True)
    ax.legend(fontsize=8)
    return fig


def learning_figure(runs: Sequence[dict], err_small: Mapping[str, Sequence[float]], sizes: Sequence[int]):
    """Figure 13 (c, d): training (dashed) and test (solid) losses of :data:`MAIN`'s linear models, mean over tasks;
    (e) the test error after ``sizes`` training sentences. Returns the figure."""
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.2))
    plotting.linear_learning_curves(axes[:2], runs, list(MAIN), COLORS)
    for n in MAIN:
        axes[2].plot(sizes, err_small[n], "o-", color=COLORS[n], label=n)
    axes[2].set(xscale="log", xlabel="training sentences", ylabel="test classification error",
                title="(e) logistic model trained on small training sets")
    axes[2].grid(True)
    axes[2].legend(fontsize=8)
    return fig
