"""The redundancy paper's classification protocol (§4.3, Tables 1, 2, 5-7): approximate or skip a span of blocks,
then train a linear classifier on the frozen model's final representation.

:func:`span_model` approximates (RBA, one map fitted on every token) or skips the paper's span ``i j``;
:func:`probe_accuracies` trains one linear head per seed (Adam, 5 epochs, batch 256); :func:`parameter_table` counts
parameters beside :data:`PAPER_PARAMS_M`; :func:`span_accuracies` runs the protocol and :func:`single_block_drop`
gives the statement (see docs/modules.md, `layersim.papers.redundancy.rba`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from layersim.inputs import fetch
from layersim.measures import probe, redundancy
from layersim.nets import linear_maps, models as net_models, params, surgery
from layersim.notebook import rehearsal
from layersim.papers.redundancy import models as redundancy_models
from layersim.train import heads

__all__ = ["PAPER_PARAMS_M", "PARAM_MODELS", "SINGLE_BLOCK_SPANS", "TABLE1_SPANS", "TABLE2_SPANS", "accuracy_line",
           "accuracy_record", "blocks_kept", "parameter_comparison", "parameter_table", "probe_accuracies",
           "protocol_inputs", "single_block_drop", "span_accuracies", "span_label", "span_model", "spans_for",
           "unmodified_accuracy"]

#: Table 1's (and Tables 5, 6's) spans, as printed (``None`` = the unmodified model)
TABLE1_SPANS: list[tuple[int, int] | None] = [(1, 5), (2, 5), (7, 10), (1, 3), (3, 5), (2, 4), (8, 10), (9, 11),
                                              (2, 3), (3, 4), (4, 5), (9, 10), None]
#: Table 2's (and Table 7's): the multi-block spans of Table 1 and every single block after the first
TABLE2_SPANS: list[tuple[int, int] | None] = TABLE1_SPANS[:8] + [(i, i + 1) for i in range(11)] + [None]
#: the single-block spans of Table 1 (``rba_keeps_accuracy`` averages over these)
SINGLE_BLOCK_SPANS = [(2, 3), (3, 4), (4, 5), (9, 10)]

#: "Num. Params" of Table 1 (millions), per encoder and span; the paper prints one count per number
#: of blocks kept, so spans that keep as many blocks share it
_KEPT_M = {"vit_small": {8: 15.31, 9: 16.94, 10: 18.56, 11: 20.19, 12: 21.82},
           "dino_small": {8: 15.55, 9: 17.18, 10: 18.80, 11: 20.43, 12: 22.06},
           "deit_small": {8: 15.31, 9: 16.94, 10: 18.56, 11: 20.19, 12: 21.82}}


def span_label(span: tuple[int, int] | None) -> str:
    """``"i-j"`` for a paper span, ``"none"`` for the unmodified model."""
    return "none" if span is None else f"{span[0]}-{span[1]}"


def blocks_kept(span: tuple[int, int] | None, L: int = 12) -> int:
    """Blocks an ``L``-block encoder keeps with the paper's ``span`` removed (``L`` for None)."""
    if span is None:
        return L
    first, last = redundancy.paper_span(*span)
    return L - (last - first + 1)


def spans_for(L: int, spans: Sequence[tuple[int, int] | None] = TABLE1_SPANS,
              scale: str | None = None) -> list[tuple[int, int] | None]:
    """The spans of ``spans`` that an ``L``-block model has (all of them for the paper's 12 blocks;
    fewer for the smoke scale's small models); in a rehearsal of the paper scale (``scale="paper"``) only those of
    :data:`layersim.notebook.rehearsal.REDUNDANCY_SPANS`."""
    keep = [s for s in spans if s is None or redundancy.paper_span(*s)[1] <= L]
    if scale == "paper" and rehearsal.active():
        keep = [s for s in keep if s in rehearsal.REDUNDANCY_SPANS]
    return keep


