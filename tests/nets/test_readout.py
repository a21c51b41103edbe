"""Tests of layersim.nets.readout: the last-layer classifier on every layer (logit lens), eq. (2) and
saturation layers; the layer-wise next-token scores of a small GPT-2; the logit lens on causal LMs (tracing App. C.1):
greedy decoding read at every layer, and the lens at every token position. Tiny random-init models built from configs
(nothing downloaded)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as tr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from layersim.nets import models as M, readout as R, surgery
from layersim.papers.tracing import lm

from builders import DEPTH, TEXT_IDS, gpt2_config, near_top, tensor_logit_tol, text_batch, tiny, tiny_vit


def make_decoder(kind):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tr.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=61, n_positions=32,
                            bos_token_id=0, eos_token_id=0, pad_token_id=0)
        return tr.GPT2LMHeadModel(cfg).eval()
    cfg = tr.LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=61,
                         max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0)
    return tr.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(12, 1, 28, 28, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def vit():
    return tiny_vit(perturb=True)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request):
    return make_decoder(request.param)


def text_batch_and_last():
    """Right-padded token ids (pad 0) and the index of each sample's last real token."""
    lengths = [3, 6, 5, 1]
    ids = torch.zeros(4, 6, dtype=torch.long)
    mask = torch.zeros_like(ids)
    g = torch.Generator().manual_seed(2)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(1, 61, (n,), generator=g)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}, torch.tensor(lengths) - 1


def feats(model, batches, **kw):
    return M.hidden_states(model, batches, progress=False, device="cpu", **kw)


# ----------------------------------------------------------------------------- lens = model


def test_vit_token_readout_last_layer_equals_model_logits(vit, images):
    logits = R.layer_logits(vit, feats(vit, [images], token="cls"))
    assert logits.shape == (DEPTH + 1, 12, 10) and logits.dtype == np.float32
    with torch.no_grad():
        np.testing.assert_allclose(logits[-1], vit(images).numpy(), atol=1e-5)


def test_vit_avg_pool_readout_of_mean_token_equals_model_logits(images):
    m = tiny_vit(perturb=True, global_pool="avg")  # fc_norm after pooling, model.norm is Identity
    logits = R.layer_logits(m, feats(m, [images], token="mean"))
    with torch.no_grad():
        np.testing.assert_allclose(logits[-1], m(images).numpy(), atol=1e-5)


def test_decoder_lens_last_layer_equals_model_logits(decoder):
    batch, last = text_batch_and_last()
    logits = R.layer_logits(decoder, feats(decoder, [batch], token="last"))
    assert logits.shape == (3, 4, 61)
    with torch.no_grad():
        ref = decoder(**batch).logits[torch.arange(4), last]
    np.testing.assert_allclose(logits[-1], ref.numpy(), atol=1e-5)


