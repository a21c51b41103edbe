"""The notebook contract, checked on every notebook under notebooks/ (no execution here:
tests/notebooks/ holds the smoke-scale references that nbval re-executes in the same run)."""

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))
IDS = [p.relative_to(ROOT / "notebooks").as_posix() for p in NOTEBOOKS]


def cells(path):
    return json.loads(path.read_text())["cells"]


def tagged(path, tag):
    return [c for c in cells(path) if tag in c["metadata"].get("tags", [])]


def code_sources(path):
    """The code cells as written (papermill's injected parameters cell left out)."""
    return ["".join(c["source"]) for c in cells(path)
            if c["cell_type"] == "code" and "injected-parameters" not in c["metadata"].get("tags", [])]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebook under notebooks/"


#: the notebooks that read the ladders' rungs (each paper's ``<x>NN_scale_ladders``): they measure and train nothing,
#: so they have neither ``seed`` nor ``device`` (the runner runs a notebook without ``seed`` once)
LADDER_READERS = [p for p in NOTEBOOKS if p.stem.endswith("_scale_ladders")]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_parameters_cell_names_scale_seed_device(nb):
    params = tagged(nb, "parameters")
    assert len(params) == 1, "exactly one cell must be tagged 'parameters'"
    src = "".join(params[0]["source"])
    for name in ("scale",) if nb in LADDER_READERS else ("scale", "seed", "device"):
        assert re.search(rf"^{name}(: [\w\[\]]+)? = ", src, re.M), f"the parameters cell does not set {name!r}"
    assert re.search(r'^scale(: str)? = "default"', src, re.M), "committed notebooks default to the default scale"


def test_the_ladder_readers_measure_nothing_and_run_once():
    from layersim.notebook import registry

    assert sorted(p.parent.name for p in LADDER_READERS) == ["alignment", "clusters", "redundancy", "tracing"]
    registered = registry.load_all()
    for nb in LADDER_READERS:
        assert not {"seed", "device"} & set(parameter_names(nb)), f"{nb.stem} has a seed or device: it runs nothing"
        code = "\n".join(code_sources(nb))
        assert "measure(" not in code and ".record(" not in code, f"{nb.stem} measures a claim of its own"
        assert f"{nb.parent.name}/{nb.stem}" not in registered, f"{nb.stem} registers a claim"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_committed_outputs_have_no_errors(nb):
    for c in cells(nb):
        for out in c.get("outputs", []):
            assert out.get("output_type") != "error", f"a cell of {nb.name} is committed with an error"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_smoke_reference_matches_the_notebook(nb):
    ref = ROOT / "tests" / "notebooks" / nb.relative_to(ROOT / "notebooks")
    assert ref.is_file(), f"no smoke reference {ref.relative_to(ROOT)}: run `make smoke-refs NB={nb.stem}`"
    assert code_sources(ref) == code_sources(nb), (
        f"{ref.relative_to(ROOT)} is out of date with the notebook: run `make smoke-refs NB={nb.stem}`")
    injected = tagged(ref, "injected-parameters")
    assert injected and 'scale = "smoke"' in "".join(injected[0]["source"]), "the reference must be a smoke run"
    checks = tagged(ref, "nbval-check-output")
    assert checks and all(c.get("outputs") for c in checks), "the reference needs a key-numbers cell with output"


@pytest.mark.slow
def test_t01_runs_the_paper_recipe_offline_on_tiny_settings(tmp_path, monkeypatch):
    """The paper-scale path (multistep schedule, augmentation, DeiT-S head count) end to end,
    with the data set and sizes overridden so that it runs offline in seconds."""
    import papermill as pm

    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "cache"))
    nb = ROOT / "notebooks" / "tracing" / "t01_cos_vs_cka.ipynb"
    pm.execute_notebook(str(nb), str(tmp_path / "t01.ipynb"), kernel_name="python3", progress_bar=False,
                        cwd=str(nb.parent), parameters=dict(scale="paper", dataset="fashion-mnist", patch_size=4,
                                                            n_train=256, n_eval=128, depth=4, embed_dim=24,
                                                            epochs=1))
    metrics = json.loads((tmp_path / "out" / "tracing" / "t01_cos_vs_cka" / "metrics.json").read_text())
    assert metrics["scale"] == "paper"
    assert metrics["params"]["schedule"] == "multistep" and metrics["params"]["augment"] is True
    assert metrics["params"]["patch_size"] == 4 and metrics["params"]["num_heads"] == 6
    assert len(metrics["cos_to_last"]) == 4 and set(metrics["claims"]) == {
        "cos_tracks_cka", "similarity_increases_toward_last", "cos_tracks_accuracy", "closer_layers_more_similar"}


