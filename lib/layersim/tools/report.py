"""``layersim report``: every lens of the four papers on any model, from one extraction pass, as a notebook.

``python -m layersim report --model M --data D`` (:func:`main`) checks the names
(:func:`layersim.tools.report_inputs.check`), settings (:func:`settings_for`) and output folder (:func:`check_out`)
before anything loads, then runs ``notebooks/report/layer_report.ipynb`` with papermill, which calls
:func:`layersim.analysis.layer_report.analyze`, and exports its HTML page (see docs/modules.md,
`layersim.tools.report`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from layersim.core import locks, writers
from layersim.core.device import check_device
from layersim.core.paths import cache_dir, check_locations, repo_root, resolved_variables
from layersim.notebook import results
from layersim.notebook.run import shown_path
from layersim.tools import committed
from layersim.tools.plans import lock_place
from layersim.tools.report_inputs import DATA_SETS, DataSpec, ModelSpec, check
from layersim.tools.report_settings import PRESETS, RULES, rehearsal_mark, settings_for
from layersim.tools.runner import describe_failure, kernel_options, publish, temporary_environ

__all__ = ["KEY_LENSES", "NOTEBOOK", "PRESETS", "RULES", "check_out", "default_out", "export_html", "key_numbers",
           "kernel_name", "main", "output_folder", "recorded_settings", "rehearsal_mark", "settings_for", "slug",
           "work_folder"]


def slug(name: str) -> str:
    """A folder name for a model or data set name (``runs/report/<slug>/``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name).strip().rstrip("/")).strip("-").lower() or "model"


#: the per-layer lenses whose values the report's last cell shows, by the key it shows them under
KEY_LENSES = {"cka_to_last": "cka/to_last", "cos_to_last": "cos/to_last"}


def key_numbers(report: Any) -> dict[str, Any]:
    """What the report's last cell shows of a ``layersim.analysis.layer_report.LayerReport``: the number of layers,
    the lenses that ran and those skipped, and each lens of :data:`KEY_LENSES` that ran."""
    out = {"layers": len(report.data.layers), "ran": sorted(report.results), "skipped": sorted(report.skipped)}
    out.update({key: report.results[name] for key, name in KEY_LENSES.items() if name in report.results})
    return out


def recorded_settings(P: dict, seed: int) -> dict:
    """``P`` (:func:`settings_for`) with the seed, as ``metrics.json`` records it: an output folder inside the
    repository shown relative to it, so that no machine's folders are named."""
    out = P.get("out")
    return {**P, "seed": seed, "out": None if out is None else shown_path(Path(out))}


