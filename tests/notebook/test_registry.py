"""Tests of layersim.notebook.registry: every committed claim is registered with the definition it was judged by, a
verbatim quote of its paper that matches the paper's text exactly at its offset, a threshold reason, an origin and an
audit; the normalisation is checked on its own, and a quote that moved or is not in the paper fails."""

from __future__ import annotations

import json

import pytest

from layersim.notebook import registry, results

from builders import REPO


def _committed_claims() -> dict[str, dict]:
    out = {}
    for path in sorted(REPO.glob("figures/*/*/metrics.json")):
        if path.parent.parent.name in registry.PAPERS:
            data = json.loads(path.read_text())
            for name, c in data.get("claims", {}).items():
                out[f"{data['notebook']}:{name}"] = c
    return out


# ----------------------------------------------------------------------------- the normalisation


def test_normalise_joins_what_the_extraction_split_and_nothing_else():
    raw = "The ﬁrst repre-\nsentation\n054\n055\nis  $\\|y\\|$\tclose.\r\n"
    assert registry.normalise(raw) == "The first representation is $\\|y\\|$ close."
    assert registry.normalise("a well-known 12 layers") == "a well-known 12 layers"  # hyphens and numbers in a line
    assert registry.normalise("Table\n2\nshows") == "Table shows"  # a line of a number alone is a margin number


def test_locate_and_check_quote_are_exact():
    text = registry.normalise("We find that CKA is high. We find that COS is low.\n")
    assert registry.locate("COS is\nlow.", text) == text.index("COS is low.")
    with pytest.raises(ValueError, match="more than once"):
        registry.locate("We find that", text)
    with pytest.raises(ValueError, match="not in the paper"):
        registry.locate("CKA is low", text)
    claim = {"id": "x/y", "quote": {"text": "COS is low.", "offset": text.index("COS is low.")}}
    assert registry.check_quote(claim, text) is None
    moved = {**claim, "quote": {**claim["quote"], "offset": 3}}
    assert "not at offset 3 (it is at offset" in registry.check_quote(moved, text)
    assert "not in the paper" in registry.check_quote({**claim, "quote": {"text": "CKA is low.", "offset": 0}}, text)


# ----------------------------------------------------------------------------- the registry and the runs


@pytest.mark.parametrize("paper", registry.PAPERS)
def test_every_entry_is_complete(paper):
    reg = registry.load(paper)
    for c in reg.claims:
        assert c["quote"]["text"].strip() and c["quote"]["where"].strip(), c["id"]
        assert c["threshold_reason"].strip() and c["audit"]["note"].strip(), c["id"]
        assert len(c["registered"]) == 10 and c["registered"][4] == "-", c["id"]
        if c["quote"].get("caption"):
            assert c["quote"]["reading"].strip(), f"{c['id']}: a caption's quote says how the figure is read"
        for rev in c["revisions"]:
            assert {"date", "commit", "change", "why", "results_seen"} <= set(rev), c["id"]


def test_every_committed_claim_is_registered_with_the_definition_it_was_judged_by():
    committed = _committed_claims()
    registered = {f"{c['notebook']}:{c['claim']}": c for p in registry.PAPERS for c in registry.load(p).claims}
    assert not set(committed) - set(registered), "committed claims without a registry entry"
    pending = set(registered) - set(committed)  # registered, not run yet: they can only be before their first result
    assert all(registered[k]["origin"] == "before its first result" for k in pending), sorted(pending)
    for key, c in committed.items():
        entry = registered[key]
        now = registry.current_definition(entry)
        assert (now["op"], now["threshold"]) == (entry["op"], entry["threshold"]) == (c["op"], c["threshold"]), key


def test_a_run_judges_its_measurements_by_the_registered_op_and_threshold():
    rules = registry.rules("tracing/t01_cos_vs_cka")
    entry = registry.load("tracing").by_id()["t01/cos_tracks_cka"]
    assert rules["cos_tracks_cka"] == (entry["op"], entry["threshold"])
    op, threshold = rules["cos_tracks_cka"]
    above = threshold + 0.01 if op in (">", ">=") else threshold - 0.01
    judged = registry.judge("tracing/t01_cos_vs_cka", {"cos_tracks_cka": results.measure(above, "r")})
    assert judged["cos_tracks_cka"] == {"holds": True, "value": above, "threshold": threshold, "op": op, "note": "r"}
    assert registry.judge("tracing/t01_cos_vs_cka", {"cos_tracks_cka": results.measure(threshold - 1.0)}
                          )["cos_tracks_cka"]["holds"] is (op in ("<", "<="))


