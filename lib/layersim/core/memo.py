"""Results that do not depend on the seed, computed once and reused by every seed's run.

:func:`remember` keeps a dict of arrays and numbers in ``<cache>/memo/<name>/<key>.npz`` (``key`` hashes
everything the result depends on: inputs, the computing code's source, the library versions), beside a JSON file with
its sha256; a later call with the same inputs loads it instead of computing, a changed input computes anew, and a
file that fails its checksum is recomputed with a :class:`~layersim.core.paths.CacheWarning`. Writes are atomic, so
an interrupted run leaves the entry whole or absent.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from layersim.core.paths import CacheWarning, cache_dir, sha256_of
from layersim.core.writers import write_bytes, write_text

#: bump when a change to this module changes what a stored result would contain
MEMO_VERSION = 1


def source_of(code: Any) -> str:
    """The sha256 of the source of ``code`` (a function or a module): a key part that changes when the computing
    code does."""
    return hashlib.sha256(inspect.getsource(code).encode("utf-8")).hexdigest()


def key_of(name: str, parts: Mapping[str, Any]) -> str:
    """A stable 16-hex-digit hash of ``name``, ``parts`` (JSON-serialisable) and the versions of numpy and torch."""
    import torch

    try:
        text = json.dumps([MEMO_VERSION, name, dict(parts), np.__version__, torch.__version__], sort_keys=True)
    except TypeError as exc:
        raise ValueError(f"the key parts of {name!r} must be JSON values (str, numbers, lists, dicts): {exc}") from exc
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _encode(name: str, result: Mapping[str, Any]) -> bytes:
    arrays = {}
    for field, value in result.items():
        array = np.asarray(value)
        if array.dtype == object:
            raise ValueError(f"{name}: field {field!r} is not an array or a number ({type(value).__name__})")
        arrays[field] = array
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _decode(path: Path) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as npz:
        return {field: (npz[field].item() if npz[field].ndim == 0 else npz[field]) for field in npz.files}


def remember(name: str, parts: Mapping[str, Any], compute: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """``compute()`` (a dict of arrays and numbers) stored under ``name`` and the hash of ``parts``, or the stored
    result when there is one; 0-d arrays come back as Python numbers, the same on the first call as on later ones.
    ``ValueError`` for parts that are not JSON values or a field that is not numeric."""
    key = key_of(name, parts)
    folder = cache_dir("memo", name)
    data, meta = folder / f"{key}.npz", folder / f"{key}.json"
    if data.is_file() and meta.is_file():
        try:
            expected = json.loads(meta.read_text(encoding="utf-8"))["sha256"]
            if sha256_of(data) == expected:
                return _decode(data)
            warnings.warn(f"{data} does not match its checksum: computed anew", CacheWarning, stacklevel=2)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"{data} could not be read ({exc}): computed anew", CacheWarning, stacklevel=2)
    blob = _encode(name, compute())
    write_bytes(data, blob)
    write_text(meta, json.dumps({"name": name, "parts": dict(parts), "sha256": sha256_of(data)}, indent=1))
    return _decode(data)
