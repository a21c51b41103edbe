"""Text classification tasks: single sentences or sentence pairs with labels, per split.

The clusters paper (Phang et al. 2021, §2) fine-tunes encoders on GLUE (without WNLI), BoolQ, Yelp polarity,
HellaSwag and CosmosQA (:data:`PAPER_TASKS`, paper scale). Offline, the default scale builds balanced tasks
from the six Jane Austen novels (:data:`OFFLINE_TASKS`: ``"austen-novel"``, ``"austen-same-novel"``,
``"austen-excerpt"``, ``"austen-next"``), split by chunks so that no sentence or neighbouring pair is in both
splits.

:func:`load_task` returns a :class:`TextTask`; :func:`encode` tokenises it into labelled batches for
``layersim.train.finetune`` and ``layersim.nets.models.collect``
(see docs/modules.md, ``layersim.inputs.text_tasks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layersim.inputs import text_data
from layersim.inputs.subsets import check_count

__all__ = ["CHUNK", "MIN_WORDS", "OFFLINE_TASKS", "PAPER_TASKS", "TextTask", "VAL_EVERY", "encode", "flat_choices",
           "length_order", "load_task", "predictions",
           "majority_baseline", "score"]

CHUNK = 50
VAL_EVERY = 5
MIN_WORDS = 6

#: offline tasks (built from the Austen novels)
OFFLINE_TASKS = ("austen-novel", "austen-excerpt", "austen-same-novel", "austen-next")
#: the clusters paper's tasks this path loads at paper scale (HF datasets), and their text columns
PAPER_TASKS: dict[str, dict[str, Any]] = {
    "cola": {"cols": ("sentence",), "metric": "matthews"},
    "sst2": {"cols": ("sentence",), "metric": "accuracy"},
    "mrpc": {"cols": ("sentence1", "sentence2"), "metric": "accuracy"},
    "qqp": {"cols": ("question1", "question2"), "metric": "accuracy"},
    "stsb": {"cols": ("sentence1", "sentence2"), "metric": "pearson"},
    "mnli": {"cols": ("premise", "hypothesis"), "metric": "accuracy"},
    "qnli": {"cols": ("question", "sentence"), "metric": "accuracy"},
    "rte": {"cols": ("sentence1", "sentence2"), "metric": "accuracy"},
    "boolq": {"cols": ("question", "passage"), "metric": "accuracy", "label": "answer"},
    "yelp-polarity": {"cols": ("text",), "metric": "accuracy"},
    "hellaswag": {"cols": ("ctx",), "endings": "endings", "metric": "accuracy"},
    "cosmosqa": {"cols": ("context", "question"), "endings": ("answer0", "answer1", "answer2", "answer3"),
                 "metric": "accuracy"},
}
_SPLITS = ("train", "validation")


@dataclass(frozen=True)
class TextTask:
    """One split of a classification task: ``text_a`` (``text_b`` for pairs, else None), ``labels [N]`` (floats
    for a regression), ``num_labels`` (1 = regression), ``metric`` and class names. Multiple choice: ``choices``
    (N lists of C endings), ``labels`` the right one's index, ``num_labels = C``."""

    name: str
    split: str
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray
    num_labels: int
    metric: str = "accuracy"
    label_names: tuple[str, ...] = ()
    choices: list[list[str]] | None = None

    def __len__(self) -> int:
        return len(self.text_a)

    @property
    def pairs(self) -> bool:
        return self.text_b is not None

    @property
    def multiple_choice(self) -> bool:
        return self.choices is not None

    @property
    def rows_per_example(self) -> int:
        """Feature rows per example: ``C`` for a multiple-choice task (one per ending), else 1."""
        return self.num_labels if self.multiple_choice else 1

    def record(self) -> dict:
        """What a checkpoint key and ``metrics.json`` record of the task."""
        out = {"name": self.name, "split": self.split, "n": len(self), "num_labels": self.num_labels,
               "metric": self.metric, "pairs": self.pairs}
        return {**out, "multiple_choice": True} if self.multiple_choice else out


# ----------------------------------------------------------------------------- Austen tasks


def _novel_sentences() -> dict[str, list[str]]:
    """Sentences of each novel (publication order) in reading order, short ones dropped."""
    frame = text_data.load_austen(unit="sentence")
    out = {}
    for novel in frame["novel"].cat.categories:
        texts = frame.loc[frame["novel"] == novel, "text"].tolist()
        out[str(novel)] = texts
    return out


