"""Tests of layersim.tools.runner: choosing notebooks, refusing what cannot run, running and publishing them.

Most cases stage a repository of their own (``LAYERSIM_ROOT``); the ``slow`` ones execute small notebooks through
papermill. The committed notebooks and metrics files are checked for a machine's absolute folders. The runner never
writes into the committed results or a folder of the user's own files, follows LAYERSIM_OUT (a relative one from the
working directory), names a corrupt notebook and runs the others, and refuses a selection that names no notebook.
A budget ladder runs rung by rung into one folder per rung and resumes where it stopped.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layersim.notebook import ladders
from layersim.tools import plans, resume, runner
from builders import REPO, one_line_error, tree_files, write_notebook


@pytest.mark.slow
def test_default_run_publishes_in_place_and_failures_name_the_cell(fake_repo, capsys):
    good = write_notebook(fake_repo / "notebooks" / "p" / "good.ipynb",
                     ["import json, pathlib\npathlib.Path('out.json').write_text(json.dumps(scale))"])
    bad = write_notebook(fake_repo / "notebooks" / "p" / "bad.ipynb", ["x = 1", "raise ValueError('boom')"])
    code = runner.main(["--scale", "default", "--update-committed"])
    out = capsys.readouterr().out
    assert code == 1  # the batch went on past the failure and reports it at the end
    assert "p/good: ok" in out and "1 notebooks ok, 1 failed" in out
    assert "p/bad: FAILED at cell 4" in out  # 1-based, after the injected parameters cell
    assert "runs/default/p/bad/bad.ipynb" in out and "ValueError: boom" in out
    # the good notebook ran with the injected scale, in its own folder, and was published in place
    assert json.loads((good.parent / "out.json").read_text()) == "default"
    published = json.loads(good.read_text())
    assert str(fake_repo) not in good.read_text()  # papermill's own paths, made relative to the repository
    assert published["metadata"]["papermill"]["input_path"] == "notebooks/p/good.ipynb"
    assert any("injected-parameters" in c["metadata"].get("tags", []) for c in published["cells"])
    # the failed one is left as it was; its executed copy is under runs/
    assert "injected-parameters" not in bad.read_text()
    assert (fake_repo / "runs" / "default" / "p" / "bad" / "bad.ipynb").is_file()


@pytest.mark.slow
def test_smoke_run_never_touches_notebooks(fake_repo):
    nb = write_notebook(fake_repo / "notebooks" / "p" / "n.ipynb", ["y = 2"])
    before = nb.read_text()
    assert runner.main(["--scale", "smoke", "--nb", "n"]) == 0
    assert nb.read_text() == before
    assert (fake_repo / "runs" / "smoke" / "p" / "n" / "n.ipynb").is_file()


@pytest.mark.slow
def test_the_kernel_logs_only_errors_and_the_cells_keep_their_warnings(fake_repo, capfd):
    """The kernel's own log (ipykernel's start-up warning about unencrypted local TCP, once per notebook) stays
    out of the runner's output; a warning that a cell raises is still in the executed notebook."""
    write_notebook(fake_repo / "notebooks" / "p" / "k.ipynb",
                   ["from ipykernel.kernelapp import IPKernelApp\n"
                    "print('kernel log level', IPKernelApp.instance().log_level)",
                    "import warnings\nwarnings.warn('a cell warning')"])
    assert runner.main(["--scale", "smoke", "--nb", "k"]) == 0
    captured = capfd.readouterr()
    assert "without encryption" not in captured.out + captured.err
    cells = json.loads((fake_repo / "runs" / "smoke" / "p" / "k" / "k.ipynb").read_text())["cells"]
    texts = ["".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])]
    assert "kernel log level 40\n" in texts  # logging.ERROR
    assert any("UserWarning: a cell warning" in t for t in texts)


@pytest.mark.slow
def test_a_relative_path_variable_means_the_same_inside_the_kernel(fake_repo, monkeypatch):
    """papermill starts the kernel in the notebook's folder: a relative LAYERSIM_CACHE given to the runner is
    made absolute first, so the kernel's cache is the one named from where the runner was started."""
    monkeypatch.chdir(fake_repo)
    monkeypatch.setenv("LAYERSIM_CACHE", "my/cache")
    nb = write_notebook(fake_repo / "notebooks" / "p" / "env.ipynb",
                        ["import os, pathlib\npathlib.Path('seen.txt').write_text(os.environ['LAYERSIM_CACHE'])"])
    assert runner.main(["--scale", "smoke", "--nb", "env"]) == 0
    assert (nb.parent / "seen.txt").read_text() == str(fake_repo / "my" / "cache")


