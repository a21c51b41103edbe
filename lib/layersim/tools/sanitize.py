"""Raw HTML made inert for the book: what a notebook or a page carries runs nothing in a reader's browser.

:func:`inert_html` writes anew the tags of :data:`HTML_TAGS` with only the attributes of :data:`HTML_ATTRIBUTES`
(a link or an image only with a :func:`safe_url`, CSS only without ``url(...)``, ``@import`` and the like) and shows
every other tag as text; :func:`inert_outputs` does it to a notebook cell's outputs and drops script outputs;
:func:`inert_doctree`, which ``docs/conf.py`` calls on every page, to every raw HTML node Sphinx renders (see
docs/modules.md, `layersim.tools.sanitize`).
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser


#: the HTML elements that raw HTML in the book keeps live (a notebook's Markdown, its outputs, such as pandas tables);
#: every other tag is shown as text
HTML_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div", "dl",
    "dt", "em", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "s", "samp", "small", "span", "strong",
    "style", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var"})
#: the attributes they keep (``href`` and ``src`` only with a :func:`safe_url`, ``style`` only without
#: :data:`_CSS_OUT`); every other attribute, ``on...`` handlers included, is left out
HTML_ATTRIBUTES = frozenset({
    "align", "alt", "border", "class", "colspan", "halign", "height", "href", "id", "open", "rowspan", "scope",
    "scoped", "src", "start", "style", "title", "type", "valign", "width"})
#: elements without content, written ``<br />``
_VOID = frozenset({"br", "col", "hr", "img"})
#: URL schemes a link or an image may use; a URL without a scheme is relative to the book
URL_SCHEMES = ("http", "https", "mailto")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
#: CSS that could load or run something (``url(...)``, ``expression(...)``, ``@import``, escapes that hide either)
_CSS_OUT = re.compile(r"url\s*\(|expression\s*\(|@import|javascript:|behavior\s*:|-moz-binding|\\", re.I)


def safe_url(url: str) -> bool:
    """Whether ``url`` may be a link or an image source in the book: relative, or with a scheme of
    :data:`URL_SCHEMES` (not ``javascript:``, ``data:``, ...). Spaces and control characters, which a browser drops
    from a scheme (``java\tscript:``), are dropped before the scheme is read."""
    m = _SCHEME.match(re.sub(r"[\x00-\x20\x7f]+", "", url))
    return m is None or m.group(1).lower() in URL_SCHEMES


def _attribute_kept(name: str, value: str | None) -> bool:
    if name not in HTML_ATTRIBUTES:
        return False
    if name in ("href", "src"):
        return value is not None and safe_url(value)
    return name != "style" or not _CSS_OUT.search(value or "")


class _Inert(HTMLParser):
    """The parser behind :func:`inert_html`: it writes anew every tag it keeps, from the attributes it checked."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []
        self.css: list[str] | None = None  # the text of an open <style>, checked whole at its end

    def _tag(self, tag: str, attrs: list, closed: bool) -> str:
        if tag not in HTML_TAGS:
            return html.escape(self.get_starttag_text() or f"<{tag}>", quote=False)
        kept = "".join(f" {k}" if v is None else f' {k}="{html.escape(v, quote=True)}"'
                       for k, v in attrs if _attribute_kept(k, v))
        if closed:  # a browser ignores the / of <div/>: an element that has content is closed by its end tag
            return f"<{tag}{kept} />" if tag in _VOID else f"<{tag}{kept}></{tag}>"
        if tag == "style":
            self.css = []
        return f"<{tag}{kept}>"

    def handle_starttag(self, tag, attrs):
        self._end_css()
        self.out.append(self._tag(tag, attrs, closed=False))

    def handle_startendtag(self, tag, attrs):
        self._end_css()
        self.out.append(self._tag(tag, attrs, closed=True))

    def handle_endtag(self, tag):
        if tag == "style" and self.css is not None:
            self._end_css()
            return
        self.out.append(f"</{tag}>" if tag in HTML_TAGS else f"&lt;/{html.escape(tag)}&gt;")

    def handle_data(self, data):
        (self.out if self.css is None else self.css).append(data.replace("<", "&lt;"))

    def handle_entityref(self, name):
        self.handle_data(f"&{name};")

    def handle_charref(self, name):
        self.handle_data(f"&#{name};")

    # comments, declarations and processing instructions are left out

    def _end_css(self) -> None:
        if self.css is not None:
            css = "".join(self.css)
            self.out.append(("" if _CSS_OUT.search(css) else css) + "</style>")
            self.css = None

    def result(self) -> str:
        self.close()
        self._end_css()
        return "".join(self.out)


def inert_html(text: str) -> str:
    """HTML ``text`` as the book may show it: the tags of :data:`HTML_TAGS` written anew with only the attributes of
    :data:`HTML_ATTRIBUTES` (a link or image only with a :func:`safe_url`, CSS only without ``url(...)``,
    ``@import`` and the like), every other tag escaped so that it shows as text, comments left out, a stray ``<``
    escaped. Idempotent; pandas tables keep their markup."""
    parser = _Inert()
    parser.feed(text)
    return parser.result()


def inert_doctree(doctree) -> None:
    """Make a Sphinx doctree safe to show (``docs/conf.py`` calls it on every page): every raw HTML node through
    :func:`inert_html`, and every link without a :func:`safe_url` (``javascript:`` in reStructuredText) replaced by
    its text."""
    from docutils import nodes

    for node in list(doctree.findall(nodes.raw)):
        if "html" in node.get("format", "").split():
            text = node.astext()
            safe = inert_html(text)
            if safe != text:
                node.clear()
                node += nodes.Text(safe)
    for ref in list(doctree.findall(nodes.reference)):
        if "refuri" in ref and not safe_url(ref["refuri"]):
            ref.replace_self(nodes.inline("", "", *ref.children))


#: notebook outputs that would run a script in the book: left out of it
SCRIPT_OUTPUTS = ("application/javascript", "text/javascript", "application/x-javascript")


def inert_outputs(cell: dict) -> None:
    """The outputs of a code ``cell`` (changed in place) as the book may show them: each ``text/html`` through
    :func:`inert_html`, the script outputs of :data:`SCRIPT_OUTPUTS` left out."""
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        for mime in SCRIPT_OUTPUTS:
            data.pop(mime, None)
        if "text/html" in data:
            text = data["text/html"]
            data["text/html"] = inert_html("".join(text) if isinstance(text, list) else text)
