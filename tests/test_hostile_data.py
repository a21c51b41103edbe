"""The data loaders and their caches under hostile inputs: bad names, splits and counts, damaged,
unreadable or foreign cache files, a cache folder that cannot be written, a full disk.

Every refusal is one ``ValueError`` line naming the problem (or the documented error: ``DiskFull``,
``AssetNotFoundError``), never a raw ``KeyError`` / ``IndexError`` / ``zipfile.BadZipFile``; no
temporary file is ever left behind. Everything happens in a private cache and private system roots
under ``tmp_path``: the real cache is never touched.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from builders import fake_fmnist

from layersim.core.paths import CacheWarning
from layersim.core.writers import DiskFull
from layersim.inputs import assets, data, text_tasks
from layersim.inputs.assets import AssetNotFoundError

ROOT_USER = os.geteuid() == 0
needs_permissions = pytest.mark.skipif(ROOT_USER, reason="running as root: file permissions do not stop root")


@pytest.fixture
def system(tmp_path, monkeypatch):
    """System copies live only under tmp_path/sys."""
    root = tmp_path / "sys"
    monkeypatch.setattr(assets, "system_roots", lambda: [root])
    return root


@pytest.fixture
def fmnist(tmp_cache, system):
    """A tiny Fashion-MNIST (20 train, 10 test images) as the system copy; the cache is empty."""
    return fake_fmnist(system / "usr/share/datasets/fashion-mnist")


AUSTEN = {key: [f"{key.title()} wrote line {i} of the story today." for i in range(5)] for key in data.AUSTEN_NOVELS}
AUSTEN_LINES = {title: AUSTEN[key] for key, title in data.AUSTEN_NOVELS.items()}


@pytest.fixture
def austen(tmp_cache, tmp_path, monkeypatch):
    """The Austen lines come from a tiny stand-in for the R database; returns the list of parses."""
    parsed, resolve = [], assets.resolve
    monkeypatch.setattr(assets, "resolve", lambda name, allow_download=None: (
        tmp_path if name == "janeaustenr" else resolve(name, allow_download)))
    monkeypatch.setattr(data, "_read_rdb", lambda folder: parsed.append(folder) or AUSTEN)
    return parsed


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


def full_disk(*args, **kwargs):
    """A writer on a full disk: some bytes reach the file, then ENOSPC."""
    target = next((a for a in args if isinstance(a, (str, Path))), None)
    if target is not None:
        Path(target).write_bytes(b"partial")
    raise OSError(errno.ENOSPC, "No space left on device")


def one_line_error(call, match: str, kind=ValueError) -> str:
    with pytest.raises(kind) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    assert re.search(match, msg), f"{match!r} not in {msg!r}"
    return msg


# ----- a full disk: DiskFull naming the file, nothing left behind ----------------------------------


def _fmnist_cache(tmp_cache):
    return tmp_cache / "fashion-mnist" / "train.npz", lambda: data.load_fashion_mnist("train")


def _austen_cache(tmp_cache):
    return tmp_cache / "text" / "janeaustenr.json", data._austen_lines


def _bpe_cache(tmp_cache):
    return tmp_cache / "text" / "austen-bpe-300.json", lambda: data.austen_tokenizer(300)


@pytest.mark.parametrize("cache, fault", [
    (_fmnist_cache, "numpy.savez"),
    (_austen_cache, "pathlib.Path.write_text"),
    (_fmnist_cache, "os.replace"),
    (_austen_cache, "os.replace"),
    (_bpe_cache, "os.replace"),
])
def test_a_full_disk_is_named_and_leaves_no_temporary_file(fmnist, austen, bpe_text, tmp_cache, monkeypatch,
                                                           cache, fault):
    path, load = cache(tmp_cache)
    with monkeypatch.context() as m:
        m.setattr(fault, full_disk)
        one_line_error(load, rf"disk full at {re.escape(str(path))}$", DiskFull)
    assert leftovers(tmp_cache) == [] and not path.exists() and not assets.sha256_record(path).exists()
    load()  # space again: the cache is written, with its sha256
    assert path.is_file() and assets.sha256_record(path).is_file() and leftovers(tmp_cache) == []


def test_a_download_on_a_full_disk_leaves_no_part_file(tmp_cache, monkeypatch):
    import urllib.request

    monkeypatch.setattr(urllib.request, "urlretrieve", lambda url, path: full_disk(path))
    with pytest.raises(AssetNotFoundError, match="download failed: DiskFull: .*disk full at .*cifar102_train.npz"):
        data.load_cifar102("train", allow_download=True)
    assert list((tmp_cache / "cifar10.2").iterdir()) == []


def test_a_model_conversion_on_a_full_disk_leaves_no_half_checkpoint(tmp_cache, monkeypatch):
    import safetensors.torch

    class Saves:
        def __init__(self, name):
            self.name = name

        def save_pretrained(self, folder):
            (Path(folder) / self.name).write_text("{}")

    model = types.SimpleNamespace(config=Saves("config.json"), generation_config=None)
    fake = types.ModuleType("transformers")
    fake.AutoModelForCausalLM = types.SimpleNamespace(from_pretrained=lambda *a, **k: model)
    fake.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: Saves("tokenizer.json"))
    monkeypatch.setitem(sys.modules, "transformers", fake)
    monkeypatch.setattr(safetensors.torch, "save_model", lambda m, path: full_disk(path))
    dest = tmp_cache / "models" / "smollm2-135m"
    one_line_error(lambda: assets.convert_gguf(tmp_cache, "x.gguf", dest), rf"disk full at {re.escape(str(dest))}$",
                   DiskFull)
    assert list((tmp_cache / "models").iterdir()) == []


# ----- one checksum for every derived cache file --------------------------------------------------


def test_an_austen_cache_with_a_flipped_byte_that_still_parses_is_moved_aside_and_rebuilt(austen, tmp_cache):
    assert data._austen_lines() == AUSTEN_LINES and len(austen) == 1
    cached = tmp_cache / "text" / "janeaustenr.json"
    raw = cached.read_bytes()
    damaged = raw.replace(b"Emma wrote line 1", b"Emma wrote lime 1", 1)  # one byte, inside a string
    assert damaged != raw and sum(a != b for a, b in zip(raw, damaged)) == 1
    cached.write_bytes(damaged)
    assert json.loads(damaged)["Emma"][1] == "Emma wrote lime 1 of the story today."  # still parses
    with pytest.warns(CacheWarning, match=rf"broken cache entry {re.escape(str(cached))} \(ValueError: sha256"):
        assert data._austen_lines() == AUSTEN_LINES
    assert len(austen) == 2  # rebuilt from the source
    [aside] = cached.parent.glob("janeaustenr.json.corrupt-*")
    assert aside.read_bytes() == damaged and cached.read_bytes() == raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data._austen_lines() == AUSTEN_LINES and len(austen) == 2


def test_the_record_is_in_sha256sum_format(austen, tmp_cache):
    data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    record = assets.sha256_record(cached)
    assert record.name == "janeaustenr.json.sha256"
    assert record.read_text() == f"{hashlib.sha256(cached.read_bytes()).hexdigest()}  janeaustenr.json\n"


def test_an_entry_of_an_earlier_version_gets_its_sha256_recorded(austen, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(AUSTEN_LINES))  # as written before checksums: no record
    with pytest.warns(CacheWarning, match="had no sha256 .*: recorded it"):
        assert data._austen_lines() == AUSTEN_LINES
    assert austen == [] and assets.sha256_record(cached).is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data._austen_lines() == AUSTEN_LINES and austen == []


def test_a_damaged_entry_of_an_earlier_version_is_moved_aside(austen, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text('{"Emma": ["half a')
    with pytest.warns(CacheWarning, match="JSONDecodeError"):
        assert data._austen_lines() == AUSTEN_LINES
    assert len(austen) == 1 and len(list(cached.parent.glob("*.corrupt-*"))) == 1


def test_an_unreadable_record_counts_as_damage(austen, tmp_cache):
    data._austen_lines()
    assets.sha256_record(tmp_cache / "text" / "janeaustenr.json").write_text("not a checksum\n")
    with pytest.warns(CacheWarning, match="sha256 record .* is unreadable"):
        assert data._austen_lines() == AUSTEN_LINES
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
    assert len(bpe_text) == 1 and assets.sha256_record(path).is_file()
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"<pad>"', b'"<pad_"', 1))  # still a tokenizer file
    with pytest.warns(CacheWarning, match=re.escape(str(path))):
        again = data.austen_tokenizer(300)
    assert len(bpe_text) == 2 and path.read_bytes() == raw
    assert again("Miss Bennet walked")["input_ids"] == tok("Miss Bennet walked")["input_ids"]


def _converted_smollm2(tmp_cache) -> Path:
    import safetensors.numpy

    folder = tmp_cache / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    safetensors.numpy.save_file({"w": np.arange(6, dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def no_smollm2_elsewhere(monkeypatch):
    """The converted SmolLM2 in the cache is the only copy: no package to convert, no hub cache."""
    monkeypatch.setattr(assets, "_smollm2_package", lambda: None)
    monkeypatch.setattr(assets, "_hub_cache_finder", lambda *a, **k: (lambda: None))


def test_the_converted_model_is_checked_on_every_load(tmp_cache, no_smollm2_elsewhere):
    folder = _converted_smollm2(tmp_cache)
    with pytest.warns(CacheWarning, match="had no sha256"):
        assert assets.find_local("smollm2-135m") == folder
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert assets.find_local("smollm2-135m") == folder
    weights = folder / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(raw))
    with pytest.warns(CacheWarning, match=r"smollm2-135m \(ValueError: sha256"):
        assert assets.find_local("smollm2-135m") is None
    [aside] = (tmp_cache / "models").glob("smollm2-135m.corrupt-*")
    assert (aside / "model.safetensors").read_bytes() == bytes(raw)
    with pytest.raises(AssetNotFoundError, match="smollm2-135m"):
        assets.resolve("smollm2-135m")


def test_an_incomplete_converted_model_is_moved_aside(tmp_cache, no_smollm2_elsewhere):
    folder = _converted_smollm2(tmp_cache)
    (folder / "model.safetensors").unlink()
    with pytest.warns(CacheWarning, match="incomplete: no model.safetensors"):
        assert assets.find_local("smollm2-135m") is None
    assert not folder.exists()


# ----- counts: refused when the split cannot give them, or when they are too small -------------------


def test_a_count_beyond_the_split_names_the_count_the_data_set_and_its_size(fmnist):
    one_line_error(lambda: data.image_dataset("fashion-mnist", "test", limit=100000),
                   r"^limit=100000 is more than the 10 samples of the 'test' split of fashion-mnist; use at most 10")
    one_line_error(lambda: data.image_dataset("digits", "test", limit=361),
                   r"^limit=361 is more than the 360 samples of the 'test' split of digits")
    assert len(data.image_dataset("fashion-mnist", "test", limit=100000, at_most=True)) == 10  # a cap, said so
    assert len(data.image_dataset("fashion-mnist", "test", limit=10)) == 10


@pytest.mark.parametrize("call", [
    lambda n: data.image_dataset("digits", "test", limit=n),
    lambda n: data.subset_indices(np.arange(10) % 2, n),
    lambda n: data.text_sample("python-docs", n, split="test"),
    lambda n: text_tasks.load_task("austen-next", "train", n=n),
], ids=["image_dataset", "subset_indices", "text_sample", "load_task"])
@pytest.mark.parametrize("n, problem", [
    (0, r"=0: at least 1 of the \w+ of .* is needed"),
    (-5, r"=-5: at least 1 of the \w+ of .* is needed"),
    (10**9, r"=1000000000 is more than the \d+ \w+|asks for 500000000 examples per class"),
    (2.5, r" must be a whole number of \w+ \(or None for all\), got 2.5"),
    ("100", r" must be a whole number of \w+ \(or None for all\), got '100'"),
    (True, r" must be a whole number of \w+ \(or None for all\), got True"),
], ids=["zero", "negative", "huge", "float", "text", "bool"])
def test_bad_counts_are_one_line_errors(austen, call, n, problem):
    one_line_error(lambda: call(n), problem)


def test_a_paper_task_refuses_more_examples_than_its_split_holds(tmp_cache):
    import datasets

    rte = datasets.DatasetDict({s: datasets.Dataset.from_dict(
        {"sentence1": ["a", "b", "c"], "sentence2": ["x", "y", "z"], "label": [0, 1, 0]}) for s in ("train", "validation")})
    rte.save_to_disk(str(tmp_cache / "hf-datasets" / "glue" / "rte"))
    one_line_error(lambda: text_tasks.load_task("rte", "validation", n=5000),
                   r"^n=5000 is more than the 3 examples of the validation split of rte; use at most 3")
    assert len(text_tasks.load_task("rte", "validation", n=5000, at_most=True)) == 3
    assert len(text_tasks.load_task("rte", "validation", n=2)) == 2


# ----- names and splits -------------------------------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda: data.image_dataset("fashion-mnits"), r"unknown asset 'fashion-mnits'; did you mean 'fashion-mnist'"),
    (lambda: data.load_dataset("imagenet-22k"), r"unknown asset 'imagenet-22k'"),
    (lambda: data.image_dataset("janeaustenr"), r"'janeaustenr' is not an image data set"),
    (lambda: data.load_torchvision("digits"), r"'digits' is not a torchvision data set"),
    (lambda: data.text_sample("fortunes", 3), r"unknown text source 'fortunes'"),
    (lambda: text_tasks.load_task("austen-poems"), r"unknown task 'austen-poems'"),
    (lambda: data.load_hf_text("gpt2"), r"'gpt2' is not a text classification data set"),
    (lambda: data.image_dataset("fashion-mnist", "validation"), r"fashion-mnist: unknown split 'validation'"),
    (lambda: data.load_digits("dev"), r"digits: unknown split 'dev'"),
    (lambda: data.load_cifar102("val"), r"cifar10.2: unknown split 'val'"),
    (lambda: data.text_sample("austen", 3, split="validation"), r"austen: unknown split 'validation'"),
    (lambda: data.load_dataset("janeaustenr", "train"), r"janeaustenr: unknown split 'train'"),
    (lambda: text_tasks.load_task("austen-novel", "test"), r"split must be one of"),
])
def test_unknown_names_and_splits_are_one_line_errors(call, match):
    one_line_error(call, match)


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
    assets.sha256_record(npz).unlink()  # as an earlier version left it: only reading can tell
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
    one_line_error(lambda: data.load_fashion_mnist("test"),
                   rf"^{re.escape(str(gz))}: not a readable gzip file \(EOFError")
    gz.write_bytes(b"no gzip at all")
    one_line_error(lambda: data.load_fashion_mnist("test"), r"not a readable gzip file \(BadGzipFile")


def test_a_damaged_download_is_a_value_error_naming_it(tmp_cache):
    folder = tmp_cache / "cifar10.2"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        (folder / f"cifar102_{split}.npz").write_bytes(b"PK\x03\x04 cut short")
    one_line_error(lambda: data.load_cifar102("test"),
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
        one_line_error(lambda: data.load_fashion_mnist("test"), r"cannot write the cache file .*test.npz")
    finally:
        folder.chmod(0o755)


def test_a_cache_folder_that_refuses_writes_is_named(fmnist, tmp_cache, monkeypatch):
    def refused(path, **arrays):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(np, "savez", refused)
    npz = tmp_cache / "fashion-mnist" / "test.npz"
    one_line_error(lambda: data.load_fashion_mnist("test"),
                   rf"^cannot write the cache file {re.escape(str(npz))}: Permission denied; make "
                   rf"{re.escape(str(npz.parent))} writable, or point LAYERSIM_CACHE at a writable folder$")
    assert list(npz.parent.iterdir()) == []


def test_a_cache_that_cannot_be_created_is_named(tmp_path, monkeypatch, fmnist):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "a-file" / "cache"))
    one_line_error(lambda: data.load_fashion_mnist("test"), r"^cannot create the cache folder 'fashion-mnist'")


def test_a_damaged_entry_that_cannot_be_moved_aside_is_named(austen, tmp_cache, monkeypatch):
    data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.write_text("{}")

    def refused(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied", str(src))

    monkeypatch.setattr(os, "rename", refused)
    one_line_error(data._austen_lines, rf"^cache entry {re.escape(str(cached))} is damaged \(ValueError: sha256 .*\) "
                                       r"and cannot be moved aside: Permission denied")



def test_warnings_turned_into_errors_are_not_taken_for_damage(austen, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(AUSTEN_LINES))  # an earlier version's entry: reading it warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CacheWarning, match="had no sha256"):
            data._austen_lines()
    assert cached.read_text() == json.dumps(AUSTEN_LINES) and not list(cached.parent.glob("*.corrupt-*"))
    assert data._austen_lines() == AUSTEN_LINES and austen == []  # recorded: read without a rebuild
