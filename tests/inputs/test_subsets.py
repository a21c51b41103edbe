"""Tests of layersim.inputs.subsets: deterministic, stratified subsets and their properties, the two draws of
class-balanced subsets worked out by hand, and the one-line refusal of every count the labels cannot give."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersim.inputs import subsets

from builders import BAD_COUNT_IDS, BAD_COUNTS, one_line_raised


def test_subset_indices_deterministic_and_seeded():
    labels = np.repeat(np.arange(10), 100)
    a = subsets.subset_indices(labels, 50, seed=0)
    b = subsets.subset_indices(labels, 50, seed=0)
    c = subsets.subset_indices(labels, 50, seed=1)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(np.bincount(labels[a]), np.full(10, 5))
    assert np.array_equal(subsets.subset_indices(labels, None), np.arange(1000))
    assert np.array_equal(subsets.subset_indices(labels, 1000), np.arange(1000))
    flat = subsets.subset_indices(labels, 50, seed=0, stratified=False)
    assert len(flat) == 50 and not np.array_equal(flat, a)


def test_subset_indices_refuses_counts_the_labels_cannot_give():
    """A count beyond the split was quietly cut to its size (a run recorded 100000 test images and
    measured 10000); it is refused, naming the count, the data and its size, unless it is a cap."""
    labels = np.repeat(np.arange(10), 100)
    with pytest.raises(ValueError, match=r"^limit=5000 is more than the 1000 samples of fashion-mnist's 'test' "
                                         r"split; use at most 1000"):
        subsets.subset_indices(labels, 5000, what="fashion-mnist's 'test' split")
    assert np.array_equal(subsets.subset_indices(labels, 5000, at_most=True), np.arange(1000))
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"^limit={bad}: at least 1 of the samples .* is needed"):
            subsets.subset_indices(labels, bad)
    for bad in (2.5, True, "10"):
        with pytest.raises(ValueError, match="limit must be a whole number of samples"):
            subsets.subset_indices(labels, bad)
    assert len(subsets.subset_indices(labels, np.int64(30))) == 30


#: ten samples of three classes, for draws worked out by hand
SMALL = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])


def test_class_subset_permutation_draw_is_balanced_relabelled_and_excluding():
    labels = np.repeat(np.arange(5), 20)
    idx, lab = subsets.class_subset(labels, (3, 1), per_class=6, seed=0)
    assert len(idx) == 12 and np.all(np.diff(idx) > 0)
    assert np.array_equal(np.bincount(lab), [6, 6]) and lab.dtype == np.int64
    assert np.all(labels[idx][lab == 0] == 3) and np.all(labels[idx][lab == 1] == 1)
    idx2, _ = subsets.class_subset(labels, (3, 1), per_class=6, seed=0, exclude=idx)
    assert not set(idx) & set(idx2)
    all_idx, all_lab = subsets.class_subset(labels, (4, 0), seed=2)
    assert np.array_equal(all_idx, np.r_[0:20, 80:100]) and np.array_equal(np.bincount(all_lab), [20, 20])
    # by hand: seed 0 permutes the ten samples as below; the first two of class 2 in that order are 2 and 5, of
    # class 0 are 6 and 3 (with 3 excluded: 6 and 9); sorted, each relabelled by its class's place in (2, 0)
    assert np.random.default_rng(0).permutation(10).tolist() == [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    idx, lab = subsets.class_subset(SMALL, (2, 0), per_class=2, seed=0)
    assert idx.tolist() == [2, 3, 5, 6] and lab.tolist() == [0, 1, 0, 1]
    assert subsets.class_subset(SMALL, (2, 0), per_class=2, seed=0, exclude=[3])[0].tolist() == [2, 5, 6, 9]
    # one permutation of the whole split: a class's samples depend neither on the other classes asked for, nor on
    # excluded samples of other classes, and a smaller draw is part of a larger one
    r = np.random.default_rng(7)
    shuffled = r.integers(0, 4, size=300)
    others = np.flatnonzero(shuffled == 1)[:30]
    for seed in (0, 3):
        got, lab = subsets.class_subset(shuffled, (2, 0, 3), per_class=9, seed=seed)
        alone = subsets.class_subset(shuffled, (0,), per_class=9, seed=seed, exclude=others)[0]
        assert np.array_equal(got[lab == 1], alone)
        assert set(subsets.class_subset(shuffled, (2, 0, 3), per_class=4, seed=seed)[0]) < set(got)


def test_class_subset_per_class_draw_is_shuffled_and_uniform():
    labels = np.r_[np.zeros(30, int), np.ones(20, int), np.full(10, 2)]
    idx, lab = subsets.class_subset(labels, [2, 0], 7, seed=3, draw="per_class")
    assert len(idx) == 14 and len(set(idx)) == 14
    assert np.sum(labels[idx] == 2) == 7 and np.sum(labels[idx] == 0) == 7
    assert np.array_equal(lab, (labels[idx] == 0).astype(int))
    assert np.array_equal(idx, subsets.class_subset(labels, [2, 0], 7, seed=3, draw="per_class")[0])
    assert not np.array_equal(idx, subsets.class_subset(labels, [2, 0], 7, seed=4, draw="per_class")[0])
    assert len(set(labels[idx[:7]])) == 2  # the order is mixed, not one class after the other
    # by hand: seed 0's generator picks 5 and 8 of class 2 (samples 2, 5, 8), then 3 and 0 of class 0 (samples
    # 0, 3, 6, 9), and shuffles the four
    idx, lab = subsets.class_subset(SMALL, (2, 0), per_class=2, seed=0, draw="per_class")
    assert idx.tolist() == [5, 0, 3, 8] and lab.tolist() == [0, 1, 1, 0]
    assert not np.array_equal(np.sort(idx), subsets.class_subset(SMALL, (2, 0), per_class=2, seed=0)[0])
    # without replacement and uniform: over many seeds every sample of a class is drawn equally often
    counts = np.zeros(len(labels))
    for seed in range(400):
        counts[subsets.class_subset(labels, (1, 2), 5, seed=seed, draw="per_class")[0]] += 1
    np.testing.assert_allclose(counts[labels == 1] / 400, 5 / 20, atol=0.08)
    np.testing.assert_allclose(counts[labels == 2] / 400, 5 / 10, atol=0.1)
    assert counts[labels == 0].sum() == 0
    idx_ex, _ = subsets.class_subset(labels, [0, 1], 5, seed=0, exclude=np.arange(25), draw="per_class")
    assert np.all(idx_ex >= 25)


@pytest.mark.parametrize("kwargs, message", [
    (dict(classes=(1, 1)), "distinct"),
    (dict(classes=()), "distinct"),
    (dict(classes=(0,), per_class=21), "fewer than the 21"),
    (dict(classes=(0, 2), per_class=11, draw="per_class"), "class 2 has 10 samples"),
    (dict(classes=(0, 1), per_class=0), "positive"),
    (dict(classes=(0, 1), draw="per_class"), "needs per_class"),
    (dict(classes=(0, 1), per_class=2, draw="stratified"), "draw must be"),
])
def test_class_subset_names_what_is_wrong(kwargs, message):
    labels = np.r_[np.zeros(20, int), np.ones(20, int), np.full(10, 2)]
    with pytest.raises(ValueError, match=message):
        subsets.class_subset(labels, **kwargs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=200), st.integers(1, 250),
       st.integers(0, 2**31))
def test_subset_indices_properties(labels, limit, seed):
    labels = np.asarray(labels)
    n = len(labels)
    if limit > n:
        with pytest.raises(ValueError, match=f"limit={limit} is more than the {n} samples"):
            subsets.subset_indices(labels, limit, seed=seed)
    idx = subsets.subset_indices(labels, limit, seed=seed, at_most=True)
    assert len(idx) == min(limit, n) and len(np.unique(idx)) == len(idx)
    assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < n
    if limit < n:  # stratified: each class within one of its proportional share
        for c in np.unique(labels):
            share = limit * np.sum(labels == c) / n
            assert np.floor(share) <= np.sum(labels[idx] == c) <= np.ceil(share)


@pytest.mark.parametrize("n, problem", BAD_COUNTS, ids=BAD_COUNT_IDS)
def test_bad_counts_are_one_line_errors(n, problem):
    one_line_raised(lambda: subsets.subset_indices(np.arange(10) % 2, n), problem)
