"""Tests of layersim.papers.redundancy.rba: the paper's spans and parameter counts (against the numbers the paper
prints), span models, the probe protocol of Tables 1, 5, 6 and their statement ``rba_keeps_accuracy``."""

import numpy as np
import pandas as pd
import pytest
import torch

from builders import TABLE1_ROWS, image_batch, spy_probes, tiny_vit
from layersim.measures import redundancy
from layersim.nets import linear_maps, surgery
from layersim.papers.redundancy import models as rm, rba as rr

SETTINGS = {"n_fit": 16, "n_train": 40, "n_test": 20, "probe_lr": 0.01, "batch_size": 16}
SPEC = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist",))


def test_table_spans_and_blocks_kept():
    assert len(rr.TABLE1_SPANS) == 13 and rr.TABLE1_SPANS[-1] is None
    assert len(rr.TABLE2_SPANS) == 20 and rr.TABLE2_SPANS[8:19] == [(i, i + 1) for i in range(11)]
    assert [rr.blocks_kept(s) for s in rr.TABLE1_SPANS] == [8, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11, 11, 12]
    assert rr.spans_for(4) == [(1, 3), (2, 3), None]
    assert rr.span_label((2, 3)) == "2-3" and rr.span_label(None) == "none"


def test_a_rehearsal_keeps_a_few_spans_each_table_has_and_one_of_the_claims(monkeypatch):
    from layersim.notebook import rehearsal

    assert rr.spans_for(12, scale="paper") == rr.TABLE1_SPANS  # no rehearsal: every span
    monkeypatch.setenv(rehearsal.ENV, "1")
    for table in (rr.TABLE1_SPANS, rr.TABLE2_SPANS):
        kept = rr.spans_for(12, table, scale="paper")
        assert kept == list(rehearsal.REDUNDANCY_SPANS) and set(kept) <= set(table) and kept[-1] is None
    assert set(rr.SINGLE_BLOCK_SPANS) & set(rehearsal.REDUNDANCY_SPANS)  # rba_keeps_accuracy has a span to average
    assert rr.spans_for(12, scale="default") == rr.TABLE1_SPANS  # only the paper scale is rehearsed
    assert rr.PAPER_PARAMS_M["vit_small"]["1-5"] == 15.31 and rr.PAPER_PARAMS_M["dino_small"]["none"] == 22.06


def test_parameter_counts_against_the_papers_table():
    """Single-block spans and the full encoders match the paper's counts; longer spans differ by one
    d x d map per additional removed block (the paper counts a map per block, RBA uses one per span)."""
    ours = rr.parameter_table(models={k: rr.PARAM_MODELS[k] for k in ("vit_small", "dino_small")})
    for model, row in ours.items():
        paper = rr.PAPER_PARAMS_M[model]
        for span in rr.TABLE1_SPANS:
            label = rr.span_label(span)
            extra_maps = 0 if span is None else 12 - rr.blocks_kept(span) - 1
            assert row[label] + extra_maps * 384 * 384 / 1e6 == pytest.approx(paper[label], abs=0.011), (model, label)


def test_span_models_skip_and_approximate():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=6)
    assert rr.span_model(model, None, "skip") is model
    sk = rr.span_model(model, (0, 1), "skip")
    with torch.no_grad():
        torch.testing.assert_close(sk(x), surgery.skip(model, 2, 2)(x))
    ap = rr.span_model(model, (0, 2), "approx", [x], device="cpu")
    assert (ap.first, ap.last) == redundancy.paper_span(0, 2) == (2, 3)
    assert isinstance(ap.replacement.module, linear_maps.LinearMap)
    with pytest.raises(ValueError, match="fit_batches"):
        rr.span_model(model, (0, 1), "approx")
    with pytest.raises(ValueError, match="mode"):
        rr.span_model(model, (0, 1), "drop")


def test_probe_accuracies_are_per_seed_and_deterministic():
    model = tiny_vit(perturb=True)
    x, y = image_batch(28, 1, n=40), np.arange(40) % 3
    a = rr.probe_accuracies(model, [x[:30]], y[:30], [x[30:]], y[30:], seeds=(0, 1), epochs=2, batch_size=8, device="cpu")
    b = rr.probe_accuracies(model, [x[:30]], y[:30], [x[30:]], y[30:], seeds=(0, 1), epochs=2, batch_size=8, device="cpu")
    assert a == b and len(a) == 2 and all(0 <= v <= 1 for v in a)


def test_span_accuracies_probe_the_model_with_each_span_approximated(monkeypatch, spliced_vit):
    """Every probed model computes what the ViT computes with the span's blocks replaced by their least-squares
    map fitted on the ``n_fit`` training inputs (built here without layersim), the unmodified model last; each
    row holds the probe's accuracies per seed with their mean and standard deviation."""
    model = tiny_vit(perturb=True, depth=4)  # Table 1's spans 1-3 and 2-3 fit in 4 blocks
    probed = spy_probes(monkeypatch, rr)
    rows = rr.span_accuracies(model, "tiny", SPEC, "fashion-mnist", SETTINGS, "smoke", seeds=[0, 1], seed=0,
                              device="cpu")
    assert [r["span"] for r in rows] == ["1-3", "2-3", "none"]
    assert [r["blocks"] for r in rows] == [2, 3, 4]  # paper span 1-3 removes blocks 3-4 of 4, 2-3 block 4
    assert len(probed) == 3
    for row, (_, args, kw, acc) in zip(rows, probed):
        assert row["model"] == "tiny" and row["data"] == "fashion-mnist" and row["per_seed"] == acc
        assert len(acc) == 2 and all(0 <= a <= 1 for a in acc)
        assert row["accuracy"] == pytest.approx(sum(acc) / 2) and row["std"] == pytest.approx(abs(acc[0] - acc[1]) / 2)
        train, y_train, test, y_test = args
        assert (len(y_train), len(y_test), sum(len(b) for b in test)) == (40, 20, 20)
        assert kw["lr"] == 0.01 and list(kw["seeds"]) == [0, 1]
    assert probed[-1][0] is model
    fit, _ = rm.inputs(SPEC, "fashion-mnist", 16, split="train", scale="smoke", seed=0, batch_size=16)
    x = torch.cat(probed[0][1][2])  # the test images
    for (m, *_), (first, last) in zip(probed, [(3, 4), (4, 4)]):
        with torch.no_grad():
            torch.testing.assert_close(m(x), spliced_vit(model, first, last, fit)(x), rtol=1e-4, atol=1e-4)