def test_a_claim_that_brings_its_own_threshold_or_is_not_registered_is_refused():
    with pytest.raises(ValueError, match="carries its own threshold"):
        registry.judge("tracing/t01_cos_vs_cka", {"cos_tracks_cka": results.claim(0.95, 0.5)})
    with pytest.raises(ValueError, match="'made_up' of tracing/t01_cos_vs_cka is not registered"):
        registry.judge("tracing/t01_cos_vs_cka", {"made_up": results.measure(0.95)})
    # a user's own notebook, outside the registry, judges its claims itself, and cannot leave one unjudged
    own = {"mine": results.claim(0.95, 0.9)}
    assert registry.judge("mine/x01_own", own) == own and registry.rules("mine/x01_own") == {}
    with pytest.raises(ValueError, match="not registered"):
        registry.judge("mine/x01_own", {"mine": results.measure(0.95)})


def test_every_registry_entry_states_the_definition_its_revisions_lead_to():
    for paper in registry.PAPERS:
        for c in registry.load(paper).claims:
            now = registry.current_definition(c)
            assert (now["op"], now["threshold"]) == (c["op"], c["threshold"]), c["id"]


@pytest.mark.parametrize("paper", registry.PAPERS)
def test_every_quote_is_verbatim_at_its_offset(paper):
    reg = registry.load(paper)
    text = registry.paper_text(reg)
    if text is None:
        pytest.skip(f"the paper's text {reg.file} is not in {registry.papers_folder()} (set {registry.PAPERS_ENV})")
    problems = [p for c in reg.claims if (p := registry.check_quote(c, text))]
    assert not problems, "\n".join(problems)


def test_a_registry_entry_without_a_field_an_unknown_origin_or_a_bad_diagnosis_is_refused(tmp_path, monkeypatch):
    entry = {"id": "t01/x", "notebook": "tracing/t01", "claim": "x", "quote": {"text": "q", "where": "w", "offset": 0},
             "measured": "m", "op": ">", "threshold": 0, "threshold_reason": "r", "registered": "2026-11-01",
             "origin": "before its first result", "revisions": [], "audit": {"verdict": "faithful", "note": "n"}}
    path = tmp_path / "claims.json"
    monkeypatch.setattr(registry, "registry_path", lambda paper: path)
    diagnosis = {"kind": "scale", "reason": "too small", "date": "2026-11-26", "results_seen": True}
    for bad, match in [({k: v for k, v in entry.items() if k != "threshold_reason"}, "lacks threshold_reason"),
                       ({**entry, "origin": "later"}, "origin 'later'"),
                       ({**entry, "audit": {"verdict": "fine", "note": ""}}, "audit 'fine'"),
                       ({**entry, "diagnosis": {**diagnosis, "kind": "bad luck"}}, "t01/x: a diagnosis kind"),
                       ({**entry, "diagnosis": {**diagnosis, "reason": "two\nlines"}}, "t01/x: a diagnosis needs"),
                       ({**entry, "diagnosis": {**diagnosis, "date": "26.11.2026"}}, "t01/x: diagnosis date"),
                       ({**entry, "diagnosis": {**diagnosis, "results_seen": "yes"}}, "t01/x: diagnosis results_seen"),
                       ({**entry, "diagnosis": ("scale", "too small")}, "t01/x: diagnosis .* is not a dict")]:
        path.write_text(json.dumps({"file": "f", "sha256": "0", "claims": [bad]}))
        with pytest.raises(ValueError, match=match):
            registry.load("tracing")
    path.write_text(json.dumps({"file": "f", "sha256": "0", "claims": [entry, entry]}))
    with pytest.raises(ValueError, match="registered twice"):
        registry.load("tracing")
    path.write_text(json.dumps({"file": "f", "sha256": "0", "claims": [{**entry, "diagnosis": diagnosis}]}))
    assert registry.load("tracing").claims[0]["diagnosis"] == diagnosis


def test_a_registered_diagnosis_reaches_the_claim_word_for_word():
    """The run adds a claim's registered diagnosis (kind and reason) to it, as the committed runs recorded it; a
    claim the notebook diagnoses as well is refused."""
    committed = _committed_claims()
    diagnosed = [c for p in registry.PAPERS for c in registry.load(p).claims if "diagnosis" in c]
    assert {c["id"] for c in diagnosed} >= {"t06/aligned_transfer_layerwise", "a10/random_label_pretraining_hurts"}
    for c in diagnosed:
        judged = registry.judge(c["notebook"], {c["claim"]: results.measure(0.5, "n")})[c["claim"]]
        assert (judged["kind"], judged["reason"]) == (c["diagnosis"]["kind"], c["diagnosis"]["reason"]), c["id"]
        assert list(judged)[-2:] == ["kind", "reason"], c["id"]
        recorded = committed.get(f"{c['notebook']}:{c['claim']}")
        if recorded is not None:
            assert (recorded["kind"], recorded["reason"]) == (judged["kind"], judged["reason"]), c["id"]
    with pytest.raises(ValueError, match="diagnosed in the claims registry"):
        registry.judge("tracing/t06_transfer", {"aligned_keeps_final_accuracy": results.measure(
            0.5, kind="scale", reason="small")})
    undiagnosed = registry.judge("tracing/t06_transfer", {"aligned_shallow_layers_keep_transferability":
                                                          results.measure(0.5)})
    assert "kind" not in undiagnosed["aligned_shallow_layers_keep_transferability"]


