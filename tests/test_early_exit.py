"""layersim.papers.tracing.early_exit: confidence-threshold early exit and the tracing paper's speed-up ratio
(section 3), on hand-made logits with known answers."""

import numpy as np
import pytest

from layersim.papers.tracing import early_exit as E


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
