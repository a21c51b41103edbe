"""The claims registry: every claim the notebooks test, fixed as data before it is judged.

``lib/layersim/papers/<paper>/claims.json`` holds the paper's text file (``file``, ``sha256``) and one entry per
claim: ``id`` (``<stem>/<claim>``), ``notebook`` (``<paper>/<stem>``), ``claim`` (its ``metrics.json`` key);
``quote`` (verbatim ``text``, ``where``, ``offset`` after :func:`normalise`, for a figure a ``reading`` with
``"caption": true``); ``measured``; ``op``, ``threshold``, ``threshold_reason``; ``registered``, ``origin``
(:data:`ORIGINS`), ``revisions`` (date, commit, old -> new, why, ``results_seen``, ``new``); ``audit``
(:data:`AUDITS`, note); optionally ``diagnosis`` (why it misses: ``kind``, ``reason``, ``date``, ``results_seen``;
:func:`judge` adds it to the claim); ``definition`` (``op``, ``threshold``, ``source``, ``source_sha256``, date). A
change no revision records fails ``tests/notebook/test_registry.py``. Paper texts come from ``$LAYERSIM_PAPERS`` (see
docs/modules.md, `layersim.notebook.registry`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from layersim.core.paths import repo_root, resolved
from layersim.notebook import results

#: the papers, in the order the project shows them
PAPERS = ("tracing", "alignment", "redundancy", "clusters")
#: where a claim's definition comes from, relative to its first committed result
ORIGINS = ("before its first result", "with its first result", "after a miss")
#: how faithfully a claim's test reads the paper's sentence
AUDITS = ("faithful", "weaker", "different", "near-circular")
#: the environment variable naming the folder of the papers' text files
PAPERS_ENV = "LAYERSIM_PAPERS"

_MARGIN = re.compile(r"^[ \t]*\d{1,4}[ \t]*$", re.M)  # a review copy's margin line numbers, one per line
_HYPHEN = re.compile(r"(?<=\w)-\n[ \t]*(?=\w)")  # a word hyphenated across a line break


def normalise(text: str) -> str:
    """The one normalisation under which a quote must match the paper's text (and ``offset`` counts): NFKC, margin
    line numbers dropped, words hyphenated across a line break joined, whitespace runs made one space; markup kept."""
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n")
    text = _MARGIN.sub("", text)
    text = _HYPHEN.sub("", text)
    return " ".join(text.split())


def papers_folder() -> Path:
    """The folder of the papers' text files: ``$LAYERSIM_PAPERS``, else ``shared/papers`` beside the repository."""
    env = os.environ.get(PAPERS_ENV)
    return resolved(env) if env else repo_root().parent / "shared" / "papers"


def registry_path(paper: str) -> Path:
    """The registry file of ``paper``: ``lib/layersim/papers/<paper>/claims.json`` (package data)."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}: one of {', '.join(PAPERS)}")
    return Path(__file__).resolve().parents[1] / "papers" / paper / "claims.json"


@dataclass(frozen=True)
class Registry:
    """One paper's registry: its text file (``file``, ``sha256``) and its claims (dicts, see the module)."""

    paper: str
    file: str
    sha256: str
    claims: tuple[dict, ...]

    def by_id(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.claims}


def load(paper: str) -> Registry:
    """Read and check the registry of ``paper``; a ``ValueError`` names the first entry that lacks a field, has an
    unknown origin or audit, a malformed diagnosis (:func:`check_diagnosis`), or repeats an id."""
    path = registry_path(paper)
    data = json.loads(path.read_text(encoding="utf-8"))
    claims = tuple(data["claims"])
    seen = set()
    for c in claims:
        missing = [k for k in ("id", "notebook", "claim", "quote", "measured", "op", "threshold", "threshold_reason",
                               "registered", "origin", "revisions", "audit") if k not in c]
        if missing:
            raise ValueError(f"{path}: claim {c.get('id', '?')} lacks {', '.join(missing)}")
        if c["origin"] not in ORIGINS:
            raise ValueError(f"{path}: claim {c['id']}: origin {c['origin']!r} is not one of {ORIGINS}")
        if c["audit"]["verdict"] not in AUDITS:
            raise ValueError(f"{path}: claim {c['id']}: audit {c['audit']['verdict']!r} is not one of {AUDITS}")
        if "diagnosis" in c:
            try:
                check_diagnosis(c["diagnosis"])
            except ValueError as exc:
                raise ValueError(f"{path}: claim {c['id']}: {exc}") from None
        if c["id"] in seen:
            raise ValueError(f"{path}: claim {c['id']} is registered twice")
        seen.add(c["id"])
    return Registry(paper, data["file"], data["sha256"], claims)


