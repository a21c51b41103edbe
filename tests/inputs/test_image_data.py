"""Tests of layersim.inputs.image_data: idx parsing, Fashion-MNIST and its cache, digits, the torchvision sets,
CIFAR-10.2 and ImageNet offline, the uniform image Dataset (subsets, flags, deferred augmentation), sizes without
loading, images prepared for another set's model, and the image loaders and their caches under hostile inputs.

Offline throughout (LAYERSIM_OFFLINE=1); the Fashion-MNIST tests of the real files skip with a reason when `make
assets` has not been run. Every refusal is one ``ValueError`` line naming the problem (or the documented error:
``DiskFull``, ``AssetNotFoundError``); no temporary file is left behind. Everything happens in a private cache
and private system roots under ``tmp_path``.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import struct
import urllib.error
import warnings

import numpy as np
import pytest
import torch

from layersim.core.paths import CacheWarning
from layersim.inputs import cache, image_data, locate
from layersim.inputs.assets import AssetNotFoundError
from layersim.inputs.augment import Augmentation

from builders import (BAD_COUNT_IDS, BAD_COUNTS, CACHE_FAULTS, fake_fmnist, full_disk, full_disk_on_cache, idx_bytes,
                      leftovers, one_line_raised)


ROOT_USER = os.geteuid() == 0
needs_permissions = pytest.mark.skipif(ROOT_USER, reason="running as root: file permissions do not stop root")


@pytest.fixture
def fmnist(tmp_cache, system):
    """A tiny Fashion-MNIST (20 train, 10 test images) as the system copy; the cache is empty."""
    return fake_fmnist(system / "usr/share/datasets/fashion-mnist")


needs_fmnist = pytest.mark.skipif(not locate.is_available("fashion-mnist"),
                                  reason="Fashion-MNIST not provisioned: run `make assets`")


# ----- idx ----------------------------------------------------------------------------------


def test_read_idx_parses_known_bytes(tmp_path):
    raw = bytes([0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(12))
    (tmp_path / "a-idx3-ubyte").write_bytes(raw)
    with gzip.open(tmp_path / "a-idx3-ubyte.gz", "wb") as fh:
        fh.write(raw)
    expected = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        got = image_data.read_idx(tmp_path / name)
        assert got.dtype == np.uint8 and np.array_equal(got, expected)


def test_read_idx_big_endian_int32_and_float(tmp_path):
    labels = bytes([0, 0, 0x0C, 1, 0, 0, 0, 3]) + bytes([0, 0, 0, 7, 0, 0, 1, 0, 0xFF, 0xFF, 0xFF, 0xFE])
    assert image_data.parse_idx(labels).tolist() == [7, 256, -2]
    floats = bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + struct.pack(">f", 1.5)
    assert image_data.parse_idx(floats).tolist() == [1.5]


@pytest.mark.parametrize("raw,msg", [
    (bytes([1, 0, 8, 1, 0, 0, 0, 1, 5]), "magic"),
    (bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 5]), "magic"),
    (bytes([0, 0, 8, 2, 0, 0, 0, 2]), "header"),
    (bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2]), "needs 3"),
])
def test_parse_idx_rejects_malformed_bytes(raw, msg):
    with pytest.raises(ValueError, match=msg):
        image_data.parse_idx(raw)


# ----- Fashion-MNIST ------------------------------------------------------------------------


def test_fashion_mnist_loader_parses_a_system_copy_and_caches_npz(tmp_cache, system):
    arrays = fake_fmnist(system / "usr/share/datasets/fashion-mnist")
    x, y = image_data.load_fashion_mnist("train")
    assert x.dtype == np.uint8 and y.dtype == np.int64 and x.shape == (20, 28, 28)
    assert np.array_equal(x, arrays["train"][0]) and np.array_equal(y, arrays["train"][1])
    assert (tmp_cache / "fashion-mnist" / "train.npz").is_file()
    x2, y2 = image_data.load_fashion_mnist("train")  # from the .npz now
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert image_data.load_fashion_mnist("test")[0].shape == (10, 28, 28)

@pytest.mark.parametrize("fault", list(CACHE_FAULTS))
def test_fashion_mnist_broken_npz_is_moved_aside_and_rebuilt(tmp_cache, system, fault):
    arrays = fake_fmnist(system / "usr/share/datasets/fashion-mnist")
    image_data.load_fashion_mnist("train")
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    CACHE_FAULTS[fault](npz)
    damaged = npz.read_bytes()
    with pytest.warns(CacheWarning, match=re.escape(str(npz))):
        x, y = image_data.load_fashion_mnist("train")
    assert np.array_equal(x, arrays["train"][0]) and np.array_equal(y, arrays["train"][1])
    [aside] = npz.parent.glob("train.npz.corrupt-*")
    assert aside.read_bytes() == damaged
    for gz in system.rglob("*.gz"):  # the rebuilt cache is read next time
        gz.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x2, y2 = image_data.load_fashion_mnist("train")
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_fashion_mnist_missing_everywhere_is_the_clear_error(tmp_cache, system):
    with pytest.raises(AssetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        image_data.load_fashion_mnist("train")


def test_fashion_mnist_bad_split():
    with pytest.raises(ValueError, match="unknown split 'val'"):
        image_data.load_fashion_mnist("val")


@needs_fmnist
def test_fashion_mnist_real_shapes_and_label_counts(tmp_cache):
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = image_data.load_fashion_mnist(split)  # parses the real idx files (cache is empty)
        assert x.shape == (n, 28, 28) and x.dtype == np.uint8
        assert y.shape == (n,) and y.dtype == np.int64
        assert np.array_equal(np.bincount(y), np.full(10, n // 10))
        assert 0.27 < x.mean() / 255 < 0.30


@needs_fmnist
def test_fashion_mnist_image_dataset_smoke_subset():
    ds = image_data.image_dataset("fashion-mnist", "train", limit=500)
    assert isinstance(ds, torch.utils.data.Dataset) and len(ds) == 500
    x, label = ds[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and isinstance(label, int)
    assert np.array_equal(np.bincount(ds.targets), np.full(10, 50))
    xs, ys = ds.tensors()
    assert abs(xs.mean().item()) < 0.1 and abs(xs.std().item() - 1) < 0.1
    assert ds.classes[9] == "Ankle boot"


# ----- digits and the uniform image Dataset -----------------------------------------------------


def test_digits_splits():
    x, y = image_data.load_digits()
    assert x.shape == (1797, 8, 8) and x.dtype == np.float32 and x.max() == 16
    xtr, ytr = image_data.load_digits("train")
    xte, yte = image_data.load_digits("test")
    assert len(ytr) == 1437 and len(yte) == 360
    assert sorted(np.bincount(yte)) [0] >= 35  # stratified: ~36 per class

def test_image_dataset_limit_is_deterministic():
    a = image_data.image_dataset("digits", "all", limit=100, seed=3)
    b = image_data.image_dataset("digits", "all", limit=100, seed=3)
    c = image_data.image_dataset("digits", "all", limit=100, seed=4)
    assert np.array_equal(a.indices, b.indices) and not np.array_equal(a.indices, c.indices)
    assert torch.equal(a[7][0], b[7][0]) and len(a) == 100
    assert a[0][0].shape == (1, 8, 8)


def test_image_dataset_transform_and_normalize_flags():
    raw = image_data.image_dataset("digits", "test", limit=10, normalize=False)
    x, _ = raw[0]
    assert 0 <= x.min() and x.max() <= 1
    flipped = image_data.image_dataset("digits", "test", limit=10, normalize=False,
                                       transform=lambda t: t.flip(-1))
    assert torch.equal(flipped[0][0], x.flip(-1))


@pytest.mark.parametrize("call,msg", [
    (lambda: image_data.image_dataset("nope"), "unknown asset"),
    (lambda: image_data.image_dataset("gpt2"), "not an image data set"),
    (lambda: image_data.image_dataset("digits", "validation"), "unknown split"),
    (lambda: image_data.load_imagenet("test", root="/nonexistent"), "unknown split"),
    (lambda: image_data.load_torchvision("cifar10", "val"), "unknown split"),
])
def test_clear_value_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


# ----- paper-scale loaders, exercised offline --------------------------------------------------


def test_cifar_offline_is_the_clear_error(tmp_cache):
    with pytest.raises(AssetNotFoundError, match="cifar10") as info:
        image_data.image_dataset("cifar10", "train", limit=10)
    assert str(tmp_cache / "torchvision") in str(info.value)


def test_cifar_failed_download_is_the_clear_error(tmp_cache, monkeypatch):
    import torchvision.datasets.cifar as cifar

    def refuse(*a, **k):
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(cifar, "download_and_extract_archive", refuse)
    with pytest.raises(AssetNotFoundError, match="download failed.*no network"):
        image_data.load_torchvision("cifar100", "test", allow_download=True)


def test_mnist_through_torchvision_from_a_local_root(tmp_cache):
    raw = tmp_cache / "torchvision" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for prefix, n in (("train", 30), ("t10k", 10)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(x, 0x08))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(y, 0x08))
    ds = image_data.image_dataset("mnist", "train", limit=10, seed=0)
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
    ds = image_data.image_dataset("imagenet", "val", root=tmp_path / "imnet")
    x, label = ds[3]
    assert x.shape == (3, 224, 224) and label == 1 and ds.classes == ["n01", "n02"]
    monkeypatch.setenv("LAYERSIM_IMAGENET", str(tmp_path / "imnet"))
    assert len(image_data.load_imagenet("train")) == 4


def test_dataset_info_needs_no_data():
    assert image_data.dataset_info("fashion_mnist") == {"name": "fashion-mnist", "channels": 1, "classes": 10,
                                                        "image_size": 28}
    assert image_data.dataset_info("cifar100")["classes"] == 100 and image_data.dataset_info("cifar10")["channels"] == 3
    with pytest.raises(ValueError, match="not an image data set"):
        image_data.dataset_info("glue/sst2")


def test_cifar102_from_the_project_cache_is_normalised_like_cifar10(tmp_cache):
    folder = tmp_cache / "cifar10.2"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("test", 10)):
        np.savez(folder / f"cifar102_{split}.npz", images=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 labels=np.arange(n) % 10)
    ds = image_data.image_dataset("cifar-10.2", "test")
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
        image_data.load_cifar102("test", allow_download=True)
    assert calls[0].startswith("https://github.com/modestyachts/cifar-10.2/")
    assert sorted(p.name for p in (tmp_cache / "cifar10.2").iterdir()) == ["cifar102_train.npz"]


def test_as_model_input_resizes_converts_and_normalises():
    digits, _ = image_data.image_dataset("digits", "test", limit=5, normalize=False).tensors()
    x = image_data.as_model_input(digits, "fashion-mnist")
    assert x.shape == (5, 1, 28, 28)
    np.testing.assert_allclose(x.mean().item() * 0.3530 + 0.2860, digits.mean().item(), atol=0.02)
    rgb = image_data.as_model_input(digits, "cifar10")
    assert rgb.shape == (5, 3, 32, 32)
    # the same grey image in every channel, each normalised with its channel's statistics
    grey = rgb * torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1) + torch.tensor(
        [0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    torch.testing.assert_close(grey[:, 0], grey[:, 2], atol=1e-5, rtol=0)
    back = image_data.as_model_input(torch.rand(2, 3, 28, 28), "fashion-mnist")
    assert back.shape == (2, 1, 28, 28)
    with pytest.raises(ValueError, match="1 or 3"):
        image_data.as_model_input(torch.rand(2, 2, 8, 8), "fashion-mnist")


def test_image_dataset_defers_its_augmentation_on_request():
    import torch

    ds = image_data.image_dataset("digits", "train", limit=20, augment=True)
    assert isinstance(ds.augment, Augmentation) and not ds.augment.flip
    torch.manual_seed(0)
    a = ds[3][0]
    ds.defer_augment = True
    raw = ds[3][0]
    ds.defer_augment = False
    plain = image_data.image_dataset("digits", "train", limit=20)[3][0]
    assert torch.equal(raw, plain) and not torch.equal(a, plain)


# ----- a full disk: DiskFull naming the file, nothing left behind ----------------------------------


@pytest.mark.parametrize("fault", ["numpy.savez", "os.replace"])
def test_a_full_disk_is_named_and_leaves_no_temporary_file(fmnist, tmp_cache, monkeypatch, fault):
    full_disk_on_cache(tmp_cache / "fashion-mnist" / "train.npz", lambda: image_data.load_fashion_mnist("train"),
                       fault, monkeypatch, tmp_cache)


def test_a_download_on_a_full_disk_leaves_no_part_file(tmp_cache, monkeypatch):
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlretrieve", lambda url, path: full_disk(path))
    with pytest.raises(AssetNotFoundError, match="download failed: DiskFull: .*disk full at .*cifar102_train.npz"):
        image_data.load_cifar102("train", allow_download=True)
    assert list((tmp_cache / "cifar10.2").iterdir()) == []


# ----- one checksum for every derived cache file --------------------------------------------------


def test_a_valid_npz_of_other_arrays_is_caught_by_its_checksum(fmnist, tmp_cache):
    x, y = image_data.load_fashion_mnist("train")
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    np.savez(npz, images=x[::-1].copy(), labels=y[::-1].copy())  # a whole, valid file, but not the data
    with pytest.warns(CacheWarning, match="sha256"):
        x2, y2 = image_data.load_fashion_mnist("train")
    assert np.array_equal(x2, x) and np.array_equal(y2, y)


# ----- counts: refused when the split cannot give them, or when they are too small -------------------


def test_a_count_beyond_the_split_names_the_count_the_data_set_and_its_size(fmnist):
    one_line_raised(lambda: image_data.image_dataset("fashion-mnist", "test", limit=100000),
                   r"^limit=100000 is more than the 10 samples of the 'test' split of fashion-mnist; use at most 10")
    one_line_raised(lambda: image_data.image_dataset("digits", "test", limit=361),
                   r"^limit=361 is more than the 360 samples of the 'test' split of digits")
    assert len(image_data.image_dataset("fashion-mnist", "test", limit=100000, at_most=True)) == 10  # a cap, said so
    assert len(image_data.image_dataset("fashion-mnist", "test", limit=10)) == 10


@pytest.mark.parametrize("n, problem", BAD_COUNTS, ids=BAD_COUNT_IDS)
def test_bad_counts_are_one_line_errors(n, problem):
    one_line_raised(lambda: image_data.image_dataset("digits", "test", limit=n), problem)


# ----- names and splits -------------------------------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda: image_data.image_dataset("fashion-mnits"), r"unknown asset 'fashion-mnits'; did you mean 'fashion-mnist'"),
    (lambda: image_data.image_dataset("janeaustenr"), r"'janeaustenr' is not an image data set"),
    (lambda: image_data.load_torchvision("digits"), r"'digits' is not a torchvision data set"),
    (lambda: image_data.image_dataset("fashion-mnist", "validation"), r"fashion-mnist: unknown split 'validation'"),
    (lambda: image_data.load_digits("dev"), r"digits: unknown split 'dev'"),
    (lambda: image_data.load_cifar102("val"), r"cifar10.2: unknown split 'val'"),
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
    image_data.load_fashion_mnist("test")
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    cache.sha256_record(npz).unlink()  # as an earlier version left it: only reading can tell
    NPZ_FAULTS[fault](npz)
    with pytest.warns(CacheWarning, match=re.escape(str(npz))):
        x, y = image_data.load_fashion_mnist("test")
    assert np.array_equal(x, fmnist["t10k"][0]) and np.array_equal(y, fmnist["t10k"][1])
    assert len(list(npz.parent.glob("test.npz.corrupt-*"))) == 1 and leftovers(tmp_cache) == []


def test_a_missing_cache_file_is_built_and_missing_data_is_the_documented_error(fmnist, tmp_cache, system):
    npz = tmp_cache / "fashion-mnist" / "train.npz"
    image_data.load_fashion_mnist("train")
    npz.unlink()  # deleted by hand, its record left behind
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(image_data.load_fashion_mnist("train")[0]) == 20
    for gz in system.rglob("*.gz"):
        gz.unlink()
    with pytest.raises(AssetNotFoundError, match="asset 'fashion-mnist' not found"):
        image_data.load_fashion_mnist("test")


def test_a_damaged_source_file_is_a_value_error_naming_it(fmnist, system):
    gz = next(system.rglob("t10k-images-idx3-ubyte.gz"))
    gz.write_bytes(gz.read_bytes()[:40])
    one_line_raised(lambda: image_data.load_fashion_mnist("test"),
                   rf"^{re.escape(str(gz))}: not a readable gzip file \(EOFError")
    gz.write_bytes(b"no gzip at all")
    one_line_raised(lambda: image_data.load_fashion_mnist("test"), r"not a readable gzip file \(BadGzipFile")


def test_a_damaged_download_is_a_value_error_naming_it(tmp_cache):
    folder = tmp_cache / "cifar10.2"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        (folder / f"cifar102_{split}.npz").write_bytes(b"PK\x03\x04 cut short")
    one_line_raised(lambda: image_data.load_cifar102("test"),
                   r"cifar102_test.npz: not a readable CIFAR-10.2 file .*\(BadZipFile: .*\); delete it")


@needs_permissions
def test_an_unreadable_cache_file_is_moved_aside_and_rebuilt(fmnist, tmp_cache):
    image_data.load_fashion_mnist("test")
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    npz.chmod(0)
    with pytest.warns(CacheWarning, match="PermissionError"):
        assert len(image_data.load_fashion_mnist("test")[0]) == 10


@needs_permissions
def test_a_read_only_cache_folder_is_named(fmnist, tmp_cache):
    folder = tmp_cache / "fashion-mnist"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        one_line_raised(lambda: image_data.load_fashion_mnist("test"), r"cannot write the cache file .*test.npz")
    finally:
        folder.chmod(0o755)


def test_a_cache_folder_that_refuses_writes_is_named(fmnist, tmp_cache, monkeypatch):
    def refused(path, **arrays):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(np, "savez", refused)
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    one_line_raised(lambda: image_data.load_fashion_mnist("test"),
                   rf"^cannot write the cache file {re.escape(str(npz))}: Permission denied; make "
                   rf"{re.escape(str(npz.parent))} writable, or point LAYERSIM_CACHE at a writable folder$")
    assert list(npz.parent.iterdir()) == []


def test_a_cache_that_cannot_be_created_is_named(tmp_path, monkeypatch, fmnist):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "a-file" / "cache"))
    one_line_raised(lambda: image_data.load_fashion_mnist("test"), r"^cannot create the cache folder 'fashion-mnist'")
