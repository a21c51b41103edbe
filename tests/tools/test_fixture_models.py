"""Tests of layersim.tools.fixture_models: a fixture model is the registry's published architecture, saved where
load_model reads it and loaded through it with its tokenizer; torchvision's weights files load offline."""

import pytest
import torch

from layersim.inputs import assets, fetch
from layersim.tools import fixture_models as fm


def test_the_small_wordpiece_encodes_pairs_within_albert_vocabulary():
    tok = fm.fixture_tokenizer("small-wordpiece")
    enc = tok(["The man said good."], ["She was here."], padding=True)
    ids = enc["input_ids"][0]
    assert ids[0] == tok.cls_token_id and ids.count(tok.sep_token_id) == 2 and "token_type_ids" in enc
    assert len(tok) <= 2000 < assets.get_asset("albert-large-v2").config.get("vocab_size", 30000)
    with pytest.raises(ValueError, match="unknown fixture tokenizer"):
        fm.fixture_tokenizer("sentencepiece")


def test_fewer_layers_keep_the_published_width_and_vocabulary():
    cfg = fm._config("llama-3.1-8b")
    published = assets.get_asset("llama-3.1-8b").config
    assert cfg.num_hidden_layers == fm.FEWER_LAYERS["llama-3.1-8b"] < published["num_hidden_layers"]
    assert (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size) == (4096, 128256, 14336)
    assert fm._config("bert-base-uncased").num_hidden_layers == 12


@pytest.mark.slow
def test_a_fixture_model_is_loaded_by_load_model_at_its_published_size(tmp_cache):
    folder = fm.write_models(tmp_cache, ["albert-large-v2"], progress=False)["albert-large-v2"]
    assert folder == tmp_cache / "models" / "albert-large-v2" and (folder / "tokenizer.json").is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    fm.write_models(tmp_cache, ["albert-large-v2"], progress=False)  # kept, not written again
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    model, tok = fetch.load_model("albert-large-v2", auto_class="AutoModelForSequenceClassification", num_labels=2)
    for key, value in assets.get_asset("albert-large-v2").config.items():
        if key != "model_type":
            assert getattr(model.config, key) == value, key
    enc = tok(["The man said good."], ["She was here."], return_tensors="pt")
    assert model(**enc).logits.shape == (1, 2)


def test_torchvision_weights_load_offline_from_the_hub_folder(tmp_path, monkeypatch):
    from layersim.nets import cnn

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    name = "torchvision:resnet18.IMAGENET1K_V1"
    written = fm.write_weights((name,))
    assert written[name] == fetch.weights_file(name) and written[name].is_file()
    model = cnn.build_cnn(cnn.CNNConfig(arch="resnet18", weights="IMAGENET1K_V1", in_chans=3, img_size=32,
                                        num_classes=1000), seed=None)
    torch.manual_seed(0)
    from torchvision.models import resnet18

    want = resnet18(weights=None).state_dict()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in want.items())


@pytest.mark.parametrize("name", sorted(fm.MODELS))
def test_the_registry_size_of_a_model_is_its_published_weights(name):
    """The data card's (and registry's) size of each paper model: the parameters of its published configuration,
    counted on the meta device, times 4 bytes (float32; 2 for the LLaMAs, published in bfloat16), to its 4 digits."""
    import transformers

    cfg = dict(assets.get_asset(name).config)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = getattr(transformers, fm.MODELS[name][0])._from_config(config)
    size = sum(p.numel() for p in model.parameters()) * (2 if name.startswith("llama") else 4)
    assert assets.get_asset(name).size_bytes == pytest.approx(size, rel=1e-3)
