"""Tests of layersim.papers.redundancy.llm: the method on a causal LM (last-token cosine matrix, Block Redundancy,
next-token scores with a span approximated or skipped) and on the tracing ViTs, with the notebook's lines,
record and statements."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from builders import tiny_vit
from layersim.inputs import fetch, text_data
from layersim.nets import readout
from layersim.papers.redundancy import llm, models as rm

R05 = {"n_fit": 6, "n_eval": 5, "max_length": 12, "batch_size": 4, "blocks": [1, 3], "spans": [[2, 4]]}
TINY_LM = dict(num_hidden_layers=4, hidden_size=32, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64)


@pytest.fixture(scope="module")
def tiny_lm():
    """A random-init 4-block LLaMA-style LM with SmolLM2's tokenizer (right padding, as the notebook loads it)."""
    _, tokenizer = rm.load(rm.LLM, "smoke")
    lm, _ = fetch.load_model(rm.LLM.name, random_init=True, config=TINY_LM)
    return lm.eval(), tokenizer


# --- references built on the Hugging Face model alone ------------------------------------------------------------

def _block_io(lm, batch):
    """``(inputs, outputs)`` of every decoder block on ``batch``: ``inputs[k]`` enters block ``k + 1``."""
    ins, outs, hooks = [], [], []
    for layer in lm.model.layers:
        hooks.append(layer.register_forward_pre_hook(
            lambda m, args, kw: ins.append((args[0] if args else kw["hidden_states"]).detach()), with_kwargs=True))
        hooks.append(layer.register_forward_hook(
            lambda m, args, out: outs.append((out[0] if isinstance(out, tuple) else out).detach())))
    try:
        with torch.no_grad():
            lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return ins, outs


def _span_map(lm, batches, first, last):
    """The least-squares ``[d, d]`` map (numpy, no intercept) from block ``first``'s input to block ``last``'s
    output over every non-padding token of ``batches``."""
    X, Y = [], []
    for b in batches:
        ins, outs = _block_io(lm, b)
        keep = b["attention_mask"].bool()
        X.append(ins[first - 1][keep].double())
        Y.append(outs[last - 1][keep].double())
    return np.linalg.lstsq(torch.cat(X).numpy(), torch.cat(Y).numpy(), rcond=None)[0]


def _logits(lm, batch, span=None, W=None):
    """The LM's logits; with ``span = (first, last)``, block ``last``'s output is replaced by block ``first``'s input
    times ``W`` (``W=None``: the input itself, the span skipped)."""
    hooks, seen = [], {}
    if span is not None:
        first, last = span
        layers = lm.model.layers

        def enter(m, args, kw):
            seen["h"] = args[0] if args else kw["hidden_states"]

        def leave(m, args, out):
            h = seen["h"] if W is None else seen["h"] @ torch.as_tensor(W, dtype=seen["h"].dtype)
            return (h, *out[1:]) if isinstance(out, tuple) else h

        hooks = [layers[first - 1].register_forward_pre_hook(enter, with_kwargs=True),
                 layers[last - 1].register_forward_hook(leave)]
    try:
        with torch.no_grad():
            return lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()


def _next_token(lm, batches, **kw):
    """``(perplexity, accuracy, tokens)`` of predicting every next token that is not padding (right padding)."""
    nll, hits, n = 0.0, 0, 0
    for b in batches:
        z = _logits(lm, b, **kw)[:, :-1].double()
        target, keep = b["input_ids"][:, 1:], b["attention_mask"][:, 1:].bool()
        logp = torch.log_softmax(z, -1).gather(-1, target[..., None])[..., 0]
        nll -= logp[keep].sum().item()
        hits += (z.argmax(-1) == target)[keep].sum().item()
        n += int(keep.sum())
    return math.exp(nll / n), hits / n, n


# --- the language model -----------------------------------------------------------------------------------------

