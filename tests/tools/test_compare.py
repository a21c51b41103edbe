"""Tests of layersim.tools.compare: what counts as the same result across machines, and the compare command.

NaN and infinite numbers: a NaN or infinite number where the reference has a finite one is a difference, named with
its key; NaN against NaN and an infinity against itself are the same; a claim whose value is NaN never holds,
whatever its recorded ``holds`` says; the ``--json`` output is strict JSON.
"""

import copy
import json
import math
from pathlib import Path

import pytest

from layersim.tools import compare
from layersim.tools.compare import Tolerance
from builders import one_line_error, run_metrics, write_metrics_json


def metrics(**over):
    """A small metrics.json payload with two claims, a per-layer list, a note and run facts."""
    m = {
        "notebook": "toy/t01", "scale": "smoke", "params": {"depth": 4, "seed": 0},
        "claims": {
            "rises": {"holds": True, "value": 0.80, "threshold": 0.5, "op": ">=", "note": "7 of 8 steps, rho 0.80"},
            "close": {"holds": False, "value": 0.101, "threshold": 0.1, "op": "<="},
        },
        "accuracy": [0.25, 0.5, 0.75, 1.0],
        "perplexity": 14449.5,
        "models": {"standard": {"train_seconds": 12.5, "weights_sha256": "ab12", "from_cache": False, "epochs": 3}},
        "png_files": ["accuracy.png", "cka.png"],
    }
    m.update(over)
    return m


def test_flatten_names_every_leaf_and_leaves_out_run_facts():
    flat = compare.flatten(metrics())
    assert flat["accuracy[2]"] == 0.75 and flat["claims.rises.value"] == 0.80
    assert flat["models.standard.epochs"] == 3
    assert not any("seconds" in k or "sha256" in k or "from_cache" in k for k in flat)
    assert compare.flatten({"a": [], "b": {"c": []}}) == {"a": [], "b.c": []}


def test_without_run_facts_keeps_the_results():
    m = compare.without_run_facts(metrics())
    assert m["models"] == {"standard": {"epochs": 3}} and m["accuracy"] == metrics()["accuracy"]


def test_relative_difference_is_symmetric_and_bounded():
    assert compare.relative_difference(2.0, 2.0) == 0 and compare.relative_difference(0.0, 0.0) == 0
    assert compare.relative_difference(1.0, 1.1) == pytest.approx(0.1 / 1.1)
    assert compare.relative_difference(1.1, 1.0) == compare.relative_difference(1.0, 1.1)
    assert compare.relative_difference(-1.0, 1.0) == 2.0


def test_numbers_that_are_not_finite_are_the_same_only_as_themselves():
    nan, inf = math.nan, math.inf
    assert compare.same_number(nan, nan) and compare.same_number(inf, inf) and compare.same_number(-inf, -inf)
    assert not compare.same_number(nan, 1.0) and not compare.same_number(inf, -inf)
    assert compare.relative_difference(nan, nan) == compare.relative_difference(inf, inf) == 0
    assert compare.relative_difference(nan, 0.5) == compare.relative_difference(0.5, inf) == math.inf
    tol = Tolerance(rtol=0.5, atol=1.0)
    assert tol.allows(nan, nan) and tol.allows(inf, inf)
    assert not any(tol.allows(a, b) for a, b in [(0.5, nan), (nan, 0.5), (inf, 5.0), (5.0, inf), (inf, -inf)])
    assert compare.strict_json({"a": [nan, (inf, -inf)], "b": 1.5}) == {"a": ["NaN", ["Infinity", "-Infinity"]],
                                                                       "b": 1.5}


def test_a_nan_setting_is_the_same_as_itself():
    c = compare.compare_metrics(metrics(params={"depth": math.nan, "seed": 0}),
                                metrics(params={"depth": math.nan, "seed": 0}), Tolerance())
    assert c.ok(), c.problems()


@pytest.mark.parametrize("rtol, atol", [(-1e-3, 0), (0, math.nan), (math.inf, 0), ("0.1", 0)])
def test_a_tolerance_must_be_finite_and_not_negative(rtol, atol):
    with pytest.raises(ValueError, match="tolerance"):
        Tolerance(rtol, atol)


