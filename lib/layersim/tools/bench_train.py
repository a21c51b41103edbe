"""Training throughput of the paper-scale tracing ViT: ``python -m layersim.tools.bench train``.

Training images per second of :func:`layersim.train.training.train_classifier` on the current device, for the
tracing paper's DeiT-S on CIFAR-10 (``TRACING_VIT["paper"]``) with random images of that shape, for every
combination of objective (``ce``; ``aligned``, eq. 5), precision (``fp32``; ``bf16`` on CUDA) and augmentation
(``none``, ``per-image``, ``batch``): :func:`measure`, :func:`run`. :func:`crossover` times models on the CPU and
the GPU to check ``device="auto"``'s threshold (see docs/modules.md, `layersim.tools.bench_train`).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time

import torch
from torch.utils.data import Dataset

from layersim.core import device as placement, machine
from layersim.inputs import image_data
from layersim.inputs.augment import Augmentation
from layersim.nets.models import resolve_device
from layersim.notebook.presets import TRACING_VIT
from layersim.train import training

OBJECTIVES = ("ce", "aligned")
PRECISIONS = ("fp32", "bf16")
AUGMENTATIONS = ("none", "per-image", "batch")


class RandomImages(Dataset):
    """``n`` random normalised images ``[C, S, S]`` with labels in ``0..classes-1`` (seeded), with the
    ``augment`` / ``defer_augment`` interface of :class:`layersim.inputs.image_data.ImageDataset`."""

    def __init__(self, n: int, size: int = 32, channels: int = 3, classes: int = 10, seed: int = 0,
                 augment: Augmentation | None = None):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, channels, size, size, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.augment, self.defer_augment = augment, False

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = self.x[i]
        if self.augment is not None and not self.defer_augment:
            x = self.augment(x)
        return x, int(self.y[i])


def vit_settings(quick: bool = False) -> dict:
    """The paper-scale tracing ViT's settings, or (``quick``) a two-block width-32 one for tests."""
    s = dict(TRACING_VIT["paper"])
    if quick:
        s.update(depth=2, embed_dim=32, num_heads=2, mlp_ratio=2.0)
    return s


def measure(objective: str, precision: str, augmentation: str, steps: int, batch: int, device: torch.device,
            quick: bool = False, workers: int | None = None, compile: bool | str | None = False) -> float:
    """Training images per second of one combination, timed over the second of two epochs; ValueError for an unknown
    augmentation or a precision the device lacks."""
    if augmentation not in AUGMENTATIONS:
        raise ValueError(f"augmentation must be one of {AUGMENTATIONS}, got {augmentation!r}")
    s = vit_settings(quick)
    info = image_data.dataset_info(s["dataset"])
    model_cfg, _ = training.configs_from(s, info)
    cfg = training.TrainConfig(epochs=2, batch_size=batch, lr=s["lr"], weight_decay=s["weight_decay"],
                               schedule="constant", objective=objective)
    aug = None if augmentation == "none" else Augmentation(info["image_size"])
    images = RandomImages(steps * batch, info["image_size"], info["channels"], info["classes"], augment=aug)
    model = training.build_vit(model_cfg)
    history = training.train_classifier(model, images, cfg, device=device, progress=False, precision=precision,
                                        workers=workers, augment_on_device=augmentation == "batch", compile=compile)
    return steps * batch / history[1]["seconds"]


def device_name(device: torch.device) -> str:
    """The device in words: the GPU's name, or the CPU's model and thread count."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    return f"CPU: {machine.cpu_model()}, {torch.get_num_threads()} torch threads"


def run(steps: int, batch: int, device: torch.device, objectives=OBJECTIVES, precisions=PRECISIONS,
        augmentations=AUGMENTATIONS, quick: bool = False, workers: int | None = None, log=print,
        compile: bool | str | None = False) -> dict:
    """Every combination: ``{(objective, precision, augmentation): images/s, or None where the device lacks the
    precision}``; prints the table with the bf16/fp32 and augmentation/none ratios."""
    results: dict[tuple[str, str, str], float | None] = {}
    for obj, prec, aug in itertools.product(objectives, precisions, augmentations):
        try:
            training.resolve_precision(prec, device)
        except ValueError:
            results[obj, prec, aug] = None
            continue
        results[obj, prec, aug] = measure(obj, prec, aug, steps, batch, device, quick=quick, workers=workers,
                                          compile=compile)
        log(f"  {obj:8s} {prec:5s} {aug:10s} {results[obj, prec, aug]:10.1f} images/s")
    log("")
    log(f"| objective | precision | {' | '.join(f'augmentation: {a}' for a in augmentations)} |")
    log("|---|---|" + "---:|" * len(augmentations))
    for obj, prec in itertools.product(objectives, precisions):
        cells = []
        for aug in augmentations:
            v = results[obj, prec, aug]
            if v is None:
                cells.append("n/a")
                continue
            base = results.get((obj, prec, "none"))
            ratio = f" ({v / base:.2f}×)" if base and aug != "none" else ""
            cells.append(f"{v:,.0f}{ratio}")
        log(f"| {obj} | {prec} | {' | '.join(cells)} |")
    for obj in objectives:
        a, b = results.get((obj, "fp32", "none")), results.get((obj, "bf16", "none"))
        if a and b:
            log(f"- {obj}: bf16 / fp32 = {b / a:.2f}× (no augmentation)")
    return results


# ----------------------------------------------------------------------------- device="auto"'s threshold


def ladder(quick: bool = False) -> list[tuple[str, torch.nn.Module, int, tuple[int, ...]]]:
    """Models of growing training work around :data:`layersim.core.device.GPU_MIN_WORK`, as ``(label, model, batch
    size, input shape)``: MLPs of several widths and the tracing notebooks' default MLP and ViT."""
    from layersim.train import mlp

    widths = (16, 64) if quick else (16, 64, 128, 192, 256, 512, 1024)
    out = [(f"MLP 3 x {w}, batch 64", mlp.MLP(mlp.MLPConfig(width=w, depth=3)), 64, (784,)) for w in widths]
    if not quick:
        out.append(("MLP 9 x 256, batch 128 (t05, default)", mlp.MLP(mlp.MLPConfig()), 128, (784,)))
        s = dict(TRACING_VIT["default"])
        cfg, _ = training.configs_from(s, image_data.dataset_info(s["dataset"]))
        out.append(("tracing ViT (default), batch 128", training.build_vit(cfg), 128,
                    (cfg.in_chans, cfg.img_size, cfg.img_size)))
    return out


