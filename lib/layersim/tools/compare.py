"""How close one run came to another: ``metrics.json`` compared notebook by notebook.

``python -m layersim.tools.compare [RUN] [REFERENCE]`` (``make compare``) compares two runs, each a folder of
``<paper>/<stem>/metrics.json`` or ``git:<rev>`` (default: ``figures/`` against ``git:HEAD``). Per notebook it
reports flipped verdicts, the largest relative differences (claims' values, all numbers), structural changes and
numbers that are not finite or outside a :class:`Tolerance`; run facts (:data:`RUN_FACTS`) are left out. The smoke
checks of ``make test`` use the same functions (see docs/modules.md, `layersim.tools.compare`).

Exit status of the command: 0 when every compared notebook has the same verdicts, the same structure and (with
``--rtol``/``--atol``) every number within the tolerance; 1 otherwise; 2 when nothing could be compared.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layersim.core.paths import repo_root
from layersim.notebook import seeds

#: keys that describe the run rather than its results: timings, weight checksums, cache hits
RUN_FACTS = re.compile(r"seconds|sha256|from_cache")


@dataclass(frozen=True)
class Tolerance:
    """Two numbers agree when ``|new - ref| <= atol + rtol * |ref|``; a number that is not finite agrees only with
    itself (:func:`same_number`)."""

    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self):
        for name in ("rtol", "atol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"tolerance {name} must be a finite number >= 0, got {v!r}")

    def allows(self, ref: float, new: float) -> bool:
        """Whether ``new`` agrees with ``ref`` within this tolerance."""
        if not (math.isfinite(ref) and math.isfinite(new)):
            return same_number(ref, new)
        return abs(new - ref) <= self.atol + self.rtol * abs(ref)


def group_of(key: str) -> str:
    """The group a flattened key belongs to: ``claims.<name>`` for a claim's fields, else its top-level key
    (``"curves.plain[3]"`` -> ``"curves"``). Tolerances can be set per group."""
    if key.startswith("claims."):
        return ".".join(key.split(".")[:2]).split("[")[0]
    return re.split(r"[.\[]", key, maxsplit=1)[0]


@dataclass(frozen=True)
class Tolerances:
    """A :class:`Tolerance` per group of keys (:func:`group_of`), and ``default`` for the other groups."""

    default: Tolerance
    groups: dict = field(default_factory=dict)

    def for_key(self, key: str) -> Tolerance:
        return self.groups.get(group_of(key), self.default)

    @classmethod
    def from_json(cls, entry: dict) -> "Tolerances":
        """From a ``tolerances.json`` entry: ``{"rtol", "atol", "groups": {group: {"rtol", "atol"}}}``."""
        return cls(Tolerance(float(entry["rtol"]), float(entry["atol"])),
                   {g: Tolerance(float(t["rtol"]), float(t["atol"])) for g, t in entry.get("groups", {}).items()})


def is_number(v: Any) -> bool:
    """A JSON number (``bool`` is not one), NaN and infinities included."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def same_number(a: float, b: float) -> bool:
    """Whether two numbers are the same: equal, or both NaN (``nan == nan`` is false)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def flatten(metrics: Any, prefix: str = "") -> dict[str, Any]:
    """The leaves of a ``metrics.json`` as ``{"a.b[2].c": value}``, run facts (:data:`RUN_FACTS`) left out.

    Lists keep their length visible: an empty list is the leaf ``[]``.
    """
    out: dict[str, Any] = {}
    if isinstance(metrics, dict):
        for k, v in metrics.items():
            if RUN_FACTS.search(str(k)):
                continue
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(metrics, list):
        if not metrics:
            out[prefix] = []
        for i, v in enumerate(metrics):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = metrics
    return out


_NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(?![\w.])")


def mask_numbers(text: str) -> str:
    """``text`` with every number replaced by ``#``: a note's numbers are compared as numbers elsewhere, not as text."""
    return _NUMBER.sub("#", text)


