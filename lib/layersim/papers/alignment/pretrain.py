"""Pre-trained CNNs and feature transfer for the alignment paper's Sections 7.2-7.3 (Figures 13-16, 19-20, Table 1).

A CNN trained on a source task is read on a target task's images and its hidden layers' alignment with the target
labels measured (eq. 2), then fine-tuned on the target. Shared by notebooks a08-a10: the networks
(:class:`SmallCNN`, torchvision models; :func:`build_cnn`), cached pre-training (:func:`pretrain_cnn`,
:func:`source_model`, :func:`pretrained_and_init`), data and domains, per-layer features (:func:`extract_features`),
fine-tuning (:func:`finetune`), binary target tasks (:func:`evaluate_task`) and Section 7.2's claims
(:func:`transfer_claims`) (see docs/modules.md, `layersim.papers.alignment.pretrain`).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from layersim.core.paths import cache_dir
from layersim.inputs import image_data, subsets
from layersim.inputs.shift import gaussian_noise
from layersim.measures import alignment as al, probe
from layersim.nets import adapters, models
from layersim.nets.models import resolve_device
from layersim.notebook import results
from layersim.notebook.presets import ALIGNMENT_SOURCE_CNN
from layersim.train import training

#: Fashion-MNIST's classes split like Cifar10-Natural (6 classes) / Cifar10-Artificial (4 classes):
#: garments (T-shirt/top, trouser, pullover, dress, coat, shirt) and footwear/bags (sandal, sneaker,
#: bag, ankle boot); and ``all`` ten, a source *related* to every target task drawn from them (the alignment
#: paper's Section 7.2: ImageNet, "presumably related to a wide array of target tasks", and the Cifar tasks
#: read on it), whose images the target tasks do not reuse (``source_indices``).
FASHION_GROUPS = {"clothing": (0, 1, 2, 3, 4, 6), "footwear_bags": (5, 7, 8, 9), "all": tuple(range(10))}
#: The paper's appendix D: Cifar10-Natural (bird, cat, deer, dog, frog, horse) and Cifar10-Artificial
#: (airplane, automobile, ship, truck).
CIFAR10_GROUPS = {"natural": (2, 3, 4, 5, 6, 7), "artificial": (0, 1, 8, 9)}
TORCHVISION_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "vgg11", "vgg16")
DOMAINS = ("clean", "lowres", "inverted")


# ----------------------------------------------------------------------------- networks


@dataclass(frozen=True)
class CNNConfig:
    """A CNN: ``arch="small"`` (:class:`SmallCNN` with ``channels``, ``fc``) or a :data:`TORCHVISION_ARCHS` name;
    ``weights``: a torchvision weights name (downloaded; None = random init; 1000 outputs until
    :func:`replace_head`)."""

    arch: str = "small"
    in_chans: int = 1
    img_size: int = 28
    num_classes: int = 10
    channels: tuple[int, ...] = (16, 32, 64)
    fc: tuple[int, ...] = (256, 128)
    weights: str | None = None

    def __post_init__(self):
        if self.arch != "small" and self.arch not in TORCHVISION_ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; use 'small' or one of {TORCHVISION_ARCHS}")
        if self.arch == "small" and self.img_size // 2 ** len(self.channels) < 1:
            raise ValueError(f"{len(self.channels)} pooling blocks leave nothing of a {self.img_size}-pixel image")
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {self.num_classes}")


class SmallCNN(nn.Module):
    """``len(channels)`` blocks of 3x3 convolution, ReLU and 2x2 max-pooling, then ReLU layers ``fc`` and a linear
    ``head``; its hidden layers (:attr:`layer_names`, ``conv1, ..., fc1, ...``) are outputs after ReLU (and
    pooling)."""

    def __init__(self, cfg: CNNConfig):
        super().__init__()
        blocks, c_in = [], cfg.in_chans
        for c in cfg.channels:
            blocks.append(nn.Sequential(nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)))
            c_in = c
        self.blocks = nn.ModuleList(blocks)
        side = cfg.img_size
        for _ in cfg.channels:
            side //= 2
        dims = [c_in * side * side, *cfg.fc]
        self.fcs = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], cfg.num_classes)
        self.layer_names = ([f"conv{i + 1}" for i in range(len(cfg.channels))]
                            + [f"fc{i + 1}" for i in range(len(cfg.fc))])

    def hidden(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every hidden layer's output, in :attr:`layer_names` order (conv maps as ``[B, C, H, W]``)."""
        out = []
        for b in self.blocks:
            x = b(x)
            out.append(x)
        x = x.flatten(1)
        for f in self.fcs:
            x = f(x)
            out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(x)[-1])


