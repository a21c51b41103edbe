"""Tests of layersim.papers.redundancy.skip_vs_approx: Table 2's spans skipped and approximated, probed per seed,
and the numbers of its statement (approximating beats skipping)."""

import pandas as pd
import pytest
import torch

from builders import TABLE2_ROWS, spy_probes, tiny_vit
from layersim.papers.redundancy import models as rm, rba, skip_vs_approx as sva

R04 = {"n_fit": 16, "n_train": 40, "n_test": 20, "probe_lr": 0.01, "probe_epochs": 5, "batch_size": 16}
FMNIST = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist",))


def test_span_rows_probe_every_span_skipped_then_approximated(monkeypatch, spliced_vit):
    """Every probed model computes what the ViT computes with the span's blocks removed (skip) or replaced by
    their least-squares map on the ``n_fit`` training inputs (approx), both built here without layersim; each row
    holds the probe's accuracies per mode and seed with their mean and standard deviation."""
    model = tiny_vit(perturb=True, depth=4)  # Table 2's spans 1-3, 0-1, 1-2, 2-3 fit in 4 blocks
    probed = spy_probes(monkeypatch, rba)
    rows = sva.span_rows(model, "tiny", FMNIST, "fashion-mnist", R04, "smoke", seeds=[0, 1], seed=0, device="cpu")
    assert [r["span"] for r in rows] == ["1-3", "0-1", "1-2", "2-3", "none"]
    assert [r["blocks"] for r in rows] == [2, 3, 3, 3, 4]
    assert len(probed) == 2 * len(rows)
    for row, skip, approx in zip(rows, probed[0::2], probed[1::2]):
        assert row["model"] == "tiny" and row["data"] == "fashion-mnist"
        for mode, (_, args, kw, acc) in (("skip", skip), ("approx", approx)):
            assert row[f"{mode}_per_seed"] == acc and len(acc) == 2 and all(0 <= a <= 1 for a in acc)
            assert row[mode] == pytest.approx(sum(acc) / 2)
            assert row[f"{mode}_std"] == pytest.approx(abs(acc[0] - acc[1]) / 2)
            assert (kw["epochs"], kw["lr"], list(kw["seeds"])) == (5, 0.01, [0, 1])
            assert (len(args[1]), len(args[3])) == (40, 20)  # training and test labels
    assert probed[-2][0] is probed[-1][0] is model  # nothing removed: the same model twice
    assert rows[-1]["skip_per_seed"] == rows[-1]["approx_per_seed"]
    fit, _ = rm.inputs(FMNIST, "fashion-mnist", 16, split="train", scale="smoke", seed=0, batch_size=16)
    x = torch.cat(probed[0][1][2])  # the test images
    # paper spans 1-3, 0-1, 1-2, 2-3 as 1-based blocks
    for k, (first, last) in enumerate([(3, 4), (2, 2), (3, 3), (4, 4)]):
        with torch.no_grad():
            torch.testing.assert_close(probed[2 * k][0](x), spliced_vit(model, first, last)(x))
            torch.testing.assert_close(probed[2 * k + 1][0](x), spliced_vit(model, first, last, fit)(x),
                                       rtol=1e-4, atol=1e-4)


def test_gain_line_counts_the_spans_won():
    assert sva.gain_line(TABLE2_ROWS[:3]) == (
        "B               x              approx > skip in 1 of 2 spans; mean gain 2.5 points")
    with pytest.raises(ValueError, match="at least one row"):
        sva.gain_line(TABLE2_ROWS[2:3])
    with pytest.raises(ValueError, match="one model and data set"):
        sva.gain_line(TABLE2_ROWS)


def test_approx_wins_and_gain_by_pair_are_the_claims_numbers():
    """By hand: the four spans gain 0.1, -0.05, 0.05 and 0.1 by approximating; the unmodified rows do not count."""
    table = pd.DataFrame(TABLE2_ROWS)
    fraction, counts = sva.approx_wins(table)
    assert fraction == 0.75
    assert counts == {"cases": 4, "wins": 3, "mean_gain_points": pytest.approx(100 * (0.1 - 0.05 + 0.05 + 0.1) / 4)}
    gains = sva.gain_by_pair(table)
    assert list(gains) == ["A | y", "B | x"]
    assert gains == pytest.approx({"A | y": 0.075, "B | x": 0.025})
    with pytest.raises(ValueError, match="only the unmodified"):
        sva.approx_wins(table[table.span == "none"])
    with pytest.raises(ValueError, match="columns"):
        sva.gain_by_pair(table.drop(columns="skip"))


def test_accuracy_record_keys_every_row():
    record = sva.accuracy_record(TABLE2_ROWS)
    assert list(record)[:3] == ["B | x | 1-3", "B | x | 0-1", "B | x | none"]
    assert record["A | y | 2-3"] == {"blocks": 3, "skip": 0.6, "skip_std": 0.01, "skip_per_seed": [0.6, 0.6],
                                     "approx": 0.7, "approx_std": 0.02, "approx_per_seed": [0.7, 0.7]}
