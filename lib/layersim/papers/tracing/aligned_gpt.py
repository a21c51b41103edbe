"""AlignedGPT: a causal LM trained with the standard and with the aligned loss, read and sampled at every layer
(tracing paper, §3.2, App. C.2, Figure 9; notebook t10). The models and their training are
:mod:`layersim.papers.tracing.lm`'s; here: :func:`train_pair`, :func:`score_table` (Fig. 9 a, b),
:func:`generation_at_exits` (coherence, eq. 21, and diversity, eq. 22; Fig. 9 c, d), :func:`statistics` and
:func:`layers_figure`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from layersim.inputs import fetch
from layersim.nets import generation, models
from layersim.notebook import settings
from layersim.papers.tracing import lm

#: the two models of Figure 9 and the objective each is trained with
OBJECTIVES = {"standard": "ce", "aligned": "aligned"}

#: the rules of a run's settings (``layersim.notebook.settings``): the model to fine-tune or ``"scratch"``, the
#: texts, the model's size, its training and the generation at every exit
RULES = {"pretrained": settings.text(r"[\w.\-]+", "a causal LM of layersim.inputs.assets, or 'scratch'"),
         "source": settings.choice("austen", "wikitext-103"), "n_train": settings.integer(2),
         "n_eval": settings.integer(2), "max_length": settings.integer(4), "vocab_size": settings.integer(300),
         "n_layer": settings.integer(2),
         "n_embd": settings.integer(8), "n_head": settings.integer(1), "steps": settings.integer(1),
         "batch_size": settings.integer(1), "lr": settings.real(0, open_low=True), "warmup_steps": settings.integer(0),
         "n_prompts": settings.integer(1), "prompt_tokens": settings.integer(1), "new_tokens": settings.integer(4),
         "top_p": settings.real(0, 1, open_low=True)}

#: the sentence encoder of the coherence (eq. 21; the paper: SimCSE)
ENCODER = "all-minilm-l6-v2"


def pretrained_name(P: Mapping) -> str | None:
    """The causal LM of ``P["pretrained"]`` to fine-tune, or None for ``"scratch"`` (a small GPT-2 trained here)."""
    return None if P["pretrained"] == "scratch" else P["pretrained"]


def configs(P: Mapping, seed: int = 0) -> dict[str, lm.LMConfig]:
    """One :class:`layersim.papers.tracing.lm.LMConfig` per model of :data:`OBJECTIVES`, from a run's settings
    (``vocab_size``, ``max_length`` as the positions, ``n_embd``, ``n_layer``, ``n_head``, ``steps``,
    ``batch_size``, ``lr``, ``warmup_steps``): identical but for the objective."""
    return {name: lm.LMConfig(vocab_size=P["vocab_size"], n_positions=P["max_length"], n_embd=P["n_embd"],
                              n_layer=P["n_layer"], n_head=P["n_head"], steps=P["steps"], batch_size=P["batch_size"],
                              lr=P["lr"], warmup_steps=P["warmup_steps"], objective=objective, seed=seed)
            for name, objective in OBJECTIVES.items()}


def describe_training(name: str, cfg: lm.LMConfig, meta: Mapping) -> str:
    """One line: the model's steps, whether it was trained or loaded, its final training loss."""
    how = "from the cache" if meta["from_cache"] else f"trained in {meta['train_seconds']:.0f} s"
    return (f"{name}: {cfg.steps} steps of {cfg.batch_size} texts ({how}); final training loss "
            f"{meta['history'][-1]['loss']:.3f}")


def train_pair(P: Mapping, seed: int = 0, device: Any = "auto", progress: bool = True) -> tuple[dict, dict, Any, list]:
    """The standard and aligned models of settings ``P`` (Figure 9), trained once on the same ``P["n_train"]`` texts
    (:func:`layersim.papers.tracing.lm.cached_lm`): small GPT-2s, or ``P["pretrained"]`` fine-tuned. Returns
    ``(nets, metas, tokenizer, held_texts)``, the held-out texts being ``n_eval`` to score then ``n_prompts``
    prompts."""
    pretrained = pretrained_name(P)
    cfgs = configs(P, seed)
    build, tok = lm.model_and_tokenizer(cfgs["standard"], pretrained)
    train_texts = lm.texts(P["source"], "train", P["n_train"], seed=seed)
    held_texts = lm.texts(P["source"], "test", P["n_eval"] + P["n_prompts"], seed=seed)
    train = lm.lm_batches(train_texts, tok, P["batch_size"], P["max_length"])
    desc = {"source": P["source"], "n_train": len(train_texts), "max_length": P["max_length"], "seed": seed,
            "tokenizer": pretrained or f"austen-bpe-{P['vocab_size']}"}
    nets, metas = {}, {}
    for name, cfg in cfgs.items():
        model_build = build if pretrained else (lambda cfg=cfg: lm.build_gpt2(cfg, tok.pad_token_id))
        nets[name], metas[name] = lm.cached_lm(cfg, train, desc, build=model_build,
                                               model_desc={"pretrained": pretrained}, device=device, progress=progress)
        print(describe_training(name, cfg, metas[name]))
    return nets, metas, tok, held_texts


def model_records(metas: Mapping[str, Mapping]) -> dict[str, dict]:
    """What ``metrics.json`` keeps of each model's training: its checkpoint key, training time, the loss
    history and the parameter count."""
    return {n: {"checkpoint": m["key"], "train_seconds": m["train_seconds"], "loss": [h["loss"] for h in m["history"]],
                "n_params": m["n_params"]} for n, m in metas.items()}


