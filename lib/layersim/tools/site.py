"""The book of the four reproductions: ``python -m layersim.tools.site build|serve|readme`` (``make site``).

``build`` stages a source tree (:func:`stage`: the committed notebooks with the outputs of their default-scale run,
the layer report examples, the pages of ``docs/``, the data card, and generated pages: :func:`landing_page`,
:func:`paper_page` and the claims audit, :func:`audit_page`) and renders it with Sphinx and myst-nb into
``runs/site/html``, offline and executing nothing. Raw HTML is made inert (:mod:`layersim.tools.sanitize`).
``readme`` writes the README's notebook table between :data:`START` and :data:`END` (``--check``: exit 1 when it is
out of date); ``serve`` serves a built book on localhost (see docs/modules.md, `layersim.tools.site`).
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from layersim.core import markup, writers
from layersim.core.paths import RepositoryNotFound, repo_root
from layersim.notebook import seeds
from layersim.notebook.prose import duration
from layersim.notebook.results import format_value
from layersim.core.references import PAPERS, paper
from layersim.tools import claims, cleaning, progress, rehearse, sanitize

#: the README's generated block sits between these two lines
START = "<!-- notebook table: written by `python -m layersim.tools.site readme` from the runs; do not edit by hand -->"
END = "<!-- end of the notebook table -->"

#: a first path through the four papers for a course: (notebook, what it teaches)
READING_ORDER = (
    ("tracing/t01_cos_vs_cka", "cosine vs CKA across the layers of a ViT: the measures everything else uses"),
    ("tracing/t05_residual_mlp", "why the residual stream makes a per-sample cosine meaningful"),
    ("alignment/a03_circle", "alignment of the top singular vectors with the labels, on a picture you can draw"),
    ("alignment/a02_emergence", "training creates alignment, even on shuffled labels"),
    ("alignment/a05_layers", "alignment layer by layer, before and after training"),
    ("redundancy/r01_block_similarity", "block-by-block similarity of pretrained and trained encoders"),
    ("redundancy/r02_block_redundancy", "Block Redundancy, and replacing a block by a least-squares map"),
    ("clusters/c01_cka_structure", "fine-tuning splits an encoder into an early and a late cluster"),
)

#: the heading of each notebook's section that states the claims it tests (its anchor is linked to)
STATEMENTS_HEADING = re.compile(r"^#+\s+(?:The paper's )?[Ss]tatements?,? tested on this run", re.M)

_CLAIM_LINE = re.compile(r"^\s*(?:[*-]\s+)?`([A-Za-z0-9_]+)`[^:\n]*:\s*", re.M)

#: the folders of ``notebooks/`` the tables list, in order: the four papers, then the layer report
NOTEBOOK_GROUPS = (*(p.key for p in PAPERS), "report")

#: the sentence under the landing page's notebook time table: where each column comes from
TIMES_NOTE = ("Times: smoke and default are wall times on 2 CPU cores (default: the longest seed run of the committed "
              "run, the one that trained its models where one did; a notebook whose models an earlier notebook had "
              "trained, such as t02 with t01's ViT, shows its time with them cached); paper is GPU hours on one H100 "
              "from the measured paper-scale plan (`python -m layersim.tools.bench paper`), for the notebooks whose "
              "every workload it times (`benchmarks/PAPER_SCALE.md` has every notebook).")

#: the sentence under the README's shorter table (the landing page has every time and :data:`TIMES_NOTE`)
README_TIMES_NOTE = ("Default: wall time on 2 CPU cores of the committed run (its longest seed, the one that trained its "
                     "models where one did). The book's landing page adds the smoke and paper-scale GPU times.")

#: the folder of the hand-written pages and the Sphinx configuration
DOCS = "docs"

#: what a page name (a notebook's stem, a layer report example's folder) may be: it becomes a file name, a link, a
#: toctree entry and, in the theme, a JavaScript string (``DOCUMENTATION_OPTIONS.pagename = '...'``)
PAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def page_name(name: str, where: str) -> str:
    """``name`` if it can name a page of the book (:data:`PAGE_NAME`), else a ``ValueError`` naming ``where`` it comes
    from: a quote or ``<`` would end the theme's JavaScript string."""
    if not PAGE_NAME.fullmatch(name):
        raise ValueError(f"{where}: the name {name!r} cannot be a page of the book, which takes only letters, digits, "
                         "'.', '_' and '-': rename it")
    return name


