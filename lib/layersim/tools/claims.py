"""Every claim of a run in one table: ``python -m layersim claims``.

Reads ``<paper>/<stem>/metrics.json`` under a results folder (by default the committed ``figures/``)
and lists each claim with its verdict over the seeds (*holds in k of n*, :mod:`layersim.notebook.seeds`),
its value (the median over the seeds), its threshold and, for a claim that misses on some seed, the
diagnosis recorded beside it (:data:`layersim.notebook.results.DIAGNOSES`); for a *scale* diagnosis, the
claim's verdict in the notebook's larger run (``<folder>/scale_checks/<paper>/<stem>/metrics.json``,
``python -m layersim.tools.runner --scale-check``). ``--readme`` writes the
table into the README between :data:`START` and :data:`END`; ``--check`` exits 1 when the README's
table is not the one the results give (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from layersim.core import markup, writers
from layersim.core.paths import repo_root
from layersim.notebook import seeds
from layersim.notebook.results import format_value

#: the README's generated table sits between these two lines
START = "<!-- claims table: written by `python -m layersim claims --readme` from figures/; do not edit by hand -->"
END = "<!-- end of the claims table -->"

#: the folder of the scale checks under the results folder (:data:`layersim.notebook.seeds.SCALE_CHECKS`)
SCALE_CHECK_FOLDER = "scale_checks"

#: the papers in the order the README presents them
PAPERS = ("tracing", "alignment", "redundancy", "clusters")


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
    holding = sum(bool(r.claim["holds"]) for r in rows)
    counts = sorted({len(r.claim.get("verdicts", [None])) for r in rows})
    lines = [f"**{holding} of {len(rows)} claims hold** (a claim holds when it holds on most of its seeds; "
             f"k/n: the seeds on which it holds, of the {' or '.join(map(str, counts))} it was tested on).", ""]
    table = []
    for r in rows:
        c = r.claim
        threshold = f"{c['op']} {c['threshold']:g}" if "threshold" in c and "op" in c else ""
        why = f"{c['kind']}: {c['reason']}" if r.misses_somewhere and "kind" in c else ""
        if why and c["kind"] == "scale":
            why += (f"; at the larger run: {seeds.verdict(r.larger)}, {format_value(r.larger['value'])}" if r.larger
                    else "; the larger run is still to be made")
        table.append([markup.code(r.notebook), markup.code(r.name), seeds.verdict(c), format_value(c["value"]), threshold,
                      markup.cell(why)])
    lines.append(markup.table(["notebook", "claim", "holds (k/n)", "value", "threshold", "why it misses"], table,
                              raw=True))
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """``text`` with what lies between :data:`START` and :data:`END` replaced by ``section``; a
    ``ValueError`` when the markers are missing or out of order."""
    i, j = text.find(START), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"the README needs the two lines {START!r} and {END!r}, in this order")
    return text[:i + len(START)] + "\n" + section.strip("\n") + "\n" + text[j:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=None, help="results folder (default: figures/)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--readme", action="store_true", help="write the table into README.md")
    group.add_argument("--check", action="store_true", help="exit 1 when README.md's table is out of date")
    args = ap.parse_args(argv)
    try:
        section = markdown(collect(args.folder))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not (args.readme or args.check):
        print(section)
        return 0
    readme = repo_root() / "README.md"
    text = readme.read_text()
    try:
        new = replace_section(text, section)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print("README.md's claims table is out of date: run `python -m layersim claims --readme`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        writers.write_text(readme, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