def test_tolerance_is_numpys_isclose():
    import numpy as np

    tol = Tolerance(rtol=1e-3, atol=1e-4)
    for ref, new in [(14449.5, 14449.6), (14449.5, 14470.0), (0.0, 5e-5), (0.0, 2e-4), (0.315, 0.3153), (-1.0, -1.0011)]:
        assert tol.allows(ref, new) == bool(np.isclose(new, ref, rtol=1e-3, atol=1e-4)), (ref, new)


def test_the_same_run_agrees_and_run_facts_are_ignored():
    other = metrics(models={"standard": {"train_seconds": 99.0, "weights_sha256": "ff00", "from_cache": True,
                                         "epochs": 3}})
    c = compare.compare_metrics(metrics(), other, Tolerance(0, 0))
    assert c.ok() and not c.problems() and c.all_rel == 0 and c.n_claims == 2


def test_kernel_noise_within_the_tolerance_passes_and_is_measured():
    new = metrics(accuracy=[0.25, 0.505, 0.75, 1.0], perplexity=14449.6)
    new["claims"]["rises"]["value"] = 0.803
    new["claims"]["rises"]["note"] = "7 of 8 steps, rho 0.803"  # the words agree, its numbers are measured
    c = compare.compare_metrics(metrics(), new, Tolerance(rtol=1e-4, atol=0.01))
    assert c.ok(), c.problems()
    assert c.claims_key == "claims.rises.value" and c.claims_rel == pytest.approx(0.003 / 0.803)
    assert c.all_key == "accuracy[1]" and c.all_rel == pytest.approx(0.005 / 0.505)


def test_a_claim_value_changed_beyond_the_tolerance_fails():
    new = copy.deepcopy(metrics())
    new["claims"]["rises"]["value"] = 0.9  # verdict unchanged, value off by 0.1
    c = compare.compare_metrics(metrics(), new, Tolerance(rtol=0, atol=0.01))
    assert not c.ok() and c.outside == ["claims.rises.value: 0.8 -> 0.9 (differs by 0.1, allowed 0.01)"]
    assert compare.compare_metrics(metrics(), new).ok(), "without a tolerance numbers are measured, not failed"


def test_a_flipped_verdict_fails_unless_its_value_is_within_the_tolerance_of_the_threshold():
    far = copy.deepcopy(metrics())
    far["claims"]["rises"].update(holds=False, value=0.45)
    loose = compare.compare_metrics(metrics(), far, Tolerance(rtol=0, atol=0.5))  # 0.45 is within 0.5 of 0.5
    assert loose.flipped == loose.fragile == ["rises"] and loose.ok()
    tight = compare.compare_metrics(metrics(), far, Tolerance(rtol=0, atol=0.04))
    assert tight.flipped == ["rises"] and not tight.fragile and not tight.ok()
    assert "verdict flipped: rises" in tight.problems()

    near = copy.deepcopy(metrics())
    near["claims"]["close"].update(holds=True, value=0.0995)  # 0.101 vs threshold 0.1: decided by rounding
    c = compare.compare_metrics(metrics(), near, Tolerance(rtol=0, atol=0.002))
    assert c.flipped == ["close"] and c.fragile == ["close"] and c.ok()
    assert not compare.compare_metrics(metrics(), near).ok(), "without a tolerance every flip counts"


def test_structure_must_match_exactly():
    cases = {
        "a layer fewer": (metrics(accuracy=[0.25, 0.5, 0.75]), "accuracy[3]: only in the reference"),
        "a figure missing": (metrics(png_files=["accuracy.png"]), "png_files[1]: only in the reference"),
        "a new key": (metrics(extra=1.0), "extra: only in this run"),
        "a parameter changed": (metrics(params={"depth": 6, "seed": 0}), "params.depth: 4 -> 6"),
        "a number became None": (metrics(perplexity=None), "perplexity: 14449.5 -> None"),
        "a note's words changed": (None, "claims.rises.note"),
    }
    for name, (new, expected) in cases.items():
        if new is None:
            new = copy.deepcopy(metrics())
            new["claims"]["rises"]["note"] = "8 of 8 layers, rho 0.80"
        c = compare.compare_metrics(metrics(), new, Tolerance(rtol=1, atol=1))
        assert not c.ok(), name
        assert any(p.startswith(expected) for p in c.problems()), (name, c.problems())


