"""Tests of layersim.tools.rehearse: a notebook's rehearsal environment (a fresh cache with the fixtures linked in,
downloads off, the request log), the requests read back and set beside the fetch list, and one notebook rehearsed
end to end through the runner."""

import json
import os

import pytest

from layersim.inputs import assets
from layersim.notebook import rehearsal
from layersim.tools import rehearse


def fake_fixtures(folder):
    """A fixtures folder that ``prepare`` takes as complete: its stamp, one data folder, the sitecustomize."""
    (folder / "cache" / "torchvision").mkdir(parents=True)
    (folder / "site").mkdir()
    (folder / "site" / "sitecustomize.py").write_text(rehearse.SITE)
    (folder / "fixtures.json").write_text(json.dumps({"version": rehearse.VERSION, "written": [], "seconds": {}}))
    return folder


def test_the_environment_of_one_notebook(tmp_path):
    folder = fake_fixtures(tmp_path / "fixtures")
    work, log = tmp_path / "work", tmp_path / "asked.txt"
    (work / "cache" / "checkpoints").mkdir(parents=True)  # a stale run's cache: cleared
    env = rehearse.environment(folder, work, log)
    assert (work / "cache" / "torchvision").resolve() == (folder / "cache" / "torchvision").resolve()
    assert not (work / "cache" / "checkpoints").exists()
    assert env[rehearsal.ENV] == "1" and env["LAYERSIM_OFFLINE"] == env["HF_HUB_OFFLINE"] == "1"
    assert env["LAYERSIM_CACHE"] == str(work / "cache") and env[assets.REQUEST_LOG] == str(log)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(folder / "site")
    assert rehearse.prepare([], folder) == folder  # nothing asked: nothing written
    with pytest.raises(ValueError, match=r"no fixture for \['boolq'\]"):
        rehearse.prepare(["boolq"], folder)


def test_requests_are_read_once_each_and_set_beside_the_fetch_list(tmp_path, monkeypatch):
    log = tmp_path / "asked.txt"
    assert rehearse.requested(log) == []
    log.write_text("cifar10\nglue/rte\ncifar10\njaneaustenr\n\n")
    assert rehearse.requested(log) == ["cifar10", "glue/rte", "janeaustenr"]
    from layersim.tools import assets as fetch_tool

    monkeypatch.setattr(fetch_tool, "notebook_assets", lambda scale, nbs: {nbs[0].stem: ["cifar10", "cifar100"]})
    got = rehearse.compare("t06_transfer", rehearse.requested(log))
    assert got["not_listed"] == ["glue/rte"] and got["not_asked"] == ["cifar100"]  # janeaustenr ships offline


@pytest.mark.full
def test_claims_a_rehearsal_could_not_measure_are_read_back(tmp_path):
    assert rehearse.unmeasured(tmp_path) == {}  # no metrics.json: the run stopped before its claims
    mark = rehearsal.mark({})
    (tmp_path / "metrics.json").write_text(json.dumps({rehearsal.KEY: mark}))
    assert rehearse.unmeasured(tmp_path) == {}
    (tmp_path / "metrics.json").write_text(json.dumps({rehearsal.KEY: rehearsal.not_measurable(mark, "no rank")}))
    assert rehearse.unmeasured(tmp_path) == {"not_measurable": "no rank"}


def test_a_whole_rehearsal_is_recorded_and_the_readme_cites_the_newest(tmp_path):
    assert rehearse.readme_sentence(tmp_path) == ""  # no record yet: the README says nothing
    runs = {"a02_emergence": {"ok": True, "seconds": 9.1, "not_listed": []},
            "t01_cos_vs_cka": {"ok": True, "seconds": 40.4, "not_listed": [], "not_measurable": "no rank"},
            "t09_aligned_bert": {"ok": False, "seconds": 22.0, "not_listed": ["glue/mnli"]}}
    rehearse.record({"a02_emergence": runs["a02_emergence"]}, 100.0, tmp_path, date="2026-11-01")
    path = rehearse.record(runs, 3725.0, tmp_path, date="2026-11-29")
    data = json.loads(path.read_text())
    assert data["total_seconds"] == 3725.0 and data["notebooks"] == runs and data["date"] == "2026-11-29"
    table = path.with_suffix(".md").read_text()
    assert "| t09_aligned_bert | FAILED | 22 | glue/mnli | – |" in table and "| no rank |" in table
    assert "2 of 3 notebooks ran to the end in 62 min" in table
    sentence = rehearse.readme_sentence(tmp_path)
    assert "2 of 3 notebooks ran to the end in **62 min**" in sentence and "measured 2026-11-29" in sentence
    assert "benchmarks/rehearsal/2026-11-29-paper-rehearsal.md" in sentence
    with pytest.raises(ValueError, match="at least one"):
        rehearse.record({}, 1.0, tmp_path)


