"""Tests of layersim.tools.report and ``python -m layersim report``: the notebook run with papermill, its last cell,
and an HTML page with every section and figure.

Careless input is refused before any work: a lens subset, a device name, a cache inside the committed results, a
model or data path that is missing, a file or unreadable. Each refusal is one line that names the problem (no
traceback), exit status 2, and nothing written; ``~`` and relative paths reach the report's kernel as the user meant
them. A report stopped while it rewrites a committed example puts the example back. HTML in a data path stays inert
text, and the report never writes into the committed results (however the path is spelled) or a folder of someone
else's files.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from layersim.analysis import layer_report, lenses
from layersim.core import locks, paths, writers
from layersim.inputs import locate
from layersim.tools import committed, report
from builders import SPELLINGS, committed_files, one_line_error, spelled, tree_files


MINILM = "all-minilm-l6-v2"
needs_minilm = pytest.mark.skipif(not locate.is_available(MINILM), reason="MiniLM is not installed")
REPORT = ["report", "--model", MINILM, "--data", "austen"]
PAYLOAD = "<svg onload=alert(2)>"


def _refused(argv: list[str], capsys, *words: str) -> str:
    """Run ``python -m layersim`` with ``argv``: exit 2 and one ``error:`` line holding ``words`` (returned)."""
    from layersim.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return one_line_error(capsys.readouterr().err, *words)


@pytest.fixture
def kernel(monkeypatch):
    """papermill's execution replaced by a recorder: what a report would hand its kernel (the parameters and the
    path variables of the environment), without running it."""
    import papermill

    seen: dict = {}

    def record(source, target, parameters=None, **kwargs):
        seen["parameters"] = dict(parameters or {})
        seen["environ"] = {k: os.environ.get(k) for k in paths.VARIABLES}
        seen["cwd"] = kwargs.get("cwd")
        raise RuntimeError("recorded, not run")

    monkeypatch.setattr(papermill, "execute_notebook", record)
    return seen


@pytest.fixture
def no_accelerator(monkeypatch):
    """A machine without CUDA or MPS, whatever this one has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


# ----------------------------------------------------------------------------- the last cell


def test_the_last_cell_shows_only_the_lenses_that_ran():
    """The report's last cell read ``cka/to_last`` and ``cos/to_last`` whatever ``--lenses`` chose: a subset without
    them ran every lens and failed there, at the end."""
    rng = np.random.default_rng(0)
    data = lenses.LayerData(hidden=rng.standard_normal((3, 12, 4)), labels=None, layers=[1, 2, 3])
    r = layer_report.run_lenses(layer_report.LayerReport(data), ["cos/adjacent", "alignment/area"])
    assert report.key_numbers(r) == {"layers": 3, "ran": ["cos/adjacent"], "skipped": ["alignment/area"]}
    full = layer_report.run_lenses(layer_report.LayerReport(data), ["cka/to_last", "cos/to_last"])
    numbers = report.key_numbers(full)
    assert list(numbers) == ["layers", "ran", "skipped", "cka_to_last", "cos_to_last"]
    np.testing.assert_array_equal(numbers["cka_to_last"], full.results["cka/to_last"])


# ------------------------------------------------------------------------- one pass over MiniLM and the command line


@needs_minilm
def test_command_line_writes_notebook_html_figures_and_metrics(tmp_path, capsys):
    from layersim.__main__ import main

    out = tmp_path / "rep"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "16", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"layer_report.ipynb", "report.html", "metrics.json", "matrices.png",
                                               "per_layer.png", "per_step.png"}
    html = (out / "report.html").read_text()
    for section in ("Layer report: every lens of the four papers", "One pass over the data", "Every lens", "Figures"):
        assert section in html
    assert html.count("data:image/png;base64") >= 3  # the figures, embedded
    metrics = json.loads((out / "metrics.json").read_text())
    for name in metrics["lenses"]:
        assert f"<code>{name}</code>" in html
    for name in metrics["skipped"]:
        assert f"<code>{name}</code>" in html and "skipped" in html
    assert metrics["params"]["n_samples"] == 16 and metrics["dataset"] == "austen"
    assert "report.html" in capsys.readouterr().out


