"""One adapter per model family: everything layersim needs to know about a model, stated once.

An :class:`Adapter` says where a family's blocks are, its embedding output, final norm, head, prefix tokens,
default token, and how to run one batch. :func:`get` finds a model's adapter in :data:`REGISTRY` (first match
wins); :func:`register` adds one, :func:`register_model` one for a class of your own (a decorator where it is
defined); ``adapters.markdown()`` lists the registered adapters. Every feature array is
``[L+1, N, d]``: index 0 the embedding output, index ``i`` the output of block ``i``, none with the final norm
(see docs/modules.md, ``layersim.nets.adapters``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "Adapter",
    "REGISTRY",
    "clip_tower",
    "get",
    "markdown",
    "register",
    "register_model",
]

Token = str | int

# keys of a HF text batch passed to the model; other keys are ignored (labels are kept apart)
TEXT_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds")
LABEL_KEYS = ("labels", "label")


@dataclass(frozen=True)
class Adapter:
    """What layersim needs to know about one model family (see docs/modules.md, ``layersim.nets.adapters``).

    ``matches(model)``; ``blocks(model)`` in call order; ``set_blocks(model, modules)`` returns a restore function;
    ``final_norm(model)`` (``nn.Identity`` if none); ``head(model)``: ``[N, d]`` -> logits ``[N, K]``; ``run(model,
    inputs)``: one forward pass; ``inputs``: ``"images"``/``"text"``; ``n_prefix(model)``; ``token``: the default;
    ``uniform``: blocks keep the shape; ``widths(model)``: widths of entries ``0..L``, or None."""

    name: str
    models: str
    matches: Callable[[nn.Module], bool]
    blocks: Callable[[nn.Module], list[nn.Module]]
    set_blocks: Callable[[nn.Module, list[nn.Module]], Callable[[], None]]
    final_norm: Callable[[nn.Module], nn.Module]
    head: Callable[[nn.Module], nn.Module]
    run: Callable[[nn.Module, Any], Any]
    inputs: str = "images"
    n_prefix: Callable[[nn.Module], int] = field(default=lambda model: 0)
    token: Token = "cls"
    include_prefix: Callable[[nn.Module], bool] = field(default=lambda model: False)
    uniform: bool = True
    widths: Callable[[nn.Module], list[int] | None] = field(default=lambda model: _residual_widths(model))

    def n_layers(self, model: nn.Module) -> int:
        """The number of block calls ``L``; feature arrays have ``L + 1`` entries."""
        return len(self.blocks(model))


REGISTRY: list[Adapter] = []


def register(adapter: Adapter, first: bool = False, replace: bool = False) -> Adapter:
    """Add ``adapter`` to :data:`REGISTRY` (at the front with ``first=True``); names are unique unless ``replace``
    (a module re-imported, e.g. by autoreload, replaces its entry in place)."""
    same = [i for i, a in enumerate(REGISTRY) if a.name == adapter.name]
    if same and replace:
        REGISTRY[same[0]] = adapter
        return adapter
    if same:
        raise ValueError(f"an adapter named {adapter.name!r} is already registered")
    if first:
        REGISTRY.insert(0, adapter)
    else:
        REGISTRY.append(adapter)
    return adapter


def get(model: nn.Module) -> Adapter:
    """The adapter of ``model`` (a ``layersim.nets.surgery`` model: that of the model it wraps).

    Raises ``NotImplementedError`` naming the supported families and how to add one.
    """
    inner = getattr(model, "surgery_base", None)
    if isinstance(inner, nn.Module):
        model = inner
    if _model_type(model) == "clip":
        raise NotImplementedError("a CLIPModel has two towers: pass layersim.nets.adapters.clip_tower(model, "
                                  "'vision') or clip_tower(model, 'text')")
    for adapter in REGISTRY:
        if adapter.matches(model):
            return adapter
    names = ", ".join(a.name for a in REGISTRY)
    raise NotImplementedError(
        f"unsupported model {type(model).__name__}: layersim has adapters for {names}. Add one with "
        "layersim.nets.adapters.register(Adapter(...)) (see the layersim.nets.adapters docstring) and test it "
        "on a random-init tiny config")


def markdown() -> str:
    """A Markdown table of the registered adapters: name, models, inputs, default token."""
    rows = ["| adapter | models | inputs | token |", "|---|---|---|---|"]
    rows += [f"| `{a.name}` | {a.models} | {a.inputs} | `{a.token}` |" for a in REGISTRY]
    return "\n".join(rows)


# ----------------------------------------------------------------------------- helpers


def _residual_widths(model: nn.Module) -> list[int] | None:
    """``[d] * (L + 1)`` for a model whose blocks read and write one residual stream of width ``d``
    (``config.hidden_size`` or its aliases; timm ``embed_dim``), None if the model states none."""
    d = getattr(getattr(model, "config", None), "hidden_size", None)
    if d is None:
        d = getattr(model, "embed_dim", None)
    if isinstance(d, bool) or not isinstance(d, int):
        return None
    return [d] * (len(get(model).blocks(model)) + 1)


def _model_type(model: nn.Module) -> str | None:
    return getattr(getattr(model, "config", None), "model_type", None)


def _is_hf(model: nn.Module) -> bool:
    tr = sys.modules.get("transformers")
    return tr is not None and isinstance(model, tr.PreTrainedModel)


def _attr(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def _first_attr(obj: Any, *paths: str) -> Any:
    """The first of ``paths`` (dotted attribute paths) that ``obj`` has (transformers 4 and 5
    moved some block lists, e.g. ViT's ``encoder.layer`` to ``layers``)."""
    for path in paths:
        try:
            return _attr(obj, path)
        except AttributeError:
            continue
    raise AttributeError(f"{type(obj).__name__} has none of {paths}")


def container_setter(locate: Callable[[nn.Module], tuple[nn.Module, str]]):
    """``set_blocks`` for a family whose blocks live in one ``ModuleList`` / ``Sequential``
    attribute: swap in a container of the same kind holding ``modules``; restore puts the
    original object back (no weights are copied)."""

    def set_blocks(model: nn.Module, modules: list[nn.Module]) -> Callable[[], None]:
        parent, name = locate(model)
        original = getattr(parent, name)
        new = nn.Sequential(*modules) if isinstance(original, nn.Sequential) else nn.ModuleList(modules)
        setattr(parent, name, new)
        return lambda: setattr(parent, name, original)

    return set_blocks


def _no_head(why: str) -> Callable[[nn.Module], nn.Module]:
    def head(model: nn.Module) -> nn.Module:
        raise ValueError(f"{type(model).__name__} has no classifier head: {why}")

    return head


def identity(model: nn.Module) -> nn.Module:
    """A final norm or head that does nothing: the family has none."""
    return nn.Identity()


def _hf_run(model: nn.Module, inputs: Any) -> Any:
    """Run a HF model's base model (no head: an LM head on every token would be wasted)."""
    if isinstance(inputs, Mapping):
        return model.base_model(**inputs)
    return model.base_model(pixel_values=inputs)


def _decoder_run(model: nn.Module, inputs: Mapping) -> Any:
    """A decoder's base model without a KV cache; given an ``attention_mask`` and no
    ``position_ids``, positions are ``cumsum(mask) - 1`` (what ``generate`` does), so left
    padding does not shift GPT-2's absolute positions."""
    kwargs = dict(inputs, use_cache=False)
    mask = kwargs.get("attention_mask")
    if mask is not None and "position_ids" not in kwargs:
        kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return model.base_model(**kwargs)


# ----------------------------------------------------------------------------- heads


class BertPoolerHead(nn.Module):
    """BERT's / ALBERT's classifier on one token feature: pooler dense + tanh, dropout, then the
    classifier (what ``*ForSequenceClassification`` applies to the [CLS] token)."""

    def __init__(self, dense: nn.Module, activation: nn.Module, dropout: nn.Module | None,
                 classifier: nn.Module):
        super().__init__()
        self.dense, self.activation = dense, activation
        self.dropout = dropout if dropout is not None else nn.Identity()
        self.classifier = classifier

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.activation(self.dense(h))))


