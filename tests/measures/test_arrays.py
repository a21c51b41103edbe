"""Tests of layersim.measures.arrays: one input core for numpy arrays and torch tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layersim.measures import arrays


@pytest.mark.parametrize("e", [-1100, -3, 0, 5, 1100])
def test_scaling_by_a_power_of_two_is_exact_on_both_kinds(e):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 4)) * 2.0 ** min(e, 1000)
    got = arrays.scaled(x, e)
    if abs(e) < 1000:  # beyond, x itself is subnormal or the inverse would overflow
        np.testing.assert_array_equal(np.ldexp(got, e), x)
    np.testing.assert_array_equal(arrays.scaled(torch.from_numpy(x), e).numpy(), got)
    t = torch.from_numpy(x)
    assert arrays.scaled(t, e) is not t and t.dtype == torch.float64  # a copy, never the caller's tensor


def test_centring_and_unit_rows_agree_between_numpy_and_torch():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 5)) * 1e200 + 3e200
    for fn in (lambda a: arrays.centred(a, "x"), lambda a: arrays.unit_rows(a, True, "x")):
        np.testing.assert_allclose(fn(torch.from_numpy(x)).numpy(), fn(x), rtol=1e-12, atol=1e-15)
    U = arrays.unit_rows(x, True, "x")
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_checks_name_the_input_in_one_line(kind):
    wrap = (lambda a: a) if kind == "numpy" else torch.from_numpy
    bad = np.ones((4, 3))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"^x contains NaN or inf \(1 non-finite entries\)$"):
        arrays.max_abs(wrap(bad), "x")
    with pytest.raises(ValueError, match="x is constant across samples"):
        arrays.centred(wrap(np.ones((4, 3))), "x")
    rows = np.arange(12.0).reshape(4, 3)
    rows[1] = rows[[0, 2, 3]].mean(axis=0)  # row 1 at the mean of all four
    with pytest.raises(ValueError, match=r"x has 1 zero-norm row\(s\) after centring \(first: sample 1\)"):
        arrays.unit_rows(wrap(rows), True, "x")
    with pytest.raises(ValueError, match="need at least 3 samples"):
        arrays.check_shape((2, 5), "x", arrays.MIN_CENTRED)
    with pytest.raises(ValueError, match="same number of samples N: layer 0 has 4, layer 1 has 3"):
        arrays.same_samples([wrap(np.ones((4, 2))), wrap(np.ones((3, 2)))])
