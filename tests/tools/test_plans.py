"""Tests of layersim.tools.plans: where each run of the runner writes.

Every combination of the runner's options is planned in a repository of its own (``LAYERSIM_ROOT``): only an
updating default run points into the committed results; ``LAYERSIM_OUT`` (a relative one from the working
directory, one through a symlink) is followed or refused; the committed folder a job rewrites.
"""

import pytest

from layersim.core import writers
from layersim.notebook import seeds
from layersim.tools import plans
from builders import write_notebook


@pytest.mark.parametrize("scale", ["smoke", "default", "paper"])
@pytest.mark.parametrize("refs", [False, True])
@pytest.mark.parametrize("params", [{}, {"n": 1}])
@pytest.mark.parametrize("update", [False, True])
@pytest.mark.parametrize("user_out", [None, "elsewhere", "figures", "link-to-figures"])
def test_only_an_updating_default_run_may_write_committed_results(repo_with_figures, monkeypatch, scale, refs,
                                                                   params, update, user_out):
    """Every combination of the runner's options: only --scale default --update-committed without -p publishes
    into notebooks/ and turns the switch on for the kernel; no other plan points into the committed folders,
    whatever LAYERSIM_OUT says (a symlink into figures/ included)."""
    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [])
    (repo_with_figures / "link-to-figures").symlink_to(repo_with_figures / "figures")
    if user_out:
        monkeypatch.setenv("LAYERSIM_OUT", str(repo_with_figures / user_out))
    committed = [(repo_with_figures / "notebooks").resolve(), (repo_with_figures / "figures").resolve()]

    def inside(path):
        return path is not None and any(path.resolve().is_relative_to(c) for c in committed)

    publishing = update and scale == "default" and not refs and not params
    refused = (refs and (scale != "smoke" or params)) or (update and not publishing) or (
        user_out in ("figures", "link-to-figures") and not refs and not publishing)
    if refused:
        with pytest.raises(ValueError):
            plans.plan(nb, scale, refs, params, update=update)
        return
    target = plans.plan(nb, scale, refs, params, update=update)
    assert (target.publish == nb) == publishing and (target.publish is None) != publishing
    assert target.environment["LAYERSIM_UPDATE_COMMITTED"] == ("1" if publishing else "0")
    assert not inside(target.executed)
    assert not inside(target.out_root)
    if publishing:  # the kernel's own LAYERSIM_OUT is unset: figures/ it is
        assert target.environment["LAYERSIM_OUT"] is None
    elif not refs:  # the kernel is pointed away from figures/
        assert target.out_root == (repo_with_figures / user_out if user_out else repo_with_figures / "runs" / scale)


def test_parse_value():
    assert plans.parse_value("3") == 3 and plans.parse_value("0.5") == 0.5
    assert plans.parse_value("[1, 2]") == [1, 2] and plans.parse_value("cifar10") == "cifar10"


def test_the_executed_notebook_follows_layersim_out(repo_with_figures, tmp_path, monkeypatch):
    """Two runners with their own LAYERSIM_OUT wrote the same executed notebook under runs/."""
    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [])
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "a"))
    target = plans.plan(nb, "smoke", params={})
    assert target.executed == tmp_path / "a" / "p" / "n" / "n.ipynb"
    seeded = plans.seed_plan(nb, "default", 1, repo_with_figures,
                             base=plans.seed_base(target, repo_with_figures))
    assert seeded.executed.is_relative_to(tmp_path / "a" / "seeds")


def test_a_relative_layersim_out_is_taken_from_the_working_directory(repo_with_figures, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [])
    assert plans.plan(nb, "smoke").out_root == here / "mine"  # what the kernel (in notebooks/p/) gets


def test_a_default_run_without_the_switch_leaves_committed_results_alone(repo_with_figures):
    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [])
    target = plans.plan(nb, "default")
    assert target.publish is None and target.environment[writers.SWITCH] == "0"
    assert target.out_root == repo_with_figures / "runs" / "default"