class SequenceHead(nn.Module):
    """Wraps a head that reads ``features[:, 0]`` (RoBERTa's, ELECTRA's) so it takes ``[N, d]``."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h[:, None, :])


class DistilBertHead(nn.Module):
    """DistilBERT's classifier on one token feature: pre_classifier, ReLU, dropout, classifier."""

    def __init__(self, pre: nn.Module, dropout: nn.Module, classifier: nn.Module):
        super().__init__()
        self.pre, self.dropout, self.classifier = pre, dropout, classifier

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(torch.relu(self.pre(h))))


class SummaryHead(nn.Module):
    """ELECTRA's multiple-choice head on one token feature: its sequence summary of the first token
    (dense, activation, dropout), then the classifier."""

    def __init__(self, summary: nn.Module, classifier: nn.Module):
        super().__init__()
        self.summary, self.classifier = summary, classifier

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.summary(h[:, None, :]))


def _encoder_head(model: nn.Module) -> nn.Module:
    """The classifier of a BERT-like ``*ForSequenceClassification`` (or ``*ForMultipleChoice``: one
    logit per (context, ending) row) on one token."""
    classifier = getattr(model, "classifier", None)
    if classifier is None:
        raise ValueError(f"{type(model).__name__} has no classifier (a bare encoder)")
    base = model.base_model
    if type(classifier).__name__.endswith("ClassificationHead"):
        return SequenceHead(classifier)
    if isinstance(getattr(model, "sequence_summary", None), nn.Module):
        return SummaryHead(model.sequence_summary, classifier)
    pooler = getattr(base, "pooler", None)
    if isinstance(getattr(pooler, "dense", None), nn.Module):  # BERT: pooler.dense + activation
        return BertPoolerHead(pooler.dense, pooler.activation, getattr(model, "dropout", None), classifier)
    if isinstance(pooler, nn.Linear):  # ALBERT: pooler Linear + pooler_activation
        return BertPoolerHead(pooler, base.pooler_activation, getattr(model, "dropout", None), classifier)
    return classifier


