import io
import json
import os

import pytest

from layersim.core import progress as kernel
from layersim.tools import progress


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_mode_follows_the_terminal_and_the_batch():
    assert progress.mode_for(io.StringIO(), parallel=False) == "quiet"
    assert progress.mode_for(Terminal(), parallel=False) == "live"
    assert progress.mode_for(Terminal(), parallel=True) == "lines"


@pytest.mark.parametrize("seconds, text", [(None, "?"), (5, "0:05"), (65.4, "1:05"), (3725, "1:02:05"), (-3, "0:00")])
def test_clock(seconds, text):
    assert progress.clock(seconds) == text


def test_headings_carry_down_to_the_cells_below():
    cells = [{"cell_type": "code", "source": "x"}, {"cell_type": "markdown", "source": "text\n## Setup\nmore"},
             {"cell_type": "code", "source": "y"}, {"cell_type": "markdown", "source": ["# A\n", "### B"]},
             {"cell_type": "code", "source": "z"}]
    assert progress.headings(cells) == ["", "Setup", "Setup", "B", "B"]


def test_batch_eta_counts_what_is_left():
    clock = Clock()
    batch = progress.Batch([100.0, 50.0, 30.0], clock=clock)
    assert batch.eta() == 180.0
    clock.t = 40.0
    assert batch.eta() == 140.0
    clock.t = 400.0  # the first overran: nothing left of it, the others still to come
    assert batch.eta() == 80.0
    batch.begin(2)
    assert batch.eta() == 30.0
    assert progress.Batch([10.0, None]).eta() is None


def test_committed_seconds_and_expected(tmp_path):
    nb = tmp_path / "notebooks" / "tracing" / "t03_x.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text(json.dumps({"metadata": {}, "cells": []}))  # never run by papermill
    assert progress.committed_seconds(nb, tmp_path) == []
    nb.write_text(json.dumps({"metadata": {"papermill": {"duration": 300.0}}, "cells": []}))
    assert progress.committed_seconds(nb, tmp_path) == [300.0]
    folder = tmp_path / "figures" / "tracing" / "t03_x"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"seed_run_seconds": {"1": 280.0, "2": 290.0}}))
    assert sorted(progress.committed_seconds(nb, tmp_path)) == [280.0, 290.0, 300.0]
    assert progress.expected_seconds(nb, tmp_path, seeds=3) == pytest.approx(870.0)
    assert progress.expected_seconds(tmp_path / "notebooks" / "tracing" / "none.ipynb", tmp_path, 1) is None


def test_watch_reads_the_kernels_bars_and_shows_rate_and_eta(monkeypatch):
    stream = Terminal()
    with progress.Watch("tracing/t03", 2, 5, progress.Batch([None, 60.0], clock=Clock()), mode="quiet",
                        stream=stream) as watch:
        watch.batch.begin(1)
        monkeypatch.setenv(kernel.ENV, watch.environment()[kernel.ENV])
        bar = kernel.progress_bar(range(30), desc="epoch 1/2", disable=True)
        it = iter(bar)
        for _ in range(11):
            next(it)
        watch.cell_started(6, 20, "Aligned training")
        watch.read()
        line = watch.line()
        assert line.startswith("[2/5] tracing/t03 · cell 7/20 Aligned training · epoch 1/2")
        assert "/30 [" in line and "batch ETA 1:00" in line
        list(it)
        watch.read()
        assert "epoch 1/2: 100% 30/30" in watch.line()  # a finished bar is shown once in its final state
        watch.show()
        assert "epoch 1/2" not in watch.line()  # then leaves the line
        path = watch.path
    assert not os.path.exists(path)
    assert stream.getvalue() == ""  # quiet: nothing written


def test_live_mode_rewrites_one_line_and_clears_it_at_the_end():
    stream = Terminal()
    with progress.Watch("a/b", 1, 1, mode="live", stream=stream) as watch:
        watch.cell_started(0, 3, "")
        watch.show()
        watch.show()
    out = stream.getvalue()
    assert out.count("\r\x1b[K[1/1] a/b · cell 1/3") == 2 and out.endswith("\r\x1b[K") and "\n" not in out


def test_lines_mode_prints_changes_at_most_every_interval():
    stream, clock = Terminal(), Clock(1000.0)
    with progress.Watch("a/b", 1, 1, mode="lines", stream=stream, clock=clock) as watch:
        watch._stop.set()  # no background refresh: the test drives show()
        watch.cell_started(0, 3, "")
        watch.show()
        watch.cell_started(1, 3, "")
        watch.show()  # changed, but too soon
        clock.t += progress.LINE_EVERY
        watch.show()
        watch.show()  # unchanged
    assert stream.getvalue().splitlines() == ["[1/1] a/b · cell 1/3", "[1/1] a/b · cell 2/3"]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="progress mode 'loud'"):
        progress.Watch("a/b", 1, 1, mode="loud")


def test_times_table_lists_each_seed_run_and_the_total(tmp_path):
    runs = tmp_path / "runs" / "default"
    notebooks = [tmp_path / "notebooks" / "p" / f"{stem}.ipynb" for stem in ("a", "b")]
    folder = runs / "p" / "a"
    folder.mkdir(parents=True)
    (folder / "a.ipynb").write_text(json.dumps({"metadata": {"papermill": {"duration": 100.4}}, "cells": []}))
    (folder / "metrics.json").write_text(json.dumps({"seed_run_seconds": {"2": 95.0, "1": 90.2}}))
    assert progress.run_seconds(folder / "a.ipynb", folder / "metrics.json") == {"1": 90.2, "2": 95.0, "own": 100.4}
    table = progress.times_table(runs, notebooks).splitlines()
    assert table[2] == "| p/a | 100 | 90, 95 | 286 |"
    assert table[3] == "| p/b | not finished | | |"
    assert table[4] == "| **all 1 finished** | | | **286** (4.8 min) |"
    record = progress.batch_record(runs, notebooks)
    assert record == {"notebooks": {"p/a": {"1": 90.2, "2": 95.0, "own": 100.4}}, "unfinished": ["p/b"],
                      "total_seconds": pytest.approx(285.6)}


def test_the_readme_sentence_reads_the_newest_measurement(tmp_path):
    assert progress.batch_sentence(tmp_path) == ""  # none measured yet
    folder = tmp_path / "benchmarks" / "batch"
    folder.mkdir(parents=True)
    for date, total in (("2026-01-01", 60.0), ("2026-02-03", 3 * 3600 + 125.0)):
        (folder / f"{date}-default-3seeds.json").write_text(json.dumps(
            {"notebooks": {"p/a": {"own": total}}, "unfinished": [], "total_seconds": total}))
    got = progress.batch_sentence(tmp_path)
    assert "**3 h 02 min** (1 notebook, measured 2026-02-03" in got
    assert "[`benchmarks/batch/2026-02-03-default-3seeds.md`](benchmarks/batch/2026-02-03-default-3seeds.md)" in got
