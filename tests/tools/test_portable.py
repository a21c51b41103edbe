"""Tests of layersim.tools.portable: tolerances from measured spreads, and checking runs made under other kernels.

``--measure`` rewrites the committed tolerances only when every run succeeded: a failed run, a run with a layer
fewer or a NaN claim value is one ``error:`` line and the file is left as it was. A selection that names no notebook
is refused in one line.
"""

import json
import math
from pathlib import Path

import pytest

from layersim.tools import compare, portable, smoke_check
from builders import one_line_error, run_metrics, write_metrics_json


@pytest.mark.parametrize("x, up", [(0.0123, 0.02), (0.02, 0.02), (3e-7, 3e-7), (9.1e-3, 0.01), (0.0, 0.0), (1.5, 2.0)])
def test_round_up_to_one_significant_digit(x, up):
    assert portable.round_up(x) == pytest.approx(up)


def test_a_tolerance_covers_safety_times_the_spread_and_the_reported_one():
    assert portable.tolerance_from({"atol": 0.004, "rtol": 0.0}) == {"atol": 0.02, "rtol": portable.FLOOR}
    assert portable.tolerance_from({"atol": 0.004}, {"atol": 0.017}) == {"atol": 0.07, "rtol": portable.FLOOR}


def test_notebook_entry_defaults_to_the_median_group_and_lists_the_groups_beyond_it():
    groups = {"acc": {"atol": 0.004, "rtol": 0.0}, "cos": {"atol": 1e-7, "rtol": 0.0},
              "chaotic": {"atol": 1.0, "rtol": 0.0}, "still": {"atol": 0.0, "rtol": 0.0}}
    spread = {"atol": 1.0, "worst_abs": "chaotic[1]", "rtol": 0.0, "worst_rel": "", "flipped": [], "groups": groups}
    entry = portable.notebook_entry(spread, ["reference", "default-1t"], {"claims.c": {"atol": 0.01}})
    assert (entry["atol"], entry["rtol"]) == (0.02, portable.FLOOR), "4 x the median moved group (acc), rounded up"
    assert entry["groups"] == {"chaotic": {"rtol": portable.FLOOR, "atol": 4.0},
                               "claims.c": {"rtol": portable.FLOOR, "atol": 0.04}}
    assert "still" not in entry["measured"]["groups"] and entry["reported"] == {"claims.c": {"atol": 0.01}}
    tol = compare.Tolerances.from_json(entry)
    assert tol.for_key("still[0]").atol == 0.02 and tol.for_key("chaotic[3]").atol == 4.0
    quiet = portable.notebook_entry({**spread, "groups": {"still": {"atol": 0.0, "rtol": 0.0}}}, ["reference"])
    assert (quiet["atol"], quiet["rtol"], quiet["groups"]) == (portable.FLOOR, portable.FLOOR, {})


def test_fresh_cache_shares_data_but_not_checkpoints(tmp_path, tmp_cache):
    cache = portable.fresh_cache(tmp_path / "c")
    assert sorted(p.name for p in cache.iterdir()) == sorted(portable.DATA_CACHES)
    assert all((cache / n).is_symlink() and (cache / n).resolve() == (tmp_cache / n).resolve()
               for n in portable.DATA_CACHES)
    portable.fresh_cache(tmp_path / "c")  # again: nothing to do


def _reference_tree(tmp_path):
    refs = tmp_path / "refs"
    (refs / "toy").mkdir(parents=True)
    (refs / "toy" / "t01.ipynb").write_text("{}")
    ref = {"notebook": "toy/t01", "scale": "smoke", "params": {}, "png_files": [],
           "claims": {"c": {"holds": True, "value": 0.5, "threshold": 0.3, "op": ">="}}, "acc": [0.5, 0.25]}
    (refs / "toy" / "t01.metrics.json").write_text(json.dumps(ref))
    (refs / "tolerances.json").write_text(json.dumps({"default": {"rtol": 1e-5, "atol": 1e-5}, "notebooks": {}}))


def _run(tmp_path, name, **over):
    """A smoke run's output folder for toy/t01: the reference's metrics with ``over`` changed."""
    out = tmp_path / name
    (out / "toy" / "t01").mkdir(parents=True)
    if not (tmp_path / "refs").exists():
        _reference_tree(tmp_path)
    m = json.loads((tmp_path / "refs" / "toy" / "t01.metrics.json").read_text())
    m.pop("png_files")
    m.update(over)
    (out / "toy" / "t01" / "metrics.json").write_text(json.dumps(m))
    return out


