"""Data sets as numpy arrays, tables and torch Datasets, offline first.

- offline, via :mod:`layersim.inputs.fetch`: :func:`load_fashion_mnist`, :func:`load_digits`,
  :func:`load_austen`, :func:`load_python_docs`;
- paper scale (the network once, then the cache): :func:`load_torchvision`, :func:`load_cifar102`,
  :func:`load_imagenet`, :func:`load_glue`, :func:`load_wikitext103`, :func:`load_hf_text`;
- uniform entries: :func:`image_dataset` (normalised float images, deterministic ``limit`` subsets),
  :func:`class_subset`, :func:`load_dataset` (any name); the tracing paper's augmentation,
  :class:`Augmentation`.

(see docs/modules.md, ``layersim.inputs.data``)
"""

from __future__ import annotations

import gzip
import numbers
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from layersim.core.paths import cache_dir
from layersim.inputs import assets, cache, fetch

__all__ = [
    "read_idx",
    "load_fashion_mnist",
    "load_digits",
    "load_austen",
    "AUSTEN_NOVELS",
    "FASHION_MNIST_CLASSES",
    "GLUE_TASKS",
    "IMAGE_DATASETS",
    "load_torchvision",
    "load_imagenet",
    "load_glue",
    "load_wikitext103",
    "load_hf_text",
    "austen_tokenizer",
    "subset_indices",
    "check_count",
    "class_subset",
    "Augmentation",
    "ImageDataset",
    "train_augmentation",
    "transform_batch",
    "image_dataset",
    "load_dataset",
]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                   "truck")
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
# R object name in janeaustenr -> title, in the order of janeaustenr::austen_books().
AUSTEN_NOVELS = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli", "ax")

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
           "cifar100": {"train": 50000, "test": 10000}}

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


def _check_split(name: str, split: str, allowed: Sequence[str]) -> str:
    """Return ``split`` if allowed, else a ValueError listing the valid ones."""
    if split not in allowed:
        raise ValueError(f"{name}: unknown split {split!r}; choose one of {list(allowed)}")
    return split


