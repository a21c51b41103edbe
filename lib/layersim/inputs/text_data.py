"""Text data sets, offline first: the six Jane Austen novels (:func:`load_austen`, lines or sentences) and
paragraphs of Python's documentation (:func:`load_python_docs`) through :mod:`layersim.inputs.fetch`;
:func:`text_sample`, distinct texts with two disjoint halves; the Austen BPE tokenizer of the language models
trained here (:func:`austen_tokenizer`); tokenised batches (:func:`text_batches`). Paper scale (the network once,
then the cache): GLUE (:func:`load_glue`), the hub's other text sets (:func:`load_hf_text`), WikiText-103
(:func:`load_wikitext103`). Tasks built from them are in :mod:`layersim.inputs.text_tasks`.

(see docs/modules.md, ``layersim.inputs.text_data``)
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from layersim.inputs import assets, cache, fetch
from layersim.inputs.subsets import cache_file, check_count, check_split

__all__ = [
    "load_austen",
    "AUSTEN_NOVELS",
    "GLUE_TASKS",
    "load_glue",
    "load_wikitext103",
    "load_hf_text",
    "austen_tokenizer",
]

# R object name in janeaustenr -> title, in the order of janeaustenr::austen_books().
AUSTEN_NOVELS = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
GLUE_TASKS = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli", "ax")


# ----- offline texts -----------------------------------------------------------------------


def _read_rdb(folder: Path) -> dict[str, Any]:
    """Read every object of an R lazy-load database (``Rdata.rdb``/``.rdx``) with rdata."""
    import warnings
    import zlib

    import rdata

    def parse(raw: bytes):
        with warnings.catch_warnings():  # "Unknown file type: assumed RDS": expected here
            warnings.simplefilter("ignore", UserWarning)
            return rdata.conversion.convert(rdata.parser.parse_data(raw))

    index = parse(gzip.decompress((folder / "Rdata.rdx").read_bytes()))
    blob = (folder / "Rdata.rdb").read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        chunk = blob[int(offset): int(offset) + int(length)]
        out[str(name)] = parse(zlib.decompress(chunk[4:]))  # 4-byte length, then zlib
    return out


def _austen_lines() -> dict[str, list[str]]:
    """The raw lines of each novel, keyed by title, in publication order; cached as
    ``data/cache/text/janeaustenr.json`` (:func:`layersim.inputs.cache.cached`)."""
    import json

    def read(path: Path) -> dict[str, list[str]]:
        lines = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(lines, dict) or list(lines) != list(AUSTEN_NOVELS.values()):
            raise ValueError("not the lines of the six novels")
        return lines

    def build() -> dict[str, list[str]]:
        folder = fetch.resolve("janeaustenr", allow_download=False) / "data"
        objects = _read_rdb(folder)
        missing = [k for k in AUSTEN_NOVELS if k not in objects]
        if missing:
            raise ValueError(f"janeaustenr data in {folder} lacks {missing}")
        return {title: [str(x) for x in objects[key]] for key, title in AUSTEN_NOVELS.items()}

    def write(lines: dict[str, list[str]], tmp: Path) -> None:
        tmp.write_text(json.dumps(lines), encoding="utf-8")

    return cache.cached(cache_file("text", "janeaustenr.json"), read, build, write)


_ABBREV = re.compile(r"(?<![A-Za-z])(Mr|Mrs|Messrs|Dr|St|Col|Capt|Gen|Lt)\._?$")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019_]))\s+(?=[\"'\u201c\u2018_]*[A-Z])")


def _sentences(lines: list[str]) -> list[str]:
    """Split a novel's lines into sentences: paragraphs at blank lines, then end punctuation."""
    paragraphs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    sentences: list[str] = []
    for para in paragraphs:
        pieces = _SENTENCE_END.split(para)
        merged: list[str] = []
        for piece in pieces:
            if merged and _ABBREV.search(merged[-1]):
                merged[-1] = f"{merged[-1]} {piece}"
            else:
                merged.append(piece)
        sentences += [s for s in merged if s.strip()]
    return sentences


def load_austen(unit: str = "line", drop_empty: bool = True):
    """The six Jane Austen novels (publication order) as a DataFrame with columns novel, index, text:
    ``unit="line"`` the printed lines (``drop_empty`` drops empty ones), ``unit="sentence"`` sentences split at
    blank lines and end punctuation."""
    import pandas as pd

    check_split("austen (unit)", unit, ("line", "sentence"))
    rows: list[tuple[str, int, str]] = []
    for title, lines in _austen_lines().items():
        if unit == "sentence":
            rows += [(title, i, s) for i, s in enumerate(_sentences(lines))]
        else:
            rows += [(title, i, s) for i, s in enumerate(lines) if s.strip() or not drop_empty]
    frame = pd.DataFrame(rows, columns=["novel", "index", "text"])
    frame["novel"] = pd.Categorical(frame["novel"], categories=list(AUSTEN_NOVELS.values()))
    return frame


def load_python_docs(min_words: int = 8) -> list[str]:
    """Paragraphs of at least ``min_words`` words of Python's own help texts (``pydoc_data.topics``): technical
    English far from the Austen novels; whitespace folded, topics sorted."""
    fetch.resolve("python-docs")
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[name]):
            text = " ".join(para.split())
            if len(text.split()) >= min_words:
                out.append(text)
    return out


