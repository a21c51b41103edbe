"""One way to read every layer's representation of one token from a transformer.

Supported families (detected from the model object, nothing is downloaded):

- **timm ViT / DeiT**: ``timm.models.vision_transformer.VisionTransformer`` and subclasses
  (``VisionTransformerDistilled``); read with forward hooks on ``model.blocks``.
- **HF encoders**: BERT-like ``AutoModel`` / ``*ForSequenceClassification`` (BERT, RoBERTa,
  DistilBERT...); read with ``output_hidden_states=True``.
- **HF decoders**: GPT-2 and LLaMA-style (LLaMA, Mistral, Qwen2, SmolLM...) ``*ForCausalLM``
  / ``*ForSequenceClassification``; read with ``output_hidden_states=True``.

Layer index convention of every ``[L+1, N, d]`` array (``L = n_layers(model)`` blocks):

- index 0 is the embedding output = the input of block 0. timm: after ``patch_embed``, the
  class (and dist / register) tokens, ``pos_embed``, ``pos_drop``, ``patch_drop`` and
  ``norm_pre``. HF: ``hidden_states[0]`` (token + position embeddings, BERT: after its
  embedding LayerNorm).
- index ``i`` (1..L) is the output of block ``i`` (1-based; ``block_modules(model)[i-1]``),
  i.e. ``H^(i)`` of eq. (1) of the tracing paper.
- whether the LAST entry already carries the model's final norm (``last_has_final_norm``):

  ========================  =============================  ==================================
  family                    final norm (``final_norm``)    last entry normed?
  ========================  =============================  ==================================
  timm ViT / DeiT           ``model.norm`` (or ``fc_norm``  no: the hooks read block outputs,
                            when global_pool='avg')        ``model.norm`` is not applied
  HF GPT-2                  ``transformer.ln_f``           yes: ``hidden_states[-1]`` has ln_f,
                                                           earlier entries do not
  HF LLaMA-style            ``model.norm`` (RMSNorm)       yes, likewise
  HF BERT / RoBERTa         none (post-LN blocks)          no (there is no final norm)
  ========================  =============================  ==================================

  The readout (``layersim.readout.layer_logits``) therefore applies ``final_norm`` to every
  entry except the last one when ``last_has_final_norm`` is true.

Tokens (the ``token`` argument): ``"cls"`` = position 0 (timm: the class token; DeiT distilled
models also have a dist token at position 1: use ``token=1`` and ``model.head_dist`` for it);
``"last"`` = the last non-padding token per sample (from ``attention_mask``; works for right
and left padding; without a mask, the last position); ``"mean"`` = mean over non-padding
tokens (HF) or over the patch tokens excluding the prefix (class/dist/register) tokens (timm,
as timm's ``global_pool='avg'``; all tokens if ``model.pool_include_prefix``); an ``int`` =
that position of the (padded) sequence, negative counts from the end.

HF decoders (GPT-2, LLaMA-style) given an ``attention_mask`` and no ``position_ids`` get
``position_ids = cumsum(mask) - 1`` (what ``generate`` does), so left padding does not shift
the absolute positions of GPT-2; encoders get HF's default positions (pad them on the right).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "Features",
    "block_modules",
    "classifier_head",
    "collect",
    "evaluating",
    "family",
    "final_norm",
    "hidden_states",
    "last_has_final_norm",
    "n_layers",
    "resolve_device",
]

Token = str | int

# keys of a HF batch passed to the model; other keys are ignored (labels are kept apart)
_HF_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds")
_LABEL_KEYS = ("labels", "label")


# ----------------------------------------------------------------------------- families


def _is_timm_vit(model: nn.Module) -> bool:
    vt = sys.modules.get("timm.models.vision_transformer")
    return vt is not None and isinstance(model, vt.VisionTransformer)


def _is_hf(model: nn.Module) -> bool:
    tr = sys.modules.get("transformers")
    return tr is not None and isinstance(model, tr.PreTrainedModel)


def family(model: nn.Module) -> str:
    """The model's family: ``"timm_vit"``, ``"gpt2"``, ``"llama"`` (LLaMA-style) or ``"bert"``.

    Raises ``NotImplementedError`` for anything else (its conventions are unverified).
    """
    if _is_timm_vit(model):
        return "timm_vit"
    if _is_hf(model):
        if getattr(model.config, "is_encoder_decoder", False):
            raise NotImplementedError("encoder-decoder HF models are not supported")
        base = model.base_model
        if hasattr(base, "h") and isinstance(getattr(base, "ln_f", None), nn.Module):
            return "gpt2"
        if isinstance(getattr(base, "layers", None), nn.ModuleList) and isinstance(
            getattr(base, "norm", None), nn.Module
        ):
            return "llama"
        text = hasattr(getattr(base, "embeddings", None), "word_embeddings")
        if text and hasattr(getattr(base, "encoder", None), "layer"):
            return "bert"  # BERT, RoBERTa, ELECTRA...: post-LN encoder, no final norm
        if text and hasattr(getattr(base, "transformer", None), "layer"):
            return "bert"  # DistilBERT
    raise NotImplementedError(
        f"unsupported model {type(model).__name__}: expected a timm VisionTransformer or a HF "
        "BERT-like encoder / GPT-2 / LLaMA-style decoder"
    )


def block_modules(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks in forward order (timm ``blocks``, GPT-2 ``h``, LLaMA ``layers``,
    BERT ``encoder.layer``); the objects themselves, for hooking, skipping or replacing."""
    fam = family(model)
    if fam == "timm_vit":
        return list(model.blocks)
    base = model.base_model
    if fam == "gpt2":
        return list(base.h)
    if fam == "llama":
        return list(base.layers)
    encoder = base.encoder if hasattr(base, "encoder") else base.transformer
    return list(encoder.layer)


