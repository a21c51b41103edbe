"""Tests of layersim.measures.collapse: NC1 = tr(Sigma_W Sigma_B^+)/K (tracing paper, footnote 5), against the
literal formula, under invariances, and on bad inputs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersim.measures import collapse as C

from builders import bad_input_tests


def reference_nc1(h, y):
    """Footnote 5 literally: the d x d covariances and numpy's pseudo-inverse."""
    h = np.asarray(h, dtype=np.float64)
    classes = np.unique(y)
    K = len(classes)
    means = np.stack([h[y == k].mean(axis=0) for k in classes])
    dev = h - means[np.searchsorted(classes, y)]
    sw = dev.T @ dev / len(h)
    cm = means - h.mean(axis=0)
    sb = cm.T @ cm / K
    return np.trace(sw @ np.linalg.pinv(sb, rcond=1e-10, hermitian=True)) / K


def test_hand_computed_two_classes_in_the_plane():
    # class 0 at (-1, 0) +- (0, 1), class 1 at (1, 0) +- (0, 1): means (-1, 0), (1, 0), global mean 0
    h = np.array([[-1, 1], [-1, -1], [1, 1], [1, -1]], dtype=float)
    y = np.array([0, 0, 1, 1])
    # Sigma_W = diag(0, 1); Sigma_B = diag(1, 0) -> Sigma_B^+ = diag(1, 0); tr(Sigma_W Sigma_B^+) = 0
    assert C.nc1(h, y) == pytest.approx(0.0, abs=1e-12)
    # spread along the class axis instead: class 0 at -1 +- 0.5, class 1 at 1 +- 0.5 (x only)
    h = np.array([[-1.5, 0], [-0.5, 0], [0.5, 0], [1.5, 0]])
    # Sigma_W = diag(0.25, 0); Sigma_B = diag(1, 0); tr = 0.25; / K = 0.125
    assert C.nc1(h, y) == pytest.approx(0.125)


def test_matches_the_literal_formula_on_random_features():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 25)
    h = rng.normal(size=(100, 10)) + 2 * rng.normal(size=(4, 10))[y]
    assert C.nc1(h, y) == pytest.approx(reference_nc1(h, y), rel=1e-9)
    # unbalanced classes, d > K, string labels
    y = np.array(list("aaaabbbbbbbccc" * 3))
    h = rng.normal(size=(len(y), 6))
    assert C.nc1(h, y) == pytest.approx(reference_nc1(h, y), rel=1e-9)


def test_zero_when_each_class_collapses_to_its_mean():
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(5), 7)
    h = rng.normal(size=(5, 16))[y]
    assert C.nc1(h, y) == pytest.approx(0.0, abs=1e-20)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 12), k=st.integers(2, 6))
def test_invariant_to_rotation_translation_and_scale(seed, d, k):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), 6)
    h = rng.normal(size=(len(y), d)) + rng.normal(size=(k, d))[y]
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    base = C.nc1(h, y)
    assert C.nc1(h @ q.T, y) == pytest.approx(base, rel=1e-7)
    assert C.nc1(3.0 * h + rng.normal(size=d), y) == pytest.approx(base, rel=1e-7)


def test_more_within_class_noise_means_larger_nc1():
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(3), 50)
    centres, noise = rng.normal(size=(3, 8))[y], rng.normal(size=(150, 8))
    values = [C.nc1(centres + s * noise, y) for s in (0.1, 0.5, 1.0, 2.0)]
    assert all(a < b for a, b in zip(values, values[1:]))


def test_per_layer_and_errors():
    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(3), 10)
    hidden = rng.normal(size=(4, 30, 5))
    np.testing.assert_allclose(C.nc1_per_layer(hidden, y), [C.nc1(h, y) for h in hidden])
    with pytest.raises(ValueError, match="two classes"):
        C.nc1(hidden[0], np.zeros(30))
    with pytest.raises(ValueError, match="coincide"):
        C.nc1(np.ones((30, 5)), y)


# ----------------------------------------------------------------------------- bad inputs
# a valid value or one clear ValueError (the contract of tests/measures/conftest.py); hypothesis draws the data,
# derandomize=True keeps every run the same

HOSTILE = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])
FEW = settings(HOSTILE, max_examples=4)


def _labels(n):
    return np.arange(n) % 3


# name -> (fn(X, Y), range of a valid result: "any" finite)
MEASURES = {
    "nc1": (lambda X, Y: C.nc1(X, _labels(len(Y))), "any"),
    "nc1_per_layer": (lambda X, Y: C.nc1_per_layer([X, Y], _labels(len(Y))), "any"),
}


test_classic_bad_inputs, test_arbitrary_float_arrays = bad_input_tests(MEASURES, FEW, HOSTILE)


def _orthogonal(rng, d):
    Q, Rr = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.diag(Rr))


@HOSTILE
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(9, 20), d=st.integers(2, 5),
       k=st.sampled_from([-250, -160, 0, 160, 250]))
def test_nc1_is_invariant_to_rotation_translation_and_any_scale(bad_inputs, seed, n, d, k):
    """NC1 at 1e160 and 1e-160 used to be NaN (squares over- or underflowed)."""
    X, _ = bad_inputs.base_pair(seed, n, d)
    labels = _labels(n)
    Q = _orthogonal(np.random.default_rng(seed + 3), d)
    ref = C.nc1(X, labels)
    got = C.nc1(10.0**k * (X @ Q - 4.0), labels)
    assert np.isfinite(got) and got >= 0
    assert got == pytest.approx(ref, rel=1e-8)


def test_nc1_refuses_what_it_cannot_measure():
    X = np.random.default_rng(10).standard_normal((12, 3))
    labels = _labels(12)
    for features, words in [(X[:, 0], "2-D"), (np.nan * X, "NaN"), (X + 1j, "complex"), (3.0, "2-D")]:
        with pytest.raises(ValueError, match=words):
            C.nc1(features, labels)
    with pytest.raises(ValueError, match=r"one per sample, shape \[12\], got shape \(11,\)"):
        C.nc1(X, labels[:-1])
    with pytest.raises(ValueError, match="one per sample"):
        C.nc1(X, labels[:, None])
    with pytest.raises(ValueError, match="at least two classes, got 1"):
        C.nc1(X, np.zeros(12))
    with pytest.raises(ValueError, match="layer 1 contains NaN"):
        C.nc1_per_layer([X, np.nan * X], labels)
    with pytest.raises(ValueError, match="3-D stacked"):
        C.nc1_per_layer(X, labels)
