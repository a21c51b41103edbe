"""Tests of layersim.measures.block_structure: the two-cluster block-diagonal score, against a brute-force loop and
on matrices whose answer is known."""

import numpy as np
import pytest

from layersim.measures import block_structure as bs


def _brute(M, s):
    E = len(M)
    within = [M[i, j] for i in range(E) for j in range(E) if i != j and (i < s) == (j < s)]
    between = [M[i, j] for i in range(E) for j in range(E) if (i < s) != (j < s)]
    return np.mean(within) - np.mean(between)


def _sym(E, seed=0):
    A = np.random.default_rng(seed).uniform(0, 1, (E, E))
    M = (A + A.T) / 2
    np.fill_diagonal(M, 1.0)
    return M


@pytest.mark.parametrize("E", [3, 4, 7, 13])
def test_scores_equal_a_brute_force_loop(E):
    M = _sym(E, seed=E)
    np.testing.assert_allclose(bs.split_scores(M), [_brute(M, s) for s in range(1, E)], rtol=1e-12)


def test_two_perfect_blocks_score_one_at_the_true_split():
    M = np.zeros((7, 7))
    M[:3, :3] = 1.0
    M[3:, 3:] = 1.0
    best = bs.best_split(M)
    assert best.at == 3 and best.score == pytest.approx(1.0) and best.within == 1.0 and best.between == 0.0
    assert np.all(bs.split_scores(M) <= 1.0)


def test_no_structure_scores_zero_everywhere_and_affine_equivariance():
    M = np.full((6, 6), 0.4)
    np.fill_diagonal(M, 1.0)
    np.testing.assert_allclose(bs.split_scores(M), 0.0, atol=1e-15)
    R = _sym(6, seed=3)
    np.testing.assert_allclose(bs.split_scores(2.5 * R + 0.3), 2.5 * bs.split_scores(R), rtol=1e-12)


def test_bad_matrices_are_refused():
    with pytest.raises(ValueError, match="square"):
        bs.split_scores(np.ones((3, 4)))
    with pytest.raises(ValueError, match="at least 3"):
        bs.split_scores(np.eye(2))
    with pytest.raises(ValueError, match="symmetric"):
        bs.split_scores(np.arange(9.0).reshape(3, 3))
    bad = _sym(4)
    bad[0, 1] = bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        bs.best_split(bad)
