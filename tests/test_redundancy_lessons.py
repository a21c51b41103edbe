"""What notebook r03 calls: the classification protocol for one model and data set, its statement
(``rba_keeps_accuracy``), its records and its figure, each against the computation the notebook did inline."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from builders import tiny_vit
from layersim.papers.redundancy import figures, models as rm, rba as rr

SETTINGS = {"n_fit": 16, "n_train": 40, "n_test": 20, "probe_lr": 0.01, "batch_size": 16}
SPEC = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist",))


def _row(model, data, span, blocks, per_seed):
    return {"model": model, "data": data, "span": span, "blocks": blocks, "accuracy": np.mean(per_seed),
            "std": np.std(per_seed), "per_seed": list(per_seed)}


#: two models on two data sets, spans 1-3, 2-3 (single block) and 3-4 (single block) and the unmodified model
ROWS = [_row(m, d, s, b, acc) for m, d, shift in (("A", "x", 0.0), ("A", "y", 0.1), ("B", "x", -0.05))
        for s, b, acc in (("1-3", 2, [0.5 + shift, 0.6 + shift]), ("2-3", 3, [0.7 + shift, 0.75 + shift]),
                          ("3-4", 3, [0.8 + shift, 0.6 + shift]), ("none", 4, [0.8 + shift, 0.7 + shift]))]


def test_span_accuracies_are_the_notebooks_inline_computation():
    model = tiny_vit(perturb=True, depth=4)  # Table 1's spans 1-3 and 2-3 fit in 4 blocks
    rows = rr.span_accuracies(model, "tiny", SPEC, "fashion-mnist", SETTINGS, "smoke", seeds=[0, 1], seed=0,
                              device="cpu")
    # r03's cell before the move
    kw = dict(scale="smoke", seed=0, batch_size=16)
    fit, _ = rm.inputs(SPEC, "fashion-mnist", 16, split="train", **kw)
    train, y_train = rm.inputs(SPEC, "fashion-mnist", 40, split="train", **kw)
    test, y_test = rm.inputs(SPEC, "fashion-mnist", 20, split="test", **kw)
    spans = rr.spans_for(4)
    assert [r["span"] for r in rows] == [rr.span_label(s) for s in spans] == ["1-3", "2-3", "none"]
    for row, span in zip(rows, spans):
        approx = rr.span_model(model, span, "approx", fit, device="cpu")
        acc = rr.probe_accuracies(approx, train, y_train, test, y_test, seeds=[0, 1], lr=0.01, device="cpu")
        assert row == {"model": "tiny", "data": "fashion-mnist", "span": rr.span_label(span),
                       "blocks": rr.blocks_kept(span, 4), "accuracy": np.mean(acc), "std": np.std(acc),
                       "per_seed": acc}
    assert [r["blocks"] for r in rows] == [2, 3, 4] and len(rows[0]["per_seed"]) == 2


def test_accuracy_line_lists_the_unmodified_model_then_every_span():
    line = rr.accuracy_line(ROWS[:4])
    assert line == "A               x              none 0.750; spans 1-3:0.550 2-3:0.725 3-4:0.700"
    with pytest.raises(ValueError, match="last"):
        rr.accuracy_line(ROWS[:3])
    with pytest.raises(ValueError, match="last"):
        rr.accuracy_line([])


def test_accuracy_record_keys_every_row():
    record = rr.accuracy_record(ROWS)
    assert len(record) == len(ROWS) and list(record)[:2] == ["A | x | 1-3", "A | x | 2-3"]
    assert record["B | x | none"] == {"mean": ROWS[-1]["accuracy"], "std": ROWS[-1]["std"],
                                      "per_seed": ROWS[-1]["per_seed"], "blocks": 4}


def test_single_block_drop_is_the_claims_value():
    table = pd.DataFrame(ROWS)
    base = rr.unmodified_accuracy(table)
    assert dict(base) == {("A", "x"): ROWS[3]["accuracy"], ("A", "y"): ROWS[7]["accuracy"],
                          ("B", "x"): ROWS[11]["accuracy"]}
    drop, per_pair = rr.single_block_drop(table, spans=[(2, 3), (3, 4)])
    # by hand: unmodified minus approximated, points, over the rows of spans 2-3 and 3-4
    by_pair = {f"{r['model']} | {r['data']}": [] for r in ROWS}
    for r in ROWS:
        if r["span"] in ("2-3", "3-4"):
            by_pair[f"{r['model']} | {r['data']}"].append(100 * (base[(r["model"], r["data"])] - r["accuracy"]))
    assert drop == pytest.approx(np.mean(sum(by_pair.values(), [])), abs=1e-12)
    assert per_pair == pytest.approx({k: np.mean(v) for k, v in by_pair.items()}, abs=1e-12)
    assert drop == pytest.approx(3.75) and list(per_pair) == ["A | x", "A | y", "B | x"]
    # r03's cell before the move, with Table 1's single-block spans
    single = table[table.span.isin(["2-3", "3-4"])]
    drops = 100 * (single.set_index(["model", "data"]).accuracy
                   - base.reindex(single.set_index(["model", "data"]).index).values)
    assert drop == -float(drops.mean())
    assert rr.single_block_drop(table) == (drop, per_pair)  # 2-3 and 3-4 are Table 1's single-block spans
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


def test_accuracy_vs_blocks_draws_every_series():
    table = pd.DataFrame(ROWS)
    fig = figures.accuracy_vs_blocks(table)
    try:
        assert [ax.get_title() for ax in fig.axes] == ["A", "B"]
        a = fig.axes[0]
        assert len(a.containers) == 2  # one error-bar series per data set
        for container, dataset, shift in zip(a.containers, ("x", "y"), (-0.08, 0.08)):
            sub = table[(table.model == "A") & (table.data == dataset)]
            x, y = container.lines[0].get_data()
            np.testing.assert_allclose(np.asarray(x, float), sub.blocks + shift)
            np.testing.assert_allclose(np.asarray(y, float), sub.accuracy)
        dotted = [l for l in a.get_lines() if l.get_linestyle() == ":"]
        assert [l.get_ydata()[0] for l in dotted] == [ROWS[3]["accuracy"], ROWS[7]["accuracy"]]
        assert [t.get_text() for t in a.get_legend().get_texts()] == ["x", "y"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="columns"):
        figures.accuracy_vs_blocks(table.drop(columns="std"))
    with pytest.raises(ValueError, match="at least one"):
        figures.accuracy_vs_blocks(table.iloc[:0])


def test_protocol_inputs_draws_fit_then_train_then_test(monkeypatch):
    from layersim.papers.redundancy import models as redundancy_models
    from layersim.papers.redundancy import rba as rba_module

    calls = []

    def fake_inputs(spec, dataset, n, split, scale, seed, batch_size):
        calls.append((n, split, scale, seed, batch_size))
        return f"{split}-{n}", f"labels-{split}-{n}"

    monkeypatch.setattr(redundancy_models, "inputs", fake_inputs)
    settings = {"n_fit": 8, "n_train": 0, "n_test": 5, "batch_size": 4}
    got = rba_module.protocol_inputs(None, "digits", settings, "smoke", seed=3)
    assert got == ("train-8", "train-None", "labels-train-None", "test-5", "labels-test-5")
    assert calls == [(8, "train", "smoke", 3, 4), (None, "train", "smoke", 3, 4), (5, "test", "smoke", 3, 4)]
