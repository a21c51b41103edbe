"""The project's cache of what it derives from assets: each file written whole with its sha256 recorded beside
it and checked on every read (:func:`cached`, :func:`sha256_record`); a damaged entry is moved aside with a
warning and rebuilt. The SmolLM2 checkpoint converted from its GGUF (:func:`convert_gguf`) is such an entry, its
weights checked whenever the chain finds it (:func:`converted_finder`). See docs/modules.md,
``layersim.inputs.cache``.
"""

from __future__ import annotations

import errno
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from layersim.core.paths import CacheWarning, quarantine, sha256_of
from layersim.core.writers import atomic_path, DiskFull, write_text

__all__ = [
    "cached",
    "sha256_record",
    "converted_finder",
    "convert_gguf",
]

_T = TypeVar("_T")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def sha256_record(path: Path) -> Path:
    """Where the sha256 of the cache file ``path`` is recorded: ``<name>.sha256`` beside it."""
    return path.with_name(f"{path.name}.sha256")


def _record(path: Path) -> str:
    """Record the sha256 of ``path`` (in the format of ``sha256sum``, so ``sha256sum -c`` checks it too)."""
    digest = sha256_of(path)
    write_text(sha256_record(path), f"{digest}  {path.name}\n")
    return digest


def _read_checked(path: Path, read: Callable[[Path], _T]) -> tuple[_T, bool]:
    """``(read(path), recorded)`` once ``path`` matches its recorded sha256 (:func:`sha256_record`).

    ``ValueError`` for a mismatch or unreadable record, ``OSError`` for an unreadable file, and whatever ``read``
    raises. A file without a record is trusted if ``read`` accepts it, and recorded (``recorded`` True: the
    caller warns with :func:`_warn_recorded`)."""
    record = sha256_record(path)
    expected = None
    if record.exists():
        expected = (record.read_text(encoding="ascii", errors="replace").split() or [""])[0]
        if not _HEX64.fullmatch(expected):
            raise ValueError(f"its sha256 record {record.name} is unreadable")
    digest = sha256_of(path)
    if expected is not None and digest != expected:
        raise ValueError(f"sha256 {digest[:16]}... differs from the recorded {expected[:16]}...")
    value = read(path)
    if expected is not None:
        return value, False
    try:
        _record(path)
    except OSError:  # a read-only cache: the entry stays unrecorded
        return value, False
    return value, True


def _warn_recorded(path: Path) -> None:
    warnings.warn(f"cache entry {path} had no sha256 (an earlier version's): recorded it", CacheWarning,
                  stacklevel=3)


def _write_cached(path: Path, write: Callable[[Path], Any]) -> Path:
    """Write the cache file ``path`` with ``write(tmp)`` atomically (:func:`layersim.core.writers.atomic_path`)
    and record its sha256; returns ``path``. A full disk raises :class:`~layersim.core.writers.DiskFull`; an
    unwritable cache folder, ``ValueError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sha256_record(path).unlink(missing_ok=True)  # never a new file beside an old record
        with atomic_path(path) as tmp:
            write(tmp)
        _record(path)
    except DiskFull:
        raise
    except OSError as err:
        raise ValueError(f"cannot write the cache file {path}: {err.strerror or err}; make {path.parent} "
                         "writable, or point LAYERSIM_CACHE at a writable folder") from err
    return path


def _move_aside(path: Path, err: BaseException) -> None:
    """Quarantine the damaged cache entry ``path`` (its sha256 record goes with it: deleted);
    one ``ValueError`` when its folder does not allow that."""
    try:
        quarantine(path, err)
    except OSError as exc:
        raise ValueError(f"cache entry {path} is damaged ({type(err).__name__}: {err}) and cannot be moved "
                         f"aside: {exc.strerror or exc}; make {path.parent} writable, or remove the entry") from err
    finally:
        if not os.path.lexists(path):  # moved aside (its warning may be an error): its record goes
            sha256_record(path).unlink(missing_ok=True)


def cached(path: Path, read: Callable[[Path], _T], build: Callable[[], _T],
           write: Callable[[_T, Path], Any]) -> _T:
    """The value of the cache file ``path``: ``read(path)`` if intact (:func:`_read_checked`), else ``build()``,
    written with ``write(value, tmp)``. A damaged entry is quarantined with a warning and rebuilt."""
    if os.path.lexists(path):
        try:
            value, recorded = _read_checked(path, read)
        except Warning:  # a warning turned into an error (-W error) is not damage
            raise
        except Exception as err:  # noqa: BLE001 - any damage: move it aside and rebuild
            _move_aside(path, err)
        else:
            if recorded:
                _warn_recorded(path)
            return value
    value = build()
    _write_cached(path, lambda tmp: write(value, tmp))
    return value


# ----- converted checkpoints ---------------------------------------------------------------


def converted_finder(folder: Path, files: Sequence[str]) -> Callable[[], Path | None]:
    """A finder for a checkpoint folder converted into the cache: ``folder`` when all ``files`` are there and
    ``model.safetensors`` matches its sha256; a damaged folder is moved aside for reconversion."""

    def find() -> Path | None:
        if not folder.exists():
            return None
        try:
            missing = [f for f in files if not (folder / f).is_file()]
            if missing:
                raise ValueError(f"incomplete: no {', '.join(missing)}")
            _, recorded = _read_checked(folder / "model.safetensors", _safetensors_names)
        except Warning:  # a warning turned into an error (-W error) is not damage
            raise
        except Exception as err:  # noqa: BLE001 - any damage: move it aside and convert again
            _move_aside(folder, err)
            return None
        if recorded:
            _warn_recorded(folder / "model.safetensors")
        return folder

    return find


def _safetensors_names(path: Path) -> list[str]:
    """The tensor names in a safetensors file's header (ValueError-like errors if it is not one)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as fh:
        return list(fh.keys())


def convert_gguf(folder: Path, gguf_file: str, dest: Path) -> Path:
    """Dequantize a GGUF causal LM to a float32 safetensors checkpoint folder, once: config, weights and
    tokenizer written into a temporary folder renamed into place, the weights' sha256 recorded."""
    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        with atomic_path(dest) as tmp:
            tmp.mkdir(parents=True)
            model.config.save_pretrained(tmp)
            if model.generation_config is not None:
                model.generation_config.save_pretrained(tmp)
            safetensors.torch.save_model(model, str(tmp / "model.safetensors"))
            tokenizer.save_pretrained(tmp)
            _record(tmp / "model.safetensors")
            for f in tmp.iterdir():
                f.chmod(0o644)
    except OSError as err:  # a full disk (DiskFull) or anything else but a lost race is raised
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not dest.is_dir():
            raise
        # another process put its conversion in place first: keep that one
    return dest

