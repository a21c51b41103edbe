import json

import nbformat
import pytest

from layersim import runner


def _notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('scale = "default"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def fake_repo(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "lib" / "layersim").mkdir(parents=True)
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    return tmp_path


def test_discover_by_substring_and_glob(fake_repo):
    for name in ["tracing/t01_a", "tracing/t02_b", "alignment/a01_c"]:
        _notebook(fake_repo / "notebooks" / f"{name}.ipynb", [])
    _notebook(fake_repo / "notebooks" / "tracing" / ".ipynb_checkpoints" / "t01_a-checkpoint.ipynb", [])
    stems = lambda ps: [p.stem for p in ps]  # noqa: E731
    assert stems(runner.discover("")) == ["a01_c", "t01_a", "t02_b"]
    assert stems(runner.discover("t01")) == ["t01_a"]
    assert stems(runner.discover("tracing/*")) == ["t01_a", "t02_b"]
    assert runner.discover("nothing-like-this") == []


@pytest.mark.slow
def test_default_run_publishes_in_place_and_failures_name_the_cell(fake_repo, capsys):
    good = _notebook(fake_repo / "notebooks" / "p" / "good.ipynb",
                     ["import json, pathlib\npathlib.Path('out.json').write_text(json.dumps(scale))"])
    bad = _notebook(fake_repo / "notebooks" / "p" / "bad.ipynb", ["x = 1", "raise ValueError('boom')"])
    code = runner.main(["--scale", "default"])
    out = capsys.readouterr().out
    assert code == 1  # the batch went on past the failure and reports it at the end
    assert "p/good: ok" in out and "1 notebooks ok, 1 failed" in out
    assert "p/bad: FAILED at cell 4" in out  # 1-based, after the injected parameters cell
    assert "runs/default/p/bad/bad.ipynb" in out and "ValueError: boom" in out
    # the good notebook ran with the injected scale, in its own folder, and was published in place
    assert json.loads((good.parent / "out.json").read_text()) == "default"
    published = json.loads(good.read_text())
    assert any("injected-parameters" in c["metadata"].get("tags", []) for c in published["cells"])
    # the failed one is left as it was; its executed copy is under runs/
    assert "injected-parameters" not in bad.read_text()
    assert (fake_repo / "runs" / "default" / "p" / "bad" / "bad.ipynb").is_file()


@pytest.mark.slow
def test_smoke_run_never_touches_notebooks(fake_repo):
    nb = _notebook(fake_repo / "notebooks" / "p" / "n.ipynb", ["y = 2"])
    before = nb.read_text()
    assert runner.main(["--scale", "smoke", "--nb", "n"]) == 0
    assert nb.read_text() == before
    assert (fake_repo / "runs" / "smoke" / "p" / "n" / "n.ipynb").is_file()


def test_bad_scale_and_empty_selection(fake_repo, capsys):
    _notebook(fake_repo / "notebooks" / "p" / "n.ipynb", [])
    with pytest.raises(ValueError, match="unknown scale"):
        runner.main(["--scale", "huge"])
    assert runner.main(["--nb", "zzz"]) == 2


def test_parse_value():
    assert runner.parse_value("3") == 3 and runner.parse_value("0.5") == 0.5
    assert runner.parse_value("[1, 2]") == [1, 2] and runner.parse_value("cifar10") == "cifar10"


@pytest.mark.slow
def test_refs_keep_only_the_checked_outputs(fake_repo):
    nb = _notebook(fake_repo / "notebooks" / "p" / "r.ipynb", ["print('noise')", "6 * 7"])
    data = json.loads(nb.read_text())
    data["cells"][2]["metadata"]["tags"] = ["nbval-check-output"]
    nb.write_text(json.dumps(data))
    assert runner.main(["--refs", "--nb", "r"]) == 0
    ref = json.loads((fake_repo / "tests" / "notebooks" / "p" / "r.ipynb").read_text())
    outputs = {"".join(c["source"]): c.get("outputs") for c in ref["cells"] if c["cell_type"] == "code"}
    assert outputs["print('noise')"] == []
    assert "".join(outputs["6 * 7"][0]["data"]["text/plain"]) == "42"
    assert 'scale = "smoke"' in "".join(ref["cells"][1]["source"])  # the injected parameters
    assert "papermill" not in ref["metadata"]
