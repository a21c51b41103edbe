"""The book (``python -m layersim.tools.site build``) under hostile and careless input.

Every case asserts what a user or a reader must see. A ``--out`` that holds a user's files is refused with one
``error:`` line, exit status 2, and nothing in it is deleted; the book replaces only folders it made. A name that
becomes a page (a layer report example's folder, a notebook's stem) with a quote or ``<`` in it is refused with one
line naming it, since the theme writes page names into a JavaScript string. Strings of a run (a claim's note, a
value, the scale, a notebook's title) reach the generated pages escaped. Raw HTML in a notebook's Markdown (in a
heading, a paragraph, a directive's body, a ``raw`` block) and in its outputs shows as text in the built pages:
no ``<script>``, no ``on...`` handler, no ``javascript:`` link is left live, while the HTML the committed notebooks
use (pandas tables) keeps its markup. Most cases stage a small repository of their own; one renders it with Sphinx.
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from builders import one_line_error
from layersim.core import writers
from layersim.tools import site

ROOT = Path(__file__).resolve().parents[1]

#: payloads, numbered: a payload is live in a page when its alert(<n>) sits in a tag, an attribute or a script
PAYLOADS = {
    "script": "<script>alert(1)</script>",
    "img": "<img src=x onerror=alert(2)>",
    "svg": "<svg onload=alert(3)>",
    "link": '<a href="javascript:alert(4)">a link</a>',
    "spaced link": '<a href=" java\tscript:alert(5)">a link</a>',
    "entity link": '<a href="&#106;avascript:alert(6)">a link</a>',
    "quote": '"><script>alert(7)</script>',
    "iframe": '<iframe srcdoc="<script>alert(8)</script>"></iframe>',
    "details": "<details open ontoggle=alert(9)><summary>more</summary>text</details>",
    "style": '<div style="background:url(javascript:alert(10))">d</div>',
    "split": "<scr<script>ipt>alert(11)</script>",
    "self-closed style": "<style/><img src=x onerror=alert(12)>",
}


# ----------------------------------------------------------------------------- helpers




def tree_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class _Live(HTMLParser):
    """What a browser would run in a page: ``alert(`` in an ``on...`` handler, a ``javascript:`` URL, a script's
    body or an iframe's ``srcdoc``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._script = False

    def handle_starttag(self, tag, attrs):
        self._script = tag == "script"
        for name, value in attrs:
            value = re.sub(r"[\x00-\x20]+", "", value or "").lower()
            if "alert(" in value and (name.startswith("on") or name == "srcdoc" or value.startswith("javascript:")):
                self.found.append(f"<{tag} {name}={value}>")
        if tag in ("iframe", "object", "embed"):
            self.found.append(f"<{tag}>")

    def handle_endtag(self, tag):
        self._script = False

    def handle_data(self, data):
        if self._script and "alert(" in data:
            self.found.append(f"<script>{data.strip()[:40]}")


def live(page: str) -> list[str]:
    """The live payloads in the HTML ``page`` (:class:`_Live`, and a raw ``<script>`` with an alert by regex)."""
    parser = _Live()
    parser.feed(page)
    parser.close()
    return parser.found + re.findall(r"<script[^>]*>[^<]*alert\(", page, re.I)


def _notebook(title: str, *cells: dict) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3"}},
            "cells": [{"cell_type": "markdown", "metadata": {}, "source": f"# {title}\n"}, *cells]}


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _output(data: dict) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": "show()",
            "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"text/plain": "shown", **data}}]}