def _decoder_head(model: nn.Module) -> nn.Module:
    if isinstance(getattr(model, "score", None), nn.Module):
        return model.score
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no lm_head / score (a bare decoder)")
    return head


# ----------------------------------------------------------------------------- timm ViT


def _is_timm_vit(model: nn.Module) -> bool:
    vt = sys.modules.get("timm.models.vision_transformer")
    return vt is not None and isinstance(model, vt.VisionTransformer)


def _timm_final_norm(model: nn.Module) -> nn.Module:
    fc_norm = getattr(model, "fc_norm", None)
    if fc_norm is not None and not isinstance(fc_norm, nn.Identity):
        return fc_norm
    return model.norm


def _timm_head(model: nn.Module) -> nn.Module:
    if getattr(model, "attn_pool", None) is not None:
        raise NotImplementedError("attention-pooled ViTs (global_pool='map') are not supported")
    return model.head


register(Adapter(
    name="timm_vit",
    models="timm `VisionTransformer` and subclasses (ViT, DeiT, distilled DeiT)",
    matches=_is_timm_vit,
    blocks=lambda m: list(m.blocks),
    set_blocks=container_setter(lambda m: (m, "blocks")),
    final_norm=_timm_final_norm,
    head=_timm_head,
    run=lambda m, x: m.forward_features(x),
    n_prefix=lambda m: int(m.num_prefix_tokens),
    include_prefix=lambda m: bool(getattr(m, "pool_include_prefix", False)),
))


# ----------------------------------------------------------------------------- HF vision


def _hf_of(*types: str) -> Callable[[nn.Module], bool]:
    return lambda m: _is_hf(m) and _model_type(m) in types


