"""Tests of layersim.papers.redundancy.models: the paper-scale zoo on random-init configs (no download), the
offline text model on real text, the tracing ViTs, and the matrix comparison of the paper's Fig. 2 claim."""

import numpy as np
import pytest
import torch

from layersim.inputs import assets, fetch, image_data
from layersim.papers.redundancy import models as rm
from layersim.train import checkpoints, training

SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)


@pytest.mark.parametrize("name", list(rm.MODELS["paper"]))
def test_paper_models_read_imagenet_sized_inputs_through_their_adapter(name):
    spec = rm.MODELS["paper"][name]
    assert spec.source == "asset" and assets.get_asset(spec.name).scale == "paper"
    model, _ = fetch.load_model(spec.name, random_init=True, config=SMALL)
    images = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(0))  # an MNIST-like batch
    x = image_data.as_model_input(images, "imagenet")
    assert x.shape == (3, 3, 224, 224)
    H = rm.block_tokens(model, [x], device="cpu")
    assert H.shape == (3, 3, 32)  # embedding output + 2 blocks, [CLS] of each
    assert np.isfinite(H).all()


def test_every_scale_names_models_and_two_data_sets_each():
    for scale, specs in rm.MODELS.items():
        for spec in specs.values():
            assert spec.modality in ("image", "text") and len(spec.data) >= 2
        assert rm.data_sets(specs)


def test_a_rehearsal_cuts_the_paper_loop_to_one_model_per_family_on_two_formats(monkeypatch):
    from layersim.notebook import rehearsal

    assert rm.specs("paper") == rm.MODELS["paper"] and rm.specs("default") == rm.MODELS["default"]
    monkeypatch.setenv(rehearsal.ENV, "1")
    cut = rm.specs("paper")
    assert list(cut) == list(rehearsal.REDUNDANCY_LOOP["models"])
    for name, spec in cut.items():  # the same models, fewer data sets: two of them, still a pair to compare
        assert spec.name == rm.MODELS["paper"][name].name and spec.data == rehearsal.REDUNDANCY_LOOP["data"]
        assert set(spec.data) < set(rm.MODELS["paper"][name].data)
    families = {assets.get_asset(s.name).config["model_type"] for s in cut.values()}
    assert families == {assets.get_asset(s.name).config["model_type"] for s in rm.MODELS["paper"].values()}
    assert rm.specs("default") == rm.MODELS["default"]  # only the paper scale is rehearsed
    with pytest.raises(ValueError, match="unknown scale"):
        rm.specs("huge")


def test_offline_text_model_reads_both_text_sources():
    spec = rm.MODELS["default"]["MiniLM-L6"]
    model, tok = rm.load(spec, "default")
    for source in spec.data:
        batches, labels = rm.inputs(spec, source, 5, tok, split="test", batch_size=2, max_length=16)
        assert labels is None and len(batches) == 3
        assert batches[0]["input_ids"].shape[1] <= 16
        H = rm.block_tokens(model, batches, device="cpu")
        assert H.shape == (7, 5, 384)
    with pytest.raises(ValueError, match="tokenizer"):
        rm.inputs(spec, "austen", 2)


def test_pattern_correlations_compare_models_and_data_sets_of_one_size():
    r = np.random.default_rng(0)
    A = r.random((4, 4))
    A = A + A.T
    B = r.random((4, 4))
    B = B + B.T
    mats = {("m1", "x"): A, ("m1", "y"): A * 2 + 1, ("m2", "x"): B, ("m2", "y"): B, ("small", "x"): np.eye(3)}
    out = rm.pattern_correlations(mats)
    assert out["same_model"]["m1: x vs y"] == pytest.approx(1.0)
    assert set(out["same_model"]) == {"m1: x vs y", "m2: x vs y"}
    assert set(out["same_data"]) == {"x: m1 vs m2", "y: m1 vs m2"}  # the 3-block model has no partner


def test_by_pair_keys_values_as_the_metrics_record_does():
    assert rm.by_pair({("A", "x"): 1, ("B", "y"): 2}) == {"A | x": 1, "B | y": 2}


def test_span_check_names_the_parameter():
    rm.check_spans({"spans": [[2, 5], [7, 7]]})
    rm.check_spans({"spans": []})
    with pytest.raises(ValueError, match="parameter 'spans': \\[5, 2\\] is reversed"):
        rm.check_spans({"spans": [[5, 2]]})


def test_the_llm_is_a_real_offline_llama_with_a_pad_token():
    model, tok = rm.load(rm.LLM, "default")
    from layersim.nets import models

    assert models.family(model) == "llama" and models.n_layers(model) == 30
    assert tok.pad_token is not None and tok.padding_side == "right"
    batches, _ = rm.inputs(rm.LLM, "austen", 3, tok, split="test", batch_size=3, max_length=12)
    assert batches[0]["input_ids"].shape[0] == 3 and batches[0]["attention_mask"].min() >= 0


def test_tracing_vits_exist_at_every_scale_with_their_own_data():
    """r05 compares the standard and the aligned tracing ViT at every scale (at paper scale the
    MODELS table holds only the paper's pretrained encoders)."""
    for scale, dataset in (("smoke", "fashion-mnist"), ("default", "fashion-mnist"), ("paper", "cifar10")):
        vits = rm.tracing_vits(scale)
        assert list(vits) == ["ViT (standard)", "ViT (aligned)"]
        assert all(v.source == "tracing_vit" and v.data == (dataset,) for v in vits.values())
    assert [v.name for v in rm.tracing_vits("default").values()] == ["standard", "aligned"]
    with pytest.raises(ValueError, match="unknown scale"):
        rm.tracing_vits("huge")


def test_the_vit_shape_reaches_the_loaded_tracing_vits_and_their_cache_keys(monkeypatch):
    """Width 64 and 256 ViTs are built under checkpoint keys of their own; without a shape both tracing ViTs keep
    the keys that the committed tracing runs recorded (figures/tracing/t04_early_exit/metrics.json)."""
    keys = []

    def untrained(model_cfg, train_cfg, train_set, data_desc, device="auto", progress=True, retrain=False):
        keys.append(checkpoints.config_key(model_cfg, train_cfg, data_desc))  # an fp32 key, as on the CPU
        return training.build_vit(model_cfg, seed=train_cfg.seed), {}

    monkeypatch.setattr(training, "cached_vit", untrained)
    images = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    x = image_data.as_model_input(images, "fashion-mnist")
    widths = {}
    for shape in (None, {"embed_dim": 64}, {"embed_dim": 256}):
        for name in ("ViT (standard)", "ViT (aligned)"):
            model, tok = rm.load(rm.MODELS["default"][name], "default", device="cpu", vit=shape)
            H = rm.block_tokens(model, [x], device="cpu")
            widths[keys[-1]] = H.shape[-1]
            assert tok is None and H.shape[:2] == (13, 2)  # 12 blocks of 4 heads whatever the width
            assert all(block.attn.num_heads == 4 for block in model.blocks)
    assert keys[:2] == ["34ecd20b2046bf40", "d145f54b6810e00d"]
    assert list(widths.values()) == [128, 128, 64, 64, 256, 256]  # six models, six keys
    with pytest.raises(ValueError, match=r"parameter 'vit'.*unknown key\(s\) \['width'\]"):
        rm.load(rm.MODELS["default"]["ViT (standard)"], "default", vit={"width": 256})
    assert len(keys) == 6  # refused before any model was built
