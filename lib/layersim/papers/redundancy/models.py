"""The redundancy paper's models and inputs per scale (notebooks r01-r05).

The paper (Cannistraci et al., 2024, https://arxiv.org/abs/2410.04941, §4, Table 3) reads five pretrained 12-block
encoders on MNIST, F-MNIST, CIFAR-10 and CIFAR-100 through each block's [CLS] token. None exists offline, so the
default scale reads the tracing ViTs and MiniLM-L6. :data:`MODELS` holds each scale's :class:`Spec` table;
:func:`load`, :func:`inputs`, :func:`block_tokens` and :func:`pattern_correlations` build, feed, read and compare
them (see docs/modules.md, `layersim.papers.redundancy.models`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from layersim.inputs import fetch, image_data, text_data
from layersim.measures import trends
from layersim.nets import models
from layersim.notebook import presets, rehearsal
from layersim.train import training

__all__ = ["LLM", "MODELS", "Spec", "by_pair", "check_spans", "block_tokens", "data_sets", "inputs", "load",
           "pattern_correlations", "specs", "tracing_vits"]


@dataclass(frozen=True)
class Spec:
    """One model of a redundancy notebook: ``source`` ``"tracing_vit"`` (``name`` a variant of
    ``presets.TRACING_VARIANTS``) or ``"asset"``; ``modality`` ``"image"`` or ``"text"``; ``data``: the data sets it
    reads."""

    source: str
    name: str
    modality: str
    data: tuple[str, ...]


_IMAGES, _TEXTS = ("fashion-mnist", "digits"), ("austen", "python-docs")
_PAPER_IMAGES = ("mnist", "fashion-mnist", "cifar10", "cifar100")

#: scale -> model name -> :class:`Spec`
MODELS: dict[str, dict[str, Spec]] = {
    **{scale: {"ViT (standard)": Spec("tracing_vit", "standard", "image", _IMAGES),
               "ViT (aligned)": Spec("tracing_vit", "aligned", "image", _IMAGES),
               "MiniLM-L6": Spec("asset", "all-minilm-l6-v2", "text", _TEXTS)}
       for scale in ("smoke", "default")},
    "paper": {"ViT-S": Spec("asset", "vit-small-patch16-224", "image", _PAPER_IMAGES),
              "ViT-B": Spec("asset", "vit-base-patch16-224", "image", _PAPER_IMAGES),
              "DiNO-S": Spec("asset", "dinov2-small", "image", _PAPER_IMAGES),
              "DiNO-B": Spec("asset", "dinov2-base", "image", _PAPER_IMAGES),
              "DEiT-S": Spec("asset", "deit-small-patch16-224-hf", "image", _PAPER_IMAGES)},
}


def specs(scale: str) -> dict[str, Spec]:
    """The models of the redundancy notebooks at ``scale`` (:data:`MODELS`), each with the data sets it reads; in a
    rehearsal of the paper scale cut to :data:`layersim.notebook.rehearsal.REDUNDANCY_LOOP` (its models, each on its
    data sets)."""
    if scale not in MODELS:
        raise ValueError(f"unknown scale {scale!r}; use one of {sorted(MODELS)}")
    if not (scale == "paper" and rehearsal.active()):
        return dict(MODELS[scale])
    keep = rehearsal.REDUNDANCY_LOOP
    return {name: replace(spec, data=tuple(d for d in spec.data if d in keep["data"]))
            for name, spec in MODELS[scale].items() if name in keep["models"]}


def tracing_vits(scale: str) -> dict[str, Spec]:
    """The standard and aligned tracing ViTs of ``scale`` (t01/t02's checkpoints; at paper scale DeiT-S on
    CIFAR-10), each with its own training data set: what r05 compares at every scale."""
    if scale not in presets.TRACING_VIT:
        raise ValueError(f"unknown scale {scale!r}; use one of {sorted(presets.TRACING_VIT)}")
    return {f"ViT ({variant})": Spec("tracing_vit", variant, "image", (presets.tracing_vit(scale, variant)["dataset"],))
            for variant in ("standard", "aligned")}


#: the decoder r05 reads at every scale (a real 30-block LLaMA-style LM, offline): the paper's method on an LLM
LLM = Spec("asset", "smollm2-135m", "text", ("austen", "python-docs"))


def check_spans(settings: Mapping[str, Any]) -> None:
    """A notebook check (``settings.pick(..., checks=)``): every ``[first, last]`` of ``settings["spans"]``
    names blocks in order (``first <= last``); ValueError naming the parameter otherwise."""
    for span in settings.get("spans") or []:
        first, last = span
        if first > last:
            raise ValueError(f"parameter 'spans': {list(span)} is reversed; give [first, last] with first <= last")


def data_sets(specs: Mapping[str, Spec]) -> list[str]:
    """Every data set the models of ``specs`` read, in first-seen order."""
    return list(dict.fromkeys(d for s in specs.values() for d in s.data))


def load(spec: Spec, scale: str, seed: int = 0, device: Any = "auto", random_init: bool = False,
         vit: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer or None)`` of ``spec`` in eval mode: a cached tracing ViT (trained if missing; ``vit``:
    its shape changed, :func:`layersim.notebook.presets.shaped_vit`) or a registered asset (``random_init``: random
    weights, for tests)."""
    if spec.source == "tracing_vit":
        settings = presets.shaped_vit(scale, spec.name, vit)
        model, _ = training.vit_from_settings(settings, seed=seed, device=device)
        return model.eval(), None
    if spec.source == "asset":
        model, tokenizer = fetch.load_model(spec.name, random_init=random_init)
        if tokenizer is not None:  # right padding, and a pad token for decoders that have none
            tokenizer.padding_side = "right"
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer
    raise ValueError(f"unknown model source {spec.source!r}; use 'tracing_vit' or 'asset'")


