"""What a run of the runner shows in the terminal while a notebook executes.

A :class:`Watch` follows one notebook: the cell papermill is executing (:class:`WatchedEngine` tells it, with the
Markdown heading above the cell), the kernel's progress bars (:mod:`layersim.core.progress` appends them to the file
:attr:`Watch.path`), and the batch's notebooks done of N with an ETA from the committed runs' times
(:func:`committed_seconds`). Its ``mode``: ``"live"`` rewrites one status line every second (a terminal, serial
runs), ``"lines"`` prints a full line when the state changed, at most every :data:`LINE_EVERY` seconds (a terminal
behind Ray's log forwarding), ``"quiet"`` shows nothing (no terminal: the runner's one line per notebook).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from layersim.core import progress
from layersim.notebook import seeds

MODES = ("live", "lines", "quiet")
#: seconds between two refreshes of the live status line
LIVE_EVERY = 1.0
#: the fewest seconds between two printed lines in ``"lines"`` mode
LINE_EVERY = 30.0
#: the Watch of the notebook executing in this process (papermill's engine reports its cells to it)
_CURRENT: list[Watch] = []


def mode_for(stream: TextIO, parallel: bool) -> str:
    """``"quiet"`` unless ``stream`` is a terminal; then ``"lines"`` for a parallel batch, else ``"live"``."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "quiet" if not tty else "lines" if parallel else "live"


def clock(seconds: float | None) -> str:
    """``seconds`` as ``h:mm:ss`` (``m:ss`` under an hour), ``"?"`` when unknown."""
    if seconds is None:
        return "?"
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def seed_seconds(nb: Mapping, metrics: Mapping) -> dict[str, float]:
    """The seconds each seed's run took, from a finished run's JSON: ``"own"`` (papermill's ``duration`` in the
    executed notebook ``nb``, when set) and the other seeds' (``seed_run_seconds`` of ``metrics``, keyed by seed)."""
    got = seeds.other_seed_seconds(metrics)
    own = (nb.get("metadata", {}).get("papermill") or {}).get("duration")
    if own is not None:
        got["own"] = float(own)
    return got


def run_seconds(executed: Path, metrics: Path) -> dict[str, float]:
    """:func:`seed_seconds` of the ``executed`` notebook and ``metrics`` files; {} for a run not found or unreadable
    (a file missing counts as empty)."""
    def read(path: Path) -> dict:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        return {}

    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return seed_seconds(read(executed), read(metrics))
    return {}


def committed_seconds(nb: Path, root: Path) -> list[float]:
    """The seconds of each seed's run of ``nb`` in its committed default run (:func:`run_seconds` of the committed
    notebook and ``figures/<paper>/<stem>/metrics.json``); [] when there is none."""
    return list(run_seconds(nb, root / "figures" / nb.parent.name / nb.stem / "metrics.json").values())


def times_table(out_root: Path, notebooks: list[Path]) -> str:
    """A Markdown table of each notebook's seed runs under ``out_root`` (a runner's output folder, e.g.
    ``runs/default``): the own seed's seconds, the other seeds', their sum, and a last row of totals; a notebook
    without a finished run is marked so."""
    rows, total, missing = [], 0.0, 0
    for nb in notebooks:
        got = run_seconds(out_root / nb.parent.name / nb.stem / nb.name,
                          out_root / nb.parent.name / nb.stem / "metrics.json")
        name = f"{nb.parent.name}/{nb.stem}"
        if "own" not in got:
            rows.append(f"| {name} | not finished | | |")
            missing += 1
            continue
        others = ", ".join(f"{t:.0f}" for s, t in sorted(got.items()) if s != "own")
        rows.append(f"| {name} | {got['own']:.0f} | {others} | {sum(got.values()):.0f} |")
        total += sum(got.values())
    head = ["| notebook | own seed, s | other seeds, s | all seeds, s |", "|---|---:|---:|---:|"]
    end = f"| **all {len(notebooks) - missing} finished** | | | **{total:.0f}** ({total / 60:.1f} min) |"
    return "\n".join(head + rows + [end]) + "\n"


