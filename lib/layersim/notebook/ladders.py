"""Budget ladders of a *scale* miss, and the status their trend supports.

A ladder runs a notebook at several budgets along the axis its diagnosis names (steps, data, width, depth); each
rung records the claim as every run does (:func:`layersim.notebook.seeds.combine`). :func:`ladder_status` turns the
rungs into one of :data:`layersim.notebook.seeds.SCALE_STATUSES` by :data:`RULE`, written down on 2026-11-28 before
any ladder ran; :func:`margin` orients a value so that positive means "holds".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layersim.notebook import seeds

#: the folder (under ``figures/`` or a run's output folder) of the rungs: ``<paper>/<stem>/<budget>/metrics.json``
FOLDER = "ladders"
#: the fewest rungs a ladder needs, and the fewest seeds on each of its two largest rungs
MIN_RUNGS, MIN_TOP_SEEDS = 3, 3

#: the rule, verbatim as fixed on 2026-11-28 before any ladder ran
RULE = (
    "A ladder is judged only with at least 3 rungs and at least 3 seeds (finite values) on each of its two largest "
    "rungs; otherwise its status is 'not yet retested'. A rung's verdict is the claim's own majority-of-seeds rule. "
    "'confirmed': the largest rung holds. 'trending': it does not, but (a) the mean margin (the value's distance "
    "to the threshold, positive on the side where the claim holds) gains from the smallest to the largest rung more "
    "than the seeds' spread (the larger of the two largest rungs' sample standard deviations of the value over "
    "their seeds), and (b) the last step still gains (the largest rung's mean margin exceeds the second largest's). "
    "'not supported': otherwise. The threshold and the comparison must be the same on every rung. Reported beside "
    "it, for information only: the least-squares slope of the mean margin per doubling of the budget, and where "
    "that line would cross the threshold."
)


@dataclass(frozen=True)
class Rung:
    """One rung: its ``budget`` (a positive number on the ladder's axis) and the ``claim`` recorded there (with
    ``value``, ``threshold``, ``op``, ``holds`` and, over several seeds, ``values``)."""

    budget: float
    claim: Mapping


def margin(value: float, threshold: float, op: str) -> float:
    """``value - threshold`` for ``>``/``>=``, ``threshold - value`` for ``<``/``<=``: positive where the claim holds
    (or on its boundary for ``>=``/``<=`` at 0); ``ValueError`` for another ``op``."""
    if op in (">", ">="):
        return float(value) - float(threshold)
    if op in ("<", "<="):
        return float(threshold) - float(value)
    raise ValueError(f"unknown comparison {op!r}: one of >, >=, <, <=")


def seed_values(claim: Mapping) -> list[float]:
    """The claim's finite values over its seeds (``values``, else its one ``value``)."""
    values = claim.get("values", [claim.get("value")])
    return [float(v) for v in values if seeds.is_finite_number(v)]


def ladder_status(rungs: Sequence[Rung]) -> dict:
    """The status of a *scale* miss from its ladder by :data:`RULE`: ``status``, ``why`` (one line with the numbers),
    ``rungs``, ``margins`` (mean per rung, by budget), ``gain``, ``spread``, ``slope_per_doubling`` and
    ``crossing_budget`` (None unless the fitted line rises and crosses above the largest budget). ``ValueError`` for
    budgets that are not positive and distinct, or a threshold or comparison that differs between rungs."""
    rungs = sorted(rungs, key=lambda r: r.budget)
    budgets = [float(r.budget) for r in rungs]
    if any(not math.isfinite(b) or b <= 0 for b in budgets) or len(set(budgets)) != len(budgets):
        raise ValueError(f"the budgets of a ladder must be positive, finite and distinct: {budgets}")
    tests = {(float(r.claim["threshold"]), r.claim["op"]) for r in rungs}
    if len(tests) > 1:
        raise ValueError(f"the rungs judge the claim differently ({sorted(tests)}): one threshold and comparison")
    out = {"rungs": len(rungs), "margins": [], "gain": None, "spread": None, "slope_per_doubling": None,
           "crossing_budget": None}
    if len(rungs) < MIN_RUNGS or any(len(seed_values(r.claim)) < MIN_TOP_SEEDS for r in rungs[-2:]):
        return {**out, "status": seeds.SCALE_STATUSES[0],
                "why": f"{len(rungs)} rung(s), seeds on the two largest "
                       f"{[len(seed_values(r.claim)) for r in rungs[-2:]]}: needs {MIN_RUNGS} rungs and "
                       f"{MIN_TOP_SEEDS} seeds on each of the two largest"}
    threshold, op = tests.pop()
    means = [float(np.mean([margin(v, threshold, op) for v in seed_values(r.claim)])) for r in rungs]
    spread = max(float(np.std(seed_values(r.claim), ddof=1)) for r in rungs[-2:])
    gain = means[-1] - means[0]
    slope, intercept = np.polyfit(np.log2(budgets), means, 1)
    crossing = 2 ** (-intercept / slope) if slope > 0 and means[-1] < 0 else None
    crossing = crossing if crossing is not None and crossing > budgets[-1] else None
    out.update(margins=means, gain=gain, spread=spread, slope_per_doubling=float(slope),
               crossing_budget=float(crossing) if crossing is not None else None)
    numbers = (f"mean margin {means[0]:+.3g} at {budgets[0]:g} -> {means[-1]:+.3g} at {budgets[-1]:g} "
               f"(gain {gain:+.3g}, seeds' spread {spread:.3g})")
    if seeds.holds(rungs[-1].claim):
        return {**out, "status": seeds.SCALE_STATUSES[1], "why": f"holds at the largest rung; {numbers}"}
    if gain > spread and means[-1] > means[-2]:
        return {**out, "status": seeds.SCALE_STATUSES[2], "why": f"gains more than the spread and still at the "
                f"last step; {numbers}"}
    return {**out, "status": seeds.SCALE_STATUSES[3],
            "why": f"{'no gain beyond the spread' if gain <= spread else 'the last step loses'}; {numbers}"}


def rungs_of(folder: Path, notebook: str, claim: str) -> list[Rung]:
    """The rungs of ``claim`` of ``notebook`` (``"<paper>/<stem>"``) under ``folder``/:data:`FOLDER`, each
    ``<budget>/metrics.json``, by budget; [] when there is no ladder. ``ValueError`` for a rung folder not named by a
    number."""
    base = Path(folder) / FOLDER / notebook
    out = []
    for path in sorted(base.glob("*/metrics.json")):
        try:
            budget = float(path.parent.name)
        except ValueError:
            raise ValueError(f"{path.parent}: a rung's folder is named by its budget, a number") from None
        claims = json.loads(path.read_text(encoding="utf-8")).get("claims", {})
        if claim in claims:
            out.append(Rung(budget, claims[claim]))
    return sorted(out, key=lambda r: r.budget)
