"""Training small classifiers, with checkpoints cached by configuration.

The default-scale model is a DeiT-style timm ``VisionTransformer`` (:class:`ViTConfig`), a small version of the
tracing paper's DeiT-S (appendix B). One epoch loop (:func:`train_epochs`) and one step loop (:func:`run_steps`)
serve every model; :data:`OBJECTIVES` names the losses. :func:`cached_model` trains a model or loads it from the
checkpoint store (:mod:`layersim.train.checkpoints`), retraining one that fails to load (see docs/modules.md,
`layersim.train.training`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from layersim.core.device import training_work
from layersim.core.paths import cache_dir, claim, quarantine
from layersim.core.progress import progress_bar
from layersim.inputs import image_data
from layersim.nets.models import resolve_device
from layersim.train import checkpoints
from layersim.train.objectives import MODEL_SETUP, OBJECTIVES as _PAPER_OBJECTIVES

@dataclass(frozen=True)
class ViTConfig:
    """A DeiT-style vision transformer (timm ``VisionTransformer`` keyword arguments); the defaults are the
    default-scale model for 28x28 grey images: 16 patches of 7x7 plus a class token, 8 pre-LN blocks of width 128."""

    img_size: int = 28
    patch_size: int = 7
    in_chans: int = 1
    num_classes: int = 10
    embed_dim: int = 128
    depth: int = 8
    num_heads: int = 4
    mlp_ratio: float = 2.0
    drop_path_rate: float = 0.0
    global_pool: str = "token"

    @staticmethod
    def data_fields(info: dict) -> dict:
        """The fields a data set decides (``image_data.dataset_info``): image size, channels, classes."""
        return {"img_size": info["image_size"], "in_chans": info["channels"], "num_classes": info["classes"]}


def build_vit(cfg: ViTConfig, seed: int | None = 0) -> nn.Module:
    """A randomly initialised timm ``VisionTransformer`` for ``cfg``, drawn from ``seed`` without touching the
    global random state (``seed=None``: from the global state); ``ValueError`` for incompatible sizes."""
    from timm.models.vision_transformer import VisionTransformer

    if cfg.embed_dim % cfg.num_heads:
        raise ValueError(f"embed_dim={cfg.embed_dim} is not divisible by num_heads={cfg.num_heads}")
    if cfg.img_size % cfg.patch_size:
        raise ValueError(f"img_size={cfg.img_size} is not a multiple of patch_size={cfg.patch_size}")
    if seed is None:
        return VisionTransformer(**dataclasses.asdict(cfg))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return VisionTransformer(**dataclasses.asdict(cfg))


@dataclass(frozen=True)
class StepConfig:
    """The optimisation fields of a run counted in optimiser steps (AdamW, ``warmup_steps`` of linear warm-up, then
    the loop's decay), shared by ``lm.LMConfig``, ``clip.ClipConfig`` and ``finetune.FinetuneConfig``.
    ``ValueError`` unless ``steps, batch_size >= 1``, ``lr > 0``, ``weight_decay >= 0`` and
    ``0 <= warmup_steps <= steps``."""

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 0
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be at least 1, got {self.steps} and {self.batch_size}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in 0..steps={self.steps}, got {self.warmup_steps}")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings. ``schedule`` is ``"cosine"`` (with ``warmup_epochs`` of linear
    warm-up) or ``"multistep"`` (the paper's MultiStepLR: ×0.1 at each of ``milestones``)."""

    epochs: int = 5
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    schedule: str = "cosine"
    warmup_epochs: float = 0.5
    milestones: tuple[int, ...] = ()
    label_smoothing: float = 0.0
    objective: str = "ce"
    seed: int = 0
    extra: dict = field(default_factory=dict)  # objective-specific settings

    def __post_init__(self):
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError(f"epochs, batch_size and lr must be positive, got {self}")
        if self.schedule not in ("cosine", "multistep", "constant"):
            raise ValueError(f"unknown schedule {self.schedule!r}: use cosine, multistep or constant")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; known: {sorted(OBJECTIVES)}")


def ce_objective(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """Standard training: cross-entropy of the last layer's logits."""
    return F.cross_entropy(model(x), y, label_smoothing=cfg.label_smoothing)


#: name -> objective(model, images, labels, train_config) -> scalar loss
OBJECTIVES: dict[str, Callable[..., torch.Tensor]] = {"ce": ce_objective}

# the tracing paper's objectives (aligned, alternating, ce_reg, multi_exit, ...); objectives.py
# does not import this module, so there is no import cycle

OBJECTIVES.update(_PAPER_OBJECTIVES)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) for a deterministic run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def thread_share() -> int:
    """The intra-op threads this process was given: ``OMP_NUM_THREADS`` when a positive integer, else PyTorch's
    current count."""
    import torch

    try:
        given = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        given = 0
    return given if given >= 1 else torch.get_num_threads()


def cpu_for_small_models(threads: int = 1) -> int:
    """Set PyTorch for small models on a shared CPU: at most ``threads`` intra-op threads, never more than
    :func:`thread_share`, and denormals flushed to zero. Returns the thread count set; ``ValueError`` for
    ``threads < 1`` (see docs/modules.md, `layersim.train.training`)."""
    import torch

    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    n = min(int(threads), thread_share())
    torch.set_num_threads(n)
    torch.set_flush_denormal(True)
    return n


#: the ``precision`` settings of the training loops: "auto" = bf16 autocast on a CUDA device that
#: supports it, fp32 anywhere else (the CPU, on which every committed default-scale result was trained)
PRECISIONS = ("auto", "fp32", "bf16")


def resolve_precision(precision: str, device: str | torch.device = "auto") -> str:
    """``"fp32"`` or ``"bf16"``: what a training loop on ``device`` runs in for ``precision``.

    ``"auto"``: bf16 autocast on CUDA devices with bf16 support, fp32 otherwise; ``"bf16"`` raises ``ValueError``
    where unavailable (the CPU), as does an unknown setting.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    dev = resolve_device(device)
    cuda_bf16 = dev.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not cuda_bf16:
        raise ValueError(f"precision='bf16' needs a CUDA device with bf16 support; on {dev} train with 'fp32' or 'auto'")
    if precision == "auto":
        return "bf16" if cuda_bf16 else "fp32"
    return precision


#: the environment variable that turns on ``torch.compile`` for :func:`train_classifier` (see
#: :func:`compile_backend`)
COMPILE_ENV = "LAYERSIM_COMPILE"


def compile_backend(setting: bool | str | None = None) -> str | None:
    """The ``torch.compile`` backend :func:`train_classifier` compiles its loss with, or None (eager).

    ``setting``: False (eager), True (``"inductor"``), a backend's name, or None: read ``LAYERSIM_COMPILE`` (unset,
    ``""``, ``"0"``: eager; ``"1"``: inductor; else a name). ``ValueError`` for an unknown backend. Opt-in: it
    changes the rounding, not the objective (see docs/modules.md, `layersim.train.training`).
    """
    if setting is None:
        env = os.environ.get(COMPILE_ENV, "")
        setting = False if env in ("", "0") else True if env == "1" else env
    if setting is False:
        return None
    if setting is True:
        return "inductor"
    if not isinstance(setting, str):
        raise ValueError(f"compile must be True, False, None or a backend's name, got {setting!r}")
    import torch._dynamo

    known = ("eager", "aot_eager", *torch._dynamo.list_backends())
    if setting not in known:
        raise ValueError(f"unknown torch.compile backend {setting!r} (from compile= or ${COMPILE_ENV}); "
                         f"use one of {sorted(set(known))}")
    return setting


def autocast(precision: str):
    """The forward pass's context for a resolved precision: ``torch.autocast("cuda", bfloat16)`` for ``"bf16"``
    (weights and optimiser stay float32), a no-op for ``"fp32"``; ``ValueError`` otherwise."""
    import contextlib

    if precision == "bf16":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    if precision == "fp32":
        return contextlib.nullcontext()
    raise ValueError(f"autocast takes a resolved precision ('fp32' or 'bf16'), got {precision!r}")


def precision_key(precision: str) -> tuple[dict, ...]:
    """The checkpoint-key part of a resolved precision: ``()`` for fp32 (older keys stay valid),
    ``({"precision": "bf16"},)`` otherwise, so fp32 and bf16 checkpoints never mix."""
    return () if precision == "fp32" else ({"precision": precision},)


def loader_settings(device: str | torch.device, workers: int | None = None) -> dict:
    """DataLoader keywords for training on ``device``: on CUDA, ``workers`` worker processes (default: all cores but
    one, at most 8), pinned memory and persistent workers; on the CPU, ``workers`` or 0. Depends on the device's
    name only (``"auto"`` looks at this machine)."""
    dev = resolve_device(device) if str(device) == "auto" else torch.device(device)
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if dev.type != "cuda":
        return {"num_workers": workers or 0}
    n = min(8, max(0, (os.cpu_count() or 1) - 1)) if workers is None else workers
    return {"num_workers": n, "pin_memory": True, "persistent_workers": n > 0}


def lr_at(step: int, steps_per_epoch: int, cfg: TrainConfig) -> float:
    """The learning rate at optimiser step ``step`` (0-based) under ``cfg``'s schedule."""
    epoch = step / steps_per_epoch
    if cfg.schedule == "multistep":
        return cfg.lr * 0.1 ** sum(epoch >= m for m in cfg.milestones)
    if cfg.schedule == "constant":
        return cfg.lr
    warm = cfg.warmup_epochs * steps_per_epoch
    if step < warm:
        return cfg.lr * (step + 1) / warm
    total = cfg.epochs * steps_per_epoch
    progress = (step - warm) / max(1.0, total - warm)
    return 0.5 * cfg.lr * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train_classifier(
    model: nn.Module,
    train_set: Dataset,
    cfg: TrainConfig,
    device: str | torch.device = "auto",
    progress: bool = True,
    precision: str = "auto",
    workers: int | None = None,
    augment_on_device: bool | None = None,
    compile: bool | str | None = None,
) -> list[dict]:
    """Train ``model`` in place with AdamW on ``train_set``; return the per-epoch history (:func:`train_epochs`).

    ``precision``: :func:`resolve_precision`. ``workers``: :func:`loader_settings`. ``augment_on_device``: augment
    batches on the device (None: on CUDA only). ``compile``: :func:`compile_backend`. ``device="auto"`` keeps a
    model too small for a GPU on the CPU (see docs/modules.md, `layersim.train.training`).
    """
    dev = resolve_device(device, work=training_work(model, cfg.batch_size))
    prec = resolve_precision(precision, dev)
    seed_everything(cfg.seed)
    model.to(dev)
    gen = torch.Generator().manual_seed(cfg.seed)
    on_device = _device_augmentation(train_set, dev if augment_on_device is None else augment_on_device)
    loader = DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True, generator=gen, drop_last=False,
                        **loader_settings(dev, workers))
    aug_gen = torch.Generator(device=dev).manual_seed(cfg.seed) if on_device is not None else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    objective = OBJECTIVES[cfg.objective]
    backend = compile_backend(compile)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return objective(model, x, y, cfg)

    if backend is not None:
        loss_of = torch.compile(loss_of, backend=backend)

    def to_device(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        return (x if on_device is None else on_device.batch(x, generator=aug_gen)), y

    try:
        # the loader itself goes to the progress bar: tqdm starts one extra iterator of it, which draws one
        # number from ``gen``; the order of the batches is the one every committed model was trained with
        return train_epochs(model, opt, cfg.epochs, lambda epoch: loader, loss_of,
                            prepare=to_device, lr_of=lambda step: lr_at(step, len(loader), cfg), precision=prec,
                            progress=progress)
    finally:
        if on_device is not None:
            train_set.defer_augment = False


def descend(opt: torch.optim.Optimizer, loss: torch.Tensor, what: str = "training") -> float:
    """One optimiser step on ``loss`` (zero gradients, back-propagate, step); returns its value.
    ``FloatingPointError`` naming ``what`` when the loss is not finite."""
    if not torch.isfinite(loss):
        raise FloatingPointError(f"{what} diverged: loss {loss.item()}")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def train_epochs(model: nn.Module, opt: torch.optim.Optimizer, epochs: int,
                 batches: Callable[[int], Iterable[tuple[torch.Tensor, torch.Tensor]]],
                 loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 prepare: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
                 lr_of: Callable[[int], float] | None = None, precision: str = "fp32",
                 after_epoch: Callable[[int], dict | None] | None = None, progress: bool = False,
                 desc: str = "epoch", what: str = "training") -> list[dict]:
    """The library's epoch loop: ``epochs`` passes over ``batches(epoch)`` (0-based), each batch through
    ``prepare(x, y)``, then one :func:`descend` on ``loss_of(x, y)`` under :func:`autocast` of ``precision``, the
    learning rate set to ``lr_of(step)`` first.

    Returns one entry per epoch: ``epoch`` (1-based), ``loss`` (batch-size-weighted mean), ``seconds``, plus what
    ``after_epoch(epoch)`` returns. The model ends in eval mode (see docs/modules.md, `layersim.train.training`).
    """
    history, step = [], 0
    for epoch in range(epochs):
        model.train()
        t0, total, seen = time.perf_counter(), 0.0, 0
        bar = progress_bar(batches(epoch), desc=f"{desc} {epoch + 1}/{epochs}", disable=not progress)
        for x, y in bar:
            if prepare is not None:
                x, y = prepare(x, y)
            if lr_of is not None:
                for group in opt.param_groups:
                    group["lr"] = lr_of(step)
            with autocast(precision):
                loss = loss_of(x, y)
            total += descend(opt, loss, f"{what} at epoch {epoch + 1}, step {step}") * len(y)
            seen += len(y)
            step += 1
            if progress:
                bar.set_postfix(loss=f"{total / seen:.3f}")
        entry = {"epoch": epoch + 1, "loss": total / max(seen, 1), "seconds": time.perf_counter() - t0}
        entry.update((after_epoch(epoch + 1) if after_epoch is not None else None) or {})
        history.append(entry)
    model.eval()
    return history


def _device_augmentation(train_set: Dataset, where: torch.device | bool):
    """The data set's batch augmentation when it should run on the training device (``where``: a device, CUDA
    meaning yes, or True/False) and the data set supports it, its per-image augmentation then deferred; else None."""
    aug = getattr(train_set, "augment", None)
    wanted = where if isinstance(where, bool) else where.type == "cuda"
    if not wanted or aug is None or not hasattr(aug, "batch") or not hasattr(train_set, "defer_augment"):
        return None
    train_set.defer_augment = True
    return aug


def warmup_cosine(step: int, lr: float, warmup_steps: int, steps: int) -> float:
    """Learning rate at optimiser step ``step`` (0-based): linear warm-up over ``warmup_steps``, then cosine decay
    to 0 at ``steps``."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return 0.5 * lr * (1 + math.cos(math.pi * min(1.0, progress)))


def run_steps(opt: torch.optim.Optimizer, steps: int, loss_at: Callable[[int], torch.Tensor],
              lr_of: Callable[[int], float], desc: str, progress: bool = True, what: str = "training",
              precision: str = "fp32") -> list[dict]:
    """The step loop of the text models: per step set ``lr_of(step)``, then :func:`descend` on ``loss_at(step)``
    under :func:`autocast` of ``precision``. Returns an entry per 10 % of the steps (``step``, mean ``loss`` since
    the last entry, ``seconds``)."""
    history, every = [], max(1, steps // 10)
    t0, total, count = time.perf_counter(), 0.0, 0
    bar = progress_bar(range(steps), desc=desc, disable=not progress)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_of(step)
        with autocast(precision):
            loss = loss_at(step)
        total, count = total + descend(opt, loss, f"{what} at step {step}"), count + 1
        if (step + 1) % every == 0 or step + 1 == steps:
            history.append({"step": step + 1, "loss": total / count, "seconds": time.perf_counter() - t0})
            bar.set_postfix(loss=f"{total / count:.3f}")
            total, count = 0.0, 0
    return history


# ----------------------------------------------------------------------------- cache


def cached_model(
    prefix: str,
    build: Callable[[], nn.Module],
    model_cfg: object,
    train_cfg: TrainConfig,
    train_set: Dataset | Callable[[], Dataset],
    data_desc: dict,
    device: str | torch.device = "auto",
    progress: bool = True,
    retrain: bool = False,
    fit: Callable[..., list[dict]] | None = None,
    precision: str = "auto",
) -> tuple[nn.Module, dict]:
    """Train ``build()`` with :func:`train_classifier` (or ``fit``), or load it if this configuration was trained
    before.

    The checkpoint ``<cache>/checkpoints/<prefix>-<key>/`` is keyed by ``model_cfg``, ``train_cfg``, ``data_desc``
    and a non-fp32 precision. ``train_set`` may be a callable, called only to train. Returns
    ``(model in eval mode, meta)``; a checkpoint that fails to load is moved aside with a ``CacheWarning`` and
    retrained (see docs/modules.md, `layersim.train.training`).
    """
    model = build()
    batch = getattr(train_cfg, "batch_size", None)
    device = resolve_device(device, work=training_work(model, batch) if batch else None)
    prec = resolve_precision(precision, device)
    key = checkpoints.config_key(model_cfg, train_cfg, data_desc, *precision_key(prec))
    folder = cache_dir("checkpoints") / f"{prefix}-{key}"
    if not retrain:
        model, meta = _from_cache(folder, model, build, key)
        if meta is not None:
            checkpoints.note_use(folder.name, True)
            return model.to(device).eval(), meta
    with claim(cache_dir("locks") / f"checkpoint-{folder.name}.lock", f"the checkpoint {folder.name}") as waited:
        if waited and not retrain:  # another run trained it meanwhile
            model, meta = _from_cache(folder, model, build, key)
            if meta is not None:
                checkpoints.note_use(folder.name, True)
                return model.to(device).eval(), meta
        t0 = time.perf_counter()
        if callable(train_set) and not isinstance(train_set, Dataset):
            train_set = train_set()
        history = (fit or train_classifier)(model, train_set, train_cfg, device=device, progress=progress,
                                            precision=prec)
        meta = {
            "key": key,
            "model": dataclasses.asdict(model_cfg) if dataclasses.is_dataclass(model_cfg) else model_cfg,
            "train": dataclasses.asdict(train_cfg) if dataclasses.is_dataclass(train_cfg) else train_cfg,
            "data": data_desc,
            "history": history,
            "train_seconds": time.perf_counter() - t0,
            "n_params": sum(p.numel() for p in model.parameters()),
            "precision": prec,
        }
        meta["weights_sha256"] = checkpoints.save(folder, model, meta, replace=retrain)
    meta["from_cache"] = False
    checkpoints.note_use(folder.name, False)
    return model.eval(), meta


def _from_cache(folder, model: nn.Module, build: Callable[[], nn.Module], key: str) -> tuple[nn.Module, dict | None]:
    """``(model with the checkpoint's weights, meta)`` from ``folder``, or ``(a model to train, None)`` when there
    is none or it fails to load (then moved aside)."""
    if not os.path.lexists(folder):
        return model, None
    try:
        meta = checkpoints.load(folder, model, key)
    except Exception as err:  # noqa: BLE001 - whatever is wrong with it, it is moved aside and retrained
        quarantine(folder, err)
        return build(), None  # the failed load may have overwritten some weights
    meta["from_cache"] = True
    return model, meta


def cached_vit(
    model_cfg: ViTConfig,
    train_cfg: TrainConfig,
    train_set: Dataset | Callable[[], Dataset],
    data_desc: dict,
    device: str | torch.device = "auto",
    progress: bool = True,
    retrain: bool = False,
) -> tuple[nn.Module, dict]:
    """:func:`cached_model` for a ViT: built from ``model_cfg`` with the training seed, plus
    whatever the objective needs (``MODEL_SETUP``, e.g. the multi-exit baseline's heads)."""

    def build() -> nn.Module:
        model = build_vit(model_cfg, seed=train_cfg.seed)
        if train_cfg.objective in MODEL_SETUP:
            MODEL_SETUP[train_cfg.objective](model, seed=train_cfg.seed)
        return model

    return cached_model("vit", build, model_cfg, train_cfg, train_set, data_desc, device, progress, retrain)


def configs_from(settings: dict, data_info: dict, config_cls: type = ViTConfig,
                 seed: int = 0) -> tuple[object, TrainConfig]:
    """Split a flat settings dict into a ``config_cls`` model config and a :class:`TrainConfig`
    (:func:`split_settings`), the data set's fields from ``config_cls.data_fields(data_info)``."""
    return split_settings(settings, config_cls, config_cls.data_fields(data_info), seed=seed)


def vit_from_settings(settings: dict, seed: int = 0, device: str | torch.device = "auto",
                      progress: bool = True, retrain: bool = False) -> tuple[nn.Module, dict]:
    """The ViT that ``settings`` describe (``dataset``, ``n_train`` with 0 = all, ``augment``, model and
    optimisation keys), trained on its training split or loaded from the cache; returns ``(model, meta)``."""
    info = image_data.dataset_info(settings["dataset"])
    model_cfg, train_cfg = configs_from(settings, info, ViTConfig, seed=seed)
    limit = settings.get("n_train") or None
    desc = {"name": settings["dataset"], "split": "train", "limit": limit, "seed": seed,
            "augment": bool(settings.get("augment", False))}

    def load():
        return image_data.image_dataset(settings["dataset"], "train", limit=limit, seed=seed, augment=desc["augment"])

    return cached_vit(model_cfg, train_cfg, load, desc, device=device, progress=progress, retrain=retrain)


# ----------------------------------------------------------------------------- several models at once


def split_settings(settings: dict, config_cls: type, from_data: dict, seed: int = 0) -> tuple[object, TrainConfig]:
    """A flat settings dict (:mod:`layersim.notebook.presets`) split into ``config_cls`` and a :class:`TrainConfig`;
    ``from_data`` fills the fields the data set decides, other keys are ignored."""
    model_keys = {f.name for f in dataclasses.fields(config_cls)} - set(from_data)
    train_keys = {f.name for f in dataclasses.fields(TrainConfig)} - {"seed"}
    model_cfg = config_cls(**from_data, **{k: v for k, v in settings.items() if k in model_keys})
    train = {k: v for k, v in settings.items() if k in train_keys}
    if "milestones" in train:
        train["milestones"] = tuple(train["milestones"])
    return model_cfg, TrainConfig(seed=seed, **train)


def describe(name: str, meta: dict) -> str:
    """One line about a trained (or cached) model: objective, depth, data, parameters, time, key."""
    train, data_desc, model_cfg = meta["train"], meta["data"], meta["model"]
    images = data_desc.get("limit") or "all"
    where = " (from the cache)" if meta.get("from_cache") else ""
    return (f"{name}: {train['objective']}, depth {model_cfg.get('depth', '?')}, {images} {data_desc['name']} images "
            f"x {train['epochs']} epochs, {meta['n_params'] / 1e6:.2f}M parameters, trained "
            f"{meta['train_seconds']:.0f} s{where}; key {meta['key']}")


def train_models(specs: dict[str, dict], seed: int = 0, device: str | torch.device = "auto",
                 build: Callable[..., tuple[nn.Module, dict]] | None = None, verbose: bool = True,
                 **kwargs) -> tuple[dict[str, nn.Module], dict[str, dict]]:
    """Every model of ``specs`` (name -> settings), trained or loaded from the cache by ``build``
    (default :func:`vit_from_settings`), with one :func:`describe` line each. Returns
    ``(models, metas)``, both keyed by name."""
    build = vit_from_settings if build is None else build
    trained, metas = {}, {}
    for name, spec in specs.items():
        trained[name], metas[name] = build(spec, seed=seed, device=device, **kwargs)
        if verbose:
            print(describe(name, metas[name]))
    return trained, metas


def checkpoint_records(specs: dict[str, dict], metas: dict[str, dict], history: bool = False) -> dict[str, dict]:
    """What ``metrics.json`` records of each model: its settings, checkpoint key, training time,
    weights' sha256 (and the training loss per epoch with ``history``)."""
    out = {}
    for name, spec in specs.items():
        m = metas[name]
        out[name] = {"settings": spec, "checkpoint": m["key"], "train_seconds": m["train_seconds"],
                     "weights_sha256": m.get("weights_sha256")}
        if history:
            out[name]["history_loss"] = [h["loss"] for h in m["history"]]
    return out