def without_run_facts(metrics: Any) -> Any:
    """A copy of ``metrics`` without the keys that describe the run (:data:`RUN_FACTS`), e.g. for a reference file."""
    if isinstance(metrics, dict):
        return {k: without_run_facts(v) for k, v in metrics.items() if not RUN_FACTS.search(str(k))}
    if isinstance(metrics, list):
        return [without_run_facts(v) for v in metrics]
    return metrics


def relative_difference(a: float, b: float) -> float:
    """``|a - b| / max(|a|, |b|)``: 0 for the same numbers (:func:`same_number`), at most 2 for finite ones, ``inf``
    when one is not finite and they differ."""
    if same_number(a, b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


@dataclass
class Comparison:
    """One notebook's run (``new``) against its reference (``ref``)."""

    notebook: str
    flipped: list[str] = field(default_factory=list)
    fragile: list[str] = field(default_factory=list)
    structure: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    not_finite: list[str] = field(default_factory=list)  # a NaN or an infinity against another number
    claims_rel: float = 0.0
    claims_key: str = ""
    claims_pair: tuple = ()
    all_rel: float = 0.0
    all_key: str = ""
    all_pair: tuple = ()
    n_claims: int = 0
    n_numbers: int = 0
    tolerance_used: float = 0.0  # the largest |difference| / allowed difference (<= 1 within the tolerance)

    def ok(self) -> bool:
        """Same structure, every verdict the same (fragile flips aside), every number finite where the other
        side's is, and within tolerance."""
        return not (self.structure or self.not_finite or self.outside or set(self.flipped) - set(self.fragile))

    def problems(self) -> list[str]:
        """One line per reason :meth:`ok` is false."""
        hard = [c for c in self.flipped if c not in self.fragile]
        return ([f"verdict flipped: {c}" for c in hard] + self.structure
                + [f"not a finite number: {o}" for o in self.not_finite]
                + [f"outside the tolerance: {o}" for o in self.outside])


def _fragile(claim: dict, tol: Tolerance) -> bool:
    """Whether the claim's value lies within ``tol`` of its threshold (its verdict is decided by rounding)."""
    t, v = claim.get("threshold"), claim.get("value")
    return seeds.is_finite_number(t) and seeds.is_finite_number(v) and tol.allows(t, v)


def flipped_claims(ref: dict, new: dict) -> list[str]:
    """The claims of both payloads whose verdict differs, sorted: a claim holds when its ``holds`` says so and its
    value is a finite number (:func:`layersim.notebook.seeds.holds`)."""
    ref_claims, new_claims = ref.get("claims") or {}, new.get("claims") or {}
    return sorted(n for n in ref_claims.keys() & new_claims.keys()
                  if seeds.holds(ref_claims[n]) != seeds.holds(new_claims[n]))


def compare_metrics(ref: dict, new: dict, tolerance: Tolerance | Tolerances | None = None,
                    notebook: str = "") -> Comparison:
    """Compare two ``metrics.json`` payloads: flipped verdicts (*fragile* when a value lies within the tolerance of its
    threshold), the largest differences, structural changes, numbers not finite or outside the tolerance.
    ``tolerance``: one for every number, or :class:`Tolerances` per group of keys; without one, numbers are
    measured, never failed."""
    if isinstance(tolerance, Tolerance):
        tolerance = Tolerances(tolerance)
    out = Comparison(notebook or str(ref.get("notebook", "")))
    ref_claims, new_claims = ref.get("claims") or {}, new.get("claims") or {}
    out.flipped = flipped_claims(ref, new)
    if tolerance is not None:  # a flip is fragile only between two measured (finite) values
        out.fragile = [name for name in out.flipped
                       if all(seeds.is_finite_number(c[name].get("value")) for c in (ref_claims, new_claims))
                       and any(_fragile(c[name], tolerance.for_key(f"claims.{name}.value"))
                               for c in (ref_claims, new_claims))]
    fa, fb = flatten(ref), flatten(new)
    for key in sorted(fa.keys() - fb.keys()):
        out.structure.append(f"{key}: only in the reference")
    for key in sorted(fb.keys() - fa.keys()):
        out.structure.append(f"{key}: only in this run")
    for key in sorted(fa.keys() & fb.keys()):
        a, b = fa[key], fb[key]
        if key.startswith("claims.") and key.endswith(".holds"):
            continue  # verdicts are judged above, with their fragility
        if is_number(a) and is_number(b) and not key.startswith("params."):  # settings are not measured
            out.n_numbers += 1
            rel = relative_difference(float(a), float(b))
            is_claim = key.startswith("claims.") and key.endswith(".value")
            out.n_claims += is_claim
            if is_claim and rel > out.claims_rel:
                out.claims_rel, out.claims_key, out.claims_pair = rel, key, (a, b)
            if rel > out.all_rel:
                out.all_rel, out.all_key, out.all_pair = rel, key, (a, b)
            if not (math.isfinite(a) and math.isfinite(b)):  # with a tolerance or without
                if not same_number(a, b):
                    out.not_finite.append(f"{key}: {a!r} -> {b!r}")
                continue
            tol = tolerance.for_key(key) if tolerance is not None else None
            if tol is not None and a != b:
                allowed, diff = tol.atol + tol.rtol * abs(a), abs(b - a)
                out.tolerance_used = max(out.tolerance_used, diff / allowed if allowed else math.inf)
                if diff > allowed:  # not Tolerance.allows
                    out.outside.append(f"{key}: {a!r} -> {b!r} (differs by {diff:.2g}, allowed {allowed:.2g})")
        elif isinstance(a, str) and isinstance(b, str):
            if mask_numbers(a) != mask_numbers(b):  # a note's numbers are measured, its words are not
                out.structure.append(f"{key}: {a!r} -> {b!r}")
        elif type(a) is not type(b) or not (same_number(a, b) if is_number(a) else a == b):
            out.structure.append(f"{key}: {a!r} -> {b!r}")
    return out


# ----- where the runs are ---------------------------------------------------------------------------------------


#: the key under which a record lists the PNG figures its run wrote (a missing figure is a structural change)
FIGURES = "png_files"


def record(folder: Path, since: float | None = None) -> dict:
    """A run folder's ``metrics.json`` with its PNG names under :data:`FIGURES`. With ``since`` (a ``time.time()``)
    only files written since count: an older ``metrics.json`` raises ``ValueError``, older PNGs are ignored."""
    folder = Path(folder)
    path = folder / "metrics.json"
    if not path.is_file() or (since is not None and path.stat().st_mtime < since):
        raise ValueError(f"{folder}: the run wrote no metrics.json")
    data = json.loads(path.read_text())
    data[FIGURES] = figure_names(folder, since)
    return data


def figure_names(folder: Path, since: float | None = None) -> list[str]:
    """The sorted names of the PNG files in ``folder`` (with ``since``: those written at or after it)."""
    return sorted(p.name for p in Path(folder).glob("*.png") if since is None or p.stat().st_mtime >= since)


def _key(rel: str) -> str | None:
    """The notebook key of a metrics file's relative path: ``p/s/metrics.json`` or ``p/s.metrics.json`` -> ``p/s``."""
    if rel.endswith("/metrics.json"):
        return rel[: -len("/metrics.json")]
    if rel.endswith(".metrics.json"):
        return rel[: -len(".metrics.json")]
    return None


def load_run(source: str | Path, root: Path | None = None) -> dict[str, dict]:
    """Every ``metrics.json`` of a run, keyed by ``<paper>/<stem>``: ``source`` is a folder of
    ``<paper>/<stem>/metrics.json`` (or ``<paper>/<stem>.metrics.json``) or ``git:<rev>`` (``figures/`` at that
    commit). ``ValueError`` naming a missing or empty source."""
    root = root or repo_root()
    text = str(source)
    files: dict[str, str] = {}
    if text.startswith("git:"):
        rev = text[4:] or "HEAD"
        try:
            names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", "figures/"], cwd=root,
                                   capture_output=True, text=True, check=True).stdout.split()
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            raise ValueError(f"{text}: not a commit of the repository at {root}") from exc
        pngs: dict[str, list[str]] = {}
        for name in names:
            rel = name[len("figures/"):]
            key = _key(rel)
            if key:
                files[key] = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=root, capture_output=True,
                                            text=True, check=True).stdout
            elif rel.endswith(".png"):
                pngs.setdefault(rel.rsplit("/", 1)[0], []).append(rel.rsplit("/", 1)[1])
    else:
        folder = Path(source)
        if not folder.is_absolute() and not folder.exists():
            folder = root / folder
        if not folder.is_dir():
            raise ValueError(f"{source}: no such folder")
        pngs = {}
        for path in sorted(folder.rglob("*metrics.json")):
            rel = path.relative_to(folder).as_posix()
            key = _key(rel)
            if key:
                files[key] = path.read_text()
                if rel.endswith("/metrics.json"):
                    pngs[key] = figure_names(path.parent)
    if not files:
        raise ValueError(f"{source}: holds no metrics.json (expected <paper>/<stem>/metrics.json)")
    out = {}
    for key, content in files.items():
        try:
            out[key] = json.loads(content)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}: {key}/metrics.json is not valid JSON ({exc})") from exc
        if key in pngs:
            out[key][FIGURES] = sorted(pngs[key])
    return out


