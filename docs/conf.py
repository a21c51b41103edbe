"""Sphinx configuration of the layersim book (``make site``; built by ``python -m layersim.tools.site build``).

The book renders the committed, executed notebooks as they are (``nb_execution_mode = "off"``: nothing runs);
the landing page, the per-paper pages and the claims audit are generated from the results when the site is
staged (:mod:`layersim.tools.site`). Sphinx with myst-nb and the book theme was chosen over Jupyter Book 2 (MyST
on Node) because it is pure Python: it installs from PyPI with the rest of the environment and builds offline.
Raw HTML that a notebook or a page carries is shown inert: no script of theirs runs in a reader's browser
(:func:`setup`).
"""

project = "layersim"
author = "the layersim authors"
copyright = "2026, the layersim authors"

extensions = ["myst_nb"]
nb_execution_mode = "off"  # the notebooks are committed with the outputs of their default-scale run
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3  # links such as t01_cos_vs_cka.ipynb#the-papers-statements-tested-on-this-run
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# MathJax 3 (its self-contained TeX-to-SVG build, glyphs included) from the sphinx-mathjax-offline package, copied
# into _static/mathjax when the book is staged: the book renders its formulas offline, fetching no font
# (Sphinx's default loads MathJax from a CDN)
html_static_path = ["_static"]
mathjax_path = "mathjax/tex-svg.js"

html_theme = "sphinx_book_theme"
html_title = "layersim: layer-wise similarity, reproduced"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "home_page_in_toc": True,
}
html_context = {"default_mode": "light"}  # the theme's script logs an error when no mode is set
html_favicon = "favicon.svg"  # also spares the browser a request for /favicon.ico that would fail
html_show_sourcelink = False
html_last_updated_fmt = None


def setup(app):
    """Raw HTML in the book is made inert (:func:`layersim.tools.sanitize.inert_doctree`): in a notebook's Markdown and
    outputs, in a directive's body, in a page. Once each page is read, before Sphinx collects its title for the
    navigation (priority 100 runs before the collectors' 500), and again once it is resolved, before it is written."""
    from layersim.tools.sanitize import inert_doctree

    app.connect("doctree-read", lambda _app, doctree: inert_doctree(doctree), priority=100)
    app.connect("doctree-resolved", lambda _app, doctree, _docname: inert_doctree(doctree))
