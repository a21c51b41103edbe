"""Image data sets as numpy arrays and torch Datasets, offline first.

- offline, via :mod:`layersim.inputs.fetch`: :func:`load_fashion_mnist` (idx files, :func:`read_idx`),
  :func:`load_digits`;
- paper scale (the network once, then the cache): :func:`load_torchvision`, :func:`load_cifar102`,
  :func:`load_imagenet`;
- the uniform entry :func:`image_dataset` (normalised float images, deterministic ``limit`` subsets,
  :class:`ImageDataset`), sizes known without loading (:func:`dataset_info`, :func:`split_size`), and images
  prepared for a model trained on another set (:func:`as_model_input`).

(see docs/modules.md, ``layersim.inputs.image_data``)
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from layersim.inputs import assets, cache, fetch
from layersim.inputs.augment import Augmentation, train_augmentation
from layersim.inputs.subsets import cache_file, check_count, check_split, subset_indices

__all__ = [
    "read_idx",
    "load_fashion_mnist",
    "load_digits",
    "FASHION_MNIST_CLASSES",
    "IMAGE_DATASETS",
    "load_torchvision",
    "load_imagenet",
    "ImageDataset",
    "image_dataset",
]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                   "truck")
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")

# Per-channel mean/std of the training images scaled to [0, 1] (ImageNet: the usual constants).
_STATS = {
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "digits": ((0.3053,), (0.3760,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    # CIFAR-10.2 is read by CIFAR-10 models: the source's statistics, not its own
    "cifar10.2": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
IMAGE_DATASETS = tuple(_STATS)
# (number of classes, image side in pixels as the models see it)
_SHAPES = {"fashion-mnist": (10, 28), "digits": (10, 8), "mnist": (10, 28), "cifar10": (10, 32),
           "cifar10.2": (10, 32), "cifar100": (100, 32), "imagenet": (1000, 224)}
#: images per split of the data sets whose sizes are fixed (checked before anything loads: :func:`split_size`)
_SPLITS = {"fashion-mnist": {"train": 60000, "test": 10000}, "mnist": {"train": 60000, "test": 10000},
           "digits": {"train": 1437, "test": 360, "all": 1797}, "cifar10": {"train": 50000, "test": 10000},
           "cifar100": {"train": 50000, "test": 10000}, "cifar10.2": {"train": 10000, "test": 2000}}

# ----- idx files ---------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Parse an idx file (MNIST format; gzipped if the name ends in .gz) into a numpy array. ``ValueError`` for
    a malformed or truncated file, ``OSError`` for one that cannot be opened."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # a damaged or truncated .gz
        raise ValueError(f"{path}: not a readable gzip file ({type(err).__name__}: {err})") from err
    return parse_idx(raw, str(path))


def parse_idx(raw: bytes, where: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of an idx file (see :func:`read_idx`)."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{where}: not an idx file (bad magic {raw[:4]!r})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{where}: truncated idx header")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"{where}: idx data is {len(raw) - header} bytes, shape {shape} "
                         f"needs {expected}")
    data = np.frombuffer(raw, dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


# ----- offline data sets -------------------------------------------------------------------


def load_fashion_mnist(split: str = "train", allow_download: bool | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``split`` ("train": 60k, "test": 10k) as ``(uint8 [N,28,28], int64 [N])``, cached as
    ``data/cache/fashion-mnist/<split>.npz`` (:func:`layersim.inputs.cache.cached`) from the idx files the asset
    chain finds."""
    check_split("fashion-mnist", split, ("train", "test"))

    def build() -> tuple[np.ndarray, np.ndarray]:
        folder = fetch.resolve("fashion-mnist", allow_download=allow_download)
        prefix = "train" if split == "train" else "t10k"
        images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz").astype(np.uint8)
        labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"fashion-mnist {split}: {images.shape[0]} images but "
                             f"{labels.shape[0]} labels in {folder}")
        return images, labels

    return cache.cached(cache_file("fashion-mnist", f"{split}.npz"), _read_image_npz, build, _write_image_npz)


def _read_image_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of a cached ``.npz``; ValueError if they do not fit together."""
    with np.load(path, allow_pickle=False) as z:  # zip CRCs catch damaged bytes too
        images, labels = z["images"], z["labels"]
    if images.ndim != 3 or labels.shape != images.shape[:1]:
        raise ValueError(f"images {images.shape} and labels {labels.shape} do not match")
    return images, labels


def _write_image_npz(value: tuple[np.ndarray, np.ndarray], tmp: Path) -> None:
    images, labels = value
    np.savez(tmp, images=images, labels=labels)


def load_digits(split: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (float32 [N,8,8] with values 0..16, int64 [N]).

    ``split``: "all" (1797), or a fixed stratified 80/20 "train" (1437) / "test" (360) split.
    """
    check_split("digits", split, ("all", "train", "test"))
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    images = bunch.images.astype(np.float32)
    labels = bunch.target.astype(np.int64)
    if split == "all":
        return images, labels
    test = subset_indices(labels, 360, seed=0)
    mask = np.zeros(len(labels), bool)
    mask[test] = True
    keep = mask if split == "test" else ~mask
    return images[keep], labels[keep]


