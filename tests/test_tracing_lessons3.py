"""The tracing paper's lesson helpers for early exit (t04), the aligned GPT (t10) and aligned training (t03),
against independent computations written out here (the notebooks' former inline code, or plain numpy / torch)."""

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

from layersim.inputs import data  # noqa: E402
from layersim.nets import generation, models, readout  # noqa: E402
from layersim.notebook import presets, settings  # noqa: E402
from layersim.papers.tracing import aligned_gpt, early_exit, lm  # noqa: E402
from layersim.papers.tracing import aligned_training as AT  # noqa: E402
from layersim.train import objectives  # noqa: E402

# ----- early exit (t04, Figure 7) ---------------------------------------------------------------------------------


def _naive_exits(logits, labels, threshold):
    """Exit blocks (1..L), accuracy and speed-up of early exit, one sample at a time."""
    L = logits.shape[0]
    blocks, correct = [], []
    for i in range(logits.shape[1]):
        z = logits[:, i].astype(np.float64)
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        b = next((l for l in range(L) if p[l].max() >= threshold), L - 1)
        blocks.append(b + 1)
        correct.append(z[b].argmax() == labels[i])
    return np.array(blocks), float(np.mean(correct)), L * len(blocks) / sum(blocks)


def test_fig7_thresholds_are_the_former_inline_sweep():
    expected = np.round(np.concatenate([np.arange(0.3, 0.9, 0.05), np.arange(0.9, 0.995, 0.01),
                                        [0.995, 0.999, 1.0]]), 4)
    np.testing.assert_array_equal(early_exit.FIG7_THRESHOLDS, expected)
    assert early_exit.FIG7_THRESHOLDS[0] == 0.3 and early_exit.FIG7_THRESHOLDS[-1] == 1.0
    assert np.all(np.diff(early_exit.FIG7_THRESHOLDS) >= 0)


def _shared_logits(model, x):
    """[L, N, K]: the shared classifier (final norm, head) on the class token after every block, block by block."""
    feats, h = [], model.norm_pre(model._pos_embed(model.patch_embed(x)))
    for block in model.blocks:
        h = block(h)
        feats.append(model.forward_head(model.norm(h)))
    return torch.stack(feats).numpy()


@pytest.fixture
def vit_images():
    """The tiny test ViT (3 blocks, 28x28 grey, 10 classes) and 40 labelled images."""
    from builders import tiny_vit

    g = torch.Generator().manual_seed(3)
    return tiny_vit(perturb=True), (torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g))


@pytest.mark.parametrize("multi_exit", [False, True])
def test_model_exits_exits_each_image_at_its_first_confident_block(vit_images, multi_exit):
    model, (x, y) = vit_images
    with torch.no_grad():
        if multi_exit:
            objectives.add_exit_heads(model, seed=1)
            model.eval()
            for head in model.exit_heads:
                head[1].weight.mul_(200)
        model.head.weight.mul_(200)  # confident classifiers: the images exit at different blocks
        if multi_exit:
            logits = objectives.exit_head_logits(model, x).numpy()
        else:
            logits = _shared_logits(model, x)
        np.testing.assert_allclose(logits[-1], model(x).numpy(), rtol=1e-4, atol=1e-4)
    first = np.exp(logits[0] - logits[0].max(-1, keepdims=True))
    threshold = float(np.median((first / first.sum(-1, keepdims=True)).max(-1)))
    thresholds = [0.0, threshold, 0.99, 1.0]
    got, sweep, full = early_exit.model_exits(model, (x, y), threshold, thresholds, multi_exit=multi_exit,
                                              device="cpu")
    blocks, accuracy, speed = _naive_exits(logits, y.numpy(), threshold)
    assert len(set(blocks)) > 1  # the test exits at more than one block
    np.testing.assert_array_equal(got.exit_layer, blocks)
    assert sweep["speedup"][0] == pytest.approx(3.0)  # threshold 0: every image leaves at block 1
    assert got.accuracy == pytest.approx(accuracy) and got.speedup == pytest.approx(speed)
    np.testing.assert_array_equal(got.counts, np.bincount(blocks, minlength=4)[1:])
    assert full == pytest.approx(float((logits[-1].argmax(-1) == y.numpy()).mean()))
    for i, t in enumerate(thresholds):
        _, acc_t, speed_t = _naive_exits(logits, y.numpy(), t)
        assert sweep["accuracy"][i] == pytest.approx(acc_t) and sweep["speedup"][i] == pytest.approx(speed_t)
    assert sweep["speedup"][-1] == pytest.approx(1.0)  # threshold 1: every image runs every block


