"""Which notebooks a selection names (:func:`discover`) and where each run of the runner writes, decided before
anything runs.

:func:`plan` places a notebook's own run (only ``--scale default --update-committed`` without ``-p`` replaces the
committed notebook and lets it write ``figures/``; ``--refs`` goes to the smoke references; any other run to
``runs/<scale>/`` or ``$LAYERSIM_OUT``, never into the committed folders), :func:`seed_plan` the runs at the other
seeds, :func:`scale_check_plan` a scale check, :func:`rung_plan` a rung of a budget ladder. A :class:`Job` holds one invocation's settings and gives each
notebook its :class:`Plan` and its number of seeds; :func:`folders_written` lists every folder a run writes, which
the runner locks (:func:`lock_place`) before any work (see docs/modules.md, `layersim.tools.plans`).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from layersim.core import writers
from layersim.core.paths import repo_root
from layersim.notebook import ladders, rehearsal, seeds
from layersim.notebook.results import SCALES
from layersim.tools import claims


@dataclass(frozen=True)
class Plan:
    """Where one run writes: ``executed`` (papermill's output), ``publish`` (the committed notebook it replaces on
    success, or None) and ``out_root`` (the kernel's ``LAYERSIM_OUT``, or None to let ``results.output_dir``
    choose)."""

    executed: Path
    publish: Path | None
    out_root: Path | None
    committed: bool = False  # a scale check's or a ladder rung's evidence, written into figures/
    rung: bool = False  # a ladder rung: its executed notebook stays under runs/, its results go to out_root
    reference: Path | None = None  # a smoke reference's place under tests/notebooks/, written after a success

    @property
    def environment(self) -> dict[str, str | None]:
        """The kernel's ``LAYERSIM_OUT`` and the switch (on only for a publishing run or a committed scale
        check); None unsets."""
        return {"LAYERSIM_OUT": str(self.out_root) if self.out_root else None,
                writers.SWITCH: "1" if self.publish is not None or self.committed else "0"}


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
    out_root = writers.resolved(user_out) if user_out else root / "runs" / rehearsal.runs_folder(scale)
    if writers.protected_root(out_root / paper, root) is not None:
        raise writers.ProtectedPath(f"LAYERSIM_OUT={user_out!r} points into the committed results ("
                                    f"{writers.protected_root(out_root / paper, root)}), which only "
                                    "--update-committed (make reproduce) writes")
    if isinstance(params.get("out"), str) and writers.protected_root(params["out"], root) is not None:
        raise writers.ProtectedPath(f"-p out {params['out']} points into the committed results, which only "
                                    "--update-committed (make reproduce) writes")
    return Plan(out_root / paper / stem / nb.name, None, out_root)


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


def rung_plan(nb: Path, ladder: str, budget: float, root: Path | None = None, update: bool = False) -> Plan:
    """Where ``nb`` writes at one rung of a budget ladder (:data:`layersim.notebook.ladders.LADDERS`): its figures and
    ``metrics.json`` in ``figures/ladders/<ladder>/<budget>/<paper>/<stem>/`` with ``update`` (the committed rung),
    else under ``runs/default/ladders/``; its executed notebook always under ``runs/default/ladders/`` (a rung commits
    its results, not a copy of the notebook)."""
    root = root or repo_root()
    out_root = ladders.rung_folder(root / "figures" if update else root / "runs" / "default", ladder, budget)
    executed = ladders.rung_folder(root / "runs" / "default", ladder, budget) / nb.parent.name / nb.stem / nb.name
    return Plan(executed, None, out_root, committed=update, rung=True)


def metrics_of(nb: Path, target: Plan) -> Path:
    """The ``metrics.json`` that the run of ``nb`` planned as ``target`` writes (``figures/`` when it publishes)."""
    root = target.out_root or repo_root() / "figures"
    return root / nb.parent.name / nb.stem / "metrics.json"


@dataclass(frozen=True)
class Job:
    """One invocation's settings for every notebook: ``scale``, ``refs``, ``scale_check``, ``seeds`` (None:
    :func:`layersim.notebook.seeds.seeds_for`), the ``-p`` ``params``, ``update`` (replace the committed
    results) and ``rung`` (``(ladder, budget)``: one rung of a budget ladder, its settings from
    :data:`layersim.notebook.ladders.LADDERS`)."""

    scale: str
    refs: bool = False
    scale_check: bool = False
    seeds: int | None = None
    params: dict | None = None
    update: bool = False
    rung: tuple[str, float] | None = None

    def target(self, nb: Path) -> Plan:
        """Where the notebook's own run writes (its ``metrics.json`` is beside it)."""
        if self.rung is not None:
            return rung_plan(nb, *self.rung, update=self.update)
        if self.scale_check:
            return scale_check_plan(nb, update=self.update)
        return plan(nb, self.scale, self.refs, self.params, update=self.update)

    def settings(self, nb: Path) -> dict:
        """The ``-p`` values of ``nb``'s runs: its scale check's or its rung's settings, else ``params``."""
        if self.rung is not None:
            return dict(ladders.LADDERS[self.rung[0]].rungs[self.rung[1]][nb.stem])
        if self.scale_check:
            return dict(seeds.SCALE_CHECKS[nb.stem])
        return dict(self.params or {})

    @property
    def variant(self) -> str:
        """The folder under ``seeds/`` of the other seeds' runs: ``scale_checks``, ``ladders/<ladder>/<budget>``,
        or "" for a notebook's own settings."""
        if self.rung is not None:
            return ladders.rung_folder(Path(), *self.rung).as_posix()
        return claims.SCALE_CHECK_FOLDER if self.scale_check else ""

    def committed_outputs(self, nb: Path) -> tuple[Path, Path | None] | None:
        """What the run of ``nb`` rewrites of the committed results: its folder (``figures/<paper>/<stem>/``, or its
        scale check's) and the committed notebook it replaces (None for a scale check, whose notebook is in that
        folder); None for a run that writes nothing committed."""
        if not self.update:
            return None
        target = self.target(nb)
        return metrics_of(nb, target).parent, target.publish


