"""Fixture data sets for the rehearsal of the paper scale, each in the on-disk format its real download leaves.

:func:`write_data` writes, below one root, small versions of every paper-scale data set the notebooks read, in the
layout the project's loaders find (``layersim.inputs.locate``): torchvision's MNIST (``MNIST/raw`` idx files),
CIFAR-10 and CIFAR-100 folders (pickled batches, real class names), CIFAR-10.2's ``npz`` files, ImageNet and
Office-31 as ImageFolder trees of JPEG files, and Hugging Face ``datasets`` folders (``save_to_disk``) of the GLUE
tasks, HellaSwag and WikiText-103 with their real columns and label features. Images are seeded noise around a
class-dependent colour, texts seeded sentences of common English words: their numbers mean nothing. The models are
:mod:`layersim.tools.fixture_models`; ``python -m layersim.tools.rehearse`` uses both (see docs/modules.md,
``layersim.tools.fixtures``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
from pathlib import Path

import numpy as np

__all__ = ["CIFAR_MD5", "IMAGES_PER_CLASS", "IMAGES_PER_CLASS_100", "OFFICE31_CLASSES", "WORDS", "WRITERS", "sentences", "trust_cifar", "write_cifar",
           "write_cifar102", "write_data", "write_glue", "write_hellaswag", "write_image_folder", "write_mnist",
           "write_wikitext"]

#: images per class of each fixture split: enough for the smoke counts a rehearsal draws (a02's 300 MNIST images of
#: a class), CIFAR-100's fewer (it has ten times the classes)
IMAGES_PER_CLASS = {"train": 300, "test": 100}
IMAGES_PER_CLASS_100 = {"train": 100, "test": 50}
#: the file that records the md5 of each fixture CIFAR file (torchvision checks them against its own list)
CIFAR_MD5 = "fixture-md5.json"
#: the 31 classes of Office-31
OFFICE31_CLASSES = ("back_pack", "bike", "bike_helmet", "bookcase", "bottle", "calculator", "desk_chair", "desk_lamp",
                    "desktop_computer", "file_cabinet", "headphones", "keyboard", "laptop_computer", "letter_tray",
                    "mobile_phone", "monitor", "mouse", "mug", "paper_notebook", "pen", "phone", "printer",
                    "projector", "punchers", "ring_binder", "ruler", "scissors", "speaker", "stapler",
                    "tape_dispenser", "trash_can")
#: the words of the fixture texts
WORDS = ("the", "of", "and", "a", "to", "in", "is", "was", "that", "for", "it", "with", "as", "his", "on", "be",
         "at", "by", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which", "one", "you", "were",
         "her", "all", "she", "there", "would", "their", "we", "him", "been", "has", "when", "who", "will", "more",
         "no", "if", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only",
         "other", "new", "some", "could", "time", "these", "two", "may", "then", "do", "first", "any", "my", "now",
         "such", "like", "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many",
         "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should",
         "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make",
         "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being",
         "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year")

_CIFAR10_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _images(n_classes: int, per_class: int, shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` uint8 images of ``shape`` per class, seeded noise around a colour of each class, shuffled."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(n_classes), per_class))
    channels = shape[-1] if len(shape) == 3 else 1
    centre = rng.integers(40, 216, size=(n_classes, channels))[labels]  # [N, channels]
    colour = centre.reshape(len(labels), 1, 1, channels) if len(shape) == 3 else centre.reshape(len(labels), 1, 1)
    noise = rng.normal(0, 40, size=(len(labels), *shape))
    return np.clip(colour + noise, 0, 255).astype(np.uint8), labels.astype(np.int64)


def sentences(n: int, seed: int, words: tuple[int, int] = (6, 18)) -> list[str]:
    """``n`` seeded sentences of :data:`WORDS` (capitalised, full stop)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        text = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(*words)))
        out.append(text[0].upper() + text[1:] + ".")
    return out


# ----------------------------------------------------------------------------- torchvision's folders


