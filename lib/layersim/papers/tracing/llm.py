"""The tracing paper's saturation analysis on language models (App. C.1, Figs. 19-20; notebook t08).

The paper reads LLaMA-3.2-3B and LLaMA-3.1-8B through the logit lens (the final norm and the
unembedding applied to every layer) while they decode "Simply put, the theory of relativity
states" greedily, and counts the saturation layer of every generated token: the first layer from
which the top-1 token stays the model's final choice (§2.2, after Geva et al. 2022). Offline, the
one LLaMA-architecture model is SmolLM2-135M (30 blocks, width 576, from a PyPI package).

:data:`MODELS` per scale, :data:`PROMPT`, :func:`load`; the lens itself is
``layersim.nets.readout.greedy_lens`` / ``token_lens``; :func:`easy_vs_hard` is the notebook's
definition of easy tokens; :func:`words` decodes token ids for the Fig. 20 table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layersim.inputs import assets
from layersim.nets import models

__all__ = ["MODELS", "PROMPT", "easy_vs_hard", "load", "words"]

PROMPT = "Simply put, the theory of relativity states"

#: scale -> the causal LMs read (``layersim.inputs.assets`` names)
MODELS: dict[str, tuple[str, ...]] = {
    "smoke": ("smollm2-135m",),
    "default": ("smollm2-135m",),
    "paper": ("llama-3.2-3b", "llama-3.1-8b"),
}


def load(name: str, device: Any = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a registered causal LM in eval mode on ``device``, the tokenizer
    padding on the right (with EOS when it has no pad token)."""
    model, tok = assets.load_model(name, device=models.resolve_device(device))
    if tok is None:
        raise ValueError(f"{name!r} came without a tokenizer; the lens table needs one")
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def easy_vs_hard(saturation: np.ndarray, confidence: np.ndarray) -> dict[str, float]:
    """Mean saturation layer of the *easy* tokens (the model's own top-1 probability at or above
    the median) and of the *hard* ones (below it), and their difference ``hard - easy``."""
    sat, conf = np.asarray(saturation, float), np.asarray(confidence, float)
    if sat.shape != conf.shape or sat.size < 2:
        raise ValueError(f"need one saturation layer per confidence, at least two; got {sat.shape}, {conf.shape}")
    easy = conf >= np.median(conf)
    if easy.all():
        raise ValueError("every token has the same confidence: no easy/hard split")
    e, h = float(sat[easy].mean()), float(sat[~easy].mean())
    return {"easy": e, "hard": h, "difference": h - e, "median_confidence": float(np.median(conf))}


def words(tokenizer: Any, ids: np.ndarray) -> np.ndarray:
    """Token ids (any shape) decoded one by one, whitespace shown as ``·`` and newlines as ``⏎``."""
    ids = np.asarray(ids)
    flat = [tokenizer.decode([int(i)]).replace("\n", "⏎").replace(" ", "·") for i in ids.ravel()]
    return np.array(flat, dtype=object).reshape(ids.shape)
