"""Tests of layersim.tools.sanitize: raw HTML made inert for the book.

Every payload (a script, an ``on...`` handler, a ``javascript:`` link however spelled, an iframe, CSS that loads a
URL) comes out unable to run, and a second pass changes nothing; the HTML a notebook may use (details, sub, links,
images, the pandas tables of the committed notebooks) keeps its markup; and ``docs/conf.py`` runs every raw HTML
node that MyST lets through a page's Markdown through :func:`layersim.tools.sanitize.inert_doctree`.
"""

from __future__ import annotations

import json
import re
import runpy
from html.parser import HTMLParser

import pytest

from layersim.tools import sanitize
from builders import HOSTILE_MARKDOWN, PAYLOADS, REPO, live


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_raw_html_is_made_inert(name):
    got = sanitize.inert_html(PAYLOADS[name])
    assert not live(got), got
    assert not re.search(r"<(script|svg|iframe)", got, re.I) and not re.search(r"<[^>]*\son\w+=", got), got
    assert sanitize.inert_html(got) == got  # a second pass changes nothing


def test_the_html_a_notebook_may_use_stays_live():
    kept = ('<details open><summary>more</summary>x<br />H<sub>2</sub>O, <b>b</b> <a href="https://example.org/a?b=1'
            '&amp;c=2" title="t">a</a> <img src="figure.png" alt="a figure"></details>')
    assert sanitize.inert_html(kept) == kept
    assert sanitize.inert_html('<a href="../x.html#y">x</a>') == '<a href="../x.html#y">x</a>'
    assert sanitize.inert_html("a < b &amp; c &#60; d <!-- note -->") == "a &lt; b &amp; c &#60; d "


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
    for path in sorted(REPO.glob("notebooks/*/*.ipynb")) + sorted(REPO.glob("figures/report/*/layer_report.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                table = output.get("data", {}).get("text/html")
                if table:
                    table = "".join(table) if isinstance(table, list) else table
                    assert _events(sanitize.inert_html(table)) == _events(table), path.name
                    tables += 1
    assert tables >= 10


def test_raw_html_in_notebook_markdown_is_inert_in_the_doctree():
    """MyST passes raw HTML in Markdown (and in a directive's body, and a ``raw`` block) through to the page as it
    is; the book's configuration makes every such node inert before the page is written."""
    from docutils.core import publish_doctree, publish_from_doctree
    from myst_parser.parsers.docutils_ import Parser

    conf = runpy.run_path(str(REPO / "docs" / "conf.py"))

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


@pytest.mark.parametrize("url, safe", [
    ("figure.png", True), ("../x.html#y", True), ("#anchor", True), ("https://example.org/a?b=1", True),
    ("HTTP://example.org", True), ("mailto:a@b.org", True), ("javascript:alert(1)", False),
    (" java\tscript:alert(1)", False), ("JavaScript:alert(1)", False), ("data:text/html,x", False),
    ("vbscript:x", False), ("a:b", False),
])
def test_a_url_is_safe_when_relative_or_of_a_known_scheme(url, safe):
    assert sanitize.safe_url(url) is safe


def test_a_cells_outputs_lose_their_scripts_and_keep_the_rest():
    cell = {"outputs": [{"data": {"text/html": ["<b>x</b>", PAYLOADS["img"]], "application/javascript": "alert(1)",
                                  "text/javascript": "alert(2)", "text/plain": "x"}}, {"text": "a stream"}]}
    sanitize.inert_outputs(cell)
    assert cell["outputs"] == [{"data": {"text/html": '<b>x</b><img src="x">', "text/plain": "x"}},
                               {"text": "a stream"}]