def test_only_relative_path_variables_are_rewritten(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"LAYERSIM_CACHE": "c", "LAYERSIM_DATA": "/abs/data", "LAYERSIM_OUT": "", "OTHER": "rel"}
    assert runner.absolute_path_variables(env) == {"LAYERSIM_CACHE": str(tmp_path / "c")}
    assert env == {"LAYERSIM_CACHE": str(tmp_path / "c"), "LAYERSIM_DATA": "/abs/data", "LAYERSIM_OUT": "",
                   "OTHER": "rel"}


def test_empty_selection(fake_repo, capsys):
    write_notebook(fake_repo / "notebooks" / "p" / "n.ipynb", [])
    assert runner.main(["--nb", "zzz"]) == 2


@pytest.mark.parametrize("argv, message", [
    (["--scale", "huge"], "invalid choice: 'huge'"),
    (["--refs", "--scale", "huge"], "invalid choice: 'huge'"),
    (["--refs", "--scale", "default"], "--scale default is not allowed"),
    (["--scale", "default", "-p", "scale", "smoke"], "not -p scale"),
    (["--scale", "smoke", "-p", "scale", "default"], "not -p scale"),
    (["--refs", "-p", "n", "3"], "-p is not allowed"),
    (["-p", "n", "3", "-p", "n", "4"], "-p n given more than once"),
    (["-p", "nosuch", "1"], "p/n has no parameter 'nosuch'; its parameters are seed, n"),
    (["--scale", "smoke", "--update-committed"], "only with --scale default"),
    (["--update-committed", "-p", "n", "3"], "only with --scale default, without -p"),
    (["--refs", "--update-committed"], "without --refs"),
    (["--update-committed", "--resume"], "--resume keeps the finished notebooks"),
    (["--refs", "--resume"], "not with --update-committed or --refs"),
])
def test_bad_arguments_are_usage_errors_and_nothing_runs(fake_repo, capsys, argv, message):
    write_notebook(fake_repo / "notebooks" / "p" / "n.ipynb", [], 'scale = "default"\nseed = 0\nn = None')
    with pytest.raises(SystemExit) as exit_info:
        runner.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (fake_repo / "runs").exists() and not (fake_repo / "tests").exists()


def test_unknown_parameter_is_named_for_each_notebook_that_lacks_it(fake_repo):
    write_notebook(fake_repo / "notebooks" / "p" / "a.ipynb", [], 'scale = "default"\nn = None')
    write_notebook(fake_repo / "notebooks" / "p" / "b.ipynb", [], 'scale = "default"\nm = None')
    lines = runner.unknown_parameters(plans.discover(""), {"n": 1})
    assert lines == ["p/b has no parameter 'n'; its parameters are m"]


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_runs_with_parameters_or_other_scales_leave_committed_files_alone(fake_repo):
    """Real papermill runs of a notebook that writes through results.output_dir: the committed
    notebook and figures/ change only in the plain default run (the control)."""
    writes = ("from layersim.notebook import results\n"
              "(results.output_dir('p', 'n', scale) / 'out.txt').write_text(f'{scale} {n}')\n"
              "results.write_metrics(results.output_dir('p', 'n', scale), 'p/n', scale, {}, {})")
    nb = write_notebook(fake_repo / "notebooks" / "p" / "n.ipynb", [writes], 'scale = "default"\nn = None')
    (fake_repo / "figures" / "p" / "n").mkdir(parents=True)
    (fake_repo / "figures" / "p" / "n" / "out.txt").write_text("committed")
    before = {**_snapshot(fake_repo / "notebooks"), **_snapshot(fake_repo / "figures")}
    for argv in (["--scale", "default"], ["--scale", "default", "-p", "n", "7"], ["--scale", "smoke"],
                 ["--scale", "paper"], ["--refs"]):
        assert runner.main(argv) == 0, argv
        assert {**_snapshot(fake_repo / "notebooks"), **_snapshot(fake_repo / "figures")} == before, argv
    assert (fake_repo / "runs" / "default" / "p" / "n" / "out.txt").read_text() == "default 7"
    assert (fake_repo / "runs" / "smoke" / "p" / "n" / "out.txt").read_text() == "smoke None"
    assert (fake_repo / "runs" / "paper" / "p" / "n" / "out.txt").read_text() == "paper None"
    assert runner.main(["--scale", "default", "--update-committed"]) == 0  # the control: only this run publishes
    assert (fake_repo / "figures" / "p" / "n" / "out.txt").read_text() == "default None"
    assert nb.read_text() != before["p/n.ipynb"].decode()


