"""The alignment paper's small trainable networks (Sections 3, 4.2 and 7.2), trained on arrays on the CPU:
:func:`make_mlp` (a :class:`layersim.train.mlp.MLP`), :class:`RBFNet` (trainable centres and widths),
:func:`train_mlp` (the paper's losses and optimisers) and :func:`hidden_representations`. Their alignment score is
:mod:`layersim.measures.alignment`'s."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from layersim.nets import adapters, models
from layersim.train import mlp, training


class RBFLayer(nn.Module):
    """``k`` Gaussian units ``exp(-||x - c_j||^2 / (2 b_j^2))`` with trainable centres ``c_j`` and
    widths ``b_j`` (stored as ``log b_j``)."""

    def __init__(self, centers, width: float = 1.0):
        super().__init__()
        c = torch.as_tensor(np.asarray(centers), dtype=torch.float32)
        self.centers = nn.Parameter(c.clone())
        self.log_width = nn.Parameter(torch.full((c.shape[0],), float(np.log(width))))

    def forward(self, x):
        d2 = torch.cdist(x.flatten(1), self.centers).pow(2)
        return torch.exp(-d2 / (2.0 * torch.exp(2.0 * self.log_width)))


@adapters.register_model(
    "layers", head="head", uniform=False, name="rbf_net",
    why="its only block maps inputs to Gaussian units of another width",
    models="the alignment paper's two-layer RBF network (`layersim.train.small_nets.RBFNet`): one block, its Gaussian "
           "layer")
class RBFNet(nn.Module):
    """Two-layer RBF network (Section 3): an :class:`RBFLayer` (``layers[0]``, the representation, read by the
    ``rbf_net`` adapter), then a linear output."""

    def __init__(self, centers, width: float = 1.0, out_dim: int = 1):
        super().__init__()
        self.layers = nn.ModuleList([RBFLayer(centers, width)])
        self.head = nn.Linear(self.layers[0].centers.shape[0], out_dim)

    def forward(self, x):
        return self.head(self.layers[0](x))


def make_mlp(in_dim: int, hidden: Sequence[int], out_dim: int = 1, activation: str = "relu",
             hidden_bias: bool = True, seed: int = 0):
    """The paper's network ``in -> hidden[0] -> ... -> hidden[-1] -> out``, an :class:`~layersim.train.mlp.MLP`
    whose initial weights depend only on ``seed``; ``hidden_bias=False`` drops the hidden biases (the authors' demo
    MLP). ``ValueError`` without a hidden layer."""
    hidden = [int(w) for w in hidden]
    if not hidden:
        raise ValueError("make_mlp needs at least one hidden layer")
    cfg = mlp.MLPConfig(in_features=int(in_dim), num_classes=int(out_dim), width=hidden[-1], depth=len(hidden),
                        activation=activation, bias=hidden_bias, widths=tuple(hidden))
    return mlp.build_mlp(cfg, seed=seed)


def train_mlp(model, X, y, loss: str = "mse", epochs: int = 10, batch_size: int = 64, lr: float = 1e-3,
              optimizer: str = "adam", seed: int = 0, momentum: float = 0.9) -> list[float]:
    """Train ``model`` (``[b, m] -> [b, k]``) in place on arrays ``X [n, m]``, ``y [n]`` or ``[n, k]``, on the CPU;
    return each epoch's mean training loss.

    ``loss``: ``"mse"`` or ``"bce"`` (logits vs 0/1 labels; +-1 labels are mapped). ``optimizer``: ``"adam"``,
    ``"sgd"``, ``"momentum"``, ``"rmsprop"``. Batches shuffled from ``seed``.
    """

    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32).reshape(len(X), -1))
    yv = np.asarray(y, dtype=np.float32)
    yt = torch.as_tensor(yv.reshape(len(yv), -1))
    if loss == "bce" and yt.min() < 0:
        yt = (yt + 1) / 2
    losses = {"mse": F.mse_loss, "bce": F.binary_cross_entropy_with_logits}
    if loss not in losses:
        raise ValueError(f"loss must be 'mse' or 'bce', got {loss!r}")
    opts = {"adam": lambda p: torch.optim.Adam(p, lr=lr), "sgd": lambda p: torch.optim.SGD(p, lr=lr),
            "momentum": lambda p: torch.optim.SGD(p, lr=lr, momentum=momentum),
            "rmsprop": lambda p: torch.optim.RMSprop(p, lr=lr)}
    if optimizer not in opts:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {sorted(opts)}")
    opt = opts[optimizer](model.parameters())
    gen = torch.Generator().manual_seed(seed)

    def batches(epoch: int):
        return ((Xt[idx], yt[idx]) for idx in torch.randperm(len(Xt), generator=gen).split(batch_size))

    history = training.train_epochs(model, opt, epochs, batches, lambda x, t: losses[loss](model(x), t))
    return [entry["loss"] for entry in history]


def hidden_representations(model, X, batch_size: int = 4096) -> list[np.ndarray]:
    """Every hidden layer of a :func:`make_mlp` network or :class:`RBFNet` on ``X``: float64 ``[n, width]`` each,
    input side first, without the input."""
    X = np.asarray(X, dtype=np.float32).reshape(len(X), -1)
    L = models.n_layers(model)
    return models.layer_outputs(model, X, layers=range(1, L + 1), batch_size=batch_size, device="cpu")
