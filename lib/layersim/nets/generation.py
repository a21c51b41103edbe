"""Measures of generated text (the tracing paper's AlignedGPT evaluation, App. C.2, after Su & Collier 2023),
for exits at every layer of a language model:

- :func:`diversity`, eq. (22): ``prod_{n=2..4} |unique n-grams| / |n-grams|`` of one text;
- :func:`coherence`, eq. (21): the cosine between sentence embeddings of the prefix and the continuation
  (:func:`sentence_embeddings`; the paper uses SimCSE);
- :func:`nucleus_sample`: one step of nucleus (top-p) sampling (Holtzman et al. 2020).

(see docs/modules.md, ``layersim.nets.generation``)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["coherence", "diversity", "ngram_repetition", "nucleus_sample", "sentence_embeddings"]


def _tokens(text: str | Sequence) -> list:
    return text.split() if isinstance(text, str) else list(text)


def ngram_repetition(tokens: str | Sequence, n: int) -> float:
    """``|unique n-grams| / |n-grams|`` of ``tokens`` (a list, or a string split at whitespace);
    1.0 when the text has fewer than ``n`` tokens (no n-gram repeats)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    t = _tokens(tokens)
    grams = [tuple(t[i:i + n]) for i in range(len(t) - n + 1)]
    return 1.0 if not grams else len(set(grams)) / len(grams)


def diversity(tokens: str | Sequence, orders: Sequence[int] = (2, 3, 4)) -> float:
    """Eq. (22): the product over ``orders`` (2, 3, 4) of :func:`ngram_repetition`."""
    return float(np.prod([ngram_repetition(tokens, n) for n in orders]))


def sentence_embeddings(encoder: Any, tokenizer: Any, texts: Sequence[str], batch_size: int = 64,
                        max_length: int = 128) -> np.ndarray:
    """``[N, d]`` float64 sentence embeddings: the mean of the encoder's last-layer token features
    over each text's real (non-padding) tokens (sentence-transformers' mean pooling)."""
    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[s:s + batch_size]), padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt")
            h = encoder(**enc).last_hidden_state
            m = enc["attention_mask"][..., None].to(h.dtype)
            out.append(((h * m).sum(1) / m.sum(1).clamp_min(1)).double().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0))


def coherence(prefix_embeddings: np.ndarray, generated_embeddings: np.ndarray) -> np.ndarray:
    """Eq. (21): the cosine of each prefix's embedding with its continuation's, ``[N]``."""
    a, b = np.asarray(prefix_embeddings, float), np.asarray(generated_embeddings, float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"need two [N, d] arrays of the same shape, got {a.shape} and {b.shape}")
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    if (na == 0).any() or (nb == 0).any():
        raise ValueError("an embedding is zero: its cosine is undefined")
    return (a * b).sum(1) / (na * nb)


def nucleus_sample(logits: torch.Tensor, p: float = 0.95, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` ``[B, V]`` from the smallest set of most probable tokens whose
    probability reaches ``p`` (renormalised); ``p = 1`` samples the full distribution."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < p  # the top token is always kept
    sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    pick = torch.multinomial(sorted_p / sorted_p.sum(-1, keepdim=True), 1, generator=generator)
    return order.gather(-1, pick)[:, 0]
