"""Alignment before and after training across network designs (alignment paper, Section 5, Figures 6, 17, 18).

The paper varies one design choice at a time around a base MLP (depth 4, width 128, Adam, ReLU, batch 64): depth,
width, optimiser, activation and batch size, and compares the final hidden layer's alignment (eq. 2) after training
with the input and with initialisation. :func:`settings_grid` lists the settings, :func:`alignment_task` the data,
:func:`alignment_before_after` trains and measures one network, :func:`run_sweep` all of them, and
:func:`area_cells` makes the comparison.
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
    """``families`` (``{family: [values]}``) if every family is a key of :data:`BASE` with valid values, else
    ``ValueError`` naming family and value."""
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
    """Rows ``(family, label, config)``: each value of each family (e.g. ``{"depth": [1, 2, 3, 4]}``), the other
    choices at the base."""
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
    """``X_train``, ``y_train``, ``X_test``, ``y_test``, ``kind`` of one task: two image classes with ``y = 2t - 1``
    (:data:`CLASSIFICATION`), or diabetes regression with the target moved to [-1, 1]; ``n_train + n_test`` samples
    drawn with ``seed``."""
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
    """Train ``make_mlp`` with ``config`` on ``task`` (BCE for classification, MSE for regression) and measure the
    alignment of the input, the last hidden layer at init and trained, on both splits, relative to ``||y||^2``.

    ``input_curves``: :func:`input_alignment`'s result to reuse. Returns ``{"train"|"test": {"thresholds", "curves",
    "areas"}}`` plus ``history``.
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
    """Figures 6, 17, 18: every network of ``configs`` on every task of ``tasks`` (``{name: [n_train, n_test]}``),
    ``n_seeds`` runs, run ``r`` seeded ``seed + r``. Returns ``(results, seconds)``:
    ``results[(task, config name)]`` lists :func:`alignment_before_after` outputs."""
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
    """Section 5's comparison per (task, network, split): mean normalised areas ``area_input``, ``area_init``,
    ``area_trained``, the trained one's standard error, and ``above`` (trained exceeds both)."""
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
    """One line per split and task of :func:`area_cells`: the share of networks above both and the mean areas."""
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
