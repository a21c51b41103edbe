"""What a notebook run writes: its output folder, figures, claims and ``metrics.json``.

A run writes ``runs/<scale>/<paper>/<stem>/`` (or below ``$LAYERSIM_OUT``); only a default-scale run with
``LAYERSIM_UPDATE_COMMITTED=1`` writes the committed ``figures/<paper>/<stem>/``. ``metrics.json`` is
``{"notebook", "scale", "params", "claims": {name: {"holds", "value", "threshold" or "note", ...}}, ...}``; a
notebook measures a claim (:func:`measure`) and the registry judges it (:func:`claim`), so ``holds`` is never typed.
Files are written atomically (see docs/modules.md, `layersim.notebook.results`).
"""

from __future__ import annotations

import json
import math
import operator
import os
from pathlib import Path
from typing import Any

import numpy as np

from layersim.core import markup, writers
from layersim.core.paths import repo_root
from layersim.notebook import rehearsal, seeds

SCALES = ("smoke", "default", "paper")

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def check_scale(scale: str) -> str:
    """Return ``scale`` if it is one of :data:`SCALES`, else raise ``ValueError``."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    return scale


def run_folder(paper: str, stem: str, scale: str) -> Path:
    """Where a run of ``<paper>/<stem>`` at ``scale`` writes, creating nothing: ``$LAYERSIM_OUT`` if set,
    ``figures/`` for a default-scale run with the switch on, ``runs/rehearsal/`` for a rehearsal of the paper scale
    (:mod:`layersim.notebook.rehearsal`), else ``runs/<scale>/``."""
    check_scale(scale)
    env = os.environ.get("LAYERSIM_OUT")
    if env:
        base = writers.resolved(env)
    elif scale == "default" and writers.update_allowed():
        base = repo_root() / "figures"
    else:
        base = repo_root() / "runs" / rehearsal.runs_folder(scale)
    return base / paper / stem


def output_dir(paper: str, stem: str, scale: str) -> Path:
    """The folder a run writes to (:func:`run_folder`), created, checked writable and cleared of an earlier run's
    figures and ``metrics.json``. :class:`~layersim.core.writers.ProtectedPath` (a ``ValueError``) for committed
    results without the switch or at a scale other than default."""
    folder = run_folder(paper, stem, scale)
    if scale != "default" and writers.protected_root(folder) is not None:
        raise writers.ProtectedPath(f"a {scale}-scale run may not write into {folder} (committed default-scale "
                                    f"results): LAYERSIM_OUT={os.environ.get('LAYERSIM_OUT')!r} points there; "
                                    "unset it or choose another folder")
    return writers.prepare_folder(folder, what=f"the output folder of {paper}/{stem}")


#: why a claim misses at our scale, one of four kinds: the claim as fixed did not test the paper's statement
#: (``definition``); the stand-in is too small to show the effect (``scale``); the paper's own numbers are
#: inconsistent (``paper``); it was tested as the paper states it and does not hold (``does not replicate``)
DIAGNOSES = ("definition", "scale", "paper", "does not replicate")


#: values within this relative distance of their threshold are equal to it (float rounding, not measurement)
ROUNDING = 1e-9


def compare(value: float, threshold: float, op: str) -> bool:
    """``value <op> threshold``, a value equal to the threshold up to relative :data:`ROUNDING` counting as equal
    (``0.935 - 0.955`` meets ``>= -0.02``). A threshold of 0 needs an exact 0; NaN meets nothing; an infinity equals
    only itself."""
    if op not in _OPS:
        raise ValueError(f"unknown comparison {op!r}; use one of {sorted(_OPS)}")
    if math.isnan(value) or math.isnan(threshold):
        return False
    if math.isclose(value, threshold, rel_tol=ROUNDING):
        return op in (">=", "<=")
    return bool(_OPS[op](value, threshold))


def _finite_scalar(x: Any) -> bool:
    """Whether ``x`` is one finite number (a Python, numpy or 0-d torch scalar; not a string)."""
    if isinstance(x, (str, bytes)):
        return False
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _measured_value(value: Any) -> float:
    """``value`` as a float; ``ValueError`` for a NaN or an infinity (a failed measurement is not judged)."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"claim value is {value}: the measurement failed, it cannot be judged")
    return value