@pytest.mark.slow
def test_refs_keep_only_the_checked_outputs(fake_repo):
    writes = ("from layersim.notebook import results\n"
              "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
              "OUT = results.output_dir('p', 'r', scale)\n"
              "results.save_figure(plt.figure(), OUT, 'fig')\n"
              "results.write_metrics(OUT, 'p/r', scale, {'n': 3}, {'c': results.claim(0.5, 0.3)},"
              " curve=[1.0, 2.0], models={'m': {'train_seconds': 1.5}})")
    nb = write_notebook(fake_repo / "notebooks" / "p" / "r.ipynb", ["print('noise')", writes, "6 * 7"])
    data = json.loads(nb.read_text())
    data["cells"][3]["metadata"]["tags"] = ["nbval-check-output"]
    nb.write_text(json.dumps(data))
    stale = fake_repo / "runs" / "smoke" / "p" / "r"
    stale.mkdir(parents=True)
    (stale / "old.png").write_bytes(b"left by an earlier run")
    assert runner.main(["--refs", "--nb", "r"]) == 0
    metrics = json.loads((fake_repo / "tests" / "notebooks" / "p" / "r.metrics.json").read_text())
    assert metrics["claims"]["c"]["holds"] is True and metrics["curve"] == [1.0, 2.0]
    assert metrics["png_files"] == ["fig.png"], "the reference lists this run's figures alone"
    assert metrics["models"] == {"m": {}}, "timings are left out of the reference"
    ref = json.loads((fake_repo / "tests" / "notebooks" / "p" / "r.ipynb").read_text())
    outputs = {"".join(c["source"]): c.get("outputs") for c in ref["cells"] if c["cell_type"] == "code"}
    assert outputs["print('noise')"] == []
    assert "".join(outputs["6 * 7"][0]["data"]["text/plain"]) == "42"
    assert 'scale = "smoke"' in "".join(ref["cells"][1]["source"])  # the injected parameters
    seconds = ref["metadata"]["papermill"]
    assert set(seconds) == {"duration"}, "of papermill's run metadata only the wall time is kept"
    assert 0 < seconds["duration"] < 600 and seconds["duration"] == round(seconds["duration"], 1)
    assert all("papermill" not in c["metadata"] and "execution" not in c["metadata"] for c in ref["cells"])


@pytest.mark.slow
def test_a_reference_needs_the_runs_metrics(fake_repo, capsys):
    write_notebook(fake_repo / "notebooks" / "p" / "q.ipynb", ["6 * 7"])
    assert runner.main(["--refs", "--nb", "q"]) == 1
    assert "wrote no metrics.json: a smoke reference needs the run's results.write_metrics" in capsys.readouterr().out


def test_unknown_parameter_of_a_real_notebook_lists_its_parameters(monkeypatch):
    monkeypatch.delenv("LAYERSIM_ROOT", raising=False)
    t01 = plans.discover("t01_cos_vs_cka")
    assert len(t01) == 1
    (line,) = runner.unknown_parameters(t01, {"nosuch": 1, "depth": 3})
    assert line.startswith("tracing/t01_cos_vs_cka has no parameter 'nosuch'; its parameters are seed, device, ")
    assert "patch_size" in line and "depth" in line
    assert runner.unknown_parameters(t01, {"depth": 3}) == []


SEEDED = ("from layersim.notebook import results\nfrom layersim.notebook.run import start\n"
          "run = start('p/s', {'default': {}, 'smoke': {}}, globals(), style=False)\n"
          "assert seed != FAIL_AT, 'this seed fails'\n"
          "run.record({'up': results.claim(seed, 1, '>=')}, show=False)")