def _hf_blocks_at(*paths: str):
    """(``blocks``, ``set_blocks``) for a HF family whose base model holds its blocks at the first
    of ``paths``."""

    def locate(model: nn.Module) -> tuple[nn.Module, str]:
        base = model.base_model
        for path in paths:
            parent_path, _, name = path.rpartition(".")
            try:
                parent = _attr(base, parent_path) if parent_path else base
                if isinstance(getattr(parent, name), nn.ModuleList):
                    return parent, name
            except AttributeError:
                continue
        raise AttributeError(f"{type(model).__name__} has no block list at any of {paths}")

    def blocks(model: nn.Module) -> list[nn.Module]:
        parent, name = locate(model)
        return list(getattr(parent, name))

    return blocks, container_setter(locate)


def _hf_classifier(*names: str) -> Callable[[nn.Module], nn.Module]:
    def head(model: nn.Module) -> nn.Module:
        for name in names:
            if isinstance(getattr(model, name, None), nn.Module):
                return getattr(model, name)
        raise ValueError(f"{type(model).__name__} has no classifier (a bare model)")

    return head


def _hf_adapter(name: str, models: str, matches: Callable[[nn.Module], bool], block_paths: tuple[str, ...],
                final_norm: Callable[[nn.Module], nn.Module], head: Callable[[nn.Module], nn.Module],
                run: Callable[[nn.Module, Any], Any] = _hf_run, **kw: Any) -> Adapter:
    """An adapter for a HF family whose blocks are one ``ModuleList`` at the first of ``block_paths``
    (relative to the base model)."""
    blocks, set_blocks = _hf_blocks_at(*block_paths)
    return Adapter(name=name, models=models, matches=matches, blocks=blocks, set_blocks=set_blocks,
                   final_norm=final_norm, head=head, run=run, **kw)


register(_hf_adapter(
    "hf_vit", "HF `ViTModel`, `ViTForImageClassification`", _hf_of("vit"), ("layers", "encoder.layer"),
    final_norm=lambda m: m.base_model.layernorm,
    head=_hf_classifier("classifier"),
    n_prefix=lambda m: 1,
))

register(_hf_adapter(
    "hf_deit", "HF `DeiTModel`, `DeiTForImageClassification[WithTeacher]` (class + distillation token; "
           "the head is the class-token classifier)",
    _hf_of("deit"), ("layers", "encoder.layer"),
    final_norm=lambda m: m.base_model.layernorm,
    head=_hf_classifier("cls_classifier", "classifier"),
    n_prefix=lambda m: 2,
))

register(_hf_adapter(
    "dinov2", "HF `Dinov2Model`, `Dinov2WithRegistersModel` (final `layernorm`)", _hf_of("dinov2", "dinov2_with_registers"), ("encoder.layer", "layers"),
    final_norm=lambda m: m.base_model.layernorm,
    head=_no_head("DINOv2's classifier reads [cls, mean of patch tokens], not one token feature; "
                  "fit a probe on the features instead (layersim.measures.probe)"),
    n_prefix=lambda m: 1 + int(getattr(m.config, "num_register_tokens", 0) or 0),
))


# ----------------------------------------------------------------------------- HF text encoders


register(_hf_adapter(
    "bert", "BERT, RoBERTa, XLM-RoBERTa, ELECTRA, CamemBERT (post-LN encoders, no final norm)",
    _hf_of("bert", "roberta", "xlm-roberta", "electra", "camembert"), ("encoder.layer",),
    final_norm=identity,
    head=_encoder_head,
    inputs="text",
))


def _albert_blocks(model: nn.Module) -> list[nn.Module]:
    """ALBERT calls layer group ``int(i / (L / G))`` at step ``i`` (``G`` groups, usually one)."""
    enc, cfg = model.base_model.encoder, model.base_model.config
    L, G = cfg.num_hidden_layers, cfg.num_hidden_groups
    return [enc.albert_layer_groups[int(i / (L / G))] for i in range(L)]