def test_mask_numbers_keeps_words_and_identifiers():
    assert compare.mask_numbers("max error 6.5e-11 (3 of 4), -0.25") == "max error # (# of #), #"
    assert compare.mask_numbers("a02 MiniLM-L6 blocks 22-29") == "a02 MiniLM-L6 blocks #-#"


def write_run(root, layout="folder", **over):
    """Write metrics() (with overrides) for toy/t01 as a run folder or as a smoke reference file."""
    m = metrics(**over)
    if layout == "folder":
        folder = root / "toy" / "t01"
        folder.mkdir(parents=True)
        figures = m.pop("png_files")
        (folder / "metrics.json").write_text(json.dumps(m))
        for name in figures:
            (folder / name).write_bytes(b"png")
    else:
        (root / "toy").mkdir(parents=True)
        (root / "toy" / "t01.metrics.json").write_text(json.dumps(m))


def test_load_run_reads_both_layouts_with_their_figures(tmp_path):
    write_run(tmp_path / "a", "folder")
    write_run(tmp_path / "b", "reference")
    a, b = compare.load_run(tmp_path / "a"), compare.load_run(tmp_path / "b")
    assert set(a) == set(b) == {"toy/t01"}
    assert a["toy/t01"]["png_files"] == ["accuracy.png", "cka.png"] == b["toy/t01"]["png_files"]
    assert compare.compare_runs(a, b, Tolerance())[0].ok()


def test_load_run_reads_figures_from_a_commit():
    head = compare.load_run("git:HEAD")
    assert "tracing/t01_cos_vs_cka" in head and "report/layer_report" in head
    assert head["tracing/t01_cos_vs_cka"]["png_files"], "the committed figures are listed"
    assert all("claims" in m for m in head.values())


def test_record_ignores_what_an_earlier_run_left(tmp_path):
    import os
    import time

    write_run(tmp_path, "folder")
    folder = tmp_path / "toy" / "t01"
    old = time.time() - 3600
    os.utime(folder / "cka.png", (old, old))
    assert compare.record(folder, since=time.time() - 60)["png_files"] == ["accuracy.png"]
    os.utime(folder / "metrics.json", (old, old))
    with pytest.raises(ValueError, match="wrote no metrics.json"):
        compare.record(folder, since=time.time() - 60)


@pytest.mark.parametrize("source, message", [
    ("no/such/folder", "no such folder"), ("git:no-such-revision", "not a commit"), ("empty", "holds no metrics"),
    ("broken", "not valid JSON")])
