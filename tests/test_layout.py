"""The library's layers: every module sits in the subpackage of its role and imports only its own role
or the roles below it.

Roles, bottom to top (``lib/layersim/<role>/``):

- core: where things are written and how they are named (paths, protected writers, markup, the machine);
- measures: pure array maths (the input core ``arrays``, similarity, alignment, redundancy, collapse,
  block structure, trends, probes);
- inputs: offline assets, data sets, text tasks;
- nets: any model, one way in (adapters, reading layers, readouts, surgery, parameter counts, linear maps);
- train: models trained here (the loops, the checkpoint store, objectives, small networks, heads, fine-tuning);
- analysis: every lens on any model (the lens registry, one pass over every layer, ``analyze`` and its report);
- notebook: what notebook cells call (settings, presets, results and claims, plotting);
- papers: the four papers' protocols, ``papers/<paper>/``; nothing outside ``papers`` imports them;
- tools: runner, report, benchmarks, comparisons.

Every import of a layersim module counts, at the top of a file or inside a function.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from builders import FILE_SUFFIXES, resolves

LIB = Path(__file__).resolve().parents[1] / "lib" / "layersim"
ORDER = ["core", "measures", "inputs", "nets", "train", "analysis", "notebook", "papers", "tools"]


def module_name(path: Path) -> str:
    """``lib/layersim/nets/models.py`` -> ``nets.models``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(LIB.rglob("*.py"))}
FILES.pop("", None)  # layersim/__init__.py: the version and the few names it imports lazily, above every role
FILES.pop("__main__", None)  # the command-line dispatch, above every role
MODULES = sorted(FILES)


def role_of(module: str) -> str:
    return module.split(".")[0]


def imports_of(module: str) -> list[tuple[str, int]]:
    """The layersim modules ``module`` imports (dotted below ``layersim``), with the line of each import."""
    tree = ast.parse(FILES[module].read_text())
    here = module.split(".") if FILES[module].name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "layersim" or node.module.startswith("layersim.")):
                prefix = node.module[len("layersim."):] if node.module != "layersim" else ""
            else:
                continue
            for a in node.names:
                full = f"{prefix}.{a.name}" if prefix else a.name
                targets.append(full if full in FILES else prefix)
        elif isinstance(node, ast.Import):
            targets = [a.name[len("layersim."):] for a in node.names if a.name.startswith("layersim.")]
        found += [(t, node.lineno) for t in targets if t in FILES and t != module]
    return found