def n_layers(model: nn.Module) -> int:
    """The number of transformer blocks ``L``; feature arrays have ``L + 1`` entries."""
    return len(block_modules(model))


def final_norm(model: nn.Module) -> nn.Module:
    """The norm the model applies between its last block and its classifier, else Identity.

    timm: ``model.fc_norm`` when it is used (global_pool='avg', applied after pooling), else
    ``model.norm`` (per token; with global_pool='avg' and ``fc_norm=False`` the model norms
    before pooling, so a readout of "mean" features is then only approximate). GPT-2:
    ``transformer.ln_f``. LLaMA-style: ``model.norm``. BERT-like: Identity (post-LN blocks).
    """
    fam = family(model)
    if fam == "timm_vit":
        fc_norm = getattr(model, "fc_norm", None)
        if fc_norm is not None and not isinstance(fc_norm, nn.Identity):
            return fc_norm
        return model.norm
    if fam == "gpt2":
        return model.base_model.ln_f
    if fam == "llama":
        return model.base_model.norm
    return nn.Identity()


def last_has_final_norm(model: nn.Module) -> bool:
    """Whether the last entry of our features already has ``final_norm`` applied.

    False for timm ViT (block outputs) and BERT-like (no final norm); True for HF GPT-2 and
    LLaMA-style, whose ``hidden_states[-1]`` is taken after ``ln_f`` / ``norm``.
    """
    return family(model) in ("gpt2", "llama")


class _BertPoolerHead(nn.Module):
    """BERT's "last-layer classifier" on a token feature: pooler dense + tanh, then the
    classifier (what ``BertForSequenceClassification`` applies to the [CLS] token)."""

    def __init__(self, pooler: nn.Module, dropout: nn.Module | None, classifier: nn.Module):
        super().__init__()
        self.dense, self.activation = pooler.dense, pooler.activation
        self.dropout = dropout if dropout is not None else nn.Identity()
        self.classifier = classifier

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.activation(self.dense(h))))


class _SequenceHead(nn.Module):
    """Wraps a head that reads ``features[:, 0]`` (RoBERTa's) so that it takes ``[N, d]``."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h[:, None, :])


class _DistilBertHead(nn.Module):
    """DistilBERT's classifier on a token feature: pre_classifier, ReLU, classifier."""

    def __init__(self, pre: nn.Module, dropout: nn.Module, classifier: nn.Module):
        super().__init__()
        self.pre, self.dropout, self.classifier = pre, dropout, classifier

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(torch.relu(self.pre(h))))


