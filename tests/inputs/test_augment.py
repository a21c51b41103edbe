"""Tests of layersim.inputs.augment: the per-image augmentation is a seeded crop, flip and rotation; the batched
transform against plain tensor operations and against torchvision's pipeline to the pixel; the batch path draws
like the per-image one."""

from __future__ import annotations

import numpy as np
import pytest

from layersim.inputs import augment


def test_augmentation_changes_images_but_keeps_shape():
    import torch

    torch.manual_seed(0)
    x = torch.rand(1, 28, 28)
    aug = augment.train_augmentation(28)
    outs = [aug(x) for _ in range(4)]
    assert all(o.shape == x.shape for o in outs)
    assert any(not torch.equal(o, x) for o in outs)


def test_augmentation_per_image_is_a_seeded_crop_flip_and_rotation():
    """``aug(x)`` draws from torch's global generator (the same seed, the same images: committed CPU results do not
    move) and is a crop of the image padded with 1/8 of its side of zeros, a horizontal flip with probability 0.5
    and a rotation within 15 degrees."""
    import torch
    from torchvision.transforms import functional as TF

    x = torch.rand(1, 28, 28) + 0.5  # no zeros inside the image
    torch.manual_seed(5)
    a = [augment.train_augmentation(28)(x) for _ in range(5)]
    torch.manual_seed(5)
    b = [augment.train_augmentation(28)(x) for _ in range(5)]
    assert all(torch.equal(p, q) for p, q in zip(a, b)) and not torch.equal(a[0], a[1])
    # not rotated: every image is one of the 7 x 7 crops of the image padded by 3, or its mirror image
    padded = torch.nn.functional.pad(x, (3, 3, 3, 3))
    crops = {(i, j): padded[:, i:i + 28, j:j + 28] for i in range(7) for j in range(7)}
    candidates = {**{(i, j, False): c for (i, j), c in crops.items()},
                  **{(i, j, True): c.flip(-1) for (i, j), c in crops.items()}}
    torch.manual_seed(0)
    seen = []
    for _ in range(300):
        out = augment.Augmentation(28, degrees=0)(x)
        which = [key for key, c in candidates.items() if torch.equal(out, c)]
        assert len(which) == 1, "not a crop of the image padded by 3 or its mirror image"
        seen += which
    assert len(set(seen)) > 60 and 0.4 < np.mean([flip for *_, flip in seen]) < 0.6
    # rotated only: a white image loses at most the corners that a turn by 15 degrees uncovers
    ones = torch.ones(1, 28, 28)
    lost = [(augment.Augmentation(28, flip=False, padding=0)(ones) == 0).float().mean().item() for _ in range(300)]
    corners = {d: (TF.rotate(ones, d) == 0).float().mean().item() for d in (10, 15)}
    assert corners[10] < max(lost) <= corners[15]


def test_transform_batch_shift_flip_and_rotation_against_plain_tensor_ops():
    import torch

    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6) + 1
    zero = torch.zeros(2)
    same = augment.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool), zero)
    assert torch.equal(same, x)
    # a shift by (1, -2): output (u, v) = input (u + 1, v - 2), zeros where that is outside
    shifted = augment.transform_batch(x, torch.tensor([[1, -2], [0, 0]]), torch.zeros(2, dtype=torch.bool), zero)
    ref = torch.zeros_like(x[0])
    ref[:, :5, 2:] = x[0, :, 1:, :4]
    assert torch.equal(shifted[0], ref) and torch.equal(shifted[1], x[1])
    flipped = augment.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.tensor([True, False]), zero)
    assert torch.equal(flipped[0], x[0].flip(-1)) and torch.equal(flipped[1], x[1])
    # a quarter turn is exact with nearest sampling; +90 and -90 degrees are half a turn apart
    turned = augment.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool),
                                     torch.tensor([90.0, -90.0]))
    assert torch.equal(turned[0], x[0].rot90(1, (1, 2))) or torch.equal(turned[0], x[0].rot90(-1, (1, 2)))
    x1 = x[1].rot90(1, (1, 2)) if torch.equal(turned[0], x[0].rot90(1, (1, 2))) else x[1].rot90(-1, (1, 2))
    assert torch.equal(turned[1].rot90(2, (1, 2)), x1)


def test_batch_augmentation_draws_like_the_per_image_one():
    import torch

    aug = augment.Augmentation(28)
    x = torch.rand(4000, 1, 28, 28) + 0.5  # no zeros inside the image
    g = torch.Generator().manual_seed(0)
    out = aug.batch(x, generator=g)
    assert out.shape == x.shape
    again = aug.batch(x, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    # zero (padding / fill) fraction of the batch path and of the per-image path agree
    torch.manual_seed(0)
    per_image = torch.stack([aug(x[i]) for i in range(1000)])
    z_batch, z_image = (out == 0).float().mean().item(), (per_image == 0).float().mean().item()
    assert abs(z_batch - z_image) < 0.01 and z_batch > 0.02
    # flips: about half the images of a left-right asymmetric batch come out mirrored
    ramp = torch.arange(28.0).expand(2000, 1, 28, 28) + 1
    plain = augment.Augmentation(28, degrees=0, padding=0).batch(ramp, generator=torch.Generator().manual_seed(1))
    mirrored = (plain[:, 0, 14, 0] > plain[:, 0, 14, -1]).float().mean().item()
    assert 0.45 < mirrored < 0.55
    assert not augment.Augmentation(28, flip=False, degrees=0, padding=0).batch(ramp).ne(ramp).any()
    with pytest.raises(ValueError, match="expected a batch"):
        aug.batch(torch.rand(2, 1, 32, 32))


@pytest.mark.parametrize("i,j,flip,angle", [(1, 5, False, 10.0), (0, 0, True, -12.0), (6, 2, True, 7.3), (3, 3, False, 0.0)])
def test_transform_batch_equals_torchvision_crop_flip_rotate(i, j, flip, angle):
    """For given draws, the batched transform is torchvision's pipeline to the pixel: a crop at (i, j)
    of the image padded by 3, a horizontal flip, a rotation by `angle` (nearest, zero fill)."""
    import torch
    from torchvision.transforms import functional as TF

    img = torch.rand(2, 28, 28) + 0.5
    ref = TF.pad(img, [3, 3, 3, 3])[:, i:i + 28, j:j + 28]
    if flip:
        ref = TF.hflip(ref)
    ref = TF.rotate(ref, angle)
    got = augment.transform_batch(img[None], torch.tensor([[i - 3, j - 3]]), torch.tensor([flip]), torch.tensor([angle]))[0]
    assert torch.equal(got, ref)
