"""The command lines and writers under hostile and careless input.

Every case asserts what a user must see: one line that names the problem (no traceback), a non-zero
exit for a command line, nothing written into the committed results (``figures/``, ``notebooks/``) and
no temporary file left behind. The array measures, models and data loaders have their own files
(``test_hostile_measures.py``, ``test_hostile_data.py``); CONTRIBUTING says how to add a case.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import nbformat
import pytest

from builders import one_line_error, temporaries, tree_files, write_notebook
from layersim.core import markup, writers
from layersim.notebook import results
from layersim.tools import report, runner

PAYLOAD = "<svg onload=alert(2)>"


# ----------------------------------------------------------------------------- helpers


def _notebook(path: Path, cells: list[str]) -> Path:
    """A notebook with the parameters ``scale``, ``n`` and ``out`` (:func:`builders.write_notebook`)."""
    return write_notebook(path, cells, 'scale = "default"\nn = None\nout = None')






@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of its own: committed figures/ and notebooks/, the switch off, LAYERSIM_OUT unset."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "figures" / "p" / "n").mkdir(parents=True)
    (root / "figures" / "p" / "n" / "metrics.json").write_text('{"committed": true}')
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    monkeypatch.delenv(writers.SWITCH, raising=False)
    return root


WRITES = ("from layersim.notebook import results\n"
          "OUT = results.output_dir('p', 'n', scale)\n"
          "results.write_metrics(OUT, 'p/n', scale, {'n': n}, {})")


# ----------------------------------------------------------------------------- HTML


def test_html_in_a_report_table_is_inert():
    """The layer report showed a skip reason quoting the data path as raw Markdown: a folder named
    ``imgs_<svg onload=...>`` became a live element of report.html."""
    data = report.Report.__new__(report.Report)
    data.data = type("D", (), {"layers": [0, 1], "n_entries": 2})()
    data.results, data.skipped = {}, {"logit_lens/accuracy": f"the head was not trained on /tmp/imgs_{PAYLOAD}'s classes"}
    table = report.summary_table(data)
    assert PAYLOAD not in table and "&lt;svg onload=alert(2)&gt;" in table
    assert markup.cell("a | b\nc") == "a &#124; b c"  # one cell, one line
    assert markup.code("cka/to_last") == "`cka/to_last`" and markup.code("x`y") == "<code>x&#96;y</code>"
    rows = results.claims_table({f"c{PAYLOAD}": results.claim(1.0, 0.5, note=PAYLOAD)})
    assert "<svg" not in rows


def test_exported_html_sanitises_markdown_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("display(Markdown(x))")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": f"| a |\n|---|\n| {PAYLOAD} |",
                                                                  "text/plain": "<Markdown>"})]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "x.ipynb")
    html = report.export_html(tmp_path / "x.ipynb", tmp_path / "x.html").read_text()
    assert "onload=alert" not in html.replace("&lt;svg onload=alert(2)&gt;", "")


@pytest.mark.slow
def test_report_on_an_image_folder_named_with_html(tmp_path, capsys):
    """The original case end to end: the data path reaches report.html only as text."""
    import numpy as np
    from PIL import Image

    from layersim.__main__ import main

    folder = tmp_path / f"imgs_{PAYLOAD}"
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (folder / label).mkdir(parents=True)
        for i in range(8):
            Image.fromarray((rng.random((28, 28)) * 255).astype("uint8")).save(folder / label / f"{i}.png")
    out = tmp_path / "rep"
    assert main(["report", "--model", "tracing-vit:smoke", "--data", str(folder), "--scale", "smoke", "--n", "16",
                 "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "&lt;svg onload=alert(2)&gt;" in html  # the reason quoting the path is there, as text
    assert "<svg onload" not in html


# ----------------------------------------------------------------------------- committed results


@pytest.mark.parametrize("spelling", ["absolute", "relative", "dotdot", "symlink", "symlink then dotdot", "home"])
def test_every_spelling_of_a_path_into_figures_is_refused(repo, monkeypatch, spelling):
    """``symlink then dotdot``: with ``deep`` -> ``figures/p``, the operating system reads ``deep/../p/n`` as
    ``figures/p/n``; a guard that collapsed ``..`` before following the link read ``p/n`` and let the write in."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(repo))
    (repo / "elsewhere").mkdir()
    (repo / "link").symlink_to(repo / "figures")
    (repo / "deep").symlink_to(repo / "figures" / "p")
    path = {"absolute": repo / "figures" / "p" / "n", "relative": Path("figures/p/n"),
            "dotdot": Path("elsewhere/../figures/p/n"), "symlink": Path("link/p/n"),
            "symlink then dotdot": Path("deep/../p/n"), "home": Path("~/figures/p/n")}[spelling]
    with pytest.raises(writers.ProtectedPath, match="committed results"):
        writers.check_target(path)
    with pytest.raises(ValueError, match="committed results"):
        results.write_metrics(path, "p/n", "default", {}, {})
    import matplotlib.pyplot as plt

    fig = plt.figure()
    with pytest.raises(ValueError, match="committed results"):
        results.save_figure(fig, path, "f")
    plt.close(fig)
    with pytest.raises(ValueError, match="committed results"):
        report.check_out(path)
    monkeypatch.setenv(writers.SWITCH, "1")  # the one switch lets it through
    assert writers.check_target(path) == repo / "figures" / "p" / "n"
    assert json.loads((repo / "figures" / "p" / "n" / "metrics.json").read_text()) == {"committed": True}


