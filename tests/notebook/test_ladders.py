import hashlib

import numpy as np
import pytest

from layersim.notebook import ladders
from layersim.notebook.ladders import Rung


def rung(budget, values, threshold=0.0, op=">"):
    """A rung whose claim is judged like a run's: each seed against the threshold, the majority deciding."""
    verdicts = [bool(v > threshold) if op == ">" else bool(v < threshold) for v in values]
    return Rung(budget, {"value": float(np.median(values)), "values": list(values), "verdicts": verdicts,
                         "threshold": threshold, "op": op, "holds": sum(verdicts) > len(verdicts) / 2})


def test_the_rule_is_the_one_fixed_before_any_ladder_ran():
    # changing the rule after a ladder's result is seen is a recorded revision: update this pin only with one
    assert hashlib.sha256(ladders.RULE.encode()).hexdigest()[:16] == "cc8e7fe8dc9d8bc2"


@pytest.mark.parametrize("rungs", [
    [rung(100, [-0.3, -0.3, -0.3]), rung(200, [-0.2, -0.2, -0.2])],  # two rungs
    [rung(100, [-0.3]), rung(200, [-0.2]), rung(400, [0.1])],  # one seed on the largest rungs
    [rung(100, [-0.3] * 3), rung(200, [-0.2, float("nan"), -0.2]), rung(400, [-0.1] * 3)],  # a failed seed
])
def test_too_few_rungs_or_seeds_is_not_yet_retested(rungs):
    got = ladders.ladder_status(rungs)
    assert got["status"] == "not yet retested" and "needs 3 rungs" in got["why"]


def test_holding_at_the_largest_rung_confirms():
    got = ladders.ladder_status([rung(400, [0.05, 0.02, -0.01]), rung(100, [-0.3] * 3), rung(200, [-0.2] * 3)])
    assert got["status"] == "confirmed" and got["margins"][0] == pytest.approx(-0.3)  # ordered by budget


def test_a_steady_gain_beyond_the_spread_is_trending_with_its_crossing():
    got = ladders.ladder_status([rung(100, [-0.31, -0.30, -0.29]), rung(200, [-0.21, -0.20, -0.19]),
                                 rung(400, [-0.11, -0.10, -0.09])])
    assert got["status"] == "trending"
    assert got["gain"] == pytest.approx(0.2) and got["spread"] == pytest.approx(0.01)
    assert got["slope_per_doubling"] == pytest.approx(0.1)
    assert got["crossing_budget"] == pytest.approx(800.0)  # one more doubling at 0.1 per doubling


@pytest.mark.parametrize("middle, top, gain, spread", [
    ([-0.35, -0.30, -0.25], [-0.45, -0.25, -0.35], 0.05, 0.1),  # -0.4 -> -0.35, seeds spread 0.1
    ([-0.42, -0.40, -0.38], [-0.5, -0.1, -0.3], 0.1, 0.2),  # -0.4 -> -0.3, the last step gains; spread 0.2
])
def test_a_gain_within_the_seeds_spread_is_not_supported(middle, top, gain, spread):
    got = ladders.ladder_status([rung(100, [-0.4] * 3), rung(200, middle), rung(400, top)])
    assert got["gain"] == pytest.approx(gain) and got["spread"] == pytest.approx(spread)
    assert got["status"] == "not supported" and got["why"].startswith("no gain beyond the spread")


def test_a_last_step_that_loses_is_not_supported_even_after_a_large_gain():
    got = ladders.ladder_status([rung(100, [-0.5] * 3), rung(200, [-0.10, -0.11, -0.09]), rung(400, [-0.2] * 3)])
    assert got["gain"] == pytest.approx(0.3) and got["status"] == "not supported"
    assert got["why"].startswith("the last step loses") and got["crossing_budget"] > 400  # the line, for information


