"""Every claim of a run in one table: ``python -m layersim claims``.

Reads every ``<paper>/<stem>/metrics.json`` under a results folder (default: the committed ``figures/``) and lists
each claim with its verdict over the seeds (*holds in k of n*), its median value, its threshold and, for a claim
that misses on some seed, its diagnosis, with the verdict of the notebook's larger run for a *scale* diagnosis
(``scale_checks/``). The book's claims audit (:func:`layersim.tools.site.audit_page`) is built from the same rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from layersim.core import markup
from layersim.core.paths import repo_root
from layersim.core import references
from layersim.notebook import ladders, registry, rehearsal, results, seeds
from layersim.notebook.results import format_threshold, format_value

#: the folder of the scale checks under the results folder (:data:`layersim.notebook.seeds.SCALE_CHECKS`)
SCALE_CHECK_FOLDER = "scale_checks"

#: the papers in the order the project presents them
PAPERS = tuple(p.key for p in references.PAPERS)


@dataclass(frozen=True)
class ClaimRow:
    """One claim of one notebook's run."""

    notebook: str
    name: str
    claim: dict
    larger: dict | None = None  # the claim in the notebook's scale check, when one was run
    registered: dict | None = None  # its entry in the claims registry (layersim.notebook.registry)
    ladder: tuple = ()  # its ladder's rungs (layersim.notebook.ladders.Rung), when one was run

    @property
    def origin(self) -> str:
        """Where the claim's definition comes from (:data:`layersim.notebook.registry.ORIGINS`), "" if unregistered."""
        return (self.registered or {}).get("origin", "")

    @property
    def scale_status(self) -> str:
        """For a claim that misses with a *scale* diagnosis, what its ladder says
        (:func:`layersim.notebook.ladders.ladder_status`), else its one larger run
        (:data:`layersim.notebook.seeds.SCALE_STATUSES`); "" for any other claim."""
        if seeds.holds(self.claim) or self.claim.get("kind") != "scale":
            return ""
        if self.ladder:
            return ladders.ladder_status(self.ladder)["status"]
        return seeds.scale_status(self.claim, self.larger)

    @property
    def misses_somewhere(self) -> bool:
        """Whether the claim fails on at least one of its seeds."""
        return seeds.misses_somewhere(self.claim)

    @property
    def threshold(self) -> str:
        """``">= 0.9"``, or "" for a claim recorded without one."""
        c = self.claim
        return f"{c['op']} {format_threshold(c['threshold'])}" if "threshold" in c and "op" in c else ""

    @property
    def why(self) -> str:
        """The diagnosis of a claim that misses on some seed (``"kind: reason"``, with the larger run's verdict for
        *scale*), preceded by a non-finite value's problem; "" when it holds on every seed."""
        c = self.claim
        failed = seeds.value_problem(c)
        if not (self.misses_somewhere and "kind" in c):
            return failed
        why = f"{c['kind']}: {c['reason']}"
        if c["kind"] == "scale" and self.ladder:
            judged = ladders.ladder_status(self.ladder)
            why += f"; at its ladder of {judged['rungs']} rungs: {judged['status']} ({judged['why']})"
        elif c["kind"] == "scale":
            why += (f"; at the larger run: {seeds.verdict(self.larger)}, {format_value(self.larger.get('value'))}"
                    f" ({seeds.scale_status(c, self.larger)})" if self.larger else "; the larger run is still to be made")
        return f"{failed}; {why}" if failed else why


def _order(path: Path) -> tuple:
    paper = path.parent.parent.name
    return (PAPERS.index(paper) if paper in PAPERS else len(PAPERS), paper, path.parent.name)


