"""Alignment and transfer between peaks functions (alignment paper, Section 7.1, Figures 10-12; notebook a07).

Figure 10: an MLP trained on a source peaks task S; the alignment (eq. 2) of S, a related task T1 and an unrelated
T2 for the inputs and the hidden layer before and after training (:func:`peaks_transfer_run`). Figure 11: linear
models trained by gradient descent on each representation for T1, T2 (:func:`linear_transfer`,
:func:`weight_norm_at_reduction`). Figure 12: the same with three hidden layers. :func:`transfer_runs` runs all,
then summaries, :func:`transfer_claims` and the figures (see docs/modules.md, `layersim.papers.alignment.peaks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from layersim.inputs import synthetic
from layersim.measures import alignment as al, trends
from layersim.notebook import results
from layersim.papers.alignment import transfer
from layersim.train import linear, small_nets

#: The three label vectors of one run: the source task S, the related T1, the unrelated T2.
TASK_KINDS = ("source", "related", "unrelated")
#: The representations Figure 10 compares: inputs, last hidden layer at init and after training on S.
REPRESENTATIONS = ("original", "init", "transfer")
#: The target tasks of Figure 11's linear models.
TARGET_KINDS = ("related", "unrelated")
#: Figure 11 (c, d): the reductions of the training loss at which the weight norm is read.
REDUCTION_LEVELS = np.linspace(0.05, 0.95, 19)
#: The colours, line styles and legend labels of the three representations in Figures 10 and 11.
REP_STYLE = {"original": dict(color="tab:orange", label="original (inputs)"),
             "init": dict(color="tab:blue", ls="--", label="init (hidden, before training)"),
             "transfer": dict(color="tab:green", label="transfer (hidden, trained on S)")}


def peaks_transfer_run(seed: int, hidden: Sequence[int] = (60,), n_source: int = 10000, n_test: int = 1000,
                       epochs: int = 50, lr: float = 1e-3, batch_size: int = 64, thresholds=None) -> dict:
    """One run of Figure 10 (Figure 12 with ``hidden=(60, 60, 60)``): a peaks setup, ``n_source`` training and
    ``n_test`` new points from ``seed``, ``make_mlp(60, hidden)`` trained on S, every curve divided by ``||y||^2``.

    Returns ``setup``, ``thresholds``, ``curves`` / ``areas`` ``{kind: {representation: ...}}``, ``layer_curves``,
    ``y`` / ``y_test``, ``reps`` / ``reps_test`` and ``history`` (see docs/modules.md,
    `layersim.papers.alignment.peaks`).
    """
    if n_source < 2 or n_test < 1 or epochs < 0:
        raise ValueError("need n_source >= 2, n_test >= 1 and epochs >= 0")
    setup = synthetic.peaks_setup(seed)
    train = synthetic.peaks_dataset(n_source, seed=seed)
    test = synthetic.peaks_dataset(n_test, seed=seed + 100000, label_mean=train.label_mean)
    cols = [setup[k] for k in TASK_KINDS]
    Y, Y_test = train.Y[:, cols], test.Y[:, cols]
    tau = al.thresholds_for(n_source) if thresholds is None else np.asarray(thresholds)

    net = small_nets.make_mlp(train.X.shape[1], list(hidden), seed=seed)
    layers = {"init": (small_nets.hidden_representations(net, train.X), small_nets.hidden_representations(net, test.X))}
    history = small_nets.train_mlp(net, train.X, Y[:, 0], loss="mse", epochs=epochs, batch_size=batch_size, lr=lr,
                           seed=seed)
    layers["transfer"] = (small_nets.hidden_representations(net, train.X), small_nets.hidden_representations(net, test.X))

    reps = {"original": train.X, "init": layers["init"][0][-1], "transfer": layers["transfer"][0][-1]}
    reps_test = {"original": test.X, "init": layers["init"][1][-1], "transfer": layers["transfer"][1][-1]}
    by_rep = {name: al.curve_and_area(Phi, Y, tau, relative=True) for name, Phi in reps.items()}
    curves = {k: {name: by_rep[name][0][i] for name in REPRESENTATIONS} for i, k in enumerate(TASK_KINDS)}
    areas = {k: {name: float(by_rep[name][1][i]) for name in REPRESENTATIONS} for i, k in enumerate(TASK_KINDS)}
    per_layer = {state: np.stack([al.curve_and_area(H, Y, tau, relative=True)[0] for H in layers[state][0]], axis=1)
                 for state in ("init", "transfer")}  # [kinds, layers, T]
    layer_curves = {k: {state: per_layer[state][i] for state in per_layer} for i, k in enumerate(TASK_KINDS)}
    return {"setup": setup, "thresholds": tau, "curves": curves, "areas": areas, "layer_curves": layer_curves,
            "y": dict(zip(TASK_KINDS, Y.T)), "y_test": dict(zip(TASK_KINDS, Y_test.T)),
            "reps": reps, "reps_test": reps_test, "history": history}


def linear_transfer(reps: dict, reps_test: dict, y, y_test, n_target: int = 100, lrs: Sequence[float] = (0.1, 1.0, 10.0),
                    steps: int = 1000, record=None, seed: int = 0) -> dict:
    """Figure 11: a zero-initialised linear model trained by full-batch gradient descent (MSE) on ``n_target``
    random rows of each of ``reps`` (prepared here), tested on ``reps_test``, the best of ``lrs`` kept. Returns
    ``{name: {"steps", "train_rel", "test_rel", "weight_norm", "lr"}}``, errors relative to predicting 0."""
    y, y_test = np.asarray(y, dtype=np.float64), np.asarray(y_test, dtype=np.float64)
    n = len(y)
    if not 1 <= n_target <= n:
        raise ValueError(f"n_target must be in 1..{n}, got {n_target}")
    idx = np.random.default_rng(seed).choice(n, size=n_target, replace=False)
    y_sub = y[idx]
    out = {}
    for name, Phi in reps.items():
        Phi = np.asarray(Phi)
        g = linear.best_linear_curves(al.prepare(Phi[idx]), y_sub, lrs, steps=steps,
                                      Phi_test=al.prepare(reps_test[name]), y_test=y_test, record=record)
        out[name] = {"steps": g["steps"], "train_rel": g["train"] / np.mean(y_sub ** 2),
                     "test_rel": g["test"] / np.mean(y_test ** 2), "weight_norm": g["weight_norm"], "lr": g["lr"]}
    return out


def weight_norm_at_reduction(train_rel, weight_norm, levels) -> np.ndarray:
    """Figure 11 (c, d): the weight norm at the first recorded step where the training loss is reduced by each of
    ``levels`` (``1 - train_rel``); NaN where never reached."""
    red = 1.0 - np.asarray(train_rel, dtype=np.float64)
    wn = np.asarray(weight_norm, dtype=np.float64)
    if red.shape != wn.shape or red.ndim != 1:
        raise ValueError("train_rel and weight_norm must be 1-d arrays of equal length")
    out = np.full(len(np.atleast_1d(levels)), np.nan)
    for j, level in enumerate(np.atleast_1d(levels)):
        hit = np.flatnonzero(red >= level)
        if len(hit):
            out[j] = wn[hit[0]]
    return out


# ----------------------------------------------------------------------------- the runs of a07


def transfer_runs(n_runs: int, seed: int = 0, width: int = 60, n_source: int = 10000, n_test: int = 1000,
                  epochs: int = 50, n_target: int = 100, lrs: Sequence[float] = (0.1, 1.0, 10.0), steps: int = 10000,
                  log: Callable[[str], None] | None = None) -> tuple[list, list, list, list]:
    """Every run of Figures 10-12: run ``r`` (seed ``seed + r``) is :func:`peaks_transfer_run` with one hidden
    layer of ``width``, with three, and :func:`linear_transfer` for T1 and T2, recorded at :func:`recorded_steps`.
    Returns ``(runs, deep, linear, seconds)``; ``log`` gets a line per run."""
    if n_runs < 1:
        raise ValueError(f"n_runs must be at least 1, got {n_runs}")
    record = transfer.recorded_steps(steps, 60)
    runs, deep, linear, seconds = [], [], [], []
    for r in range(n_runs):
        t0 = time.perf_counter()
        kw = dict(n_source=n_source, n_test=n_test, epochs=epochs)
        one = peaks_transfer_run(seed + r, hidden=[width], **kw)
        deep.append(peaks_transfer_run(seed + r, hidden=[width] * 3, **kw))
        linear.append({k: linear_transfer(one["reps"], one["reps_test"], one["y"][k], one["y_test"][k],
                                          n_target=n_target, lrs=lrs, steps=steps, record=record, seed=seed + r)
                       for k in TARGET_KINDS})
        for big in ("reps", "reps_test"):  # keep only what the figures need
            one.pop(big)
            deep[-1].pop(big)
        runs.append(one)
        seconds.append(time.perf_counter() - t0)
        if log is not None:
            log(f"run {r}: {one['setup']['names']}, source MSE {one['history'][0]:.4f} -> {one['history'][-1]:.5f} "
                f"(3 layers: {deep[-1]['history'][-1]:.5f}), {seconds[-1]:.1f} s")
    return runs, deep, linear, seconds


def area_table(runs: Sequence[dict]) -> dict:
    """Figure 10 as numbers: ``{task kind: {representation: [runs]}}``, the normalised alignment area of every
    run (:func:`peaks_transfer_run`'s ``areas``)."""
    if not runs:
        raise ValueError("no runs")
    return {k: {n: np.array([run["areas"][k][n] for run in runs]) for n in REPRESENTATIONS} for k in TASK_KINDS}


def area_summary(areas: Mapping) -> str:
    """One line per task kind: every representation's mean area ± its standard error over the runs."""
    return "\n".join(f"{kind:10s} alignment area  " + "  ".join(
        f"{n} {areas[kind][n].mean():.3f} ± {trends.mean_se(areas[kind][n])[1]:.3f}" for n in REPRESENTATIONS)
        for kind in TASK_KINDS)


def linear_test_errors(linear: Sequence[dict]) -> dict:
    """Figure 11's numbers per ``(target kind, representation)``: relative test error per run averaged over steps
    ``>= 1`` (``"mean"``) and at the last (``"final"``); ``"step_sizes"`` kept per run."""
    if not linear:
        raise ValueError("no runs")
    curves = {(k, n): np.array([x[k][n]["test_rel"] for x in linear]) for k in TARGET_KINDS for n in REPRESENTATIONS}
    return {"mean": {key: v[:, 1:].mean(axis=1) for key, v in curves.items()},
            "final": {key: v[:, -1] for key, v in curves.items()},
            "step_sizes": {f"{k}/{n}": [x[k][n]["lr"] for x in linear] for k in TARGET_KINDS for n in REPRESENTATIONS}}


def error_summary(errors: Mapping, steps: int) -> str:
    """One line per target kind: every representation's test error along the steps / at step ``steps`` (mean
    over the runs, :func:`linear_test_errors`), then the step sizes kept."""
    lines = [f"{kind:10s} test error, mean along the steps / at step {steps}:  " + "  ".join(
        f"{n} {errors['mean'][(kind, n)].mean():.3f} / {errors['final'][(kind, n)].mean():.3f}"
        for n in REPRESENTATIONS) for kind in TARGET_KINDS]
    return "\n".join(lines + [f"step sizes kept: {errors['step_sizes']}"])


def layer_areas(deep: Sequence[dict], thresholds) -> dict:
    """Figure 12 as numbers: ``{"source"|"related": {"init"|"transfer": [runs, layers]}}``, the normalised area
    (:func:`layersim.measures.alignment.alignment_area`) of every hidden layer's curve of the three-layer runs."""
    if not deep:
        raise ValueError("no runs")
    return {k: {s: np.array([[al.alignment_area(c, thresholds) for c in d["layer_curves"][k][s]] for d in deep])
                for s in ("init", "transfer")} for k in ("source", "related")}


def gap_claim(d, note: str) -> dict:
    """A claim on per-run differences ``d`` (positive = the paper's direction): mean minus two standard errors,
    required ``> 0``; mean, standard error, fraction positive and every ``d`` recorded."""
    d = np.asarray(d)
    m, se = trends.mean_se(d)
    return results.measure(trends.lower_bound(d), note=f"{note}; mean {float(m):.3f} ± {float(se):.3f}",
                           mean=m, standard_error=se, fraction_of_runs=float(np.mean(d > 0)), per_run=d)


def transfer_claims(areas: Mapping, test_mean: Mapping) -> dict:
    """The paper's five statements of Section 7.1 on ``areas`` (:func:`area_table`) and the mean relative test
    errors ``test_mean`` (:func:`linear_test_errors`' ``"mean"``), each a :func:`gap_claim`:

    * ``source_alignment_increases`` / ``related_alignment_increases`` (Figures 10a, b): area of transfer minus the
      larger area of init and original;
    * ``unrelated_alignment_decreases`` (Figure 10c): the smaller area of init and original minus transfer's;
    * ``related_transfer_generalizes_better`` (Figure 11a): the smaller test error of init and original minus
      transfer's, related task;
    * ``unrelated_negative_transfer`` (Figure 11b): transfer's test error minus the larger of init and original,
      unrelated task.
    """
    def gain(kind, better):
        a = areas[kind]
        if better:
            return a["transfer"] - np.maximum(a["init"], a["original"])
        return np.minimum(a["init"], a["original"]) - a["transfer"]

    def test_gap(kind, better):
        t = {n: test_mean[(kind, n)] for n in REPRESENTATIONS}
        if better:
            return np.minimum(t["init"], t["original"]) - t["transfer"]
        return t["transfer"] - np.maximum(t["init"], t["original"])

    return {
        "source_alignment_increases": gap_claim(gain("source", True), "area gap, transfer over best other"),
        "related_alignment_increases": gap_claim(gain("related", True), "area gap, transfer over best other"),
        "unrelated_alignment_decreases": gap_claim(gain("unrelated", False), "area gap, worst other over transfer"),
        "related_transfer_generalizes_better": gap_claim(test_gap("related", True),
                                                         "test-error gap, best other minus transfer"),
        "unrelated_negative_transfer": gap_claim(test_gap("unrelated", False),
                                                 "test-error gap, transfer minus worst other"),
    }


def transfer_numbers(runs: Sequence[dict], deep: Sequence[dict], errors: Mapping, deep_areas: Mapping,
                     seconds: Sequence[float]) -> dict:
    """What a07's ``metrics.json`` records beside the claims: runs' wall times and setups, thresholds, Figure 10's
    areas and curves, final source MSE, Figure 11's test errors and step sizes, Figure 12's areas per layer."""
    return dict(
        seconds_per_run=list(seconds), setups=[run["setup"]["names"] for run in runs], thresholds=runs[0]["thresholds"],
        alignment_areas=area_table(runs),
        alignment_curves_mean={k: {n: trends.mean_se([run["curves"][k][n] for run in runs])[0]
                                   for n in REPRESENTATIONS} for k in TASK_KINDS},
        source_final_mse={"one_layer": [run["history"][-1] for run in runs],
                          "three_layers": [d["history"][-1] for d in deep]},
        linear_test_error_mean={f"{k}/{n}": v for (k, n), v in errors["mean"].items()},
        linear_test_error_final={f"{k}/{n}": v for (k, n), v in errors["final"].items()},
        step_sizes_kept=errors["step_sizes"],
        three_layer_areas={k: {s: v.mean(axis=0) for s, v in d.items()} for k, d in deep_areas.items()},
    )


# ----------------------------------------------------------------------------- the figures of a07


def alignment_figure(runs: Sequence[dict]):
    """Figure 10: for S, T1 and T2, the normalised alignment curves of the inputs and the hidden layer at init and
    trained, mean over runs with a standard-error band. Returns the figure."""
    tau = runs[0]["thresholds"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    for ax, kind, tag in zip(axes, TASK_KINDS, "abc"):
        for name in REPRESENTATIONS:
            m, se = trends.mean_se([run["curves"][kind][name] for run in runs])
            style = dict(REP_STYLE[name])
            ax.plot(tau, m, lw=2, **style)
            ax.fill_between(tau, m - se, m + se, color=style["color"], alpha=0.25)
        ax.set_title(f"({tag}) {kind} task")
        ax.set_xlabel(r"threshold $\tau$")
        ax.grid(True)
    axes[0].set_ylabel(r"alignment / $\|y\|^2$")
    axes[0].legend()
    fig.suptitle(f"Figure 10: mean of {len(runs)} runs, shading = standard error", y=1.02)
    return fig


def linear_transfer_figure(linear: Sequence[dict], levels=REDUCTION_LEVELS):
    """Figure 11: (a, b) relative training (dashed) and test (solid) error along the steps, mean with a
    standard-error band; (c, d) the weight norm per loss reduction in ``levels``. Returns the figure."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for col, kind in enumerate(TARGET_KINDS):
        ax, axw = axes[0, col], axes[1, col]
        for name in REPRESENTATIONS:
            st = REP_STYLE[name]
            res = [x[kind][name] for x in linear]
            steps = np.maximum(res[0]["steps"], 0.5)
            for key, ls in (("train_rel", "--"), ("test_rel", "-")):
                m, se = trends.mean_se([x[key] for x in res])
                ax.plot(steps, m, ls=ls, color=st["color"], label=f"{name} {key[:-4]}")
                ax.fill_between(steps, m - se, m + se, color=st["color"], alpha=0.2)
            wn = np.array([weight_norm_at_reduction(x["train_rel"], x["weight_norm"], levels) for x in res])
            m, se = trends.mean_se(wn)
            axw.errorbar(levels, m, yerr=se, color=st["color"], marker="o", ms=3, label=st["label"])
        ax.set(xscale="log", xlabel="gradient-descent step (step 0 drawn at 0.5)", ylabel="MSE / mean squared label",
               title=f"({'ab'[col]}) {kind} task: train (dashed), test (solid)")
        ax.grid(True)
        ax.legend(fontsize=8)
        axw.set(xlabel="reduction of the training loss (fraction)", ylabel=r"weight norm $\|w\|$", yscale="log",
                title=f"({'cd'[col]}) {kind} task: weights needed")
        axw.grid(True)
    axes[1, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def layers_figure(deep: Sequence[dict]):
    """Figure 12: every layer's normalised alignment curve at init (dashed) and trained (solid, darker near the
    output) for S and T1, with the inputs; mean with a standard-error band. Returns the figure."""
    tau = deep[0]["thresholds"]
    n_layers = len(deep[0]["layer_curves"]["source"]["transfer"])
    shades = plt.cm.Greens(np.linspace(0.45, 1.0, n_layers))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, kind in zip(axes, ("source", "related")):
        m, _ = trends.mean_se([d["curves"][kind]["original"] for d in deep])
        ax.plot(tau, m, color="tab:orange", lw=2, label="original (inputs)")
        for layer in range(n_layers):
            for state, ls in (("init", "--"), ("transfer", "-")):
                m, se = trends.mean_se([d["layer_curves"][kind][state][layer] for d in deep])
                ax.plot(tau, m, ls=ls, color=shades[layer], lw=2 if state == "transfer" else 1,
                        label=f"layer {layer + 1} {'trained' if state == 'transfer' else 'init'}")
                ax.fill_between(tau, m - se, m + se, color=shades[layer], alpha=0.2)
        ax.set_title(f"{kind} task")
        ax.set_xlabel(r"threshold $\tau$")
        ax.grid(True)
    axes[0].set_ylabel(r"alignment / $\|y\|^2$")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Figure 12: three hidden layers, mean of {len(deep)} runs (darker = closer to the output)", y=1.02)
    return fig
