"""The redundancy paper's block-similarity matrices (§4.1, Figs. 2 and 6; notebook r01): :func:`block_matrices`
reads every block's [CLS] token and returns the uncentred cosine (``"cos/matrix"``) and linear-CKA
(``"cka/matrix"``) matrices; :func:`matrix_line`, :func:`correlation_lines` and :func:`model_record` print and
record them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from layersim.analysis import lenses
from layersim.papers.redundancy import models as redundancy_models

__all__ = ["block_matrices", "correlation_lines", "matrix_line", "model_record"]


def block_matrices(model: Any, tokenizer: Any, spec: redundancy_models.Spec, dataset: str,
                   settings: Mapping[str, Any], scale: str, seed: int = 0,
                   device: Any = "auto") -> tuple[np.ndarray, np.ndarray, int]:
    """Figs. 2 and 6 for one model and data set: ``(cos, cka, N)``, the ``[L, L]`` uncentred cosine matrix of the
    [CLS] token (row ``l-1`` = block ``l``), its linear-CKA matrix, and the inputs read (``settings["n_images"]``, 0
    = all, or ``settings["n_texts"]``, drawn with ``seed``)."""
    if spec.modality not in ("image", "text"):
        raise ValueError(f"unknown modality {spec.modality!r}; use 'image' or 'text'")
    n = settings["n_images"] if spec.modality == "image" else settings["n_texts"]
    batches, _ = redundancy_models.inputs(spec, dataset, n or None, tokenizer, scale=scale, seed=seed,
                                          batch_size=settings["batch_size"], max_length=settings["max_length"])
    H = redundancy_models.block_tokens(model, batches, device=device)[1:]  # blocks 1..L
    layer_data = lenses.LayerData(hidden=H)
    return (lenses.apply("cos/matrix", layer_data, center=False), lenses.apply("cka/matrix", layer_data),
            int(H.shape[1]))


def matrix_line(name: str, dataset: str, n: int, cos: np.ndarray) -> str:
    """One progress line: model, data set, inputs, blocks, and the smallest and mean cosine between different
    blocks."""
    cos = np.asarray(cos)
    if cos.ndim != 2 or cos.shape[0] != cos.shape[1] or len(cos) < 2:
        raise ValueError(f"cos must be a square matrix of at least 2 blocks, got shape {cos.shape}")
    off = cos[np.triu_indices(len(cos), k=1)]
    return (f"{name:15s} {dataset:14s} N={n:5d}  blocks={len(cos):2d}  "
            f"cosine between blocks: min {off.min():.3f}, mean {off.mean():.3f}")


def model_record(specs: Mapping[str, redundancy_models.Spec], n_blocks: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """The ``models`` block of ``metrics.json``: per model of ``specs``, its source, name, modality, data sets
    and the number of blocks read (``n_blocks[name]``)."""
    missing = [name for name in specs if name not in n_blocks]
    if missing:
        raise ValueError(f"no block count for the models {missing}")
    return {name: {"source": s.source, "name": s.name, "modality": s.modality, "data": list(s.data),
                   "blocks": n_blocks[name]} for name, s in specs.items()}


def correlation_lines(corr: Mapping[str, Mapping[str, float]]) -> str:
    """The correlations of ``redundancy_models.pattern_correlations`` one per line: the kind of comparison
    (``same_model`` / ``same_data``), the pair, and Pearson's r to three decimals."""
    return "\n".join(f"{kind:10s} {k:55s} r = {v:.3f}" for kind, values in corr.items() for k, v in values.items())