def collect(folder: Path | None = None) -> list[ClaimRow]:
    """The claims of every ``<paper>/<stem>/metrics.json`` under ``folder`` (default: ``figures/``), in the
    README's order of papers, then by notebook; a ``ValueError`` when there is none."""
    folder = Path(folder) if folder else repo_root() / "figures"
    files = sorted(folder.glob("*/*/metrics.json"), key=_order)
    if not files:
        raise ValueError(f"{folder} holds no <paper>/<stem>/metrics.json")
    rows = []
    registered = registry.load_all()
    for path in files:
        data = json.loads(path.read_text())
        if rehearsal.KEY in data:
            raise ValueError(f"{path} is a rehearsal of the paper scale (random weights, fixture data), not a result: "
                             "its claims are not collected")
        check = folder / SCALE_CHECK_FOLDER / path.parent.parent.name / path.parent.name / "metrics.json"
        larger = json.loads(check.read_text()).get("claims", {}) if check.is_file() else {}
        notebook = data.get("notebook", f"{path.parent.parent.name}/{path.parent.name}")
        mine = registered.get(notebook, {})
        rows += [ClaimRow(notebook, name, c, larger.get(name), mine.get(name),
                          tuple(ladders.rungs_of(folder, notebook, name)) if c.get("kind") == "scale" else ())
                 for name, c in data.get("claims", {}).items()]
    return rows


#: how :func:`headline` names the claims of each origin (:data:`layersim.notebook.registry.ORIGINS`)
ORIGIN_LABELS = ("defined before their first result", "defined with their first result",
                 "added after their notebook missed")


def headline(rows: list[ClaimRow]) -> list[str]:
    """The counts that weigh the verdicts, one line each: claims that hold, in all and by origin; the misses by
    diagnosis; the *scale* misses by their larger runs' status."""
    def held(some: list[ClaimRow]) -> str:
        return f"{sum(seeds.holds(r.claim) for r in some)} of {len(some)}"

    lines = [f"{held(rows)} claims hold"]
    groups = [*zip(registry.ORIGINS, ORIGIN_LABELS), ("", "not yet registered")]
    by_origin = [f"{held(mine)} {label}" for origin, label in groups if (mine := [r for r in rows if r.origin == origin])]
    lines.append("by origin: " + "; ".join(by_origin))
    misses = [r for r in rows if not seeds.holds(r.claim)]
    kinds = {k: sum(r.claim.get("kind") == k for r in misses) for k in results.DIAGNOSES}
    undiagnosed = sum(r.claim.get("kind") not in results.DIAGNOSES for r in misses)
    lines.append(f"the {len(misses)} misses by diagnosis: " + ", ".join(f"{kind} {n}" for kind, n in kinds.items() if n)
                 + (f", none recorded {undiagnosed}" if undiagnosed else ""))
    scale = [r for r in misses if r.scale_status]
    if scale:
        statuses = [r.scale_status for r in scale]
        laddered = sum(bool(r.ladder) for r in scale)
        source = ("no ladder has run yet: each by its one larger run" if not laddered else
                  "each by its ladder" if laddered == len(scale) else
                  f"{laddered} by their ladders, {len(scale) - laddered} by their one larger run")
        lines.append(f"the {len(scale)} scale misses by status: "
                     + ", ".join(f"{status} {statuses.count(status)}" for status in seeds.SCALE_STATUSES
                                 if statuses.count(status)) + f" ({source})")
    return lines


def markdown(rows: list[ClaimRow]) -> str:
    """The claims as a Markdown table for a terminal (:func:`layersim.core.markup.plain_table`: no HTML entities),
    with the counts of :func:`headline` above it."""
    counts = sorted({len(r.claim.get("verdicts", [None])) for r in rows})
    first, *rest = headline(rows)
    lines = [f"**{first}** (a claim holds when it holds on most of its seeds; k/n: the seeds on which it holds, of "
             f"the {' or '.join(map(str, counts))} it was tested on).", *[f"- {line}" for line in rest], ""]
    table = [[r.notebook, r.name, seeds.verdict(r.claim), format_value(r.claim.get("value")), r.threshold,
              r.origin, r.why] for r in rows]
    lines.append(markup.plain_table(["notebook", "claim", "holds (k/n)", "value", "threshold", "defined", "why it misses"],
                                    table))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=None, help="results folder (default: figures/)")
    args = ap.parse_args(argv)
    try:
        print(markdown(collect(args.folder)))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


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