def test_another_version_of_the_papers_text_is_named(tmp_path):
    (tmp_path / "p.txt").write_text("some other text")
    reg = registry.Registry("tracing", "p.txt", "0" * 64, ())
    with pytest.raises(ValueError, match="another version of the paper's text"):
        registry.paper_text(reg, tmp_path)
    assert registry.paper_text(registry.Registry("tracing", "missing.txt", "0" * 64, ()), tmp_path) is None


# ----------------------------------------------------------------------------- no definition moves unseen


def test_every_claim_is_judged_by_its_registered_definition_or_a_recorded_revision():
    """Each claim's op, threshold and the code that measures it (its notebook cell or paper function, hashed) are
    the registered definition with its revisions applied; any other change fails until a revision records it."""
    committed = _committed_claims()
    problems = []
    for paper in registry.PAPERS:
        for c in registry.load(paper).claims:
            key = f"{c['notebook']}:{c['claim']}"
            if key in committed:  # a claim registered before its first run is checked once it has one
                problems += registry.unrecorded_changes(c, committed[key], REPO)
    assert not problems, "\n".join(problems)


def test_an_edited_measure_or_threshold_is_an_unrecorded_change(tmp_path):
    """The check above can fail: the same claim against a changed cell, and against a changed threshold, unless a
    revision carries the new values."""
    nb = tmp_path / "notebooks" / "tracing" / "t99_x.ipynb"
    nb.parent.mkdir(parents=True)
    cell = 'claims = {"c": results.claim(r, 0.9)}'
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": cell}]}))
    claim = {"id": "t99/c", "notebook": "tracing/t99_x", "claim": "c", "revisions": [],
             "definition": {"op": ">=", "threshold": 0.9, "source": "notebooks/tracing/t99_x.ipynb, code cell 1",
                            "source_sha256": registry.source_sha256(cell)}}
    committed = {"op": ">=", "threshold": 0.9}
    assert registry.unrecorded_changes(claim, committed, tmp_path) == []
    assert "threshold is 0.8" in registry.unrecorded_changes(claim, {**committed, "threshold": 0.8}, tmp_path)[0]
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": cell.replace("r,", "2 * r,")}]}))
    assert "source_sha256" in registry.unrecorded_changes(claim, committed, tmp_path)[0]
    revised = {**claim, "revisions": [{"date": "2026-12-01", "commit": "", "change": "value doubled", "why": "w",
                                       "results_seen": True,
                                       "new": {"source_sha256": registry.source_sha256(cell.replace("r,", "2 * r,"))}}]}
    assert registry.unrecorded_changes(revised, committed, tmp_path) == []


def _git(*args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


def _history_available() -> bool:
    import subprocess

    try:
        return _git("rev-parse", "--is-shallow-repository").strip() == "false"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


@pytest.mark.parametrize("paper", registry.PAPERS)
def test_registered_definitions_and_revisions_are_never_edited_in_place(paper):
    """A definition, once committed, stays as committed, and revisions are only appended: editing the stored hash
    (or threshold) of a registered definition along with the code would otherwise pass the check above. Read from
    the registry's git history; skipped outside a full git checkout."""
    if not _history_available():
        pytest.skip("needs the repository's git history (a full clone)")
    rel = registry.registry_path(paper).relative_to(REPO).as_posix()
    first: dict[str, dict] = {}
    for commit in _git("log", "--reverse", "--format=%H", "--", rel).split():
        try:
            data = json.loads(_git("show", f"{commit}:{rel}"))
        except json.JSONDecodeError:  # a commit where the file did not parse
            continue
        for c in data.get("claims", []):
            if "definition" in c and c["id"] not in first:
                first[c["id"]] = {"commit": commit[:9], "definition": c["definition"], "revisions": c["revisions"]}
    problems = []
    for c in registry.load(paper).claims:
        was = first.get(c["id"])
        if was is None:
            continue  # registered in the working tree, not yet committed
        if c["definition"] != was["definition"]:
            problems.append(f"{c['id']}: its definition differs from the one committed in {was['commit']}")
        if c["revisions"][:len(was["revisions"])] != was["revisions"]:
            problems.append(f"{c['id']}: its revisions as of {was['commit']} were edited, not appended to")
    assert not problems, "\n".join(problems)