def inputs(spec: Spec, dataset: str, n: int | None, tokenizer: Any = None, scale: str = "default", seed: int = 0,
           batch_size: int = 64, max_length: int = 128, split: str = "test") -> tuple[list[Any], np.ndarray | None]:
    """The batches ``spec``'s model reads ``dataset`` with, and their labels (None for texts).

    ``n`` caps every data set (smaller splits are read whole). Images: at most ``n`` of ``split`` (stratified,
    ``seed``-ed) prepared like the model's training data. Texts: at most ``n`` of that half of the source, tokenised
    (right padding, ``max_length``) (see docs/modules.md, `layersim.papers.redundancy.models`).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if spec.modality == "text":
        if tokenizer is None:
            raise ValueError(f"the text model {spec.name!r} needs its tokenizer")
        texts = text_data.text_sample(dataset, n, seed=seed, split=split, at_most=True)
        return text_data.text_batches(texts, tokenizer, batch_size, max_length), None
    images, labels = image_data.image_dataset(dataset, split, limit=n, seed=seed, normalize=False,
                                              at_most=True).tensors()
    like = presets.TRACING_VIT[scale]["dataset"] if spec.source == "tracing_vit" else "imagenet"
    x = image_data.as_model_input(images, like)
    return [x[i:i + batch_size] for i in range(0, len(x), batch_size)], labels.numpy()


def block_tokens(model: Any, batches: list[Any], device: Any = "auto") -> np.ndarray:
    """``[L+1, N, d]`` float32 [CLS] features: index 0 the embedding output, ``i`` block ``i``'s
    output (the paper's "[CLS] token from each block", §4.1; no final norm)."""
    return models.collect(model, batches, token="cls", device=device, progress=False).hidden


def by_pair(values: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    """``{(model, data set): v}`` keyed as the notebooks' ``metrics.json`` keys it: ``{"<model> | <data set>": v}``."""
    return {f"{m} | {d}": v for (m, d), v in values.items()}


def _upper(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(len(M), k=1)]


def pattern_correlations(mats: Mapping[tuple[str, str], np.ndarray]) -> dict[str, dict[str, float]]:
    """Pearson correlations between block-similarity matrices ``mats`` (``(model, data set) -> [L, L]``, upper
    triangle): ``same_model`` (``"model: a vs b"``) and ``same_data`` (``"data: m1 vs m2"``); Fig. 2 claims the
    first are higher."""
    keys = list(mats)
    out: dict[str, dict[str, float]] = {"same_model": {}, "same_data": {}}
    for i, (m1, d1) in enumerate(keys):
        for m2, d2 in keys[i + 1:]:
            A, B = mats[(m1, d1)], mats[(m2, d2)]
            if A.shape != B.shape:
                continue
            if m1 == m2 and d1 != d2:
                out["same_model"][f"{m1}: {d1} vs {d2}"] = trends.pearson(_upper(A), _upper(B))
            elif d1 == d2 and m1 != m2:
                out["same_data"][f"{d1}: {m1} vs {m2}"] = trends.pearson(_upper(A), _upper(B))
    return out
