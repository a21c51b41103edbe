"""Parameter counts of real architectures and of multi-exit models, and the published configurations.

Closed forms, checked in the tests against instantiated models: :func:`vit_params` (timm ``VisionTransformer``),
:func:`gpt2_params` (HF ``GPT2LMHeadModel``, also GPT-3's sizes), :func:`llama_params` (HF ``LlamaForCausalLM``);
one classifier per layer adds ``L - 1`` exit heads (:func:`multi_exit_params`). :func:`build_on_meta` instantiates
an architecture on the meta device for :func:`count_module`; :data:`HF_ARCHITECTURES` holds the published
configurations of the paper-scale models, built with random weights by :func:`build_random` (see docs/modules.md,
``layersim.nets.params``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = [
    "HF_ARCHITECTURES",
    "IMAGE_ENCODERS",
    "TINY_HF",
    "build_on_meta",
    "build_random",
    "count_module",
    "exit_head_params",
    "gpt2_params",
    "hf_config",
    "hf_params",
    "llama_params",
    "multi_exit_params",
    "param_saving",
    "vit_params",
]


def count_module(model: nn.Module) -> int:
    """``sum(p.numel())`` over the module's distinct parameters (tied weights counted once;
    works on the meta device)."""
    return sum(p.numel() for p in model.parameters())


def _linear(d_in: int, d_out: int, bias: bool = True) -> int:
    return d_in * d_out + (d_out if bias else 0)


def vit_params(embed_dim: int, depth: int, num_classes: int = 1000, img_size: int = 224, patch_size: int = 16,
               in_chans: int = 3, mlp_ratio: float = 4.0, qkv_bias: bool = True, class_token: bool = True) -> int:
    """Parameters of a timm ``VisionTransformer`` (global_pool='token', no register tokens):
    patch embedding (conv with bias), class token, position embedding (patches + class token),
    ``depth`` pre-LN blocks (LayerNorm, qkv, proj, LayerNorm, fc1, fc2), final LayerNorm and head."""
    d = embed_dim
    hidden = int(d * mlp_ratio)
    n_tokens = (img_size // patch_size) ** 2 + int(class_token)
    embed = in_chans * patch_size ** 2 * d + d + int(class_token) * d + n_tokens * d
    block = 2 * d + _linear(d, 3 * d, qkv_bias) + _linear(d, d) + 2 * d + _linear(d, hidden) + _linear(hidden, d)
    head = _linear(d, num_classes) if num_classes else 0
    return embed + depth * block + 2 * d + head


def gpt2_params(n_embd: int, n_layer: int, vocab_size: int = 50257, n_positions: int = 1024,
                n_inner: int | None = None, tie_word_embeddings: bool = True) -> int:
    """Parameters of an HF ``GPT2LMHeadModel``: token and position embeddings, ``n_layer``
    blocks (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj; all with biases), ln_f, and the LM head
    (``vocab_size x n_embd``, no bias; free when tied to the token embedding)."""
    d, inner = n_embd, n_inner or 4 * n_embd
    block = 2 * d + _linear(d, 3 * d) + _linear(d, d) + 2 * d + _linear(d, inner) + _linear(inner, d)
    head = 0 if tie_word_embeddings else vocab_size * d
    return vocab_size * d + n_positions * d + n_layer * block + 2 * d + head


def llama_params(hidden_size: int, intermediate_size: int, num_hidden_layers: int, num_attention_heads: int,
                 num_key_value_heads: int | None = None, vocab_size: int = 32000,
                 tie_word_embeddings: bool = False, head_dim: int | None = None) -> int:
    """Parameters of an HF ``LlamaForCausalLM`` without biases: token embedding,
    ``num_hidden_layers`` blocks (q, k, v, o projections with grouped-query k/v; gate, up, down
    SwiGLU projections; two RMSNorms), final RMSNorm and the LM head (untied unless asked)."""
    d = hidden_size
    hd = head_dim or d // num_attention_heads
    kv = num_key_value_heads or num_attention_heads
    attn = d * num_attention_heads * hd * 2 + d * kv * hd * 2
    block = attn + 3 * d * intermediate_size + 2 * d
    head = 0 if tie_word_embeddings else vocab_size * d
    return vocab_size * d + num_hidden_layers * block + d + head


def hf_params(config: Any) -> int:
    """Closed-form count for a transformers ``GPT2Config`` or ``LlamaConfig`` (the model an
    ``*LMHeadModel`` / ``*ForCausalLM`` built from it would have)."""
    kind = getattr(config, "model_type", None)
    if kind == "gpt2":
        return gpt2_params(config.n_embd, config.n_layer, config.vocab_size, config.n_positions,
                           config.n_inner, config.tie_word_embeddings)
    if kind == "llama":
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise NotImplementedError("LLaMA configs with biases are not counted")
        return llama_params(config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                            config.num_attention_heads, config.num_key_value_heads, config.vocab_size,
                            config.tie_word_embeddings, getattr(config, "head_dim", None))
    raise NotImplementedError(f"no closed form for model_type {kind!r}")


def exit_head_params(dim: int, n_classes: int, bias: bool = True, norm: bool = False) -> int:
    """Parameters of one exit classifier ``Linear(dim, n_classes)`` (with ``bias``), plus a
    LayerNorm of its own (``2 dim``) when ``norm`` (as :func:`layersim.train.objectives.add_exit_heads`)."""
    return _linear(dim, n_classes, bias) + (2 * dim if norm else 0)


def multi_exit_params(single: int, n_layers: int, dim: int, n_classes: int, bias: bool = True,
                      norm: bool = False) -> int:
    """Table 1's "multiple classifiers" count: the single-classifier model plus ``L - 1``
    exit classifiers (block ``L`` keeps the model's own)."""
    return single + (n_layers - 1) * exit_head_params(dim, n_classes, bias, norm)


def param_saving(single: float, multi: float) -> float:
    """Table 1's "#Param Saving": the fraction of the multi-classifier model's parameters that a
    single shared classifier saves, ``(multi - single) / multi``."""
    return (multi - single) / multi


def build_on_meta(arch: Mapping[str, Any]) -> nn.Module:
    """The architecture ``arch`` instantiated on PyTorch's meta device: ``kind`` "vit" builds the timm model named
    ``timm``, "gpt2" / "llama" an HF ``GPT2LMHeadModel`` / ``LlamaForCausalLM`` of the config fields ``config``;
    shapes and no memory, no weights, no download, so that :func:`count_module` counts the released architecture."""
    with torch.device("meta"):
        if arch["kind"] == "vit":
            import timm

            return timm.create_model(arch["timm"], pretrained=False)
        import transformers as tr

        if arch["kind"] == "gpt2":
            return tr.GPT2LMHeadModel(tr.GPT2Config(**arch["config"]))
        return tr.LlamaForCausalLM(tr.LlamaConfig(**arch["config"]))


# ----------------------------------------------------------------------------- paper-scale models, random weights

#: The published configurations of the pretrained models the notebooks load at paper scale, under the names the
#: presets use (Hugging Face ids, or the asset names of ``layersim.inputs.assets``): transformers config class and
#: the fields that differ from its defaults. They let :func:`build_random` build each architecture with random
#: weights and no download (``layersim.tools.bench_paper`` times them).
HF_ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "bert-base-uncased": ("BertConfig", dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                             num_attention_heads=12, intermediate_size=3072)),
    "roberta-base": ("RobertaConfig", dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12,
                                           num_attention_heads=12, intermediate_size=3072, max_position_embeddings=514,
                                           type_vocab_size=1, pad_token_id=1)),
    "albert-large-v2": ("AlbertConfig", dict(vocab_size=30000, embedding_size=128, hidden_size=1024,
                                             num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                                             hidden_act="gelu_new")),
    "electra-base-discriminator": ("ElectraConfig", dict(vocab_size=30522, embedding_size=768, hidden_size=768,
                                                         num_hidden_layers=12, num_attention_heads=12,
                                                         intermediate_size=3072)),
    "gpt2": ("GPT2Config", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)),
    "vit-small-patch16-224": ("ViTConfig", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                                intermediate_size=1536, image_size=224, patch_size=16)),
    "vit-base-patch16-224": ("ViTConfig", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                               intermediate_size=3072, image_size=224, patch_size=16)),
    "deit-small-patch16-224-hf": ("ViTConfig", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                                    intermediate_size=1536, image_size=224, patch_size=16)),
    "dinov2-small": ("Dinov2Config", dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4,
                                          patch_size=14, image_size=518)),
    "dinov2-base": ("Dinov2Config", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, mlp_ratio=4,
                                         patch_size=14, image_size=518)),
    # the vision tower of OpenAI's CLIP ViT-B/32 (t11 reads its layers)
    "clip-vit-base-patch32": ("CLIPVisionConfig", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                                       intermediate_size=3072, image_size=224, patch_size=32)),
}

