"""Deep MLPs with and without residual connections (tracing paper, appendix B.2, Figure 12).

The tracing paper argues that COS works as a layer-wise similarity in transformers because
the residual update ``h^(l+1) = h^(l) + f(h^(l))`` (eq. 1) leaves little rotation between
layers; to test it, appendix B.2 trains 9-layer MLPs on MNIST with and without residual
connections and compares the layer-wise accuracy of the last-layer classifier with COS and
CKA to the last layer. This module builds and trains those MLPs; reading their layers and
the last-layer classifier on each goes through ``layersim.nets.models`` and ``layersim.nets.readout``.

Architecture (:class:`MLP`, ``L = depth`` hidden layers, all of width ``d``; ``phi`` = ReLU):

- layer 1 (the input projection, the same in both variants): ``h^(1) = phi(W_1 x + b_1)``
  with ``x`` the flattened image;
- layers ``l = 2..L``: plain ``h^(l) = phi(W_l h^(l-1) + b_l)``; residual
  ``h^(l) = h^(l-1) + phi(W_l h^(l-1) + b_l)`` (eq. 1 with ``f = phi o W_l``);
- classifier ``logits = W norm(h^(L)) + b`` with ``norm`` the optional final LayerNorm
  (``final_norm=False`` by default: the paper's MLPs are described without one, so the
  readout is the plain linear head; with ``final_norm=True`` the readout recomputes the
  LayerNorm on every layer, as :func:`layersim.nets.readout.layer_logits` does for transformers).

So both variants have exactly the same parameters and the same first layer; the only
difference is the skip connection on layers 2..L. Choices made here (the paper does not
give them): the input projection is the first of the ``L`` hidden layers (there is no
separate linear embedding), the residual branch is a single linear layer with a ReLU (as a
plain layer), no normalisation inside the network.

Layer indices: the hidden layers are the blocks of the MLP's adapter (``layersim.nets.adapters``,
``"mlp"``), so ``layersim.nets.models.collect(model, batches, layers=range(1, L + 1))`` returns
``[L, N, d]`` with entry ``i`` the output of hidden layer ``i + 1`` (index 0, the flattened
image, is not of width ``d``), and ``layersim.nets.readout.evaluate(model, images, embedding=False)``
their layer-wise accuracy (eq. 2) through the final norm and head.

Training uses :func:`layersim.train.training.train_classifier`; :func:`cached_mlp` caches trained
models under ``<cache>/checkpoints/mlp-<key>/`` with :func:`layersim.train.checkpoints.config_key`
and the same atomic save as :func:`layersim.train.training.cached_vit`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import TensorDataset

from layersim.inputs import data
from layersim.train import training

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "MLPConfig",
    "MLPLayer",
    "make_activation",
    "build_mlp",
    "cached_mlp",
    "mlp_from_settings",
]


#: activations of the hidden layers, by name (the alignment paper's sweep varies them)
ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "prelu": nn.PReLU, "leakyrelu": nn.LeakyReLU,
               "linear": nn.Identity, "sigmoid": nn.Sigmoid}


def make_activation(name: str) -> nn.Module:
    """A new activation module of :data:`ACTIVATIONS` (ValueError naming the choices otherwise)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; use one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


@dataclass(frozen=True)
class MLPConfig:
    """A ``depth``-hidden-layer MLP of constant ``width`` on flattened inputs.

    ``residual``: skip connections on hidden layers 2..depth; ``final_norm``: a LayerNorm
    between the last hidden layer and the linear classifier. ``activation``: a name of
    :data:`ACTIVATIONS`; ``bias``: whether the hidden layers have biases (the head always has
    one). ``widths``: the hidden widths input side first, for networks whose layers differ
    (then ``depth = len(widths)`` and ``width = widths[-1]``); None = ``(width,) * depth``.
    The tracing paper's MLPs are the defaults; the alignment paper's come from
    :func:`small_nets.make_mlp` (``num_classes`` = outputs, 1 for its scalar tasks).
    """

    in_features: int = 784
    num_classes: int = 10
    width: int = 256
    depth: int = 9
    residual: bool = False
    final_norm: bool = False
    activation: str = "relu"
    bias: bool = True
    widths: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.depth < 1 or self.width < 1 or self.in_features < 1 or self.num_classes < 1:
            raise ValueError(f"depth, width, in_features and num_classes must be positive, got {self}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; use one of {sorted(ACTIVATIONS)}")
        if self.widths is not None:
            if len(self.widths) != self.depth or self.widths[-1] != self.width or min(self.widths) < 1:
                raise ValueError(f"widths {self.widths} must be positive, with depth = len(widths) and "
                                 f"width = widths[-1]; got depth {self.depth}, width {self.width}")
            if self.residual and len(set(self.widths)) > 1:
                raise ValueError(f"a residual MLP needs equal widths, got {self.widths}")

    @staticmethod
    def data_fields(info: dict) -> dict:
        """The fields a data set decides (``data.dataset_info``): flattened input size, classes."""
        return {"in_features": info["channels"] * info["image_size"] ** 2, "num_classes": info["classes"]}

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        """The width of every hidden layer, input side first."""
        return tuple(self.widths) if self.widths is not None else (self.width,) * self.depth