def test_texts_and_last_token_redundancy(tiny_lm):
    """The fitting and held-out batches are the training and held-out halves' Austen sentences, tokenised; cos, BR
    and the unmodified scores are checked against references on the Hugging Face model: the uncentred cosine of the
    last non-padding token's vectors at two blocks averaged over texts, eq. 1 by hand, next-token scores by hand."""
    lm, tok = tiny_lm
    fit, held = llm.texts(tok, R05, "smoke", seed=0)
    for batches, n, split in ((fit, 6, "train"), (held, 5, "test")):
        assert [len(b["input_ids"]) for b in batches] == [4, n - 4]
        rows = [ids[mask.bool()].tolist() for b in batches for ids, mask in zip(b["input_ids"], b["attention_mask"])]
        texts = text_data.text_sample("austen", n, seed=0, split=split)
        assert rows == [tok(t, truncation=True, max_length=12)["input_ids"] for t in texts]
    cos, BR, base = llm.last_token_redundancy(lm, held, device="cpu")
    last = []  # [L + 1, N, d]: the embedding output, then every block's output, at the last real token
    for b in held:
        ins, outs = _block_io(lm, b)
        at = torch.arange(len(b["input_ids"])), b["attention_mask"].sum(1) - 1
        last.append(torch.stack([ins[0][at]] + [o[at] for o in outs]))
    H = torch.cat(last, dim=1).double().numpy()
    assert cos.shape == (4, 4) and BR.shape == (4,)
    unit = H[1:] / np.linalg.norm(H[1:], axis=2, keepdims=True)
    np.testing.assert_allclose(cos, np.einsum("ind,jnd->ijn", unit, unit).mean(2), atol=1e-5)
    np.testing.assert_allclose(BR, [-np.mean((H[k] - H[k - 1]) ** 2) for k in range(1, 5)], rtol=1e-5)
    perplexity, accuracy, n = _next_token(lm, held)
    assert base.n_tokens == n > 0 and base.accuracy == accuracy
    assert base.perplexity == pytest.approx(perplexity, rel=1e-5) and base.nll == pytest.approx(math.log(perplexity))


def test_span_scores_approximate_and_skip_the_span(tiny_lm):
    """Against the Hugging Face model with block ``last``'s output replaced, by hooks, by block ``first``'s input
    mapped by the least-squares map of the fitting texts (approximated) or left as it is (skipped)."""
    lm, tok = tiny_lm
    fit, held = llm.texts(tok, R05, "smoke", seed=0)
    BR = np.array([-1.0, -2.0, -3.0, -4.0])
    assert llm.spans(R05) == [(1, 1), (3, 3), (2, 4)]
    row = llm.span_scores(lm, fit, held, 2, 4, BR, device="cpu")
    assert {k: row[k] for k in ("span", "first", "last", "n_blocks", "BR")} == {
        "span": "2-4", "first": 2, "last": 4, "n_blocks": 3, "BR": -3.0}  # the mean of -2, -3, -4
    ppl, acc, _ = _next_token(lm, held, span=(2, 4), W=_span_map(lm, fit, 2, 4))
    assert row["ppl_approx"] == pytest.approx(ppl, rel=1e-4) and row["acc_approx"] == acc
    ppl, acc, _ = _next_token(lm, held, span=(2, 4))
    assert row["ppl_skip"] == pytest.approx(ppl, rel=1e-5) and row["acc_skip"] == acc
    assert row["ppl_skip"] != pytest.approx(_next_token(lm, held)[0], rel=1e-3)  # the span does matter
    assert set(row) == {"span", "first", "last", "n_blocks", "BR", "ppl_approx", "acc_approx", "ppl_skip", "acc_skip"}
    assert llm.span_scores(lm, fit, held, 3, 3, BR, device="cpu")["span"] == "3"
    with pytest.raises(ValueError, match="not a span"):
        llm.span_scores(lm, fit, held, 3, 5, BR, device="cpu")


def test_lm_lines_and_record():
    base = readout.NextToken(nll=np.log(113.4567), perplexity=113.4567, accuracy=0.2261, n_tokens=1684)
    BR = np.array([-5.0, -0.4, -1.0, -0.5, -20.0, -0.9, -3.0])
    assert llm.lm_line(BR, base) == ("7 blocks; held-out perplexity 113.46, next-token accuracy 0.226 over 1684 "
                                     "tokens; most redundant blocks [2, 4, 6, 3, 7]")
    row = {"span": "22-29", "ppl_approx": 217.04, "ppl_skip": 9.5e9, "acc_approx": 0.1619, "acc_skip": 0.004}
    assert llm.span_line(row, base) == ("blocks  22-29: perplexity 113.46 -> approx 217.04, skip 9500000000.00; "
                                        "accuracy 0.226 -> 0.162 / 0.004")
    cos = np.eye(7)
    record = llm.lm_record("smollm2-135m", cos, BR, base, [row])
    assert record == {"model": "smollm2-135m", "blocks": 7, "base": base._asdict(), "cos_matrix": cos,
                      "block_redundancy": BR, "spans": [row]}


