"""Distribution shift for the transfer experiments (tracing paper, App. B.4, Figure 17; alignment paper, Section 7.3).

The tracing paper tests a CIFAR-10 model on CIFAR-10.2 (Lu et al. 2020), read at paper scale. Offline, the default
scale corrupts the held-out images mildly, as CIFAR-10-C does (Hendrycks & Dietterich 2019): Gaussian noise,
blur, reduced contrast, small translations. Functions take images in [0, 1], ``float [N, C, H, W]``, and return
clipped ones; random corruptions take a ``seed``. :func:`shifted_inputs` builds a normalised shifted test set;
:func:`domain_shift` makes the alignment paper's offline domains (see docs/modules.md, ``layersim.inputs.shift``)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from layersim.inputs import image_data

__all__ = [
    "CORRUPTIONS",
    "DOMAINS",
    "contrast",
    "corrupt",
    "domain_shift",
    "gaussian_blur",
    "gaussian_noise",
    "shifted_inputs",
    "translate",
]


def _check_batch(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim != 4:
        raise ValueError(f"expected a batch of images float [N, C, H, W], got "
                         f"{type(x).__name__} with shape {tuple(getattr(x, 'shape', ()))}")
    if not x.is_floating_point():
        raise ValueError(f"images must be floats in [0, 1], got dtype {x.dtype}")
    return x


def _check_nonnegative(value: float, name: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return float(value)


def gaussian_noise(x: torch.Tensor, sigma: float, seed: int = 0) -> torch.Tensor:
    """``clip(x + sigma * n)``, ``n ~ N(0, 1)`` i.i.d. per pixel from a ``seed``-ed generator (CIFAR-10-C
    "gaussian noise"); ``sigma`` in [0, 1] pixel units."""
    x = _check_batch(x)
    sigma = _check_nonnegative(sigma, "sigma")
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    return (x + sigma * noise.to(x.device)).clamp_(0.0, 1.0)


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Blur with a Gaussian kernel of standard deviation ``sigma`` pixels (kernel side
    ``2 * ceil(3 sigma) + 1``, reflected borders); ``sigma = 0`` returns a copy."""
    x = _check_batch(x)
    sigma = _check_nonnegative(sigma, "sigma")
    if sigma == 0:
        return x.clone()
    from torchvision.transforms.functional import gaussian_blur as tv_blur

    side = 2 * math.ceil(3 * sigma) + 1
    side = min(side, 2 * ((min(x.shape[-2:]) - 1) // 2) + 1)  # torchvision: odd and <= the image
    return tv_blur(x, [side, side], [sigma, sigma]).clamp_(0.0, 1.0)


def contrast(x: torch.Tensor, factor: float) -> torch.Tensor:
    """``clip(m + factor * (x - m))`` with ``m`` the mean of each image (over channels and
    pixels): ``factor < 1`` lowers the contrast, 1 leaves the image unchanged."""
    x = _check_batch(x)
    factor = _check_nonnegative(factor, "factor")
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (mean + factor * (x - mean)).clamp_(0.0, 1.0)


def translate(x: torch.Tensor, max_shift: int, seed: int = 0) -> torch.Tensor:
    """Shift each image by an integer offset drawn uniformly from ``[-max_shift, max_shift]``
    per axis (``seed``-ed), filling the uncovered border with 0 (black)."""
    x = _check_batch(x)
    if int(max_shift) != max_shift or max_shift < 0:
        raise ValueError(f"max_shift must be a whole number of pixels >= 0, got {max_shift}")
    max_shift = int(max_shift)
    n, _, h, w = x.shape
    if max_shift >= min(h, w):
        raise ValueError(f"max_shift {max_shift} must be smaller than the image side {min(h, w)}")
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-max_shift, max_shift + 1, (n, 2), generator=gen)
    out = torch.zeros_like(x)
    for i, (dy, dx) in enumerate(offsets.tolist()):
        src_y, dst_y = slice(max(0, -dy), h - max(0, dy)), slice(max(0, dy), h - max(0, -dy))
        src_x, dst_x = slice(max(0, -dx), w - max(0, dx)), slice(max(0, dx), w - max(0, -dx))
        out[i, :, dst_y, dst_x] = x[i, :, src_y, src_x]
    return out


#: corruption name -> (function, name of its severity argument, takes a seed)
CORRUPTIONS = {
    "gaussian_noise": (gaussian_noise, "sigma", True),
    "gaussian_blur": (gaussian_blur, "sigma", False),
    "contrast": (contrast, "factor", False),
    "translate": (translate, "max_shift", True),
}


def corrupt(x: torch.Tensor, kind: str, severity: float, seed: int = 0) -> torch.Tensor:
    """Apply the corruption ``kind`` (a key of :data:`CORRUPTIONS`) with its ``severity``
    (noise / blur sigma, contrast factor, or maximum translation in pixels)."""
    if kind not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {kind!r}; choose one of {sorted(CORRUPTIONS)}")
    fn, arg, seeded = CORRUPTIONS[kind]
    kwargs = {arg: severity, **({"seed": seed} if seeded else {})}
    return fn(x, **kwargs)


#: the alignment paper's a10 domains (:func:`domain_shift`)
DOMAINS = ("clean", "lowres", "inverted")


def domain_shift(X: torch.Tensor, domain: str, seed: int = 0, noise: float = 0.1) -> torch.Tensor:
    """a10's offline stand-in for Office-31's domains on ``[N, C, H, W]`` pixels in [0, 1]: ``"clean"`` (unchanged),
    ``"lowres"`` (2x2 average, upsampled, plus Gaussian noise ``noise`` from ``seed``) or ``"inverted"``
    (``1 - x``)."""
    X = torch.as_tensor(X, dtype=torch.float32)
    if X.ndim != 4:
        raise ValueError(f"images must be [N, C, H, W], got shape {tuple(X.shape)}")
    if domain == "clean":
        return X.clone()
    if domain == "lowres":
        small = F.avg_pool2d(X, 2)
        up = F.interpolate(small, size=X.shape[-2:], mode="bilinear", align_corners=False)

        return gaussian_noise(up, noise, seed=seed)
    if domain == "inverted":
        return 1.0 - X
    raise ValueError(f"unknown domain {domain!r}; use one of {DOMAINS}")


def check_spec(spec: Mapping) -> dict:
    """``spec`` as a dict if :func:`shifted_inputs` understands it, else ``ValueError``: ``{}``,
    ``{"dataset": name}`` or ``{"corruption": kind, "severity": s}`` (``kind`` in :data:`CORRUPTIONS`, ``s >= 0``)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"a shift is a dict, got {type(spec).__name__}")
    spec = dict(spec)
    unknown = set(spec) - {"dataset", "corruption", "severity"}
    if unknown or ("dataset" in spec and ("corruption" in spec or "severity" in spec)):
        raise ValueError(f"a shift is {{'dataset': name}} or {{'corruption': kind, 'severity': s}}, got {spec}")
    if "dataset" in spec and not (isinstance(spec["dataset"], str) and spec["dataset"]):
        raise ValueError(f"the data set of a shift is a name, got {spec['dataset']!r}")
    if "corruption" in spec or "severity" in spec:
        kind, severity = spec.get("corruption"), spec.get("severity")
        if kind not in CORRUPTIONS:
            raise ValueError(f"unknown corruption {kind!r}; choose one of {sorted(CORRUPTIONS)}")
        integral = kind == "translate"
        if (isinstance(severity, bool) or not isinstance(severity, int if integral else (int, float))
                or not math.isfinite(severity) or severity < 0):
            raise ValueError(f"corruption {kind!r} needs a 'severity' >= 0{' in whole pixels' if integral else ''}, "
                             f"got {severity!r}")
    return spec


def shifted_sets(source: str, specs: Mapping[str, Mapping], limit: int | None = None, seed: int = 0
                 ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Shifted test sets for a model trained on image data set ``source``: label -> ``(x, y)``, per spec
    ``{"dataset": name}`` (another test split, same classes), ``{"corruption": kind, "severity": s}`` (the
    source's, :func:`corrupt`-ed) or ``{}`` (clean). ``limit``: at most that many, a stratified ``seed``-ed subset
    (a smaller test split whole: CIFAR-10.2's has 2,000 images). ``x`` float ``[N,C,H,W]`` normalised like the
    source, ``y`` int64 ``[N]``."""
    specs = {label: check_spec(spec) for label, spec in specs.items()}
    loaded: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def test_split(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if name not in loaded:
            loaded[name] = image_data.image_dataset(name, "test", limit=limit, seed=seed, normalize=False,
                                                    at_most=True).tensors()
        return loaded[name]

    out = {}
    for label, spec in specs.items():
        images, labels = test_split(spec.get("dataset", source))
        if "corruption" in spec:
            images = corrupt(images, spec["corruption"], spec["severity"], seed=seed)
        out[label] = image_data.as_model_input(images, source), labels
    return out


def shifted_inputs(source: str, spec: Mapping, limit: int | None = None, seed: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """One shifted test set (:func:`shifted_sets` with a single ``spec``)."""
    return shifted_sets(source, {"": spec}, limit=limit, seed=seed)[""]