def classifier_head(model: nn.Module) -> nn.Module:
    """The last-layer classifier ``g`` mapping one (final-normed) token feature ``[N, d]`` to
    logits ``[N, K]`` (the ``W`` of the tracing paper's section 2, with its bias).

    timm: ``model.head`` (DeiT distilled: the class-token head only; its own output averages
    it with ``head_dist`` on the dist token). GPT-2 / LLaMA: ``lm_head`` (``*ForCausalLM``) or
    ``score`` (``*ForSequenceClassification``). BERT ``*ForSequenceClassification``: pooler
    dense + tanh + ``classifier`` (BERT pools the [CLS] token, so the readout of ``token="cls"``
    reproduces the model's logits); RoBERTa: its ``classifier`` head (dense + tanh + out_proj);
    DistilBERT: ``pre_classifier`` + ReLU + ``classifier``. A bare encoder has no classifier.
    """
    fam = family(model)
    if fam == "timm_vit":
        if getattr(model, "attn_pool", None) is not None:
            raise NotImplementedError("attention-pooled ViTs (global_pool='map') are not supported")
        return model.head
    if fam in ("gpt2", "llama"):
        if isinstance(getattr(model, "score", None), nn.Module):
            return model.score
        head = model.get_output_embeddings()
        if head is None:
            raise ValueError(f"{type(model).__name__} has no lm_head / score (a bare decoder)")
        return head
    classifier = getattr(model, "classifier", None)
    if classifier is None:
        raise ValueError(f"{type(model).__name__} has no classifier (a bare encoder)")
    base = model.base_model
    if hasattr(model, "pre_classifier"):
        return _DistilBertHead(model.pre_classifier, model.dropout, classifier)
    if type(classifier).__name__.endswith("ClassificationHead"):
        return _SequenceHead(classifier)
    if getattr(base, "pooler", None) is not None:
        return _BertPoolerHead(base.pooler, getattr(model, "dropout", None), classifier)
    return classifier


# ----------------------------------------------------------------------------- helpers


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → cuda when available, else cpu; anything else as ``torch.device``."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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
    """One token feature ``[B, d]`` out of ``h [B, T, d]`` (see the module docstring)."""
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
    raise ValueError(f"token must be 'cls', 'last', 'mean' or an int, got {token!r}")


def _layer_ids(layers: Sequence[int] | None, L: int) -> list[int]:
    """Layer indices in 0..L (negatives count from the end) for ``layers=None`` → all."""
    if layers is None:
        return list(range(L + 1))
    ids = [int(i) + (L + 1 if int(i) < 0 else 0) for i in layers]
    if any(not 0 <= i <= L for i in ids):
        raise IndexError(f"layers {list(layers)} out of range for {L + 1} entries")
    return ids


def _split_batch(batch: Any, hf: bool) -> tuple[Any, torch.Tensor | None]:
    """(model inputs, labels or None) of one batch: vision ``(images, labels, ...)`` tuples or
    image tensors; HF dicts (``labels`` / ``label`` keys are the labels)."""
    if hf:
        if not isinstance(batch, Mapping):
            raise TypeError("HF models take batches that are dicts of tensors (input_ids, ...)")
        labels = next((batch[k] for k in _LABEL_KEYS if k in batch), None)
        inputs = {k: batch[k] for k in _HF_INPUT_KEYS if k in batch and batch[k] is not None}
        return inputs, labels
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, (tuple, list)):
        return batch[0], (batch[1] if len(batch) > 1 else None)
    raise TypeError(f"vision batches are image tensors or (images, labels) tuples, got {type(batch)}")


def _features_timm(model, images, token, ids):
    """[len(ids), B, d] for one image batch: hooks on every block, one forward_features."""
    blocks = block_modules(model)
    include_prefix = bool(getattr(model, "pool_include_prefix", False))
    picked: list[torch.Tensor] = []

    def keep(x):
        picked.append(_select(x, token, None, model.num_prefix_tokens, include_prefix))

    handles = [blocks[0].register_forward_pre_hook(lambda m, args: keep(args[0]))]
    for blk in dict.fromkeys(blocks):  # unique modules, calls recorded in order
        handles.append(blk.register_forward_hook(lambda m, args, out: keep(out)))
    try:
        model.forward_features(images)
    finally:
        for h in handles:
            h.remove()
    if len(picked) != len(blocks) + 1:
        raise RuntimeError(f"expected {len(blocks) + 1} hooked outputs, got {len(picked)}")
    return torch.stack([picked[i] for i in ids])


