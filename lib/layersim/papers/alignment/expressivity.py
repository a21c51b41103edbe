"""Beyond expressivity: the alignment paper's opening experiment (Sections 3 and 4.2, Figures 1 and 5; notebook
a01).

Three expressive representations of one data set (a ReLU network's hidden layer, sparse codes, an RBF network's
hidden layer) all fit the training labels by least squares, yet gradient descent learns at different speeds on them
(Figure 1), in the order of their alignment (eq. 2, Figure 5). :func:`binary_task`, :func:`learned_representations`,
:func:`compare_representations`, the figures and :func:`claims` are the steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from layersim.inputs import features
from layersim.measures import alignment as al
from layersim.notebook import plotting, results, settings
from layersim.papers.alignment.transfer import recorded_steps
from layersim.train import linear, small_nets

#: the three representations the paper compares, and the network at initialisation (for reference)
NETWORK, RBF, SPARSE, AT_INIT = "ReLU network", "RBF network", "sparse coding", "ReLU network, at init"
MAIN = (NETWORK, RBF, SPARSE)
COLORS = {NETWORK: "tab:red", RBF: "tab:purple", SPARSE: "tab:blue", AT_INIT: "grey"}

#: the rules of a01's settings (``layersim.notebook.settings``): the data set and its two classes, the sizes of the
#: training and test sets, the representations' width and training, and the sparse coding's penalty and iterations
RULES = {
    "dataset": settings.choice("fashion-mnist"), "classes": settings.seq(settings.integer(0), length=2, distinct=True),
    "n_train": settings.integer(1), "n_test": settings.integer(1), "width": settings.integer(1),
    "nn_epochs": settings.integer(1), "rbf_epochs": settings.integer(1), "rbf_width": settings.real(0, open_low=True),
    "dl_alpha": settings.real(0, open_low=True), "dl_iter": settings.integer(1),
}


def _say(log: Callable[[str], None] | None, text: str) -> None:
    if log is not None:
        log(text)


def binary_task(images: np.ndarray, labels: np.ndarray, classes: Sequence[int], n_train: int, n_test: int,
                n_centres: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Figures 1 and 5's task: the images of ``classes`` shuffled with ``seed`` and cut into ``n_train``, ``n_test``
    and ``n_centres`` rows, pixels in [0, 1], labels ``y = 2t - 1``. Returns ``(X_train, X_test, centres, y_train,
    y_test)``."""
    if len(classes) != 2:
        raise ValueError(f"a binary task needs two classes, got {list(classes)}")
    rng = np.random.default_rng(seed)
    pool = rng.permutation(np.flatnonzero(np.isin(labels, classes)))
    if n_train + n_test + n_centres > len(pool):
        raise ValueError(f"{n_train} + {n_test} + {n_centres} points asked of the {len(pool)} images of classes "
                         f"{list(classes)}")
    i_tr, i_te = pool[:n_train], pool[n_train:n_train + n_test]
    i_c = pool[n_train + n_test:n_train + n_test + n_centres]
    X_tr, X_te, X_c = (images[i].reshape(len(i), -1).astype(np.float64) / 255.0 for i in (i_tr, i_te, i_c))
    y_tr = al.binary_targets((labels[i_tr] == classes[1]).astype(int))
    y_te = al.binary_targets((labels[i_te] == classes[1]).astype(int))
    return X_tr, X_te, X_c, y_tr, y_te