def batch_record(out_root: Path, notebooks: list[Path]) -> dict:
    """The seed times of every notebook's finished run under ``out_root`` (:func:`run_seconds`), as a JSON-ready
    record: ``notebooks`` (``"<paper>/<stem>"`` -> seed -> seconds, ``"own"`` for the notebook's own seed),
    ``unfinished`` (the notebooks without a finished run) and ``total_seconds`` (every seed of every finished one)."""
    found, unfinished = {}, []
    for nb in notebooks:
        got = run_seconds(out_root / nb.parent.name / nb.stem / nb.name,
                          out_root / nb.parent.name / nb.stem / "metrics.json")
        name = f"{nb.parent.name}/{nb.stem}"
        if "own" in got:
            found[name] = dict(sorted(got.items()))
        else:
            unfinished.append(name)
    return {"notebooks": found, "unfinished": unfinished,
            "total_seconds": sum(t for times in found.values() for t in times.values())}


#: where the end-to-end measurements of the main job lie: ``<date>-default-3seeds.json`` (:func:`batch_record`),
#: each beside the Markdown page that explains it
BATCHES = "benchmarks/batch"


def batch_sentence(root: Path) -> str:
    """The README's sentence on the time of the whole main job, from the newest ``<date>-default-3seeds.json`` of
    :data:`BATCHES`; "" when there is none."""
    found = sorted((Path(root) / BATCHES).glob("*-default-3seeds.json"))
    if not found:
        return ""
    record = json.loads(found[-1].read_text(encoding="utf-8"))
    hours, minutes = divmod(round(record["total_seconds"] / 60), 60)
    n = len(record["notebooks"])
    page = found[-1].with_suffix(".md").relative_to(root).as_posix()
    return (f"The whole main job, every notebook over three seeds from an empty model cache, one after another on 2 "
            f"CPU cores: **{hours} h {minutes:02d} min** ({n} notebook{'s' if n != 1 else ''}, measured "
            f"{found[-1].name[:10]}; each notebook's seeds: [`{page}`]({page})).")


def expected_seconds(nb: Path, root: Path, seeds: int) -> float | None:
    """How long ``seeds`` seeds' runs of ``nb`` should take at the default scale: the mean committed seed time times
    ``seeds``; None when there is no committed run."""
    times = committed_seconds(nb, root)
    return sum(times) / len(times) * seeds if times else None


def headings(cells: list[Any]) -> list[str]:
    """For each cell of a notebook, the last Markdown heading at or above it (its text without the ``#``), ``""``
    before the first."""
    out, current = [], ""
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("#"):
                    current = line.lstrip("#").strip()
        out.append(current)
    return out


class Batch:
    """The batch a notebook belongs to: ``expected`` seconds per notebook in run order (None when unknown), the
    index of the one running, and when it started."""

    def __init__(self, expected: list[float | None], clock=time.monotonic):
        self.expected, self.clock, self.index, self.started = list(expected), clock, 0, clock()

    def begin(self, index: int) -> None:
        """Notebook ``index`` (0-based) starts now."""
        self.index, self.started = index, self.clock()

    def eta(self) -> float | None:
        """Seconds until the batch ends: what the running notebook has left of its expected time (none when it
        overran) and the expected times of those after it; None when one of them is unknown."""
        rest = self.expected[self.index:]
        if not rest or any(t is None for t in rest):
            return None
        return max(0.0, rest[0] - (self.clock() - self.started)) + sum(rest[1:])