@dataclass(frozen=True)
class NotebookInfo:
    """One notebook: its ``paper`` and ``stem``, ``title`` (its first heading), measured times (None where not
    measured) and the claims of its committed default-scale run that hold, of all."""

    paper: str
    stem: str
    title: str
    smoke_seconds: float | None
    default_seconds: float | None
    paper_gpu_hours: float | None
    claims_hold: int
    claims_total: int

    @property
    def name(self) -> str:
        return f"{self.paper}/{self.stem}"

    @property
    def label(self) -> str:
        """The short name a table shows: ``t01`` for ``t01_cos_vs_cka``, the whole stem for a notebook without such
        a prefix (``layer_report``)."""
        m = re.match(r"[a-z]\d+(?=_)", self.stem)
        return m.group(0) if m else self.stem


def _read(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def title_of(nb: dict) -> str:
    """The notebook's first level-1 heading, without the ``#``; a ``ValueError`` when it has none."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError("the notebook has no level-1 heading (its title)")


def statements(nb: dict) -> dict[str, str]:
    """``{claim name: statement}`` from the notebook's section "The paper's statement(s), tested on this run"
    (:data:`STATEMENTS_HEADING`): paragraphs or list items that start with the claim's name in backticks and a
    colon; Markdown kept, line breaks made spaces."""
    out: dict[str, str] = {}
    for cell in nb.get("cells", []):
        text = _source(cell)
        if cell.get("cell_type") != "markdown" or not STATEMENTS_HEADING.search(text):
            continue
        hits = list(_CLAIM_LINE.finditer(text))
        for k, hit in enumerate(hits):
            end = hits[k + 1].start() if k + 1 < len(hits) else len(text)
            body = text[hit.end():end].split("\n\n")[0]
            out.setdefault(hit.group(1), " ".join(body.split()))
    return out


def _default_seconds(nb: dict, metrics: dict) -> float | None:
    runs = progress.seed_seconds(nb, metrics).values()
    return max(runs) if runs else None


def paper_gpu_hours(root: Path) -> dict[str, float]:
    """``{stem: GPU hours}`` of the newest ``benchmarks/gpu/*paper-plan.json`` (the measured paper-scale plan), for
    the notebooks whose every workload has a known step count (:func:`layersim.tools.bench_paper.notebook_hours`);
    {} when there is none."""
    plans = sorted((root / "benchmarks" / "gpu").glob("*paper-plan.json"))
    if not plans:
        return {}
    from layersim.tools.bench_paper import notebook_hours  # it imports torch: only when there is a plan to read

    return notebook_hours(_read(plans[-1]), complete_only=True)


def notebook_infos(root: Path | None = None) -> list[NotebookInfo]:
    """Every committed notebook with a committed default-scale run, in :data:`NOTEBOOK_GROUPS` order, with its claim
    counts and times: smoke, its smoke reference's papermill duration; default, the longest of its committed run's
    seed runs; paper, :func:`paper_gpu_hours`."""
    root = Path(root or repo_root())
    gpu = paper_gpu_hours(root)
    out = []
    for group in NOTEBOOK_GROUPS:
        for path in sorted((root / "notebooks" / group).glob("*.ipynb")):
            page_name(path.stem, f"notebooks/{group}/{path.name}")
            metrics_path = root / "figures" / group / path.stem / "metrics.json"
            if not metrics_path.is_file():
                continue
            nb, metrics = _read(path), _read(metrics_path)
            ref = root / "tests" / "notebooks" / group / path.name
            smoke = ((_read(ref).get("metadata", {}).get("papermill") or {}).get("duration")
                     if ref.is_file() else None)
            recorded = metrics.get("claims", {})
            out.append(NotebookInfo(group, path.stem, title_of(nb), None if smoke is None else float(smoke),
                                    _default_seconds(nb, metrics), gpu.get(path.stem),
                                    sum(seeds.holds(c) for c in recorded.values()), len(recorded)))
    if not out:
        raise ValueError(f"no notebook with a committed run under {root / 'notebooks'}")
    return out


def hours(h: float | None) -> str:
    """``"0.35 h"`` of GPU, or ``"–"`` for a time not measured."""
    return "–" if h is None else (f"{h:.2f} h" if h < 10 else f"{h:.0f} h")


#: the time columns of :func:`time_table`: name -> (header, the cell of a notebook's info)
TIME_COLUMNS = {"smoke": ("smoke", lambda i: duration(i.smoke_seconds)),
                "default": ("default (CPU)", lambda i: duration(i.default_seconds)),
                "paper": ("paper (GPU, measured)", lambda i: hours(i.paper_gpu_hours))}


def time_table(infos: list[NotebookInfo], link, times: tuple[str, ...] = tuple(TIME_COLUMNS)) -> str:
    """The notebooks as a Markdown table: link (``link(info)`` gives the target), title, the ``times`` (of
    :data:`TIME_COLUMNS`, all by default), claims."""
    columns = [TIME_COLUMNS[t] for t in times]
    rows = [[f"[`{i.label}`]({link(i)})", markup.cell(_short(i.title)), *(cell(i) for _, cell in columns),
             f"{i.claims_hold} of {i.claims_total}" if i.claims_total else "–"] for i in infos]
    return markup.table(["notebook", "what it reproduces", *(h for h, _ in columns), "claims hold"], rows, raw=True)


def _label(text: str) -> str:
    """``text`` as inert text for a Markdown link's label: :func:`layersim.core.markup.cell`, brackets escaped."""
    return markup.cell(text).replace("[", "\\[").replace("]", "\\]")


def _short(title: str) -> str:
    """A notebook title without its parenthesised figure list (kept on its own page)."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", title)


def totals(infos: list[NotebookInfo]) -> tuple[int, int]:
    """(claims that hold, claims) over ``infos``."""
    return sum(i.claims_hold for i in infos), sum(i.claims_total for i in infos)


def readme_section(root: Path | None = None) -> str:
    """The README's generated block: the claim count and the notebook table."""
    infos = notebook_infos(root)
    held, total = totals(infos)
    _, *counts = claims.headline(claims.collect(Path(root or repo_root()) / "figures"))
    return "\n".join([f"**{held} of {total} claims hold** at the default scale ({'; '.join(counts)}); the book's "
                      "claims audit page lists every one with the paper's sentence it tests, its value and, where it "
                      "misses, why.", "",
                      time_table(infos, lambda i: f"notebooks/{i.paper}/{i.stem}.ipynb", times=("default",)), "",
                      README_TIMES_NOTE, "", progress.batch_sentence(Path(root or repo_root())), "",
                      rehearse.readme_sentence(Path(root or repo_root()))]).rstrip() + "\n"


def replace_block(text: str, block: str, start: str = START, end: str = END, name: str = "the README") -> str:
    """``text`` with what lies between the lines ``start`` and ``end`` (default :data:`START`, :data:`END`) replaced
    by ``block``; a ``ValueError`` naming the file (``name``) when the markers are missing or out of order."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{name} needs the two lines {start!r} and {end!r}, in this order")
    return text[:i + len(start)] + "\n" + block.strip("\n") + "\n" + text[j:]


# ----------------------------------------------------------------------------- generated pages

def _anchor(heading: str) -> str:
    """The anchor MyST gives a heading (``myst_heading_anchors``): lower case, punctuation dropped, spaces to -."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def statements_anchor(nb: dict) -> str | None:
    """The anchor of the notebook's statements section, or None when it has none."""
    for cell in nb.get("cells", []):
        m = STATEMENTS_HEADING.search(_source(cell)) if cell.get("cell_type") == "markdown" else None
        if m:
            return _anchor(m.group(0).lstrip("#"))
    return None


def _stand_in(metrics: dict) -> str:
    """The run's data and model settings that say what stands in for the paper's (a short list of its params)."""
    params = metrics.get("params", {})
    keys = ("dataset", "model", "encoder", "pretrained", "source", "tasks", "depth", "embed_dim", "n_train", "epochs",
            "steps")
    shown = []
    for k in keys:
        v = params.get(k)
        if v is None:
            continue
        v = ", ".join(v) if isinstance(v, dict) else v
        shown.append(f"{k} {v}")
    return "; ".join(shown)


def audit_page(root: Path | None = None) -> str:
    """The claims audit (MyST Markdown), from :func:`layersim.tools.claims.collect`: counts per paper, then per
    notebook every claim with what it tests, its threshold, value, verdict over the seeds, the diagnosis of a miss
    (with a *scale* diagnosis's larger run) and a link to the section that tests it."""
    root = Path(root or repo_root())
    rows = [r for r in claims.collect(root / "figures") if (root / "notebooks" / f"{r.notebook}.ipynb").is_file()]
    sections, counts = [], []
    for p in PAPERS:
        mine = [r for r in rows if r.notebook.split("/")[0] == p.key]
        held = sum(seeds.holds(r.claim) for r in mine)
        counts.append([f"[{p.title}](#{_anchor(p.title)})", str(len(mine)), str(held), str(len(mine) - held)])
        sections += [f"## {p.title}", "", f"{p.citation()} [{p.url}]({p.url})", ""]
        for notebook in dict.fromkeys(r.notebook for r in mine):
            page_name(notebook.split("/", 1)[-1], f"the claims of {notebook}")
            nb = _read(root / "notebooks" / f"{notebook}.ipynb")
            metrics = _read(root / "figures" / notebook / "metrics.json")
            said, anchor = statements(nb), statements_anchor(nb)
            target = f"notebooks/{notebook}.ipynb" + (f"#{anchor}" if anchor else "")
            # the notebook's own wording stays Markdown (formulas); what the run recorded is escaped
            table = [[f"[{markup.code(r.name)}]({target})",
                      markup.markdown_cell(said[r.name]) if r.name in said else markup.cell(r.claim.get("note", "")),
                      markup.cell(html.unescape(r.threshold)),  # escaped once (a threshold that is no number was)
                      format_value(r.claim["value"]),  # a value that is not a number comes escaped
                      ("holds" if seeds.holds(r.claim) else "**misses**") + f" ({seeds.verdict(r.claim)})",
                      markup.cell(r.why)] for r in mine if r.notebook == notebook]
            stand_in = _stand_in(metrics)
            sections += [f"### {markup.cell(title_of(nb))}", "",
                         f"[{notebook}]({target}) · scale: {markup.cell(metrics.get('scale', '?'))}"
                         + (f" · {markup.cell(stand_in)}" if stand_in else ""), "",
                         markup.table(["claim", "what is tested", "threshold", "value", "verdict (k/n seeds)",
                                       "why it misses"], table, raw=True), "",
                         *[line for r in mine if r.notebook == notebook for line in registered_block(r)]]
    first, *rest = claims.headline(rows)
    intro = [
        "# Claims audit", "",
        f"**{first}** at the default scale.", "", *[f"- {markup.cell(line)}" for line in rest], "",
        "Every claim is one of a paper's statements, registered in `lib/layersim/papers/<paper>/claims.json` with "
        "the paper's sentence it tests (quoted verbatim, below each table), the reason for its threshold, an audit "
        "of how faithfully the test reads the sentence, and its origin, read from the repository's history: defined "
        "*before* its first committed result, *with* it (the same commit: fixed before the run in the project's "
        "word only), or *after* its notebook had missed (counted apart), with every later revision. It is judged "
        "over several seeds: it holds when it holds on most of them (*k/n*: the seeds on which it holds). A claim "
        "that misses on any seed carries a diagnosis: *definition* "
        "(the claim as fixed did not test the paper's statement), *scale* (our stand-in is too small to show the "
        "effect; the verdict of the notebook's larger run follows, and its status: confirmed, trending, not supported "
        "or not yet retested), *paper* (the paper's own numbers disagree) or "
        "*does not replicate*. This page is generated from every `figures/<paper>/<stem>/metrics.json` when the book "
        "is built; the claim names link to the section of the notebook that defines them.", "",
        markup.table(["paper", "claims", "hold", "miss"],
                     counts + [["all", str(len(rows)), str(held), str(len(rows) - held)]], raw=True), ""]
    return "\n".join(intro + sections)


def _quoted(text: str) -> str:
    """A claims-registry string as inert text (:func:`layersim.core.markup.cell`), ``$`` escaped so that a quoted
    sentence's LaTeX is not typeset."""
    return markup.cell(text).replace("$", "\\$")


def registered_block(row) -> list[str]:
    """One claim's entry in the claims registry (:mod:`layersim.notebook.registry`) as Markdown lines for the audit:
    the paper's sentence quoted (or a caption with its reading), the threshold's reason, when and how the claim was
    defined and revised, and the audit of the test. Every string escaped (:func:`_quoted`); nothing for an
    unregistered claim."""
    c = row.registered
    if not c:
        return []
    q = c["quote"]
    said = f"> {_quoted(q['text'])}"
    if q.get("caption"):
        said += f" *(caption; read as: {_quoted(q['reading'])})*"
    history = "; ".join(f"{_quoted(r['date'])}: {_quoted(r['change'])} ({_quoted(r['why'])}"
                        + ("; after results were seen" if r["results_seen"] else "") + ")" for r in c["revisions"])
    audit = c["audit"]
    return [f"**{markup.code(row.name)}** — {_quoted(q['where'])}:", "", said, "",
            f"- threshold {_quoted(html.unescape(row.threshold))}: {_quoted(c['threshold_reason'])}",
            f"- defined {_quoted(c['registered'])}, {_quoted(c['origin'])}"
            + (f"; revised {history}" if history else "; never revised"),
            f"- the test against the sentence: **{_quoted(audit['verdict'])}** — {_quoted(audit['note'])}", ""]


def paper_page(key: str, infos: list[NotebookInfo]) -> str:
    """The page of one paper: citation, its question, its notebooks with their times and claims, and the toctree."""
    p = paper(key)
    mine = [i for i in infos if i.paper == key]
    held, total = totals(mine)
    return "\n".join([
        f"# {p.title}", "", f"{p.citation()} [{p.url}]({p.url})", "", f"**The question.** {p.question}", "",
        f"{len(mine)} notebooks; {held} of {total} of their claims hold at the default scale "
        f"([claims audit](../claims.md#{_anchor(p.title)})).", "",
        time_table(mine, lambda i: f"{i.stem}.ipynb"), "",
        "```{toctree}", ":hidden:", ":maxdepth: 1", "", *[f"{i.stem}.ipynb" for i in mine], "```", ""])


def landing_page(infos: list[NotebookInfo], counts: list[str] | tuple = ()) -> str:
    """The book's first page: what the papers ask, how to read the book, a reading order and every notebook.
    ``counts``: the claims by origin, diagnosis and scale status (:func:`layersim.tools.claims.headline`)."""
    held, total = totals(infos)
    papers = [f"- **[{p.title}]({p.key}/index.md)** — {p.citation()} {p.question}" for p in PAPERS]
    by_name = {i.name: i for i in infos}
    order = [f"{k}. [{_label(_short(by_name[nb].title))}]({nb}.ipynb) — {why}"
             for k, (nb, why) in enumerate(READING_ORDER, 1) if nb in by_name]
    return "\n".join([
        "# layersim: how representations evolve across layers, reproduced", "",
        "Four papers ask how the representation of an input changes from one layer of a network to the next. Each "
        "figure or table we reproduce is one notebook: it states the paper's claim, runs it on models and data that "
        "fit a laptop (the *default* scale; the papers' own models and data at `scale=\"paper\"`), draws the figure "
        "and records whether each claim held, with the measured value.", "",
        "## The papers", "", *papers, "",
        "## How to read this book", "",
        "Each notebook is rendered with the outputs of its committed default-scale run: read the statement, the "
        "figure and the section *What we found*. The [claims audit](claims.md) lists every claim with its verdict "
        f"({held} of {total} hold" + (f": {markup.cell('; '.join(counts))}" if counts else "") + "). To rerun or "
        "change a notebook, see [Reproduce](reproduce.md).", "",
        "## A reading order for a course", "", *order, "",
        "## Every notebook", "",
        # the book renders the layer report's committed examples (report/index), not its bare notebook
        time_table(infos, lambda i: f"{i.paper}/{i.stem}.ipynb" if i.paper != "report" else "report/index.md"), "",
        TIMES_NOTE, "",
        "```{toctree}", ":hidden:", ":maxdepth: 2", "",
        *[f"{p.key}/index" for p in PAPERS], "claims", "report/index", "reproduce", "library", "modules", "data", "```", ""])


def report_examples(root: Path) -> list[Path]:
    """The committed layer report examples, ``figures/report/<model>__<data>/layer_report.ipynb``, sorted; a
    ``ValueError`` for a folder whose name cannot be a page (:func:`page_name`)."""
    found = sorted((Path(root) / "figures" / "report").glob("*/layer_report.ipynb"))
    for nb in found:
        page_name(nb.parent.name, f"figures/report/{nb.parent.name}/")
    return found


def report_page(root: Path) -> str:
    """The layer report examples: the committed ``figures/report/<model>__<data>/layer_report.ipynb``."""
    examples = [nb.parent.name for nb in report_examples(root)]
    return "\n".join([
        "# The layer report: every lens on any model", "",
        "`python -m layersim report --model MODEL --data DATA` reads every layer of a model once and applies every "
        "lens of the four papers that the inputs allow. The committed examples, rendered:", "",
        "```{toctree}", ":maxdepth: 1", "", *[f"{e}" for e in examples], "```", ""])


# ----------------------------------------------------------------------------- staging and building

_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def relink(text: str, exists) -> str:
    """Markdown ``text`` with every relative link whose target the book lacks (``exists(path)`` is False) replaced by
    its label; anchors and external URLs kept."""
    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"^[a-z]+:", target) or target.startswith("#") or exists(target.split("#")[0]):
            return m.group(0)
        return label if not bang else f"*(image: {label})*"
    return _LINK.sub(fix, text)


