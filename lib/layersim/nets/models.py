"""One way to read every layer's representation of one token, for every model family.

Each family is described once by its adapter (``layersim.nets.adapters``); :func:`family`,
:func:`block_modules`, :func:`final_norm`, :func:`classifier_head` and :func:`n_layers` ask it, and
:func:`collect` reads every layer in one forward pass with hooks on the blocks, streamed over the batches.

Every array is ``[L+1, N, d]``: index 0 the embedding output, index ``i`` the output of block ``i``
(``H^(i)``, tracing eq. 1), none with the final norm. ``token``: ``"cls"``, ``"last"`` (last non-padding),
``"mean"`` (non-padding or non-prefix tokens), an ``int`` position, or None for the adapter's default
(see docs/modules.md, ``layersim.nets.models``).
"""

from __future__ import annotations

import contextlib
import hashlib
import numbers
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.core.device import evaluation_autocast, resolve_device  # (re-exported: models.resolve_device)
from layersim.core.progress import progress_bar
from layersim.nets import adapters
from layersim.nets.adapters import LABEL_KEYS, TEXT_INPUT_KEYS

__all__ = [
    "Batch",
    "Features",
    "block_modules",
    "classifier_head",
    "collect",
    "collect_tokens",
    "evaluating",
    "family",
    "final_norm",
    "hidden_states",
    "layer_outputs",
    "stream",
    "n_layers",
    "resolve_device",
    "zero_pad",
]

Token = str | int


# ----------------------------------------------------------------------------- families


