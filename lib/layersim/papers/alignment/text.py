"""The alignment paper's pre-trained-network protocol on text, with a genuinely pretrained Transformer (a11;
Section 7.2, Figures 13, 19, 20).

The offline encoder is MiniLM-L6 (``all-minilm-l6-v2``), read on binary tasks between two Jane Austen novels
(:func:`sentence_pool`, :func:`pair_examples`) beside the input and hand-crafted features (:func:`bag_of_words`,
:func:`lsa`, :func:`char_ngrams` with :func:`most_frequent_terms`; :func:`text_representations`) and the encoder at initialisation (:func:`encoders`,
:func:`encoder_features`). The comparison itself is :func:`layersim.papers.alignment.pretrain.evaluate_task`'s (see
docs/modules.md, `layersim.papers.alignment.text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.inputs import assets, fetch, text_tasks
from layersim.nets import models
from layersim.train.finetune import quiet_transformers

__all__ = ["HANDCRAFTED", "INPUT", "NOVEL_TASK", "bag_of_words", "char_ngrams", "encoder_features", "encoders",
           "lsa", "most_frequent_terms", "pair_examples", "relative_spread", "sentence_pool", "text_representations"]

#: the six-novel task the pools are drawn from
NOVEL_TASK = "austen-novel"
#: the names :func:`text_representations` gives its features
INPUT = "input (bag of words)"
HANDCRAFTED = ("LSA", "char n-grams")


# ----------------------------------------------------------------------------- tasks


def sentence_pool(split: str, per_novel: int, seed: int = 0) -> text_tasks.TextTask:
    """``per_novel`` sentences of each Austen novel from ``split`` (``"train"`` or ``"validation"``),
    balanced and ``seed``-ed (:func:`layersim.inputs.text_tasks.load_task` of :data:`NOVEL_TASK`); labels are
    the novels 0-5 in publication order (``label_names``)."""
    if per_novel < 1:
        raise ValueError(f"per_novel must be positive, got {per_novel}")
    task = text_tasks.load_task(NOVEL_TASK, split, n=per_novel * 6, seed=seed)
    return task


def pair_examples(labels, pair: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The binary task between the two classes of ``pair`` in a labelled pool: ``(pool indices, t)``, ``t = 0`` for
    ``pair[0]``, 1 for ``pair[1]``, in pool order."""
    labels = np.asarray(labels)
    a, b = (int(c) for c in pair)
    if a == b:
        raise ValueError(f"a pair needs two different classes, got {pair}")
    missing = [c for c in (a, b) if not np.any(labels == c)]
    if missing:
        raise ValueError(f"class(es) {missing} are not in the pool (classes {sorted(set(labels.tolist()))})")
    idx = np.flatnonzero((labels == a) | (labels == b))
    return idx, (labels[idx] == b).astype(np.int64)


# ----------------------------------------------------------------------------- input and hand-crafted features


def _dense(X) -> np.ndarray:
    return np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)


def _check_texts(train: Sequence[str], test: Sequence[str]) -> None:
    if len(train) == 0 or len(test) == 0:
        raise ValueError("need at least one training and one test text")


def bag_of_words(train: Sequence[str], test: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Word counts (lower case, words of two or more letters) over the ``train`` texts' vocabulary, the text
    analogue of raw pixels: float64 ``[n, V]``, ``[m, V]``."""
    from sklearn.feature_extraction.text import CountVectorizer

    _check_texts(train, test)
    vec = CountVectorizer().fit(train)
    return _dense(vec.transform(train)), _dense(vec.transform(test))


def lsa(train: Sequence[str], test: Sequence[str], dims: int = 100, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Latent semantic analysis: TF-IDF (sublinear term frequency) of the ``train`` vocabulary, then
    the top ``dims`` directions of a truncated SVD fitted on ``train`` (randomised, ``seed``)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    _check_texts(train, test)
    tfidf = TfidfVectorizer(sublinear_tf=True).fit(train)
    T_tr, T_te = tfidf.transform(train), tfidf.transform(test)
    dims = min(int(dims), T_tr.shape[1] - 1, len(train) - 1)
    if dims < 1:
        raise ValueError("too few training texts or words for an LSA projection")
    svd = TruncatedSVD(dims, random_state=seed).fit(T_tr)
    return svd.transform(T_tr).astype(np.float64), svd.transform(T_te).astype(np.float64)


def most_frequent_terms(counts, terms: Sequence[str], k: int) -> list[str]:
    """The ``k`` terms with the largest total count over the documents of ``counts`` (``[documents, terms]``,
    dense or sparse), ties broken by the term itself (alphabetical), returned in alphabetical order.

    scikit-learn's ``max_features`` keeps ``argsort(-counts)[:k]``, an unstable sort: which of several terms tied at
    the cut it keeps depends on numpy's sort kernel, so on the CPU (AVX-512 and AVX2 machines keep different ones).
    Sorting on (count, term) makes the choice a property of the texts alone."""
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    totals = np.asarray(counts.sum(axis=0)).ravel()
    terms = np.asarray(terms, dtype=object)
    if totals.shape[0] != terms.shape[0]:
        raise ValueError(f"{totals.shape[0]} count columns for {terms.shape[0]} terms")
    order = sorted(range(len(terms)), key=lambda j: (-totals[j], terms[j]))
    return sorted(terms[j] for j in order[:k])


def char_ngrams(train: Sequence[str], test: Sequence[str], ngram_range: tuple[int, int] = (2, 4),
                max_features: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    """TF-IDF of character n-grams within word boundaries (``analyzer="char_wb"``), the
    ``max_features`` most frequent in ``train`` (ties broken alphabetically, :func:`most_frequent_terms`):
    spelling, morphology and punctuation, a classic authorship feature."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    _check_texts(train, test)
    counter = CountVectorizer(analyzer="char_wb", ngram_range=tuple(ngram_range))
    counts = counter.fit_transform(train)
    kept = most_frequent_terms(counts, counter.get_feature_names_out(), max_features)
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=tuple(ngram_range), vocabulary=kept,
                          sublinear_tf=True).fit(train)
    return _dense(vec.transform(train)), _dense(vec.transform(test))


