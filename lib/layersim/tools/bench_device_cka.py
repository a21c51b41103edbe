"""The CKA matrix of hidden states on their device: ``python -m layersim.tools.bench device-cka``.

:func:`device_cka` times ``layer_matrix`` (linear CKA) of a float32 residual-stream stack made on the device
(:func:`device_layers`; the default shape is LLaMA-3.1-8B's width) against the floor of the form it picks, one
float64 product of the stacked centred layers on the same device, and checks the first samples against the CPU
(see docs/modules.md, `layersim.tools.bench_device_cka`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from layersim.measures import similarity as S
from layersim.nets.models import resolve_device
from layersim.tools import bench_args


def device_layers(n: int, d: int, L: int, device, seed: int = 0):
    """A :class:`layersim.tools.bench.ResidualStream`-like ``[L, n, d]`` float32 stack, made with torch directly on
    ``device``."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    off = 3.0 * torch.randn(d, generator=g, device=device)
    off[torch.randperm(d, generator=g, device=device)[:max(1, d // 128)]] = 100.0
    h = torch.randn(n, d, generator=g, device=device)
    out = torch.empty((L, n, d), device=device)
    out[0] = h + off
    for layer in range(1, L):
        W1, W2 = (torch.randn(d, d, generator=g, device=device) / d ** 0.5 for _ in range(2))
        h = h + 0.6 * torch.tanh(h @ W1) @ W2
        out[layer] = h + off * (1.0 + layer / L)
    return out


def device_cka(n: int, d: int, L: int, device: str = "auto", check_n: int = 2000, log=print) -> dict:
    """Time ``layer_matrix`` (linear CKA) of ``L`` layers of ``n x d`` float32 hidden states on ``device`` against the
    floor of the form it picks: one float64 product of the stacked centred layers (``Z Z^T`` for the Gram form,
    ``Z^T Z`` for the feature form). The first ``check_n`` samples are checked on the CPU. Returns ``{"seconds",
    "floor", "form", "maxdiff", "cka_last_first"}``."""
    import torch

    dev = resolve_device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    X = device_layers(n, d, L, dev)
    form = S._choose_form(n, [d] * L)
    sync()
    t0 = time.perf_counter()
    M = S.layer_matrix(X, "cka", device="auto" if dev.type == "cuda" else "torch")
    sync()
    t_lm = time.perf_counter() - t0
    Z = (X.to(torch.float64) - X.to(torch.float64).mean(1, keepdim=True)).permute(1, 0, 2).reshape(n, L * d)
    sync()
    t0 = time.perf_counter()
    F = Z @ Z.T if form == "gram" else Z.T @ Z
    sync()
    t_floor = time.perf_counter() - t0
    del Z, F
    k = min(check_n, n)
    ref = S.layer_matrix([x[:k].cpu().numpy() for x in X], "cka")
    sub = S.layer_matrix(X[:, :k], "cka", device="auto" if dev.type == "cuda" else "torch")
    diff = float(np.abs(sub - ref).max())
    log(f"| {L} x {n} x {d} | {dev} | {form} | {t_lm:.2f} | {t_floor:.2f} | {t_lm / t_floor:.2f} | {diff:.1e} "
        f"(first {k} samples) |")
    return {"seconds": t_lm, "floor": t_floor, "form": form, "maxdiff": diff, "cka_last_first": float(M[0, -1])}


def main(argv: list[str] | None = None) -> int:
    """``python -m layersim.tools.bench device-cka [--shape NxD] [--layers L] [--device D]``."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench device-cka",
                                 description="linear CKA of hidden states on their device vs one float64 GEMM")
    ap.add_argument("--shape", type=bench_args.shapes, default="10000x4096",
                    help="NxD (default: LLaMA-3.1-8B's width)")
    ap.add_argument("--layers", type=bench_args.int_at_least(2), default=33)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--check-n", type=bench_args.int_at_least(4), default=2000)
    args = ap.parse_args(argv)
    print("| layers x N x d | device | form | layer_matrix s | one float64 GEMM s | ratio | max diff to CPU |")
    print("|---|---|---|---:|---:|---:|---|")
    for n, d in args.shape:
        device_cka(n, d, args.layers, args.device, args.check_n)
    return 0
