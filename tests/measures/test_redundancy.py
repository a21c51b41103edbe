"""Tests of layersim.measures.redundancy: the streamed least-squares map of RBA against numpy.linalg.lstsq,
exact recovery of linear maps, the paper's span convention, the spread of a representation, Block Redundancy,
and bad inputs."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersim.measures import redundancy as R

from builders import bad_input_tests


def rng(seed):
    return np.random.default_rng(seed)


def batches(X, Y, sizes):
    out, s = [], 0
    for b in sizes:
        out.append((X[s:s + b], Y[s:s + b]))
        s += b
    assert s == len(X)
    return out


@pytest.mark.parametrize("sizes", [[300], [1, 2, 97, 200], [7] * 40 + [20]])
def test_streamed_solution_equals_lstsq_on_all_rows(sizes):
    r = rng(0)
    X, Y = r.normal(size=(300, 12)), r.normal(size=(300, 5))
    ls = R.LeastSquares()
    for x, y in batches(X, Y, sizes):
        ls.update(x, y)
    assert ls.n == 300
    np.testing.assert_allclose(ls.solve(), np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-10)


def test_rank_deficient_and_fewer_rows_than_features_give_the_minimum_norm_solution():
    r = rng(1)
    X = r.normal(size=(40, 6))
    X = np.hstack([X, X[:, :2] * 3.0, np.zeros((40, 1))])  # two repeated directions and a dead feature
    Y = r.normal(size=(40, 3))
    ls = R.LeastSquares()
    for x, y in batches(X, Y, [5, 5, 30]):
        ls.update(x, y)
    np.testing.assert_allclose(ls.solve(), np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-9)
    few = r.normal(size=(4, 10)), r.normal(size=(4, 2))  # n < d: interpolates, minimum norm
    T = R.LeastSquares().update(*few).solve()
    np.testing.assert_allclose(few[0] @ T, few[1], atol=1e-10)
    np.testing.assert_allclose(T, np.linalg.pinv(few[0]) @ few[1], atol=1e-10)


def test_exact_when_the_block_is_linear_with_or_without_intercept():
    r = rng(2)
    X = r.normal(size=(500, 16)) * 50 + 1e3  # offset and scale as in a residual stream
    A, b = r.normal(size=(16, 16)), r.normal(size=16)
    T = R.LeastSquares().update(X[:250], X[:250] @ A).update(X[250:], X[250:] @ A).solve()
    np.testing.assert_allclose(T, A, rtol=1e-8, atol=1e-8)
    Tb = R.LeastSquares(bias=True).update(X, X @ A + b).solve()
    np.testing.assert_allclose(Tb[:-1], A, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(Tb[-1], b, rtol=1e-6, atol=1e-6)


def test_bias_equals_lstsq_with_a_ones_column():
    r = rng(3)
    X, Y = r.normal(size=(80, 5)), r.normal(size=(80, 4)) + 2.0
    want = np.linalg.lstsq(np.hstack([X, np.ones((80, 1))]), Y, rcond=None)[0]
    np.testing.assert_allclose(R.fit_linear_map(X, Y, bias=True), want, atol=1e-10)


def test_ridge_is_the_penalised_solution_and_leaves_the_intercept_free():
    r = rng(4)
    X, Y = r.normal(size=(60, 8)), r.normal(size=(60, 3))
    lam = 2.5
    want = np.linalg.solve(X.T @ X + lam * np.eye(8), X.T @ Y)
    np.testing.assert_allclose(R.fit_linear_map(X, Y, ridge=lam), want, atol=1e-10)
    Xb = np.hstack([X, np.ones((60, 1))])
    P = np.diag([lam] * 8 + [0.0])
    np.testing.assert_allclose(R.fit_linear_map(X, Y, bias=True, ridge=lam),
                               np.linalg.solve(Xb.T @ Xb + P, Xb.T @ Y), atol=1e-10)


def test_bad_input_is_one_clear_error():
    ls = R.LeastSquares()
    with pytest.raises(ValueError, match="no rows"):
        ls.solve()
    with pytest.raises(ValueError, match="finite"):
        ls.update(np.array([[np.nan, 1.0]]), np.ones((1, 1)))
    with pytest.raises(ValueError, match="same rows"):
        ls.update(np.ones((3, 2)), np.ones((2, 1)))
    ls.update(np.ones((3, 2)), np.ones((3, 1)))
    with pytest.raises(ValueError, match="widths"):
        ls.update(np.ones((3, 4)), np.ones((3, 1)))
    with pytest.raises(ValueError, match="ridge"):
        ls.solve(ridge=-1.0)


def test_torch_inputs_are_taken_in_float64():
    r = rng(5)
    X, Y = r.normal(size=(50, 4)), r.normal(size=(50, 2))
    got = R.fit_linear_map(torch.from_numpy(X.astype(np.float32)), torch.from_numpy(Y.astype(np.float32)))
    np.testing.assert_allclose(got, np.linalg.lstsq(X.astype(np.float32).astype(np.float64),
                                                    Y.astype(np.float32).astype(np.float64), rcond=None)[0],
                               atol=1e-10)


# the paper's Table 1 spans and block counts (12-block encoders)
TABLE1 = {(1, 5): 8, (2, 5): 9, (7, 10): 9, (1, 3): 10, (3, 5): 10, (2, 4): 10, (8, 10): 10, (9, 11): 10,
          (2, 3): 11, (3, 4): 11, (4, 5): 11, (9, 10): 11}


def test_paper_spans_remove_the_blocks_the_tables_count():
    for (i, j), kept in TABLE1.items():
        first, last = R.paper_span(i, j)
        assert 12 - (last - first + 1) == kept
    assert R.paper_span(0, 1) == (2, 2) and R.paper_span(10, 11) == (12, 12)  # Table 2's single blocks
    for bad in [(3, 3), (4, 2), (-1, 2), (1.0, 2)]:
        with pytest.raises(ValueError, match="0 <= i < j"):
            R.paper_span(*bad)


def test_representation_mse():
    a = np.arange(6.0).reshape(3, 2)
    assert R.representation_mse(a, a + 2) == 4.0
    with pytest.raises(ValueError, match="one shape"):
        R.representation_mse(a, a[:2])
    with pytest.raises(ValueError, match="finite"):
        R.representation_mse(a, a * np.nan)


def test_relative_change_is_scale_free_and_refuses_a_constant_reference():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 4)), rng.standard_normal((50, 4))
    assert R.relative_change(a, a) == 0.0
    assert R.relative_change(3.0 * a, 3.0 * b) == pytest.approx(R.relative_change(a, b), rel=1e-12)
    want = np.mean((a - b) ** 2) / np.mean((a - a.mean(0)) ** 2)
    assert R.relative_change(a, b) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="same for every sample"):
        R.relative_change(np.ones((5, 3)), a[:5, :3])


def test_spread_is_the_mse_of_the_mean_and_what_relative_change_divides_by():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(40, 5)) * np.arange(1, 6)
    mean = np.tile(ref.mean(axis=0), (40, 1))
    assert R.spread(ref) == pytest.approx(R.representation_mse(ref, mean))
    assert R.spread(ref) == pytest.approx(float(np.var(ref, axis=0).mean()))
    assert R.relative_change(ref, mean) == pytest.approx(1.0)


def test_block_redundancy():
    r = rng(15)
    h, layers = r.standard_normal((30, 6)), []
    for _ in range(4):  # a stack of noisy linear layers
        h = h @ (r.standard_normal((6, 6)) / np.sqrt(6)) + 0.5 * r.standard_normal((30, 6))
        layers.append(h)
    ref = [-np.mean([(a - b) ** 2 for a, b in zip(x.ravel(), y.ravel())])
           for x, y in zip(layers[:-1], layers[1:])]
    np.testing.assert_allclose(R.block_redundancy(layers), ref, rtol=1e-12)


def test_rba_heldout_error_is_zero_for_affine_blocks_and_about_one_for_noise():
    r = rng(1)
    h0 = r.standard_normal((200, 6))
    h1 = h0 @ r.standard_normal((6, 6)) + 3.0  # an affine block
    h2 = r.standard_normal((200, 6))  # unrelated to h1
    err = R.rba_heldout_error(np.stack([h0, h1, h2]))
    assert err[0] < 1e-20 and 0.9 < err[1] < 1.3
    # scikit-learn's R^2 of an affine fit on the even samples, scored on the odd ones
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import r2_score

    fit = LinearRegression().fit(h1[::2], h2[::2])
    r2 = r2_score(h2[1::2], fit.predict(h1[1::2]), multioutput="variance_weighted")
    assert err[1] == pytest.approx(1 - r2, rel=1e-9)
    with pytest.raises(ValueError, match="at least 4 samples"):
        R.rba_heldout_error(np.stack([h0[:3], h1[:3]]))


# ----------------------------------------------------------------------------- bad inputs
# a valid value or one clear ValueError (the contract of tests/measures/conftest.py); hypothesis draws the data,
# derandomize=True keeps every run the same

HOSTILE = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])
FEW = settings(HOSTILE, max_examples=4)

# name -> (fn(X, Y), range of a valid result: "any" finite)
MEASURES = {
    "block_redundancy": (lambda X, Y: R.block_redundancy([X, Y]), "any"),
    "rba_fit": (lambda X, Y: R.fit_linear_map(X, Y), "any"),
    "rba_fit_bias": (lambda X, Y: R.fit_linear_map(X, Y, bias=True), "any"),
    "rba_heldout_error": (lambda X, Y: R.rba_heldout_error([X, Y]), "any"),
}


test_classic_bad_inputs, test_arbitrary_float_arrays = bad_input_tests(MEASURES, FEW, HOSTILE)


@HOSTILE
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 20), d=st.integers(1, 4),
       k=st.sampled_from([-100, -30, 30, 100]))
def test_rba_map_scales_inversely_with_its_input(bad_inputs, seed, n, d, k):
    X, Y = bad_inputs.base_pair(seed, n, d)
    ref = R.fit_linear_map(X, Y)
    np.testing.assert_allclose(R.fit_linear_map(X * 10.0**k, Y) * 10.0**k, ref, rtol=1e-8, atol=1e-12)


def test_rba_fit_refuses_complex_data():
    X = np.random.default_rng(12).standard_normal((12, 3))
    with pytest.raises(ValueError, match="complex"):  # the imaginary part used to be dropped with a warning
        R.fit_linear_map(X + 1j, X)
    with pytest.raises(ValueError, match="not numbers"):
        R.fit_linear_map(X, X.astype(str))
