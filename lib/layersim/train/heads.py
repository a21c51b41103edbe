"""Classifier heads trained on frozen features by minibatch Adam (:func:`layersim.train.training.train_epochs`):
:func:`train_linear_head`, the redundancy paper's probe (§4.3), and :func:`train_head`, any head from its current
weights (the clusters paper's TUNED heads). Probes fitted to convergence are :mod:`layersim.measures.probe`'s."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from layersim.measures import arrays
from layersim.train import training

__all__ = ["Standardize", "train_head", "train_linear_head"]


def train_linear_head(features, labels, epochs: int = 5, lr: float = 0.01, batch_size: int = 256, seed: int = 0,
                      num_classes: int | None = None) -> nn.Linear:
    """A linear classifier on frozen ``features`` [N, d], trained by minibatch Adam on the mean cross-entropy for a
    fixed schedule, not to convergence (the redundancy paper's probe, §4.3: 5 epochs, batch 256, its code's lr
    0.01). Float32, CPU, deterministic given ``seed``; ``num_classes`` defaults to ``labels.max() + 1``."""
    X, y = arrays.labelled_rows(features, labels, "train_linear_head")
    K = int(y.max()) + 1 if num_classes is None else int(num_classes)
    if y.min() < 0 or y.max() >= K:
        raise ValueError(f"labels must be integers in 0..{K - 1}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = nn.Linear(X.shape[1], K)
    return train_head(head, X, y, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)


class Standardize(nn.Module):
    """``(h - mean) / scale`` with a fixed mean vector and one global scale; before a linear first layer it is a
    reparameterisation, not a new model."""

    def __init__(self, mean: np.ndarray, scale: float):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.scale = float(scale)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h - self.mean.to(h.dtype)) / self.scale


def train_head(head: nn.Module, features, labels, epochs: int = 5, lr: float = 0.01, batch_size: int = 256,
               seed: int = 0, loss: str = "ce", standardize: bool = False, choices: int | None = None) -> nn.Module:
    """Train ``head`` (``[N, d] -> [N, K]``) in place on frozen ``features`` by minibatch Adam, deterministic given
    ``seed``; returns it in eval mode.

    ``loss``: ``"ce"`` or ``"mse"`` (output 0). ``standardize``: return ``nn.Sequential(Standardize(...), head)``.
    ``choices``: ``C`` rows per example, ``labels [N]`` naming the right one. ``ValueError`` for bad inputs (see
    docs/modules.md, `layersim.train.heads`).
    """
    if choices is not None:
        if loss != "ce" or choices < 2 or np.asarray(features).shape[0] != len(labels) * choices:
            raise ValueError(f"choices={choices}: need loss='ce' and features with {choices} rows per label "
                             f"({len(labels)} labels, {np.asarray(features).shape[0]} rows)")
    if standardize:
        mean, scale = arrays.standardizer(np.asarray(features, dtype=np.float64))
        head = nn.Sequential(Standardize(mean, scale), head)
    if loss not in ("ce", "mse"):
        raise ValueError(f"loss must be 'ce' or 'mse', got {loss!r}")
    if choices is not None:
        X = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels)
        if not np.isfinite(X).all() or y.min() < 0 or y.max() >= choices:
            raise ValueError(f"train_head: features must be finite and labels in 0..{choices - 1}")
        yt = torch.from_numpy(y.astype(np.int64))
    elif loss == "ce":
        X, y = arrays.labelled_rows(features, labels, "train_head")
        yt = torch.from_numpy(y.astype(np.int64))
    else:
        X = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        if X.ndim != 2 or y.shape != (len(X),) or not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError(f"train_head: need finite features [N, d] and targets [N], got {X.shape}, {y.shape}")
        yt = torch.from_numpy(y.astype(np.float32))
    if epochs < 1 or batch_size < 1 or not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"epochs and batch_size must be >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")
    Xt = torch.from_numpy(X.astype(np.float32))
    if choices is not None:
        Xt = Xt.view(len(yt), choices, -1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        head = head.float().cpu()
        opt = torch.optim.Adam(head.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)

        def batches(epoch: int):
            return ((Xt[idx], yt[idx]) for idx in torch.randperm(len(Xt), generator=gen).split(batch_size))

        def loss_of(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            if choices is not None:  # one logit per ending, softmax over an example's endings
                return nn.functional.cross_entropy(head(x.reshape(-1, x.shape[-1])).view(len(target), choices), target)
            out = head(x)
            return nn.functional.cross_entropy(out, target) if loss == "ce" else nn.functional.mse_loss(out[:, 0], target)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # dropout
            training.train_epochs(head, opt, epochs, batches, loss_of, what="training a head")
    finally:
        torch.set_num_threads(threads)
    return head
