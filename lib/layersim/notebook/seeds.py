"""The runs that test a claim: several seeds (*holds in k of n*), and a larger run for a *scale* diagnosis.

The runner runs a notebook at the seeds after its own, each into :func:`seed_folder`, then the notebook's own run,
whose :meth:`layersim.notebook.run.Run.record` folds their claims in (:func:`combine`; the folders arrive in
:data:`ENV`). Each claim then carries :data:`SEED_KEYS` (``n``, ``k``, per-seed ``seeds``, ``values``, ``verdicts``,
``seed_mean``, ``seed_std``), ``value`` (the median) and ``holds`` (``k > n / 2``). A non-finite value never holds
(:func:`holds`). Only runs differing in the seed alone are combined (see docs/modules.md,
`layersim.notebook.seeds`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from layersim.core import writers

#: the environment variable that names the other seeds' run folders (``os.pathsep``-separated)
ENV = "LAYERSIM_SEED_RUNS"

#: seeds per scale, what ``make reproduce`` runs (``--seeds`` overrides)
SEEDS = {"smoke": 1, "default": 3, "paper": 1}

#: notebooks whose one run at the default scale takes about 10 minutes or more on 2 CPU cores from an empty
#: model cache: ``stem -> (seconds, when and how it was measured)``. They record one seed there, and their
#: notebooks say so
ONE_SEED_AT_DEFAULT: dict[str, tuple[float, str]] = {}

#: three times the default fine-tuning of the small BERT (300 steps of 32 instead of 100), the scale check of the
#: notebooks that fine-tune it
LONGER_FINE_TUNING = {"steps": 300, "warmup_steps": 30, "n_train": 9600}

#: The larger runs behind the claims diagnosed *scale* (our stand-in too small to show the effect):
#: ``stem -> settings``, the notebook at the default scale with these settings changed, each small enough for
#: 2 CPU cores in about 15 minutes. ``python -m layersim.tools.runner --scale-check`` runs them into
#: ``figures/scale_checks/<paper>/<stem>/`` (with ``--update-committed``), where the claims table
#: (``python -m layersim claims``) and the notebooks read whether the claim holds at the larger scale.
SCALE_CHECKS: dict[str, dict] = {
    # the regression stand-in: 1797 digits x 61 varying pixels (value 0-9) instead of 442 patients x 10 features
    "a05_layers": {"regression_dataset": "digits"},
    # the largest None network Fashion-MNIST's training split allows: all ten classes, 48,000 images (the three
    # domains draw from the other 12,000), 8 epochs, instead of a09's six garment classes, 12,000 images, 4 epochs
    "a10_negative_transfer": {"none_source": "all", "none_n_source": 48000, "none_epochs": 8},
    # three times the fine-tuning (300 steps of 32, each of 9,600 examples once): c01 on the task that 100 steps
    # leave unsolved; c03 (restart 1) and t09 (standard and aligned) on both tasks, sharing the standard fine-tunes
    "c01_cka_structure": {"tasks": ["austen-novel"], **LONGER_FINE_TUNING},
    "c03_layer_skipping": dict(LONGER_FINE_TUNING),
    "t09_aligned_bert": dict(LONGER_FINE_TUNING),
    # every ablation model (multi-exit, CE-reg, uniform weights, 6 and 9 blocks) at the full budget: 30,000 images,
    # 5 epochs; the full budget's standard and aligned models are reused (five ViTs to train)
    "t03_aligned_training": {"ablation_budget": {}},
    # the classifier on the final [CLS] trained for 100 epochs instead of the paper's 5: about the paper's number of
    # Adam steps (5 epochs of its 50,000 images) on our 3,000 Fashion-MNIST images
    "r04_skip_vs_approx": {"probe_epochs": 100},
}

#: a default-scale run shorter than this (seconds, on 2 cores) is tested over several seeds
COSTLY_SECONDS = 600.0

#: the keys :func:`combine` adds to a claim (or sets: ``holds`` and ``value``)
SEED_KEYS = ("n", "k", "seeds", "values", "verdicts", "seed_mean", "seed_std")


def seeds_for(stem: str, scale: str) -> int:
    """How many seeds a run of notebook ``stem`` at ``scale`` tests its claims over (:data:`SEEDS`,
    one at the default scale for the notebooks in :data:`ONE_SEED_AT_DEFAULT`)."""
    if scale not in SEEDS:
        raise ValueError(f"unknown scale {scale!r}: use one of {', '.join(SEEDS)}")
    if scale == "default" and stem in ONE_SEED_AT_DEFAULT:
        return 1
    return SEEDS[scale]


def seed_list(first: int, n: int) -> list[int]:
    """The seeds of a run over ``n`` seeds that starts at the notebook's own ``first``: first, first+1, ..."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of seeds must be an integer >= 1, got {n!r}")
    if isinstance(first, bool) or not isinstance(first, (int, np.integer)) or first < 0:
        raise ValueError(f"a seed is an integer >= 0, got {first!r}")
    return [int(first) + i for i in range(int(n))]


