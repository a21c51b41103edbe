"""The committed results while a run rewrites them: nothing lost, whatever stops the run.

Each committed folder (``figures/<paper>/<stem>/`` and its notebook) is left as it was or complete and new.
:func:`snapshot` copies it to ``runs/.restore/`` before a run touches it; :func:`drop` deletes the copy after a
success, :func:`restore` puts it back after a failure or a stop; a :class:`Guard` does this for each notebook of a
run. :func:`stops` turns SIGTERM and SIGHUP into
:class:`Stopped`, :func:`shielded` holds signals back during the clean-up, :func:`end_children` ends the run's
kernels, :func:`recover` puts back what a hard-killed run left, and :func:`phase` marks where the tests stop a run
(see docs/modules.md, `layersim.tools.committed`).
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
from collections.abc import Callable, Iterator
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
    """A signal stopped the run: a ``BaseException``, so that no ``except Exception`` swallows it; ``exit_code`` is 128
    + the signal's number."""

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
    """Hold back SIGINT, SIGTERM and SIGHUP for the block; yields the list of those that arrived. A no-op outside the
    main thread."""
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
    """End every process this one started, TERM first and KILL after ``grace`` seconds, and wait for them (a live
    kernel could write into a folder just put back); returns their ids."""
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
    """A named point of a run: when ``LAYERSIM_PAUSE_AT`` names it, say ``paused at <name>`` on stderr and wait (up to
    10 minutes) for the tests' signal."""
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
    """Copy committed ``folder``'s run outputs and ``notebook`` (if any) aside before a run rewrites them; returns the
    copy, which appears whole. A copy already there is recovered first (:func:`recover_one`), or
    :class:`layersim.core.locks.Busy` if its run is alive."""
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
    """Delete a kept copy, renamed away first so that an interrupted delete never leaves a partial copy that passes for
    whole."""
    if not keep.exists():
        return
    gone = keep.with_name(f".{keep.name}.discard-{os.getpid()}")
    os.replace(keep, gone)
    shutil.rmtree(gone, ignore_errors=True)


def restore(keep: Path, root: Path | None = None) -> Path:
    """Put back what :func:`snapshot` kept (the run's partial outputs removed, kept files renamed into place, the
    notebook), then :func:`drop` the copy; returns the folder. Safe to repeat."""
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
    """Settle what a stopped run left at ``keep``: a whole copy of a gone process is put back (one line through
    ``say``), half-made ones removed; :class:`layersim.core.locks.Busy` for a live run's. Returns whether a folder
    was put back."""
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
    """Put back every folder a hard-killed run left half-written (:func:`recover_one` for each copy under
    ``runs/.restore/``; a live run's is left alone); returns those folders."""
    root = root or repo_root()
    done = []
    for keep in leftovers(root):
        info = read_keep(keep) or {}
        with contextlib.suppress(locks.Busy):
            if recover_one(keep, root, say):
                done.append(root / info["folder"])
    return done


class Guard:
    """Keeps the committed outputs of each notebook a run rewrites from its start (:meth:`keep`: :func:`snapshot`) to
    its end (:meth:`settle`: dropped after a success, restored otherwise); :meth:`settle_all` restores the unfinished
    ones. ``outputs_of(nb)``: the committed folder and notebook a run of ``nb`` rewrites, or None (nothing kept)."""

    def __init__(self, outputs_of: Callable[[Path], tuple[Path, Path | None] | None], say=print):
        self.outputs_of, self.kept, self.say = outputs_of, {}, say

    def keep(self, nb: Path) -> None:
        found = self.outputs_of(nb)
        if found is None:
            return
        phase("locked")
        self.kept[nb] = snapshot(*found, say=self.say)
        phase("kept")

    def settle(self, nb: Path, ok: bool) -> None:
        keep = self.kept.pop(nb, None)
        if keep is None:
            return
        if ok:
            drop(keep)
        else:
            restore(keep)

    def settle_all(self) -> list[Path]:
        """Put back every notebook's committed outputs still kept; returns their folders."""
        back = []
        for nb in list(self.kept):
            back.append(self.outputs_of(nb)[0])
            self.settle(nb, False)
        return back
