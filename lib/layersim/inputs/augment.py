"""The tracing paper's training augmentation (App. B): a random crop of the zero-padded image, a horizontal
flip and a small rotation, per image through torchvision (:class:`Augmentation`) or per batch on any device in
one gather (:func:`transform_batch`, ``Augmentation.batch``), with the same distribution.

(see docs/modules.md, ``layersim.inputs.augment``)
"""

from __future__ import annotations

__all__ = ["Augmentation", "train_augmentation", "transform_batch"]


class Augmentation:
    """The tracing paper's training augmentation (App. B) on normalised images: a random crop of the image
    zero-padded by ``padding`` (default side / 8), a horizontal ``flip`` (p = 0.5) and a rotation uniform in
    ``[-degrees, degrees]``. ``aug(x)`` on one ``[C, H, W]`` (torchvision, global generator); ``aug.batch(x,
    generator)`` on ``[B, C, H, W]`` on any device (:func:`transform_batch`), the same distribution."""

    def __init__(self, image_size: int, flip: bool = True, degrees: float = 15.0, padding: int | None = None):
        from torchvision import transforms

        if image_size < 1 or degrees < 0:
            raise ValueError(f"image_size must be positive and degrees >= 0, got {image_size}, {degrees}")
        self.image_size, self.flip, self.degrees = int(image_size), bool(flip), float(degrees)
        self.padding = max(1, self.image_size // 8) if padding is None else int(padding)
        steps = [transforms.RandomCrop(self.image_size, padding=self.padding)]
        if self.flip:
            steps.append(transforms.RandomHorizontalFlip(0.5))
        steps.append(transforms.RandomRotation(self.degrees))
        self._per_image = transforms.Compose(steps)

    def __call__(self, x):
        return self._per_image(x)

    def batch(self, x, generator=None):
        """The augmentation of a batch ``[B, C, H, W]`` (square images of side ``image_size``) on its
        device, with the shifts, flips and angles drawn from ``generator`` (a ``torch.Generator`` on that
        device; None = the global one)."""
        import torch

        if x.ndim != 4 or x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            raise ValueError(f"expected a batch [B, C, {self.image_size}, {self.image_size}], got {tuple(x.shape)}")
        B, dev = x.shape[0], x.device
        shifts = torch.randint(-self.padding, self.padding + 1, (B, 2), device=dev, generator=generator)
        flips = (torch.rand(B, device=dev, generator=generator) < 0.5) if self.flip else torch.zeros(B, dtype=torch.bool, device=dev)
        angles = (torch.rand(B, device=dev, generator=generator) * 2 - 1) * self.degrees
        return transform_batch(x, shifts, flips, angles)

    def __repr__(self) -> str:
        return f"Augmentation(image_size={self.image_size}, padding={self.padding}, flip={self.flip}, degrees={self.degrees})"


def transform_batch(x, shifts, flips, angles):
    """Shift by ``shifts[b]`` (rows, columns), flip (``flips[b]``) and rotate by ``angles[b]`` degrees every image of
    ``x [B, C, H, W]``, nearest pixel, zeros outside, in one gather: :class:`Augmentation` for a whole batch."""
    import torch

    B, C, H, W = x.shape
    dev = x.device
    rad = torch.deg2rad(angles.to(dev, torch.float32))
    cos, sin = torch.cos(rad)[:, None, None], torch.sin(rad)[:, None, None]
    u = torch.arange(H, device=dev, dtype=torch.float32)[None, :, None] - (H - 1) / 2
    v = torch.arange(W, device=dev, dtype=torch.float32)[None, None, :] - (W - 1) / 2
    # inverse rotation of the output grid (rows u, columns v), then the nearest pixel
    ur = torch.round(cos * u + sin * v + (H - 1) / 2).long()
    vr = torch.round(-sin * u + cos * v + (W - 1) / 2).long()
    inside = (ur >= 0) & (ur < H) & (vr >= 0) & (vr < W)  # the rotation's own fill
    vr = torch.where(flips.to(dev)[:, None, None], W - 1 - vr, vr)
    ur = ur + shifts[:, 0, None, None].to(dev)
    vr = vr + shifts[:, 1, None, None].to(dev)
    inside &= (ur >= 0) & (ur < H) & (vr >= 0) & (vr < W)  # the crop's zero padding
    idx = (ur.clamp(0, H - 1) * W + vr.clamp(0, W - 1)).view(B, 1, H * W).expand(B, C, H * W)
    out = x.reshape(B, C, H * W).gather(2, idx).view(B, C, H, W)
    return out * inside[:, None].to(x.dtype)


def train_augmentation(image_size: int, flip: bool = True) -> Augmentation:
    """The tracing paper's training augmentation (appendix B) for images of side ``image_size``:
    :class:`Augmentation` (crop with 1/8-side padding, horizontal flip, rotation within 15 degrees),
    per image or per batch."""
    return Augmentation(image_size, flip=flip)