def family(model: nn.Module) -> str:
    """The name of the model's adapter (``"timm_vit"``, ``"bert"``, ``"gpt2"``, ``"llama"``, ...;
    see ``layersim.nets.adapters``). Raises ``NotImplementedError`` naming the supported families."""
    return adapters.get(model).name


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The blocks in call order (timm ``blocks``, GPT-2 ``h``, LLaMA ``layers``, BERT
    ``encoder.layer``, ALBERT its shared group once per call); the objects themselves."""
    return adapters.get(model).blocks(model)


def n_layers(model: nn.Module) -> int:
    """The number of block calls ``L``; feature arrays have ``L + 1`` entries."""
    return len(block_modules(model))


def final_norm(model: nn.Module) -> nn.Module:
    """The norm the model applies between its last block and its classifier (the adapter's), else
    ``nn.Identity`` (BERT-like post-LN encoders)."""
    return adapters.get(model).final_norm(model)


def classifier_head(model: nn.Module) -> nn.Module:
    """The last-layer classifier ``g`` mapping one final-normed token feature ``[N, d]`` to logits ``[N, K]``
    (the ``W`` of the tracing paper's §2, with its bias), from the adapter. ``ValueError`` for a bare model or
    DINOv2."""
    return adapters.get(model).head(model)


# ----------------------------------------------------------------------------- helpers


def fingerprint(model: nn.Module) -> str:
    """The sha256 of ``model``'s state: each parameter's and buffer's name, dtype, shape and bytes, in order. Two
    models with the same fingerprint compute the same function (a key for results cached per model)."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().to("cpu").contiguous().reshape(-1)
            digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
            digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """Put ``model`` in eval mode (and no_grad) for the block; restore its mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def _select(h: torch.Tensor, token: Token, mask: torch.Tensor | None, n_prefix: int,
            include_prefix: bool) -> torch.Tensor:
    """One feature vector per sample, ``[B, d]``, from a layer's output: the chosen token of ``[B, T, d]``;
    ``[B, d]`` as is; ``[B, C, H, W]`` averaged over positions (``"mean"``) or flattened (``"all"``, any output)."""
    if token == "all":
        return h.flatten(1)
    if token == "tokens":
        return h
    if h.ndim == 2:
        return h
    if h.ndim == 4:
        if token == "mean":
            return h.mean(dim=(2, 3))
        raise ValueError(f"a convolutional map [B, C, H, W] is read with token='mean' (average over "
                         f"positions) or 'all' (flattened), got {token!r}")
    if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
        return h[:, int(token)]
    if token == "cls":
        return h[:, 0]
    if token == "last":
        if mask is None:
            return h[:, -1]
        last = h.shape[1] - 1 - torch.argmax(mask.flip(1).to(torch.int64), dim=1)
        return h[torch.arange(h.shape[0], device=h.device), last]
    if token == "mean":
        if mask is None:
            return (h if include_prefix else h[:, n_prefix:]).mean(dim=1)
        m = mask.to(h.dtype)[:, :, None]
        return (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)
    raise ValueError(f"token must be 'cls', 'last', 'mean', 'all', 'tokens' or an int, got {token!r}")


def layer_ids(layers: Sequence[int] | None, L: int) -> list[int]:
    """Layer indices in 0..L (negatives from the end; None: all), the one check of ``layers``: ``ValueError``
    for an empty selection, a non-integer, an index out of range, or one named twice."""
    if layers is None:
        return list(range(L + 1))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise ValueError(f"layers must be a sequence of layer indices in 0..{L}, got {layers!r}")
    given = list(layers)
    if not given:
        raise ValueError(f"layers is empty: pass at least one index in 0..{L}, or layers=None for all "
                         f"{L + 1} entries")
    wrong = [i for i in given if isinstance(i, bool) or not isinstance(i, numbers.Integral)]
    if wrong:
        raise ValueError(f"layers must be integer indices, got {wrong[0]!r}")
    ids = [int(i) + (L + 1 if int(i) < 0 else 0) for i in given]
    outside = [g for g, i in zip(given, ids) if not 0 <= i <= L]
    if outside:
        raise ValueError(f"layers {outside} out of range: the model has entries 0..{L} "
                         f"(negatives count from the end, down to -{L + 1})")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"layers {given} name entry {twice[0]} more than once")
    return ids


def _labels_of(y: Any, n: int, k: int) -> torch.Tensor | None:
    """The labels of batch ``k`` of ``n`` samples as a tensor (None if none); ValueError if they are
    one-dimensional but not one per sample (they would be dropped silently otherwise)."""
    if y is None:
        return None
    y = torch.as_tensor(y)
    if y.ndim == 1 and len(y) != n:
        raise ValueError(f"batch {k} has {len(y)} labels for {n} samples: labels must be one per sample")
    return y


def _split_batch(batch: Any, text: bool) -> tuple[Any, torch.Tensor | None]:
    """``(model inputs, labels or None)`` of one batch: text dicts (``labels``/``label`` keys), image tensors or
    arrays, ``(images, labels, ...)`` tuples, or ``{"pixel_values": ..., "labels": ...}`` dicts."""
    if text:
        if not isinstance(batch, Mapping):
            raise TypeError("text models take batches that are dicts of tensors (input_ids, ...)")
        labels = next((batch[k] for k in LABEL_KEYS if k in batch), None)
        inputs = {k: batch[k] for k in TEXT_INPUT_KEYS if k in batch and batch[k] is not None}
        return inputs, labels
    if isinstance(batch, Mapping):
        if "pixel_values" not in batch:
            raise TypeError(f"a vision batch given as a dict needs 'pixel_values' (Hugging Face's image "
                            f"batches), got keys {sorted(map(str, batch))}")
        return _images(batch["pixel_values"]), next((batch[k] for k in LABEL_KEYS if k in batch), None)
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return _images(batch), None
    if isinstance(batch, (tuple, list)):
        return _images(batch[0]), (batch[1] if len(batch) > 1 else None)
    raise TypeError(f"vision batches are image tensors, (images, labels) tuples or dicts with 'pixel_values', "
                    f"got {type(batch).__name__}")


def _images(x: Any) -> torch.Tensor:
    """A batch of images as a tensor (numpy arrays converted, float64 ones to float32)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
        return x.float() if x.dtype == torch.float64 else x
    return x


def _picked(model: nn.Module, adapter: adapters.Adapter, inputs: Any,
            token: Token) -> tuple[list[torch.Tensor], Any]:
    """Every entry ``0..L`` of one batch, ``[B, d_l]`` each: a pre-hook on the first block
    (index 0) and a hook on every block (calls recorded in order, so a shared block is read at
    each call), one run; returned with that run's own output (``adapter.run``'s)."""
    blocks = adapter.blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no blocks left to read (all were removed)")
    mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
    n_prefix, include = adapter.n_prefix(model), adapter.include_prefix(model)
    picked: list[torch.Tensor] = []

    def keep(x: Any) -> None:
        x = x[0] if isinstance(x, tuple) else x
        picked.append(_select(x, token, mask, n_prefix, include))

    def before(module, args, kwargs):
        if not picked:  # the first call only (a shared block, ALBERT's, is called L times)
            keep(args[0] if args else kwargs["hidden_states"])

    handles = [blocks[0].register_forward_pre_hook(before, with_kwargs=True)]
    for blk in dict.fromkeys(blocks):  # unique modules, calls recorded in order
        handles.append(blk.register_forward_hook(lambda m, args, out: keep(out)))
    try:
        output = adapter.run(model, inputs)
    finally:
        for h in handles:
            h.remove()
    if len(picked) != len(blocks) + 1:
        raise RuntimeError(f"expected {len(blocks) + 1} hooked outputs, got {len(picked)}")
    return picked, output


def _to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, Mapping):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


# ----------------------------------------------------------------------------- storage


class _Store:
    """Grows a float32 ``[n_keep, N, d]`` array along N, in memory or a ``.npy`` memmap: preallocated
    (``capacity``), doubled when full, trimmed at the end."""

    def __init__(self, n_keep: int, d: int, capacity: int, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)
        self.n = 0
        self.arr = self._alloc((n_keep, max(capacity, 1), d), self.path)

    @staticmethod
    def _alloc(shape, path):
        if path is None:
            return np.empty(shape, dtype=np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        return np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)

    def _resize(self, capacity: int) -> None:
        if self.path is None:
            new = self._alloc((self.arr.shape[0], capacity, self.arr.shape[2]), None)
        else:
            tmp = self.path.with_name(self.path.name + ".resize.npy")
            new = self._alloc((self.arr.shape[0], capacity, self.arr.shape[2]), tmp)
        step = max(1, (1 << 24) // max(1, self.arr.shape[2]))  # ≤ 64 MiB per copy
        for layer in range(self.arr.shape[0]):
            for s in range(0, self.n, step):
                new[layer, s:min(s + step, self.n)] = self.arr[layer, s:min(s + step, self.n)]
        if self.path is not None:
            new.flush()
            del self.arr
            os.replace(tmp, self.path)
            new = np.load(self.path, mmap_mode="r+")
        self.arr = new

    def append(self, block: np.ndarray) -> None:
        b = block.shape[1]
        if self.n + b > self.arr.shape[1]:
            self._resize(max(2 * self.arr.shape[1], self.n + b))
        self.arr[:, self.n:self.n + b] = block
        self.n += b

    def finish(self) -> np.ndarray:
        if self.n != self.arr.shape[1]:
            self._resize(self.n)
        if self.path is not None:
            self.arr.flush()
        return self.arr


def _expected_n(batches: Any) -> int | None:
    """Number of samples announced by a DataLoader-like object (``len(.dataset)``), if any."""
    try:
        return len(batches.dataset)
    except (AttributeError, TypeError):
        return None


def _progress(batches: Any, progress: bool):
    return progress_bar(batches, desc="hidden states", unit="batch", disable=not progress, leave=True)


# ----------------------------------------------------------------------------- entry points


@dataclass
class Features:
    """Token features of every layer and the batches' labels: ``hidden`` float32 ``[n_entries, N, d]`` (a
    memmap with ``out``), ``labels`` ``[N]`` or None, ``layers`` the layer index of each entry, ``widths`` each
    entry's own width (smaller than ``d`` where :func:`collect` zero-padded it)."""

    hidden: np.ndarray
    labels: np.ndarray | None
    layers: list[int]
    widths: list[int] | None = None


def collect(
    model: nn.Module,
    batches: Iterable[Any],
    token: Token | None = None,
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
    out: str | os.PathLike | None = None,
    precision: str = "fp32",
    pad: bool = False,
) -> Features:
    """Every layer's representation ``h^(l)`` of one token for every sample, plus labels: a :class:`Features`.

    :func:`stream` over ``batches`` (a DataLoader or iterable of image batches or HF dicts), with its ``token``,
    ``layers``, ``device`` and ``precision``; features are float32. ``out``: a ``.npy`` path for a memmap, memory
    bounded by one batch. Layers of different widths (a CNN's stages) are a ``ValueError`` unless ``pad``: then each
    entry is zero-padded to the widest (:func:`zero_pad`; ``Features.widths`` keeps their own). ``ValueError`` for
    mislabelled batches or a bad ``layers``."""
    if hasattr(model, "surgery_base"):  # a layersim.nets.surgery model: read it with its plan applied
        with model as inner:
            return collect(inner, batches, token, layers, device, progress, out, precision, pad)
    ids = layer_ids(layers, n_layers(model))
    store: _Store | None = None
    labels: list[np.ndarray] = []
    with_labels: bool | None = None
    for b in stream(model, batches, ids, token, device=device, progress=progress, precision=precision):
        widths = {i: h.shape[-1] for i, h in zip(ids, b.entries)}
        if len(set(widths.values())) > 1 and not pad:
            raise ValueError(f"the layers have different widths {widths} (index: width); pass layers= to keep "
                             f"those of one width, e.g. layers=range(1, {n_layers(model) + 1}) for the blocks "
                             f"only, pad=True to zero-pad them to the widest, or read them with "
                             f"layersim.nets.models.layer_outputs")
        block = zero_pad([h.float().cpu().numpy() for h in b.entries])
        if store is None:
            capacity = _expected_n(batches) or 8 * block.shape[1]
            store = _Store(len(ids), block.shape[2], capacity, out)
        store.append(block)
        y = None if b.labels is None else np.asarray(b.labels.cpu())
        has = y is not None and y.ndim == 1 and len(y) == block.shape[1]
        if with_labels is not None and has != with_labels:
            raise ValueError("some batches carry per-sample labels and others do not")
        with_labels = has
        if has:
            labels.append(y)
    if store is None:
        raise ValueError("no batches")
    return Features(store.finish(), np.concatenate(labels) if with_labels else None, ids, list(widths.values()))


def zero_pad(entries: Sequence[np.ndarray]) -> np.ndarray:
    """``[n_entries, N, max d]``: each ``[N, d_l]`` array of ``entries`` with zero columns appended up to the widest.

    Zero columns change no inner product between samples, so every measure that reads a layer through its samples'
    inner products or distances (linear, debiased and RBF CKA, alignment's singular vectors, NC1, L2 probes) is the
    same on the padded layer; measures that compare two layers coordinate by coordinate (cosine, MSE) are not
    defined across widths."""
    d = max(h.shape[-1] for h in entries)
    out = np.zeros((len(entries), entries[0].shape[0], d), dtype=np.result_type(*entries))
    for i, h in enumerate(entries):
        out[i, :, :h.shape[-1]] = h
    return out


def collect_tokens(
    model: nn.Module,
    batches: Iterable[Any],
    tokens: Sequence[Token],
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
) -> dict[Token, np.ndarray]:
    """:func:`collect` for several token choices from one forward pass per batch: ``{token: float32
    [n_entries, N, d]}``, each equal to ``collect(m, b, token).hidden``; labels not kept, held in memory."""
    tokens = list(tokens)
    if not tokens or len(set(map(str, tokens))) != len(tokens):
        raise ValueError(f"tokens must be a non-empty list of distinct token choices, got {tokens!r}")
    if any(t in ("tokens", "all") for t in tokens):
        raise ValueError("collect_tokens picks one vector per sample; 'tokens' and 'all' are not token choices "
                         "here (use stream(token='tokens') or layer_outputs(token='all'))")
    base = getattr(model, "surgery_base", model)
    adapter = adapters.get(base)
    n_prefix, include = adapter.n_prefix(base), adapter.include_prefix(base)
    parts: dict[Token, list[np.ndarray]] = {t: [] for t in tokens}
    for b in stream(model, batches, layers, "tokens", device=device, progress=progress):
        for t in tokens:
            picked = [_select(h, t, b.mask, n_prefix, include) for h in b.entries]
            widths = {h.shape[-1] for h in picked}
            if len(widths) > 1:
                raise ValueError(f"the layers have different widths {sorted(widths)}; pass layers= to keep those "
                                 "of one width")
            parts[t].append(torch.stack(picked).float().cpu().numpy())
    if not parts[tokens[0]]:
        raise ValueError("no batches")
    return {t: np.concatenate(p, axis=1) for t, p in parts.items()}


def hidden_states(
    model: nn.Module,
    batches: Iterable[Any],
    token: Token | None = None,
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
    out: str | os.PathLike | None = None,
    precision: str = "fp32",
) -> np.ndarray:
    """Float32 ``[L+1, N, d]`` features of ``token`` at every layer (:func:`collect` without labels; a memmap
    with ``out``)."""
    return collect(model, batches, token, layers, device, progress, out, precision).hidden


def _input_batches(data: Any, batch_size: int) -> Iterable[Any]:
    """Batches of ``data``: an array or tensor (split along its first axis, numpy as float32), a
    ``Dataset`` (a ``DataLoader`` in order), or already an iterable of batches."""
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
    if isinstance(data, torch.Tensor):
        return [data[i:i + batch_size] for i in range(0, len(data), batch_size)]
    if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__getitem__"):
        return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    return data


@dataclass
class Batch:
    """What :func:`stream` yields per batch: ``entries`` (one tensor per kept layer, ``[B, d]`` or ``[B, T, d]``
    for ``token="tokens"``), ``labels``, ``attention_mask`` (or None), ``output`` (the adapter's run's output,
    whose ``last_hidden_state`` carries the final norm) and the model's ``inputs``, on the device."""

    entries: list[torch.Tensor]
    labels: torch.Tensor | None
    mask: torch.Tensor | None
    output: Any = None
    inputs: Any = None


def stream(
    model: nn.Module,
    data: Any,
    layers: Sequence[int] | None = None,
    token: Token | None = None,
    batch_size: int = 256,
    device: str | torch.device = "auto",
    progress: bool = False,
    precision: str = "fp32",
) -> Iterator[Batch]:
    """Every layer of ``model``, one :class:`Batch` at a time, from one forward pass per batch with hooks on the
    blocks (eval mode, no gradients, on ``device``). ``data``: a DataLoader, batches, an array or tensor
    (``batch_size`` rows) or a ``Dataset``. ``layers``: indices into ``0..L`` (default all). ``token``: as in the
    module docstring, or ``"tokens"``. ``precision``: ``"fp32"``/``"bf16"``; entries float32."""
    if hasattr(model, "surgery_base"):
        with model as inner:
            yield from stream(inner, data, layers, token, batch_size, device, progress, precision)
        return
    evaluation_autocast(precision, "cpu")  # a bad precision fails before the model is touched
    adapter = adapters.get(model)
    token = adapter.token if token is None else token
    ids = layer_ids(layers, adapter.n_layers(model))
    dev = resolve_device(device)
    model.to(dev)
    with evaluating(model):
        for k, batch in enumerate(_progress(_input_batches(data, batch_size), progress)):
            inputs, y = _split_batch(batch, text=adapter.inputs == "text")
            inputs = _to_device(inputs, dev)
            with evaluation_autocast(precision, dev):
                picked, output = _picked(model, adapter, inputs, token)
            if precision != "fp32":
                picked = [p.float() for p in picked]
            mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
            yield Batch([picked[i] for i in ids], _labels_of(y, picked[0].shape[0], k), mask, output, inputs)


def layer_outputs(
    model: nn.Module,
    data: Any,
    layers: Sequence[int] | None = None,
    token: Token | None = None,
    batch_size: int = 256,
    device: str | torch.device = "auto",
    progress: bool = False,
) -> list[np.ndarray]:
    """Every layer's representation as float64 ``[N, d_l]`` per kept entry, for layers of different widths (small
    networks, CNN maps with ``token="all"``/``"mean"``): :func:`stream`, kept per layer. ``data``: an array or
    tensor (``batch_size`` rows), a ``Dataset`` of ``(input, label)``, or batches; ``layers``: default all."""
    parts: list[list[np.ndarray]] | None = None
    for b in stream(model, data, layers, token, batch_size, device, progress):
        if parts is None:
            parts = [[] for _ in b.entries]
        for part, h in zip(parts, b.entries):
            part.append(h.double().cpu().numpy())
    if parts is None:
        raise ValueError("no batches")
    return [np.concatenate(p) for p in parts]
