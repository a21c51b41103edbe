"""A measured paper-scale plan: ``python -m layersim.tools.bench paper``.

For the notebooks whose paper scale runs on a GPU, it builds the paper presets' models with random weights (nothing
downloaded), times a few training steps or reading passes of the paper's shapes on synthetic inputs
(:func:`time_workload`) and multiplies the time per step by the steps the preset asks for (a workload whose step
count is unknown offline reports its rate per 1,000 steps). The settings are read where the notebooks read them:
``layersim.notebook.presets`` and each notebook's ``PRESETS`` (:func:`layersim.tools.assets.notebook_presets`).
``--tiny`` shrinks the models and keeps the step counts (see docs/modules.md, `layersim.tools.bench_paper`).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from layersim.core.device import resolve_device
from layersim.inputs import image_data
from layersim.nets import params
from layersim.notebook import presets
from layersim.tools.assets import notebook_presets
from layersim.tools.bench_train import device_name, timed
from layersim.train import finetune, objectives, training


@dataclass(frozen=True)
class Workload:
    """One kind of paper-scale step: ``build()`` makes the model (random weights), ``batch(model)`` a synthetic CPU
    batch; ``kind`` is ``"train"`` or ``"read"`` (forward only); ``steps`` the preset's count (None: unknown
    offline), ``per`` what one step is."""

    notebook: str
    label: str
    build: Callable[[], nn.Module]
    batch: Callable[[nn.Module], tuple]
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    kind: str
    steps: int | None
    per: str


# ----------------------------------------------------------------------------- workloads

TINY_VIT = dict(depth=2, embed_dim=32, num_heads=2, mlp_ratio=2.0)


def _vit_workloads(notebook: str, variants: dict[str, dict], tiny: bool) -> list[Workload]:
    """Training steps of the tracing ViTs ``variants`` (name -> ``presets.tracing_vit`` settings)."""
    out = []
    for name, s in variants.items():
        s = {**s, **(TINY_VIT if tiny else {})}
        info = image_data.dataset_info(s["dataset"])
        model_cfg, train_cfg = training.configs_from(s, info)
        n = s["n_train"] or image_data.split_size(s["dataset"], "train")
        steps = train_cfg.epochs * math.ceil(n / train_cfg.batch_size)

        def build(model_cfg=model_cfg, train_cfg=train_cfg):
            model = training.build_vit(model_cfg)
            if train_cfg.objective in training.MODEL_SETUP:
                training.MODEL_SETUP[train_cfg.objective](model, seed=0)
            return model

        def batch(model, b=train_cfg.batch_size, c=model_cfg):
            return torch.randn(b, c.in_chans, c.img_size, c.img_size), torch.randint(0, c.num_classes, (b,))

        def loss(model, xy, cfg=train_cfg):
            return training.OBJECTIVES[cfg.objective](model, *xy, cfg)

        out.append(Workload(notebook, f"{name} ({train_cfg.objective}, batch {train_cfg.batch_size})", build, batch,
                            loss, "train", steps, "training step"))
    return out


def _text(model_id: str, tiny: bool, task: str = "classification", labels: int = 2) -> Callable[[], nn.Module]:
    def build():
        return params.build_random(model_id, task=task, num_labels=labels, tiny=tiny)
    return build


def _tokens(batch: int, length: int, labels: int | None = 2, lm: bool = False):
    def make(model):
        vocab = model.config.vocab_size
        ids = torch.randint(0, vocab, (batch, length))
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if lm:
            inputs["labels"] = ids
        elif labels is not None:
            inputs["labels"] = torch.randint(0, labels, (batch,))
        return (inputs,)
    return make


def _hf_loss(model, batch) -> torch.Tensor:
    return model(**batch[0]).loss


def _hf_read(model, batch) -> torch.Tensor:
    inputs = {k: v for k, v in batch[0].items() if k != "labels"}
    out = model(**inputs, output_hidden_states=True)
    return out.hidden_states[-1]


def _images(batch: int, side: int):
    def make(model):
        return ({"pixel_values": torch.randn(batch, 3, side, side)},)
    return make


def workloads(tiny: bool = False) -> list[Workload]:
    """Every workload of the plan, in README order of the notebooks."""
    length = 16 if tiny else None
    out: list[Workload] = []
    vit = {"standard": presets.tracing_vit("paper", "standard")}
    out += _vit_workloads("t01_cos_vs_cka", vit, tiny)
    out += _vit_workloads("t02_saturation_events", {"aligned": presets.tracing_vit("paper", "aligned")}, tiny)
    t03 = {k: v for k, v in presets.aligned_training_models("paper").items() if k not in ("standard", "aligned")}
    seen = {json.dumps(v, sort_keys=True, default=str) for v in (presets.tracing_vit("paper", "standard"),
                                                                 presets.tracing_vit("paper", "aligned"))}
    t03 = {k: v for k, v in t03.items() if json.dumps(v, sort_keys=True, default=str) not in seen}
    out += _vit_workloads("t03_aligned_training", t03, tiny)

    t09 = notebook_presets("t09_aligned_bert")["paper"]
    for model_id in t09["models"]:
        for objective, loss in (("standard", _hf_loss), ("aligned", lambda m, b: finetune.aligned_loss(m, b[0]))):
            out.append(Workload("t09_aligned_bert", f"{model_id} fine-tune ({objective} loss, batch {t09['batch_size']})",
                                _text(model_id, tiny), _tokens(t09["batch_size"], length or t09["max_length"]),
                                loss, "train", None, "training step (steps: epochs x the six GLUE training sets)"))
    gpt = notebook_presets("t10_aligned_gpt")["paper"]
    for objective, loss in (("standard", _hf_loss), ("aligned", lambda m, b: objectives.aligned_lm_loss(m, b[0]))):
        out.append(Workload("t10_aligned_gpt", f"{gpt['pretrained']} fine-tune ({objective} loss, batch {gpt['batch_size']})",
                            _text(gpt["pretrained"], tiny, task="lm"),
                            _tokens(gpt["batch_size"], length or gpt["max_length"], lm=True), loss, "train",
                            gpt["steps"], "training step"))
    ft = presets.CLUSTERS_FINETUNE["paper"]
    for model_id in ft["models"]:
        steps = ft["steps"] * len(ft["tasks"]) * ft["restarts"]
        out.append(Workload("c01_cka_structure", f"{model_id} fine-tune (batch {ft['batch_size']})", _text(model_id, tiny),
                            _tokens(ft["batch_size"], length or ft["max_length"]), _hf_loss, "train", steps,
                            f"training step ({len(ft['tasks'])} tasks x {ft['restarts']} restarts x {ft['steps']:,})"))
        out.append(Workload("c03_layer_skipping", f"{model_id} read every layer (batch 64)", _text(model_id, tiny),
                            _tokens(64, length or ft["max_length"]), _hf_read, "read", None,
                            "batch of 64 validation sequences, once per skipped span"))
    clip = notebook_presets("t11_clip")["paper"]
    side = 32 if tiny else 224
    out.append(Workload("t11_clip", f"{clip['pretrained']} vision tower, read every layer (batch {clip['batch_size']}, "
                        f"{side} px)", _text(clip["pretrained"], tiny, task="image"), _images(clip["batch_size"], side),
                        _hf_read, "read", math.ceil(clip["n_eval"] / clip["batch_size"]),
                        f"batch of {clip['batch_size']} of the {clip['n_eval']:,} test images"))
    a11 = notebook_presets("a11_pretrained_text")["paper"]
    out.append(Workload("a11_pretrained_text", f"{a11['encoder']} read every layer (batch 64)", _text(a11["encoder"], tiny),
                        _tokens(64, length or a11["max_length"]), _hf_read, "read", None,
                        "batch of 64 sentences (each task's 2 x 1,000, pretrained and random weights)"))
    r01 = notebook_presets("r01_block_similarity")["paper"]
    for model_id in params.IMAGE_ENCODERS:  # the encoders r01-r04 read at paper scale
        side = 32 if tiny else 224
        out.append(Workload("r01_block_similarity", f"{model_id} read every layer (batch {r01['batch_size']}, {side} px)",
                            _text(model_id, tiny, task="image"), _images(r01["batch_size"], side),
                            _hf_read, "read", None, f"batch of {r01['batch_size']} images"))
    return out


# ----------------------------------------------------------------------------- timing

def _to(batch: tuple, dev: torch.device) -> tuple:
    return tuple({k: v.to(dev) for k, v in b.items()} if isinstance(b, dict) else b.to(dev) for b in batch)


def time_workload(w: Workload, device: str | torch.device = "auto", steps: int = 3, warmup: int = 1,
                  precision: str = "auto") -> dict:
    """Seconds per step of ``w`` on ``device`` (the mean of ``steps`` after ``warmup``), the precision used and the
    peak GPU memory in GiB (None on the CPU). ``precision="auto"``: the notebooks' (bf16 training on CUDA, float32
    reading)."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got {steps}, {warmup}")
    dev = resolve_device(device)
    if precision == "auto" and w.kind != "train":
        precision = "fp32"
    prec = training.resolve_precision(precision, dev)
    model = w.build().to(dev)
    batch = _to(w.batch(model), dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5) if w.kind == "train" else None
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step():
        if opt is None:
            with torch.no_grad(), training.autocast(prec):
                w.loss(model.eval(), batch)
            return
        model.train()
        with training.autocast(prec):
            loss = w.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    seconds = timed(step, dev, steps, warmup)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    return {"seconds": seconds, "precision": prec, "peak_gib": peak}


