"""Where the library's tensors run, and in what float32 precision on a GPU.

- :func:`check_device`: checks a device name against this machine (``ValueError`` otherwise).
- :func:`resolve_device`: ``"auto"`` → CUDA when a GPU is there, except for work below :data:`GPU_MIN_WORK`.
- :func:`training_work`: the size of one training step, read by the ``"auto"`` rule.
- :func:`evaluation_autocast`: the precision of a read-only forward pass (float32, or bf16 autocast).
- The float32 switch: on CUDA, float32 matmuls and convolutions run in TF32 (``"fast"``, the default) unless
  ``"strict"`` is asked for (:func:`set_float32_mode`, :func:`float32`, ``LAYERSIM_FLOAT32=strict``). No effect
  on the CPU; similarity measures use float64 regardless (see docs/modules.md, ``layersim.core.device``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

import torch

#: ``"fast"``: TF32 float32 matmuls and convolutions on CUDA; ``"strict"``: IEEE float32 there
FLOAT32_MODES = ("fast", "strict")
#: the environment variable that sets the float32 mode of a process (default ``"fast"``)
FLOAT32_ENV = "LAYERSIM_FLOAT32"

#: The smallest training step (:func:`training_work`: trainable parameters x batch size) that
#: ``device="auto"`` trains on a GPU; smaller models train on the CPU even where a GPU is present. It sits where
#: the CPU's step time crosses the GPU's, measured with ``python -m layersim.tools.bench device``.
GPU_MIN_WORK = 6_000_000

_mode: str | None = None  # set by set_float32_mode; None: read FLOAT32_ENV


def float32_mode() -> str:
    """The float32 mode in force: the last :func:`set_float32_mode`, else ``$LAYERSIM_FLOAT32``, else
    ``"fast"``; ValueError for an unknown value in the environment."""
    if _mode is not None:
        return _mode
    mode = os.environ.get(FLOAT32_ENV, "fast") or "fast"
    if mode not in FLOAT32_MODES:
        raise ValueError(f"{FLOAT32_ENV}={mode!r}: use one of {FLOAT32_MODES}")
    return mode


def _check(mode: str | None) -> None:
    if mode is not None and mode not in FLOAT32_MODES:
        raise ValueError(f"float32 mode must be one of {FLOAT32_MODES}, got {mode!r}")


def apply_float32() -> str:
    """Set torch's CUDA float32 flags from :func:`float32_mode` (no effect on CPU work); returns the mode."""
    mode = float32_mode()
    flag = "tf32" if mode == "fast" else "ieee"
    torch.backends.cuda.matmul.fp32_precision = flag
    torch.backends.cudnn.conv.fp32_precision = flag
    return mode


def set_float32_mode(mode: str | None) -> None:
    """Choose ``"fast"`` (TF32 on CUDA) or ``"strict"`` (IEEE float32) for the rest of the process;
    ``None`` goes back to ``$LAYERSIM_FLOAT32``."""
    global _mode
    _check(mode)
    _mode = mode
    apply_float32()


@contextlib.contextmanager
def float32(mode: str) -> Iterator[str]:
    """Run the block in float32 ``mode`` (``"fast"`` or ``"strict"``), then restore the mode before it."""
    global _mode
    _check(mode)
    before = _mode
    set_float32_mode(mode)
    try:
        yield mode
    finally:
        _mode = before
        apply_float32()


#: the precisions of a read-only forward pass (:func:`evaluation_autocast`)
EVAL_PRECISIONS = ("fp32", "bf16")


def evaluation_autocast(precision: str, device: torch.device | str):
    """The context a read-only forward pass on ``device`` runs in: nothing for ``"fp32"`` (the default; TF32 on
    CUDA unless the float32 mode is ``"strict"``), ``torch.autocast`` to bfloat16 for ``"bf16"`` on any device type
    (on the CPU, slow: to bound how far bf16 moves a result). ``ValueError`` for another ``precision``."""
    if precision not in EVAL_PRECISIONS:
        raise ValueError(f"evaluation precision must be one of {EVAL_PRECISIONS}, got {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def training_work(model: torch.nn.Module, batch_size: int) -> int:
    """Trainable parameters x ``batch_size``: the size of one training step that :func:`resolve_device`'s
    ``"auto"`` rule compares with :data:`GPU_MIN_WORK`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad) * int(batch_size)


#: a device name: ``auto``, or a device type this library runs on with an optional index
_NAME = re.compile(r"auto|(?P<kind>cpu|cuda|mps)(?::(?P<index>\d+))?")


def available_devices() -> list[str]:
    """The device names this machine runs: ``"auto"``, ``"cpu"``, then ``"cuda"`` and ``"cuda:0"`` ... where CUDA is
    available, ``"mps"`` where MPS is."""
    out = ["auto", "cpu"]
    if torch.cuda.is_available():
        out += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        out.append("mps")
    return out


def check_device(device: str | torch.device) -> str:
    """``device`` as a name if this machine can run on it: ``"auto"``, ``"cpu"``, ``"cuda"``/``"cuda:N"`` with
    CUDA and N below its device count, ``"mps"`` with MPS. Else ``ValueError`` naming the device and
    :func:`available_devices`."""
    name = str(device) if isinstance(device, torch.device) else device
    match = _NAME.fullmatch(name) if isinstance(name, str) else None
    have = f"available here: {', '.join(map(repr, available_devices()))}"
    if match is None or (match["kind"] in ("cpu", "mps") and match["index"] not in (None, "0")):
        raise ValueError(f"device {name!r} is not a device name: use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' ({have})")
    if match["kind"] == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU or driver is found"
            raise ValueError(f"device {name!r}: this machine has no CUDA device ({why}); {have}")
        count = torch.cuda.device_count()
        if match["index"] is not None and int(match["index"]) >= count:
            plural = "" if count == 1 else "s"
            raise ValueError(f"device {name!r}: this machine has {count} CUDA device{plural}; {have}")
    if match["kind"] == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {name!r}: this machine has no MPS device (Apple silicon); {have}")
    return name


def resolve_device(device: str | torch.device = "auto", work: int | None = None) -> torch.device:
    """The device to run on, after :func:`check_device` (``ValueError`` for a device this machine lacks).

    ``"auto"``: CUDA when available, unless ``work`` (:func:`training_work`) is below :data:`GPU_MIN_WORK`;
    anything else is ``torch.device(device)``. A CUDA device gets the float32 switch applied."""
    name = check_device(device)
    if name == "auto":
        use_gpu = torch.cuda.is_available() and (work is None or work >= GPU_MIN_WORK)
        dev = torch.device("cuda" if use_gpu else "cpu")
    else:
        dev = torch.device(name)
    if dev.type == "cuda":
        apply_float32()
    return dev