def load_fashion_mnist(split: str = "train", allow_download: bool | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``split`` ("train": 60k, "test": 10k) as ``(uint8 [N,28,28], int64 [N])``, cached as
    ``data/cache/fashion-mnist/<split>.npz`` (:func:`layersim.inputs.cache.cached`) from the idx files the asset
    chain finds."""
    _check_split("fashion-mnist", split, ("train", "test"))

    def build() -> tuple[np.ndarray, np.ndarray]:
        folder = fetch.resolve("fashion-mnist", allow_download=allow_download)
        prefix = "train" if split == "train" else "t10k"
        images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz").astype(np.uint8)
        labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"fashion-mnist {split}: {images.shape[0]} images but "
                             f"{labels.shape[0]} labels in {folder}")
        return images, labels

    return cache.cached(_cache_file("fashion-mnist", f"{split}.npz"), _read_image_npz, build, _write_image_npz)


def _cache_file(folder: str, name: str) -> Path:
    """``name`` in the cache folder ``folder`` (created); one ValueError if it cannot be created."""
    try:
        return cache_dir(folder) / name
    except OSError as err:
        raise ValueError(f"cannot create the cache folder {folder!r}: {err.strerror or err} ({err.filename}); "
                         "point LAYERSIM_CACHE at a writable folder") from err


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
    _check_split("digits", split, ("all", "train", "test"))
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


def _read_rdb(folder: Path) -> dict[str, Any]:
    """Read every object of an R lazy-load database (``Rdata.rdb``/``.rdx``) with rdata."""
    import warnings
    import zlib

    import rdata

    def parse(raw: bytes):
        with warnings.catch_warnings():  # "Unknown file type: assumed RDS": expected here
            warnings.simplefilter("ignore", UserWarning)
            return rdata.conversion.convert(rdata.parser.parse_data(raw))

    index = parse(gzip.decompress((folder / "Rdata.rdx").read_bytes()))
    blob = (folder / "Rdata.rdb").read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        chunk = blob[int(offset): int(offset) + int(length)]
        out[str(name)] = parse(zlib.decompress(chunk[4:]))  # 4-byte length, then zlib
    return out


def _austen_lines() -> dict[str, list[str]]:
    """The raw lines of each novel, keyed by title, in publication order; cached as
    ``data/cache/text/janeaustenr.json`` (:func:`layersim.inputs.cache.cached`)."""
    import json

    def read(path: Path) -> dict[str, list[str]]:
        lines = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(lines, dict) or list(lines) != list(AUSTEN_NOVELS.values()):
            raise ValueError("not the lines of the six novels")
        return lines

    def build() -> dict[str, list[str]]:
        folder = fetch.resolve("janeaustenr", allow_download=False) / "data"
        objects = _read_rdb(folder)
        missing = [k for k in AUSTEN_NOVELS if k not in objects]
        if missing:
            raise ValueError(f"janeaustenr data in {folder} lacks {missing}")
        return {title: [str(x) for x in objects[key]] for key, title in AUSTEN_NOVELS.items()}

    def write(lines: dict[str, list[str]], tmp: Path) -> None:
        tmp.write_text(json.dumps(lines), encoding="utf-8")

    return cache.cached(_cache_file("text", "janeaustenr.json"), read, build, write)


_ABBREV = re.compile(r"(?<![A-Za-z])(Mr|Mrs|Messrs|Dr|St|Col|Capt|Gen|Lt)\._?$")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019_]))\s+(?=[\"'\u201c\u2018_]*[A-Z])")


def _sentences(lines: list[str]) -> list[str]:
    """Split a novel's lines into sentences: paragraphs at blank lines, then end punctuation."""
    paragraphs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    sentences: list[str] = []
    for para in paragraphs:
        pieces = _SENTENCE_END.split(para)
        merged: list[str] = []
        for piece in pieces:
            if merged and _ABBREV.search(merged[-1]):
                merged[-1] = f"{merged[-1]} {piece}"
            else:
                merged.append(piece)
        sentences += [s for s in merged if s.strip()]
    return sentences


def load_austen(unit: str = "line", drop_empty: bool = True):
    """The six Jane Austen novels (publication order) as a DataFrame with columns novel, index, text:
    ``unit="line"`` the printed lines (``drop_empty`` drops empty ones), ``unit="sentence"`` sentences split at
    blank lines and end punctuation."""
    import pandas as pd

    _check_split("austen (unit)", unit, ("line", "sentence"))
    rows: list[tuple[str, int, str]] = []
    for title, lines in _austen_lines().items():
        if unit == "sentence":
            rows += [(title, i, s) for i, s in enumerate(_sentences(lines))]
        else:
            rows += [(title, i, s) for i, s in enumerate(lines) if s.strip() or not drop_empty]
    frame = pd.DataFrame(rows, columns=["novel", "index", "text"])
    frame["novel"] = pd.Categorical(frame["novel"], categories=list(AUSTEN_NOVELS.values()))
    return frame


def load_python_docs(min_words: int = 8) -> list[str]:
    """Paragraphs of at least ``min_words`` words of Python's own help texts (``pydoc_data.topics``): technical
    English far from the Austen novels; whitespace folded, topics sorted."""
    fetch.resolve("python-docs")
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[name]):
            text = " ".join(para.split())
            if len(text.split()) >= min_words:
                out.append(text)
    return out


def text_sample(name: str, n: int | None, seed: int = 0, split: str = "all", at_most: bool = False) -> list[str]:
    """``n`` distinct texts (all when None) of ``"austen"`` sentences or ``"python-docs"``, drawn by a
    ``seed``-ed permutation, kept in source order. ``split``: ``"all"``, or the permutation's first (``"test"``)
    or second (``"train"``) half. ``ValueError`` for ``n`` out of range (:func:`check_count`)."""
    _check_split(name, split, ("all", "train", "test"))
    check_count(n, None, name, unit="texts")
    try:
        key = assets.canonical_name(name)
    except ValueError:
        key = name
    if key == "janeaustenr":
        texts = list(load_austen(unit="sentence")["text"])
    elif key == "python-docs":
        texts = load_python_docs()
    else:
        raise ValueError(f"unknown text source {name!r}; use 'austen' or 'python-docs'")
    texts = list(dict.fromkeys(texts))  # each distinct text once, so the two halves share none
    perm = np.random.default_rng(seed).permutation(len(texts))
    half = len(texts) // 2
    pool = {"all": perm, "test": perm[:half], "train": perm[half:]}[split]
    where = name if split == "all" else f"the {split!r} half of {name}"
    n = check_count(n, len(pool), where, unit="distinct texts", at_most=at_most)
    return [texts[i] for i in np.sort(pool[:n])]


