"""Where the project keeps things: the repository root, the data cache, run outputs.

Every location can be moved with an environment variable so that a user can point the
notebooks at a bigger disk without editing them:

- ``LAYERSIM_ROOT``  the repository root (default: found by walking up to ``pyproject.toml``);
- ``LAYERSIM_DATA``  the data folder (default: ``<root>/data``);
- ``LAYERSIM_CACHE`` caches of trained models and features (default: ``<data>/cache``).

A cache entry that cannot be read is moved aside with :func:`quarantine` (never deleted) and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from pathlib import Path

_MARKER = "pyproject.toml"


def repo_root() -> Path:
    """The repository root: ``$LAYERSIM_ROOT`` or the first parent holding ``pyproject.toml``."""
    env = os.environ.get("LAYERSIM_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / _MARKER).is_file() and (folder / "lib" / "layersim").is_dir():
                return folder
    raise FileNotFoundError(
        "cannot find the layersim repository root (a folder with pyproject.toml and "
        "lib/layersim); set LAYERSIM_ROOT"
    )


def data_dir() -> Path:
    """The data folder: ``$LAYERSIM_DATA`` or ``<root>/data``."""
    env = os.environ.get("LAYERSIM_DATA")
    return Path(env).resolve() if env else repo_root() / "data"


def cache_dir(*parts: str) -> Path:
    """A sub-folder of the cache (``$LAYERSIM_CACHE`` or ``<data>/cache``), created on demand."""
    env = os.environ.get("LAYERSIM_CACHE")
    base = Path(env).resolve() if env else data_dir() / "cache"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


class CacheWarning(UserWarning):
    """A cache entry was repaired: moved aside as broken (then rebuilt), or given a missing checksum."""


def quarantine(path: Path, reason: str | BaseException) -> Path | None:
    """Move the broken cache entry ``path`` (file or folder) aside and warn, so that the caller rebuilds it.

    Nothing is deleted: the entry becomes ``<name>.corrupt-<YYYYmmdd-HHMMSS>`` next to it (``-<n>``
    appended if taken) and a :class:`CacheWarning` names the entry, the new name and ``reason`` (for an
    exception: its type and first line). Returns the new path, or None when ``path`` had already gone
    (another process moved it first).
    """
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
