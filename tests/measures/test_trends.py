"""Tests of layersim.measures.trends: correlations, monotonicity and the summary statistics of layer curves."""

import numpy as np
import pytest

from layersim.measures import trends


def test_pearson_and_spearman_match_definitions():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=12), rng.normal(size=12)
    za, zb = (a - a.mean()) / a.std(), (b - b.mean()) / b.std()
    assert trends.pearson(a, b) == pytest.approx(np.mean(za * zb), abs=1e-12)
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    assert trends.spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1], abs=1e-12)
    # monotone transforms leave the rank correlation at 1 but not the linear one
    assert trends.spearman(a, np.exp(3 * a)) == pytest.approx(1.0)
    assert trends.pearson(a, np.exp(3 * a)) < 0.99


@pytest.mark.parametrize("fn", [trends.pearson, trends.spearman])
def test_correlation_rejects_bad_curves(fn):
    with pytest.raises(ValueError, match="constant"):
        fn([1, 1, 1, 1], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="equal length"):
        fn([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="NaN"):
        fn([1, np.nan, 3], [1, 2, 3])


def test_fraction_increasing():
    assert trends.fraction_increasing([0.1, 0.2, 0.3, 0.25, 0.5]) == pytest.approx(0.75)
    assert trends.fraction_increasing([1, 1, 2], strict=True) == pytest.approx(0.5)
    assert trends.fraction_increasing([1, 1, 2], strict=False) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        trends.fraction_increasing([1.0])


def test_diagonal_order_on_a_banded_matrix():
    n = 6
    idx = np.arange(n)
    band = np.exp(-np.abs(idx[:, None] - idx[None, :]))  # decays away from the diagonal
    agree, total = trends.diagonal_order(band)
    # each row i has (n-1-i-1)^+ comparisons to the right and (i-1)^+ to the left
    expected_total = sum(max(n - 1 - i - 1, 0) + max(i - 1, 0) for i in range(n))
    assert (agree, total) == (expected_total, expected_total)
    assert trends.closer_more_similar(band) == 1.0
    # reversing the order away from the diagonal makes every comparison disagree
    anti = np.abs(idx[:, None] - idx[None, :]).astype(float)
    assert trends.closer_more_similar(anti) == 0.0


def test_diagonal_order_counts_one_violation():
    m = np.array([[1.0, 0.9, 0.5, 0.6], [0.9, 1.0, 0.8, 0.4], [0.5, 0.8, 1.0, 0.7], [0.6, 0.4, 0.7, 1.0]])
    # row 0 right side: 0.9>0.5 yes, 0.5>0.6 no; row 1: right 0.8>0.4 yes; row 2: left 0.8>0.5 yes;
    # row 3 left side: 0.7>0.4 yes, 0.4>0.6 no
    assert trends.diagonal_order(m) == (4, 6)


def test_closer_more_similar_needs_three_layers():
    with pytest.raises(ValueError, match="too small"):
        trends.closer_more_similar(np.eye(2))
    with pytest.raises(ValueError, match="square"):
        trends.closer_more_similar(np.ones((2, 3)))


def test_max_drop():
    assert trends.max_drop([0.1, 0.2, 0.3]) == 0.0
    assert trends.max_drop([0.5, 0.4, 0.45, 0.2]) == pytest.approx(0.25)
    assert trends.max_drop([1.0, 1.0]) == 0.0
    with pytest.raises(ValueError):
        trends.max_drop([1.0])


def test_mean_abs_gap():
    assert trends.mean_abs_gap([0.1, 0.5, 0.9], [0.2, 0.5, 0.6]) == pytest.approx((0.1 + 0 + 0.3) / 3)
    assert trends.mean_abs_gap([0.3, 0.4], [0.3, 0.4]) == 0.0
    with pytest.raises(ValueError, match="equal length"):
        trends.mean_abs_gap([0.1], [0.1, 0.2])


def test_mean_se_matches_the_textbook_formula():
    x = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 7.0]])
    m, se = trends.mean_se(x)
    np.testing.assert_allclose(m, [3.0, 5.0])
    np.testing.assert_allclose(se, [np.std([1, 3, 5], ddof=1) / np.sqrt(3), np.std([2, 6, 7], ddof=1) / np.sqrt(3)])


def test_mean_se_skips_nan_and_single_values_have_zero_error():
    m, se = trends.mean_se([[1.0, np.nan], [3.0, 4.0]])
    np.testing.assert_allclose(m, [2.0, 4.0])
    np.testing.assert_allclose(se, [1.0, 0.0])
    m1, se1 = trends.mean_se([[2.0, 5.0]])
    np.testing.assert_allclose(m1, [2.0, 5.0]) and np.testing.assert_allclose(se1, [0.0, 0.0])
    with pytest.raises(ValueError):
        trends.mean_se(np.zeros((0, 3)))


def test_lower_bound_is_mean_minus_k_errors():
    x = [1.0, 2.0, 4.0, 7.0]
    assert trends.lower_bound(x, k=2) == pytest.approx(np.mean(x) - 2 * np.std(x, ddof=1) / 2.0)
