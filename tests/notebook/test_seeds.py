"""Tests of layersim.notebook.seeds: claims over several seeds (k of n, the median, the spread), the checks that keep
two experiments from being mixed (a seed run whose claim value is not finite is refused, a NaN seed never counts as
holding), a scale miss's status, and the seed counts of the committed runs."""

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersim.notebook import results, seeds

from builders import REPO

PARAMS = {"n_eval": 100, "device": "auto", "seed": 0}


def other_run(seed, values, notebook="tracing/t01_x", scale="default", params=None, threshold=0.9, op=">="):
    """The metrics.json of a run at ``seed`` whose claims take ``values`` (name -> value)."""
    return {"notebook": notebook, "scale": scale, "params": {**(params or PARAMS), "seed": seed},
            "claims": {name: results.claim(v, threshold, op) for name, v in values.items()}}


def test_three_seeds_by_hand():
    mine = {"a": results.claim(0.95, 0.9, note="the note")}
    runs = [other_run(1, {"a": 0.5}), other_run(2, {"a": 0.92})]
    c = seeds.combine("tracing/t01_x", "default", PARAMS, mine, runs)["a"]
    assert (c["k"], c["n"], c["holds"]) == (2, 3, True)
    assert c["seeds"] == [0, 1, 2] and c["values"] == [0.95, 0.5, 0.92] and c["verdicts"] == [True, False, True]
    assert c["value"] == 0.92  # the median
    assert c["seed_mean"] == pytest.approx(statistics.mean([0.95, 0.5, 0.92]))
    assert c["seed_std"] == pytest.approx(statistics.stdev([0.95, 0.5, 0.92]))
    assert (c["threshold"], c["op"], c["note"]) == (0.9, ">=", "the note")
    assert seeds.fraction(c) == "2/3"


def test_a_claim_that_holds_on_one_seed_of_three_does_not_hold():
    mine = {"a": results.claim(0.95, 0.9)}
    c = seeds.combine("tracing/t01_x", "default", PARAMS, mine, [other_run(1, {"a": 0.1}), other_run(2, {"a": 0.2})])
    assert (c["a"]["k"], c["a"]["holds"], c["a"]["value"]) == (1, False, 0.2)


def test_one_seed_is_its_own_verdict():
    c = seeds.combine("tracing/t01_x", "default", PARAMS, {"a": results.claim(0.3, 0.5, "<")})["a"]
    assert (c["holds"], c["k"], c["n"], c["values"], c["seed_std"], c["value"]) == (True, 1, 1, [0.3], 0.0, 0.3)


def test_an_even_split_does_not_hold():
    mine = {"a": results.claim(1.0, 0.5)}
    c = seeds.combine("tracing/t01_x", "default", PARAMS, mine, [other_run(1, {"a": 0.0}, threshold=0.5)])["a"]
    assert (c["k"], c["n"], c["holds"]) == (1, 2, False)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=7).filter(lambda v: len(v) % 2),
       threshold=st.floats(-10, 10), op=st.sampled_from([">=", ">", "<=", "<"]))
def test_for_an_odd_number_of_seeds_the_median_decides_as_the_majority(values, threshold, op):
    mine = {"a": results.claim(values[0], threshold, op)}
    runs = [other_run(i, {"a": v}, threshold=threshold, op=op) for i, v in enumerate(values[1:], 1)]
    c = seeds.combine("tracing/t01_x", "default", PARAMS, mine, runs)["a"]
    assert c["holds"] == results.claim(c["value"], threshold, op)["holds"]
    assert c["k"] == sum(results.claim(v, threshold, op)["holds"] for v in values)


@pytest.mark.parametrize("run, message", [
    (other_run(1, {"a": 1.0}, notebook="tracing/t02_y"), "is not 'tracing/t01_x'"),
    (other_run(1, {"a": 1.0}, scale="smoke"), "at scale 'default'"),
    (other_run(1, {"a": 1.0}, params={**PARAMS, "n_eval": 50}), "other settings than this run (n_eval)"),
    (other_run(0, {"a": 1.0}), "two runs share a seed"),
    (other_run(1, {"b": 1.0}), "has no claim 'a'"),
    (other_run(1, {"a": 1.0, "b": 1.0}), "has claims this run lacks: ['b']"),
    (other_run(1, {"a": 1.0}, threshold=0.8), "tested against >= 0.8 at seed 1 but >= 0.9 here"),
])
def test_runs_of_another_experiment_are_refused(run, message):
    with pytest.raises(ValueError) as err:
        seeds.combine("tracing/t01_x", "default", PARAMS, {"a": results.claim(1.0, 0.9)}, [run])
    assert message in str(err.value)


def test_a_claim_may_not_carry_the_keys_of_the_verdict_over_seeds():
    with pytest.raises(ValueError, match=r"carries \['n'\]"):
        seeds.combine("tracing/t01_x", "default", PARAMS, {"a": results.claim(1.0, 0.9, n=76)})


