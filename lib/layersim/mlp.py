"""Deep MLPs with and without residual connections (tracing paper, appendix B.2, Figure 12).

The tracing paper argues that COS works as a layer-wise similarity in transformers because
the residual update ``h^(l+1) = h^(l) + f(h^(l))`` (eq. 1) leaves little rotation between
layers; to test it, appendix B.2 trains 9-layer MLPs on MNIST with and without residual
connections and compares the layer-wise accuracy of the last-layer classifier with COS and
CKA to the last layer. This module builds those MLPs, reads every hidden layer and applies
the last-layer classifier to each of them.

Architecture (:class:`MLP`, ``L = depth`` hidden layers, all of width ``d``; ``phi`` = ReLU):

- layer 1 (the input projection, the same in both variants): ``h^(1) = phi(W_1 x + b_1)``
  with ``x`` the flattened image;
- layers ``l = 2..L``: plain ``h^(l) = phi(W_l h^(l-1) + b_l)``; residual
  ``h^(l) = h^(l-1) + phi(W_l h^(l-1) + b_l)`` (eq. 1 with ``f = phi o W_l``);
- classifier ``logits = W norm(h^(L)) + b`` with ``norm`` the optional final LayerNorm
  (``final_norm=False`` by default: the paper's MLPs are described without one, so the
  readout is the plain linear head; with ``final_norm=True`` the readout recomputes the
  LayerNorm on every layer, as :func:`layersim.readout.layer_logits` does for transformers).

So both variants have exactly the same parameters and the same first layer; the only
difference is the skip connection on layers 2..L. Choices made here (the paper does not
give them): the input projection is the first of the ``L`` hidden layers (there is no
separate linear embedding), the residual branch is a single linear layer with a ReLU (as a
plain layer), no normalisation inside the network.

Layer indices: ``hidden_states`` returns ``[L, N, d]`` with entry ``i`` the output of hidden
layer ``i + 1`` (there is no "embedding" entry: the input is not of width ``d``), so
``layer_logits`` returns ``[L, N, K]`` and :func:`layersim.readout.layer_accuracy` of it is
the layer-wise accuracy (eq. 2) of layers ``1..L``.

Training uses :func:`layersim.training.train_classifier`; :func:`cached_mlp` caches trained
models under ``<cache>/checkpoints/mlp-<key>/`` with :func:`layersim.training.config_key`
and the same atomic save as :func:`layersim.training.cached_vit`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from . import training
from .models import evaluating, resolve_device

__all__ = [
    "MLP",
    "MLPConfig",
    "build_mlp",
    "cached_mlp",
    "configs_from",
    "hidden_states",
    "layer_logits",
    "mlp_from_settings",
]


@dataclass(frozen=True)
class MLPConfig:
    """A ``depth``-hidden-layer ReLU MLP of constant ``width`` on flattened images.

    ``residual``: skip connections on hidden layers 2..depth; ``final_norm``: a LayerNorm
    between the last hidden layer and the linear classifier.
    """

    in_features: int = 784
    num_classes: int = 10
    width: int = 256
    depth: int = 9
    residual: bool = False
    final_norm: bool = False

    def __post_init__(self):
        if self.depth < 1 or self.width < 1 or self.in_features < 1 or self.num_classes < 2:
            raise ValueError(f"depth, width and in_features must be positive and num_classes >= 2, got {self}")


class MLP(nn.Module):
    """The MLP of :class:`MLPConfig` (see the module docstring for the equations).

    ``layers[i]`` is the ``Linear`` of hidden layer ``i + 1``; ``norm`` is the final norm
    (``nn.Identity`` without one); ``head`` the linear classifier. ``forward`` returns logits.
    """

    def __init__(self, cfg: MLPConfig):
        super().__init__()
        self.cfg = cfg
        dims = [cfg.in_features] + [cfg.width] * cfg.depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = nn.ReLU()
        self.norm = nn.LayerNorm(cfg.width) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.width, cfg.num_classes)

    @property
    def residual(self) -> bool:
        return self.cfg.residual

    def hidden(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every hidden layer's output ``[h^(1), ..., h^(L)]``, each ``[B, width]``."""
        h = x.flatten(1)
        out = []
        for i, layer in enumerate(self.layers):
            z = self.act(layer(h))
            h = h + z if (self.cfg.residual and i > 0) else z
            out.append(h)
        return out

    def classify(self, h: torch.Tensor) -> torch.Tensor:
        """The last-layer classifier (final norm, then head) on features ``[B, width]``."""
        return self.head(self.norm(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classify(self.hidden(x)[-1])


def build_mlp(cfg: MLPConfig, seed: int | None = 0) -> MLP:
    """A randomly initialised :class:`MLP` (PyTorch's default init) drawn from ``seed``
    without touching the global random state; ``seed=None`` uses the global state."""
    if seed is None:
        return MLP(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MLP(cfg)


def _param_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def hidden_states(model: MLP, data: Dataset | DataLoader | torch.Tensor, batch_size: int = 512,
                  device: str | torch.device | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Every hidden layer's representation: (float32 ``[L, N, width]``, labels ``[N]`` or None).

    ``data``: a Dataset of ``(image, label)``, a DataLoader of such batches, or a tensor of
    images (then labels are None). Runs in eval mode under ``no_grad`` on ``device`` (default:
    where the model's parameters are; the model is moved there).
    """
    dev = _param_device(model) if device is None else resolve_device(device)
    model.to(dev)
    if isinstance(data, torch.Tensor):
        batches = [(data[s:s + batch_size], None) for s in range(0, len(data), batch_size)]
    elif isinstance(data, DataLoader):
        batches = data
    else:
        batches = DataLoader(data, batch_size=batch_size, shuffle=False)
    hs, ys = [], []
    with evaluating(model):
        for x, y in batches:
            hs.append(torch.stack(model.hidden(x.to(dev))).float().cpu().numpy())
            if y is not None:
                ys.append(np.asarray(y))
    return np.concatenate(hs, axis=1), (np.concatenate(ys) if ys else None)


def layer_logits(model: MLP, hidden: np.ndarray | torch.Tensor, apply_final_norm: bool = True,
                 chunk: int = 4096) -> np.ndarray:
    """Float32 logits ``[L, N, K]`` of the last-layer classifier applied to every hidden layer.

    ``W norm(h^(l)) + b`` (tracing section 2, eq. 2's ``g``); the final norm (if the model has
    one and ``apply_final_norm``) is recomputed on each layer's own features, as in
    :func:`layersim.readout.layer_logits`. The last entry equals the model's logits.
    """
    hidden = hidden if isinstance(hidden, torch.Tensor) else torch.from_numpy(np.asarray(hidden))
    if hidden.ndim != 3 or hidden.shape[-1] != model.cfg.width:
        raise ValueError(f"hidden must be [L, N, {model.cfg.width}], got {tuple(hidden.shape)}")
    dev = _param_device(model)
    norm = model.norm if apply_final_norm else nn.Identity()
    out = np.empty((hidden.shape[0], hidden.shape[1], model.cfg.num_classes), np.float32)
    with evaluating(model):
        for j in range(hidden.shape[0]):
            for s in range(0, hidden.shape[1], chunk):
                x = hidden[j, s:s + chunk].to(device=dev, dtype=torch.float32)
                out[j, s:s + chunk] = model.head(norm(x)).float().cpu().numpy()
    return out


# ----------------------------------------------------------------------------- training / cache


def cached_mlp(model_cfg: MLPConfig, train_cfg: training.TrainConfig, train_set, data_desc: dict,
               device: str | torch.device = "auto", progress: bool = True,
               retrain: bool = False) -> tuple[MLP, dict]:
    """Build and train an :class:`MLP` (initialised from ``train_cfg.seed``), or load it from
    the cache (``<cache>/checkpoints/mlp-<key>/``); see :func:`layersim.training.cached_model`."""
    if train_cfg.objective != "ce":
        raise ValueError(f"the MLP is trained with the standard 'ce' objective, got {train_cfg.objective!r}")
    return training.cached_model("mlp", lambda: build_mlp(model_cfg, seed=train_cfg.seed), model_cfg, train_cfg,
                        train_set, data_desc, device=device, progress=progress, retrain=retrain)


def configs_from(settings: dict, data_info: dict, seed: int = 0) -> tuple[MLPConfig, training.TrainConfig]:
    """Model and training configs from a flat settings dict (see ``layersim.presets.TRACING_MLP``).

    The input size and class count come from the data set (``data.dataset_info``); keys that
    belong to neither config are ignored.
    """
    from_data = {"in_features": data_info["channels"] * data_info["image_size"] ** 2,
                 "num_classes": data_info["classes"]}
    mlp_keys = {f.name for f in dataclasses.fields(MLPConfig)} - set(from_data)
    train_keys = {f.name for f in dataclasses.fields(training.TrainConfig)} - {"seed"}
    model_cfg = MLPConfig(**from_data, **{k: v for k, v in settings.items() if k in mlp_keys})
    train = {k: v for k, v in settings.items() if k in train_keys}
    if "milestones" in train:
        train["milestones"] = tuple(train["milestones"])
    return model_cfg, training.TrainConfig(seed=seed, **train)


def mlp_from_settings(settings: dict, residual: bool | None = None, seed: int = 0,
                      device: str | torch.device = "auto", progress: bool = True,
                      retrain: bool = False) -> tuple[MLP, dict]:
    """The MLP that ``settings`` describe (``residual`` overrides ``settings["residual"]``),
    trained on its data set's training split (``n_train`` images, 0 = all), or cached.

    The training images are loaded (and stacked into a ``TensorDataset``) only when no cached
    checkpoint exists.
    """
    from . import data

    if residual is not None:
        settings = {**settings, "residual": bool(residual)}
    info = data.dataset_info(settings["dataset"])
    model_cfg, train_cfg = configs_from(settings, info, seed=seed)
    limit = settings.get("n_train") or None
    desc = {"name": settings["dataset"], "split": "train", "limit": limit, "seed": seed, "augment": False}

    def load():  # stacked once into tensors: per-sample loading would dominate an MLP's training time
        return TensorDataset(*data.image_dataset(settings["dataset"], "train", limit=limit, seed=seed).tensors())

    return cached_mlp(model_cfg, train_cfg, load, desc, device=device, progress=progress, retrain=retrain)

