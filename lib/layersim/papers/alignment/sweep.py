"""Alignment before and after training across network designs (alignment paper, Section 5, Figures 6, 17, 18).

Imani, Hu & White, "Representation Alignment in Neural Networks" (Imani et al., TMLR 2022, https://openreview.net/forum?id=fLIWMnZ9ij) train
fully connected networks in five families of settings, each varying one design choice around a base
network (depth 4, width 128, Adam, ReLU, batch 64): depth, width, optimiser, activation (tanh,
PReLU, LeakyReLU, linear) and batch size (32, 128, 256). For every setting they compare the
alignment (eq. 2) of the final hidden layer after training with the input features and with the same
layer at initialisation, on training and test data, averaged over 5 runs.

* :func:`settings_grid` -- the five families as ``(family, label, config)`` rows, and the distinct
  configurations to train (:func:`unique_configs`);
* :func:`alignment_task` -- the data of one task: binary classification (labels +-1) or regression
  (targets moved to [-1, 1], Figure 6's caption);
* :func:`alignment_before_after` -- train one network and measure the three alignment curves on both
  splits (:func:`input_alignment`: the input features' curves, shared by every network on a task);
  :func:`layersim.notebook.plotting.alignment_family` draws one panel;
* :func:`run_sweep` -- every distinct network on every task for several runs; :func:`stacked_curves` one
  network's curves over the runs (:func:`layersim.papers.alignment.figures.sweep_figure` draws the families);
  :func:`area_cells` the paper's comparison per network, task and split, :func:`describe_cells` its summary
  per task, :func:`final_losses` the training loss each network ends with.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from layersim.measures import alignment as al, trends
from layersim.papers.alignment.layers import raw_images, unit_interval
from layersim.train import mlp, small_nets

#: The base network every family varies around (Section 5).
BASE = {"depth": 4, "width": 128, "optimizer": "adam", "activation": "relu", "batch_size": 64}
#: Step size of each optimiser (the paper gives none; Adam's is the demo's 0.001).
OPTIMIZER_LR = {"adam": 1e-3, "rmsprop": 1e-3, "sgd": 1e-2, "momentum": 1e-2}
#: Binary classification tasks: (data set, the two classes); the paper takes the first two classes.
CLASSIFICATION = {"fashion-mnist": (0, 1), "digits": (0, 1), "mnist": (0, 1), "cifar10": (0, 1)}
#: Regression tasks (continuous targets).
REGRESSION = ("diabetes",)


#: the activations the sweep's networks accept (``small_nets.make_mlp``)
ACTIVATIONS = tuple(mlp.ACTIVATIONS)


def check_families(families: dict[str, Sequence]) -> dict[str, list]:
    """``families`` as ``{family: [values]}`` if every family is a key of :data:`BASE` with a non-empty
    list of valid values (depth, width, batch size: integers >= 1; an optimiser of :data:`OPTIMIZER_LR`;
    an activation of :data:`ACTIVATIONS`), else ``ValueError`` naming the family and value."""
    valid = {"optimizer": lambda v: v in OPTIMIZER_LR, "activation": lambda v: v in ACTIVATIONS}
    is_count = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1  # noqa: E731
    if not isinstance(families, dict) or not families:
        raise ValueError(f"families is a non-empty dict {{family: [values]}}, got {families!r}")
    out = {}
    for family, values in families.items():
        if family not in BASE:
            raise ValueError(f"unknown family {family!r}; use keys of BASE {sorted(BASE)}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"family {family!r} needs a non-empty list of values, got {values!r}")
        bad = [v for v in values if not valid.get(family, is_count)(v)]
        if bad:
            allowed = {"optimizer": sorted(OPTIMIZER_LR), "activation": list(ACTIVATIONS)}.get(family, "integers >= 1")
            raise ValueError(f"family {family!r}: {bad} not allowed; use {allowed}")
        out[family] = list(values)
    return out


def settings_grid(families: dict[str, Sequence]) -> list[tuple[str, str, dict]]:
    """Rows ``(family, label, config)``: for each family (a key of :data:`BASE`) every value in turn,
    the other design choices at the base. ``families`` e.g. ``{"depth": [1, 2, 3, 4]}``
    (checked by :func:`check_families`)."""
    rows = []
    for family, values in check_families(families).items():
        for v in values:
            rows.append((family, f"{family}={v}", {**BASE, family: v}))
    return rows


def config_name(config: dict) -> str:
    """A stable short name of a configuration, e.g. ``d4-w128-adam-relu-b64``."""
    return (f"d{config['depth']}-w{config['width']}-{config['optimizer']}-{config['activation']}"
            f"-b{config['batch_size']}")


def unique_configs(rows) -> dict[str, dict]:
    """The distinct configurations of :func:`settings_grid` rows, by :func:`config_name` (the base
    network appears in every family but is trained once)."""
    return {config_name(c): c for _, _, c in rows}


def alignment_task(name: str, n_train: int, n_test: int, seed: int = 0) -> dict:
    """Inputs and labels of one task: ``X_train [n, m]``, ``y_train [n]``, ``X_test``, ``y_test``,
    ``kind`` ("classification" or "regression").

    Classification (:data:`CLASSIFICATION`): images of the task's two classes, pixels in [0, 1],
    labels ``y = 2t - 1``; fashion-mnist and digits offline, mnist and cifar10 through torchvision
    (paper scale). Regression: scikit-learn's bundled diabetes data (442 patients, 10 standardised
    features), the target moved to [-1, 1] with the training range. ``n_train + n_test`` distinct
    samples are drawn at random (``seed``) from the training split (diabetes: from all 442).
    """
    rng = np.random.default_rng(seed)
    if name in CLASSIFICATION:
        X, labels, top = raw_images(name, "train")
        a, b = CLASSIFICATION[name]
        pool = np.flatnonzero(np.isin(labels, (a, b)))
        t = (labels == b).astype(int)
        kind = "classification"
    elif name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, t = load_diabetes(return_X_y=True)
        top = 1.0
        pool = np.arange(len(X))
        kind = "regression"
    else:
        raise ValueError(f"unknown task {name!r}; use one of {sorted(CLASSIFICATION) + list(REGRESSION)}")
    if n_train < 2 or n_test < 1 or n_train + n_test > len(pool):
        raise ValueError(f"{name}: need n_train >= 2, n_test >= 1 and n_train + n_test <= {len(pool)}")
    idx = rng.permutation(pool)[: n_train + n_test]
    i_tr, i_te = idx[:n_train], idx[n_train:]
    X = X.reshape(len(X), -1)
    if kind == "classification":
        y_tr, y_te = al.binary_targets(t[i_tr]), al.binary_targets(t[i_te])
    else:
        lo, hi = t[i_tr].min(), t[i_tr].max()
        y_tr, y_te = unit_interval(t[i_tr], lo, hi), unit_interval(t[i_te], lo, hi)
    return {"X_train": np.asarray(X[i_tr], dtype=np.float64) / top, "y_train": y_tr,
            "X_test": np.asarray(X[i_te], dtype=np.float64) / top, "y_test": y_te, "kind": kind}


def alignment_before_after(task: dict, config: dict, epochs: int, seed: int = 0, thresholds=None,
                           input_curves: dict | None = None) -> dict:
    """Train ``make_mlp`` with ``config`` (:data:`BASE` keys) on ``task`` (:func:`alignment_task`) and
    measure the alignment of the labels with the input features, the last hidden layer at
    initialisation and after training, on the training and the test data.

    Loss: binary cross-entropy on logits for classification (the authors' demo), mean squared error
    for regression; step size :data:`OPTIMIZER_LR`. Every curve and area is
    :func:`layersim.measures.alignment.curve_and_area` (the paper's form of the representation, eq. 2) relative to
    ``||y||^2`` (it starts at 1). ``thresholds`` default: :func:`layersim.measures.alignment.thresholds_for` for each
    split's ``n``. ``input_curves``: the input features' curves and areas from :func:`input_alignment` (the
    same for every network on a task), reused instead of recomputed.

    Returns ``{"train"|"test": {"thresholds", "curves": {"input"|"init"|"trained": [T]}, "areas": {...}}}``
    plus the training loss ``history``.
    """
    missing = set(BASE) - set(config)
    if missing:
        raise ValueError(f"config lacks {sorted(missing)}")
    if config["optimizer"] not in OPTIMIZER_LR:
        raise ValueError(f"unknown optimizer {config['optimizer']!r}; use one of {sorted(OPTIMIZER_LR)}")
    X_tr, X_te = task["X_train"], task["X_test"]
    net = small_nets.make_mlp(X_tr.shape[1], [config["width"]] * config["depth"], activation=config["activation"], seed=seed)
    init = [small_nets.hidden_representations(net, X)[-1] for X in (X_tr, X_te)]
    loss = "bce" if task["kind"] == "classification" else "mse"
    history = small_nets.train_mlp(net, X_tr, task["y_train"], loss=loss, epochs=epochs, batch_size=config["batch_size"],
                           lr=OPTIMIZER_LR[config["optimizer"]], optimizer=config["optimizer"], seed=seed)
    trained = [small_nets.hidden_representations(net, X)[-1] for X in (X_tr, X_te)]
    inputs = input_alignment(task, thresholds) if input_curves is None else input_curves
    out = {"history": history}
    for j, split in enumerate(("train", "test")):
        y = task[f"y_{split}"]
        tau = _thresholds(len(y), thresholds)
        fits = {"input": inputs[split], "init": al.curve_and_area(init[j], y, tau, relative=True),
                "trained": al.curve_and_area(trained[j], y, tau, relative=True)}
        out[split] = {"thresholds": tau, "curves": {k: np.asarray(c) for k, (c, _) in fits.items()},
                      "areas": {k: a for k, (_, a) in fits.items()}}
    return out


def _thresholds(n: int, thresholds=None) -> np.ndarray:
    return al.thresholds_for(n) if thresholds is None else np.asarray(thresholds)


def input_alignment(task: dict, thresholds=None) -> dict:
    """Alignment of the input features of a task, ``{"train"|"test": (curve [T], area)}``
    (:func:`layersim.measures.alignment.curve_and_area`, the curve a fraction of ``||y||^2``)."""
    out = {}
    for split in ("train", "test"):
        y = task[f"y_{split}"]
        out[split] = al.curve_and_area(task[f"X_{split}"], y, _thresholds(len(y), thresholds), relative=True)
    return out


# ----------------------------------------------------------------------------- the whole sweep


def run_sweep(tasks: Mapping[str, Sequence[int]], configs: Mapping[str, dict], n_seeds: int, epochs: int,
              seed: int = 0, progress: bool = True) -> tuple[dict, dict]:
    """Figures 6, 17, 18: every network of ``configs`` (:func:`unique_configs`) on every task of ``tasks``
    (``{name: [n_train, n_test]}``, :func:`alignment_task`), ``n_seeds`` runs each; run ``r`` draws the task's
    data and initialises every network with seed ``seed + r``, and the input features' curves
    (:func:`input_alignment`) are computed once per draw.

    Returns ``(results, seconds)``: ``results[(task, config name)]`` the list of :func:`alignment_before_after`
    outputs, one per run; ``seconds[task]`` the time spent on that task (printed when ``progress``).
    """
    if int(n_seeds) < 1:
        raise ValueError(f"n_seeds must be at least 1, got {n_seeds}")
    res, seconds = {}, {}
    for task_name, (n_tr, n_te) in tasks.items():
        t0 = time.perf_counter()
        for r in range(int(n_seeds)):
            task = alignment_task(task_name, n_tr, n_te, seed=seed + r)
            inputs = input_alignment(task)  # the same for every network
            for name, cfg in configs.items():
                res.setdefault((task_name, name), []).append(
                    alignment_before_after(task, cfg, epochs=epochs, seed=seed + r, input_curves=inputs))
        seconds[task_name] = time.perf_counter() - t0
        if progress:
            print(f"{task_name}: {seconds[task_name]:.0f} s")
    return res, seconds


def stacked_curves(results: Mapping, task: str, config: dict, split: str, rep: str) -> np.ndarray:
    """One network's alignment curves over the runs of :func:`run_sweep`: ``[runs, T]`` of ``rep`` (``input``,
    ``init`` or ``trained``) on ``split`` (``train`` or ``test``)."""
    key = (task, config_name(config))
    if key not in results:
        raise ValueError(f"no runs of {key[1]} on {task!r}")
    return np.array([o[split]["curves"][rep] for o in results[key]])


def area_cells(results: Mapping) -> list[dict]:
    """The paper's comparison (Section 5: trained above both the input features and the initialisation) for
    every (task, network, split) of :func:`run_sweep`'s ``results``: the mean normalised areas of the input, the
    initial and the trained final hidden layer over the runs (``area_input``, ``area_init``, ``area_trained``),
    the standard error of the trained one, and ``above``: whether the trained mean exceeds both others."""
    cells = []
    for (task_name, name), outs in results.items():
        for split in ("train", "test"):
            a = {rep: np.array([o[split]["areas"][rep] for o in outs]) for rep in ("input", "init", "trained")}
            m = {rep: v.mean() for rep, v in a.items()}
            cells.append(dict(task=task_name, network=name, split=split, **{f"area_{k}": v for k, v in m.items()},
                              area_trained_se=float(trends.mean_se(a["trained"])[1]),
                              above=bool(m["trained"] > m["input"] and m["trained"] > m["init"])))
    return cells


def describe_cells(cells: Sequence[dict], tasks: Sequence[str]) -> str:
    """One line per split and task of :func:`area_cells`: the share of networks above both, and the mean areas
    of the input, the initial and the trained final hidden layer over the networks."""
    lines = []
    for split in ("train", "test"):
        for task_name in tasks:
            sub = [c for c in cells if c["split"] == split and c["task"] == task_name]
            if not sub:
                raise ValueError(f"no cells of task {task_name!r} on {split}")
            lines.append(f"{split:5s} {task_name:14s} above both in {np.mean([c['above'] for c in sub]):.0%}; mean area "
                         f"input {np.mean([c['area_input'] for c in sub]):.3f}, "
                         f"init {np.mean([c['area_init'] for c in sub]):.3f}, "
                         f"trained {np.mean([c['area_trained'] for c in sub]):.3f}")
    return "\n".join(lines)


def final_losses(results: Mapping) -> dict[str, float]:
    """``{"<task>/<config name>": the last-epoch training loss, mean over the runs}`` of :func:`run_sweep`."""
    return {f"{t}/{n}": float(np.mean([o["history"][-1] for o in outs])) for (t, n), outs in results.items()}
