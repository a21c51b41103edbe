"""A paper's budget ladders as its ``<x>NN_scale_ladders`` notebook shows them: rows, a table, a figure, findings.

:func:`ladder_rows` reads every ladder claim of one paper (:data:`layersim.notebook.ladders.LADDERS`) from a results
folder (``figures/`` or a run's output folder, :func:`results_folder`): each rung run so far with its seeds' values,
mean, *k/n*, verdict and time (:func:`rung_seconds`), the rungs planned, and the status
:func:`layersim.notebook.ladders.ladder_status` gives them. :func:`markdown` renders the rows as a table with the
ladders' checks, :func:`figure` draws one panel per claim with a rung, :func:`findings` sums them up in a paragraph.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from layersim.core import markup, paths
from layersim.notebook import ladders, plotting, seeds, settings
from layersim.notebook.results import format_value


def results_folder(value: str | None) -> Path:
    """The folder the ladders are read from: the committed ``figures/`` for None, else ``value``, a path relative to
    the repository's root (``runs/default``) or absolute (:func:`layersim.core.paths.resolved`)."""
    root = paths.repo_root()
    return paths.resolved(root / "figures" if value is None else root / Path(value).expanduser())


def _existing_folder(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"got {type(value).__name__}")
    if not results_folder(value).is_dir():
        raise ValueError(f"no folder {results_folder(value)}")
    return value


#: the rule of the ladder notebooks' one setting, ``ladders_folder`` (:func:`results_folder`)
RULES = {"ladders_folder": settings.optional(
    settings.custom(_existing_folder, "an existing folder, relative to the repository's root or absolute"),
    "the committed figures/")}


