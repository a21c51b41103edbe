"""Tests of layersim.papers.tracing.aligned_gpt: the standard and the aligned GPT-2 of a run's settings, their
training, scores and text sampled at every block as an exit (t10, Figure 9)."""

from __future__ import annotations

import dataclasses
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.nets import readout  # noqa: E402
from layersim.notebook import settings  # noqa: E402
from layersim.papers.tracing import aligned_gpt, lm  # noqa: E402

LM_P = {"pretrained": "scratch", "source": "austen", "n_train": 48, "n_eval": 16, "max_length": 24, "vocab_size": 512,
        "n_layer": 3, "n_embd": 32, "n_head": 2, "steps": 3, "batch_size": 8, "lr": 1e-3, "warmup_steps": 1,
        "n_prompts": 4, "prompt_tokens": 5, "new_tokens": 4, "top_p": 0.95}


def test_configs_differ_only_in_the_objective():
    got = aligned_gpt.configs(LM_P, seed=3)
    assert list(got) == ["standard", "aligned"]
    expected = lm.LMConfig(vocab_size=512, n_positions=24, n_embd=32, n_layer=3, n_head=2, steps=3, batch_size=8,
                           lr=1e-3, warmup_steps=1, objective="ce", seed=3)
    assert got["standard"] == expected
    assert got["aligned"] == dataclasses.replace(expected, objective="aligned")
    assert aligned_gpt.pretrained_name(LM_P) is None and aligned_gpt.pretrained_name({"pretrained": "gpt2"}) == "gpt2"


def test_rules_accept_every_scales_presets_and_name_a_bad_value():
    assert settings.pick({"smoke": LM_P}, "smoke", rules=aligned_gpt.RULES)["n_layer"] == 3
    with pytest.raises(ValueError, match="top_p"):
        settings.pick({"smoke": LM_P}, "smoke", rules=aligned_gpt.RULES, top_p=1.5)
    with pytest.raises(ValueError, match="source"):
        settings.pick({"smoke": LM_P}, "smoke", rules=aligned_gpt.RULES, source="books")


@pytest.fixture(scope="module")
def lm_pair(tmp_path_factory):
    """The two small GPT-2s of LM_P trained by train_pair in a private cache, and that cache's folder."""
    old = os.environ.get("LAYERSIM_CACHE")
    cache = tmp_path_factory.mktemp("cache")
    try:
        os.environ["LAYERSIM_CACHE"] = str(cache)
        got = aligned_gpt.train_pair(LM_P, seed=0, device="cpu", progress=False)
    finally:
        if old is None:
            os.environ.pop("LAYERSIM_CACHE", None)
        else:
            os.environ["LAYERSIM_CACHE"] = old
    return got, cache


