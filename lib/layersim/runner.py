"""Run the project's notebooks with papermill: ``python -m layersim.runner``.

``make reproduce`` calls this. Every notebook under ``notebooks/<paper>/`` (or those matching
``--nb``) is executed with ``scale`` injected as a papermill parameter, one progress line per
notebook with its wall time. A failing notebook is named with the cell that failed; the batch
goes on and the command exits non-zero at the end.

Where the executed notebook goes:

- ``--scale default``: executed into ``runs/default/<paper>/<stem>/<stem>.ipynb`` first; on
  success it replaces ``notebooks/<paper>/<stem>.ipynb`` (notebooks are committed with the
  outputs of their last default-scale run). Its figures and ``metrics.json`` are written by
  the notebook itself into ``figures/<paper>/<stem>/``. A failed run leaves the committed
  notebook untouched.
- other scales: ``runs/<scale>/<paper>/<stem>/<stem>.ipynb`` (never ``notebooks/`` or ``figures/``).
- ``--refs``: the smoke-scale reference copies under ``tests/notebooks/<paper>/`` that the
  nbval regression tests compare against (``make smoke-refs``).
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .paths import repo_root
from .results import check_scale

KERNEL = "python3"


@dataclass
class Outcome:
    notebook: Path
    ok: bool
    seconds: float
    error: str = ""


def discover(pattern: str = "", root: Path | None = None) -> list[Path]:
    """Notebooks under ``notebooks/`` whose relative path matches ``pattern``.

    ``pattern`` is a glob (``tracing/t0*``) or a plain substring (``t01``); empty means all.
    Checkpoint folders are skipped.
    """
    base = (root or repo_root()) / "notebooks"
    found = sorted(p for p in base.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not pattern:
        return found

    def match(p: Path) -> bool:
        rel = p.relative_to(base).as_posix()
        return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, pattern + ".ipynb") or pattern in rel

    return [p for p in found if match(p)]


def describe_failure(exc: BaseException) -> str:
    """One line naming the failing cell and the error, for papermill's execution errors.

    Cells are counted from 1 in the executed notebook, which holds papermill's injected
    parameters cell right after the ``parameters`` cell.
    """
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        first = (exc.source or "").strip().splitlines()[:1]
        where = f"cell {exc.cell_index + 1} (execution count {exc.exec_count})"
        return f"{where}: {exc.ename}: {exc.evalue}" + (f"  [{first[0][:80]}]" if first else "")
    return f"{type(exc).__name__}: {exc}"


def target_paths(nb: Path, scale: str, refs: bool, root: Path) -> tuple[Path, Path | None]:
    """``(executed, publish)``: where papermill writes, and where a successful run is copied."""
    rel = nb.relative_to(root / "notebooks")
    paper, stem = rel.parent.as_posix(), nb.stem
    if refs:
        return root / "tests" / "notebooks" / paper / nb.name, None
    executed = root / "runs" / scale / paper / stem / nb.name
    return executed, (nb if scale == "default" else None)


def run_notebook(nb: Path, scale: str, refs: bool = False, params: dict | None = None, root: Path | None = None) -> Outcome:
    """Execute one notebook with papermill at ``scale``; never raises for notebook errors."""
    import papermill as pm

    root = root or repo_root()
    executed, publish = target_paths(nb, scale, refs, root)
    executed.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(
            str(nb), str(executed), parameters={"scale": scale, **(params or {})},
            kernel_name=KERNEL, progress_bar=False, cwd=str(nb.parent),
        )
    except Exception as exc:  # papermill raises on the first failing cell
        error = f"{describe_failure(exc)} -- see {executed.relative_to(root)}"
        return Outcome(nb, False, time.perf_counter() - t0, error)
    if publish is not None:
        shutil.copyfile(executed, publish)
    if refs:
        strip_reference(executed)
    return Outcome(nb, True, time.perf_counter() - t0)


def strip_reference(path: Path) -> None:
    """Keep only what nbval compares in a smoke reference: the outputs of the cells tagged
    ``nbval-check-output``. Other outputs, execution timings and papermill's run metadata are
    dropped so that the reference stays small and its diffs show real changes."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and "nbval-check-output" not in cell.metadata.get("tags", []):
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("papermill", None)
    nbformat.write(nb, str(path))


def parse_value(text: str):
    """Parse a ``-p name value`` value like papermill does: a Python literal, else a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim.runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="default", help="smoke, default or paper (default: default)")
    ap.add_argument("--nb", default="", help="glob or substring of notebooks/<paper>/<stem> to run (default: all)")
    ap.add_argument("--refs", action="store_true", help="write smoke-scale nbval references under tests/notebooks/")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"), help="extra papermill parameter")
    ap.add_argument("--list", action="store_true", help="list the notebooks that would run and exit")
    args = ap.parse_args(argv)
    scale = "smoke" if args.refs else check_scale(args.scale)
    notebooks = discover(args.nb)
    if not notebooks:
        print(f"no notebook matches {args.nb!r} under notebooks/", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(str(p.relative_to(repo_root())) for p in notebooks))
        return 0
    params = {name: parse_value(value) for name, value in args.p}
    outcomes = []
    for i, nb in enumerate(notebooks, 1):
        name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
        print(f"[{i}/{len(notebooks)}] {name} (scale={scale}) ...", flush=True)
        out = run_notebook(nb, scale, refs=args.refs, params=params)
        status = "ok" if out.ok else f"FAILED at {out.error}"
        print(f"[{i}/{len(notebooks)}] {name}: {status} ({out.seconds:.1f} s)", flush=True)
        outcomes.append(out)
    failed = [o for o in outcomes if not o.ok]
    total = sum(o.seconds for o in outcomes)
    print(f"{len(outcomes) - len(failed)} notebooks ok, {len(failed)} failed, {total:.0f} s in all")
    for o in failed:
        print(f"  failed: {o.notebook.relative_to(repo_root())}: {o.error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