#: the notebook metadata the book keeps; any other key is left out: ``mystnb`` and ``myst`` would change how the book
#: is built (``{"mystnb": {"execution_mode": "force"}}`` runs the notebook's code while the book is built)
NOTEBOOK_METADATA = ("kernelspec", "language_info", "papermill")


def folded(nb: dict) -> dict:
    """A copy of ``nb`` as the book shows it: papermill's injected-parameters cell removed; the parameters cell and
    every cell whose input the notebook collapses (``metadata.jupyter.source_hidden``) tagged ``hide-input``;
    outputs made inert (:func:`layersim.tools.sanitize.inert_outputs`); metadata cut to :data:`NOTEBOOK_METADATA`,
    so that ``docs/conf.py`` alone decides how the book is built."""
    nb = json.loads(json.dumps(nb))
    nb["metadata"] = {k: v for k, v in nb.get("metadata", {}).items() if k in NOTEBOOK_METADATA}
    kept = []
    for cell in nb.get("cells", []):
        meta = cell.setdefault("metadata", {})
        tags = meta.setdefault("tags", [])
        if cell.get("cell_type") == "code":
            if "injected-parameters" in tags:
                continue
            if "parameters" in tags or meta.get("jupyter", {}).get("source_hidden"):
                tags.append("hide-input")
            sanitize.inert_outputs(cell)
        kept.append(cell)
    nb["cells"] = kept
    return nb


