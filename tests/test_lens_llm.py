"""layersim.readout's logit lens on causal LMs (tracing App. C.1): greedy decoding read at every
layer, and the lens at every token position, on a random-init tiny LLaMA and GPT-2."""

import numpy as np
import pytest
import torch

from builders import text_batch, tiny
from layersim import readout


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
    assert out.tokens.tolist() == ref.tolist()
    L = readout.n_layers(model)
    assert out.top.shape == out.top_prob.shape == out.chosen_prob.shape == (L + 1, 6)
    assert np.array_equal(out.top[-1], out.tokens) and np.allclose(out.chosen_prob[-1], out.top_prob[-1])
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
    assert np.array_equal(lens.top[-1], own.argmax(-1).numpy()) and lens.max_error < 1e-5
    np.testing.assert_allclose(lens.confidence, torch.softmax(own, -1).max(-1).values.numpy(), rtol=1e-5)
    # an independent readout of block 1 (HF's hidden_states[1] is block 1's output, no final norm)
    z1 = model.lm_head(model.model.norm(hs[1][keep]))
    assert np.array_equal(lens.top[1], z1.argmax(-1).numpy())
