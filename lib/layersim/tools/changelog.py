"""The changelog's claim verdicts: every revision of the claims registry that changed a claim's verdict, read from
``lib/layersim/papers/<paper>/claims.json`` and written into the generated block of ``CHANGELOG.md``
(``python -m layersim.tools.changelog``; ``--check`` exits 1 when the block differs from the registry). A revision
changes a verdict when its ``change`` says ``verdict <before> -> <after>`` or ``verdict rule changed`` (see
docs/modules.md, ``layersim.tools.changelog``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from layersim.core.paths import RepositoryNotFound, repo_root
from layersim.notebook import registry
from layersim.tools import site

START = ("<!-- claim verdicts: written by `python -m layersim.tools.changelog` from the claims registry; "
         "do not edit by hand -->")
END = "<!-- end of the claim verdicts -->"
#: how a revision's ``change`` says that it moved the claim's verdict
VERDICT = re.compile(r"\bverdict (?:(?P<before>\w+) -> (?P<after>\w+)|(?P<rule>rule changed))")


@dataclass(frozen=True)
class VerdictChange:
    """One revision that changed a claim's verdict: when, in which commit, the claim, ``moved`` (``"false ->
    true"`` or ``"rule changed"``), what changed (the revision's first clause) and why."""

    date: str
    commit: str
    claim: str
    moved: str
    change: str
    why: str


def verdict_changes() -> list[VerdictChange]:
    """The revisions of every paper's registry (:func:`layersim.notebook.registry.load`) whose ``change`` matches
    :data:`VERDICT`, by date, then claim."""
    found = []
    for paper in registry.PAPERS:
        for claim in registry.load(paper).claims:
            for rev in claim["revisions"]:
                m = VERDICT.search(rev["change"])
                if m:
                    moved = "rule changed" if m["rule"] else f"{m['before']} -> {m['after']}"
                    found.append(VerdictChange(rev["date"], rev["commit"], claim["id"], moved,
                                               rev["change"].split("; ")[0], rev["why"].strip("'\"")))
    return sorted(found, key=lambda v: (v.date, v.claim))


#: how the changelog words a registry's verdict
WORDS = {"true": "holds", "false": "misses"}


def section(changes: list[VerdictChange] | None = None) -> str:
    """The generated block: a line per revision (:func:`verdict_changes`; claims changed by one revision together),
    newest date first: the claims, date and commit, the verdict's move, what changed and why."""
    changes = verdict_changes() if changes is None else changes
    if not changes:
        return "No revision of the claims registry has changed a verdict."
    groups: dict[tuple, list[str]] = {}
    for v in changes:
        groups.setdefault((v.date, v.commit, v.moved, v.change, v.why), []).append(v.claim)
    lines = []
    for (date, commit, moved, change, why), claims in sorted(groups.items(), key=lambda g: g[0][0], reverse=True):
        where = f"{date}, commit {commit}" if commit else date
        before, _, after = moved.partition(" -> ")
        what = change if moved == "rule changed" else \
            f"{WORDS.get(before, before)} → {WORDS.get(after, after)}; {change}"
        lines.append(f"- {', '.join(f'`{c}`' for c in sorted(claims))} ({where}): {what}. Why: {why}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Rewrite the block of the repository's ``CHANGELOG.md``; ``--check``: exit 1 if it is out of date. A missing
    marker, or no repository, is one ``error:`` line and exit status 2."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.changelog", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when CHANGELOG.md's block is out of date")
    args = ap.parse_args(argv)
    try:
        root = repo_root()
        stale = "CHANGELOG.md's claim verdicts are out of date: run `python -m layersim.tools.changelog`"
        return site.refresh_block(root / "CHANGELOG.md", section(), "changelog", root, stale if args.check else "",
                                  (START, END), "CHANGELOG.md")
    except (ValueError, RepositoryNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