def test_decoder_lens_on_intermediate_layers_applies_final_norm(decoder):
    batch, last = text_batch_and_last()
    logits = R.layer_logits(decoder, feats(decoder, [batch], token="last"))
    with torch.no_grad():
        hs = decoder(**batch, output_hidden_states=True).hidden_states
        for layer in range(2):  # hidden_states[:-1] are pre-norm: lens = lm_head(norm(h))
            h = hs[layer][torch.arange(4), last]
            ref = decoder.lm_head(M.final_norm(decoder)(h))
            np.testing.assert_allclose(logits[layer], ref.numpy(), atol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_encoder_cls_readout_equals_classification_logits(kind):
    torch.manual_seed(0)
    if kind == "distilbert":
        cfg = tr.DistilBertConfig(n_layers=2, dim=32, hidden_dim=64, n_heads=2, vocab_size=61,
                                  max_position_embeddings=32, num_labels=3, pad_token_id=0)
        bert = tr.DistilBertForSequenceClassification(cfg).eval()
    else:
        config_cls, model_cls = {
            "bert": (tr.BertConfig, tr.BertForSequenceClassification),
            "roberta": (tr.RobertaConfig, tr.RobertaForSequenceClassification),
        }[kind]
        cfg = config_cls(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                         num_attention_heads=2, vocab_size=61, max_position_embeddings=40,
                         num_labels=3, pad_token_id=0)
        bert = model_cls(cfg).eval()
    assert M.family(bert) == kind.replace("roberta", "bert")
    batch, _ = text_batch_and_last()
    logits = R.layer_logits(bert, feats(bert, [batch], token="cls"))
    assert logits.shape == (3, 4, 3)
    with torch.no_grad():
        np.testing.assert_allclose(logits[-1], bert(**batch).logits.numpy(), atol=1e-5)


# ----------------------------------------------------------------------------- norm per layer


def test_layernorm_is_recomputed_for_every_layer(vit):
    """Entries a_l * base + b_l: LayerNorm removes a_l and b_l only if it uses each entry's own
    statistics, so all layers must read out the same; reusing one layer's stats would not."""
    base = torch.randn(5, 32, generator=torch.Generator().manual_seed(3))
    scales, shifts = [0.5, 3.0, 10.0, 1.0], [2.0, -1.0, 0.0, 5.0]
    hidden = torch.stack([a * base + b for a, b in zip(scales, shifts)]).numpy()
    logits = R.layer_logits(vit, hidden, chunk=2)
    with torch.no_grad():
        ref = vit.head(F.layer_norm(base, (32,), vit.norm.weight, vit.norm.bias, vit.norm.eps))
        for layer in range(DEPTH + 1):
            np.testing.assert_allclose(logits[layer], ref.numpy(), atol=1e-4)
        # the TransformerLens-style bug (last layer's LN statistics for every layer) differs
        last = torch.from_numpy(hidden[-1])
        mu, sd = last.mean(-1, keepdim=True), (last.var(-1, unbiased=False, keepdim=True)
                                              + vit.norm.eps).sqrt()
        reused = vit.head((torch.from_numpy(hidden[0]) - mu) / sd * vit.norm.weight + vit.norm.bias)
    assert not np.allclose(logits[0], reused.numpy(), atol=1e-2)


def test_rmsnorm_recomputed_on_every_entry_the_last_included():
    """No feature entry carries the final norm (layersim.nets.adapters), so RMSNorm is applied to
    every entry with its own statistics: entries s * base all read out as the same logits."""
    llama = make_decoder("llama")
    base = torch.randn(4, 32, generator=torch.Generator().manual_seed(4))
    hidden = torch.stack([s * base for s in (0.1, 7.0, 2.0)]).numpy()
    logits = R.layer_logits(llama, hidden)
    with torch.no_grad():
        ref = llama.lm_head(llama.model.norm(base)).numpy()
    for layer in range(3):
        np.testing.assert_allclose(logits[layer], ref, atol=1e-4)


def test_layer_subset_by_layer_index(decoder):
    batch, _ = text_batch_and_last()
    full = feats(decoder, [batch], token="last")
    all_logits = R.layer_logits(decoder, full)
    sub = R.layer_logits(decoder, full[[2, 0]], layers=[-1, 0])
    np.testing.assert_allclose(sub, all_logits[[2, 0]], atol=1e-6)
    with pytest.raises(ValueError):
        R.layer_logits(decoder, full[[0, 2]])  # 2 entries without layers=


def test_readout_shares_the_layer_check(vit, images):
    hidden = M.collect(vit, [images[:2]], progress=False, device="cpu").hidden
    with pytest.raises(ValueError, match="more than once"):
        R.layer_logits(vit, hidden[[1, 1]], layers=[1, 1])


def test_no_final_norm_option_chunks_and_memmap(vit, images, tmp_path):
    hidden = feats(vit, [images], token="cls")
    raw = R.layer_logits(vit, hidden, apply_final_norm=False)
    with torch.no_grad():
        np.testing.assert_allclose(raw, vit.head(torch.from_numpy(hidden)).numpy(), atol=1e-5)
    whole = R.layer_logits(vit, hidden)
    np.testing.assert_allclose(R.layer_logits(vit, hidden, chunk=5), whole, atol=1e-6)
    mm = R.layer_logits(vit, hidden, chunk=5, out=tmp_path / "logits.npy")
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), whole, atol=1e-6)
    assert isinstance(mm, np.memmap)
    np.testing.assert_allclose(R.layer_logits(vit, torch.from_numpy(hidden)), whole, atol=1e-6)


# ----------------------------------------------------------------------------- pure functions