def text_representations(train: Sequence[str], test: Sequence[str], lsa_dims: int = 100,
                         char_features: int = 5000, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (train, test)}``: :data:`INPUT` (:func:`bag_of_words`) and the hand-crafted
    :data:`HANDCRAFTED` (:func:`lsa`, :func:`char_ngrams`), each fitted on ``train`` only."""
    return {INPUT: bag_of_words(train, test), "LSA": lsa(train, test, lsa_dims, seed),
            "char n-grams": char_ngrams(train, test, max_features=char_features)}


# ----------------------------------------------------------------------------- the encoder


def encoders(name: str, seed: int = 0) -> tuple[nn.Module, nn.Module, Any]:
    """``(pretrained, init, tokenizer)``: the registered encoder ``name`` with its weights, the same architecture
    with its own initialiser's weights under ``seed`` (the paper's "init"; global random state kept), and the
    tokenizer; both models in eval mode."""
    asset = assets.get_asset(name)  # ValueError naming the known assets for an unknown name
    if asset.kind != "model" or not asset.has_tokenizer:
        text_models = [a.name for a in assets.list_assets("model") if a.has_tokenizer]
        raise ValueError(f"{name!r} is not a text model with a tokenizer; use one of {text_models}")
    with quiet_transformers():
        pretrained, tok = fetch.load_model(name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            init, _ = fetch.load_model(name, random_init=True)
    if tok is None:
        raise ValueError(f"{name!r} came without a tokenizer; a11 needs a text encoder with one")
    return pretrained.eval(), init.eval(), tok


def encoder_features(model: nn.Module, tokenizer: Any, texts: Sequence[str], tokens: Sequence[str] = ("cls", "mean"),
                     max_length: int = 64, batch_size: int = 64, device: Any = "auto",
                     progress: bool = False) -> dict[str, np.ndarray]:
    """Every layer of ``model`` on ``texts``: ``{token: float32 [L+1, N, d]}`` in text order (index 0 = embedding
    output, no final norm), texts truncated to ``max_length``; ``tokens``: ``"cls"``, ``"mean"``, ... as in
    :mod:`layersim.nets.models`. Batched by length; equal to reading texts one by one up to rounding."""
    texts = list(texts)
    if not texts:
        raise ValueError("no texts")
    if max_length < 4 or batch_size < 1:
        raise ValueError(f"max_length must be >= 4 and batch_size >= 1, got {max_length}, {batch_size}")
    order = text_tasks.length_order(tokenizer, texts, max_length=max_length)
    batches = []
    for s in range(0, len(order), batch_size):
        part = [texts[i] for i in order[s:s + batch_size]]
        batches.append(dict(tokenizer(part, padding=True, truncation=True, max_length=max_length,
                                      return_tensors="pt")))
    got = models.collect_tokens(model, batches, list(tokens), device=device, progress=progress)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return {t: np.ascontiguousarray(h[:, back]) for t, h in got.items()}


def relative_spread(H) -> np.ndarray:
    """How much a token varies across samples, per layer: ``mean_i ||h_i - mean(h)||^2 / ||mean(h)||^2`` for
    ``H [L+1, N, d]`` or ``[N, d]``; near 0 the token is constant, so no label aligns with it beyond the constant
    direction."""
    H = np.asarray(H, dtype=np.float64)
    if H.ndim not in (2, 3) or H.shape[-2] < 2:
        raise ValueError(f"H must be [N, d] or [L+1, N, d] with N >= 2, got shape {H.shape}")
    mean = H.mean(axis=-2, keepdims=True)
    spread = ((H - mean) ** 2).sum(axis=-1).mean(axis=-1)
    centre = (mean ** 2).sum(axis=-1)[..., 0]
    return spread / np.where(centre > 0, centre, np.nan)
