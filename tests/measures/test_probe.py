"""Tests of layersim.measures.probe: linear probes on frozen features (tracing paper, appendix B.4)."""

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from layersim.measures import probe


def blobs(n=300, d=8, k=3, spread=0.6, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * 3
    y = np.arange(n) % k
    return centres[y] + spread * rng.normal(size=(n, d)), y


def test_probe_logits_reproduce_sklearn_predictions_and_probabilities():
    from sklearn.linear_model import LogisticRegression

    X, y = blobs(spread=2.5)  # overlapping classes: a non-trivial fit
    X = 7.0 + 3.0 * X  # an offset and a scale, as LayerNorm outputs have
    head = probe.fit_linear_probe(X, y, C=0.3)
    Z = (X - X.mean(axis=0)) / np.sqrt(((X - X.mean(axis=0)) ** 2).sum(axis=1).mean() / X.shape[1])
    ref = LogisticRegression(C=0.3, max_iter=5000, tol=1e-8).fit(Z, y)
    with torch.no_grad():
        p = torch.softmax(head(torch.from_numpy(X).float()), dim=1).numpy()
    np.testing.assert_allclose(p, ref.predict_proba(Z), atol=1e-3)
    assert probe.probe_accuracy(head, X, y) == pytest.approx(ref.score(Z, y))


def test_binary_probe_has_two_logits():
    X, y = blobs(k=2)
    head = probe.fit_linear_probe(X, y)
    assert head.out_features == 2 and probe.probe_accuracy(head, X, y) == 1.0


def test_separable_blobs_are_learned_and_generalise():
    X, y = blobs(n=600)
    head = probe.fit_linear_probe(X[:400], y[:400])
    assert probe.probe_accuracy(head, X[400:], y[400:]) == 1.0


def test_per_layer_probes_are_rotation_invariant_but_a_shared_probe_is_not():
    """Rotating a layer's features leaves its own L2-penalised probe's accuracy unchanged; the
    probe fitted on the unrotated layer collapses on the rotated one (what the shared-classifier
    layer-wise accuracy of Figure 17 measures and per-layer probes do not)."""
    X, y = blobs(n=400, d=6, spread=2.0, seed=1)
    Q = ortho_group.rvs(6, random_state=0)
    tr = np.stack([X[:300], X[:300] @ Q])
    te = np.stack([X[300:], X[300:] @ Q])
    acc = probe.per_layer_probe_accuracy(tr, y[:300], te, y[300:])
    assert 0.5 < acc[0] < 1.0 and acc[1] == pytest.approx(acc[0], abs=1e-9)
    shared = probe.fit_linear_probe(tr[0], y[:300])
    assert probe.probe_accuracy(shared, te[1], y[300:]) < acc[0] - 0.2


@pytest.mark.parametrize("X, y, msg", [
    (np.zeros((4, 2, 2)), np.arange(4), r"\[N, d\]"),
    (np.zeros((4, 2)), np.arange(3), "one label per row"),
    (np.zeros((4, 2)), np.array([0.0, 1, 0, 1]), "integers"),
    (np.array([[np.nan, 0]] * 4), np.array([0, 1, 0, 1]), "NaN"),
    (np.zeros((4, 2)), np.array([0, 2, 0, 2]), "every class"),
    (np.zeros((4, 2)), np.zeros(4, int), "every class"),
])
def test_fit_rejects_bad_input(X, y, msg):
    with pytest.raises(ValueError, match=msg):
        probe.fit_linear_probe(X, y)


def test_bad_c_and_mismatched_layers():
    X, y = blobs()
    with pytest.raises(ValueError, match="C must be"):
        probe.fit_linear_probe(X, y, C=0)
    with pytest.raises(ValueError, match="same layers"):
        probe.per_layer_probe_accuracy(np.stack([X, X]), y, X[None], y)


def test_top1_accuracy_counts_argmax_hits_per_leading_index():
    z = np.array([[[2.0, 1.0], [0.0, 3.0], [1.0, 1.0]],
                  [[0.0, 1.0], [0.0, 3.0], [5.0, 1.0]]])  # [L=2, N=3, K=2]; a tie picks the first class
    y = np.array([0, 1, 1])
    assert probe.top1_accuracy(z[0], y) == 2 / 3 and isinstance(probe.top1_accuracy(z[0], y), float)
    np.testing.assert_array_equal(probe.top1_accuracy(z, y), [2 / 3, 1 / 3])
    assert probe.top1_accuracy(torch.tensor(z[1]), y) == 1 / 3
    # the probe's accuracy is the same count on its logits
    X, yb = blobs()
    head = probe.fit_linear_probe(X, yb)
    with torch.no_grad():
        logits = head(torch.tensor(X, dtype=torch.float32)).numpy()
    assert probe.probe_accuracy(head, X, yb) == np.mean(logits.argmax(1) == yb)
    with pytest.raises(ValueError, match="labels"):
        probe.top1_accuracy(z, y[:2])
    with pytest.raises(ValueError, match="empty"):
        probe.top1_accuracy(np.zeros((0, 2)), np.zeros(0, dtype=int))


def test_half_split_is_stratified_and_deterministic():
    labels = np.array([2, 0, 0, 1, 2, 0, 1, 2, 0, 2])
    train = probe.half_split(labels)
    assert train.tolist() == [True, True, False, True, False, True, False, True, False, False]
    assert all(train[labels == k].sum() == -(-(labels == k).sum() // 2) for k in range(3))