def learned_representations(X_train: np.ndarray, X_test: np.ndarray, centres: np.ndarray, y_train: np.ndarray,
                            width: int, nn_epochs: int, rbf_epochs: int, rbf_width: float, dl_alpha: float,
                            dl_iter: int, seed: int = 0, log: Callable[[str], None] | None = print):
    """The ``width``-dimensional representations of Figures 1 and 5: ``"ReLU network"`` (trained, and
    ``", at init"``), ``"RBF network"`` and ``"sparse coding"``. Returns
    ``(reps {name: [train, test]}, seconds, the networks' losses per epoch)`` (see docs/modules.md,
    `layersim.papers.alignment.expressivity`)."""
    reps, seconds = {}, {}
    t0 = time.perf_counter()
    net = small_nets.make_mlp(X_train.shape[1], [width], seed=seed)
    reps[AT_INIT] = [small_nets.hidden_representations(net, X)[0] for X in (X_train, X_test)]
    nn_hist = small_nets.train_mlp(net, X_train, y_train, loss="mse", epochs=nn_epochs, batch_size=64, lr=1e-3,
                                   seed=seed)
    reps[NETWORK] = [small_nets.hidden_representations(net, X)[0] for X in (X_train, X_test)]
    seconds[NETWORK] = time.perf_counter() - t0

    t0 = time.perf_counter()
    rbf = small_nets.RBFNet(centres, width=rbf_width)
    rbf_hist = small_nets.train_mlp(rbf, X_train, y_train, loss="mse", epochs=rbf_epochs, batch_size=64, lr=1e-2,
                                    seed=seed)
    reps[RBF] = [small_nets.hidden_representations(rbf, X)[0] for X in (X_train, X_test)]
    seconds[RBF] = time.perf_counter() - t0

    t0 = time.perf_counter()
    reps[SPARSE] = features.sparse_coding_features(X_train, width, alpha=dl_alpha, seed=seed, others=[X_test],
                                                   max_iter=dl_iter)
    seconds[SPARSE] = time.perf_counter() - t0

    _say(log, f"ReLU network: training MSE {nn_hist[0]:.3f} -> {nn_hist[-1]:.4f}; "
              f"RBF network: {rbf_hist[0]:.3f} -> {rbf_hist[-1]:.4f}")
    _say(log, f"fraction of zero entries in the sparse codes: {np.mean(reps[SPARSE][0] == 0):.3f}")
    _say(log, f"seconds: { {k: round(v, 1) for k, v in seconds.items()} }")
    return reps, seconds, nn_hist, rbf_hist


def numerical_rank(sigma: np.ndarray, rtol: float = 1e-10) -> int:
    """The number of singular values above ``rtol`` times the largest (``sigma`` sorted in decreasing order)."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.size == 0:
        return 0
    return int(np.sum(sigma > sigma[0] * rtol))


def compare_representations(reps: Mapping[str, Sequence[np.ndarray]], y_train: np.ndarray, y_test: np.ndarray,
                            thresholds, lrs: Sequence[float], steps: int, n_record: int = 60,
                            log: Callable[[str], None] | None = print) -> dict[str, dict]:
    """Section 3's views of every prepared representation: expressivity (rank, ``sigma_1``, least-squares MSEs),
    alignment (eq. 2 curve and area, Figure 5) and learning (Figure 1: gradient descent, best of ``lrs``). Returns
    ``{name: {"rank", "sigma_1", "ls_train", "ls_test", "curve", "area", "gd"}}``."""
    record = recorded_steps(steps, n_record)
    rows = {}
    for name, (A_tr, A_te) in reps.items():
        Phi_tr, Phi_te = al.prepare(A_tr), al.prepare(A_te)
        dec = al.svd(Phi_tr)
        ls = linear.least_squares_fit(Phi_tr, y_train, Phi_te, y_test)
        curve, area = al.curve_and_area(dec, y_train, thresholds)
        gd = linear.best_linear_curves(Phi_tr, y_train, lrs, steps=steps, Phi_test=Phi_te, y_test=y_test,
                                       record=record)
        rows[name] = dict(rank=numerical_rank(dec.sigma), sigma_1=dec.sigma[0], ls_train=ls["train_mse"],
                          ls_test=ls["test_mse"], curve=curve, area=area, gd=gd)
        _say(log, f"{name:24s} rank {rows[name]['rank']:5d}  least squares: train MSE {ls['train_mse']:.1e}, test MSE "
                  f"{ls['test_mse']:.3f}  | alignment area {area:.3f}  | GD best step {gd['lr']:g}: "
                  f"train {gd['train'][-1]:.4f}, test {gd['test'][-1]:.4f}")
    return rows


def alignment_figure(rows: Mapping[str, dict], thresholds, width: int, n: int):
    """Figure 5: the alignment curves of the three representations and of the network at initialisation
    (dotted), for ``n`` points of ``width``-dimensional representations."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    shown = [*MAIN, AT_INIT]
    plotting.alignment_curves({k: rows[k]["curve"] for k in shown}, thresholds, ax=ax,
                              title=f"Figure 5: alignment of {width}-d representations ({n} points)",
                              styles={k: dict(color=COLORS[k], ls=":" if k == AT_INIT else "-", lw=2) for k in shown})
    return fig