adapters.register(adapters.ragged(
    name="small_cnn",
    models="the alignment paper's small CNN (`layersim.papers.alignment.pretrain.SmallCNN`): conv stages, then fully "
           "connected layers (`conv1, ..., fc1, ...`); `token='all'` flattens a map, `'mean'` averages it",
    matches=lambda m: isinstance(m, SmallCNN),
    blocks=lambda m: [*m.blocks, *m.fcs],
    head=lambda m: m.head,
), replace=True)


def build_cnn(cfg: CNNConfig, seed: int | None = 0) -> nn.Module:
    """The network ``cfg`` describes; random weights drawn from ``seed`` (global state untouched)."""
    def make():
        if cfg.arch == "small":
            return SmallCNN(cfg)
        import torchvision

        kwargs = {} if cfg.weights else {"num_classes": cfg.num_classes}
        return getattr(torchvision.models, cfg.arch)(weights=cfg.weights, **kwargs)

    if seed is None:
        return make()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def _head_slot(model: nn.Module) -> tuple[nn.Module, str]:
    """(parent module, attribute) of the classifier layer of a SmallCNN, ResNet or VGG."""
    if isinstance(model, SmallCNN):
        return model, "head"
    if hasattr(model, "fc") and isinstance(model.fc, nn.Linear):  # torchvision ResNet
        return model, "fc"
    if hasattr(model, "classifier") and isinstance(model.classifier, nn.Sequential):  # torchvision VGG
        return model.classifier, str(len(model.classifier) - 1)
    raise ValueError(f"no known classifier head on {type(model).__name__}")


