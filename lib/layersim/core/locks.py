"""One writer per folder: a lock file that names its process, and is broken when that process is gone.

A run takes :func:`hold` on every folder it will write before any work; a second run is refused at once
(:class:`Busy`, a ``ValueError`` naming the folder and the holder). A *stale* lock, whose process no longer
exists, is broken by the next run with one line on standard error. The lock is the file :data:`NAME` in the
folder (see docs/modules.md, ``layersim.core.locks``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

#: the lock file's name inside the folder it guards
NAME = ".layersim-lock"


class Busy(ValueError):
    """The folder is being written by another live process."""


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc/<pid>/stat``), or None where
    unknown: with the id it names one process, not whichever later reuses the id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` exists on this host (and, with ``start``, is the one that started then)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    now = process_start(pid)
    return start is None or now is None or now == start


def identity(what: str) -> dict:
    """This process as a lock or a kept copy names it: ``pid``, ``host``, ``start`` (:func:`process_start`), ``what``
    it does and ``since`` when; :func:`stale` reads it back."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": process_start(os.getpid()), "what": what,
            "since": time.time()}


def holder(folder: str | os.PathLike) -> dict | None:
    """What the lock of ``folder`` says (``pid``, ``host``, ``start``, ``what``, ``since``), or None without one. An
    unreadable lock (a writer killed between creating and filling it) reads as ``{"pid": 0}``: stale."""
    path = Path(folder) / NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        return {"pid": 0}
    try:
        found = json.loads(text)
    except ValueError:
        return {"pid": 0}
    return found if isinstance(found, dict) else {"pid": 0}


def stale(info: dict) -> bool:
    """Whether a lock's process is gone: its host is this one and no live process matches its id and start time.
    A lock taken on another host is never judged stale here (its process cannot be seen)."""
    if info.get("host", socket.gethostname()) != socket.gethostname():
        return False
    try:
        pid = int(info.get("pid", 0))
    except (TypeError, ValueError):
        return True
    return not alive(pid, info.get("start"))


def _describe(info: dict) -> str:
    since = info.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "?"
    return f"process {info.get('pid')} on {info.get('host', '?')} ({info.get('what', '?')}, since {when})"


def acquire(folder: str | os.PathLike, what: str, say=None) -> Path:
    """Take the lock of ``folder`` (created if missing) for this process; returns the lock file. This process's
    own lock: a no-op; a stale one: broken, said through ``say`` (default stderr); a live one: :class:`Busy`."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / NAME
    me = identity(what)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            info = holder(folder)
            if info is None:
                continue  # released between the two calls: try again
            if info.get("pid") == me["pid"] and info.get("host") == me["host"]:
                return path
            if not stale(info):
                raise Busy(f"{folder} is being written by {_describe(info)}: wait for that run to end, or choose "
                           "another output folder") from None
            say(f"broke a stale lock on {folder}: {_describe(info)} is gone")
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        return path
    raise Busy(f"could not lock {folder}: its lock keeps changing hands")


def release(folder: str | os.PathLike) -> None:
    """Remove the lock of ``folder`` if this process holds it (another's is left alone)."""
    info = holder(folder)
    if info and info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            (Path(folder) / NAME).unlink()


@contextlib.contextmanager
def hold(folders: Iterable[str | os.PathLike], what: str, say=None) -> Iterator[list[Path]]:
    """Lock every one of ``folders`` (all or none: a :class:`Busy` on one releases those already taken) for the
    block; release them after, whatever ends it."""
    taken: list[Path] = []
    try:
        for folder in dict.fromkeys(Path(f) for f in folders):
            acquire(folder, what, say)
            taken.append(folder)
        yield taken
    finally:
        for folder in reversed(taken):
            release(folder)
