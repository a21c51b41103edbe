"""Where the label vector sits in a network's representations: the alignment paper's Figures 2 and 7.

Figure 2 (Sections 4, 4.2) plots the squared projections ``(u_i^T y)^2`` of the labels on a representation's left
singular vectors; :func:`top_share` measures "mostly on the top singular vectors" (chance ``k / n``). Figure 7
(Section 5) compares the alignment curves (eq. 2) of the input and every hidden layer before and after training:
:func:`layer_alignment`, :func:`layer_runs` (:func:`figure7_runs`: both tasks of a05), :func:`area_steps`,
:func:`layer_metrics`. Tasks: :func:`binary_task`, :func:`regression_task`, :func:`shuffled`. Representations get
:func:`layersim.measures.alignment.prepare` before any SVD.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from layersim.inputs import image_data, subsets
from layersim.measures import alignment as al, trends
from layersim.notebook import settings
from layersim.train import small_nets

#: image data sets read through torchvision (the paper's scale; not offline)
_TORCHVISION = ("mnist", "cifar10", "cifar100")


# ----------------------------------------------------------------------------- tasks


def raw_images(dataset: str, split: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Raw images, labels and the pixel maximum of one split of an image data set."""
    if dataset == "fashion-mnist":
        images, labels = image_data.load_fashion_mnist(split)
        return images, labels, 255.0
    if dataset == "digits":
        images, labels = image_data.load_digits("all" if split == "train" else split)
        return images, labels, 16.0
    if dataset in _TORCHVISION:
        base = image_data.load_torchvision(dataset, split)
        return np.asarray(base.data), np.asarray(base.targets), 255.0
    raise ValueError(f"unknown image data set {dataset!r}; use fashion-mnist, digits, {', '.join(_TORCHVISION)}")