def test_measure_and_check_runs(tmp_path):
    a = _run(tmp_path, "a", acc=[0.51, 0.25])
    b = _run(tmp_path, "b", acc=[0.5, 0.2502])
    refs = tmp_path / "refs"
    before = portable.check_run(a, refs)
    assert not before["toy/t01"].ok(), "the default tolerance is the floor"
    data = portable.measure({"default-1t": a, "by-hand": b}, refs)
    entry = data["notebooks"]["toy/t01"]
    assert entry["measured"]["runs"] == ["reference", "default-1t", "by-hand"]
    assert entry["measured"]["groups"]["acc"]["atol"] == pytest.approx(0.01)
    assert entry["atol"] == pytest.approx(0.04), "the one group that moved sets the notebook's tolerance"
    assert data["settings"]["default-1t"] == portable.SETTINGS["default-1t"]
    (refs / "tolerances.json").write_text(json.dumps(data))
    assert portable.check_run(a, refs)["toy/t01"].ok() and portable.check_run(b, refs)["toy/t01"].ok()
    assert "ok" in portable.report({"default-1t": portable.check_run(a, refs)})
    broken = _run(tmp_path, "broken", acc=[0.6, 0.25])
    assert not portable.check_run(broken, refs)["toy/t01"].ok()
    (tmp_path / "empty").mkdir()
    assert portable.check_run(tmp_path / "empty", refs) == {}
    assert portable.check_run(tmp_path / "empty", refs, ["toy/t01"]) == {"toy/t01": "did not run (see the log)"}


def test_a_partial_measurement_keeps_the_earlier_settings_and_date(tmp_path):
    a = _run(tmp_path, "a", acc=[0.51, 0.25])
    earlier = {"measured_on": "2026-01-01, another CPU", "settings": {"old-2t": {"OMP_NUM_THREADS": "2"}},
               "notebooks": {"toy/t00": {"rtol": 0.1, "atol": 0.1}}}
    data = portable.measure({"default-1t": a}, tmp_path / "refs", earlier)
    assert data["notebooks"]["toy/t00"] == {"rtol": 0.1, "atol": 0.1}  # not run: kept
    assert set(data["settings"]) == {"old-2t", "default-1t"}
    assert data["measured_on"].startswith("2026-01-01, another CPU; ") and data["measured_on"].endswith("(toy/t01)")


def test_tolerances_are_measured_only_from_runs_that_all_succeeded(tmp_path):
    refs = tmp_path / "refs"
    good = portable.check_run(_run(tmp_path, "good", acc=[0.51, 0.25]), refs, tolerances=False)
    assert good["toy/t01"].outside == [] and portable.why_not_measurable({"default-1t": good}) == ""
    assert "no run to measure from" in portable.why_not_measurable({})
    assert "no run to measure from" in portable.why_not_measurable({"default-1t": {}})
    assert portable.why_not_measurable({"default-1t": good, "avx2-3t": {}}) == (
        "the run avx2-3t holds none of the smoke notebooks")
    failed = {"toy/t01": "did not run (see the log)"}
    assert portable.why_not_measurable({"default-1t": good, "avx2-3t": failed}) == (
        "the run avx2-3t of toy/t01 did not succeed: did not run (see the log)")
    short = portable.check_run(_run(tmp_path, "short", acc=[0.5]), refs, tolerances=False)
    assert "acc[1]: only in the reference" in portable.why_not_measurable({"default-1t": short})
    nan = portable.check_run(_run(tmp_path, "nan", acc=[float("nan"), 0.25]), refs, tolerances=False)
    assert "not a finite number: acc[0]" in portable.why_not_measurable({"default-1t": nan})


# ---------------------------------------------------------------------- --measure: only from runs that all succeeded


NAN = math.nan


