"""The tracing paper's saturation analysis on language models (App. C.1, Figs. 19-20; notebook t08).

The paper reads LLaMA-3.2-3B and LLaMA-3.1-8B through the logit lens while they decode a prompt greedily and counts
each token's saturation layer (§2.2); offline, the LLaMA-architecture model is SmolLM2-135M (:data:`MODELS`).
:func:`decode` is Fig. 20's reading of one model (:func:`lens_table_figure` draws it); :func:`read_texts` reads a
text set (Fig. 19, :func:`saturation_histogram`); :func:`easy_vs_hard`, :func:`stays_correct` and :func:`statistics`
give the tested numbers, :func:`records` the ``metrics.json`` entries; :data:`RULES` checks t08's settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layersim.core import memo
from layersim.inputs import fetch, text_data
from layersim.nets import models, readout
from layersim.notebook import plotting, settings

__all__ = ["MODELS", "PROMPT", "RULES", "decode", "describe_decoding", "describe_texts", "easy_vs_hard",
           "lens_table_figure", "load", "read_texts", "records", "saturation_histogram", "statistics", "stays_correct",
           "words"]

PROMPT = "Simply put, the theory of relativity states"

#: scale -> the causal LMs read (``layersim.inputs.assets`` names)
MODELS: dict[str, tuple[str, ...]] = {
    "smoke": ("smollm2-135m",),
    "default": ("smollm2-135m",),
    "paper": ("llama-3.2-3b", "llama-3.1-8b"),
}

#: the rules of t08's settings (``layersim.notebook.settings``): the models, the prompt and its greedy steps, and the
#: held-out texts (how many, their tokens, the batch)
RULES = {"models": settings.seq(settings.text(), distinct=True), "prompt": settings.text(),
         "steps": settings.integer(1), "n_texts": settings.integer(2), "max_length": settings.integer(2),
         "batch_size": settings.integer(1)}


def load(name: str, device: Any = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a registered causal LM in eval mode on ``device``, the tokenizer
    padding on the right (with EOS when it has no pad token)."""
    model, tok = fetch.load_model(name, device=models.resolve_device(device))
    if tok is None:
        raise ValueError(f"{name!r} came without a tokenizer; the lens table needs one")
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def easy_vs_hard(saturation: np.ndarray, confidence: np.ndarray) -> dict[str, float]:
    """Mean saturation layer of the *easy* tokens (top-1 probability at or above the median), of the *hard* ones,
    and ``hard - easy``."""
    sat, conf = np.asarray(saturation, float), np.asarray(confidence, float)
    if sat.shape != conf.shape or sat.size < 2:
        raise ValueError(f"need one saturation layer per confidence, at least two; got {sat.shape}, {conf.shape}")
    easy = conf >= np.median(conf)
    if easy.all():
        raise ValueError("every token has the same confidence: no easy/hard split")
    e, h = float(sat[easy].mean()), float(sat[~easy].mean())
    return {"easy": e, "hard": h, "difference": h - e, "median_confidence": float(np.median(conf))}


def stays_correct(top: np.ndarray, target: np.ndarray) -> dict[str, Any]:
    """The paper's reading of Theorem 2 (§2.2), "correctly predicted at the ℓ-th layer ... in subsequent layers", on
    a text set read by the logit lens.

    ``top [L+1, N]``: each layer's top-1; ``target [N]``: the next token (-1: none). Returns ``fraction`` (pooled
    cases right at ``l`` and at ``l+1..L``), ``cases``, ``per_layer`` ``[L]`` and ``unconditional`` (see
    docs/modules.md, `layersim.papers.tracing.llm`).
    """
    top, target = np.asarray(top), np.asarray(target)
    if top.ndim != 2 or target.shape != (top.shape[1],) or top.shape[0] < 2:
        raise ValueError(f"need top [L+1, N] with L >= 1 and target [N], got {top.shape} and {target.shape}")
    keep = target >= 0
    if not keep.any():
        raise ValueError("no position has a next token to be predicted")
    correct = top[:, keep] == target[keep][None, :]  # [L+1, M]
    right_from = np.flip(np.cumprod(np.flip(correct, 0), 0), 0).astype(bool)  # right at every layer l..L
    case, stay = correct[:-1], right_from[:-1]  # layers 0..L-1
    cases = int(case.sum())
    if cases == 0:
        raise ValueError("no position is predicted correctly at any layer below the last: nothing to test")
    with np.errstate(invalid="ignore", divide="ignore"):
        per_layer = stay.sum(1) / case.sum(1)
    return {"fraction": float(stay.sum() / cases), "cases": cases, "per_layer": per_layer,
            "unconditional": float(stay.mean())}


