"""The logit lens against its peers: ``python -m layersim.tools.bench lens``.

Times :func:`layersim.nets.readout.token_lens` (the top-1 token of every layer of a causal LM at every real
position: the tracing paper's saturation analysis, §2.2 and App. C.1, notebook t08) on t08's default inputs, beside
plain ``transformers`` (:func:`plain_lens`) on the same batches: the median wall time of ``--repeat`` runs after an
untimed one, positions per second, and the share of top-1 tokens equal to ``token_lens``'s (see docs/modules.md,
`layersim.tools.bench_lens`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from layersim.core import machine
from layersim.nets import readout
from layersim.nets.models import classifier_head, evaluating, final_norm, resolve_device

#: t08's default inputs: the model, the texts and how they are cut
MODEL, N_TEXTS, MAX_LENGTH, BATCH = "smollm2-135m", 16, 64, 16


def plain_lens(model: nn.Module, batches: Sequence[dict]) -> np.ndarray:
    """The logit lens as plain ``transformers`` gives it: ``[L+1, N]`` top-1 tokens at the real positions, from
    ``output_hidden_states``, the final norm (already in the last entry) and ``lm_head``."""
    norm, head = final_norm(model), classifier_head(model)
    dev = next(model.parameters()).device
    tops = []
    with evaluating(model), torch.no_grad():
        for b in batches:
            b = {k: v.to(dev) for k, v in b.items() if k in ("input_ids", "attention_mask")}
            hs = model(**b, output_hidden_states=True, use_cache=False).hidden_states
            keep = b["attention_mask"].bool()
            layers = [head(norm(h[keep])) for h in hs[:-1]] + [head(hs[-1][keep])]
            tops.append(np.stack([z.argmax(-1).cpu().numpy() for z in layers]))
    return np.concatenate(tops, axis=1)


def timed(fn: Callable[[], np.ndarray], repeat: int) -> tuple[float, np.ndarray]:
    """The median wall time of ``repeat`` calls of ``fn`` after one untimed call (the allocator's and the
    kernels' warm-up), and its last result."""
    times, out = [], fn()
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def compare(model: nn.Module, batches: Sequence[dict], repeat: int = 3) -> list[dict]:
    """Each recipe on ``batches``: rows ``{"recipe", "seconds", "positions", "agreement"}``, ``token_lens`` first;
    agreement is the share of (layer, position) top-1 tokens equal to its."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    device = next(model.parameters()).device
    recipes = [("layersim token_lens", lambda: readout.token_lens(model, batches, device=device).top),
               ("plain transformers", lambda: plain_lens(model, batches))]
    rows, ours = [], None
    for name, fn in recipes:
        seconds, top = timed(fn, repeat)
        ours = top if ours is None else ours
        if top.shape != ours.shape:
            raise RuntimeError(f"{name} read {top.shape} (layers, positions), token_lens {ours.shape}")
        rows.append({"recipe": name, "seconds": seconds, "positions": top.shape[1],
                     "agreement": float((top == ours).mean())})
    return rows


def markdown(rows: Sequence[dict]) -> str:
    """The rows of :func:`compare` as a Markdown table."""
    out = ["| recipe | median s | positions / s | top-1 agrees with token_lens |", "|---|---:|---:|---:|"]
    return "\n".join(out + [f"| {r['recipe']} | {r['seconds']:.2f} | {r['positions'] / r['seconds']:.0f} | "
                             f"{r['agreement']:.4f} |" for r in rows])


def random_lm(folder: str) -> tuple[nn.Module, object]:
    """A causal LM from ``folder``'s ``config.json`` with random weights (seed 0, float32), and the tokenizer stored
    there."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).float()
    return model, AutoTokenizer.from_pretrained(folder)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench lens", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    ap.add_argument("--threads", type=int, default=2, help="torch threads on the CPU (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per recipe; the median is reported (default 3)")
    ap.add_argument("--texts", type=int, default=N_TEXTS, help=f"Austen sentences (default {N_TEXTS}, one batch)")
    ap.add_argument("--random-weights", metavar="DIR", default=None,
                    help=f"build the model from DIR's config.json and tokenizer with random weights instead of loading "
                         f"{MODEL} (for a machine without the checkpoint: the timings hold, the tokens are noise)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.repeat < 1 or args.texts < 1:
        ap.error("--threads, --repeat and --texts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    from layersim.inputs import fetch, text_data

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.random_weights:
        model, tokenizer = random_lm(args.random_weights)
    else:
        model, tokenizer = fetch.load_model(MODEL)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(resolve_device(args.device)).eval()
    texts = text_data.text_sample("austen", args.texts, seed=0, split="test")
    batches = text_data.text_batches(texts, tokenizer, BATCH, MAX_LENGTH)
    weights = f" (random weights, config of {args.random_weights})" if args.random_weights else ""
    print(f"## layersim.tools.bench lens: {MODEL}{weights}, {args.texts} Austen sentences of at most {MAX_LENGTH} tokens, "
          f"batches of {BATCH}, median of {args.repeat}\n")
    for line in machine.describe():
        print(line)
    print(f"- torch threads: {torch.get_num_threads()}; device: {args.device}\n")
    print(markdown(compare(model, batches, args.repeat)))
    return 0
