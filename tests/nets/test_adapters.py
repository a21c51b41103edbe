"""Tests of layersim.nets.adapters: one adapter per family, each checked on a random-init tiny config.

For every registered adapter (and RoBERTa / ELECTRA through the ``bert`` one): the features
``collect`` reads equal an independent reference (HF's ``output_hidden_states`` or timm's
``forward_intermediates``), and the readout of the last layer at the adapter's default token
equals the model's own output (logits, or CLIP's embedding).
"""

import dataclasses

import numpy as np
import pytest
import torch

import transformers as tr
from builders import LAST, electra_tiny, ragged_reference, roberta_tiny, tiny
from layersim.nets import adapters, models, readout

NAMES = [a.name for a in adapters.REGISTRY if a.uniform]
EXTRA = {"roberta": roberta_tiny, "electra": electra_tiny}


@pytest.fixture(scope="module", params=NAMES + list(EXTRA))
def case(request):
    name = request.param
    return name, (EXTRA[name]() if name in EXTRA else tiny(name))


def adapter_name(name):
    return "bert" if name in EXTRA else name


def feats(model, batch, **kw):
    return models.collect(model, [batch], progress=False, device="cpu", **kw)


def test_family_and_number_of_blocks(case):
    name, t = case
    assert models.family(t.model) == adapter_name(name)
    assert models.n_layers(t.model) == t.n_layers
    assert feats(t.model, t.batch).hidden.shape[0] == t.n_layers + 1


def test_last_layer_readout_is_the_models_own_output(case):
    """final norm + head on the last entry (the adapter's default token) = the model's output."""
    name, t = case
    ref = t.readout()
    if ref is None:
        with pytest.raises(ValueError, match="no classifier head"):
            models.classifier_head(t.model)
        return
    logits = readout.layer_logits(t.model, feats(t.model, t.batch).hidden)
    np.testing.assert_allclose(logits[-1], ref.numpy(), atol=2e-5)
    assert not np.allclose(logits[0], ref.numpy(), atol=1e-3)  # the embedding reads out differently


def reference_hidden(name, t):
    """Every layer's full token sequence, [L+1] tensors [B, T, d], from the model's own API,
    with the final norm switched off where HF applies it to the last entry."""
    m = t.model
    with torch.no_grad():
        if name == "timm_vit":
            x = m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(t.batch))))
            inter = m.forward_intermediates(t.batch, norm=False, output_fmt="NLC", intermediates_only=True,
                                            return_prefix_tokens=True)
            return [x] + [torch.cat([prefix, patches], 1) for patches, prefix in inter]
        if name == "mlp":
            return [t.batch.flatten(1)] + m.hidden(t.batch)
        if name in ("clip_vision", "clip_text"):
            kw = {"pixel_values": t.batch} if name == "clip_vision" else t.batch
            return m.tower(**kw, output_hidden_states=True).hidden_states
        base = m.base_model
        norm = {"gpt2": "ln_f", "llama": "norm"}.get(name)
        saved = getattr(base, norm) if norm else None
        try:
            if norm:
                setattr(base, norm, torch.nn.Identity())
            kw = t.batch if isinstance(t.batch, dict) else {"pixel_values": t.batch}
            return base(**kw, output_hidden_states=True).hidden_states
        finally:
            if norm:
                setattr(base, norm, saved)


@pytest.mark.parametrize("token", ["cls", "mean", 1, "last"])
def test_features_equal_the_models_hidden_states(case, token):
    name, t = case
    ref = reference_hidden(name, t)
    got = feats(t.model, t.batch, token=token).hidden
    assert got.shape == (len(ref), len(t.batch["input_ids"] if isinstance(t.batch, dict) else t.batch),
                         ref[0].shape[-1])
    text = isinstance(t.batch, dict)
    mask = t.batch["attention_mask"][:, :, None].float() if text else None
    n_prefix = adapters.get(t.model).n_prefix(t.model)
    for layer, h in enumerate(ref):
        if h.ndim == 2:  # no tokens (the MLPs): every token choice reads the layer itself
            want = h
        elif token == "cls":
            want = h[:, 0]
        elif token == 1:
            want = h[:, 1]
        elif token == "last":
            want = h[torch.arange(len(LAST)), LAST] if text else h[:, -1]
        else:
            want = (h * mask).sum(1) / mask.sum(1) if text else h[:, n_prefix:].mean(1)
        np.testing.assert_allclose(got[layer], want.numpy(), atol=2e-5, err_msg=f"{name} layer {layer}")