def test_the_margin_is_oriented_by_the_comparison():
    assert ladders.margin(0.3, 0.5, "<") == pytest.approx(0.2) and ladders.margin(0.3, 0.5, ">=") == pytest.approx(-0.2)
    got = ladders.ladder_status([rung(1, [0.5] * 3, 0.1, "<"), rung(2, [0.4, 0.41, 0.39], 0.1, "<"),
                                 rung(4, [0.3, 0.31, 0.29], 0.1, "<")])  # falling toward a '<' threshold
    assert got["status"] == "trending" and got["margins"][-1] == pytest.approx(-0.2)


@pytest.mark.parametrize("rungs, message", [
    ([rung(100, [0.1] * 3), rung(100, [0.2] * 3), rung(200, [0.3] * 3)], "positive, finite and distinct"),
    ([rung(0, [0.1] * 3), rung(100, [0.2] * 3), rung(200, [0.3] * 3)], "positive, finite and distinct"),
    ([rung(1, [0.1] * 3), rung(2, [0.2] * 3, threshold=0.5), rung(4, [0.3] * 3)], "one threshold and comparison"),
])
def test_a_malformed_ladder_is_one_value_error(rungs, message):
    with pytest.raises(ValueError, match=message):
        ladders.ladder_status(rungs)
    with pytest.raises(ValueError, match="unknown comparison"):
        ladders.margin(1, 0, "==")


def committed_scale_misses():
    """Every claim of the committed default runs diagnosed *scale*: ``("<paper>/<stem>", name)``."""
    import json

    from layersim.core.paths import repo_root

    found = []
    for path in sorted((repo_root() / "figures").glob("*/*/metrics.json")):
        data = json.loads(path.read_text())
        found += [(data["notebook"], name) for name, c in data.get("claims", {}).items() if c.get("kind") == "scale"]
    return found


def test_every_scale_miss_has_exactly_one_ladder():
    misses = committed_scale_misses()
    assert misses, "the committed runs diagnose no claim scale: this test would check nothing"
    for notebook, name in misses:
        assert sum((notebook, name) in ladder.claims for ladder in ladders.LADDERS.values()) == 1, (notebook, name)
    for ladder in ladders.LADDERS.values():  # and no ladder for a claim that is not (or no longer) a scale miss
        assert set(ladder.claims) <= set(misses), ladder.name


def test_every_ladder_has_enough_geometric_rungs_of_known_parameters():
    from layersim.tools.plans import discover
    from layersim.tools.runner import notebook_parameters

    for ladder in ladders.LADDERS.values():
        budgets = ladder.budgets
        assert len(budgets) >= ladders.MIN_RUNGS and ladder.seeds >= ladders.MIN_TOP_SEEDS, ladder.name
        ratios = [b / a for a, b in zip(budgets, budgets[1:])]
        assert all(1.5 <= r <= 4 for r in ratios), (ladder.name, ratios)  # spaced geometrically, about x2-x3
        stems = {nb.split("/")[1] for nb, _ in ladder.claims}
        assert stems <= set(ladder.notebooks), ladder.name  # every claim's notebook runs on the ladder
        assert ladder.why.startswith("Diagnosis:") and ladder.paper, ladder.name  # why these rungs; the paper's run
        assert len(ladders.CHECKS.get(ladder.name, ())) == len(ladder.checks), ladder.name  # each check evaluated
        for budget, runs in ladder.rungs.items():
            assert set(runs) == set(ladder.notebooks), (ladder.name, budget)  # the same notebooks on every rung
            for stem, params in runs.items():
                known = notebook_parameters(discover(stem)[0])
                assert set(params) <= set(known) and "seed" not in params, (ladder.name, budget, stem)