def test_a_job_names_the_committed_folder_and_notebook_it_rewrites(repo_with_figures, monkeypatch):
    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [])
    figures = repo_with_figures / "figures"
    assert plans.Job("default", update=True).committed_outputs(nb) == (figures / "p" / "n", nb)
    monkeypatch.setitem(seeds.SCALE_CHECKS, "n", {"size": 3})
    assert plans.Job("default", scale_check=True, update=True).committed_outputs(nb) == (
        figures / "scale_checks" / "p" / "n", None)  # its notebook is in that folder
    for job in (plans.Job("default"), plans.Job("default", scale_check=True), plans.Job("smoke", refs=True)):
        assert job.committed_outputs(nb) is None


def test_a_ladder_rung_commits_its_results_and_keeps_its_notebook_under_runs(repo_with_figures, monkeypatch):
    from layersim.notebook import ladders

    nb = write_notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [], params='scale = "default"\nseed = 0')
    ladder = ladders.Ladder("x", "images", (("p/n", "a"),), {100: {"n": {"size": 1}}, 300: {"n": {"size": 3}}}, "",
                            seeds=2)
    monkeypatch.setitem(ladders.LADDERS, "x", ladder)
    job = plans.Job("default", update=True, rung=("x", 300))
    target = job.target(nb)
    assert target.out_root == repo_with_figures / "figures" / "ladders" / "x" / "300" and target.rung
    assert target.executed == repo_with_figures / "runs" / "default" / "ladders" / "x" / "300" / "p" / "n" / "n.ipynb"
    assert target.environment[writers.SWITCH] == "1" and target.publish is None
    assert job.committed_outputs(nb) == (repo_with_figures / "figures" / "ladders" / "x" / "300" / "p" / "n", None)
    assert job.settings(nb) == {"size": 3} and job.variant == "ladders/x/300"
    assert plans.seed_count(nb, job, ["scale", "seed", "size"]) == 2  # the ladder's seeds
    written = plans.folders_written(nb, job, ["scale", "seed", "size"])
    assert repo_with_figures / "runs" / "default" / "seeds" / "ladders" / "x" / "300" / "seed-1" / "p" / "n" in written
    off = plans.Job("default", rung=("x", 100)).target(nb)  # without the switch: runs/, nothing committed
    assert off.out_root == repo_with_figures / "runs" / "default" / "ladders" / "x" / "100" and not off.committed


def test_discover_by_substring_and_glob(fake_repo):
    for name in ["tracing/t01_a", "tracing/t02_b", "alignment/a01_c"]:
        write_notebook(fake_repo / "notebooks" / f"{name}.ipynb", [])
    write_notebook(fake_repo / "notebooks" / "tracing" / ".ipynb_checkpoints" / "t01_a-checkpoint.ipynb", [])
    stems = lambda ps: [p.stem for p in ps]  # noqa: E731
    assert stems(plans.discover("")) == ["a01_c", "t01_a", "t02_b"]
    assert stems(plans.discover("t01")) == ["t01_a"]
    assert stems(plans.discover("tracing/*")) == ["t01_a", "t02_b"]
    assert plans.discover("nothing-like-this") == []
    assert stems(plans.discover("t02, a01")) == ["a01_c", "t02_b"]


def test_a_glob_matches_the_notebooks_own_name(repo_with_figures):
    for name in ("tracing/t07_early_exit", "tracing/t17_other", "alignment/a07_x"):
        write_notebook(repo_with_figures / "notebooks" / f"{name}.ipynb", [])
    assert [p.stem for p in plans.discover("t07*")] == ["t07_early_exit"]
    assert [p.stem for p in plans.discover("*/t07*")] == ["t07_early_exit"]
    assert [p.stem for p in plans.discover("t07_early_exit.ipynb")] == ["t07_early_exit"]
