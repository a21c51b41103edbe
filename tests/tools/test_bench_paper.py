"""Tests of layersim.tools.bench_paper: the measured paper-scale plan (``python -m layersim.tools.bench paper``), on
the CPU."""

import math

import pytest

from layersim.inputs import image_data
from layersim.notebook import presets
from layersim.tools import bench, bench_paper


def test_the_tracing_vit_plan_multiplies_the_measured_step_by_the_presets_steps():
    rows = bench_paper.plan("cpu", tiny=True, only="t01", steps=1, log=lambda _: None)
    s = presets.tracing_vit("paper", "standard")
    n = s["n_train"] or image_data.split_size(s["dataset"], "train")
    assert [r["notebook"] for r in rows] == ["t01_cos_vs_cka"]
    assert rows[0]["steps"] == s["epochs"] * math.ceil(n / s["batch_size"]) == 200 * 196
    assert rows[0]["hours"] == pytest.approx(rows[0]["seconds"] * rows[0]["steps"] / 3600)
    assert rows[0]["precision"] == "fp32" and rows[0]["peak_gib"] is None


def test_every_workload_runs_one_tiny_step_on_the_cpu(capsys):
    assert bench.main(["paper", "--tiny", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    for w in bench_paper.workloads(tiny=True):
        assert f"| {w.notebook} | {w.label} |" in out
    assert "Measured hours per notebook" in out
    with pytest.raises(ValueError, match="steps"):
        bench_paper.time_workload(bench_paper.workloads(tiny=True)[0], "cpu", steps=0)


def test_notebook_hours_sums_the_known_workloads_and_can_leave_out_partial_notebooks():
    rows = [{"notebook": "t01", "hours": 0.25}, {"notebook": "t01", "hours": 0.5},
            {"notebook": "c03", "hours": 1.0}, {"notebook": "c03", "hours": None},
            {"notebook": "r01", "hours": None}]
    assert bench_paper.notebook_hours(rows) == {"t01": 0.75, "c03": 1.0}
    assert bench_paper.notebook_hours(rows, complete_only=True) == {"t01": 0.75}
    assert bench_paper.notebook_hours([]) == {}
