"""Run the project's notebooks with papermill: ``python -m layersim.tools.runner``.

``make reproduce`` calls it. It executes every notebook under ``notebooks/<paper>/`` (or those ``--nb`` selects) at
``--scale``, judging each claim over several seeds (:mod:`layersim.notebook.seeds`), with one line per notebook; a
failed notebook is named with its cell, the others go on, and the exit status is 1. Where a run writes is
:func:`plan`'s: only ``--scale default --update-committed`` without ``-p`` replaces the committed results;
``--refs`` writes the smoke references, ``--scale-check`` the scale checks, any other run ``runs/<scale>/``.
``--jobs`` or ``--address`` runs notebooks side by side on Ray (:mod:`layersim.tools.batch`) (see docs/modules.md,
`layersim.tools.runner`).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from layersim.core import locks, paths, writers
from layersim.core.paths import repo_root
from layersim.notebook import prose, results, seeds
from layersim.notebook.results import SCALES
from layersim.tools import claims, committed, compare

KERNEL = "python3"


def kernel_options() -> dict:
    """What every papermill run passes to its kernel: ``python3``, its own log kept to errors (ipykernel 7 warns at
    each start that its local sockets are unencrypted). A fresh dict each call: nbclient appends to its list."""
    return {"kernel_name": KERNEL, "extra_arguments": ["--IPKernelApp.log_level=ERROR"]}


@dataclass
class Outcome:
    notebook: Path
    ok: bool
    seconds: float
    error: str = ""


def discover(pattern: str = "", root: Path | None = None) -> list[Path]:
    """Notebooks under ``notebooks/`` matching ``pattern``: globs (against ``<paper>/<stem>`` and the file name) or
    substrings, several separated by commas; empty means all. ``ValueError`` for commas alone."""
    base = (root or repo_root()) / "notebooks"
    found = sorted(p for p in base.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    patterns = [p.strip() for p in pattern.split(",") if p.strip()]
    if not patterns:
        if pattern.strip():  # "," or " , ": a selection that names nothing is a mistake, not "every notebook"
            raise ValueError(f"--nb {pattern!r} names no notebook: give globs or substrings separated by commas, "
                             "or leave --nb out for all")
        return found

    def match(p: Path, pat: str) -> bool:
        rel = p.relative_to(base).as_posix()
        return pat in rel or any(fnmatch.fnmatch(name, glob) for name in (rel, p.name)
                                 for glob in (pat, pat + ".ipynb"))

    return [p for p in found if any(match(p, pat) for pat in patterns)]


def describe_failure(exc: BaseException) -> str:
    """One line naming the failing cell (counted from 1 in the executed notebook, papermill's injected cell included)
    and the error."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        first = (exc.source or "").strip().splitlines()[:1]
        where = f"cell {exc.cell_index + 1} (execution count {exc.exec_count})"
        return f"{where}: {exc.ename}: {exc.evalue}" + (f"  [{first[0][:80]}]" if first else "")
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Plan:
    """Where one run writes: ``executed`` (papermill's output), ``publish`` (the committed notebook it replaces on
    success, or None) and ``out_root`` (the kernel's ``LAYERSIM_OUT``, or None to let ``results.output_dir``
    choose)."""

    executed: Path
    publish: Path | None
    out_root: Path | None
    committed: bool = False  # a scale check's evidence, written into figures/scale_checks/
    reference: Path | None = None  # a smoke reference's place under tests/notebooks/, written after a success

    @property
    def environment(self) -> dict[str, str | None]:
        """The kernel's ``LAYERSIM_OUT`` and the switch (on only for a publishing run or a committed scale
        check); None unsets."""
        return {"LAYERSIM_OUT": str(self.out_root) if self.out_root else None,
                writers.SWITCH: "1" if self.publish is not None or self.committed else "0"}


def plan(nb: Path, scale: str, refs: bool = False, params: dict | None = None, root: Path | None = None,
         update: bool = False) -> Plan:
    """Where a run of ``nb`` writes. Only a default-scale run with ``update`` (``--update-committed``) and no
    ``params`` publishes into ``notebooks/`` and lets the notebook write ``figures/``. ``ValueError`` for a
    combination that would clobber committed results: ``update`` with params, another scale or ``refs``; ``refs``
    off the smoke scale or with params; a ``scale`` param; a ``$LAYERSIM_OUT`` or ``out`` inside the committed
    folders."""
    root = root or repo_root()
    params = params or {}
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    if "scale" in params:
        raise ValueError("scale is set with --scale, not with -p scale")
    if refs and (scale != "smoke" or params):
        raise ValueError("smoke references are runs at scale smoke with the presets: no --scale, no -p")
    if update and (scale != "default" or params or refs):
        raise ValueError("--update-committed replaces the committed default-scale results: only with --scale "
                         "default, without -p and without --refs")
    rel = nb.relative_to(root / "notebooks")
    paper, stem = rel.parent.as_posix(), nb.stem
    if refs:  # executed under runs/, then written whole into tests/notebooks/ (write_reference)
        return Plan(root / "runs" / "smoke" / "refs" / paper / stem / nb.name, None, None,
                    reference=root / "tests" / "notebooks" / paper / nb.name)
    if update:
        return Plan(root / "runs" / scale / paper / stem / nb.name, nb, None)
    user_out = os.environ.get("LAYERSIM_OUT")
    out_root = writers.resolved(user_out) if user_out else root / "runs" / scale
    if writers.protected_root(out_root / paper, root) is not None:
        raise writers.ProtectedPath(f"LAYERSIM_OUT={user_out!r} points into the committed results ("
                                    f"{writers.protected_root(out_root / paper, root)}), which only "
                                    "--update-committed (make reproduce) writes")
    if isinstance(params.get("out"), str) and writers.protected_root(params["out"], root) is not None:
        raise writers.ProtectedPath(f"-p out {params['out']} points into the committed results, which only "
                                    "--update-committed (make reproduce) writes")
    return Plan(out_root / paper / stem / nb.name, None, out_root)


@contextlib.contextmanager
def temporary_environ(**values: str | None) -> Iterator[None]:
    """Set (or unset, for ``None``) environment variables for the block; restore them after."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: The path variables a kernel reads (:mod:`layersim.core.paths`, :mod:`layersim.notebook.results`).
PATH_VARIABLES = paths.VARIABLES


def absolute_path_variables(environ: dict | None = None) -> dict[str, str]:
    """Make every :data:`PATH_VARIABLES` entry of ``environ`` (default ``os.environ``) absolute from the current
    directory, in place, since kernels start in their notebooks' folders; returns those rewritten."""
    environ = os.environ if environ is None else environ
    resolved = paths.resolved_variables(environ)
    changed = {k: v for k, v in resolved.items() if k in PATH_VARIABLES and v != environ.get(k)}
    environ.update(changed)
    return changed


def notebook_parameters(nb: Path) -> list[str]:
    """The names in ``nb``'s ``parameters`` cell, executing nothing; ``ValueError`` naming a file that is not a
    readable notebook."""
    import papermill as pm

    try:
        return list(pm.inspect_notebook(str(nb)))
    except Exception as exc:  # noqa: BLE001 - NotJSONError, ValidationError, OSError, ...: one line naming the file
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{nb} is not a readable notebook ({type(exc).__name__}: {first})") from exc


def unknown_parameters(notebooks: list[Path], params: dict, root: Path | None = None,
                       known: dict[Path, list[str]] | None = None) -> list[str]:
    """One line per selected notebook that lacks a parameter of ``params``, listing those it has
    (``known``: the notebooks' parameter names already read, by :func:`notebook_parameters`)."""
    root = root or repo_root()
    lines = []
    for nb in notebooks:
        names = known[nb] if known and nb in known else notebook_parameters(nb)
        missing = [p for p in params if p not in names]
        if missing:
            rel = nb.relative_to(root / "notebooks").with_suffix("").as_posix()
            lines.append(f"{rel} has no parameter {', '.join(map(repr, missing))}; its parameters are "
                         f"{', '.join(n for n in names if n != 'scale')}")
    return lines


def run_notebook(nb: Path, scale: str, refs: bool = False, params: dict | None = None, root: Path | None = None,
                 update: bool = False, seed_runs: list[Path] | tuple = (), target: Plan | None = None) -> Outcome:
    """Execute ``nb`` with papermill at ``scale`` where :func:`plan` (or ``target``) says; a notebook error gives a
    failed :class:`Outcome`. ``seed_runs``: the other seeds' output folders, whose claims this run folds in."""
    import papermill as pm

    root = root or repo_root()
    target = target or plan(nb, scale, refs, params, root, update)
    t0 = time.perf_counter()
    try:
        writers.claim_folder(target.executed.parent, "the output folder")
        writers.check_writable(target.executed.parent)
    except ValueError as exc:
        return Outcome(nb, False, 0.0, str(exc))
    with tempfile.TemporaryDirectory(prefix="layersim-refs-") as fresh:
        # a reference run writes into an empty folder, so that its figure list holds this run's alone
        env = {**target.environment, "LAYERSIM_OUT": fresh} if refs else target.environment
        env[seeds.ENV] = os.pathsep.join(map(str, seed_runs)) or None
        try:
            with temporary_environ(**env):
                pm.execute_notebook(
                    str(nb), str(target.executed), parameters={"scale": scale, **(params or {})},
                    progress_bar=False, cwd=str(nb.parent), **kernel_options(),
                )
        except Exception as exc:  # papermill raises on the first failing cell
            error = f"{describe_failure(exc)} -- see {target.executed.relative_to(root)}"
            return Outcome(nb, False, time.perf_counter() - t0, error)
        try:  # the prose's numbers, from the metrics this run wrote (layersim.notebook.prose); a template that does not
            # fit another run (scale, models) fails only the run that replaces the committed one
            with temporary_environ(**env):
                prose.render_file(target.executed, results.run_folder(nb.parent.name, nb.stem, scale) / "metrics.json",
                                  strict=target.publish is not None)
        except ValueError as exc:
            return Outcome(nb, False, time.perf_counter() - t0, f"its prose does not render from the run: {exc}")
        if refs:
            strip_reference(target.executed)
            try:
                write_reference(Path(fresh) / nb.parent.name / nb.stem, target.executed, target.reference, root)
            except ValueError as exc:
                return Outcome(nb, False, time.perf_counter() - t0,
                               f"{exc}: a smoke reference needs the run's results.write_metrics")
    if target.publish is not None:
        committed.phase("publishing")
        publish(target.executed, target.publish, root)
        committed.phase("published")
    elif target.committed:  # a scale check, executed in place into figures/scale_checks/: the same committed form
        publish(target.executed, target.executed, root, scale_check=f"{nb.parent.name}/{nb.stem}")
    return Outcome(nb, True, time.perf_counter() - t0)


def publish(executed: Path, dest: Path, root: Path, scale_check: str | None = None) -> None:
    """Write the executed notebook ``executed`` to ``dest`` (possibly the same file) as a committed copy, whole or not
    at all, through the ``results`` writer: without widgets (:func:`without_widgets`) or the repository's absolute
    path (:func:`without_root`). A scale check (``scale_check="<paper>/<stem>"``) also gets
    :func:`with_scale_check_note` and :func:`without_findings`. The report publishes its committed examples through
    it too."""
    clean = without_root(without_widgets(json.loads(Path(executed).read_text(encoding="utf-8"))), root)
    if scale_check:  # the scale check of the notebook "<paper>/<stem>": it opens with what it is
        clean = with_scale_check_note(without_findings(clean, scale_check), scale_check)
    text = json.dumps(clean, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    writers.write_committed(dest, text, "results", root)


def own_seed(nb: Path, params: dict | None = None) -> int:
    """The seed a run of ``nb`` uses: ``-p seed``, else the default of the notebook's ``seed`` parameter
    (a ``ValueError`` for a notebook without one)."""
    import papermill as pm

    if params and "seed" in params:
        return params["seed"]
    found = pm.inspect_notebook(str(nb)).get("seed")
    if found is None:
        raise ValueError(f"{nb.name} has no 'seed' parameter: its claims cannot be tested over several seeds")
    return parse_value(found["default"])


def seed_plan(nb: Path, scale: str, seed: int, root: Path | None = None, variant: str = "",
              base: Path | None = None) -> Plan:
    """Where the run of ``nb`` at one of the extra seeds writes: its own folder under
    ``runs/<scale>/seeds/[<variant>/]seed-<seed>/``, or ``<base>/seeds/...`` (:func:`seed_base`;
    :func:`layersim.notebook.seeds.seed_folder`), never committed results."""
    root = root or repo_root()
    out_root = seeds.seed_folder(root, scale, seed, variant, base=base)
    return Plan(out_root / nb.parent.name / nb.stem / nb.name, None, out_root)


def seed_base(target: Plan, root: Path | None = None) -> Path | None:
    """The folder the other seeds' runs of ``target`` go under: the run's own output folder when it lies outside the
    repository (``$LAYERSIM_OUT``), else None (``runs/<scale>/``)."""
    root = root or repo_root()
    if target.publish is not None or target.committed or target.out_root is None:
        return None
    return None if writers.resolved(target.out_root).is_relative_to(writers.resolved(root)) else target.out_root


def scale_check_plan(nb: Path, root: Path | None = None, update: bool = False) -> Plan:
    """Where the scale check of ``nb`` (:data:`layersim.notebook.seeds.SCALE_CHECKS`) writes: the executed
    notebook, its figures and ``metrics.json`` in ``figures/scale_checks/<paper>/<stem>/`` with ``update``
    (the committed evidence of a *scale* diagnosis), else ``runs/default/scale_checks/<paper>/<stem>/``."""
    root = root or repo_root()
    out_root = (root / "figures" if update else root / "runs" / "default") / claims.SCALE_CHECK_FOLDER
    return Plan(out_root / nb.parent.name / nb.stem / nb.name, None, out_root, committed=update)


def run_with_seeds(nb: Path, scale: str, n: int, params: dict | None = None, root: Path | None = None,
                   update: bool = False, say=print, target: Plan | None = None, variant: str = "") -> list[Outcome]:
    """Run ``nb`` at ``n`` seeds: the seeds after its own first (:func:`seed_plan`, folders named by ``variant``), then
    its own run where ``target`` (default :func:`plan`) says, which judges every claim over all ``n``. A failed seed
    run stops the notebook. Returns the outcomes in the order run; ``say`` reports each seed run."""
    root = root or repo_root()
    params = dict(params or {})
    first = own_seed(nb, params) if n > 1 else params.get("seed")
    target = target or plan(nb, scale, False, params, root, update)  # refuse a clobbering run before anything runs
    outcomes, folders = [], []
    for s in (seeds.seed_list(first, n)[1:] if n > 1 else []):
        where = seed_plan(nb, scale, s, root, variant, seed_base(target, root))
        out = run_notebook(nb, scale, params={**params, "seed": s}, root=root, target=where)
        say(f"    seed {s}: {'ok' if out.ok else 'FAILED at ' + out.error} ({out.seconds:.1f} s)")
        outcomes.append(out)
        if not out.ok:
            return outcomes
        folder = where.executed.parent
        seeds.write_wall_time(folder, out.seconds)
        folders.append(folder)
    outcomes.append(run_notebook(nb, scale, params=params, root=root, update=update, seed_runs=folders,
                                 target=target))
    return outcomes


def overall(nb: Path, runs: list[Outcome]) -> Outcome:
    """One notebook's outcome from its runs (its seeds'): ok when all are, their total time, the first error."""
    return Outcome(nb, all(o.ok for o in runs), sum(o.seconds for o in runs),
                   next((o.error for o in runs if not o.ok), ""))


def metrics_of(nb: Path, target: Plan) -> Path:
    """The ``metrics.json`` that the run of ``nb`` planned as ``target`` writes (``figures/`` when it publishes)."""
    root = target.out_root or repo_root() / "figures"
    return root / nb.parent.name / nb.stem / "metrics.json"


def claims_line(path: Path) -> str:
    """One line of a run's claims with their seeds: ``claims: 2 of 3 hold: a 3/3, b 2/3, c **0/3**``; empty
    when the run wrote no ``metrics.json`` or no claim."""
    if not path.is_file():
        return ""
    found = json.loads(path.read_text()).get("claims", {})
    if not found:
        return ""
    holding = sum(seeds.holds(c) for c in found.values())
    each = ", ".join(f"{name} {seeds.fraction(c)}" + ("" if seeds.holds(c) else " (misses)") for name, c in found.items())
    return f"claims: {holding} of {len(found)} hold: {each}"


def write_reference(run: Path, executed: Path, reference: Path, root: Path | None = None) -> Path:
    """Write a smoke reference (``reference``: ``tests/notebooks/<paper>/<stem>.ipynb``) through the ``smoke-refs``
    writer, each file whole: first ``<stem>.metrics.json``, the metrics and figure names of the run's output folder
    ``run`` without run facts (what :mod:`layersim.tools.smoke_check` compares with), then the stripped notebook
    ``executed`` (:func:`strip_reference`). ``ValueError`` before writing when the run wrote no ``metrics.json``."""
    data = compare.without_run_facts(compare.record(run))
    writers.write_committed(reference.with_suffix(".metrics.json"), json.dumps(data, indent=1) + "\n", "smoke-refs",
                            root)
    return writers.write_committed(reference, executed.read_text(encoding="utf-8"), "smoke-refs", root)


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


def parse_value(text: str):
    """Parse a ``-p name value`` value like papermill does: a Python literal, else a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@dataclass(frozen=True)
class Job:
    """One invocation's settings for every notebook: ``scale``, ``refs``, ``scale_check``, ``seeds`` (None:
    :func:`layersim.notebook.seeds.seeds_for`), the ``-p`` ``params``, and ``update`` (replace the committed
    results)."""

    scale: str
    refs: bool = False
    scale_check: bool = False
    seeds: int | None = None
    params: dict | None = None
    update: bool = False

    def target(self, nb: Path) -> Plan:
        """Where the notebook's own run writes (its ``metrics.json`` is beside it)."""
        if self.scale_check:
            return scale_check_plan(nb, update=self.update)
        return plan(nb, self.scale, self.refs, self.params, update=self.update)


def committed_outputs(nb: Path, job: Job, root: Path | None = None) -> Path | None:
    """The committed folder a run of ``nb`` rewrites (``figures/<paper>/<stem>/``, or its scale check's), or None for a
    run that writes nothing committed."""
    if not job.update:
        return None
    root = root or repo_root()
    if job.scale_check:
        return scale_check_plan(nb, root, update=True).out_root / nb.parent.name / nb.stem
    return root / "figures" / nb.parent.name / nb.stem


class CommittedGuard:
    """Keeps the committed outputs of each notebook a run rewrites from its start (:meth:`keep`) to its end
    (:meth:`settle`: dropped after a success, restored otherwise); :meth:`settle_all` restores the unfinished ones.
    A no-op for a run that writes nothing committed."""

    def __init__(self, job: Job, say=print):
        self.job, self.kept, self.say = job, {}, say

    def keep(self, nb: Path) -> None:
        folder = committed_outputs(nb, self.job)
        if folder is None:
            return
        committed.phase("locked")
        self.kept[nb] = committed.snapshot(folder, None if self.job.scale_check else nb, say=self.say)
        committed.phase("kept")

    def settle(self, nb: Path, ok: bool) -> None:
        keep = self.kept.pop(nb, None)
        if keep is None:
            return
        if ok:
            committed.drop(keep)
        else:
            committed.restore(keep)

    def settle_all(self) -> list[Path]:
        """Put back every notebook's committed outputs still kept; returns their folders."""
        back = []
        for nb in list(self.kept):
            back.append(committed_outputs(nb, self.job))
            self.settle(nb, False)
        return back


def seed_count(nb: Path, job: Job, parameters: list[str]) -> int:
    """How many seeds the run of ``nb`` under ``job`` takes (``parameters``: the notebook's parameter names): one for
    a reference, a notebook without ``seed`` or a scale check without ``--seeds``, else
    :func:`layersim.notebook.seeds.seeds_for` unless ``--seeds``."""
    if job.refs:
        return 1
    if job.scale_check:
        return job.seeds or 1
    n = job.seeds or seeds.seeds_for(nb.stem, job.scale)
    return 1 if "seed" not in parameters else n


def run_one(nb: Path, job: Job, parameters: list[str], say=print) -> Outcome:
    """Everything the runner does for one notebook (a reference, a scale check, or its seeds and own run), reported
    through ``say``; the serial loop and the Ray batch both call it."""
    name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
    if job.refs:
        return run_notebook(nb, job.scale, refs=True)
    n = seed_count(nb, job, parameters)
    if job.scale_check:
        target = scale_check_plan(nb, update=job.update)
        say(f"    scale check: {seeds.SCALE_CHECKS[nb.stem]}, {n} seed(s), into {target.out_root}")
        return overall(nb, run_with_seeds(nb, job.scale, n, seeds.SCALE_CHECKS[nb.stem], target=target,
                                          variant=claims.SCALE_CHECK_FOLDER, say=say))
    if n == 1 and (job.seeds or seeds.seeds_for(nb.stem, job.scale)) > 1:
        say(f"    one run: {name} has no seed parameter")
    elif n > 1:
        say(f"    {n} seeds: its claims are judged over all of them")
    return overall(nb, run_with_seeds(nb, job.scale, n, job.params, update=job.update, say=say))


def folders_written(nb: Path, job: Job, parameters: list[str], root: Path | None = None) -> list[Path]:
    """Every folder the run of ``nb`` under ``job`` writes (its executed notebook's, its outputs', the other seeds', or
    a reference's place), which the runner locks before any work."""
    root = root or repo_root()
    if job.refs:
        return [plan(nb, job.scale, refs=True, root=root).executed.parent]
    target = job.target(nb)
    found = [target.executed.parent]
    if target.out_root is not None:
        found.append(target.out_root / nb.parent.name / nb.stem)
    n = seed_count(nb, job, parameters)
    if n > 1:
        params = seeds.SCALE_CHECKS[nb.stem] if job.scale_check else job.params
        variant = claims.SCALE_CHECK_FOLDER if job.scale_check else ""
        for s in seeds.seed_list(own_seed(nb, params), n)[1:]:
            found.append(seed_plan(nb, job.scale, s, root, variant, seed_base(target, root)).executed.parent)
    return list(dict.fromkeys(found))


def lock_place(folder: Path, root: Path | None = None) -> Path:
    """Where the lock of ``folder`` lives: in it, except for a repository folder outside ``runs/`` (the committed
    results), whose lock goes to ``runs/.locks/<its path>``."""
    root = writers.resolved(root or repo_root())
    real = writers.resolved(folder)
    if real.is_relative_to(root) and not real.is_relative_to(root / "runs"):
        return root / "runs" / ".locks" / real.relative_to(root)
    return real


def batch_work(nb: Path, say, job: Job, parameters: dict[Path, list[str]]) -> dict:
    """:func:`run_one` and the line of its claims, as a dict: what the serial loop prints for a notebook, and the
    task of the Ray batch (:mod:`layersim.tools.batch`)."""
    out = run_one(nb, job, parameters[nb], say=say)
    claims = claims_line(metrics_of(nb, job.target(nb))) if out.ok and not job.refs else ""
    return {"ok": out.ok, "seconds": out.seconds, "error": out.error, "claims": claims}


def run_all(readable: list[Path], job: Job, parameters: dict[Path, list[str]], guard: CommittedGuard,
            outcomes: list[Outcome], scale: str, jobs: int | None, address: str | None, say) -> None:
    """Run every notebook of ``readable`` under ``job``, serially or on Ray (``jobs``, ``address``), with its committed
    outputs kept by ``guard`` from start to end; appends an :class:`Outcome` per notebook to ``outcomes``."""
    if jobs is None and address is None:
        for i, nb in enumerate(readable, 1):
            name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
            say(f"[{i}/{len(readable)}] {name} (scale={scale}) ...")
            guard.keep(nb)
            got = batch_work(nb, say, job, parameters)
            guard.settle(nb, got["ok"])
            status = "ok" if got["ok"] else f"FAILED at {got['error']}"
            say(f"[{i}/{len(readable)}] {name}: {status} ({got['seconds']:.1f} s)")
            if got["claims"]:
                say(f"    {got['claims']}")
            outcomes.append(Outcome(nb, got["ok"], got["seconds"], got["error"]))
        return
    from layersim.tools import batch

    for nb in readable:
        guard.keep(nb)
    work = functools.partial(batch_work, job=job, parameters=parameters)

    def done(nb: Path, got: dict) -> None:
        guard.settle(nb, got["ok"])
        outcomes.append(Outcome(nb, got["ok"], got["seconds"], got["error"]))

    batch.run(readable, work, scale, jobs=jobs, address=address, on_done=done)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=SCALES, default=None, help="smoke, default or paper (default: default)")
    ap.add_argument("--nb", default="", help="glob or substring of notebooks/<paper>/<stem> to run, several "
                    "separated by commas (default: all)")
    ap.add_argument("--refs", action="store_true", help="write smoke-scale nbval references under tests/notebooks/")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="a notebook parameter (not scale); a run with -p never replaces committed results")
    ap.add_argument("--update-committed", action="store_true",
                    help="replace the committed results (notebooks/ and figures/) with this default-scale run; "
                    "make reproduce passes it")
    ap.add_argument("--seeds", type=int, default=None, metavar="N",
                    help="test every claim over N seeds: the notebook's own and the N-1 after it (default: 3 at the "
                    "default scale, 1 for the costly notebooks and at the other scales; layersim.notebook.seeds)")
    ap.add_argument("--scale-check", action="store_true",
                    help="run the selected notebooks' scale checks (layersim.notebook.seeds.SCALE_CHECKS: the "
                    "default scale with larger settings, one seed unless --seeds) into runs/default/scale_checks/, "
                    "or figures/scale_checks/ with --update-committed")
    ap.add_argument("--list", action="store_true", help="list the notebooks that would run and exit")
    ap.add_argument("--recover", action="store_true",
                    help="put back the committed results that a hard-killed run (SIGKILL, a power loss) left "
                    "half-written, from their copies under runs/.restore/, and exit (every run does this first)")
    ap.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="run up to N notebooks at once on a local Ray instance that the runner starts and stops "
                    "(layersim.tools.batch; default: one after another, without Ray)")
    ap.add_argument("--address", default=None, metavar="ADDR",
                    help="submit the notebooks to an existing Ray cluster ('auto', 'host:port' or 'ray://host:port') "
                    "instead; --jobs then caps how many run at once")
    args = ap.parse_args(argv)
    if args.refs and args.scale not in (None, "smoke"):
        ap.error(f"--refs writes smoke-scale references: --scale {args.scale} is not allowed with it")
    scale = args.scale or ("smoke" if args.refs else "default")
    names = [name for name, _ in args.p]
    if "scale" in names:
        ap.error("set the scale with --scale, not -p scale")
    if args.refs and names:
        ap.error("--refs runs the smoke presets: -p is not allowed with it")
    if args.scale_check and (scale != "default" or names or args.refs):
        ap.error("--scale-check runs the default scale with the settings of seeds.SCALE_CHECKS: no other --scale, "
                 "no -p, no --refs")
    if args.update_committed and (scale != "default" or names or args.refs):
        ap.error("--update-committed replaces the committed default-scale results: only with --scale default, "
                 "without -p and without --refs")
    if args.jobs is not None and args.jobs < 1:
        ap.error("--jobs is a number >= 1")
    if args.seeds is not None and (args.seeds < 1 or (args.refs and args.seeds != 1)):
        ap.error("--seeds is a number >= 1, and 1 with --refs (a smoke reference is one run)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        ap.error(f"-p {', '.join(repeated)} given more than once")
    absolute_path_variables()
    if args.recover:
        back = committed.recover()
        print(f"{len(back)} committed folder(s) put back" + (": " if back else "; nothing was left half-written")
              + ", ".join(str(f.relative_to(repo_root())) for f in back))
        return 0
    try:
        notebooks = discover(args.nb)
    except ValueError as exc:
        ap.error(str(exc))
    if args.scale_check:
        notebooks = [nb for nb in notebooks if nb.stem in seeds.SCALE_CHECKS]
    if not notebooks:
        print(f"no notebook matches {args.nb!r} under notebooks/"
              + (" with a scale check in seeds.SCALE_CHECKS" if args.scale_check else ""), file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(str(p.relative_to(repo_root())) for p in notebooks))
        return 0
    params = {name: parse_value(value) for name, value in args.p}
    outcomes, known = [], {}
    for nb in notebooks:  # a notebook that cannot be read is named and counted as failed; the rest run
        try:
            known[nb] = notebook_parameters(nb)
        except ValueError as exc:
            print(f"skipped: {exc}", file=sys.stderr, flush=True)
            outcomes.append(Outcome(nb, False, 0.0, str(exc)))
    readable = list(known)
    problems = unknown_parameters(readable, params, known=known)
    if problems:
        ap.error("unknown parameter(s), nothing was run:\n  " + "\n  ".join(problems))
    try:  # refuse a run that would write into committed results before anything runs
        for nb in readable:
            if args.scale_check:
                unknown = unknown_parameters([nb], seeds.SCALE_CHECKS[nb.stem], known=known)
                if unknown:
                    raise ValueError(f"seeds.SCALE_CHECKS: {unknown[0]}")
            else:
                plan(nb, scale, args.refs, params, update=args.update_committed)
    except ValueError as exc:
        ap.error(str(exc))
    if scale == "default" and not args.update_committed and not args.refs:
        where = os.environ.get("LAYERSIM_OUT") or "runs/default/"
        print(f"this run writes {where} and leaves notebooks/ and figures/ as they are "
              "(--update-committed, as make reproduce passes, replaces the committed results)", flush=True)
    job = Job(scale, args.refs, args.scale_check, args.seeds, params, args.update_committed)
    parameters = {nb: known[nb] for nb in readable}
    try:  # the cluster, the cache and the device first (nothing written), then every folder the run writes is made
        # the project's (a user's non-empty folder is refused) and locked below, all before any work
        if args.address is not None:
            from layersim.tools import batch

            batch.check_address(args.address)
        paths.check_locations()
        if "device" in params:  # torch is imported only then
            from layersim.core import device

            device.check_device(params["device"])
        places = {}
        for nb in readable:
            for folder in folders_written(nb, job, parameters[nb]):
                if not job.refs:
                    writers.claim_folder(folder, "the output folder")
                places[lock_place(folder)] = None
    except ValueError as exc:
        ap.error(str(exc))
    guard = CommittedGuard(job)
    say = functools.partial(print, flush=True)
    stopped = None
    try:
        with committed.stops(), locks.hold(places, f"python -m layersim.tools.runner --nb {args.nb or '*'}"):
            committed.recover()
            run_all(readable, job, parameters, guard, outcomes, scale, args.jobs, args.address, say)
    except locks.Busy as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except (KeyboardInterrupt, committed.Stopped) as exc:
        stopped = exc
    finally:  # stopped: end the kernels this run started, then put back the committed outputs of the unfinished
        with committed.shielded():
            if guard.kept:
                committed.end_children()
                for folder in guard.settle_all():
                    print(f"put back {folder.relative_to(repo_root())} as it was", file=sys.stderr, flush=True)
    if stopped is not None:
        why = str(stopped) if isinstance(stopped, committed.Stopped) else "stopped by SIGINT"
        ended = sum(o.notebook in parameters for o in outcomes)
        print(f"{why}: {ended} of {len(readable)} notebooks had ended; every committed folder is as it was "
              "or complete and new", file=sys.stderr, flush=True)
        return stopped.exit_code if isinstance(stopped, committed.Stopped) else 130
    failed = [o for o in outcomes if not o.ok]
    total = sum(o.seconds for o in outcomes)
    print(f"{len(outcomes) - len(failed)} notebooks ok, {len(failed)} failed, {total:.0f} s in all")
    for o in failed:
        print(f"  failed: {o.notebook.relative_to(repo_root())}: {o.error}")
    return 1 if failed else 0


if __name__ == "__main__":
    # run the imported module's main, not this __main__ copy's: the batch hands its functions and classes to Ray
    # workers, which find them by module name (layersim.tools.runner) instead of receiving copies
    from layersim.tools.runner import main as runner_main

    sys.exit(runner_main())