def _albert_set_blocks(model: nn.Module, modules: list[nn.Module]) -> Callable[[], None]:
    """ALBERT indexes its groups by step: give it one "group" per remaining step (the shared
    modules referenced again, no copy) and set ``num_hidden_layers = num_hidden_groups`` to
    their number; restore puts groups and config back."""
    enc, cfg = model.base_model.encoder, model.base_model.config
    saved = enc.albert_layer_groups, cfg.num_hidden_layers, cfg.num_hidden_groups
    enc.albert_layer_groups = nn.ModuleList(modules)
    cfg.num_hidden_layers = cfg.num_hidden_groups = len(modules)

    def restore() -> None:
        enc.albert_layer_groups, cfg.num_hidden_layers, cfg.num_hidden_groups = saved

    return restore


register(Adapter(
    name="albert",
    models="ALBERT (one shared layer group applied `num_hidden_layers` times)",
    matches=_hf_of("albert"),
    blocks=_albert_blocks,
    set_blocks=_albert_set_blocks,
    final_norm=identity,
    head=_encoder_head,
    run=_hf_run,
    inputs="text",
))


def _distilbert_head(model: nn.Module) -> nn.Module:
    if not hasattr(model, "pre_classifier"):
        raise ValueError(f"{type(model).__name__} has no classifier (a bare encoder)")
    return DistilBertHead(model.pre_classifier, model.dropout, model.classifier)


register(_hf_adapter(
    "distilbert", "DistilBERT", _hf_of("distilbert"), ("transformer.layer",),
    final_norm=identity,
    head=_distilbert_head,
    inputs="text",
))


# ----------------------------------------------------------------------------- HF decoders


register(_hf_adapter(
    "gpt2", "GPT-2 (`GPT2LMHeadModel`, `GPT2ForSequenceClassification`, `GPT2Model`)", _hf_of("gpt2"), ("h",),
    final_norm=lambda m: m.base_model.ln_f,
    head=_decoder_head,
    run=_decoder_run,
    inputs="text",
    token="last",
))


def _is_llama_style(model: nn.Module) -> bool:
    """A HF decoder with ``embed_tokens``, a ``layers`` ModuleList and a final ``norm``."""
    if not _is_hf(model) or getattr(model.config, "is_encoder_decoder", False):
        return False
    base = model.base_model
    return (isinstance(getattr(base, "layers", None), nn.ModuleList)
            and isinstance(getattr(base, "norm", None), nn.Module)
            and isinstance(getattr(base, "embed_tokens", None), nn.Module))


register(_hf_adapter(
    "llama", "LLaMA-style decoders: LLaMA, Mistral, Qwen2, SmolLM2, ... (`embed_tokens`, `layers`, `norm`)", _is_llama_style, ("layers",),
    final_norm=lambda m: m.base_model.norm,
    head=_decoder_head,
    run=_decoder_run,
    inputs="text",
    token="last",
))


# ----------------------------------------------------------------------------- CLIP


class ClipTower(nn.Module):
    """One tower of a HF ``CLIPModel`` with its projection, sharing the model's weights.

    ``forward`` returns CLIP's embedding (``image_embeds`` / ``text_embeds``, not normalised).
    Made by :func:`clip_tower`.
    """

    def __init__(self, clip: nn.Module, which: str):
        super().__init__()
        if which not in ("vision", "text"):
            raise ValueError(f"which must be 'vision' or 'text', got {which!r}")
        self.which = which
        self.tower = clip.vision_model if which == "vision" else clip.text_model
        self.projection = clip.visual_projection if which == "vision" else clip.text_projection
        self.config = self.tower.config

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.projection(self.tower(*args, **kwargs).pooler_output)


def clip_tower(clip: nn.Module, which: str) -> ClipTower:
    """The ``"vision"`` or ``"text"`` tower of a HF ``CLIPModel`` as one model (no copy)."""
    if _model_type(clip) != "clip":
        raise ValueError(f"clip_tower takes a HF CLIPModel, got {type(clip).__name__}")
    return ClipTower(clip, which)