# 3 layers (0..2), 4 samples, 3 classes; argmax per layer:
#   layer 0: [0, 1, 2, 0]   layer 1: [1, 1, 2, 2]   layer 2: [1, 0, 2, 2]
HAND = np.array([
    [[5, 1, 0], [0, 5, 1], [0, 1, 5], [5, 0, 1]],
    [[0, 5, 1], [1, 5, 0], [1, 0, 5], [0, 1, 5]],
    [[0, 5, 1], [5, 1, 0], [0, 1, 5], [1, 0, 5]],
], dtype=np.float32)
LABELS = np.array([1, 0, 2, 2])


def test_layer_accuracy_hand_made():
    np.testing.assert_allclose(R.layer_accuracy(HAND, LABELS), [0.25, 0.75, 1.0])
    np.testing.assert_allclose(R.layer_accuracy(R.predictions(HAND), LABELS), [0.25, 0.75, 1.0])


def test_saturation_layer_hand_made():
    # sample 0: 0,1,1 -> 1; sample 1: 1,1,0 -> 2; sample 2: 2,2,2 -> 0; sample 3: 0,2,2 -> 1
    np.testing.assert_array_equal(R.saturation_layer(HAND), [1, 2, 0, 1])
    # a prediction that returns to the final one after a detour saturates after the detour
    preds = np.array([[3], [1], [3], [3]])
    np.testing.assert_array_equal(R.saturation_layer(preds), [2])


@settings(max_examples=50, deadline=None)
@given(arrays(np.int64, st.tuples(st.integers(1, 6), st.integers(1, 5)), elements=st.integers(0, 2)))
def test_saturation_layer_matches_definition(preds):
    got = R.saturation_layer(preds)
    for i in range(preds.shape[1]):
        want = min(l for l in range(preds.shape[0]) if (preds[l:, i] == preds[-1, i]).all())
        assert got[i] == want


def test_layer_probs_hand_made():
    logits = np.array([[[0.0, np.log(3.0)], [2.0, 2.0]]], dtype=np.float32)  # 1 layer, 2 samples
    probs = R.layer_probs(logits, np.array([0, 1]))
    np.testing.assert_allclose(probs.true, [[0.25, 0.5]], atol=1e-6)
    np.testing.assert_allclose(probs.top, [[0.75, 0.5]], atol=1e-6)
    assert R.layer_probs(logits).true is None
    big = R.layer_probs(np.array([[[1000.0, 0.0]]]), np.array([1]))  # stable softmax
    assert np.isfinite(big.true).all() and big.top[0, 0] == 1.0


def test_effective_depth():
    assert R.effective_depth(np.array([0.2, 0.91, 0.95, 0.99]), 0.1) == 1
    assert R.effective_depth(np.array([0.2, 0.5, 0.8]), 0.1) == 2  # none: L


def test_other_head_and_identity_head(vit, images):
    """``head=`` replaces the model's classifier: a probe's logits are its own map of the normed
    features, and Identity returns those features (LayerNorm per layer)."""
    hidden = feats(vit, [images], token="cls")
    normed = R.layer_logits(vit, hidden, head=torch.nn.Identity())
    assert normed.shape == (DEPTH + 1, 12, 32)
    with torch.no_grad():
        ref = F.layer_norm(torch.from_numpy(hidden[2]), (32,), vit.norm.weight, vit.norm.bias, vit.norm.eps)
        np.testing.assert_allclose(normed[2], ref.numpy(), atol=1e-5)
        probe = torch.nn.Linear(32, 3)
        np.testing.assert_allclose(R.layer_logits(vit, hidden, head=probe), probe(torch.from_numpy(normed)).numpy(),
                                   atol=1e-5)


def test_evaluate_reads_out_blocks_like_collect_then_layer_logits(vit, images):
    x, y = images, torch.arange(12) % 10
    ev = R.evaluate(vit, (x, y), device="cpu", batch_size=3)
    hidden = feats(vit, [(x, y)], token="cls")
    np.testing.assert_allclose(ev.hidden, hidden, atol=1e-6)
    np.testing.assert_array_equal(ev.labels, y.numpy())
    np.testing.assert_allclose(ev.logits, R.layer_logits(vit, hidden)[1:], atol=1e-6)
    np.testing.assert_allclose(ev.accuracy, R.layer_accuracy(ev.logits, y.numpy()))
    own = R.evaluate(vit, (x, y), device="cpu", logits_fn=lambda m, h: np.zeros((DEPTH, len(y), 10), np.float32))
    np.testing.assert_allclose(own.accuracy, np.full(DEPTH, np.mean(y.numpy() == 0)))
    with pytest.raises(ValueError, match="no labels"):
        R.evaluate(vit, torch.utils.data.TensorDataset(x), device="cpu")


