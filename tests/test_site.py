"""The book (``make site``, :mod:`layersim.tools.site`): its generated pages against the results, and the built
site opened in a real Chromium through Playwright.

The browser test needs Debian's ``chromium`` (``make setup`` installs it where it can: root and apt) or a browser
named by ``LAYERSIM_CHROMIUM``; without one it is skipped, unless ``LAYERSIM_REQUIRE_BROWSER=1`` (set by
``.ci/run``) makes a missing browser a failure.
"""

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from layersim.core.references import PAPERS
from layersim.tools import runner, site

ROOT = Path(__file__).resolve().parents[1]


def metrics_counts() -> tuple[int, int, dict]:
    """(claims that hold, claims, {paper: (hold, total)}) over every committed ``figures/<paper>/<stem>/metrics.json``
    of a notebook: the numbers every page must agree with, read here without the site module."""
    per = {}
    for p in PAPERS:
        held = total = 0
        for path in (ROOT / "figures" / p.key).glob("*/metrics.json"):
            if not (ROOT / "notebooks" / p.key / f"{path.parent.name}.ipynb").is_file():
                continue
            claims = json.loads(path.read_text())["claims"]
            held += sum(bool(c["holds"]) for c in claims.values())
            total += len(claims)
        per[p.key] = (held, total)
    return sum(h for h, _ in per.values()), sum(t for _, t in per.values()), per


# ----------------------------------------------------------------------------- the generated pages

def test_every_claim_has_the_statement_its_notebook_words():
    for path in sorted(ROOT.glob("figures/*/*/metrics.json")):
        nb_path = ROOT / "notebooks" / path.parent.parent.name / f"{path.parent.name}.ipynb"
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
    readme = (ROOT / "README.md").read_text()
    held, total, _ = metrics_counts()
    assert f"**{held} of {total} claims hold**" in readme
    words = len(re.findall(r"\S+", readme.split(site.START)[0] + readme.split(site.END)[1]))
    assert words <= 1000, f"the README's own text is {words} words"
    for p in PAPERS:
        assert p.title in readme and p.url in readme
    for nb in sorted(ROOT.glob("notebooks/*/*.ipynb")):  # every notebook has its row, the layer report too
        assert f"]({nb.relative_to(ROOT).as_posix()})" in readme, nb.name


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
    metrics = json.loads((ROOT / "figures/tracing/t01_cos_vs_cka/metrics.json").read_text())
    nb = json.loads((ROOT / "notebooks/tracing/t01_cos_vs_cka.ipynb").read_text())
    runs = [*metrics.get("seed_run_seconds", {}).values(), nb["metadata"]["papermill"]["duration"]]
    assert t01.default_seconds == max(runs)
    plan = sorted((ROOT / "benchmarks/gpu").glob("*paper-plan.json"))[-1]
    rows = [r for r in json.loads(plan.read_text()) if r["notebook"] == "t01_cos_vs_cka"]
    assert t01.paper_gpu_hours == pytest.approx(sum(r["hours"] for r in rows))
    assert infos["tracing/t09_aligned_bert"].paper_gpu_hours is None  # its step count is not known offline
    assert site.duration(None) == "–" and site.duration(59.6) == "60 s" and site.duration(600) == "10.0 min"


def test_links_to_what_the_book_does_not_carry_become_their_labels():
    text = "[a](kept.md#x) [b](gone.py) [c](https://example.org) [d](#anchor) ![e](gone.png)"
    got = site.relink(text, lambda t: t == "kept.md")
    assert got == "[a](kept.md#x) b [c](https://example.org) [d](#anchor) *(image: e)*"


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
    reports = sorted(ROOT.glob("figures/report/*/report.html"))
    assert reports
    for path in reports:
        got = visit(browser, path.as_uri())
        assert not got["errors"], f"{path}: console errors {got['errors'][:3]}"
        assert not got["broken"], f"{path}: images that did not load {got['broken'][:3]}"


def test_widget_state_and_widget_outputs_are_left_out_of_the_book():
    view = {"model_id": "x", "version_major": 2, "version_minor": 0}
    nb = {"metadata": {"widgets": {"state": {}}, "kernelspec": {}},
          "cells": [{"cell_type": "code", "outputs": [
              {"output_type": "display_data", "data": {runner.WIDGET_VIEW: view, "text/plain": "HBox()"}},
              {"output_type": "display_data", "data": {runner.WIDGET_VIEW: view, "image/png": "AA=="}},
              {"output_type": "stream", "name": "stdout", "text": "kept"}]},
              {"cell_type": "markdown", "source": "text"}]}
    got = runner.without_widgets(nb)
    assert "widgets" not in got["metadata"] and "kernelspec" in got["metadata"]
    assert got["cells"][0]["outputs"] == [{"output_type": "display_data", "data": {"image/png": "AA=="}},
                                          {"output_type": "stream", "name": "stdout", "text": "kept"}]
    assert runner.WIDGET_VIEW in nb["cells"][0]["outputs"][0]["data"]  # the input is not changed


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


def test_a_statement_stays_markdown_on_one_table_cell():
    from layersim.core import markup

    text = "|aligned - standard| is at most $0.02$;\nthe norm $\\|y\\|^2$ and `a|b`"
    got = markup.markdown_cell(text)
    assert got == "\\|aligned - standard\\| is at most $0.02$; the norm $\\|y\\|^2$ and `a\\|b`"
    assert "\n" not in got and "&" not in got  # no HTML entities: formulas keep their characters
