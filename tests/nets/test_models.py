"""Tests of layersim.nets.models: layer-wise token features of timm ViTs, HF encoders / decoders and the families
whose layers differ in shape, and bad batches and layer selections (one single-line ValueError up front, never
labels dropped without a word or a raw torch error from deep inside the model).

Tiny random-init models built from configs (nothing downloaded).
"""

import numpy as np
import pytest
import torch
from timm.models.deit import VisionTransformerDistilled
from torch.utils.data import DataLoader, TensorDataset

import transformers as tr
from builders import DEPTH, text_batch, tiny
from builders import tiny_vit as make_vit
from layersim.nets import models as M, surgery


def make_gpt2():
    torch.manual_seed(0)
    cfg = tr.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=61, n_positions=32,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return tr.GPT2LMHeadModel(cfg).eval()


def make_llama():
    torch.manual_seed(0)
    cfg = tr.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=61,
                         max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0)
    return tr.LlamaForCausalLM(cfg).eval()


def make_bert():
    torch.manual_seed(0)
    cfg = tr.BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                        num_attention_heads=2, vocab_size=61, max_position_embeddings=32,
                        num_labels=3, pad_token_id=0)
    return tr.BertForSequenceClassification(cfg).eval()


@pytest.fixture(scope="module")
def vit():
    return make_vit()


@pytest.fixture(scope="module")
def images():
    g = torch.Generator().manual_seed(1)
    return torch.randn(10, 1, 28, 28, generator=g), torch.arange(10) % 4


@pytest.fixture(scope="module", params=["gpt2", "llama", "bert"])
def hf_model(request):
    return {"gpt2": make_gpt2, "llama": make_llama, "bert": make_bert}[request.param]()


SEQS = [torch.tensor(s) for s in ([5, 9, 3], [7, 1, 2, 8, 4, 6], [11, 12, 13, 14])]