# ----- paper-scale data sets -----------------------------------------------------------------

_TV_SPLITS = ("train", "test")


def load_torchvision(name: str, split: str = "train", transform: Callable | None = None,
                     allow_download: bool | None = None):
    """MNIST / CIFAR-10 / CIFAR-100 as the torchvision Dataset (PIL images).

    The root comes from the asset chain (``$LAYERSIM_TORCHVISION_ROOT`` or
    ``data/cache/torchvision``); the download happens only when allowed.
    """
    import torchvision.datasets as tvd

    asset = assets.get_asset(name)
    classes = {"mnist": tvd.MNIST, "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}
    if asset.name not in classes:
        raise ValueError(f"{name!r} is not a torchvision data set; choose one of {list(classes)}")
    check_split(asset.name, split, _TV_SPLITS)
    root = fetch.resolve(asset.name, allow_download=allow_download)
    return classes[asset.name](str(root), train=split == "train", transform=transform,
                               download=False)


def load_cifar102(split: str = "test", allow_download: bool | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10.2 (Lu et al. 2020; tracing paper App. B.4), a re-collected CIFAR-10 (10k train, 2k test), as
    ``(uint8 [N,32,32,3], int64 [N])``, from the ``cifar102_{train,test}.npz`` files the asset chain finds."""
    check_split("cifar10.2", split, _TV_SPLITS)
    path = fetch.resolve("cifar10.2", allow_download=allow_download) / f"cifar102_{split}.npz"
    try:
        with np.load(path, allow_pickle=False) as f:
            images, labels = f["images"], f["labels"].astype(np.int64)
    except Exception as err:  # noqa: BLE001 - a damaged, foreign or unreadable file: one clear error
        raise ValueError(f"{path}: not a readable CIFAR-10.2 file with arrays 'images' and 'labels' "
                         f"({type(err).__name__}: {err}); delete it to download it again") from err
    if images.ndim != 4 or images.shape[1:] != (32, 32, 3) or len(images) != len(labels):
        raise ValueError(f"{path}: expected images [N,32,32,3] and N labels, "
                         f"got {images.shape} and {labels.shape}")
    return images, labels


def load_imagenet(split: str = "val", root: str | Path | None = None,
                  transform: Callable | None = None):
    """ImageNet as ``torchvision.datasets.ImageFolder(<root>/<split>)``.

    ``root`` defaults to the asset chain (``$LAYERSIM_IMAGENET``, ``data/imagenet``,
    ``data/cache/imagenet``); there is no download (ImageNet needs an account).
    """
    from torchvision.datasets import ImageFolder

    check_split("imagenet", split, ("train", "val"))
    if root is None:
        root = fetch.resolve("imagenet", allow_download=False)
    folder = Path(root) / split
    if not folder.is_dir():
        raise assets.AssetNotFoundError("imagenet", [str(folder)], assets.get_asset("imagenet").how)
    return ImageFolder(str(folder), transform=transform)


# ----- the uniform image Dataset -------------------------------------------------------------


class ImageDataset(Dataset):
    """A torch Dataset of ``(image float32 [C,H,W], label int)``: ``get_image(i)`` in [0, 1], subset by
    ``indices``, normalised by ``mean``/``std`` (if given), then ``augment`` (unless ``defer_augment``: the
    training loop calls ``augment.batch``), then ``transform``. Attributes: ``name``, ``split``, ``indices``,
    ``targets``, ``classes``."""

    def __init__(self, name: str, split: str, get_image: Callable[[int], Any],
                 labels: np.ndarray, indices: np.ndarray, classes: Sequence[str],
                 mean: Sequence[float] | None, std: Sequence[float] | None,
                 transform: Callable | None = None, augment: Augmentation | None = None):
        self.name, self.split, self.classes = name, split, list(classes)
        self.augment, self.defer_augment = augment, False
        self.indices = np.asarray(indices, dtype=np.int64)
        self.targets = np.asarray(labels, dtype=np.int64)[self.indices]
        self._get, self.transform = get_image, transform
        self._mean = None if mean is None else torch.tensor(mean).view(-1, 1, 1)
        self._std = None if std is None else torch.tensor(std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        x = self._get(int(self.indices[i]))
        if self._mean is not None:
            x = (x - self._mean) / self._std
        if self.augment is not None and not self.defer_augment:
            x = self.augment(x)
        if self.transform is not None:
            x = self.transform(x)
        return x, int(self.targets[i])

    def tensors(self):
        """All samples stacked: (float32 [N,C,H,W], int64 [N]) — for small subsets."""
        xs = [self[i][0] for i in range(len(self))]
        return torch.stack(xs), torch.from_numpy(self.targets.copy())

    def __repr__(self) -> str:
        return f"ImageDataset({self.name!r}, split={self.split!r}, n={len(self)})"


def _array_getter(images: np.ndarray, scale: float) -> Callable[[int], Any]:
    """Image i of an array [N,H,W] or [N,H,W,C] as a float tensor [C,H,W] in [0, 1]."""

    def get(i: int):
        x = torch.from_numpy(np.asarray(images[i], dtype=np.float32) / scale)
        return x.unsqueeze(0) if x.ndim == 2 else x.permute(2, 0, 1)

    return get


def _pil_getter(base, pre: Callable | None = None) -> Callable[[int], Any]:
    """Image i of a torchvision data set (PIL) as a float tensor [C,H,W] in [0, 1]."""
    from torchvision.transforms.functional import pil_to_tensor

    def get(i: int):
        img = base[i][0]
        if pre is not None:
            img = pre(img)
        return pil_to_tensor(img.convert("RGB") if img.mode not in ("L", "RGB") else img
                             ).float() / 255.0

    return get


def _image_source(name: str, split: str, allow_download: bool | None, root):
    """(get_image, labels, classes) for one image data set split."""
    if name == "fashion-mnist":
        images, labels = load_fashion_mnist(split, allow_download)
        return _array_getter(images, 255.0), labels, FASHION_MNIST_CLASSES
    if name == "digits":
        images, labels = load_digits(split)
        return _array_getter(images, 16.0), labels, [str(d) for d in range(10)]
    if name == "cifar10.2":
        images, labels = load_cifar102(split, allow_download)
        return _array_getter(images, 255.0), labels, CIFAR10_CLASSES
    if name == "imagenet":
        from torchvision import transforms

        base = load_imagenet(split, root=root)
        pre = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
        return _pil_getter(base, pre), np.asarray(base.targets), base.classes
    base = load_torchvision(name, split, allow_download=allow_download)
    return _pil_getter(base), np.asarray(base.targets), list(base.classes)


def split_size(name: str, split: str) -> int | None:
    """The number of images in ``split`` of data set ``name``, without loading it (None where it is not
    fixed: a folder, a download of unknown size)."""
    return _SPLITS.get(assets.get_asset(name).name, {}).get(split)


def dataset_info(name: str) -> dict:
    """Channels, number of classes and image side of an image data set, without loading it."""
    key = assets.get_asset(name).name
    if key not in _STATS:
        raise ValueError(f"{name!r} is not an image data set; choose one of {list(_STATS)}")
    classes, side = _SHAPES[key]
    return {"name": key, "channels": len(_STATS[key][0]), "classes": classes, "image_size": side}


def image_dataset(name: str, split: str = "train", transform: Callable | None = None,
                  limit: int | None = None, seed: int = 0, stratified: bool = True,
                  normalize: bool = True, allow_download: bool | None = None,
                  root: str | Path | None = None, augment: bool = False, at_most: bool = False) -> ImageDataset:
    """An image data set (fashion-mnist, digits; mnist, cifar10, cifar10.2, cifar100, imagenet) as a torch Dataset
    of (normalised float ``[C,H,W]``, int label). ``limit``: a deterministic ``seed``-ed subset (``ValueError``
    out of range, :func:`check_count`); ``augment=True``: :func:`train_augmentation`; ``transform`` last;
    ``root``: ImageNet's folder."""
    key = dataset_info(name)["name"]
    what = f"the {split!r} split of {key}"
    check_count(limit, None, what, "limit", "images")  # before anything loads
    aug = train_augmentation(_SHAPES[key][1], flip=key not in ("digits", "mnist")) if augment else None
    get, labels, classes = _image_source(key, split, allow_download, root)
    idx = subset_indices(labels, limit, seed=seed, stratified=stratified, what=what, at_most=at_most)
    mean, std = _STATS[key] if normalize else (None, None)
    return ImageDataset(key, split, get, labels, idx, classes, mean, std, transform, augment=aug)


def as_model_input(images: torch.Tensor, like: str) -> torch.Tensor:
    """Images in [0, 1] ``float [N,C,H,W]`` prepared for a model trained on image data set ``like``: resized
    (bilinear, antialiased), channels matched (grey repeated, RGB averaged), normalised with its mean and std."""
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"expected images float [N, 1 or 3, H, W], got shape {tuple(getattr(images, 'shape', ()))}")
    info = dataset_info(like)
    side, channels = info["image_size"], info["channels"]
    x = images.float()
    if x.shape[-2:] != (side, side):
        from torchvision.transforms.functional import resize

        x = resize(x, [side, side], antialias=True).clamp_(0.0, 1.0)
    if x.shape[1] != channels:
        x = x.repeat(1, channels, 1, 1) if x.shape[1] == 1 else x.mean(dim=1, keepdim=True)
    mean, std = (torch.tensor(v, dtype=x.dtype).view(1, -1, 1, 1) for v in _STATS[info["name"]])
    return (x - mean) / std