def test_prefix_tokens_per_family():
    assert adapters.get(tiny("hf_deit").model).n_prefix(tiny("hf_deit").model) == 2
    assert adapters.get(tiny("hf_vit").model).n_prefix(tiny("hf_vit").model) == 1
    regs = tr.Dinov2WithRegistersModel(tr.Dinov2WithRegistersConfig(
        image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_register_tokens=4))
    assert models.family(regs) == "dinov2" and adapters.get(regs).n_prefix(regs) == 5
    assert models.n_layers(regs) == 2


def test_albert_reads_its_shared_group_at_every_call():
    t = tiny("albert")
    blocks = models.block_modules(t.model)
    assert len(blocks) == 3 and len({id(b) for b in blocks}) == 1


def test_unknown_model_names_the_families_and_how_to_add_one():
    with pytest.raises(NotImplementedError) as err:
        models.family(torch.nn.Linear(2, 2))
    msg = str(err.value)
    assert all(a.name in msg for a in adapters.REGISTRY) and "adapters.register" in msg


def test_clip_model_asks_for_a_tower():
    cfg = tr.CLIPConfig(text_config=dict(vocab_size=99, hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=64),
                        vision_config=dict(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=64), projection_dim=8)
    clip = tr.CLIPModel(cfg)
    with pytest.raises(NotImplementedError, match="clip_tower"):
        models.family(clip)
    assert models.family(adapters.clip_tower(clip, "text")) == "clip_text"
    with pytest.raises(ValueError, match="'vision' or 'text'"):
        adapters.clip_tower(clip, "audio")
    with pytest.raises(ValueError, match="CLIPModel"):
        adapters.clip_tower(torch.nn.Linear(2, 2), "text")


def test_register_a_new_family_and_reject_a_duplicate_name():
    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
            self.out = torch.nn.Linear(4, 3)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.out(x)

    ad = adapters.Adapter(
        name="toy_stack", models="a test stack", matches=lambda m: isinstance(m, Stack),
        blocks=lambda m: list(m.layers), set_blocks=adapters.container_setter(lambda m: (m, "layers")),
        final_norm=lambda m: torch.nn.Identity(), head=lambda m: m.out, run=lambda m, x: m(x))
    adapters.register(ad, first=True)
    try:
        assert adapters.REGISTRY[0] is ad
        m = Stack().eval()
        x = torch.randn(5, 1, 4)  # [B, T=1, d]
        h = models.collect(m, [x], token=0, progress=False, device="cpu").hidden
        assert h.shape == (3, 5, 4)
        with torch.no_grad():
            np.testing.assert_allclose(h[2], m.layers[1](m.layers[0](x))[:, 0].numpy(), atol=1e-6)
        with pytest.raises(ValueError, match="already registered"):
            adapters.register(ad)
        again = dataclasses.replace(ad, models="the test stack, re-imported")  # a module imported twice
        assert adapters.register(again, replace=True) is again and adapters.REGISTRY[0] is again
        assert [a.name for a in adapters.REGISTRY].count("toy_stack") == 1
        ad = again
    finally:
        adapters.REGISTRY.remove(ad)
    assert "toy_stack" not in adapters.markdown()


