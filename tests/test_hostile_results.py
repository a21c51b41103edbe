"""The tools that read a run's results under hostile and careless input: NaN and infinite numbers, failed runs.

Every case asserts what a user must see: a NaN or infinite number where the reference has a finite one is a
difference, named with its key, and a claim whose value is NaN never holds, whatever its recorded ``holds``
says; a command line that cannot do its work prints one line that names the problem (no traceback) and exits
non-zero, and writes nothing. The command lines of the notebooks' runner, the report and ``compare``'s
paths have their own file (``test_hostile_inputs.py``); CONTRIBUTING says how to add a case.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from builders import one_line_error
from layersim.notebook import results, seeds
from layersim.tools import claims, compare, portable, smoke_check

NAN, INF = math.nan, math.inf


# ----------------------------------------------------------------------------- helpers




def _metrics(value: float = 0.8, holds: bool = True, curve: list | None = None) -> dict:
    """A run's ``metrics.json`` with one claim (``rises``: value >= 0.5) and one curve."""
    return {"notebook": "toy/t01", "scale": "smoke", "params": {"depth": 3},
            "claims": {"rises": {"holds": holds, "value": value, "threshold": 0.5, "op": ">="}},
            "curve": [0.25, 0.5, 1.0] if curve is None else curve}


def _write(folder: Path, key: str, payload: dict) -> Path:
    """``folder/<key>/metrics.json`` as ``json.dumps`` writes it (NaN and infinities as ``NaN``, ``Infinity``)."""
    path = folder / key / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def _compare(tmp_path: Path, ref: dict, new: dict, *options: str) -> int:
    """``python -m layersim compare RUN REF`` on two one-notebook runs: its exit status."""
    _write(tmp_path / "ref", "toy/t01", ref)
    _write(tmp_path / "run", "toy/t01", new)
    return compare.main([str(tmp_path / "run"), str(tmp_path / "ref"), *options])


# ----------------------------------------------------------------------------- compare


@pytest.mark.parametrize("options", [(), ("--rtol", "0.01"), ("--atol", "1")])
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_compare_a_claim_value_that_is_not_finite_is_a_difference(tmp_path, capsys, bad, options):
    """A run whose claim value is NaN (its recorded ``holds`` still true) was reported the same, exit 0."""
    status = _compare(tmp_path, _metrics(), _metrics(value=bad), *options)
    out = capsys.readouterr().out
    assert status == 1, out
    assert "claims.rises.value" in out and repr(bad) in out and "0 of 1 notebooks agree" in out


@pytest.mark.parametrize("bad", [NAN, INF])
def test_compare_a_number_that_is_not_finite_is_a_difference_within_any_tolerance(tmp_path, capsys, bad):
    status = _compare(tmp_path, _metrics(), _metrics(curve=[0.25, bad, 1.0]), "--rtol", "1")
    out = capsys.readouterr().out
    assert status == 1 and "curve[1]" in out and "not a finite number" in out, out


def test_compare_a_finite_number_where_the_reference_has_nan_is_a_difference(tmp_path, capsys):
    status = _compare(tmp_path, _metrics(curve=[0.25, NAN, 1.0]), _metrics(), "--atol", "1")
    assert status == 1 and "curve[1]" in capsys.readouterr().out


@pytest.mark.parametrize("same", [NAN, INF, -INF])
def test_compare_nan_against_nan_and_an_infinity_against_itself_are_the_same(tmp_path, capsys, same):
    ref = _metrics(value=same, holds=False, curve=[0.25, same, 1.0])
    status = _compare(tmp_path, ref, ref, "--rtol", "0", "--atol", "0")
    out = capsys.readouterr().out
    assert status == 0 and "1 of 1 notebooks agree" in out, out


def test_compare_a_nan_claim_value_does_not_hold_whatever_holds_says():
    ref, new = _metrics(value=0.8, holds=True), _metrics(value=NAN, holds=True)
    c = compare.compare_metrics(ref, new)
    assert c.flipped == ["rises"] and not c.ok()
    assert "verdict flipped: rises" in c.problems()


def test_compare_an_infinite_reference_does_not_allow_every_finite_number():
    """``|new - inf| <= atol + rtol * inf`` is true for any finite ``new``: the tolerance allowed 5 against inf."""
    ref, new = _metrics(curve=[0.25, INF, 1.0]), _metrics(curve=[0.25, 5.0, 1.0])
    c = compare.compare_metrics(ref, new, compare.Tolerance(rtol=0.1))
    assert not c.ok() and any("curve[1]" in p for p in c.problems()), c.problems()


def test_compare_json_output_is_strict_json(tmp_path, capsys):
    """The ``--json`` output held ``NaN``/``Infinity``, which strict JSON readers refuse."""
    status = _compare(tmp_path, _metrics(), _metrics(value=NAN), "--json")
    out = capsys.readouterr().out
    assert status == 1
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON output"))
    assert data[0]["ok"] is False


def test_spread_refuses_a_run_with_nan_where_the_others_have_numbers():
    """``max(0.0, nan)`` is 0.0: a NaN run was measured as one that moved nothing."""
    with pytest.raises(ValueError, match=r"curve\[1\].*nan"):
        compare.spread([_metrics(), _metrics(curve=[0.25, NAN, 1.0])])
    same = compare.spread([_metrics(curve=[0.25, NAN, INF]), _metrics(curve=[0.25, NAN, INF])])
    assert same["atol"] == same["rtol"] == 0.0


# ----------------------------------------------------------------------------- the smoke checks


