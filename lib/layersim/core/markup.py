"""Strings that reach Markdown or HTML: every one a user can influence passes through here.

A notebook shows its tables with ``IPython.display.Markdown`` and the layer report exports the
executed notebook to ``report.html``, where Markdown may carry raw HTML: a data path such as
``imgs_<svg onload=alert(1)>`` would run as a script when the page is opened. :func:`cell` makes a
string inert (HTML special characters as entities, so Markdown shows them as typed) and keeps it
on one table cell (``|`` and line breaks escaped); :func:`table` builds a whole Markdown table of
such cells. :func:`markdown_cell` is for the project's own Markdown (a notebook's wording of a claim, with its
formulas), which must stay Markdown: only kept on one cell. The report's HTML export also runs nbconvert's sanitizer (``report.export_html``).
:func:`plain_cell` and :func:`plain_table` are for Markdown read as text (a terminal, a file nobody renders): no
HTML entities, only what keeps a cell on its cell; escaping for HTML belongs to the writers of HTML.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["cell", "code", "markdown_cell", "plain_cell", "plain_table", "table"]


def cell(value: Any) -> str:
    """``value`` as inert text for a Markdown table cell: ``& < > " '`` as HTML entities, ``|`` as
    ``&#124;``, backticks as ``&#96;``, line breaks as spaces."""
    text = html.escape(str(value), quote=True)
    text = text.replace("|", "&#124;").replace("`", "&#96;")
    return " ".join(text.splitlines())


def markdown_cell(text: str) -> str:
    """The project's own Markdown ``text`` (formulas and code spans included) kept on one Markdown table cell: line
    breaks as spaces and every unescaped ``|`` escaped as ``\\|`` (a table would split the cell there; ``\\|`` that
    is already escaped, such as a norm ``$\\|y\\|$`` in LaTeX, is left as it is). Nothing else changes, so the text
    renders as Markdown: never use it for a string a user can influence (:func:`cell` is for those)."""
    return re.sub(r"(?<!\\)\|", r"\\|", " ".join(str(text).splitlines()))


def code(value: Any) -> str:
    """``value`` shown as code in a Markdown table cell: a backtick code span when ``value`` is plain
    (no backtick, ``|``, line break or HTML special character), else ``<code>`` with the text escaped
    like :func:`cell`."""
    text = str(value)
    if not any(c in text for c in "`|\r\n<>&\"'"):
        return f"`{text}`"
    return f"<code>{cell(text)}</code>"


def table(header: Iterable[Any], rows: Iterable[Iterable[Any]], raw: bool = False) -> str:
    """A Markdown table; every header and cell passed through :func:`cell` (``raw=True``: the cells
    are already markup built from :func:`cell` / :func:`code`, only the header is escaped)."""
    header = [cell(h) for h in header]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(str(c) if raw else cell(c) for c in row) + " |")
    return "\n".join(lines)


def plain_cell(value: Any) -> str:
    """``value`` for a Markdown table read as plain text: ``|`` as ``\\|`` and line breaks as spaces, nothing else
    changed (no HTML entities: ``<= 0.5`` stays ``<= 0.5``). Not for Markdown that a browser renders (:func:`cell`)."""
    return " ".join(str(value).replace("|", "\\|").splitlines())


def plain_table(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A Markdown table of :func:`plain_cell` s, for a terminal."""
    header = list(header)
    lines = ["| " + " | ".join(plain_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(plain_cell(c) for c in row) + " |")
    return "\n".join(lines)
