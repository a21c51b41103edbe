"""One way to read every layer's representation of one token, for every model family.

Each family is described once by its adapter (``layersim.nets.adapters``: timm ViT/DeiT, HF ViT,
HF DeiT, DINOv2, BERT/RoBERTa/ELECTRA, ALBERT, DistilBERT, GPT-2, LLaMA-style, CLIP towers);
the functions here (:func:`family`, :func:`block_modules`, :func:`final_norm`,
:func:`classifier_head`, :func:`n_layers`) ask it, and :func:`collect` reads every layer in one
forward pass with hooks on the blocks, streamed over the batches.

Layer index convention of every ``[L+1, N, d]`` array (``L = n_layers(model)`` block calls):

- index 0 is the embedding output = the input of block 1 (timm: after ``patch_embed``, the
  class / dist / register tokens, ``pos_embed``, ``pos_drop``, ``patch_drop`` and ``norm_pre``;
  HF: the output of the embedding module, after ELECTRA's / ALBERT's embedding projection and
  CLIP vision's ``pre_layrnorm``).
- index ``i`` (1..L) is the output of block ``i`` (``block_modules(model)[i-1]``) as the block
  returned it, i.e. ``H^(i)`` of eq. (1) of the tracing paper.
- no entry carries the model's final norm, for any family (HF's own ``hidden_states[-1]``
  does for GPT-2 and LLaMA; these features are read from the blocks themselves, so the
  convention is the same for every family and after ``layersim.nets.surgery``). The readout
  (``layersim.nets.readout.layer_logits``) applies ``final_norm`` to every entry, the last included.

Tokens (the ``token`` argument; ``None`` = the adapter's default: ``"cls"`` for vision models
and encoders, ``"last"`` for decoders and CLIP's text tower): ``"cls"`` = position 0 (DeiT
distilled models also have a dist token at position 1: use ``token=1``); ``"last"`` = the
last non-padding token per sample (from ``attention_mask``; works for right and left padding;
without a mask, the last position); ``"mean"`` = mean over non-padding tokens (text) or over
the patch tokens excluding the prefix (class/dist/register) tokens (vision, as timm's
``global_pool='avg'``; all tokens if ``model.pool_include_prefix``); an ``int`` = that position
of the (padded) sequence, negative counts from the end.

HF decoders (GPT-2, LLaMA-style) given an ``attention_mask`` and no ``position_ids`` get
``position_ids = cumsum(mask) - 1`` (what ``generate`` does), so left padding does not shift
the absolute positions of GPT-2; encoders get HF's default positions (pad them on the right).
"""

from __future__ import annotations

import contextlib
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
    """The norm the model applies between its last block and its classifier, else Identity.

    timm: ``model.fc_norm`` when it is used (global_pool='avg', applied after pooling), else
    ``model.norm`` (per token; with global_pool='avg' and ``fc_norm=False`` the model norms
    before pooling, so a readout of "mean" features is then only approximate). GPT-2:
    ``transformer.ln_f``. LLaMA-style: ``model.norm``. HF ViT / DeiT / DINOv2: ``layernorm``.
    CLIP: ``post_layernorm`` / ``final_layer_norm``. BERT-like: Identity (post-LN blocks).
    """
    return adapters.get(model).final_norm(model)


def classifier_head(model: nn.Module) -> nn.Module:
    """The last-layer classifier ``g`` mapping one (final-normed) token feature ``[N, d]`` to
    logits ``[N, K]`` (the ``W`` of the tracing paper's section 2, with its bias).

    timm: ``model.head`` (DeiT distilled: the class-token head only). GPT-2 / LLaMA: ``lm_head``
    (``*ForCausalLM``) or ``score`` (``*ForSequenceClassification``). BERT / ALBERT
    ``*ForSequenceClassification``: pooler dense + tanh + ``classifier`` (so the readout of
    ``token="cls"`` reproduces the model's logits); RoBERTa / ELECTRA: their classification
    head; DistilBERT: ``pre_classifier`` + ReLU + ``classifier``; HF ViT: ``classifier``; HF DeiT:
    ``cls_classifier``; CLIP: the projection. ValueError for a bare model or DINOv2.
    """
    return adapters.get(model).head(model)


