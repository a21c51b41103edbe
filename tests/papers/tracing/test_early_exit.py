"""Tests of layersim.papers.tracing.early_exit: confidence-threshold early exit and the tracing paper's speed-up
ratio (section 3) on hand-made logits with known answers, and the notebook's protocol (t04, Figure 7) on the tiny
test ViT against a sample-by-sample loop."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.papers.tracing import early_exit as E  # noqa: E402
from layersim.train import objectives  # noqa: E402


def logits_from_probs(probs):
    """Logits whose softmax is ``probs`` (rows sum to 1)."""
    return np.log(np.asarray(probs, dtype=np.float64))


# 3 blocks, 4 samples, 2 classes; confidences chosen by hand:
#   sample 0: 0.9 at block 1 (class 0)          -> exits at 1 for thresholds <= 0.9
#   sample 1: 0.6, 0.8 (class 1), 0.95 (class 1) -> exits at 2 for 0.6 < t <= 0.8
#   sample 2: 0.55 (class 1), 0.7 (class 0), 0.99 (class 0)
#   sample 3: 0.5, 0.5, 0.6 (class 1)           -> always at 3 unless t <= 0.5
P = np.array([
    [[0.9, 0.1], [0.4, 0.6], [0.45, 0.55], [0.5, 0.5]],
    [[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.5, 0.5]],
    [[0.9, 0.1], [0.05, 0.95], [0.99, 0.01], [0.4, 0.6]],
])
Z = logits_from_probs(P)
Y = np.array([0, 1, 0, 1])


def test_confidence_is_max_softmax():
    np.testing.assert_allclose(E.confidence(Z), P.max(axis=-1), rtol=1e-6)


def test_exit_at_first_confident_block():
    r = E.early_exit(Z, 0.75, Y)
    assert r.exit_layer.tolist() == [1, 2, 3, 3]
    assert r.prediction.tolist() == [0, 1, 0, 1]
    assert r.counts.tolist() == [1, 1, 2]
    assert r.accuracy == 1.0
    assert r.speedup == pytest.approx(3 * 4 / (1 + 2 + 3 + 3))  # sum L m_i / sum i m_i


def test_low_threshold_exits_everyone_at_block_one():
    r = E.early_exit(Z, 0.5, Y)
    assert r.exit_layer.tolist() == [1, 1, 1, 1] and r.speedup == pytest.approx(3.0)
    assert r.prediction.tolist() == [0, 1, 1, 0]  # argmax of a 0.5/0.5 tie is class 0
    assert r.accuracy == pytest.approx(0.5)


def test_unreachable_threshold_runs_the_whole_model():
    r = E.early_exit(Z, 1.01, Y)
    assert r.exit_layer.tolist() == [3, 3, 3, 3] and r.speedup == 1.0 and r.accuracy == 1.0
    assert r.counts.tolist() == [0, 0, 4]
    assert E.early_exit(Z, 1.01).accuracy is None  # no labels


def test_threshold_is_inclusive():
    assert E.early_exit(Z, 0.8).exit_layer[1] == 2
    assert E.early_exit(Z, 0.80001).exit_layer[1] == 3


def test_speedup_formula():
    assert E.speedup(np.array([12] * 5), 12) == 1.0
    m = {1: 3, 6: 2, 12: 5}  # m_i samples at block i
    exits = np.repeat(list(m), list(m.values()))
    assert E.speedup(exits, 12) == pytest.approx(sum(12 * v for v in m.values()) / sum(i * v for i, v in m.items()))
    with pytest.raises(ValueError):
        E.speedup(np.array([0, 1]), 3)


def test_threshold_sweep_is_monotone_in_speed():
    sweep = E.threshold_sweep(Z, Y, [0.5, 0.75, 0.85, 0.95, 1.01])
    assert sweep["speedup"].tolist() == pytest.approx([3.0, 12 / 9, 12 / 10, 1.0, 1.0])
    assert sweep["accuracy"].tolist() == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0])
    assert sweep["mean_exit"].tolist() == pytest.approx([1.0, 9 / 4, 10 / 4, 3.0, 3.0])
    default = E.threshold_sweep(Z, Y)
    assert len(default["threshold"]) == 20 and np.all(np.diff(default["speedup"]) <= 1e-12)


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[L, N, K\]"):
        E.early_exit(Z[0], 0.5)


def test_best_speedup_is_the_fastest_threshold_that_keeps_accuracy():
    sweep = {"threshold": np.array([0.5, 0.7, 0.9, 1.0]), "accuracy": np.array([0.70, 0.80, 0.85, 0.86]),
             "speedup": np.array([4.0, 3.0, 2.0, 1.0])}
    assert E.best_speedup(sweep, 0.79) == (3.0, {"threshold": 0.7, "accuracy": 0.80})
    assert E.best_speedup(sweep, 0.0)[0] == 4.0
    assert E.best_speedup(sweep, 0.9) == (1.0, None)
    rng = np.random.default_rng(0)
    for _ in range(20):  # against a brute-force search
        s = {"threshold": np.arange(6.0), "accuracy": rng.random(6), "speedup": rng.random(6) * 5}
        ok = [i for i in range(6) if s["accuracy"][i] >= 0.5]
        want = max((s["speedup"][i] for i in ok), default=1.0)
        assert E.best_speedup(s, 0.5)[0] == want


def test_fig7_thresholds_are_a_sorted_probability_sweep_ending_at_the_whole_model():
    t = E.FIG7_THRESHOLDS
    assert t[0] == 0.3 and t[-1] == 1.0 and np.all(np.diff(t) >= 0)
    np.testing.assert_array_equal(t, np.round(t, 4))  # the printed values, no residue such as 0.35000000000000003
    u = np.unique(t)
    steps = np.diff(u)
    np.testing.assert_allclose(steps[u[:-1] < 0.9], 0.05)  # coarse where few images are that unsure
    np.testing.assert_allclose(steps[(u[:-1] >= 0.9) & (u[:-1] < 0.99)], 0.01)  # finer where confidences crowd
    assert u[u > 0.99].tolist() == [0.995, 0.999, 1.0]
    sweep = E.threshold_sweep(Z, Y, t)  # the speed-up falls to 1: at threshold 1 no sample exits early
    assert np.all(np.diff(sweep["speedup"]) <= 1e-12) and sweep["speedup"][-1] == 1.0


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


@pytest.mark.parametrize("multi_exit", [False, True])
def test_model_exits_exits_each_image_at_its_first_confident_block(vit_images, shared_logits, multi_exit):
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
            logits = shared_logits(model, x)
        np.testing.assert_allclose(logits[-1], model(x).numpy(), rtol=1e-4, atol=1e-4)
    first = np.exp(logits[0] - logits[0].max(-1, keepdims=True))
    threshold = float(np.median((first / first.sum(-1, keepdims=True)).max(-1)))
    thresholds = [0.0, threshold, 0.99, 1.0]
    got, sweep, full = E.model_exits(model, (x, y), threshold, thresholds, multi_exit=multi_exit,
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
        E.model_exits(model, images, 1.5, device="cpu")


def _exit(counts, accuracy):
    blocks = np.repeat(np.arange(1, len(counts) + 1), counts)
    return E.EarlyExit(blocks, np.zeros_like(blocks), np.asarray(counts), accuracy,
                                E.speedup(blocks, len(counts)))


def test_describe_and_exit_record():
    e = _exit([3, 0, 1], 0.75)
    line = E.describe("aligned", e, 0.8125, 0.9)
    assert line == "aligned    full depth accuracy 0.8125; threshold 0.9: accuracy 0.7500, speed-up 2.00x"
    rec = E.exit_record(e)
    assert list(rec) == ["counts", "accuracy", "speedup"]
    assert rec["counts"].tolist() == [3, 0, 1] and rec["accuracy"] == 0.75 and rec["speedup"] == pytest.approx(2.0)


def test_exits_figure_draws_the_exits_and_the_sweeps():
    exits = {"standard": _exit([1, 1, 6], 0.9), "aligned": _exit([5, 2, 1], 0.85), "multi-exit": _exit([6, 1, 1], 0.8)}
    sweeps = {n: {"speedup": np.array([1.0, 1.5, 2.0]), "accuracy": np.array([0.9, 0.85, 0.8 - 0.1 * i])}
              for i, n in enumerate(exits)}
    fig = E.exits_figure(exits, sweeps, 0.9, 0.9, 0.03)
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
        E.exits_figure(exits, {"standard": sweeps["standard"]}, 0.9, 0.9, 0.03)
