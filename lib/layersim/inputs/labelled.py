"""Labelled image subsets for transfer experiments (the alignment paper, Sections 7.2-7.3): :class:`LabelledSubset`
(a Dataset restricted and relabelled), class-balanced subsets loaded lazily (:func:`subset_dataset`) or stacked
(:func:`load_images`, :func:`stack`), random labels (:func:`random_labels`, :func:`relabelled`), what a network sees
(:func:`model_input`, :func:`imagenet_input`) and one domain's data (:func:`domain_sets`: offline shifts or Office-31,
:func:`load_office31`) (see docs/modules.md, ``layersim.inputs.labelled``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from layersim.inputs import image_data, subsets
from layersim.inputs.shift import domain_shift


class LabelledSubset(Dataset):
    """``base[indices]`` with new integer ``labels`` (remapped classes, or random labels), and an
    optional ``transform`` of the image tensor."""

    def __init__(self, base: Dataset, indices, labels, transform=None):
        self.base, self.transform = base, transform
        self.indices = np.asarray(indices, dtype=np.int64)
        self.targets = np.asarray(labels, dtype=np.int64)
        if len(self.indices) != len(self.targets):
            raise ValueError(f"{len(self.indices)} indices but {len(self.targets)} labels")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        x = self.base[int(self.indices[i])][0]
        if self.transform is not None:
            x = self.transform(x)
        return x, int(self.targets[i])


def random_labels(n: int, num_classes: int, seed: int = 0) -> np.ndarray:
    """``n`` labels drawn uniformly from ``0..num_classes-1`` (a10's randomised source task)."""
    return np.random.default_rng(seed).integers(0, num_classes, size=n).astype(np.int64)


def stack(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """All samples of a (small) Dataset as ``(float32 [N, C, H, W], int64 [N])``."""
    xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
    return torch.stack(xs).float(), torch.as_tensor(ys, dtype=torch.int64)


def subset_dataset(dataset: str, split: str, classes: Sequence[int], per_class: int | None = None, seed: int = 0,
                   exclude=None, transform=None, normalize: bool = True) -> LabelledSubset:
    """A class-balanced subset (:func:`layersim.inputs.subsets.class_subset`) of an image data set as a lazy
    :class:`LabelledSubset` (labels ``0..k-1``); ``transform`` and ``normalize`` as in
    :func:`layersim.inputs.image_data.image_dataset`."""
    ds = image_data.image_dataset(dataset, split, transform=transform, normalize=normalize)
    idx, labels = subsets.class_subset(ds.targets, classes, per_class, seed=seed, exclude=exclude)
    return LabelledSubset(ds, idx, labels)


def load_images(dataset: str, split: str, classes: Sequence[int], per_class: int | None = None, seed: int = 0,
                exclude=None, domain: str | None = None, transform=None, normalize: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """:func:`subset_dataset` stacked: ``(X [N, C, H, W], labels 0..k-1, split indices)``; ``domain``:
    :func:`domain_shift` before the normalisation."""
    sub = subset_dataset(dataset, split, classes, per_class, seed, exclude, transform,
                         normalize=normalize and domain is None)
    X, y = stack(sub)
    if domain is not None:
        X = domain_shift(X, domain, seed=seed)
        if normalize:
            X = image_data.as_model_input(X, sub.base.name)
    return X, y, sub.indices


def model_input(X01: torch.Tensor, dataset: str, transform=None) -> torch.Tensor:
    """What a network sees of images with pixels in [0, 1]: ``transform(X01)`` (e.g. :func:`imagenet_input` for
    torchvision ImageNet models) or the data set's own per-channel standardisation."""
    if transform is not None:
        return transform(X01)
    return image_data.as_model_input(X01, dataset)


def imagenet_input(size: int = 224):
    """Transform of a [0, 1] image tensor for torchvision ImageNet models: short side resized to ``size``, ImageNet
    normalisation."""
    from torchvision import transforms

    return transforms.Compose([transforms.Resize(size, antialias=True),
                               transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])


def load_office31(domain: str, root=None, size: int = 224):
    """Office-31 ``domain`` ("amazon", "webcam", "dslr") as an ImageFolder of
    ``<root>/<domain>/images/<class>/*.jpg``, resized and ImageNet-normalised; ``root``: the registry asset
    ``office31`` (``$LAYERSIM_OFFICE31`` or ``<cache>/office31``; its one-line error when missing). Paper scale only."""
    from pathlib import Path

    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    from layersim.inputs import fetch

    if domain not in ("amazon", "webcam", "dslr"):
        raise ValueError(f"unknown Office-31 domain {domain!r}")
    root = Path(root) if root else fetch.resolve("office31", allow_download=False)
    folder = root / domain / "images"
    if not folder.is_dir():
        raise FileNotFoundError(f"Office-31 not found at {folder}: download it and set $LAYERSIM_OFFICE31")
    tf = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor(),
                             transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return ImageFolder(str(folder), transform=tf)


def domain_sets(dataset: str, domain: str, train_per_class: int | None, test_per_class: int | None,
                classes: Sequence[int] = tuple(range(10)), seed: int = 0, exclude=None, test_fraction: float = 0.2):
    """``(train, test, train indices)`` of one domain: offline, :func:`load_images` with :func:`domain_shift`,
    per-class counts, skipping ``exclude``, as tensors; for ``"office31"``, a random ``test_fraction`` split of all
    images as :class:`LabelledSubset` Datasets."""
    if dataset == "office31":
        ds = load_office31(domain)
        targets = np.asarray(ds.targets)
        perm = np.random.default_rng(seed).permutation(len(targets))
        n_test = int(round(test_fraction * len(perm)))
        te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        return LabelledSubset(ds, tr, targets[tr]), LabelledSubset(ds, te, targets[te]), tr
    X_tr, y_tr, idx = load_images(dataset, "train", classes, train_per_class, seed=seed, exclude=exclude, domain=domain)
    X_te, y_te, _ = load_images(dataset, "test", classes, test_per_class, seed=seed, domain=domain)
    return (X_tr, y_tr), (X_te, y_te), idx


def relabelled(data, labels) -> Dataset:
    """The images of ``data`` (``(X, y)`` tensors or a :class:`LabelledSubset`) with other ``labels``
    (a10's random-label source task)."""
    labels = np.asarray(labels, dtype=np.int64)
    if isinstance(data, LabelledSubset):
        return LabelledSubset(data.base, data.indices, labels, data.transform)
    X = data[0]
    if len(X) != len(labels):
        raise ValueError(f"{len(X)} images but {len(labels)} labels")
    return TensorDataset(X, torch.as_tensor(labels))


def labels_of(data) -> np.ndarray:
    """The labels of ``(X, y)`` tensors or of a Dataset with ``targets``."""
    return np.asarray(data[1] if isinstance(data, (tuple, list)) else data.targets)


def images_of(data):
    """What :func:`layersim.nets.cnn.extract_features` reads: the image tensor of ``(X, y)``, or the Dataset itself."""
    return data[0] if isinstance(data, (tuple, list)) else data