def austen_tokenizer(vocab_size: int = 2048):
    """A byte-level BPE ``PreTrainedTokenizerFast`` of ``vocab_size`` learnt from the training half of the Austen
    sentences, ``<pad>`` = id 0 (also EOS), for language models trained here; cached under ``data/cache/text/``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise ValueError(f"vocab_size must be at least 300 (256 bytes and merges), got {vocab_size}")

    def build():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(text_sample("austen", None, split="train"), trainer)
        return tok

    tok = cache.cached(_cache_file("text", f"austen-bpe-{vocab_size}.json"),
                        lambda path: Tokenizer.from_file(str(path)), build, lambda tok, tmp: tok.save(str(tmp)))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<pad>")


def text_batches(texts: Sequence[str], tokenizer: Any, batch_size: int = 64, max_length: int = 128) -> list[dict]:
    """Tokenised batches (``input_ids``, ``attention_mask``, ...: PyTorch tensors, right padding,
    truncated to ``max_length`` tokens) of ``texts``, in order, for ``layersim.nets.models.collect``."""
    if batch_size < 1 or max_length < 2:
        raise ValueError(f"batch_size must be >= 1 and max_length >= 2, got {batch_size}, {max_length}")
    return [dict(tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                           return_tensors="pt"))
            for i in range(0, len(texts), batch_size)]


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
    _check_split(asset.name, split, _TV_SPLITS)
    root = fetch.resolve(asset.name, allow_download=allow_download)
    return classes[asset.name](str(root), train=split == "train", transform=transform,
                               download=False)


def load_cifar102(split: str = "test", allow_download: bool | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10.2 (Lu et al. 2020; tracing paper App. B.4), a re-collected CIFAR-10 (10k train, 2k test), as
    ``(uint8 [N,32,32,3], int64 [N])``, from the ``cifar102_{train,test}.npz`` files the asset chain finds."""
    _check_split("cifar10.2", split, _TV_SPLITS)
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

    _check_split("imagenet", split, ("train", "val"))
    if root is None:
        root = fetch.resolve("imagenet", allow_download=False)
    folder = Path(root) / split
    if not folder.is_dir():
        raise assets.AssetNotFoundError("imagenet", [str(folder)], assets.get_asset("imagenet").how)
    return ImageFolder(str(folder), transform=transform)


def _glue_splits(task: str) -> tuple[str, ...]:
    """The splits of one GLUE task on the hub."""
    if task == "mnli":
        return ("train", "validation_matched", "validation_mismatched", "test_matched",
                "test_mismatched")
    return ("test",) if task == "ax" else ("train", "validation", "test")


def load_glue(task: str, split: str = "train", allow_download: bool | None = None):
    """One GLUE task split as a Hugging Face ``datasets.Dataset``.

    Loaded from the project cache (``data/cache/hf-datasets/glue/<task>``, a ``save_to_disk``
    folder); downloaded with ``datasets.load_dataset("nyu-mll/glue", task)`` when allowed.
    """
    import datasets

    task = task.lower().replace("-", "")
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {list(GLUE_TASKS)}")
    _check_split(f"glue/{task}", split, _glue_splits(task))
    path = fetch.resolve(f"glue/{task}", allow_download=allow_download)
    return datasets.load_from_disk(str(path))[split]


def load_hf_text(name: str, split: str = "train", allow_download: bool | None = None):
    """One split of a paper-scale hub text data set (``"boolq"``, ``"yelp-polarity"``, ``"hellaswag"``,
    ``"cosmosqa"``) as a ``datasets.Dataset``; ``"validation"`` falls back to ``"test"`` where there is none."""
    import datasets

    asset = assets.get_asset(name)
    if asset.kind != "data" or asset.source != "hf-datasets" or asset.name in ("glue", "wikitext-103"):
        raise ValueError(f"{name!r} is not a text classification data set of the hub; use 'boolq', "
                         "'yelp-polarity', 'hellaswag' or 'cosmosqa'")
    _check_split(asset.name, split, ("train", "validation", "test"))
    dd = datasets.load_from_disk(str(fetch.resolve(asset.name, allow_download=allow_download)))
    if split == "validation" and "validation" not in dd:
        split = "test"
    return dd[split]


def load_wikitext103(split: str = "train", allow_download: bool | None = None):
    """WikiText-103 (raw) ``split`` as a Hugging Face ``datasets.Dataset`` (column ``text``)."""
    import datasets

    _check_split("wikitext-103", split, ("train", "validation", "test"))
    path = fetch.resolve("wikitext-103", allow_download=allow_download)
    return datasets.load_from_disk(str(path))[split]


# ----- subsets and the uniform image Dataset -------------------------------------------------