# ----------------------------------------------------------------------------- helpers


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
    """One feature vector per sample, ``[B, d]``, out of a layer's output (module docstring).

    ``h [B, T, d]`` (tokens): the chosen token. ``h [B, d]`` (the MLPs): nothing to choose from.
    ``h [B, C, H, W]`` (convolutional maps): ``"mean"`` averages over the ``H x W`` positions
    (global average pooling), ``"all"`` flattens the map. ``"all"`` flattens any output (every
    token of a sequence, concatenated).
    """
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
    """Layer indices in 0..L (negatives count from the end) for ``layers=None`` → all.

    The one check of ``layers`` for :func:`collect`, :func:`collect_tokens`, :func:`stream`,
    :func:`layer_outputs` and ``layersim.nets.readout``: ValueError for an empty selection, an index
    that is not an integer, one out of range, or an entry named twice (also as ``i`` and
    ``i - L - 1``).
    """
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
    """(model inputs, labels or None) of one batch.

    Text: dicts of tensors (``input_ids``, ...; ``labels`` / ``label`` keys are the labels). Vision:
    image tensors or numpy arrays ``[B, C, H, W]``, ``(images, labels, ...)`` tuples (torchvision's
    DataLoaders), or Hugging Face's dicts ``{"pixel_values": images, "labels": ...}`` (what an image
    processor returns, a ``BatchFeature`` included).
    """
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
    """Grows a float32 ``[n_keep, N, d]`` array along N, in memory or in a ``.npy`` memmap.

    Preallocates ``capacity`` samples (``len(loader.dataset)`` when known, else 8 batches),
    doubles when full (copying in chunks, so memory stays bounded), trims at the end.
    """

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
    if not progress:
        return batches
    from tqdm.auto import tqdm

    try:
        total = len(batches)
    except TypeError:
        total = None
    return tqdm(batches, total=total, desc="hidden states", unit="batch")


# ----------------------------------------------------------------------------- entry points


@dataclass
class Features:
    """Token features of every layer and the labels the batches carried.

    ``hidden``: float32 ``[n_entries, N, d]`` (``n_entries = L + 1`` unless ``layers`` chose
    fewer; a ``np.memmap`` when written to ``out``); ``labels``: ``[N]`` or None;
    ``layers``: the layer index (0 = embedding output, i = output of block i) of each entry.
    """

    hidden: np.ndarray
    labels: np.ndarray | None
    layers: list[int]


def collect(
    model: nn.Module,
    batches: Iterable[Any],
    token: Token | None = None,
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
    out: str | os.PathLike | None = None,
    precision: str = "fp32",
) -> Features:
    """Every layer's representation ``h^(l)`` of one token, for every sample, plus labels.

    One forward pass per batch, in eval mode under ``torch.no_grad`` (the model's training
    flag is restored after; the model is moved to ``device``: ``"auto"`` = cuda if available
    else cpu). ``batches``: a DataLoader or any iterable of batches: vision ``(images, labels)``
    tuples or image tensors; HF dicts of tensors (``input_ids``, ``attention_mask``,
    ``token_type_ids``, ``position_ids``, ``inputs_embeds`` are passed on; ``labels`` /
    ``label`` are kept as labels when they are one per sample, other keys ignored; 1-D labels
    of another length than the batch raise ValueError).
    ``token``: ``"cls" | "last" | "mean" | int``, or None for the adapter's default (module
    docstring). ``layers``: distinct indices into 0..L to keep (default all ``L + 1``; an empty,
    out-of-range or repeated selection raises ValueError). Index 0 is the
    embedding output, index i the output of block i; no entry carries the final norm.
    ``model`` may be a ``layersim.nets.surgery`` model: it is read with its blocks spliced (a skipped
    span of ``s`` blocks leaves ``L - s + 1`` entries, a replaced one ``L - s + 2``).

    ``out``: a path for a ``.npy`` file; features are written into a memmap of the final
    shape (preallocated from ``len(batches.dataset)`` when available, else grown by doubling
    and trimmed at the end) so that memory stays bounded by one batch plus copy chunks;
    reopen it with ``np.load(out, mmap_mode="r")``. ``precision``: the forward pass's, ``"fp32"`` or ``"bf16"``
    (:func:`layersim.core.device.evaluation_autocast`); the features are float32 either way.
    """
    if hasattr(model, "surgery_base"):  # a layersim.nets.surgery model: read it with its plan applied
        with model as inner:
            return collect(inner, batches, token, layers, device, progress, out, precision)
    ids = layer_ids(layers, n_layers(model))
    store: _Store | None = None
    labels: list[np.ndarray] = []
    with_labels: bool | None = None
    for b in stream(model, batches, ids, token, device=device, progress=progress, precision=precision):
        widths = {i: h.shape[-1] for i, h in zip(ids, b.entries)}
        if len(set(widths.values())) > 1:
            raise ValueError(f"the layers have different widths {widths} (index: width); pass layers= to keep "
                             f"those of one width, e.g. layers=range(1, {n_layers(model) + 1}) for the blocks "
                             f"only, or read them with layersim.nets.models.layer_outputs")
        block = torch.stack(b.entries).float().cpu().numpy()
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
    return Features(store.finish(), np.concatenate(labels) if with_labels else None, ids)