def test_load_run_names_what_is_wrong(tmp_path, source, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken" / "toy" / "t01").mkdir(parents=True)
    (tmp_path / "broken" / "toy" / "t01" / "metrics.json").write_text("{")
    with pytest.raises(ValueError, match=message):
        compare.load_run(source if source.startswith("git:") else tmp_path / source)


def test_spread_measures_what_a_tolerance_must_cover():
    runs = [metrics(), metrics(accuracy=[0.25, 0.52, 0.75, 1.0]), metrics(perplexity=14450.5)]
    runs[2]["claims"]["close"]["holds"] = True
    s = compare.spread(runs)
    assert s["atol"] == pytest.approx(0.02) and s["worst_abs"] == "accuracy[1]"
    assert s["rtol"] == pytest.approx(1 / 14449.5) and s["worst_rel"] == "perplexity"
    assert s["flipped"] == ["close"]
    with pytest.raises(ValueError):
        compare.spread(runs[:1])


def test_the_command_prints_a_table_and_exits_by_the_verdicts(tmp_path, capsys):
    write_run(tmp_path / "ref", "folder")
    write_run(tmp_path / "same", "folder", perplexity=14449.6)
    flipped = metrics()
    flipped["claims"]["rises"].update(holds=False, value=0.4)
    write_run(tmp_path / "flip", "folder", claims=flipped["claims"])

    assert compare.main([str(tmp_path / "same"), str(tmp_path / "ref")]) == 0
    out = capsys.readouterr().out
    assert "| toy/t01 | same (2) | 0 |" in out and "`perplexity`" in out and "1 of 1 notebooks agree" in out
    assert compare.main([str(tmp_path / "same"), str(tmp_path / "ref"), "--rtol", "1e-6"]) == 1
    assert "outside the tolerance: perplexity" in capsys.readouterr().out
    assert compare.main([str(tmp_path / "flip"), str(tmp_path / "ref")]) == 1
    assert "flipped: `rises`" in capsys.readouterr().out
    assert compare.main([str(tmp_path / "flip"), str(tmp_path / "ref"), "--nb", "t02,t03"]) == 2, "nothing selected"
    capsys.readouterr()
    assert compare.main([str(tmp_path / "nothing"), str(tmp_path / "ref")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert compare.main([str(tmp_path / "same"), str(tmp_path / "ref"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["ok"] is True


def test_the_committed_figures_agree_with_themselves():
    assert compare.main(["git:HEAD", "git:HEAD", "--rtol", "0", "--atol", "0"]) == 0


def test_groups_are_claims_and_top_level_keys():
    assert compare.group_of("claims.rises.value") == "claims.rises"
    assert compare.group_of("claims.rises.per_block[2]") == "claims.rises"
    assert compare.group_of("curves.plain[3]") == "curves" and compare.group_of("accuracy[1]") == "accuracy"
    assert compare.group_of("perplexity") == "perplexity"


def test_tolerances_per_group_leave_the_other_groups_tight():
    tol = compare.Tolerances.from_json({"rtol": 0, "atol": 1e-5, "groups": {"accuracy": {"rtol": 0, "atol": 0.05}}})
    noisy = metrics(accuracy=[0.25, 0.54, 0.75, 1.0])
    assert compare.compare_metrics(metrics(), noisy, tol).ok()
    also_claim = copy.deepcopy(noisy)
    also_claim["claims"]["rises"]["value"] = 0.81
    c = compare.compare_metrics(metrics(), also_claim, tol)
    assert [o.split(":")[0] for o in c.outside] == ["claims.rises.value"]


def test_spread_is_also_measured_per_group():
    runs = [metrics(), metrics(accuracy=[0.25, 0.52, 0.75, 1.0], params={"depth": 9, "seed": 0})]
    runs[1]["claims"]["rises"]["value"] = 0.79
    g = compare.spread(runs)["groups"]
    assert g["accuracy"]["atol"] == pytest.approx(0.02) and g["claims.rises"]["atol"] == pytest.approx(0.01)
    assert g["perplexity"] == {"atol": 0.0, "rtol": 0.0} and "params" not in g


def test_the_share_of_the_tolerance_used_is_reported():
    c = compare.compare_metrics(metrics(), metrics(perplexity=14449.5 + 0.5), Tolerance(rtol=1e-4, atol=0))
    assert c.tolerance_used == pytest.approx(0.5 / 1.44495) and c.ok()
    assert compare.compare_metrics(metrics(), metrics(), Tolerance()).tolerance_used == 0


# ----------------------------------------------------------------------------- numbers that are not finite


NAN, INF = math.nan, math.inf


def _compare(tmp_path: Path, ref: dict, new: dict, *options: str) -> int:
    """``python -m layersim compare RUN REF`` on two one-notebook runs: its exit status."""
    write_metrics_json(tmp_path / "ref", "toy/t01", ref)
    write_metrics_json(tmp_path / "run", "toy/t01", new)
    return compare.main([str(tmp_path / "run"), str(tmp_path / "ref"), *options])


@pytest.mark.parametrize("options", [(), ("--rtol", "0.01"), ("--atol", "1")])
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_compare_a_claim_value_that_is_not_finite_is_a_difference(tmp_path, capsys, bad, options):
    """A run whose claim value is NaN (its recorded ``holds`` still true) was reported the same, exit 0."""
    status = _compare(tmp_path, run_metrics(), run_metrics(value=bad), *options)
    out = capsys.readouterr().out
    assert status == 1, out
    assert "claims.rises.value" in out and repr(bad) in out and "0 of 1 notebooks agree" in out


@pytest.mark.parametrize("bad", [NAN, INF])
def test_compare_a_number_that_is_not_finite_is_a_difference_within_any_tolerance(tmp_path, capsys, bad):
    status = _compare(tmp_path, run_metrics(), run_metrics(curve=[0.25, bad, 1.0]), "--rtol", "1")
    out = capsys.readouterr().out
    assert status == 1 and "curve[1]" in out and "not a finite number" in out, out


def test_compare_a_finite_number_where_the_reference_has_nan_is_a_difference(tmp_path, capsys):
    status = _compare(tmp_path, run_metrics(curve=[0.25, NAN, 1.0]), run_metrics(), "--atol", "1")
    assert status == 1 and "curve[1]" in capsys.readouterr().out


@pytest.mark.parametrize("same", [NAN, INF, -INF])
def test_compare_nan_against_nan_and_an_infinity_against_itself_are_the_same(tmp_path, capsys, same):
    ref = run_metrics(value=same, holds=False, curve=[0.25, same, 1.0])
    status = _compare(tmp_path, ref, ref, "--rtol", "0", "--atol", "0")
    out = capsys.readouterr().out
    assert status == 0 and "1 of 1 notebooks agree" in out, out


def test_compare_a_nan_claim_value_does_not_hold_whatever_holds_says():
    ref, new = run_metrics(value=0.8, holds=True), run_metrics(value=NAN, holds=True)
    c = compare.compare_metrics(ref, new)
    assert c.flipped == ["rises"] and not c.ok()
    assert "verdict flipped: rises" in c.problems()


def test_compare_an_infinite_reference_does_not_allow_every_finite_number():
    """``|new - inf| <= atol + rtol * inf`` is true for any finite ``new``: the tolerance allowed 5 against inf."""
    ref, new = run_metrics(curve=[0.25, INF, 1.0]), run_metrics(curve=[0.25, 5.0, 1.0])
    c = compare.compare_metrics(ref, new, compare.Tolerance(rtol=0.1))
    assert not c.ok() and any("curve[1]" in p for p in c.problems()), c.problems()


def test_compare_json_output_is_strict_json(tmp_path, capsys):
    """The ``--json`` output held ``NaN``/``Infinity``, which strict JSON readers refuse."""
    status = _compare(tmp_path, run_metrics(), run_metrics(value=NAN), "--json")
    out = capsys.readouterr().out
    assert status == 1
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON output"))
    assert data[0]["ok"] is False


def test_spread_refuses_a_run_with_nan_where_the_others_have_numbers():
    """``max(0.0, nan)`` is 0.0: a NaN run was measured as one that moved nothing."""
    with pytest.raises(ValueError, match=r"curve\[1\].*nan"):
        compare.spread([run_metrics(), run_metrics(curve=[0.25, NAN, 1.0])])
    same = compare.spread([run_metrics(curve=[0.25, NAN, INF]), run_metrics(curve=[0.25, NAN, INF])])
    assert same["atol"] == same["rtol"] == 0.0


# ---------------------------------------------------------------------- the command: a run that does not exist


@pytest.mark.parametrize("argv, words", [
    (["compare", "/no/such/run"], ("/no/such/run",)),
    (["compare", "figures", "git:no-such-revision"], ("no-such-revision",)),
])
def test_compare_names_a_missing_run(argv, words, capsys):
    """A run or revision that does not exist is named in one line (entered through ``python -m layersim``)."""
    from layersim.__main__ import main

    assert main(argv) == 2
    one_line_error(capsys.readouterr().err, *words)