# ----- parameters: every one validated by settings.pick before anything loads -----------------------------------


def setup_source(path):
    """The source of the cell after the parameters cell (presets, settings.pick, output folder)."""
    srcs = code_sources(path)
    return srcs[1]


def parameter_names(path):
    import ast

    tree = ast.parse("".join(tagged(path, "parameters")[0]["source"]))
    targets = [[n.target] if isinstance(n, ast.AnnAssign) else n.targets for n in tree.body
               if isinstance(n, (ast.Assign, ast.AnnAssign))]
    return [t.id for ts in targets for t in ts]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_every_parameter_is_annotated_for_papermill(nb):
    """`papermill --help-notebook` shows each parameter's type (it parses `x: Optional[int] = None`,
    not `int | None`, and skips a parameter it cannot parse, which the runner would then refuse)."""
    import papermill as pm

    found = pm.inspect_notebook(str(nb))
    assert list(found) == parameter_names(nb), "papermill does not see every parameter"
    untyped = [n for n, p in found.items() if p["inferred_type_name"] in ("None", "")]
    assert not untyped, f"annotate {untyped} in the parameters cell (e.g. `n: Optional[int] = None`)"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_every_parameter_goes_through_settings_pick(nb):
    src = setup_source(nb)
    name = nb.relative_to(ROOT / "notebooks").with_suffix("").as_posix()
    if "start(" in src:  # layersim.notebook.run.start reads every preset's setting from the notebook's globals()
        assert f'start("{name}", PRESETS, globals()' in src, f'start the run as start("{name}", PRESETS, globals(), ...)'
        return  # that every parameter is a preset's setting: test_presets_of_every_scale_pass_their_rules
    # settings.pick in the notebook, or a library function that calls it with the notebook's presets
    # (the layer report's report.settings_for, which its command line calls before executing)
    assert re.search(r"settings\.pick\(PRESETS, scale,|\w+\.settings_for\(scale,", src), \
        "merge the presets with layersim.notebook.settings.pick"
    for name in parameter_names(nb):
        if name != "scale":
            assert f"{name}={name}" in src, f"parameter {name!r} is not passed to settings.pick"


@pytest.fixture
def run_setup(tmp_path, monkeypatch):
    """Execute a notebook's parameters cell, the given overrides, then its setup cell, in-process, with
    outputs and the cache in tmp_path; returns the namespace. Restores torch's global settings."""
    import torch

    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    import matplotlib

    style = dict(matplotlib.rcParams)

    def run(nb, **params):
        ns = {}
        exec("".join(tagged(nb, "parameters")[0]["source"]), ns)
        ns.update(params)
        exec(setup_source(nb), ns)
        return ns

    yield run
    torch.set_num_threads(threads)
    torch.set_flush_denormal(False)
    import matplotlib.pyplot as plt

    plt.close("all")
    matplotlib.rcParams.update(style)  # start() applies the project's plot style


@pytest.mark.parametrize("scale", ["smoke", "default", "paper"])
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_presets_of_every_scale_pass_their_rules(nb, scale, run_setup, tmp_path):
    """Every scale's presets (paper included, which only the rehearsal runs, with its counts cut) satisfy the
    notebook's rules, and the setup cell loads nothing: the cache stays empty."""
    ns = run_setup(nb, scale=scale)
    assert isinstance(ns["P"], dict) and ns["P"]
    if "run" in ns:  # start(...) reads the parameters by the names of the preset's settings: each must be one
        missing = [n for n in parameter_names(nb) if n not in ("scale", "seed", "device") and n not in ns["P"]]
        assert not missing, f"parameters {missing} are not settings of the {scale} preset, so they would be ignored"
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


