"""Tests of layersim.tools.smoke_check: the smoke checks of ``make test`` (nbval + the smoke_check plugin).

On a toy reference notebook, in a pytest of its own: they pass when the float kernels move numbers within the
tolerance, and fail on a real change (a claim's value beyond the tolerance, a flipped verdict, a layer fewer, a
missing figure, no metrics written, a claim value that is NaN). The last case reuses the previous run's output
folder, so a stale metrics.json must not pass.
"""

import json
import math

import nbformat
import pytest

from layersim.tools import smoke_check
from builders import REPO


PARAMETERS = 'scale = "smoke"'
BODY = """\
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from layersim.notebook import results

value = float(os.environ.get("TOY_VALUE", "0.5"))
layers = [0.25, 0.5, 1.0][: int(os.environ.get("TOY_LAYERS", "3"))]
claims = {"rises": results.claim(value, 0.3, ">=")}
OUT = results.output_dir("toy", "t99_toy", scale)
if os.environ.get("TOY_FIGURE", "1") == "1":
    fig, ax = plt.subplots()
    ax.plot(layers)
    results.save_figure(fig, OUT, "toy")
if os.environ.get("TOY_WRITE", "1") == "1":
    results.write_metrics(OUT, "toy/t99_toy", scale, {"depth": 3}, claims, layers=layers)
"""
DIGEST = "results.summary(claims, value=value, layers=layers)"

REFERENCE = {"notebook": "toy/t99_toy", "scale": "smoke", "params": {"depth": 3},
             "claims": {"rises": {"holds": True, "value": 0.5, "threshold": 0.3, "op": ">="}},
             "layers": [0.25, 0.5, 1.0], "png_files": ["toy.png"]}


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """tests/notebooks/ in miniature: one reference notebook, its metrics and a tolerances.json."""
    root = tmp_path_factory.mktemp("refs")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(BODY),
                nbformat.v4.new_code_cell(DIGEST, metadata={"tags": ["nbval-check-output"]})]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells[2].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": (
        "{'value': 0.5, 'layers': [0.25, 0.5, 1.0], 'claims': {'rises': True}}")}, execution_count=1)]
    nb.cells[2].execution_count = 1
    (root / "toy").mkdir()
    nbformat.write(nb, str(root / "toy" / "t99_toy.ipynb"))
    (root / "toy" / "t99_toy.metrics.json").write_text(json.dumps(REFERENCE))
    (root / "tolerances.json").write_text(json.dumps(
        {"default": {"rtol": 0.0, "atol": 0.0}, "notebooks": {"toy/t99_toy": {"rtol": 0.0, "atol": 0.002}}}))
    return root


def run_smoke(pytester, refs, out, monkeypatch, **env):
    """pytest on the toy reference exactly as `make test` runs tests/notebooks (nbval options, sanitizers,
    the layersim.tools.smoke_check plugin); returns the outcome counts and the output."""
    monkeypatch.setenv("LAYERSIM_OUT", str(out))
    for k in ("TOY_VALUE", "TOY_LAYERS", "TOY_FIGURE", "TOY_WRITE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = pytester.runpytest_subprocess(
        str(refs / "toy" / "t99_toy.ipynb"), "-p", "layersim.tools.smoke_check", "--nbval-lax", "--nbval-current-env",
        "--nbval-sanitize-with", str(REPO / "tests" / "nbval_sanitize.cfg"), "-p", "no:cacheprovider")
    return result.parseoutcomes(), result.stdout.str()