def words(tokenizer: Any, ids: np.ndarray) -> np.ndarray:
    """Token ids (any shape) decoded one by one, whitespace shown as ``·`` and newlines as ``⏎``."""
    ids = np.asarray(ids)
    flat = [tokenizer.decode([int(i)]).replace("\n", "⏎").replace(" ", "·") for i in ids.ravel()]
    return np.array(flat, dtype=object).reshape(ids.shape)


def decode(model: Any, tokenizer: Any, prompt: str, steps: int, device: Any = "auto") -> dict:
    """Fig. 20 on one causal LM: ``prompt`` decoded greedily for ``steps`` tokens through the logit lens, computed
    once per model, prompt and steps (the seeds' runs share it: :func:`layersim.core.memo.remember`). Returns
    ``model``, ``tokenizer``, ``L``, ``greedy`` (a :class:`~layersim.nets.readout.GreedyLens`) and ``saturation``
    (``[steps]``)."""
    parts = {"model": models.fingerprint(model), "prompt": prompt, "steps": steps,
             "prompt_ids": tokenizer(prompt, return_tensors="pt")["input_ids"].tolist(),
             "device": models.resolve_device(device).type,
             "code": [memo.source_of(readout), memo.source_of(models)]}
    g = readout.GreedyLens(**memo.remember("greedy-lens", parts, lambda: readout.greedy_lens(
        model, tokenizer, prompt, steps, device=device)._asdict()))
    return {"model": model, "tokenizer": tokenizer, "L": g.top.shape[0] - 1, "greedy": g,
            "saturation": readout.saturation_layer(g.top)}


def describe_decoding(name: str, prompt: str, run: dict) -> str:
    """Two lines on a :func:`decode` run: blocks, prompt and continuation; each token's saturation layer and the
    lens's largest relative difference from the model's logits."""
    g = run["greedy"]
    return (f"{name}: {run['L']} blocks; {prompt!r} -> {run['tokenizer'].decode(g.tokens.tolist())!r}\n"
            f"  saturation layer of each generated token: {run['saturation'].tolist()}; lens vs model logits, "
            f"max relative difference {g.max_error:.1e}")


def lens_table_figure(name: str, run: dict):
    """Fig. 20 of a :func:`decode` run: every layer's top-1 token per step, coloured by probability, a black dash
    under each step's saturation layer. Returns the figure."""
    import matplotlib.pyplot as plt

    g, tok, L, sat = run["greedy"], run["tokenizer"], run["L"], run["saturation"]
    cols = words(tok, g.tokens)
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(cols)), max(5, 0.2 * (L + 1))))
    plotting.token_table(words(tok, g.top), g.top_prob, ax=ax, columns=cols,
                         title=f"{name}: top-1 token of every layer's logit lens, greedy decoding")
    ax.plot(np.arange(len(sat)), sat - 0.5, "k_", ms=12, mew=1.5)
    fig.tight_layout()
    return fig


def read_texts(model: Any, tokenizer: Any, texts, batch_size: int, max_length: int, device: Any = "auto") -> dict:
    """Fig. 19 over a text set: the logit lens at every non-padding position of ``texts``. Returns ``text`` (a
    :class:`~layersim.nets.readout.TokenLens`), ``text_saturation`` ``[N]`` and ``easy_hard``
    (:func:`easy_vs_hard`). Theorem 2's test on these positions (:func:`stays_correct`) is a claim's measurement,
    made with the others by :func:`statistics`."""
    lens = readout.token_lens(model, text_data.text_batches(texts, tokenizer, batch_size, max_length), device=device)
    sat = readout.saturation_layer(lens.top)
    return {"text": lens, "text_saturation": sat, "easy_hard": easy_vs_hard(sat, lens.confidence)}


