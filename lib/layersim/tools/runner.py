"""Run the project's notebooks with papermill: ``python -m layersim.tools.runner``.

``make reproduce`` calls it. It executes every notebook under ``notebooks/<paper>/`` (or those ``--nb`` selects) at
``--scale``, judging each claim over several seeds (:mod:`layersim.notebook.seeds`), with one line per notebook; a
failed notebook is named with its cell, the others go on, and the exit status is 1. Where a run writes is
:mod:`layersim.tools.plans`'s: only ``--scale default --update-committed`` without ``-p`` replaces the committed
results; ``--refs`` writes the smoke references, ``--scale-check`` the scale checks, any other run ``runs/<scale>/``.
``--jobs`` or ``--address`` runs notebooks side by side on Ray (:mod:`layersim.tools.batch`) (see docs/modules.md,
`layersim.tools.runner`).
"""

from __future__ import annotations

import argparse
import contextlib
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
from layersim.core import progress as kernel_progress
from layersim.core.paths import RepositoryNotFound, repo_root
from layersim.notebook import ladders, prose, results, seeds
from layersim.notebook.results import SCALES
from layersim.tools import claims, cleaning, committed, compare, plans, progress, resume

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


def describe_failure(exc: BaseException) -> str:
    """One line naming the failing cell (counted from 1 in the executed notebook, papermill's injected cell included)
    and the error's first line (the executed notebook keeps the rest)."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        first = (exc.source or "").strip().splitlines()[:1]
        where = f"cell {exc.cell_index + 1} (execution count {exc.exec_count})"
        error = (str(exc.evalue).strip().splitlines() or [""])[0]
        return f"{where}: {exc.ename}: {error}" + (f"  [{first[0][:80]}]" if first else "")
    return f"{type(exc).__name__}: {exc}"


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
                 update: bool = False, seed_runs: list[Path] | tuple = (),
                 target: plans.Plan | None = None) -> Outcome:
    """Execute ``nb`` with papermill at ``scale`` where :func:`layersim.tools.plans.plan` (or ``target``) says; a
    notebook error gives a failed :class:`Outcome`. ``seed_runs``: the other seeds' output folders, whose claims this
    run folds in."""
    import papermill as pm

    root = root or repo_root()
    target = target or plans.plan(nb, scale, refs, params, root, update)
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
        watch = progress.current()  # the terminal view of this notebook's run, fed by the kernel's progress bars
        env[kernel_progress.ENV] = watch.path if watch is not None else None
        try:
            with temporary_environ(**env):
                pm.execute_notebook(
                    str(nb), str(target.executed), parameters={"scale": scale, **(params or {})},
                    progress_bar=False, cwd=str(nb.parent), engine_name=progress.engine(), **kernel_options(),
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
            cleaning.strip_reference(target.executed)
            try:
                write_reference(Path(fresh) / nb.parent.name / nb.stem, target.executed, target.reference, root)
            except ValueError as exc:
                return Outcome(nb, False, time.perf_counter() - t0,
                               f"{exc}: a smoke reference needs the run's results.write_metrics")
    if target.publish is not None:
        committed.phase("publishing")
        publish(target.executed, target.publish, root)
        committed.phase("published")
    elif target.committed and not target.rung:  # a scale check, executed in place into figures/scale_checks/
        publish(target.executed, target.executed, root, scale_check=f"{nb.parent.name}/{nb.stem}")
    return Outcome(nb, True, time.perf_counter() - t0)


def publish(executed: Path, dest: Path, root: Path, scale_check: str | None = None) -> None:
    """Write the executed notebook ``executed`` to ``dest`` (possibly the same file) as a committed copy, whole or not
    at all, through the ``results`` writer, cleaned (:mod:`layersim.tools.cleaning`): without widgets or the
    repository's absolute path; a scale check (``scale_check="<paper>/<stem>"``) also with its note and without the
    default run's findings. The report publishes its committed examples through it too."""
    executed_nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    clean = cleaning.without_root(cleaning.without_widgets(executed_nb), root)
    if scale_check:  # the scale check of the notebook "<paper>/<stem>": it opens with what it is
        clean = cleaning.with_scale_check_note(cleaning.without_findings(clean, scale_check), scale_check)
    text = json.dumps(clean, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    writers.write_committed(dest, text, "results", root)


def extra_seeds(nb: Path, scale: str, n: int, params: dict, target: plans.Plan, variant: str = "",
                root: Path | None = None) -> list[tuple[int, plans.Plan]]:
    """The seeds a run of ``nb`` at ``n`` seeds adds to its own, each with where it writes
    (:func:`layersim.tools.plans.seed_plan` beside ``target``), in the order they run; none for ``n = 1``."""
    if n <= 1:
        return []
    base = plans.seed_base(target, root)
    return [(s, plans.seed_plan(nb, scale, s, root, variant, base))
            for s in seeds.seed_list(plans.own_seed(nb, params), n)[1:]]


def run_with_seeds(nb: Path, scale: str, n: int, params: dict | None = None, root: Path | None = None,
                   update: bool = False, say=print, target: plans.Plan | None = None,
                   variant: str = "", records: Path | None = None) -> list[Outcome]:
    """Run ``nb`` at ``n`` seeds: the seeds after its own first (:func:`layersim.tools.plans.seed_plan`, folders named
    by ``variant``), then its own run where ``target`` (default :func:`layersim.tools.plans.plan`) says, which judges
    every claim over all ``n``. A failed seed run stops the notebook. With ``records`` (a rung's folder), each seed's
    records are kept there as its run ends and a seed kept there earlier with the same settings is not run again
    (:mod:`layersim.tools.resume`). Returns the outcomes in the order run; ``say`` reports each seed run."""
    root = root or repo_root()
    params = dict(params or {})
    first = plans.own_seed(nb, params) if n > 1 else params.get("seed")
    target = target or plans.plan(nb, scale, False, params, root, update)  # refuses a clobbering run up front
    outcomes, folders = [], []
    for k, (s, where) in enumerate(extra_seeds(nb, scale, n, params, target, variant, root), 1):
        earlier = None if records is None else resume.kept_seed(records, f"{nb.parent.name}/{nb.stem}",
                                                                {**params, "seed": s})
        if earlier is not None:
            say(f"    seed {s}: finished earlier, kept ({earlier:.1f} s then)")
            outcomes.append(Outcome(nb, True, 0.0))
            folders.append(resume.seed_record(records, s))
            continue
        progress.part(f"seed {s}, run {k} of {n}")
        out = run_notebook(nb, scale, params={**params, "seed": s}, root=root, target=where)
        say(f"    seed {s}: {'ok' if out.ok else 'FAILED at ' + out.error} ({out.seconds:.1f} s)")
        outcomes.append(out)
        if not out.ok:
            return outcomes
        seeds.write_wall_time(where.executed.parent, out.seconds)
        folders.append(where.executed.parent if records is None  # else kept at once: a stop loses no finished seed
                       else resume.keep_seed(where.executed.parent, records, s, target.committed))
    progress.part(f"seed {first}, run {n} of {n}" if n > 1 else "")
    outcomes.append(run_notebook(nb, scale, params=params, root=root, update=update, seed_runs=folders,
                                 target=target))
    return outcomes


def overall(nb: Path, runs: list[Outcome]) -> Outcome:
    """One notebook's outcome from its runs (its seeds'): ok when all are, their total time, the first error."""
    return Outcome(nb, all(o.ok for o in runs), sum(o.seconds for o in runs),
                   next((o.error for o in runs if not o.ok), ""))


def write_reference(run: Path, executed: Path, reference: Path, root: Path | None = None) -> Path:
    """Write a smoke reference (``reference``: ``tests/notebooks/<paper>/<stem>.ipynb``) through the ``smoke-refs``
    writer, each file whole: first ``<stem>.metrics.json``, the metrics and figure names of the run's output folder
    ``run`` without run facts (what :mod:`layersim.tools.smoke_check` compares with), then the stripped notebook
    ``executed`` (:func:`layersim.tools.cleaning.strip_reference`). ``ValueError`` before writing when the run wrote
    no ``metrics.json``."""
    data = compare.without_run_facts(compare.record(run))
    writers.write_committed(reference.with_suffix(".metrics.json"), json.dumps(data, indent=1) + "\n", "smoke-refs",
                            root)
    return writers.write_committed(reference, executed.read_text(encoding="utf-8"), "smoke-refs", root)


def run_one(nb: Path, job: plans.Job, parameters: list[str], say=print) -> Outcome:
    """Everything the runner does for one notebook (a reference, a scale check, or its seeds and own run), reported
    through ``say``; the serial loop and the Ray batch both call it."""
    name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
    if job.refs:
        return run_notebook(nb, job.scale, refs=True)
    n = plans.seed_count(nb, job, parameters)
    if job.scale_check or job.rung is not None:
        target = job.target(nb)
        what = "scale check" if job.rung is None else f"ladder {job.rung[0]}, rung {ladders.budget_name(job.rung[1])}"
        say(f"    {what}: {job.settings(nb)}, {n} seed(s), into {target.out_root}")
        here = plans.metrics_of(nb, target).parent if target.rung else None  # a rung keeps every seed's records
        runs = run_with_seeds(nb, job.scale, n, job.settings(nb), target=target, variant=job.variant, say=say,
                              records=here)
        if target.rung and all(o.ok for o in runs):  # a rung commits no notebook: its own time goes beside
            resume.write_own_time(here, runs[-1].seconds, target.committed)
        return overall(nb, runs)
    if n == 1 and (job.seeds or seeds.seeds_for(nb.stem, job.scale)) > 1:
        say(f"    one run: {name} has no seed parameter")
    elif n > 1:
        say(f"    {n} seeds: its claims are judged over all of them")
    return overall(nb, run_with_seeds(nb, job.scale, n, job.params, update=job.update, say=say))


def batch_work(nb: Path, say, job: plans.Job, parameters: dict[Path, list[str]], mode: str = "quiet",
               eta: progress.Batch | None = None) -> dict:
    """:func:`run_one` and the line of its claims, as a dict: what the serial loop prints for a notebook, and the
    task of the Ray batch (:mod:`layersim.tools.batch`). ``mode`` and ``eta``: its :class:`layersim.tools.progress.Watch`
    (the notebooks are numbered in the order of ``parameters``)."""
    order = list(parameters)
    name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
    with progress.Watch(name, order.index(nb) + 1, len(order), eta, mode=mode) as watch:
        out = run_one(nb, job, parameters[nb], say=watch.printing(say))
    line = claims.claims_line(plans.metrics_of(nb, job.target(nb))) if out.ok and not job.refs else ""
    return {"ok": out.ok, "seconds": out.seconds, "error": out.error, "claims": line}


def expected(nb: Path, job: plans.Job, parameters: list[str]) -> float | None:
    """The seconds ``nb``'s runs under ``job`` should take, from its committed default run's seed times; None off
    the default scale's own settings (another scale, ``-p`` values, a scale check or references)."""
    if job.scale != "default" or job.params or job.scale_check or job.refs or job.rung is not None:
        return None
    return progress.expected_seconds(nb, repo_root(), plans.seed_count(nb, job, parameters))


def run_all(readable: list[Path], job: plans.Job, parameters: dict[Path, list[str]], guard: committed.Guard,
            outcomes: list[Outcome], scale: str, jobs: int | None, address: str | None, say) -> None:
    """Run every notebook of ``readable`` under ``job``, serially or on Ray (``jobs``, ``address``), with its committed
    outputs kept by ``guard`` from start to end; appends an :class:`Outcome` per notebook to ``outcomes``."""
    if jobs is None and address is None:
        eta = progress.Batch([expected(nb, job, parameters[nb]) for nb in readable])
        mode = progress.mode_for(sys.stderr, parallel=False)
        for i, nb in enumerate(readable, 1):
            name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
            say(f"[{i}/{len(readable)}] {name} (scale={scale}) ...")
            guard.keep(nb)
            eta.begin(i - 1)
            got = batch_work(nb, say, job, parameters, mode=mode, eta=eta)
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
    work = functools.partial(batch_work, job=job, parameters=parameters,
                             mode=progress.mode_for(sys.stderr, parallel=True))

    def done(nb: Path, got: dict) -> None:
        guard.settle(nb, got["ok"])
        outcomes.append(Outcome(nb, got["ok"], got["seconds"], got["error"]))

    batch.run(readable, work, scale, jobs=jobs, address=address, on_done=done)


def parse(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line, checked: a combination of options that cannot run is a usage error (exit status 2).
    ``args.scale`` is filled in: smoke for ``--refs``, else default."""
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
    ap.add_argument("--resume", action="store_true",
                    help="keep the notebooks this batch already finished (their own run complete, with as many "
                    "seeds as asked) and run the others; not with --update-committed or --refs")
    ap.add_argument("--ladder", default=None, metavar="NAMES",
                    help="run budget ladders (layersim.notebook.ladders.LADDERS; names separated by commas, or all) "
                    "rung by rung, smallest first, into runs/default/ladders/, or figures/ladders/ with "
                    "--update-committed; a rung's notebooks already finished there are kept")
    ap.add_argument("--rung", type=float, default=None, metavar="BUDGET", help="with --ladder: only this rung")
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
    args.scale = scale = args.scale or ("smoke" if args.refs else "default")
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
    if args.ladder is not None and (scale != "default" or names or args.refs or args.scale_check or args.nb
                                    or args.jobs is not None or args.address is not None):
        ap.error("--ladder runs each rung with its settings in layersim.notebook.ladders.LADDERS, one notebook "
                 "after another: no other --scale, no -p, --nb, --refs, --scale-check, --jobs or --address")
    if args.rung is not None and args.ladder is None:
        ap.error("--rung picks a rung of --ladder")
    if args.resume and (args.update_committed or args.refs):
        ap.error("--resume keeps the finished notebooks of a run into runs/: not with --update-committed or --refs")
    if args.jobs is not None and args.jobs < 1:
        ap.error("--jobs is a number >= 1")
    if args.seeds is not None and (args.seeds < 1 or (args.refs and args.seeds != 1)):
        ap.error("--seeds is a number >= 1, and 1 with --refs (a smoke reference is one run)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        ap.error(f"-p {', '.join(repeated)} given more than once")
    return ap, args


def select(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[Path]:
    """The notebooks ``--nb`` selects (with ``--scale-check``, those that have one); a usage error for a selection
    that names no notebook."""
    try:
        notebooks = plans.discover(args.nb)
    except ValueError as exc:
        ap.error(str(exc))
    if args.scale_check:
        notebooks = [nb for nb in notebooks if nb.stem in seeds.SCALE_CHECKS]
    return notebooks


def readable_parameters(notebooks: list[Path], outcomes: list[Outcome]) -> dict[Path, list[str]]:
    """Each readable notebook's parameter names; a notebook that cannot be read is named on stderr and appended to
    ``outcomes`` as failed, and the others run."""
    known = {}
    for nb in notebooks:
        try:
            known[nb] = notebook_parameters(nb)
        except ValueError as exc:
            print(f"skipped: {exc}", file=sys.stderr, flush=True)
            outcomes.append(Outcome(nb, False, 0.0, str(exc)))
    return known


def check_plans(ap: argparse.ArgumentParser, args: argparse.Namespace, params: dict,
                known: dict[Path, list[str]]) -> None:
    """Refuse, before anything runs, a ``-p`` that a notebook lacks and a run that would write into the committed
    results (usage errors); say where a default-scale run without ``--update-committed`` writes."""
    problems = unknown_parameters(list(known), params, known=known)
    if problems:
        ap.error("unknown parameter(s), nothing was run:\n  " + "\n  ".join(problems))
    try:
        for nb in known:
            if args.scale_check:
                unknown = unknown_parameters([nb], seeds.SCALE_CHECKS[nb.stem], known=known)
                if unknown:
                    raise ValueError(f"seeds.SCALE_CHECKS: {unknown[0]}")
            else:
                plans.plan(nb, args.scale, args.refs, params, update=args.update_committed)
    except ValueError as exc:
        ap.error(str(exc))
    if args.scale == "default" and not args.update_committed and not args.refs:
        where = os.environ.get("LAYERSIM_OUT") or "runs/default/"
        print(f"this run writes {where} and leaves notebooks/ and figures/ as they are "
              "(--update-committed, as make reproduce passes, replaces the committed results)", flush=True)


def lock_places(ap: argparse.ArgumentParser, job: plans.Job, address: str | None,
                parameters: dict[Path, list[str]]) -> dict[Path, None]:
    """The places of the locks of every folder the run writes. First the cluster, the cache and the device are
    checked (nothing written), then each folder is made the project's (a user's non-empty folder is refused): all
    before any work, a refusal being a usage error."""
    try:
        if address is not None:
            from layersim.tools import batch

            batch.check_address(address)
        paths.check_locations()
        if "device" in (job.params or {}):  # torch is imported only then
            from layersim.core import device

            device.check_device(job.params["device"])
        places = {}
        for nb in parameters:
            for folder in plans.folders_written(nb, job, parameters[nb]):
                if not job.refs:
                    writers.claim_folder(folder, "the output folder")
                places[plans.lock_place(folder)] = None
    except ValueError as exc:
        ap.error(str(exc))
    return places


def run(job: plans.Job, parameters: dict[Path, list[str]], outcomes: list[Outcome], args: argparse.Namespace,
        places: dict[Path, None]) -> int | None:
    """Run every notebook of ``parameters`` holding the locks of ``places``, each one's committed outputs kept
    (:class:`layersim.tools.committed.Guard`) and, on a stop, put back after the run's kernels are ended. Returns the
    exit status of a run refused by a lock or stopped by a signal, else None."""
    guard = committed.Guard(job.committed_outputs)
    say = functools.partial(print, flush=True)
    stopped = None
    try:
        with committed.stops(), locks.hold(places, f"python -m layersim.tools.runner --nb {args.nb or '*'}"):
            committed.recover()
            run_all(list(parameters), job, parameters, guard, outcomes, job.scale, args.jobs, args.address, say)
    except locks.Busy as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except (KeyboardInterrupt, committed.Stopped) as exc:
        stopped = exc
    finally:  # stopped: end the kernels this run started, then put back the committed outputs of the unfinished
        with committed.shielded():
            if stopped is not None or guard.kept:  # a kernel left running would go on computing, or writing
                committed.end_children()
            for folder in guard.settle_all() if guard.kept else ():
                print(f"put back {folder.relative_to(repo_root())} as it was", file=sys.stderr, flush=True)
    if stopped is None:
        return None
    why = str(stopped) if isinstance(stopped, committed.Stopped) else "stopped by SIGINT"
    ended = len({o.notebook for o in outcomes if o.notebook in parameters})  # a ladder's rungs: one notebook
    print(f"{why}: {ended} of {len(parameters)} notebooks had ended; every committed folder is as it was "
          "or complete and new", file=sys.stderr, flush=True)
    return stopped.exit_code if isinstance(stopped, committed.Stopped) else 130


def report(outcomes: list[Outcome]) -> int:
    """The batch's last lines (notebooks ok and failed, the time in all, each failure) and its exit status: 1 when a
    notebook failed, else 0."""
    failed = [o for o in outcomes if not o.ok]
    total = sum(o.seconds for o in outcomes)
    print(f"{len(outcomes) - len(failed)} notebooks ok, {len(failed)} failed, {total:.0f} s in all")
    for o in failed:
        print(f"  failed: {o.notebook.relative_to(repo_root())}: {o.error}")
    return 1 if failed else 0


def run_ladders(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--ladder``: the rungs (:func:`layersim.tools.plans.rung_jobs`), every rung's settings checked before any work,
    then run one after another, smallest first, each keeping its notebooks already finished (a ladder resumes where
    it stopped); the batch's last lines at the end."""
    try:
        chosen = plans.rung_jobs(args.ladder, args.rung, args.seeds, args.update_committed)
    except ValueError as exc:
        ap.error(str(exc))
    outcomes: list[Outcome] = []
    rungs = []
    for job, stems in chosen:
        known = readable_parameters([plans.discover(f"*/{stem}")[0] for stem in stems], outcomes)
        problems = [p for nb in known for p in unknown_parameters([nb], job.settings(nb), known=known)]
        if problems:
            ap.error(f"ladder {job.rung[0]}, rung {ladders.budget_name(job.rung[1])}: " + "; ".join(problems))
        rungs.append((job, known))
    for job, known in rungs:
        print(f"ladder {job.rung[0]}, rung {ladders.budget_name(job.rung[1])} "
              f"({ladders.LADDERS[job.rung[0]].axis}): {len(known)} notebook(s)", flush=True)
        known, kept = resume.keep_finished(job, known)
        outcomes += [Outcome(nb, True, 0.0) for nb in kept]
        stopped = run(job, known, outcomes, args, lock_places(ap, job, None, known)) if known else None
        if stopped is not None:
            return stopped
    return report(outcomes)


def main(argv: list[str] | None = None) -> int:
    """The command line: parse and check it, select the notebooks, check every plan and lock every folder before
    any work, run, report; outside the repository, one ``error:`` line (exit status 2)."""
    ap, args = parse(argv)
    try:
        repo_root()
    except RepositoryNotFound as exc:
        ap.error(str(exc))
    absolute_path_variables()
    if args.recover:
        back = committed.recover()
        print(f"{len(back)} committed folder(s) put back" + (": " if back else "; nothing was left half-written")
              + ", ".join(str(f.relative_to(repo_root())) for f in back))
        return 0
    if args.ladder is not None:
        return run_ladders(ap, args)
    notebooks = select(ap, args)
    if not notebooks:
        print(f"no notebook matches {args.nb!r} under notebooks/"
              + (" with a scale check in seeds.SCALE_CHECKS" if args.scale_check else ""), file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(str(p.relative_to(repo_root())) for p in notebooks))
        return 0
    params = {name: plans.parse_value(value) for name, value in args.p}
    outcomes: list[Outcome] = []
    known = readable_parameters(notebooks, outcomes)
    check_plans(ap, args, params, known)
    if args.scale == "paper":  # every asset here or downloadable, the GPU's memory, the disk: before any notebook
        from layersim.tools import assets

        problems = assets.preflight(list(known), params)
        if problems:
            ap.error("paper scale, nothing was run:\n  " + "\n  ".join(problems))
    job = plans.Job(args.scale, args.refs, args.scale_check, args.seeds, params, args.update_committed)
    if args.resume:
        known, kept = resume.keep_finished(job, known)
        outcomes += [Outcome(nb, True, 0.0) for nb in kept]
    places = lock_places(ap, job, args.address, known)
    stopped = run(job, known, outcomes, args, places)
    return report(outcomes) if stopped is None else stopped


if __name__ == "__main__":
    # run the imported module's main, not this __main__ copy's: the batch hands its functions and classes to Ray
    # workers, which find them by module name (layersim.tools.runner) instead of receiving copies
    from layersim.tools.runner import main as runner_main

    sys.exit(runner_main())
