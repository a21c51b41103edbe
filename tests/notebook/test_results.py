"""Tests of layersim.notebook.results: output folders (kept out of the committed results and of a user's own
files), claims and measurements with their verdicts (a NaN value or threshold never meets its comparison),
metrics.json, summaries and the claims table."""

import errno
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from layersim.core import writers
from layersim.notebook import results, seeds

from builders import SPELLINGS, spelled

PAYLOAD = "<svg onload=alert(2)>"


def test_output_dir_keeps_other_scales_out_of_figures(tmp_path, monkeypatch):
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    monkeypatch.delenv("LAYERSIM_UPDATE_COMMITTED", raising=False)
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    # a default-scale run writes the committed figures/ only with the switch on (make reproduce)
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "runs" / "default" / "tracing" / "t01"
    assert not (tmp_path / "figures").exists()
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "1")
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "figures" / "tracing" / "t01"
    smoke = results.output_dir("tracing", "t01", "smoke")
    assert smoke == tmp_path / "runs" / "smoke" / "tracing" / "t01" and smoke.is_dir()
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "elsewhere"))
    assert results.output_dir("a", "b", "paper") == tmp_path / "elsewhere" / "a" / "b"


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_output_dir_refuses_other_scales_pointed_into_figures(tmp_path, monkeypatch, scale):
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "figures"))
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "1")  # not even the switch lets another scale in
    with pytest.raises(ValueError, match="may not write into"):
        results.output_dir("tracing", "t01", scale)
    assert not (tmp_path / "figures").exists()
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "figures" / "tracing" / "t01"
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "0")
    with pytest.raises(ValueError, match="committed results"):
        results.output_dir("tracing", "t01", "default")


def test_claim_is_computed_from_the_value():
    assert results.claim(0.95, 0.9)["holds"] is True
    assert results.claim(0.85, 0.9)["holds"] is False
    c = results.claim(2.0, 3.0, op="<=", note="gap in points")
    assert c == {"holds": True, "value": 2.0, "threshold": 3.0, "op": "<=", "note": "gap in points"}
    with pytest.raises(ValueError, match="measurement failed"):
        results.claim(float("nan"), 0.9)
    with pytest.raises(ValueError, match="comparison"):
        results.claim(1.0, 0.9, op="=>")


def test_a_measurement_carries_no_verdict_until_it_is_judged():
    m = results.measure(np.float32(0.5), "fraction", kind="scale", reason="small data", per_task={"a": 0.5})
    assert m == {"value": 0.5, "note": "fraction", "kind": "scale", "reason": "small data", "per_task": {"a": 0.5}}
    c = results.judge(m, 0.4, ">")
    assert c == {"holds": True, "value": 0.5, "threshold": 0.4, "op": ">", "note": "fraction", "kind": "scale",
                 "reason": "small data", "per_task": {"a": 0.5}}
    assert results.judge(m, 0.5, ">")["holds"] is False and results.judge(m, 0.5, ">=")["holds"] is True
    with pytest.raises(ValueError, match="measurement failed"):
        results.measure(float("nan"))
    with pytest.raises(ValueError, match="carries no holds, threshold"):
        results.measure(1.0, holds=True, threshold=0.5)
    with pytest.raises(ValueError, match="not a measurement"):
        results.judge(results.claim(1.0, 0.5), 0.5)
    with pytest.raises(ValueError, match="diagnosis"):
        results.measure(1.0, kind="scale")


def test_a_value_on_its_threshold_up_to_rounding_is_on_it():
    """12 of 600 examples lost is -0.02 exactly; in floats 0.935 - 0.955 is -0.020000000000000018."""
    drop = 0.935 - 0.955
    assert drop != -0.02 and drop == pytest.approx(-0.02)
    assert results.claim(drop, -0.02, ">=")["holds"] and results.claim(drop, -0.02, "<=")["holds"]
    assert not results.claim(drop, -0.02, ">")["holds"] and not results.claim(drop, -0.02, "<")["holds"]
    assert results.claim(0.1 + 0.2, 0.3, "<=")["holds"] and not results.claim(0.1 + 0.2, 0.3, ">")["holds"]
    # a real difference stays one, also next to 0 (no absolute tolerance) and at a relative 1e-6
    assert results.claim(1e-17, 0.0, ">")["holds"] and not results.claim(-1e-17, 0.0, ">=")["holds"]
    assert not results.claim(-0.02 * (1 + 1e-6), -0.02, ">=")["holds"]
    assert results.compare(0.5, 0.5, ">") is False and results.compare(0.5, 0.5, ">=") is True
    with pytest.raises(ValueError, match="comparison"):
        results.compare(1.0, 1.0, "==")