def rung_jobs(names: str, rung: float | None = None, n_seeds: int | None = None,
              update: bool = False) -> list[tuple[Job, list[str]]]:
    """The rungs that ``--ladder names`` (ladders of :data:`layersim.notebook.ladders.LADDERS` separated by commas, or
    ``all``) and ``--rung`` ask for, smallest budget first within each ladder: each rung's :class:`Job` and its
    notebooks' stems in the ladder's order. ``ValueError`` for an unknown ladder, or a rung a ladder lacks."""
    chosen = list(ladders.LADDERS) if names == "all" else [n for n in names.split(",") if n]
    unknown = [n for n in chosen if n not in ladders.LADDERS] or ([] if chosen else [names])
    if unknown:
        raise ValueError(f"unknown ladder(s) {', '.join(map(repr, unknown))}: one of {', '.join(ladders.LADDERS)} "
                         "or all")
    found = []
    for name in chosen:
        ladder = ladders.LADDERS[name]
        budgets = ladder.budgets if rung is None else [b for b in ladder.budgets if b == rung]
        if not budgets:
            raise ValueError(f"{name} has no rung {rung:g}: its rungs are "
                             f"{', '.join(map(ladders.budget_name, ladder.budgets))}")
        found += [(Job("default", seeds=n_seeds, update=update, rung=(name, b)), list(ladder.rungs[b]))
                  for b in budgets]
    return found


def seed_count(nb: Path, job: Job, parameters: list[str]) -> int:
    """How many seeds the run of ``nb`` under ``job`` takes (``parameters``: the notebook's parameter names): one for
    a reference, a notebook without ``seed`` or a scale check without ``--seeds``, else
    :func:`layersim.notebook.seeds.seeds_for` unless ``--seeds``."""
    if job.refs:
        return 1
    if job.rung is not None:
        return job.seeds or ladders.LADDERS[job.rung[0]].seeds
    if job.scale_check:
        return job.seeds or 1
    n = job.seeds or seeds.seeds_for(nb.stem, job.scale)
    return 1 if "seed" not in parameters else n


def parse_value(text: str):
    """Parse a ``-p name value`` value like papermill does: a Python literal, else a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


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
        for s in seeds.seed_list(own_seed(nb, job.settings(nb)), n)[1:]:
            where = seed_plan(nb, job.scale, s, root, job.variant, seed_base(target, root))
            found.append(where.executed.parent)
    return list(dict.fromkeys(found))


def lock_place(folder: Path, root: Path | None = None) -> Path:
    """Where the lock of ``folder`` lives: in it, except for a repository folder outside ``runs/`` (the committed
    results), whose lock goes to ``runs/.locks/<its path>``."""
    root = writers.resolved(root or repo_root())
    real = writers.resolved(folder)
    if real.is_relative_to(root) and not real.is_relative_to(root / "runs"):
        return root / "runs" / ".locks" / real.relative_to(root)
    return real
