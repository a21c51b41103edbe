"""Tests of layersim.papers.tracing.saturation_events: saturation blocks per subset of classes (Figures 3, 6)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from layersim.papers.tracing import saturation_events  # noqa: E402


def _centred_cos(a, b):
    a, b = a - a.mean(0), b - b.mean(0)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture
def readout_run():
    """Blocks [L, N, d], labels [N] and logits [L, N, K] whose predictions change at known blocks."""
    rng = np.random.default_rng(1)
    L, N, K = 5, 60, 4
    blocks = np.cumsum(rng.normal(size=(L, N, 3)), axis=0)
    labels = rng.integers(0, K, N)
    logits = rng.normal(size=(L, N, K))
    return blocks, labels, logits


def _naive_saturation(preds):
    """First block (1..L) from which the prediction equals the last one at every later block."""
    L = len(preds)
    return next(l for l in range(1, L + 1) if all(p == preds[-1] for p in preds[l - 1:]))


def test_subset_events_counts_saturation_blocks_like_a_loop(readout_run):
    blocks, labels, logits = readout_run
    mask = labels != 0
    got = saturation_events.subset_events(blocks, labels, logits, mask)
    sat = np.array([_naive_saturation(list(logits[:, i].argmax(-1))) for i in range(len(labels))])[mask]
    L = logits.shape[0]
    assert got["n"] == mask.sum()
    assert list(got["counts"]) == [int((sat == l).sum()) for l in range(1, L + 1)]
    assert got["mean_saturation"] == pytest.approx(sat.mean())
    np.testing.assert_allclose(got["cos_last"], [_centred_cos(b[mask], blocks[-1][mask]).mean() for b in blocks],
                               rtol=1e-10)
    np.testing.assert_allclose(got["accuracy"], [(lg[mask].argmax(-1) == labels[mask]).mean() for lg in logits])


def test_by_subset_splits_easy_and_hard_classes(readout_run):
    blocks, labels, logits = readout_run
    got = saturation_events.by_subset(blocks, labels, logits, [1, 3])
    assert list(got) == ["all", "easy", "hard"]
    assert got["all"]["n"] == len(labels) and got["hard"]["n"] == int(np.isin(labels, [1, 3]).sum())
    assert got["easy"]["n"] + got["hard"]["n"] == len(labels)
    np.testing.assert_array_equal(got["easy"]["counts"] + got["hard"]["counts"], got["all"]["counts"])
    one = saturation_events.subset_events(blocks, labels, logits, np.isin(labels, [1, 3]))
    np.testing.assert_array_equal(got["hard"]["counts"], one["counts"])
    assert saturation_events.cos_before_last(got["hard"]) == pytest.approx(one["cos_last"][:-1].mean())
    assert "mean saturation block" in saturation_events.describe(got["all"])


def test_easy_above_hard_needs_both_higher_cos_and_earlier_saturation():
    easy = {"cos_last": np.array([0.6, 0.8, 1.0]), "mean_saturation": 1.5}
    assert saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.5, 0.7, 1.0]), "mean_saturation": 2.0})
    assert not saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.5, 0.7, 1.0]), "mean_saturation": 1.0})
    assert not saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.9, 0.7, 1.0]), "mean_saturation": 2.0})


@pytest.mark.parametrize("mask, match", [(np.zeros(60, bool), "selects no sample"), (np.ones(60), "boolean mask"),
                                         (np.ones(59, bool), "boolean mask")])
def test_subset_events_refuses_bad_masks(readout_run, mask, match):
    blocks, labels, logits = readout_run
    with pytest.raises(ValueError, match=match):
        saturation_events.subset_events(blocks, labels, logits, mask)


def test_events_figure_draws_the_fraction_of_events(readout_run):
    R = saturation_events.by_subset(*readout_run, [1])
    layers = np.arange(1, 6)
    fig = saturation_events.events_figure([("a", [(R["easy"], "easy", "tab:green"), (R["hard"], "hard", "tab:red")]),
                                           ("b", [(R["all"], "all", "tab:blue")])], layers)
    main = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in main] == ["a", "b"]
    heights = [p.get_height() for p in main[1].patches]
    np.testing.assert_allclose(heights, R["all"]["counts"] / R["all"]["n"])
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one panel"):
        saturation_events.events_figure([], layers)
