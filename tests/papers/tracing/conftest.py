"""Fixtures shared by the tests of layersim.papers.tracing: the tiny test ViT with images, and its layer-wise
logits read block by block."""

import pytest
import torch


def _shared_logits(model, x):
    """[L, N, K]: the shared classifier (final norm, head) on the class token after every block, block by block."""
    feats, h = [], model.norm_pre(model._pos_embed(model.patch_embed(x)))
    for block in model.blocks:
        h = block(h)
        feats.append(model.forward_head(model.norm(h)))
    return torch.stack(feats).numpy()


@pytest.fixture
def shared_logits():
    """``shared_logits(model, x)``: a timm ViT's layer-wise logits ``[L, N, K]`` computed here, block by block."""
    return _shared_logits


@pytest.fixture
def vit_images():
    """The tiny test ViT (3 blocks, 28x28 grey, 10 classes) and 40 labelled images."""
    from builders import tiny_vit

    g = torch.Generator().manual_seed(3)
    return tiny_vit(perturb=True), (torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g))