def test_write_metrics_round_trips_numpy_and_torch(tmp_path):
    claims = {"c": results.claim(np.float32(0.95), 0.9)}
    path = results.write_metrics(tmp_path, "tracing/t01", "smoke", {"seed": np.int64(3)}, claims,
                                 curve=np.array([0.5, 1.0]), t=torch.tensor([1.5]), bad=math.inf)
    data = json.loads(path.read_text())
    assert data["notebook"] == "tracing/t01" and data["scale"] == "smoke"
    assert data["params"] == {"seed": 3}
    assert data["curve"] == [0.5, 1.0] and data["t"] == [1.5] and data["bad"] is None
    assert data["claims"]["c"]["holds"] is True
    with pytest.raises(ValueError, match="lacks"):
        results.write_metrics(tmp_path, "x", "smoke", {}, {"c": {"value": 1.0}})


def test_summary_rounds_and_keeps_claim_verdicts():
    claims = {"a": {"holds": True, "value": 1.0}, "b": {"holds": False, "value": 0.1}}
    s = results.summary(claims, digits=2, acc=[0.12345, 0.6789], r=np.float64(0.98765))
    assert s == {"acc": [0.12, 0.68], "r": 0.99, "claims": {"a": True, "b": False}}
    nested = results.summary(claims, digits=3, area={"input": 0.25420379391465814, "runs": [{"x": 1 / 3}]})
    assert nested["area"] == {"input": 0.254, "runs": [{"x": 0.333}]}


def test_claims_table_lists_every_claim_with_its_verdict():
    claims = {"up": results.claim(0.95, 0.9, note="r"), "down": results.claim(0.5, 0.9)}
    table = results.claims_table(claims).splitlines()
    assert len(table) == 4
    assert table[2] == "| `up` | yes (1/1) | 0.950 | >= 0.9 | r |"
    assert table[3].startswith("| `down` | **no** (0/1) | 0.500 | >= 0.9 |")


def test_claims_table_shows_tiny_values():
    table = results.claims_table({"exact": results.claim(6.5e-11, 1e-8, op="<=")})
    assert "| 6.5e-11 | <= 1e-08 |" in table


def test_numbers_that_are_not_finite_are_formatted_as_what_they_are():
    assert results.format_value(0.5) == "0.500" and results.format_value(2e-5) == "2e-05"
    assert [results.format_value(v) for v in (math.nan, math.inf, -math.inf, None)] == ["NaN", "inf", "-inf", "none"]
    assert results.format_threshold(0.9) == "0.9" and results.format_threshold(math.nan) == "NaN"


def test_a_threshold_that_is_not_a_finite_number_is_refused():
    for threshold in (math.nan, math.inf, None, "0.5"):
        with pytest.raises(ValueError, match="threshold"):
            results.claim(0.5, threshold)
    assert results.claim(0.5, np.float32(0.25))["holds"] and results.claim(1, 0, ">")["holds"]


def test_the_claims_table_keeps_html_in_names_and_notes_inert():
    rows = results.claims_table({f"c{PAYLOAD}": results.claim(1.0, 0.5, note=PAYLOAD)})
    assert "<svg" not in rows


def test_a_claim_threshold_that_is_not_finite_is_refused():
    with pytest.raises(ValueError, match="threshold"):
        results.claim(0.5, math.nan)


@pytest.mark.parametrize("op", [">=", ">", "<=", "<"])
def test_a_nan_value_or_threshold_never_meets_its_comparison(op):
    assert not results.compare(math.nan, 0.5, op) and not results.compare(0.5, math.nan, op)
    assert not results.compare(math.nan, math.nan, op)


def test_a_claims_table_in_a_notebook_shows_a_nan_value_as_nan():
    table = results.claims_table({"a": {"holds": True, "value": math.nan, "threshold": 0.5, "op": ">="}})
    row = next(line for line in table.splitlines() if line.startswith("| `a`"))
    assert "**no** (0/1)" in row and "| NaN |" in row and "not a finite number" in row, row


# ----------------------------------------------------------------------------- over several seeds

PARAMS = {"n_eval": 100, "device": "auto", "seed": 0}


def other_run(seed, values, notebook="tracing/t01_x", scale="default", params=None, threshold=0.9, op=">="):
    """The metrics.json of a run at ``seed`` whose claims take ``values`` (name -> value)."""
    return {"notebook": notebook, "scale": scale, "params": {**(params or PARAMS), "seed": seed},
            "claims": {name: results.claim(v, threshold, op) for name, v in values.items()}}


def test_diagnoses_are_one_of_four_kinds_with_one_line():
    c = results.claim(0.1, 0.5, kind="scale", reason=" too few images ")
    assert (c["kind"], c["reason"], c["holds"]) == ("scale", "too few images", False)
    for kind, reason in [("luck", "x"), ("scale", ""), ("scale", "two\nlines"), (None, "no kind"), ("paper", None)]:
        with pytest.raises(ValueError, match="diagnosis"):
            results.claim(0.1, 0.5, kind=kind, reason=reason)


