"""Block Redundancy beside the output change of approximating each block (the redundancy paper's §3, §4.2: eq. 1,
Figs. 3-5 and 7-10; notebook r02).

:func:`measure` reads one model on one data set: BR of every block on the [CLS] token (eq. 1) and the MSE of the
final representation with each block alone replaced by its RBA map (Figs. 3, 7). :func:`pca_representations` gives
what Figs. 4, 5, 8-10 project; :func:`rank_agreement`, :func:`redundant_block_fidelity` and :func:`depth_trend` the
tested numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from layersim.measures import redundancy, trends
from layersim.nets import linear_maps, surgery
from layersim.papers.redundancy import models as redundancy_models

__all__ = ["Measured", "depth_trend", "extremes", "measure", "most_redundant", "pca_representations", "rank_agreement",
           "redundancy_line", "redundant_block_fidelity"]


class Measured(NamedTuple):
    """One model on one data set: ``br`` and ``mse`` (``[L]``, entry ``k-1`` for block ``k``), the ``model``,
    ``fit``, ``held`` batches and ``labels`` (None for texts), and ``spread``, the final representation's variance
    per feature (the MSE of its mean)."""

    br: np.ndarray
    mse: np.ndarray
    model: Any
    fit: list
    held: list
    labels: np.ndarray | None
    spread: float


def measure(model: Any, tokenizer: Any, spec: redundancy_models.Spec, dataset: str, settings: Mapping[str, Any],
            scale: str, seed: int = 0, device: Any = "auto") -> Measured:
    """Eq. 1 and Figs. 3, 7 for one model and data set: RBA maps (one shared map, no intercept) fitted on
    ``settings["n_fit"]`` training inputs; BR on each block's [CLS] token and the final-representation MSE on
    ``settings["n_eval"]`` held-out inputs drawn with ``seed``. Returns a :class:`Measured`."""
    kw = dict(tokenizer=tokenizer, scale=scale, seed=seed, batch_size=settings["batch_size"],
              max_length=settings["max_length"])
    fit, _ = redundancy_models.inputs(spec, dataset, settings["n_fit"], split="train", **kw)
    held, labels = redundancy_models.inputs(spec, dataset, settings["n_eval"], split="test", **kw)
    H = redundancy_models.block_tokens(model, held, device=device)  # [L+1, N, d], index 0 = embedding output
    br = redundancy.block_redundancy(H)
    ref = linear_maps.final_representation(model, held, device=device)
    mse = np.array(list(linear_maps.block_approximation_errors(model, fit, held, device=device,
                                                               reference=ref).values()))
    return Measured(br, mse, model, fit, held, labels, redundancy.spread(ref))


def redundancy_line(name: str, dataset: str, br: np.ndarray, mse: np.ndarray) -> str:
    """One progress line: the most and the least redundant block (1-based) and the Spearman correlation over
    blocks between BR and minus the output MSE."""
    br, mse = np.asarray(br), np.asarray(mse)
    if br.shape != mse.shape or br.ndim != 1:
        raise ValueError(f"br and mse must be per-block vectors of one length, got shapes {br.shape} and {mse.shape}")
    rho = trends.spearman(br, -mse)
    return (f"{name:15s} {dataset:14s} most redundant block {np.argmax(br) + 1:2d}, "
            f"least {np.argmin(br) + 1:2d}; Spearman(BR, -MSE) = {rho:.3f}")


def pca_representations(measured: Measured, device: Any = "auto") -> tuple[int, int, np.ndarray, dict[str, np.ndarray]]:
    """Figs. 4, 5, 8-10: ``(most, least, original, approximated)``, the most and least redundant blocks (1-based),
    the original final representation, and ``{"block k approximated (most|least redundant)": representation}``."""
    most, least = int(np.argmax(measured.br)) + 1, int(np.argmin(measured.br)) + 1
    original = linear_maps.final_representation(measured.model, measured.held, device=device)
    approx = {}
    for k in (most, least):
        rba = linear_maps.fit_rba(measured.model, measured.fit, k, k, device=device)
        approx[f"block {k} approximated ({'most' if k == most else 'least'} redundant)"] = \
            linear_maps.final_representation(surgery.replace(measured.model, k, k, rba), measured.held, device=device)
    return most, least, original, approx


def rank_agreement(br: Mapping[tuple[str, str], np.ndarray],
                   mse: Mapping[tuple[str, str], np.ndarray]) -> tuple[dict[str, float], dict[str, bool]]:
    """The two statements' numbers per ``"<model> | <data>"``: ``rhos``, Spearman over blocks of BR and minus the
    MSE (``br_tracks_final_mse``); ``wins``, whether the most redundant block's MSE is below the least's."""
    missing = [k for k in br if k not in mse]
    if missing:
        raise ValueError(f"no output MSE for {missing}")
    rhos = {f"{m} | {d}": trends.spearman(br[(m, d)], -mse[(m, d)]) for (m, d) in br}
    wins = {f"{m} | {d}": bool(mse[(m, d)][np.argmax(br[(m, d)])] < mse[(m, d)][np.argmin(br[(m, d)])])
            for (m, d) in br}
    return rhos, wins


def redundant_block_fidelity(br: Mapping[tuple[str, str], np.ndarray], mse: Mapping[tuple[str, str], np.ndarray],
                             spread: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Sec. 4.2's "without significantly compromising representation fidelity" per ``"<model> | <data>"``: the
    output MSE of approximating the most redundant block over ``spread`` (0 = unchanged, 1 = as far as the mean)."""
    missing = [k for k in br if k not in mse or k not in spread]
    if missing:
        raise ValueError(f"no output MSE or spread for {missing}")
    bad = [f"{m} | {d}" for (m, d) in br if not spread[(m, d)] > 0]
    if bad:
        raise ValueError(f"the original final representation is constant (spread 0) for {bad}: no relative change")
    return {f"{m} | {d}": float(mse[(m, d)][np.argmax(br[(m, d)])] / spread[(m, d)]) for (m, d) in br}