def test_effective_depth_within_a_margin_of_a_reference():
    acc = np.array([0.5, 0.8, 0.9, 0.95])
    assert R.effective_depth_within(acc, reference=0.95, margin=0.05) == (3, pytest.approx(0.1))
    assert R.effective_depth_within(acc, reference=0.95, margin=0.5)[0] == 1
    assert R.effective_depth_within(acc, reference=1.5, margin=0.0)[0] == 4  # never reached: L


def test_next_token_scores_against_a_hand_computation_and_padding():
    t = tiny("llama")
    model, batch = t.model, t.batch
    got = R.next_token_scores(model, [batch], device="cpu")
    with torch.no_grad():
        logits = model(**batch).logits.double()
    nll, hits, n = 0.0, 0, 0
    for row, ids in enumerate(TEXT_IDS):
        L = sum(1 for i in ids if i)  # right padding with id 0
        for p in range(L - 1):
            logp = torch.log_softmax(logits[row, p], -1)
            nll -= logp[ids[p + 1]].item()
            hits += int(logits[row, p].argmax().item() == ids[p + 1])
            n += 1
    assert got.n_tokens == n
    # float32 log-softmax against a float64 one: rel=1e-6 was ~10 float32 ulps, reached within 10x here
    assert got.nll == pytest.approx(nll / n, rel=1e-5) and got.accuracy == pytest.approx(hits / n)
    assert got.perplexity == pytest.approx(np.exp(nll / n), rel=1e-5)
    skipped = R.next_token_scores(surgery.skip(model, 2, 2), [batch], device="cpu")
    assert skipped.n_tokens == n and skipped.nll != got.nll


# ----------------------------------------------------------------------------- next-token scores per layer


GPT2 = gpt2_config()


def next_token_accuracy_range(model, batches):
    """``(lo, hi)``: the next-token accuracy of ``model`` on ``batches`` when any token within ``_tol`` of a
    position's best logit may be its top-1. A random-init LM's top two logits can be closer than the rounding
    of another route to them, which then breaks the near tie its own way; ``lo`` counts the positions right
    for sure, ``hi`` those that may be right."""
    sure = maybe = n = 0
    with torch.no_grad():
        for b in batches:
            ids, mask = b["input_ids"], b["attention_mask"].bool()
            z = model(input_ids=ids, attention_mask=mask.long(), use_cache=False).logits[:, :-1].float()
            keep = mask[:, 1:] & mask[:, :-1]
            near = (z >= z.max(-1, keepdim=True).values - tensor_logit_tol(z))[keep]
            hit = near.gather(-1, ids[:, 1:][keep][:, None])[:, 0]
            sure += int((hit & (near.sum(-1) == 1)).sum())
            maybe += int(hit.sum())
            n += int(keep.sum())
    return sure / n, maybe / n


def test_layer_next_token_scores_end_at_the_models_own(batches):
    model = lm.build_gpt2(GPT2).eval()
    per_layer = R.layer_next_token_scores(model, batches[:2], device="cpu")
    own = R.next_token_scores(model, batches[:2], device="cpu")
    assert per_layer.nll.shape == (4,) and per_layer.n_tokens == own.n_tokens
    assert per_layer.nll[-1] == pytest.approx(own.nll, rel=1e-5)
    lo, hi = next_token_accuracy_range(model, batches[:2])  # the last layer's top-1 is the model's own
    assert lo <= own.accuracy <= hi and lo <= per_layer.accuracy[-1] <= hi


# ----------------------------------------------------------------------------- logit lens on causal LMs


def step_logits(model, ids, tokens):
    """The next-token logits [S, V] before each of ``tokens`` [S] generated after ``ids`` [1, T]: one pass
    over the whole sequence (the causal mask hides what follows each position)."""
    full = torch.cat([ids, torch.as_tensor(np.asarray(tokens)).long()[None]], dim=1)
    with torch.no_grad():
        return model(input_ids=full, attention_mask=torch.ones_like(full)).logits[0, ids.shape[1] - 1:-1].float()


