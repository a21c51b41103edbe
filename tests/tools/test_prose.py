"""Tests of layersim.tools.prose: numbers typed by hand in a notebook's prose, and the committed notebooks' text.

A number typed by hand is excused only by notebooks/prose_exceptions.json (a scale check shares the excuses of the
notebook it copies), and every committed notebook's text agrees with its committed run.
"""

from __future__ import annotations

import json

import pytest

from layersim.notebook import prose
from layersim.tools import prose as prose_tool
from builders import REPO, prose_notebook


def test_a_scale_check_shares_the_excuses_of_the_notebook_it_copies():
    copy = "figures/scale_checks/clusters/c01_cka_structure/c01_cka_structure.ipynb"
    assert prose_tool.is_scale_check(copy) and not prose_tool.is_scale_check("notebooks/clusters/c01_cka_structure.ipynb")
    assert prose_tool.exceptions_label(copy) == "notebooks/clusters/c01_cka_structure.ipynb"
    typed = prose_notebook("rho {{claims.fit.value:.2f}}", "rho 0.55", "over 3 seeds")
    excused = {"notebooks": {}, "numbers": [{"notebook": "notebooks/clusters/c01_cka_structure.ipynb", "number": "3",
                                             "context": "over 3 seeds", "reason": "the runner's seed count"}]}
    assert prose_tool.unexcused(copy, typed, excused) == []
    assert prose_tool.unexcused("notebooks/clusters/c02_truncation.ipynb", typed, excused) == [(3, "3", "over 3 seeds")]


def test_a_number_typed_by_hand_is_found_unless_excused():
    typed = prose_notebook("rho {{claims.fit.value:.2f}}", "rho 0.55", "and by hand 0.63 over 3 seeds")
    assert prose_tool.unexcused("nb.ipynb", typed, {"notebooks": {}, "numbers": []}) == [
        (3, "0.63", "and by hand 0.63 over 3 seeds"), (3, "3", "and by hand 0.63 over 3 seeds")]
    excused = {"notebooks": {}, "numbers": [{"notebook": "nb.ipynb", "number": "3", "context": "over 3 seeds",
                                             "reason": "the runner's seed count"}]}
    assert [n for _, n, _ in prose_tool.unexcused("nb.ipynb", typed, excused)] == ["0.63"]
    assert prose_tool.unexcused("nb.ipynb", typed, {"notebooks": {"nb.ipynb": "not yet bound"}, "numbers": []}) == []


# --- the committed notebooks ------------------------------------------------------------------------------------

COMMITTED = list(prose_tool.committed_notebooks(REPO))


@pytest.mark.parametrize("nb_path,metrics", COMMITTED, ids=[prose_tool.label(nb, REPO) for nb, _ in COMMITTED])
def test_every_committed_notebook_says_what_its_committed_run_measured(nb_path, metrics):
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    name = prose_tool.label(nb_path, REPO)
    stale = prose.stale_cells(nb, json.loads(metrics.read_text(encoding="utf-8")), not prose_tool.is_scale_check(name))
    assert not stale, "\n".join(f"cell {c}: shows\n{old}\nbut its run gives\n{new}" for c, old, new in stale)
    loose = prose_tool.unexcused(name, nb, prose_tool.load_exceptions(REPO))
    assert not loose, "numbers typed by hand (bind them with a field, or list them with a reason in " \
        f"{prose_tool.EXCEPTIONS}):\n" + "\n".join(f"cell {c}: {n} in {ctx!r}" for c, n, ctx in loose)


def test_the_exceptions_name_committed_notebooks_only():
    names = {prose_tool.label(nb, REPO) for nb, _ in COMMITTED}
    exceptions = prose_tool.load_exceptions(REPO)
    unknown = (set(exceptions["notebooks"]) | {e["notebook"] for e in exceptions["numbers"]}) - names
    assert not unknown, f"{prose_tool.EXCEPTIONS} names notebooks without a committed run: {sorted(unknown)}"