T01 = ROOT / "notebooks" / "tracing" / "t01_cos_vs_cka.ipynb"


@pytest.mark.parametrize("params, message", [
    ({"n_train": "abc"}, "parameter 'n_train': 'abc' is not allowed; n_train must be an integer >= 0"),
    ({"depth": -3}, "parameter 'depth': -3 is not allowed; depth must be an integer >= 1"),
    ({"depth": 0}, "parameter 'depth': 0 is not allowed; depth must be an integer >= 1"),
    ({"seed": 1.5}, "parameter 'seed': 1.5 is not allowed; seed must be an integer in [0, 4.29497e+09]"),
    ({"dataset": "cifar"}, "parameter 'dataset': 'cifar' is not allowed; dataset must be one of 'fashion-mnist'"),
    ({"patch_size": 5}, "parameter 'patch_size': 5 does not divide the 28-pixel images of 'fashion-mnist'"),
    ({"embed_dim": 33}, "parameter 'embed_dim': 33 is not a multiple of num_heads=2"),
    ({"device": "gpu"}, "parameter 'device': 'gpu' is not allowed"),
    ({"n_eval": 100000}, "parameter 'n_eval': 100000 is more than the 10000 images of the test split of fashion-mnist"),
    ({"n_eval": 2}, "parameter 'n_eval': 2 is not allowed; n_eval must be an integer >= 10"),
    ({"n_train": 70000}, "parameter 'n_train': 70000 is more than the 60000 images of the train split"),
])
def test_a_bad_parameter_stops_t01_before_anything_loads(run_setup, tmp_path, params, message):
    with pytest.raises(ValueError) as info:
        run_setup(T01, scale="smoke", **params)
    assert message in str(info.value)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("dataset, patch", [("cifar10", 4), ("cifar100", 4), ("digits", 2), ("mnist", 7)])
def test_t01_chooses_the_patch_size_for_the_data_set(run_setup, dataset, patch):
    counts = {"n_train": 0, "n_eval": 360} if dataset == "digits" else {}  # digits: 1437 train, 360 test images
    for scale in ("smoke", "default"):
        assert run_setup(T01, scale=scale, dataset=dataset, **counts)["P"]["patch_size"] == patch
    assert run_setup(T01, scale="smoke", dataset=dataset, patch_size=1)["P"]["patch_size"] == 1


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebooks_call_helpers_from_their_home_module(nb):
    """`module.f(...)` in a notebook must find `f` defined in `module`, not imported into it from
    elsewhere (a module that re-exports helpers for notebooks hides where the concept lives)."""
    import importlib

    src = "\n".join(code_sources(nb))
    names = {}
    for package, group in re.findall(r"^from layersim\.([\w.]+) import ([\w, ]+)$", src, re.M):
        for item in group.split(","):
            mod, _, alias = item.strip().partition(" as ")
            names[alias or mod] = f"{package}.{mod}"
    wrong = set()
    for alias, attr in re.findall(r"\b(\w+)\.(\w+)\(", src):
        if alias in names:
            module = importlib.import_module(f"layersim.{names[alias]}")
            home = getattr(getattr(module, attr, None), "__module__", None)
            if home and home.startswith("layersim") and home != module.__name__:
                wrong.add(f"{names[alias]}.{attr} (defined in {home})")
    assert not wrong, f"call these from their home module: {sorted(wrong)}"


#: the line budget of a notebook: code that a student reads before the idea is plumbing, which lives in the library
LINE_BUDGET = 80
#: the budget of the median over the papers' notebooks (the layer report left out): most stay well inside the budget
MEDIAN_BUDGET = 60