def _copy_notebook(src: Path, dest: Path) -> None:
    nb = folded(cleaning.without_widgets(_read(src)))
    dest.write_text(json.dumps(nb, ensure_ascii=False, indent=1), encoding="utf-8")


def mathjax_folder() -> Path:
    """MathJax 3 as the ``sphinx-mathjax-offline`` package ships it (the book renders formulas offline with its
    ``tex-svg.js``)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sphinx-mathjax-offline")
    except metadata.PackageNotFoundError:
        raise ValueError("the book needs the package sphinx-mathjax-offline (MathJax offline): run `make setup`") from None
    folder = Path(dist.locate_file("sphinx-mathjax-offline/static/mathjax"))
    if not (folder / "tex-svg.js").is_file():
        raise ValueError(f"no tex-svg.js in {folder}")
    return folder


def stage(dest: Path, root: Path | None = None) -> Path:
    """Write the book's source tree into ``dest`` and return it (resolved). ``dest`` is emptied first, only if layersim
    made it (:func:`layersim.core.writers.replace_folder`: a user's non-empty folder raises ``ValueError``, nothing
    deleted); the names that become pages are checked before (:func:`page_name`)."""
    root = Path(root or repo_root())
    infos = notebook_infos(root)
    examples = report_examples(root)
    dest = writers.replace_folder(dest, "book source folder", root)
    for p in PAPERS:
        (dest / p.key).mkdir()
        for i in (i for i in infos if i.paper == p.key):
            _copy_notebook(root / "notebooks" / p.key / f"{i.stem}.ipynb", dest / p.key / f"{i.stem}.ipynb")
        (dest / p.key / "index.md").write_text(paper_page(p.key, infos), encoding="utf-8")
    (dest / "report").mkdir()
    for nb in examples:
        _copy_notebook(nb, dest / "report" / f"{nb.parent.name}.ipynb")
    (dest / "report" / "index.md").write_text(report_page(root), encoding="utf-8")
    counts = claims.headline(claims.collect(root / "figures"))[1:]
    (dest / "index.md").write_text(landing_page(infos, counts), encoding="utf-8")
    (dest / "claims.md").write_text(
        audit_page(root).replace("](notebooks/", "]("), encoding="utf-8")
    for name in ("conf.py", "favicon.svg"):
        shutil.copy2(root / DOCS / name, dest / name)
    shutil.copytree(mathjax_folder(), dest / "_static" / "mathjax")
    for page in sorted((root / DOCS).glob("*.md")):
        text = page.read_text(encoding="utf-8")
        (dest / page.name).write_text(relink(text, lambda t: (dest / t).exists()), encoding="utf-8")
    data_card = (root / "data" / "README.md").read_text(encoding="utf-8")
    (dest / "data.md").write_text(relink(data_card, lambda t: (dest / t).exists()), encoding="utf-8")
    return dest


def build(out: Path | None = None, root: Path | None = None, quiet: bool = True) -> Path:
    """Stage the book into ``<out>/src`` and render it with Sphinx into ``<out>/html`` (returned), executing nothing.
    ``out`` (default ``runs/site``) is claimed first (:func:`layersim.core.writers.claim_folder`): a user's
    non-empty folder, or one inside the committed results, raises ``ValueError`` and nothing is deleted. A
    ``RuntimeError`` carries Sphinx's output when the build fails."""
    root = Path(root or repo_root())
    out = Path(out or root / "runs" / "site")
    out = writers.claim_folder(writers.check_target(out, "book folder", root), "book folder", root)
    src = stage(out / "src", root)
    pages = writers.replace_folder(out / "html", "book folder", root)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-j", "1", "-E", *(["-q"] if quiet else []), str(src),
           str(pages)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"sphinx failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    writers.write_text(out / "warnings.txt", "\n".join(warnings) + ("\n" if warnings else ""))
    return pages