#: the image encoders of :data:`HF_ARCHITECTURES` that the redundancy notebooks read at paper scale
IMAGE_ENCODERS = tuple(name for name, (cls, _) in HF_ARCHITECTURES.items() if cls in ("ViTConfig", "Dinov2Config"))

#: what ``tiny=True`` sets in a configuration of :data:`HF_ARCHITECTURES` (fields the config has only)
TINY_HF = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, embedding_size=16,
               n_embd=32, n_layer=2, n_head=2, vocab_size=1000, image_size=32, patch_size=8)

#: the transformers auto class of each task of :func:`build_random`
_TASKS = {"classification": "AutoModelForSequenceClassification", "lm": "AutoModelForCausalLM", "image": "AutoModel"}


def hf_config(name: str, tiny: bool = False, **overrides: Any):
    """The transformers configuration of :data:`HF_ARCHITECTURES` ``[name]`` (``tiny``: shrunk by :data:`TINY_HF`),
    with ``overrides``; ValueError for a name not in the table."""
    if name not in HF_ARCHITECTURES:
        raise ValueError(f"no published configuration for {name!r}: one of {', '.join(HF_ARCHITECTURES)}")
    import transformers as tr

    cls_name, fields = HF_ARCHITECTURES[name]
    cls = getattr(tr, cls_name)
    fields = dict(fields)
    if tiny:
        known = cls().to_dict()
        fields.update({k: v for k, v in TINY_HF.items() if k in known})
        fields.update({k: 0 for k in ("bos_token_id", "eos_token_id") if known.get(k) is not None})  # in the vocabulary
    return cls(**fields, **overrides)


def build_random(name: str, task: str = "classification", num_labels: int = 2, tiny: bool = False) -> nn.Module:
    """The model ``name`` (:data:`HF_ARCHITECTURES`) with random weights, for ``task``: ``"classification"`` (a
    sequence classifier of ``num_labels``), ``"lm"`` (a causal LM) or ``"image"`` (the base encoder)."""
    if task not in _TASKS:
        raise ValueError(f"task must be one of {sorted(_TASKS)}, got {task!r}")
    import transformers as tr

    extra = {"num_labels": num_labels} if task == "classification" else {}
    return getattr(tr, _TASKS[task]).from_config(hf_config(name, tiny, **extra))
