"""Timing of the batched layer-matrix paths against L^2 pairwise calls.

Run: ``python benchmarks/bench_similarity.py [--n 2000 --d 384 --layers 13]``.
Prints seconds per call and the largest difference between the batched and the pairwise
matrices (should be ~1e-15).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from layersim import similarity as S


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def pairwise_matrix(layers, metric):
    f = {"cka": S.linear_cka, "debiased_cka": lambda a, b: S.linear_cka(a, b, debiased=True),
         "cos": S.cosine}[metric]
    L = len(layers)
    return np.array([[f(layers[i], layers[j]) for j in range(L)] for i in range(L)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--no-pairwise", action="store_true", help="skip the slow L^2 baseline")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    h = rng.standard_normal((args.n, args.d)).astype(np.float32)
    layers = []
    for _ in range(args.layers):
        h = h + 0.3 * np.tanh(h @ rng.standard_normal((args.d, args.d)).astype(np.float32)
                              / np.sqrt(args.d))
        layers.append(h + 100.0)  # a shared offset, as in real residual streams
    stacked = np.stack(layers)
    print(f"L={args.layers} N={args.n} d={args.d} (float32 input, offset 100)")
    for metric in S.METRICS:
        forms = ["auto"] if metric == "cos" else ["feature", "gram"]
        for form in forms:
            M, t = timed(S.layer_matrix, stacked, metric, form=form)
            print(f"  layer_matrix {metric:13s} form={form:8s} {t:7.3f} s")
        if not args.no_pairwise:
            P, tp = timed(pairwise_matrix, layers, metric)
            print(f"  pairwise     {metric:13s}               {tp:7.3f} s  "
                  f"max|diff|={np.abs(M - P).max():.1e}")
    acc = S.StreamingCKA()
    t0 = time.perf_counter()
    for a in range(0, args.n, 256):
        acc.update(stacked[:, a:a + 256])
    Ms = acc.result()
    print(f"  StreamingCKA (batches of 256)             {time.perf_counter() - t0:7.3f} s  "
          f"max|diff|={np.abs(Ms - S.layer_matrix(stacked)).max():.1e}")


if __name__ == "__main__":
    main()