def test_register_model_reads_a_users_class_where_it_is_defined(monkeypatch):
    """One decorator on the class: its layers are read, its head and norm read out the last layer as the model does,
    surgery swaps its container of blocks; blocks given by a function refuse surgery; bad use is one ValueError."""
    from layersim.nets import surgery

    monkeypatch.setattr(adapters, "REGISTRY", list(adapters.REGISTRY))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return x + torch.tanh(self.lin(x))

    @adapters.register_model("body.layers", head="out", final_norm="norm", token="mean")
    class Tower(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.body = torch.nn.Module()
            self.body.layers = torch.nn.ModuleList(Block() for _ in range(3))
            self.norm, self.out = torch.nn.LayerNorm(4), torch.nn.Linear(4, 2)

        def forward(self, x):  # [B, T, 4] -> mean over T -> logits
            for layer in self.body.layers:
                x = layer(x)
            return self.out(self.norm(x.mean(1)))

    m, x = Tower().eval(), torch.randn(6, 5, 4)
    ad = adapters.get(m)
    assert ad.name == "tower" and ad.token == "mean" and ad.models.endswith("Tower`")
    h = models.collect(m, [x], progress=False, device="cpu").hidden
    with torch.no_grad():
        want = x
        for layer in m.body.layers[:2]:
            want = want + torch.tanh(layer.lin(want))
        np.testing.assert_allclose(h[2], want.mean(1).numpy(), atol=1e-6)
        with surgery.skip(m, 2, 2) as cut:  # block 2 skipped: the container is swapped, then restored
            assert len(cut.body.layers) == 2
        assert len(m.body.layers) == 3
        own = m(x).numpy()
    z = readout.layer_logits(m, h)
    assert z.shape == (4, 6, 2)
    np.testing.assert_allclose(z[-1], own, atol=1e-5)  # the readout of the last layer is the model's output

    @adapters.register_model(lambda model: [model.a, model.b], uniform=False, name="two_steps")
    class TwoSteps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.b(self.a(x))

    ragged = adapters.get(TwoSteps())
    assert not ragged.uniform and ragged.token == "all"
    with pytest.raises(ValueError, match="no classifier head: none was given to register_model"):
        ragged.head(TwoSteps())
    with pytest.raises(ValueError, match="does not support block surgery"):
        surgery.skip(TwoSteps(), 1, 1).__enter__()
    with pytest.raises(ValueError, match="decorates a torch.nn.Module class"):
        adapters.register_model("layers")(object)
    with pytest.raises(ValueError, match="inputs must be 'images' or 'text'"):
        adapters.register_model("layers", inputs="audio")
    with pytest.raises(ValueError, match="blocks must be an attribute path"):
        adapters.register_model(3)


# ----------------------------------------------------------------------------- families whose layers differ in shape


@pytest.mark.parametrize("token", ["all", "mean"])
def test_layer_outputs_of_every_shape_equal_a_hand_run(ragged, token):
    """layer_outputs reads entry 0 (the input of block 1) and every block's output, maps flattened
    (token='all') or averaged over positions (token='mean'), in float64."""
    name, t = ragged
    assert models.family(t.model) == name and models.n_layers(t.model) == t.n_layers
    ref = ragged_reference(name, t.model, t.batch)
    got = models.layer_outputs(t.model, t.batch, token=token, batch_size=3, device="cpu")
    assert len(got) == len(ref) == t.n_layers + 1
    for i, (g, h) in enumerate(zip(got, ref)):
        want = h.mean(dim=(2, 3)) if (token == "mean" and h.ndim == 4) else h.flatten(1)
        assert g.dtype == np.float64 and g.shape == tuple(want.shape), f"{name} entry {i}"
        # float32 maps of batches of 3 against a hand run on one batch (ResNet's reach ~3): to float32 rounding
        np.testing.assert_allclose(g, want.double().numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{name} entry {i}")


def test_last_entry_reads_out_as_the_model(ragged):
    name, t = ragged
    last = models.layer_outputs(t.model, t.batch, layers=[-1], device="cpu")[0]
    logits = readout.layer_logits(t.model, last[None].astype(np.float32), layers=[t.n_layers])
    np.testing.assert_allclose(logits[0], t.readout().numpy(), atol=2e-5)
