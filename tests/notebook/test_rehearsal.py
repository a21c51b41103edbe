"""Tests of layersim.notebook.rehearsal: the cuts fit every notebook's paper preset and only lower counts; a
rehearsal run is cut, written apart with its mark, and never read as a result."""

import json

import pytest

from layersim.notebook import presets, rehearsal, results, settings
from layersim.notebook.run import start
from layersim.tools import assets, claims, plans


@pytest.fixture
def rehearsing(monkeypatch):
    monkeypatch.setenv(rehearsal.ENV, "1")


def _numbers(value):
    """Every number inside ``value`` (a count, or lists and dicts of them)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers(v)]
    return []


RULES = {"n": settings.integer(1)}
NOTEBOOKS = {nb.stem: nb for nb in plans.discover("")}


@pytest.mark.parametrize("stem", sorted(rehearsal.CUTS))
def test_each_cut_is_a_key_of_the_paper_preset_and_lowers_its_counts(stem):
    """A cut names a key of the notebook's paper preset; a count it sets is the smoke preset's (or one given) and at
    most the paper's (0 and None: the whole split); a list of tasks keeps one or two of the paper's."""
    assert stem in NOTEBOOKS, f"{stem} is not a notebook"
    presets = assets.notebook_presets(stem)
    paper = presets["paper"]
    for key, value in rehearsal.cuts_of(stem, presets).items():
        was = paper[key]
        if key in ("tasks", "models") and isinstance(value, list):
            assert set(value) <= set(was) and 1 <= len(value) <= 2, (stem, key)
        elif key in ("milestones", "rl_milestones"):
            continue
        elif isinstance(value, dict):
            assert set(value) == set(was), (stem, key)
            assert all(a <= b for v, w in zip(value.values(), was.values()) for a, b in zip(v, w)), (stem, key)
        elif isinstance(value, list):
            assert len(value) <= len(was), (stem, key)
        else:
            assert was is None or was == 0 or value <= was, f"{stem}: {key} {value} > the paper's {was}"


def test_the_shared_presets_are_cut_only_in_a_rehearsal_of_the_paper_scale(monkeypatch):
    plain = presets.tracing_vit("paper")
    assert plain["epochs"] == 200 and plain == {**presets.TRACING_VIT["paper"]}
    monkeypatch.setenv(rehearsal.ENV, "1")
    cut = presets.tracing_vit("paper")
    assert {k: cut[k] for k in rehearsal.SHARED["TRACING_VIT"]} == \
        {k: presets.TRACING_VIT["smoke"][k] for k in rehearsal.SHARED["TRACING_VIT"]}
    assert {k: v for k, v in cut.items() if k not in rehearsal.SHARED["TRACING_VIT"]} == \
        {k: v for k, v in plain.items() if k not in rehearsal.SHARED["TRACING_VIT"]}  # the architecture kept
    assert presets.tracing_vit("default") == {**presets.TRACING_VIT["default"]}
    for stem in ("t01_cos_vs_cka",):  # t01 builds its preset from TRACING_VIT: its cut is the shared one
        assert set(rehearsal.SHARED["TRACING_VIT"]) <= set(rehearsal.CUTS[stem])


def test_a_rehearsal_run_is_cut_written_apart_marked_and_never_collected(repo, rehearsing):
    PRESETS = {"smoke": {"n": 4}, "default": {"n": 50}, "paper": {"n": 5000}}
    rehearsal.CUTS["n01_toy"] = {"n": rehearsal.SMOKE}
    try:
        run = start("p/n01_toy", PRESETS, {"scale": "paper"}, rules=RULES, announce=False, style=False)
        assert run.P == {"n": 4} and run.out == repo / "runs" / "rehearsal" / "p" / "n01_toy"
        run.record({}, show=False)
        written = json.loads((run.out / "metrics.json").read_text())
        assert written["scale"] == "paper" and written["rehearsal"]["cuts"] == {"n": 4}
        assert "not a result" in written["rehearsal"]["note"]
        default = start("p/n01_toy", PRESETS, {"scale": "default"}, rules=RULES, announce=False, style=False)
        assert default.P == {"n": 50} and default.rehearsal is None  # only the paper scale is rehearsed
    finally:
        del rehearsal.CUTS["n01_toy"]
    with pytest.raises(ValueError, match="is a rehearsal of the paper scale .* not a result"):
        claims.collect(repo / "runs" / "rehearsal")
    assert results.run_folder("p", "n01_toy", "smoke") == repo / "runs" / "smoke" / "p" / "n01_toy"


def test_a_cut_the_preset_lacks_is_refused(rehearsing):
    with pytest.raises(ValueError, match=r"cuts \['n_eval'\] of t11_clip, which its paper preset lacks"):
        rehearsal.presets_of("t11_clip", {"paper": {"n": 1}})
    with pytest.raises(ValueError, match=r"takes \['n_eval'\] of t11_clip from its smoke preset, which lacks them"):
        rehearsal.presets_of("t11_clip", {"paper": {"n_eval": 1}, "smoke": {}})


def test_every_metrics_file_of_a_rehearsal_carries_its_mark(rehearsing, tmp_path):
    results.write_metrics(tmp_path, "alignment/a12_scale_ladders", "paper", {}, {})  # a ladder reader: no cut
    assert json.loads((tmp_path / "metrics.json").read_text())[rehearsal.KEY] == rehearsal.mark({})
    given = rehearsal.mark({"n_samples": 48})
    results.write_metrics(tmp_path, "report/layer_report", "paper", {}, {}, **{rehearsal.KEY: given})
    assert json.loads((tmp_path / "metrics.json").read_text())[rehearsal.KEY] == given  # the run's own kept
    results.write_metrics(tmp_path, "report/layer_report", "default", {}, {})  # other scales: no mark
    assert rehearsal.KEY not in json.loads((tmp_path / "metrics.json").read_text())