def _is_report_folder(folder: Path) -> bool:
    """Whether ``folder`` holds what a report writes (its executed notebook or its metrics.json)."""
    if (folder / NOTEBOOK.name).is_file():
        return True
    try:
        return json.loads((folder / "metrics.json").read_text()).get("notebook") == "report/layer_report"
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out: str | os.PathLike) -> Path:
    """``out`` resolved, if a report may write there: outside the committed results unless the switch is on
    (:func:`layersim.core.writers.check_target`), and new, empty or an earlier report's folder. ``ValueError``
    otherwise."""
    path = writers.check_target(out, "the report folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"the report folder {out} is a file")
    try:  # layersim's own bookkeeping (the mark of a folder it made, a run's lock) is no one's file
        entries = writers.foreign_files(path) if path.is_dir() else []
    except OSError as err:
        raise ValueError(f"the report folder {out} cannot be read ({err.strerror or err})") from None
    if entries and not _is_report_folder(path):
        raise ValueError(f"the report folder {out} holds files that no report wrote: choose a new or empty folder")
    return path


def ready_out(out: str | os.PathLike) -> Path:
    """``out`` made ready for a report (:func:`check_out`, then :func:`layersim.core.writers.prepare_folder`): an
    earlier report's folder is adopted as layersim's (:func:`layersim.core.writers.adopt_folder`) and its figures,
    ``metrics.json`` and ``report.html`` removed."""
    path = check_out(out)
    if path.is_dir() and _is_report_folder(path):
        writers.adopt_folder(path)
    return writers.prepare_folder(path, "the report folder")


def output_folder(out: str | os.PathLike | None, scale: str) -> Path:
    """Where a report writes, made ready (checked, writable, an earlier report's figures and numbers removed): ``out``
    if given (:func:`ready_out`), else the notebook's own folder, ``results.output_dir("report", "layer_report",
    scale)``."""
    if out:
        return ready_out(out)
    return results.output_dir("report", "layer_report", scale)


def work_folder(model: str, data: str) -> Path:
    """Where a streamed report keeps its feature memmap: ``<cache>/report/<model>__<data>/`` (never in
    ``figures/``; removed by deleting the cache)."""
    return cache_dir("report", f"{slug(model)}__{slug(data)}")


# ----------------------------------------------------------------------------- the command line


NOTEBOOK = Path("notebooks") / "report" / "layer_report.ipynb"


def export_html(executed: Path, html: Path) -> Path:
    """The executed notebook as one self-contained, sanitised HTML page (nbconvert, the ``layersim_offline`` template:
    figures embedded, code kept, nothing loaded from the network, so formulas show as LaTeX source), written whole
    or not at all."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(sanitize_html=True, template_name="layersim_offline",
                            extra_template_basedirs=[str(Path(__file__).parent / "templates")])
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    return writers.write_text(html, body, protect=True)


def default_out(model: str, data: str) -> Path:
    """A report's folder when ``--out`` is not given: ``$LAYERSIM_OUT/report/<model>__<data>`` (a relative
    ``LAYERSIM_OUT`` against the working directory), else ``runs/report/<model>__<data>``."""
    env = os.environ.get("LAYERSIM_OUT")
    base = writers.resolved(env) if env else repo_root() / "runs"
    return base / "report" / f"{slug(model)}__{slug(data)}"


#: the kinds of model and data set whose name is a path on this machine
LOCAL_KINDS = ("folder", "image-folder", "text-file")


def kernel_name(spec: ModelSpec | DataSpec, given: str) -> str:
    """The model or data set name to hand the report's kernel, which runs in ``notebooks/report/``: the resolved
    absolute path of a local folder or file (:data:`LOCAL_KINDS`), else the name ``given``."""
    if spec.kind not in LOCAL_KINDS:
        return given
    return spec.detail if isinstance(spec, ModelSpec) else spec.name


def main(argv: list[str] | None = None) -> int:
    """``python -m layersim report --model M --data D [...]``: check the names, settings and output folder, run the
    report notebook with papermill into ``--out`` (default :func:`default_out`) with absolute paths
    (:func:`kernel_name`), and export ``report.html``. Exit 2 with one line for a bad name, value, device, cache or
    folder, before anything runs; 1 naming a failed cell."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m layersim report",
                                 description="every lens of the four papers on one model and data set")
    ap.add_argument("--model", required=True, help="a registered model, tracing-vit[:scale], a Hugging Face folder or timm:NAME")
    ap.add_argument("--data", required=True, help=f"{', '.join(DATA_SETS)}, a text task, an image folder or a .txt file")
    ap.add_argument("--n", type=int, default=None, help="samples (default 2000)")
    ap.add_argument("--token", choices=("cls", "mean", "last"), default=None)
    ap.add_argument("--lenses", default=None, help="comma-separated lens names or patterns (default: all)")
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--max-in-memory", type=int, default=None,
                    help="above this many samples, stream the similarity lenses (default 20000)")
    ap.add_argument("--n-surgery", type=int, default=None,
                    help="samples the skip / approximate lenses run the model again on (default 128; 0: off)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--scale", default="default", choices=("smoke", "default", "paper"),
                    help="the presets the unset options come from (default: default)")
    ap.add_argument("--out", default=None, help="output folder: new, empty or an earlier report's (default "
                    "runs/report/<model>__<data>, or $LAYERSIM_OUT/report/<model>__<data>)")
    ap.add_argument("--update-committed", action="store_true",
                    help="allow --out inside figures/ (the committed report examples)")
    args = ap.parse_args(argv)
    if args.out is not None and not args.out.strip():
        ap.error("--out is empty: give a folder, or leave --out out for runs/report/<model>__<data>")
    lens_list = None
    if args.lenses is not None:
        lens_list = [x.strip() for x in args.lenses.split(",") if x.strip()]
        if not lens_list:
            ap.error(f"--lenses {args.lenses!r} names no lens: give comma-separated lens names or patterns")
    overrides = {"n_samples": args.n, "token": args.token, "lenses": lens_list, "max_length": args.max_length,
                 "batch_size": args.batch_size, "max_in_memory": args.max_in_memory, "n_surgery": args.n_surgery}
    root = repo_root()
    switch = "1" if args.update_committed else "0"
    try:
        with temporary_environ(**{writers.SWITCH: switch}):
            settings_for(args.scale, device=args.device, model=args.model, dataset=args.data, **overrides)
            spec, dspec, _ = check(args.model, args.data, lens_list)
            check_device(args.device)
            check_locations()
            out = check_out(args.out or default_out(args.model, args.data))
    except ValueError as err:
        ap.error(str(err).splitlines()[0])
    params = {"scale": args.scale, "model": kernel_name(spec, args.model), "dataset": kernel_name(dspec, args.data),
              "device": args.device, "out": str(out), **{k: v for k, v in overrides.items() if v is not None}}
    try:
        with committed.stops(), locks.hold([lock_place(out)], "python -m layersim report"):
            committed.recover()
            # a committed example is kept aside before its folder is cleared, and put back unless the report ends
            keep = committed.snapshot(out) if args.update_committed else None
            try:
                with temporary_environ(**{writers.SWITCH: switch}):
                    ready_out(out)
                code = _execute(root, out, params, switch, args.update_committed)
            except BaseException:
                with committed.shielded():
                    committed.end_children()
                    if keep is not None:
                        committed.restore(keep)
                raise
            if keep is not None:
                if code == 0:
                    committed.drop(keep)
                else:
                    committed.restore(keep)
            return code
    except ValueError as err:  # a lock held by a live run, a folder that is not layersim's
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, committed.Stopped) as exc:
        print(f"report {exc or 'stopped by SIGINT'}: {out} is as it was" if args.update_committed else
              f"report {exc or 'stopped by SIGINT'}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, committed.Stopped) else 130


def _execute(root: Path, out: Path, params: dict, switch: str, update: bool) -> int:
    """Run the report notebook with ``params`` into ``out`` and export ``report.html``, publishing a committed example
    when ``update``; returns 0, or 1 after one line naming a failed cell."""
    import time

    import papermill as pm

    executed = out / NOTEBOOK.name
    t0 = time.perf_counter()
    print(f"report: {params['model']} on {params['dataset']} -> {out}", flush=True)
    try:
        with temporary_environ(**{writers.SWITCH: switch}, **resolved_variables()):
            pm.execute_notebook(str(root / NOTEBOOK), str(executed), parameters=params, progress_bar=False,
                                cwd=str(root / NOTEBOOK.parent), **kernel_options())
            if update:  # a committed example: no progress bars, no machine's folders
                publish(executed, executed, root)
            html = export_html(executed, out / "report.html")
    except Exception as exc:  # noqa: BLE001 - papermill's error for a failed cell: one line, the notebook kept
        print(f"report failed at {describe_failure(exc)} -- see {executed}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - t0:.0f} s: {html} (open it in a browser), {executed}, figures and "
          f"metrics.json in {out}")
    return 0
