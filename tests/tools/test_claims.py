"""Tests of layersim.tools.claims: the table of every claim (``python -m layersim claims``), which the book's claims
audit is built from, with its headline counts, diagnoses and larger runs; a claim whose value is not a finite number
never shows as holding."""

import dataclasses
import json
import math

import pytest

from layersim.notebook import ladders, registry, results, seeds
from layersim.tools import claims


def _rows(text: str) -> list[str]:
    """The table rows of the claims command's output (its header and separator left out)."""
    return [line for line in text.splitlines() if line.startswith("| ")][1:]


def write_run(folder, notebook, claims_):
    path = folder / notebook / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"notebook": notebook, "scale": "default", "params": {}, "claims": claims_}))


def test_the_table_counts_the_claims_and_shows_k_of_n_and_diagnoses(tmp_path):
    params = {"seed": 0}
    other = {"notebook": "tracing/t01_x", "scale": "default", "params": {"seed": 1},
             "claims": {"a": results.claim(0.2, 0.5), "b": results.claim(0.9, 0.5)}}
    mine = {"a": results.claim(0.7, 0.5, kind="scale", reason="30k images, not 1.2M"), "b": results.claim(0.8, 0.5)}
    write_run(tmp_path, "tracing/t01_x", seeds.combine("tracing/t01_x", "default", params, mine, [other]))
    write_run(tmp_path, "alignment/a01_y", {"c": results.claim(0.1, 0.0, ">", kind="paper", reason="never shown")})
    rows = claims.collect(tmp_path)
    assert [(r.notebook, r.name) for r in rows] == [("tracing/t01_x", "a"), ("tracing/t01_x", "b"),
                                                   ("alignment/a01_y", "c")]  # the README's order of papers
    text = claims.markdown(rows)
    assert text.startswith("**2 of 3 claims hold**") and "of the 1 or 2 it was tested on" in text
    a, b, c = _rows(text)
    assert "**no** (1/2)" in a and "scale: 30k images, not 1.2M" in a  # an even split does not hold
    assert "yes (2/2)" in b and "yes (1/1)" in c and "never shown" not in c  # no miss, no diagnosis shown


def test_a_scale_diagnosis_shows_the_larger_run(tmp_path):
    write_run(tmp_path, "tracing/t01_x", {"a": results.claim(0.1, 0.5, kind="scale", reason="30k images"),
                                          "b": results.claim(0.1, 0.5, kind="scale", reason="3 epochs")})
    write_run(tmp_path / "scale_checks", "tracing/t01_x", {"a": results.claim(0.7, 0.5)})
    a, b = _rows(claims.markdown(claims.collect(tmp_path)))
    assert "scale: 30k images; at the larger run: yes (1/1), 0.700" in a
    assert "the larger run is still to be made" in b


def seeds_claim(values, threshold=0.5, op=">="):
    """A claim recorded over seeds as a run records it (:func:`layersim.notebook.seeds.combine`)."""
    params = {"seed": 0}
    mine = {"a": results.claim(values[0], threshold, op)}
    others = [{"notebook": "p/n", "scale": "default", "params": {"seed": s},
               "claims": {"a": results.claim(v, threshold, op)}} for s, v in enumerate(values[1:], 1)]
    return seeds.combine("p/n", "default", params, mine, others)["a"]


def a_ladder(monkeypatch, claims_=(("tracing/t01_x", "a"),)):
    """A ladder of the claims ``claims_`` registered for the test (its rungs' settings do not matter here)."""
    ladder = ladders.Ladder("x_ladder", "images", tuple(claims_), {30000: {}, 60000: {}, 120000: {}}, "a test")
    monkeypatch.setitem(ladders.LADDERS, ladder.name, ladder)
    return ladder


def test_a_ladder_decides_the_scale_status_over_the_larger_run(tmp_path, monkeypatch):
    ladder = a_ladder(monkeypatch)
    write_run(tmp_path, "tracing/t01_x", {"a": results.claim(0.1, 0.5, kind="scale", reason="30k images"),
                                          "b": results.claim(0.1, 0.5, kind="scale", reason="3 epochs")})
    write_run(tmp_path / "scale_checks", "tracing/t01_x", {"a": results.claim(0.7, 0.5)})  # one larger run: holds
    for budget, values in ((30000, [0.10, 0.11, 0.09]), (60000, [0.20, 0.22, 0.18]), (120000, [0.30, 0.31, 0.29])):
        write_run(ladders.rung_folder(tmp_path, ladder.name, budget), "tracing/t01_x", {"a": seeds_claim(values)})
    rows = claims.collect(tmp_path)
    assert [len(r.ladder) for r in rows] == [3, 0] and [r.ladder[0].budget for r in rows[:1]] == [30000.0]
    assert rows[0].scale_status == "trending"  # the ladder, not the larger run (which held)
    assert "at its ladder of 3 rungs: trending (gains more than the spread" in rows[0].why
    assert rows[1].scale_status == "not yet retested"