def claim(value: float, threshold: float, op: str = ">=", note: str | None = None, *, kind: str | None = None,
          reason: str | None = None, **extra: Any) -> dict:
    """A paper's statement tested on this run: ``holds = value <op> threshold`` (:func:`compare`).

    ``ValueError`` when ``value`` or ``threshold`` is not a finite number. ``kind`` (one of :data:`DIAGNOSES`) and
    ``reason`` (one line), given together before the run, say why the claim misses at our scale.
    """
    return judge(measure(value, note, kind=kind, reason=reason, **extra), threshold, op)


#: the keys a claim's verdict sets (:func:`claim`), which a measurement (:func:`measure`) must not carry
VERDICT_KEYS = ("holds", "threshold", "op")


def measure(value: float, note: str | None = None, *, kind: str | None = None, reason: str | None = None,
            **extra: Any) -> dict:
    """A paper's statement measured on this run, not yet judged: ``{"value", "note", ...}`` without a threshold; the
    registry judges it at :meth:`layersim.notebook.run.Run.record`. ``ValueError`` for a non-finite ``value`` or an
    ``extra`` naming :data:`VERDICT_KEYS`; ``kind``, ``reason``: :func:`diagnosis`."""
    value = _measured_value(value)
    taken = sorted(set(extra) & set(VERDICT_KEYS))
    if taken:
        raise ValueError(f"a measurement carries no {', '.join(taken)}: its verdict comes from the claims registry")
    out: dict[str, Any] = {"value": value}
    if note:
        out["note"] = note
    out.update(diagnosis(kind, reason) if kind is not None or reason is not None else {})
    out.update(extra)
    return out


def judge(measured: dict, threshold: float, op: str = ">=") -> dict:
    """A measurement (:func:`measure`) judged ``value <op> threshold`` (:func:`compare`), other keys kept;
    ``ValueError`` for a non-finite ``threshold`` or a ``measured`` that is not a measurement."""
    taken = sorted(set(measured) & set(VERDICT_KEYS))
    if taken or "value" not in measured:
        raise ValueError(f"not a measurement (it {'carries ' + ', '.join(taken) if taken else 'has no value'}): "
                         "build it with results.measure")
    value = _measured_value(measured["value"])
    if not _finite_scalar(threshold):
        raise ValueError(f"claim threshold is {threshold!r}: a threshold is a finite number")
    rest = {k: v for k, v in measured.items() if k != "value"}
    return {"holds": compare(value, threshold, op), "value": value, "threshold": threshold, "op": op, **rest}


def diagnosis(kind: str | None, reason: str | None) -> dict:
    """``{"kind", "reason"}`` of a claim that misses: a ``ValueError`` for a kind not in :data:`DIAGNOSES`
    or a reason that is missing, empty or longer than one line."""
    if kind not in DIAGNOSES:
        raise ValueError(f"a diagnosis kind is one of {', '.join(map(repr, DIAGNOSES))}, got {kind!r}")
    if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
        raise ValueError(f"a diagnosis needs a one-line reason, got {reason!r}")
    return {"kind": kind, "reason": reason.strip()}


def diagnose(claims: dict, diagnoses: dict[str, tuple[str, str]]) -> dict:
    """``claims`` with the diagnoses ``{name: (kind, reason)}`` added (:func:`diagnosis`); ``ValueError`` for a name
    that is not a claim."""
    unknown = sorted(set(diagnoses) - set(claims))
    if unknown:
        raise ValueError(f"no claim named {unknown}: the claims are {sorted(claims)}")
    return {name: {**c, **diagnosis(*diagnoses[name])} if name in diagnoses else c for name, c in claims.items()}