def test_seed_counts_and_lists(monkeypatch):
    assert seeds.seeds_for("t01_x", "default") == 3 and seeds.seeds_for("t01_x", "smoke") == 1
    monkeypatch.setitem(seeds.ONE_SEED_AT_DEFAULT, "t01_x", (1200.0, "measured on a test"))
    assert seeds.seeds_for("t01_x", "default") == 1
    assert seeds.seed_list(5, 3) == [5, 6, 7]
    for bad in [(0, 0), (0, 2.0), (-1, 2), (0, True)]:
        with pytest.raises(ValueError):
            seeds.seed_list(*bad)
    with pytest.raises(ValueError, match="unknown scale"):
        seeds.seeds_for("t01_x", "huge")


def test_a_failed_seed_run_is_named(tmp_path):
    with pytest.raises(ValueError, match="wrote no metrics.json"):
        seeds.load_runs([tmp_path / "seed-1"])
    assert seeds.folders_from_env(None) == [] and seeds.folders_from_env("") == []


def test_a_nan_seed_never_counts_as_holding():
    c = {"holds": True, "value": 0.7, "threshold": 0.5, "op": ">=", "n": 3, "k": 3, "seeds": [0, 1, 2],
         "values": [0.7, math.nan, 0.8], "verdicts": [True, True, True]}
    assert seeds.fraction(c) == "2/3" and seeds.misses_somewhere(c)
    assert not seeds.holds({"holds": True, "value": math.nan}) and seeds.holds({"holds": True, "value": 0.7})
    assert seeds.verdict({"holds": True, "value": math.nan}) == "**no** (0/1)"


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_seed_run_whose_claim_value_is_not_finite_is_refused(bad):
    """A seed run's claim with a NaN value (its ``holds`` true) was counted as holding on that seed."""
    params = {"seed": 0}
    other = {"notebook": "toy/t01", "scale": "default", "params": {"seed": 1},
             "claims": {"a": {"holds": True, "value": bad, "threshold": 0.5, "op": ">="}}}
    with pytest.raises(ValueError, match=r"seed 1 .*'a'.*(nan|inf|None)"):
        seeds.combine("toy/t01", "default", params, {"a": results.claim(0.7, 0.5)}, [other])


@pytest.mark.parametrize("default, larger, status", [
    (0.1, None, "not yet retested"), (0.1, 0.7, "confirmed"), (0.1, 0.4, "trending"), (0.1, 0.12, "not supported"),
    (0.1, 0.0, "not supported")])
def test_a_scale_miss_status_follows_its_larger_run(default, larger, status):
    claim = {**results.claim(default, 0.5), "seed_std": 0.05}
    big = None if larger is None else {**results.claim(larger, 0.5), "seed_std": 0.05}
    assert seeds.scale_status(claim, big) == status


# --- the committed default-scale run --------------------------------------------------------------------------

COMMITTED = sorted(p for p in (REPO / "figures").glob("*/*/metrics.json") if json.loads(p.read_text()).get("claims"))


def seed_count(path) -> int:
    counts = {len(c.get("verdicts", [None])) for c in json.loads(path.read_text())["claims"].values()}
    assert len(counts) == 1, f"{path.parent.name}: its claims were judged over different numbers of seeds {counts}"
    return counts.pop()


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_committed_claims_are_judged_over_the_seeds_their_cost_allows(path):
    stem, n = path.parent.name, seed_count(path)
    assert n >= seeds.seeds_for(stem, "default")
    if n > 1:  # the runner noted the wall time of every other seed's run
        assert len(json.loads(path.read_text()).get("seed_run_seconds", {})) == n - 1


def test_a_notebook_tested_on_one_seed_is_costly_and_says_so():
    for stem, (seconds, how) in seeds.ONE_SEED_AT_DEFAULT.items():
        assert seconds >= 0.9 * seeds.COSTLY_SECONDS and how.strip(), f"{stem}: {seconds} s is cheap enough for 3 seeds"
        notebook = next((REPO / "notebooks").glob(f"*/{stem}.ipynb"))
        text = " ".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                        if c["cell_type"] == "markdown")
        assert "one seed" in text, f"{stem}: its notebook does not say that its claims are tested on one seed"


def test_other_seed_seconds_reads_what_wall_times_recorded():
    runs = [{"params": {"seed": 1}, "seconds": 12.5}, {"params": {"seed": 2}, "seconds": 3}, {"params": {"seed": 4}}]
    recorded = {"seed_run_seconds": seeds.wall_times(runs)}
    assert seeds.other_seed_seconds(recorded) == {"1": 12.5, "2": 3.0}
    assert seeds.other_seed_seconds({}) == seeds.other_seed_seconds({"seed_run_seconds": None}) == {}
