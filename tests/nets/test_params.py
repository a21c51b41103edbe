"""Tests of layersim.nets.params: closed-form parameter counts against ``sum(p.numel())`` of instantiated models
(small configs on the CPU, full sizes on the meta device: nothing is allocated or downloaded); the published
configurations have their published sizes; the image encoders are the redundancy notebooks' paper models."""

import pytest
import torch
import transformers as tr
from timm.models.vision_transformer import VisionTransformer

from layersim.nets import params as P
from layersim.papers.redundancy import models as redundancy_models
from layersim.train import objectives


@pytest.mark.parametrize("kw", [
    dict(img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=3, num_heads=2, num_classes=10, mlp_ratio=2.0),
    dict(img_size=32, patch_size=4, in_chans=3, embed_dim=48, depth=2, num_heads=3, num_classes=7, mlp_ratio=4.0),
    dict(img_size=16, patch_size=8, in_chans=3, embed_dim=24, depth=1, num_heads=2, num_classes=0, qkv_bias=False),
])
def test_vit_closed_form_equals_instantiated(kw):
    model = VisionTransformer(global_pool="token", **kw)
    assert P.vit_params(**{k: v for k, v in kw.items() if k != "num_heads"}) == P.count_module(model)


@pytest.mark.parametrize("kw", [
    dict(n_embd=32, n_layer=2, n_head=2, vocab_size=61, n_positions=16),
    dict(n_embd=24, n_layer=3, n_head=3, vocab_size=100, n_positions=8, n_inner=40),
    dict(n_embd=32, n_layer=2, n_head=2, vocab_size=61, n_positions=16, tie_word_embeddings=False),
])
def test_gpt2_closed_form_equals_instantiated(kw):
    cfg = tr.GPT2Config(**kw)
    assert P.hf_params(cfg) == P.count_module(tr.GPT2LMHeadModel(cfg))


def test_gpt2_small_is_124m():
    cfg = tr.GPT2Config()
    with torch.device("meta"):
        model = tr.GPT2LMHeadModel(cfg)
    assert P.count_module(model) == 124_439_808 == P.hf_params(cfg)


@pytest.mark.parametrize("kw", [
    dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=6,
         tie_word_embeddings=True),
    dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
         head_dim=8),
])
def test_llama_closed_form_equals_instantiated(kw):
    cfg = tr.LlamaConfig(vocab_size=97, **kw)
    assert P.hf_params(cfg) == P.count_module(tr.LlamaForCausalLM(cfg))


def test_multi_exit_adds_l_minus_one_heads():
    assert P.exit_head_params(384, 1000) == 385_000
    assert P.exit_head_params(384, 1000, bias=False) == 384_000
    assert P.exit_head_params(384, 1000, norm=True) == 385_000 + 768
    assert P.multi_exit_params(100, 12, 384, 1000, bias=False) == 100 + 11 * 384_000
    assert P.param_saving(75.0, 100.0) == 0.25


def test_exit_head_count_matches_add_exit_heads():
    model = VisionTransformer(img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=4, num_heads=2,
                              num_classes=10)
    single = P.count_module(model)
    objectives.add_exit_heads(model)
    assert P.count_module(model) == P.multi_exit_params(single, 4, 32, 10, bias=True, norm=True)


def test_unknown_config_is_refused():
    with pytest.raises(NotImplementedError):
        P.hf_params(tr.BertConfig())


def test_build_on_meta_instantiates_the_released_architectures():
    deit = P.build_on_meta({"kind": "vit", "timm": "deit_small_patch16_224"})
    assert next(deit.parameters()).is_meta and P.count_module(deit) == 22_050_664  # timm's DeiT-S
    gpt2 = P.build_on_meta({"kind": "gpt2", "config": {}})
    assert isinstance(gpt2, tr.GPT2LMHeadModel) and P.count_module(gpt2) == 124_439_808  # GPT2Config() defaults
    llama = P.build_on_meta({"kind": "llama", "config": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                             num_attention_heads=4, num_key_value_heads=2,
                                                             vocab_size=97)})
    assert next(llama.parameters()).is_meta
    assert P.count_module(llama) == P.llama_params(32, 64, 2, 4, 2, vocab_size=97)


#: published parameter counts (millions; the model cards and papers) of the bare encoders / LMs
PUBLISHED_M = {"bert-base-uncased": 110, "roberta-base": 125, "albert-large-v2": 18, "electra-base-discriminator": 110,
               "gpt2": 124, "vit-small-patch16-224": 22, "vit-base-patch16-224": 86, "deit-small-patch16-224-hf": 22,
               "dinov2-small": 22, "dinov2-base": 86, "clip-vit-base-patch32": 88}


def test_the_published_architectures_have_their_published_sizes():
    assert set(PUBLISHED_M) == set(P.HF_ARCHITECTURES)
    for name, millions in PUBLISHED_M.items():
        cls = tr.GPT2LMHeadModel if name == "gpt2" else tr.AutoModel
        with torch.device("meta"):
            model = cls(P.hf_config(name)) if name == "gpt2" else cls.from_config(P.hf_config(name))
        assert P.count_module(model) / 1e6 == pytest.approx(millions, rel=0.03), name
    with pytest.raises(ValueError, match="no published configuration"):
        P.hf_config("bert-huge")
    with pytest.raises(ValueError, match="task"):
        P.build_random("gpt2", task="translation")


def test_the_image_encoders_are_the_redundancy_notebooks_paper_models():
    assert sorted(P.IMAGE_ENCODERS) == sorted(spec.name for spec in redundancy_models.MODELS["paper"].values())
