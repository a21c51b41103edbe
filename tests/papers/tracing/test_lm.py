"""Tests of layersim.papers.tracing.lm: the small GPT-2's training and cache, exits against generate, bad settings."""

import pytest
import torch

from layersim.papers.tracing import lm

from builders import gpt2_config, tensor_logit_tol

GPT2 = gpt2_config()


def assert_greedy(model, prompts, tokens, ref):
    """``tokens`` [B, S] continue ``prompts`` [B, T] greedily: at every step a top-1 token of ``model`` given
    what precedes it, up to float32 rounding (one pass over the whole sequence gives every step's logits);
    and they are ``ref``, another greedy decoding, until a step where two tokens tie within rounding (each
    route may break that tie its own way)."""
    T = prompts.shape[1]

    def steps(out):
        with torch.no_grad():
            return model(input_ids=torch.cat([prompts, out], 1), use_cache=False).logits[:, T - 1:-1].float()

    z = steps(tokens)
    picked = z.gather(-1, tokens[..., None])[..., 0]
    assert (picked >= z.max(-1).values - tensor_logit_tol(z)).all()
    top2 = steps(ref).topk(2, -1).values
    clear = torch.cumprod((top2[..., 0] - top2[..., 1] > 2 * tensor_logit_tol(z)).long(), dim=1).bool()
    assert torch.equal(tokens[clear], ref[clear])


def test_training_learns_caches_and_the_aligned_model_differs(batches, tmp_cache):
    import dataclasses

    desc = {"source": "austen", "n": 48}
    m, meta = lm.cached_lm(GPT2, batches, desc, device="cpu", progress=False)
    assert not meta["from_cache"] and meta["history"][-1]["loss"] < meta["history"][0]["loss"]
    again, meta2 = lm.cached_lm(GPT2, batches, desc, device="cpu", progress=False)
    assert meta2["from_cache"]
    for a, b in zip(m.state_dict().values(), again.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    _, meta3 = lm.cached_lm(dataclasses.replace(GPT2, objective="aligned"), batches, desc, device="cpu", progress=False)
    assert meta3["key"] != meta["key"]


def test_exit_at_the_last_block_with_a_tiny_nucleus_is_greedy_generate(batches):
    model = lm.build_gpt2(GPT2).eval()
    prompts = batches[0]["input_ids"][:3, :4]
    ours = lm.generate_at_exit(model, prompts, 3, 5, p=1e-9, device="cpu")
    with torch.no_grad():
        ref = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=5, min_new_tokens=5,
                             do_sample=False, pad_token_id=0)[:, 4:]
    assert_greedy(model, prompts, ours, ref)
    early = lm.generate_at_exit(model, prompts, 1, 5, p=0.95, seed=1, device="cpu")
    assert early.shape == (3, 5) and torch.equal(early, lm.generate_at_exit(model, prompts, 1, 5, p=0.95, seed=1,
                                                                            device="cpu"))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="objective"):
        lm.LMConfig(objective="kl")
    with pytest.raises(ValueError, match="multiple"):
        lm.LMConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="source"):
        lm.texts("wiki", "train", 3)
