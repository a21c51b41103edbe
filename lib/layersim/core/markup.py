"""Strings that reach Markdown or HTML: every one a user can influence passes through here.

- :func:`cell`, :func:`code`, :func:`table`: a user's string made inert (HTML entities) on one table cell, for
  Markdown a browser renders;
- :func:`markdown_cell`: the project's own Markdown, kept on one cell and still Markdown;
- :func:`plain_cell`, :func:`plain_table`: Markdown read as text (a terminal), no HTML entities.

(see docs/modules.md, ``layersim.core.markup``)
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
    """The project's own Markdown ``text`` kept on one table cell: line breaks as spaces, each unescaped ``|`` as
    ``\\|``; nothing else changes. Never for a string a user can influence (:func:`cell`)."""
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
