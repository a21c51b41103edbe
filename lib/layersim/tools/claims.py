"""Every claim of a run in one table: ``python -m layersim claims``.

Reads ``<paper>/<stem>/metrics.json`` under a results folder (by default the committed ``figures/``)
and lists each claim with its verdict over the seeds (*holds in k of n*, :mod:`layersim.notebook.seeds`),
its value (the median over the seeds), its threshold and, for a claim that misses on some seed, the
diagnosis recorded beside it (:data:`layersim.notebook.results.DIAGNOSES`); for a *scale* diagnosis, the
claim's verdict in the notebook's larger run (``<folder>/scale_checks/<paper>/<stem>/metrics.json``,
``python -m layersim.tools.runner --scale-check``). The book's claims audit page
(:func:`layersim.tools.site.audit_page`) is built from the same rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from layersim.core import markup
from layersim.core.paths import repo_root
from layersim.notebook import seeds
from layersim.core import references
from layersim.notebook.results import format_threshold, format_value

#: the folder of the scale checks under the results folder (:data:`layersim.notebook.seeds.SCALE_CHECKS`)
SCALE_CHECK_FOLDER = "scale_checks"

#: the papers in the order the project presents them
PAPERS = tuple(p.key for p in references.PAPERS)


@dataclass(frozen=True)
class Row:
    """One claim of one notebook's run."""

    notebook: str
    name: str
    claim: dict
    larger: dict | None = None  # the claim in the notebook's scale check, when one was run

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
        """The diagnosis of a claim that misses on some seed (``"kind: reason"``, and for a *scale* diagnosis the
        verdict of the larger run); "" for a claim that holds on every seed. A value that is not a finite number
        comes first (:func:`layersim.notebook.seeds.value_problem`)."""
        c = self.claim
        failed = seeds.value_problem(c)
        if not (self.misses_somewhere and "kind" in c):
            return failed
        why = f"{c['kind']}: {c['reason']}"
        if c["kind"] == "scale":
            why += (f"; at the larger run: {seeds.verdict(self.larger)}, {format_value(self.larger.get('value'))}"
                    if self.larger else "; the larger run is still to be made")
        return f"{failed}; {why}" if failed else why


def _order(path: Path) -> tuple:
    paper = path.parent.parent.name
    return (PAPERS.index(paper) if paper in PAPERS else len(PAPERS), paper, path.parent.name)


def collect(folder: Path | None = None) -> list[Row]:
    """The claims of every ``<paper>/<stem>/metrics.json`` under ``folder`` (default: ``figures/``), in the
    README's order of papers, then by notebook; a ``ValueError`` when there is none."""
    folder = Path(folder) if folder else repo_root() / "figures"
    files = sorted(folder.glob("*/*/metrics.json"), key=_order)
    if not files:
        raise ValueError(f"{folder} holds no <paper>/<stem>/metrics.json")
    rows = []
    for path in files:
        data = json.loads(path.read_text())
        check = folder / SCALE_CHECK_FOLDER / path.parent.parent.name / path.parent.name / "metrics.json"
        larger = json.loads(check.read_text()).get("claims", {}) if check.is_file() else {}
        rows += [Row(data.get("notebook", f"{path.parent.parent.name}/{path.parent.name}"), name, c, larger.get(name))
                 for name, c in data.get("claims", {}).items()]
    return rows


def markdown(rows: list[Row]) -> str:
    """The claims as a Markdown table, with the count of those that hold above it (every string escaped)."""
    holding = sum(seeds.holds(r.claim) for r in rows)
    counts = sorted({len(r.claim.get("verdicts", [None])) for r in rows})
    lines = [f"**{holding} of {len(rows)} claims hold** (a claim holds when it holds on most of its seeds; "
             f"k/n: the seeds on which it holds, of the {' or '.join(map(str, counts))} it was tested on).", ""]
    table = []
    for r in rows:
        c = r.claim
        table.append([markup.code(r.notebook), markup.code(r.name), seeds.verdict(c), format_value(c.get("value")),
                      r.threshold, markup.cell(r.why)])
    lines.append(markup.table(["notebook", "claim", "holds (k/n)", "value", "threshold", "why it misses"], table,
                              raw=True))
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