@pytest.mark.slow
def test_claims_are_judged_over_the_seeds_and_only_the_own_run_publishes(fake_repo, capsys):
    nb = write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [SEEDED.replace("FAIL_AT", "-1")],
                        params='scale = "default"\nseed = 0')
    assert runner.main(["--scale", "default", "--update-committed", "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 seeds" in out and "seed 1: ok" in out and "seed 2: ok" in out
    assert "claims: 1 of 1 hold: up 2/3" in out
    timed = json.loads((fake_repo / "figures" / "p" / "s" / "metrics.json").read_text())["seed_run_seconds"]
    assert sorted(timed) == ["1", "2"] and all(t > 0 for t in timed.values())  # the other seeds' wall times
    c = json.loads((fake_repo / "figures" / "p" / "s" / "metrics.json").read_text())["claims"]["up"]
    assert c["seeds"] == [0, 1, 2] and c["values"] == [0.0, 1.0, 2.0]  # the own seed first
    assert (c["k"], c["n"], c["holds"], c["value"]) == (2, 3, True, 1.0)
    for s in (1, 2):  # the other seeds wrote their own folders, not the committed ones
        assert (fake_repo / "runs" / "default" / "seeds" / f"seed-{s}" / "p" / "s" / "metrics.json").is_file()
    assert "injected-parameters" in nb.read_text()


@pytest.mark.slow
def test_resume_keeps_the_finished_notebooks_and_runs_the_rest(fake_repo, capsys):
    cell = SEEDED.replace("'p/s'", "'p/STEM'")
    write_notebook(fake_repo / "notebooks" / "p" / "a.ipynb", [cell.replace("STEM", "a").replace("FAIL_AT", "-1")],
                   params='scale = "default"\nseed = 0')
    b = write_notebook(fake_repo / "notebooks" / "p" / "b.ipynb", [cell.replace("STEM", "b").replace("FAIL_AT", "0")],
                       params='scale = "default"\nseed = 0')  # its own run (seed 0) fails
    assert runner.main(["--scale", "default", "--seeds", "2"]) == 1
    capsys.readouterr()
    a_run = fake_repo / "runs" / "default" / "p" / "a" / "metrics.json"
    first = a_run.read_text()
    job = runner.plans.Job("default", seeds=2)
    assert resume.finished(fake_repo / "notebooks" / "p" / "a.ipynb", job, ["scale", "seed"])
    assert not resume.finished(b, job, ["scale", "seed"])
    assert not resume.finished(fake_repo / "notebooks" / "p" / "a.ipynb", runner.plans.Job("default", seeds=3),
                               ["scale", "seed"])  # fewer seeds than asked: not finished
    write_notebook(b, [cell.replace("STEM", "b").replace("FAIL_AT", "-1")], params='scale = "default"\nseed = 0')
    assert runner.main(["--scale", "default", "--seeds", "2", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "p/a: finished earlier, kept (--resume); claims: 0 of 1 hold: up 1/2 (misses)" in out, out
    assert "[1/1] p/b (scale=default) ..." in out and "[1/1] p/b: ok" in out and "2 notebooks ok" in out
    assert a_run.read_text() == first  # not run again


@pytest.mark.slow
def test_a_failed_seed_stops_the_notebook_before_its_own_run(fake_repo, capsys):
    nb = write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [SEEDED.replace("FAIL_AT", "1")],
                        params='scale = "default"\nseed = 0')
    before = nb.read_text()
    assert runner.main(["--scale", "default", "--update-committed"]) == 1  # 3 seeds at the default scale
    out = capsys.readouterr().out
    assert "seed 1: FAILED" in out and "this seed fails" in out and "seed 2" not in out
    assert nb.read_text() == before and not (fake_repo / "figures" / "p" / "s" / "metrics.json").exists()


@pytest.mark.slow
def test_a_notebook_without_a_seed_runs_once(fake_repo, capsys):
    write_notebook(fake_repo / "notebooks" / "p" / "n.ipynb", ["y = 2"])
    assert runner.main(["--scale", "default"]) == 0
    assert "one run: p/n has no seed parameter" in capsys.readouterr().out
    assert not (fake_repo / "runs" / "default" / "seeds").exists()


@pytest.mark.slow
def test_a_scale_check_runs_the_larger_settings_into_its_own_folder(fake_repo, capsys, monkeypatch):
    from layersim.notebook import seeds

    larger = ("from layersim.notebook import results, settings\nfrom layersim.notebook.run import start\n"
              "run = start('p/s', {'default': {'size': 1}, 'smoke': {'size': 1}}, globals(), style=False,\n"
              "            rules={'size': settings.integer(1)})\n"
              "run.record({'up': results.claim(run.P['size'], 2, '>=')}, show=False)")
    nb = write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [larger],
                        params='scale = "default"\nseed = 0\nsize = None')
    before = nb.read_text()
    monkeypatch.setitem(seeds.SCALE_CHECKS, "s", {"size": 3})
    assert runner.main(["--scale-check", "--update-committed"]) == 0
    assert "claims: 1 of 1 hold: up 1/1" in capsys.readouterr().out
    check = fake_repo / "figures" / "scale_checks" / "p" / "s"
    m = json.loads((check / "metrics.json").read_text())
    assert m["params"]["size"] == 3 and m["claims"]["up"]["holds"] and (check / "s.ipynb").is_file()
    assert nb.read_text() == before and not (fake_repo / "figures" / "p").exists()  # the notebook's own results untouched
    assert runner.main(["--scale-check", "--seeds", "2"]) == 0  # without the switch: runs/, and other seeds' folders
    assert json.loads((fake_repo / "runs" / "default" / "scale_checks" / "p" / "s" / "metrics.json").read_text()
                      )["claims"]["up"]["seeds"] == [0, 1]
    assert (fake_repo / "runs" / "default" / "seeds" / "scale_checks" / "seed-1" / "p" / "s" / "metrics.json").is_file()


def test_a_scale_check_is_refused_with_other_settings(fake_repo, monkeypatch, capsys):
    from layersim.notebook import seeds

    write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", ["x = 1"], params='scale = "default"\nseed = 0')
    for argv in (["--scale-check", "--scale", "smoke"], ["--scale-check", "-p", "seed", "1"]):
        with pytest.raises(SystemExit):
            runner.main(argv)
        assert "--scale-check runs the default scale" in capsys.readouterr().err
    assert runner.main(["--scale-check"]) == 2  # no notebook with a scale check
    assert "with a scale check" in capsys.readouterr().err
    monkeypatch.setitem(seeds.SCALE_CHECKS, "s", {"width": 3})
    with pytest.raises(SystemExit):
        runner.main(["--scale-check"])
    assert "SCALE_CHECKS: p/s has no parameter 'width'" in capsys.readouterr().err


# --- the committed outputs name no machine's folders -------------------------------------------------------------

_MACHINE = re.compile(r"(?<![\w.])(?:/home/|/root/|/Users/|/tmp/|/work/|/private/|[A-Z]:\\\\(?:Users|tmp)\\\\)")


def _committed_outputs() -> list[Path]:
    return sorted([*REPO.glob("notebooks/*/*.ipynb"), *REPO.glob("figures/**/*.ipynb"),
                   *REPO.glob("figures/**/metrics.json"), *REPO.glob("tests/notebooks/**/*.ipynb"),
                   *REPO.glob("tests/notebooks/**/*.metrics.json")])


def test_no_committed_notebook_or_metrics_file_names_a_machines_folder():
    """Every committed notebook (the paper notebooks, the scale checks, the report's examples, the smoke references)
    and every committed metrics.json: no absolute path of this checkout, nor of a home, temporary or work folder."""
    outputs = _committed_outputs()
    assert len(outputs) > 60
    here = {str(REPO), str(REPO.resolve())}
    found = []
    for path in outputs:
        text = path.read_text(encoding="utf-8")
        hits = [h for h in here if h in text] + [m.group(0) for m in _MACHINE.finditer(text)]
        if hits:
            found.append(f"{path.relative_to(REPO)}: {sorted(set(hits))}")
    assert not found, "\n".join(found)


def test_the_folder_check_finds_a_machines_folder():
    assert _MACHINE.search('"output_path": "/home/ada/layersim/figures/x.ipynb"')
    assert _MACHINE.search("writing to C:\\\\Users\\\\ada\\\\runs")
    assert not _MACHINE.search("figures/scale_checks/a05/a05.ipynb and https://example.org/work/x")


# --- bad arguments, a closed Ray address, a failed notebook's outputs, widgets ------------------------------------


@pytest.mark.parametrize("argv, message", [(["--jobs", "0"], "--jobs is a number >= 1")])
def test_bad_batch_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        runner.main(argv)
    assert message in capsys.readouterr().err


def _closed_port() -> int:
    """A local port that was just bound and closed again: nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_runner_refuses_a_closed_port_in_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    """``runner --address host:port`` of a closed port repeated a connection error for minutes."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    write_notebook(root / "notebooks" / "p" / "n.ipynb", ["1"])
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        runner.main(["--scale", "smoke", "--jobs", "2", "--address", f"127.0.0.1:{_closed_port()}"])
    assert exc.value.code == 2 and time.perf_counter() - t0 < 5
    err = capsys.readouterr().err
    assert "Traceback" not in err and len([line for line in err.splitlines() if "error:" in line]) == 1
    assert "nothing listens" in err and not (root / "runs").exists()


def _write_outputs(stem: str, value: int) -> str:
    """A cell that writes a run's outputs (a figure and metrics.json) where the notebook's run writes them."""
    return (f"from layersim.notebook import results\nout = results.output_dir('demo', {stem!r}, 'default')\n"
            f"(out / 'metrics.json').write_text('{{\"run\": {value}}}')\n(out / 'fig.png').write_bytes(b'{value}')")


def test_the_serial_runner_puts_back_the_committed_outputs_of_a_failed_notebook(tmp_path):
    root = tmp_path / "repo"
    write_notebook(root / "notebooks" / "demo" / "fails.ipynb",
                   [_write_outputs("fails", 2), "raise RuntimeError('planted failure')"])
    old = root / "figures" / "demo" / "fails"
    old.mkdir(parents=True)
    (old / "metrics.json").write_text('{"run": 1}')
    env = {**os.environ, "LAYERSIM_ROOT": str(root), "LAYERSIM_CACHE": str(tmp_path / "cache")}
    got = subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "default", "--update-committed",
                          "--seeds", "1"], env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert got.returncode == 1 and "planted failure" in got.stdout, got.stdout + got.stderr
    assert [p.name for p in old.iterdir()] == ["metrics.json"] and (old / "metrics.json").read_text() == '{"run": 1}'


# --- committed results, users' files and LAYERSIM_OUT, in a repository with committed figures --------------------


def _notebook(path: Path, cells: list[str]) -> Path:
    """A notebook with the parameters ``scale``, ``n`` and ``out`` (:func:`builders.write_notebook`)."""
    return write_notebook(path, cells, 'scale = "default"\nn = None\nout = None')


WRITES = ("from layersim.notebook import results\n"
          "OUT = results.output_dir('p', 'n', scale)\n"
          "results.write_metrics(OUT, 'p/n', scale, {'n': n}, {})")


def test_runner_refuses_out_and_layersim_out_into_figures_before_running(repo_with_figures, monkeypatch, capsys):
    _notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [WRITES])
    before = tree_files(repo_with_figures / "figures")
    with pytest.raises(SystemExit) as exc:  # an absolute -p out into figures/
        runner.main(["--scale", "smoke", "-p", "out", str(repo_with_figures / "figures" / "p" / "n")])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "-p out", "committed results")
    (repo_with_figures / "link").symlink_to(repo_with_figures / "figures")
    monkeypatch.setenv("LAYERSIM_OUT", str(repo_with_figures / "link"))
    with pytest.raises(SystemExit) as exc:  # LAYERSIM_OUT through a symlink
        runner.main(["--scale", "default", "-p", "n", "3"])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "LAYERSIM_OUT", "committed results")
    assert tree_files(repo_with_figures / "figures") == before and not (repo_with_figures / "runs").exists()