@pytest.fixture
def portable_repo(tmp_path, monkeypatch):
    """A repository with one notebook (``toy/t01``), its smoke reference and a committed ``tolerances.json``;
    running a kernel setting is replaced by what each test says the run left (no notebook is executed)."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "notebooks" / "toy").mkdir(parents=True)
    (root / "notebooks" / "toy" / "t01.ipynb").write_text("{}")
    refs = root / "tests" / "notebooks"
    (refs / "toy").mkdir(parents=True)
    (refs / "toy" / "t01.ipynb").write_text("{}")
    (refs / "toy" / "t01.metrics.json").write_text(json.dumps({**run_metrics(), "png_files": []}))
    (refs / smoke_check.TOLERANCES).write_text(json.dumps(
        {"about": "as committed", "default": {"rtol": 1e-5, "atol": 1e-5}, "notebooks": {}}, indent=1) + "\n")
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    return root


def _settings_leave(monkeypatch, outputs: dict[str, dict | None]) -> None:
    """Each kernel setting's run leaves ``outputs[name]`` as toy/t01's metrics.json (None: the run failed)."""
    def run_setting(name, env, notebooks, work):
        out = work / name / "out"
        out.mkdir(parents=True, exist_ok=True)
        if outputs.get(name) is not None:
            write_metrics_json(out, "toy/t01", outputs[name])
        return out

    monkeypatch.setattr(portable, "run_setting", run_setting)


def _tolerances(root: Path) -> str:
    return (root / "tests" / "notebooks" / smoke_check.TOLERANCES).read_text()


@pytest.mark.parametrize("outputs, settings, words", [
    ({}, "default-1t,avx2-3t", ["no run"]),
    ({"default-1t": run_metrics(curve=[0.25, 0.51, 1.0])}, "default-1t,avx2-3t", ["avx2-3t", "toy/t01", "did not run"]),
    ({"default-1t": run_metrics(curve=[0.25, 0.51])}, "default-1t", ["default-1t", "toy/t01", "curve[2]"]),
    ({"default-1t": run_metrics(value=NAN)}, "default-1t", ["default-1t", "toy/t01", "claims.rises.value"]),
], ids=["every run failed", "one run of two failed", "a layer fewer", "a NaN claim value"])
def test_portable_measure_writes_nothing_unless_every_run_succeeded(portable_repo, monkeypatch, capsys, outputs,
                                                                    settings, words):
    """``--measure`` rewrote the committed tolerances from runs that failed (or from none)."""
    before = _tolerances(portable_repo)
    _settings_leave(monkeypatch, outputs)
    status = portable.main(["--nb", "t01", "--settings", settings, "--measure", "--work", str(portable_repo / "w")])
    assert status != 0
    one_line_error(capsys.readouterr().err, "not measured", *words)
    assert _tolerances(portable_repo) == before


def test_portable_measure_from_nothing_reused_writes_nothing(portable_repo, capsys):
    before = _tolerances(portable_repo)
    status = portable.main(["--nb", "t01", "--reuse", "--measure", "--work", str(portable_repo / "nothing")])
    assert status != 0
    one_line_error(capsys.readouterr().err, "not measured")
    assert _tolerances(portable_repo) == before


@pytest.mark.parametrize("committed", [True, False], ids=["over the committed file", "the first one"])
def test_portable_measure_writes_when_every_run_succeeded(portable_repo, monkeypatch, capsys, committed):
    """Runs that moved a number (and one that moved nothing) are what tolerances are measured from."""
    if not committed:
        (portable_repo / "tests" / "notebooks" / smoke_check.TOLERANCES).unlink()
    _settings_leave(monkeypatch, {"default-1t": run_metrics(curve=[0.25, 0.51, 1.0]), "avx2-3t": run_metrics()})
    status = portable.main(["--nb", "t01", "--settings", "default-1t,avx2-3t", "--measure",
                            "--work", str(portable_repo / "w")])
    out, err = capsys.readouterr()
    assert status == 0 and "error:" not in err and "2 of 2 smoke runs agree" in out, out + err
    written = json.loads(_tolerances(portable_repo))
    assert written["notebooks"]["toy/t01"]["measured"]["runs"] == ["reference", "default-1t", "avx2-3t"]


@pytest.mark.parametrize("selection", [",", " , ", ",,"])
def test_a_selection_that_names_no_notebook_is_not_every_notebook(portable_repo, capsys, selection):
    """``--nb ","`` (a typo, an empty shell variable joined with commas) selected every notebook: with
    --update-committed, a 50-minute job instead of a one-line refusal."""
    with pytest.raises(SystemExit) as exc:
        portable.main(["--nb", selection])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "names no notebook")
    assert not (portable_repo / "runs").exists()
