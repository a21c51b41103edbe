"""Tests of layersim.papers.tracing.llm: the logit lens on a causal LM while it decodes and over a text set, each
token's saturation layer, the easy/hard split and Theorem 2's "stays correct" (t08), against a hand-read lens and
loops written out here."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from builders import tiny  # noqa: E402
from layersim.inputs import text_data  # noqa: E402
from layersim.nets import readout  # noqa: E402
from layersim.notebook import settings  # noqa: E402
from layersim.papers.tracing import llm as tracing_llm  # noqa: E402


class WordTokenizer:
    """Stands in for a causal LM's tokenizer: one id per character (ids 3..92 of the tiny vocabulary), right
    padding with 0, and ``decode`` writing each id as ``<id>``."""

    pad_token_id = 0

    def _ids(self, text, max_length=None):
        ids = [3 + ord(c) % 90 for c in text]
        return ids[:max_length] if max_length else ids

    def __call__(self, texts, padding=False, truncation=False, max_length=None, return_tensors="pt"):
        if isinstance(texts, str):
            return {"input_ids": torch.tensor([self._ids(texts)])}
        rows = [self._ids(t, max_length if truncation else None) for t in texts]
        n = max(map(len, rows))
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        lengths = torch.tensor([len(r) for r in rows])
        return {"input_ids": ids, "attention_mask": (torch.arange(n)[None] < lengths[:, None]).long()}

    def decode(self, ids):
        return "".join(f"<{int(i)}>" for i in ids)


def _saturation_by_loop(top):
    """Each column's smallest layer from which the top token stays the last layer's (a loop, not a cumprod)."""
    top = np.asarray(top)
    out = []
    for j in range(top.shape[1]):
        l = top.shape[0] - 1
        while l > 0 and top[l - 1, j] == top[-1, j]:
            l -= 1
        out.append(l)
    return np.array(out)


def _lens(model, ids, mask=None):
    """[L + 1, B, T, V] float32: every layer's logits through the logit lens, read by hand from the LLaMA's hidden
    states: its final norm and LM head on each block's output, and at the last layer the model's own logits
    (Hugging Face returns that layer's hidden state already normed)."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        lens = [model.lm_head(model.model.norm(h)) for h in out.hidden_states[:-1]]
        return torch.stack(lens + [out.logits]).float()


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny random-init LLaMA decoded through the lens (into a cache of its own) and read on three texts."""
    model, tok = tiny("llama").model.eval(), WordTokenizer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERSIM_CACHE", str(tmp_path_factory.mktemp("cache")))
        r = tracing_llm.decode(model, tok, "Simply put", 5, device="cpu")
    texts = ["It is a truth", "universally acknowledged, that", "a single man"]
    r.update(tracing_llm.read_texts(model, tok, texts, 2, 12, device="cpu"))
    return model, tok, texts, r


def test_decode_is_greedy_lens_and_each_tokens_saturation_layer(lm_run):
    model, tok, _, r = lm_run
    assert r["model"] is model and r["tokenizer"] is tok and r["L"] == readout.n_layers(model) == 3
    ids, tokens, top, top_prob = tok("Simply put")["input_ids"], [], [], []
    for _ in range(5):  # greedy decoding, every layer read at the last position
        z = _lens(model, ids)[:, 0, -1]
        p = torch.softmax(z, -1)
        tokens.append(int(z[-1].argmax()))
        top.append(z.argmax(-1).numpy())
        top_prob.append(p.max(-1).values.numpy())
        ids = torch.cat([ids, torch.tensor([[tokens[-1]]])], dim=1)
    top = np.stack(top, 1)
    np.testing.assert_array_equal(r["greedy"].tokens, tokens)
    np.testing.assert_array_equal(r["greedy"].top, top)
    np.testing.assert_array_equal(r["greedy"].top[-1], tokens)  # the last layer's lens is the model's own choice
    np.testing.assert_allclose(r["greedy"].top_prob, np.stack(top_prob, 1), rtol=1e-5)
    np.testing.assert_array_equal(r["saturation"], _saturation_by_loop(top))
    assert r["saturation"].shape == (5,) and r["saturation"].max() <= 3


def test_read_texts_is_the_lens_at_every_position_split_at_the_median(lm_run):
    model, tok, texts, r = lm_run
    top, conf, target = [], [], []
    for b in text_data.text_batches(texts, tok, 2, 12):  # right-padded batches of 2, at most 12 tokens
        keep = b["attention_mask"].bool()
        z = _lens(model, b["input_ids"], b["attention_mask"])
        top.append(z.argmax(-1)[:, keep].numpy())  # the real positions, text by text
        conf.append(torch.softmax(z[-1][keep], -1).max(-1).values.numpy())
        for ids, n in zip(b["input_ids"], keep.sum(1)):
            target += ids[1:n].tolist() + [-1]  # each position's next token, none at the text's end
    top, conf = np.concatenate(top, 1), np.concatenate(conf).astype(float)
    np.testing.assert_array_equal(r["text"].top, top)
    np.testing.assert_allclose(r["text"].confidence, conf, rtol=1e-5)
    np.testing.assert_array_equal(r["text"].target, target)
    assert r["text"].top.shape[1] == sum(min(len(t), 12) for t in texts)
    sat = _saturation_by_loop(top)
    np.testing.assert_array_equal(r["text_saturation"], sat)
    easy = conf >= np.median(conf)
    eh = r["easy_hard"]
    assert eh["easy"] == pytest.approx(sat[easy].mean()) and eh["hard"] == pytest.approx(sat[~easy].mean())
    assert eh["difference"] == pytest.approx(sat[~easy].mean() - sat[easy].mean())
    assert eh["median_confidence"] == pytest.approx(np.median(conf))


def test_describe_decoding_and_texts_state_the_run(lm_run):
    _, tok, texts, r = lm_run
    line = tracing_llm.describe_decoding("tiny", "Simply put", r)
    assert line.startswith("tiny: 3 blocks; 'Simply put' -> ")
    assert tok.decode(r["greedy"].tokens.tolist()) in line and str(r["saturation"].tolist()) in line
    text = tracing_llm.describe_texts("tiny", r, len(texts))
    assert f"{r['text'].top.shape[1]} token positions of 3 sentences" in text
    assert f"mean saturation layer {r['text_saturation'].mean():.2f} of 3" in text


def _fake_run(rng, L=4, steps=6, n=30):
    """A run with hand-made lens results (the NamedTuples' fields only), for the statistics and the records."""
    top = rng.integers(0, 3, size=(L + 1, steps))
    sat = _saturation_by_loop(top)
    text_top = rng.integers(0, 3, size=(L + 1, n))
    text_sat = _saturation_by_loop(text_top)
    conf = rng.random(n)
    g = readout.GreedyLens(rng.integers(0, 50, steps), top, rng.random((L + 1, steps)), rng.random((L + 1, steps)),
                           float(rng.random() * 1e-6))
    target = np.where(rng.random(n) < 0.9, rng.integers(0, 3, n), -1)  # the text's next tokens, -1 at text ends
    lens = readout.TokenLens(text_top, conf, float(rng.random() * 1e-6), target)
    return {"model": None, "tokenizer": WordTokenizer(), "L": L, "greedy": g, "saturation": sat, "text": lens,
            "text_saturation": text_sat, "easy_hard": tracing_llm.easy_vs_hard(text_sat, conf)}


def test_statistics_and_records_hold_each_models_numbers():
    rng = np.random.default_rng(0)
    runs = {"a": _fake_run(rng), "b": _fake_run(rng, L=5)}
    S = tracing_llm.statistics(runs)
    for n, r in runs.items():
        assert S["error"][n] == max(r["greedy"].max_error, r["text"].max_error)
        assert S["early"][n] == sum(s < r["L"] for s in r["saturation"]) / len(r["saturation"])
        assert S["text_fraction"][n] == pytest.approx(np.mean(r["text_saturation"] < r["L"]))
        assert S["gap"][n] == r["easy_hard"]["difference"]
        stays = tracing_llm.stays_correct(r["text"].top, r["text"].target)  # Theorem 2 on the text positions
        assert S["stays"][n] == stays["fraction"] and S["stays_unconditional"][n] == stays["unconditional"]
    rec = tracing_llm.records(runs)
    for n, r in runs.items():
        e = rec[n]
        assert e["blocks"] == r["L"] and e["text_tokens"] == len(r["text_saturation"])
        assert e["generated"] == "".join(f"<{i}>" for i in r["greedy"].tokens)
        counts = [int(np.sum(r["text_saturation"] == l)) for l in range(r["L"] + 1)]
        assert list(e["text_saturation_counts"]) == counts
        assert e["saturation"] is r["saturation"] and e["chosen_prob"] is r["greedy"].chosen_prob
        assert e["easy_hard"] is r["easy_hard"]
        assert e["stays_correct"]["fraction"] == S["stays"][n] and e["stays_correct"]["cases"] > 0


def test_theorem_2s_test_is_a_measurement_not_part_of_reading_the_texts():
    """Random weights predict no position correctly below the last layer: reading the texts still works, and the
    measurement that needs correct predictions raises where the claims are measured (a rehearsal notes it there)."""
    rng = np.random.default_rng(2)
    r = _fake_run(rng)
    r["text"] = r["text"]._replace(target=np.full_like(r["text"].target, 7))  # a token no layer ever predicts
    with pytest.raises(ValueError, match="nothing to test"):
        tracing_llm.statistics({"a": r})


def test_saturation_histogram_draws_each_models_fractions():
    rng = np.random.default_rng(1)
    runs = {"a": _fake_run(rng), "b": _fake_run(rng, L=5)}
    fig = tracing_llm.saturation_histogram(runs)
    assert len(fig.axes) == 2
    for ax, r in zip(fig.axes, runs.values()):
        L = r["L"]
        filled = [p.get_height() for p in ax.patches if p.get_fill()]
        want = np.bincount(r["text_saturation"], minlength=L + 1) / len(r["text_saturation"])
        np.testing.assert_allclose(filled, want, atol=1e-12)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == [f"Austen text ({len(r['text_saturation'])} tokens)",
                          f"generated ({len(r['saturation'])} tokens)"]
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        tracing_llm.saturation_histogram({})


def test_lens_table_figure_marks_each_steps_saturation_layer():
    r = _fake_run(np.random.default_rng(2))
    fig = tracing_llm.lens_table_figure("fake", r)
    ax = fig.axes[0]
    dashes = [line for line in ax.get_lines() if line.get_marker() == "_"]
    assert len(dashes) == 1
    np.testing.assert_allclose(dashes[0].get_ydata(), r["saturation"] - 0.5)
    assert len(ax.texts) == r["greedy"].top.size  # one word per layer and step
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"<{i}>" for i in r["greedy"].tokens]
    assert "fake" in ax.get_title()
    plt.close(fig)


def test_stays_correct_counts_correct_predictions_that_stay_correct_at_every_later_layer():
    """By hand, L = 3 (layers 0..3), four positions with next tokens 1, 2, 3 and none (-1):
    position 1: top 1,1,1,1 -> correct at 0, 1, 2, all stay (3 cases, 3 stay);
    position 2: top 2,9,2,2 -> correct at 0 (does not stay: wrong at 1) and 2 (stays): 2 cases, 1 stays;
    position 3: top 3,3,3,9 -> correct at 0, 1, 2, wrong at the last layer: 3 cases, none stays;
    position 4: no next token, left out. Fraction 4 / 8; per layer 1/3 (only position 1 stays from layer 0),
    1/2, 2/3; unconditional: of the 9
    (position, l < 3) pairs, right from l on: position 1 at l = 0, 1, 2, position 2 at l = 2 -> 4 / 9."""
    top = np.array([[1, 2, 3, 5], [1, 9, 3, 5], [1, 2, 3, 5], [1, 2, 9, 5]])
    out = tracing_llm.stays_correct(top, np.array([1, 2, 3, -1]))
    assert out["fraction"] == pytest.approx(0.5) and out["cases"] == 8
    np.testing.assert_allclose(out["per_layer"], [1 / 3, 1 / 2, 2 / 3])
    assert out["unconditional"] == pytest.approx(4 / 9)
    # a model whose lens is right at every layer: every case stays
    assert tracing_llm.stays_correct(np.tile([[4, 5]], (3, 1)), np.array([4, 5]))["fraction"] == 1.0
    with pytest.raises(ValueError, match="no position has a next token"):
        tracing_llm.stays_correct(top, np.full(4, -1))
    with pytest.raises(ValueError, match="nothing to test"):
        tracing_llm.stays_correct(np.array([[0, 0], [1, 1]]), np.array([1, 1]))
    with pytest.raises(ValueError, match="need top"):
        tracing_llm.stays_correct(top, np.array([1, 2]))


def test_decode_is_computed_once_per_model_prompt_and_steps(tmp_cache, monkeypatch):
    model, tok = tiny("llama").model.eval(), WordTokenizer()
    first = tracing_llm.decode(model, tok, "Simply put", 3, device="cpu")

    def fail(*args, **kwargs):
        raise AssertionError("decoded again")

    real = readout.greedy_lens
    monkeypatch.setattr(readout, "greedy_lens", fail)
    again = tracing_llm.decode(model, tok, "Simply put", 3, device="cpu")  # another seed's run: read back
    for field in readout.GreedyLens._fields:
        assert np.array_equal(getattr(first["greedy"], field), getattr(again["greedy"], field))
    assert np.array_equal(first["saturation"], again["saturation"])
    with pytest.raises(AssertionError, match="decoded again"):  # another prompt, or other weights, decode anew
        tracing_llm.decode(model, tok, "Simply", 3, device="cpu")
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    with pytest.raises(AssertionError, match="decoded again"):
        tracing_llm.decode(model, tok, "Simply put", 3, device="cpu")
    monkeypatch.setattr(readout, "greedy_lens", real)


def test_rules_take_t08s_smoke_settings_and_name_a_bad_value():
    smoke = {"models": list(tracing_llm.MODELS["smoke"]), "prompt": tracing_llm.PROMPT, "steps": 4, "n_texts": 8,
             "max_length": 24, "batch_size": 8}
    assert settings.pick({"smoke": smoke}, "smoke", rules=tracing_llm.RULES) == smoke
    for name, bad in [("models", ["smollm2-135m", "smollm2-135m"]), ("steps", 0), ("n_texts", 1), ("prompt", 3)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=tracing_llm.RULES, **{name: bad})
