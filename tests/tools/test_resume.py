"""Tests of layersim.tools.resume: a run counts as finished only with its own run and every seed asked for; a ladder
rung's own time is read from the file the runner notes beside its committed results."""

import json

from layersim.notebook import ladders
from layersim.tools import plans, resume
from builders import write_notebook


def test_a_rung_is_finished_with_its_own_time_and_every_seed(fake_repo, monkeypatch, capsys):
    nb = write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [], params='scale = "default"\nseed = 0')
    monkeypatch.setitem(ladders.LADDERS, "x", ladders.Ladder("x", "size", (("p/s", "up"),), {1: {"s": {}}}, "",
                                                              seeds=2))
    job = plans.Job("default", update=True, rung=("x", 1))
    folder = plans.metrics_of(nb, job.target(nb)).parent
    folder.mkdir(parents=True)
    names = ["scale", "seed"]
    (folder / "metrics.json").write_text(json.dumps({"seed_run_seconds": {"1": 2.5},
                                                     "claims": {"up": {"value": 1.0, "threshold": 0.5, "op": ">", "holds": True, "n": 2, "k": 2,
                                                                "values": [1.0, 1.0], "verdicts": [True, True]}}}))
    assert not resume.finished(nb, job, names)  # no own time: its own run did not end
    resume.write_own_time(folder, 3.0, committed_folder=False)
    assert resume.finished(nb, job, names)
    assert not resume.finished(nb, plans.Job("default", update=True, rung=("x", 1), seeds=3), names)  # 3 asked
    left, kept = resume.keep_finished(job, {nb: names})
    assert left == {} and kept == [nb]
    assert "p/s: finished earlier, kept (rung 1 of x); claims: 1 of 1 hold" in capsys.readouterr().out


def test_an_unreadable_run_is_not_finished(fake_repo):
    nb = write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [], params='scale = "default"\nseed = 0')
    job = plans.Job("default", seeds=1)
    target = job.target(nb)
    target.executed.parent.mkdir(parents=True)
    target.executed.write_text("{not json")
    assert not resume.finished(nb, job, ["scale", "seed"])
    assert resume.keep_finished(job, {nb: ["scale", "seed"]}) == ({nb: ["scale", "seed"]}, [])


def _keep(dest, params, notebook="p/s", scale="default", seconds=12.5):
    folder = resume.seed_record(dest, params["seed"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps({"notebook": notebook, "scale": scale, "params": params}))
    if seconds is not None:
        (folder / "wall_time.json").write_text(json.dumps({"seconds": seconds}))
    return folder


def test_a_seed_kept_by_an_earlier_run_counts_only_with_the_same_settings(tmp_path):
    params = {"size": 2, "vit": {"embed_dim": 64}, "sizes": [1, 2], "seed": 1, "other": "x"}
    assert resume.seed_record(tmp_path, 1) == tmp_path / "seeds" / "seed-1"
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "seed": 1}) is None  # nothing kept
    _keep(tmp_path, params)
    # the settings asked for are all recorded with these values (a tuple reads back as a list); others may be there
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "vit": {"embed_dim": 64}, "sizes": (1, 2), "seed": 1}) == 12.5
    assert resume.kept_seed(tmp_path, "p/s", {"size": 4, "seed": 1}) is None  # another rung's setting
    assert resume.kept_seed(tmp_path, "p/s", {"vit": {"embed_dim": 256}, "seed": 1}) is None
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "width": 3, "seed": 1}) is None  # a setting not recorded
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "seed": 2}) is None  # another seed's folder: none
    assert resume.kept_seed(tmp_path, "p/t", {"size": 2, "seed": 1}) is None  # another notebook's run
    _keep(tmp_path, params, scale="smoke")
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "seed": 1}) is None
    _keep(tmp_path, params, seconds=None)
    (resume.seed_record(tmp_path, 1) / "wall_time.json").unlink()
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "seed": 1}) is None  # no wall time: it did not end
    (resume.seed_record(tmp_path, 1) / "wall_time.json").write_text("{half")
    assert resume.kept_seed(tmp_path, "p/s", {"size": 2, "seed": 1}) is None


def test_a_seed_run_is_kept_in_its_rung_and_read_back(tmp_path):
    """keep_seed copies a finished seed run's records (nothing else of its folder) to where kept_seed reads them."""
    params = {"size": 2, "seed": 3}
    run = tmp_path / "runs" / "seed-3" / "p" / "s"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"notebook": "p/s", "scale": "default", "params": params}))
    (run / "wall_time.json").write_text(json.dumps({"seconds": 40.0}))
    (run / "figure.png").write_bytes(b"png")
    rung = tmp_path / "rung"
    kept = resume.keep_seed(run, rung, 3, committed_folder=False)
    assert kept == resume.seed_record(rung, 3)
    assert sorted(p.name for p in kept.iterdir()) == ["metrics.json", "wall_time.json"]
    assert resume.kept_seed(rung, "p/s", params) == 40.0
    assert resume.kept_seed(rung, "p/s", {**params, "seed": 4}) is None