def _clip_parts(model: nn.Module) -> tuple[nn.Module, nn.Module | None]:
    """(tower, projection or None) of a :class:`ClipTower` or a HF CLIP single-tower model."""
    if isinstance(model, ClipTower):
        return model.tower, model.projection
    tower = model.vision_model if hasattr(model, "vision_model") else model.text_model
    proj = getattr(model, "visual_projection", None) or getattr(model, "text_projection", None)
    return tower, proj


def _clip_matches(which: str) -> Callable[[nn.Module], bool]:
    model_type = f"clip_{which}_model"

    def matches(model: nn.Module) -> bool:
        if isinstance(model, ClipTower):
            return model.which == which
        return _is_hf(model) and _model_type(model) == model_type

    return matches


def _clip_locate(model: nn.Module) -> tuple[nn.Module, str]:
    return _clip_parts(model)[0].encoder, "layers"


def _clip_head(model: nn.Module) -> nn.Module:
    proj = _clip_parts(model)[1]
    if proj is None:
        raise ValueError(f"{type(model).__name__} has no projection (use a *WithProjection model or "
                         "layersim.nets.adapters.clip_tower)")
    return proj


def _clip_run(model: nn.Module, inputs: Any) -> Any:
    tower = _clip_parts(model)[0]
    if isinstance(inputs, Mapping):
        return tower(**{k: v for k, v in inputs.items() if k != "token_type_ids"})
    return tower(pixel_values=inputs)


def _clip_adapter(which: str, norm: str, models: str, inputs: str, token: Token) -> Adapter:
    """The adapter of CLIP's ``which`` tower, whose final norm is the tower's ``norm``."""
    return Adapter(
        name=f"clip_{which}",
        models=models,
        matches=_clip_matches(which),
        blocks=lambda m: list(_clip_locate(m)[0].layers),
        set_blocks=container_setter(_clip_locate),
        final_norm=lambda m: getattr(_clip_parts(m)[0], norm),
        head=_clip_head,
        run=_clip_run,
        inputs=inputs,
        n_prefix=lambda m: 1 if which == "vision" else 0,
        token=token,
    )


register(_clip_adapter("vision", "post_layernorm", "CLIP's vision tower: `clip_tower(clip, 'vision')`, "
                       "`CLIPVisionModel[WithProjection]`", inputs="images", token="cls"))
register(_clip_adapter("text", "final_layer_norm", "CLIP's text tower: `clip_tower(clip, 'text')`, "
                       "`CLIPTextModel[WithProjection]` (read the EOS token: `token='last'` with right "
                       "padding)", inputs="text", token="last"))


# ----------------------------------------------------------------------------- families without surgery


def no_surgery(why: str) -> Callable[[nn.Module, list[nn.Module]], Callable[[], None]]:
    """``set_blocks`` for a family whose blocks cannot be spliced: it refuses, saying ``why``."""
    def set_blocks(model: nn.Module, modules: list[nn.Module]) -> Callable[[], None]:
        raise ValueError(f"{type(model).__name__} does not support block surgery: {why}")

    return set_blocks


#: why a CNN's blocks cannot be spliced (its own adapter and torchvision's say it)
CNN_SURGERY = "its stages change the shape of the representation (channels, resolution)"


def ragged(name: str, models: str, matches: Callable[[nn.Module], bool], blocks: Callable[[nn.Module], list],
           head: Callable[[nn.Module], nn.Module], why: str = CNN_SURGERY) -> Adapter:
    """The adapter of a family whose blocks change the representation's shape (a CNN's stages, an RBF layer): no
    final norm, no surgery (refused saying ``why``), its own forward pass, every position read (``token="all"``),
    ``uniform=False`` (its layers are read with ``models.layer_outputs``)."""
    return Adapter(name=name, models=models, matches=matches, blocks=blocks, set_blocks=no_surgery(why),
                   final_norm=identity, head=head, run=lambda m, x: m(x), token="all", uniform=False)


