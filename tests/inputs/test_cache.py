"""Tests of layersim.inputs.cache: checked cache files (a checksum mismatch is moved aside, never recorded over), the
GGUF conversion on a full disk, and the converted SmolLM2 checked whenever the chain finds it.
"""

from __future__ import annotations

import re
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from layersim.core.paths import CacheWarning
from layersim.core.writers import DiskFull
from layersim.inputs import cache, fetch, locate
from layersim.inputs.assets import AssetNotFoundError

from builders import full_disk, one_line_raised


def test_a_checksum_mismatch_is_never_recorded_over(asset_cache):
    """A cache file that no longer matches its recorded sha256 raises (both checksums named) and is never
    re-recorded as it is: ``cached`` moves it aside with a warning naming it and rebuilds it from its source."""
    import hashlib
    import warnings

    from layersim.core.paths import CacheWarning

    path = asset_cache / "derived" / "values.txt"
    read, write = (lambda p: p.read_text()), (lambda value, tmp: tmp.write_text(value))
    assert cache.cached(path, read, lambda: "built", write) == "built"
    record = cache.sha256_record(path)
    built = record.read_text()
    path.write_text("tampered")  # the content changes, its record stays
    tampered = hashlib.sha256(b"tampered").hexdigest()
    with pytest.raises(ValueError, match=rf"sha256 {tampered[:16]}\.\.\. differs from the recorded {built[:16]}"):
        cache._read_checked(path, read)
    assert record.read_text() == built, "the record of the intact file stays"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.cached(path, read, lambda: "rebuilt", write) == "rebuilt"
    assert any(issubclass(w.category, CacheWarning) and str(path) in str(w.message) and "sha256" in str(w.message)
               for w in caught)
    assert record.read_text().split()[0] == hashlib.sha256(b"rebuilt").hexdigest() != tampered
    assert [p.read_text() for p in path.parent.glob("values.txt.corrupt-*")] == ["tampered"]


def test_a_model_conversion_on_a_full_disk_leaves_no_half_checkpoint(asset_cache, monkeypatch):
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
    dest = asset_cache / "models" / "smollm2-135m"
    one_line_raised(lambda: cache.convert_gguf(asset_cache, "x.gguf", dest), rf"disk full at {re.escape(str(dest))}$",
                   DiskFull)
    assert list((asset_cache / "models").iterdir()) == []


def _converted_smollm2(asset_cache) -> Path:
    import safetensors.numpy

    folder = asset_cache / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    safetensors.numpy.save_file({"w": np.arange(6, dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def no_smollm2_elsewhere(monkeypatch):
    """The converted SmolLM2 in the cache is the only copy: no package to convert, no hub cache."""
    monkeypatch.setattr(locate, "_smollm2_package", lambda: None)
    monkeypatch.setattr(locate, "_hub_cache_finder", lambda *a, **k: (lambda: None))


def test_the_converted_model_is_checked_on_every_load(asset_cache, no_smollm2_elsewhere):
    folder = _converted_smollm2(asset_cache)
    with pytest.warns(CacheWarning, match="had no sha256"):
        assert locate.find_local("smollm2-135m") == folder
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert locate.find_local("smollm2-135m") == folder
    weights = folder / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(raw))
    with pytest.warns(CacheWarning, match=r"smollm2-135m \(ValueError: sha256"):
        assert locate.find_local("smollm2-135m") is None
    [aside] = (asset_cache / "models").glob("smollm2-135m.corrupt-*")
    assert (aside / "model.safetensors").read_bytes() == bytes(raw)
    with pytest.raises(AssetNotFoundError, match="smollm2-135m"):
        fetch.resolve("smollm2-135m")


def test_an_incomplete_converted_model_is_moved_aside(asset_cache, no_smollm2_elsewhere):
    folder = _converted_smollm2(asset_cache)
    (folder / "model.safetensors").unlink()
    with pytest.warns(CacheWarning, match="incomplete: no model.safetensors"):
        assert locate.find_local("smollm2-135m") is None
    assert not folder.exists()