def plan(device: str | torch.device = "auto", tiny: bool = False, only: str = "", steps: int = 3,
         log: Callable[[str], None] = print) -> list[dict]:
    """Time every workload whose notebook contains ``only``, log a Markdown table and return one row per workload, with
    ``hours`` = seconds x steps / 3600 where the steps are known."""
    dev = resolve_device(device)
    rows = []
    log("| notebook | workload | precision | s per step | steps | hours | GPU memory peak (GiB) |")
    log("|---|---|---|---:|---:|---:|---:|")
    for w in workloads(tiny):
        if only and only not in w.notebook:
            continue
        m = time_workload(w, dev, steps=steps)
        hours = None if w.steps is None else m["seconds"] * w.steps / 3600
        rows.append({"notebook": w.notebook, "label": w.label, "kind": w.kind, "steps": w.steps, "per": w.per,
                     **m, "hours": hours})
        peak = "n/a" if m["peak_gib"] is None else f"{m['peak_gib']:.1f}"
        steps_txt = f"{w.steps:,}" if w.steps is not None else f"per 1,000: {m['seconds'] * 1000 / 3600:.2f} h"
        log(f"| {w.notebook} | {w.label} | {m['precision']} | {m['seconds']:.4f} | {steps_txt} | "
            f"{'' if hours is None else f'{hours:.2f}'} | {peak} |")
    log("\nMeasured hours per notebook (the workloads with known step counts): "
        + "; ".join(f"{k} {v:.2f} h" for k, v in notebook_hours(rows).items()))
    return rows