def describe_texts(name: str, run: dict, n_texts: int) -> str:
    """One line on :func:`read_texts`'s entries: positions read, the mean saturation layer of all, easy and hard
    positions, and the lens's largest relative error."""
    lens, eh = run["text"], run["easy_hard"]
    return (f"{name}: {lens.top.shape[1]} token positions of {n_texts} sentences; mean saturation layer "
            f"{run['text_saturation'].mean():.2f} of {run['L']}; easy tokens {eh['easy']:.2f}, "
            f"hard {eh['hard']:.2f}; lens vs model logits {lens.max_error:.1e}")


def saturation_histogram(runs: dict[str, dict]):
    """Fig. 19: one panel per model of ``runs``, the fraction of tokens saturating at each layer ``0..L``, filled
    for text positions, outlined for generated tokens. Returns the figure."""
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("saturation_histogram needs at least one model's run")
    fig, axes = plt.subplots(1, len(runs), figsize=(7 * len(runs), 3.8), squeeze=False)
    for ax, (name, r) in zip(axes[0], runs.items()):
        bins = np.arange(r["L"] + 2) - 0.5
        ax.hist(r["text_saturation"], bins=bins, density=True, alpha=0.6,
                label=f"Austen text ({len(r['text_saturation'])} tokens)")
        ax.hist(r["saturation"], bins=bins, density=True, histtype="step", lw=2,
                label=f"generated ({len(r['saturation'])} tokens)")
        ax.set(xlabel="saturation layer", ylabel="fraction of tokens", title=f"{name}: saturation events per layer")
        ax.legend()
        ax.grid()
    fig.tight_layout()
    return fig


def statistics(runs: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per model, the tested numbers: ``error`` (the lens's largest relative difference), ``early`` (generated
    tokens saturating below the last block, App. C.1), ``text_fraction``, ``gap`` (hard minus easy mean saturation
    layer, §2.2), ``stays`` and ``stays_unconditional`` (:func:`stays_correct` on the text positions, Theorem 2;
    its ``ValueError`` when no layer below the last predicts any position correctly, as with random weights)."""
    stays = {n: _stays(r) for n, r in runs.items()}
    return {
        "error": {n: max(r["greedy"].max_error, r["text"].max_error) for n, r in runs.items()},
        "early": {n: float(np.mean(r["saturation"] < r["L"])) for n, r in runs.items()},
        "text_fraction": {n: float(np.mean(r["text_saturation"] < r["L"])) for n, r in runs.items()},
        "gap": {n: r["easy_hard"]["difference"] for n, r in runs.items()},
        "stays": {n: st["fraction"] for n, st in stays.items()},
        "stays_unconditional": {n: st["unconditional"] for n, st in stays.items()},
    }


def _stays(run: dict) -> dict[str, Any]:
    """:func:`stays_correct` on the text positions of one model's run (:func:`read_texts`)."""
    return stays_correct(run["text"].top, run["text"].target)


def records(runs: dict[str, dict]) -> dict[str, dict]:
    """Each model's ``metrics.json`` entry: blocks, generated text, ids, saturation layers and probabilities, the
    text positions read and their per-layer saturation counts, the easy/hard split."""
    return {n: {"blocks": r["L"], "generated": r["tokenizer"].decode(r["greedy"].tokens.tolist()),
                "generated_ids": r["greedy"].tokens, "saturation": r["saturation"], "top_prob": r["greedy"].top_prob,
                "chosen_prob": r["greedy"].chosen_prob, "text_tokens": int(len(r["text_saturation"])),
                "text_saturation_counts": np.bincount(r["text_saturation"], minlength=r["L"] + 1),
                "easy_hard": r["easy_hard"], "stays_correct": _stays(r)} for n, r in runs.items()}
