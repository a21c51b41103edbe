"""Tests of layersim.tools.cleaning: what an executed notebook loses or gains before it is committed.

Machine paths made relative to the repository, widget state and outputs left out, a scale check's note and its
pointer in place of the default run's interpretation (checked on the committed scale checks too), and a smoke
reference cut to the outputs nbval compares.
"""

import json

import nbformat

from layersim.notebook import prose
from layersim.tools import cleaning
from builders import REPO


def test_without_root_makes_paths_in_the_repository_relative_and_leaves_the_rest(tmp_path):
    root = tmp_path / "repo"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "repo2").mkdir()
    root.mkdir()
    (root / "link").symlink_to(root)  # a root reached through a link is the same root
    nb = {"metadata": {"papermill": {"input_path": f"{root}/notebooks/p/n.ipynb", "parameters": {"n": 3}}},
          "cells": [{"cell_type": "code", "source": [f'out = "{root / "link"}/figures/p/n"\n'],
                     "outputs": [{"output_type": "stream", "text": [f"writing to {root.resolve()}/runs/x\n",
                                                                      f"cache {tmp_path}/elsewhere/c\n",
                                                                      f"sibling {tmp_path}/repo2/f\n"]}]}]}
    got = cleaning.without_root(nb, root / "link")
    assert got["metadata"]["papermill"] == {"input_path": "notebooks/p/n.ipynb", "parameters": {"n": 3}}
    assert got["cells"][0]["source"] == ['out = "figures/p/n"\n']
    assert got["cells"][0]["outputs"][0]["text"] == ["writing to runs/x\n", f"cache {tmp_path}/elsewhere/c\n",
                                                     f"sibling {tmp_path}/repo2/f\n"]
    assert nb["cells"][0]["source"][0].startswith('out = "/')  # the input is not changed


def test_a_committed_scale_check_opens_with_what_it_is(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "id": "x", "metadata": {}, "source": ["# t01"]}], "metadata": {},
          "nbformat": 4, "nbformat_minor": 5}
    noted = cleaning.with_scale_check_note(nb, "tracing/t01_cos_vs_cka")
    first = "".join(noted["cells"][0]["source"])
    assert noted["cells"][0]["id"] == cleaning.SCALE_CHECK_NOTE and "`notebooks/tracing/t01_cos_vs_cka.ipynb`" in first
    assert "default-scale run" in first and len(noted["cells"]) == 2 and nb["cells"][0]["id"] == "x"
    assert cleaning.with_scale_check_note(noted, "tracing/t01_cos_vs_cka") == noted  # added once
    for path in sorted(REPO.glob("figures/scale_checks/*/*/*.ipynb")):  # the committed ones
        assert json.loads(path.read_text())["cells"][0]["id"] == cleaning.SCALE_CHECK_NOTE, path


def test_a_committed_scale_check_leaves_out_the_default_runs_interpretation():
    def md(text, id_):
        return {"cell_type": "markdown", "id": id_, "metadata": {}, "source": [text]}

    code = {"cell_type": "code", "id": "c", "metadata": {}, "source": ["x = 1"], "outputs": [], "execution_count": 1}
    nb = {"cells": [md("# t01", "a"), code, md("## What we found (default scale)\n\n0.55 over 3 seeds", "f"),
                    md("**Diagnosis.** blocks 4-6", "g"), code, md("## Exercises\n\n1. run it", "e")],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    cut = cleaning.without_findings(nb, "tracing/t01_cos_vs_cka")
    assert [c["id"] for c in cut["cells"]] == ["a", "c", cleaning.SCALE_CHECK_FINDINGS, "e"]
    note = "".join(cut["cells"][2]["source"])  # the heading stays, the default run's text and numbers do not
    assert note.startswith(cleaning.FINDINGS) and "0.55" not in note
    assert "`notebooks/tracing/t01_cos_vs_cka.ipynb`" in note
    assert cleaning.without_findings(cut, "tracing/t01_cos_vs_cka") == cut  # once
    left = md(prose.NOT_THIS_RUN.format(why="scores has no '2'"), "f")  # a passage another run cannot fill
    left["metadata"] = {prose.KEY: {"template": "## What we found (default scale)\n\n{{scores.2}}"}}
    nb2 = {**nb, "cells": [*nb["cells"][:2], left, *nb["cells"][3:]]}
    ids = [c["id"] for c in cleaning.without_findings(nb2, "t/x")["cells"]]
    assert ids == ["a", "c", cleaning.SCALE_CHECK_FINDINGS, "e"]
    plain = {**nb, "cells": [md("# t01", "a"), code]}
    assert cleaning.without_findings(plain, "tracing/t01_cos_vs_cka") == plain  # a notebook without findings: as it is
    for path in sorted(REPO.glob("figures/scale_checks/*/*/*.ipynb")):  # the committed ones
        ids = [c.get("id") for c in json.loads(path.read_text())["cells"]]
        assert cleaning.SCALE_CHECK_FINDINGS in ids, path


def test_widget_state_and_widget_outputs_are_left_out_of_the_book():
    view = {"model_id": "x", "version_major": 2, "version_minor": 0}
    nb = {"metadata": {"widgets": {"state": {}}, "kernelspec": {}},
          "cells": [{"cell_type": "code", "outputs": [
              {"output_type": "display_data", "data": {cleaning.WIDGET_VIEW: view, "text/plain": "HBox()"}},
              {"output_type": "display_data", "data": {cleaning.WIDGET_VIEW: view, "image/png": "AA=="}},
              {"output_type": "stream", "name": "stdout", "text": "kept"}]},
              {"cell_type": "markdown", "source": "text"}]}
    got = cleaning.without_widgets(nb)
    assert "widgets" not in got["metadata"] and "kernelspec" in got["metadata"]
    assert got["cells"][0]["outputs"] == [{"output_type": "display_data", "data": {"image/png": "AA=="}},
                                          {"output_type": "stream", "name": "stdout", "text": "kept"}]
    assert cleaning.WIDGET_VIEW in nb["cells"][0]["outputs"][0]["data"]  # the input is not changed


def test_a_smoke_reference_keeps_the_checked_outputs_and_the_rounded_wall_time(tmp_path):
    busy = {"iopub.status.busy": "2026-11-28T10:00:00"}
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"duration": 12.345, "input_path": "/x/n.ipynb"}})
    out = nbformat.v4.new_output("execute_result", {"text/plain": "42"}, execution_count=1)
    nb.cells = [nbformat.v4.new_code_cell("6 * 7", outputs=[out], execution_count=1,
                                          metadata={"tags": ["nbval-check-output"], "papermill": {"duration": 1.0}}),
                nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")],
                                          execution_count=2, metadata={"execution": busy}),
                nbformat.v4.new_markdown_cell("text", metadata={"papermill": {}})]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, str(path))
    cleaning.strip_reference(path)
    got = nbformat.read(str(path), as_version=4)
    assert got.metadata.papermill == {"duration": 12.3}
    checked, other, text = got.cells
    assert checked.outputs[0].data == {"text/plain": "42"} and checked.execution_count == 1
    assert other.outputs == [] and other.execution_count is None
    assert all("papermill" not in c.metadata and "execution" not in c.metadata for c in got.cells)
    assert checked.metadata.tags == ["nbval-check-output"] and text.source == "text"