def test_runner_refuses_out_and_layersim_out_into_figures_before_running(repo, monkeypatch, capsys):
    _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    before = tree_files(repo / "figures")
    with pytest.raises(SystemExit) as exc:  # an absolute -p out into figures/
        runner.main(["--scale", "smoke", "-p", "out", str(repo / "figures" / "p" / "n")])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "-p out", "committed results")
    (repo / "link").symlink_to(repo / "figures")
    monkeypatch.setenv("LAYERSIM_OUT", str(repo / "link"))
    with pytest.raises(SystemExit) as exc:  # LAYERSIM_OUT through a symlink
        runner.main(["--scale", "default", "-p", "n", "3"])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "LAYERSIM_OUT", "committed results")
    assert tree_files(repo / "figures") == before and not (repo / "runs").exists()


def test_report_refuses_committed_and_foreign_folders_in_one_line(repo, monkeypatch, capsys):
    from layersim.__main__ import main

    monkeypatch.chdir(repo)
    before = tree_files(repo / "figures")
    for argv, words in [
        (["--out", "figures/report/x"], ("committed results",)),
        (["--out", str(repo / "figures")], ("committed results",)),
        ([], ("LAYERSIM_OUT",)),  # LAYERSIM_OUT into figures/ (below)
    ]:
        if not argv:
            monkeypatch.setenv("LAYERSIM_OUT", "figures")
        with pytest.raises(SystemExit) as exc:
            main(["report", "--model", "all-minilm-l6-v2", "--data", "austen", *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        one_line_error(err, "committed results")
    monkeypatch.delenv("LAYERSIM_OUT")
    (repo / "mine").mkdir()
    (repo / "mine" / "thesis.tex").write_text("my own work")
    with pytest.raises(SystemExit):
        main(["report", "--model", "all-minilm-l6-v2", "--data", "austen", "--out", "mine"])
    one_line_error(capsys.readouterr().err, "holds files that no report wrote")
    assert (repo / "mine" / "thesis.tex").read_text() == "my own work"
    assert tree_files(repo / "figures") == before


def test_a_folder_of_the_users_files_is_never_cleared(repo, tmp_path, monkeypatch, capsys):
    """A run cleared every ``*.png`` and ``metrics.json`` of its output folder, whoever's they were: pointed at a
    folder of one's own pictures (``LAYERSIM_OUT=~/Pictures``, ``-p out``), it deleted them. A folder layersim did
    not make (no marker file, outside the repository's ``figures/`` and ``runs/``) is refused unless empty."""
    mine = tmp_path / "Pictures" / "p" / "n"
    mine.mkdir(parents=True)
    (mine / "holiday.png").write_bytes(b"mine")
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "Pictures"))
    with pytest.raises(ValueError, match=r"already holds files that layersim did not write \(holiday.png\)"):
        results.output_dir("p", "n", "default")
    _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    with pytest.raises(SystemExit) as exc:  # the runner refuses before anything runs
        runner.main(["--scale", "smoke", "--nb", "p/n"])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "holiday.png", "did not write")
    assert tree_files(tmp_path / "Pictures") == {"p/n/holiday.png": b"mine"}
    fresh = tmp_path / "fresh"  # a new folder is made and marked, and the next run may clear it
    monkeypatch.setenv("LAYERSIM_OUT", str(fresh))
    out = results.output_dir("p", "n", "default")
    (out / "old.png").write_bytes(b"an earlier run's")
    assert results.output_dir("p", "n", "default") == out and not (out / "old.png").exists()
    assert (out / writers.MARKER).is_file()


def test_the_executed_notebook_follows_layersim_out(repo, tmp_path, monkeypatch):
    """Two runners with their own LAYERSIM_OUT wrote the same executed notebook under runs/."""
    nb = _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "a"))
    target = runner.plan(nb, "smoke", params={})
    assert target.executed == tmp_path / "a" / "p" / "n" / "n.ipynb"
    assert runner.seed_plan(nb, "default", 1, repo, base=runner.seed_base(target, repo)).executed.is_relative_to(
        tmp_path / "a" / "seeds")


