"""Tests of layersim.notebook.run: a notebook's settings, output folder, figures and claims in three calls."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.core import writers  # noqa: E402
from layersim.notebook import rehearsal, results, seeds, settings  # noqa: E402
from layersim.notebook.run import Run, STYLE, split_name, start  # noqa: E402

PRESETS = {"smoke": {"n": 4, "lr": 0.1}, "default": {"n": 100, "lr": 0.01}}
RULES = {"n": settings.integer(2)}


@pytest.fixture
def out(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path))
    return tmp_path


def test_start_reads_the_notebook_variables_validates_them_and_prepares_the_folder(out):
    stale = out / "toy" / "n01_toy"
    stale.mkdir(parents=True)
    (stale / writers.MARKER).write_text("")  # an earlier run's folder: layersim made it
    (stale / "old.png").write_bytes(b"x")
    params = {"scale": "smoke", "seed": 3, "device": "cpu", "n": None, "lr": 0.5, "unrelated": object()}
    run = start("toy/n01_toy", PRESETS, params, rules=RULES, announce=False)
    assert run.P == {"n": 4, "lr": 0.5} and run.seed == 3 and run.device == "cpu" and run.scale == "smoke"
    assert run.out == stale and not (stale / "old.png").exists()  # an earlier run's figure cleared
    a = torch.rand(3)  # seeded: the same draw as after seed_everything(3)
    torch.manual_seed(3)
    assert torch.equal(a, torch.rand(3))
    assert start("toy/n01_toy", PRESETS, {"scale": "default"}, rules=RULES, announce=False, n=7).P["n"] == 7
    assert plt.rcParams["legend.frameon"] is False  # the project's style


@pytest.mark.parametrize("params, match", [
    ({"scale": "smoke", "n": 1}, "'n'"),                      # below the rule's minimum
    ({"scale": "smoke", "seed": -1}, "'seed'"),
    ({"scale": "smoke", "device": "gpu"}, "'device'"),
    ({"scale": "paper"}, "no preset for scale 'paper'"),
    ({"scale": "huge"}, "unknown scale 'huge'"),
    ({}, "'scale'"),
])
def test_start_refuses_bad_settings_with_one_line_naming_them(out, params, match):
    with pytest.raises(ValueError, match=match):
        start("toy/n01_toy", PRESETS, params, rules=RULES, announce=False)


@pytest.mark.parametrize("name", ["toy", "/n01", "toy/", "a/b/c", ""])
def test_a_notebook_is_named_paper_slash_stem(name):
    with pytest.raises(ValueError, match="<paper>/<stem>"):
        split_name(name)


def test_finish_saves_and_closes_and_record_writes_the_metrics(out, capsys):
    run = start("toy/n01_toy", PRESETS, {"scale": "smoke", "seed": 2}, rules=RULES)
    assert "scale=smoke, writing to" in capsys.readouterr().out
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label="line")
    ax.legend()
    assert run.finish(fig, "fig1_line", show=False) is None
    assert (run.out / "fig1_line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number) and run.figures == ["fig1_line"]
    claims = {"rises": results.claim(0.7, 0.5, ">=")}
    got = run.record(claims, extra_settings={"classes": [1, 2]}, show=False, curve=np.array([0.5, 0.7]))
    assert got == {"rises": {**claims["rises"], "n": 1, "k": 1, "seeds": [2], "values": [0.7], "verdicts": [True],
                             "seed_mean": 0.7, "seed_std": 0.0}}  # one seed: no runs of other seeds in the environment
    m = json.loads((run.out / "metrics.json").read_text())
    assert m["notebook"] == "toy/n01_toy" and m["scale"] == "smoke"
    assert list(m["params"]) == ["n", "lr", "seed", "classes"] and m["params"]["seed"] == 2
    assert m["claims"]["rises"]["holds"] is True and m["curve"] == [0.5, 0.7]
    with pytest.raises(ValueError, match="'bad' of toy/n01_toy is not registered"):  # a measurement needs a rule
        run.record({"bad": {"value": 1.0}}, show=False)
    with pytest.raises(ValueError, match="lacks 'holds' or 'value'"):
        run.record({"bad": {"holds": True}}, show=False)


def test_the_style_file_is_a_valid_matplotlib_style():
    with plt.style.context(STYLE):
        assert plt.rcParams["legend.frameon"] is False and plt.rcParams["grid.alpha"] == 0.3


def test_a_path_in_the_repository_is_shown_relative_to_it(tmp_path):
    from layersim.core.paths import repo_root
    from layersim.notebook.run import shown_path

    assert shown_path(repo_root() / "figures" / "tracing" / "t01") == "figures/tracing/t01"
    assert shown_path(tmp_path) == str(tmp_path)  # outside the repository: as it is


def test_a_path_is_shown_as_it_is_when_there_is_no_repository(outside_repository):
    from layersim.notebook.run import shown_path

    assert shown_path(outside_repository / "out") == str(outside_repository / "out")


def test_record_folds_in_the_runs_named_by_the_environment(tmp_path, monkeypatch):
    other = tmp_path / "seed-1"
    other.mkdir()
    params = {"n_eval": 100, "seed": 1}
    metrics = {"notebook": "tracing/t01_x", "scale": "default", "params": params,
               "claims": {"a": results.claim(0.5, 0.9, ">=")}}
    (other / "metrics.json").write_text(json.dumps(metrics))
    monkeypatch.setenv(seeds.ENV, str(other))
    run = Run("tracing/t01_x", "default", {"n_eval": 100}, 0, "auto", tmp_path / "out")
    run.out.mkdir()
    recorded = run.record({"a": results.claim(0.95, 0.9)}, show=False, curve=[1, 2])
    written = json.loads((run.out / "metrics.json").read_text())
    assert written["claims"] == recorded == run.claims and recorded["a"]["seeds"] == [0, 1] and recorded["a"]["k"] == 1
    assert written["curve"] == [1, 2] and written["params"]["seed"] == 0
    monkeypatch.delenv(seeds.ENV)
    assert run.record({"a": results.claim(0.95, 0.9)}, show=False)["a"]["n"] == 1


def test_measuring_changes_nothing_outside_a_rehearsal(out):
    run = start("toy/n01_toy", PRESETS, {"scale": "smoke"}, rules=RULES, announce=False)
    with pytest.raises(ValueError, match="constant curve"):
        with run.measuring():
            raise ValueError("a constant curve has no rank correlation")
    assert not (run.out / "metrics.json").exists()


def test_in_a_rehearsal_an_undefined_measurement_is_recorded_and_other_errors_still_stop(out, monkeypatch):
    monkeypatch.setenv(rehearsal.ENV, "1")
    presets = {**PRESETS, "paper": {"n": 1000, "lr": 0.01}}
    run = start("toy/n01_toy", presets, {"scale": "paper"}, rules=RULES, announce=False)
    with run.measuring():
        claims = {"fine": results.measure(1.0)}
        raise ValueError("a constant curve has no rank correlation")
        run.record(claims)  # never reached: the error above stops the block
    data = json.loads((run.out / "metrics.json").read_text())
    assert data["claims"] == {} and run.claims == {}
    assert data[rehearsal.KEY]["not_measurable"] == "a constant curve has no rank correlation"
    with pytest.raises(RuntimeError, match="out of memory"):
        with run.measuring():
            raise RuntimeError("out of memory")
    with pytest.raises(ValueError, match="says why"):
        rehearsal.not_measurable(run.rehearsal, "  ")
