"""Safe writers: where layersim may write, and how every file it writes gets there.

Three rules, each in one place:

- **Committed results are protected** (:func:`check_target`). ``figures/`` (the committed
  default-scale results) and ``notebooks/`` (the notebooks, committed with the outputs of their
  last default-scale run) are written only when the one switch is on: the environment variable
  ``LAYERSIM_UPDATE_COMMITTED=1``, which ``make reproduce`` (``python -m layersim.tools.runner
  --update-committed``) sets for its runs. Paths are compared after resolving symlinks and
  ``..``, so no spelling of a path (absolute, relative, through a link) gets past the guard.
- **A file appears whole or not at all** (:func:`atomic_path`, :func:`write_text`): it is written
  under a hidden temporary name in the same folder and renamed into place; on any failure,
  Ctrl-C included, the temporary file is removed. A full disk is reported as ``disk full at PATH``
  (:class:`DiskFull`).
- **An output folder holds one run** (:func:`prepare_folder`): it is checked before any work
  (protected? writable?), and the figures and ``metrics.json`` of an earlier run in it are
  removed, so that a reader never mistakes an old figure for a new one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from layersim.core.paths import repo_root

#: the environment variable that allows writing into the committed results
SWITCH = "LAYERSIM_UPDATE_COMMITTED"
#: folders of the repository that hold committed results
COMMITTED = ("figures", "notebooks")
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
    """The resolved folders of :data:`COMMITTED` in the repository ``root``."""
    root = root or repo_root()
    return tuple((root / name).resolve() for name in COMMITTED)


def resolved(path: str | os.PathLike) -> Path:
    """``path`` made absolute against the working directory, ``~`` expanded, symlinks and ``..`` resolved."""
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def protected_root(path: str | os.PathLike, root: Path | None = None) -> Path | None:
    """The committed folder that ``path`` lies in (after :func:`resolved`), or None."""
    real = resolved(path)
    for folder in committed_roots(root):
        if real == folder or real.is_relative_to(folder):
            return folder
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
    return real


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
    """Yield a temporary path beside ``path`` to write into; on success it is renamed to ``path``.

    The temporary name is hidden (``.<name>.tmp-<pid>-<hex><suffix>``, the suffix kept so that
    writers choosing a format by extension -- ``np.savez``, ``savefig`` -- keep working). On any
    exception the temporary file (or folder) is removed and the exception re-raised; a full disk
    becomes :class:`DiskFull`. ``protect``: refuse ``path`` inside the committed results
    (:func:`check_target`).
    """
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
    """Create ``folder`` (and parents) and prove it writable with a probe file; ``ValueError`` if not.

    Called before a run's work, so that a read-only or full output folder is found in the first
    second, not after minutes of computing.
    """
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


def prepare_folder(folder: str | os.PathLike, what: str = "output folder") -> Path:
    """Make ``folder`` ready for one run and return it (resolved): not committed (:func:`check_target`),
    writable (:func:`check_writable`), and without an earlier run's figures, ``metrics.json`` and
    ``report.html`` (:func:`previous_outputs`; other files are left alone)."""
    real = check_target(folder, what)
    check_writable(real)
    for old in previous_outputs(real):
        old.unlink(missing_ok=True)
    return real