def serve(html: Path, port: int = 8000, host: str = "127.0.0.1") -> None:
    """Serve ``html`` on ``http://host:port/`` until interrupted."""
    if not (Path(html) / "index.html").is_file():
        raise ValueError(f"no built site in {html}: run `make site` first")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(html))
    with http.server.ThreadingHTTPServer((host, port), handler) as httpd:
        print(f"serving {html} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
        httpd.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """The command line; a ``ValueError`` (a folder that is not layersim's, a name that cannot be a page, no built
    site to serve) or no repository is one ``error:`` line on stderr and exit status 2."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.site", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="stage and render the book into OUT/html (default runs/site)")
    b.add_argument("--out", default=None)
    s = sub.add_parser("serve", help="serve a built book")
    s.add_argument("--out", default=None)
    s.add_argument("--port", type=int, default=8000)
    r = sub.add_parser("readme", help="write the README's generated notebook table")
    r.add_argument("--check", action="store_true", help="exit 1 when the README's table is out of date")
    args = ap.parse_args(argv)
    try:
        return _command(args, repo_root())
    except (ValueError, RepositoryNotFound) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace, root: Path) -> int:
    if args.command == "build":
        pages = build(args.out and Path(args.out))
        warnings = (pages.parent / "warnings.txt").read_text().strip()
        print(f"built {pages / 'index.html'}" + (f"\n{warnings}" if warnings else ""))
        return 0
    if args.command == "serve":
        serve(Path(args.out or root / "runs" / "site") / "html", args.port)
        return 0
    stale = "README.md's notebook table is out of date: run `python -m layersim.tools.site readme`"
    return refresh_block(root / "README.md", readme_section(root), "readme", root, stale if args.check else "")


def refresh_block(path: Path, block: str, writer: str, root: Path, stale: str = "",
                  markers: tuple[str, str] = (START, END), name: str = "the README") -> int:
    """Put ``block`` between the ``markers`` of the committed file ``path`` as ``writer`` (:data:`WRITERS`); with a
    ``stale`` message only check: print it and return 1 when the block differs. 0 else; a missing marker is a
    ``ValueError`` naming ``name``."""
    text = path.read_text(encoding="utf-8")
    new = replace_block(text, block, *markers, name)
    if stale:
        if new != text:
            print(stale, file=sys.stderr)
            return 1
        return 0
    if new != text:
        writers.write_committed(path, new, writer, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
