"""Numbers in a notebook's prose, filled from its run: text that cannot drift from the outputs.

A Markdown cell keeps a template in ``metadata["layersim"]["template"]`` and shows it rendered from the run's
``metrics.json``. A field is ``{{ path | filter : format }}``: ``path`` is dotted keys (a key holding dots, slashes
or spaces in double quotes, a list entry by index) or ``run_seconds``; filters, applied left to right, are
:data:`FILTERS` (``min``, ``max``, ``median``, ``mean``, ``range``, ``count``, ``sum``, ``abs``, ``percent``,
``duration``, ``values``, ``argmax1``, ``verdict``, ``cache``) or ``each(key)``, ``key(k)``, ``div(x)``; ``format``
is a Python format spec, a list printed item by item. :func:`render_file` renders after every run;
:func:`loose_numbers` finds numbers outside fields (see docs/modules.md, `layersim.notebook.prose`).
"""

from __future__ import annotations

import copy
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: the cell metadata key under which a Markdown cell keeps its template
KEY = "layersim"

_FIELD = re.compile(r"\{\{(.*?)\}\}", re.S)
_SEGMENT = re.compile(r'\s*(?:"([^"]*)"|([^."\s]+))\s*(?:\.|$)')


def duration(seconds: float | None) -> str:
    """``"12 s"``, ``"4.5 min"``, or ``"–"`` for a time not measured."""
    if seconds is None:
        return "–"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class _Range(tuple):
    """A (low, high) pair that prints as ``low–high`` (:func:`format_value`)."""


def _numbers(v: Any) -> list[float]:
    if isinstance(v, Mapping):
        v = list(v.values())
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"needs a non-empty list of numbers, got {v!r}")
    return [float(x) for x in v]


def _argmax1(v: Any) -> int:
    xs = _numbers(v)
    return xs.index(max(xs)) + 1


def cache_state(uses: Any) -> str:
    """A run's record of checkpoints (:func:`layersim.train.checkpoints.uses`) as prose: "training its 4
    checkpoints", "with its 4 checkpoints cached", "with 2 of its 4 checkpoints cached, training the others", "with
    no checkpoint"."""
    if not isinstance(uses, Mapping) or not {"loaded", "trained"} <= set(uses):
        raise ValueError(f"needs a record of checkpoints {{'loaded': [...], 'trained': [...]}}, got {uses!r}")
    loaded, trained = len(uses["loaded"]), len(uses["trained"])
    n = loaded + trained
    its = "its checkpoint" if n == 1 else f"its {n} checkpoints"
    if n == 0:
        return "with no checkpoint"
    if not loaded:
        return f"training {its}"
    if not trained:
        return f"with {its} cached"
    return f"with {loaded} of {its} cached, training the other{'s' if trained > 1 else ''}"


#: the filters a field may apply, by name
FILTERS: dict[str, Callable[[Any], Any]] = {
    "min": lambda v: min(_numbers(v)),
    "max": lambda v: max(_numbers(v)),
    "median": lambda v: statistics.median(_numbers(v)),
    "mean": lambda v: statistics.fmean(_numbers(v)),
    "range": lambda v: _Range((min(_numbers(v)), max(_numbers(v)))),
    "count": lambda v: len(v),
    "sum": lambda v: sum(_numbers(v)),
    "abs": lambda v: abs(float(v)),
    "percent": lambda v: 100 * float(v),
    "duration": lambda v: duration(float(v)),
    "values": lambda v: list(v.values()),
    "argmax1": _argmax1,
    "verdict": lambda v: "holds" if v else "does not hold",
    "cache": cache_state,
}
#: the filters that take one argument, ``name(arg)``: ``each(key)`` maps a dict (or list) of dicts to the list of
#: their ``key`` entries; ``key(k)`` takes one entry of a dict; ``div(x)`` divides by the number ``x``
FILTERS_WITH_ARGUMENT: dict[str, Callable[[Any, str], Any]] = {
    "each": lambda v, key: [x[key] for x in (v.values() if isinstance(v, Mapping) else v)],
    "key": lambda v, key: v[key],
    "div": lambda v, by: float(v) / float(by),
}
_CALL = re.compile(r"^(\w+)\((.*)\)$")


def _apply(value: Any, name: str) -> Any:
    call = _CALL.match(name)
    if call:
        return FILTERS_WITH_ARGUMENT[call.group(1)](value, call.group(2).strip().strip('"'))
    return FILTERS[name](value)


def _known(name: str) -> bool:
    call = _CALL.match(name)
    return call.group(1) in FILTERS_WITH_ARGUMENT if call else name in FILTERS