def score_table(scores: Mapping[str, Any]) -> pd.DataFrame:
    """Next-token accuracy and perplexity of every model at blocks ``1..L``, one column per ``"<accuracy|perplexity>
    <model>"``, indexed by block (Fig. 9 a, b)."""
    if not scores:
        raise ValueError("score_table needs the scores of at least one model")
    L = len(next(iter(scores.values())).nll) - 1
    return pd.DataFrame({f"{k} {name}": getattr(s, k)[1:] for name, s in scores.items()
                         for k in ("accuracy", "perplexity")}, index=pd.Index(np.arange(1, L + 1), name="block"))


def prompt_ids(texts: Sequence[str], tokenizer: Any, n_prompts: int, prompt_tokens: int,
               max_length: int) -> tuple[torch.Tensor, list[str]]:
    """The prompts: the first ``prompt_tokens`` tokens of the first ``n_prompts`` ``texts`` with at least
    ``prompt_tokens + 2`` tokens, and their decoded text."""
    batch = lm.lm_batches(texts, tokenizer, n_prompts, max_length)[0]
    long_enough = batch["attention_mask"].sum(1) >= prompt_tokens + 2
    prompts = batch["input_ids"][long_enough][:, :prompt_tokens]
    if not len(prompts):
        raise ValueError(f"no text has the {prompt_tokens + 2} tokens a prompt of {prompt_tokens} needs")
    return prompts, tokenizer.batch_decode(prompts)


def generation_at_exits(nets: Mapping[str, Any], prompts: torch.Tensor, prompt_text: Sequence[str], tokenizer: Any,
                        new_tokens: int, top_p: float, seed: int = 0, device: Any = "auto",
                        encoder: tuple[Any, Any] | None = None) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Text sampled from every block of every model as an exit (Fig. 9 c, d): ``new_tokens`` per prompt by nucleus
    sampling (``top_p``, ``seed``). Returns one row per model and block with mean ``coherence`` (eq. 21, under
    ``encoder``) and ``diversity`` (eq. 22), and the first three continuations of each ``"<model>/<block>"``."""
    encoder, enc_tok = encoder or fetch.load_model(ENCODER)
    h_prompt = generation.sentence_embeddings(encoder, enc_tok, list(prompt_text))
    rows, samples = [], {}
    for name, m in nets.items():
        for layer in range(1, len(models.block_modules(m)) + 1):
            new = lm.generate_at_exit(m, prompts, layer, new_tokens, p=top_p, seed=seed, device=device)
            text = tokenizer.batch_decode(new)
            coh = generation.coherence(h_prompt, generation.sentence_embeddings(encoder, enc_tok, text))
            div = [generation.diversity(t) for t in text]
            rows.append({"model": name, "block": layer, "coherence": float(np.mean(coh)),
                         "diversity": float(np.mean(div))})
            samples[f"{name}/{layer}"] = text[:3]
    return pd.DataFrame(rows), samples


def describe_samples(prompt_text: Sequence[str], samples: Mapping[str, list[str]], names: Sequence[str],
                     L: int) -> str:
    """The number of prompts, the first one, and its continuation by each model from block ``L // 2`` and ``L``."""
    lines = [f"{len(prompt_text)} prompts; e.g. {prompt_text[0]!r} ->"]
    for name in names:
        lines += [f"  {name}, block {L // 2}: {samples[f'{name}/{L // 2}'][0]!r}",
                  f"  {name}, block {L}: {samples[f'{name}/{L}'][0]!r}"]
    return "\n".join(lines)


def statistics(scores: Mapping[str, Any]) -> dict[str, float]:
    """§3.2's numbers over blocks ``1..L//2``: ``lower_ppl`` (mean log-perplexity, standard minus aligned),
    ``higher_acc`` (mean accuracy, aligned minus standard), and ``final_ppl_ratio`` (last block, aligned over
    standard)."""
    std, ali = scores["standard"], scores["aligned"]
    half = (len(std.nll) - 1) // 2
    if half < 1:
        raise ValueError("statistics needs at least two blocks")
    return {"lower_ppl": float(np.mean(std.nll[1:half + 1] - ali.nll[1:half + 1])),
            "higher_acc": float(np.mean(ali.accuracy[1:half + 1] - std.accuracy[1:half + 1])),
            "final_ppl_ratio": float(ali.perplexity[-1] / std.perplexity[-1])}


def layers_figure(scores: Mapping[str, Any], gen: pd.DataFrame):
    """Figure 9: (a) next-token accuracy, (b) perplexity (log), (c) coherence and (d) diversity at each exit,
    standard against aligned. Returns the figure."""
    import matplotlib.pyplot as plt

    missing = [n for n in OBJECTIVES if n not in scores]
    if missing:
        raise ValueError(f"layers_figure needs the scores of {list(OBJECTIVES)}; missing {missing}")
    blocks = np.arange(1, len(scores["standard"].nll))
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    for name, style in (("standard", "o--"), ("aligned", "s-")):
        axes[0].plot(blocks, scores[name].accuracy[1:], style, label=name)
        axes[1].plot(blocks, scores[name].perplexity[1:], style, label=name)
        g = gen[gen.model == name]
        axes[2].plot(g.block, g.coherence, style, label=name)
        axes[3].plot(g.block, g.diversity, style, label=name)
    for ax, (title, ylabel) in zip(axes, [("(a) prediction accuracy", "next-token accuracy"),
                                          ("(b) perplexity", "perplexity (log scale)"),
                                          ("(c) coherence", "cosine(prompt, continuation)"),
                                          ("(d) diversity", "eq. 22")]):
        ax.set(title=title, xlabel="block (exit)", ylabel=ylabel, xticks=blocks)
        ax.grid(True)
        ax.legend()
    axes[1].set_yscale("log")
    fig.tight_layout()
    return fig