PAPER_PARAMS_M: dict[str, dict[str, float]] = {
    model: {span_label(s): kept[blocks_kept(s)] for s in TABLE1_SPANS} for model, kept in _KEPT_M.items()}


def span_model(model: Any, span: tuple[int, int] | None, mode: str, fit_batches: Any = None,
               device: Any = "auto") -> Any:
    """``model`` with the paper's ``span`` approximated (``mode="approx"``: RBA fitted on ``fit_batches``) or
    skipped (``"skip"``), or itself for ``span=None``; a :mod:`layersim.nets.surgery` model, nothing copied."""
    if mode not in ("approx", "skip"):
        raise ValueError(f"mode must be 'approx' or 'skip', got {mode!r}")
    if span is None:
        return model
    first, last = redundancy.paper_span(*span)
    if mode == "skip":
        return surgery.skip(model, first, last)
    if fit_batches is None:
        raise ValueError("approximating a span needs fit_batches to fit the map on")
    return surgery.replace(model, first, last, linear_maps.fit_rba(model, fit_batches, first, last, device=device))


def probe_accuracies(model: Any, train_batches: Any, train_labels: Any, test_batches: Any, test_labels: Any,
                     seeds: Sequence[int] = (0, 1, 2), epochs: int = 5, lr: float = 0.01, batch_size: int = 256,
                     device: Any = "auto") -> list[float]:
    """Test accuracy of one linear head per seed on ``model``'s final representation (features computed once; Adam,
    5 epochs, batch 256, as the paper)."""
    train = linear_maps.final_representation(model, train_batches, device=device)
    test = linear_maps.final_representation(model, test_batches, device=device)
    y_train, y_test = np.asarray(train_labels), np.asarray(test_labels)
    K = int(max(y_train.max(), y_test.max())) + 1
    return [probe.probe_accuracy(heads.train_linear_head(train, y_train, epochs, lr, batch_size, seed=int(s),
                                                         num_classes=K), test, y_test)
            for s in seeds]


#: the paper's encoders by the names of ``params_M`` -> registry asset
PARAM_MODELS = {"vit_small": "vit-small-patch16-224", "dino_small": "dinov2-small",
                "deit_small": "deit-small-patch16-224-hf", "vit_base": "vit-base-patch16-224"}


