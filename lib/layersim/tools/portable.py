"""The smoke checks under other CPU kernels and thread counts: ``python -m layersim.tools.portable``
(``make test-portable``).

Runs smoke notebooks on this machine under each kernel setting of :data:`SETTINGS` (torch's, oneDNN's and MKL's
instruction sets, thread counts), each from an empty checkpoint cache, and checks every run against its committed
smoke reference as ``make test`` does (:mod:`layersim.tools.smoke_check`); exit 0 when every run passes.
``--measure`` also writes ``tests/notebooks/tolerances.json`` from how far the numbers moved (:func:`measure`,
:func:`notebook_entry`), and only when every run succeeded (:func:`why_not_measurable`; otherwise exit 1) (see
docs/modules.md, `layersim.tools.portable`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from layersim.core import machine, writers
from layersim.core.paths import cache_dir, repo_root
from layersim.tools import compare, plans, smoke_check

#: kernel settings, each the environment of one run: this machine's own kernels with 2 threads, and
#: torch's, oneDNN's and MKL's generic (pre-AVX) and AVX2 kernels with 1 and 3 threads. The OpenBLAS
#: variables (OPENBLAS_CORETYPE) are left alone: some processors need the values they have.
SETTINGS = {
    "native-2t": {"OMP_NUM_THREADS": "2"},
    "default-1t": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                   "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "1"},
    "avx2-3t": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OMP_NUM_THREADS": "3"},
}

#: the notebooks whose smoke numbers moved most between kernel settings, here or on other machines
#: (benchmarks/REPRODUCIBILITY.md): a02 and t06 (training amplifies the rounding; one probe sample),
#: t08 (a token of the logit lens), the layer report, a11 and r05 (moved on other machines)
SENSITIVE = "a02_emergence,a11_pretrained_text,r05_llm_redundancy,t06_transfer,t08_llm_saturation,layer_report"

#: a tolerance is this many times the largest spread seen
SAFETY = 4.0
#: and never below this (float64 work agrees to ~1e-12 across kernels; float32 to ~1e-6)
FLOOR = 1e-5

#: caches that hold data, not computations: shared with the runs instead of rebuilt
DATA_CACHES = ("fashion-mnist", "text", "models")


def round_up(x: float) -> float:
    """``x`` rounded up to one significant digit (0.0123 -> 0.02)."""
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x))
    m = math.ceil(round(x / 10 ** e, 9))
    return float(f"{m}e{e}")


def tolerance_from(measured: dict, reported: dict | None = None) -> dict:
    """``{"rtol", "atol"}`` covering :data:`SAFETY` times the measured and the reported spreads."""
    reported = reported or {}
    return {k: max(FLOOR, round_up(SAFETY * max(measured.get(k, 0.0), reported.get(k, 0.0))))
            for k in ("rtol", "atol")}


def notebook_entry(spread: dict, runs: list[str], reported: dict | None = None) -> dict:
    """A notebook's ``tolerances.json`` entry from :func:`layersim.tools.compare.spread` of its runs: a default of
    :func:`tolerance_from` the lower median spread of the groups that moved, and its own tolerance for a group that
    moved more, here or as ``reported`` from another machine (``{group: {"atol" or "rtol": spread}}``). The measured
    spreads are kept."""
    reported = reported or {}
    moved = [v for v in spread["groups"].values() if v["atol"] or v["rtol"]]
    typical = {k: _low_median([v[k] for v in moved if v[k]]) for k in ("atol", "rtol")}
    default = tolerance_from(typical)
    groups = {}
    for group in sorted(set(spread["groups"]) | set(reported)):
        own = tolerance_from(spread["groups"].get(group, {}), reported.get(group))
        if own["atol"] > default["atol"] or own["rtol"] > default["rtol"]:
            groups[group] = {k: max(own[k], default[k]) for k in ("rtol", "atol")}
    entry = {**default, "groups": groups, "measured": {
        "runs": runs, "flipped": spread["flipped"],
        "atol": spread["atol"], "worst_abs": spread["worst_abs"],
        "rtol": spread["rtol"], "worst_rel": spread["worst_rel"],
        "groups": {g: v for g, v in sorted(spread["groups"].items()) if v["atol"] or v["rtol"]}}}
    if reported:
        entry["reported"] = reported
    return entry


def _low_median(values: list[float]) -> float:
    """The lower median (an element of ``values``, not a mean of two); 0 for none."""
    return sorted(values)[(len(values) - 1) // 2] if values else 0.0


def fresh_cache(folder: Path) -> Path:
    """An empty cache folder that shares the project's data caches (:data:`DATA_CACHES`) through links."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in DATA_CACHES:
        link, target = folder / name, cache_dir(name)
        if not link.exists():
            link.symlink_to(target, target_is_directory=True)
    return folder