def parse_field(text: str) -> tuple[list[str], list[str], str]:
    """``(keys, filters, format)`` of a field's text ``path | filter ... : format``; ``ValueError`` for an unknown
    filter or an empty path."""
    parts, spec, start, quoted = [], "", 0, False
    for i, ch in enumerate(text):  # filters follow bars, the format the last colon, outside quotes
        if ch == '"':
            quoted = not quoted
        elif ch in "|:" and not quoted:
            parts.append(text[start:i])
            start = i + 1
            if ch == ":":
                spec = text[start:].strip()
                break
    else:
        parts.append(text[start:])
    path, *filters = [part.strip() for part in parts]
    keys, pos = [], 0
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read the path {path!r} of the field {{{{{text}}}}}")
        keys.append(m.group(1) if m.group(1) is not None else m.group(2))
        pos = m.end()
    if not keys:
        raise ValueError(f"the field {{{{{text}}}}} names no value")
    unknown = [f for f in filters if not _known(f)]
    if unknown:
        raise ValueError(f"unknown filter {unknown[0]!r} in {{{{{text}}}}}: one of "
                         f"{', '.join([*FILTERS, *(f'{n}(...)' for n in FILTERS_WITH_ARGUMENT)])}")
    return keys, filters, spec


def lookup(data: Any, keys: list[str]) -> Any:
    """The value at ``keys`` in ``data`` (dicts by key, lists by index); ``KeyError`` naming the first key that is
    not there."""
    here = data
    for depth, key in enumerate(keys):
        if isinstance(here, Mapping) and key in here:
            here = here[key]
        elif isinstance(here, list) and key.lstrip("-").isdigit() and -len(here) <= int(key) < len(here):
            here = here[int(key)]
        else:
            where = ".".join(keys[:depth]) or "the metrics"
            have = ", ".join(map(str, list(here)[:12])) if isinstance(here, Mapping) else f"a {type(here).__name__}"
            raise KeyError(f"{'.'.join(keys)}: {where} has no {key!r} (it has: {have})")
    return here


def format_value(value: Any, spec: str = "") -> str:
    """``value`` printed with format ``spec``: a ``range`` as ``low–high`` (one value when both print the same), a
    list joined by ``", "``, a bool as ``yes``/``no``, a whole float without spec as an integer; ``ValueError`` when
    not finite."""
    if isinstance(value, _Range):
        low, high = (format_value(v, spec) for v in value)
        return low if low == high else f"{low}–{high}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v, spec) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"the value is {value}: prose does not quote a failed measurement")
    if value is None:
        raise ValueError("the value is missing (null): prose does not quote a failed measurement")
    if not spec and isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # a threshold of 1.0 reads "1"
    return format(value, spec) if spec else str(value)


def render(template: str, data: Mapping) -> str:
    """``template`` with every field replaced by its value in ``data`` (a run's ``metrics.json``); ``ValueError``
    naming the field for a value that is not there or cannot be printed."""
    def one(m: re.Match) -> str:
        keys, filters, spec = parse_field(m.group(1))
        try:
            value = lookup(data, keys)
            for name in filters:
                value = _apply(value, name)
            return format_value(value, spec)
        except (KeyError, ValueError, TypeError) as exc:
            why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise ValueError(f"{{{{{m.group(1).strip()}}}}}: {why}") from None
    return _FIELD.sub(one, template)


def template_of(cell: Mapping) -> str | None:
    """The template of a notebook cell, or None for a cell without one."""
    return (cell.get("metadata") or {}).get(KEY, {}).get("template")


def _source(cell: Mapping) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


#: what a cell shows in place of its text when its template does not render from another run's metrics
#: (:func:`render_notebook`): nothing of the committed run's numbers stays in another run's notebook
NOT_THIS_RUN = ("*A passage of the notebook's text is left out here: it reads values this run does not have ({why}). "
                "It was written for the committed default-scale run; the committed notebook shows it filled.*\n")


def render_notebook(nb: Mapping, data: Mapping, strict: bool = True) -> dict:
    """A copy of ``nb`` with every template rendered from ``data``. A template that does not render raises
    ``ValueError`` naming the cell (from 1) when ``strict``; otherwise the cell shows :data:`NOT_THIS_RUN`, its
    template kept."""
    out = copy.deepcopy(dict(nb))
    seconds = (out.get("metadata", {}).get("papermill") or {}).get("duration")
    if seconds is not None:  # the run's own time, as papermill measured it
        data = {**data, "run_seconds": seconds}
    for i, cell in enumerate(out.get("cells", []), start=1):
        template = template_of(cell)
        if template is None:
            continue
        if cell.get("cell_type") != "markdown":
            raise ValueError(f"cell {i} holds a prose template but is a {cell.get('cell_type')} cell")
        try:
            cell["source"] = render(template, data).splitlines(keepends=True)
        except ValueError as exc:
            if strict:
                raise ValueError(f"cell {i}: {exc}") from None
            why = str(exc).split(" (it has:")[0].split("}}: ", 1)[-1]  # the missing value, without the field
            cell["source"] = NOT_THIS_RUN.format(why=why).splitlines(keepends=True)
    return out


