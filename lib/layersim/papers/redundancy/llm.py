"""The redundancy paper's method on a pretrained language model and on the tracing paper's aligned ViT (notebook
r05; the paper leaves "different modalities (e.g., text)" to future work).

On SmolLM2-135M: :func:`texts` (Austen sentences), :func:`last_token_redundancy` (cosine matrix, BR, eq. 1, and base
scores), :func:`span_scores` (perplexity and accuracy with a span approximated or skipped, as Tables 2, 7).
:func:`vit_redundancy` reads the tracing ViTs' BR; :func:`lm_claims` and :func:`aligned_minus_standard` give the
three statements' numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from layersim.measures import redundancy, trends
from layersim.nets import linear_maps, models, readout, surgery
from layersim.analysis import lenses
from layersim.papers.redundancy import models as redundancy_models

__all__ = ["aligned_minus_standard", "last_token_redundancy", "lm_claims", "lm_line", "lm_record", "span_line",
           "span_scores", "spans", "texts", "vit_lines", "vit_redundancy"]


def texts(tokenizer: Any, settings: Mapping[str, Any], scale: str, seed: int = 0) -> tuple[list, list]:
    """``(fit, held)``: batches of ``settings["n_fit"]`` Austen sentences of the training half (RBA is fitted on
    every token) and ``settings["n_eval"]`` of the held-out half, tokenised, drawn with ``seed``."""
    kw = dict(tokenizer=tokenizer, scale=scale, seed=seed, batch_size=settings["batch_size"],
              max_length=settings["max_length"])
    fit, _ = redundancy_models.inputs(redundancy_models.LLM, "austen", settings["n_fit"], split="train", **kw)
    held, _ = redundancy_models.inputs(redundancy_models.LLM, "austen", settings["n_eval"], split="test", **kw)
    return fit, held


def last_token_redundancy(lm: Any, held: list,
                          device: Any = "auto") -> tuple[np.ndarray, np.ndarray, readout.NextToken]:
    """``(cos, br, base)`` of a causal LM on ``held``: the last token's uncentred cosine matrix ``[L, L]`` between
    blocks, its BR (eq. 1; block 1 against the embedding output) and the unmodified model's next-token scores."""
    H = models.collect(lm, held, token="last", device=device, progress=False).hidden  # [L+1, N, d]
    cos = lenses.apply("cos/matrix", lenses.LayerData(hidden=H[1:]), center=False)
    return cos, redundancy.block_redundancy(H), readout.next_token_scores(lm, held, device=device)


def lm_line(br: np.ndarray, base: readout.NextToken, top: int = 5) -> str:
    """One line on the LM: its blocks, held-out perplexity and next-token accuracy over the tokens scored, and
    the ``top`` most redundant blocks (1-based, highest BR first)."""
    return (f"{len(br)} blocks; held-out perplexity {base.perplexity:.2f}, next-token accuracy {base.accuracy:.3f} "
            f"over {base.n_tokens} tokens; most redundant blocks {[int(b) for b in np.argsort(br)[::-1][:top] + 1]}")