def step_seconds(model: torch.nn.Module, batch: int, shape: tuple[int, ...], device: torch.device,
                 steps: int = 20, warmup: int = 3) -> float:
    """Seconds per AdamW training step (cross-entropy on random inputs of ``shape``) of ``model`` on ``device``."""
    model = model.to(device).train()
    x, y = torch.randn(batch, *shape, device=device), torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return timed(step, device, steps, warmup)


def timed(step, device: torch.device, steps: int, warmup: int) -> float:
    """Seconds per ``step()`` call: the mean of ``steps`` calls after ``warmup`` ones, CUDA synchronised before the
    clock starts and stops."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / steps


def crossover(quick: bool = False, steps: int = 20, log=print) -> list[dict]:
    """Time each :func:`ladder` model on the CPU and the GPU (if any) beside ``device="auto"``'s pick, which should
    never be more than 10 % slower than the faster device (the check of :data:`layersim.core.device.GPU_MIN_WORK`)."""
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    log(f"| model | work (params x batch) | {' | '.join(f'{d.type} ms/step' for d in devices)} | auto picks | "
        f"auto within 10 % of the faster |")
    log("|---|---:|" + "---:|" * len(devices) + "---|---|")
    rows = []
    for label, model, batch, shape in ladder(quick):
        work = placement.training_work(model, batch)
        times = {d.type: step_seconds(model, batch, shape, d, steps=steps) for d in devices}
        pick = placement.resolve_device("auto", work=work).type
        ok = times[pick] <= 1.1 * min(times.values())
        rows.append({"model": label, "work": work, "ms": {k: 1000 * v for k, v in times.items()}, "auto": pick,
                     "ok": ok})
        log(f"| {label} | {work:.2e} | {' | '.join(f'{1000 * times[d.type]:.2f}' for d in devices)} | {pick} | "
            f"{'yes' if ok else 'NO'} |")
    log(f"\n- GPU_MIN_WORK = {placement.GPU_MIN_WORK:.1e}; device: {device_name(devices[-1])}")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench train", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per measurement (default 40)")
    ap.add_argument("--batch", type=int, default=256, help="batch size (default 256, the paper's)")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES))
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--augmentations", default=",".join(AUGMENTATIONS))
    ap.add_argument("--workers", type=int, default=None, help="DataLoader workers on CUDA (default: cores - 1, at most 8)")
    ap.add_argument("--quick", action="store_true", help="a two-block ViT of width 32 (tests)")
    ap.add_argument("--compile", default=None, help="torch.compile the loss: 1 (inductor) or a backend's name")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be positive")
    for name, known in (("objectives", OBJECTIVES), ("precisions", PRECISIONS), ("augmentations", AUGMENTATIONS)):
        items = [x for x in getattr(args, name).split(",") if x]
        bad = [x for x in items if x not in known]
        if bad or not items:
            ap.error(f"--{name}: choose from {','.join(known)}, got {getattr(args, name)!r}")
        setattr(args, name, items)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dev = resolve_device(args.device)
    s = vit_settings(args.quick)
    print(f"## layersim.tools.bench train: {'quick ViT' if args.quick else 'paper-scale tracing ViT'} "
          f"(depth {s['depth']}, width {s['embed_dim']}, patches {s['patch_size']}, 32 x 32 x 3), batch {args.batch}, "
          f"{args.steps} timed steps per cell\n")
    print(f"- device: {device_name(dev)}; torch {torch.__version__}; Python {platform.python_version()}")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    compiled = True if args.compile == "1" else args.compile or False
    print(f"- torch.compile: {training.compile_backend(compiled) or 'off'}; float32 on CUDA: "
          f"{'TF32' if placement.float32_mode() == 'fast' else 'strict IEEE'}\n")
    run(args.steps, args.batch, dev, args.objectives, args.precisions, args.augmentations, quick=args.quick,
        workers=args.workers, compile=compiled)
    return 0


def device_main(argv: list[str] | None = None) -> int:
    """``python -m layersim.tools.bench device [--quick] [--steps N]``: :func:`crossover`."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench device",
                                 description="training step times on the CPU and the GPU beside device='auto''s pick")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per model and device (default 20)")
    ap.add_argument("--quick", action="store_true", help="two small MLPs only (tests)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be positive")
    print(f"## layersim.tools.bench device: where device='auto' trains ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    crossover(args.quick, args.steps)
    return 0