#: the fields of a registered diagnosis
DIAGNOSIS_FIELDS = ("kind", "reason", "date", "results_seen")


def check_diagnosis(diagnosis: object) -> None:
    """A ``ValueError`` unless ``diagnosis`` is ``{"kind", "reason", "date", "results_seen"}``: a kind and a one-line
    reason (:func:`layersim.notebook.results.diagnosis`), the date it was written (``YYYY-MM-DD``) and whether the
    results it explains had been seen."""
    if not isinstance(diagnosis, dict) or set(diagnosis) != set(DIAGNOSIS_FIELDS):
        raise ValueError(f"diagnosis {diagnosis!r} is not a dict of exactly {', '.join(DIAGNOSIS_FIELDS)}")
    results.diagnosis(diagnosis["kind"], diagnosis["reason"])
    if not isinstance(diagnosis["date"], str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", diagnosis["date"]):
        raise ValueError(f"diagnosis date {diagnosis['date']!r} is not YYYY-MM-DD")
    if not isinstance(diagnosis["results_seen"], bool):
        raise ValueError(f"diagnosis results_seen {diagnosis['results_seen']!r} is not true or false")


def load_all() -> dict[str, dict]:
    """Every registered claim by its notebook and claim name, ``{"<paper>/<stem>": {claim: entry}}``."""
    out: dict[str, dict] = {}
    for paper in PAPERS:
        if registry_path(paper).is_file():
            for c in load(paper).claims:
                out.setdefault(c["notebook"], {})[c["claim"]] = c
    return out


def _entries(notebook: str) -> dict[str, dict]:
    """``{claim: entry}`` of every claim registered for ``notebook``; empty for a notebook of no registry."""
    paper = notebook.partition("/")[0]
    if paper not in PAPERS or not registry_path(paper).is_file():
        return {}
    return {c["claim"]: c for c in load(paper).claims if c["notebook"] == notebook}


def rules(notebook: str) -> dict[str, tuple[str, float]]:
    """``{claim: (op, threshold)}`` of every claim registered for ``notebook`` (``"<paper>/<stem>"``), each its
    :func:`current_definition`; empty for a notebook of no registry."""
    return {name: (now["op"], now["threshold"])
            for name, c in _entries(notebook).items() for now in [current_definition(c)]}


def judge(notebook: str, claims: dict[str, dict]) -> dict[str, dict]:
    """``claims`` of a run of ``notebook`` with every measurement judged against its registered op and threshold
    (:func:`rules`), and the ``kind`` and ``reason`` of its registered ``diagnosis`` added.

    ``ValueError`` for an unregistered measurement, for a claim diagnosed both by the notebook and in the registry,
    and, in a notebook with registered claims, for a claim carrying its own ``holds``. A notebook outside the
    registry may judge claims itself (:func:`layersim.notebook.results.claim`).
    """
    entries = _entries(notebook)
    out = {}
    for name, c in claims.items():
        if "holds" in c:
            if entries:
                raise ValueError(f"claim {name!r} of {notebook} carries its own threshold: its op and threshold are "
                                 f"registered in {registry_path(notebook.partition('/')[0]).name} of its paper, "
                                 "build it with results.measure")
            out[name] = c
            continue
        if name not in entries:
            raise ValueError(f"claim {name!r} of {notebook} is not registered: add it to the claims registry "
                             f"(lib/layersim/papers/<paper>/claims.json: quote, measured, op, threshold and "
                             "threshold_reason) before judging it")
        now = current_definition(entries[name])
        out[name] = results.judge(c, now["threshold"], now["op"])
        diagnosis = entries[name].get("diagnosis")
        if diagnosis is not None:
            if "kind" in c or "reason" in c:
                raise ValueError(f"claim {name!r} of {notebook} is diagnosed in the claims registry: the notebook "
                                 "gives it no kind or reason of its own")
            out[name].update(results.diagnosis(diagnosis["kind"], diagnosis["reason"]))
    return out


def paper_text(registry: Registry, folder: Path | None = None) -> str | None:
    """The normalised text of ``registry``'s paper, or None when the file is missing; ``ValueError`` when its
    SHA-256 differs from the registered one."""
    path = Path(folder or papers_folder()) / registry.file
    if not path.is_file():
        return None
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != registry.sha256:
        raise ValueError(f"{path} has SHA-256 {digest[:16]}..., the registry of {registry.paper} was written against "
                         f"{registry.sha256[:16]}...: another version of the paper's text")
    return normalise(raw.decode("utf-8"))


def check_quote(claim: dict, text: str) -> str | None:
    """Why ``claim``'s quote does not match the normalised paper ``text`` at its offset, or None when it does."""
    q = claim["quote"]
    quote = normalise(q["text"])
    if not quote:
        return f"{claim['id']}: no quote"
    at = q.get("offset")
    if not isinstance(at, int) or text[at:at + len(quote)] != quote:
        found = text.find(quote)
        where = f" (it is at offset {found})" if found >= 0 else " (not in the paper's text)"
        return f"{claim['id']}: the quote is not at offset {at}{where}: {quote[:80]!r}"
    return None


def locate(quote: str, text: str) -> int:
    """The offset of ``quote`` in the normalised paper ``text`` (:func:`normalise` applied to both); ``ValueError``
    when it is not there or not once."""
    q = normalise(quote)
    first = text.find(q)
    if first < 0:
        raise ValueError(f"not in the paper's text: {q[:80]!r}")
    if text.find(q, first + 1) >= 0:
        raise ValueError(f"found more than once, quote more of the sentence: {q[:80]!r}")
    return first


# ----------------------------------------------------------------------------- what measures a claim


def _code_cells(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def _builds(node: ast.AST, claim: str) -> bool:
    """Whether ``node`` holds the claim's name as a string, or an f-string whose literal tail ends the name
    (``f"{subject}_beats_handcrafted"``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value == claim:
            return True
        if isinstance(sub, ast.JoinedStr) and sub.values and isinstance(sub.values[-1], ast.Constant):
            tail = sub.values[-1].value
            if isinstance(tail, str) and len(tail) >= 5 and claim.endswith(tail):
                return True
    return False


def claim_source(claim: dict, root: Path | None = None) -> tuple[str, str]:
    """``(where, code)`` of what measures ``claim``: the one code cell of its notebook naming it, else the one
    top-level function of ``lib/layersim/papers/<paper>/*.py`` building it; ``ValueError`` when none or several."""
    root = Path(root or repo_root())
    notebook = root / "notebooks" / f"{claim['notebook']}.ipynb"
    cells = _code_cells(notebook)
    name = claim["claim"]
    hits = [i for i, src in enumerate(cells) if f'"{name}"' in src or f"'{name}'" in src]
    if len(hits) == 1:
        return f"notebooks/{claim['notebook']}.ipynb, code cell {hits[0] + 1}", cells[hits[0]]
    if len(hits) > 1:
        raise ValueError(f"{claim['id']}: named in code cells {[h + 1 for h in hits]} of {notebook.name}")
    paper = claim["notebook"].split("/")[0]
    found = []
    for module in sorted((root / "lib" / "layersim" / "papers" / paper).glob("*.py")):
        text = module.read_text(encoding="utf-8")
        for node in ast.parse(text).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _builds(node, name):
                found.append((f"{module.relative_to(root).as_posix()}::{node.name}",
                              ast.get_source_segment(text, node) or ""))
    if len(found) != 1:
        raise ValueError(f"{claim['id']}: {'no' if not found else len(found)} function(s) of papers/{paper}/ build it"
                         + (f" ({', '.join(w for w, _ in found)})" if found else ""))
    return found[0]


def source_sha256(text: str) -> str:
    """SHA-256 of code ``text`` with trailing whitespace and blank end lines removed (re-indenting is a change)."""
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


#: the fields of a claim's definition that a revision may change
DEFINITION_FIELDS = ("op", "threshold", "source", "source_sha256")


def current_definition(claim: dict) -> dict:
    """The claim's definition now: ``definition`` with every revision's ``new`` values applied in order."""
    out = {k: claim["definition"][k] for k in DEFINITION_FIELDS}
    for rev in claim["revisions"]:
        out.update({k: v for k, v in rev.get("new", {}).items() if k in DEFINITION_FIELDS})
    return out


def measured_definition(claim: dict, committed: dict, root: Path | None = None) -> dict:
    """The claim's definition as the repository holds it today: ``op`` and ``threshold`` from its committed
    ``metrics.json`` entry ``committed``, ``source`` and ``source_sha256`` from :func:`claim_source`."""
    where, text = claim_source(claim, root)
    return {"op": committed["op"], "threshold": committed["threshold"], "source": where,
            "source_sha256": source_sha256(text)}


def unrecorded_changes(claim: dict, committed: dict, root: Path | None = None) -> list[str]:
    """What differs between the claim's :func:`current_definition` and :func:`measured_definition`, one line each
    (empty: every change is recorded by a revision)."""
    now, seen = current_definition(claim), measured_definition(claim, committed, root)
    return [f"{claim['id']}: {k} is {seen[k]!r}, registered {now[k]!r}: record a revision (date, change, why, "
            "results_seen, new)" for k in DEFINITION_FIELDS if now[k] != seen[k]]