def spans(settings: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The ``(first, last)`` spans (1-based, inclusive) the notebook removes: every single block of
    ``settings["blocks"]``, then every span of ``settings["spans"]``."""
    return [(b, b) for b in settings["blocks"]] + [tuple(s) for s in settings["spans"]]


def span_scores(lm: Any, fit: list, held: list, first: int, last: int, br: np.ndarray,
                device: Any = "auto") -> dict[str, Any]:
    """Blocks ``first..last`` (1-based, inclusive) of ``lm`` approximated by one RBA map fitted on ``fit``, and
    skipped, each scored on ``held``. One row: ``span``, ``first``, ``last``, ``n_blocks``, ``BR`` (span mean),
    ``ppl_approx``, ``acc_approx``, ``ppl_skip``, ``acc_skip``."""
    if not 1 <= first <= last <= len(br):
        raise ValueError(f"span {first}-{last} is not a span of blocks 1..{len(br)} in order")
    rba = linear_maps.fit_rba(lm, fit, first, last, device=device)
    row = {"span": f"{first}-{last}" if last > first else str(first), "first": first, "last": last,
           "n_blocks": last - first + 1, "BR": float(br[first - 1:last].mean())}
    for mode, m in (("approx", surgery.replace(lm, first, last, rba)), ("skip", surgery.skip(lm, first, last))):
        s = readout.next_token_scores(m, held, device=device)
        row[f"ppl_{mode}"], row[f"acc_{mode}"] = s.perplexity, s.accuracy
    return row


def span_line(row: Mapping[str, Any], base: readout.NextToken) -> str:
    """One progress line for a row of :func:`span_scores`: perplexity and accuracy of the unmodified model, then
    approximated and skipped."""
    return (f"blocks {row['span']:>6s}: perplexity {base.perplexity:.2f} -> approx {row['ppl_approx']:.2f}, "
            f"skip {row['ppl_skip']:.2f}; accuracy {base.accuracy:.3f} -> {row['acc_approx']:.3f} / "
            f"{row['acc_skip']:.3f}")


def lm_record(name: str, cos: np.ndarray, br: np.ndarray, base: readout.NextToken,
              rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``llm`` block of ``metrics.json``: the model's name, its blocks, the unmodified scores, the cosine
    matrix, BR and the rows of :func:`span_scores`."""
    return {"model": name, "blocks": len(br), "base": base._asdict(), "cos_matrix": cos, "block_redundancy": br,
            "spans": list(rows)}


def lm_claims(table: pd.DataFrame, base_perplexity: float) -> tuple[float, float]:
    """``approx_beats_skip_llm`` and ``br_tracks_perplexity`` from :func:`span_scores` rows: the fraction of spans
    with lower perplexity approximated than skipped, and the Spearman correlation of single blocks' BR with minus
    their perplexity increase."""
    missing = {"n_blocks", "BR", "ppl_approx", "ppl_skip"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks the columns {sorted(missing)}")
    single = table[table.n_blocks == 1]
    return (float((table.ppl_approx < table.ppl_skip).mean()),
            trends.spearman(single.BR, -(single.ppl_approx - base_perplexity)))


def vit_redundancy(vits: Mapping[str, redundancy_models.Spec], scale: str, n_images: int, seed: int = 0,
                   device: Any = "auto") -> tuple[dict[str, np.ndarray], str]:
    """BR (eq. 1, [CLS]) of each ViT of ``vits`` (name -> spec; r05: the standard and aligned tracing ViTs of
    ``scale``, :func:`layersim.papers.redundancy.models.tracing_vits`) on ``n_images`` test images of its data set:
    ``({"ViT (standard)": [L], "ViT (aligned)": [L]}, data set)``."""
    vit_br, dataset = {}, ""
    for name, spec in vits.items():
        vit, _ = redundancy_models.load(spec, scale, seed=seed, device=device)
        batches, _ = redundancy_models.inputs(spec, spec.data[0], n_images, scale=scale, seed=seed)
        vit_br[name] = redundancy.block_redundancy(redundancy_models.block_tokens(vit, batches, device=device))
        dataset = spec.data[0]
    return vit_br, dataset


def vit_lines(vit_br: Mapping[str, np.ndarray]) -> str:
    """BR per block of each ViT, to three decimals, one line each."""
    return "\n".join(f"{name:15s} BR per block: {np.round(br, 3).tolist()}" for name, br in vit_br.items())


def aligned_minus_standard(vit_br: Mapping[str, np.ndarray]) -> tuple[float, int]:
    """``aligned_vit_blocks_more_redundant``'s number: the aligned ViT's mean BR minus the standard one's, and the
    blocks where the aligned BR is higher."""
    missing = {"ViT (aligned)", "ViT (standard)"} - set(vit_br)
    if missing:
        raise ValueError(f"no Block Redundancy of {sorted(missing)}")
    aligned, standard = vit_br["ViT (aligned)"], vit_br["ViT (standard)"]
    return float(np.mean(aligned) - np.mean(standard)), int(np.sum(aligned > standard))