def run_setting(name: str, env: dict, notebooks: str, work: Path) -> Path:
    """Run the smoke notebooks matching ``notebooks`` under the kernel setting ``env``; returns the
    output root (``<work>/<name>/out``). The runner's log goes to ``<work>/<name>/log``."""
    folder = work / name
    if folder.exists():  # an earlier run's outputs and checkpoints: this run starts from nothing
        shutil.rmtree(folder)
    out = folder / "out"
    cache = fresh_cache(folder / "cache")
    environ = {**os.environ, **env, "LAYERSIM_OUT": str(out), "LAYERSIM_CACHE": str(cache)}
    with open(folder / "log", "w") as log:
        subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--scale", "smoke", "--nb", notebooks],
                       env=environ, stdout=log, stderr=subprocess.STDOUT, check=False)
    return out


def check_run(out: Path, refs: Path, expected: list[str] | None = None,
              tolerances: bool = True) -> dict[str, compare.Comparison | str]:
    """Every notebook of the smoke run ``out`` against its reference under ``refs``: ``{key: Comparison or why it
    failed}`` (a key of ``expected`` without an output folder did not run). ``tolerances=False``: numbers measured,
    not failed."""
    results: dict[str, compare.Comparison | str] = {}
    for nb in sorted(refs.rglob("*.ipynb")):
        key = f"{nb.parent.name}/{nb.stem}"
        folder = out / nb.parent.name / nb.stem
        if not folder.is_dir():
            if expected and key in expected:
                results[key] = "did not run (see the log)"
            continue
        try:
            if tolerances:
                results[key] = smoke_check.compare_with_reference(nb, folder)
            else:
                run = compare.record(folder)
                ref = json.loads(nb.with_suffix(".metrics.json").read_text())
                results[key] = compare.compare_metrics(ref, run, notebook=key)
        except (smoke_check.SmokeMismatch, ValueError) as exc:
            results[key] = f"failed to run ({exc})"
    return results


def measure(runs: dict[str, Path], refs: Path, previous: dict | None = None) -> dict:
    """``tolerances.json``: per notebook, the spread between the runs of every setting and the committed
    reference, and the tolerance :func:`tolerance_from` sets from it. Notebooks not run keep their entry, and the
    settings and dates of the earlier measurements stay listed beside this one's."""
    previous = previous or {"notebooks": {}}
    notebooks = dict(previous.get("notebooks", {}))
    measured = []
    for nb in sorted(refs.rglob("*.ipynb")):
        key = f"{nb.parent.name}/{nb.stem}"
        records = [json.loads(nb.with_suffix(".metrics.json").read_text())]
        names = ["reference"]
        for name, out in runs.items():
            try:
                records.append(compare.record(out / nb.parent.name / nb.stem))
                names.append(name)
            except ValueError:
                continue
        if len(records) < 2:
            continue
        reported = notebooks.get(key, {}).get("reported")
        notebooks[key] = notebook_entry(compare.spread(records), names, reported)
        measured.append(key)
    today = f"{dt.date.today().isoformat()}, {machine.cpu_model(flags=True)}"
    if previous.get("measured_on") and set(measured) != set(notebooks):  # a partial measurement: both dates
        today = f"{previous['measured_on']}; {today} ({', '.join(measured)})"
    return {
        "about": ("Smoke-check tolerances: a number passes when |run - reference| <= atol + rtol*|reference|, "
                  "with the tolerance of its group of keys (a claim, or a top-level key of metrics.json) where "
                  f"one is listed, else the notebook's. The notebook's is {SAFETY:g} x the median spread of its "
                  "groups that moved between the reference and the runs under the kernel settings below; a "
                  f"group that moved more (there, or as reported from another machine) gets {SAFETY:g} x its own; "
                  f"rounded up, at least {FLOOR:g}. Written by python -m layersim.tools.portable --measure."),
        "measured_on": today,
        "settings": {**previous.get("settings", {}),
                     **{k: SETTINGS.get(k, "a run made by hand, named for its setting") for k in runs}},
        "default": {"rtol": FLOOR, "atol": FLOOR},
        "notebooks": dict(sorted(notebooks.items())),
    }