def test_accuracy_line_lists_the_unmodified_model_then_every_span():
    line = rr.accuracy_line(TABLE1_ROWS[:4])
    assert line == "A               x              none 0.750; spans 1-3:0.550 2-3:0.725 3-4:0.700"
    with pytest.raises(ValueError, match="last"):
        rr.accuracy_line(TABLE1_ROWS[:3])
    with pytest.raises(ValueError, match="last"):
        rr.accuracy_line([])


def test_accuracy_record_keys_every_row():
    record = rr.accuracy_record(TABLE1_ROWS)
    assert len(record) == len(TABLE1_ROWS) and list(record)[:2] == ["A | x | 1-3", "A | x | 2-3"]
    assert record["B | x | none"] == {"mean": TABLE1_ROWS[-1]["accuracy"], "std": TABLE1_ROWS[-1]["std"],
                                      "per_seed": TABLE1_ROWS[-1]["per_seed"], "blocks": 4}


def test_single_block_drop_is_the_claims_value():
    table = pd.DataFrame(TABLE1_ROWS)
    base = rr.unmodified_accuracy(table)
    assert dict(base) == {("A", "x"): TABLE1_ROWS[3]["accuracy"], ("A", "y"): TABLE1_ROWS[7]["accuracy"],
                          ("B", "x"): TABLE1_ROWS[11]["accuracy"]}
    drop, per_pair = rr.single_block_drop(table, spans=[(2, 3), (3, 4)])
    # by hand: unmodified minus approximated, points, over the rows of spans 2-3 and 3-4
    by_pair = {f"{r['model']} | {r['data']}": [] for r in TABLE1_ROWS}
    for r in TABLE1_ROWS:
        if r["span"] in ("2-3", "3-4"):
            by_pair[f"{r['model']} | {r['data']}"].append(100 * (base[(r["model"], r["data"])] - r["accuracy"]))
    assert drop == pytest.approx(np.mean(sum(by_pair.values(), [])), abs=1e-12)
    assert per_pair == pytest.approx({k: np.mean(v) for k, v in by_pair.items()}, abs=1e-12)
    # every pair: unmodified 0.75 (shifted), spans 2-3 and 3-4 at 0.725 and 0.70 (shifted): 100 * 0.0375
    assert drop == pytest.approx(3.75) and list(per_pair) == ["A | x", "A | y", "B | x"]
    assert per_pair == pytest.approx({"A | x": 3.75, "A | y": 3.75, "B | x": 3.75})
    assert rr.single_block_drop(table) == (drop, per_pair)  # 2-3 and 3-4 are Table 1's single-block spans
    worse = table.assign(accuracy=np.where(table.span == "2-3", table.accuracy - 0.1, table.accuracy))
    assert rr.single_block_drop(worse)[0] == pytest.approx(3.75 + 10 / 2)  # half the single-block rows lose 10
    with pytest.raises(ValueError, match="no row"):
        rr.single_block_drop(table, spans=[(9, 10)])


def test_parameter_comparison_puts_the_papers_counts_beside_ours():
    ours = {"vit_small": {"1-5": 14.8634, "none": 21.8139}, "toy": {"1-5": 1.0, "none": 2.005}}
    compare = rr.parameter_comparison(ours)
    assert list(compare.columns) == ["vit_small", "toy", "vit_small (paper)", "dino_small (paper)",
                                     "deit_small (paper)"]
    assert compare.loc["1-5", "vit_small"] == 14.86 and compare.loc["none", "toy"] == 2.0
    assert compare.loc["1-5", "vit_small (paper)"] == rr.PAPER_PARAMS_M["vit_small"]["1-5"] == 15.31
    assert compare.loc["none", "dino_small (paper)"] == 22.06


def test_protocol_inputs_draws_fit_then_train_then_test(monkeypatch):
    calls = []

    def fake_inputs(spec, dataset, n, split, scale, seed, batch_size):
        calls.append((n, split, scale, seed, batch_size))
        return f"{split}-{n}", f"labels-{split}-{n}"

    monkeypatch.setattr(rm, "inputs", fake_inputs)
    settings = {"n_fit": 8, "n_train": 0, "n_test": 5, "batch_size": 4}
    got = rr.protocol_inputs(None, "digits", settings, "smoke", seed=3)
    assert got == ("train-8", "train-None", "labels-train-None", "test-5", "labels-test-5")
    assert calls == [(8, "train", "smoke", 3, 4), (None, "train", "smoke", 3, 4), (5, "test", "smoke", 3, 4)]