def compare_runs(ref: dict[str, dict], new: dict[str, dict],
                 tolerances: dict[str, Tolerances] | Tolerance | None = None) -> list[Comparison]:
    """:func:`compare_metrics` for every notebook of ``new`` that ``ref`` has too, in order.

    ``tolerances`` is one :class:`Tolerance` for all, or one per notebook key (missing keys: none).
    """
    out = []
    for key in sorted(ref.keys() & new.keys()):
        tol = tolerances.get(key) if isinstance(tolerances, dict) else tolerances
        out.append(compare_metrics(ref[key], new[key], tol, notebook=key))
    return out


def spread(runs: list[dict]) -> dict[str, Any]:
    """How far the numbers of several runs move against the first, ``params`` aside: ``atol``, the largest absolute
    change of a value under 1; ``rtol``, the largest relative change of the others; ``worst_abs`` and ``worst_rel``,
    their keys; ``flipped``, the claims whose verdict changed; ``groups``, both per group of keys. ``ValueError``
    for a non-finite number where the first run has another."""
    if len(runs) < 2:
        raise ValueError("spread needs at least two runs")
    base = flatten(runs[0])
    out = {"atol": 0.0, "rtol": 0.0, "worst_abs": "", "worst_rel": "", "flipped": [], "groups": {}}
    for i, other in enumerate(runs[1:], 1):
        out["flipped"] = sorted(set(out["flipped"]) | set(flipped_claims(runs[0], other)))
        flat = flatten(other)
        for key, a in base.items():
            b = flat.get(key)
            if key.startswith("params.") or not (is_number(a) and is_number(b)):
                continue
            group = out["groups"].setdefault(group_of(key), {"atol": 0.0, "rtol": 0.0})
            if not (math.isfinite(a) and math.isfinite(b)):
                if not same_number(a, b):
                    raise ValueError(f"{key} is {b!r} in run {i} but {a!r} in the first run: "
                                     "a number that is not finite is not a spread a tolerance can cover")
                continue
            d = abs(float(b) - float(a))
            if abs(a) < 1:
                group["atol"] = max(group["atol"], d)
                if d > out["atol"]:
                    out["atol"], out["worst_abs"] = d, key
            else:
                group["rtol"] = max(group["rtol"], d / abs(a))
                if d / abs(a) > out["rtol"]:
                    out["rtol"], out["worst_rel"] = d / abs(a), key
    return out