def why_not_measurable(results: dict[str, dict[str, compare.Comparison | str]]) -> str:
    """Why tolerances cannot be measured from the checked runs ``{setting: check_run(...)}``, or "" when they can: at
    least one notebook ran, and every run of every setting wrote a ``metrics.json`` of its reference's structure,
    finite wherever the reference is."""
    failed = [(s, k, c) for s, r in results.items() for k, c in sorted(r.items())
              if isinstance(c, str) or c.structure or c.not_finite]
    if not any(isinstance(c, compare.Comparison) for r in results.values() for c in r.values()):
        first = f" ({failed[0][0]}: {failed[0][1]} {failed[0][2]})" if failed else ""
        return f"no run to measure from: none of the settings ran a smoke notebook{first}"
    empty = [s for s, r in results.items() if not r]
    if empty:
        return f"the run {empty[0]} holds none of the smoke notebooks"
    if failed:
        setting, key, c = failed[0]
        what = c if isinstance(c, str) else (c.structure + [f"not a finite number: {x}" for x in c.not_finite])[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"the run {setting} of {key} did not succeed: {what}{more}"
    return ""


def report(results: dict[str, dict[str, compare.Comparison | str]]) -> str:
    """A Markdown table: notebook x setting, each cell ``ok`` with the largest difference as a share of
    its tolerance, or what differs."""
    settings = list(results)
    keys = sorted({k for r in results.values() for k in r})
    rows = ["| notebook | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for key in keys:
        cells = []
        for s in settings:
            c = results[s].get(key)
            if c is None:
                cells.append("-")
            elif isinstance(c, str):
                cells.append(f"**{c}**")
            elif c.ok():
                cells.append(f"ok ({c.tolerance_used:.0%} of the tolerance)"
                             + (f", fragile flip: {', '.join(c.fragile)}" if c.fragile else ""))
            else:
                cells.append("**" + "; ".join(c.problems()[:2]) + "**")
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.portable", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nb", default=SENSITIVE, help=f"notebooks (runner --nb patterns; default: {SENSITIVE})")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"which of {', '.join(SETTINGS)}")
    ap.add_argument("--work", default=None, help="where the runs go (default: runs/portable)")
    ap.add_argument("--reuse", action="store_true", help="check the runs already in --work instead of running")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=FOLDER",
                    help="a run made by hand (its LAYERSIM_OUT folder) to check and measure with the others")
    ap.add_argument("--measure", action="store_true", help="write tests/notebooks/tolerances.json from the runs")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown or not (chosen or args.also):
        ap.error(f"unknown setting(s) {unknown}: choose from {', '.join(SETTINGS)}")
    root = repo_root()
    try:  # a selection that names nothing is refused before any setting runs
        selected = plans.discover(args.nb)
    except ValueError as exc:
        ap.error(str(exc))
    refs = root / "tests" / "notebooks"
    work = Path(args.work) if args.work else root / "runs" / "portable"
    outs = {}
    for name in chosen:
        if args.reuse:
            outs[name] = work / name / "out"
            continue
        t0 = time.perf_counter()
        print(f"[{name}] {' '.join(f'{k}={v}' for k, v in SETTINGS[name].items())}: running {args.nb} ...",
              flush=True)
        outs[name] = run_setting(name, SETTINGS[name], args.nb, work)
        print(f"[{name}] done in {time.perf_counter() - t0:.0f} s (log: {work / name / 'log'})", flush=True)
    for extra in args.also:
        name, sep, folder = extra.partition("=")
        if not sep or not Path(folder).is_dir():
            ap.error(f"--also {extra!r}: give NAME=FOLDER with an existing folder")
        outs[name] = Path(folder)
    expected = [p.relative_to(root / "notebooks").with_suffix("").as_posix() for p in selected]
    if args.measure:
        path = refs / smoke_check.TOLERANCES
        checked = {name: check_run(out, refs, expected if name in chosen else None, tolerances=False)
                   for name, out in outs.items()}
        why = why_not_measurable(checked)
        if not why:
            try:
                previous = json.loads(path.read_text()) if path.is_file() else None
                text = json.dumps(measure(outs, refs, previous), indent=1, allow_nan=False) + "\n"
            except ValueError as exc:
                why = str(exc)
        if why:
            why = " ".join(why.splitlines())
            print(f"error: tolerances not measured, {path.relative_to(root)} left as it was: {why}", file=sys.stderr)
            return 1
        writers.write_committed(path, text, "tolerances")
        print(f"wrote {path.relative_to(root)}")
    results = {name: check_run(out, refs, expected if name in chosen else None) for name, out in outs.items()}
    print(report(results))
    bad = [(s, k) for s, r in results.items() for k, c in r.items() if isinstance(c, str) or not c.ok()]
    ran = sum(len(r) for r in results.values())
    print(f"\n{ran - len(bad)} of {ran} smoke runs agree with their references" if ran else "\nnothing ran")
    return 0 if ran and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
