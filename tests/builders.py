"""Tiny models and data shared by the unit tests (import with ``from builders import ...``)."""

import torch
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import TensorDataset

#: blocks of the tiny test ViT
DEPTH = 3


def tiny_vit(perturb: bool = False, **kw) -> VisionTransformer:
    """A seeded 3-block ViT for 28x28 grey images (eval mode). ``perturb`` adds noise to every
    1-D parameter, so that biases and norm affines are not the zeros / ones of a fresh init."""
    torch.manual_seed(0)
    args = dict(img_size=28, patch_size=7, in_chans=1, depth=DEPTH, embed_dim=32, num_heads=2,
                num_classes=10, global_pool="token")
    args.update(kw)
    model = VisionTransformer(**args).eval()
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 1:
                    p.add_(0.1 * torch.randn_like(p))
    return model


def toy_data(n: int = 64, seed: int = 0) -> TensorDataset:
    """Two classes of 8x8 images that differ in the brightness of the left half."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    x[:, :, :, :4] += (2 * y - 1).float()[:, None, None, None]
    return TensorDataset(x, y)