class CharTokenizer:
    """Stands in for a tokenizer: one id per character (mod the tiny vocabulary)."""

    def __call__(self, text, return_tensors="pt"):
        return {"input_ids": torch.tensor([[3 + ord(c) % 90 for c in text]])}


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_greedy_lens_decodes_like_generate_and_reads_every_layer(family):
    model = tiny(family).model.eval()
    out = R.greedy_lens(model, CharTokenizer(), "Simply put", steps=6, device="cpu")
    ids = CharTokenizer()("Simply put")["input_ids"]
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                             min_new_tokens=6, pad_token_id=0)[0, ids.shape[1]:]
    # greedy: every step takes a top-1 token of the model given the tokens before it...
    z = step_logits(model, ids, out.tokens)
    tol = near_top(out.tokens, z)
    near_top(out.top[-1], z)  # ...which the lens on the last layer reads as its top-1 too
    # ...and the decoding is generate's until a step where two tokens tie within rounding (either may win)
    top2 = step_logits(model, ids, ref).topk(2, -1).values
    clear = torch.cumprod((top2[:, 0] - top2[:, 1] > 2 * tol).long(), 0).bool()
    assert out.tokens[clear.numpy()].tolist() == ref[clear].tolist()
    L = R.n_layers(model)
    assert out.top.shape == out.top_prob.shape == out.chosen_prob.shape == (L + 1, 6)
    assert np.allclose(out.chosen_prob[-1], out.top_prob[-1])
    assert out.max_error < 1e-5 and ((out.chosen_prob <= out.top_prob + 1e-7)).all()
    sat = R.saturation_layer(out.top)
    assert ((0 <= sat) & (sat <= L)).all()


def test_token_lens_keeps_the_top_token_of_every_layer_at_every_real_position():
    t = tiny("llama")
    model, batch = t.model.eval(), text_batch()
    lens = R.token_lens(model, [batch], device="cpu")
    keep = batch["attention_mask"].bool()
    L = R.n_layers(model)
    assert lens.top.shape == (L + 1, int(keep.sum())) and lens.confidence.shape == (int(keep.sum()),)
    with torch.no_grad():
        own = model(**batch).logits[keep]
        hs = model(**batch, output_hidden_states=True).hidden_states
    near_top(lens.top[-1], own)  # the lens on the last layer reads the model's own top-1
    assert lens.max_error < 1e-5
    np.testing.assert_allclose(lens.confidence, torch.softmax(own, -1).max(-1).values.numpy(), rtol=1e-5)
    # an independent readout of block 1 (HF's hidden_states[1] is block 1's output, no final norm)
    z1 = model.lm_head(model.model.norm(hs[1][keep]))
    near_top(lens.top[1], z1)


def test_token_lens_names_the_next_token_of_every_real_position():
    """Against the batch read position by position: the target of a real position is the text's next real token,
    -1 at the last token of each (right-padded) text; a text without padding ends with -1 too."""
    t = tiny("llama")
    model, batch = t.model.eval(), text_batch()
    lens = R.token_lens(model, [batch], device="cpu")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    expected = []
    for row, m in zip(ids.tolist(), mask.tolist()):
        n = sum(m)
        expected += row[1:n] + [-1]
    assert mask.sum(1).min() < mask.shape[1], "the batch needs a padded text"
    assert lens.target.tolist() == expected
    nxt = R.next_tokens(torch.tensor([[5, 6, 7]]), None)
    assert nxt.tolist() == [[6, 7, -1]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_token_lens_runs_the_model_once_per_batch(arch):
    """The layers and the model's own logits come from one forward pass: the base model is called once per batch,
    and the run's output that the stream hands on is the model's last hidden state (final norm applied)."""
    t = tiny(arch)
    model, batch = t.model.eval(), text_batch()
    calls = []
    handle = model.base_model.register_forward_hook(lambda *_: calls.append(1))
    try:
        R.token_lens(model, [batch, batch], device="cpu")
    finally:
        handle.remove()
    assert len(calls) == 2
    (read,) = list(M.stream(model, [batch], token="tokens", device="cpu"))
    with torch.no_grad():
        own = model(**batch, output_hidden_states=True)
    keep = batch["attention_mask"].bool()  # padding positions carry nothing (the stream gives them other positions)
    torch.testing.assert_close(read.output.last_hidden_state[keep], own.hidden_states[-1][keep], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.lm_head(read.output.last_hidden_state)[keep], own.logits[keep],
                               rtol=1e-5, atol=1e-5)
