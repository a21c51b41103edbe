"""Safe writers: where layersim may write, and how every file it writes gets there.

- **Committed results are protected** (:func:`check_target`): ``figures/`` and ``notebooks/`` are written only
  with ``LAYERSIM_UPDATE_COMMITTED=1`` (set by ``make reproduce``); the sources only by :data:`WRITERS`.
- **A file appears whole or not at all** (:func:`atomic_path`, :func:`write_text`); a full disk raises
  :class:`DiskFull`.
- **An output folder holds one run** (:func:`prepare_folder`): checked before any work, an earlier run's
  figures and ``metrics.json`` removed.
- **layersim deletes only what it made** (:func:`claim_folder`, :func:`owns`): its folders carry :data:`MARKER`.

(see docs/modules.md, ``layersim.core.writers``)
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from layersim.core import locks, paths
from layersim.core.paths import repo_root

#: the environment variable that allows writing into the committed results
SWITCH = "LAYERSIM_UPDATE_COMMITTED"
#: folders of the repository that hold committed results (:data:`layersim.core.paths.COMMITTED`)
COMMITTED = paths.COMMITTED
#: what else of the repository layersim never writes except through :data:`WRITERS`: the smoke references,
#: the generated README table, the sources, docs, data card, changelog, citation and tests
SOURCES = ("tests", "lib", "docs", "scripts", "benchmarks", "README.md", "CONTRIBUTING.md", "CHANGELOG.md",
           "CITATION.cff", "data/README.md")
#: what an earlier run left in an output folder and :func:`prepare_folder` removes
RUN_OUTPUTS = ("*.png", "metrics.json", "report.html")

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class ProtectedPath(ValueError):
    """A write into the committed results without the switch that allows it."""


class DiskFull(OSError):
    """A write failed for lack of space; its message names the file."""


def update_allowed() -> bool:
    """Whether the switch :data:`SWITCH` is on (``LAYERSIM_UPDATE_COMMITTED=1``)."""
    return os.environ.get(SWITCH, "") == "1"


def committed_roots(root: Path | None = None) -> tuple[Path, ...]:
    """The resolved folders of :data:`COMMITTED` in the repository ``root`` (default: the one found, if any)."""
    root = root or paths.find_root()
    return () if root is None else tuple((root / name).resolve() for name in COMMITTED)


def resolved(path: str | os.PathLike) -> Path:
    """``path`` as the operating system reads it: :func:`layersim.core.paths.resolved`."""
    return paths.resolved(path)


def protected_root(path: str | os.PathLike, root: Path | None = None) -> Path | None:
    """The committed folder that ``path`` lies in (after :func:`resolved`), or None."""
    real = resolved(path)
    for folder in committed_roots(root):
        if real == folder or real.is_relative_to(folder):
            return folder
    return None


def source_root(path: str | os.PathLike, root: Path | None = None) -> Path | None:
    """The part of the repository's sources (:data:`SOURCES`) that ``path`` lies in, or None (also outside a
    repository)."""
    real = resolved(path)
    base = root or paths.find_root()
    if base is None:
        return None
    base = resolved(base)
    for name in SOURCES:
        if real == base / name or real.is_relative_to(base / name):
            return base / name
    return None


def check_target(path: str | os.PathLike, what: str = "output", root: Path | None = None) -> Path:
    """Return the resolved ``path`` if layersim may write there, else raise :class:`ProtectedPath`.

    A path inside ``figures/`` or ``notebooks/`` is refused unless :func:`update_allowed`.
    """
    real = resolved(path)
    inside = protected_root(real, root)
    if inside is not None and not update_allowed():
        raise ProtectedPath(
            f"{what} {path} is inside {inside} (committed results): refused; choose another folder, or update "
            f"the committed results on purpose with `make reproduce` (it sets {SWITCH}=1)")
    source = source_root(real, root)
    if source is not None:
        raise ProtectedPath(f"{what} {path} is inside {source} (the repository's committed sources, written only "
                            "by the commands CONTRIBUTING lists): refused; choose another folder")
    return real


@dataclass(frozen=True)
class Writer:
    """One of the few commands allowed to write committed files other than the results: what it writes
    (``targets``, glob patterns relative to the repository root) and the command that runs it."""

    name: str
    command: str
    targets: tuple[str, ...]


#: every writer of committed files; the results in ``figures/`` and ``notebooks/`` are written under the switch
#: :data:`SWITCH` (:func:`check_target`), the rest through :func:`write_committed` with one of these
WRITERS = {
    "results": Writer("the committed results", "make reproduce (runner --update-committed; report --update-committed)",
                      ("figures/**", "notebooks/*/*.ipynb")),
    "smoke-refs": Writer("the smoke references", "make smoke-refs (runner --refs)",
                         ("tests/notebooks/*/*.ipynb", "tests/notebooks/*/*.metrics.json")),
    "tolerances": Writer("the measured smoke tolerances", "python -m layersim.tools.portable --measure",
                         ("tests/notebooks/tolerances.json",)),
    "readme": Writer("the README's notebook table", "python -m layersim.tools.site readme", ("README.md",)),
    "changelog": Writer("the changelog's claim verdicts", "python -m layersim.tools.changelog", ("CHANGELOG.md",)),
    "prose": Writer("the numbers in the committed notebooks' prose", "python -m layersim.tools.prose render",
                    ("notebooks/*/*.ipynb", "figures/scale_checks/*/*/*.ipynb")),
}


def committed_target(path: str | os.PathLike, writer: str, root: Path | None = None) -> Path:
    """``path`` (resolved) if the writer ``writer`` of :data:`WRITERS` may write it: inside the repository and
    matching one of its targets; :class:`ProtectedPath` else (an unknown writer: ``ValueError``)."""
    if writer not in WRITERS:
        raise ValueError(f"unknown writer {writer!r}: one of {', '.join(WRITERS)}")
    real = resolved(path)
    base = resolved(root or repo_root())
    rel = real.relative_to(base).as_posix() if real.is_relative_to(base) else None
    known = WRITERS[writer]
    if rel is None or not any(fnmatch.fnmatchcase(rel, pattern) for pattern in known.targets):
        raise ProtectedPath(f"{known.name} ({known.command}) write only {', '.join(known.targets)}: {path} refused")
    return real


def write_committed(path: str | os.PathLike, text: str, writer: str, root: Path | None = None) -> Path:
    """Write ``text`` to the committed file ``path`` as ``writer`` (:func:`committed_target`), whole or not at
    all (:func:`write_text`)."""
    real = committed_target(path, writer, root)
    real.parent.mkdir(parents=True, exist_ok=True)
    return write_text(real, text)


def _fail(exc: OSError, path: Path) -> OSError:
    """The error to raise for a failed write of ``path``: :class:`DiskFull` for ENOSPC/EDQUOT."""
    if exc.errno in _DISK_FULL:
        return DiskFull(exc.errno, f"disk full at {path}")
    return exc


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, protect: bool = False) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``path`` (same suffix) to write into; on success it is renamed to
    ``path``, on any exception removed and the exception re-raised (a full disk: :class:`DiskFull`).
    ``protect``: refuse a committed ``path`` (:func:`check_target`)."""
    path = Path(path)
    if protect:
        check_target(path)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise _fail(exc, path) from exc
    except BaseException:
        _remove(tmp)
        raise