@needs_minilm
def test_a_committed_example_names_no_machine_folder(tmp_path, monkeypatch):
    """A report written into the committed results (a repository of its own here) keeps no absolute path of
    the repository: not in the executed notebook (parameters, outputs, papermill's metadata), not in its HTML."""
    import shutil

    from layersim.__main__ import main
    from layersim.core.paths import cache_dir, repo_root

    fake = tmp_path / "repo"
    (fake / "lib" / "layersim").mkdir(parents=True)
    (fake / "pyproject.toml").write_text("")
    (fake / report.NOTEBOOK).parent.mkdir(parents=True)
    shutil.copy(repo_root() / report.NOTEBOOK, fake / report.NOTEBOOK)
    monkeypatch.setenv("LAYERSIM_CACHE", str(cache_dir()))  # the installed model, from the real repository
    monkeypatch.setenv("LAYERSIM_ROOT", str(fake))
    out = fake / "figures" / "report" / "example"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "16", "--out", str(out),
                 "--update-committed"]) == 0
    executed = (out / "layer_report.ipynb").read_text()
    for name in ("report.html", "metrics.json"):
        assert str(fake) not in (out / name).read_text(), name
    assert str(fake) not in executed
    assert json.loads((out / "metrics.json").read_text())["params"]["out"] == "figures/report/example"
    nb = json.loads(executed)
    assert nb["metadata"]["papermill"]["parameters"]["out"] == "figures/report/example"
    assert nb["metadata"]["papermill"]["input_path"] == "notebooks/report/layer_report.ipynb"


def test_command_line_bad_input_is_one_usage_error(capsys):
    from layersim.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["report", "--model", MINILM, "--data", "digits"])
    assert exc.value.code == 2 and "choose a text data set" in capsys.readouterr().err
    assert main(["bogus"]) == 2


@needs_minilm
def test_a_subset_of_lenses_runs_to_the_end_and_reports_only_those(tmp_path):
    """``--lenses`` naming two lenses (neither of the two the last cell used to show) runs every cell, and the page,
    ``metrics.json`` and the last cell hold those lenses alone."""
    from layersim.__main__ import main

    out = tmp_path / "rep"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "8", "--n-surgery", "0",
                 "--lenses", "cos/adjacent,residual/*", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["lenses"]) == {"cos/adjacent", "residual/norm_ratio"} and metrics["skipped"] == {}
    html = (out / "report.html").read_text()
    rows = {name for name in lenses.names() if f"<td><code>{name}</code></td>" in html}  # the table of lenses run
    assert rows == {"cos/adjacent", "residual/norm_ratio"}
    last = json.loads((out / "layer_report.ipynb").read_text())["cells"][-1]["outputs"][0]["data"]["text/plain"]
    assert "'ran': ['cos/adjacent', 'residual/norm_ratio']" in "".join(last) and "cka_to_last" not in "".join(last)


# -------------------------------------------------------------- careless input: refused before any work, in one line


def test_an_unknown_lens_is_refused_before_any_work_listing_the_known_ones(repo, capsys):
    line = _refused([*REPORT, "--lenses", "cos/adjacent,cka/matix", "--out", str(repo / "out")], capsys,
                    "unknown lens 'cka/matix'", "cos/adjacent", "residual/norm_ratio")
    assert all(name in line for name in lenses.names())
    assert not (repo / "out").exists()


def test_report_refuses_cuda_without_cuda_before_any_work(repo, no_accelerator, capsys):
    _refused([*REPORT, "--device", "cuda", "--out", str(repo / "out")], capsys, "'cuda'", "no CUDA")
    assert not (repo / "out").exists()


def test_report_refuses_a_cache_in_the_committed_folders_in_one_line(repo, monkeypatch, capsys):
    monkeypatch.setenv("LAYERSIM_CACHE", str(repo / "notebooks" / "cache"))
    before = committed_files(repo)
    _refused([*REPORT, "--out", str(repo / "out")], capsys, "LAYERSIM_CACHE", "committed")
    assert committed_files(repo) == before and not (repo / "out").exists()


def test_report_hands_its_kernel_absolute_paths_the_way_the_user_meant_them(repo, tmp_path, monkeypatch, kernel,
                                                                           capsys):
    """papermill starts the kernel in notebooks/report/: a relative ``--data`` or ``LAYERSIM_CACHE`` passed on as
    given meant a file or a cache there (inside the committed notebooks)."""
    from layersim.__main__ import main

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "texts.txt").write_text("one\ntwo\nthree\nfour\n")
    monkeypatch.setenv("LAYERSIM_CACHE", "cache")
    monkeypatch.setenv("LAYERSIM_DATA", "~/data")
    assert main(["report", "--model", MINILM, "--data", "texts.txt", "--out", "~/rep"]) == 1  # recorded, not run
    assert kernel["parameters"]["dataset"] == str(work / "texts.txt")
    assert kernel["parameters"]["out"] == str(home / "rep")
    assert kernel["environ"]["LAYERSIM_CACHE"] == str(work / "cache")
    assert kernel["environ"]["LAYERSIM_DATA"] == str(home / "data")
    assert os.environ["LAYERSIM_CACHE"] == "cache"  # the command's own environment is left as it was
    assert "recorded, not run" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--data", "missing.txt"], ("'missing.txt'", "no file or folder")),
    (["--data", "~/nowhere/"], ("'~/nowhere/'", "no file or folder")),
    (["--data", "d" * 5000], ("unknown data set", "name too long")),
    (["--model", "./my-model"], ("'./my-model'", "no file or folder")),
    (["--model", "m" * 5000], ("unknown model",)),
    (["--model", "all-minilm-l6-v2\x00"], ("unknown model", "\\x00")),
    (["--out", ""], ("--out", "empty")),
    (["--device", "cuda:x"], ("'cuda:x'",)),
])
def test_report_names_a_bad_value_in_one_line(repo, capsys, argv, words):
    args = dict(zip(REPORT[1::2], REPORT[2::2]), **{"--out": str(repo / "out")})
    args.update(zip(argv[::2], argv[1::2]))
    _refused(["report", *[x for kv in args.items() for x in kv]], capsys, *words)
    assert not (repo / "out").exists()