def text_sample(name: str, n: int | None, seed: int = 0, split: str = "all", at_most: bool = False) -> list[str]:
    """``n`` distinct texts (all when None) of ``"austen"`` sentences or ``"python-docs"``, drawn by a
    ``seed``-ed permutation, kept in source order. ``split``: ``"all"``, or the permutation's first (``"test"``)
    or second (``"train"``) half. ``ValueError`` for ``n`` out of range (:func:`check_count`)."""
    check_split(name, split, ("all", "train", "test"))
    check_count(n, None, name, unit="texts")
    try:
        key = assets.canonical_name(name)
    except ValueError:
        key = name
    if key == "janeaustenr":
        texts = list(load_austen(unit="sentence")["text"])
    elif key == "python-docs":
        texts = load_python_docs()
    else:
        raise ValueError(f"unknown text source {name!r}; use 'austen' or 'python-docs'")
    texts = list(dict.fromkeys(texts))  # each distinct text once, so the two halves share none
    perm = np.random.default_rng(seed).permutation(len(texts))
    half = len(texts) // 2
    pool = {"all": perm, "test": perm[:half], "train": perm[half:]}[split]
    where = name if split == "all" else f"the {split!r} half of {name}"
    n = check_count(n, len(pool), where, unit="distinct texts", at_most=at_most)
    return [texts[i] for i in np.sort(pool[:n])]


def austen_tokenizer(vocab_size: int = 2048):
    """A byte-level BPE ``PreTrainedTokenizerFast`` of ``vocab_size`` learnt from the training half of the Austen
    sentences, ``<pad>`` = id 0 (also EOS), for language models trained here; cached under ``data/cache/text/``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise ValueError(f"vocab_size must be at least 300 (256 bytes and merges), got {vocab_size}")

    def build():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(text_sample("austen", None, split="train"), trainer)
        return tok

    tok = cache.cached(cache_file("text", f"austen-bpe-{vocab_size}.json"),
                        lambda path: Tokenizer.from_file(str(path)), build, lambda tok, tmp: tok.save(str(tmp)))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<pad>")


def text_batches(texts: Sequence[str], tokenizer: Any, batch_size: int = 64, max_length: int = 128) -> list[dict]:
    """Tokenised batches (``input_ids``, ``attention_mask``, ...: PyTorch tensors, right padding,
    truncated to ``max_length`` tokens) of ``texts``, in order, for ``layersim.nets.models.collect``."""
    if batch_size < 1 or max_length < 2:
        raise ValueError(f"batch_size must be >= 1 and max_length >= 2, got {batch_size}, {max_length}")
    return [dict(tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                           return_tensors="pt"))
            for i in range(0, len(texts), batch_size)]


# ----- paper-scale data sets -----------------------------------------------------------------


def _glue_splits(task: str) -> tuple[str, ...]:
    """The splits of one GLUE task on the hub."""
    if task == "mnli":
        return ("train", "validation_matched", "validation_mismatched", "test_matched",
                "test_mismatched")
    return ("test",) if task == "ax" else ("train", "validation", "test")


def load_glue(task: str, split: str = "train", allow_download: bool | None = None):
    """One GLUE task split as a Hugging Face ``datasets.Dataset``.

    Loaded from the project cache (``data/cache/hf-datasets/glue/<task>``, a ``save_to_disk``
    folder); downloaded with ``datasets.load_dataset("nyu-mll/glue", task)`` when allowed.
    """
    import datasets

    task = task.lower().replace("-", "")
    if task not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose one of {list(GLUE_TASKS)}")
    check_split(f"glue/{task}", split, _glue_splits(task))
    path = fetch.resolve(f"glue/{task}", allow_download=allow_download)
    return datasets.load_from_disk(str(path))[split]


def load_hf_text(name: str, split: str = "train", allow_download: bool | None = None):
    """One split of a paper-scale hub text data set (``"boolq"``, ``"yelp-polarity"``, ``"hellaswag"``,
    ``"cosmosqa"``) as a ``datasets.Dataset``; ``"validation"`` falls back to ``"test"`` where there is none."""
    import datasets

    asset = assets.get_asset(name)
    if asset.kind != "data" or asset.source != "hf-datasets" or asset.name in ("glue", "wikitext-103"):
        raise ValueError(f"{name!r} is not a text classification data set of the hub; use 'boolq', "
                         "'yelp-polarity', 'hellaswag' or 'cosmosqa'")
    check_split(asset.name, split, ("train", "validation", "test"))
    dd = datasets.load_from_disk(str(fetch.resolve(asset.name, allow_download=allow_download)))
    if split == "validation" and "validation" not in dd:
        split = "test"
    return dd[split]


def load_wikitext103(split: str = "train", allow_download: bool | None = None):
    """WikiText-103 (raw) ``split`` as a Hugging Face ``datasets.Dataset`` (column ``text``)."""
    import datasets

    check_split("wikitext-103", split, ("train", "validation", "test"))
    path = fetch.resolve("wikitext-103", allow_download=allow_download)
    return datasets.load_from_disk(str(path))[split]