def code_lines(path) -> int:
    """Non-blank, non-comment lines of a notebook's code cells (the injected parameters cell left out)."""
    return sum(1 for src in code_sources(path) for line in src.split("\n")
               if line.strip() and not line.strip().startswith("#"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebooks_stay_within_their_line_budget(nb):
    n = code_lines(nb)
    assert n <= LINE_BUDGET, f"{nb.stem}: {n} code lines, over the budget of {LINE_BUDGET}: move plumbing to layersim"


def test_the_papers_notebooks_median_stays_within_its_budget():
    lines = {nb.stem: code_lines(nb) for nb in NOTEBOOKS if nb.parent.name != "report"}
    median = statistics.median(lines.values())
    largest = sorted(lines, key=lines.get, reverse=True)[:5]
    assert median <= MEDIAN_BUDGET, (f"the papers' notebooks have a median of {median} code lines, over the budget of "
                                     f"{MEDIAN_BUDGET}; the largest: {[(n, lines[n]) for n in largest]}")


def test_the_line_counter_skips_blanks_comments_and_injected_parameters(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": ["# doc\n", "scale = 'default'\n", "\n"]},
        {"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": ["scale = 'smoke'\n"]},
        {"cell_type": "markdown", "metadata": {}, "source": ["x = 1\n"]},
        {"cell_type": "code", "metadata": {}, "source": ["a = 1  # counted\n", "    # not\n", "b = 2"]}]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    assert code_lines(path) == 3


def settings_cells(path):
    """The code cells that set a notebook up (the presets and ``run = start(...)``), with whether Jupyter shows their
    input collapsed (``metadata.jupyter.source_hidden``)."""
    return [bool(c["metadata"].get("jupyter", {}).get("source_hidden")) for c in cells(path)
            if c["cell_type"] == "code" and re.search(r"^run = start\(", "".join(c["source"]), re.M)]


@pytest.mark.parametrize("nb", [p for p in NOTEBOOKS if p.parent.name != "report"],
                         ids=[i for i in IDS if not i.startswith("report/")])
def test_the_settings_cell_is_collapsed_and_the_parameters_are_not(nb):
    """The plumbing out of sight: one settings cell, its input collapsed in Jupyter (and folded in the book); the
    parameters cell, which a reader changes, stays open."""
    assert settings_cells(nb) == [True], f"{nb.stem}: set metadata.jupyter.source_hidden on its settings cell"
    (params,) = tagged(nb, "parameters")
    assert not params["metadata"].get("jupyter", {}).get("source_hidden"), f"{nb.stem}: the parameters cell is hidden"


def figure_cells_without_caption(path):
    """Indices of the code cells that draw a figure (``run.finish``, or ``results.save_figure`` in the layer report)
    and are not followed by their caption: an italic Markdown cell (its text starts with ``*``) that says what the
    figure shows and what to look at."""
    cs = cells(path)
    return [i for i, c in enumerate(cs)
            if c["cell_type"] == "code" and any(f in "".join(c["source"]) for f in ("run.finish(", "save_figure("))
            and not (i + 1 < len(cs) and cs[i + 1]["cell_type"] == "markdown"
                     and "".join(cs[i + 1]["source"]).lstrip().startswith("*"))]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_every_figure_has_a_caption(nb):
    missing = figure_cells_without_caption(nb)
    assert not missing, f"{nb.stem}: the figure cells {missing} have no caption cell after them (CONTRIBUTING, step 4)"


def test_the_caption_check_finds_a_figure_without_one(tmp_path):
    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": [text]}

    def code(text):
        return {"cell_type": "code", "metadata": {}, "source": [text], "outputs": []}

    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [code("run.finish(fig, 'a')"), md("*Figure a: look here.*"),
                                          code("run.finish(fig, 'b')"), md("## Next section"), code("x = 1")]}))
    assert figure_cells_without_caption(path) == [2]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_every_layersim_name_in_the_text_exists(nb):
    """A module or function moved or renamed leaves no stale ``layersim.x.y`` in a notebook's Markdown (its text and
    its prose template)."""
    from builders import FILE_SUFFIXES, resolves

    text = "".join("".join(c["source"]) + json.dumps(c.get("metadata", {})) for c in cells(nb)
                   if c["cell_type"] == "markdown")
    stale = sorted({n for n in re.findall(r"\blayersim(?:\.[A-Za-z_][A-Za-z0-9_]*)+", text)
                    if n.rpartition(".")[2] not in FILE_SUFFIXES and not resolves(n)})
    assert not stale, f"{nb.name} names what does not exist: {stale}"
