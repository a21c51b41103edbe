"""pytest plugin: every smoke-scale notebook's ``metrics.json`` checked against its committed reference.

While nbval re-executes a smoke reference ``tests/notebooks/<paper>/<stem>.ipynb`` (every cell must run, the masked
digest keep its shape), this plugin compares the ``metrics.json`` and PNG figures that run wrote with
``<stem>.metrics.json`` beside the reference (:func:`layersim.tools.compare.compare_metrics`), with the notebook's
measured tolerance from ``tolerances.json`` in the references' root folder; only notebooks two folders below one are
checked. Loaded by ``addopts`` in ``pyproject.toml``; elsewhere ``-p layersim.tools.smoke_check`` (see
docs/modules.md, `layersim.tools.smoke_check`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from layersim.notebook.results import run_folder
from layersim.tools import compare

TOLERANCES = "tolerances.json"
_STARTED = "_layersim_started"


class SmokeMismatch(AssertionError):
    """A smoke run's numbers, verdicts or structure differ from its reference beyond the tolerance."""


def reference_of(notebook: Path) -> tuple[Path, Path] | None:
    """``(<stem>.metrics.json, tolerances.json)`` for a reference notebook ``<root>/<paper>/<stem>.ipynb``
    whose ``<root>`` holds a ``tolerances.json``; ``None`` for any other notebook."""
    notebook = Path(notebook)
    tolerances = notebook.parent.parent / TOLERANCES
    if not tolerances.is_file():
        return None
    return notebook.with_suffix(".metrics.json"), tolerances


def tolerance_for(key: str, tolerances_file: Path) -> compare.Tolerances:
    """The measured tolerances of notebook ``key`` in ``tolerances_file``, or the file's ``default``; one
    ``ValueError`` naming both when the entry is missing or not a tolerance (NaN, infinite, negative)."""
    try:
        data = json.loads(Path(tolerances_file).read_text())
        return compare.Tolerances.from_json(data["notebooks"].get(key) or data["default"])
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise ValueError(f"{tolerances_file}: the tolerance of {key} cannot be read: {what}") from None


def compare_with_reference(notebook: Path, folder: Path, since: float | None = None) -> compare.Comparison:
    """The smoke run in ``folder`` (its files written since ``since``) against the reference ``notebook``'s
    ``.metrics.json``, with the notebook's tolerances; raises :class:`SmokeMismatch` when there is no
    reference or the run wrote no metrics."""
    notebook = Path(notebook)
    found = reference_of(notebook)
    if found is None:
        raise ValueError(f"{notebook}: not a smoke reference (no {TOLERANCES} two folders up)")
    ref_path, tol_path = found
    key = f"{notebook.parent.name}/{notebook.stem}"
    if not ref_path.is_file():
        raise SmokeMismatch(f"{key}: no reference {ref_path.name}: run `make smoke-refs NB={notebook.stem}`")
    try:
        run = compare.record(folder, since=since)
    except ValueError as exc:
        raise SmokeMismatch(f"{key}: {exc}") from None
    return compare.compare_metrics(json.loads(ref_path.read_text()), run, tolerance_for(key, tol_path), notebook=key)


def check(notebook: Path, since: float | None = None) -> compare.Comparison:
    """Compare the smoke run of the reference ``notebook`` (its output folder, files written since
    ``since``) with its ``.metrics.json``; raises :class:`SmokeMismatch` naming every difference."""
    notebook = Path(notebook)
    result = compare_with_reference(notebook, run_folder(notebook.parent.name, notebook.stem, "smoke"), since)
    if not result.ok():
        lines = "\n  ".join(result.problems())
        raise SmokeMismatch(f"{result.notebook}: the smoke run differs from {notebook.stem}.metrics.json "
                            f"(tolerances: {TOLERANCES}):\n  {lines}")
    return result


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Note when a notebook's first cell starts; after its ``nbval-check-output`` cell, :func:`check` it."""
    if not _is_nbval_cell(item) or reference_of(Path(str(item.parent.path))) is None:
        return (yield)
    if not hasattr(item.parent, _STARTED):
        setattr(item.parent, _STARTED, time.time() - 1.0)  # mtimes may be rounded to the second
    result = yield
    if "nbval-check-output" in item.cell.metadata.get("tags", []):
        check(Path(str(item.parent.path)), since=getattr(item.parent, _STARTED))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Report a :class:`SmokeMismatch` as its message alone (nbval would print it as a plugin error)."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(SmokeMismatch):
        report.longrepr = str(call.excinfo.value)
    return report