def test_the_runner_outside_the_repository_says_it_needs_one(outside_repository, capsys):
    with pytest.raises(SystemExit) as exc:
        runner.main(["--nb", "t01", "--list"])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "needs the layersim repository", "LAYERSIM_ROOT")


def test_a_folder_of_the_users_files_is_never_cleared(repo_with_figures, tmp_path, monkeypatch, capsys):
    """A run cleared every ``*.png`` and ``metrics.json`` of its output folder, whoever's they were: pointed at a
    folder of one's own pictures (``LAYERSIM_OUT=~/Pictures``), it deleted them. The runner refuses such a folder
    before anything runs (``results.output_dir``'s own refusal is tested with it)."""
    mine = tmp_path / "Pictures" / "p" / "n"
    mine.mkdir(parents=True)
    (mine / "holiday.png").write_bytes(b"mine")
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "Pictures"))
    _notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [WRITES])
    with pytest.raises(SystemExit) as exc:  # the runner refuses before anything runs
        runner.main(["--scale", "smoke", "--nb", "p/n"])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "holiday.png", "did not write")
    assert tree_files(tmp_path / "Pictures") == {"p/n/holiday.png": b"mine"}


@pytest.mark.slow
def test_a_relative_layersim_out_reaches_the_kernel_absolute(repo_with_figures, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    _notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [WRITES])
    assert runner.main(["--scale", "smoke"]) == 0
    assert (here / "mine" / "p" / "n" / "metrics.json").is_file()
    assert not (repo_with_figures / "notebooks" / "p" / "mine").exists()