def test_smoke_check_fails_a_run_whose_claim_value_is_nan(tmp_path):
    refs = tmp_path / "refs"
    (refs / "toy").mkdir(parents=True)
    (refs / "toy" / "t01.ipynb").write_text("{}")
    (refs / "toy" / "t01.metrics.json").write_text(json.dumps({**_metrics(), "png_files": []}))
    (refs / smoke_check.TOLERANCES).write_text(json.dumps(
        {"default": {"rtol": 0.0, "atol": 0.0}, "notebooks": {"toy/t01": {"rtol": 0.1, "atol": 0.1}}}))
    run = _write(tmp_path / "out", "toy/t01", _metrics(value=NAN)).parent
    result = smoke_check.compare_with_reference(refs / "toy" / "t01.ipynb", run)
    assert not result.ok() and any("claims.rises.value" in p for p in result.problems()), result.problems()


# ----------------------------------------------------------------------------- claims


def test_a_claim_threshold_that_is_not_finite_is_refused():
    with pytest.raises(ValueError, match="threshold"):
        results.claim(0.5, NAN)


@pytest.mark.parametrize("op", [">=", ">", "<=", "<"])
def test_a_nan_value_or_threshold_never_meets_its_comparison(op):
    assert not results.compare(NAN, 0.5, op) and not results.compare(0.5, NAN, op)
    assert not results.compare(NAN, NAN, op)


@pytest.mark.parametrize("bad", [NAN, INF, None])
def test_the_claims_table_shows_a_nan_claim_as_not_holding(tmp_path, capsys, bad):
    """The table trusted the recorded ``holds``: a NaN value was shown as holding (and ``null`` crashed it)."""
    _write(tmp_path, "tracing/t01_x", {"notebook": "tracing/t01_x", "claims": {
        "a": {"holds": True, "value": bad, "threshold": 0.5, "op": ">="},
        "b": {"holds": True, "value": 0.7, "threshold": 0.5, "op": ">="}}})
    assert claims.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**1 of 2 claims hold**"), out
    a = next(line for line in out.splitlines() if line.startswith("| tracing/t01_x | a |"))
    assert "**no** (0/1)" in a and "not a finite number" in a, a


def test_a_nan_seed_never_counts_as_holding():
    c = {"holds": True, "value": 0.7, "threshold": 0.5, "op": ">=", "n": 3, "k": 3, "seeds": [0, 1, 2],
         "values": [0.7, NAN, 0.8], "verdicts": [True, True, True]}
    assert seeds.fraction(c) == "2/3" and seeds.misses_somewhere(c)
    assert not seeds.holds({"holds": True, "value": NAN}) and seeds.holds({"holds": True, "value": 0.7})
    assert seeds.verdict({"holds": True, "value": NAN}) == "**no** (0/1)"


@pytest.mark.parametrize("bad", [NAN, INF, None])
def test_a_seed_run_whose_claim_value_is_not_finite_is_refused(bad):
    """A seed run's claim with a NaN value (its ``holds`` true) was counted as holding on that seed."""
    params = {"seed": 0}
    other = {"notebook": "toy/t01", "scale": "default", "params": {"seed": 1},
             "claims": {"a": {"holds": True, "value": bad, "threshold": 0.5, "op": ">="}}}
    with pytest.raises(ValueError, match=r"seed 1 .*'a'.*(nan|inf|None)"):
        seeds.combine("toy/t01", "default", params, {"a": results.claim(0.7, 0.5)}, [other])


def test_a_claims_table_in_a_notebook_shows_a_nan_value_as_nan():
    table = results.claims_table({"a": {"holds": True, "value": NAN, "threshold": 0.5, "op": ">="}})
    row = next(line for line in table.splitlines() if line.startswith("| `a`"))
    assert "**no** (0/1)" in row and "| NaN |" in row and "not a finite number" in row, row


# ----------------------------------------------------------------------------- portable --measure


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
    (refs / "toy" / "t01.metrics.json").write_text(json.dumps({**_metrics(), "png_files": []}))
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
            _write(out, "toy/t01", outputs[name])
        return out

    monkeypatch.setattr(portable, "run_setting", run_setting)


def _tolerances(root: Path) -> str:
    return (root / "tests" / "notebooks" / smoke_check.TOLERANCES).read_text()


@pytest.mark.parametrize("outputs, settings, words", [
    ({}, "default-1t,avx2-3t", ["no run"]),
    ({"default-1t": _metrics(curve=[0.25, 0.51, 1.0])}, "default-1t,avx2-3t", ["avx2-3t", "toy/t01", "did not run"]),
    ({"default-1t": _metrics(curve=[0.25, 0.51])}, "default-1t", ["default-1t", "toy/t01", "curve[2]"]),
    ({"default-1t": _metrics(value=NAN)}, "default-1t", ["default-1t", "toy/t01", "claims.rises.value"]),
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
    _settings_leave(monkeypatch, {"default-1t": _metrics(curve=[0.25, 0.51, 1.0]), "avx2-3t": _metrics()})
    status = portable.main(["--nb", "t01", "--settings", "default-1t,avx2-3t", "--measure",
                            "--work", str(portable_repo / "w")])
    out, err = capsys.readouterr()
    assert status == 0 and "error:" not in err and "2 of 2 smoke runs agree" in out, out + err
    written = json.loads(_tolerances(portable_repo))
    assert written["notebooks"]["toy/t01"]["measured"]["runs"] == ["reference", "default-1t", "avx2-3t"]