@pytest.mark.parametrize("writer, target", [("tolerances", "README.md"), ("readme", "tests/notebooks/tolerances.json"),
                                            ("smoke-refs", "figures/p/n/metrics.json"), ("results", "lib/x.py"),
                                            ("results", "../elsewhere.ipynb"), ("smoke-refs", "tests/test_x.py")])
def test_each_writer_of_committed_files_writes_only_its_own(repo, writer, target):
    with pytest.raises(writers.ProtectedPath, match="write only"):
        writers.write_committed(repo / target, "x", writer, repo)
    assert not (repo / "lib" / "x.py").exists() and not (repo / "README.md").exists()
    with pytest.raises(ValueError, match="unknown writer"):
        writers.write_committed(repo / "README.md", "x", "anyone", repo)
    writers.write_committed(repo / "tests" / "notebooks" / "tolerances.json", "{}", "tolerances", repo)


@pytest.mark.parametrize("where", ["lib/layersim", "tests/notebooks/p", "docs", "README.md"])
def test_no_output_folder_inside_the_sources(repo, monkeypatch, where):
    monkeypatch.setenv(writers.SWITCH, "1")  # not even with the switch of the committed results
    with pytest.raises(writers.ProtectedPath, match="committed sources"):
        writers.check_target(repo / where / "out")


# ----------------------------------------------------------------------------- safe writes


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, failure):
    target = tmp_path / "metrics.json"
    target.write_text("old")
    with pytest.raises(type(failure) if isinstance(failure, KeyboardInterrupt) else writers.DiskFull) as info:
        with writers.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise failure
    if isinstance(failure, OSError):
        assert str(info.value) == f"[Errno {errno.ENOSPC}] disk full at {target}"
    assert target.read_text() == "old" and temporaries(tmp_path) == []


def test_a_figure_that_fails_to_save_leaves_no_temporary(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()

    def full(*args, **kwargs):
        Path(args[0]).write_bytes(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fig, "savefig", full)
    with pytest.raises(writers.DiskFull, match="disk full at .*curve.png"):
        results.save_figure(fig, tmp_path, "curve")
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_output_dir_removes_an_earlier_runs_figures_and_checks_writability_first(repo, monkeypatch):
    folder = repo / "runs" / "smoke" / "p" / "n"
    folder.mkdir(parents=True)
    for name in ("old_figure.png", "metrics.json", "notes.txt"):
        (folder / name).write_text("earlier run")
    assert results.output_dir("p", "n", "smoke") == folder
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # only what runs write is removed
    (repo / "blocked").write_text("a file where the output root should be")
    monkeypatch.setenv("LAYERSIM_OUT", str(repo / "blocked"))
    with pytest.raises(ValueError, match="cannot write to .*blocked/p/n"):
        results.output_dir("p", "n", "smoke")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_folder_is_found_before_any_work(repo, monkeypatch):
    folder = repo / "runs" / "smoke" / "p" / "n"
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="cannot write to"):
            results.output_dir("p", "n", "smoke")
    finally:
        folder.chmod(0o755)


def test_a_relative_layersim_out_is_taken_from_the_working_directory(repo, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    assert results.run_folder("p", "n", "smoke") == here / "mine" / "p" / "n"
    nb = _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    assert runner.plan(nb, "smoke").out_root == here / "mine"  # what the kernel (in notebooks/p/) gets
    assert report.default_out("m", "d") == here / "mine" / "report" / "m__d"


@pytest.mark.slow
def test_a_relative_layersim_out_reaches_the_kernel_absolute(repo, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    assert runner.main(["--scale", "smoke"]) == 0
    assert (here / "mine" / "p" / "n" / "metrics.json").is_file()
    assert not (repo / "notebooks" / "p" / "mine").exists()


# ----------------------------------------------------------------------------- the runner's batch


@pytest.mark.slow
def test_a_corrupt_notebook_is_named_and_the_others_run(repo, capsys):
    _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    (repo / "notebooks" / "p" / "broken.ipynb").write_text('{"cells": [ not json')
    assert runner.main(["--scale", "smoke"]) == 1
    captured = capsys.readouterr()
    assert "broken.ipynb is not a readable notebook (NotJSONError" in captured.err
    assert "p/n: ok" in captured.out and "1 notebooks ok, 1 failed" in captured.out
    assert "Traceback" not in captured.out + captured.err


def test_a_glob_matches_the_notebooks_own_name(repo):
    for name in ("tracing/t07_early_exit", "tracing/t17_other", "alignment/a07_x"):
        _notebook(repo / "notebooks" / f"{name}.ipynb", [])
    assert [p.stem for p in runner.discover("t07*")] == ["t07_early_exit"]
    assert [p.stem for p in runner.discover("*/t07*")] == ["t07_early_exit"]
    assert [p.stem for p in runner.discover("t07_early_exit.ipynb")] == ["t07_early_exit"]


def test_a_default_run_without_the_switch_leaves_committed_results_alone(repo, capsys):
    nb = _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    target = runner.plan(nb, "default")
    assert target.publish is None and target.environment[writers.SWITCH] == "0"
    assert target.out_root == repo / "runs" / "default"


# ----------------------------------------------------------------------------- the report's checks


@pytest.mark.parametrize("argv, words", [
    (["--n", "-5"], ("n_samples", "-5")),
    (["--lenses", ""], ("--lenses", "names no lens")),
    (["--lenses", " , "], ("names no lens",)),
    (["--batch-size", "0"], ("batch_size",)),
    (["--max-length", "1"], ("max_length",)),
    (["--data", "/no/such/folder"], ("unknown data set",)),
    (["--lenses", "cka/matix"], ("cka/matix",)),
])
def test_report_refuses_bad_values_before_executing(repo, capsys, argv, words):
    from layersim.__main__ import main

    args = ["report", "--model", "all-minilm-l6-v2", "--data", "austen", "--out", str(repo / "out")]
    with pytest.raises(SystemExit) as exc:
        main(args + argv)
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, *words)
    assert not (repo / "out").exists()


def test_report_refuses_a_model_folder_without_weights(repo, capsys):
    import transformers as tr

    from layersim.__main__ import main

    tr.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64).save_pretrained(repo / "bert")
    with pytest.raises(SystemExit) as exc:
        main(["report", "--model", str(repo / "bert"), "--data", "austen", "--out", str(repo / "out")])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "no weights")