def test_train_pair_trains_both_objectives_on_the_same_texts_and_caches_them(lm_pair, monkeypatch, capsys):
    (nets, metas, tok, held_texts), cache = lm_pair
    assert list(nets) == ["standard", "aligned"] and len(tok) == 512 and tok.pad_token_id == 0
    assert held_texts == lm.texts("austen", "test", 16 + 4, seed=0)  # n_eval texts to score, n_prompts to prompt
    sizes = dict(vocab_size=512, n_positions=24, n_embd=32, n_layer=3, n_head=2, steps=3, batch_size=8, lr=1e-3,
                 warmup_steps=1, seed=0)
    for name, objective in (("standard", "ce"), ("aligned", "aligned")):
        meta = metas[name]
        assert meta["train"] == dataclasses.asdict(lm.LMConfig(**sizes, objective=objective)), name
        assert meta["data"] == {"source": "austen", "n_train": 48, "max_length": 24, "seed": 0,
                                "tokenizer": "austen-bpe-512"}, name  # both on the same texts
        assert meta["model"] == {"pretrained": None} and not meta["from_cache"] and meta["history"], name
        c = nets[name].config
        assert (c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_positions, c.pad_token_id) == (3, 32, 2, 512, 24, 0)
        assert not nets[name].training
    assert metas["standard"]["key"] != metas["aligned"]["key"]
    assert any(not torch.equal(a, b) for a, b in zip(nets["standard"].state_dict().values(),
                                                     nets["aligned"].state_dict().values()))
    capsys.readouterr()
    monkeypatch.setenv("LAYERSIM_CACHE", str(cache))
    again, metas2, _, _ = aligned_gpt.train_pair(LM_P, seed=0, device="cpu", progress=False)
    assert capsys.readouterr().out.splitlines() == [
        f"{n}: 3 steps of 8 texts (from the cache); final training loss {metas[n]['history'][-1]['loss']:.3f}"
        for n in nets]
    for name in nets:
        assert metas2[name]["from_cache"] and metas2[name]["key"] == metas[name]["key"]
        for a, b in zip(nets[name].state_dict().values(), again[name].state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_describe_training_and_model_records():
    cfg = aligned_gpt.configs(LM_P)["aligned"]
    meta = {"from_cache": False, "train_seconds": 12.4, "history": [{"loss": 5.0}, {"loss": 4.25}], "key": "k1",
            "n_params": 99}
    assert aligned_gpt.describe_training("aligned", cfg, meta) == \
        "aligned: 3 steps of 8 texts (trained in 12 s); final training loss 4.250"
    assert "(from the cache)" in aligned_gpt.describe_training("aligned", cfg, {**meta, "from_cache": True})
    assert aligned_gpt.model_records({"aligned": meta}) == {
        "aligned": {"checkpoint": "k1", "train_seconds": 12.4, "loss": [5.0, 4.25], "n_params": 99}}


def _scores(nll, accuracy):
    nll = np.asarray(nll, float)
    return readout.LayerNextToken(nll, np.exp(nll), np.asarray(accuracy, float), 100)


SCORES = {"standard": _scores([6.0, 5.2, 5.0, 4.8, 4.6], [0.0, 0.10, 0.12, 0.14, 0.16]),
          "aligned": _scores([6.0, 5.0, 4.9, 4.85, 4.7], [0.0, 0.12, 0.13, 0.14, 0.15])}


def test_score_table_has_a_column_per_score_and_model():
    table = aligned_gpt.score_table(SCORES)
    assert list(table.index) == [1, 2, 3, 4] and table.index.name == "block"
    assert list(table.columns) == ["accuracy standard", "perplexity standard", "accuracy aligned", "perplexity aligned"]
    np.testing.assert_allclose(table["perplexity aligned"], np.exp([5.0, 4.9, 4.85, 4.7]))
    with pytest.raises(ValueError, match="at least one model"):
        aligned_gpt.score_table({})


def test_statistics_compare_the_first_half_of_the_blocks_and_the_last():
    got = aligned_gpt.statistics(SCORES)
    std, ali = SCORES["standard"], SCORES["aligned"]
    assert got["lower_ppl"] == pytest.approx(((5.2 - 5.0) + (5.0 - 4.9)) / 2)  # blocks 1..2 of 4
    assert got["higher_acc"] == pytest.approx(((0.12 - 0.10) + (0.13 - 0.12)) / 2)
    assert got["final_ppl_ratio"] == pytest.approx(float(ali.perplexity[-1] / std.perplexity[-1]))
    with pytest.raises(ValueError, match="two blocks"):
        aligned_gpt.statistics({n: _scores(s.nll[:2], s.accuracy[:2]) for n, s in SCORES.items()})


def test_prompt_ids_are_the_first_tokens_of_long_enough_texts(lm_pair):
    tok = lm_pair[0][2]
    texts = ["Yes.", "It is a truth universally acknowledged, that a single man", "No.",
             "Emma Woodhouse, handsome, clever, and rich, with a comfortable home"]
    prompts, text = aligned_gpt.prompt_ids(texts, tok, 4, 5, 24)
    ids = [tok(t)["input_ids"] for t in texts]
    expected = [i[:5] for i in ids if len(i) >= 7]
    assert prompts.tolist() == expected and len(expected) == 2
    assert text == [tok.decode(e) for e in expected]
    with pytest.raises(ValueError, match="no text"):
        aligned_gpt.prompt_ids(["Yes.", "No."], tok, 2, 5, 24)


class _Encoder(torch.nn.Module):
    """A stand-in sentence encoder: a fixed random embedding of the token ids (HF-style output)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(512, 8)

    def forward(self, input_ids, attention_mask=None, **_):
        return type("Out", (), {"last_hidden_state": self.emb(input_ids)})()


def _mean_pooled(encoder, tok, texts):
    """[N, d]: the stand-in encoder's token embeddings averaged over each text's tokens, one text at a time."""
    weight = encoder.emb.weight.detach().double().numpy()
    return np.stack([weight[tok(t)["input_ids"]].mean(0) for t in texts])


def _eq22(text):
    """Eq. 22: the product over n = 2, 3, 4 of unique n-grams over n-grams of the text's words (1 without any)."""
    words = text.split()
    out = 1.0
    for n in (2, 3, 4):
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        out *= len(set(grams)) / len(grams) if grams else 1.0
    return out


def _greedy_at_exit(model, prompts, layer, new_tokens):
    """Greedy continuation of ``prompts`` read at block ``layer``: the final norm and the LM head on that block's
    output (the model's own logits at the last block)."""
    ids = prompts
    L = model.config.n_layer
    with torch.no_grad():
        for _ in range(new_tokens):
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
            h = out.hidden_states[layer][:, -1]
            z = out.logits[:, -1] if layer == L else model.lm_head(model.transformer.ln_f(h))
            ids = torch.cat([ids, z.argmax(-1)[:, None]], dim=1)
    return ids[:, prompts.shape[1]:]


def _assert_scored_by_hand(gen, samples, prompt_text, encoder, tok):
    """Each row's coherence (eq. 21) and diversity (eq. 22) are those of the continuations returned, by hand."""
    h_prompt = _mean_pooled(encoder, tok, prompt_text)
    for row in gen.itertuples():
        new = samples[f"{row.model}/{row.block}"]
        assert len(new) == len(prompt_text)
        h_new = _mean_pooled(encoder, tok, new)
        cos = (h_prompt * h_new).sum(1) / (np.linalg.norm(h_prompt, axis=1) * np.linalg.norm(h_new, axis=1))
        assert row.coherence == pytest.approx(cos.mean(), abs=1e-6)  # the encoder runs in float32
        assert row.diversity == pytest.approx(np.mean([_eq22(t) for t in new]))


def test_generation_at_exits_samples_and_scores_every_block(lm_pair):
    (nets, _, tok, held_texts), _ = lm_pair
    torch.manual_seed(0)
    encoder = (_Encoder().eval(), tok)
    prompts, text = aligned_gpt.prompt_ids(held_texts[16:], tok, 3, 5, 24)  # at most 3: samples keep them all
    gen, samples = aligned_gpt.generation_at_exits(nets, prompts, text, tok, 4, 0.95, seed=2, device="cpu",
                                                   encoder=encoder)
    assert list(gen.columns) == ["model", "block", "coherence", "diversity"]
    assert gen[["model", "block"]].values.tolist() == [[n, b] for n in nets for b in (1, 2, 3)]
    _assert_scored_by_hand(gen, samples, text, encoder[0], tok)
    again = aligned_gpt.generation_at_exits(nets, prompts, text, tok, 4, 0.95, seed=2, device="cpu", encoder=encoder)
    assert again[1] == samples  # one seed for all: the same samples
    greedy_gen, greedy = aligned_gpt.generation_at_exits(nets, prompts, text, tok, 10, 1e-9, device="cpu",
                                                         encoder=encoder)
    for name, model in nets.items():  # a tiny nucleus samples the top token of the model cut after each block
        for block in (1, 2, 3):
            assert greedy[f"{name}/{block}"] == tok.batch_decode(_greedy_at_exit(model, prompts, block, 10))
    assert greedy["standard/1"] != greedy["standard/3"] or greedy["aligned/1"] != greedy["aligned/3"]
    _assert_scored_by_hand(greedy_gen, greedy, text, encoder[0], tok)
    assert greedy_gen.diversity.min() < 1  # greedy decoding repeats itself: eq. 22 below 1
    line = aligned_gpt.describe_samples(text, samples, list(nets), 3)
    assert line.splitlines()[0] == f"{len(text)} prompts; e.g. {text[0]!r} ->"
    assert line.splitlines()[1] == f"  standard, block 1: {samples['standard/1'][0]!r}"
    assert line.splitlines()[4] == f"  aligned, block 3: {samples['aligned/3'][0]!r}"


def test_layers_figure_draws_the_four_panels_of_figure_9():
    gen = pd.DataFrame([{"model": n, "block": b, "coherence": 0.1 * b + i, "diversity": 1.0 - 0.01 * b}
                        for i, n in enumerate(["standard", "aligned"]) for b in (1, 2, 3, 4)])
    fig = aligned_gpt.layers_figure(SCORES, gen)
    assert [ax.get_title() for ax in fig.axes] == ["(a) prediction accuracy", "(b) perplexity", "(c) coherence",
                                                   "(d) diversity"]
    np.testing.assert_allclose(fig.axes[0].get_lines()[1].get_ydata(), SCORES["aligned"].accuracy[1:])
    np.testing.assert_allclose(fig.axes[1].get_lines()[0].get_ydata(), SCORES["standard"].perplexity[1:])
    np.testing.assert_allclose(fig.axes[2].get_lines()[1].get_ydata(), [1.1, 1.2, 1.3, 1.4])
    assert fig.axes[1].get_yscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError, match="missing"):
        aligned_gpt.layers_figure({"standard": SCORES["standard"]}, gen)
