"""The clusters paper's protocol (notebooks c01-c03): fine-tuned encoders, their CKA maps,
truncated and layer-skipped models.

Phang, Liu & Bowman (Phang et al., BlackboxNLP 2021, https://aclanthology.org/2021.blackboxnlp-1.42): fine-tune a pretrained encoder on a task (two
random restarts), read the CLS token of every layer on the validation set and compare layers by
linear CKA (ORIG-ORIG, FT-ORIG, FT-FT, FT[1]-FT[2]; §3); feed an intermediate layer to the task
head with and without re-training it (UNTUNED, TUNED, TUNEDORIG; §4); skip every contiguous span
of layers (§4.1).

Scales (models, tasks and fine-tuning budget in ``layersim.notebook.presets.CLUSTERS_FINETUNE``): the default
scale fine-tunes pretrained MiniLM-L6 (a 6-layer BERT, offline) on the two Austen tasks of
``layersim.inputs.text_tasks``; the paper scale RoBERTa-base, ALBERT-large-v2 and ELECTRA-base on the paper's
tasks (Hugging Face). The fine-tuning itself, the task splits, the CLS features and the layer-wise task
score are ``layersim.train.finetune``'s (``fine_tuned``, ``task_data``, ``cls_features``, ``layer_scores``),
shared with the tracing paper's aligned BERT: every notebook that asks for the same settings shares
the checkpoints.

Layer convention: ``layersim.nets.models`` (entry 0 = the embedding output, ``i`` = block ``i``'s
output; BERT-like encoders have no final norm, so entry ``L`` is what the head reads).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from torch import nn

from layersim.inputs import text_tasks
from layersim.measures import similarity
from layersim.nets import models, readout, surgery
from layersim.train import finetune, heads

__all__ = ["cka_maps", "diagonal", "fine_tune_note", "original", "single_skip_drops", "skip_grid", "truncation_curves",
           "truncation_gaps", "truncation_table", "tuned_head_curve"]

#: the three truncation curves of Fig. 3, in the order the paper lists them (§4 (a)-(c))
TRUNCATIONS = ("UNTUNED", "TUNED", "TUNEDORIG")

def original(model: str, num_labels: int, seed: int = 0) -> nn.Module:
    """The pretrained encoder (ORIG) with a fresh ``num_labels`` head (seeded), in eval mode."""
    return finetune.load_classifier(model, num_labels, seed=seed).eval()


def cka_maps(ft1: np.ndarray, ft2: np.ndarray | None, orig: np.ndarray) -> dict[str, np.ndarray]:
    """The paper's four comparisons (Fig. 1) from CLS features ``[L+1, N, d]`` of the same examples,
    over the blocks ``1..L`` (row/column ``l-1`` = block ``l``): ``"ORIG-ORIG"``, ``"FT-ORIG"`` (rows:
    fine-tuned blocks, columns: pretrained blocks), ``"FT-FT"`` and, when ``ft2`` (a second restart)
    is given, ``"FT[1]-FT[2]"`` (rows: restart 1). Entry 0, the embedding output, is left out: at
    the CLS position it is the same vector for every input (token, position and segment embedding
    of [CLS]), so its CKA is undefined; the paper's figures also start at layer 1."""
    ft1, orig = ft1[1:], orig[1:]
    maps = {"ORIG-ORIG": similarity.layer_matrix(orig), "FT-ORIG": similarity.cross_matrix(ft1, orig),
            "FT-FT": similarity.layer_matrix(ft1)}
    if ft2 is not None:
        maps["FT[1]-FT[2]"] = similarity.cross_matrix(ft1, ft2[1:])
    return maps


def diagonal(M: np.ndarray) -> np.ndarray:
    """The diagonal of a cross-model map: layer ``l`` of one model vs layer ``l`` of the other."""
    return np.diag(np.asarray(M)).copy()


def tuned_head_curve(model: nn.Module, train_features: np.ndarray, train: text_tasks.TextTask,
                     val_features: np.ndarray, val: text_tasks.TextTask, epochs: int, lr: float,
                     batch_size: int = 32, seed: int = 0) -> np.ndarray:
    """TUNED / TUNEDORIG (§4 (b), (c)): for every layer, a copy of ``model``'s task head (for BERT:
    pooler dense + tanh + classifier) re-trained on that layer's training CLS features
    (``layersim.train.heads.train_head``: Adam, ``epochs``, ``lr``; the features centred and divided by
    one global scale first, which the head's first linear layer could absorb: the CLS token of
    early blocks varies by 1e-3 around a vector of norm 10, and a head trained on it raw stayed at
    chance), scored on the validation features. Pass the fine-tuned model's features for TUNED, the
    pretrained encoder's for TUNEDORIG (the head starts as the fine-tuned model's either way, so
    only the features differ)."""
    head = models.classifier_head(model)
    out = []
    for l in range(len(train_features)):
        trained = heads.train_head(copy.deepcopy(head), train_features[l], train.labels, epochs=epochs, lr=lr,
                                   batch_size=batch_size, seed=seed,
                                   loss="mse" if train.num_labels == 1 else "ce", standardize=True,
                                   choices=train.num_labels if train.multiple_choice else None)
        z = readout.layer_logits(model, val_features[l:l + 1], layers=[l], head=trained)[0]
        out.append(text_tasks.score(val, text_tasks.predictions(val, z)))
    return np.array(out)


