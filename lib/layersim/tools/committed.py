"""The committed results while a run rewrites them: nothing lost, whatever stops the run.

A run with ``--update-committed`` rewrites ``figures/<paper>/<stem>/`` (its figures and ``metrics.json``,
written by the notebook itself) and ``notebooks/<paper>/<stem>.ipynb`` (replaced by the executed copy at
the end). Each committed folder is left either **as it was** or **complete and new**:

- :func:`snapshot` copies the folder's run outputs and the committed notebook aside, into
  ``runs/.restore/<folder>/``, before the run touches them; the copy appears whole (written under a
  temporary name, then renamed) with ``keep.json`` naming the process that made it.
- after a success the copy is dropped (:func:`drop`: renamed away, then deleted, so that a half-deleted
  copy is never mistaken for a whole one); after a failure or a stop, :func:`restore` puts the folder and
  the notebook back as they were.
- every signal that stops a run -- SIGINT (Ctrl-C), SIGTERM (``timeout``, Slurm's ``scancel``, CI
  cancellation), SIGHUP (a closed terminal) -- becomes :class:`Stopped` in the main thread
  (:func:`stops`), so the runner's clean-up runs; the clean-up ends the processes the run started (its
  kernels, :func:`end_children`) and restores with further signals held back (:func:`shielded`).
- a hard kill (SIGKILL, a power loss) leaves the copy behind: the next run finds it before it takes a
  snapshot and puts it back (:func:`recover`, also ``python -m layersim.tools.runner --recover``),
  once the process named in ``keep.json`` is gone.

:func:`phase` marks the named points of a run (``locked``, ``kept``, ``publishing``, ``published``) where
the tests stop it; it does nothing unless ``LAYERSIM_PAUSE_AT`` names the phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from layersim.core import locks, writers
from layersim.core.paths import repo_root

#: the folder of the repository where the copies of committed outputs are kept while a run rewrites them
KEEP = Path("runs") / ".restore"
#: the signals that stop a run through :class:`Stopped` (SIGINT stays Python's KeyboardInterrupt)
SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)
#: the environment variable naming the phases (comma-separated) where :func:`phase` pauses, for the tests
PAUSE = "LAYERSIM_PAUSE_AT"
#: what a committed folder's run leaves there and a restore takes back: the run outputs and an executed notebook
OUTPUTS = (*writers.RUN_OUTPUTS, "*.ipynb")


class Stopped(BaseException):
    """A signal stopped the run (a ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception`` in the
    run swallows it). ``exit_code`` is the shell's convention, 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def stops() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into :class:`Stopped` in the main thread for the block (elsewhere, a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def shielded() -> Iterator[list[int]]:
    """Hold back SIGINT, SIGTERM and SIGHUP for the block (a clean-up that must finish); yields the list of those
    that arrived meanwhile. A no-op outside the main thread."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in (signal.SIGINT, *SIGNALS)}
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def end_children(grace: float = 5.0) -> list[int]:
    """End every process this one started (a notebook's kernel, a local worker), TERM first and KILL after
    ``grace`` seconds, and wait for them: a kernel still running after a stop could write into a folder that was
    just put back. Returns their process ids."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=grace)
    return [c.pid for c in children]


def phase(name: str, say=None) -> None:
    """A named point of a run. With ``LAYERSIM_PAUSE_AT`` naming it, say ``paused at <name>`` on standard error and
    wait there (up to 10 minutes) for a signal: the tests stop the runner at known points this way."""
    if name not in {p.strip() for p in os.environ.get(PAUSE, "").split(",")}:
        return
    print(f"paused at {name} (pid {os.getpid()})", file=sys.stderr, flush=True)
    time.sleep(600)


# ----------------------------------------------------------------------------- keeping and restoring


def keep_folder(folder: Path, root: Path | None = None) -> Path:
    """Where the copy of committed ``folder`` is kept: ``runs/.restore/<folder relative to the repository>``."""
    root = root or repo_root()
    return root / KEEP / Path(folder).relative_to(root)


def outputs(folder: Path) -> list[Path]:
    """The files of :data:`OUTPUTS` directly in ``folder``: what a run of it writes and a restore replaces."""
    return writers.previous_outputs(Path(folder), OUTPUTS)


def _copy_in(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` whole or not at all (a temporary name, then a rename)."""
    tmp = dest.with_name(f".{dest.name}.restore-{os.getpid()}")
    shutil.copy2(src, tmp)
    os.replace(tmp, dest)


def read_keep(keep: Path) -> dict | None:
    """What ``keep.json`` of a kept copy says, or None when ``keep`` is not a whole copy."""
    try:
        found = json.loads((keep / "keep.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def snapshot(folder: Path, notebook: Path | None = None, root: Path | None = None, say=None) -> Path:
    """Keep a copy of committed ``folder``'s run outputs and of ``notebook`` (the committed notebook the run
    replaces, if any) before a run rewrites them; return the copy's folder.

    A copy already there is another run's: put back first if its process is gone (:func:`recover_one`),
    refused with :class:`layersim.core.locks.Busy` if that run is alive."""
    root = root or repo_root()
    keep = keep_folder(folder, root)
    if keep.exists() or any(keep.parent.glob(f".{keep.name}.*")):
        recover_one(keep, root, say)
    tmp = keep.with_name(f".{keep.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "files").mkdir(parents=True)
    files = []
    for f in outputs(folder):
        shutil.copy2(f, tmp / "files" / f.name)
        files.append(f.name)
    if notebook is not None and Path(notebook).is_file():
        shutil.copy2(notebook, tmp / "notebook.ipynb")
    info = {**locks.identity("a run rewriting committed results"), "folder": Path(folder).relative_to(root).as_posix(), "files": files,
            "notebook": Path(notebook).relative_to(root).as_posix() if notebook is not None else None}
    writers.write_text(tmp / "keep.json", json.dumps(info, indent=1) + "\n")
    os.replace(tmp, keep)  # the copy appears whole
    return keep


def drop(keep: Path) -> None:
    """Delete a kept copy: renamed away first (one atomic step), so that an interrupted delete never leaves a
    partial copy that would be taken for a whole one."""
    if not keep.exists():
        return
    gone = keep.with_name(f".{keep.name}.discard-{os.getpid()}")
    os.replace(keep, gone)
    shutil.rmtree(gone, ignore_errors=True)


def restore(keep: Path, root: Path | None = None) -> Path:
    """Put back what :func:`snapshot` kept: the folder's run outputs as they were (the run's partial ones removed,
    each kept file renamed into place) and the committed notebook; then :func:`drop` the copy. Returns the
    folder. Safe to repeat: the copy stays whole until every file is back."""
    root = root or repo_root()
    info = read_keep(keep)
    if info is None:
        raise ValueError(f"{keep} is not a whole copy of committed results (no readable keep.json)")
    folder = root / info["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    for f in outputs(folder):
        if f.name not in info["files"]:
            f.unlink(missing_ok=True)
    for name in info["files"]:
        _copy_in(keep / "files" / name, folder / name)
    if info.get("notebook") and (keep / "notebook.ipynb").is_file():
        _copy_in(keep / "notebook.ipynb", root / info["notebook"])
    drop(keep)
    return folder


def recover_one(keep: Path, root: Path | None = None, say=None) -> bool:
    """Settle what a stopped run left at ``keep``: a whole copy whose process is gone is put back (one line through
    ``say``); half-made or half-deleted copies of a gone process are removed; a live run's copy raises
    :class:`layersim.core.locks.Busy`. Returns whether a folder was put back."""
    root = root or repo_root()
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    put_back = False
    info = read_keep(keep) if keep.exists() else None
    if info is not None:
        if not locks.stale(info):
            raise locks.Busy(f"{info['folder']} is being rewritten by process {info.get('pid')} on "
                             f"{info.get('host')}: wait for that run to end")
        folder = restore(keep, root)
        say(f"put back {folder.relative_to(root)} as it was before a run that stopped without restoring it "
            f"(process {info.get('pid')}, gone)")
        put_back = True
    elif keep.exists():
        shutil.rmtree(keep, ignore_errors=True)  # a directory without keep.json is never made by snapshot
    for leftover in keep.parent.glob(f".{keep.name}.*"):
        pid = leftover.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not locks.alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
    return put_back


def leftovers(root: Path | None = None) -> list[Path]:
    """The kept copies under ``runs/.restore/`` (whole ones, by their ``keep.json``)."""
    base = (root or repo_root()) / KEEP
    return sorted(p.parent for p in base.rglob("keep.json") if not p.parent.name.startswith(".")) if base.is_dir() \
        else []


def recover(root: Path | None = None, say=None) -> list[Path]:
    """Put back every committed folder that a hard-killed run left half-written (:func:`recover_one` for each copy
    under ``runs/.restore/`` whose process is gone; a live run's copy is left to it). Returns the folders put
    back."""
    root = root or repo_root()
    done = []
    for keep in leftovers(root):
        info = read_keep(keep) or {}
        with contextlib.suppress(locks.Busy):
            if recover_one(keep, root, say):
                done.append(root / info["folder"])
    return done