def stale_cells(nb: Mapping, data: Mapping, strict: bool = True) -> list[tuple[int, str, str]]:
    """``(cell number, shown, rendered)`` of every Markdown cell whose text differs from its template rendered from
    ``data``."""
    fresh = render_notebook(nb, data, strict)
    return [(i, _source(old), _source(new)) for i, (old, new) in enumerate(zip(nb["cells"], fresh["cells"]), start=1)
            if template_of(old) is not None and _source(old) != _source(new)]


def render_file(notebook: Path, metrics: Path, strict: bool = True) -> bool:
    """Render the notebook file's templates from the run's ``metrics`` file in place, whole or not at all; False,
    with nothing written, when there is no template or no metrics."""
    from layersim.core import writers

    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    if not any(template_of(c) is not None for c in nb.get("cells", [])) or not Path(metrics).is_file():
        return False
    fresh = render_notebook(nb, json.loads(Path(metrics).read_text(encoding="utf-8")), strict)
    writers.write_text(Path(notebook), json.dumps(fresh, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    return True


# ----------------------------------------------------------------------------- numbers typed by hand

_DROPPED = [
    re.compile(r"\$\$.*?\$\$", re.S),  # display formulas
    re.compile(r"\$[^$\n]+\$"),  # inline formulas
    re.compile(r"```.*?```", re.S),  # code blocks
    re.compile(r"`[^`\n]*`"),  # code spans: names, commands
    re.compile(r"\]\([^)\s]*\)"),  # link targets (the link text stays)
    re.compile(r"<[^>\n]*>"),  # HTML tags
    _FIELD,  # numbers that come from the run
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),  # dates
    # citations of the papers: sections, figures, tables, equations, theorems ... with their lists and ranges
    re.compile(r"(?:§|\b(?:Sections?|Secs?\.|Figures?|Figs?\.|Tables?|Tabs?\.|[Ee]qs?\.|[Ee]quations?|"
               r"App(?:endix|endices|\.)|Theorems?|Thm\.|Propositions?|Prop\.|Lemmas?|Definitions?|Def\.|"
               r"Corollary|Algorithms?|Alg\.|Steps?\s+(?=\d)|Chapter|Lines?))\s*"
               r"(?:\(?[A-Z]?\d+(?:\.\d+)*[a-z]?\)?)(?:\s*(?:,|and|&|–|-|to|or)\s*\(?[A-Z]?\d+(?:\.\d+)*[a-z]?\)?)*"),
    re.compile(r"\b(?:et al\.|and [A-Z][\w-]+),?\s*\(?\d{4}[a-z]?\)?"),  # author-year citations
]
# a number standing alone: not part of a name (L6, SmolLM2-135M, CIFAR-10, ViT-B/16), a version or an identifier
_NUMBER = re.compile(r"(?<![\w./\\-])[−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+−]?\d+|\s?×\s?10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)?"
                     r"(?![\w/]|\.\d|-[A-Za-z])")


def loose_numbers(text: str) -> list[str]:
    """The numbers of Markdown ``text`` that no field fills, in order, leaving out formulas, code, links, HTML,
    fields, dates, citations of the papers and names holding digits."""
    return [m.group(0) for m in _NUMBER.finditer(_blanked(text))]


def _blanked(text: str) -> str:
    """``text`` with every span :func:`loose_numbers` leaves out replaced by as many spaces (positions kept)."""
    for pattern in _DROPPED:
        text = pattern.sub(lambda m: " " * len(m.group(0)), text)
    return text


def prose_numbers(nb: Mapping) -> list[tuple[int, str, str]]:
    """``(cell number, number, context)`` of every :func:`loose_numbers` number in ``nb``'s Markdown cells (a
    template's text where there is one); ``context``: up to 30 characters either side."""
    out = []
    for i, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "markdown":
            continue
        text = template_of(cell) or _source(cell)
        for m in _NUMBER.finditer(_blanked(text)):
            context = " ".join(text[max(0, m.start() - 30):m.end() + 30].split())
            out.append((i, m.group(0), context))
    return out