def seed_folder(root: Path, scale: str, seed: int, variant: str = "", base: Path | None = None) -> Path:
    """Where one extra seed's run writes (its ``$LAYERSIM_OUT``): ``<root>/runs/<scale>/seeds/seed-<seed>``, with
    ``<variant>/`` before ``seed-<seed>`` for a scale check; ``base`` replaces ``<root>/runs/<scale>``."""
    base = (Path(base) if base is not None else Path(root) / "runs" / scale) / "seeds"
    return (base / variant if variant else base) / f"seed-{int(seed)}"


def folders_from_env(value: str | None) -> list[Path]:
    """The run folders named by :data:`ENV` (empty or unset: none)."""
    return [Path(p) for p in (value or "").split(os.pathsep) if p.strip()]


#: the file beside a seed run's ``metrics.json`` where the runner notes its wall time
WALL_TIME = "wall_time.json"


def write_wall_time(folder: Path, seconds: float) -> Path:
    """Note the wall time of the seed run in ``folder`` (the runner measures it; the run cannot)."""
    return writers.write_text(Path(folder) / WALL_TIME, json.dumps({"seconds": float(seconds)}) + "\n")


def load_runs(folders: Sequence[Path]) -> list[dict]:
    """Each folder's ``metrics.json``, with the runner's wall time as ``"seconds"`` when noted; ``ValueError`` names
    a folder without one (a failed seed run)."""
    runs = []
    for folder in folders:
        path = Path(folder) / "metrics.json"
        if not path.is_file():
            raise ValueError(f"the seed run {folder} wrote no metrics.json: it failed or has not run")
        run = json.loads(path.read_text())
        timed = Path(folder) / WALL_TIME
        if timed.is_file():
            run["seconds"] = json.loads(timed.read_text())["seconds"]
        runs.append(run)
    return runs


def wall_times(runs: Sequence[Mapping]) -> dict[str, float]:
    """``{seed: seconds}`` of the seed runs whose wall time the runner noted (checked against
    :data:`COSTLY_SECONDS`)."""
    return {str(r["params"]["seed"]): float(r["seconds"]) for r in runs if "seconds" in r}


def other_seed_seconds(metrics: Mapping) -> dict[str, float]:
    """``{seed: seconds}`` of the other seeds' runs a finished run's ``metrics.json`` records (``seed_run_seconds``,
    written from :func:`wall_times`); {} when it records none."""
    return {str(s): float(t) for s, t in (metrics.get("seed_run_seconds") or {}).items()}


def _without_seed(params: Mapping[str, Any]) -> dict:
    return {k: v for k, v in params.items() if k != "seed"}


def _same_runs(notebook: str, scale: str, params: Mapping[str, Any], runs: Sequence[Mapping]) -> None:
    """A ``ValueError`` unless every run is ``notebook`` at ``scale`` with ``params`` but for the seed,
    and no two runs share a seed."""
    mine = json.loads(json.dumps(_without_seed(params), default=str))
    seeds = [params.get("seed")]
    for r in runs:
        where = f"the seed run of {r.get('notebook')!r} at seed {r.get('params', {}).get('seed')!r}"
        if r.get("notebook") != notebook or r.get("scale") != scale:
            raise ValueError(f"{where} is not {notebook!r} at scale {scale!r} (it is {r.get('scale')!r})")
        theirs = _without_seed(r.get("params", {}))
        if theirs != mine:
            diff = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
            raise ValueError(f"{where} has other settings than this run ({', '.join(diff)}): its claims "
                             "test another experiment")
        seeds.append(r.get("params", {}).get("seed"))
    if len(set(map(str, seeds))) != len(seeds):
        raise ValueError(f"two runs share a seed: {seeds}")


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def combine(notebook: str, scale: str, params: Mapping[str, Any], claims: Mapping[str, Mapping],
            runs: Sequence[Mapping] = ()) -> dict:
    """This run's ``claims`` (at ``params["seed"]``) and the other seeds' ``runs`` as one verdict per claim over all
    seeds, with :data:`SEED_KEYS`.

    ``ValueError`` when a claim already carries a seed key, or a run is another notebook, scale or setting, lacks or
    adds claims, or uses another threshold or comparison.
    """
    _same_runs(notebook, scale, params, runs)
    seeds = [params.get("seed")] + [r["params"].get("seed") for r in runs]
    out = {}
    for name, c in claims.items():
        taken = sorted(set(c) & set(SEED_KEYS))
        if taken:
            raise ValueError(f"claim {name!r} carries {taken}, which its verdict over the seeds sets: name them "
                             "otherwise")
        per_seed = [c]
        for r in runs:
            theirs = r.get("claims", {})
            if name not in theirs:
                raise ValueError(f"the run at seed {r['params'].get('seed')} has no claim {name!r}")
            other = theirs[name]
            if (other.get("threshold"), other.get("op")) != (c.get("threshold"), c.get("op")):
                raise ValueError(f"claim {name!r} is tested against {other.get('op')} {other.get('threshold')} at "
                                 f"seed {r['params'].get('seed')} but {c.get('op')} {c.get('threshold')} here")
            per_seed.append(other)
        for seed, x in zip(seeds, per_seed):
            if not is_finite_number(x.get("value")):
                raise ValueError(f"the run at seed {seed} recorded claim {name!r} with the value {x.get('value')!r}: "
                                 "its measurement failed, it cannot be judged")
        values = [float(x["value"]) for x in per_seed]
        verdicts = [bool(x["holds"]) for x in per_seed]
        k, n = sum(verdicts), len(verdicts)
        mean, std = _mean_std(values)
        out[name] = {**c,
                     "holds": 2 * k > n, "value": float(np.median(values)),
                     "n": n, "k": k, "seeds": seeds, "values": values, "verdicts": verdicts, "seed_mean": mean,
                     "seed_std": std}
    for r in runs:
        extra = sorted(set(r.get("claims", {})) - set(claims))
        if extra:
            raise ValueError(f"the run at seed {r['params'].get('seed')} has claims this run lacks: {extra}")
    return out


