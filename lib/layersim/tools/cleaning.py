"""Executed notebooks cleaned before they are committed.

A committed notebook loses its widget state and outputs (:func:`without_widgets`) and the repository's absolute path
(:func:`without_root`); a committed scale check opens with a note saying what it is (:func:`with_scale_check_note`)
and stands a pointer in for the default run's interpretation (:func:`without_findings`); a smoke reference keeps
only the outputs nbval compares and its wall time (:func:`strip_reference`). The dict functions return a new
notebook and leave their input as it was (see docs/modules.md, `layersim.tools.cleaning`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from layersim.notebook import prose

def strip_reference(path: Path) -> None:
    """Keep only what nbval compares in a smoke reference: the outputs of the cells tagged ``nbval-check-output``, and
    papermill's ``duration`` (rounded to 0.1 s), the smoke time the README shows."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and "nbval-check-output" not in cell.metadata.get("tags", []):
            cell.outputs = []
            cell.execution_count = None
    seconds = (nb.metadata.pop("papermill", None) or {}).get("duration")
    if seconds is not None:
        nb.metadata["papermill"] = {"duration": round(float(seconds), 1)}
    nbformat.write(nb, str(path))


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


#: the id of the Markdown cell that opens a committed scale check (:func:`with_scale_check_note`)
SCALE_CHECK_NOTE = "layersim-scale-check-note"


def with_scale_check_note(nb: dict, notebook: str) -> dict:
    """``nb`` (a committed scale check's JSON) opening, once, with a Markdown cell saying that it is ``notebook``
    (``<paper>/<stem>``) run with its larger settings."""
    cells = nb.get("cells", [])
    if cells and cells[0].get("id") == SCALE_CHECK_NOTE:
        return nb
    text = (f"*The committed scale check of `notebooks/{notebook}.ipynb`: that notebook run with the larger "
            "settings of `layersim.notebook.seeds.SCALE_CHECKS`. Its code, its outputs and the numbers in its text are "
            "this run's (filled from the `metrics.json` beside this notebook); a passage that reads values this run "
            "does not have is left out and says so, and so is the interpretation written for the default-scale run "
            "(\"What we found\"): what this larger run settled is said in the notebook itself and in the claims "
            "table of the README.*\n")
    note = {"cell_type": "markdown", "id": SCALE_CHECK_NOTE, "metadata": {}, "source": text.splitlines(keepends=True)}
    return {**nb, "cells": [note, *cells]}


#: the heading of a notebook's interpretation of its default-scale run, which runs to the next level-2 heading
FINDINGS = "## What we found"
#: the id of the Markdown cell that stands in a committed scale check for the default run's interpretation
SCALE_CHECK_FINDINGS = "layersim-scale-check-findings"


def without_findings(nb: dict, notebook: str) -> dict:
    """``nb`` (a committed scale check's JSON) with the default run's interpretation (from :data:`FINDINGS` to the next
    level-2 heading) replaced by a cell saying where this run's findings are."""
    cells = nb.get("cells", [])

    def opens(cell: dict, heading: str) -> bool:  # its text or its template (a passage left out keeps it there)
        texts = ("".join(cell.get("source", "")), prose.template_of(cell) or "")
        return cell.get("cell_type") == "markdown" and any(t.lstrip().startswith(heading) for t in texts)

    start = next((i for i, c in enumerate(cells) if opens(c, FINDINGS)), None)
    if start is None or cells[start].get("id") == SCALE_CHECK_FINDINGS:
        return nb
    end = next((i for i in range(start + 1, len(cells)) if opens(cells[i], "## ")), len(cells))
    text = (f"{FINDINGS}\n\n*The notebook's interpretation is left out of this copy: it was written for the "
            "default-scale run and its numbers. This larger run's numbers are its outputs above (the claims table) "
            "and the `metrics.json` beside this notebook; what it settled is stated in the diagnosis of "
            f"`notebooks/{notebook}.ipynb` and in the README's claims table.*\n")
    note = {"cell_type": "markdown", "id": SCALE_CHECK_FINDINGS, "metadata": {},
            "source": text.splitlines(keepends=True)}
    return {**nb, "cells": [*cells[:start], note, *cells[end:]]}


def without_widgets(nb: dict) -> dict:
    """``nb`` (a notebook's JSON) without Jupyter widget state and outputs (progress bars), which render as nothing
    outside a kernel and would load scripts from a CDN."""
    nb = json.loads(json.dumps(nb))
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if isinstance(data, dict) and WIDGET_VIEW in data:
                data.pop(WIDGET_VIEW)
                if set(data) <= {"text/plain"}:
                    continue  # only the widget's text stand-in ("HBox(...)") is left: drop the output
            outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def without_root(nb: dict, root: Path) -> dict:
    """``nb`` (a notebook's JSON) with ``<root>/`` taken out of every string, so that a committed notebook names no
    machine's folders; paths outside the repository stay."""
    prefixes = sorted({str(Path(root)) + os.sep, str(Path(root).resolve()) + os.sep}, key=len, reverse=True)

    def walk(x):
        if isinstance(x, str):
            for prefix in prefixes:
                x = x.replace(prefix, "")
            return x
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        return x

    return walk(nb)
