"""Tests of layersim.papers.tracing.param_table: Table 1's parameter counts, the paper's table beside ours."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
import transformers as tr  # noqa: E402

from layersim.nets import params  # noqa: E402
from layersim.notebook import settings  # noqa: E402
from layersim.papers.tracing import param_table  # noqa: E402


@pytest.mark.parametrize("name,expected", [("deit_small", 22_050_664), ("deit_base", 86_567_656)])
def test_deit_counts_equal_timm(name, expected):
    with torch.device("meta"):
        model = timm.create_model(param_table.ARCHITECTURES[name]["timm"], pretrained=False)
    assert params.count_module(model) == expected == param_table.architecture_params(name)["single"]
    assert round(expected / 1e6, 2) == {"deit_small": 22.05, "deit_base": 86.57}[name]  # Table 1's column


@pytest.mark.parametrize("name", ["gpt2", "gpt3", "llama2_7b", "llama2_70b"])
def test_published_sizes_equal_meta_instantiation(name):
    arch = param_table.ARCHITECTURES[name]
    if arch["kind"] == "gpt2":
        cfg, cls = tr.GPT2Config(**arch["config"]), tr.GPT2LMHeadModel
    else:
        cfg, cls = tr.LlamaConfig(**arch["config"]), tr.LlamaForCausalLM
    with torch.device("meta"):
        model = cls(cfg)
    assert params.count_module(model) == params.hf_params(cfg) == param_table.architecture_params(name)["single"]


def test_published_llama2_7b_and_gpt3_totals():
    assert param_table.architecture_params("llama2_7b")["single"] == 6_738_415_616  # LLaMA-2-7B, the usual "6.74B"
    assert round(param_table.architecture_params("gpt3")["single"] / 1e9, 1) == 174.6  # GPT-3 "175B"


def test_an_exit_head_copies_the_models_classifier():
    counts = param_table.architecture_params("deit_small", head_bias=False)
    assert counts["multi"] - counts["single"] == 11 * 384 * 1000
    with pytest.raises(ValueError, match="unknown architecture 'gpt5'"):
        param_table.architecture_params("gpt5")


@pytest.fixture(scope="module")
def counted():
    return param_table.counted_table()


def test_counted_table_counts_single_and_multi_classifier_models(counted):
    assert list(counted.index) == list(param_table.ARCHITECTURES) and counted["closed_form_equals_instantiated"].all()
    deit = counted.loc["deit_small"]
    assert deit["single"] == 22_050_664 and deit["multi"] == 22_050_664 + 11 * (384 * 1000 + 1000)
    gpt2 = counted.loc["gpt2"]
    assert gpt2["overhead"] == 11 * 768 * 50257  # copies of the tied LM head, no bias
    assert gpt2["saving"] == pytest.approx(100 * 11 * 768 * 50257 / (124_439_808 + 11 * 768 * 50257))
    no_bias = param_table.counted_table(head_bias=False, head_norm=True).loc["deit_small"]
    assert no_bias["overhead"] == 11 * (384 * 1000 + 2 * 384)


def test_paper_table_and_comparison(counted):
    paper = param_table.paper_table()
    assert list(paper.index) == ["deit_small", "deit_base", "gpt2", "gpt3", "llama2"]
    assert paper.loc["gpt2", "overhead"] == pytest.approx(541.57e6 - 117.35e6)
    ours = counted.loc[["deit_small", "deit_base", "gpt2", "gpt3", "llama2_70b"]].set_axis(paper.index)
    cmp = param_table.comparison(paper, ours)
    gpt3_heads = 95 * 12288 * 50257
    assert cmp.loc["gpt3", "overhead rel. diff"] == pytest.approx(gpt3_heads / (233.67e9 - 175.63e9) - 1)
    assert cmp.loc["deit_base", "ours single (M)"] == pytest.approx(86.567656)
    assert cmp.loc["llama2", "saving diff (pt)"] == pytest.approx(ours.loc["llama2", "saving"] - 6.81)
    gpt2_m = 124.439808
    assert param_table.per_model(ours, ["gpt2"]) == {
        "gpt2": {"single": pytest.approx(gpt2_m), "multi": pytest.approx(gpt2_m + 11 * 768 * 50257 / 1e6)}}
    assert param_table.column(paper, "saving", ["gpt2", "llama2"]) == {"gpt2": 78.39, "llama2": 6.81}


def test_reconstruction_rebuilds_the_paper_from_nominal_sizes(counted):
    paper = param_table.paper_table()
    rec, stats = param_table.reconstruction(paper, counted)
    nominal = [22_050_664, 86_567_656, 117e6, 175e9, 70e9]
    rebuilt = [n + (row["layers"] - 1) * row["dim"] * row["classes"] for n, (_, row) in zip(nominal, paper.iterrows())]
    np.testing.assert_allclose(rec["reconstructed multi"], rebuilt)
    printed = [round(r / u, 2) == round(p / u, 2) for r, p, u in
               zip(rebuilt, paper["multi"], [1e6, 1e6, 1e6, 1e9, 1e9])]
    assert stats["rows_matching"] == sum(printed) == 5
    rel = max(abs(r / p - 1) for r, p in zip(rebuilt, paper["multi"]))
    assert stats["max_rel_diff"] == pytest.approx(rel)
    savings = [100 * (r - n) / r for r, n in zip(rebuilt, nominal)]
    assert stats["max_saving_diff_points"] == pytest.approx(max(abs(s - p) for s, p in zip(savings, paper["saving"])))
    assert stats["max_saving_diff_points"] < 0.01 < stats["printed_single_saving_diff_points"]
    param_table.styled_reconstruction(rec).to_html()
    line1, line2 = param_table.describe_reconstruction(rec, {**stats, "max_rel_diff": 2.5e-4,
                                                              "max_saving_diff_points": 0.0049,
                                                              "printed_single_saving_diff_points": 0.126}).split("\n")
    assert line1 == ("paper multi column vs nominal + (L-1) d K: 5 of 5 rows give the printed digits (max relative "
                     "difference 2.5e-04)")
    assert line2 == ("saving column vs the reconstruction: max difference 0.005 points (vs 0.13 points when computed "
                     "from the printed single column)")


def test_architectures_are_the_rows_with_the_chosen_llama2():
    assert param_table.architectures("7b") == {"deit_small": "deit_small", "deit_base": "deit_base", "gpt2": "gpt2",
                                               "gpt3": "gpt3", "llama2": "llama2_7b"}
    assert all(a in param_table.ARCHITECTURES for a in param_table.architectures("70b").values())
    with pytest.raises(ValueError, match="no LLaMA-2 of size '34b'"):
        param_table.architectures("34b")


def test_rules_take_t07s_settings_and_name_a_bad_value():
    base = {"head_bias": None, "head_norm": False, "llama2_size": "70b"}
    assert settings.pick({"smoke": base}, "smoke", rules=param_table.RULES) == base
    assert settings.pick({"smoke": base}, "smoke", rules=param_table.RULES, head_bias=True)["head_bias"] is True
    for name, bad in [("llama2_size", "34b"), ("head_norm", "yes"), ("head_bias", 1.5)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": base}, "smoke", rules=param_table.RULES, **{name: bad})


def test_overhead_figure_draws_the_paper_beside_ours(counted):
    paper = param_table.paper_table()
    ours = counted.loc[["deit_small", "deit_base", "gpt2", "gpt3", "llama2_70b"]].set_axis(paper.index)
    fig = param_table.overhead_figure(paper, ours, list("ABCDE"))
    left, right = fig.axes
    np.testing.assert_allclose([p.get_height() for p in left.patches[5:]], ours["overhead"].astype(float))
    np.testing.assert_allclose([p.get_height() for p in right.patches[:5]], paper["saving"])
    np.testing.assert_allclose(right.lines[0].get_ydata(), 100 * ours["classes"].astype(float)
                               / (ours["classes"].astype(float) + 12 * ours["dim"].astype(float)))
    plt.close(fig)
    with pytest.raises(ValueError, match="one label per model"):
        param_table.overhead_figure(paper, ours, ["A"])
