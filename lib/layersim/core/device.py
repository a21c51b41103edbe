"""Where the library's tensors run, and in what float32 precision they run on a GPU.

- :func:`check_device`: a device name is checked against this machine before any work (``"cuda:x"``, ``"gpu"``,
  ``""``, ``"cuda:99"`` on a machine with two GPUs, ``"cuda"`` without CUDA, ``"mps"`` off Apple silicon: one
  ``ValueError`` naming the device and what the machine has).
- :func:`resolve_device`: ``"auto"`` → CUDA when a GPU is there, except for work too small to gain from
  it (:data:`GPU_MIN_WORK`); any other (checked) value is taken as given, so a user can always force a device.
- :func:`training_work`: the size of one training step, trainable parameters x batch size, that the
  ``"auto"`` rule reads.
- :func:`evaluation_autocast`: the precision of a read-only forward pass (reading every layer), float32
  by default, bf16 autocast on request (also on the CPU, where it emulates a GPU's bf16 for checks).
- The float32 switch: on CUDA the library runs float32 matrix products and convolutions in TF32
  (``"fast"``, the default: 2.2x the training throughput of strict float32 on the paper-scale ViT and 3.3x
  the evaluation throughput of a BERT-base shape on one H100, measured 2026-11-24) unless the user asks
  for ``"strict"`` IEEE float32 (:func:`set_float32_mode`, the context manager :func:`float32`, or the
  environment variable ``LAYERSIM_FLOAT32=strict``). It changes nothing on the CPU, so every committed
  (CPU) result is unaffected. Similarity measures convert to float64 whatever the switch says.

The switch is applied (torch's ``torch.backends.cuda.matmul.fp32_precision`` and
``torch.backends.cudnn.conv.fp32_precision``) whenever :func:`resolve_device` hands out a CUDA device.
torch refuses to read its legacy ``allow_tf32`` flags once these are set: code beside the library should
use the same new flags (or this module) to change them.
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
#: ``device="auto"`` trains on a GPU; smaller models train on the CPU even where a GPU is present.
#: An eager PyTorch training step costs a GPU about 1.2-1.9 ms of kernel launches whatever the model's size, while
#: the CPU's time grows with the work: the threshold sits where the CPU's step crosses the GPU's on a GPU machine.
#: Measured with ``python -m layersim.tools.bench device`` (AdamW steps; 3-layer MLPs at batch 64), ms per step:
#:
#: | work (params x batch) | 8.5e5 | 3.8e6 | 8.6e6 | 1.5e7 | 2.1e7 | 6.0e7 | 1.9e8 |
#: |---|---:|---:|---:|---:|---:|---:|---:|
#: | H100 machine, its 16 Xeon cores, run 1 / run 2 | 0.71 / 0.99 | 0.95 / 1.36 | 1.42 / 1.51 | - / 1.79 | 1.55 / 1.66 | 3.53 / 3.02 | 3.88 / 5.48 |
#: | H100 machine, its H100, run 1 / run 2 | 1.60 / 1.48 | 1.89 / 1.47 | 1.56 / 1.21 | - / 1.58 | 1.27 / 1.18 | 1.49 / 1.70 | 1.55 / 1.98 |
#: | 2 AMD EPYC cores (no GPU) | | | 1.1 | | 2.2 | 6.7 | 19 |
#:
#: (2026-11-26; run 1: 5 steps, run 2: 20.) The CPU wins in both runs up to 3.8e6, the GPU from 1.5e7; at 8.6e6
#: the runs disagree, and the GPU there is at most 10 % slower (1.56 vs 1.42 ms), so the threshold sits below it.
#: On a machine with few cores (the EPYC row) the GPU would win from lower still. The tracing notebooks' 9-layer
#: MLP at batch 128 (9.3e7): 7.5 ms on the 2 EPYC cores, 9.7 on the Xeons, 3.2 on the H100; their default ViT
#: (2.0e8) 220 / 76 / 16.6 ms.
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
    """The context a read-only forward pass on ``device`` runs in: nothing for ``"fp32"`` (float32, in TF32 on
    CUDA unless the float32 mode is ``"strict"``), ``torch.autocast`` to bfloat16 for ``"bf16"``, on any
    device type (on the CPU it is slow and serves to bound how far bf16 moves a result).

    float32 is the default because it is as fast: with TF32 a BERT-base shape read layer by layer ran
    6,065 sequences/s on one H100 against 5,775 in bf16 (2026-11-24); bf16 halves the activations' memory."""
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
    """``device`` as a name (a ``torch.device`` as its string) if this machine can run on it: ``"auto"``, ``"cpu"``,
    ``"cuda"`` or ``"cuda:N"`` with CUDA available and N below its device count, ``"mps"`` with MPS available.
    Anything else raises one ``ValueError`` naming the device and the names available here (:func:`available_devices`),
    before a tensor is moved."""
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
    """The device to run on, after :func:`check_device` (a device this machine lacks is a ``ValueError``).

    ``"auto"``: CUDA when available, unless ``work`` (:func:`training_work`) is given and below
    :data:`GPU_MIN_WORK`, then the CPU; without CUDA the CPU. Anything else is ``torch.device(device)``,
    as given. A CUDA device comes with the float32 switch applied (module docstring)."""
    name = check_device(device)
    if name == "auto":
        use_gpu = torch.cuda.is_available() and (work is None or work >= GPU_MIN_WORK)
        dev = torch.device("cuda" if use_gpu else "cpu")
    else:
        dev = torch.device(name)
    if dev.type == "cuda":
        apply_float32()
    return dev