def test_a_rung_folder_not_named_by_its_budget_is_refused(tmp_path, monkeypatch):
    a_ladder(monkeypatch, (("p/n", "a"),))
    write_run(tmp_path / "ladders" / "x_ladder" / "big", "p/n", {"a": seeds_claim([0.1, 0.2, 0.3])})
    with pytest.raises(ValueError, match="named by its budget"):
        ladders.rungs_of(tmp_path, "p/n", "a")


def test_no_results_is_a_clear_error_and_the_command_prints_the_committed_claims(capsys):
    with pytest.raises(ValueError, match="holds no"):
        claims.collect(__import__("pathlib").Path("/nonexistent-results"))
    assert claims.main([]) == 0
    out = capsys.readouterr().out
    held = sum(bool(r.claim["holds"]) for r in claims.collect())
    assert out.startswith(f"**{held} of {len(claims.collect())} claims hold**")
    assert claims.main(["/nonexistent-results"]) == 2


def test_every_committed_scale_diagnosis_has_its_larger_run():
    """A claim that misses and is diagnosed *scale* is shown at a larger scale: the notebook has a scale check
    (seeds.SCALE_CHECKS) and its committed run holds the claim."""
    for row in claims.collect():
        if row.misses_somewhere and row.claim.get("kind") == "scale":
            stem = row.notebook.split("/")[1]
            assert stem in seeds.SCALE_CHECKS, f"{row.notebook}: no scale check for the scale diagnosis of {row.name}"
            assert row.larger is not None, f"{row.notebook}: its committed scale check has no claim {row.name}"


def test_every_committed_miss_is_diagnosed():
    """A claim that misses on any seed of the committed run says why (results.DIAGNOSES: kind and reason); a miss
    found by a new run is diagnosed before it is committed."""
    found = {(r.notebook.split("/")[1], r.name) for r in claims.collect()
             if r.misses_somewhere and "kind" not in r.claim}
    assert not found, f"misses without a diagnosis: {sorted(found)}"


def test_the_command_prints_plain_text_without_html_entities(tmp_path):
    """The claims command printed ``&lt;=``, ``&#x27;`` and ``&#124;`` into Markdown meant for a terminal."""
    write_run(tmp_path, "tracing/t01_x", {"a": results.claim(0.1, 0.5, "<=", note="n"),
                                          "b": results.claim(0.1, 0.5, kind="definition",
                                                             reason="'most' read as > 0.5 | half")})
    text = claims.markdown(claims.collect(tmp_path))
    a, b = _rows(text)
    assert "<= 0.5" in a and "'most' read as > 0.5 \\| half" in b
    assert "&" not in text


def test_the_headline_counts_by_origin_diagnosis_and_scale_status(tmp_path):
    write_run(tmp_path, "tracing/t01_x", {"a": results.claim(0.1, 0.5, kind="scale", reason="small"),
                                          "b": results.claim(0.1, 0.5, kind="scale", reason="small"),
                                          "c": results.claim(0.7, 0.5)})
    write_run(tmp_path / "scale_checks", "tracing/t01_x", {"a": results.claim(0.7, 0.5), "b": results.claim(0.1, 0.5)})
    rows = claims.collect(tmp_path)
    rows = [claims.ClaimRow(r.notebook, r.name, r.claim, r.larger, {"origin": registry.ORIGINS[i % 2]})
            for i, r in enumerate(rows)]
    first, origins, kinds, scale = claims.headline(rows)
    assert first == "1 of 3 claims hold"
    assert origins == "by origin: 1 of 2 defined before their first result; 0 of 1 defined with their first result"
    assert kinds == "the 2 misses by diagnosis: scale 2"
    assert scale == ("the 2 scale misses by status: confirmed 1, not supported 1 (no ladder has run yet: each by its "
                     "one larger run)")
    ladder = (ladders.Rung(1, seeds_claim([0.1, 0.1, 0.1])), ladders.Rung(2, seeds_claim([0.2, 0.2, 0.21])),
              ladders.Rung(4, seeds_claim([0.3, 0.31, 0.3])))
    rows[0] = dataclasses.replace(rows[0], ladder=ladder)  # claim a: its ladder trends (the larger run held)
    assert claims.headline(rows)[3] == ("the 2 scale misses by status: trending 1, not supported 1 (1 by their "
                                        "ladders, 1 by their one larger run)")


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_the_claims_table_shows_a_nan_claim_as_not_holding(tmp_path, capsys, bad):
    """The table trusted the recorded ``holds``: a NaN value was shown as holding (and ``null`` crashed it)."""
    write_run(tmp_path, "tracing/t01_x", {"a": {"holds": True, "value": bad, "threshold": 0.5, "op": ">="},
                                          "b": {"holds": True, "value": 0.7, "threshold": 0.5, "op": ">="}})
    assert claims.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**1 of 2 claims hold**"), out
    a = next(line for line in out.splitlines() if line.startswith("| tracing/t01_x | a |"))
    assert "**no** (0/1)" in a and "not a finite number" in a, a
