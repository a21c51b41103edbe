"""The CNNs whose layers the alignment paper reads (Sections 7.2-7.3): :class:`SmallCNN` (conv-ReLU-maxpool blocks,
then fully connected ReLU layers; adapter ``small_cnn``) or a torchvision ResNet / VGG, described by a
:class:`CNNConfig` and built by :func:`build_cnn`; :func:`replace_head` puts on a fresh classifier,
:func:`feature_layers` names the hidden layers and :func:`extract_features` reads them (see docs/modules.md,
``layersim.nets.cnn``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from layersim.inputs import fetch
from layersim.nets import adapters, models

#: the torchvision architectures a :class:`CNNConfig` may name
TORCHVISION_ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "vgg11", "vgg16")


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


@adapters.register_model(
    lambda m: [*m.blocks, *m.fcs], head="head", uniform=False, name="small_cnn",
    models="the alignment paper's small CNN (`layersim.nets.cnn.SmallCNN`): conv stages, then fully "
           "connected layers (`conv1, ..., fc1, ...`); `token='all'` flattens a map, `'mean'` averages it")
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


def build_cnn(cfg: CNNConfig, seed: int | None = 0) -> nn.Module:
    """The network ``cfg`` describes; random weights drawn from ``seed`` (global state untouched)."""
    def make():
        if cfg.arch == "small":
            return SmallCNN(cfg)
        import torchvision

        kwargs = {} if cfg.weights else {"num_classes": cfg.num_classes}
        if cfg.weights:
            fetch.check_weights(cfg.arch, cfg.weights)
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