def check_count(n: Any, available: int | None, what: str, name: str = "n", unit: str = "examples",
                at_most: bool = False) -> int | None:
    """The number of ``unit`` to take from ``what`` (holding ``available``; None: unknown): ``n`` as an int, or
    None for all. ``ValueError`` naming them for a count that is not whole, below 1, or above ``available``;
    with ``at_most=True`` a larger count means all."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"{name} must be a whole number of {unit} (or None for all), got {n!r}")
    if n < 1:
        raise ValueError(f"{name}={n}: at least 1 of the {unit} of {what} is needed (None means all of them)")
    if available is not None and n > available:
        if at_most:
            return None
        raise ValueError(f"{name}={n} is more than the {available} {unit} of {what}; "
                         f"use at most {available} (or None for all of them)")
    return int(n)


def subset_indices(labels: Sequence[int] | np.ndarray, limit: int | None, seed: int = 0,
                   stratified: bool = True, *, what: str = "the labels", at_most: bool = False) -> np.ndarray:
    """Deterministic sorted indices of ``limit`` samples (all if None), stratified by class when asked (largest
    remainders), from a ``seed``-ed permutation. ``ValueError`` for ``limit`` out of range (:func:`check_count`)."""
    labels = np.asarray(labels)
    n = len(labels)
    limit = check_count(limit, n, what, "limit", "samples", at_most)
    if limit is None or limit == n:
        return np.arange(n)
    perm = np.random.default_rng(seed).permutation(n)
    if not stratified:
        return np.sort(perm[:limit])
    classes, counts = np.unique(labels, return_counts=True)
    exact = limit * counts / n
    quota = np.floor(exact).astype(int)
    leftovers = np.argsort(-(exact - quota), kind="stable")[: limit - quota.sum()]
    quota[leftovers] += 1
    permuted = labels[perm]
    picked = [perm[permuted == c][:q] for c, q in zip(classes, quota)]
    return np.sort(np.concatenate(picked))


def class_subset(labels: Sequence[int] | np.ndarray, classes: Sequence[int], per_class: int | None = None,
                 seed: int = 0, exclude=None, draw: str = "permutation") -> tuple[np.ndarray, np.ndarray]:
    """``(indices, new labels)`` of ``per_class`` samples of each of ``classes`` (all when None), relabelled
    ``0..k-1`` in their order. ``draw="permutation"``: the first of each class in one ``seed``-ed permutation,
    sorted; ``"per_class"``: drawn class by class, then shuffled. ``exclude``: never drawn. ``ValueError`` for
    empty or repeated classes, ``per_class < 1``, too few samples."""
    labels = np.asarray(labels)
    if not len(classes) or len(set(classes)) != len(classes):
        raise ValueError(f"classes must be distinct and non-empty, got {classes}")
    if per_class is not None and per_class < 1:
        raise ValueError(f"per_class must be positive (or None for all), got {per_class}")
    rng = np.random.default_rng(seed)
    excluded = np.isin(np.arange(len(labels)), np.asarray([] if exclude is None else exclude))
    if draw == "permutation":
        perm = rng.permutation(len(labels))
        perm = perm[~excluded[perm]]
        pools = [perm[labels[perm] == c] for c in classes]
    elif draw == "per_class":
        if per_class is None:
            raise ValueError("draw='per_class' needs per_class")
        pools = [np.flatnonzero((labels == c) & ~excluded) for c in classes]
    else:
        raise ValueError(f"draw must be 'permutation' or 'per_class', got {draw!r}")
    for c, pool in zip(classes, pools):
        if per_class is not None and len(pool) < per_class:
            raise ValueError(f"class {c} has {len(pool)} samples, fewer than the {per_class} asked for")
    if draw == "permutation":
        idx = np.sort(np.concatenate([pool if per_class is None else pool[:per_class] for pool in pools]))
    else:
        idx = rng.permutation(np.concatenate([rng.choice(pool, size=per_class, replace=False) for pool in pools]))
    lookup = {c: i for i, c in enumerate(classes)}
    return idx, np.array([lookup[t] for t in labels[idx]], dtype=np.int64)


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


def load_dataset(name: str, split: str | None = None, **kwargs: Any):
    """Load any data set by name: image sets via :func:`image_dataset`, ``"austen"`` via :func:`load_austen`,
    ``"glue/<task>"`` via :func:`load_glue`, ``"wikitext-103"`` via :func:`load_wikitext103`."""
    base, _, variant = name.partition("/")
    asset = assets.ASSETS[assets.canonical_name(base)]
    if asset.kind != "data":
        raise ValueError(f"{asset.name!r} is a model; use layersim.inputs.fetch.load_model")
    if asset.name in _STATS:
        return image_dataset(asset.name, split or "train", **kwargs)
    if asset.name == "janeaustenr":
        _check_split("janeaustenr", split or "all", ("all",))
        return load_austen(**kwargs)
    if asset.name == "glue":
        task = variant or kwargs.pop("task", None)
        if not task:
            raise ValueError("GLUE needs a task: load_dataset('glue/sst2') or task='sst2'")
        return load_glue(task, split or "train", **kwargs)
    return load_wikitext103(split or "train", **kwargs)
