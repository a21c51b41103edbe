"""Training objectives of the tracing paper for timm ViTs, ``f(model, x, y, cfg) -> loss``, all reading blocks
``1..L`` from one forward pass with gradients (:func:`block_outputs`).

- ``aligned``: eq. (5), ``sum_l lambda_l CE(W norm(h^(l)), y)`` with ``lambda_l = 2l/(L(L+1))``;
  ``aligned_uniform``: ``lambda_l = 1/L`` (footnote 4).
- ``alternating``: appendix B.3, the last layer's CE on odd iterations, eq. (5) on even ones.
- ``ce_reg``: appendix B.3, ``CE(W h^(L), y) + beta L_sim``.
- ``multi_exit``, ``multi_exit_alternating``: the BERxiT baseline, one classifier per layer.

``W`` is the model's own head path, so the last layer's logits equal ``model(x)``. :data:`OBJECTIVES` joins
``layersim.train.training.OBJECTIVES`` (see docs/modules.md, `layersim.train.objectives`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from layersim.nets import adapters
from layersim.nets.models import block_modules, evaluating, family

__all__ = [
    "OBJECTIVES",
    "add_exit_heads",
    "aligned",
    "aligned_uniform",
    "alternating",
    "block_outputs",
    "ce_reg",
    "exit_head_logits",
    "layer_weights",
    "multi_exit",
    "multi_exit_alternating",
    "multi_exit_logits",
    "objective_step",
    "shared_head_logits",
    "weighted_ce",
]

_STEP_ATTR = "_layersim_objective_step"


# ----------------------------------------------------------------------------- all layers, one pass


def block_outputs(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Token sequences ``[N, T, d]`` after each block ``1..L`` of a timm ViT, with gradients and without the final
    norm (the steps of timm's ``forward_features``); ``NotImplementedError`` for other models."""
    if family(model) != "timm_vit":
        raise NotImplementedError("the training objectives support timm VisionTransformer models only")
    h = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(x))))
    outs = []
    for blk in block_modules(model):
        h = blk(h)
        outs.append(h)
    return outs


def _shared_head(model: nn.Module, seq: torch.Tensor) -> torch.Tensor:
    """The model's classifier ``W`` (with its final norm) on one layer's token sequence."""
    return model.forward_head(model.norm(seq))


def _head_tokens(model: nn.Module, seq: torch.Tensor) -> torch.Tensor:
    """The tokens of ``seq [N, T, d]`` the classifier reads: the class token alone (``[N, 1, d]``) when the model
    pools by token (same logits, the norm being token-wise), the whole sequence otherwise."""
    if getattr(model, "attn_pool", None) is None and getattr(model, "global_pool", None) == "token":
        return seq[:, :1]
    return seq


