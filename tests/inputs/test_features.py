"""Tests of layersim.inputs.features: RBF kernel features, HOG descriptors and sparse codes."""

import numpy as np

from layersim.inputs import features


def test_rbf_features():
    r = np.random.default_rng(30)
    X, C = r.normal(size=(7, 4)), r.normal(size=(5, 4))
    F = features.rbf_features(X, C, gamma=0.7)
    ref = np.array([[np.exp(-0.7 * np.sum((x - c) ** 2)) for c in C] for x in X])
    assert F.shape == (7, 5) and np.allclose(F, ref)
    assert np.allclose(np.diag(features.rbf_features(X, X, 2.0)), 1.0)


def test_hog_features_shape():
    ims = np.random.default_rng(31).random((3, 28, 28))
    H = features.hog_features(ims)  # 3x3 cells of 8x8, 2x2 blocks -> 2*2*4*9
    assert H.shape == (3, 144) and np.all(np.isfinite(H))


def test_sparse_coding_features():
    r = np.random.default_rng(32)
    X = r.normal(size=(60, 10))
    codes, other = features.sparse_coding_features(X, n_components=15, alpha=0.5, seed=0, others=[X[:5]], max_iter=5)
    assert codes.shape == (60, 15) and other.shape == (5, 15)
    assert np.mean(codes == 0) > 0.2  # sparse