def to_jsonable(obj: Any) -> Any:
    """Convert numpy / torch scalars and arrays (recursively) to plain JSON types."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "detach"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def check_claims(claims: dict) -> None:
    """A ``ValueError`` naming a claim without a verdict (``holds``) or a ``value``."""
    for name, c in claims.items():
        if not {"holds", "value"} <= set(c):
            raise ValueError(f"claim {name!r} lacks 'holds' or 'value': {c}")


def write_metrics(folder: Path, notebook: str, scale: str, params: dict, claims: dict, **measured: Any) -> Path:
    """Write ``folder/metrics.json`` with the run's parameters, measured numbers and claims. In a rehearsal of the
    paper scale the file always carries the rehearsal's mark, so that none can pass for a result: the one given in
    ``measured[rehearsal.KEY]`` (with what the run cut), else :func:`layersim.notebook.rehearsal.mark` of no cut (the
    ladder readers, which cut nothing)."""
    check_claims(claims)
    if scale == "paper" and rehearsal.active() and rehearsal.KEY not in measured:
        measured = {**measured, rehearsal.KEY: rehearsal.mark({})}
    payload = {"notebook": notebook, "scale": check_scale(scale), "params": params, "claims": claims, **measured}
    return writers.write_text(Path(folder) / "metrics.json",
                              json.dumps(to_jsonable(payload), indent=2, sort_keys=False) + "\n", protect=True)


def save_figure(fig, folder: Path, name: str, dpi: int = 120) -> Path:
    """Save a matplotlib figure as ``folder/<name>.png`` and return the path."""
    path = Path(folder) / f"{name}.png"
    with writers.atomic_path(path, protect=True) as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png")
    return path


def summary(claims: dict, digits: int = 3, **numbers: Any) -> dict:
    """A small, rounded digest of a run for a reader (nbval compares its keys and list lengths at smoke scale)."""
    def rnd(v):
        v = to_jsonable(v)
        if isinstance(v, list):
            return [rnd(x) for x in v]
        if isinstance(v, dict):
            return {k: rnd(x) for k, x in v.items()}
        return round(v, digits) if isinstance(v, float) else v

    out = {k: rnd(v) for k, v in numbers.items()}
    out["claims"] = {k: bool(c["holds"]) for k, c in claims.items()}
    return out


def format_value(value: float | None) -> str:
    """Three decimals, or three significant digits for smaller values; ``NaN``, ``inf``, ``-inf`` or ``none`` for
    non-finite or missing values."""
    if not seeds.is_finite_number(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return "none" if value is None else markup.cell(repr(value))
    return f"{value:.3f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.3g}"


def format_threshold(threshold: float | None) -> str:
    """A threshold as ``:g`` writes it (``0.9``, ``1e-05``); ``NaN``, ``inf`` or ``none`` as :func:`format_value`."""
    return f"{threshold:g}" if seeds.is_finite_number(threshold) else format_value(threshold)


def claims_table(claims: dict) -> str:
    """A Markdown table of the claims: name, verdict with ``k/n`` seeds, measured value (median, with the seeds'
    range), threshold and note with the diagnosis of a miss, strings escaped; a non-finite value shows as not
    holding."""
    rows = []
    for name, c in claims.items():
        value = format_value(c.get("value"))
        values = c.get("values", ())
        if len(values) > 1 and all(seeds.is_finite_number(v) for v in values):
            value += f" ({format_value(min(values))} to {format_value(max(values))})"
        threshold = f"{c.get('op', '>=')} {format_threshold(c['threshold'])}" if "threshold" in c else ""
        note = "; ".join(filter(None, [seeds.value_problem(c), c.get("note", "")]))
        if "kind" in c and seeds.misses_somewhere(c):
            note = (f"{note}; " if note else "") + f"why it misses: {c['kind']} ({c['reason']})"
        rows.append([markup.code(name), seeds.verdict(c), value, threshold, markup.cell(note)])
    return markup.table(["claim", "holds (seeds)", "value", "threshold", "note"], rows, raw=True)
