"""Tests of layersim.core.markup: table cells and code spans that keep any text inert and on one line; a claim's
statement stays Markdown on one table cell."""

from layersim.core import markup


def test_a_cell_is_one_line_and_code_cannot_break_out_of_its_span():
    assert markup.cell("a | b\nc") == "a &#124; b c"  # one cell, one line
    assert markup.code("cka/to_last") == "`cka/to_last`" and markup.code("x`y") == "<code>x&#96;y</code>"


def test_a_statement_stays_markdown_on_one_table_cell():
    text = "|aligned - standard| is at most $0.02$;\nthe norm $\\|y\\|^2$ and `a|b`"
    got = markup.markdown_cell(text)
    assert got == "\\|aligned - standard\\| is at most $0.02$; the norm $\\|y\\|^2$ and `a\\|b`"
    assert "\n" not in got and "&" not in got  # no HTML entities: formulas keep their characters