def learning_curves_figure(rows: Mapping[str, dict], names: Sequence[str] = MAIN):
    """Figure 1: training (dashed) and test (solid) MSE per representation at its best step size, against the step
    (log scales)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k in names:
        g = rows[k]["gd"]
        ax.plot(np.maximum(g["steps"], 0.5), g["train"], "--", color=COLORS[k], label=f"{k} train (step {g['lr']:g})")
        ax.plot(np.maximum(g["steps"], 0.5), g["test"], "-", color=COLORS[k], label=f"{k} test")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("gradient-descent step (step 0 drawn at 0.5)")
    ax.set_ylabel("mean squared error")
    ax.set_title("Figure 1: zero-initialised linear model on each representation")
    ax.grid(True)
    ax.legend(fontsize=8, ncol=1, loc="lower left")
    return fig


def claims(rows: Mapping[str, dict], network: str = NETWORK, others: Sequence[str] = (RBF, SPARSE)) -> dict:
    """The paper's three statements (``results.claim`` dicts) on :func:`compare_representations` rows:

    * ``all_expressive``: the largest closed-form training MSE of the three is at most 1e-6;
    * ``nn_aligns_better`` (Figure 5): the network's alignment area minus the larger of the others'; with the
      fraction of thresholds at which its curve is at least both others (to 1e-9);
    * ``nn_converges_faster`` (Figure 1): the smallest, over the others, of the mean gap in log10 training MSE
      (other minus network) over the recorded steps from step 1; with the fraction of those steps at which the
      network's training MSE is the lowest.
    """
    main = [network, *others]
    ls_max = max(rows[k]["ls_train"] for k in main)
    nn_curve = rows[network]["curve"]
    above = float(np.mean(np.all([nn_curve >= rows[k]["curve"] - 1e-9 for k in others], axis=0)))
    area_gap = rows[network]["area"] - max(rows[k]["area"] for k in others)
    logtr = {k: np.log10(rows[k]["gd"]["train"][1:]) for k in main}  # steps >= 1
    speed_gap = min(float(np.mean(logtr[k] - logtr[network])) for k in others)
    nn_lowest = float(np.mean(np.all([logtr[network] <= logtr[k] for k in others], axis=0)))
    return {
        "all_expressive": results.measure(ls_max, note=f"largest closed-form training MSE {ls_max:.1e}",
                                          **{f"ls_train_{k}": rows[k]["ls_train"] for k in main}),
        "nn_aligns_better": results.measure(area_gap, note="alignment area, network minus best other",
                                            fraction_of_thresholds_nn_highest=above,
                                            **{f"area_{k}": rows[k]["area"] for k in main}),
        "nn_converges_faster": results.measure(speed_gap, note="mean log10 training-MSE gap to the network, "
                                                                            "worst case of the two others",
                                             fraction_of_steps_nn_lowest=nn_lowest,
                                             **{f"final_train_{k}": rows[k]["gd"]["train"][-1] for k in main}),
    }


def representation_records(rows: Mapping[str, dict]) -> dict[str, dict]:
    """What ``metrics.json`` keeps per representation: rank, ``sigma_1``, least-squares MSEs, alignment area and
    curve, and the gradient-descent run."""
    return {k: {kk: v[kk] for kk in ("rank", "sigma_1", "ls_train", "ls_test", "area", "curve")}
            | {"gd_lr": v["gd"]["lr"], "gd_final_losses": v["gd"]["all"], "gd_steps": v["gd"]["steps"],
               "gd_train": v["gd"]["train"], "gd_test": v["gd"]["test"]} for k, v in rows.items()}
