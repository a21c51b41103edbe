"""Tests of layersim.inputs.data: idx parsing, the offline data sets, subsets, the two halves of a text source, the
Austen BPE tokenizer, paper-scale loaders, augmentation, and the loaders and their caches under hostile inputs.

Offline throughout (LAYERSIM_OFFLINE=1). Tests of provisioned data (Fashion-MNIST, Jane
Austen) skip with a reason when `make assets` has not been run.

Under hostile inputs (bad names, splits and counts, damaged, unreadable or foreign cache files, a cache folder that
cannot be written, a full disk) every refusal is one ``ValueError`` line naming the problem (or the documented
error: ``DiskFull``, ``AssetNotFoundError``), never a raw ``KeyError`` / ``IndexError`` / ``zipfile.BadZipFile``;
no temporary file is ever left behind. Everything happens in a private cache and private system roots under
``tmp_path``: the real cache is never touched.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import re
import struct
import urllib.error
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from layersim.core.paths import CacheWarning
from layersim.core.writers import DiskFull
from layersim.inputs import cache, data, fetch, locate
from layersim.inputs.assets import AssetNotFoundError

from builders import BAD_COUNT_IDS, BAD_COUNTS, fake_fmnist, full_disk, one_line_raised, idx_bytes


ROOT_USER = os.geteuid() == 0
needs_permissions = pytest.mark.skipif(ROOT_USER, reason="running as root: file permissions do not stop root")


@pytest.fixture
def system(tmp_path, monkeypatch):
    """System copies live only under tmp_path/sys."""
    root = tmp_path / "sys"
    monkeypatch.setattr(locate, "system_roots", lambda: [root])
    return root


@pytest.fixture
def fmnist(tmp_cache, system):
    """A tiny Fashion-MNIST (20 train, 10 test images) as the system copy; the cache is empty."""
    return fake_fmnist(system / "usr/share/datasets/fashion-mnist")


SENTENCES = [f"Miss {w} walked to the {v} with her sister and spoke of {u}." for w in ("Bennet", "Woodhouse", "Elliot")
             for v in ("village", "garden", "abbey", "park") for u in ("balls", "letters", "marriage")]


@pytest.fixture
def bpe_text(tmp_cache, monkeypatch):
    """The BPE tokenizer learns from a few sentences (not the novels); returns the training calls."""
    calls = []
    monkeypatch.setattr(data, "text_sample", lambda *a, **k: calls.append(a) or SENTENCES)
    return calls


def leftovers(folder: Path) -> list[str]:
    """Temporary files of interrupted writes anywhere below ``folder``."""
    return sorted(p.name for p in folder.rglob("*") if re.search(r"\.tmp-|\.part-", p.name))


needs_fmnist = pytest.mark.skipif(not locate.is_available("fashion-mnist"),
                                  reason="Fashion-MNIST not provisioned: run `make assets`")
needs_austen = pytest.mark.skipif(not locate.is_available("janeaustenr"),
                                  reason="r-cran-janeaustenr not extracted: run `make assets`")


# ----- idx ----------------------------------------------------------------------------------


def test_read_idx_parses_known_bytes(tmp_path):
    raw = bytes([0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(12))
    (tmp_path / "a-idx3-ubyte").write_bytes(raw)
    with gzip.open(tmp_path / "a-idx3-ubyte.gz", "wb") as fh:
        fh.write(raw)
    expected = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        got = data.read_idx(tmp_path / name)
        assert got.dtype == np.uint8 and np.array_equal(got, expected)


def test_read_idx_big_endian_int32_and_float(tmp_path):
    labels = bytes([0, 0, 0x0C, 1, 0, 0, 0, 3]) + bytes([0, 0, 0, 7, 0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFE])
    assert data.parse_idx(labels).tolist() == [7, 256, -2]
    floats = bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + struct.pack(">f", 1.5)
    assert data.parse_idx(floats).tolist() == [1.5]


@pytest.mark.parametrize("raw,msg", [
    (bytes([1, 0, 8, 1, 0, 0, 0, 1, 5]), "magic"),
    (bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 5]), "magic"),
    (bytes([0, 0, 8, 2, 0, 0, 0, 2]), "header"),
    (bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2]), "needs 3"),
])
def test_parse_idx_rejects_malformed_bytes(raw, msg):
    with pytest.raises(ValueError, match=msg):
        data.parse_idx(raw)


# ----- Fashion-MNIST ------------------------------------------------------------------------


def test_fashion_mnist_loader_parses_a_system_copy_and_caches_npz(tmp_cache, system):
    arrays = fake_fmnist(system / "usr/share/datasets/fashion-mnist")
    x, y = data.load_fashion_mnist("train")
    assert x.dtype == np.uint8 and y.dtype == np.int64 and x.shape == (20, 28, 28)
    assert np.array_equal(x, arrays["train"][0]) and np.array_equal(y, arrays["train"][1])
    assert (tmp_cache / "fashion-mnist" / "train.npz").is_file()
    x2, y2 = data.load_fashion_mnist("train")  # from the .npz now
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert data.load_fashion_mnist("test")[0].shape == (10, 28, 28)


def _flip_100_bytes(path):
    raw = bytearray(path.read_bytes())
    for i in range(len(raw) // 2, len(raw) // 2 + 100):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


CACHE_FAULTS = {
    "garbage": lambda p: p.write_bytes(b"\x93NUMPY garbage" * 50),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "100 flipped bytes": _flip_100_bytes,
}


@pytest.mark.parametrize("fault", list(CACHE_FAULTS))
def test_fashion_mnist_broken_npz_is_moved_aside_and_rebuilt(tmp_cache, system, fault):
    arrays = fake_fmnist(system / "usr/share/datasets/fashion-mnist")
    data.load_fashion_mnist("train")
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    CACHE_FAULTS[fault](npz)
    damaged = npz.read_bytes()
    with pytest.warns(CacheWarning, match=re.escape(str(npz))):
        x, y = data.load_fashion_mnist("train")
    assert np.array_equal(x, arrays["train"][0]) and np.array_equal(y, arrays["train"][1])
    [aside] = npz.parent.glob("train.npz.corrupt-*")
    assert aside.read_bytes() == damaged
    for gz in system.rglob("*.gz"):  # the rebuilt cache is read next time
        gz.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x2, y2 = data.load_fashion_mnist("train")
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_fashion_mnist_missing_everywhere_is_the_clear_error(tmp_cache, system):
    with pytest.raises(AssetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        data.load_fashion_mnist("train")


def test_fashion_mnist_bad_split():
    with pytest.raises(ValueError, match="unknown split 'val'"):
        data.load_fashion_mnist("val")


@needs_fmnist
def test_fashion_mnist_real_shapes_and_label_counts(tmp_cache):
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = data.load_fashion_mnist(split)  # parses the real idx files (cache is empty)
        assert x.shape == (n, 28, 28) and x.dtype == np.uint8
        assert y.shape == (n,) and y.dtype == np.int64
        assert np.array_equal(np.bincount(y), np.full(10, n // 10))
        assert 0.27 < x.mean() / 255 < 0.30


@needs_fmnist
def test_fashion_mnist_image_dataset_smoke_subset():
    ds = data.image_dataset("fashion-mnist", "train", limit=500)
    assert isinstance(ds, torch.utils.data.Dataset) and len(ds) == 500
    x, label = ds[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and isinstance(label, int)
    assert np.array_equal(np.bincount(ds.targets), np.full(10, 50))
    xs, ys = ds.tensors()
    assert abs(xs.mean().item()) < 0.1 and abs(xs.std().item() - 1) < 0.1
    assert ds.classes[9] == "Ankle boot"


# ----- digits, subsets ------------------------------------------------------------------------


def test_digits_splits():
    x, y = data.load_digits()
    assert x.shape == (1797, 8, 8) and x.dtype == np.float32 and x.max() == 16
    xtr, ytr = data.load_digits("train")
    xte, yte = data.load_digits("test")
    assert len(ytr) == 1437 and len(yte) == 360
    assert sorted(np.bincount(yte)) [0] >= 35  # stratified: ~36 per class


def test_subset_indices_deterministic_and_seeded():
    labels = np.repeat(np.arange(10), 100)
    a = data.subset_indices(labels, 50, seed=0)
    b = data.subset_indices(labels, 50, seed=0)
    c = data.subset_indices(labels, 50, seed=1)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(np.bincount(labels[a]), np.full(10, 5))
    assert np.array_equal(data.subset_indices(labels, None), np.arange(1000))
    assert np.array_equal(data.subset_indices(labels, 1000), np.arange(1000))
    flat = data.subset_indices(labels, 50, seed=0, stratified=False)
    assert len(flat) == 50 and not np.array_equal(flat, a)


def test_subset_indices_refuses_counts_the_labels_cannot_give():
    """A count beyond the split was quietly cut to its size (a run recorded 100000 test images and
    measured 10000); it is refused, naming the count, the data and its size, unless it is a cap."""
    labels = np.repeat(np.arange(10), 100)
    with pytest.raises(ValueError, match=r"^limit=5000 is more than the 1000 samples of fashion-mnist's 'test' "
                                         r"split; use at most 1000"):
        data.subset_indices(labels, 5000, what="fashion-mnist's 'test' split")
    assert np.array_equal(data.subset_indices(labels, 5000, at_most=True), np.arange(1000))
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"^limit={bad}: at least 1 of the samples .* is needed"):
            data.subset_indices(labels, bad)
    for bad in (2.5, True, "10"):
        with pytest.raises(ValueError, match="limit must be a whole number of samples"):
            data.subset_indices(labels, bad)
    assert len(data.subset_indices(labels, np.int64(30))) == 30


#: ten samples of three classes, for draws worked out by hand
SMALL = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])


def test_class_subset_permutation_draw_is_balanced_relabelled_and_excluding():
    labels = np.repeat(np.arange(5), 20)
    idx, lab = data.class_subset(labels, (3, 1), per_class=6, seed=0)
    assert len(idx) == 12 and np.all(np.diff(idx) > 0)
    assert np.array_equal(np.bincount(lab), [6, 6]) and lab.dtype == np.int64
    assert np.all(labels[idx][lab == 0] == 3) and np.all(labels[idx][lab == 1] == 1)
    idx2, _ = data.class_subset(labels, (3, 1), per_class=6, seed=0, exclude=idx)
    assert not set(idx) & set(idx2)
    all_idx, all_lab = data.class_subset(labels, (4, 0), seed=2)
    assert np.array_equal(all_idx, np.r_[0:20, 80:100]) and np.array_equal(np.bincount(all_lab), [20, 20])
    # by hand: seed 0 permutes the ten samples as below; the first two of class 2 in that order are 2 and 5, of
    # class 0 are 6 and 3 (with 3 excluded: 6 and 9); sorted, each relabelled by its class's place in (2, 0)
    assert np.random.default_rng(0).permutation(10).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    idx, lab = data.class_subset(SMALL, (2, 0), per_class=2, seed=0)
    assert idx.tolist() == [2, 3, 5, 6] and lab.tolist() == [0, 1, 0, 1]
    assert data.class_subset(SMALL, (2, 0), per_class=2, seed=0, exclude=[3])[0].tolist() == [2, 5, 6, 9]
    # one permutation of the whole split: a class's samples depend neither on the other classes asked for, nor on
    # excluded samples of other classes, and a smaller draw is part of a larger one
    r = np.random.default_rng(7)
    shuffled = r.integers(0, 4, size=300)
    others = np.flatnonzero(shuffled == 1)[:30]
    for seed in (0, 3):
        got, lab = data.class_subset(shuffled, (2, 0, 3), per_class=9, seed=seed)
        alone = data.class_subset(shuffled, (0,), per_class=9, seed=seed, exclude=others)[0]
        assert np.array_equal(got[lab == 1], alone)
        assert set(data.class_subset(shuffled, (2, 0, 3), per_class=4, seed=seed)[0]) < set(got)


def test_class_subset_per_class_draw_is_shuffled_and_uniform():
    labels = np.r_[np.zeros(30, int), np.ones(20, int), np.full(10, 2)]
    idx, lab = data.class_subset(labels, [2, 0], 7, seed=3, draw="per_class")
    assert len(idx) == 14 and len(set(idx)) == 14
    assert np.sum(labels[idx] == 2) == 7 and np.sum(labels[idx] == 0) == 7
    assert np.array_equal(lab, (labels[idx] == 0).astype(int))
    assert np.array_equal(idx, data.class_subset(labels, [2, 0], 7, seed=3, draw="per_class")[0])
    assert not np.array_equal(idx, data.class_subset(labels, [2, 0], 7, seed=4, draw="per_class")[0])
    assert len(set(labels[idx[:7]])) == 2  # the order is mixed, not one class after the other
    # by hand: seed 0's generator picks 5 and 8 of class 2 (samples 2, 5, 8), then 3 and 0 of class 0 (samples
    # 0, 3, 6, 9), and shuffles the four
    idx, lab = data.class_subset(SMALL, (2, 0), per_class=2, seed=0, draw="per_class")
    assert idx.tolist() == [5, 0, 3, 8] and lab.tolist() == [0, 1, 1, 0]
    assert not np.array_equal(np.sort(idx), data.class_subset(SMALL, (2, 0), per_class=2, seed=0)[0])
    # without replacement and uniform: over many seeds every sample of a class is drawn equally often
    counts = np.zeros(len(labels))
    for seed in range(400):
        counts[data.class_subset(labels, (1, 2), 5, seed=seed, draw="per_class")[0]] += 1
    np.testing.assert_allclose(counts[labels == 1] / 400, 5 / 20, atol=0.08)
    np.testing.assert_allclose(counts[labels == 2] / 400, 5 / 10, atol=0.1)
    assert counts[labels == 0].sum() == 0
    idx_ex, _ = data.class_subset(labels, [0, 1], 5, seed=0, exclude=np.arange(25), draw="per_class")
    assert np.all(idx_ex >= 25)


@pytest.mark.parametrize("kwargs, message", [
    (dict(classes=(1, 1)), "distinct"),
    (dict(classes=()), "distinct"),
    (dict(classes=(0,), per_class=21), "fewer than the 21"),
    (dict(classes=(0, 2), per_class=11, draw="per_class"), "class 2 has 10 samples"),
    (dict(classes=(0, 1), per_class=0), "positive"),
    (dict(classes=(0, 1), draw="per_class"), "needs per_class"),
    (dict(classes=(0, 1), per_class=2, draw="stratified"), "draw must be"),
])
def test_class_subset_names_what_is_wrong(kwargs, message):
    labels = np.r_[np.zeros(20, int), np.ones(20, int), np.full(10, 2)]
    with pytest.raises(ValueError, match=message):
        data.class_subset(labels, **kwargs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=200), st.integers(1, 250),
       st.integers(0, 2**31))
def test_subset_indices_properties(labels, limit, seed):
    labels = np.asarray(labels)
    n = len(labels)
    if limit > n:
        with pytest.raises(ValueError, match=f"limit={limit} is more than the {n} samples"):
            data.subset_indices(labels, limit, seed=seed)
    idx = data.subset_indices(labels, limit, seed=seed, at_most=True)
    assert len(idx) == min(limit, n) and len(np.unique(idx)) == len(idx)
    assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < n
    if limit < n:  # stratified: each class within one of its proportional share
        for c in np.unique(labels):
            share = limit * np.sum(labels == c) / n
            assert np.floor(share) <= np.sum(labels[idx] == c) <= np.ceil(share)


def test_image_dataset_limit_is_deterministic():
    a = data.image_dataset("digits", "all", limit=100, seed=3)
    b = data.image_dataset("digits", "all", limit=100, seed=3)
    c = data.image_dataset("digits", "all", limit=100, seed=4)
    assert np.array_equal(a.indices, b.indices) and not np.array_equal(a.indices, c.indices)
    assert torch.equal(a[7][0], b[7][0]) and len(a) == 100
    assert a[0][0].shape == (1, 8, 8)


def test_image_dataset_transform_and_normalize_flags():
    raw = data.image_dataset("digits", "test", limit=10, normalize=False)
    x, _ = raw[0]
    assert 0 <= x.min() and x.max() <= 1
    flipped = data.image_dataset("digits", "test", limit=10, normalize=False,
                                 transform=lambda t: t.flip(-1))
    assert torch.equal(flipped[0][0], x.flip(-1))


@pytest.mark.parametrize("call,msg", [
    (lambda: data.image_dataset("nope"), "unknown asset"),
    (lambda: data.image_dataset("gpt2"), "not an image data set"),
    (lambda: data.image_dataset("digits", "validation"), "unknown split"),
    (lambda: data.load_dataset("gpt2"), "is a model"),
    (lambda: data.load_dataset("glue"), "task"),
    (lambda: data.load_glue("sst3"), "unknown GLUE task"),
    (lambda: data.load_glue("mnli", "validation"), "unknown split"),
    (lambda: data.load_wikitext103("dev"), "unknown split"),
    (lambda: data.load_imagenet("test", root="/nonexistent"), "unknown split"),
    (lambda: data.load_torchvision("cifar10", "val"), "unknown split"),
    (lambda: data.load_austen(unit="word"), "unknown split"),
])
def test_clear_value_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


# ----- Jane Austen --------------------------------------------------------------------------


@needs_austen
def test_austen_six_novels_lines_and_sentences(tmp_cache):
    lines = data.load_austen()  # parses the R database (cache is empty)
    assert list(lines.columns) == ["novel", "index", "text"]
    assert list(lines["novel"].cat.categories) == list(data.AUSTEN_NOVELS.values())
    counts = lines["novel"].value_counts()
    assert len(counts) == 6 and counts.min() > 6000
    assert len(data.load_austen(drop_empty=False)) == 73422
    assert lines["text"].str.strip().ne("").all()
    assert (tmp_cache / "text" / "janeaustenr.json").is_file()
    sentences = data.load_dataset("austen", unit="sentence")
    assert sentences["novel"].nunique() == 6 and 25000 < len(sentences) < 40000
    assert not sentences["text"].str.endswith("Mr.").any()


@pytest.mark.parametrize("fault", ["garbage", "truncated", "empty", "wrong content"])
def test_austen_broken_json_cache_is_moved_aside_and_rebuilt(tmp_cache, tmp_path, monkeypatch, fault):
    fake = {key: [f"{key} line {i}" for i in range(3)] for key in data.AUSTEN_NOVELS}
    parsed = []
    monkeypatch.setattr(fetch, "resolve", lambda name, allow_download=None: tmp_path)
    monkeypatch.setattr(data, "_read_rdb", lambda folder: parsed.append(folder) or fake)
    expected = {title: fake[key] for key, title in data.AUSTEN_NOVELS.items()}
    assert data._austen_lines() == expected and len(parsed) == 1
    cached = tmp_cache / "text" / "janeaustenr.json"
    if fault == "wrong content":
        cached.write_text('{"Emma": []}')
    else:
        CACHE_FAULTS[fault](cached)
    damaged = cached.read_bytes()
    with pytest.warns(CacheWarning, match=re.escape(str(cached))):
        assert data._austen_lines() == expected
    assert len(parsed) == 2
    [aside] = cached.parent.glob("janeaustenr.json.corrupt-*")
    assert aside.read_bytes() == damaged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data._austen_lines() == expected and len(parsed) == 2  # from the rebuilt cache


def test_austen_missing_is_the_clear_error(tmp_cache, system):
    with pytest.raises(AssetNotFoundError, match="apt-get download r-cran-janeaustenr"):
        data.load_austen()


def test_sentence_splitter():
    lines = ["Mr. Darcy came. \"Why?\" said she;", "then _Mrs._ Bennet left.", "",
             "A new one!\" Yes."]
    assert data._sentences(lines) == ["Mr. Darcy came.", "\"Why?\" said she; then _Mrs._ Bennet left.",
                                      "A new one!\"", "Yes."]


@pytest.fixture(scope="module")
def tok():
    return data.austen_tokenizer(512)


def test_austen_tokenizer_round_trips_and_pads_with_id_0(tok):
    text = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    assert tok.decode(tok(text)["input_ids"]) == text and len(tok) == 512 and tok.pad_token_id == 0
    with pytest.raises(ValueError, match="vocab_size"):
        data.austen_tokenizer(100)


def test_text_halves_are_disjoint():
    test, train = (data.text_sample("python-docs", 300, seed=1, split=s) for s in ("test", "train"))
    assert len(test) == len(train) == 300 and not set(test) & set(train)
    assert data.text_sample("python-docs", 300, seed=1, split="test") == test  # deterministic
    with pytest.raises(ValueError, match="half"):
        data.text_sample("python-docs", 10**6, split="train")
    with pytest.raises(ValueError, match="unknown text source"):
        data.text_sample("fortunes", 3)


# ----- paper-scale loaders, exercised offline --------------------------------------------------


def test_cifar_offline_is_the_clear_error(tmp_cache):
    with pytest.raises(AssetNotFoundError, match="cifar10") as info:
        data.image_dataset("cifar10", "train", limit=10)
    assert str(tmp_cache / "torchvision") in str(info.value)


def test_cifar_failed_download_is_the_clear_error(tmp_cache, monkeypatch):
    import torchvision.datasets.cifar as cifar

    def refuse(*a, **k):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(cifar, "download_and_extract_archive", refuse)
    with pytest.raises(AssetNotFoundError, match="download failed.*no network"):
        data.load_torchvision("cifar100", "test", allow_download=True)


def test_mnist_through_torchvision_from_a_local_root(tmp_cache):
    raw = tmp_cache / "torchvision" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for prefix, n in (("train", 30), ("t10k", 10)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(x, 0x08))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(y, 0x08))
    ds = data.image_dataset("mnist", "train", limit=10, seed=0)
    assert len(ds) == 10 and np.array_equal(np.bincount(ds.targets), np.ones(10))
    x, label = ds[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32


def test_imagenet_image_folder(tmp_path, monkeypatch):
    from PIL import Image

    for split in ("train", "val"):
        for cls in ("n01", "n02"):
            folder = tmp_path / "imnet" / split / cls
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (300, 260), (i * 100, 50, 200)).save(folder / f"{i}.JPEG")
    ds = data.image_dataset("imagenet", "val", root=tmp_path / "imnet")
    x, label = ds[3]
    assert x.shape == (3, 224, 224) and label == 1 and ds.classes == ["n01", "n02"]
    monkeypatch.setenv("LAYERSIM_IMAGENET", str(tmp_path / "imnet"))
    assert len(data.load_imagenet("train")) == 4


def test_glue_and_wikitext_from_the_project_cache(tmp_cache):
    import datasets

    sst2 = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"sentence": ["good", "bad"], "label": [1, 0]}),
        "validation": datasets.Dataset.from_dict({"sentence": ["ok"], "label": [1]}),
        "test": datasets.Dataset.from_dict({"sentence": ["?"], "label": [-1]}),
    })
    sst2.save_to_disk(str(tmp_cache / "hf-datasets" / "glue" / "sst2"))
    train = data.load_dataset("glue/sst2", "train")
    assert train["sentence"] == ["good", "bad"]
    assert len(data.load_glue("SST-2", "validation")) == 1
    wiki = datasets.DatasetDict({s: datasets.Dataset.from_dict({"text": [f"= {s} ="]})
                                 for s in ("train", "validation", "test")})
    wiki.save_to_disk(str(tmp_cache / "hf-datasets" / "wikitext-103"))
    assert data.load_dataset("wikitext-103", "test")["text"] == ["= test ="]


def test_glue_offline_is_the_clear_error(tmp_cache):
    with pytest.raises(AssetNotFoundError) as info:
        data.load_glue("rte", "train")
    text = str(info.value)
    assert "glue/rte" in text and str(tmp_cache / "hf-datasets" / "glue" / "rte") in text
    assert "nyu-mll/glue" in text


def test_dataset_info_needs_no_data():
    assert data.dataset_info("fashion_mnist") == {"name": "fashion-mnist", "channels": 1, "classes": 10,
                                                  "image_size": 28}
    assert data.dataset_info("cifar100")["classes"] == 100 and data.dataset_info("cifar10")["channels"] == 3
    with pytest.raises(ValueError, match="not an image data set"):
        data.dataset_info("glue/sst2")


def test_augmentation_changes_images_but_keeps_shape():
    import torch

    torch.manual_seed(0)
    x = torch.rand(1, 28, 28)
    aug = data.train_augmentation(28)
    outs = [aug(x) for _ in range(4)]
    assert all(o.shape == x.shape for o in outs)
    assert any(not torch.equal(o, x) for o in outs)


def test_cifar102_from_the_project_cache_is_normalised_like_cifar10(tmp_cache):
    folder = tmp_cache / "cifar10.2"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("test", 10)):
        np.savez(folder / f"cifar102_{split}.npz", images=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 labels=np.arange(n) % 10)
    ds = data.image_dataset("cifar-10.2", "test")
    assert len(ds) == 10 and ds.classes[0] == "airplane"
    x, label = ds[3]
    raw = np.load(folder / "cifar102_test.npz")["images"][3]
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])
    np.testing.assert_allclose(x.numpy(), ((raw / 255.0 - mean) / std).transpose(2, 0, 1), atol=1e-5)
    assert label == 3


def test_cifar102_download_writes_whole_files_only(tmp_cache, monkeypatch):
    import urllib.request

    calls = []

    def fake(url, path):
        calls.append(url)
        if url.endswith("test.npz"):
            raise urllib.error.URLError("no network in tests")
        np.savez(open(path, "wb"), images=np.zeros((1, 32, 32, 3), np.uint8), labels=np.zeros(1, int))

    monkeypatch.setattr(urllib.request, "urlretrieve", fake)
    with pytest.raises(AssetNotFoundError, match="download failed.*no network"):
        data.load_cifar102("test", allow_download=True)
    assert calls[0].startswith("https://github.com/modestyachts/cifar-10.2/")
    assert sorted(p.name for p in (tmp_cache / "cifar10.2").iterdir()) == ["cifar102_train.npz"]


def test_as_model_input_resizes_converts_and_normalises():
    digits, _ = data.image_dataset("digits", "test", limit=5, normalize=False).tensors()
    x = data.as_model_input(digits, "fashion-mnist")
    assert x.shape == (5, 1, 28, 28)
    np.testing.assert_allclose(x.mean().item() * 0.3530 + 0.2860, digits.mean().item(), atol=0.02)
    rgb = data.as_model_input(digits, "cifar10")
    assert rgb.shape == (5, 3, 32, 32)
    # the same grey image in every channel, each normalised with its channel's statistics
    grey = rgb * torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1) + torch.tensor(
        [0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    torch.testing.assert_close(grey[:, 0], grey[:, 2], atol=1e-5, rtol=0)
    back = data.as_model_input(torch.rand(2, 3, 28, 28), "fashion-mnist")
    assert back.shape == (2, 1, 28, 28)
    with pytest.raises(ValueError, match="1 or 3"):
        data.as_model_input(torch.rand(2, 2, 8, 8), "fashion-mnist")


def test_augmentation_per_image_is_a_seeded_crop_flip_and_rotation():
    """``aug(x)`` draws from torch's global generator (the same seed, the same images: committed CPU results do not
    move) and is a crop of the image padded with 1/8 of its side of zeros, a horizontal flip with probability 0.5
    and a rotation within 15 degrees."""
    import torch
    from torchvision.transforms import functional as TF

    x = torch.rand(1, 28, 28) + 0.5  # no zeros inside the image
    torch.manual_seed(5)
    a = [data.train_augmentation(28)(x) for _ in range(5)]
    torch.manual_seed(5)
    b = [data.train_augmentation(28)(x) for _ in range(5)]
    assert all(torch.equal(p, q) for p, q in zip(a, b)) and not torch.equal(a[0], a[1])
    # not rotated: every image is one of the 7 x 7 crops of the image padded by 3, or its mirror image
    padded = torch.nn.functional.pad(x, (3, 3, 3, 3))
    crops = {(i, j): padded[:, i:i + 28, j:j + 28] for i in range(7) for j in range(7)}
    candidates = {**{(i, j, False): c for (i, j), c in crops.items()},
                  **{(i, j, True): c.flip(-1) for (i, j), c in crops.items()}}
    torch.manual_seed(0)
    seen = []
    for _ in range(300):
        out = data.Augmentation(28, degrees=0)(x)
        which = [key for key, c in candidates.items() if torch.equal(out, c)]
        assert len(which) == 1, "not a crop of the image padded by 3 or its mirror image"
        seen += which
    assert len(set(seen)) > 60 and 0.4 < np.mean([flip for *_, flip in seen]) < 0.6
    # rotated only: a white image loses at most the corners that a turn by 15 degrees uncovers
    ones = torch.ones(1, 28, 28)
    lost = [(data.Augmentation(28, flip=False, padding=0)(ones) == 0).float().mean().item() for _ in range(300)]
    corners = {d: (TF.rotate(ones, d) == 0).float().mean().item() for d in (10, 15)}
    assert corners[10] < max(lost) <= corners[15]


def test_transform_batch_shift_flip_and_rotation_against_plain_tensor_ops():
    import torch

    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6) + 1
    zero = torch.zeros(2)
    same = data.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool), zero)
    assert torch.equal(same, x)
    # a shift by (1, -2): output (u, v) = input (u + 1, v - 2), zeros where that is outside
    shifted = data.transform_batch(x, torch.tensor([[1, -2], [0, 0]]), torch.zeros(2, dtype=torch.bool), zero)
    ref = torch.zeros_like(x[0])
    ref[:, :5, 2:] = x[0, :, 1:, :4]
    assert torch.equal(shifted[0], ref) and torch.equal(shifted[1], x[1])
    flipped = data.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.tensor([True, False]), zero)
    assert torch.equal(flipped[0], x[0].flip(-1)) and torch.equal(flipped[1], x[1])
    # a quarter turn is exact with nearest sampling; +90 and -90 degrees are half a turn apart
    turned = data.transform_batch(x, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.bool),
                                  torch.tensor([90.0, -90.0]))
    assert torch.equal(turned[0], x[0].rot90(1, (1, 2))) or torch.equal(turned[0], x[0].rot90(-1, (1, 2)))
    x1 = x[1].rot90(1, (1, 2)) if torch.equal(turned[0], x[0].rot90(1, (1, 2))) else x[1].rot90(-1, (1, 2))
    assert torch.equal(turned[1].rot90(2, (1, 2)), x1)


def test_batch_augmentation_draws_like_the_per_image_one():
    import torch

    aug = data.Augmentation(28)
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
    plain = data.Augmentation(28, degrees=0, padding=0).batch(ramp, generator=torch.Generator().manual_seed(1))
    mirrored = (plain[:, 0, 14, 0] > plain[:, 0, 14, -1]).float().mean().item()
    assert 0.45 < mirrored < 0.55
    assert not data.Augmentation(28, flip=False, degrees=0, padding=0).batch(ramp).ne(ramp).any()
    with pytest.raises(ValueError, match="expected a batch"):
        aug.batch(torch.rand(2, 1, 32, 32))


def test_image_dataset_defers_its_augmentation_on_request():
    import torch

    ds = data.image_dataset("digits", "train", limit=20, augment=True)
    assert isinstance(ds.augment, data.Augmentation) and not ds.augment.flip
    torch.manual_seed(0)
    a = ds[3][0]
    ds.defer_augment = True
    raw = ds[3][0]
    ds.defer_augment = False
    plain = data.image_dataset("digits", "train", limit=20)[3][0]
    assert torch.equal(raw, plain) and not torch.equal(a, plain)


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
    got = data.transform_batch(img[None], torch.tensor([[i - 3, j - 3]]), torch.tensor([flip]), torch.tensor([angle]))[0]
    assert torch.equal(got, ref)


# ----- a full disk: DiskFull naming the file, nothing left behind ----------------------------------


def _fmnist_cache(tmp_cache):
    return tmp_cache / "fashion-mnist" / "train.npz", lambda: data.load_fashion_mnist("train")


def _austen_cache(tmp_cache):
    return tmp_cache / "text" / "janeaustenr.json", data._austen_lines


def _bpe_cache(tmp_cache):
    return tmp_cache / "text" / "austen-bpe-300.json", lambda: data.austen_tokenizer(300)


@pytest.mark.parametrize("entry, fault", [
    (_fmnist_cache, "numpy.savez"),
    (_austen_cache, "pathlib.Path.write_text"),
    (_fmnist_cache, "os.replace"),
    (_austen_cache, "os.replace"),
    (_bpe_cache, "os.replace"),
])
def test_a_full_disk_is_named_and_leaves_no_temporary_file(fmnist, austen, bpe_text, tmp_cache, monkeypatch,
                                                           entry, fault):
    path, load = entry(tmp_cache)
    with monkeypatch.context() as m:
        m.setattr(fault, full_disk)
        one_line_raised(load, rf"disk full at {re.escape(str(path))}$", DiskFull)
    assert leftovers(tmp_cache) == [] and not path.exists() and not cache.sha256_record(path).exists()
    load()  # space again: the cache is written, with its sha256
    assert path.is_file() and cache.sha256_record(path).is_file() and leftovers(tmp_cache) == []


def test_a_download_on_a_full_disk_leaves_no_part_file(tmp_cache, monkeypatch):
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlretrieve", lambda url, path: full_disk(path))
    with pytest.raises(AssetNotFoundError, match="download failed: DiskFull: .*disk full at .*cifar102_train.npz"):
        data.load_cifar102("train", allow_download=True)
    assert list((tmp_cache / "cifar10.2").iterdir()) == []


# ----- one checksum for every derived cache file --------------------------------------------------


def test_an_austen_cache_with_a_flipped_byte_that_still_parses_is_moved_aside_and_rebuilt(austen, austen_lines,
                                                                                         tmp_cache):
    assert data._austen_lines() == austen_lines and len(austen) == 1
    cached = tmp_cache / "text" / "janeaustenr.json"
    raw = cached.read_bytes()
    damaged = raw.replace(b"Emma wrote line 1", b"Emma wrote lime 1", 1)  # one byte, inside a string
    assert damaged != raw and sum(a != b for a, b in zip(raw, damaged)) == 1
    cached.write_bytes(damaged)
    assert json.loads(damaged)["Emma"][1] == "Emma wrote lime 1 of the story today."  # still parses
    with pytest.warns(CacheWarning, match=rf"broken cache entry {re.escape(str(cached))} \(ValueError: sha256"):
        assert data._austen_lines() == austen_lines
    assert len(austen) == 2  # rebuilt from the source
    [aside] = cached.parent.glob("janeaustenr.json.corrupt-*")
    assert aside.read_bytes() == damaged and cached.read_bytes() == raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data._austen_lines() == austen_lines and len(austen) == 2


def test_the_record_is_in_sha256sum_format(austen, tmp_cache):
    data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    record = cache.sha256_record(cached)
    assert record.name == "janeaustenr.json.sha256"
    assert record.read_text() == f"{hashlib.sha256(cached.read_bytes()).hexdigest()}  janeaustenr.json\n"


def test_an_entry_of_an_earlier_version_gets_its_sha256_recorded(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(austen_lines))  # as written before checksums: no record
    with pytest.warns(CacheWarning, match="had no sha256 .*: recorded it"):
        assert data._austen_lines() == austen_lines
    assert austen == [] and cache.sha256_record(cached).is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data._austen_lines() == austen_lines and austen == []


def test_a_damaged_entry_of_an_earlier_version_is_moved_aside(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text('{"Emma": ["half a')
    with pytest.warns(CacheWarning, match="JSONDecodeError"):
        assert data._austen_lines() == austen_lines
    assert len(austen) == 1 and len(list(cached.parent.glob("*.corrupt-*"))) == 1


def test_an_unreadable_record_counts_as_damage(austen, austen_lines, tmp_cache):
    data._austen_lines()
    cache.sha256_record(tmp_cache / "text" / "janeaustenr.json").write_text("not a checksum\n")
    with pytest.warns(CacheWarning, match="sha256 record .* is unreadable"):
        assert data._austen_lines() == austen_lines
    assert len(austen) == 2


def test_a_valid_npz_of_other_arrays_is_caught_by_its_checksum(fmnist, tmp_cache):
    x, y = data.load_fashion_mnist("train")
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    np.savez(npz, images=x[::-1].copy(), labels=y[::-1].copy())  # a whole, valid file, but not the data
    with pytest.warns(CacheWarning, match="sha256"):
        x2, y2 = data.load_fashion_mnist("train")
    assert np.array_equal(x2, x) and np.array_equal(y2, y)


def test_the_tokenizer_cache_is_checked_too(bpe_text, tmp_cache):
    tok = data.austen_tokenizer(300)
    path = tmp_cache / "text" / "austen-bpe-300.json"
    assert len(bpe_text) == 1 and cache.sha256_record(path).is_file()
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"<pad>"', b'"<pad_"', 1))  # still a tokenizer file
    with pytest.warns(CacheWarning, match=re.escape(str(path))):
        again = data.austen_tokenizer(300)
    assert len(bpe_text) == 2 and path.read_bytes() == raw
    assert again("Miss Bennet walked")["input_ids"] == tok("Miss Bennet walked")["input_ids"]


# ----- counts: refused when the split cannot give them, or when they are too small -------------------


def test_a_count_beyond_the_split_names_the_count_the_data_set_and_its_size(fmnist):
    one_line_raised(lambda: data.image_dataset("fashion-mnist", "test", limit=100000),
                   r"^limit=100000 is more than the 10 samples of the 'test' split of fashion-mnist; use at most 10")
    one_line_raised(lambda: data.image_dataset("digits", "test", limit=361),
                   r"^limit=361 is more than the 360 samples of the 'test' split of digits")
    assert len(data.image_dataset("fashion-mnist", "test", limit=100000, at_most=True)) == 10  # a cap, said so
    assert len(data.image_dataset("fashion-mnist", "test", limit=10)) == 10


@pytest.mark.parametrize("call", [
    lambda n: data.image_dataset("digits", "test", limit=n),
    lambda n: data.subset_indices(np.arange(10) % 2, n),
    lambda n: data.text_sample("python-docs", n, split="test"),
], ids=["image_dataset", "subset_indices", "text_sample"])
@pytest.mark.parametrize("n, problem", BAD_COUNTS, ids=BAD_COUNT_IDS)
def test_bad_counts_are_one_line_errors(austen, call, n, problem):
    one_line_raised(lambda: call(n), problem)


# ----- names and splits -------------------------------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda: data.image_dataset("fashion-mnits"), r"unknown asset 'fashion-mnits'; did you mean 'fashion-mnist'"),
    (lambda: data.load_dataset("imagenet-22k"), r"unknown asset 'imagenet-22k'"),
    (lambda: data.image_dataset("janeaustenr"), r"'janeaustenr' is not an image data set"),
    (lambda: data.load_torchvision("digits"), r"'digits' is not a torchvision data set"),
    (lambda: data.text_sample("fortunes", 3), r"unknown text source 'fortunes'"),
    (lambda: data.load_hf_text("gpt2"), r"'gpt2' is not a text classification data set"),
    (lambda: data.image_dataset("fashion-mnist", "validation"), r"fashion-mnist: unknown split 'validation'"),
    (lambda: data.load_digits("dev"), r"digits: unknown split 'dev'"),
    (lambda: data.load_cifar102("val"), r"cifar10.2: unknown split 'val'"),
    (lambda: data.text_sample("austen", 3, split="validation"), r"austen: unknown split 'validation'"),
    (lambda: data.load_dataset("janeaustenr", "train"), r"janeaustenr: unknown split 'train'"),
])
def test_unknown_names_and_splits_are_one_line_errors(call, match):
    one_line_raised(call, match)


# ----- damaged, missing, unreadable and unwritable cache files ---------------------------------


def _savez_without_labels(npz):
    np.savez(npz, images=np.zeros((2, 28, 28), np.uint8))


def _savez_object_array(npz):
    np.savez(npz, images=np.array([None, 1], dtype=object), labels=np.zeros(2))


NPZ_FAULTS = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:200]),
    "not a zip": lambda p: p.write_bytes(b"PK\x03\x04 but nothing after"),
    "empty": lambda p: p.write_bytes(b""),
    "no labels array": _savez_without_labels,
    "pickled objects": _savez_object_array,
    "a folder": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("fault", list(NPZ_FAULTS))
def test_a_damaged_npz_of_any_kind_is_moved_aside_and_rebuilt(fmnist, tmp_cache, fault):
    data.load_fashion_mnist("test")
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    cache.sha256_record(npz).unlink()  # as an earlier version left it: only reading can tell
    NPZ_FAULTS[fault](npz)
    with pytest.warns(CacheWarning, match=re.escape(str(npz))):
        x, y = data.load_fashion_mnist("test")
    assert np.array_equal(x, fmnist["t10k"][0]) and np.array_equal(y, fmnist["t10k"][1])
    assert len(list(npz.parent.glob("test.npz.corrupt-*"))) == 1 and leftovers(tmp_cache) == []


def test_a_missing_cache_file_is_built_and_missing_data_is_the_documented_error(fmnist, tmp_cache, system):
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    data.load_fashion_mnist("train")
    npz.unlink()  # deleted by hand, its record left behind
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(data.load_fashion_mnist("train")[0]) == 20
    for gz in system.rglob("*.gz"):
        gz.unlink()
    with pytest.raises(AssetNotFoundError, match="asset 'fashion-mnist' not found"):
        data.load_fashion_mnist("test")


def test_a_damaged_source_file_is_a_value_error_naming_it(fmnist, system):
    gz = next(system.rglob("t10k-images-idx3-ubyte.gz"))
    gz.write_bytes(gz.read_bytes()[:40])
    one_line_raised(lambda: data.load_fashion_mnist("test"),
                   rf"^{re.escape(str(gz))}: not a readable gzip file \(EOFError")
    gz.write_bytes(b"no gzip at all")
    one_line_raised(lambda: data.load_fashion_mnist("test"), r"not a readable gzip file \(BadGzipFile")


def test_a_damaged_download_is_a_value_error_naming_it(tmp_cache):
    folder = tmp_cache / "cifar10.2"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        (folder / f"cifar102_{split}.npz").write_bytes(b"PK\x03\x04 cut short")
    one_line_raised(lambda: data.load_cifar102("test"),
                   r"cifar102_test.npz: not a readable CIFAR-10.2 file .*\(BadZipFile: .*\); delete it")


@needs_permissions
def test_an_unreadable_cache_file_is_moved_aside_and_rebuilt(fmnist, tmp_cache):
    data.load_fashion_mnist("test")
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    npz.chmod(0)
    with pytest.warns(CacheWarning, match="PermissionError"):
        assert len(data.load_fashion_mnist("test")[0]) == 10


@needs_permissions
def test_a_read_only_cache_folder_is_named(fmnist, tmp_cache):
    folder = tmp_cache / "fashion-mnist"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        one_line_raised(lambda: data.load_fashion_mnist("test"), r"cannot write the cache file .*test.npz")
    finally:
        folder.chmod(0o755)


def test_a_cache_folder_that_refuses_writes_is_named(fmnist, tmp_cache, monkeypatch):
    def refused(path, **arrays):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(np, "savez", refused)
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    one_line_raised(lambda: data.load_fashion_mnist("test"),
                   rf"^cannot write the cache file {re.escape(str(npz))}: Permission denied; make "
                   rf"{re.escape(str(npz.parent))} writable, or point LAYERSIM_CACHE at a writable folder$")
    assert list(npz.parent.iterdir()) == []


def test_a_cache_that_cannot_be_created_is_named(tmp_path, monkeypatch, fmnist):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "a-file" / "cache"))
    one_line_raised(lambda: data.load_fashion_mnist("test"), r"^cannot create the cache folder 'fashion-mnist'")


def test_a_damaged_entry_that_cannot_be_moved_aside_is_named(austen, tmp_cache, monkeypatch):
    data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.write_text("{}")

    def refused(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied", str(src))

    monkeypatch.setattr(os, "rename", refused)
    one_line_raised(data._austen_lines, rf"^cache entry {re.escape(str(cached))} is damaged \(ValueError: sha256 .*\) "
                                       r"and cannot be moved aside: Permission denied")


def test_warnings_turned_into_errors_are_not_taken_for_damage(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(austen_lines))  # an earlier version's entry: reading it warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CacheWarning, match="had no sha256"):
            data._austen_lines()
    assert cached.read_text() == json.dumps(austen_lines) and not list(cached.parent.glob("*.corrupt-*"))
    assert data._austen_lines() == austen_lines and austen == []  # recorded: read without a rebuild