def _idx(array: np.ndarray) -> bytes:
    """``array`` (uint8) as an idx file: magic, big-endian dimensions, data."""
    head = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist(root: Path) -> Path:
    """torchvision's MNIST folder ``<root>/MNIST/raw/`` with the four uncompressed idx files (and their ``.gz``)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, prefix, seed in (("train", "train", 1), ("test", "t10k", 2)):
        images, labels = _images(10, IMAGES_PER_CLASS[split], (28, 28), seed)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels.astype(np.uint8))):
            data = _idx(array)
            (raw / f"{prefix}-{kind}-ubyte").write_bytes(data)
            (raw / f"{prefix}-{kind}-ubyte.gz").write_bytes(gzip.compress(data, mtime=0))
    return raw


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def write_cifar(root: Path, classes: int) -> Path:
    """torchvision's CIFAR-10 (``cifar-10-batches-py``: five training batches, ``test_batch``, ``batches.meta``) or
    CIFAR-100 (``cifar-100-python``: ``train``, ``test``, ``meta`` with fine and coarse labels) folder, pickled as
    the real ones are, with the real class names; each file's md5 in :data:`CIFAR_MD5`."""
    ten = classes == 10
    folder = root / ("cifar-10-batches-py" if ten else "cifar-100-python")
    folder.mkdir(parents=True, exist_ok=True)
    names = list(_CIFAR10_NAMES) if ten else [f"class_{i:02d}" for i in range(100)]
    key = "labels" if ten else "fine_labels"
    files = {}
    for split, seed in (("train", 3 if ten else 5), ("test", 4 if ten else 6)):
        images, labels = _images(classes, (IMAGES_PER_CLASS if ten else IMAGES_PER_CLASS_100)[split], (32, 32, 3), seed)
        data = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # channel planes, as CIFAR stores them
        parts = np.array_split(np.arange(len(images)), 5) if (ten and split == "train") else [np.arange(len(images))]
        for i, rows in enumerate(parts):
            name = (f"data_batch_{i + 1}" if split == "train" else "test_batch") if ten else split
            entry = {"data": data[rows], key: labels[rows].tolist(), "filenames": [f"{j}.png" for j in rows]}
            if not ten:
                entry["coarse_labels"] = (labels[rows] // 5).tolist()
            (folder / name).write_bytes(pickle.dumps(entry, protocol=2))
            files[name] = _md5(folder / name)
    meta = "batches.meta" if ten else "meta"
    content = {"label_names": names} if ten else {"fine_label_names": names,
                                                  "coarse_label_names": [f"group_{i:02d}" for i in range(20)]}
    (folder / meta).write_bytes(pickle.dumps(content, protocol=2))
    files[meta] = _md5(folder / meta)
    (folder / CIFAR_MD5).write_text(json.dumps(files, indent=1))
    return folder


def trust_cifar(root: Path) -> None:
    """Make torchvision's CIFAR-10 and CIFAR-100 classes accept the fixture files below ``root`` (the md5 of each,
    from :data:`CIFAR_MD5`, in place of the real files' in their integrity lists). For a rehearsal's processes only:
    torchvision refuses any file whose md5 is not the real one's."""
    from torchvision.datasets import CIFAR10, CIFAR100

    for cls, sub in ((CIFAR10, "cifar-10-batches-py"), (CIFAR100, "cifar-100-python")):
        record = Path(root) / sub / CIFAR_MD5
        if not record.is_file():
            continue
        md5 = json.loads(record.read_text())
        cls.train_list = [[name, md5[name]] for name, _ in cls.train_list]
        cls.test_list = [[name, md5[name]] for name, _ in cls.test_list]
        cls.meta = {**cls.meta, "md5": md5[cls.meta["filename"]]}


def write_cifar102(folder: Path) -> Path:
    """CIFAR-10.2's ``cifar102_{train,test}.npz`` (``images`` uint8 [N,32,32,3], ``labels``) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, seed in (("train", 7), ("test", 8)):
        images, labels = _images(10, IMAGES_PER_CLASS[split], (32, 32, 3), seed)
        np.savez(folder / f"cifar102_{split}.npz", images=images, labels=labels)
    return folder


def write_image_folder(root: Path, splits: dict[str, int], classes: list[str], side: int = 32,
                       seed: int = 9) -> Path:
    """An ImageFolder tree ``<root>/<split>/<class>/<i>.JPEG`` (``.jpg`` outside ImageNet's ``train``/``val``):
    ``splits[split]`` JPEG images of ``side`` pixels per class."""
    from PIL import Image

    suffix = ".JPEG" if set(splits) <= {"train", "val"} else ".jpg"
    for s, (split, per_class) in enumerate(splits.items()):
        images, labels = _images(len(classes), per_class, (side, side, 3), seed + s)
        count: dict[int, int] = {}
        for image, label in zip(images, labels):
            folder = root / split / classes[label]
            folder.mkdir(parents=True, exist_ok=True)
            count[label] = count.get(label, 0) + 1
            Image.fromarray(image).save(folder / f"{count[label]:04d}{suffix}", quality=90)
    return root


# ----------------------------------------------------------------------------- Hugging Face datasets folders


def _save(dd, folder: Path) -> Path:
    import datasets

    folder.parent.mkdir(parents=True, exist_ok=True)
    datasets.disable_progress_bars()
    dd.save_to_disk(str(folder))
    return folder


def write_glue(folder: Path, task: str, n: int = 160) -> Path:
    """``datasets.save_to_disk`` folder of GLUE ``task`` (``"sst2"``: single sentences of two classes; ``"rte"``,
    ``"mrpc"``: sentence pairs of two classes; ``"mnli"``: premise and hypothesis of three, its five splits), the real
    columns and ``ClassLabel`` names."""
    import datasets

    specs = {"sst2": (("sentence",), ["negative", "positive"], ("train", "validation", "test")),
             "rte": (("sentence1", "sentence2"), ["entailment", "not_entailment"], ("train", "validation", "test")),
             "mrpc": (("sentence1", "sentence2"), ["not_equivalent", "equivalent"], ("train", "validation", "test")),
             "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"],
                      ("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched"))}
    if task not in specs:
        raise ValueError(f"no fixture for GLUE task {task!r}; written: {sorted(specs)}")
    cols, names, splits = specs[task]
    features = datasets.Features({**{c: datasets.Value("string") for c in cols},
                                  "label": datasets.ClassLabel(names=names), "idx": datasets.Value("int32")})
    parts = {}
    for i, split in enumerate(splits):
        rng = np.random.default_rng(20 + i)
        labels = [-1] * n if split.startswith("test") else rng.integers(0, len(names), n).tolist()
        texts = {c: sentences(n, 30 + 10 * j + i) for j, c in enumerate(cols)}
        parts[split] = datasets.Dataset.from_dict({**texts, "label": labels, "idx": list(range(n))},
                                                  features=features)
    return _save(datasets.DatasetDict(parts), folder)


def write_hellaswag(folder: Path, n: int = 160) -> Path:
    """HellaSwag's ``save_to_disk`` folder: ``ctx``, four ``endings``, ``label`` a string "0".."3"."""
    import datasets

    parts = {}
    for i, split in enumerate(("train", "validation", "test")):
        rng = np.random.default_rng(50 + i)
        ends = sentences(4 * n, 60 + i, (4, 10))
        parts[split] = datasets.Dataset.from_dict({
            "ind": list(range(n)), "activity_label": ["Fixture"] * n, "ctx_a": sentences(n, 70 + i),
            "ctx_b": [""] * n, "ctx": sentences(n, 70 + i), "endings": [ends[4 * j:4 * j + 4] for j in range(n)],
            "source_id": [f"fixture~{j}" for j in range(n)], "split": [split] * n, "split_type": ["indomain"] * n,
            "label": ["" if split == "test" else str(x) for x in rng.integers(0, 4, n)]})
    return _save(datasets.DatasetDict(parts), folder)


def write_wikitext(folder: Path, n: int = 600) -> Path:
    """WikiText-103 (raw)'s ``save_to_disk`` folder: a ``text`` column of lines, blank lines and `` = Heading = ``
    lines among them as in the real one."""
    import datasets

    parts = {}
    for i, split in enumerate(("train", "validation", "test")):
        lines = []
        for j, s in enumerate(sentences(n, 80 + i, (12, 40))):
            if j % 10 == 0:
                lines += ["", f" = Fixture heading {j} = \n", ""]
            lines.append(f" {s} \n")
        parts[split] = datasets.Dataset.from_dict({"text": lines})
    return _save(datasets.DatasetDict(parts), folder)


# ----------------------------------------------------------------------------- all of them


def _imagenet(cache: Path) -> Path:
    wnids = [f"n{i:08d}" for i in range(1000)]  # 1000 classes, sorted as ImageNet's are
    return write_image_folder(cache / "imagenet", {"train": 2, "val": 1}, wnids, side=24)


def _office31(cache: Path) -> Path:
    for domain in ("amazon", "webcam", "dslr"):
        write_image_folder(cache / "office31" / domain, {"images": 10}, list(OFFICE31_CLASSES), side=48)
    return cache / "office31"


#: every fixture data set: asset name -> its writer into a project cache's layout
WRITERS = {
    "mnist": lambda cache: write_mnist(cache / "torchvision"),
    "cifar10": lambda cache: write_cifar(cache / "torchvision", 10),
    "cifar100": lambda cache: write_cifar(cache / "torchvision", 100),
    "cifar10.2": lambda cache: write_cifar102(cache / "cifar10.2"),
    "imagenet": _imagenet,
    "office31": _office31,
    **{f"glue/{task}": (lambda cache, task=task: write_glue(cache / "hf-datasets" / "glue" / task, task))
       for task in ("sst2", "rte", "mrpc", "mnli")},
    "hellaswag": lambda cache: write_hellaswag(cache / "hf-datasets" / "hellaswag"),
    "wikitext-103": lambda cache: write_wikitext(cache / "hf-datasets" / "wikitext-103"),
}


def write_data(cache: Path, names: list[str] | None = None) -> dict[str, Path]:
    """The fixture data sets ``names`` (default: all of :data:`WRITERS`) below ``cache`` (a project cache's layout:
    ``torchvision/``, ``cifar10.2/``, ``imagenet/``, ``office31/``, ``hf-datasets/``); returns ``{asset: path}``.
    ``ValueError`` for a name without a fixture."""
    names = list(WRITERS) if names is None else list(names)
    unknown = sorted(set(names) - set(WRITERS))
    if unknown:
        raise ValueError(f"no fixture for {unknown}; the fixture data sets are {sorted(WRITERS)}")
    return {name: WRITERS[name](Path(cache)) for name in names}