@pytest.mark.slow
def test_smoke_checks_pass_on_kernel_noise_and_fail_on_real_changes(pytester, refs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    cases = [
        # (environment, passes, what the failure names)
        ({}, True, None),
        ({"TOY_VALUE": "0.5014"}, True, None),  # digest prints 0.501: only the sanitizers let nbval pass
        ({"TOY_VALUE": "0.52"}, False, "claims.rises.value: 0.5 -> 0.52"),
        ({"TOY_VALUE": "0.1"}, False, "verdict flipped: rises"),
        ({"TOY_LAYERS": "2"}, False, "Cell outputs differ"),  # nbval sees the shorter list first
        ({"TOY_FIGURE": "0"}, False, "png_files[0]: only in the reference"),
        ({"TOY_WRITE": "0"}, False, "the run wrote no metrics.json"),  # output_dir removed the earlier run's
    ]
    for env, passes, message in cases:
        outcomes, text = run_smoke(pytester, refs, out, monkeypatch, **env)
        if passes:
            assert outcomes == {"passed": 3}, (env, text)
        else:
            assert outcomes.get("failed") == 1, (env, text)
            assert message in text, (env, text)
    assert not (out / "toy" / "t99_toy" / "metrics.json").exists()  # no stale file passes for this run's


def test_reference_of_needs_a_tolerances_file(tmp_path):
    (tmp_path / "p").mkdir()
    nb = tmp_path / "p" / "s.ipynb"
    assert smoke_check.reference_of(nb) is None
    (tmp_path / "tolerances.json").write_text("{}")
    assert smoke_check.reference_of(nb) == (tmp_path / "p" / "s.metrics.json", tmp_path / "tolerances.json")


def test_every_committed_reference_has_metrics_and_a_measured_tolerance():
    refs = REPO / "tests" / "notebooks"
    tolerances = json.loads((refs / smoke_check.TOLERANCES).read_text())
    for nb in sorted(refs.rglob("*.ipynb")):
        key = f"{nb.parent.name}/{nb.stem}"
        assert nb.with_suffix(".metrics.json").is_file(), f"run `make smoke-refs NB={nb.stem}`"
        assert key in tolerances["notebooks"], f"{key} has no measured tolerance in tolerances.json"
        metrics = json.loads(nb.with_suffix(".metrics.json").read_text())
        assert metrics["scale"] == "smoke" and "claims" in metrics and "png_files" in metrics


@pytest.mark.parametrize("text, words", [
    ('{"default": {"rtol": 0, "atol": 0}, "notebooks": {"p/s": {"rtol": NaN, "atol": 0}}}', "finite"),
    ('{"default": {"rtol": 0, "atol": Infinity}, "notebooks": {}}', "finite"),
    ('{"notebooks": {}}', "no 'default'"),
    ('{"default": {"rtol": 0, "atol": 0}}', "no 'notebooks'"),
    ("not json", "Expecting value"),
])
def test_a_tolerances_file_that_is_not_one_is_named(tmp_path, text, words):
    """A NaN or infinite tolerance (or a damaged file) is one ValueError naming the file and the notebook."""
    path = tmp_path / "tolerances.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="tolerances.json: the tolerance of p/s cannot be read") as err:
        smoke_check.tolerance_for("p/s", path)
    assert words in str(err.value) and "\n" not in str(err.value)


def _one_claim(value: float = 0.8) -> dict:
    """A run's ``metrics.json`` with one claim (``rises``: value >= 0.5) and one curve."""
    return {"notebook": "toy/t01", "scale": "smoke", "params": {"depth": 3},
            "claims": {"rises": {"holds": True, "value": value, "threshold": 0.5, "op": ">="}},
            "curve": [0.25, 0.5, 1.0]}


def test_smoke_check_fails_a_run_whose_claim_value_is_nan(tmp_path):
    refs = tmp_path / "refs"
    (refs / "toy").mkdir(parents=True)
    (refs / "toy" / "t01.ipynb").write_text("{}")
    (refs / "toy" / "t01.metrics.json").write_text(json.dumps({**_one_claim(), "png_files": []}))
    (refs / smoke_check.TOLERANCES).write_text(json.dumps(
        {"default": {"rtol": 0.0, "atol": 0.0}, "notebooks": {"toy/t01": {"rtol": 0.1, "atol": 0.1}}}))
    run = tmp_path / "out" / "toy" / "t01"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(_one_claim(value=math.nan)))
    result = smoke_check.compare_with_reference(refs / "toy" / "t01.ipynb", run)
    assert not result.ok() and any("claims.rises.value" in p for p in result.problems()), result.problems()