def test_every_module_sits_in_a_role_package():
    outside = [m for m in MODULES if role_of(m) not in ORDER]
    assert outside == [], f"put these modules in one of the role packages {ORDER}: {outside}"
    flat = [p.name for p in LIB.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert flat == [], f"modules at the top of layersim/ have no role: {flat}"
    for role in ORDER:
        assert (LIB / role / "__init__.py").is_file(), f"layersim/{role}/ needs an __init__.py that says what it holds"


def test_role_packages_hold_no_code_of_their_own():
    """A role's ``__init__`` documents it and re-exports nothing: a module is imported from its one home."""
    for init in LIB.rglob("__init__.py"):
        if init.parent == LIB:
            continue
        body = [n for n in ast.parse(init.read_text()).body if not isinstance(n, ast.Expr)]
        assert body == [] or all(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in body), \
            f"{init.relative_to(LIB)} should hold a docstring only"


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_down_and_papers_stay_among_themselves(module):
    wrong = []
    mine = role_of(module)
    for dep, line in imports_of(module):
        theirs = role_of(dep)
        if ORDER.index(theirs) > ORDER.index(mine):
            wrong.append(f"line {line}: {module} ({mine}) imports {dep} ({theirs}), a role above it")
        elif theirs == "papers" and mine != "papers":
            wrong.append(f"line {line}: {module} ({mine}) imports the paper protocol {dep}")
    assert not wrong, "\n".join(wrong)


def test_the_import_reader_resolves_every_form(tmp_path):
    """The reader behind the two tests above sees relative, absolute and package-level imports."""
    src = ("from layersim.nets import models\nfrom layersim.measures.similarity import cka\n"
           "import layersim.core.paths\nfrom ..inputs import data\nfrom . import readout\n")
    fake = LIB / "nets" / "_layout_probe.py"
    FILES["nets._layout_probe"] = fake
    try:
        fake.write_text(src)
        got = sorted(d for d, _ in imports_of("nets._layout_probe"))
    finally:
        fake.unlink()
        FILES.pop("nets._layout_probe")
    assert got == ["core.paths", "inputs.data", "measures.similarity", "nets.models", "nets.readout"]


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


def test_no_import_cycle_between_modules_or_between_role_packages():
    graph = {m: {d for d, _ in imports_of(m)} for m in MODULES}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    roles = {r: {role_of(d) for m in MODULES if role_of(m) == r for d in graph[m]} - {r} for r in ORDER}
    cycle = find_cycle(roles)
    assert cycle is None, "import cycle between role packages: " + " -> ".join(cycle)


def test_the_readme_table_of_roles_matches_the_tree():
    """The library page's (docs/library.md) "The library" table lists every role package, in order, and exactly
    the modules in it."""
    readme = (LIB.parents[1] / "docs" / "library.md").read_text()
    section = readme[readme.index("## The library"):]
    section = section[:section.index("\n## ", 3)]
    rows = {role: sorted(re.findall(r"`(\w+)`(?!/)", modules))
            for role, modules in re.findall(r"^\| `(\w+)/` \| (.*?) \|", section, re.M)}
    tree = {r: sorted(m.split(".")[-1] for m in MODULES
                      if role_of(m) == r and m.count(".") == (2 if r == "papers" else 1)) for r in ORDER}
    assert list(rows) == ORDER, f"the table's roles, in order: {list(rows)}; the tree's: {ORDER}"
    assert rows == tree


#: the most lines a library module may have, unless CONTRIBUTING's list of longer modules names it with a reason
MAX_LINES = 600


def long_modules_allowed(text: str) -> set[str]:
    """The modules CONTRIBUTING's table of longer modules names (``| `measures/similarity.py` | ... |`` rows)."""
    section = text[text.index("Kept longer, with the reason:"):]
    section = section[:section.index("\n# ")]
    return set(re.findall(r"^\| `(\w+/\w+\.py)` \|", section, re.M))


def test_no_module_is_longer_than_600_lines_unless_contributing_says_why():
    allowed = long_modules_allowed((LIB.parents[1] / "CONTRIBUTING.md").read_text())
    lengths = {p.relative_to(LIB).as_posix(): len(p.read_text().splitlines()) for p in LIB.rglob("*.py")}
    long = {m: n for m, n in lengths.items() if n > MAX_LINES}
    assert set(long) <= allowed, f"modules over {MAX_LINES} lines that CONTRIBUTING does not list: " \
        f"{ {m: n for m, n in long.items() if m not in allowed} }: split them by concern"
    assert allowed <= set(long), f"CONTRIBUTING lists modules no longer over {MAX_LINES} lines: {allowed - set(long)}"


def test_the_list_of_longer_modules_is_read_from_its_table():
    text = "x\nKept longer, with the reason:\n\n| module |\n|---|\n| `a/b.py` | 9 | why |\n| `c/d.py` | 1 | y |\n\n# Next\n| `e/f.py` |"
    assert long_modules_allowed(text) == {"a/b.py", "c/d.py"}


# ----------------------------------------------------------------------------- tests mirror the library

TESTS = LIB.parents[1] / "tests"
#: files of tests/ named after no module: checks of the repository as a whole
REPOSITORY_CHECKS = {"test_data_card.py", "test_exercises.py", "test_gpu.py", "test_layout.py", "test_library_docs.py",
                     "test_notebooks.py", "test_packaging.py"}


def mirrored_test(path: Path) -> Path:
    """Where the tests of the library module ``path`` live: ``lib/layersim/measures/similarity.py`` ->
    ``tests/measures/test_similarity.py``, ``lib/layersim/__main__.py`` -> ``tests/test_main.py``."""
    rel = path.relative_to(LIB)
    return TESTS / rel.parent / f"test_{rel.stem.strip('_')}.py"


def test_every_module_has_its_tests_at_the_mirrored_path():
    missing = [f"{module_name(p) or '__main__'} -> {mirrored_test(p).relative_to(TESTS.parent)}"
               for p in sorted(LIB.rglob("*.py")) if p.name != "__init__.py" and not mirrored_test(p).is_file()]
    assert not missing, "library modules without their test module:\n" + "\n".join(missing)


def test_every_test_module_mirrors_a_library_module_or_checks_the_repository():
    modules = {mirrored_test(p) for p in LIB.rglob("*.py") if p.name != "__init__.py"}
    stray = [t.relative_to(TESTS.parent).as_posix() for t in sorted(TESTS.rglob("test_*.py"))
             if t not in modules and not (t.parent == TESTS and t.name in REPOSITORY_CHECKS)]
    assert not stray, "test modules named after no library module (name them after the module they test):\n" + \
        "\n".join(stray)


# ----------------------------------------------------------------------------- the docs name what exists


DOCS = ["README.md", "CONTRIBUTING.md", "data/README.md", *sorted(p.relative_to(LIB.parents[1]).as_posix()
                                                                  for p in (LIB.parents[1] / "docs").glob("*.md")),
        *sorted(p.relative_to(LIB.parents[1]).as_posix() for p in (LIB.parents[1] / "benchmarks").glob("*.md"))]


def test_every_layersim_name_in_the_docs_exists():
    """A module or function moved or renamed leaves no stale ``layersim.x.y`` in the README, CONTRIBUTING, the data
    card, docs/ or benchmarks/."""
    stale = sorted({f"{doc}: {name}" for doc in DOCS
                    for name in re.findall(r"\blayersim(?:\.[A-Za-z_][A-Za-z0-9_]*)+", (LIB.parents[1] / doc).read_text())
                    if name.rpartition(".")[2] not in FILE_SUFFIXES and not resolves(name)})
    assert not stale, "names in the docs that do not exist:\n" + "\n".join(stale)


def test_the_name_resolver_tells_a_stale_name():
    assert resolves("layersim.measures.similarity") and resolves("layersim.core.device.set_float32_mode")
    assert not resolves("layersim.measures.probe.train_head") and not resolves("layersim.nosuch")