def test_model_exits_refuses_a_threshold_that_is_no_probability(vit_images):
    model, images = vit_images
    with pytest.raises(ValueError, match="threshold"):
        early_exit.model_exits(model, images, 1.5, device="cpu")


def _exit(counts, accuracy):
    blocks = np.repeat(np.arange(1, len(counts) + 1), counts)
    return early_exit.EarlyExit(blocks, np.zeros_like(blocks), np.asarray(counts), accuracy,
                                early_exit.speedup(blocks, len(counts)))


def test_describe_and_exit_record():
    e = _exit([3, 0, 1], 0.75)
    line = early_exit.describe("aligned", e, 0.8125, 0.9)
    assert line == "aligned    full depth accuracy 0.8125; threshold 0.9: accuracy 0.7500, speed-up 2.00x"
    rec = early_exit.exit_record(e)
    assert list(rec) == ["counts", "accuracy", "speedup"]
    assert rec["counts"].tolist() == [3, 0, 1] and rec["accuracy"] == 0.75 and rec["speedup"] == pytest.approx(2.0)


def test_exits_figure_draws_the_exits_and_the_sweeps():
    exits = {"standard": _exit([1, 1, 6], 0.9), "aligned": _exit([5, 2, 1], 0.85), "multi-exit": _exit([6, 1, 1], 0.8)}
    sweeps = {n: {"speedup": np.array([1.0, 1.5, 2.0]), "accuracy": np.array([0.9, 0.85, 0.8 - 0.1 * i])}
              for i, n in enumerate(exits)}
    fig = early_exit.exits_figure(exits, sweeps, 0.9, 0.9, 0.03)
    bars, curve = fig.axes
    heights = [p.get_height() for p in bars.patches]
    assert heights == [1, 1, 6, 5, 2, 1, 6, 1, 1]
    assert "0.9" in bars.get_title()
    assert [t.get_text().split(":")[0] for t in bars.get_legend().get_texts()] == list(exits)
    lines = curve.get_lines()
    np.testing.assert_allclose(lines[2].get_ydata(), 100 * sweeps["multi-exit"]["accuracy"])
    assert lines[3].get_ydata()[0] == pytest.approx(90) and lines[4].get_ydata()[0] == pytest.approx(87)
    plt.close(fig)
    with pytest.raises(ValueError, match="same models"):
        early_exit.exits_figure(exits, {"standard": sweeps["standard"]}, 0.9, 0.9, 0.03)


# ----- AlignedGPT (t10, Figure 9) --------------------------------------------------------------------------------

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
    """The two small GPT-2s of LM_P trained by train_pair, and the former inline training code's two."""
    old = os.environ.get("LAYERSIM_CACHE")
    try:
        os.environ["LAYERSIM_CACHE"] = str(tmp_path_factory.mktemp("cache"))
        got = aligned_gpt.train_pair(LM_P, seed=0, device="cpu", progress=False)
        os.environ["LAYERSIM_CACHE"] = str(tmp_path_factory.mktemp("cache_inline"))
        cfgs = {n: lm.LMConfig(vocab_size=512, n_positions=24, n_embd=32, n_layer=3, n_head=2, steps=3, batch_size=8,
                               lr=1e-3, warmup_steps=1, objective=o, seed=0)
                for n, o in (("standard", "ce"), ("aligned", "aligned"))}
        tok = data.austen_tokenizer(512)
        train_texts = lm.texts("austen", "train", 48, seed=0)
        train = lm.lm_batches(train_texts, tok, 8, 24)
        desc = {"source": "austen", "n_train": 48, "max_length": 24, "seed": 0, "tokenizer": "austen-bpe-512"}
        inline = {n: lm.cached_lm(c, train, desc, build=lambda c=c: lm.build_gpt2(c, tok.pad_token_id),
                                  model_desc={"pretrained": None}, device="cpu", progress=False)
                  for n, c in cfgs.items()}
    finally:
        if old is None:
            os.environ.pop("LAYERSIM_CACHE", None)
        else:
            os.environ["LAYERSIM_CACHE"] = old
    return got, inline, tok