def test_rungs_are_read_from_their_ladders_folders(tmp_path):
    import json

    ladder = ladders.LADDERS["a05_regression_points"]
    notebook, claim = ladder.claims[0]
    for budget, values in zip(ladder.budgets, ([0.5, 0.6, 0.7], [0.8, 0.9, 1.0], [1.0, 1.0, 1.0])):
        path = ladders.rung_folder(tmp_path, ladder.name, budget) / notebook / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"claims": {claim: rung(budget, values, 1.0, ">").claim}}))
    got = ladders.rungs_of(tmp_path, notebook, claim)
    assert [r.budget for r in got] == [450.0, 900.0, 1797.0] and got[0].claim["values"] == [0.5, 0.6, 0.7]
    assert ladders.rungs_of(tmp_path, notebook, "another_claim") == []
    assert ladders.rung_folder(tmp_path, "x", 48000.0).name == "48000"


def _rung_copy(folder, budget, notebook, record, seed_records=()):
    """A committed rung of ``bert_steps`` holding ``record`` as its own run and ``seed_records`` as the others'."""
    import json

    here = ladders.rung_folder(folder, "bert_steps", budget) / notebook
    here.mkdir(parents=True)
    (here / "metrics.json").write_text(json.dumps(record))
    for s, other in enumerate(seed_records, 1):
        (here / "seeds" / f"seed-{s}").mkdir(parents=True)
        (here / "seeds" / f"seed-{s}" / "metrics.json").write_text(json.dumps(other))


def _with_novel(record, value):
    scores = [dict(s, validation=value) if (s["task"], s["restart"]) == ("austen-novel", 1) else s
              for s in record["scores"]]
    return {**record, "scores": scores}


def test_the_bert_learned_check_reads_the_mean_over_seeds_of_restart_one(tmp_path):
    import json

    from layersim.core.paths import repo_root

    c01 = json.loads((repo_root() / "figures" / "clusters" / "c01_cka_structure" / "metrics.json").read_text())
    assert ladders.bert_learned(tmp_path)["passed"] is None  # nothing run
    _rung_copy(tmp_path, 300, "clusters/c01_cka_structure", _with_novel(c01, 0.50), [_with_novel(c01, 0.54)])
    _rung_copy(tmp_path, 900, "clusters/c01_cka_structure", _with_novel(c01, 0.55), [_with_novel(c01, 0.56)])
    got = ladders.bert_learned(tmp_path)  # means 0.52 -> 0.555: a gain of 0.035, not a plateau
    assert got["passed"] is False and "0.520 at 300 steps -> 0.555 at 900 (gain +0.035" in got["numbers"]
    (ladders.rung_folder(tmp_path, "bert_steps", 900) / "clusters/c01_cka_structure" / "seeds" / "seed-1" /
     "metrics.json").write_text(json.dumps(_with_novel(c01, 0.52)))
    assert ladders.bert_learned(tmp_path)["passed"] is True  # 0.52 -> 0.535: +0.015


def test_the_t09_check_needs_one_early_block_above_majority_on_every_task(tmp_path):
    import json

    from layersim.core.paths import repo_root

    t09 = json.loads((repo_root() / "figures" / "tracing" / "t09_aligned_bert" / "metrics.json").read_text())
    assert ladders.t09_readable(tmp_path)["passed"] is None
    lifted = json.loads(json.dumps(t09))
    lifted["accuracy"]["all-minilm-l6-v2/austen-novel/aligned"][1] = 1 / 6 + 0.05  # block 2 leaves chance on novel
    lifted["accuracy"]["all-minilm-l6-v2/austen-excerpt/aligned"][1] = 0.5 + 0.01  # ... but barely on excerpt
    _rung_copy(tmp_path, 900, "tracing/t09_aligned_bert", lifted)
    got = ladders.t09_readable(tmp_path)
    assert got["passed"] is False and "block 2" in got["numbers"]
    lifted["accuracy"]["all-minilm-l6-v2/austen-excerpt/aligned"][1] = 0.5 + 0.03
    (ladders.rung_folder(tmp_path, "bert_steps", 900) / "tracing/t09_aligned_bert" / "metrics.json").write_text(
        json.dumps(lifted))
    assert ladders.t09_readable(tmp_path)["passed"] is True