def _features_hf(model, inputs, token, ids, fam):
    """[len(ids), B, d] for one HF batch from ``output_hidden_states=True``."""
    mask = inputs.get("attention_mask")
    kwargs = dict(inputs)
    if fam in ("gpt2", "llama"):
        kwargs["use_cache"] = False
        if mask is not None and "position_ids" not in kwargs:
            kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
    hs = model.base_model(**kwargs, output_hidden_states=True, return_dict=True).hidden_states
    if len(hs) != n_layers(model) + 1:
        raise RuntimeError(f"expected {n_layers(model) + 1} hidden states, got {len(hs)}")
    return torch.stack([_select(hs[i], token, mask, 0, True) for i in ids])


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
    token: Token = "cls",
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
    out: str | os.PathLike | None = None,
) -> Features:
    """Every layer's representation ``h^(l)`` of one token, for every sample, plus labels.

    One forward pass per batch, in eval mode under ``torch.no_grad`` (the model's training
    flag is restored after; the model is moved to ``device``: ``"auto"`` = cuda if available
    else cpu). ``batches``: a DataLoader or any iterable of batches: vision ``(images, labels)``
    tuples or image tensors; HF dicts of tensors (``input_ids``, ``attention_mask``,
    ``token_type_ids``, ``position_ids``, ``inputs_embeds`` are passed on; ``labels`` /
    ``label`` are kept as labels when they are one per sample, other keys ignored).
    ``token``: ``"cls" | "last" | "mean" | int`` (module docstring). ``layers``: indices into
    0..L to keep (default all ``L + 1``). Index 0 is the embedding output, index i the output
    of block i; the last entry has the final norm only for GPT-2 / LLaMA-style models
    (``last_has_final_norm``).

    ``out``: a path for a ``.npy`` file; features are written into a memmap of the final
    shape (preallocated from ``len(batches.dataset)`` when available, else grown by doubling
    and trimmed at the end) so that memory stays bounded by one batch plus copy chunks;
    reopen it with ``np.load(out, mmap_mode="r")``.
    """
    fam = family(model)
    L = n_layers(model)
    ids = _layer_ids(layers, L)
    dev = resolve_device(device)
    model.to(dev)
    store: _Store | None = None
    labels: list[np.ndarray] = []
    with_labels: bool | None = None
    with evaluating(model):
        for batch in _progress(batches, progress):
            inputs, y = _split_batch(batch, hf=fam != "timm_vit")
            inputs = _to_device(inputs, dev)
            if fam == "timm_vit":
                feats = _features_timm(model, inputs, token, ids)
            else:
                feats = _features_hf(model, inputs, token, ids, fam)
            block = feats.float().cpu().numpy()
            if store is None:
                capacity = _expected_n(batches) or 8 * block.shape[1]
                store = _Store(len(ids), block.shape[2], capacity, out)
            store.append(block)
            y = None if y is None else np.asarray(torch.as_tensor(y).cpu())
            has = y is not None and y.ndim == 1 and len(y) == block.shape[1]
            if with_labels is not None and has != with_labels:
                raise ValueError("some batches carry per-sample labels and others do not")
            with_labels = has
            if has:
                labels.append(y)
    if store is None:
        raise ValueError("no batches")
    return Features(store.finish(), np.concatenate(labels) if with_labels else None, ids)


def hidden_states(
    model: nn.Module,
    batches: Iterable[Any],
    token: Token = "cls",
    layers: Sequence[int] | None = None,
    device: str | torch.device = "auto",
    progress: bool = True,
    out: str | os.PathLike | None = None,
) -> np.ndarray:
    """Float32 ``[L+1, N, d]`` features of ``token`` at every layer (``collect`` without labels).

    Index 0: embedding output (input of block 0); index i: output of block i; the last entry
    already has the final norm only for HF GPT-2 / LLaMA-style (see ``last_has_final_norm``).
    With ``out`` a ``.npy`` path, the result is a memmap of that file (see ``collect``).
    """
    return collect(model, batches, token, layers, device, progress, out).hidden
