"""The redundancy paper's ablation (§4.3 "Ablation Analysis", Tables 2 and 7; notebook r04): a span of blocks
skipped or approximated by one linear map, judged by a linear classifier on the final representation, with
:mod:`~layersim.papers.redundancy.rba`'s protocol. :func:`span_rows` runs it; :func:`approx_wins` tests
``approx_beats_skip``; :func:`gain_line`, :func:`gain_by_pair` and :func:`accuracy_record` report."""

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
    """Table 2 for one model and data set: for every span of ``rba.TABLE2_SPANS`` it has (unmodified last), skipped
    then approximated, the test accuracy of one linear head per seed of ``seeds`` (``settings["probe_epochs"]``
    epochs).

    One row per span: ``model``, ``data``, ``span``, ``blocks`` and, per mode ``m`` of :data:`MODES`, ``m``,
    ``m_std`` and ``m_per_seed``.
    """
    L = net_models.n_layers(model)
    fit, train, y_train, test, y_test = rba.protocol_inputs(spec, dataset, settings, scale, seed=seed)
    rows = []
    for span in rba.spans_for(L, rba.TABLE2_SPANS, scale=scale):
        row = {"model": name, "data": dataset, "span": rba.span_label(span), "blocks": rba.blocks_kept(span, L)}
        for mode in MODES:
            m = rba.span_model(model, span, mode, fit, device=device)
            acc = rba.probe_accuracies(m, train, y_train, test, y_test, seeds=seeds, epochs=settings["probe_epochs"],
                                       lr=settings["probe_lr"], device=device)
            row[mode], row[f"{mode}_std"], row[f"{mode}_per_seed"] = np.mean(acc), np.std(acc), acc
        rows.append(row)
    return rows


def gain_line(rows: Sequence[dict[str, Any]]) -> str:
    """One progress line for one model and data set: spans where approximating beats skipping, and the mean gain in
    points."""
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
    """``approx_beats_skip`` (Tables 2, 7) over ``table``'s spans: the fraction higher approximated than skipped,
    and ``{"cases", "wins", "mean_gain_points"}``."""
    spans = _spans(table)
    wins = spans.approx > spans.skip
    return float(wins.mean()), {"cases": int(len(wins)), "wins": int(wins.sum()),
                                "mean_gain_points": float(100 * (spans.approx - spans.skip).mean())}


def gain_by_pair(table: pd.DataFrame) -> dict[str, float]:
    """Mean approximated-minus-skipped accuracy per ``"<model> | <data>"`` pair, sorted."""
    spans = _spans(table)
    return {f"{m} | {d}": float(g) for (m, d), g in
            (spans.approx - spans.skip).groupby([spans.model, spans.data]).mean().items()}


def accuracy_record(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows of :func:`span_rows` as ``metrics.json`` holds them: ``{"<model> | <data> | <span>": {...}}``
    with the entries of :data:`RECORD_KEYS`."""
    return {f"{r['model']} | {r['data']} | {r['span']}": {k: r[k] for k in RECORD_KEYS} for r in rows}
