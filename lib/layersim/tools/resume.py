"""Which runs of a batch already finished, so that a batch stopped midway goes on where it stopped.

:func:`finished` tells whether a notebook's run under a :class:`layersim.tools.plans.Job` ended with every seed it
asks for; :func:`keep_finished` drops those runs from a batch (``runner --resume``, and every ladder rung: its
committed folder is the record); :func:`write_own_time` notes a ladder rung's own run time, since a rung commits no
executed notebook whose papermill duration would say it, and :func:`keep_seed_records` copies the other seeds' records
into the rung's folder, so that a committed rung holds every seed's numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

from layersim.core import writers
from layersim.core.paths import repo_root
from layersim.notebook import ladders, seeds
from layersim.tools import claims, plans, progress


def write_own_time(folder: Path, seconds: float, committed_folder: bool) -> Path:
    """Note the wall time of a ladder rung's own run beside its ``metrics.json`` (:data:`layersim.notebook.seeds.WALL_TIME`,
    as for the other seeds' runs), through the results writer when the rung is committed."""
    if not committed_folder:
        return seeds.write_wall_time(folder, seconds)
    return writers.write_committed(Path(folder) / seeds.WALL_TIME, json.dumps({"seconds": float(seconds)}) + "\n",
                                   "results")


def keep_seed_records(folders: list[Path], dest: Path, committed_folder: bool) -> list[Path]:
    """Copy each seed run's ``metrics.json`` and :data:`layersim.notebook.seeds.WALL_TIME` from ``folders``
    (``.../seed-<s>/<paper>/<stem>/``) into ``dest/seeds/seed-<s>/`` (through the results writer when ``dest`` is
    committed); returns the files written."""
    written = []
    for folder in folders:
        seed_dir = Path(folder).parents[1].name  # seed-<s>
        for name in ("metrics.json", seeds.WALL_TIME):
            source = Path(folder) / name
            if not source.is_file():
                continue
            target = Path(dest) / "seeds" / seed_dir / name
            text = source.read_text(encoding="utf-8")
            written.append(writers.write_committed(target, text, "results") if committed_folder
                           else writers.write_text(target, text))
    return written


def finished(nb: Path, job: plans.Job, parameters: list[str]) -> bool:
    """Whether ``nb``'s run under ``job`` already ended: its own executed notebook complete without an error (papermill's
    ``duration`` set; for a ladder rung, its noted wall time) and its ``metrics.json`` beside it with the other seeds'
    runs that ``job`` asks for."""
    target = job.target(nb)
    try:
        if target.rung:
            folder = plans.metrics_of(nb, target).parent
            own = json.loads((folder / seeds.WALL_TIME).read_text(encoding="utf-8"))["seconds"]
            executed = {"metadata": {"papermill": {"duration": own}}}
        else:
            executed = json.loads(target.executed.read_text(encoding="utf-8"))
        times = progress.seed_seconds(executed, json.loads(plans.metrics_of(nb, target).read_text(encoding="utf-8")))
        failed = executed["metadata"]["papermill"].get("exception")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return "own" in times and not failed and len(times) == plans.seed_count(nb, job, parameters)


def keep_finished(job: plans.Job, parameters: dict[Path, list[str]]) -> tuple[dict[Path, list[str]], list[Path]]:
    """``parameters`` without the notebooks whose run already :func:`finished` (``--resume``, and always for a ladder's
    rungs), and the notebooks kept, each named on stdout with its claims."""
    left, kept = {}, []
    for nb, names in parameters.items():
        if not finished(nb, job, names):
            left[nb] = names
            continue
        name = nb.relative_to(repo_root() / "notebooks").with_suffix("").as_posix()
        why = "--resume" if job.rung is None else f"rung {ladders.budget_name(job.rung[1])} of {job.rung[0]}"
        print(f"{name}: finished earlier, kept ({why}); {claims.claims_line(plans.metrics_of(nb, job.target(nb)))}",
              flush=True)
        kept.append(nb)
    return left, kept
