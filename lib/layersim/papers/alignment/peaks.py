"""Alignment and transfer between peaks functions (alignment paper, Section 7.1, Figures 10-12).

Imani, Hu & White, "Representation Alignment in Neural Networks" (``../shared/papers/001_*``):

* **Figure 10** -- an MLP (60 inputs, hidden ReLU layers of 60 units, one linear output) is trained
  with Adam (step 0.001, batch 64) on the mean squared error of a source peaks task S, on 10000
  points. The alignment (eq. 2) of the labels of S, of a related task T1 (the same three variables in
  another order) and of an unrelated task T2 (the three other variables) is measured for the
  original inputs, the hidden representation at initialisation and after training on S
  (:func:`peaks_transfer_run`).
* **Figure 11** -- 100 of the points train a zero-initialised linear model by gradient descent on
  each representation for T1 and T2 (three step sizes, the best kept), tested on 1000 new points;
  errors along the steps and the weight norm needed for a given reduction of the training loss
  (:func:`linear_transfer`, :func:`weight_norm_at_reduction`).
* **Figure 12** -- the same with three hidden layers: every layer's alignment for S and T1
  (``layer_curves`` of :func:`peaks_transfer_run`).

Runs are summarised across seeds by their mean and standard error (:func:`layersim.measures.trends.mean_se`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layersim.measures import alignment as al
from layersim.train import small_nets

#: The three label vectors of one run: the source task S, the related T1, the unrelated T2.
TASK_KINDS = ("source", "related", "unrelated")
#: The representations Figure 10 compares: inputs, last hidden layer at init and after training on S.
REPRESENTATIONS = ("original", "init", "transfer")


def peaks_transfer_run(seed: int, hidden: Sequence[int] = (60,), n_source: int = 10000, n_test: int = 1000,
                       epochs: int = 50, lr: float = 1e-3, batch_size: int = 64, thresholds=None) -> dict:
    """One run of Figure 10 (and Figure 12 with ``hidden=(60, 60, 60)``).

    Draws a setup (:func:`layersim.measures.alignment.peaks_setup` with ``seed``), ``n_source`` training
    points (seed ``seed``) and ``n_test`` new points (seed ``seed + 100000``, labels centred with the
    training means); trains ``make_mlp(60, hidden, seed=seed)`` on the source labels.

    Alignment is measured on the training points by :func:`layersim.measures.alignment.curve_and_area` (the
    paper's form of every representation, eq. 2), every curve divided by ``||y||^2`` (so it starts at 1).
    ``thresholds`` default: :func:`layersim.measures.alignment.thresholds_for` ``(n_source)``, the demo grid (0..30
    for 1000 points) scaled by ``sqrt(n_source / 1000)``.

    Returns a dict: ``setup``, ``thresholds``, ``curves`` ``{kind: {representation: [T]}}`` (last
    hidden layer), ``areas`` (the same, their normalised areas),
    ``layer_curves`` ``{kind: {"init"|"transfer": [layers, T]}}``, the labels ``y`` / ``y_test``
    ``{kind: [n]}``, the representations ``reps`` / ``reps_test`` ``{representation: [n, d]}`` (last
    layer) and the source-training loss ``history``.
    """
    if n_source < 2 or n_test < 1 or epochs < 0:
        raise ValueError("need n_source >= 2, n_test >= 1 and epochs >= 0")
    setup = al.peaks_setup(seed)
    train = al.peaks_dataset(n_source, seed=seed)
    test = al.peaks_dataset(n_test, seed=seed + 100000, label_mean=train.label_mean)
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
    """Figure 11: a zero-initialised linear model trained by full-batch gradient descent (mean squared
    error) on ``n_target`` randomly chosen rows of each representation, tested on all of ``reps_test``.

    ``reps`` / ``reps_test``: ``{name: [n, d]}`` raw representations (put in the paper's form here);
    ``y`` [n], ``y_test`` [m] target labels. For each representation the step size in ``lrs`` with the
    lowest final training loss is kept (:func:`layersim.measures.alignment.best_linear_curves`).

    Returns ``{name: {"steps", "train_rel", "test_rel", "weight_norm", "lr"}}``: errors relative to
    predicting 0 (MSE divided by the mean squared label of that set, so both start at 1).
    """
    y, y_test = np.asarray(y, dtype=np.float64), np.asarray(y_test, dtype=np.float64)
    n = len(y)
    if not 1 <= n_target <= n:
        raise ValueError(f"n_target must be in 1..{n}, got {n_target}")
    idx = np.random.default_rng(seed).choice(n, size=n_target, replace=False)
    y_sub = y[idx]
    out = {}
    for name, Phi in reps.items():
        Phi = np.asarray(Phi)
        g = al.best_linear_curves(al.prepare(Phi[idx]), y_sub, lrs, steps=steps, Phi_test=al.prepare(reps_test[name]),
                                  y_test=y_test, record=record)
        out[name] = {"steps": g["steps"], "train_rel": g["train"] / np.mean(y_sub ** 2),
                     "test_rel": g["test"] / np.mean(y_test ** 2), "weight_norm": g["weight_norm"], "lr": g["lr"]}
    return out


def weight_norm_at_reduction(train_rel, weight_norm, levels) -> np.ndarray:
    """Figure 11 (c, d): the weight norm at the first recorded step where the training loss has been
    reduced by at least each fraction in ``levels`` (reduction ``1 - train_rel``, ``train_rel`` the
    training loss relative to its value at step 0); NaN for a level never reached."""
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
