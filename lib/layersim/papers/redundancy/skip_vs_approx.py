"""The redundancy paper's ablation (§4.3 "Ablation Analysis", Tables 2 and 7; notebook r04): a span of blocks
skipped or approximated by one linear map, judged by a linear classifier on the final representation.

:func:`span_rows` runs both operations over every span of Table 2 that one model has, on one data set, with the
classification protocol of ``layersim.papers.redundancy.rba`` (``span_model``, ``probe_accuracies``);
:func:`gain_line` is the notebook's progress line, :func:`approx_wins` the statement ``approx_beats_skip``
("approximating blocks significantly outperforms skipping them in all cases"), :func:`gain_by_pair` its mean gain
per model and data set and :func:`accuracy_record` the rows as ``metrics.json`` holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from layersim.nets import models as net_models
from layersim.papers.redundancy import models as redundancy_models, rba

__all__ = ["MODES", "RECORD_KEYS", "accuracy_record", "approx_wins", "gain_by_pair", "gain_line", "span_rows"]

#: the two operations on a span, in the order each row measures them
MODES = ("skip", "approx")
#: the entries of a row that ``metrics.json`` records
RECORD_KEYS = ("blocks", "skip", "skip_std", "skip_per_seed", "approx", "approx_std", "approx_per_seed")


def span_rows(model: Any, name: str, spec: redundancy_models.Spec, dataset: str, settings: dict[str, Any],
              scale: str, seeds: Sequence[int], seed: int = 0, device: Any = "auto") -> list[dict[str, Any]]:
    """Table 2 for one model and data set: for every span of ``rba.TABLE2_SPANS`` that ``model`` has (the
    unmodified model last), the span skipped, then approximated (``rba.span_model``: RBA fitted on
    ``settings["n_fit"]`` training inputs), and the test accuracy of one linear head per seed of ``seeds``
    (``rba.probe_accuracies``, Adam at ``settings["probe_lr"]`` for ``settings["probe_epochs"]`` epochs, the
    paper's 5) trained on ``settings["n_train"]`` training inputs (0: the whole split) and tested on
    ``settings["n_test"]`` (0: the whole split); inputs of ``redundancy_models.inputs`` in batches of
    ``settings["batch_size"]``, drawn with ``seed``.

    One row per span: ``model`` (= ``name``), ``data``, ``span`` (``rba.span_label``), ``blocks``
    (``rba.blocks_kept``), and for each mode ``m`` of :data:`MODES` its mean accuracy over the seeds (``m``),
    standard deviation (``m_std``) and per-seed accuracies (``m_per_seed``)."""
    L = net_models.n_layers(model)
    fit, train, y_train, test, y_test = rba.protocol_inputs(spec, dataset, settings, scale, seed=seed)
    rows = []
    for span in rba.spans_for(L, rba.TABLE2_SPANS):
        row = {"model": name, "data": dataset, "span": rba.span_label(span), "blocks": rba.blocks_kept(span, L)}
        for mode in MODES:
            m = rba.span_model(model, span, mode, fit, device=device)
            acc = rba.probe_accuracies(m, train, y_train, test, y_test, seeds=seeds, epochs=settings["probe_epochs"],
                                       lr=settings["probe_lr"], device=device)
            row[mode], row[f"{mode}_std"], row[f"{mode}_per_seed"] = np.mean(acc), np.std(acc), acc
        rows.append(row)
    return rows


def gain_line(rows: Sequence[dict[str, Any]]) -> str:
    """One progress line for the rows of one model and data set (:func:`span_rows`): in how many spans (the
    unmodified model left out) approximating beats skipping, and the mean gain in points."""
    done = [r for r in rows if r["span"] != "none"]
    if not done:
        raise ValueError("gain_line needs at least one row of a span (not only the unmodified model)")
    if len({(r["model"], r["data"]) for r in done}) != 1:
        raise ValueError("gain_line needs the rows of one model and data set")
    r = done[0]
    return (f"{r['model']:15s} {r['data']:14s} approx > skip in {sum(r['approx'] > r['skip'] for r in done)} of "
            f"{len(done)} spans; mean gain {100 * np.mean([r['approx'] - r['skip'] for r in done]):.1f} points")


def _spans(table: pd.DataFrame) -> pd.DataFrame:
    missing = {"model", "data", "span", "skip", "approx"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks the columns {sorted(missing)}")
    spans = table[table.span != "none"]
    if spans.empty:
        raise ValueError("the table has no row of a span (only the unmodified model)")
    return spans


def approx_wins(table: pd.DataFrame) -> tuple[float, dict[str, Any]]:
    """The statement ``approx_beats_skip`` (Tables 2, 7) over the rows of ``table`` (:func:`span_rows`, the
    unmodified model left out): the fraction of (model, data set, span) whose mean accuracy is higher
    approximated than skipped, and ``{"cases", "wins", "mean_gain_points"}`` (rows, rows won, the mean of
    approximated minus skipped accuracy in points)."""
    spans = _spans(table)
    wins = spans.approx > spans.skip
    return float(wins.mean()), {"cases": int(len(wins)), "wins": int(wins.sum()),
                                "mean_gain_points": float(100 * (spans.approx - spans.skip).mean())}


def gain_by_pair(table: pd.DataFrame) -> dict[str, float]:
    """The mean of approximated minus skipped accuracy over the spans of each ``"<model> | <data>"`` pair of
    ``table`` (the unmodified model left out), pairs sorted by model and data set."""
    spans = _spans(table)
    return {f"{m} | {d}": float(g) for (m, d), g in
            (spans.approx - spans.skip).groupby([spans.model, spans.data]).mean().items()}


def accuracy_record(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows of :func:`span_rows` as ``metrics.json`` holds them: ``{"<model> | <data> | <span>": {...}}``
    with the entries of :data:`RECORD_KEYS`."""
    return {f"{r['model']} | {r['data']} | {r['span']}": {k: r[k] for k in RECORD_KEYS} for r in rows}