# ----- the command ----------------------------------------------------------------------------------------------


def _diff(rel: float, key: str, pair: tuple) -> str:
    """``1.2e-03 (0.415 -> 0.4155) `key```, or ``0``."""
    if not rel:
        return "0"
    return f"{rel:.1e} ({pair[0]:.4g} -> {pair[1]:.4g}) `{key}`"


def strict_json(obj: Any) -> Any:
    """``obj`` with every float that is not finite written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``,
    which strict JSON readers accept."""
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    return obj


def markdown(comparisons: list[Comparison]) -> str:
    """A Markdown table: one row per notebook with its verdicts, largest differences and status."""
    rows = ["| notebook | verdicts | max rel. diff, claims | max rel. diff, all numbers | status |",
            "|---|---|---|---|---|"]
    for c in comparisons:
        if c.flipped:
            verdicts = "flipped: " + ", ".join(f"`{n}`" + (" (fragile)" if n in c.fragile else "") for n in c.flipped)
        else:
            verdicts = f"same ({c.n_claims})" if c.n_claims else "same"
        claims = _diff(c.claims_rel, c.claims_key.split(".")[1] if c.claims_key else "", c.claims_pair)
        allv = _diff(c.all_rel, c.all_key, c.all_pair)
        status = "ok" if c.ok() else "**differs**: " + "; ".join(c.problems()[:3]) + (
            f" (+{len(c.problems()) - 3} more)" if len(c.problems()) > 3 else "")
        rows.append(f"| {c.notebook} | {verdicts} | {claims} | {allv} | {status} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.compare", description=doc[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc[-1])
    ap.add_argument("run", nargs="?", default="figures",
                    help="the run: a folder of <paper>/<stem>/metrics.json or git:<rev> (default: figures)")
    ap.add_argument("reference", nargs="?", default="git:HEAD",
                    help="what it is compared with, same forms (default: git:HEAD, the committed figures/)")
    ap.add_argument("--rtol", type=float, default=None, help="fail numbers beyond atol + rtol*|reference|")
    ap.add_argument("--atol", type=float, default=None, help="see --rtol")
    ap.add_argument("--nb", default="", help="only notebooks whose key contains this text (several: a02,t06)")
    ap.add_argument("--json", action="store_true", help="print the comparisons as JSON instead of a table")
    args = ap.parse_args(argv)
    try:
        tol = (Tolerance(args.rtol or 0.0, args.atol or 0.0)
               if args.rtol is not None or args.atol is not None else None)
        new, ref = load_run(args.run), load_run(args.reference)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    patterns = [p.strip() for p in args.nb.split(",") if p.strip()]
    new = {k: v for k, v in new.items() if not patterns or any(p in k for p in patterns)}
    comparisons = compare_runs(ref, new, tol)
    if not comparisons:
        print(f"error: no notebook of {args.run} is in {args.reference}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(strict_json([c.__dict__ | {"ok": c.ok()} for c in comparisons]), indent=2, allow_nan=False))
    else:
        print(f"{args.run} against {args.reference}" + (f", tolerance rtol={tol.rtol:g} atol={tol.atol:g}" if tol else ""))
        print()
        print(markdown(comparisons))
        only = sorted(set(new) - set(ref))
        if only:
            print(f"\nnot in {args.reference}: {', '.join(only)}")
        bad = [c for c in comparisons if not c.ok()]
        print(f"\n{len(comparisons) - len(bad)} of {len(comparisons)} notebooks agree"
              + (f"; differing: {', '.join(c.notebook for c in bad)}" if bad else ""))
    return 0 if all(c.ok() for c in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main())