def extremes(br: Mapping[tuple[str, str], np.ndarray], mse: Mapping[tuple[str, str], np.ndarray]
             ) -> dict[str, dict[str, float]]:
    """Per ``"<model> | <data>"``: the most and least redundant blocks (1-based), their BR and output MSEs, and
    ``ratio``, the least redundant's MSE over the most's."""
    out = {}
    for (m, d), b in br.items():
        b, e = np.asarray(b, float), np.asarray(mse[(m, d)], float)
        hi, lo = int(np.argmax(b)), int(np.argmin(b))
        out[f"{m} | {d}"] = {"most": hi + 1, "least": lo + 1, "br_most": float(b[hi]), "br_least": float(b[lo]),
                             "mse_most": float(e[hi]), "mse_least": float(e[lo]),
                             "ratio": float(e[lo] / e[hi]) if e[hi] > 0 else float("inf")}
    return out


def depth_trend(br: Mapping[tuple[str, str], np.ndarray]) -> dict[str, float]:
    """Sec. 4.2's "the BR decreases as the block depth increases" (Fig. 3) per ``"<model> | <data>"``: the Spearman
    correlation of depth and BR (negative = falls); ``ValueError`` for fewer than three blocks."""
    short = [f"{m} | {d}" for (m, d), v in br.items() if len(v) < 3]
    if short:
        raise ValueError(f"fewer than three blocks, no depth trend to read: {short}")
    return {f"{m} | {d}": trends.spearman(np.arange(1, len(v) + 1), v) for (m, d), v in br.items()}


def most_redundant(br: Mapping[tuple[str, str], np.ndarray]) -> dict[str, int]:
    """The most redundant block (1-based, highest BR) per ``"<model> | <data>"`` pair of ``br``."""
    return {f"{m} | {d}": int(np.argmax(v)) + 1 for (m, d), v in br.items()}