def write_text(path: str | os.PathLike, text: str, protect: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`; return ``path``."""
    path = Path(path)
    with atomic_path(path, protect=protect) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def write_bytes(path: str | os.PathLike, data: bytes, protect: bool = False) -> Path:
    """Write ``data`` to ``path`` through :func:`atomic_path`; return ``path``."""
    path = Path(path)
    with atomic_path(path, protect=protect) as tmp:
        tmp.write_bytes(data)
    return path


def check_writable(folder: Path) -> Path:
    """Create ``folder`` (and parents) and prove it writable with a probe file, before a run's work;
    ``ValueError`` if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes(folder / ".write-probe", b"")
        (folder / ".write-probe").unlink()
    except DiskFull as exc:
        raise ValueError(f"cannot write to {folder}: disk full") from exc
    except OSError as exc:
        raise ValueError(f"cannot write to {folder}: {exc.strerror or exc}") from exc
    return folder


def previous_outputs(folder: Path, patterns: Iterable[str] = RUN_OUTPUTS) -> list[Path]:
    """The files of :data:`RUN_OUTPUTS` directly in ``folder`` (an earlier run's figures and numbers)."""
    if not folder.is_dir():
        return []
    return sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})


#: the file that marks a folder as made by layersim (:func:`claim_folder`); what it holds is for people
MARKER = ".layersim-made"
#: folders of the repository that are layersim's own, whole (what a run or a build writes)
OWNED = ("figures", "runs")


def _in_owned(real: Path, root: Path | None = None) -> bool:
    root = root or paths.find_root()
    return root is not None and any(real.is_relative_to(resolved(root) / name) for name in OWNED)


def owns(folder: str | os.PathLike, root: Path | None = None) -> bool:
    """Whether ``folder`` is layersim's to clear: it carries :data:`MARKER`, or lies inside the repository's
    ``figures/`` or ``runs/`` (:data:`OWNED`)."""
    real = resolved(folder)
    return (real / MARKER).is_file() or _in_owned(real, root)


#: files of layersim's own that do not make a folder the user's: its marker and a run's lock (:mod:`layersim.core.locks`)
_OURS = (MARKER, locks.NAME)


def foreign_files(folder: str | os.PathLike) -> list[Path]:
    """The entries of ``folder`` other than layersim's :data:`MARKER` and run lock, sorted by name."""
    return sorted((p for p in Path(folder).iterdir() if p.name not in _OURS), key=lambda p: p.name)


def _listing(folder: Path, n: int = 3) -> str:
    names = [p.name for p in foreign_files(folder)]
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def claim_folder(folder: str | os.PathLike, what: str = "output folder", root: Path | None = None) -> Path:
    """Make ``folder`` layersim's and return it (resolved): created and marked with :data:`MARKER` (not in
    :data:`OWNED`) if new or empty, kept if :func:`owns`. A non-empty folder layersim did not make raises
    ``ValueError`` naming a few of its files, before anything is touched."""
    real = resolved(folder)
    if real.exists() and not real.is_dir():
        raise ValueError(f"{what} {folder} is a file, not a folder")
    if real.is_dir() and not owns(real, root) and foreign_files(real):
        raise ValueError(f"{what} {folder} already holds files that layersim did not write ({_listing(real)}): "
                         "refused, so that nothing in it is deleted; choose a new or empty folder")
    try:
        real.mkdir(parents=True, exist_ok=True)
        if not _in_owned(real, root) and not (real / MARKER).is_file():
            write_text(real / MARKER, "This folder was made by layersim, which may clear or replace what is in it.\n")
    except DiskFull as exc:
        raise ValueError(f"cannot write to {folder}: disk full") from exc
    except OSError as exc:
        raise ValueError(f"cannot write to {folder}: {exc.strerror or exc}") from exc
    return real


def adopt_folder(folder: str | os.PathLike) -> Path:
    """Mark ``folder`` as layersim's (:data:`MARKER`) and return it (resolved), for a caller that recognises it as
    its own unmarked earlier output."""
    real = resolved(folder)
    if real.is_dir() and not owns(real):
        write_text(real / MARKER, "This folder was made by layersim, which may clear or replace what is in it.\n")
    return real


def replace_folder(folder: str | os.PathLike, what: str = "output folder", root: Path | None = None) -> Path:
    """Empty ``folder`` for a new build and return it (resolved), only if layersim made it (:func:`claim_folder`
    refuses a user's non-empty folder); its :data:`MARKER` stays."""
    real = claim_folder(folder, what, root)
    for entry in real.iterdir():
        if entry.name != MARKER:
            _remove(entry)
    return real


def prepare_folder(folder: str | os.PathLike, what: str = "output folder") -> Path:
    """Make ``folder`` ready for one run and return it (resolved): checked by :func:`check_target`,
    :func:`claim_folder` and :func:`check_writable`, then cleared of :func:`previous_outputs`."""
    real = check_target(folder, what)
    claim_folder(real, what)
    check_writable(real)
    for old in previous_outputs(real):
        old.unlink(missing_ok=True)
    return real