def _read(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def rung_seconds(folder: Path, ladder: str, budget: float, notebook: str) -> float | None:
    """The wall time of ``notebook``'s (``"<paper>/<stem>"``) runs on one rung under ``folder``: its own seed's
    (``wall_time.json`` beside the rung's ``metrics.json``) plus the other seeds' (``seed_run_seconds`` of that
    ``metrics.json``); None when the rung has no ``metrics.json`` or no ``wall_time.json``."""
    here = ladders.rung_folder(folder, ladder, budget) / notebook
    if not (here / "metrics.json").is_file() or not (here / seeds.WALL_TIME).is_file():
        return None
    others = seeds.other_seed_seconds(_read(here / "metrics.json"))
    return float(_read(here / seeds.WALL_TIME)["seconds"]) + sum(others.values())


def paper_ladders(paper: str) -> dict[str, dict]:
    """The ladders that judge a claim of ``paper``, in :data:`~layersim.notebook.ladders.LADDERS`' order:
    ``{name: {"axis", "why", "budgets", "seeds", "checks", "claims"}}`` (``claims``: ``"<stem>/<claim>"`` of this
    paper)."""
    return {name: {"axis": ladder.axis, "why": ladder.why, "budgets": ladder.budgets, "seeds": ladder.seeds,
                   "checks": list(ladder.checks),
                   "claims": [f"{nb.split('/')[1]}/{claim}" for nb, claim in ladder.claims
                              if nb.split("/")[0] == paper]}
            for name, ladder in ladders.LADDERS.items() if any(nb.split("/")[0] == paper for nb, _ in ladder.claims)}


def _rung(folder: Path, ladder: str, notebook: str, rung: ladders.Rung) -> dict:
    values = ladders.seed_values(rung.claim)
    verdicts = seeds.seed_verdicts(rung.claim)
    return {"budget": rung.budget, "values": values, "mean": sum(values) / len(values) if values else None,
            "k": sum(verdicts), "n": len(verdicts), "holds": seeds.holds(rung.claim),
            "seconds": rung_seconds(folder, ladder, rung.budget, notebook)}


def ladder_rows(folder: Path, paper: str) -> list[dict]:
    """One row per ladder claim of ``paper`` (its notebooks are ``"<paper>/<stem>"``), read under ``folder``
    (:func:`layersim.notebook.ladders.rungs_of`), in the order of the ladders and their claims: ``ladder``, ``axis``,
    ``notebook``, ``claim``, ``planned`` (the budgets), ``rungs`` run (by budget: ``budget``, seed ``values``,
    ``mean``, ``k``, ``n``, ``holds``, ``seconds``), ``threshold`` and ``op`` (None before a rung), ``seconds`` (their
    sum, None when none is known), ``status`` (:func:`~layersim.notebook.ladders.ladder_status`; "not yet retested"
    when no rung ran) and ``checks``. ``ValueError`` as ``rungs_of`` and ``ladder_status`` raise it."""
    rows = []
    for ladder in ladders.LADDERS.values():
        checks = None  # read once per ladder, shared by its claims' rows
        for notebook, claim in ladder.claims:
            if notebook.split("/")[0] != paper:
                continue
            checks = checks_of(folder, ladder.name) if checks is None else checks
            found = ladders.rungs_of(folder, notebook, claim)
            status = ladders.ladder_status(found)
            if not found:
                status["why"] = f"no rung has run yet (planned: {', '.join(map(ladders.budget_name, ladder.budgets))})"
            rungs = [_rung(folder, ladder.name, notebook, r) for r in found]
            known = [r["seconds"] for r in rungs if r["seconds"] is not None]
            rows.append({"ladder": ladder.name, "axis": ladder.axis, "notebook": notebook, "claim": claim,
                         "planned": ladder.budgets, "rungs": rungs,
                         "threshold": found[0].claim["threshold"] if found else None,
                         "op": found[0].claim["op"] if found else None,
                         "seconds": sum(known) if known else None, "status": status,
                         "checks": checks})
    return rows


def checks_of(folder: Path, name: str) -> list[dict]:
    """The checks of ladder ``name`` (:attr:`layersim.notebook.ladders.Ladder.checks`), each evaluated under
    ``folder`` by its function in :data:`layersim.notebook.ladders.CHECKS`: ``text``, ``passed`` (None while the
    rungs it reads have not run) and ``numbers``."""
    texts = ladders.LADDERS[name].checks
    return [{"text": text, **fn(folder)} for text, fn in zip(texts, ladders.CHECKS.get(name, ()), strict=True)]


def _budgets(budgets: Sequence[float]) -> str:
    return ", ".join(map(ladders.budget_name, budgets)) or "–"


def markdown(rows: Sequence[Mapping]) -> str:
    """The rows (:func:`ladder_rows`) as a Markdown table (claim, ladder and axis, rungs run and planned, each rung's
    mean with *k/n*, status, why, seconds of all seeds' runs), then each ladder's checks; strings escaped."""
    if not rows:
        return "No claim of this paper has a ladder."
    table = []
    for r in rows:
        means = "; ".join(f"{ladders.budget_name(g['budget'])}: {format_value(g['mean'])} ({g['k']}/{g['n']})"
                          for g in r["rungs"])
        table.append([f"{markup.code(r['claim'])} ({markup.cell(r['notebook'].split('/')[1])})",
                      f"{markup.code(r['ladder'])} ({markup.cell(r['axis'])})",
                      f"{_budgets([g['budget'] for g in r['rungs']])} / {_budgets(r['planned'])}", means or "–",
                      f"**{markup.cell(r['status']['status'])}**", markup.cell(r["status"]["why"]),
                      "–" if r["seconds"] is None else f"{r['seconds']:.0f}"])
    lines = [markup.table(["claim", "ladder (axis)", "rungs run / planned", "per-rung mean (k/n)", "status", "why",
                           "seconds"], table, raw=True)]
    checked = {r["ladder"]: r["checks"] for r in rows if r["checks"]}
    outcome = {True: "holds", False: "**fails**", None: "not yet evaluated"}
    for name, checks in checked.items():
        lines += ["", f"What must hold of a rung of {markup.code(name)} before its claims are read, and what the rungs "
                  "show:", "", *[f"- {markup.cell(c['text'])}: {outcome[c['passed']]} ({markup.cell(c['numbers'])})"
                                for c in checks]]
    return "\n".join(lines)


def findings(rows: Sequence[Mapping]) -> str:
    """What the rows show, as a Markdown paragraph: how many claims have rungs, their statuses, and each claim's
    status with its reason."""
    if not rows:
        return "No claim of this paper has a ladder."
    run = [r for r in rows if r["rungs"]]
    if not run:
        names = [markup.code(n) for n in dict.fromkeys(r["ladder"] for r in rows)]
        judged = ("the claim" if len(rows) == 1 else f"the {len(rows)} claims") + \
            (" it judges" if len(names) == 1 else " they judge") + (" is" if len(rows) == 1 else " are")
        return (f"No rung of {' and '.join(names)} has run yet: {judged} *not yet retested*. Run a ladder as above, "
                "then this notebook again.")
    counts = [f"{s} {sum(r['status']['status'] == s for r in rows)}" for s in seeds.SCALE_STATUSES
              if any(r["status"]["status"] == s for r in rows)]
    each = [f"{markup.code(r['claim'])} ({markup.code(r['ladder'])}, {len(r['rungs'])} of {len(r['planned'])} "
            f"rungs): *{r['status']['status']}*, {markup.cell(r['status']['why'])}." for r in rows]
    return f"Claims with rungs: {len(run)} of {len(rows)}; by status: {', '.join(counts)}. " + " ".join(each)


def key_numbers(rows: Sequence[Mapping]) -> dict:
    """The digest of the rows for the notebook's last cell: per ``"<stem>/<claim>"``, its status and rungs run."""
    return {"statuses": {f"{r['notebook'].split('/')[1]}/{r['claim']}": r["status"]["status"] for r in rows},
            "rungs_run": {f"{r['notebook'].split('/')[1]}/{r['claim']}": len(r["rungs"]) for r in rows}}


def figure(rows: Sequence[Mapping], columns: int = 3):
    """One panel per claim with a rung (:func:`layersim.notebook.plotting.budget_ladder`: each seed's value, the
    mean and spread, the threshold, against the budget), its status in the title; None when no rung has run."""
    drawn = [r for r in rows if any(g["values"] for g in r["rungs"])]
    if not drawn:
        return None
    import matplotlib.pyplot as plt

    cols = min(columns, len(drawn))
    lines = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(4.8 * cols, 3.8 * lines), squeeze=False)
    for ax, r in zip(axes.flat, drawn):
        rungs = [g for g in r["rungs"] if g["values"]]
        plotting.budget_ladder([g["budget"] for g in rungs], [g["values"] for g in rungs], r["threshold"], ax=ax,
                               xlabel=r["axis"], ylabel=f"claim value (holds {r['op']} threshold)",
                               title=f"{r['notebook'].split('/')[1]}: {r['claim']}\nstatus: {r['status']['status']}")
    for ax in axes.flat[len(drawn):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
