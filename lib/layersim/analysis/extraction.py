"""One pass over every layer of a model: what the lenses of a report read.

:func:`read` runs :func:`layersim.nets.models.collect` once over a model's batches (any batches it takes, or one
tensor or Hugging Face dict of all samples, split by :func:`batches_of`), leaves out entries that are the same
vector in every sample (:func:`constant_entries`), adds every layer's logits where the model's head can read them
(:func:`head_note`) and, beyond ``max_in_memory`` samples, streams the similarity lenses
(:func:`streamed_similarity`) while the others read a :func:`stratified` subsample. :func:`sample_runs` picks the
samples the lenses that run the model again read (see docs/modules.md, ``layersim.analysis.extraction``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from layersim.analysis.lenses import ModelRuns
from layersim.measures import block_structure, similarity
from layersim.nets import models, readout

__all__ = ["MAX_LOGIT_CLASSES", "STREAMED", "SURGERY_BATCH", "batches_of", "constant_entries", "describe_runs",
           "head_note", "read", "sample_runs", "stratified", "streamed_similarity", "take_rows"]

#: a logit lens over a vocabulary bigger than this is skipped (its [E, N, V] logits would not fit)
MAX_LOGIT_CLASSES = 1000
#: the lenses :func:`streamed_similarity` computes over all samples when a report streams
STREAMED = ("cka/matrix", "cka/to_last", "clusters/block_diagonal", "cos/matrix", "cos/to_last")
#: batch size of the passes that run the model again: a few dozen texts sorted by length pad far less in
#: batches of 16 than in one batch (MiniLM, 64 Austen sentences: 0.43 s a pass instead of 1.55 s)
SURGERY_BATCH = 16


# ----------------------------------------------------------------------------- the batches


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "detach") and hasattr(x, "shape"))  # torch, without importing it


def _rows(batch: Any) -> int | None:
    """The number of samples in one batch (an array, an ``(inputs, labels)`` pair or a dict of arrays), or None."""
    if _is_array(batch):
        return len(batch) if np.ndim(batch) else None
    if isinstance(batch, Mapping):
        return next((len(v) for v in batch.values() if _is_array(v) and np.ndim(v)), None)
    if isinstance(batch, (tuple, list)) and batch:
        return _rows(batch[0])
    return None


def batches_of(data: Any, batch_size: int = 64) -> Any:
    """``data`` as batches: one array or tensor of all samples, one dict of them (a tokenizer's output) or one
    ``(inputs, labels)`` pair is split into ``batch_size`` rows; a one-shot iterator is kept as a list; any other
    iterable (a DataLoader, a list of batches) is returned as it is. ``ValueError`` for what holds no batches."""
    if hasattr(data, "__getitem__") and hasattr(data, "__len__") and not hasattr(data, "__iter__"):  # a Dataset
        import torch

        return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False)
    if data is None or isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        raise ValueError(f"batches must be a DataLoader, a list of batches, a tensor or a dict of tensors, got "
                         f"{type(data).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    pair = (isinstance(data, tuple) and len(data) == 2 and all(map(_is_array, data)) and np.ndim(data[1]) == 1
            and np.ndim(data[0]) >= 2 and len(data[0]) == len(data[1]))
    if _is_array(data) or isinstance(data, Mapping) or pair:
        n = _rows(data)
        if not n:
            raise ValueError(f"batches holds no samples (a {type(data).__name__} without a sample axis)")
        return [take_rows(data, slice(s, s + batch_size)) for s in range(0, n, batch_size)]
    return list(data) if iter(data) is data else data


def take_rows(batch: Any, rows: Any) -> Any:
    """The samples ``rows`` (a slice or indices) of one batch: arrays indexed along their first axis, pairs and dicts
    entry by entry (entries that are not one per sample kept as they are)."""
    if _is_array(batch):
        return batch[rows]
    n = _rows(batch)
    if isinstance(batch, Mapping):
        return {k: v[rows] if _is_array(v) and np.ndim(v) and len(v) == n else v for k, v in batch.items()}
    return type(batch)(take_rows(x, rows) if _is_array(x) and np.ndim(x) and len(x) == n else x for x in batch)


def _padded(parts: list) -> list:
    """``parts`` (2-D tensors of token ids or masks) padded on the right with zeros to one length."""
    import torch

    width = max(p.shape[1] for p in parts)
    return [torch.nn.functional.pad(torch.as_tensor(p), (0, width - p.shape[1])) for p in parts]


def _merged(parts: list) -> list:
    """``parts`` (batches of one kind) as one batch where their arrays can be stacked: equal shapes, or text dicts
    with an ``attention_mask`` (shorter ones padded and masked, columns masked in every sample cut at the end); else
    the parts as they are."""
    import torch

    first = parts[0]
    cat = (lambda xs: torch.cat([torch.as_tensor(x) for x in xs]))  # noqa: E731
    if isinstance(first, Mapping):
        keys = [k for k, v in first.items() if _is_array(v)]
        mask = "attention_mask" in keys
        shapes = {k: {tuple(p[k].shape[1:]) for p in parts} for k in keys}
        if any(len(s) > 1 and not (mask and np.ndim(first[k]) == 2) for k, s in shapes.items()):
            return parts
        merged = {k: cat(_padded([p[k] for p in parts]) if len(shapes[k]) > 1 else [p[k] for p in parts])
                  for k in keys}
        if mask and merged["attention_mask"].ndim == 2:  # columns masked in every sample at the end: left out
            width = merged["attention_mask"].shape[1]
            used = int(torch.nonzero(merged["attention_mask"].any(0)).max()) + 1 if merged["attention_mask"].any() \
                else width
            merged = {k: v[:, :used] if v.ndim >= 2 and v.shape[1] == width else v for k, v in merged.items()}
        return [merged]
    columns = [parts] if _is_array(first) else [[p[i] for p in parts] for i in range(len(first))]
    if any(not _is_array(c[0]) or len({tuple(x.shape[1:]) for x in c}) > 1 for c in columns):
        return parts
    stacked = [cat(c) for c in columns]
    return [stacked[0] if _is_array(first) else type(first)(stacked)]


def describe_runs(runs: ModelRuns) -> str:
    """One line: how many samples ``runs`` fits RBA maps on and compares final representations on."""
    fit, ev = (sum(_rows(b) or 0 for b in batches) for batches in (runs.fit, runs.eval))
    return f"{fit} samples to fit RBA maps on, {ev} to compare the final representations on"


def sample_runs(model: Any, batches: Any, labels: np.ndarray | None, n: int, token: Any = None,
                device: Any = "auto") -> ModelRuns:
    """What the lenses that run the model again read (:class:`~layersim.analysis.lenses.ModelRuns`): ``n``
    :func:`stratified` samples of ``batches`` (read again), alternately to fit RBA maps on and to compare final
    representations on, in batches of at most :data:`SURGERY_BATCH`."""
    total = _count(batches) if isinstance(batches, list) else sum(_rows(b) or 0 for b in batches)
    if n < 4:
        raise ValueError(f"n_surgery must be 0 (off) or at least 4, got {n}")
    pick = stratified(labels, total, n)
    fit, ev = set(pick[0::2].tolist()), set(pick[1::2].tolist())
    groups: dict[str, list] = {"fit": [], "eval": []}
    start = 0
    for b in batches:
        size = _rows(b) or 0
        for name, chosen in (("fit", fit), ("eval", ev)):
            rows = [i - start for i in range(start, start + size) if i in chosen]
            if rows:
                groups[name].append(take_rows(b, rows))
        start += size
    runs = {}
    for name, parts in groups.items():
        out, chunk, count = [], [], 0
        for part in parts + [None]:
            if part is None or (chunk and count + _rows(part) > SURGERY_BATCH):
                out += _merged(chunk) if chunk else []
                chunk, count = [], 0
            if part is not None:
                chunk.append(part)
                count += _rows(part)
        runs[name] = out
    return ModelRuns(model, runs["fit"], runs["eval"], token, device)


# ----------------------------------------------------------------------------- what the one pass gives


def head_note(model: Any) -> str:
    """Why the logit lens cannot read ``model`` (no classifier head, or a vocabulary over
    :data:`MAX_LOGIT_CLASSES` outputs), or ``""`` when it can."""
    try:
        head = models.classifier_head(model)
    except (ValueError, NotImplementedError, AttributeError) as err:
        return f"the model has no classifier head to read every layer with ({err})"
    k = getattr(head, "out_features", None) or getattr(getattr(head, "weight", None), "shape", [None])[0]
    if k is not None and k > MAX_LOGIT_CLASSES:
        return (f"its head has {k} outputs (a vocabulary): the [layers, samples, {k}] logits are not kept; "
                "the token-level logit lens of a language model is notebook t08")
    return ""


def stratified(labels: np.ndarray | None, n: int, k: int) -> np.ndarray:
    """Sorted indices of ``k`` of ``n`` samples, evenly spaced over the samples ordered by label (each class in
    proportion), or over their own order when ``labels`` is None; all when ``k >= n``."""
    ranked = np.arange(n) if labels is None else np.argsort(np.asarray(labels), kind="stable")  # by class
    return np.unique(ranked[np.linspace(0, n - 1, min(k, n)).round().astype(int)])


def streamed_similarity(hidden: np.ndarray, keep: list[int], chunk: int = 4096,
                        one_width: bool = True) -> dict[str, np.ndarray]:
    """The lenses of :data:`STREAMED` over every sample of ``hidden [E, N, d]`` for the entries ``keep``, read
    ``chunk`` samples at a time (memory independent of N): exact linear CKA and, when the layers share ``one_width``,
    centred COS."""
    cos = similarity.streamed_cosine_matrix(hidden, keep, chunk) if one_width else None
    acc = similarity.StreamingCKA()
    for s in range(0, hidden.shape[1], chunk):
        acc.update(np.asarray(hidden[keep, s:s + chunk]))
    cka = acc.result()
    out = {"cka/matrix": cka, "cka/to_last": cka[:, -1].copy(), "clusters/block_diagonal": block_structure.split_scores(cka)}
    if cos is not None:
        out.update({"cos/matrix": cos, "cos/to_last": cos[:, -1].copy()})
    return out


def constant_entries(hidden: np.ndarray) -> list[int]:
    """The entries of ``hidden [E, N, d]`` whose token is the same vector in every sample (to float64 rounding), such
    as a CLS token at the embedding output: no centred measure is defined on them."""
    out = []
    n, chunk = hidden.shape[1], 4096
    for i in range(hidden.shape[0]):  # two passes of chunks: memory independent of N (a memmap is fine)
        total, absmax = np.zeros(hidden.shape[2]), 0.0
        for s in range(0, n, chunk):
            h = np.asarray(hidden[i, s:s + chunk], dtype=np.float64)
            total += h.sum(axis=0)
            absmax = max(absmax, float(np.abs(h).max()))
        mean, ss = total / n, 0.0
        for s in range(0, n, chunk):
            ss += float(((np.asarray(hidden[i, s:s + chunk], dtype=np.float64) - mean) ** 2).sum())
        if np.sqrt(ss) <= 64 * np.finfo(float).eps * np.sqrt(n * hidden.shape[2]) * absmax:
            out.append(i)
    return out


def _count(batches: Any) -> int | None:
    """The number of samples in a list of batches, or that a DataLoader announces (``len(.dataset)``), else None."""
    if isinstance(batches, list):
        return sum(_rows(b) or 0 for b in batches)
    try:
        return len(batches.dataset)
    except (AttributeError, TypeError):
        return None


def _labels(given: Any, found: np.ndarray | None, n: int) -> np.ndarray | None:
    """The labels of the ``n`` samples: ``given`` (checked: one integer per sample) over those the batches carry."""
    if given is None:
        return None if found is None else np.asarray(found).astype(np.int64)
    y = np.asarray(given.detach().cpu() if hasattr(given, "detach") else given)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"labels has shape {y.shape}; the batches hold {n} samples: give one label per sample")
    if not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
        raise ValueError(f"labels must be integers 0..K-1 (class indices), got dtype {y.dtype}")
    return y.astype(np.int64)


def read(model: Any, batches: Any, labels: Any = None, token: Any = None, device: Any = "auto",
         logit_lens: bool | str = True, max_in_memory: int = 20000, workdir: str | os.PathLike | None = None,
         progress: bool = False) -> tuple[dict, dict, dict]:
    """One forward pass over ``batches`` (:func:`layersim.nets.models.collect`), then every layer's logits where
    ``logit_lens`` is True and :func:`head_note` finds a head (a string: why not). Returns the inputs of a
    :class:`~layersim.analysis.lenses.LayerData` (``hidden``, ``labels``, ``logits``, ``layers``, ``widths``), what
    was read (``meta``) and the :func:`streamed_similarity` results beyond ``max_in_memory`` samples. Layers of
    different widths (a CNN's stages) are zero-padded to the widest (``layersim.nets.models.zero_pad``) and keep
    their own in ``widths``."""
    n = _count(batches)
    streamed = n is not None and n > max_in_memory
    out = None
    if streamed:
        folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="layersim-report-"))
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "hidden.npy"
    t0 = time.perf_counter()
    feats = models.collect(model, batches, token=token, device=device, progress=progress, out=out, pad=True)
    seconds = time.perf_counter() - t0
    n = int(feats.hidden.shape[1])
    y = _labels(labels, feats.labels, n)  # in the batches' order
    const = constant_entries(feats.hidden)
    keep = [i for i in range(feats.hidden.shape[0]) if i not in const]
    if len(keep) < 2:
        raise ValueError(f"the token read ({token or 'the default'}) is the same in every sample at all but "
                         f"{len(keep)} layer(s); choose another token (e.g. token='mean')")
    widths = [feats.widths[i] for i in keep]
    one_width = len(set(widths)) == 1
    meta = {"n_samples": n, "n_entries": len(keep), "constant_layers_left_out": [feats.layers[i] for i in const],
            "width": widths[0] if one_width else widths, "token": token or "the model's default",
            "extract_seconds": seconds}
    streamed_results = {}
    if streamed:
        streamed_results = streamed_similarity(feats.hidden, keep, one_width=one_width)
        sub = stratified(y, n, max_in_memory)
        meta["subsample"] = {"n": len(sub), "why": f"{n} samples > max_in_memory={max_in_memory}: the similarity "
                             "lenses are streamed over all of them, the others read this evenly spaced subsample"}
        hidden = np.stack([np.asarray(feats.hidden[i, sub]) for i in keep])
        y = None if y is None else y[sub]
    else:
        hidden = feats.hidden if not const else feats.hidden[keep]
    if one_width and widths[0] < hidden.shape[2]:  # a left-out constant entry was the widest: its padding goes
        hidden = hidden[:, :, :widths[0]]
    why = (logit_lens if isinstance(logit_lens, str) else "" if logit_lens else "turned off (logit_lens=False)") \
        or head_note(model) or ("not read in a streamed report (more samples than max_in_memory)" if streamed else "") \
        or ("" if one_width else f"the layers have widths {widths}; the head reads only those of the last")
    logits = None if why else readout.layer_logits(model, feats.hidden[:, :, :widths[0]])
    if logits is not None and y is not None and y.size and y.max() >= logits.shape[2]:
        why, logits = (f"the labels go up to {int(y.max())} but the head has {logits.shape[2]} outputs: it was not "
                       "trained on these classes"), None
    if logits is not None and const:
        logits = logits[keep]
    meta["logits"] = "computed" if logits is not None else f"not available: {why}"
    data = {"hidden": hidden, "labels": y, "logits": logits, "layers": [feats.layers[i] for i in keep],
            "widths": None if one_width else widths}
    return data, meta, streamed_results
