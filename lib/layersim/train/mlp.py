"""Deep MLPs with and without residual connections (tracing paper, appendix B.2, Figure 12).

:class:`MLP` has ``L = depth`` hidden layers of width ``d`` (``phi`` = ReLU): ``h^(1) = phi(W_1 x + b_1)``; for
``l = 2..L`` plain ``h^(l) = phi(W_l h^(l-1) + b_l)`` or residual ``h^(l) = h^(l-1) + phi(W_l h^(l-1) + b_l)``
(eq. 1); ``logits = W norm(h^(L)) + b``, ``norm`` an optional final LayerNorm. Its adapter ``"mlp"`` reads the
hidden layers as blocks; index 0 is the flattened input, so collect ``layers=range(1, L + 1)``. :func:`cached_mlp`
trains or loads ``<cache>/checkpoints/mlp-<key>/`` (see docs/modules.md, `layersim.train.mlp`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import TensorDataset

from layersim.inputs import image_data
from layersim.nets import adapters
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

    ``residual``: skips on layers 2..depth; ``final_norm``: a LayerNorm before the classifier; ``activation``: a
    name of :data:`ACTIVATIONS`; ``bias``: biases on hidden layers. ``widths``: per-layer widths, input side first
    (``depth = len(widths)``, ``width = widths[-1]``); None = ``(width,) * depth``. Raises ``ValueError`` on
    non-positive sizes or unequal residual widths.
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
        """The fields a data set decides (``image_data.dataset_info``): flattened input size, classes."""
        return {"in_features": info["channels"] * info["image_size"] ** 2, "num_classes": info["classes"]}

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        """The width of every hidden layer, input side first."""
        return tuple(self.widths) if self.widths is not None else (self.width,) * self.depth


class MLPLayer(nn.Linear):
    """One hidden layer ``h -> act(W h + b)`` (plus ``h`` when ``residual``); an ``nn.Linear``, so checkpoints keep
    the names ``layers.<i>.weight`` / ``.bias``."""

    def __init__(self, in_features: int, out_features: int, residual: bool = False, activation: str = "relu",
                 bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.residual = residual
        self.act = make_activation(activation)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.act(super().forward(h))
        return h + z if self.residual else z


@adapters.register_model(
    "layers", head="head", final_norm="norm", name="mlp", token="all",
    models="the project's MLPs (`layersim.train.mlp.MLP`: the tracing paper's appendix B.2 networks and the alignment "
           "paper's, `small_nets.make_mlp`): hidden layers as blocks; index 0 is the flattened input (another "
           "width: collect `layers=range(1, L + 1)`)",
    widths=lambda m: [m.layers[0].in_features, *(layer.out_features for layer in m.layers)])
class MLP(nn.Module):
    """The MLP of :class:`MLPConfig`: ``layers[i]`` is hidden layer ``i + 1`` (residual from layer 2 when
    ``cfg.residual``), ``norm`` the final norm (``nn.Identity`` without one), ``head`` the classifier; ``forward``
    returns logits."""

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
    """The MLP that ``settings`` describe (``residual`` overrides ``settings["residual"]``), trained on ``n_train``
    images of its data set's training split (0 = all), or loaded from the cache; returns ``(model, meta)``."""
    if residual is not None:
        settings = {**settings, "residual": bool(residual)}
    info = image_data.dataset_info(settings["dataset"])
    model_cfg, train_cfg = training.configs_from(settings, info, MLPConfig, seed=seed)
    limit = settings.get("n_train") or None
    desc = {"name": settings["dataset"], "split": "train", "limit": limit, "seed": seed, "augment": False}

    def load():  # stacked once into tensors: per-sample loading would dominate an MLP's training time
        return TensorDataset(*image_data.image_dataset(settings["dataset"], "train", limit=limit, seed=seed).tensors())

    return cached_mlp(model_cfg, train_cfg, load, desc, device=device, progress=progress, retrain=retrain)