class MLPLayer(nn.Linear):
    """One hidden layer: ``h -> act(W h + b)``, plus ``h`` with a skip connection (eq. of the
    module docstring). A ``Linear`` itself, so its parameters keep the names ``layers.<i>.weight``
    / ``.bias`` of the checkpoints; ``act`` is the activation module (ReLU by default)."""

    def __init__(self, in_features: int, out_features: int, residual: bool = False, activation: str = "relu",
                 bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.residual = residual
        self.act = make_activation(activation)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.act(super().forward(h))
        return h + z if self.residual else z


class MLP(nn.Module):
    """The MLP of :class:`MLPConfig` (see the module docstring for the equations).

    ``layers[i]`` is hidden layer ``i + 1`` (an :class:`MLPLayer`, residual from layer 2 on when
    ``cfg.residual``); ``norm`` is the final norm (``nn.Identity`` without one); ``head`` the linear
    classifier. ``forward`` returns logits. Its adapter (``layersim.nets.adapters``, ``"mlp"``) reads
    the hidden layers as blocks: index 0 is the flattened input, so collect ``layers=1..L``.
    """

    def __init__(self, cfg: MLPConfig):
        super().__init__()
        self.cfg = cfg
        dims = [cfg.in_features, *cfg.hidden_sizes]
        self.layers = nn.ModuleList(MLPLayer(a, b, residual=cfg.residual and i > 0, activation=cfg.activation,
                                             bias=cfg.bias)
                                    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))
        self.norm = nn.LayerNorm(dims[-1]) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(dims[-1], cfg.num_classes)

    @property
    def residual(self) -> bool:
        return self.cfg.residual

    def hidden(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every hidden layer's output ``[h^(1), ..., h^(L)]``, each ``[B, width]``."""
        h = x.flatten(1)
        out = []
        for layer in self.layers:
            h = layer(h)
            out.append(h)
        return out

    def classify(self, h: torch.Tensor) -> torch.Tensor:
        """The last-layer classifier (final norm, then head) on features ``[B, width]``."""
        return self.head(self.norm(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for layer in self.layers:
            h = layer(h)
        return self.classify(h)


def build_mlp(cfg: MLPConfig, seed: int | None = 0) -> MLP:
    """A randomly initialised :class:`MLP` (PyTorch's default init) drawn from ``seed``
    without touching the global random state; ``seed=None`` uses the global state."""
    if seed is None:
        return MLP(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLP(cfg)


# ----------------------------------------------------------------------------- training / cache


def cached_mlp(model_cfg: MLPConfig, train_cfg: training.TrainConfig, train_set, data_desc: dict,
               device: str | torch.device = "auto", progress: bool = True,
               retrain: bool = False) -> tuple[MLP, dict]:
    """Build and train an :class:`MLP` (initialised from ``train_cfg.seed``), or load it from
    the cache (``<cache>/checkpoints/mlp-<key>/``); see :func:`layersim.train.training.cached_model`."""
    if train_cfg.objective != "ce":
        raise ValueError(f"the MLP is trained with the standard 'ce' objective, got {train_cfg.objective!r}")
    return training.cached_model("mlp", lambda: build_mlp(model_cfg, seed=train_cfg.seed), model_cfg, train_cfg,
                        train_set, data_desc, device=device, progress=progress, retrain=retrain)


def mlp_from_settings(settings: dict, residual: bool | None = None, seed: int = 0,
                      device: str | torch.device = "auto", progress: bool = True,
                      retrain: bool = False) -> tuple[MLP, dict]:
    """The MLP that ``settings`` describe (``residual`` overrides ``settings["residual"]``),
    trained on its data set's training split (``n_train`` images, 0 = all), or cached.

    The training images are loaded (and stacked into a ``TensorDataset``) only when no cached
    checkpoint exists.
    """
    if residual is not None:
        settings = {**settings, "residual": bool(residual)}
    info = data.dataset_info(settings["dataset"])
    model_cfg, train_cfg = training.configs_from(settings, info, MLPConfig, seed=seed)
    limit = settings.get("n_train") or None
    desc = {"name": settings["dataset"], "split": "train", "limit": limit, "seed": seed, "augment": False}

    def load():  # stacked once into tensors: per-sample loading would dominate an MLP's training time
        return TensorDataset(*data.image_dataset(settings["dataset"], "train", limit=limit, seed=seed).tensors())

    return cached_mlp(model_cfg, train_cfg, load, desc, device=device, progress=progress, retrain=retrain)