def test_report_folder_of_an_earlier_report_is_reused_without_its_old_figures(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "layer_report.ipynb").write_text("{}")
    (out / "per_step.png").write_bytes(b"old")
    (out / "report.html").write_text("old")
    assert report.output_folder(out, "smoke") == out
    assert sorted(p.name for p in out.iterdir()) == [writers.MARKER, "layer_report.ipynb"]  # adopted as layersim's


# ----------------------------------------------------------------------------- other command lines


@pytest.mark.parametrize("argv, words", [
    (["compare", "/no/such/run"], ("/no/such/run",)),
    (["compare", "figures", "git:no-such-revision"], ("no-such-revision",)),
])
def test_compare_names_a_missing_run(argv, words, capsys):
    from layersim.__main__ import main

    assert main(argv) == 2
    one_line_error(capsys.readouterr().err, *words)


@pytest.mark.parametrize("argv, words", [
    (["--layers", "1"], ("--layers",)),
    (["--shapes", "0x4"], ("--shapes",)),
    (["--shapes", "ten"], ("--shapes",)),
    (["train", "--steps", "0"], ("--steps",)),
    (["train", "--objectives", f"ce,{PAYLOAD}"], ("--objectives",)),
])
def test_bench_refuses_bad_arguments(argv, words, capsys):
    from layersim.tools import bench

    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, *words)


# ----------------------------------------------------------------------------- counts


@pytest.mark.parametrize("override, words", [
    ({"n_eval": 100000}, ("n_eval", "100000", "10000 images of the test split")),
    ({"n_eval": 2}, ("n_eval", ">= 10")),
    ({"dataset": "digits"}, ("n_train", "1437 images")),
])
def test_a_count_the_data_cannot_give_is_refused_before_anything_loads(override, words):
    """t01 recorded ``n_eval 100000`` in metrics.json while 10,000 test images were used; ``n_eval 2`` failed
    deep in the notebook. Its settings are checked against the split sizes now (``presets.check_vit_shape``)."""
    from layersim.notebook import presets, settings

    evals = {"smoke": {"n_eval": 256}, "default": {"n_eval": 5000}, "paper": {"n_eval": 10000}}
    table = {s: {**presets.TRACING_VIT[s], **evals[s]} for s in results.SCALES}
    with pytest.raises(ValueError) as info:
        settings.pick(table, "default", rules=presets.TRACING_VIT_RULES, derived=presets.TRACING_VIT_DERIVED,
                      checks=[presets.check_vit_shape], **override)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


@pytest.mark.parametrize("command", ["runner", "portable"])
@pytest.mark.parametrize("selection", [",", " , ", ",,"])
def test_a_selection_that_names_no_notebook_is_not_every_notebook(repo, capsys, command, selection):
    """``--nb ","`` (a typo, an empty shell variable joined with commas) selected every notebook: with
    --update-committed, a 50-minute job instead of a one-line refusal."""
    from layersim.tools import portable

    _notebook(repo / "notebooks" / "p" / "n.ipynb", [WRITES])
    main = runner.main if command == "runner" else portable.main
    with pytest.raises(SystemExit) as exc:
        main(["--nb", selection])
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, "names no notebook")
    assert not (repo / "runs").exists()