def padded(side):
    """A padded batch of SEQS (pad id 0) on the given side, with its attention mask."""
    T = max(len(s) for s in SEQS)
    ids = torch.zeros(len(SEQS), T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(SEQS):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        ids[i, sl], mask[i, sl] = s, 1
    return {"input_ids": ids, "attention_mask": mask}


def hs(model, batches, **kw):
    return M.hidden_states(model, batches, progress=False, device="cpu", **kw)


# ----------------------------------------------------------------------------- timm


def test_vit_family_blocks_and_norms(vit):
    assert M.family(vit) == "timm_vit"
    assert M.n_layers(vit) == DEPTH
    assert M.block_modules(vit) == list(vit.blocks)
    assert M.final_norm(vit) is vit.norm
    assert M.classifier_head(vit) is vit.head


def test_vit_avg_pool_uses_fc_norm():
    m = make_vit(global_pool="avg")
    assert isinstance(m.norm, torch.nn.Identity)
    assert M.final_norm(m) is m.fc_norm


def test_vit_index0_is_embedding_and_last_is_last_block(vit, images):
    x, _ = images
    feats = hs(vit, [x], token="cls")
    assert feats.shape == (DEPTH + 1, 10, 32) and feats.dtype == np.float32
    with torch.no_grad():
        emb = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
        np.testing.assert_allclose(feats[0], emb[:, 0].numpy(), atol=1e-6)
        h = emb
        for i, blk in enumerate(vit.blocks, start=1):
            h = blk(h)
            np.testing.assert_allclose(feats[i], h[:, 0].numpy(), atol=1e-5)
        # model.norm on our last entry = forward_features (which ends with model.norm)
        full = vit.forward_features(x)[:, 0]
        normed = vit.norm(torch.from_numpy(feats[-1]))
        np.testing.assert_allclose(normed.numpy(), full.numpy(), atol=1e-5)


def test_vit_mean_and_int_tokens(vit, images):
    x, _ = images
    with torch.no_grad():
        emb = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
        last = vit.blocks(emb)
    mean = hs(vit, [x], token="mean")
    np.testing.assert_allclose(mean[0], emb[:, 1:].mean(1).numpy(), atol=1e-6)
    np.testing.assert_allclose(mean[-1], last[:, 1:].mean(1).numpy(), atol=1e-5)
    pos = hs(vit, [x], token=5, layers=[0, -1])
    assert pos.shape == (2, 10, 32)
    np.testing.assert_allclose(pos[0], emb[:, 5].numpy(), atol=1e-6)
    np.testing.assert_allclose(pos[1], last[:, 5].numpy(), atol=1e-5)


def test_deit_distilled_prefix_tokens(images):
    torch.manual_seed(0)
    m = VisionTransformerDistilled(img_size=28, patch_size=7, in_chans=1, depth=2,
                                   embed_dim=32, num_heads=2, num_classes=10).eval()
    x, _ = images
    with torch.no_grad():
        emb = m.norm_pre(m._pos_embed(m.patch_embed(x)))
    assert emb.shape[1] == 2 + 16
    feats = hs(m, [x], token="mean")
    assert feats.shape == (3, 10, 32)
    np.testing.assert_allclose(feats[0], emb[:, 2:].mean(1).numpy(), atol=1e-6)  # no cls/dist
    np.testing.assert_allclose(hs(m, [x], token="cls")[0], emb[:, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(hs(m, [x], token=1)[0], emb[:, 1].numpy(), atol=1e-6)


def test_streaming_dataloader_equals_one_batch_and_keeps_labels(vit, images):
    x, y = images
    whole = M.collect(vit, [(x, y)], token="cls", progress=False, device="cpu")
    loader = DataLoader(TensorDataset(x, y), batch_size=3)
    fresh = make_vit()  # device="auto" may move the model to cuda
    streamed = M.collect(fresh, loader, token="cls", progress=True, device="auto")
    np.testing.assert_allclose(streamed.hidden, whole.hidden, atol=1e-5)
    np.testing.assert_array_equal(streamed.labels, y.numpy())
    assert streamed.layers == list(range(DEPTH + 1))
    assert M.collect(vit, [x[:4], x[4:]], progress=False, device="cpu").labels is None


def test_training_flag_restored(images):
    m = make_vit().train()
    hs(m, [images[0][:2]])
    assert m.training


@pytest.mark.parametrize("how", ["dataloader", "generator", "drop_last"])
def test_memmap_output_equals_in_memory(vit, images, tmp_path, how):
    x, y = images
    if how == "dataloader":  # N known from len(dataset): preallocated
        batches, n = DataLoader(TensorDataset(x, y), batch_size=4), 10
    elif how == "generator":  # N unknown: grown by doubling, then trimmed
        batches, n = ((x[i:i + 1], y[i:i + 1]) for i in range(10)), 10
    else:  # fewer samples than len(dataset): trimmed
        batches, n = DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True), 8
    path = tmp_path / "sub" / "feats.npy"
    got = M.collect(vit, batches, token="mean", progress=False, device="cpu", out=path)
    ref = hs(vit, [x[:n]], token="mean")
    assert isinstance(got.hidden, np.memmap)
    np.testing.assert_allclose(got.hidden, ref, atol=1e-5)
    np.testing.assert_array_equal(got.labels, y[:n].numpy())
    np.testing.assert_allclose(np.load(path, mmap_mode="r"), ref, atol=1e-5)
    assert sorted(p.name for p in path.parent.iterdir()) == ["feats.npy"]


def test_bad_token_and_layers(vit, images):
    with pytest.raises(ValueError):
        hs(vit, [images[0][:2]], token="first")
    with pytest.raises(ValueError, match="out of range"):
        hs(vit, [images[0][:2]], layers=[DEPTH + 1])


# ----------------------------------------------------------------------------- HF


def test_hf_families_and_conventions(hf_model):
    fam = M.family(hf_model)
    assert M.n_layers(hf_model) == 2
    base = hf_model.base_model
    if fam == "gpt2":
        assert M.block_modules(hf_model) == list(base.h)
        assert M.final_norm(hf_model) is base.ln_f
        assert M.classifier_head(hf_model) is hf_model.lm_head
    elif fam == "llama":
        assert M.block_modules(hf_model) == list(base.layers)
        assert M.final_norm(hf_model) is base.norm
        assert M.classifier_head(hf_model) is hf_model.lm_head
    else:
        assert fam == "bert"
        assert M.block_modules(hf_model) == list(base.encoder.layer)
        assert isinstance(M.final_norm(hf_model), torch.nn.Identity)


def test_hf_entries_match_hidden_states_and_last_block(hf_model):
    batch = {"input_ids": torch.stack([SEQS[1], SEQS[1].flip(0)])}
    feats = hs(hf_model, [batch], token=2)
    with torch.no_grad():
        out = hf_model(**batch, output_hidden_states=True).hidden_states
        blocks = M.block_modules(hf_model)
        seen = []
        handle = blocks[-1].register_forward_hook(
            lambda m, a, o: seen.append(o[0] if isinstance(o, tuple) else o))
        hf_model(**batch)
        handle.remove()
    assert feats.shape == (M.n_layers(hf_model) + 1, 2, 32) == (len(out), 2, 32)
    for i, h in enumerate(out[:-1]):
        np.testing.assert_allclose(feats[i], h[:, 2].numpy(), atol=1e-6)
    last_block = seen[0][:, 2]
    np.testing.assert_allclose(feats[-1], last_block.numpy(), atol=1e-5)  # never normed
    if M.family(hf_model) in ("gpt2", "llama"):  # HF applies ln_f / norm to hidden_states[-1]
        with torch.no_grad():
            normed = M.final_norm(hf_model)(torch.from_numpy(feats[-1]))
        np.testing.assert_allclose(normed.numpy(), out[-1][:, 2].numpy(), atol=1e-5)
        assert not np.allclose(feats[-1], out[-1][:, 2].numpy(), atol=1e-3)


def raw_hidden_states(model, **inputs):
    """HF's hidden_states with the final norm switched off: GPT-2 / LLaMA apply ln_f / norm to
    their last entry, which layersim's features never carry."""
    base = model.base_model
    name = next((n for n in ("ln_f", "norm") if isinstance(getattr(base, n, None), torch.nn.Module)), None)
    saved = getattr(base, name) if name else None
    try:
        if name:
            setattr(base, name, torch.nn.Identity())
        with torch.no_grad():
            return base(**inputs, output_hidden_states=True).hidden_states
    finally:
        if name:
            setattr(base, name, saved)


@pytest.mark.parametrize("side", ["left", "right"])
def test_last_and_mean_tokens_ignore_padding(hf_model, side):
    batch = padded(side)
    last = hs(hf_model, [batch], token="last")
    mean = hs(hf_model, [batch], token="mean")
    if M.family(hf_model) == "bert" and side == "left":
        # BERT's absolute positions assume right padding: check the token picked only
        with torch.no_grad():
            ref = hf_model.base_model(**batch, output_hidden_states=True).hidden_states
        for layer, h in enumerate(ref):
            np.testing.assert_allclose(last[layer], h[:, -1].numpy(), atol=1e-6)
            m = batch["attention_mask"][:, :, None].float()
            np.testing.assert_allclose(mean[layer], ((h * m).sum(1) / m.sum(1)).numpy(), atol=1e-6)
        return
    for i, s in enumerate(SEQS):
        ref = raw_hidden_states(hf_model, input_ids=s[None])
        for layer, h in enumerate(ref):
            np.testing.assert_allclose(last[layer, i], h[0, -1].numpy(), atol=1e-5)
            np.testing.assert_allclose(mean[layer, i], h[0].mean(0).numpy(), atol=1e-5)


def test_hf_labels_and_ignored_keys(hf_model):
    b1 = dict(padded("right"), labels=torch.tensor([0, 1, 2]), idx=torch.arange(3))
    b2 = dict(padded("right"), labels=torch.tensor([2, 2, 1]), idx=torch.arange(3))
    got = M.collect(hf_model, [b1, b2], token="cls", progress=False, device="cpu")
    assert got.hidden.shape == (3, 6, 32)
    np.testing.assert_array_equal(got.labels, [0, 1, 2, 2, 2, 1])
    np.testing.assert_allclose(got.hidden[:, :3], got.hidden[:, 3:], atol=1e-6)


def test_unsupported_models():
    with pytest.raises(NotImplementedError, match="adapters for timm_vit, hf_vit"):
        M.family(torch.nn.Linear(2, 2))
    t5 = tr.T5Model(tr.T5Config(d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, vocab_size=61))
    with pytest.raises(NotImplementedError, match="layersim.nets.adapters.register"):
        M.family(t5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_collect_tokens_equals_one_collect_per_token(hf_model, side):
    """Several token choices from one pass give exactly what one collect() per choice gives."""
    batches = [padded(side), padded(side)]
    got = M.collect_tokens(hf_model, batches, ["cls", "mean", "last", 1], progress=False, device="cpu")
    for t, arr in got.items():
        np.testing.assert_allclose(arr, hs(hf_model, batches, token=t), rtol=0, atol=1e-6)
    assert got["cls"].shape == (M.n_layers(hf_model) + 1, 6, 32)


def test_collect_tokens_vision_and_layers(vit, images):
    got = M.collect_tokens(vit, [images], ("cls", "mean"), layers=[0, -1], progress=False, device="cpu")
    np.testing.assert_allclose(got["mean"], hs(vit, [images], token="mean", layers=[0, -1]), atol=1e-6)
    np.testing.assert_allclose(got["cls"], hs(vit, [images], token="cls", layers=[0, -1]), atol=1e-6)


def test_collect_tokens_bad_input(vit, images):
    with pytest.raises(ValueError, match="distinct"):
        M.collect_tokens(vit, [images], ["cls", "cls"], progress=False, device="cpu")
    with pytest.raises(ValueError, match="not token choices"):
        M.collect_tokens(vit, [images], ["all"], progress=False, device="cpu")
    with pytest.raises(ValueError, match="no batches"):
        M.collect_tokens(vit, [], ["cls"], progress=False, device="cpu")


@pytest.mark.parametrize("family", ["timm_vit", "hf_vit", "hf_deit", "dinov2", "clip_vision"])
def test_vision_batches_in_every_common_form_read_the_same(family):
    """An image tensor, an (images, labels) tuple, a numpy array and Hugging Face's own
    {"pixel_values": ..., "labels": ...} dict (an image processor's BatchFeature included) are one batch."""
    from transformers import BatchFeature

    t = tiny(family)
    x = t.batch
    y = torch.arange(len(x)) % 3
    ref = M.collect(t.model, [(x, y)], progress=False, device="cpu")
    forms = [[x], [x.numpy()], [{"pixel_values": x, "labels": y}], [BatchFeature({"pixel_values": x, "labels": y})]]
    for batches in forms:
        got = M.collect(t.model, batches, progress=False, device="cpu")
        np.testing.assert_allclose(got.hidden, ref.hidden, rtol=1e-6, atol=1e-6)
        if isinstance(batches[0], dict):
            np.testing.assert_array_equal(got.labels, y.numpy())
    with pytest.raises(TypeError, match="needs 'pixel_values'"):
        M.collect(t.model, [{"images": x}], progress=False, device="cpu")


# ----------------------------------------------------------------------------- families whose layers differ in shape


def test_collect_points_ragged_layers_to_layer_outputs(ragged):
    name, t = ragged
    if name == "rbf_net":  # input and Gaussian layer happen to have other widths; one layer stacks
        h = M.collect(t.model, [t.batch], layers=[1], progress=False, device="cpu").hidden
        assert h.shape == (1, len(t.batch), t.model.layers[0].centers.shape[0])
    with pytest.raises(ValueError, match="pad=True to zero-pad them to the widest, or read them with .*layer_outputs"):
        M.collect(t.model, [t.batch], progress=False, device="cpu")


def test_collect_zero_pads_ragged_layers_on_request(ragged):
    """pad=True: every entry is its layer_outputs array with zero columns up to the widest, its own width kept."""
    _, t = ragged
    own = M.layer_outputs(t.model, [t.batch], device="cpu")
    feats = M.collect(t.model, [t.batch[:2], t.batch[2:]], progress=False, device="cpu", pad=True)
    widths = [h.shape[1] for h in own]
    assert feats.widths == widths and feats.hidden.shape == (len(own), len(t.batch), max(widths))
    for h, got, w in zip(own, feats.hidden, widths):
        np.testing.assert_allclose(got[:, :w], h, rtol=1e-5, atol=1e-6)
        assert not got[:, w:].any()
    np.testing.assert_array_equal(M.zero_pad([np.ones((2, 1)), np.ones((2, 3))])[0], [[1, 0, 0], [1, 0, 0]])


def test_a_convolutional_map_has_no_cls_token():
    t = tiny("small_cnn")
    with pytest.raises(ValueError, match="convolutional map"):
        M.layer_outputs(t.model, t.batch, token="cls", device="cpu")


def test_layer_outputs_takes_arrays_datasets_and_batches():
    t = tiny("small_cnn")
    a = M.layer_outputs(t.model, t.batch.numpy(), layers=[1, 3], batch_size=2, device="cpu")
    b = M.layer_outputs(t.model, TensorDataset(t.batch, torch.zeros(len(t.batch))), layers=[1, 3],
                             batch_size=3, device="cpu")
    c = M.layer_outputs(t.model, [t.batch[:1], t.batch[1:]], layers=[1, 3], device="cpu")
    for x, y, z in zip(a, b, c):  # batches of 2, 3 and 1 + 3: the same float32 maps up to rounding
        np.testing.assert_allclose(x, y, atol=1e-5)
        np.testing.assert_allclose(x, z, atol=1e-5)
    with pytest.raises(ValueError, match="no batches"):
        M.layer_outputs(t.model, [], device="cpu")


# ----------------------------------------------------------------------------- bad labels and layer selections


def one_line(exc_info):
    msg = str(exc_info.value)
    assert msg and "\n" not in msg, msg
    return msg


def readers(model, batches, layers):
    """Every reader that takes ``layers``, each run far enough to validate them."""
    return {
        "collect": lambda: M.collect(model, batches, layers=layers, progress=False, device="cpu"),
        "collect_tokens": lambda: M.collect_tokens(model, batches, ("cls", "mean"), layers=layers,
                                                   progress=False, device="cpu"),
        "stream": lambda: next(iter(M.stream(model, batches, layers=layers, device="cpu"))),
        "layer_outputs": lambda: M.layer_outputs(model, batches, layers=layers, device="cpu"),
        "spliced collect": lambda: M.collect(surgery.replace(model, 1, 1, torch.nn.Identity()), batches,
                                             layers=layers, progress=False, device="cpu"),  # as many blocks as the model
    }


def test_labels_of_another_length_are_refused_not_dropped(vit, images):
    x, y = (a[:6] for a in images)
    with pytest.raises(ValueError, match="batch 1 has 2 labels for 3 samples") as info:
        M.collect(vit, [(x[:3], y[:3]), (x[3:], y[3:5])], progress=False, device="cpu")
    one_line(info)
    with pytest.raises(ValueError, match="batch 0 has 5 labels for 6 samples"):
        M.collect(vit, [(x, y[:5])], progress=False, device="cpu")
    with pytest.raises(ValueError, match="labels for"):  # the stream under every reader checks it
        next(iter(M.stream(vit, [(x, y[:5])], device="cpu")))
    bert = tiny("bert").model
    batch = dict(text_batch(), labels=torch.tensor([0, 1, 2]))  # 3 labels, 4 texts
    with pytest.raises(ValueError, match="batch 0 has 3 labels for 4 samples"):
        M.collect(bert, [batch], progress=False, device="cpu")
    # labels of the right length are kept; per-token labels [B, T] (a language model's) are not labels
    got = M.collect(vit, [(x[:3], y[:3]), (x[3:], y[3:])], progress=False, device="cpu")
    np.testing.assert_array_equal(got.labels, y.numpy())
    batch = dict(text_batch(), labels=text_batch()["input_ids"])
    assert M.collect(bert, [batch], progress=False, device="cpu").labels is None


@pytest.mark.parametrize("reader", ["collect", "collect_tokens", "stream", "layer_outputs", "spliced collect"])
@pytest.mark.parametrize("layers, match", [
    ([], "layers is empty"), ([DEPTH + 1], r"layers \[4\] out of range"), ([-(DEPTH + 2)], "out of range"),
    ([1, 1], "entry 1 more than once"), ([DEPTH, -1], f"entry {DEPTH} more than once"),
    ([1.5], "integer indices, got 1.5"), ([True], "integer indices"), (["1"], "integer indices"),
    ("12", "sequence of layer indices"), (3, "sequence of layer indices")])
def test_bad_layer_selections_are_one_value_error(vit, images, reader, layers, match):
    run = readers(vit, [images[0][:2]], layers)[reader]
    with pytest.raises(ValueError, match=match) as info:
        run()
    one_line(info)


def test_good_layer_selections_still_work(vit, images):
    x = images[0][:2]
    full = M.collect(vit, [x], progress=False, device="cpu").hidden
    for layers in ([0, -1], range(1, DEPTH + 1), np.array([2, 0]), [np.int64(3)]):
        got = M.collect(vit, [x], layers=layers, progress=False, device="cpu")
        ids = [int(i) % (DEPTH + 1) for i in layers]
        assert got.layers == ids
        np.testing.assert_array_equal(got.hidden, full[ids])


def test_fingerprint_follows_the_weights_not_the_object():
    import copy

    a = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    b = copy.deepcopy(a)
    assert M.fingerprint(a) == M.fingerprint(b) and len(M.fingerprint(a)) == 64
    with torch.no_grad():
        b[0].weight[1, 2] += 1e-7
    assert M.fingerprint(a) != M.fingerprint(b)
    c = copy.deepcopy(a).double()  # same values, another dtype
    assert M.fingerprint(a) != M.fingerprint(c)
