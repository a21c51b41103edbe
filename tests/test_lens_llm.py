"""layersim.nets.readout's logit lens on causal LMs (tracing App. C.1): greedy decoding read at every
layer, and the lens at every token position, on a random-init tiny LLaMA and GPT-2."""

import numpy as np
import pytest
import torch

from builders import text_batch, tiny
from layersim.nets import models, readout


def near_top(tokens, logits):
    """Each of ``tokens`` [N] is a top-1 of its row of ``logits`` [N, V] up to float32 rounding: its logit is
    at most 1e-4 x max |logits| below the row's best (hundreds of times the drift between two routes to the
    same logits: other batching, a KV cache, other CPU kernels). A random-init model's top two logits may be
    closer than that drift, so one route's argmax need not be another's; a wrong token falls far short.
    Returns the tolerance."""
    z = (logits.detach() if isinstance(logits, torch.Tensor) else torch.from_numpy(np.asarray(logits))).double()
    tol = 1e-4 * float(z.abs().max())
    picked = z.gather(-1, torch.as_tensor(np.asarray(tokens)).long().reshape(-1, 1))[:, 0]
    assert (picked >= z.max(-1).values - tol).all(), (picked - z.max(-1).values).min()
    return tol


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
    out = readout.greedy_lens(model, CharTokenizer(), "Simply put", steps=6, device="cpu")
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
    L = readout.n_layers(model)
    assert out.top.shape == out.top_prob.shape == out.chosen_prob.shape == (L + 1, 6)
    assert np.allclose(out.chosen_prob[-1], out.top_prob[-1])
    assert out.max_error < 1e-5 and ((out.chosen_prob <= out.top_prob + 1e-7)).all()
    sat = readout.saturation_layer(out.top)
    assert ((0 <= sat) & (sat <= L)).all()


def test_token_lens_keeps_the_top_token_of_every_layer_at_every_real_position():
    t = tiny("llama")
    model, batch = t.model.eval(), text_batch()
    lens = readout.token_lens(model, [batch], device="cpu")
    keep = batch["attention_mask"].bool()
    L = readout.n_layers(model)
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
    lens = readout.token_lens(model, [batch], device="cpu")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    expected = []
    for row, m in zip(ids.tolist(), mask.tolist()):
        n = sum(m)
        expected += row[1:n] + [-1]
    assert mask.sum(1).min() < mask.shape[1], "the batch needs a padded text"
    assert lens.target.tolist() == expected
    nxt = readout.next_tokens(torch.tensor([[5, 6, 7]]), None)
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
        readout.token_lens(model, [batch, batch], device="cpu")
    finally:
        handle.remove()
    assert len(calls) == 2
    (read,) = list(models.stream(model, [batch], token="tokens", device="cpu"))
    with torch.no_grad():
        own = model(**batch, output_hidden_states=True)
    keep = batch["attention_mask"].bool()  # padding positions carry nothing (the stream gives them other positions)
    torch.testing.assert_close(read.output.last_hidden_state[keep], own.hidden_states[-1][keep], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.lm_head(read.output.last_hidden_state)[keep], own.logits[keep],
                               rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_lens_benchmark_times_token_lens_beside_plain_transformers(arch):
    from layersim.tools import bench_lens

    t = tiny(arch)
    model, batch = t.model.eval(), text_batch()
    plain = bench_lens.plain_lens(model, [batch])
    ours = readout.token_lens(model, [batch], device="cpu").top
    assert plain.shape == ours.shape
    with torch.no_grad():  # plain transformers' last layer is the model's own top-1, as token_lens's is
        near_top(plain[-1], model(**batch).logits[batch["attention_mask"].bool()])
    rows = bench_lens.compare(model, [batch], repeat=1)
    assert [r["recipe"] for r in rows] == ["layersim token_lens", "plain transformers"]
    assert rows[0]["agreement"] == 1.0 and rows[1]["agreement"] >= 0.95  # a random-init model has near ties
    assert all(r["seconds"] > 0 and r["positions"] == ours.shape[1] for r in rows)
    lines = bench_lens.table(rows)
    assert len(lines) == 4 and lines[2].startswith("| layersim token_lens |")
    with pytest.raises(ValueError, match="repeat"):
        bench_lens.compare(model, [batch], repeat=0)


def test_the_lens_benchmark_builds_a_random_model_from_a_folder_without_weights(tmp_path):
    """``bench lens --random-weights DIR``: the architecture of DIR's config.json with seeded random weights, in
    float32, and DIR's tokenizer; the same weights on every call (the timings of a machine without the checkpoint)."""
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from layersim.tools import bench_lens

    t = tiny("llama")
    t.model.config.save_pretrained(tmp_path)
    vocab = {"[UNK]": 0, "[PAD]": 1, "the": 2, "cat": 3}
    raw = Tokenizer(tok_models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors")) and not list(tmp_path.glob("*.bin"))
    model, tokenizer = bench_lens.random_lm(str(tmp_path))
    again, _ = bench_lens.random_lm(str(tmp_path))
    assert type(model).__name__ == type(t.model).__name__
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert tokenizer("the cat sat")["input_ids"] == [2, 3, 0]