class Watch:
    """The terminal view of one notebook's run (see the module's docstring); use as a context manager around the
    papermill call, with :data:`layersim.core.progress.ENV` set to :attr:`path` in the kernel's environment."""

    def __init__(self, name: str, index: int, count: int, batch: Batch | None = None, mode: str = "quiet",
                 stream: TextIO | None = None, clock=time.monotonic):
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: one of {', '.join(MODES)}")
        self.name, self.index, self.count, self.batch, self.mode = name, index, count, batch, mode
        self.stream, self.clock = stream or sys.stderr, clock
        self.cell, self.cells, self.heading, self.part = 0, 0, "", ""
        self.bars: dict[str, dict] = {}
        self.path = ""
        self._offset, self._stop, self._thread, self._printed, self._last_line = 0, threading.Event(), None, 0.0, ""
        self._lock = threading.Lock()

    def __enter__(self) -> Watch:
        fd, self.path = tempfile.mkstemp(prefix="layersim-progress-", suffix=".jsonl")
        os.close(fd)
        _CURRENT.append(self)
        if self.mode != "quiet":
            self._thread = threading.Thread(target=self._loop, name="layersim-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.mode == "live":
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        _CURRENT.remove(self)
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def environment(self) -> dict[str, str]:
        """The kernel's environment entry that makes :func:`layersim.core.progress.progress_bar` report to this Watch."""
        return {progress.ENV: self.path}

    def cell_started(self, index: int, count: int, heading: str) -> None:
        """Papermill started cell ``index`` (0-based) of ``count``, under ``heading``."""
        self.cell, self.cells, self.heading = index + 1, count, heading

    def read(self) -> None:
        """Take the kernel's new progress reports from :attr:`path`: the latest state of each bar (a finished one
        stays until :meth:`show` has shown it once)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self._offset)
                text = f.read()
        except OSError:
            return
        complete = text[:text.rfind("\n") + 1]
        self._offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                self.bars[event["desc"]] = event

    def line(self) -> str:
        """The status line: notebook i of N, the cell and its heading, the innermost running bar (count, rate,
        ETA) and the batch's ETA."""
        from tqdm import tqdm

        parts = [f"[{self.index}/{self.count}] {self.name}" + (f" ({self.part})" if self.part else "")]
        if self.cells:
            parts.append(f"cell {self.cell}/{self.cells}" + (f" {self.heading}" if self.heading else ""))
        if self.bars:
            e = list(self.bars.values())[-1]
            parts.append(tqdm.format_meter(e["n"], e["total"], e["elapsed"], prefix=e["desc"], rate=e["rate"],
                                           ncols=0))
        left = self.batch.eta() if self.batch is not None else None
        if left is not None:
            parts.append(f"batch ETA {clock(left)}")
        return " · ".join(parts)

    def show(self) -> None:
        """Read the reports and write the line: rewritten in place (``live``), or printed when it changed and
        :data:`LINE_EVERY` seconds passed (``lines``)."""
        self.read()
        text = self.line()
        self.bars = {desc: e for desc, e in self.bars.items() if not e.get("done")}
        with self._lock:
            if self.mode == "live":
                width = shutil.get_terminal_size((120, 20)).columns
                self.stream.write("\r\x1b[K" + text[:width - 1])
            elif self.mode == "lines" and text != self._last_line and self.clock() - self._printed >= LINE_EVERY:
                self.stream.write(text + "\n")
                self._printed, self._last_line = self.clock(), text
            self.stream.flush()

    def printing(self, say):
        """``say`` (a print-like function) that first clears the live status line, so that its line stands alone."""
        def said(*args, **kwargs):
            with self._lock:
                if self.mode == "live":
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                say(*args, **kwargs)
        return said

    def _loop(self) -> None:
        while not self._stop.wait(LIVE_EVERY):
            with contextlib.suppress(Exception):  # a display error never stops the run
                self.show()


def current() -> Watch | None:
    """The Watch of the notebook executing in this process, if any."""
    return _CURRENT[-1] if _CURRENT else None


def main(argv: list[str] | None = None) -> int:
    """``python -m layersim.tools.progress times [RUNS] [--json PATH]``: the seed times of every notebook's run in
    ``RUNS`` (default ``runs/default``) as a Markdown table, and as JSON in ``PATH``."""
    import argparse

    from layersim.core.paths import repo_root

    ap = argparse.ArgumentParser(prog="python -m layersim.tools.progress", description=main.__doc__.split("\n")[0])
    ap.add_argument("command", choices=["times"])
    ap.add_argument("runs", nargs="?", default=None, help="a runner's output folder (default: runs/default)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the seed times as JSON (batch_record)")
    args = ap.parse_args(argv)
    root = repo_root()
    notebooks = sorted(p for p in (root / "notebooks").glob("*/*.ipynb"))
    runs = Path(args.runs) if args.runs else root / "runs" / "default"
    print(times_table(runs, notebooks), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(batch_record(runs, notebooks), indent=1) + "\n", encoding="utf-8")
    return 0


def part(text: str) -> None:
    """Name the part of the notebook's work now running (``"seed 1, run 1 of 3"``) on :func:`current`'s line."""
    watch = current()
    if watch is not None:
        watch.part = text


def engine():
    """Papermill's nbclient engine, reporting each cell it starts to :func:`current`'s Watch; registered under the
    name ``"layersim"``."""
    from papermill.engines import NBClientEngine, papermill_engines

    class WatchedEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            watch, cells = current(), nb_man.nb.cells
            above = headings(cells)
            start = nb_man.cell_start

            def cell_start(cell, cell_index=None, **kw):
                if watch is not None and cell_index is not None:
                    watch.cell_started(cell_index, len(cells), above[cell_index])
                return start(cell, cell_index, **kw)

            nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register("layersim", WatchedEngine)
    return "layersim"


if __name__ == "__main__":
    sys.exit(main())
