"""Key rows of the CKA benchmark, interleaved: fair ratios on a shared, loaded machine.

``python benchmarks/key_rows.py [--rounds 3]`` times, for each shape, in rounds:
the floor (one float64 ``Z^T Z``), ``layer_matrix(X, "cka")`` (auto form) and a slice of
the naive per-pair Gram loop, one after the other, so that all three see the same load.
It reports best and median wall seconds and the CPU seconds of each, and the ratios
(naive / layer_matrix, layer_matrix / floor) both by wall and by CPU time.  The naive
total is the sum over all pairs (3000) or the mean over the timed pairs × 78 (10000).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from layersim.measures import similarity as S
from layersim.tools.bench import (ResidualStream, centred_stack, floor_product, loadavg, naive_baseline,
                                  reference_from_product)


def clock(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="3000x384,10000x768")
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs-per-round", type=int, default=2,
                    help="naive pairs per round when not all pairs are timed")
    ap.add_argument("--all-pairs-max-n", type=int, default=3000)
    args = ap.parse_args()
    print("| shape | method | best s | median s | CPU s (best run) | runs |")
    print("|---|---|---:|---:|---:|---:|")
    summary = []
    for shp in args.shapes.split(","):
        n, d = (int(v) for v in shp.split("x"))
        L = args.layers
        X = ResidualStream(d, L, seed=0).batch(n)
        Z = centred_stack(X)
        pairs = [(i, j) for i in range(L) for j in range(i + 1, L)]
        order = [pairs[q] for q in np.random.default_rng(0).permutation(len(pairs))]
        full = n <= args.all_pairs_max_n
        per_round = -(-len(pairs) // args.rounds) if full else args.pairs_per_round
        res = {"floor": [], "auto": []}
        naive_t, naive_c, done, ref, M = [], [], [], None, None
        load0 = loadavg()
        for r in range(args.rounds):
            C, t, c = clock(lambda: floor_product(Z))
            res["floor"].append((t, c))
            if ref is None:
                ref = reference_from_product(C, L)
            del C
            M, t, c = clock(lambda: S.layer_matrix(X, "cka"))
            res["auto"].append((t, c))
            for i, j in order[r * per_round:(r + 1) * per_round]:
                v, t, c = clock(lambda: naive_baseline(X[i], X[j]))
                assert abs(v - ref[i, j]) < 1e-10
                naive_t.append(t)
                naive_c.append(c)
                done.append((i, j))
        assert np.abs(M - ref).max() < 1e-12
        k = len(pairs) / len(done)
        nt, nc = float(np.sum(naive_t)) * k, float(np.sum(naive_c)) * k
        shape = f"{L}×{n}×{d}"
        best = {}
        for name, label in (("floor", "(b) floor: one float64 Z^T Z"),
                            ("auto", f"layer_matrix cka, auto ({S._choose_form(n, [d] * L)})")):
            ts = sorted(res[name])
            best[name] = ts[0]
            print(f"| {shape} | {label} | {ts[0][0]:.2f} | {np.median([t for t, _ in ts]):.2f} "
                  f"| {ts[0][1]:.2f} | {len(ts)} |")
        how = (f"all {len(pairs)} pairs" if len(done) == len(pairs)
               else f"{len(done)} pairs × {k:.1f}")
        print(f"| {shape} | (a) naive, {how} | {nt:.2f} | — | {nc:.2f} | 1 |")
        summary.append(
            f"- {shape} (load {load0} → {loadavg()}): naive / layer_matrix = "
            f"{nt / best['auto'][0]:.1f}× by wall, {nc / best['auto'][1]:.1f}× by CPU; "
            f"layer_matrix / floor = {best['auto'][0] / best['floor'][0]:.2f}× by wall, "
            f"{best['auto'][1] / best['floor'][1]:.2f}× by CPU.")
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