def test_report_names_a_file_it_is_given_instead_of_a_model_folder(repo, capsys):
    (repo / "weights.bin").write_bytes(b"\0")
    _refused(["report", "--model", str(repo / "weights.bin"), "--data", "austen"], capsys, "weights.bin",
             "is a file")


def test_report_names_a_folder_it_cannot_read(repo, monkeypatch, capsys):
    """Unreadable folders (simulated: the tests may run as root, who reads everything)."""
    blocked = {repo / "imgs", repo / "rep"}
    for folder in blocked:
        folder.mkdir()
        (folder / "x").mkdir()
    iterdir = Path.iterdir

    def refuse(self):
        if self in blocked:
            raise PermissionError(13, "Permission denied", str(self))
        return iterdir(self)

    monkeypatch.setattr(Path, "iterdir", refuse)
    _refused(["report", "--model", "tracing-vit:smoke", "--data", str(repo / "imgs")], capsys, str(repo / "imgs"),
             "Permission denied")
    _refused([*REPORT, "--out", str(repo / "rep")], capsys, str(repo / "rep"), "Permission denied")


# ----------------------------------------------------------------------------- HTML in a data path


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


# ----------------------------------------------------------------------------- committed results and others' files


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_a_path_into_figures_is_refused(repo, monkeypatch, spelling):
    """The report's output folder never lies in the committed results, however the path is spelled (the guard
    itself: ``layersim.core.writers.check_target``)."""
    path = spelled(repo, monkeypatch, spelling)
    with pytest.raises(ValueError, match="committed results"):
        report.check_out(path)
    assert tree_files(repo / "figures") == {"p/n/metrics.json": b'{"committed": true}'}


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


def test_a_relative_layersim_out_is_taken_from_the_working_directory(repo, tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("LAYERSIM_OUT", "mine")
    assert report.default_out("m", "d") == here / "mine" / "report" / "m__d"


def test_report_folder_of_an_earlier_report_is_reused_without_its_old_figures(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "layer_report.ipynb").write_text("{}")
    (out / "per_step.png").write_bytes(b"old")
    (out / "report.html").write_text("old")
    assert report.output_folder(out, "smoke") == out
    assert sorted(p.name for p in out.iterdir()) == [writers.MARKER, "layer_report.ipynb"]  # adopted as layersim's


# ----------------------------------------------------------------------------- bad values, before anything runs


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


# ----------------------------------------------------------------- a committed example stopped while it is rewritten


@pytest.mark.parametrize("stop", [KeyboardInterrupt, lambda: committed.Stopped(signal.SIGTERM), RuntimeError])
def test_a_report_stopped_while_it_rewrites_a_committed_example_puts_it_back(tmp_path, monkeypatch, stop):
    """``report --update-committed`` cleared the example's folder, then papermill wrote into it: a stop left it
    half-written. Now its outputs are kept aside first and put back whatever ends the run early."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    example = root / "figures" / "report" / "m__d"
    example.mkdir(parents=True)
    for name, data in [("layer_report.ipynb", b"{}"), ("metrics.json", b"{}"), ("a.png", b"a"), ("report.html", b"h")]:
        (example / name).write_bytes(data)
    before = tree_files(example)
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.setattr(report, "check", lambda *a: (None, None, None))
    monkeypatch.setattr(report, "kernel_name", lambda spec, given: given)

    def half_written(root_, out, params, switch, update):
        assert not (out / "a.png").exists()  # the folder was cleared for the new run
        (out / "b.png").write_bytes(b"half")
        raise stop()
    monkeypatch.setattr(report, "_execute", half_written)
    argv = ["report", "--model", "all-minilm-l6-v2", "--data", "austen", "--out", str(example), "--update-committed"]
    from layersim.__main__ import main

    if stop is RuntimeError:
        with pytest.raises(RuntimeError):
            main(argv)
    else:
        assert main(argv) == (130 if stop is KeyboardInterrupt else 128 + signal.SIGTERM)
    assert tree_files(example) == before
    assert committed.leftovers(root) == [] and not list((root / "runs").rglob(locks.NAME))
