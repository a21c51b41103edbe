"""The library's layers: every module has one role, and imports only its own role or the roles below.

Roles, bottom to top (the subpackages the library is growing into):

- core: where things are written and how arrays are checked (``paths``, ``writers``, ``markup``, ``machine``, ``arrays``);
- measures: pure array maths (similarity, alignment scores, redundancy, collapse, block structure, trends, probes);
- inputs: offline assets, data sets, text tasks;
- nets: any model, one way in (adapters, extraction, readout, surgery, parameter counts, linear maps, generation);
- train: models trained here (the checkpoint store, the training loop and objectives, the small networks);
- notebook: what notebook cells call (settings, results and claims, plotting, presets, the lens registry);
- papers: the four papers' protocols; nothing outside them imports them;
- tools: runner, report, benchmarks, comparisons.

Every import of a layersim module counts, at the top of a file or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "layersim"

ROLES = {
    "core": "paths writers markup machine arrays",
    "measures": "similarity collapse block_structure trends probe alignment redundancy",
    "inputs": "assets data text_tasks shift",
    "nets": "adapters models readout surgery params generation linear_maps",
    "train": "checkpoints training objectives mlp small_nets finetune heads",
    "notebook": "settings results plotting presets lenses",
    "papers": "alignment_layers alignment_peaks alignment_pretrain alignment_sweep alignment_text clusters_finetune "
              "redundancy_models redundancy_rba tracing_clip tracing_llm lm early_exit",
    "tools": "runner report bench bench_train compare portable smoke_check",
}
ORDER = list(ROLES)
ROLE_OF = {m: r for r, ms in ROLES.items() for m in ms.split()}
MODULES = sorted(p.stem for p in LIB.glob("*.py") if p.stem not in ("__init__", "__main__"))


def imports_of(module: str) -> list[tuple[str, int]]:
    """The layersim modules ``module`` imports, with the line of each import."""
    tree = ast.parse((LIB / f"{module}.py").read_text())
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [a.name for a in node.names] if node.module is None else [node.module.split(".")[0]]
            elif node.module and node.module.split(".")[0] == "layersim":
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("layersim.")]
        found += [(n, node.lineno) for n in names if n in MODULES and n != module]
    return found


def test_every_module_has_a_role():
    assert sorted(set(MODULES) - set(ROLE_OF)) == [], "give each new module a role in ROLES"
    assert sorted(set(ROLE_OF) - set(MODULES)) == [], "a module in ROLES no longer exists"


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_down_and_papers_stay_among_themselves(module):
    wrong = []
    mine = ROLE_OF[module]
    for dep, line in imports_of(module):
        theirs = ROLE_OF[dep]
        if ORDER.index(theirs) > ORDER.index(mine):
            wrong.append(f"line {line}: {module} ({mine}) imports {dep} ({theirs}), a role above it")
        elif theirs == "papers" and mine != "papers":
            wrong.append(f"line {line}: {module} ({mine}) imports the paper protocol {dep}")
    assert not wrong, "\n".join(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (``[a, b, ..., a]``), or None (depth-first search)."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d] if d in path else [m, d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y"}}) == ["y", "y"]


def test_no_import_cycle():
    cycle = find_cycle({m: {d for d, _ in imports_of(m)} for m in MODULES})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