def _write(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A small repository of its own (``LAYERSIM_ROOT``): one notebook with a committed run, one layer report
    example, the book's ``docs/conf.py`` and a data card."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    _write(root / "pyproject.toml", "")
    statement = "## The paper's statement, tested on this run\n\n`tracks`: COS tracks CKA."
    _write(root / "notebooks/tracing/t01_cos_vs_cka.ipynb", _notebook("COS and CKA", _markdown(statement)))
    claim = {"holds": True, "value": 0.95, "threshold": 0.9, "op": ">=", "note": "r", "verdicts": [True]}
    _write(root / "figures/tracing/t01_cos_vs_cka/metrics.json",
           {"notebook": "tracing/t01_cos_vs_cka", "scale": "default", "params": {}, "claims": {"tracks": claim}})
    _write(root / "figures/report/tiny__digits/layer_report.ipynb", _notebook("Layer report"))
    for name in ("conf.py", "favicon.svg"):
        _write(root / "docs" / name, (ROOT / "docs" / name).read_text(encoding="utf-8"))
    _write(root / "docs/reproduce.md", "# Reproduce\n")
    _write(root / "data/README.md", "# Data\n")
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.delenv(writers.SWITCH, raising=False)
    return root


@pytest.fixture
def no_sphinx(monkeypatch):
    """Sphinx replaced by a stand-in that writes ``index.html``: the cases about folders need the staging only."""
    calls = []

    def fake(cmd, **kwargs):
        calls.append(cmd)
        _write(Path(cmd[-1]) / "index.html", "<html></html>")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(site.subprocess, "run", fake)
    return calls


# ----------------------------------------------------------------------------- what the build may delete


def test_build_refuses_an_out_folder_with_the_users_files_and_deletes_nothing(repo, tmp_path, no_sphinx, capsys):
    """``build --out ~/myproject`` removed the project's ``src/`` (the staging emptied ``<out>/src`` whatever it
    held)."""
    project = tmp_path / "myproject"
    _write(project / "src" / "main.py", "print('mine')\n")
    _write(project / "README.md", "my project\n")
    before = tree_files(project)
    code = site.main(["build", "--out", str(project)])
    assert tree_files(project) == before and not no_sphinx
    assert code == 2
    one_line_error(capsys.readouterr().err, str(project), "README.md", "src", "refused")
    with pytest.raises(ValueError, match="layersim did not write"):  # the staging alone refuses it as well
        site.stage(project / "src", repo)
    assert tree_files(project) == before


def test_build_refuses_the_committed_results(repo, no_sphinx, capsys):
    before = tree_files(repo / "figures")
    assert site.main(["build", "--out", str(repo / "figures" / "book")]) == 2
    one_line_error(capsys.readouterr().err, "committed results")
    assert tree_files(repo / "figures") == before and not no_sphinx


def test_build_replaces_what_it_made_and_only_that(repo, tmp_path, no_sphinx):
    """What a build made it replaces at the next build (an earlier build's pages do not linger); an empty folder
    becomes the book's, and so does the default ``runs/site``."""
    out = tmp_path / "book"
    assert site.main(["build", "--out", str(out)]) == 0
    assert (out / writers.MARKER).is_file() and (out / "src" / writers.MARKER).is_file()
    assert (out / "src" / "tracing" / "t01_cos_vs_cka.ipynb").is_file() and (out / "html" / "index.html").is_file()
    _write(out / "src" / "stale.md", "from an earlier build")
    _write(out / "html" / "stale.html", "from an earlier build")
    assert site.main(["build", "--out", str(out)]) == 0  # a second build into the folder it made
    assert not (out / "src" / "stale.md").exists() and not (out / "html" / "stale.html").exists()
    default = site.build(root=repo)  # runs/site, inside the repository's runs/: layersim's without a marker
    assert default == (repo / "runs" / "site" / "html").resolve() and len(no_sphinx) == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    assert site.main(["build", "--out", str(empty)]) == 0 and (empty / writers.MARKER).is_file()


# ----------------------------------------------------------------------------- names that become pages


@pytest.mark.parametrize("name", ["x';alert(1);'", 'x"y', "<script>alert(1)<", "a b", "a]b", "-x"])
def test_a_report_example_whose_name_cannot_be_a_page_is_refused(repo, tmp_path, no_sphinx, capsys, name):
    """A layer report example's folder name went into a toctree entry and, through the theme, into a JavaScript
    string (``DOCUMENTATION_OPTIONS.pagename = 'report/<name>'``): a quote ended the string."""
    _write(repo / "figures" / "report" / name / "layer_report.ipynb", _notebook("Layer report"))
    with pytest.raises(ValueError, match="cannot be a page of the book"):
        site.report_page(repo)
    out = tmp_path / "book"
    assert site.main(["build", "--out", str(out)]) == 2
    one_line_error(capsys.readouterr().err, repr(name), "figures/report/")
    assert not (out / "src").exists() and not no_sphinx  # refused before anything is staged


def test_a_notebook_whose_name_cannot_be_a_page_is_refused(repo):
    """A notebook's stem becomes a page name too (its paper's toctree, links, the theme's JavaScript)."""
    shutil.copy(repo / "notebooks/tracing/t01_cos_vs_cka.ipynb", repo / "notebooks/tracing/t02_x';alert(1);'.ipynb")
    _write(repo / "figures/tracing/t02_x';alert(1);'/metrics.json", {"claims": {}})
    with pytest.raises(ValueError, match="notebooks/tracing/t02_x';alert"):
        site.notebook_infos(repo)


# ----------------------------------------------------------------------------- strings of a run on the generated pages


def test_strings_of_a_run_reach_the_generated_pages_escaped(repo):
    """A claim without a statement in its notebook showed its note as raw Markdown on the claims audit; the scale
    and a title went in unescaped as well."""
    metrics = json.loads((repo / "figures/tracing/t01_cos_vs_cka/metrics.json").read_text())
    metrics["scale"] = PAYLOADS["script"]
    metrics["claims"]["other"] = {"holds": False, "value": PAYLOADS["svg"], "threshold": 1, "op": PAYLOADS["img"],
                                  "note": PAYLOADS["quote"], "verdicts": [False]}
    _write(repo / "figures/tracing/t01_cos_vs_cka/metrics.json", metrics)
    nb = _notebook("COS " + PAYLOADS["img"] + " ]a[", _markdown("## Other"))
    _write(repo / "notebooks/tracing/t01_cos_vs_cka.ipynb", nb)
    infos = site.notebook_infos(repo)
    for page in (site.audit_page(repo), site.landing_page(infos), site.paper_page("tracing", infos)):
        assert not re.search(r"<(script|img|svg)", page), page
        assert "&lt;script&gt;" in page or "&lt;img" in page
    assert "[COS &lt;img src=x onerror=alert(2)&gt; \\]a\\[](tracing/t01_cos_vs_cka.ipynb)" in site.landing_page(infos)


# ----------------------------------------------------------------------------- raw HTML made inert


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_raw_html_is_made_inert(name):
    got = site.inert_html(PAYLOADS[name])
    assert not live(got), got
    assert not re.search(r"<(script|svg|iframe)", got, re.I) and not re.search(r"<[^>]*\son\w+=", got), got
    assert site.inert_html(got) == got  # a second pass changes nothing


def test_the_html_a_notebook_may_use_stays_live():
    kept = ('<details open><summary>more</summary>x<br />H<sub>2</sub>O, <b>b</b> <a href="https://example.org/a?b=1'
            '&amp;c=2" title="t">a</a> <img src="figure.png" alt="a figure"></details>')
    assert site.inert_html(kept) == kept
    assert site.inert_html('<a href="../x.html#y">x</a>') == '<a href="../x.html#y">x</a>'
    assert site.inert_html("a < b &amp; c &#60; d <!-- note -->") == "a &lt; b &amp; c &#60; d "


def _events(text: str) -> list[tuple]:
    class Events(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.seen = []

        def handle_starttag(self, tag, attrs):
            self.seen.append(("start", tag, tuple(attrs)))

        def handle_startendtag(self, tag, attrs):
            self.seen.append(("start", tag, tuple(attrs)))

        def handle_endtag(self, tag):
            self.seen.append(("end", tag))

        def handle_data(self, data):
            if self.seen and self.seen[-1][0] == "data":
                self.seen[-1] = ("data", self.seen[-1][1] + data)
            else:
                self.seen.append(("data", data))

    parser = Events()
    parser.feed(text)
    parser.close()
    return parser.seen


def test_the_committed_tables_keep_their_markup():
    """The pandas tables of the committed notebooks (their ``text/html`` outputs) pass the sanitiser with the same
    elements, attributes and text."""
    tables = 0
    for path in sorted(ROOT.glob("notebooks/*/*.ipynb")) + sorted(ROOT.glob("figures/report/*/layer_report.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                table = output.get("data", {}).get("text/html")
                if table:
                    table = "".join(table) if isinstance(table, list) else table
                    assert _events(site.inert_html(table)) == _events(table), path.name
                    tables += 1
    assert tables >= 10


def test_the_staged_notebooks_carry_no_script_output_and_no_build_setting():
    """A notebook's outputs reached the book as they were (``application/javascript`` runs as a script), and its
    metadata could set myst-nb's options: ``{"mystnb": {"execution_mode": "force"}}`` ran its code during the
    build."""
    nb = _notebook("t", _output({"text/html": PAYLOADS["img"] + "<table><tr><td>1</td></tr></table>",
                                 "application/javascript": "alert(13)"}))
    nb["metadata"].update(mystnb={"execution_mode": "force"}, myst={"html_meta": {"http-equiv=refresh": "0"}})
    got = site.folded(nb)
    data = got["cells"][1]["outputs"][0]["data"]
    assert "application/javascript" not in data and not live(data["text/html"])
    assert data["text/html"] == '<img src="x"><table><tr><td>1</td></tr></table>'
    assert got["metadata"] == {"kernelspec": {"name": "python3"}}
    assert "alert(13)" in nb["cells"][1]["outputs"][0]["data"]["application/javascript"]  # the input is not changed


HOSTILE_MARKDOWN = f"""Text {PAYLOADS['script']} and {PAYLOADS['svg']} and {PAYLOADS['link']}.

{PAYLOADS['details']}

```{{note}}
{PAYLOADS['iframe']}
```

```{{eval-rst}}
.. raw:: html

   <script>alert(14)</script>

`a link <javascript:alert(15)>`_ and `another <https://example.org>`_
```

Kept: `<b>code</b>`, $a<b$, H<sub>2</sub>O.
"""


def test_raw_html_in_notebook_markdown_is_inert_in_the_doctree():
    """MyST passes raw HTML in Markdown (and in a directive's body, and a ``raw`` block) through to the page as it
    is; the book's configuration makes every such node inert before the page is written."""
    from docutils.core import publish_doctree, publish_from_doctree
    from myst_parser.parsers.docutils_ import Parser

    conf = runpy.run_path(str(ROOT / "docs" / "conf.py"))

    def doctree():
        return publish_doctree(HOSTILE_MARKDOWN, parser=Parser(), settings_overrides={
            "myst_enable_extensions": conf["myst_enable_extensions"], "report_level": 4})

    assert len(live(publish_from_doctree(doctree(), writer="html5").decode())) >= 5  # MyST lets them through
    connected = []
    conf["setup"](type("App", (), {"connect": lambda self, *a, **k: connected.append((a, k))})())
    assert {a[0] for a, _ in connected} == {"doctree-read", "doctree-resolved"}
    assert all(k.get("priority", 500) < 500 for a, k in connected if a[0] == "doctree-read")  # before the titles
    read = next(a[1] for a, _ in connected if a[0] == "doctree-read")
    tree = doctree()
    read(None, tree)
    page = publish_from_doctree(tree, writer="html5").decode()
    assert not live(page), live(page)
    assert "&lt;script&gt;alert(1)" in page and "&lt;script&gt;alert(14)" in page and "a link" in page
    assert '<a class="reference external" href="https://example.org">' in page
    assert "<details open><summary>more</summary>" in page and "<sub>2</sub>" in page
    assert "&lt;b&gt;code&lt;/b&gt;" in page  # a code span shows its text as typed


def test_the_built_book_runs_no_script_of_a_notebook(repo, tmp_path):
    """The whole path, rendered by Sphinx with the book's configuration: a notebook with raw HTML in its title, its
    Markdown, a raw cell and its outputs, whose metadata asks myst-nb to run its code."""
    ran = tmp_path / "ran"
    nb = _notebook("Report " + PAYLOADS["img"], _markdown(HOSTILE_MARKDOWN),
                   {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                    "source": f"open({str(ran)!r}, 'w').write('ran')"},
                   _output({"text/html": PAYLOADS["script"] + PAYLOADS["details"],
                            "application/javascript": "alert(16)"}),
                   _output({"text/markdown": PAYLOADS["svg"]}),
                   {"cell_type": "raw", "metadata": {"format": "text/html"}, "source": "<script>alert(17)</script>"})
    nb["metadata"]["mystnb"] = {"execution_mode": "force"}
    _write(repo / "figures/report/tiny__digits/layer_report.ipynb", nb)
    pages = site.build(tmp_path / "book", root=repo)
    assert not ran.exists()  # nothing of the notebook ran
    built = {p.relative_to(pages).as_posix(): p.read_text(encoding="utf-8") for p in pages.rglob("*.html")
             if "_static" not in p.parts}
    assert "report/tiny__digits.html" in built
    for rel, page in built.items():
        assert not live(page), f"{rel}: {live(page)[:3]}"
    page = built["report/tiny__digits.html"]
    assert "&lt;script&gt;alert(1)" in page and "&lt;svg onload=alert(3)&gt;" in page
    assert "&lt;script&gt;alert(17)" in page