def collect_tokens(
    model: nn.Module,
    batches: Iterable[Any],
    tokens: Sequence[Token],
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
) -> dict[Token, np.ndarray]:
    """:func:`collect` for several token choices at once: ``{token: float32 [n_entries, N, d]}``
    from one forward pass per batch (e.g. ``tokens=("cls", "mean")`` for an encoder read both at
    its CLS token and mean-pooled over its tokens, without running it twice).

    Each layer's whole output is taken from the hooks (:func:`stream` with ``token="tokens"``) and
    every choice is applied to it exactly as :func:`collect` applies one (same padding mask, same
    prefix tokens), so ``collect_tokens(m, b, [t])[t]`` equals ``collect(m, b, t).hidden``. Labels
    are not kept; the result is held in memory.
    """
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
    """Float32 ``[L+1, N, d]`` features of ``token`` at every layer (``collect`` without labels).

    Index 0: embedding output (input of block 1); index i: output of block i; no entry carries
    the final norm (module docstring).
    With ``out`` a ``.npy`` path, the result is a memmap of that file (see ``collect``).
    """
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
    """What :func:`stream` yields for one batch: ``entries`` (one tensor per kept layer, as the
    token choice gives it: ``[B, d]``, or ``[B, T, d]`` for ``token="tokens"``), the batch's
    per-sample ``labels`` (or None), its ``attention_mask`` (text models, or None) and ``output``,
    what the run that was read returned (the adapter's ``run``: a Hugging Face model's base-model
    output, whose ``last_hidden_state`` carries the final norm; timm's ``forward_features``), so
    that a reader needing the model's own output does not run it again; ``inputs``: what the model was
    given (a text model's dict with ``input_ids``; an image batch), on the device."""

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
    """Every layer of ``model``, one :class:`Batch` at a time: the loop under :func:`collect`,
    :func:`layer_outputs` and anything that consumes layers without keeping them all (e.g. the
    streamed least squares of ``layersim.measures.redundancy``).

    One forward pass per batch with hooks on the adapter's blocks (index 0 = the input of block
    1, index ``i`` = the output of block ``i``, no final norm), in eval mode under
    ``torch.no_grad`` (the training flag is restored when the stream ends or is closed), on
    ``device`` (``"auto"``: cuda if available). ``data``: a DataLoader or any iterable of batches
    (vision ``(images, labels)`` tuples or image tensors; HF dicts of tensors), an array or tensor
    of inputs (cut into ``batch_size`` rows) or a ``Dataset``. ``layers``: indices into ``0..L``
    (default all; negatives count from the end). ``token``: as in the module docstring, or
    ``"tokens"`` for the whole sequence. A ``layersim.nets.surgery`` model is read with its span spliced.
    ``precision``: ``"fp32"`` or ``"bf16"`` autocast (:func:`layersim.core.device.evaluation_autocast`); the
    entries come out in float32 either way.
    """
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
    """Every layer's representation, float64 ``[N, d_l]`` per kept entry, for layers of any widths.

    The same reading as :func:`collect` (:func:`stream`: one forward pass per batch, hooks on the
    adapter's blocks, index 0 = the input of block 1, index ``i`` = the output of block ``i``, the
    same ``token`` choices), kept in memory per layer instead of stacked into one float32 array:
    for small networks whose layers differ in width (the alignment paper's MLPs of several
    widths, CNN feature maps read with ``token="all"`` or ``"mean"``). ``data``: an array or
    tensor of inputs (cut into ``batch_size`` rows), a ``Dataset`` of ``(input, label)``, or an
    iterable of batches. ``layers``: indices into ``0..L`` (default all ``L + 1``).
    """
    parts: list[list[np.ndarray]] | None = None
    for b in stream(model, data, layers, token, batch_size, device, progress):
        if parts is None:
            parts = [[] for _ in b.entries]
        for part, h in zip(parts, b.entries):
            part.append(h.double().cpu().numpy())
    if parts is None:
        raise ValueError("no batches")
    return [np.concatenate(p) for p in parts]