def notebook_hours(rows: list[dict], complete_only: bool = False) -> dict[str, float]:
    """``{notebook: GPU hours}`` summed over :func:`plan`'s rows with known step counts; with ``complete_only``, only
    the notebooks whose every workload has one."""
    hours: dict[str, float] = {}
    partial: set[str] = set()
    for r in rows:
        if r.get("hours") is None:
            partial.add(r["notebook"])
        else:
            hours[r["notebook"]] = hours.get(r["notebook"], 0.0) + float(r["hours"])
    return {k: v for k, v in hours.items() if not (complete_only and k in partial)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench paper", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    ap.add_argument("--only", default="", help="only the notebooks whose name contains this")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per workload (default 3)")
    ap.add_argument("--tiny", action="store_true", help="tiny models (tests; the step counts stay the paper's)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be positive")
    dev = resolve_device(args.device)
    print(f"## layersim.tools.bench paper: {'tiny models' if args.tiny else 'the paper presets'}\n")
    print(f"- device: {device_name(dev)}; torch {torch.__version__}; Python {platform.python_version()}")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    rows = plan(dev, tiny=args.tiny, only=args.only, steps=args.steps)
    if args.json is not None:
        from layersim.core.writers import write_text

        write_text(args.json, json.dumps(rows, indent=1, default=str))
    return 0
