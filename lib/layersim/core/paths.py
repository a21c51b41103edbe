"""Where the project keeps things: the repository root, the data cache, run outputs.

Each location can be moved with an environment variable (all read by :func:`resolved`):

- ``LAYERSIM_ROOT``  the repository root (default: found by walking up to ``pyproject.toml``);
- ``LAYERSIM_DATA``  the data folder (default: ``<root>/data``; outside a repository the user's data folder);
- ``LAYERSIM_CACHE`` caches of trained models and features (default: ``<data>/cache``; outside a repository
  the user's cache folder, ``platformdirs``).

The library works in any folder; the notebooks, figures, runner and book need the repository
(:class:`RepositoryNotFound`). :func:`cache_dir` refuses a cache inside the committed folders; a broken entry is
moved aside (:func:`quarantine`) and one several runs need is made by the first to :func:`claim` it (see
docs/modules.md, ``layersim.core.paths``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

_MARKER = "pyproject.toml"
#: the application name of the user's data and cache folders (``platformdirs``)
APP = "layersim"


#: the location variables, in the order they depend on each other
VARIABLES = ("LAYERSIM_ROOT", "LAYERSIM_DATA", "LAYERSIM_CACHE", "LAYERSIM_OUT")
#: folders of the repository that hold committed results, written only under the committed-results switch
#: (:mod:`layersim.core.writers`)
COMMITTED = ("figures", "notebooks")
#: folders of the repository whose files are committed: no cache may be written inside them
COMMITTED_FOLDERS = (*COMMITTED, "tests/notebooks")


def resolved(path: str | os.PathLike) -> Path:
    """``path`` as the operating system reads it: ``~`` expanded, made absolute, symlinks followed component by
    component (``os.path.realpath``). Every path layersim reads or writes goes through it."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def resolved_variables(environ: dict | None = None) -> dict[str, str]:
    """The set :data:`VARIABLES` of ``environ`` (default ``os.environ``), each :func:`resolved`: what to pass a
    process started in another folder (a notebook's kernel) so it means the same folders."""
    environ = os.environ if environ is None else environ
    return {name: str(resolved(environ[name])) for name in VARIABLES if environ.get(name)}


class RepositoryNotFound(FileNotFoundError):
    """A command that needs the layersim repository (its notebooks, figures, runner or book) ran outside one."""


def find_root() -> Path | None:
    """The repository root: ``$LAYERSIM_ROOT`` (:func:`resolved`) or the first parent of the working directory, or
    of this module, holding ``pyproject.toml`` and ``lib/layersim``; None outside a repository (an installed
    package used from any folder)."""
    env = os.environ.get("LAYERSIM_ROOT")
    if env:
        return resolved(env)
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / _MARKER).is_file() and (folder / "lib" / "layersim").is_dir():
                return folder
    return None


def repo_root() -> Path:
    """The repository root (:func:`find_root`); :class:`RepositoryNotFound`, one line, outside a repository."""
    root = find_root()
    if root is None:
        raise RepositoryNotFound(
            "this needs the layersim repository (its notebooks, figures, runner or book) and none is here: run it "
            "inside a checkout (a folder with pyproject.toml and lib/layersim) or set LAYERSIM_ROOT; the library "
            "alone works anywhere")
    return root


def data_dir() -> Path:
    """The data folder: ``$LAYERSIM_DATA`` (:func:`resolved`), ``<root>/data`` inside a repository, else the
    user's data folder (``platformdirs.user_data_dir("layersim")``)."""
    env = os.environ.get("LAYERSIM_DATA")
    if env:
        return resolved(env)
    root = find_root()
    return root / "data" if root is not None else _user_folder("data")


def _user_folder(kind: str) -> Path:
    """The user's ``"data"`` or ``"cache"`` folder for layersim (``platformdirs``: ``~/.local/share/layersim`` and
    ``~/.cache/layersim`` on Linux), :func:`resolved`; imported only outside a repository."""
    import platformdirs

    return resolved(platformdirs.user_data_dir(APP) if kind == "data" else platformdirs.user_cache_dir(APP))


