"""The notebook contract, checked on every notebook under notebooks/ (no execution here:
tests/notebooks/ holds the smoke-scale references that nbval re-executes in the same run)."""

import json
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


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_parameters_cell_names_scale_seed_device(nb):
    params = tagged(nb, "parameters")
    assert len(params) == 1, "exactly one cell must be tagged 'parameters'"
    src = "".join(params[0]["source"])
    for name in ("scale", "seed", "device"):
        assert f"\n{name} =" in f"\n{src}", f"the parameters cell does not set {name!r}"
    assert 'scale = "default"' in src, "committed notebooks default to the default scale"


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
                        cwd=str(nb.parent), parameters=dict(scale="paper", dataset="fashion-mnist", n_train=256,
                                                            n_eval=128, depth=4, embed_dim=24, epochs=1))
    metrics = json.loads((tmp_path / "out" / "tracing" / "t01_cos_vs_cka" / "metrics.json").read_text())
    assert metrics["scale"] == "paper"
    assert metrics["params"]["schedule"] == "multistep" and metrics["params"]["augment"] is True
    assert len(metrics["cos_to_last"]) == 4 and set(metrics["claims"]) == {
        "cos_tracks_cka", "similarity_increases_toward_last", "cos_tracks_accuracy", "closer_layers_more_similar"}