def _in_split(n: int, split: str) -> np.ndarray:
    """Boolean mask ``[n]`` of the sentences of one novel that belong to ``split`` (chunks of
    :data:`CHUNK`; every :data:`VAL_EVERY`-th chunk is validation)."""
    val = (np.arange(n) // CHUNK) % VAL_EVERY == VAL_EVERY - 1
    return val if split == "validation" else ~val


def _long_enough(text: str) -> bool:
    return len(text.split()) >= MIN_WORDS


def _balanced(groups: Sequence[Sequence[Any]], n: int | None, rng: np.random.Generator, what: str,
              at_most: bool = False) -> list[list[Any]]:
    """``n // len(groups)`` items drawn without replacement from each group (the smallest group's size when
    ``n`` is None, or when ``at_most`` caps ``n``); ``ValueError`` when ``n`` is below the number of groups or a
    group is too small."""
    smallest = min(len(g) for g in groups)
    per = smallest if n is None else n // len(groups)
    if smallest < 1:
        raise ValueError(f"{what}: a class has no examples; a balanced draw needs at least 1 of each")
    if per < 1:
        raise ValueError(f"{what}: n={n} is too small; a balanced draw needs at least 1 example of each of its "
                         f"{len(groups)} classes (n >= {len(groups)})")
    if per > smallest:
        if not at_most:
            raise ValueError(f"{what}: n={n} asks for {per} examples per class, its smallest class has {smallest}; "
                             f"use n <= {smallest * len(groups)} (or None for all)")
        per = smallest
    return [[g[i] for i in np.sort(rng.choice(len(g), per, replace=False))] for g in groups]


def _austen_novel(split: str, n: int | None, seed: int, at_most: bool = False) -> TextTask:
    novels = _novel_sentences()
    groups = []
    for texts in novels.values():
        mask = _in_split(len(texts), split)
        groups.append([t for t, m in zip(texts, mask) if m and _long_enough(t)])
    picked = _balanced(groups, n, np.random.default_rng([seed, 0 if split == "train" else 1]),
                       f"austen-novel {split}", at_most)
    text = [t for g in picked for t in g]
    labels = np.repeat(np.arange(len(picked)), [len(g) for g in picked])
    order = np.random.default_rng([seed, 2]).permutation(len(text))
    return TextTask("austen-novel", split, [text[i] for i in order], None, labels[order], len(novels),
                    label_names=tuple(novels))


def _austen_next(split: str, n: int | None, seed: int, at_most: bool = False) -> TextTask:
    """Positives ``(s_i, s_{i+1})`` inside one chunk; negatives ``(s_i, s_j)`` with ``s_j`` drawn from
    the same novel's sentences of this split, ``|i - j| > 1``."""
    rng = np.random.default_rng([seed, 10 if split == "train" else 11])
    pos, neg = [], []
    for texts in _novel_sentences().values():
        mask = _in_split(len(texts), split)
        idx = np.flatnonzero(mask)
        usable = [i for i in idx[:-1] if mask[i + 1] and (i + 1) // CHUNK == i // CHUNK
                  and _long_enough(texts[i]) and _long_enough(texts[i + 1])]
        pool = np.array([i for i in idx if _long_enough(texts[i])])
        for i in usable:
            pos.append((texts[i], texts[i + 1]))
            j = i
            while abs(j - i) <= 1:
                j = int(pool[rng.integers(len(pool))])
            neg.append((texts[i], texts[j]))
    picked = _balanced([neg, pos], n, rng, f"austen-next {split}", at_most)
    pairs = [p for g in picked for p in g]
    labels = np.repeat(np.arange(2), [len(g) for g in picked])
    order = np.random.default_rng([seed, 12]).permutation(len(pairs))
    return TextTask("austen-next", split, [pairs[i][0] for i in order], [pairs[i][1] for i in order],
                    labels[order], 2, label_names=("not next", "next"))


def _excerpt(text: str, rng: np.random.Generator, keep: float = 0.6) -> str:
    words = text.split()
    k = max(4, int(round(keep * len(words))))
    start = int(rng.integers(0, len(words) - k + 1))
    return " ".join(words[start:start + k])


def _austen_excerpt(split: str, n: int | None, seed: int, at_most: bool = False) -> TextTask:
    """Pairs ``(s_i, excerpt)``: the excerpt (a contiguous ~60 % of the words) is of ``s_i`` itself (1)
    or of ``s_{i+1}``, the next sentence in the same chunk (0); each ``s_i`` is used once."""
    rng = np.random.default_rng([seed, 30 if split == "train" else 31])
    candidates = []
    for texts in _novel_sentences().values():
        mask = _in_split(len(texts), split)
        candidates += [(texts[i], texts[i + 1]) for i in np.flatnonzero(mask)[:-1]
                       if mask[i + 1] and (i + 1) // CHUNK == i // CHUNK
                       and _long_enough(texts[i]) and _long_enough(texts[i + 1])]
    n = check_count(n, len(candidates), f"the {split} split of austen-excerpt", unit="sentences", at_most=at_most)
    total = len(candidates) - len(candidates) % 2 if n is None else n
    picked = rng.permutation(len(candidates))[:total]
    labels = np.arange(total) % 2
    text_a, text_b = [], []
    for k, y in zip(picked, labels):
        a, nxt = candidates[k]
        text_a.append(a)
        text_b.append(_excerpt(a if y else nxt, rng))
    return TextTask("austen-excerpt", split, text_a, text_b, labels, 2, label_names=("next sentence's", "its own"))


def _austen_same_novel(split: str, n: int | None, seed: int, at_most: bool = False) -> TextTask:
    """Positives: two different sentences of one novel; negatives: sentences of two novels (of this split);
    novels drawn uniformly with replacement, so any ``n`` can be had."""
    rng = np.random.default_rng([seed, 20 if split == "train" else 21])
    pools = []
    for texts in _novel_sentences().values():
        mask = _in_split(len(texts), split)
        pools.append([t for t, m in zip(texts, mask) if m and _long_enough(t)])
    K = len(pools)
    size = min(len(p) for p in pools) if n is None else (n + 1) // 2
    pairs, labels = [], []
    for label in (0, 1):
        for _ in range(size):
            a = int(rng.integers(K))
            b = a if label else int((a + rng.integers(1, K)) % K)
            i = int(rng.integers(len(pools[a])))
            j = int(rng.integers(len(pools[b])))
            while b == a and j == i:
                j = int(rng.integers(len(pools[b])))
            pairs.append((pools[a][i], pools[b][j]))
            labels.append(label)
    order = np.random.default_rng([seed, 22]).permutation(len(pairs))[:n]
    return TextTask("austen-same-novel", split, [pairs[i][0] for i in order], [pairs[i][1] for i in order],
                    np.asarray(labels)[order], 2, label_names=("different novels", "same novel"))


# ----------------------------------------------------------------------------- paper-scale tasks


def _hf_task(name: str, split: str, n: int | None, seed: int, allow_download: bool | None,
             at_most: bool = False) -> TextTask:
    """A paper-scale task from its saved Hugging Face data set (first ``n`` of a seeded permutation)."""
    spec = PAPER_TASKS[name]
    if name in text_data.GLUE_TASKS:
        hf_split = "validation_matched" if (name == "mnli" and split == "validation") else split
        ds = text_data.load_glue(name, hf_split, allow_download=allow_download)
    else:
        ds = text_data.load_hf_text(name, split, allow_download=allow_download)
    n = check_count(n, len(ds), f"the {split} split of {name}", at_most=at_most)
    order = np.random.default_rng(seed).permutation(len(ds))
    if n is not None:
        order = np.sort(order[:n])
    ds = ds.select(order.tolist())
    cols = spec["cols"]
    if "endings" in spec:  # the context: its columns joined (CosmosQA: passage and question)
        first = [" ".join(str(x) for x in parts) for parts in zip(*(ds[c] for c in cols))]
        ends = spec["endings"]  # one list column (HellaSwag) or one column per ending (CosmosQA)
        choices = ([[str(e) for e in row] for row in ds[ends]] if isinstance(ends, str)
                   else [[str(e) for e in row] for row in zip(*(ds[c] for c in ends))])
        labels = np.asarray([int(x) for x in ds["label"]], dtype=np.int64)
        return TextTask(name, split, first, None, labels, len(choices[0]), spec["metric"], choices=choices)
    labels = np.asarray(ds[spec.get("label", "label")])
    regression = spec["metric"] == "pearson"
    labels = labels.astype(np.float32) if regression else labels.astype(np.int64)
    feature = ds.features[spec.get("label", "label")]
    num_labels = 1 if regression else int(getattr(feature, "num_classes", None) or labels.max() + 1)
    first = [str(t) for t in ds[cols[0]]]
    second = [str(t) for t in ds[cols[1]]] if len(cols) > 1 else None
    return TextTask(name, split, first, second, labels, num_labels, spec["metric"])


def load_task(name: str, split: str = "train", n: int | None = None, seed: int = 0,
              allow_download: bool | None = None, at_most: bool = False) -> TextTask:
    """``n`` examples (all when None) of ``split`` (``"train"``/``"validation"``) of task ``name``: one of
    :data:`OFFLINE_TASKS` (balanced per class) or :data:`PAPER_TASKS` (a seeded subset). ``ValueError`` for an
    unknown task or split, or an ``n`` out of range (``at_most=True``: a larger ``n`` means all)."""
    key = name.lower().replace("_", "-")
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
    check_count(n, None, f"the {split} split of {name}")
    builders = {"austen-novel": _austen_novel, "austen-next": _austen_next, "austen-excerpt": _austen_excerpt,
                "austen-same-novel": _austen_same_novel}
    if key in builders:
        return builders[key](split, n, seed, at_most)
    if key in PAPER_TASKS:
        return _hf_task(key, split, n, seed, allow_download, at_most)
    raise ValueError(f"unknown task {name!r}; use one of {list(OFFLINE_TASKS) + list(PAPER_TASKS)}")


def encode(task: TextTask, tokenizer: Any, batch_size: int = 32, max_length: int = 128,
           order: np.ndarray | None = None) -> list[dict]:
    """Tokenised batches of ``task``, each with its ``labels`` tensor: right padding, truncated to ``max_length``
    (pairs as ``[CLS] a [SEP] b [SEP]``, the longer truncated first). ``order``: indices of the examples to
    take, in that order (default all)."""
    import torch

    if batch_size < 1 or max_length < 4:
        raise ValueError(f"batch_size must be >= 1 and max_length >= 4, got {batch_size}, {max_length}")
    idx = np.arange(len(task)) if order is None else np.asarray(order)
    out = []
    for s in range(0, len(idx), batch_size):
        b = idx[s:s + batch_size]
        if task.multiple_choice:  # C (context, ending) pairs per example -> [B, C, T]
            C = task.num_labels
            a = [task.text_a[i] for i in b for _ in range(C)]
            second = [e for i in b for e in task.choices[i]]
        else:
            a = [task.text_a[i] for i in b]
            second = None if task.text_b is None else [task.text_b[i] for i in b]
        enc = dict(tokenizer(a, second, padding=True, truncation="longest_first" if second else True,
                             max_length=max_length, return_tensors="pt"))
        if task.multiple_choice:
            enc = {k: v.view(len(b), task.num_labels, -1) for k, v in enc.items()}
        enc["labels"] = torch.as_tensor(task.labels[b])
        out.append(enc)
    return out


def length_order(tokenizer: Any, texts: list[str], second: list[str] | None = None,
                 max_length: int = 128) -> np.ndarray:
    """Indices that sort ``texts`` (with their ``second`` texts) stably by tokenised length after truncation to
    ``max_length``, so batches need little padding."""
    lengths = [len(ids) for ids in tokenizer(list(texts), second, truncation=True, max_length=max_length)["input_ids"]]
    return np.argsort(lengths, kind="stable")


def flat_choices(batches: list[dict]) -> list[dict]:
    """Multiple-choice batches ``[B, C, T]`` as ``[B * C, T]`` (one row per (example, ending), in
    order; labels dropped), for reading the layers of every pair with ``layersim.nets.models.collect``;
    other batches are returned as they are."""
    out = []
    for b in batches:
        if b["input_ids"].dim() == 3:
            b = {k: v.reshape(-1, v.shape[-1]) for k, v in b.items() if k != "labels"}
        out.append(b)
    return out


def predictions(task: TextTask, logits: np.ndarray) -> np.ndarray:
    """The predictions of ``logits``: ``[N, K]`` -> argmax (column 0 for a regression), or, for a
    multiple-choice task, one logit per (example, ending) row ``[N * C, 1]`` (or ``[N, C]``) ->
    the argmax over each example's endings."""
    z = np.asarray(logits)
    if task.multiple_choice:
        return z.reshape(len(task), task.num_labels).argmax(1)
    return z[:, 0] if task.num_labels == 1 else z.argmax(1)


def score(task: TextTask, predictions: np.ndarray) -> float:
    """The task's metric of ``predictions`` (class indices; real values for a regression) against
    its labels: accuracy, Matthews correlation (CoLA) or Pearson correlation (STS-B)."""
    p, y = np.asarray(predictions), np.asarray(task.labels)
    if p.shape != y.shape:
        raise ValueError(f"predictions have shape {p.shape}, the task has {y.shape} labels")
    if task.metric == "accuracy":
        return float(np.mean(p == y))
    if task.metric == "pearson":
        return float(np.corrcoef(p.astype(float), y.astype(float))[0, 1])
    if task.metric == "matthews":
        from sklearn.metrics import matthews_corrcoef

        return float(matthews_corrcoef(y, p))
    raise ValueError(f"unknown metric {task.metric!r}")


def majority_baseline(task: TextTask) -> float:
    """The score of always predicting the most frequent class (the mean, for a regression: 0)."""
    if task.num_labels == 1:
        return 0.0
    counts = np.bincount(task.labels.astype(int), minlength=task.num_labels)
    return score(task, np.full(len(task), int(np.argmax(counts))))