def committed_folder(path: str | os.PathLike) -> Path | None:
    """The folder of :data:`COMMITTED_FOLDERS` of the repository that ``path`` (:func:`resolved`) lies in, or None
    (also when there is no repository to find)."""
    root = find_root()
    if root is None:
        return None
    root = resolved(root)
    real = resolved(path)
    for name in COMMITTED_FOLDERS:
        folder = resolved(root / name)
        if real == folder or real.is_relative_to(folder):
            return folder
    return None


def refuse_committed(path: str | os.PathLike, what: str) -> Path:
    """``path`` :func:`resolved`, unless it lies in a committed folder (:func:`committed_folder`): then one
    ``ValueError`` naming ``what`` and the folder. No switch lets a cache in: committed folders hold results."""
    inside = committed_folder(path)
    if inside is not None:
        raise ValueError(f"{what} is inside {inside} (committed files): refused; point it at a folder outside "
                         f"{', '.join(n + '/' for n in COMMITTED_FOLDERS)}")
    return resolved(path)


def cache_root() -> Path:
    """The cache folder, not created: ``$LAYERSIM_CACHE``, ``<data>/cache`` (:func:`data_dir`) when
    ``$LAYERSIM_DATA`` is set or inside a repository, else the user's cache folder
    (``platformdirs.user_cache_dir("layersim")``), each :func:`resolved`; ValueError naming the variable that put
    it inside a committed folder (:func:`refuse_committed`)."""
    env = os.environ.get("LAYERSIM_CACHE")
    if env:
        return refuse_committed(env, f"LAYERSIM_CACHE={env}")
    data = os.environ.get("LAYERSIM_DATA")
    if not data and find_root() is None:
        return _user_folder("cache")
    base = data_dir() / "cache"
    return refuse_committed(base, f"LAYERSIM_DATA={data} (the cache is its cache/ folder)" if data else
                            f"the cache {base}")


def check_locations() -> Path:
    """Check the location variables before a command starts any work: the cache (:func:`cache_root`) must lie
    outside the committed folders. Returns the cache folder; nothing is created."""
    return cache_root()


def cache_dir(*parts: str) -> Path:
    """A sub-folder of the cache (:func:`cache_root`), created on demand; ValueError, with nothing created, when
    the cache lies inside a committed folder."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


class CacheWarning(UserWarning):
    """A cache entry was repaired: moved aside as broken (then rebuilt), or given a missing checksum."""


def quarantine(path: Path, reason: str | BaseException) -> Path | None:
    """Rename the broken cache entry ``path`` (file or folder) to ``<name>.corrupt-<YYYYmmdd-HHMMSS>`` beside it
    and warn (:class:`CacheWarning` naming ``reason``), so the caller rebuilds it. Returns the new path, or None
    when ``path`` had already gone."""
    path = Path(path)
    if isinstance(reason, BaseException):
        reason = f"{type(reason).__name__}: {(str(reason).splitlines() or [''])[0][:200]}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target, n = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
    while os.path.lexists(target):
        target, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
    try:
        os.rename(path, target)
    except FileNotFoundError:
        return None
    warnings.warn(f"broken cache entry {path} ({reason}): moved it to {target.name}; rebuilding it",
                  CacheWarning, stacklevel=3)
    return target


def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, hex (read in blocks: any size)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@contextlib.contextmanager
def claim(lock: str | os.PathLike, what: str = "", say: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Hold the exclusive POSIX ``flock`` on file ``lock`` (created if missing) for the block, waiting while another
    process holds it; yields whether it waited (then the caller looks again for what the other made). ``say``
    reports the wait, naming ``what``."""
    import fcntl

    path = Path(lock)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            (say or (lambda msg: print(msg, flush=True)))(f"waiting: another run is making {what or path.name}")
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