# --- the runner's batch, in a repository with committed figures --------------------------------------------------


@pytest.mark.slow
def test_a_corrupt_notebook_is_named_and_the_others_run(repo_with_figures, capsys):
    _notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [WRITES])
    (repo_with_figures / "notebooks" / "p" / "broken.ipynb").write_text('{"cells": [ not json')
    assert runner.main(["--scale", "smoke"]) == 1
    captured = capsys.readouterr()
    assert "broken.ipynb is not a readable notebook (NotJSONError" in captured.err
    assert "p/n: ok" in captured.out and "1 notebooks ok, 1 failed" in captured.out
    assert "Traceback" not in captured.out + captured.err


@pytest.mark.parametrize("selection", [",", " , ", ",,"])
def test_a_selection_that_names_no_notebook_is_not_every_notebook(repo_with_figures, capsys, selection):
    """``--nb ","`` (a typo, an empty shell variable joined with commas) selected every notebook: with
    --update-committed, a 50-minute job instead of a one-line refusal."""
    _notebook(repo_with_figures / "notebooks" / "p" / "n.ipynb", [WRITES])
    with pytest.raises(SystemExit) as exc:
        runner.main(["--nb", selection])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "names no notebook")
    assert not (repo_with_figures / "runs").exists()


def run_t03_smoke(tmp_path, terminal: bool) -> tuple[int, list[tuple[float, str]]]:
    """``runner --scale smoke --nb t03`` with an empty cache (so that it trains) and its outputs in ``tmp_path``, its
    stdout and stderr a pseudo-terminal 400 columns wide (``terminal``) or a pipe; returns the exit status and what it
    wrote, as (seconds since the start, text) chunks."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    env = {**os.environ, "LAYERSIM_CACHE": str(tmp_path / "cache"), "LAYERSIM_OUT": str(tmp_path / "out"),
           "COLUMNS": "400"}  # a COLUMNS that make or pytest set would cut the line shorter than the terminal
    argv = [sys.executable, "-m", "layersim.tools.runner", "--scale", "smoke", "--nb", "t03_aligned_training"]
    if not terminal:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        return done.returncode, [(0.0, done.stdout + done.stderr)]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 400, 0, 0))
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while time.monotonic() - t0 < 600:
        ready, _, _ = select.select([master], [], [], 0.5)
        try:
            data = os.read(master, 65536) if ready else b""
        except OSError:  # the child closed the terminal
            break
        if data:
            chunks.append((time.monotonic() - t0, data.decode("utf-8", "replace")))
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), chunks


@pytest.mark.slow
def test_a_run_in_a_terminal_shows_the_cell_and_the_training_with_its_rate_every_second(tmp_path):
    code, chunks = run_t03_smoke(tmp_path, terminal=True)
    assert code == 0, "".join(text for _, text in chunks)[-2000:]
    status = [(t, part) for t, text in chunks for part in text.split("\r\x1b[K")[1:] if part.strip()]
    lines = [part for _, part in status]
    assert any(re.search(r"cell \d+/\d+ Train \(or load\) every model", s) for s in lines), lines
    rated = [s for s in lines if re.search(r"\d+/\d+ \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(it/s|s/it)\]", s)]
    assert rated, f"no training bar with its rate and ETA in {lines}"
    times = [t for t, _ in status]
    assert len(times) >= 5 and max(b - a for a, b in zip(times, times[1:])) < 5, times  # updated every second or so
    assert "[1/1] tracing/t03_aligned_training: ok" in "".join(text for _, text in chunks)  # however it was chunked


@pytest.mark.slow
def test_a_run_without_a_terminal_prints_one_line_per_notebook(tmp_path):
    code, [(_, out)] = run_t03_smoke(tmp_path, terminal=False)
    assert code == 0, out[-2000:]
    assert "\x1b[" not in out and "\r" not in out and " · cell " not in out
    assert re.search(r"^\[1/1\] tracing/t03_aligned_training \(scale=smoke\) \.\.\.$", out, re.M)
    assert re.search(r"^\[1/1\] tracing/t03_aligned_training: ok \([\d.]+ s\)$", out, re.M)


# --- budget ladders: rung by rung, resumable ---------------------------------------------------------------------

SIZED = ("from layersim.notebook import results, settings\nfrom layersim.notebook.run import start\n"
         "run = start('p/s', {'default': {'size': 1}, 'smoke': {'size': 1}}, globals(), style=False,\n"
         "            rules={'size': settings.integer(1)})\n"
         "run.record({'up': results.claim(run.P['size'] + seed, 3, '>=')}, show=False)")


@pytest.fixture
def sized(fake_repo, monkeypatch):
    """A notebook ``p/s`` whose claim ``up`` is ``size + seed >= 3``, and a ladder ``x`` of it over sizes 1, 2, 4 at
    2 seeds."""
    write_notebook(fake_repo / "notebooks" / "p" / "s.ipynb", [SIZED], params='scale = "default"\nseed = 0\nsize = None')
    ladder = ladders.Ladder("x", "size", (("p/s", "up"),), {b: {"s": {"size": b}} for b in (1, 2, 4)}, "a test",
                            seeds=2)
    monkeypatch.setitem(ladders.LADDERS, "x", ladder)
    return fake_repo


@pytest.mark.slow
def test_a_ladder_runs_its_rungs_into_their_folders_and_resumes(sized, capsys):
    assert runner.main(["--ladder", "x", "--update-committed"]) == 0
    out = capsys.readouterr().out
    assert out.index("rung 1 (size)") < out.index("rung 2 (size)") < out.index("rung 4 (size)")
    rungs = ladders.rungs_of(sized / "figures", "p/s", "up")
    assert [r.budget for r in rungs] == [1.0, 2.0, 4.0]
    assert [r.claim["values"] for r in rungs] == [[1.0, 2.0], [2.0, 3.0], [4.0, 5.0]]  # size + seed, seeds 0 and 1
    folder = ladders.rung_folder(sized / "figures", "x", 2) / "p" / "s"
    assert json.loads((folder / "wall_time.json").read_text())["seconds"] > 0  # the own run's time, beside
    assert sorted(json.loads((folder / "metrics.json").read_text())["seed_run_seconds"]) == ["1"]
    assert not (folder / "s.ipynb").exists()  # a rung commits results, not a copy of the notebook
    kept = json.loads((folder / "seeds" / "seed-1" / "metrics.json").read_text())  # every seed's numbers committed
    assert kept["claims"]["up"]["value"] == 3.0 and (folder / "seeds" / "seed-1" / "wall_time.json").is_file()
    assert [r["params"]["seed"] for r in ladders.rung_records(sized / "figures", "x", 2, "p/s")] == [0, 1]
    assert not (sized / "figures" / "p").exists()  # the notebook's own committed results untouched
    before = (folder / "metrics.json").read_text()
    shutil.rmtree(ladders.rung_folder(sized / "figures", "x", 4) / "p" / "s")  # a rung that did not finish
    assert runner.main(["--ladder", "x", "--update-committed"]) == 0
    out = capsys.readouterr().out
    assert "p/s: finished earlier, kept (rung 1 of x)" in out and "kept (rung 2 of x)" in out
    assert out.count("[1/1] p/s (scale=default) ...") == 1 and "rung 4 of x" not in out  # only rung 4 ran again
    assert (folder / "metrics.json").read_text() == before
    assert len(ladders.rungs_of(sized / "figures", "p/s", "up")) == 3


@pytest.mark.slow
def test_a_rung_stopped_between_seeds_goes_on_with_the_seeds_it_lacks(sized, capsys):
    """Each seed's records are kept in the rung's folder when its run ends: a rung whose own run (the last) never
    ended runs that alone, with the kept seed; a kept seed of other settings runs again."""
    assert runner.main(["--ladder", "x", "--rung", "2", "--update-committed"]) == 0
    folder = ladders.rung_folder(sized / "figures", "x", 2) / "p" / "s"
    seed_1 = (folder / "seeds" / "seed-1" / "metrics.json").read_text()
    for name in ("metrics.json", "wall_time.json"):  # as a stop during the own run leaves it
        (folder / name).unlink()
    assert ladders.rung_records(sized / "figures", "x", 2, "p/s") == []  # a rung without its own run has not ended
    assert ladders.rungs_of(sized / "figures", "p/s", "up") == []
    capsys.readouterr()
    assert runner.main(["--ladder", "x", "--rung", "2", "--update-committed"]) == 0
    out = capsys.readouterr().out
    assert "seed 1: finished earlier, kept" in out and "seed 1: ok" not in out
    assert (folder / "seeds" / "seed-1" / "metrics.json").read_text() == seed_1
    assert [r.claim["values"] for r in ladders.rungs_of(sized / "figures", "p/s", "up")] == [[2.0, 3.0]]
    assert sorted(json.loads((folder / "metrics.json").read_text())["seed_run_seconds"]) == ["1"]
    stale = json.loads(seed_1)
    stale["params"]["size"] = 4
    (folder / "seeds" / "seed-1" / "metrics.json").write_text(json.dumps(stale))
    (folder / "wall_time.json").unlink()  # the rung's own run not ended, its kept seed from other settings
    assert runner.main(["--ladder", "x", "--rung", "2", "--update-committed"]) == 0
    assert "seed 1: ok" in capsys.readouterr().out  # ran again
    assert json.loads((folder / "seeds" / "seed-1" / "metrics.json").read_text())["params"]["size"] == 2


@pytest.mark.parametrize("argv, message", [
    (["--ladder", "nope"], "unknown ladder(s) 'nope'"),
    (["--ladder", "x", "--rung", "3"], "x has no rung 3: its rungs are 1, 2, 4"),
    (["--rung", "2"], "--rung picks a rung of --ladder"),
    (["--ladder", "x", "-p", "size", "2"], "--ladder runs each rung with its settings"),
    (["--ladder", "x", "--nb", "s"], "--ladder runs each rung with its settings"),
    (["--ladder", "x", "--scale", "smoke"], "--ladder runs each rung with its settings"),
])
def test_bad_ladder_arguments_are_usage_errors(sized, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        runner.main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (sized / "runs").exists() and not (sized / "figures").exists()


def test_a_rung_setting_the_notebook_lacks_stops_the_ladder_before_any_work(sized, capsys, monkeypatch):
    ladder = ladders.Ladder("y", "size", (("p/s", "up"),), {1: {"s": {"size": 1}}, 2: {"s": {"width": 2}},
                                                            4: {"s": {"size": 4}}}, "a test")
    monkeypatch.setitem(ladders.LADDERS, "y", ladder)
    with pytest.raises(SystemExit):
        runner.main(["--ladder", "y"])
    assert "ladder y, rung 2: p/s has no parameter 'width'" in capsys.readouterr().err
    assert not (sized / "runs").exists()


def test_a_failure_line_holds_the_errors_first_line():
    """An exception with a message of several lines (a missing asset: the places looked follow) fails its notebook
    in one line, the one that names the asset and the command that fetches it."""
    from papermill.exceptions import PapermillExecutionError

    from layersim.inputs.assets import AssetNotFoundError

    err = AssetNotFoundError("cifar10", ["torchvision root /c"], "copy it", "downloads are off: fetch it ahead")
    exc = PapermillExecutionError(4, 3, "x = image_data.load('cifar10')\nmore", "AssetNotFoundError", str(err), [])
    assert runner.describe_failure(exc) == ("cell 5 (execution count 3): AssetNotFoundError: asset 'cifar10' not "
                                            "found: downloads are off: fetch it ahead  [x = image_data.load('cifar10')]")
