"""Progress bars a watcher outside the kernel can follow.

:func:`progress_bar` is the library's one progress bar: tqdm in the notebook (``disable`` hides it there), and, when
``LAYERSIM_PROGRESS`` names a file (the runner sets it for the kernels it starts), one JSON line per update at most
every :data:`EVERY` seconds appended to that file — ``desc``, ``n``, ``total``, ``elapsed``, ``rate`` and ``done`` —
which :mod:`layersim.tools.progress` shows in the terminal. Reporting never fails the run: a file that cannot be
written stops the reports, not the loop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

#: the environment variable naming the file the kernel reports its bars to
ENV = "LAYERSIM_PROGRESS"
#: the fewest seconds between two reported updates of one bar (its first and last are always reported)
EVERY = 0.5


class Reported:
    """``shown`` (a tqdm bar, possibly disabled) iterated with its progress appended to ``path`` as JSON lines;
    other attributes (``set_postfix``, ``close``, ...) are the bar's."""

    def __init__(self, shown: Any, path: str, desc: str, total: int | None, clock=time.monotonic):
        self._shown, self._path, self._desc, self._total, self._clock = shown, path, desc, total, clock
        self._start = self._last = clock()
        self._n = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shown, name)

    def __len__(self) -> int:
        return len(self._shown)

    def __iter__(self) -> Iterator:
        self.report(force=True)
        for item in self._shown:
            yield item
            self._n += 1
            self.report()
        self.report(force=True, done=True)

    def event(self, done: bool = False) -> dict:
        """The bar's state now: ``desc``, ``n`` items done, ``total`` (None if unknown), ``elapsed`` seconds,
        ``rate`` (items per second, None before the first) and ``done``."""
        elapsed = self._clock() - self._start
        rate = self._n / elapsed if self._n and elapsed > 0 else None
        return {"desc": self._desc, "n": self._n, "total": self._total, "elapsed": round(elapsed, 3),
                "rate": rate, "done": done, "pid": os.getpid()}

    def report(self, force: bool = False, done: bool = False) -> None:
        """Append :meth:`event` to the file when :data:`EVERY` seconds have passed since the last report (or
        ``force``); an unwritable file ends the reports."""
        now = self._clock()
        if self._path is None or (not force and now - self._last < EVERY):
            return
        self._last = now
        try:
            with open(self._path, "a", encoding="utf-8") as f:
                f.write(json.dumps(self.event(done)) + "\n")
        except OSError:
            self._path = None


def length(iterable: Any) -> int | None:
    """``len(iterable)``, or None when it has none."""
    try:
        return len(iterable)
    except TypeError:
        return None


def progress_bar(iterable: Iterable, desc: str, total: int | None = None, unit: str = "it", disable: bool = False,
        leave: bool = False) -> Any:
    """A tqdm bar over ``iterable`` (``total`` defaults to its length), shown in the notebook unless ``disable``;
    reported to the file named by :data:`ENV` when it is set, whether shown or not."""
    from tqdm.auto import tqdm

    total = length(iterable) if total is None else total
    shown = tqdm(iterable, desc=desc, total=total, unit=unit, disable=disable, leave=leave)
    path = os.environ.get(ENV)
    return Reported(shown, path, desc, total) if path else shown