def test_a_record_is_of_the_whole_rehearsal(capsys):
    with pytest.raises(SystemExit):
        rehearse.main(["--nb", "t07", "--record"])
    assert "drop --nb" in capsys.readouterr().err


def test_one_notebook_rehearsed_end_to_end(tmp_path, monkeypatch):
    """t07 builds its models on the meta device: its rehearsal runs the paper path through papermill in seconds."""
    from layersim.core.paths import repo_root

    folder = fake_fixtures(tmp_path / "fixtures")
    assert rehearse.main(["--nb", "t07_param_table", "--fixtures", str(folder)]) == 0
    out = repo_root() / "runs" / "rehearsal"
    summary = json.loads((out / "summary.json").read_text())["t07_param_table"]
    assert summary["ok"] and summary["not_listed"] == [] and summary["seconds"] > 0
    metrics = json.loads((out / "tracing" / "t07_param_table" / "metrics.json").read_text())
    assert metrics["scale"] == "paper" and "not a result" in metrics["rehearsal"]["note"]


def test_notebooks_rehearsed_in_processes_of_their_own(tmp_path, monkeypatch):
    """``--jobs 2``: each notebook's runner in a process of its own, given the rehearsal's environment (its fresh cache
    removed after it) and a share of the cores; the summary and the requests are those of the in-process path."""
    from layersim.core.paths import repo_root

    folder = fake_fixtures(tmp_path / "fixtures")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    out = repo_root() / "runs" / "rehearsal"
    (out / "summary.json").unlink(missing_ok=True)
    assert rehearse.main(["--nb", "t07_param_table", "--fixtures", str(folder), "--jobs", "2"]) == 0
    got = json.loads((out / "summary.json").read_text())["t07_param_table"]
    assert got["ok"] and got["not_listed"] == [] and got["seconds"] > 0 and got["listed"] == []
    metrics = json.loads((out / "tracing" / "t07_param_table" / "metrics.json").read_text())
    assert metrics["scale"] == "paper" and "not a result" in metrics["rehearsal"]["note"]
    assert not (out / "work" / "t07_param_table").exists()


def test_jobs_must_be_one_or_more(capsys):
    with pytest.raises(SystemExit):
        rehearse.main(["--nb", "t07", "--jobs", "0"])
    assert "--jobs 0" in capsys.readouterr().err


def test_the_ci_subset_covers_every_paper_and_every_format():
    """What the fuller CI target rehearses names, through the fetch list, at least one asset of every on-disk format
    of the fixtures, and at least one notebook of every paper; every fixture has a format."""
    from layersim.tools import fixture_models, fixtures, plans

    notebooks = [nb for name in rehearse.CI_SUBSET for nb in plans.discover(name)]
    assert len(notebooks) == len(rehearse.CI_SUBSET)
    assert {nb.parent.name for nb in notebooks} == {"alignment", "clusters", "redundancy", "tracing"}
    given = set(rehearse.fixture_names(notebooks))
    for fmt, names in rehearse.FORMATS.items():
        assert given & set(names), f"no notebook of the subset reads {fmt}"
    every = {n for names in rehearse.FORMATS.values() for n in names}
    assert every == set(fixtures.WRITERS) | set(fixture_models.MODELS) | set(fixture_models.WEIGHTS)


@pytest.mark.full
def test_the_ci_subset_is_rehearsed_at_the_paper_scale():
    """The fuller CI target's rehearsal: each notebook of the subset runs at the paper scale on its fixtures, offline,
    two at a time, and asks for nothing that the fetch list misses."""
    from layersim.core.paths import repo_root

    assert rehearse.main(["--nb", ",".join(rehearse.CI_SUBSET), "--jobs", "2"]) == 0
    summary = json.loads((repo_root() / "runs" / "rehearsal" / "summary.json").read_text())
    for name in rehearse.CI_SUBSET:
        got = summary[name.split("/")[1]]
        assert got["ok"] and got["not_listed"] == [], (name, got)