def binary_task(dataset: str, classes: Sequence[int], n_per_class: int, seed: int = 0,
                split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """A balanced binary task from two classes, as the paper builds it: ``X`` float64 ``[2 n_per_class, pixels]`` in
    ``[0, 1]`` and ``t`` (1 for ``classes[1]``), shuffled. ``dataset``: ``fashion-mnist``, ``digits`` (offline),
    ``mnist``, ``cifar10``, ``cifar100``. ``ValueError`` unless ``classes`` are two labels with enough samples."""
    if len(classes) != 2 or classes[0] == classes[1]:
        raise ValueError(f"a binary task needs two distinct classes, got {classes}")
    images, labels, top = raw_images(dataset, split)
    idx, t = subsets.class_subset(labels, classes, n_per_class, seed=seed, draw="per_class")
    X = images[idx].reshape(len(idx), -1).astype(np.float64) / top
    return X, t


#: the offline regression tasks of :func:`regression_task`: name -> what it is
REGRESSION_DATA = {
    "diabetes": "scikit-learn's bundled 442 patients, 10 features, disease progression after one year",
    "digits": "scikit-learn's 1797 8x8 handwritten digits, 64 pixels (61 not constant), the digit's value 0-9",
}

#: the points of each offline regression task (what :func:`check_regression_points` checks before anything loads)
REGRESSION_SIZES = {"diabetes": 442, "digits": 1797}

#: the fewest points a05's regression task may be cut to: one training batch of :func:`layer_runs`
MIN_REGRESSION_POINTS = 64

#: the rules of a05's settings (``layersim.notebook.settings``): the image task (data set, two classes, points,
#: epochs), the regression task (data set, points, epochs) and the networks' width
RULES = {
    "image_dataset": settings.choice("fashion-mnist", "digits", "mnist", "cifar10", "cifar100"),
    "classes": settings.seq(settings.integer(0), length=2, distinct=True), "n_points": settings.integer(2),
    "image_epochs": settings.integer(1), "regression_dataset": settings.choice(*REGRESSION_DATA),
    "regression_points": settings.optional(settings.integer(MIN_REGRESSION_POINTS), "all points"),
    "regression_epochs": settings.integer(1), "width": settings.integer(1),
}


def check_regression_points(settings: Mapping) -> None:
    """A check of a05's settings (``settings.pick(..., checks=)``): ``regression_points`` (None: all) is at most the
    size of ``regression_dataset`` (:data:`REGRESSION_SIZES`); one ``ValueError`` naming both otherwise."""
    n, dataset = settings.get("regression_points"), settings["regression_dataset"]
    size = REGRESSION_SIZES[dataset]
    if n is not None and n > size:
        raise ValueError(f"parameter 'regression_points': {n} is more than the {size} points of {dataset!r}; "
                         f"regression_points must be at most {size} (None: all of them)")


def regression_data(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """The raw features and targets of an offline regression task (:data:`REGRESSION_DATA`)."""
    if dataset == "diabetes":
        from sklearn.datasets import load_diabetes

        return load_diabetes(return_X_y=True)
    if dataset == "digits":
        images, labels = image_data.load_digits("all")
        return images.reshape(len(images), -1).astype(np.float64), labels.astype(np.float64)
    raise ValueError(f"unknown regression data set {dataset!r}; use one of {', '.join(REGRESSION_DATA)}")


def regression_task(dataset: str = "diabetes", n: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A regression task with standardised features (constant ones dropped) and its label moved to ``[-1, 1]``, as
    Figure 6's caption says. ``dataset``: one of :data:`REGRESSION_DATA` (offline stand-ins for UCI CT Position);
    ``n``: a random subset drawn with ``seed`` (None: all, shuffled); ``ValueError`` unless ``1 <= n <= size``."""
    X, y = regression_data(dataset)
    if n is not None and not 1 <= n <= len(X):
        raise ValueError(f"n must be None (all) or in [1, {len(X)}], the points of {dataset!r}; got {n}")
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X)) if n is None else rng.choice(len(X), size=n, replace=False)
    sd = X.std(0)
    varies = sd > 0
    X = (X[:, varies] - X[:, varies].mean(0)) / sd[varies]
    return X[idx], unit_interval(y[idx])


def unit_interval(y, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """``y`` moved linearly so that ``lo`` -> -1 and ``hi`` -> 1 (default: ``y``'s own range; pass a training range
    for test targets); ``ValueError`` for an empty range."""
    y = np.asarray(y, dtype=np.float64)
    lo = y.min() if lo is None else lo
    hi = y.max() if hi is None else hi
    if hi == lo:
        raise ValueError("a constant label vector cannot be moved onto [-1, 1]")
    return 2.0 * (y - lo) / (hi - lo) - 1.0


def shuffled(y, seed: int = 0) -> np.ndarray:
    """A random permutation of the label vector (Figure 2b-d): same labels, no tie to the inputs."""
    return np.random.default_rng(seed).permutation(np.asarray(y))


# ----------------------------------------------------------------------------- measurements


def top_share(Phi, y, k: int) -> float | np.ndarray:
    """The fraction of ``||y||^2`` on the ``k`` top left singular vectors, ``sum_{i <= k} (u_i^T y)^2 / ||y||^2``,
    for ``Phi`` as given (prepared) or its :class:`~layersim.measures.alignment.SVD`: ``k / n`` for an evenly spread
    label, 1 within the top ``k``. ``y`` [n] gives a float, ``[n, m]`` an array."""
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k}")
    sp = al.spectrum(Phi, y)
    if np.any(sp.norm2 == 0):
        raise ValueError("a zero label vector has no share")
    share = sp.proj2[:, : int(k)].sum(axis=1) / sp.norm2
    return float(share[0]) if np.ndim(y) == 1 else share


def label_projections(Phi, y) -> tuple[np.ndarray, np.ndarray]:
    """Figure 2's two series for one label vector: the singular values ``sigma_i`` (descending) and
    ``(u_i^T y)^2`` for ``i = 1..min(n, d)``."""
    if np.ndim(y) != 1:
        raise ValueError("label_projections takes one label vector [n]")
    sp = al.spectrum(Phi, y)
    return sp.sigma, sp.proj2[0]


def layer_alignment(model, X, y, thresholds) -> np.ndarray:
    """Eq. 2's alignment curve of the input and every hidden layer of an MLP (Figure 7): ``[1 + hidden layers,
    len(thresholds)]``, the input first."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    reps = [X, *small_nets.hidden_representations(model, X)]
    return np.stack([al.curve_and_area(R, y, thresholds)[0] for R in reps])


# ----------------------------------------------------------------------------- Figure 7, several runs


def layer_names(depth: int) -> list[str]:
    """Figure 7's representations: ``["input", "hidden 1", ..., "hidden <depth>"]``."""
    if int(depth) < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    return ["input"] + [f"hidden {i + 1}" for i in range(int(depth))]


def figure7_task(kind: str, dataset: str, seed: int = 0, classes: Sequence[int] = (0, 1),
                 n_points: int = 10000, regression_points: int | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """One Figure 7 run's data and loss ``(X, y, loss)``: ``"classification"``, :func:`binary_task`
    (``n_points // 2`` per class, ``y = 2t - 1``, ``"bce"``); ``"regression"``, :func:`regression_task` on
    ``regression_points`` of the data set (None: all; ``"mse"``)."""
    if kind == "classification":
        X, t = binary_task(dataset, classes, n_points // 2, seed=seed)
        return X, al.binary_targets(t), "bce"
    if kind == "regression":
        X, y = regression_task(dataset, n=regression_points, seed=seed)
        return X, y, "mse"
    raise ValueError(f"kind must be 'classification' or 'regression', got {kind!r}")


def layer_runs(kind: str, dataset: str, epochs: int, n_seeds: int, width: int = 128, depth: int = 3,
               seed: int = 0, classes: Sequence[int] = (0, 1), n_points: int = 10000, batch_size: int = 64,
               lr: float = 1e-3, regression_points: int | None = None) -> dict:
    """Figure 7 on one task over ``n_seeds`` seeds: the authors' demo MLP (``depth`` x ``width``, ReLU, no hidden
    bias) on :func:`figure7_task` (``n_points``, ``regression_points``), curves of the input and every hidden layer
    before and after ``epochs`` of Adam.

    Returns ``init``, ``trained`` (``[1 + depth, T]`` per run), ``loss``, ``seconds``, ``tau``, ``n`` and
    ``area_init`` / ``area_trained`` ``[runs, 1 + depth]``.
    """
    if int(n_seeds) < 1:
        raise ValueError(f"n_seeds must be at least 1, got {n_seeds}")
    out = {"init": [], "trained": [], "loss": [], "seconds": []}
    for s in range(int(n_seeds)):
        X, y, loss = figure7_task(kind, dataset, seed=seed + s, classes=classes, n_points=n_points,
                                  regression_points=regression_points)
        tau = al.thresholds_for(len(X))
        net = small_nets.make_mlp(X.shape[1], [width] * depth, hidden_bias=False, seed=seed + s)
        out["init"].append(layer_alignment(net, X, y, tau))
        t0 = time.perf_counter()
        history = small_nets.train_mlp(net, X, y, loss=loss, epochs=epochs, batch_size=batch_size, lr=lr,
                                       seed=seed + s)
        out["seconds"].append(time.perf_counter() - t0)
        out["trained"].append(layer_alignment(net, X, y, tau))
        out["loss"].append(history)
    out["tau"], out["n"] = tau, len(X)
    for when in ("init", "trained"):
        out[f"area_{when}"] = np.array([al.alignment_area(c, tau) for c in out[when]])
    return out


def figure7_tasks(settings: Mapping) -> dict[str, str]:
    """a05's two Figure 7 tasks with their titles: ``classification``, classes ``settings["classes"]`` of
    ``image_dataset``, and ``regression`` on ``regression_dataset`` (labels in [-1, 1])."""
    return {"classification": f"{settings['image_dataset']} {settings['classes'][0]} vs {settings['classes'][1]}",
            "regression": f"{settings['regression_dataset']} (label in [-1, 1])"}


def figure7_runs(settings: Mapping, seed: int = 0, log: Callable[[str], None] | None = print) -> dict[str, dict]:
    """:func:`layer_runs` of both tasks of :func:`figure7_tasks` under a05's ``settings`` (``image_epochs``,
    ``regression_epochs``, ``n_seeds``, ``width``, ``depth``, ``classes``, ``n_points``, ``regression_points``: None
    or absent for all), by task; ``log`` gets :func:`describe_layer_runs` of each."""
    data = {"classification": (settings["image_dataset"], settings["image_epochs"]),
            "regression": (settings["regression_dataset"], settings["regression_epochs"])}
    titles, layers = figure7_tasks(settings), layer_names(settings["depth"])
    runs = {}
    for name, (dataset, epochs) in data.items():
        runs[name] = layer_runs(name, dataset, epochs, settings["n_seeds"], settings["width"], settings["depth"],
                                seed=seed, classes=settings["classes"], n_points=settings["n_points"],
                                regression_points=settings.get("regression_points"))
        if log is not None:
            log(describe_layer_runs(runs[name], titles[name], layers))
    return runs


def describe_layer_runs(runs: dict, title: str, layers: Sequence[str]) -> str:
    """Three lines on :func:`layer_runs`' ``runs``: points, mean training loss early and late, mean training time,
    each layer's area before and after (mean ± standard error)."""
    losses = np.array(runs["loss"])
    epochs = losses.shape[1]
    lines = [f"{title}: {runs['n']} points; loss {losses[:, 0].mean():.4f} -> {losses[:, -1].mean():.5f} "
             f"(epoch {epochs}; {losses[:, -max(2, epochs // 10)].mean():.5f} ten percent earlier), "
             f"{np.mean(runs['seconds']):.0f} s per run"]
    for when in ("init", "trained"):
        m, se = trends.mean_se(runs[f"area_{when}"])
        lines.append(f"   area {when:8s}" + "  ".join(f"{l} {a:.3f}±{e:.3f}" for l, a, e in zip(layers, m, se)))
    return "\n".join(lines)


def area_steps(runs: Mapping[str, dict]) -> dict:
    """Figure 7's orderings from every task's mean areas, over the steps input -> hidden 1 -> ...:
    ``increase_after``, ``decrease_at_init`` and ``gain_grows`` (each ``{"pooled", "per_task"}`` fractions of
    steps), and ``per_run_increase_after`` (see docs/modules.md, `layersim.papers.alignment.layers`)."""
    if not runs:
        raise ValueError("area_steps needs at least one task's runs")
    mean = {name: {when: trends.mean_se(r[f"area_{when}"])[0] for when in ("init", "trained")}
            for name, r in runs.items()}

    def pooled(steps):
        return {"pooled": float(np.mean(np.concatenate(list(steps.values())))),
                "per_task": {name: float(np.mean(s)) for name, s in steps.items()}}

    return {"increase_after": pooled({nm: np.diff(m["trained"]) > 0 for nm, m in mean.items()}),
            "decrease_at_init": pooled({nm: np.diff(m["init"]) < 0 for nm, m in mean.items()}),
            "gain_grows": pooled({nm: np.diff((m["trained"] - m["init"])[1:]) > 0 for nm, m in mean.items()}),
            "per_run_increase_after": float(np.mean([trends.fraction_increasing(a) for r in runs.values()
                                                     for a in r["area_trained"]]))}


def layer_metrics(runs: Mapping[str, dict]) -> dict:
    """What a Figure 7 run records per task: ``areas`` (mean, standard error, every run's), ``thresholds``,
    ``curves``, ``final_loss`` and ``train_seconds``."""
    areas = {}
    for nm, r in runs.items():
        areas[nm] = {}
        for when in ("init", "trained"):
            m, se = trends.mean_se(r[f"area_{when}"])
            areas[nm][when] = {"mean": m, "se": se, "per_run": r[f"area_{when}"]}
    return {"areas": areas, "thresholds": {nm: r["tau"] for nm, r in runs.items()},
            "curves": {nm: {when: trends.mean_se(np.array(r[when]))[0] for when in ("init", "trained")}
                       for nm, r in runs.items()},
            "final_loss": {nm: [h[-1] for h in r["loss"]] for nm, r in runs.items()},
            "train_seconds": {nm: r["seconds"] for nm, r in runs.items()}}