def test_lm_claims_are_the_fraction_of_spans_won_and_the_rank_correlation_over_single_blocks():
    """By hand: approximating beats skipping in 3 of 4 spans; over the three single blocks, BR -0.5, -0.1, -100
    and minus the perplexity increase -7, -2, -53 rank alike (Spearman 1). The 4-block span does not count: with it
    the ranks would disagree."""
    from scipy.stats import spearmanr

    table = pd.DataFrame([
        {"span": "2", "n_blocks": 1, "BR": -0.5, "ppl_approx": 120.0, "ppl_skip": 130.0},
        {"span": "5", "n_blocks": 1, "BR": -0.1, "ppl_approx": 111.0, "ppl_skip": 140.0},
        {"span": "29", "n_blocks": 1, "BR": -100.0, "ppl_approx": 166.0, "ppl_skip": 160.0},
        {"span": "26-29", "n_blocks": 4, "BR": -50.0, "ppl_approx": 199.0, "ppl_skip": 3.3e5}])
    fraction, rho = llm.lm_claims(table, 113.0)
    assert fraction == 0.75
    assert rho == pytest.approx(1.0)
    assert spearmanr(table.BR, -(table.ppl_approx - 113.0)).statistic < 0.9  # what counting the span would give
    flipped = table.assign(ppl_approx=[166.0, 111.0, 120.0, 199.0])  # blocks 2 and 29 swap their increases
    assert llm.lm_claims(flipped, 113.0)[1] == pytest.approx(spearmanr([-0.5, -0.1, -100.0], [-53, 2, -7]).statistic)
    with pytest.raises(ValueError, match="columns"):
        llm.lm_claims(table.drop(columns="BR"), 113.0)


# --- the tracing ViTs ---------------------------------------------------------------------------------------------

def test_vit_redundancy_reads_both_tracing_vits_on_their_data_set(monkeypatch):
    vits = {"standard": tiny_vit(perturb=True), "aligned": tiny_vit()}
    monkeypatch.setattr(rm, "load", lambda spec, scale, seed=0, device="auto": (vits[spec.name], None))
    vit_br, dataset = llm.vit_redundancy(rm.tracing_vits("smoke"), "smoke", 20, seed=0, device="cpu")
    assert list(vit_br) == ["ViT (standard)", "ViT (aligned)"] and dataset == "fashion-mnist"
    batches, _ = rm.inputs(rm.tracing_vits("smoke")["ViT (standard)"], "fashion-mnist", 20, scale="smoke", seed=0)
    assert sum(len(b) for b in batches) == 20
    for name, vit in (("ViT (standard)", vits["standard"]), ("ViT (aligned)", vits["aligned"])):
        # eq. 1 by hand on the [CLS] token of the embedding output and of every block's output
        H = rm.block_tokens(vit, batches, device="cpu").astype(np.float64)
        np.testing.assert_allclose(vit_br[name], [-np.mean((H[k] - H[k - 1]) ** 2) for k in range(1, len(H))],
                                   rtol=1e-5)
    assert vit_br["ViT (aligned)"].shape == (3,) and not np.allclose(vit_br["ViT (standard)"], vit_br["ViT (aligned)"])


def test_aligned_minus_standard_and_vit_lines():
    vit_br = {"ViT (standard)": np.array([-0.05, -0.04, -0.07]), "ViT (aligned)": np.array([-0.06, -0.01, -0.02])}
    diff, higher = llm.aligned_minus_standard(vit_br)
    assert diff == pytest.approx((-0.09 + 0.16) / 3) and higher == 2
    assert llm.vit_lines(vit_br).split("\n") == ["ViT (standard)  BR per block: [-0.05, -0.04, -0.07]",
                                                 "ViT (aligned)   BR per block: [-0.06, -0.01, -0.02]"]
    with pytest.raises(ValueError, match="aligned"):
        llm.aligned_minus_standard({"ViT (standard)": vit_br["ViT (standard)"]})
