"""Feature transfer, one step at a time: the alignment paper's Sections 7.2-7.3 (Figures 13-16, 19-21, Table 1).

:mod:`layersim.papers.alignment.pretrain` holds the source networks and the per-task comparison; this module holds
the notebooks' steps. a08 (Section 7.2): :func:`image_representations`, :func:`cnn_transfer_runs`, :func:`layer_areas`.
a09 (Section 7.3, similar sources): :func:`source_networks`, :func:`similarity_tasks`, :func:`finetune_grid`,
:func:`similarity_claims`. a10 (random-label sources, Table 1): :func:`none_network`, :func:`random_label_sources`,
:func:`accuracy_drops`, :func:`alignment_drops`, :func:`negative_transfer_claims`. The rules of each notebook's
settings: :data:`CNN_TRANSFER_RULES`, :data:`SIMILARITY_RULES`, :data:`NEGATIVE_TRANSFER_RULES`. Figures:
:mod:`~layersim.papers.alignment.transfer_figures`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from layersim.inputs import features, image_data, labelled
from layersim.measures import alignment as al
from layersim.nets import cnn
from layersim.notebook import results, settings
from layersim.papers.alignment import pretrain as pt
from layersim.train import training, transfer_learning

Log = Callable[[str], None] | None

#: a08's names of the last hidden layer after pre-training and at initialisation, and of the pixels
PRETRAINED, INIT, INPUT = "CNN (pre-trained)", "CNN (init)", "input"
#: a08's hand-crafted representations (Figure 13b: SIFT is not installed offline)
HANDCRAFTED = ("HOG", "RBF")
#: the representations a08 trains linear models on (Figures 13c, d)
TRAINED = (PRETRAINED, *HANDCRAFTED)
#: the representations a08 reports, input side first
SHOWN = (INPUT, INIT, PRETRAINED, *HANDCRAFTED)


def _say(log: Log, text: str) -> None:
    if log is not None:
        log(text)


def recorded_steps(steps: int, n: int) -> np.ndarray:
    """The gradient-descent steps at which a learning curve is recorded (Figures 1 and 13c, d): step 0 and ``n``
    log-spaced steps from 1 to ``steps``, rounded down, without repeats."""
    if steps < 1 or n < 1:
        raise ValueError(f"steps and n must be positive, got steps={steps}, n={n}")
    return np.unique(np.r_[0, np.geomspace(1, steps, n).astype(int)])


def without_indices(meta: Mapping) -> dict:
    """A source network's checkpoint meta without ``source_indices`` (the training images it saw: long, and
    not a result)."""
    return {k: v for k, v in meta.items() if k != "source_indices"}


def network_input(arch: str) -> tuple[object, str]:
    """How a source network reads target images, ``(transform, spatial)``: the small CNN its data set's
    standardisation, maps flattened; a torchvision network 224-pixel ImageNet-normalised images, maps averaged."""
    if arch == "small":
        return None, "flatten"
    if arch not in cnn.TORCHVISION_ARCHS:
        raise ValueError(f"unknown arch {arch!r}; use 'small' or one of {cnn.TORCHVISION_ARCHS}")
    return labelled.imagenet_input(224), "avg"


def accuracy_table(acc: Mapping[tuple[str, str], float], sources: Sequence[str], targets: Sequence[str],
                   digits: int = 2, skip_same: bool = False) -> str:
    """Fine-tuned test accuracies ``acc[(source, target)]`` (per cent) as a Markdown table, one row per source
    (Figure 15's table, Table 1); ``skip_same``: a dash where source and target are the same."""
    head = "| source \\ target | " + " | ".join(targets) + " |\n|---|" + "---|" * len(targets) + "\n"
    return head + "\n".join(
        f"| {s} | " + " | ".join("-" if skip_same and s == t else f"{acc[(s, t)]:.{digits}f}" for t in targets) + " |"
        for s in sources)


# ----------------------------------------------------------------------------- a08: pre-trained vs init, hand-crafted

#: the rules of a08's settings (``layersim.notebook.settings``): the target data set and classes, the source group
#: (or ``"imagenet"``) and network, its torchvision weights, the tasks' number and size, the RBF bandwidth
CNN_TRANSFER_RULES = {
    "target": settings.choice("fashion-mnist", "cifar10", "cifar100"),
    "target_classes": settings.seq(settings.integer(0), min_length=2, distinct=True),
    "source": settings.choice(*sorted({g for groups in pt.SOURCE_GROUPS.values() for g in groups}), "imagenet"),
    "arch": settings.choice("small", *cnn.TORCHVISION_ARCHS),
    "weights": settings.optional(settings.text(), "pre-train here"), "n_tasks": settings.integer(1),
    "n_points": settings.integer(2), "rbf_bandwidth": settings.real(0, open_low=True),
}


def source_summary(meta: Mapping, layers: Sequence[str]) -> str:
    """One line on a source network (:func:`pretrain.pretrained_and_init`'s meta): its data, whether it came
    from the cache, its training loss per epoch and its hidden layers."""
    hist = meta.get("history") or []
    return (f"source: {meta.get('data', meta.get('source'))}; from cache: {meta.get('from_cache')}; "
            f"training loss per epoch {[round(h['loss'], 3) for h in hist]}; hidden layers {list(layers)}, "
            f"last = {layers[-1]!r}")


def random_pairs(classes: Sequence[int], n_tasks: int, seed: int = 0) -> list[tuple[int, int]]:
    """Figure 13's target tasks: ``n_tasks`` different pairs of ``classes`` (all of them if there are fewer),
    drawn with ``numpy.random.default_rng(seed)``."""
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be positive, got {n_tasks}")
    rng = np.random.default_rng(seed)
    pairs = pt.binary_pairs(classes)
    if not pairs:
        raise ValueError(f"classes {list(classes)} make no pair")
    return [pairs[i] for i in rng.choice(len(pairs), size=min(n_tasks, len(pairs)), replace=False)]


def unit_rows(A) -> np.ndarray:
    """``A`` with every row flattened to float64 and scaled to unit length (the RBF features' inputs, Figure 13b)."""
    A = np.asarray(A).reshape(len(A), -1).astype(np.float64)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("a row of zeros has no direction")
    return A / norms


def image_representations(pretrained: nn.Module, init: nn.Module, layers: Sequence[str], X_train: torch.Tensor,
                          X_test: torch.Tensor, dataset: str, rbf_gamma: float, transform=None,
                          device: str | torch.device = "cpu") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Figure 13's representations ``{name: (train, test)}`` of one task's images (``[N, C, H, W]`` in [0, 1]):
    every hidden layer pre-trained and at init (the last also :data:`PRETRAINED`, :data:`INIT`), pixels
    (:data:`INPUT`), HOG, and RBF features ``exp(-rbf_gamma ||x - c||^2)`` centred on the training images (see
    docs/modules.md, `layersim.papers.alignment.transfer`)."""
    reps = {}
    for tag, net in (("pre-trained", pretrained), ("init", init)):
        f_tr, f_te = (cnn.extract_features(net, labelled.model_input(X, dataset, transform), device=device)
                      for X in (X_train, X_test))
        for name in layers:
            reps[f"{tag} {name}"] = (f_tr[name], f_te[name])
    reps[PRETRAINED] = reps[f"pre-trained {layers[-1]}"]
    reps[INIT] = reps[f"init {layers[-1]}"]
    reps[INPUT] = (X_train.flatten(1).double().numpy(), X_test.flatten(1).double().numpy())
    reps["HOG"] = tuple(features.hog_features(X.mean(1).numpy(), 9, (8, 8), (2, 2)) for X in (X_train, X_test))
    centres = unit_rows(X_train.numpy())
    reps["RBF"] = tuple(features.rbf_features(unit_rows(X.numpy()), centres, rbf_gamma)
                        for X in (X_train, X_test))
    return reps


def test_per_class(dataset: str, per_class: int) -> int:
    """The test images per class of a Section 7.2 task: ``per_class``, or all of a class when the test split has
    fewer (the paper samples 1,000 points of two classes, 500 a class; CIFAR-100's test split has 100 a class)."""
    size = image_data.split_size(dataset, "test")
    return per_class if size is None else min(per_class, size // image_data.dataset_info(dataset)["classes"])


def cnn_transfer_runs(pretrained: nn.Module, init: nn.Module, layers: Sequence[str], pairs, dataset: str,
                      per_class: int, thresholds, lrs: Sequence[float], steps: int, record, rbf_bandwidth: float,
                      seed: int = 0, exclude=None, transform=None, device: str | torch.device = "cpu",
                      log: Log = print) -> list[dict]:
    """Section 7.2 on every target task (Figures 13, 19, 20): for class pair ``k``, ``per_class`` images per class
    (seed ``seed + k``, none of ``exclude``; of the test split at most what it has, :func:`test_per_class`), labels
    ``2t - 1``, :func:`image_representations` compared by :func:`pretrain.evaluate_task`. Returns one result per
    task with its ``"pair"``."""
    gamma = 1.0 / (2.0 * rbf_bandwidth ** 2)
    runs = []
    for k, pair in enumerate(pairs):
        X_tr, t_tr, _ = labelled.load_images(dataset, "train", pair, per_class, seed=seed + k, exclude=exclude,
                                            normalize=False)
        X_te, t_te, _ = labelled.load_images(dataset, "test", pair, test_per_class(dataset, per_class),
                                            seed=seed + k, normalize=False)
        y_tr, y_te = al.binary_targets(t_tr.numpy()), al.binary_targets(t_te.numpy())
        reps = image_representations(pretrained, init, layers, X_tr, X_te, dataset, gamma, transform, device)
        runs.append(pt.evaluate_task(reps, y_tr, y_te, thresholds, list(TRAINED), lrs, steps, record))
        runs[-1]["pair"] = pair
        _say(log, f"task {k + 1}/{len(pairs)} classes {pair}: alignment area " +
             ", ".join(f"{n} {runs[-1]['areas'][n]:.3f}" for n in SHOWN))
    if runs:
        dims = {n: d for n, d in runs[0]["dims"].items() if not n.startswith(("pre-trained", "init"))}
        _say(log, f"dimensions: {dims}")
    return runs


def layer_areas(runs: Sequence[dict], layers: Sequence[str], tags: Sequence[str] = ("init", "pre-trained")
                ) -> dict[str, list[float]]:
    """Alignment across depth (Section 5, Figure 7): ``{tag: [alignment area of "<tag> <layer>", mean over the
    tasks]}``."""
    return {tag: [float(np.mean([r["areas"][f"{tag} {n}"] for r in runs])) for n in layers] for tag in tags}


def chosen_step_sizes(runs: Sequence[dict], names: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """The step size gradient descent chose, per representation, loss and task (Figures 13c, d)."""
    return {name: {loss: [r["gd"][name][loss]["lr"] for r in runs] for loss in pt.LOSSES} for name in names}


def final_test_error(runs: Sequence[dict], names: Sequence[str]) -> dict[str, float]:
    """The logistic linear model's final test classification error per representation, mean over the tasks."""
    return {name: float(np.mean([r["gd"][name]["logistic"]["test_error"][-1] for r in runs])) for name in names}


def learning_summary(runs: Sequence[dict], names: Sequence[str] = TRAINED) -> str:
    """Three lines on the linear models of Figures 13c, d: every final loss (:func:`pretrain.final_losses`), the
    logistic model's final test error (:func:`final_test_error`) and the step sizes chosen
    (:func:`chosen_step_sizes`)."""
    final = pt.final_losses(runs)
    return "\n".join([
        f"final losses (mean over tasks): { {f'{n} {l} {p}': round(v, 4) for (n, l, p), v in final.items()} }",
        f"final test classification error, logistic model: "
        f"{ {n: round(v, 3) for n, v in final_test_error(runs, names).items()} }",
        f"chosen step sizes: {chosen_step_sizes(runs, names)}"])


def cnn_transfer_numbers(runs: Sequence[dict], layers: Sequence[str], source_meta: Mapping, pairs,
                         thresholds) -> dict:
    """What a08 records beside its claims: source meta, pairs, thresholds, mean and per-task areas (also per layer),
    mean curves of :data:`SHOWN`, final losses and step sizes."""
    final = pt.final_losses(runs)
    return dict(
        source_meta=without_indices(source_meta), pairs=pairs, thresholds=thresholds, mean_area=pt.mean_areas(runs),
        layer_area=layer_areas(runs, layers), layers=layers,
        areas_per_task={n: np.array([r["areas"][n] for r in runs]) for n in runs[0]["areas"]},
        mean_curves={n: np.mean([r["curves"][n] for r in runs], axis=0) for n in [INPUT, INIT, *TRAINED]},
        final_losses={f"{n} | {l} | {p}": v for (n, l, p), v in final.items()},
        chosen_step_sizes=chosen_step_sizes(runs, TRAINED),
    )


# ----------------------------------------------------------------------------- a09: similar vs dissimilar source

#: the rules of a09's settings (``layersim.notebook.settings``): the target data set, its two class groups, the
#: tasks' size, the layers read, and the fine-tuning (images per class, epochs, step size, batch)
SIMILARITY_RULES = {
    "target": settings.choice(*pt.SOURCE_GROUPS), "groups": settings.seq(settings.text(), length=2, distinct=True),
    "n_points": settings.integer(2), "n_layers": settings.integer(1),
    "n_finetune": settings.integer(0, meaning="0 means the whole training split"), "ft_epochs": settings.integer(1),
    "ft_lr": settings.real(0, open_low=True), "ft_batch": settings.integer(1),
}


def source_networks(settings: Mapping, groups: Sequence[str], seed: int = 0, device: str | torch.device = "auto",
                    log: Log = print) -> tuple[dict[str, nn.Module], dict[str, dict]]:
    """a09's sources: the network of ``settings`` (:func:`pretrain.source_settings`) pre-trained on each class
    group (:func:`pretrain.source_model`, cached), as ``(models, metas)`` keyed by group."""
    models, metas = {}, {}
    for g in groups:
        models[g], metas[g] = pt.source_model(settings, g, seed=seed, device=device)
        _say(log, f"source {g!r}: classes {metas[g]['data']['classes']}, {len(metas[g]['source_indices'])} images, "
                  f"from cache: {metas[g]['from_cache']}, loss per epoch "
                  f"{[round(h['loss'], 3) for h in metas[g]['history']]}")
    return models, metas


def seen_indices(metas: Mapping[str, Mapping], source_dataset: str, target: str) -> np.ndarray | None:
    """The training-split images any source network saw (to keep them out of the target's fine-tuning data),
    or None when the target is another data set."""
    if source_dataset != target:
        return None
    return np.unique(np.concatenate([m["source_indices"] for m in metas.values()]))


def _other(groups: Sequence[str], g: str) -> str:
    return [h for h in groups if h != g][0]


def similarity_tasks(models: Mapping[str, nn.Module], groups: Sequence[str], target_groups: Mapping,
                     dataset: str, layers: Sequence[str], per_class: int, thresholds, seed: int = 0,
                     transform=None, spatial: str = "flatten", device: str | torch.device = "cpu",
                     log: Log = print) -> list[dict]:
    """Figures 14 and 21 task by task: for each class pair of each target group ``g``, every layer's alignment curve
    (eq. 2, over ``||y||^2``) of the network pre-trained on ``g`` minus the other group's, and the area difference.
    Returns ``[{"group", "pair", "diff", "area_diff"}]``."""
    tasks = []
    for g in groups:
        other = _other(groups, g)
        for pair in pt.binary_pairs(target_groups[g]):
            X, t, _ = labelled.load_images(dataset, "test", pair, per_class, seed=seed, transform=transform,
                                          normalize=transform is None)
            y = al.binary_targets(t.numpy())
            feats = {src: cnn.extract_features(models[src], X, layers=layers, device=device, spatial=spatial)
                     for src in (g, other)}
            row = dict(group=g, pair=pair, diff={}, area_diff={})
            for name in layers:
                (c_sim, a_sim), (c_dis, a_dis) = (al.curve_and_area(feats[src][name], y, thresholds, gram=True)
                                                  for src in (g, other))
                row["diff"][name] = (c_sim - c_dis) / len(y)
                row["area_diff"][name] = a_sim - a_dis
            tasks.append(row)
        mine = [r for r in tasks if r["group"] == g]
        means = {n: round(float(np.mean([r["area_diff"][n] for r in mine])), 4) for n in layers}
        _say(log, f"target group {g!r}: {len(mine)} tasks; mean area difference per layer {means}")
    return tasks


def difference_summary(tasks: Sequence[dict], layers: Sequence[str]
                       ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, int]]:
    """Figure 14: per layer, the difference curve and area difference (similar minus dissimilar source) averaged
    over the :func:`similarity_tasks`, and in how many tasks the area difference is positive."""
    mean_diff = {n: np.mean([r["diff"][n] for r in tasks], axis=0) for n in layers}
    mean_area_diff = {n: float(np.mean([r["area_diff"][n] for r in tasks])) for n in layers}
    tasks_positive = {n: int(sum(r["area_diff"][n] > 0 for r in tasks)) for n in layers}
    return mean_diff, mean_area_diff, tasks_positive


def finetune_grid(models: Mapping[str, nn.Module], groups: Sequence[str], target_groups: Mapping, dataset: str,
                  per_class: int | None, epochs: int, lr: float, batch_size: int, seed: int = 0, exclude=None,
                  transform=None, device: str | torch.device = "cpu", log: Log = print
                  ) -> tuple[dict[tuple[str, str], float], dict[str, dict]]:
    """Figure 15's table: every source fine-tuned (new head, SGD) on every target group with ``per_class`` unseen
    images, tested on the whole test split. Returns
    ``(accuracy in per cent by (source, target), history by "source -> target")``."""
    acc, hist = {}, {}
    for tg in groups:
        classes = target_groups[tg]
        train = labelled.subset_dataset(dataset, "train", classes, per_class, seed=seed, exclude=exclude,
                                       transform=transform, normalize=transform is None)
        test = labelled.subset_dataset(dataset, "test", classes, None, seed=seed, transform=transform,
                                      normalize=transform is None)
        if transform is None:
            train, test = labelled.stack(train), labelled.stack(test)
        for src in groups:
            _, h = transfer_learning.finetune(models[src], train, test, len(classes), epochs=epochs, lr=lr,
                                              batch_size=batch_size, seed=seed, device=device, eval_every=epochs)
            acc[(src, tg)], hist[f"{src} -> {tg}"] = 100 * h["final_accuracy"], h
            _say(log, f"source {src:14s} -> target {tg:14s}: test accuracy {100 * h['final_accuracy']:.2f} %")
    return acc, hist


def similarity_numbers(metas: Mapping[str, Mapping], layers: Sequence[str], thresholds, tasks: Sequence[dict],
                       mean_diff: Mapping[str, np.ndarray], mean_area_diff: Mapping[str, float],
                       acc: Mapping[tuple[str, str], float], finetune_history: Mapping[str, dict]) -> dict:
    """What a09 records beside its claims: sources' metas, layers, thresholds, mean difference curves and areas,
    per-task differences, fine-tuned accuracies and histories."""
    return dict(
        sources={g: without_indices(m) for g, m in metas.items()}, layers=layers, thresholds=thresholds,
        mean_difference_curves=mean_diff, mean_area_difference=mean_area_diff,
        task_area_differences=[{"group": r["group"], "pair": r["pair"], **r["area_diff"]} for r in tasks],
        finetune_accuracy={f"{s} -> {t}": v for (s, t), v in acc.items()}, finetune_history=finetune_history,
    )


def similarity_claims(mean_diff: Mapping[str, np.ndarray], mean_area_diff: Mapping[str, float],
                      tasks_positive: Mapping[str, int], n_tasks: int, acc: Mapping[tuple[str, str], float],
                      groups: Sequence[str]) -> dict:
    """Section 7.3's two statements on similar sources (``results.claim`` dicts):

    * ``similar_source_more_aligned`` (Figure 14): the smallest, over the layers, of the mean area difference
      (similar minus dissimilar); positive = holds. Beside it: the fraction of (layer, threshold > 0) points and
      of layers whose mean difference curve is positive, the tasks with a positive difference per layer, and
      whether the difference grows toward the output.
    * ``similar_source_better_finetune`` (Figure 15): the smaller, over the target groups, of the fine-tuned
      accuracy gap in points (similar minus dissimilar source); positive = holds.
    """
    layers = list(mean_diff)
    curve_pos = float(np.mean([np.all(mean_diff[n][1:] > 0) for n in layers]))
    point_pos = float(np.mean(np.concatenate([mean_diff[n][1:] > 0 for n in layers])))
    grows = bool(np.all(np.diff([mean_area_diff[n] for n in layers]) > 0))
    ft_gap = {tg: acc[(tg, tg)] - acc[_other(groups, tg), tg] for tg in groups}
    return {
        "similar_source_more_aligned": results.measure(
            min(mean_area_diff.values()),
            note="smallest over layers of the mean area difference, similar - dissimilar",
            per_layer=mean_area_diff, fraction_of_points_positive=point_pos,
            fraction_of_layers_positive_everywhere=curve_pos, tasks_positive=tasks_positive, n_tasks=n_tasks,
            grows_toward_output=grows),
        "similar_source_better_finetune": results.measure(
            min(ft_gap.values()),
            note="smaller over targets of the accuracy gap (points), similar - dissimilar",
            per_target=ft_gap),
    }


# ----------------------------------------------------------------------------- a10: random labels, domain shift

#: the rules of a10's settings (``layersim.notebook.settings``): the data set and its three domains with their
#: sizes, the None network, the random-label training on each source and the fine-tuning on each target
NEGATIVE_TRANSFER_RULES = {
    "dataset": settings.choice(*pt.DATASET_DOMAINS), "domains": settings.seq(settings.text(), length=3, distinct=True),
    "train_per_class": settings.seq(settings.integer(0, meaning="0 means all")),
    "arch": settings.choice("small", *cnn.TORCHVISION_ARCHS), "test_per_class": settings.integer(0, meaning="0: all"),
    "none_source": settings.optional(settings.choice(*pt.FASHION_GROUPS), "the torchvision weights (paper scale)"),
    "none_n_source": settings.optional(settings.integer(1), "the a08-a10 source networks' own"),
    "none_epochs": settings.optional(settings.integer(1), "the a08-a10 source networks' own"),
    "weights": settings.optional(settings.text(), "a09's clothing CNN"), "rl_epochs": settings.integer(1),
    "rl_lr": settings.real(0, open_low=True), "rl_milestones": settings.seq(settings.integer(1), min_length=0),
    "ft_epochs": settings.integer(1), "ft_lr": settings.real(0, open_low=True), "batch": settings.integer(1),
}


def none_settings(scale: str, arch: str, weights: str | None, n_source: int | None = None,
                  epochs: int | None = None) -> dict:
    """Settings of Table 1's "None" network: the shared source settings at ``scale`` with ``arch``, ``weights`` and,
    where given, ``n_source`` and ``epochs``."""
    larger = {k: v for k, v in {"n_source": n_source, "epochs": epochs}.items() if v is not None}
    return pt.source_settings(scale, arch=arch, weights=weights, **larger)


def none_network(settings: Mapping, source: str = "clothing", seed: int = 0, device: str | torch.device = "auto"
                 ) -> tuple[nn.Module, str, cnn.CNNConfig, dict]:
    """Table 1's "None" network of ``settings`` (:func:`pretrain.pretrained_and_init`) as
    ``(network, checkpoint key, CNNConfig, meta)``."""
    base, _, meta, _ = pt.pretrained_and_init(settings, source, seed=seed, device=device)
    key = meta.get("key") or f"torchvision-{settings['arch']}-{settings['weights']}"
    m = meta["model"]
    cfg = cnn.CNNConfig(**{**m, "channels": tuple(m["channels"]), "fc": tuple(m["fc"])})
    return base, key, cfg, meta


def domain_data(dataset: str, domains: Sequence[str], train_per_class: Sequence[int], test_per_class: int,
                seed: int = 0, exclude=None, log: Log = print) -> tuple[dict, dict, int]:
    """Every domain's training and test data (:func:`layersim.inputs.labelled.domain_sets`; 0 images per class =
    all), the domains' training images disjoint and none of ``exclude``: ``(train, test, number of classes)``;
    ``log`` gets the numbers of images."""
    if len(train_per_class) != len(domains):
        raise ValueError(f"train_per_class {list(train_per_class)} needs one entry per domain ({len(domains)})")
    train, test, seen = {}, {}, exclude
    for d, per in zip(domains, train_per_class):
        train[d], test[d], idx = labelled.domain_sets(dataset, d, per or None, test_per_class or None, seed=seed,
                                                     exclude=seen)
        seen = idx if seen is None else np.union1d(seen, idx)
    n_classes = int(max(labelled.labels_of(test[d]).max() for d in domains)) + 1
    sizes = {d: (len(labelled.labels_of(train[d])), len(labelled.labels_of(test[d]))) for d in domains}
    _say(log, f"{sizes} (train, test) images")
    return train, test, n_classes


def random_label_sources(base: nn.Module, base_key: str, base_cfg: cnn.CNNConfig, train: Mapping, dataset: str,
                         domains: Sequence[str], train_per_class: Sequence[int], n_classes: int, epochs: int,
                         lr: float, milestones: Sequence[int], batch_size: int, seed: int = 0,
                         device: str | torch.device = "auto", log: Log = print) -> tuple[dict, dict]:
    """Table 1's sources: ``base`` trained on each domain's images with random labels
    (:func:`pretrain.random_label_model`, cached). Returns ``(networks by name, "None" first, metas by domain)``."""
    cfg = training.TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, weight_decay=1e-4, schedule="multistep",
                               milestones=tuple(milestones), seed=seed)
    nets, metas = {"None": base}, {}
    for s in domains:
        desc = {"name": dataset, "domain": s, "train_per_class": train_per_class[list(domains).index(s)], "seed": seed}
        nets[s], metas[s] = pt.random_label_model(base, base_key, base_cfg, train[s], n_classes, cfg, desc,
                                                  device=device)
        h = metas[s]["history"]
        _say(log, f"source {s!r}: random-label training loss {h[0]['loss']:.3f} -> {h[-1]['loss']:.3f} "
                  f"(chance {np.log(n_classes):.3f}); from cache: {metas[s]['from_cache']}")
    return nets, metas


def _sources_for(domains: Sequence[str], target: str) -> list[str]:
    return ["None"] + [d for d in domains if d != target]


def finetune_domains(nets: Mapping[str, nn.Module], train: Mapping, test: Mapping, domains: Sequence[str],
                     n_classes: int, epochs: int, lr: float, batch_size: int, seed: int = 0,
                     device: str | torch.device = "cpu") -> dict[tuple[str, str], float]:
    """Table 1: the None network and every other domain's random-label source fine-tuned on each target domain
    (:func:`layersim.train.transfer_learning.finetune`), test accuracy in per cent by ``(source, target)``."""
    acc = {}
    for t in domains:
        for s in _sources_for(domains, t):
            _, h = transfer_learning.finetune(nets[s], train[t], test[t], n_classes, epochs=epochs, lr=lr,
                                              batch_size=batch_size, seed=seed, device=device, eval_every=epochs)
            acc[(s, t)] = 100 * h["final_accuracy"]
    return acc


def accuracy_drops(acc: Mapping[tuple[str, str], float], domains: Sequence[str]
                   ) -> tuple[list[tuple[str, str]], dict[tuple[str, str], float]]:
    """Negative transfer (Table 1): the ``(source, target)`` pairs of different domains and, for each, the None
    network's accuracy minus the source-trained one's (points; positive = the source hurts)."""
    pairs = [(s, t) for s in domains for t in domains if s != t]
    return pairs, {(s, t): acc[("None", t)] - acc[(s, t)] for s, t in pairs}


def alignment_drops(nets: Mapping[str, nn.Module], test: Mapping, domains: Sequence[str], layer: str,
                    n_classes: int, spatial: str = "flatten", device: str | torch.device = "cpu") -> dict:
    """Figure 16: per target domain and other domain's source, the None network's alignment of ``layer`` minus the
    source-trained one's, averaged over the binary tasks of the target's classes that its test split holds both of
    (a random split of a small domain can leave a class out). Returns ``{"diff", "area_drop", "n_tasks",
    "thresholds", "n_pair"}``."""
    diff, area_drop, n_tasks = {}, {}, {}
    tau = n_pair = None
    for t in domains:
        lab = labelled.labels_of(test[t])
        feats = {s: cnn.extract_features(nets[s], labelled.images_of(test[t]), layers=[layer], device=device,
                                         spatial=spatial)[layer] for s in _sources_for(domains, t)}
        present = set(np.unique(lab).tolist())
        class_pairs = [cp for cp in itertools.combinations(range(n_classes), 2) if set(cp) <= present]
        n_pair = int(np.median([np.isin(lab, cp).sum() for cp in class_pairs]))
        tau = al.thresholds_for(n_pair)
        per_pair = {s: [] for s in feats if s != "None"}
        area_pp = {s: [] for s in feats if s != "None"}
        for a, b in class_pairs:
            rows = np.isin(lab, (a, b))
            y = al.binary_targets((lab[rows] == b).astype(int))
            curves, areas = {}, {}
            for s, f in feats.items():
                curves[s], areas[s] = al.curve_and_area(f[rows], y, tau, gram=True)
            for s in per_pair:
                per_pair[s].append((curves["None"] - curves[s]) / len(y))
                area_pp[s].append(areas["None"] - areas[s])
        for s in per_pair:
            diff[(s, t)] = np.mean(per_pair[s], axis=0)
            area_drop[(s, t)] = float(np.mean(area_pp[s]))
        n_tasks[t] = len(class_pairs)
    return {"diff": diff, "area_drop": area_drop, "n_tasks": n_tasks, "thresholds": tau, "n_pair": n_pair}


def pair_names(values: Mapping[tuple[str, str], object]) -> dict[str, object]:
    """``{(source, target): v}`` keyed ``"source->target"`` instead (for ``metrics.json``)."""
    return {f"{s}->{t}": v for (s, t), v in values.items()}


def negative_transfer_numbers(none_key: str, source_metas: Mapping[str, Mapping],
                              acc: Mapping[tuple[str, str], float], drops: Mapping) -> dict:
    """What a10 records beside its claims: the None network's checkpoint key, each source's random-label training
    history, Table 1's accuracies and, from :func:`alignment_drops`, the thresholds, tasks per target and Figure
    16's difference curves (pairs keyed ``"source->target"``)."""
    return dict(none_network=none_key, random_label_training={s: m["history"] for s, m in source_metas.items()},
                accuracy=pair_names(acc), thresholds=drops["thresholds"], n_tasks=drops["n_tasks"],
                difference_curves=pair_names(drops["diff"]))


def negative_transfer_claims(acc_drop: Mapping[tuple[str, str], float], area_drop: Mapping[tuple[str, str], float],
                             diff: Mapping[tuple[str, str], np.ndarray], domains: Sequence[str],
                             pairs: Sequence[tuple[str, str]]) -> dict:
    """Section 7.3's three statements on random-label sources (``results.claim`` dicts):

    * ``random_label_pretraining_hurts`` (Table 1): the largest (source-trained minus None) accuracy over the
      pairs, points; negative = holds.
    * ``random_label_pretraining_reduces_alignment`` (Figure 16): the smallest alignment-area drop (None minus
      source-trained) over the pairs; positive = holds; with the fraction of (pair, threshold > 0) points where
      the difference curve is positive.
    * ``alignment_drop_orders_transfer_drop``: the Spearman rank correlation, over the sources, of the mean
      (over its targets) alignment drop and accuracy drop; 1 = holds (0 when undefined); the correlation over
      the pairs rides along.
    """
    src_acc = {s: float(np.mean([acc_drop[(s, t)] for t in domains if t != s])) for s in domains}
    src_align = {s: float(np.mean([area_drop[(s, t)] for t in domains if t != s])) for s in domains}
    rho_src = float(spearmanr([src_align[s] for s in domains], [src_acc[s] for s in domains])[0])
    rho_pairs = float(spearmanr([area_drop[p] for p in pairs], [acc_drop[p] for p in pairs])[0])
    points_pos = float(np.mean(np.concatenate([diff[p][1:] > 0 for p in pairs])))
    return {
        "random_label_pretraining_hurts": results.measure(
            max(-v for v in acc_drop.values()),
            note="largest (source-trained - None) fine-tuned accuracy over the pairs, points",
            accuracy_drop=pair_names(acc_drop)),
        "random_label_pretraining_reduces_alignment": results.measure(
            min(area_drop.values()),
            note="smallest mean alignment-area drop (None - source-trained) over the pairs",
            area_drop=pair_names(area_drop), fraction_of_points_positive=points_pos),
        "alignment_drop_orders_transfer_drop": results.measure(
            rho_src if np.isfinite(rho_src) else 0.0,
            note="Spearman over sources: mean alignment drop vs mean accuracy drop",
            per_source_alignment_drop=src_align, per_source_accuracy_drop=src_acc, spearman_pairs=rho_pairs),
    }