def test_diagnoses_are_added_to_the_claims_they_name():
    claims = {"a": results.claim(0.1, 0.5), "b": results.claim(0.9, 0.5)}
    out = results.diagnose(claims, {"a": ("paper", "its Table 1 mixes two models")})
    assert out["a"]["kind"] == "paper" and "kind" not in out["b"] and "kind" not in claims["a"]
    with pytest.raises(ValueError, match=r"no claim named \['c'\]"):
        results.diagnose(claims, {"c": ("paper", "x")})
    with pytest.raises(ValueError, match="diagnosis kind"):
        results.diagnose(claims, {"a": ("bad luck", "x")})


def test_the_claims_table_shows_k_of_n_the_range_and_the_diagnosis_of_a_miss():
    mine = {"a": results.claim(0.95, 0.9, kind="scale", reason="small data"),
            "b": results.claim(0.95, 0.9, kind="paper", reason="never shown")}
    runs = [other_run(1, {"a": 0.5, "b": 0.99}), other_run(2, {"a": 0.92, "b": 0.91})]
    table = results.claims_table(seeds.combine("tracing/t01_x", "default", PARAMS, mine, runs))
    row_a, row_b = [line for line in table.splitlines() if line.startswith("| `")]
    assert "yes (2/3)" in row_a and "0.920 (0.500 to 0.950)" in row_a and "why it misses: scale (small data)" in row_a
    assert "yes (3/3)" in row_b and "why it misses" not in row_b  # a diagnosis shows only where a seed missed


# ----------------------------------------------------------------------------- committed results and users' files


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_a_path_into_figures_is_refused(repo_with_figures, monkeypatch, spelling):
    """The metrics and figures of a run never reach the committed results, however the path is spelled (the guard
    itself: ``layersim.core.writers.check_target``)."""
    path = spelled(repo_with_figures, monkeypatch, spelling)
    with pytest.raises(ValueError, match="committed results"):
        results.write_metrics(path, "p/n", "default", {}, {})
    import matplotlib.pyplot as plt

    fig = plt.figure()
    with pytest.raises(ValueError, match="committed results"):
        results.save_figure(fig, path, "f")
    plt.close(fig)
    assert json.loads((repo_with_figures / "figures" / "p" / "n" / "metrics.json").read_text()) == {"committed": True}
    assert sorted(p.name for p in (repo_with_figures / "figures" / "p" / "n").iterdir()) == ["metrics.json"]


def test_a_folder_of_the_users_files_is_never_cleared(repo_with_figures, tmp_path, monkeypatch):
    """A run cleared every ``*.png`` and ``metrics.json`` of its output folder, whoever's they were: pointed at a
    folder of one's own pictures (``LAYERSIM_OUT=~/Pictures``, ``-p out``), it deleted them. A folder layersim did
    not make (no marker file, outside the repository's ``figures/`` and ``runs/``) is refused unless empty."""
    mine = tmp_path / "Pictures" / "p" / "n"
    mine.mkdir(parents=True)
    (mine / "holiday.png").write_bytes(b"mine")
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "Pictures"))
    with pytest.raises(ValueError, match=r"already holds files that layersim did not write \(holiday.png\)"):
        results.output_dir("p", "n", "default")
    assert (mine / "holiday.png").read_bytes() == b"mine"
    fresh = tmp_path / "fresh"  # a new folder is made and marked, and the next run may clear it
    monkeypatch.setenv("LAYERSIM_OUT", str(fresh))
    out = results.output_dir("p", "n", "default")
    (out / "old.png").write_bytes(b"an earlier run's")
    assert results.output_dir("p", "n", "default") == out and not (out / "old.png").exists()
    assert (out / writers.MARKER).is_file()


def test_a_figure_that_fails_to_save_leaves_no_temporary(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()

    def full(*args, **kwargs):
        Path(args[0]).write_bytes(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fig, "savefig", full)
    with pytest.raises(writers.DiskFull, match="disk full at .*curve.png"):
        results.save_figure(fig, tmp_path, "curve")
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_output_dir_removes_an_earlier_runs_figures_and_checks_writability_first(repo_with_figures, monkeypatch):
    folder = repo_with_figures / "runs" / "smoke" / "p" / "n"
    folder.mkdir(parents=True)
    for name in ("old_figure.png", "metrics.json", "notes.txt"):
        (folder / name).write_text("earlier run")
    assert results.output_dir("p", "n", "smoke") == folder
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # only what runs write is removed
    (repo_with_figures / "blocked").write_text("a file where the output root should be")
    monkeypatch.setenv("LAYERSIM_OUT", str(repo_with_figures / "blocked"))
    with pytest.raises(ValueError, match="cannot write to .*blocked/p/n"):
        results.output_dir("p", "n", "smoke")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_found_before_any_work(repo_with_figures, monkeypatch):
    folder = repo_with_figures / "runs" / "smoke" / "p" / "n"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="cannot write to"):
            results.output_dir("p", "n", "smoke")
    finally:
        folder.chmod(0o755)


def test_a_relative_layersim_out_is_taken_from_the_working_directory(repo_with_figures, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    assert results.run_folder("p", "n", "smoke") == here / "mine" / "p" / "n"