def is_finite_number(v: Any) -> bool:
    """Whether ``v`` is a real number that is neither NaN nor infinite (``bool`` and ``None`` are not numbers)."""
    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            and math.isfinite(v))


def holds(c: Mapping) -> bool:
    """Whether a recorded claim holds: its ``holds`` says so and its ``value`` is a finite number (a failed
    measurement never holds)."""
    return bool(c.get("holds")) and is_finite_number(c.get("value"))


def value_problem(c: Mapping) -> str:
    """Why a recorded claim's value cannot be judged (``"its value NaN is not a finite number"``), or ""."""
    v = c.get("value")
    if is_finite_number(v):
        return ""
    shown = "NaN" if isinstance(v, float) and math.isnan(v) else repr(v)
    return f"its value {shown} is not a finite number: the measurement failed"


def seed_verdicts(c: Mapping) -> list[bool]:
    """Whether a recorded claim holds on each of its seeds (one verdict for a one-seed record); a non-finite value
    does not hold."""
    if "verdicts" not in c:
        return [holds(c)]
    values = c.get("values")
    if not isinstance(values, Sequence) or len(values) != len(c["verdicts"]):
        return [bool(v) for v in c["verdicts"]]
    return [bool(v) and is_finite_number(x) for v, x in zip(c["verdicts"], values)]


def fraction(c: Mapping) -> str:
    """``"k/n"`` of a recorded claim (:func:`seed_verdicts`); a claim recorded without them is one seed's
    (``"1/1"`` or ``"0/1"``)."""
    verdicts = seed_verdicts(c)
    return f"{sum(verdicts)}/{len(verdicts)}"


def verdict(c: Mapping) -> str:
    """``"yes (k/n)"`` or ``"**no** (k/n)"`` of a recorded claim (Markdown; :func:`holds`)."""
    return ("yes" if holds(c) else "**no**") + f" ({fraction(c)})"


def misses_somewhere(c: Mapping) -> bool:
    """Whether a recorded claim fails on at least one of its seeds (its only seed, for a one-seed record)."""
    return not all(seed_verdicts(c))


#: what a *scale* miss's larger runs say of it, one set used everywhere (the claims command, the book, the README):
#: no larger run yet; the claim holds at a larger run (by the same majority-of-seeds rule as every claim); it moves
#: toward its threshold by more than the seeds' spread; no such move (then it does not replicate at the scale we
#: can reach)
SCALE_STATUSES = ("not yet retested", "confirmed", "trending", "not supported")


def scale_status(claim: Mapping, larger: Mapping | None) -> str:
    """The :data:`SCALE_STATUSES` entry of a claim diagnosed *scale*, from its default run ``claim`` and its larger
    run ``larger`` (None: not run yet); *trending* when the larger value is closer to the threshold by more than the
    larger ``seed_std``."""
    if larger is None:
        return SCALE_STATUSES[0]
    if holds(larger):
        return SCALE_STATUSES[1]
    if not (is_finite_number(claim.get("value")) and is_finite_number(larger.get("value"))):
        return SCALE_STATUSES[3]
    t = float(claim["threshold"])
    closer = abs(float(claim["value"]) - t) - abs(float(larger["value"]) - t)
    spread = max(float(claim.get("seed_std") or 0.0), float(larger.get("seed_std") or 0.0))
    return SCALE_STATUSES[2] if closer > spread else SCALE_STATUSES[3]
