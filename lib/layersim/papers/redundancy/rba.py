"""The redundancy paper's classification protocol (§4.3, Tables 1, 2, 5-7): approximate or skip a
span of blocks, then train a linear classifier on the frozen model's final representation.

For one span ``i j`` of the paper's tables (block outputs numbered from 0: the map takes output
``i`` to output ``j``, removing the blocks in between, ``redundancy.paper_span``), :func:`span_model`
gives the model with the span approximated (RBA: ``linear_maps.fit_rba`` on the fitting inputs,
every token, one map, then ``surgery.replace``) or skipped (``surgery.skip``), or the model itself
for ``None``. :func:`probe_accuracies` reads its final representation (the [CLS] token after the
final norm) on training and test inputs and trains one linear head per seed
(``heads.train_linear_head``: Adam, 5 epochs, batch 256, as the paper). :func:`parameter_table`
counts the parameters of the paper's encoders with each span approximated, from their
configurations (random-init weights, no download) beside the counts the paper prints
(:data:`PAPER_PARAMS_M`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from layersim.inputs import assets
from layersim.measures import probe, redundancy
from layersim.nets import linear_maps, params, surgery
from layersim.train import heads

__all__ = ["PAPER_PARAMS_M", "PARAM_MODELS", "SINGLE_BLOCK_SPANS", "TABLE1_SPANS", "TABLE2_SPANS", "blocks_kept",
           "parameter_table", "probe_accuracies", "span_label", "span_model", "spans_for"]

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


def spans_for(L: int, spans: Sequence[tuple[int, int] | None] = TABLE1_SPANS) -> list[tuple[int, int] | None]:
    """The spans of ``spans`` that an ``L``-block model has (all of them for the paper's 12 blocks;
    fewer for the smoke scale's small models)."""
    return [s for s in spans if s is None or redundancy.paper_span(*s)[1] <= L]


PAPER_PARAMS_M: dict[str, dict[str, float]] = {
    model: {span_label(s): kept[blocks_kept(s)] for s in TABLE1_SPANS} for model, kept in _KEPT_M.items()}


def span_model(model: Any, span: tuple[int, int] | None, mode: str, fit_batches: Any = None,
               device: Any = "auto") -> Any:
    """``model`` with the paper's ``span`` approximated (``mode="approx"``: RBA fitted on
    ``fit_batches``) or skipped (``"skip"``); the model itself for ``span=None``. The result is a
    ``layersim.nets.surgery`` model (nothing is copied; the model is unchanged outside calls)."""
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
    """Test accuracy of one linear head per seed trained on ``model``'s final representation
    (``linear_maps.final_representation``) of the training inputs (the paper: Adam, 5 epochs,
    batch 256, three seeds); the features are computed once for all seeds."""
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
    """Parameters (millions) of each encoder (Hugging Face base model with its pooler, no
    classifier, built from its configuration with random weights) with each span replaced by one
    ``d x d`` RBA map (``surgery.replace(...).n_parameters()``): ``{model: {"none": M, "i-j": M}}``."""
    out: dict[str, dict[str, float]] = {}
    for key, asset in (models or PARAM_MODELS).items():
        model, _ = assets.load_model(asset, random_init=True)
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
