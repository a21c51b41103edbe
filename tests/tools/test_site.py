"""Tests of layersim.tools.site: the book's generated pages against the results, what a build may delete, raw HTML
made inert in the book it builds (the sanitiser itself: test_sanitize.py), and the built site opened in a real
Chromium through Playwright.

The browser tests need Debian's ``chromium`` (``make setup`` installs it where it can: root and apt) or a browser
named by ``LAYERSIM_CHROMIUM``; without one they are skipped, unless ``LAYERSIM_REQUIRE_BROWSER=1`` (set by
``.ci/run``) makes a missing browser a failure.

Under hostile and careless input: a ``--out`` that holds a user's files is refused with one ``error:`` line, exit
status 2, and nothing in it is deleted; the book replaces only folders it made. A name that becomes a page (a layer
report example's folder, a notebook's stem) with a quote or ``<`` in it is refused with one line naming it, since
the theme writes page names into a JavaScript string. Strings of a run (a claim's note, a value, the scale, a
notebook's title) reach the generated pages escaped. Raw HTML in a notebook's Markdown (in a heading, a paragraph,
a directive's body, a ``raw`` block) and in its outputs shows as text in the built pages: no ``<script>``, no
``on...`` handler, no ``javascript:`` link is left live. Those cases stage a small repository of their own; one
renders it with Sphinx.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from layersim.core import writers
from layersim.core.references import PAPERS
from layersim.tools import site
from builders import HOSTILE_MARKDOWN, PAYLOADS, REPO, live, one_line_error, tree_files


def metrics_counts() -> tuple[int, int, dict]:
    """(claims that hold, claims, {paper: (hold, total)}) over every committed ``figures/<paper>/<stem>/metrics.json``
    of a notebook: the numbers every page must agree with, read here without the site module."""
    per = {}
    for p in PAPERS:
        held = total = 0
        for path in (REPO / "figures" / p.key).glob("*/metrics.json"):
            if not (REPO / "notebooks" / p.key / f"{path.parent.name}.ipynb").is_file():
                continue
            claims = json.loads(path.read_text())["claims"]
            held += sum(bool(c["holds"]) for c in claims.values())
            total += len(claims)
        per[p.key] = (held, total)
    return sum(h for h, _ in per.values()), sum(t for _, t in per.values()), per


# ----------------------------------------------------------------------------- the generated pages


def test_every_claim_has_the_statement_its_notebook_words():
    for path in sorted(REPO.glob("figures/*/*/metrics.json")):
        nb_path = REPO / "notebooks" / path.parent.parent.name / f"{path.parent.name}.ipynb"
        if not nb_path.is_file():
            continue
        nb, claims = json.loads(nb_path.read_text()), json.loads(path.read_text()).get("claims")
        if not claims:
            continue  # the layer report's example run tests no claim
        missing = set(claims) - set(site.statements(nb))
        assert not missing, f"{nb_path.name}: no statement for {missing}"
        assert site.statements_anchor(nb), nb_path.name


def test_statements_are_read_from_their_section_only():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "## The paper's statements, tested on this run\n\n* `a_claim`: first\n"
                                            "  line,\n  second line.\n* `b_claim` (either way): other.\n\nAfter."},
        {"cell_type": "markdown", "source": "## What we found\n\n`a_claim`: not this one."},
        {"cell_type": "markdown", "source": "## The paper's statement, tested on this run\n\n`c_claim`: alone.\n\nMore."}]}
    assert site.statements(nb) == {"a_claim": "first line, second line.", "b_claim": "other.", "c_claim": "alone."}
    assert site.statements_anchor(nb) == "the-papers-statements-tested-on-this-run"


def test_the_audit_counts_are_the_metrics_files_counts():
    held, total, per = metrics_counts()
    page = site.audit_page()
    assert f"**{held} of {total} claims hold**" in page
    for p in PAPERS:
        h, t = per[p.key]
        assert f"[{p.title}](#{site._anchor(p.title)}) | {t} | {h} | {t - h} |" in page
    assert page.count("](notebooks/") >= total  # every claim links to its notebook's section
    infos = site.notebook_infos()
    assert site.totals(infos) == (held, total)


def test_the_readme_table_is_the_one_the_runs_give():
    assert site.main(["readme", "--check"]) == 0
    readme = (REPO / "README.md").read_text()
    held, total, _ = metrics_counts()
    assert f"**{held} of {total} claims hold**" in readme
    words = len(re.findall(r"\S+", readme.split(site.START)[0] + readme.split(site.END)[1]))
    assert words <= 1000, f"the README's own text is {words} words"
    for p in PAPERS:
        assert p.title in readme and p.url in readme
    for nb in sorted(REPO.glob("notebooks/*/*.ipynb")):  # every notebook has its row, the layer report too
        assert f"]({nb.relative_to(REPO).as_posix()})" in readme, nb.name


def test_the_book_outside_the_repository_is_one_error_line(outside_repository, capsys):
    assert site.main(["readme", "--check"]) == 2
    one_line_error(capsys.readouterr().err, "error:", "needs the layersim repository")


def test_the_readme_check_fails_on_a_stale_table(tmp_path, monkeypatch):
    text = f"intro\n{site.START}\nold\n{site.END}\nrest\n"
    assert site.replace_block(text, "new\n") == f"intro\n{site.START}\nnew\n{site.END}\nrest\n"
    with pytest.raises(ValueError, match="needs the two lines"):
        site.replace_block("no markers", "new")
    (tmp_path / "README.md").write_text(text)
    monkeypatch.setattr(site, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(site, "readme_section", lambda root=None: "generated")
    assert site.main(["readme", "--check"]) == 1
    assert site.main(["readme"]) == 0 and site.main(["readme", "--check"]) == 0
    assert "generated" in (tmp_path / "README.md").read_text()


def test_times_come_from_the_runs():
    infos = {i.name: i for i in site.notebook_infos()}
    t01 = infos["tracing/t01_cos_vs_cka"]
    metrics = json.loads((REPO / "figures/tracing/t01_cos_vs_cka/metrics.json").read_text())
    nb = json.loads((REPO / "notebooks/tracing/t01_cos_vs_cka.ipynb").read_text())
    runs = [*metrics.get("seed_run_seconds", {}).values(), nb["metadata"]["papermill"]["duration"]]
    assert t01.default_seconds == max(runs)
    plan = sorted((REPO / "benchmarks/gpu").glob("*paper-plan.json"))[-1]
    rows = [r for r in json.loads(plan.read_text()) if r["notebook"] == "t01_cos_vs_cka"]
    assert t01.paper_gpu_hours == pytest.approx(sum(r["hours"] for r in rows))
    assert infos["tracing/t09_aligned_bert"].paper_gpu_hours is None  # its step count is not known offline
    assert site.duration(None) == "–" and site.duration(59.6) == "60 s" and site.duration(600) == "10.0 min"


def test_links_to_what_the_book_does_not_carry_become_their_labels():
    text = "[a](kept.md#x) [b](gone.py) [c](https://example.org) [d](#anchor) ![e](gone.png)"
    got = site.relink(text, lambda t: t == "kept.md")
    assert got == "[a](kept.md#x) b [c](https://example.org) [d](#anchor) *(image: e)*"


def test_the_book_folds_the_plumbing_and_leaves_the_notebook_alone():
    def code(text, *tags):
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": [text], "outputs": []}

    settings = code("PRESETS = {}\nrun = start('p/s', PRESETS, globals())\nP = run.P")
    settings["metadata"]["jupyter"] = {"source_hidden": True}  # collapsed in the notebook itself
    nb = {"metadata": {}, "cells": [code("scale = 'default'", "parameters"), code("scale = 'smoke'", "injected-parameters"),
                                    settings, code("x = measure(P)"),
                                    {"cell_type": "markdown", "metadata": {}, "source": ["text"]}]}
    got = site.folded(nb)
    assert [c["source"][0] for c in got["cells"]] == ["scale = 'default'", "PRESETS = {}\nrun = start('p/s', PRESETS, "
                                                      "globals())\nP = run.P", "x = measure(P)", "text"]
    assert [c["metadata"]["tags"] for c in got["cells"]] == [["parameters", "hide-input"], ["hide-input"], [], []]
    assert len(nb["cells"]) == 5 and nb["cells"][0]["metadata"]["tags"] == ["parameters"]  # the input is not changed


# ----------------------------------------------------------------------------- a small repository of its own


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
        _write(root / "docs" / name, (REPO / "docs" / name).read_text(encoding="utf-8"))
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


# --------------------------------------------------------------------------- strings of a run on the generated pages


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


# ----------------------------------------------------------------------------- the built site in a browser


def chromium() -> str | None:
    named = os.environ.get("LAYERSIM_CHROMIUM")
    return named or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return site.build(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def server(built):
    handler = functools.partial(_QuietHandler, directory=str(built))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    exe = chromium()
    if exe is None:
        if os.environ.get("LAYERSIM_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium found (install Debian's chromium, or set LAYERSIM_CHROMIUM)")
        pytest.skip("no Chromium found: `apt-get install chromium` (make setup does it as root)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


def visit(browser, url: str) -> dict:
    """Open ``url``; return its console errors, page errors, images that did not load, links and element ids."""
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    response = page.goto(url, wait_until="load")
    # formulas are typeset by MathJax after the load (SVG output): wait for it where the page has any
    page.wait_for_function("() => !document.querySelector('span.math, div.math') || "
                           "(window.MathJax && MathJax.startup && MathJax.startup.promise && "
                           "document.querySelector('mjx-container svg'))", timeout=20000)
    page.wait_for_timeout(100)
    typeset = page.eval_on_selector_all("mjx-container", "els => els.length")
    # a TeX error is typeset as an merror node; a formula MathJax could not even parse stays raw inside its span
    math_errors = page.eval_on_selector_all("mjx-merror, [data-mml-node='merror']",
                                            "els => els.map(e => e.getAttribute('data-mjx-error'))")
    math_errors += page.eval_on_selector_all("span.math, div.math", r"els => els.filter(e => /\\[(\[]/.test("
                                             "e.textContent)).map(e => 'untypeset: ' + e.textContent.slice(0, 60))")
    broken = page.eval_on_selector_all("img", "els => els.filter(i => !(i.complete && i.naturalWidth > 0))"
                                              ".map(i => i.getAttribute('src'))")
    links = page.eval_on_selector_all("a[href]", "els => els.map(a => a.getAttribute('href'))")
    ids = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
    text = page.inner_text("body")
    rows = page.eval_on_selector_all("main table tbody tr", "els => els.length")
    page.close()
    return {"status": response.status, "errors": errors, "broken": broken, "links": links, "ids": ids, "text": text,
            "rows": rows, "typeset": typeset, "math_errors": math_errors}


def test_every_page_loads_without_errors_and_every_image_and_internal_link_resolves(built, server, browser):
    pages = sorted(p.relative_to(built).as_posix() for p in built.rglob("*.html")
                   if p.name not in ("genindex.html", "search.html") and "_static" not in p.parts)
    assert "index.html" in pages and "claims.html" in pages and len(pages) >= 40
    seen, anchors_wanted = {}, []
    for rel in pages:
        got = visit(browser, server + rel)
        seen[rel] = got
        assert got["status"] == 200, rel
        assert not got["errors"], f"{rel}: console errors {got['errors'][:3]}"
        assert not got["broken"], f"{rel}: images that did not load {got['broken'][:3]}"
        assert not got["math_errors"], f"{rel}: formulas MathJax could not typeset {got['math_errors'][:3]}"
        for href in got["links"]:
            if re.match(r"^[a-z]+:", href):
                continue  # external: not followed offline
            target = urlparse(urljoin(server + rel, href))
            path = unquote(target.path.lstrip("/")) or "index.html"
            assert (built / path).is_file() or (built / path / "index.html").is_file(), f"{rel}: broken link {href}"
            if target.fragment and path.endswith(".html"):
                anchors_wanted.append((rel, href, path, target.fragment))
    for rel, href, path, fragment in anchors_wanted:
        if path in seen:
            assert fragment in seen[path]["ids"], f"{rel}: link {href} to a missing anchor"
    assert seen["tracing/t01_cos_vs_cka.html"]["typeset"] >= 10  # its formulas are rendered, offline
    held, total, _ = metrics_counts()
    claims = seen["claims.html"]
    assert f"{held} of {total} claims hold" in claims["text"]
    assert claims["rows"] == total + len(PAPERS) + 1  # one row per claim, plus the count table's rows


def test_the_committed_layer_reports_open_without_errors(browser):
    reports = sorted(REPO.glob("figures/report/*/report.html"))
    assert reports
    for path in reports:
        got = visit(browser, path.as_uri())
        assert not got["errors"], f"{path}: console errors {got['errors'][:3]}"
        assert not got["broken"], f"{path}: images that did not load {got['broken'][:3]}"
