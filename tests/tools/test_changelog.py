"""Tests of layersim.tools.changelog: CHANGELOG.md's claim verdicts are the registry's revisions that moved a verdict,
so that the changelog cannot drift from the registry; the command rewrites only its block."""

from __future__ import annotations

import pytest

from layersim.notebook import registry
from layersim.tools import changelog
from builders import REPO, one_line_error


def test_the_changelogs_claim_verdicts_match_the_registry():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    block = text[text.index(changelog.START) + len(changelog.START):text.index(changelog.END)]
    assert block.strip() == changelog.section(), "run `python -m layersim.tools.changelog`"
    assert changelog.main(["--check"]) == 0


def _claim(cid: str, *changes: str) -> dict:
    return {"id": cid, "revisions": [{"date": f"2026-11-2{i}", "commit": "abc" if i else "", "change": c,
                                      "why": "'because'"} for i, c in enumerate(changes)]}


def test_a_revision_that_says_the_verdict_moved_is_listed_once_for_all_its_claims(monkeypatch):
    """``verdict false -> true`` and ``verdict rule changed`` count; a revision whose verdict stayed does not."""
    claims = {"tracing": [_claim("t01/a", "code moved; value, op and threshold unchanged",
                                 "setup changed; verdict false -> true"),
                          _claim("t01/b", "x", "setup changed; verdict false -> true")],
              "alignment": [_claim("a01/c", "verdict rule changed (results.compare): ties count; op unchanged",
                                   "the verdict is the same at every scale")]}
    monkeypatch.setattr(registry, "load", lambda paper: registry.Registry(paper, "", "", tuple(claims.get(paper, []))))
    found = changelog.verdict_changes()
    assert [(v.claim, v.moved, v.change) for v in found] == [
        ("a01/c", "rule changed", "verdict rule changed (results.compare): ties count"),
        ("t01/a", "false -> true", "setup changed"), ("t01/b", "false -> true", "setup changed")]
    assert changelog.section(found).splitlines() == [
        "- `t01/a`, `t01/b` (2026-11-21, commit abc): misses → holds; setup changed. Why: because.",
        "- `a01/c` (2026-11-20): verdict rule changed (results.compare): ties count. Why: because."]
    assert changelog.section([]) == "No revision of the claims registry has changed a verdict."


def test_the_command_rewrites_only_its_block(fake_repo, monkeypatch, capsys):
    monkeypatch.setattr(changelog, "section", lambda changes=None: "- new line")
    path = fake_repo / "CHANGELOG.md"
    path.write_text(f"# Changelog\n\nkept\n\n{changelog.START}\n- old line\n{changelog.END}\n\nkept too\n")
    assert changelog.main(["--check"]) == 1 and "out of date" in capsys.readouterr().err
    assert changelog.main([]) == 0 and changelog.main(["--check"]) == 0
    assert path.read_text() == f"# Changelog\n\nkept\n\n{changelog.START}\n- new line\n{changelog.END}\n\nkept too\n"
    path.write_text("# Changelog\n")
    assert changelog.main([]) == 2
    one_line_error(capsys.readouterr().err, "CHANGELOG.md needs the two lines")


def test_outside_the_repository_the_command_is_one_error_line(outside_repository, capsys):
    assert changelog.main(["--check"]) == 2
    one_line_error(capsys.readouterr().err, "needs the layersim repository")


@pytest.mark.parametrize("change", ["verdict false -> true", "the verdict rule changed", "threshold moved; verdict "
                                    "true -> false (seed 2)"])
def test_the_pattern_reads_every_wording_of_a_moved_verdict(change):
    assert changelog.VERDICT.search(change)
