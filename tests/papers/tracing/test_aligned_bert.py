"""Tests of layersim.papers.tracing.aligned_bert: a text classifier fine-tuned with the standard and the aligned
loss, read at every block (t09), its gains and figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from layersim.inputs import fetch  # noqa: E402
from layersim.nets import readout  # noqa: E402
from layersim.papers.tracing import aligned_bert  # noqa: E402
from layersim.train import finetune  # noqa: E402

TINY_BERT = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
BERT_SETTINGS = dict(n_train=24, n_val=18, steps=None, epochs=1.0, batch_size=8, lr=1e-3, warmup_steps=1,
                     max_length=24, weight_decay=0.0, models=["all-minilm-l6-v2"], tasks=["austen-novel"])


@pytest.fixture(scope="module")
def tiny_bert():
    """A random-init 3-block MiniLM-like classifier for the six novels, with the MiniLM tokenizer."""
    tokenizer = fetch.load_model("all-minilm-l6-v2")[1]
    model = finetune.load_classifier("all-minilm-l6-v2", 6, seed=0, random_init=True, config=TINY_BERT).eval()
    model.layersim_tokenizer = tokenizer
    return model


def test_layerwise_reads_the_shared_head_and_cos_on_every_block(tiny_bert, monkeypatch):
    calls = []

    def fake_fine_tuned(model, train, settings, restart=1, seed=0, device="auto", progress=True):
        calls.append((model, len(train), dict(settings), restart, seed))
        return tiny_bert, {"key": f"k-{settings['objective']}", "train_seconds": 1.5, "from_cache": False}

    monkeypatch.setattr(finetune, "fine_tuned", fake_fine_tuned)
    train, val = finetune.task_data("austen-novel", BERT_SETTINGS, seed=0)
    r = aligned_bert.layerwise("all-minilm-l6-v2", train, val, BERT_SETTINGS, "aligned", seed=3, device="cpu")
    name, n, cfg, restart, seed = calls[0]
    assert (name, n, restart, seed) == ("all-minilm-l6-v2", 24, 1, 3)
    assert cfg["steps"] == r["steps"] == 3 and cfg["objective"] == "aligned"  # ceil(1 x 24 / 8); eq. 5's loss
    assert finetune.config_from(cfg).objective == "aligned"
    # independent: every block's CLS token through the final head, accuracy by argmax; centred COS with block L
    H = finetune.cls_features(tiny_bert, val, BERT_SETTINGS, device="cpu")
    logits = readout.layer_logits(tiny_bert, H)
    acc = [(z.argmax(-1) == val.labels).mean() for z in logits[1:]]
    np.testing.assert_allclose(r["accuracy"], acc)
    Hc = H[1:].astype(np.float64) - H[1:].mean(1, keepdims=True)
    cos = [((h * Hc[-1]).sum(1) / (np.linalg.norm(h, axis=1) * np.linalg.norm(Hc[-1], axis=1))).mean() for h in Hc]
    np.testing.assert_allclose(r["cos"], cos, rtol=1e-4, atol=1e-5)
    assert r["cos"][-1] == pytest.approx(1.0) and r["meta"]["key"] == "k-aligned"
    line = aligned_bert.describe("all-minilm-l6-v2/austen-novel/aligned", r)
    assert line == (f"all-minilm-l6-v2 / austen-novel / aligned: 3 steps (fine-tuned in 2 s); accuracy per block "
                    f"{np.round(r['accuracy'], 3).tolist()}")
    aligned_bert.layerwise("all-minilm-l6-v2", train, val, BERT_SETTINGS, "standard", device="cpu")
    assert calls[1][2]["objective"] == "ce"
    with pytest.raises(ValueError, match="unknown model 'multi_exit'"):
        aligned_bert.layerwise("all-minilm-l6-v2", train, val, BERT_SETTINGS, "multi_exit")


def _bert_results(rng, pairs=("m/novel", "m/excerpt"), L=6):
    out = {}
    for pair in pairs:
        for i, name in enumerate(("standard", "aligned")):
            meta = {"key": f"{pair}-{name}", "train_seconds": float(i), "from_cache": bool(i)}
            out[f"{pair}/{name}"] = {"steps": 4, "accuracy": rng.random(L), "cos": rng.random(L), "meta": meta}
    return out


def test_gains_are_the_mean_shallow_half_gain_and_the_last_blocks_gap_and_records_the_checkpoints():
    meta = {"key": "k", "train_seconds": 0.0, "from_cache": False}
    by_hand = {"m/t/standard": {"accuracy": np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), "meta": meta},
               "m/t/aligned": {"accuracy": np.array([0.4, 0.4, 0.4, 0.5, 0.5, 0.5]), "meta": meta}}
    mid_gain, last_gap = aligned_bert.gains(by_hand)  # blocks 1..3 of 6: (0.3 + 0.2 + 0.1) / 3; block 6: 0.5 - 0.6
    assert mid_gain == {"m/t": pytest.approx(0.2)} and last_gap == {"m/t": pytest.approx(-0.1)}
    R = _bert_results(np.random.default_rng(0))
    mid_gain, last_gap = aligned_bert.gains(R)
    assert list(mid_gain) == list(last_gap) == ["m/novel", "m/excerpt"]
    for pair in mid_gain:
        s, a = R[f"{pair}/standard"]["accuracy"], R[f"{pair}/aligned"]["accuracy"]
        assert mid_gain[pair] == pytest.approx(sum(a[i] - s[i] for i in range(3)) / 3, rel=1e-12)
        assert last_gap[pair] == a[5] - s[5]
    rec = aligned_bert.checkpoint_records(R)
    assert rec["m/excerpt/aligned"] == {"checkpoint": "m/excerpt-aligned", "train_seconds": 1.0, "from_cache": True}
    assert list(rec) == list(R)
    R.pop("m/excerpt/aligned")
    with pytest.raises(ValueError, match="missing \\['aligned'\\]"):
        aligned_bert.gains(R)


def test_layerwise_figure_draws_both_models_and_the_majority_class():
    R = _bert_results(np.random.default_rng(1))
    majority = [{"model": "m", "task": "novel", "majority": 1 / 6}, {"model": "m", "task": "excerpt", "majority": 0.5}]
    fig = aligned_bert.layerwise_figure(R, majority)
    axes = np.array(fig.axes).reshape(2, 2)
    for c, row in enumerate(majority):
        pair = f"{row['model']}/{row['task']}"
        top, bottom = axes[0, c].get_lines(), axes[1, c].get_lines()
        np.testing.assert_allclose(top[0].get_ydata(), R[f"{pair}/standard"]["accuracy"])
        np.testing.assert_allclose(top[1].get_ydata(), R[f"{pair}/aligned"]["accuracy"])
        np.testing.assert_allclose(top[2].get_ydata(), [row["majority"]] * 2)
        np.testing.assert_allclose(bottom[0].get_ydata(), R[f"{pair}/standard"]["cos"])
        np.testing.assert_allclose(bottom[1].get_ydata(), R[f"{pair}/aligned"]["cos"])
        np.testing.assert_array_equal(top[0].get_xdata(), np.arange(1, 7))
        assert axes[0, c].get_title() == f"m: {row['task']}"
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        aligned_bert.layerwise_figure(R, [])
