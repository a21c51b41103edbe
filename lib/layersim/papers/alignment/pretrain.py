"""Section 7.2-7.3's protocol on pre-trained CNNs (the alignment paper, Figures 13-16, 19-20, Table 1), shared by
notebooks a08-a10 and a11: the class groups of the source tasks and the shared source networks (:func:`source_settings`,
:func:`source_model`, :func:`pretrained_and_init`), a10's domains and random-label source (:func:`random_label_model`),
binary target tasks compared by alignment (eq. 2) and linear models (:func:`evaluate_task`) and Section 7.2's claims
(:func:`transfer_claims`) (see docs/modules.md, `layersim.papers.alignment.pretrain`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from layersim.inputs import image_data, subsets
from layersim.inputs.labelled import LabelledSubset, imagenet_input, labels_of, random_labels, relabelled
from layersim.inputs.shift import DOMAINS
from layersim.measures import alignment as al
from layersim.nets.cnn import CNNConfig, build_cnn
from layersim.notebook import rehearsal, results
from layersim.notebook.presets import ALIGNMENT_SOURCE_CNN
from layersim.train import linear, training
from layersim.train.transfer_learning import pretrain_cnn

#: Fashion-MNIST's classes split like Cifar10-Natural (6 classes) / Cifar10-Artificial (4 classes):
#: garments (T-shirt/top, trouser, pullover, dress, coat, shirt) and footwear/bags (sandal, sneaker,
#: bag, ankle boot); and ``all`` ten, a source *related* to every target task drawn from them (the alignment
#: paper's Section 7.2: ImageNet, "presumably related to a wide array of target tasks", and the Cifar tasks
#: read on it), whose images the target tasks do not reuse (``source_indices``).
FASHION_GROUPS = {"clothing": (0, 1, 2, 3, 4, 6), "footwear_bags": (5, 7, 8, 9), "all": tuple(range(10))}
#: The paper's appendix D: Cifar10-Natural (bird, cat, deer, dog, frog, horse) and Cifar10-Artificial
#: (airplane, automobile, ship, truck).
CIFAR10_GROUPS = {"natural": (2, 3, 4, 5, 6, 7), "artificial": (0, 1, 8, 9)}


# ----------------------------------------------------------------------------- binary target tasks


def binary_pairs(classes: Sequence[int]) -> list[tuple[int, int]]:
    """All unordered pairs of ``classes`` (the paper's binary target tasks: 15 from 6 classes, 6 from 4)."""
    return list(itertools.combinations(classes, 2))


#: the two losses of the paper's linear models (Figures 13c, d and 20b, c)
LOSSES = ("squared", "logistic")


def evaluate_task(reps: Mapping[str, tuple[np.ndarray, np.ndarray]], y_train, y_test, thresholds,
                  trained: Sequence[str], lrs: Sequence[float], steps: int, record: Sequence[int] | None = None) -> dict:
    """Section 7.2's comparison of representations on one binary task (Figures 13, 19, 20).

    ``reps``: ``{name: (train [n, d], test [m, d])}``; labels +-1. Each gets its alignment curve and area (eq. 2);
    the ``trained`` ones a linear model trained by gradient descent with each of :data:`LOSSES` (best of ``lrs``).
    Returns ``{"curves", "areas", "gd": {name: {loss: curves}}, "dims": {name: d}}``.
    """
    missing = [n for n in trained if n not in reps]
    if missing:
        raise ValueError(f"trained representation(s) {missing} are not among {sorted(reps)}")
    curves, areas, dims = {}, {}, {}
    for name, (A_tr, A_te) in reps.items():
        if len(A_tr) != len(y_train) or len(A_te) != len(y_test):
            raise ValueError(f"{name!r}: {len(A_tr)}/{len(A_te)} rows for {len(y_train)}/{len(y_test)} labels")
        curves[name], areas[name] = al.curve_and_area(A_tr, y_train, thresholds, gram=True)
        dims[name] = int(np.prod(A_tr.shape[1:]))
    gd = {}
    for name in trained:
        P_tr, P_te = al.prepare(reps[name][0]), al.prepare(reps[name][1])
        gd[name] = {loss: linear.best_linear_curves(P_tr, y_train, lrs, loss=loss, steps=steps, Phi_test=P_te,
                                                    y_test=y_test, record=record) for loss in LOSSES}
    return {"curves": curves, "areas": areas, "gd": gd, "dims": dims}


def mean_areas(runs: Sequence[dict]) -> dict[str, float]:
    """The alignment area of every representation, mean over the tasks (:func:`evaluate_task` runs)."""
    return {n: float(np.mean([r["areas"][n] for r in runs])) for n in runs[0]["areas"]}


def final_losses(runs: Sequence[dict]) -> dict[tuple[str, str, str], float]:
    """``{(name, loss, "train" | "test"): final loss, mean over the tasks}`` of the linear models."""
    return {(name, loss, part): float(np.mean([r["gd"][name][loss][part] for r in runs], axis=0)[-1])
            for name in runs[0]["gd"] for loss in LOSSES for part in ("train", "test")}


def transfer_claims(runs: Sequence[dict], pretrained: str, init: str, inputs: str, handcrafted: Sequence[str],
                    subject: str = "pretrained") -> dict:
    """Section 7.2's claims (Figs. 13, 19, 20) from :func:`evaluate_task` runs, as ``results.measure`` dicts, positive
    = holds: ``pretrained_beats_init_and_input`` (``pretrained``'s mean area minus the larger of ``init``'s and
    ``inputs``'s), ``<subject>_beats_handcrafted`` (minus the best ``handcrafted``'s),
    ``<subject>_best_test_performance`` (the smallest margin of another trained representation's final test loss,
    both losses); each counts its tasks. ``ValueError`` unless ``pretrained`` and another representation were trained.
    """
    area = mean_areas(runs)
    A = {n: np.array([r["areas"][n] for r in runs]) for n in area}
    final = final_losses(runs)
    others = [n for n in runs[0]["gd"] if n != pretrained]
    if pretrained not in runs[0]["gd"] or not others:
        raise ValueError(f"{pretrained!r} and at least one other representation must be trained with gradient descent")
    hand = list(handcrafted)
    pre_gap = area[pretrained] - max(area[init], area[inputs])
    hand_gap = area[pretrained] - max(area[h] for h in hand)
    test_gap = min(final[(o, loss, "test")] - final[(pretrained, loss, "test")] for o in others for loss in LOSSES)
    best_tasks = int(sum(all(r["gd"][o][loss]["test"][-1] > r["gd"][pretrained][loss]["test"][-1]
                             for o in others for loss in LOSSES) for r in runs))
    speed = {loss: {o: float(np.mean([np.mean(np.log10(r["gd"][o][loss]["train"][1:]) -
                                              np.log10(r["gd"][pretrained][loss]["train"][1:])) for r in runs]))
                    for o in others} for loss in LOSSES}
    test_error = {n: float(np.mean([r["gd"][n]["logistic"]["test_error"][-1] for r in runs])) for n in runs[0]["gd"]}
    return {
        "pretrained_beats_init_and_input": results.measure(
            float(pre_gap), note="alignment area: pre-trained minus max(init, input)",
            tasks_holding=int(np.sum(A[pretrained] > np.maximum(A[init], A[inputs]))), n_tasks=len(runs),
            area_input=area[inputs], area_init=area[init], area_pretrained=area[pretrained]),
        f"{subject}_beats_handcrafted": results.measure(
            float(hand_gap), note=f"alignment area: pre-trained minus max({', '.join(hand)})",
            tasks_holding=int(np.sum(A[pretrained] > np.max([A[h] for h in hand], axis=0))),
            area_handcrafted={h: area[h] for h in hand}),
        f"{subject}_best_test_performance": results.measure(
            float(test_gap),
            note=f"final test loss: smallest margin of {', '.join(others)} over the pre-trained (both losses)",
            tasks_holding=best_tasks, train_log10_gap_over_steps=speed, final_test_classification_error=test_error),
    }


# ----------------------------------------------------------------------------- the shared source networks

#: ImageNet's natural / artificial halves for a09 at paper scale. The paper uses Yosinski et al. (2014)'s
#: lists (449 natural, 551 artificial classes), which are not bundled here; this approximation takes the
#: animals (class indices 0-397), the geological formations (970-980) and the plants and fungi (984-998)
#: as natural (424 classes) and the rest as artificial (576). Give the exact lists with ``classes=``.
IMAGENET_GROUPS = {
    "natural": tuple(list(range(0, 398)) + list(range(970, 981)) + list(range(984, 999))),
}
IMAGENET_GROUPS["artificial"] = tuple(c for c in range(1000) if c not in set(IMAGENET_GROUPS["natural"]))
SOURCE_GROUPS = {"fashion-mnist": FASHION_GROUPS, "imagenet": IMAGENET_GROUPS, "cifar10": CIFAR10_GROUPS}


def source_settings(scale: str, **overrides) -> dict:
    """``presets.ALIGNMENT_SOURCE_CNN[scale]`` (the source networks a08-a10 share) with ``overrides``."""
    if scale not in ALIGNMENT_SOURCE_CNN:
        raise ValueError(f"unknown scale {scale!r}; use one of {sorted(ALIGNMENT_SOURCE_CNN)}")
    unknown = sorted(set(overrides) - set(ALIGNMENT_SOURCE_CNN[scale]))
    if unknown:
        raise ValueError(f"unknown source setting(s) {unknown}")
    return {**rehearsal.shared("ALIGNMENT_SOURCE_CNN", scale, ALIGNMENT_SOURCE_CNN), **overrides}


def source_model(settings: dict, source: str, seed: int = 0, classes: Sequence[int] | None = None,
                 device: str | torch.device = "auto", progress: bool = False) -> tuple[nn.Module, dict]:
    """The network of ``settings`` pre-trained (cached) on class group ``source`` (or ``classes``) of the training
    split: ``n_source`` balanced images (0 = all) drawn with ``seed``; ``meta["source_indices"]`` lists them."""
    s = settings
    if classes is None:
        groups = SOURCE_GROUPS.get(s["dataset"], {})
        if source not in groups:
            raise ValueError(f"unknown source {source!r} for {s['dataset']}; known: {sorted(groups)}")
        classes = groups[source]
    classes = tuple(int(c) for c in classes)
    info = image_data.dataset_info(s["dataset"])
    cfg = CNNConfig(arch=s["arch"], in_chans=info["channels"], img_size=info["image_size"], num_classes=len(classes),
                    channels=tuple(s["channels"]), fc=tuple(s["fc"]))
    tc = training.TrainConfig(epochs=s["epochs"], batch_size=s["batch_size"], lr=s["lr"],
                              weight_decay=s["weight_decay"], schedule=s["schedule"],
                              milestones=tuple(s["milestones"]), warmup_epochs=0.2, seed=seed)
    per_class = s["n_source"] // len(classes) if s["n_source"] else None
    base = image_data.image_dataset(s["dataset"], "train", augment=bool(s["augment"]))
    idx, labels = subsets.class_subset(base.targets, classes, per_class, seed=seed)
    desc = {"name": s["dataset"], "split": "train", "classes": list(classes), "per_class": per_class, "seed": seed,
            "augment": bool(s["augment"])}
    model, meta = pretrain_cnn(cfg, tc, lambda: LabelledSubset(base, idx, labels), desc, device=device,
                               progress=progress)
    meta["source_indices"] = idx
    return model, meta


def pretrained_and_init(settings: dict, source: str, seed: int = 0, device: str | torch.device = "auto",
                        progress: bool = False) -> tuple[nn.Module, nn.Module, dict, object]:
    """A pre-trained network and its architecture at random initialisation (the paper's "transfer" and "init",
    Figures 13, 19), with the meta and input transform. With ``settings["weights"]``: torchvision ImageNet weights,
    inputs at 224; else :func:`source_model` and its own initialisation, transform None."""
    if settings.get("weights"):
        cfg = CNNConfig(arch=settings["arch"], in_chans=3, img_size=224, num_classes=1000, weights=settings["weights"])
        meta = {"model": dataclasses.asdict(cfg), "from_cache": None, "source": "ImageNet (torchvision weights)"}
        return (build_cnn(cfg, seed=None), build_cnn(dataclasses.replace(cfg, weights=None), seed=seed), meta,
                imagenet_input(224))
    model, meta = source_model(settings, source, seed=seed, device=device, progress=progress)
    m = meta["model"]
    cfg = CNNConfig(**{**m, "channels": tuple(m["channels"]), "fc": tuple(m["fc"])})
    return model, build_cnn(cfg, seed=meta["train"]["seed"]), meta, None


# ----------------------------------------------------------------------------- a10: domains

#: a10's offline domains and the Office-31 domain each stands in for (by role: the largest, clean product
#: shots; the low-resolution webcam; the smallest, a different camera and scene).
OFFICE_STANDIN = {"clean": "amazon", "lowres": "webcam", "inverted": "dslr"}
#: the domains of each data set :func:`layersim.inputs.labelled.domain_sets` reads
DATASET_DOMAINS = {"fashion-mnist": DOMAINS, "office31": tuple(OFFICE_STANDIN.values())}


def check_domains(settings: dict) -> None:
    """a10's settings: ``domains`` are domains of ``dataset`` (:data:`DATASET_DOMAINS`) and
    ``train_per_class`` has one entry per domain; else one ``ValueError`` naming the parameter."""
    known = DATASET_DOMAINS.get(settings["dataset"])
    if known is None:
        raise ValueError(f"parameter 'dataset': {settings['dataset']!r} has no domains; dataset must be one of "
                         f"{sorted(DATASET_DOMAINS)}")
    bad = [d for d in settings["domains"] if d not in known]
    if bad:
        raise ValueError(f"parameter 'domains': {bad} are not domains of {settings['dataset']!r}; "
                         f"domains must be taken from {list(known)}")
    if len(settings["train_per_class"]) != len(settings["domains"]):
        raise ValueError(f"parameter 'train_per_class': {settings['train_per_class']!r} needs one entry per domain "
                         f"({len(settings['domains'])})")


def check_groups(settings: dict, groups_key: str = "groups", dataset_key: str = "target") -> None:
    """``settings[groups_key]`` are class groups of ``settings[dataset_key]`` (:data:`SOURCE_GROUPS`)."""
    known = SOURCE_GROUPS.get(settings[dataset_key], {})
    bad = [g for g in settings[groups_key] if g not in known]
    if bad:
        raise ValueError(f"parameter {groups_key!r}: {bad} are not class groups of {settings[dataset_key]!r}; "
                         f"{groups_key} must be taken from {sorted(known)}")


def random_label_model(base: nn.Module, base_key: str, cfg: CNNConfig, train_data, num_classes: int,
                       train_cfg: training.TrainConfig, data_desc: dict, device: str | torch.device = "auto",
                       progress: bool = False) -> tuple[nn.Module, dict]:
    """a10's negative-transfer source (Section 7.3, after Wang et al. 2019): ``base`` with a new head, trained
    (:func:`layersim.train.transfer_learning.pretrain_cnn`, cached) on ``train_data``'s images with uniformly random
    labels."""
    labels = random_labels(len(labels_of(train_data)), num_classes, seed=train_cfg.seed)
    cfg = dataclasses.replace(cfg, num_classes=num_classes)
    desc = {**data_desc, "labels": "uniform random", "n": len(labels)}
    return pretrain_cnn(cfg, train_cfg, relabelled(train_data, labels), desc, init_from=(base, base_key),
                        device=device, progress=progress)