def parameter_table(spans: Sequence[tuple[int, int] | None] = TABLE1_SPANS,
                    models: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
    """Parameters (millions) of each encoder (base model with pooler, random weights from its configuration) with
    each span replaced by one ``d x d`` map: ``{model: {"none": M, "i-j": M}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, asset in (models or PARAM_MODELS).items():
        model, _ = fetch.load_model(asset, random_init=True)
        d = model.config.hidden_size
        row = {}
        for span in spans:
            if span is None:
                row["none"] = params.count_module(model) / 1e6
            else:
                first, last = redundancy.paper_span(*span)
                rba = linear_maps.LinearMap(np.zeros((d, d)))
                row[span_label(span)] = surgery.replace(model, first, last, rba).n_parameters() / 1e6
        out[key] = row
        del model
    return out


def protocol_inputs(spec: redundancy_models.Spec, dataset: str, settings: dict[str, Any], scale: str,
                    seed: int = 0) -> tuple:
    """§4.3's inputs ``(fit, train, y_train, test, y_test)``: ``settings["n_fit"]`` for RBA, ``settings["n_train"]``
    for the heads and ``settings["n_test"]`` to test (0: whole split), drawn with ``seed``."""
    kw = dict(scale=scale, seed=seed, batch_size=settings["batch_size"])
    fit, _ = redundancy_models.inputs(spec, dataset, settings["n_fit"], split="train", **kw)
    train, y_train = redundancy_models.inputs(spec, dataset, settings["n_train"] or None, split="train", **kw)
    test, y_test = redundancy_models.inputs(spec, dataset, settings["n_test"] or None, split="test", **kw)
    return fit, train, y_train, test, y_test


def span_accuracies(model: Any, name: str, spec: redundancy_models.Spec, dataset: str, settings: dict[str, Any],
                    scale: str, seeds: Sequence[int], seed: int = 0, device: Any = "auto") -> list[dict[str, Any]]:
    """Tables 1, 5, 6 for one model and data set: for every span of :func:`spans_for` (the unmodified model last),
    the test accuracy of one linear head per seed of ``seeds`` on the approximated model (:func:`protocol_inputs`).

    One row per span: ``model``, ``data``, ``span`` (:func:`span_label`), ``blocks`` (:func:`blocks_kept`),
    ``accuracy``, ``std`` and ``per_seed``.
    """
    L = net_models.n_layers(model)
    fit, train, y_train, test, y_test = protocol_inputs(spec, dataset, settings, scale, seed=seed)
    rows = []
    for span in spans_for(L, scale=scale):
        approx = span_model(model, span, "approx", fit, device=device)
        acc = probe_accuracies(approx, train, y_train, test, y_test, seeds=seeds, lr=settings["probe_lr"],
                               device=device)
        rows.append({"model": name, "data": dataset, "span": span_label(span), "blocks": blocks_kept(span, L),
                     "accuracy": np.mean(acc), "std": np.std(acc), "per_seed": acc})
    return rows


def accuracy_line(rows: Sequence[dict[str, Any]]) -> str:
    """One progress line for the rows of one model and data set (:func:`span_accuracies`, the unmodified
    model last): the unmodified model's accuracy, then every span's."""
    if not rows or rows[-1]["span"] != "none":
        raise ValueError("accuracy_line needs one model and data set's rows, the unmodified model ('none') last")
    r = rows[-1]
    return (f"{r['model']:15s} {r['data']:14s} none {r['accuracy']:.3f}; spans "
            + " ".join(f"{s['span']}:{s['accuracy']:.3f}" for s in rows[:-1]))


def accuracy_record(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows of :func:`span_accuracies` as ``metrics.json`` holds them: ``{"<model> | <data> | <span>":
    {"mean", "std", "per_seed", "blocks"}}``."""
    return {f"{r['model']} | {r['data']} | {r['span']}": {"mean": r["accuracy"], "std": r["std"],
                                                          "per_seed": r["per_seed"], "blocks": r["blocks"]}
            for r in rows}


def unmodified_accuracy(table: pd.DataFrame) -> pd.Series:
    """The unmodified model's accuracy (span ``"none"``) per (model, data set) of a table of
    :func:`span_accuracies` rows."""
    return table[table.span == "none"].set_index(["model", "data"]).accuracy


def single_block_drop(table: pd.DataFrame,
                      spans: Sequence[tuple[int, int]] = tuple(SINGLE_BLOCK_SPANS)) -> tuple[float, dict[str, float]]:
    """``rba_keeps_accuracy`` (§4.3): the unmodified accuracy minus the approximated, in points, over ``table``'s
    rows whose span is one of ``spans``; returns the mean and the mean per ``"<model> | <data>"``."""
    base = unmodified_accuracy(table)
    single = table[table.span.isin([span_label(s) for s in spans])]
    if single.empty:
        raise ValueError(f"the table has no row of the spans {[span_label(s) for s in spans]}")
    single = single.set_index(["model", "data"])
    drops = 100 * (single.accuracy - base.reindex(single.index).values)
    per_pair = {f"{m} | {d}": -float(v) for (m, d), v in drops.groupby(level=[0, 1]).mean().items()}
    return -float(drops.mean()), per_pair


def parameter_comparison(params_M: dict[str, dict[str, float]],
                         paper: dict[str, dict[str, float]] = PAPER_PARAMS_M) -> pd.DataFrame:
    """:func:`parameter_table`'s counts (millions, two decimals; one column per encoder, one row per span)
    beside the counts the paper prints (a column ``"<encoder> (paper)"`` each)."""
    compare = pd.DataFrame({m: params_M[m] for m in params_M}).round(2)
    for m, counts in paper.items():
        compare[f"{m} (paper)"] = pd.Series(counts)
    return compare
