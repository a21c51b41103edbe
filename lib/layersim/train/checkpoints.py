"""The checkpoint store: trained models cached on disk by configuration, verified on every load.

A model lives in ``<cache>/checkpoints/<prefix>-<key>/`` (``model.safetensors`` and ``meta.json`` with
``weights_sha256``), ``key`` (:func:`config_key`) hashing the model, training and data descriptions. :func:`save` is
atomic; :func:`load` refuses weights that do not match their sha256. Training on a miss is
:func:`layersim.train.training.cached_model`'s (see docs/modules.md, `layersim.train.checkpoints`).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
import warnings
from pathlib import Path

from torch import nn

from layersim.core.paths import CacheWarning, refuse_committed, sha256_of
from layersim.core.writers import write_text

#: bump when a change to this module changes what a cached checkpoint would contain
CACHE_VERSION = 1


def config_key(*parts: object) -> str:
    """A short stable hash of JSON-serialisable configuration parts (dataclasses allowed)."""
    def plain(obj):
        return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj

    text = json.dumps([CACHE_VERSION, *[plain(p) for p in parts]], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: a hidden temporary checkpoint folder older than this (seconds) is a killed save's leftover, whoever wrote it
STALE_TEMP_SECONDS = 600
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_TEMP = re.compile(r"\.tmp-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)-[0-9a-f]{8}$")
_OLD_TEMP = re.compile(r"-[0-9a-f]{16}-[a-z0-9_]{8}$")  # tempfile.mkdtemp names of earlier versions


def _temp_path(folder: Path) -> Path:
    """A new hidden sibling name for ``folder`` that carries this host and process id."""
    return folder.parent / f".{folder.name}.tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (True when it cannot tell)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process
        return True
    return True


def _remove_stale_temps(parent: Path) -> None:
    """Remove the hidden temporary folders killed saves left in ``parent``: a dead process's on this host, and any
    older than :data:`STALE_TEMP_SECONDS`."""
    now = time.time()
    for entry in parent.iterdir():
        match = _TEMP.search(entry.name)
        if not entry.name.startswith(".") or not (match or _OLD_TEMP.search(entry.name)):
            continue
        dead = match is not None and match["host"] == _HOST and not _pid_alive(int(match["pid"]))
        try:
            if dead or now - entry.stat().st_mtime > STALE_TEMP_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:  # removed meanwhile by another process
            pass


def save(folder: Path, model: nn.Module, meta: dict, replace: bool = False) -> str:
    """Write ``model.safetensors`` and ``meta.json`` (``meta`` + ``weights_sha256``) to ``folder`` atomically;
    return the sha256. An existing ``folder`` is kept unless ``replace``; ``ValueError`` for a folder inside the
    repository's committed folders."""
    from safetensors.torch import save_model

    refuse_committed(folder, f"the checkpoint {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(folder.parent)
    tmp = _temp_path(folder)
    tmp.mkdir()
    try:
        save_model(model, str(tmp / "model.safetensors"))
        os.chmod(tmp / "model.safetensors", tmp.stat().st_mode & 0o666)  # safetensors writes 0600
        digest = sha256_of(tmp / "model.safetensors")
        (tmp / "meta.json").write_text(json.dumps({**meta, "weights_sha256": digest}, indent=2, default=str))
        if not _rename_dir(tmp, folder) and replace:
            old = _temp_path(folder)
            _rename_dir(folder, old)
            _rename_dir(tmp, folder)  # False: another process put one in meanwhile; keep it
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return digest


def _rename_dir(src: Path, dst: Path) -> bool:
    """Rename folder ``src`` to ``dst``; False (nothing done) if ``dst`` is a non-empty folder or ``src`` is gone."""
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def load(folder: Path, model: nn.Module, key: str) -> dict:
    """Load ``folder``'s weights into ``model`` and return its meta; ``ValueError`` when the key differs from
    ``key`` or the weights do not match ``meta["weights_sha256"]`` (a checkpoint without one gets it added)."""
    from safetensors.torch import load_model

    meta = json.loads((folder / "meta.json").read_text())
    found = meta.get("key") if isinstance(meta, dict) else None
    if found != key:
        raise ValueError(f"meta.json has key {found!r}, not {key!r}")
    weights = folder / "model.safetensors"
    digest, expected = sha256_of(weights), meta.get("weights_sha256")
    if expected is not None and digest != expected:
        raise ValueError(f"model.safetensors has sha256 {digest[:16]}..., meta.json says {str(expected)[:16]}...")
    load_model(model, str(weights))
    if expected is None:
        meta["weights_sha256"] = digest
        try:
            write_text(folder / "meta.json", json.dumps(meta, indent=2, default=str))
            warnings.warn(f"checkpoint {folder} had no checksum (an earlier version's): added it", CacheWarning,
                          stacklevel=3)
        except OSError:  # a read-only cache: it stays unverified
            pass
    return meta


# ----------------------------------------------------------------------------- what a run used

#: the checkpoints this process has used since :func:`forget_uses`, in order: ``(name, from_cache)``
_USES: list[tuple[str, bool]] = []


def note_use(name: str, from_cache: bool) -> None:
    """Record that checkpoint ``name`` (``<prefix>-<key>``) was loaded from the cache (``from_cache``) or trained
    now."""
    _USES.append((str(name), bool(from_cache)))


def forget_uses() -> None:
    """Start a new record of used checkpoints (at :func:`layersim.notebook.run.start`)."""
    _USES.clear()


def uses() -> dict[str, list[str]]:
    """The checkpoints used since :func:`forget_uses`: ``{"loaded": [...], "trained": [...]}``, each name once, in
    order of first use; one trained and later loaded counts as trained. A run records it as ``from_cache`` (see
    docs/modules.md, `layersim.train.checkpoints`)."""
    trained = list(dict.fromkeys(n for n, hit in _USES if not hit))
    loaded = [n for n in dict.fromkeys(n for n, hit in _USES if hit) if n not in trained]
    return {"loaded": loaded, "trained": trained}