def replace_head(model: nn.Module, num_classes: int, seed: int = 0) -> nn.Module:
    """Put a freshly initialised linear classifier with ``num_classes`` outputs on ``model`` (in place)."""
    parent, name = _head_slot(model)
    old = getattr(parent, name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = nn.Linear(old.in_features, num_classes)
    setattr(parent, name, new.to(old.weight.device))
    return model


def feature_layers(model: nn.Module) -> list[str]:
    """Names of the hidden layers :func:`extract_features` reads, input side first: ``conv1..convK, fc1..fcM`` for a
    SmallCNN, else their paths (ResNet ``layer1..layer4``, ``avgpool``; VGG ``features``, ``classifier.1``, ``.4``)."""
    blocks = adapters.get(model).blocks(model)
    if isinstance(model, SmallCNN):
        return list(model.layer_names)
    path = {id(module): name for name, module in model.named_modules()}
    return [path[id(b)] for b in blocks]


def extract_features(model: nn.Module, images, layers: Sequence[str] | None = None, batch_size: int = 256,
                     device: str | torch.device = "cpu", spatial: str = "flatten") -> dict[str, np.ndarray]:
    """Hidden representations ``{layer: float64 [n, d]}`` of ``images`` (``[N, C, H, W]`` or a Dataset of ``(image,
    label)``) for ``layers`` (default :func:`feature_layers`), read in one pass in eval mode. Convolutional maps are
    flattened (``spatial="flatten"``) or averaged over positions (``"avg"``)."""
    tokens = {"flatten": "all", "avg": "mean"}
    if spatial not in tokens:
        raise ValueError(f"spatial must be 'flatten' or 'avg', got {spatial!r}")
    names = feature_layers(model)
    layers = list(names if layers is None else layers)
    unknown = [n for n in layers if n not in names]
    if unknown:
        raise ValueError(f"unknown layer(s) {unknown}; this model has {names}")
    ids = [names.index(n) + 1 for n in layers]  # entry 0 is the input of the first block
    out = models.layer_outputs(model, images, layers=ids, token=tokens[spatial], batch_size=batch_size,
                               device=device)
    return dict(zip(layers, out))


# ----------------------------------------------------------------------------- data


class LabelledSubset(Dataset):
    """``base[indices]`` with new integer ``labels`` (remapped classes, or random labels), and an
    optional ``transform`` of the image tensor."""

    def __init__(self, base: Dataset, indices, labels, transform=None):
        self.base, self.transform = base, transform
        self.indices = np.asarray(indices, dtype=np.int64)
        self.targets = np.asarray(labels, dtype=np.int64)
        if len(self.indices) != len(self.targets):
            raise ValueError(f"{len(self.indices)} indices but {len(self.targets)} labels")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        x = self.base[int(self.indices[i])][0]
        if self.transform is not None:
            x = self.transform(x)
        return x, int(self.targets[i])


def random_labels(n: int, num_classes: int, seed: int = 0) -> np.ndarray:
    """``n`` labels drawn uniformly from ``0..num_classes-1`` (a10's randomised source task)."""
    return np.random.default_rng(seed).integers(0, num_classes, size=n).astype(np.int64)


def stack(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """All samples of a (small) Dataset as ``(float32 [N, C, H, W], int64 [N])``."""
    xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
    return torch.stack(xs).float(), torch.as_tensor(ys, dtype=torch.int64)


def domain_shift(X: torch.Tensor, domain: str, seed: int = 0, noise: float = 0.1) -> torch.Tensor:
    """a10's offline stand-in for Office-31's domains on ``[N, C, H, W]`` pixels in [0, 1]: ``"clean"`` (unchanged),
    ``"lowres"`` (2x2 average, upsampled, plus Gaussian noise ``noise`` from ``seed``) or ``"inverted"``
    (``1 - x``)."""
    X = torch.as_tensor(X, dtype=torch.float32)
    if X.ndim != 4:
        raise ValueError(f"images must be [N, C, H, W], got shape {tuple(X.shape)}")
    if domain == "clean":
        return X.clone()
    if domain == "lowres":
        small = F.avg_pool2d(X, 2)
        up = F.interpolate(small, size=X.shape[-2:], mode="bilinear", align_corners=False)

        return gaussian_noise(up, noise, seed=seed)
    if domain == "inverted":
        return 1.0 - X
    raise ValueError(f"unknown domain {domain!r}; use one of {DOMAINS}")


# ----------------------------------------------------------------------------- pre-training and fine-tuning


def pretrain_cnn(cfg: CNNConfig, train_cfg: training.TrainConfig, train_set, data_desc: dict,
                 init_from: tuple[nn.Module, str] | None = None, device: str | torch.device = "auto",
                 progress: bool = False, retrain: bool = False) -> tuple[nn.Module, dict]:
    """Train the network of ``cfg`` on ``train_set`` (or a callable, called only when no checkpoint exists) with
    :func:`layersim.train.training.cached_model` (prefix ``"cnn"``), or load it. ``init_from=(model, key)``: start
    from a copy of ``model`` with a new head, ``key`` entering the cache key. Returns
    ``(model in eval mode, meta)``."""
    desc = dict(data_desc)
    if init_from is not None:
        base, base_key = init_from
        desc["init_from"] = base_key

        def build():
            return replace_head(copy.deepcopy(base).cpu(), cfg.num_classes, seed=train_cfg.seed)
    else:
        def build():
            return build_cnn(cfg, seed=train_cfg.seed)

    return training.cached_model("cnn", build, cfg, train_cfg, train_set, desc, device=device,
                                 progress=progress, retrain=retrain)


def _loader(data, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    if isinstance(data, (tuple, list)):
        data = TensorDataset(torch.as_tensor(data[0]), torch.as_tensor(data[1]))
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=gen if shuffle else None)


def accuracy(model: nn.Module, data, batch_size: int = 512, device: str | torch.device = "cpu") -> float:
    """Top-1 accuracy (:func:`layersim.measures.probe.top1_accuracy`) of ``model`` on ``data``: ``(images, labels)``
    tensors or a Dataset. The model's training mode is restored afterwards."""
    dev = resolve_device(device)
    was_training = model.training
    model.to(dev).eval()
    logits, labels = [], []
    with torch.no_grad():
        for x, y in _loader(data, batch_size, shuffle=False):
            logits.append(model(x.to(dev)).float().cpu())
            labels.append(y)
    model.train(was_training)
    if not labels:
        raise ValueError("accuracy of an empty data set")
    return probe.top1_accuracy(torch.cat(logits), torch.cat(labels).numpy())


def finetune(model: nn.Module, train_data, test_data, num_classes: int, epochs: int = 10, lr: float = 0.01,
             momentum: float = 0.9, weight_decay: float = 1e-4, batch_size: int = 64, seed: int = 0,
             new_head: bool = True, device: str | torch.device = "cpu", eval_every: int = 1) -> tuple[nn.Module, dict]:
    """Fine-tune a copy of ``model`` end to end (appendix D: SGD, momentum 0.9, weight decay 1e-4) on
    ``train_data``; ``new_head``: a fresh ``num_classes``-way classifier first. Returns ``(copy, history)``:
    ``train_loss`` per epoch, ``test_accuracy`` at ``eval_epochs`` (0, every ``eval_every``, the last) and
    ``final_accuracy``."""
    if epochs < 1 or lr <= 0:
        raise ValueError(f"epochs and lr must be positive, got {epochs}, {lr}")
    dev = resolve_device(device)
    net = copy.deepcopy(model).to(dev)
    if new_head:
        replace_head(net, num_classes, seed=seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    loader = _loader(train_data, batch_size, shuffle=True, seed=seed)
    hist = {"test_accuracy": [accuracy(net, test_data, device=dev)], "eval_epochs": [0]}

    def evaluate(epoch: int) -> None:
        if epoch % max(1, eval_every) == 0 or epoch == epochs:
            hist["test_accuracy"].append(accuracy(net, test_data, device=dev))
            hist["eval_epochs"].append(epoch)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        epochs_run = training.train_epochs(net, opt, epochs, lambda epoch: ((x.to(dev), y.to(dev)) for x, y in loader),
                                           lambda x, y: F.cross_entropy(net(x), y), after_epoch=evaluate,
                                           what="fine-tuning")
    hist = {"train_loss": [e["loss"] for e in epochs_run], **hist}
    net.eval()
    hist["final_accuracy"] = hist["test_accuracy"][-1]
    return net, hist


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
        gd[name] = {loss: al.best_linear_curves(P_tr, y_train, lrs, loss=loss, steps=steps, Phi_test=P_te,
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
    """Section 7.2's three statements, tested on :func:`evaluate_task` runs (``results.claim`` dicts).

    * ``pretrained_beats_init_and_input`` (Figs. 13a, 19): mean area of ``pretrained`` minus the larger
      of ``init``'s and ``inputs``'s; positive = holds.
    * ``<subject>_beats_handcrafted`` (Figs. 13b, 20a): ``pretrained``'s area minus the best of
      ``handcrafted``.
    * ``<subject>_best_test_performance`` (Figs. 13c, d, 20b, c): the smallest, over both losses and
      every other representation trained with gradient descent, of (other's final test loss minus
      ``pretrained``'s), mean over tasks; positive = holds. The log10 training-loss gap averaged over the
      recorded steps (faster optimisation) and the final test classification error ride along.

    Each records in how many tasks it holds task by task (the last as the number of tasks in which the
    pre-trained model has the lowest final test loss for both losses).
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
    return {**ALIGNMENT_SOURCE_CNN[scale], **overrides}


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


def imagenet_input(size: int = 224):
    """Transform of a [0, 1] image tensor for torchvision ImageNet models: short side resized to ``size``, ImageNet
    normalisation."""
    from torchvision import transforms

    return transforms.Compose([transforms.Resize(size, antialias=True),
                               transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])


def load_office31(domain: str, root=None, size: int = 224):
    """Office-31 ``domain`` ("amazon", "webcam", "dslr") as an ImageFolder of
    ``<root>/<domain>/images/<class>/*.jpg``, resized and ImageNet-normalised; ``root``: ``$LAYERSIM_OFFICE31`` or
    ``<cache>/office31``. Paper scale only."""
    import os
    from pathlib import Path

    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    if domain not in ("amazon", "webcam", "dslr"):
        raise ValueError(f"unknown Office-31 domain {domain!r}")
    root = Path(root or os.environ.get("LAYERSIM_OFFICE31") or cache_dir("office31"))
    folder = root / domain / "images"
    if not folder.is_dir():
        raise FileNotFoundError(f"Office-31 not found at {folder}: download it and set $LAYERSIM_OFFICE31")
    tf = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor(),
                             transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return ImageFolder(str(folder), transform=tf)


def subset_dataset(dataset: str, split: str, classes: Sequence[int], per_class: int | None = None, seed: int = 0,
                   exclude=None, transform=None, normalize: bool = True) -> LabelledSubset:
    """A class-balanced subset (:func:`layersim.inputs.subsets.class_subset`) of an image data set as a lazy
    :class:`LabelledSubset` (labels ``0..k-1``); ``transform`` and ``normalize`` as in
    :func:`layersim.inputs.image_data.image_dataset`."""
    ds = image_data.image_dataset(dataset, split, transform=transform, normalize=normalize)
    idx, labels = subsets.class_subset(ds.targets, classes, per_class, seed=seed, exclude=exclude)
    return LabelledSubset(ds, idx, labels)


def load_images(dataset: str, split: str, classes: Sequence[int], per_class: int | None = None, seed: int = 0,
                exclude=None, domain: str | None = None, transform=None, normalize: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """:func:`subset_dataset` stacked: ``(X [N, C, H, W], labels 0..k-1, split indices)``; ``domain``:
    :func:`domain_shift` before the normalisation."""
    sub = subset_dataset(dataset, split, classes, per_class, seed, exclude, transform,
                         normalize=normalize and domain is None)
    X, y = stack(sub)
    if domain is not None:
        X = domain_shift(X, domain, seed=seed)
        if normalize:
            X = image_data.as_model_input(X, sub.base.name)
    return X, y, sub.indices


def model_input(X01: torch.Tensor, dataset: str, transform=None) -> torch.Tensor:
    """What a network sees of images with pixels in [0, 1]: ``transform(X01)`` (e.g. :func:`imagenet_input` for
    torchvision ImageNet models) or the data set's own per-channel standardisation."""
    if transform is not None:
        return transform(X01)
    return image_data.as_model_input(X01, dataset)


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
#: the domains of each data set :func:`domain_sets` reads
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


def domain_sets(dataset: str, domain: str, train_per_class: int | None, test_per_class: int | None,
                classes: Sequence[int] = tuple(range(10)), seed: int = 0, exclude=None, test_fraction: float = 0.2):
    """``(train, test, train indices)`` of one domain: offline, :func:`load_images` with :func:`domain_shift`,
    per-class counts, skipping ``exclude``, as tensors; for ``"office31"``, a random ``test_fraction`` split of all
    images as :class:`LabelledSubset` Datasets."""
    if dataset == "office31":
        ds = load_office31(domain)
        targets = np.asarray(ds.targets)
        perm = np.random.default_rng(seed).permutation(len(targets))
        n_test = int(round(test_fraction * len(perm)))
        te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        return LabelledSubset(ds, tr, targets[tr]), LabelledSubset(ds, te, targets[te]), tr
    X_tr, y_tr, idx = load_images(dataset, "train", classes, train_per_class, seed=seed, exclude=exclude, domain=domain)
    X_te, y_te, _ = load_images(dataset, "test", classes, test_per_class, seed=seed, domain=domain)
    return (X_tr, y_tr), (X_te, y_te), idx


def relabelled(data, labels) -> Dataset:
    """The images of ``data`` (``(X, y)`` tensors or a :class:`LabelledSubset`) with other ``labels``
    (a10's random-label source task)."""
    labels = np.asarray(labels, dtype=np.int64)
    if isinstance(data, LabelledSubset):
        return LabelledSubset(data.base, data.indices, labels, data.transform)
    X = data[0]
    if len(X) != len(labels):
        raise ValueError(f"{len(X)} images but {len(labels)} labels")
    return TensorDataset(X, torch.as_tensor(labels))


def labels_of(data) -> np.ndarray:
    """The labels of ``(X, y)`` tensors or of a Dataset with ``targets``."""
    return np.asarray(data[1] if isinstance(data, (tuple, list)) else data.targets)


def images_of(data):
    """What :func:`extract_features` reads: the image tensor of ``(X, y)``, or the Dataset itself."""
    return data[0] if isinstance(data, (tuple, list)) else data


def random_label_model(base: nn.Module, base_key: str, cfg: CNNConfig, train_data, num_classes: int,
                       train_cfg: training.TrainConfig, data_desc: dict, device: str | torch.device = "auto",
                       progress: bool = False) -> tuple[nn.Module, dict]:
    """a10's negative-transfer source (Section 7.3, after Wang et al. 2019): ``base`` with a new head, trained
    (:func:`pretrain_cnn`, cached) on ``train_data``'s images with uniformly random labels."""
    labels = random_labels(len(labels_of(train_data)), num_classes, seed=train_cfg.seed)
    cfg = dataclasses.replace(cfg, num_classes=num_classes)
    desc = {**data_desc, "labels": "uniform random", "n": len(labels)}
    return pretrain_cnn(cfg, train_cfg, relabelled(train_data, labels), desc, init_from=(base, base_key),
                        device=device, progress=progress)
