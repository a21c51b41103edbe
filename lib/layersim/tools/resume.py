"""Which runs of a batch already finished, so that a batch stopped midway goes on where it stopped.

:func:`finished` tells whether a notebook's run under a :class:`layersim.tools.plans.Job` ended with every seed it
asks for; :func:`keep_finished` drops those runs from a batch (``runner --resume``, and every ladder rung: its
committed folder is the record); :func:`write_own_time` notes a ladder rung's own run time, since a rung commits no
executed notebook whose papermill duration would say it, and :func:`keep_seed` copies each other seed's
records into the rung's folder as soon as that seed's run ends, so that a committed rung holds every seed's numbers
and a rung stopped between seeds goes on with the seeds it lacks (:func:`kept_seed`).
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


def keep_seed(folder: Path, dest: Path, seed: int, committed_folder: bool) -> Path:
    """Copy the ``metrics.json`` and :data:`layersim.notebook.seeds.WALL_TIME` of seed ``seed``'s run ``folder`` into
    :func:`seed_record` (through the results writer when ``dest`` is committed), as soon as that run ends; returns
    that folder."""
    kept = seed_record(dest, seed)
    for name in ("metrics.json", seeds.WALL_TIME):
        source = Path(folder) / name
        if source.is_file():
            text = source.read_text(encoding="utf-8")
            if committed_folder:
                writers.write_committed(kept / name, text, "results")
            else:
                kept.mkdir(parents=True, exist_ok=True)
                writers.write_text(kept / name, text)
    return kept


def seed_record(dest: Path, seed: int) -> Path:
    """Where :func:`keep_seed` keeps the records of seed ``seed``'s run of a rung: ``dest/seeds/seed-<seed>/``."""
    return Path(dest) / "seeds" / f"seed-{int(seed)}"


def _same(value) -> object:
    """``value`` as its JSON text reads back (tuples as lists), for comparing settings with recorded ones."""
    return json.loads(json.dumps(value))


def kept_seed(dest: Path, notebook: str, settings: dict) -> float | None:
    """The wall time of the run of ``notebook`` (``"<paper>/<stem>"``) at ``settings`` (its ``seed`` included) that an
    earlier run of the rung kept in ``dest`` (:func:`seed_record`), when that run ended (its ``metrics.json`` and wall
    time both there) at the default scale with every one of ``settings``; None otherwise, and the seed runs again."""
    folder = seed_record(dest, settings["seed"])
    try:
        run = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        seconds = float(json.loads((folder / seeds.WALL_TIME).read_text(encoding="utf-8"))["seconds"])
        recorded = run["params"]
        same = (run.get("notebook") == notebook and run.get("scale") == "default"
                and all(k in recorded and _same(recorded[k]) == _same(v) for k, v in settings.items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return seconds if same else None


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