def _getter(spec: str | Callable[[nn.Module], Any], what: str) -> Callable[[nn.Module], Any]:
    """A function of the model: ``spec`` itself, or the module at the dotted attribute path ``spec``."""
    if callable(spec):
        return spec
    if isinstance(spec, str) and spec:
        return lambda model: _attr(model, spec)
    raise ValueError(f"{what} must be an attribute path of the model (e.g. 'layers') or a function of it, got {spec!r}")


def register_model(blocks: str | Callable[[nn.Module], list], head: str | Callable | None = None,
                   final_norm: str | Callable | None = None, *, name: str | None = None, models: str | None = None,
                   inputs: str = "images", token: Token = "cls", uniform: bool = True,
                   widths: Callable[[nn.Module], list[int] | None] | None = None, why: str = CNN_SURGERY,
                   first: bool = False) -> Callable[[type], type]:
    """Class decorator: instances of the decorated ``nn.Module`` class are read through an :class:`Adapter` (registered
    with ``replace=True``). ``blocks``: the attribute path of the container of blocks, in call order (surgery swaps
    it), or a function of the model giving them; ``head``, ``final_norm``: attribute paths or functions (None: no
    head, no norm). ``inputs``: ``"images"`` (tensors, ``model(x)``) or ``"text"`` (dicts, ``model(**x)``);
    ``uniform=False``: blocks change the shape (no surgery, refused saying ``why``)."""
    if inputs not in ("images", "text"):
        raise ValueError(f"inputs must be 'images' or 'text', got {inputs!r}")
    get_blocks = (lambda model: list(_attr(model, blocks))) if isinstance(blocks, str) else _getter(blocks, "blocks")

    def decorate(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"register_model decorates a torch.nn.Module class, got {cls!r}")
        key = name or cls.__name__.lower()
        about = models or f"`{cls.__module__}.{cls.__qualname__}`"
        matches = lambda model: isinstance(model, cls)  # noqa: E731
        get_head = _getter(head, "head") if head is not None else _no_head("none was given to register_model")
        if not uniform:
            register(ragged(key, about, matches, get_blocks, get_head, why), first=first, replace=True)
            return cls
        extra = {} if widths is None else {"widths": widths}
        set_blocks = (container_setter(lambda model: (_attr(model, blocks.rpartition(".")[0]) if "." in blocks
                                                      else model, blocks.rpartition(".")[2]))
                      if isinstance(blocks, str) else no_surgery("its blocks were given as a function, not one "
                                                                 "container attribute"))
        run = (lambda model, x: model(**x)) if inputs == "text" else (lambda model, x: model(x))
        register(Adapter(name=key, models=about, matches=matches, blocks=get_blocks, set_blocks=set_blocks,
                         final_norm=_getter(final_norm, "final_norm") if final_norm is not None else identity,
                         head=get_head, run=run, inputs=inputs, token=token, **extra), first=first, replace=True)
        return cls

    return decorate


def _is_torchvision(cls: str) -> Callable[[nn.Module], bool]:
    return lambda m: type(m).__module__.startswith("torchvision.models") and type(m).__name__ == cls


register(ragged(
    name="torchvision_resnet",
    models="torchvision ResNets: `layer1..layer4` and `avgpool` (the transferred features) as blocks; index 0 "
           "is the stem's output",
    matches=_is_torchvision("ResNet"),
    blocks=lambda m: [m.layer1, m.layer2, m.layer3, m.layer4, m.avgpool],
    head=lambda m: m.fc,
))

register(ragged(
    name="torchvision_vgg",
    models="torchvision VGGs: `features` (after the last pooling), `classifier.1` and `classifier.4` (the first "
           "two fully connected layers after their ReLU) as blocks",
    matches=_is_torchvision("VGG"),
    blocks=lambda m: [m.features, m.classifier[1], m.classifier[4]],
    head=lambda m: m.classifier[6],
))