def test_train_pair_trains_the_former_inline_models(lm_pair, capsys):
    (nets, metas, tok, held_texts), inline, tok_inline = lm_pair
    assert list(nets) == ["standard", "aligned"] and len(tok) == len(tok_inline)
    assert held_texts == lm.texts("austen", "test", 16 + 4, seed=0)
    for name in nets:
        assert metas[name]["key"] == inline[name][1]["key"] and not metas[name]["from_cache"]
        for a, b in zip(nets[name].state_dict().values(), inline[name][0].state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert metas["standard"]["key"] != metas["aligned"]["key"]


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


def test_statistics_are_the_former_inline_claims():
    got = aligned_gpt.statistics(SCORES)
    std, ali = SCORES["standard"], SCORES["aligned"]
    assert got["lower_ppl"] == pytest.approx(((5.2 - 5.0) + (5.0 - 4.9)) / 2)  # blocks 1..2 of 4
    assert got["higher_acc"] == pytest.approx(((0.12 - 0.10) + (0.13 - 0.12)) / 2)
    assert got["final_ppl_ratio"] == pytest.approx(float(ali.perplexity[-1] / std.perplexity[-1]))
    with pytest.raises(ValueError, match="two blocks"):
        aligned_gpt.statistics({n: _scores(s.nll[:2], s.accuracy[:2]) for n, s in SCORES.items()})


def test_prompt_ids_are_the_first_tokens_of_long_enough_texts(lm_pair):
    tok = lm_pair[2]
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


def test_generation_at_exits_samples_and_scores_every_block(lm_pair):
    (nets, _, tok, held_texts), _, _ = lm_pair
    torch.manual_seed(0)
    encoder = (_Encoder().eval(), tok)
    prompts, text = aligned_gpt.prompt_ids(held_texts[16:], tok, 4, 5, 24)
    gen, samples = aligned_gpt.generation_at_exits(nets, prompts, text, tok, 4, 0.95, seed=2, device="cpu",
                                                   encoder=encoder)
    assert list(gen.columns) == ["model", "block", "coherence", "diversity"]
    assert gen[["model", "block"]].values.tolist() == [[n, b] for n in nets for b in (1, 2, 3)]
    h_prompt = generation.sentence_embeddings(*encoder, text)
    for row in gen.itertuples():  # the former inline loop body
        new = tok.batch_decode(lm.generate_at_exit(nets[row.model], prompts, row.block, 4, p=0.95, seed=2,
                                                   device="cpu"))
        coh = generation.coherence(h_prompt, generation.sentence_embeddings(*encoder, new))
        assert row.coherence == pytest.approx(float(np.mean(coh)))
        assert row.diversity == pytest.approx(float(np.mean([generation.diversity(t) for t in new])))
        assert samples[f"{row.model}/{row.block}"] == new[:3]
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


# ----- aligned training (t03, Figures 4, 5, 14, 15, 16) ------------------------------------------------------------

ABL = " (ablation budget)"


def test_models_are_the_former_inline_models():
    for scale in ("smoke", "default", "paper"):
        L = presets.TRACING_VIT[scale]["depth"]
        shallow = [L // 2, (3 * L) // 4]
        expected = {
            "standard": presets.tracing_vit(scale, "standard"),
            "aligned": presets.tracing_vit(scale, "aligned"),
            **{f"{v}{ABL}": presets.tracing_vit(scale, v, reduced=True)
               for v in ["standard", "aligned", "multi-exit", "CE-reg", "aligned (uniform)"]},
            **{f"standard {d}-block{ABL}": presets.tracing_vit(scale, "standard", reduced=True, depth=d)
               for d in shallow},
        }
        got = presets.aligned_training_models(scale)
        assert got == expected and list(got) == list(expected)
        assert AT.train_accuracy_models(L) == ["standard", "aligned", "standard" + ABL, "aligned" + ABL,
                                               *[f"standard {d}-block{ABL}" for d in shallow]]
    assert presets.shallow_depths(12) == [6, 9] and presets.shallow_depths(3) == [1, 2]
    with pytest.raises(ValueError, match="at least 2 blocks"):
        presets.shallow_depths(1)


def test_an_ablation_budget_changes_only_the_ablation_models():
    reduced, full = presets.aligned_training_models("default"), presets.aligned_training_models("default", budget={})
    assert {n: full[n] for n in ("standard", "aligned")} == {n: reduced[n] for n in ("standard", "aligned")}
    for name, settings in full.items():  # at the full budget every model trains on the full budget's images
        assert (settings["n_train"], settings["epochs"]) == (presets.TRACING_VIT["default"]["n_train"],
                                                              presets.TRACING_VIT["default"]["epochs"]), name
        assert {k: v for k, v in settings.items() if k not in presets.BUDGET_KEYS} == \
            {k: v for k, v in reduced[name].items() if k not in presets.BUDGET_KEYS}, name
    assert full["standard" + ABL] == full["standard"] and full["aligned" + ABL] == full["aligned"]  # one checkpoint
    longer = presets.aligned_training_models("default", budget={"epochs": 7})["CE-reg" + ABL]
    assert (longer["epochs"], longer["n_train"]) == (7, presets.TRACING_VIT["default"]["n_train"])
    with pytest.raises(ValueError, match="sets only n_train, epochs"):
        presets.aligned_training_models("default", budget={"depth": 6})
    with pytest.raises(ValueError, match="unknown scale"):
        presets.aligned_training_models("huge")


def _nc1(h, y):
    """NC1 = tr(Sigma_W Sigma_B^+) / K of features h [N, d] with labels y, written out."""
    classes = np.unique(y)
    mu = h.mean(0)
    means = np.stack([h[y == c].mean(0) for c in classes])
    sw = sum(((h[y == c] - means[i]).T @ (h[y == c] - means[i])) for i, c in enumerate(classes)) / len(h)
    sb = (means - mu).T @ (means - mu) / len(classes)
    return np.trace(sw @ np.linalg.pinv(sb)) / len(classes)


@pytest.mark.parametrize("own_heads", [False, True])
def test_held_out_readings_are_every_blocks_accuracy_cos_and_nc1(vit_images, own_heads):
    model, (x, y) = vit_images
    y = y % 3  # three classes: NC1's between-class scatter has full rank in its span
    if own_heads:
        objectives.add_exit_heads(model, seed=1)
        model.eval()
    got = AT.held_out_readings(model, (x, y), own_heads=own_heads, device="cpu")
    assert list(got) == ["acc", "cos_last", "cos_mat", "nc1"]
    hidden = models.hidden_states(model, [x], device="cpu", progress=False)[1:].astype(np.float64)
    with torch.no_grad():
        if own_heads:
            logits = objectives.exit_head_logits(model, x).numpy()
        else:
            logits = _shared_logits(model, x)
    np.testing.assert_allclose(got["acc"], [(z.argmax(-1) == y.numpy()).mean() for z in logits])
    centred = hidden - hidden.mean(1, keepdims=True)
    unit = centred / np.linalg.norm(centred, axis=2, keepdims=True)
    cos = np.einsum("ind,jnd->ijn", unit, unit).mean(-1)
    np.testing.assert_allclose(got["cos_mat"], cos, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["cos_last"], cos[:, -1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["nc1"], [_nc1(h, y.numpy()) for h in hidden], rtol=1e-4)


def test_train_accuracy_reads_the_first_images_of_the_models_training_set(vit_images):
    model = vit_images[0]
    spec = {"n_train": 64}
    subset = AT.train_subset("fashion-mnist", spec, 20, seed=1)
    full = data.image_dataset("fashion-mnist", "train", limit=64, seed=1)
    assert len(subset) == 20
    for i in (0, 7, 19):
        torch.testing.assert_close(subset[i][0], full[i][0])
        assert int(subset[i][1]) == int(full[i][1])
    assert len(AT.train_subset("fashion-mnist", spec, 500, seed=1)) == 64  # at most the whole training set
    x = torch.stack([subset[i][0] for i in range(20)])
    y = np.array([int(subset[i][1]) for i in range(20)])
    with torch.no_grad():
        expected = [(z.argmax(-1) == y).mean() for z in _shared_logits(model, x)]
    np.testing.assert_allclose(AT.train_accuracy(model, "fashion-mnist", spec, 20, seed=1, device="cpu"), expected)
    np.testing.assert_allclose(readout.evaluate(model, subset, device="cpu").accuracy, expected)


TRAIN_ACC = {"standard": np.array([0.3, 0.5, 0.7, 0.8, 0.9, 0.95]),
             "aligned": np.array([0.6, 0.8, 0.9, 0.94, 0.95, 0.95]),
             "standard" + ABL: np.array([0.2, 0.4, 0.6, 0.7, 0.8, 0.85]),
             "aligned" + ABL: np.array([0.5, 0.7, 0.84, 0.86, 0.86, 0.86]),
             "standard 3-block" + ABL: np.array([0.4, 0.6, 0.7]),
             "standard 4-block" + ABL: np.array([0.3, 0.5, 0.7, 0.8])}


def _definition_1(acc, threshold):
    """The first block (1..L) with accuracy >= threshold, L if none."""
    return next((l + 1 for l, a in enumerate(acc) if a >= threshold), len(acc))


def test_effective_depths_are_definition_1_at_both_budgets():
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    assert list(depth) == [("full", "standard"), ("full", "aligned"), ("full", "eps"), ("ablation", "standard"),
                           ("ablation", "aligned"), ("ablation", "eps")]
    assert depth[("full", "eps")] == pytest.approx(1 - (0.95 - 0.01))
    assert depth[("ablation", "eps")] == pytest.approx(1 - (0.85 - 0.01))
    for budget, suffix in [("full", ""), ("ablation", ABL)]:
        threshold = 1 - depth[(budget, "eps")]
        for name in ("standard", "aligned"):
            assert depth[(budget, name)] == _definition_1(TRAIN_ACC[name + suffix], threshold)
    assert (depth[("full", "standard")], depth[("full", "aligned")]) == (6, 4)
    assert AT.describe_depths(depth).splitlines() == [
        "full budget: 1-eps = 0.940; effective depth standard 6, aligned 4",
        "ablation budget: 1-eps = 0.840; effective depth standard 6, aligned 3"]


def _readings(L=6, seed=0):
    rng = np.random.default_rng(seed)
    names = ["standard", "aligned"] + [v + ABL for v in ["standard", "aligned", "multi-exit", "CE-reg",
                                                          "aligned (uniform)"]]
    return {n: {"acc": rng.uniform(0.2, 0.9, L), "cos_last": np.append(rng.uniform(0, 1, L - 1), 1.0),
                "cos_mat": rng.uniform(-0.2, 1, (L, L)), "nc1": rng.uniform(0.1, 5, L)} for n in names}


def test_statistics_measure_each_statement_by_hand():
    R = _readings()
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    S = AT.statistics(R, depth)
    std, ali = R["standard"], R["aligned"]
    expected = {  # each statement's value, computed here from the readings
        "aligned_raises_shallow_accuracy": ali["acc"][:3].mean() - std["acc"][:3].mean(),
        "aligned_raises_similarity": (ali["cos_last"][:-1] - std["cos_last"][:-1]).mean(),
        "aligned_final_accuracy_close": abs(ali["acc"][-1] - std["acc"][-1]),
        "aligned_monotone_accuracy": max(0.0, max(ali["acc"][i] - ali["acc"][i + 1] for i in range(5))),
        "effective_depth_smaller": 2,
        "shared_vs_multi_classifier_on_par": np.abs(R["aligned" + ABL]["acc"] - R["multi-exit" + ABL]["acc"]).mean(),
        "ce_reg_weaker_than_aligned": R["aligned" + ABL]["acc"][:3].mean() - R["CE-reg" + ABL]["acc"][:3].mean(),
        "aligned_lowers_nc1": np.mean(ali["nc1"] < std["nc1"]),
        "uniform_weights_hurt_last_layer": R["aligned" + ABL]["acc"][-1] - R["aligned (uniform)" + ABL]["acc"][-1],
    }
    assert list(S) == list(expected)
    for name, value in expected.items():
        assert S[name]["value"] == pytest.approx(value), name
    assert S["aligned_raises_shallow_accuracy"]["note"] == \
        "mean test accuracy, blocks 1..3, aligned - standard (full budget)"
    assert S["aligned_raises_similarity"]["note"] == "mean COS to last, blocks 1..5, aligned - standard (full budget)"
    def beside(name):  # the numbers recorded beside the value: a measurement carries no verdict
        assert not {"holds", "threshold", "op"} & set(S[name]), name
        return {k: v for k, v in S[name].items() if k not in ("value", "note")}
    assert beside("aligned_final_accuracy_close") == {"standard": std["acc"][-1], "aligned": ali["acc"][-1]}
    assert beside("effective_depth_smaller") == {"standard": 6, "aligned": 4, "eps": depth[("full", "eps")]}
    assert beside("aligned_lowers_nc1") == {}


def test_describe_accuracy_by_model_and_cos_maps():
    R = _readings(L=3)
    lines = AT.describe_accuracy(R, {"standard": np.array([0.5, 0.25, 0.125])}).splitlines()
    assert len(lines) == len(R) + 1
    assert lines[0] == f"{'standard':40s} test accuracy per block {np.round(R['standard']['acc'], 3)}"
    assert lines[-1] == f"{'standard':40s} train accuracy per block [0.5   0.25  0.125]"
    nc1 = AT.by_model(R, "nc1")
    assert list(nc1) == list(R) and all(nc1[n] is R[n]["nc1"] for n in R)
    maps = AT.cos_maps(R)
    assert list(maps) == ["standard", "aligned", "standard" + ABL, "aligned" + ABL, "multi-exit" + ABL]
    assert all(maps[n] is R[n]["cos_mat"] for n in maps)


def test_figures_draw_the_readings():
    R = _readings()
    fig = AT.fig4_curves(R)
    cos_ax, acc_ax = fig.axes
    assert [l.get_label() for l in acc_ax.get_lines()] == ["standard", "aligned", "standard, ablation budget",
                                                           "aligned, ablation budget", "multi-exit, ablation budget"]
    np.testing.assert_allclose(cos_ax.get_lines()[1].get_ydata(), R["aligned"]["cos_last"])
    np.testing.assert_allclose(acc_ax.get_lines()[4].get_ydata(), R["multi-exit" + ABL]["acc"])
    plt.close(fig)
    fig = AT.fig4_heatmaps(R)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["COS, all pairs: standard", "COS, all pairs: aligned", "COS, all pairs: standard" + ABL,
                      "COS, all pairs: aligned" + ABL, "COS, all pairs: multi-exit" + ABL]
    plt.close(fig)
    fig = AT.fig14_15(R, 0.5)
    assert "beta=0.5" in fig.axes[0].get_title()
    np.testing.assert_allclose(fig.axes[1].get_lines()[1].get_ydata(), R["CE-reg" + ABL]["acc"])
    np.testing.assert_allclose(fig.axes[2].get_lines()[1].get_ydata(), R["aligned (uniform)" + ABL]["acc"])
    plt.close(fig)
    fig = AT.fig16(R)
    assert fig.axes[0].get_yscale() == "log" and len(fig.axes[0].get_lines()) == 4
    np.testing.assert_allclose(fig.axes[0].get_lines()[3].get_ydata(), R["aligned" + ABL]["nc1"])
    plt.close(fig)


def test_fig5_draws_train_accuracy_effective_depth_and_convergence():
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    metas = {n: {"history": [{"epoch": e, "loss": 2.0 / e + i} for e in (1, 2, 3)]} for i, n in enumerate(TRAIN_ACC)}
    fig = AT.fig5(TRAIN_ACC, depth, metas)
    a, b, c = fig.axes
    assert [l.get_label() for l in a.get_lines()] == ["standard 3-block", "standard 4-block", "standard 6-block",
                                                      "aligned 6-block"]
    np.testing.assert_allclose(a.get_lines()[0].get_ydata(), TRAIN_ACC["standard 3-block" + ABL])
    vlines = [l.get_xdata()[0] for l in b.get_lines() if l.get_linestyle() == ":"]
    assert vlines == [6, 4]
    assert [l.get_ydata()[0] for l in b.get_lines() if l.get_linestyle() == "--"] == [pytest.approx(0.94)]
    assert len(c.get_lines()) == 6
    np.testing.assert_allclose(c.get_lines()[-1].get_ydata(), [h["loss"] for h in metas["aligned"]["history"]])
    plt.close(fig)