def truncation_curves(model: nn.Module, orig: nn.Module, head_train: text_tasks.TextTask, val: text_tasks.TextTask,
                      settings: Mapping[str, Any], seed: int = 0, device: Any = "auto") -> dict[str, Any]:
    """Fig. 3 (§4) for one fine-tuned ``model`` and its pretrained encoder ``orig`` (:func:`original`): the
    validation score with the encoder truncated after every layer (entry ``l`` = block ``l``, 0 = the
    embedding output), as ``{"UNTUNED", "TUNED", "TUNEDORIG": array [L+1], "full": float, "majority": float}``.

    UNTUNED: the fine-tuned head on the fine-tuned layer (``layersim.train.finetune.layer_scores``); TUNED and
    TUNEDORIG: :func:`tuned_head_curve` on the fine-tuned / pretrained encoder's CLS features of ``head_train``
    (``settings["head_epochs"]`` epochs at ``settings["head_lr"]``, seeded with ``seed``); ``full``: UNTUNED on
    the last layer (what the model itself predicts); ``majority``: the majority-class baseline of ``val``."""
    H_val, H_tr = finetune.cls_features(model, val, settings, device), finetune.cls_features(model, head_train,
                                                                                              settings, device)
    O_val, O_tr = finetune.cls_features(orig, val, settings, device), finetune.cls_features(orig, head_train,
                                                                                             settings, device)
    kw = dict(epochs=settings["head_epochs"], lr=settings["head_lr"], seed=seed)
    c: dict[str, Any] = {"UNTUNED": finetune.layer_scores(model, H_val, val),
                         "TUNED": tuned_head_curve(model, H_tr, head_train, H_val, val, **kw),
                         "TUNEDORIG": tuned_head_curve(model, O_tr, head_train, O_val, val, **kw)}
    c["full"], c["majority"] = float(c["UNTUNED"][-1]), text_tasks.majority_baseline(val)
    return c


def fine_tune_note(meta: Mapping[str, Any]) -> str:
    """Where a fine-tuned model came from, for a progress line: ``"from the cache"`` or ``"fine-tuned in N s"``
    (``meta``: what ``layersim.train.finetune.fine_tuned`` returns beside the model)."""
    return "from the cache" if meta["from_cache"] else f"fine-tuned in {meta['train_seconds']:.0f} s"


def truncation_table(curves: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Fig. 3's numbers as a table: one row per layer, one column per (curve, run) of ``curves``
    (``{"<model>/<task>": truncation_curves(...)}``)."""
    if not curves:
        raise ValueError("truncation_table needs at least one run's curves")
    return pd.DataFrame({(name, key): np.asarray(c[name], dtype=float)
                         for name in TRUNCATIONS for key, c in curves.items()}).rename_axis("layer")


def truncation_gaps(curves: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """The two numbers of §4's statements per run of ``curves`` (``{key: truncation_curves(...)}``):
    ``discard[key]`` = the best of UNTUNED and TUNED with the last block removed (entry ``L-1``) minus the
    full model (``top_layers_discardable``); ``orig_gap[key]`` = the mean over the blocks ``1..L`` of TUNED
    minus TUNEDORIG (``tunedorig_below_tuned``)."""
    discard, orig_gap = {}, {}
    for key, c in curves.items():
        if len(c["UNTUNED"]) < 2:
            raise ValueError(f"the curves of {key!r} have {len(c['UNTUNED'])} entries: truncation needs a block")
        discard[key] = float(max(c["UNTUNED"][-2], c["TUNED"][-2]) - c["full"])
        orig_gap[key] = float(np.mean(c["TUNED"][1:] - c["TUNEDORIG"][1:]))
    return discard, orig_gap


def skip_grid(model: nn.Module, task: text_tasks.TextTask, settings: Mapping[str, Any], device: Any = "auto",
              progress: bool = True) -> np.ndarray:
    """Fig. 4: ``G[i-1, j-1]`` = the task score with blocks ``i..j`` (1-based, inclusive) skipped
    (``layersim.nets.surgery.skip``, no re-training); NaN below the diagonal (``j < i``: no span)."""
    from tqdm.auto import tqdm

    L = len(surgery.adapters.get(model).blocks(model))
    batches = text_tasks.encode(task, model.layersim_tokenizer, settings.get("eval_batch_size", 64),
                                settings["max_length"])
    G = np.full((L, L), np.nan)
    spans = [(i, j) for i in range(1, L + 1) for j in range(i, L + 1)]
    for i, j in tqdm(spans, desc="skip spans", disable=not progress, leave=False):
        with surgery.skip(model, i, j) as m:
            z = finetune.predict(m, batches, device)
        G[i - 1, j - 1] = text_tasks.score(task, text_tasks.predictions(task, z))
    return G


def single_skip_drops(grids: Mapping[str, np.ndarray],
                      base: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """The two numbers of §4.1's statements per run of ``grids`` (``{key: skip_grid(...)}``, with the full
    model's score in ``base[key]["full"]``), from the drops of single-block skips (full score minus the
    diagonal of the grid): ``first_margin[key]`` = the drop skipping block 1 minus the largest drop of another
    single block (``first_layer_critical``); ``late_drop[key]`` = the mean drop over the blocks of the upper
    half, ``L//2 + 1 .. L`` (``single_late_skips_cheap``)."""
    first_margin, late_drop = {}, {}
    for key, G in grids.items():
        if key not in base:
            raise ValueError(f"no full-model score for the grid {key!r}")
        L = len(G)
        if L < 2:
            raise ValueError(f"the grid of {key!r} has {L} block(s): comparing single skips needs 2")
        drops = base[key]["full"] - np.diag(G)
        first_margin[key] = float(drops[0] - drops[1:].max())
        late_drop[key] = float(drops[L // 2:].mean())
    return first_margin, late_drop
