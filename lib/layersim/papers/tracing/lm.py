"""Causal language models trained here with the standard or the aligned loss (the tracing paper's AlignedGPT, §3.2,
App. C.2; notebook t10).

Offline there is no GPT-2 checkpoint and the one pretrained causal LM is too slow for two cores, so the default
scale trains a small GPT-2 (:class:`LMConfig`, :func:`build_gpt2`) from scratch on the Jane Austen novels with a BPE
vocabulary learnt from them. :func:`lm_batches` makes batches, :func:`train_lm` trains with either loss (eq. 5:
:func:`layersim.train.objectives.aligned_lm_loss`), :func:`cached_lm` caches, and :func:`generate_at_exit` samples
from the model cut after a block (see docs/modules.md, `layersim.papers.tracing.lm`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.inputs import fetch, subsets, text_data
from layersim.nets import generation, surgery
from layersim.nets.models import evaluating, resolve_device
from layersim.train import training
from layersim.train.objectives import aligned_lm_loss  # noqa: F401  (eq. 5 for causal LMs lives with the objectives)
from layersim.train.training import StepConfig

__all__ = ["LMConfig", "aligned_lm_loss", "build_gpt2", "cached_lm", "generate_at_exit", "lm_batches",
           "model_and_tokenizer", "texts", "train_lm"]


@dataclass(frozen=True)
class LMConfig(StepConfig):
    """A small GPT-2 and how it is trained (``objective``: ``"ce"`` or ``"aligned"``; the optimisation
    fields and their checks: ``layersim.train.training.StepConfig``)."""

    vocab_size: int = 2048
    n_positions: int = 64
    n_embd: int = 128
    n_layer: int = 6
    n_head: int = 4
    steps: int = 1500
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    objective: str = "ce"
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in ("ce", "aligned"):
            raise ValueError(f"objective must be 'ce' or 'aligned', got {self.objective!r}")
        if min(self.n_layer, self.n_embd, self.n_head, self.vocab_size) < 1:
            raise ValueError("the model sizes must be positive")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head}")


def build_gpt2(cfg: LMConfig, pad_token_id: int = 0) -> nn.Module:
    """An untrained ``GPT2LMHeadModel`` of ``cfg``'s size (tied embedding and LM head), weights drawn
    under ``cfg.seed``."""
    import transformers as tr

    torch.manual_seed(cfg.seed)
    conf = tr.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd,
                         n_layer=cfg.n_layer, n_head=cfg.n_head, bos_token_id=pad_token_id, eos_token_id=pad_token_id,
                         pad_token_id=pad_token_id)
    return tr.GPT2LMHeadModel(conf)


def lm_batches(texts: Sequence[str], tokenizer: Any, batch_size: int, max_length: int) -> list[dict]:
    """Right-padded batches of ``texts`` (``input_ids``, ``attention_mask``) with ``labels`` = the
    input ids, padding set to -100 (HF shifts them: position ``t`` predicts token ``t+1``)."""
    out = []
    for b in text_data.text_batches(texts, tokenizer, batch_size, max_length):
        b["labels"] = b["input_ids"].masked_fill(b["attention_mask"] == 0, -100)
        out.append(b)
    return out


def train_lm(model: nn.Module, batches: list[dict], cfg: LMConfig, device: Any = "auto", progress: bool = True,
             precision: str = "auto") -> list[dict]:
    """Train ``model`` in place for ``cfg.steps`` AdamW steps over ``batches`` (a ``cfg.seed``-ed order each pass)
    with the standard or the aligned loss; returns :func:`~layersim.train.training.run_steps`'s history.
    ``FloatingPointError`` on a non-finite loss."""
    dev = resolve_device(device)
    prec = training.resolve_precision(precision, dev)
    torch.manual_seed(cfg.seed)
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    order: list[int] = []

    def loss_at(step: int) -> torch.Tensor:
        nonlocal order
        if not order:
            order = rng.permutation(len(batches)).tolist()
        batch = {k: v.to(dev) for k, v in batches[order.pop()].items()}
        return model(**batch, use_cache=False).loss if cfg.objective == "ce" else aligned_lm_loss(model, batch)

    history = training.run_steps(opt, cfg.steps, loss_at, lambda step: training.warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.steps), f"train LM ({cfg.objective})",
                                 progress, precision=prec)
    model.eval()
    return history


def texts(source: str, split: str, n: int | None, seed: int = 0) -> list[str]:
    """``n`` texts of ``source``: ``"austen"`` (sentences; ``"train"`` / ``"test"`` are disjoint halves) or
    ``"wikitext-103"`` (non-heading lines of the split, the first ``n`` of a seeded permutation)."""
    if source == "austen":
        return text_data.text_sample("austen", n, seed=seed, split=split)
    if source == "wikitext-103":
        lines = [t.strip() for t in text_data.load_wikitext103(split)["text"]]
        lines = [t for t in lines if t and not t.startswith("=")]
        n = subsets.check_count(n, len(lines), f"the {split} split of wikitext-103", unit="non-heading lines")
        order = np.random.default_rng(seed).permutation(len(lines))[:n]
        return [lines[i] for i in np.sort(order)]
    raise ValueError(f"unknown text source {source!r}; use 'austen' or 'wikitext-103'")


def model_and_tokenizer(cfg: LMConfig, pretrained: str | None = None) -> tuple[Any, Any]:
    """``(build, tokenizer)``: for ``pretrained`` (a causal LM asset, e.g. ``"gpt2"``) its loader and tokenizer;
    else a small GPT-2 of ``cfg`` (:func:`build_gpt2`) and the Austen BPE tokenizer of ``cfg.vocab_size``."""
    if pretrained is None:
        tok = text_data.austen_tokenizer(cfg.vocab_size)
        return (lambda: build_gpt2(cfg, tok.pad_token_id)), tok
    _, tok = fetch.load_model(pretrained, eval_mode=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"

    def build():
        torch.manual_seed(cfg.seed)
        return fetch.load_model(pretrained, eval_mode=False)[0]

    return build, tok


def cached_lm(cfg: LMConfig, batches: list[dict], data_desc: dict, build: Any = None, model_desc: dict | None = None,
              device: Any = "auto", progress: bool = True) -> tuple[nn.Module, dict]:
    """``build()`` (default: :func:`build_gpt2` of ``cfg``) trained by :func:`train_lm` on
    ``batches``, or loaded from ``<cache>/checkpoints/lm-<key>/`` when this configuration, model
    (``model_desc``) and data were trained before (``layersim.train.training.cached_model``)."""
    def fit(model, train_set, train_cfg, device, progress, precision):
        return train_lm(model, train_set, cfg, device=device, progress=progress, precision=precision)

    build = build or (lambda: build_gpt2(cfg))
    return training.cached_model("lm", build, model_desc or {"scratch": True}, dataclasses.asdict(cfg), batches,
                                 data_desc, device=device, progress=progress, fit=fit)


def generate_at_exit(model: nn.Module, prompts: torch.Tensor, layer: int, new_tokens: int, p: float = 0.95,
                     seed: int = 0, device: Any = "auto") -> torch.Tensor:
    """``[B, new_tokens]`` tokens sampled (nucleus, ``p``) after the equal-length ``prompts [B, T]`` by ``model``
    cut after block ``layer`` (the final norm and LM head reading its output)."""
    dev = resolve_device(device)
    g = torch.Generator().manual_seed(seed)
    ids = prompts.to(dev)
    model.to(dev)
    with evaluating(model), surgery.truncate(model, layer) as cut:
        for _ in range(new_tokens):
            logits = cut(input_ids=ids, use_cache=False).logits[:, -1].float().cpu()
            nxt = generation.nucleus_sample(logits, p, generator=g).to(dev)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids[:, prompts.shape[1]:].cpu()
