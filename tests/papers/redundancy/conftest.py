"""Fixtures of the redundancy paper's tests: a timm ViT with a span of blocks skipped or replaced by its
least-squares linear map, built without layersim (an independent reference for span models)."""

import copy

import numpy as np
import pytest
import torch
from torch import nn


class _Map(nn.Module):
    """``h -> h W`` on every token."""

    def __init__(self, W):
        super().__init__()
        self.W = torch.as_tensor(W, dtype=torch.float32)

    def forward(self, h):
        return h @ self.W


def _least_squares_map(model, batches, first, last):
    """The ``[d, d]`` map, no intercept, least squares over every token of ``batches``, from the input of block
    ``first`` to the output of block ``last`` (1-based) of the timm ViT ``model``."""
    xs, ys = [], []
    hooks = [model.blocks[first - 1].register_forward_pre_hook(lambda m, args: xs.append(args[0].detach())),
             model.blocks[last - 1].register_forward_hook(lambda m, args, out: ys.append(out.detach()))]
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in hooks:
            h.remove()
    X = torch.cat(xs).reshape(-1, xs[0].shape[-1]).double().numpy()
    Y = torch.cat(ys).reshape(-1, ys[0].shape[-1]).double().numpy()
    return np.linalg.lstsq(X, Y, rcond=None)[0]


def _spliced(model, first, last, fit=None):
    spliced = copy.deepcopy(model).eval()
    blocks = list(spliced.blocks)
    middle = [] if fit is None else [_Map(_least_squares_map(model, fit, first, last))]
    spliced.blocks = nn.Sequential(*blocks[:first - 1], *middle, *blocks[last:])
    return spliced


@pytest.fixture
def spliced_vit():
    """``spliced_vit(model, first, last, fit=None)``: a copy of the timm ViT ``model`` with its blocks
    ``first..last`` (1-based, inclusive) removed (``fit=None``) or replaced by the least-squares linear map (numpy,
    no intercept) from every token of block ``first``'s input to block ``last``'s output on the batches ``fit``."""
    return _spliced


def final_cls(model, batches):
    """The [CLS] token after the final norm (what a linear probe reads), float64 ``[N, d]``."""
    with torch.no_grad():
        return torch.cat([model.forward_features(x)[:, 0] for x in batches]).double().numpy()


@pytest.fixture
def final_representation():
    """``final_representation(model, batches)``: the timm ViT's [CLS] token after the final norm, float64."""
    return final_cls