def shared_head_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits ``[L, N, K]`` of the last-layer classifier on blocks ``1..L`` (eq. 5's ``W h^(l)``), computed as one
    batch of ``L N`` rows; the last entry equals ``model(x)``."""
    outs = [_head_tokens(model, seq) for seq in block_outputs(model, x)]
    return _shared_head(model, torch.cat(outs)).unflatten(0, (len(outs), len(x)))


def layer_weights(L: int, kind: str = "linear") -> torch.Tensor:
    """The layer weights of eq. (5): ``"linear"`` ``lambda_l = 2l/(L(L+1))`` (the paper's
    choice) or ``"uniform"`` ``lambda_l = 1/L`` (footnote 4); both sum to 1."""
    if L < 1:
        raise ValueError(f"L must be positive, got {L}")
    if kind == "linear":
        return torch.arange(1, L + 1, dtype=torch.float64) * 2 / (L * (L + 1))
    if kind == "uniform":
        return torch.full((L,), 1.0 / L, dtype=torch.float64)
    raise ValueError(f"unknown layer weights {kind!r}: use 'linear' or 'uniform'")


def weighted_ce(logits: torch.Tensor, y: torch.Tensor, weights: torch.Tensor,
                label_smoothing: float = 0.0) -> torch.Tensor:
    """``sum_l weights[l] CE(logits[l], y)`` for layer-wise logits ``[L, N, K]`` (eq. 5)."""
    if logits.shape[0] != len(weights):
        raise ValueError(f"{logits.shape[0]} layers of logits but {len(weights)} weights")
    L, N = logits.shape[:2]
    losses = F.cross_entropy(logits.flatten(0, 1), y.repeat(L), reduction="none",
                             label_smoothing=label_smoothing).view(L, N).mean(1)
    return (weights.to(losses) * losses).sum()


def _weights_kind(cfg) -> str:
    return (getattr(cfg, "extra", None) or {}).get("weights", "linear")


# ----------------------------------------------------------------------------- shared classifier


def _aligned(model, x, y, cfg, kind: str) -> torch.Tensor:
    logits = shared_head_logits(model, x)
    return weighted_ce(logits, y, layer_weights(logits.shape[0], kind), cfg.label_smoothing)


def aligned(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """The aligned loss, eq. (5): ``sum_l lambda_l CE(W h^(l), y)`` with one shared classifier
    and ``lambda_l = 2l/(L(L+1))`` (``cfg.extra["weights"] = "uniform"`` for ``1/L``)."""
    return _aligned(model, x, y, cfg, _weights_kind(cfg))


def aligned_uniform(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """Eq. (5) with uniform weights ``lambda_l = 1/L`` (footnote 4; appendix B.3 ablation)."""
    return _aligned(model, x, y, cfg, "uniform")


def objective_step(model: nn.Module, advance: bool = False) -> int:
    """The 1-based training iteration the alternating objectives are at for ``model``; with ``advance``, returns it
    and moves the counter on by one."""
    step = model.__dict__.get(_STEP_ATTR, 1)
    if advance:
        model.__dict__[_STEP_ATTR] = step + 1
    return step


def _this_step(model: nn.Module) -> int:
    """The iteration of this call: advances only in training mode with gradients enabled."""
    return objective_step(model, advance=model.training and torch.is_grad_enabled())


def _last_layer_ce(model, x, y, cfg) -> torch.Tensor:
    return F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)


def alternating(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """Appendix B.3 (after BERxiT): odd iterations ``CE(W h^(L), y)``, even iterations eq. (5); the iteration is
    :func:`objective_step`'s counter."""
    if _this_step(model) % 2:
        return _last_layer_ce(model, x, y, cfg)
    return aligned(model, x, y, cfg)


def ce_reg(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """Appendix B.3: ``CE(W h^(L), y) + beta L_sim``, ``L_sim = sum_l lambda_l (1 - cos(h^(l), h^(L)))`` (batch
    mean), ``lambda_l`` of eq. (5), ``h^(l)`` the pooled feature before the final norm, ``beta = cfg.extra["beta"]``
    (``KeyError`` without it)."""
    extra = getattr(cfg, "extra", None) or {}
    if "beta" not in extra:
        raise KeyError("ce_reg needs cfg.extra['beta'] (the paper's beta > 0; it states no value)")
    seqs = block_outputs(model, x)
    feats = [model.pool(s) for s in seqs]
    ce = F.cross_entropy(_shared_head(model, seqs[-1]), y, label_smoothing=cfg.label_smoothing)
    dissim = torch.stack([(1 - F.cosine_similarity(h, feats[-1], dim=-1)).mean() for h in feats])
    lam = layer_weights(len(feats), _weights_kind(cfg)).to(dissim)
    return ce + float(extra["beta"]) * (lam * dissim).sum()


# ----------------------------------------------------------------------------- one classifier per layer


def add_exit_heads(model: nn.Module, seed: int | None = 0) -> nn.ModuleList:
    """Attach and return ``model.exit_heads``: a ``LayerNorm(d)`` + ``Linear(d, K)`` for each block ``1..L-1``
    (BERxiT-style), initialised like timm's head from ``seed``; block ``L`` keeps the model's own norm and head.
    Call it before the optimiser is built."""
    if family(model) != "timm_vit":
        raise NotImplementedError("exit heads are implemented for timm VisionTransformer models")
    L, d, K = len(block_modules(model)), model.embed_dim, model.num_classes
    ref = next(model.parameters())
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        heads = nn.ModuleList(nn.Sequential(nn.LayerNorm(d, eps=1e-6), nn.Linear(d, K)) for _ in range(L - 1))
        for head in heads:
            nn.init.trunc_normal_(head[1].weight, std=0.02)
            nn.init.zeros_(head[1].bias)
    model.exit_heads = heads.to(device=ref.device, dtype=ref.dtype)
    return model.exit_heads


def _exit_heads(model: nn.Module) -> nn.ModuleList:
    heads = getattr(model, "exit_heads", None)
    if heads is None:
        raise AttributeError("the model has no exit heads: call objectives.add_exit_heads(model) before training")
    if len(heads) != len(block_modules(model)) - 1:
        raise ValueError(f"{len(heads)} exit heads for {len(block_modules(model))} blocks (expected L-1)")
    return heads


def exit_head_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits ``[L, N, K]`` of the multi-exit model, with gradients: exit head ``l`` on block ``l < L``, the model's
    own classifier on block ``L`` (so the last entry equals ``model(x)``)."""
    heads = _exit_heads(model)
    seqs = block_outputs(model, x)
    logits = [head(model.pool(seq)) for head, seq in zip(heads, seqs[:-1])]
    return torch.stack(logits + [_shared_head(model, seqs[-1])])


def multi_exit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """The multi-exit baseline (BERxiT's weighted average): ``sum_l lambda_l CE(W_l h^(l), y)`` with one head per
    layer (:func:`add_exit_heads`), ``lambda_l`` of eq. (5)."""
    logits = exit_head_logits(model, x)
    return weighted_ce(logits, y, layer_weights(logits.shape[0], _weights_kind(cfg)), cfg.label_smoothing)


def multi_exit_alternating(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg) -> torch.Tensor:
    """BERxiT's alternating schedule with one head per layer: odd iterations the last layer's
    CE, even iterations :func:`multi_exit` (the counter of :func:`objective_step`)."""
    if _this_step(model) % 2:
        return _last_layer_ce(model, x, y, cfg)
    return multi_exit(model, x, y, cfg)


def multi_exit_logits(model: nn.Module, hidden: np.ndarray | torch.Tensor, chunk: int = 1024) -> np.ndarray:
    """Float32 logits ``[L, N, K]`` of a multi-exit model for blocks ``1..L``, in eval mode.

    ``hidden``: every layer's pooled token before the final norm, ``[L+1, N, d]`` (the embedding entry is dropped)
    or ``[L, N, d]``; ``ValueError`` otherwise.
    """
    heads = _exit_heads(model)
    L = len(block_modules(model))
    if hidden.shape[0] == L + 1:
        hidden = hidden[1:]
    if hidden.shape[0] != L:
        raise ValueError(f"hidden has {hidden.shape[0]} entries; expected L+1={L + 1} or L={L}")
    ref = next(model.parameters())
    mods = list(heads) + [nn.Sequential(model.norm, model.fc_norm, model.head)]
    out = np.empty((L, hidden.shape[1], model.num_classes), np.float32)
    with evaluating(model):
        for layer, mod in enumerate(mods):
            for s in range(0, hidden.shape[1], chunk):
                h = hidden[layer, s:s + chunk]
                h = h if isinstance(h, torch.Tensor) else torch.from_numpy(np.asarray(h))
                out[layer, s:s + chunk] = mod(h.to(ref)).float().cpu().numpy()
    return out


#: objectives this module adds to ``layersim.train.training.OBJECTIVES``
OBJECTIVES = {
    "aligned": aligned,
    "aligned_uniform": aligned_uniform,
    "alternating": alternating,
    "ce_reg": ce_reg,
    "multi_exit": multi_exit,
    "multi_exit_alternating": multi_exit_alternating,
}

#: objectives whose model needs more than the plain ViT: name -> setup(model, seed), called on
#: the freshly built model before training and before a cached checkpoint is loaded into it
MODEL_SETUP = {
    "multi_exit": add_exit_heads,
    "multi_exit_alternating": add_exit_heads,
}


# ----------------------------------------------------------------------------- causal language models


def aligned_lm_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Eq. (5) for a GPT-2 or LLaMA causal LM: ``sum_l lambda_l CE(head(norm(h^(l))), next tokens)`` over blocks
    ``1..L`` with :func:`layer_weights`; ``ValueError`` for other models."""
    adapter = adapters.get(model)
    if adapter.name not in ("gpt2", "llama"):
        raise ValueError(f"aligned_lm_loss needs a GPT-2 or LLaMA-style causal LM, not {type(model).__name__}")
    labels = batch["labels"]
    out = model(**{k: v for k, v in batch.items() if k != "labels"}, output_hidden_states=True, use_cache=False)
    norm, head = adapter.final_norm(model), adapter.head(model)
    # HF's hidden_states[L] already carries the final norm (its logits are out.logits); 1..L-1 do not
    logits = [head(norm(h)) for h in out.hidden_states[1:-1]] + [out.logits]
    target = labels[:, 1:].reshape(-1)
    losses = torch.stack([nn.functional.cross_entropy(z[:, :-1].reshape(target.numel(), -1), target, ignore_index=-100)
                          for z in logits])
    return (layer_weights(len(losses)).to(losses) * losses).sum()
