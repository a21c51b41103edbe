"""Benchmark of the library's all-pairs linear-CKA matrix: ``python -m layersim.tools.bench``.

On a random residual stream (:class:`ResidualStream`) of each ``--shapes``, it times ``layer_matrix(..., "cka")`` in
each form, ``StreamingCKA`` and the minibatch estimator against two baselines written here on purpose, the naive
loop of Gram pairs (:func:`naive_baseline`) and the floor (one float64 ``Z^T Z`` of the stacked centred layers, whose
blocks give the exact reference, independent of the library), and ``torch_cka`` if importable, with peak memory and
the largest difference to the reference; then checks that streaming memory does not grow with N. Other benchmarks:
``train``, ``device`` (:mod:`layersim.tools.bench_train`), ``device-cka`` (:mod:`layersim.tools.bench_device_cka`),
``lens`` and ``paper`` (see docs/modules.md, `layersim.tools.bench`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from layersim.core import machine
from layersim.core.machine import loadavg
from layersim.measures import similarity as S
from layersim.tools import bench_args, bench_device_cka, bench_lens, bench_train

MiB = 1 << 20


# --------------------------------------------------------------------------------------
# data: a residual stream with a shared offset, float32 as models give it
# --------------------------------------------------------------------------------------
class ResidualStream:
    """Random float32 residual-stream layer outputs ``h_{l+1} = h_l + f_l(h_l)`` (tracing eq. 1), with ``f_l`` a random
    tanh MLP, plus an offset that grows with depth and has a few massive features. :meth:`batch` draws fresh rows."""

    def __init__(self, d: int, n_layers: int, seed: int = 0, step: float = 0.6):
        rng = np.random.default_rng(seed)
        self.d, self.L, self.step = d, n_layers, step
        self.W1 = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
                   for _ in range(n_layers - 1)]
        self.W2 = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
                   for _ in range(n_layers - 1)]
        off = 3.0 * rng.standard_normal(d)
        off[rng.choice(d, size=max(1, d // 128), replace=False)] = 100.0
        self.offset = off.astype(np.float32)
        self._rng = np.random.default_rng(seed + 1)

    def batch(self, n: int) -> np.ndarray:
        """Fresh ``[L, n, d]`` float32 layer outputs."""
        h = self._rng.standard_normal((n, self.d), dtype=np.float32)
        out = np.empty((self.L, n, self.d), dtype=np.float32)
        out[0] = h + self.offset
        for layer in range(1, self.L):
            h += self.step * (np.tanh(h @ self.W1[layer - 1]) @ self.W2[layer - 1])
            out[layer] = h + self.offset * (1.0 + layer / self.L)
        return out


# --------------------------------------------------------------------------------------
# the two baselines and the reference: written here, apart from the library, since the library is measured
# and checked against them
# --------------------------------------------------------------------------------------
def centred_stack(X: np.ndarray) -> np.ndarray:
    """``Z = [X_1 - mean, ..., X_L - mean]`` in float64, ``[N, L d]`` (the floor's input)."""
    L, n, d = X.shape
    Z = np.empty((n, L * d))
    for i in range(L):
        blk = Z[:, i * d:(i + 1) * d]
        blk[...] = X[i]
        blk -= blk.mean(axis=0)
    return Z


def floor_product(Z: np.ndarray) -> np.ndarray:
    """The floor: one float64 product of the stacked centred layers."""
    return Z.T @ Z


def reference_from_product(C: np.ndarray, L: int) -> np.ndarray:
    """Exact CKA from ``C = Z^T Z``: ``||C_ij||_F^2 / (||C_ii||_F ||C_jj||_F)``, block by block."""
    d = C.shape[0] // L
    T = np.empty((L, L))
    for i in range(L):
        for j in range(L):
            T[i, j] = np.sum(C[i * d:(i + 1) * d, j * d:(j + 1) * d] ** 2)
    dg = np.sqrt(np.diag(T))
    return T / np.outer(dg, dg)


def naive_baseline(Xi: np.ndarray, Xj: np.ndarray) -> float:
    """The naive baseline (a): CKA of one pair the textbook way, two N x N Gram matrices, double-centred, HSIC ratio
    (Kornblith et al. 2019, §3), with none of the library's checks or rescaling."""
    def centred_gram(X: np.ndarray) -> np.ndarray:
        X = X.astype(np.float64)
        K = X @ X.T
        m = K.mean(axis=0)
        K -= m[None, :]
        K -= m[:, None]
        K += m.mean()
        return K
    K = centred_gram(Xi)
    Lg = centred_gram(Xj)
    return float(np.vdot(K, Lg) / np.sqrt(np.vdot(K, K) * np.vdot(Lg, Lg)))


# --------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------
@dataclass
class Timing:
    """One method timed on one ``shape``: best wall ``seconds`` of ``k`` runs, the ``cpu`` seconds of that run, peak
    memory (``mem_kind``: tracemalloc or resident set), largest ``diff`` to the reference, and a ``note``."""

    shape: str
    method: str
    seconds: float
    cpu: float
    k: int
    peak_mib: float | None
    diff: float | None
    note: str = ""
    mem_kind: str = "traced"
    extra: dict = field(default_factory=dict)


class PeakRSS:
    """Peak growth of the resident set size over a block, sampled in a thread."""

    def __init__(self, every: float = 0.002):
        import psutil
        self._proc = psutil.Process()
        self.every = every
        self.peak = 0

    def __enter__(self):
        self._base = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss - self._base)
            time.sleep(self.every)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._proc.memory_info().rss - self._base)
        return False


def measure(fn: Callable[[], object], repeat: int, slow: float,
            memory: str = "traced") -> tuple[object, float, float, int, float | None]:
    """Best-of-k wall time, CPU time of that run, k, and peak MiB of the first run."""
    best, best_cpu, out, peak, k = np.inf, np.nan, None, None, 0
    while True:
        if k == 0 and memory == "traced":
            tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
        rss = PeakRSS() if (k == 0 and memory == "rss") else None
        if rss:
            rss.__enter__()
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        t, c = time.perf_counter() - t0, time.process_time() - c0
        if rss:
            rss.__exit__(None, None, None)
            peak = rss.peak / MiB
        if k == 0 and memory == "traced":
            peak = (tracemalloc.get_traced_memory()[1] - base) / MiB
            tracemalloc.stop()
        k += 1
        if t < best:
            best, best_cpu = t, c
        if k >= repeat or (k >= 1 and best >= slow):
            return out, best, best_cpu, k, peak


def maxdiff(M: np.ndarray, ref: np.ndarray, pairs=None) -> float:
    """Largest |M - ref| over all entries (or the given pairs); NaN if M has any NaN."""
    if pairs is None:
        return float(np.max(np.abs(np.asarray(M) - ref)))
    return float(max(abs(M[i, j] - ref[i, j]) for i, j in pairs))


# --------------------------------------------------------------------------------------
# torch_cka
# --------------------------------------------------------------------------------------
def run_torch_cka(X: np.ndarray, batch: int):
    """torch_cka.CKA on a dummy model replaying the layers; returns (matrix, version) or raises."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import torch_cka
    from importlib.metadata import version

    class Replay(torch.nn.Module):
        def __init__(self, h):
            super().__init__()
            self.register_buffer("h", h, persistent=False)

        def forward(self, idx):
            return self.h[idx]

    class Stack(torch.nn.Module):
        def __init__(self, H):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Replay(H[i]) for i in range(H.shape[0]))

        def forward(self, idx):
            for b in self.blocks:
                b(idx)
            return idx

    H = torch.from_numpy(X)
    names = [f"blocks.{i}" for i in range(X.shape[0])]
    loader = DataLoader(TensorDataset(torch.arange(X.shape[1])), batch_size=batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cka = torch_cka.CKA(Stack(H), Stack(H), "replay_a", "replay_b",
                            model1_layers=names, model2_layers=names)
        with torch.no_grad():
            try:
                cka.compare(loader)
            except AssertionError:  # "HSIC computation resulted in NANs"; matrix already set
                pass
    return cka.hsic_matrix.numpy().astype(np.float64), version("torch-cka")


# --------------------------------------------------------------------------------------
# one shape
# --------------------------------------------------------------------------------------
def bench_shape(n: int, d: int, L: int, args, log) -> tuple[list[Timing], dict]:
    shape = f"{L}×{n}×{d}"
    log(f"\n### {shape} (L × N × d), load average at start: {loadavg()}\n")
    t0 = time.perf_counter()
    X = ResidualStream(d, L, seed=args.seed).batch(n)
    log(f"- data: residual stream, float32, {X.nbytes / MiB:.0f} MiB, "
        f"generated in {time.perf_counter() - t0:.1f} s")
    rows: list[Timing] = []
    R, sl = args.repeat, args.slow
    only = set(args.only.split(",")) if args.only else None

    def want(name: str) -> bool:
        return only is None or name in only

    # floor: product only, then with centring
    Z = centred_stack(X)
    C, t, c, k, pk = measure(functools.partial(floor_product, Z), R, sl)
    ref = reference_from_product(C, L)
    del C
    rows.append(Timing(shape, "(b) floor: one float64 Z^T Z (centring excluded)", t, c, k, pk, 0.0))
    floor_t = t
    del Z

    def floor_centred():
        return floor_product(centred_stack(X))
    if want("floor_centred"):
        C, t, c, k, pk = measure(floor_centred, R, sl)
        rows.append(Timing(shape, "(b') floor incl. centring (float32 → float64, mean removed)",
                        t, c, k, pk, maxdiff(reference_from_product(C, L), ref)))
        del C

    # layer_matrix in its three forms
    auto_form = S._choose_form(n, [d] * L)
    for form in ("auto", "feature", "gram"):
        if not want(form):
            continue
        M, t, c, k, pk = measure(lambda: S.layer_matrix(X, "cka", form=form), R, sl)
        label = f"layer_matrix cka, form={form}" + (f" (picks {auto_form})" if form == "auto"
                                                     else "")
        rows.append(Timing(shape, label, t, c, k, pk, maxdiff(M, ref)))

    # StreamingCKA over minibatches of the same data
    def streaming():
        acc = S.StreamingCKA()
        for a in range(0, n, args.batch):
            acc.update(X[:, a:a + args.batch])
        return acc.result()
    if want("streaming"):
        M, t, c, k, pk = measure(streaming, R, sl)
        rows.append(Timing(shape, f"StreamingCKA (exact), batches of {args.batch}", t, c, k, pk,
                        maxdiff(M, ref)))

    # minibatch estimator (a different quantity; torch_cka computes the same estimator)
    def minibatch():
        return S.minibatch_cka_matrix(X[:, a:a + args.batch] for a in range(0, n, args.batch))
    info = {"shape": shape, "floor": floor_t, "auto_form": auto_form, "naive": None}
    if want("minibatch") or want("torch_cka"):
        Mmb, t, c, k, pk = measure(minibatch, R, sl)
        rows.append(Timing(shape, f"minibatch_cka_matrix (estimator ≠ CKA), batches of "
                        f"{args.batch}", t, c, k, pk, maxdiff(Mmb, ref)))

    # torch_cka (same data, same batches)
    if n <= args.torch_cka_max_n and not args.no_torch_cka and want("torch_cka"):
        try:
            os.environ.setdefault("TQDM_DISABLE", "1")
            import torch
            import torch_cka  # noqa: F401  (imported before timing)
            tth = torch.get_num_threads()
            (Mt, ver), t, c, k, pk = measure(lambda: run_torch_cka(X, args.batch), R, sl,
                                             memory="rss")
            nan = int(np.isnan(Mt).sum())
            rows.append(Timing(shape, f"torch_cka {ver} CKA.compare, batches of {args.batch} "
                            f"(float32, torch threads={tth})"
                            + (f" — {nan} of {Mt.size} entries NaN" if nan else ""),
                            t, c, k, pk, maxdiff(Mt, ref), mem_kind="rss"))
            info["torch_cka_vs_minibatch"] = maxdiff(Mt, Mmb)
            # the same on input centred beforehand (separates the offset from the formula)
            Xc = (X - X.mean(axis=1, keepdims=True, dtype=np.float64)).astype(np.float32)
            Mtc, _ = run_torch_cka(Xc, args.batch)
            info["torch_cka_centred_vs_minibatch"] = maxdiff(Mtc, Mmb)
            info["torch_cka_version"] = ver
        except ImportError as e:
            info["torch_cka"] = f"not importable ({e})"

    if want("naive"):
        bench_naive(X, ref, shape, rows, info, args)
    log(f"- load average at end: {loadavg()}")
    return rows, info


def bench_naive(X: np.ndarray, ref: np.ndarray, shape: str, rows: list[Timing], info: dict,
                args) -> None:
    """(a): one Gram pair per layer pair; a random sample of pairs if all would be too slow."""
    L = X.shape[0]
    pairs = [(i, j) for i in range(L) for j in range(i + 1, L)]
    rng = np.random.default_rng(args.seed)
    order = [pairs[q] for q in rng.permutation(len(pairs))]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    times, cpus, Mn, done = [], [], np.eye(L), []
    t_start = time.perf_counter()
    for i, j in order:
        c0, t0 = time.process_time(), time.perf_counter()
        Mn[i, j] = Mn[j, i] = naive_baseline(X[i], X[j])
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        done.append((i, j))
        if len(done) == 1:
            tracemalloc_peak = (tracemalloc.get_traced_memory()[1] - base) / MiB
            tracemalloc.stop()
        projected = np.mean(times) * len(pairs)
        spent = time.perf_counter() - t_start
        if projected > args.naive_budget and len(done) >= 3 and spent >= args.naive_sample:
            break
    if tracemalloc.is_tracing():
        tracemalloc.stop()
    full = len(done) == len(pairs)
    t_naive = float(np.sum(times)) if full else float(np.mean(times)) * len(pairs)
    c_naive = float(np.sum(cpus)) if full else float(np.mean(cpus)) * len(pairs)
    note = ("all pairs" if full else
            f"extrapolated: {len(done)} of {len(pairs)} pairs timed "
            f"({np.mean(times):.2f} s/pair ± {np.std(times):.2f}) × {len(pairs)}")
    rows.append(Timing(shape, "(a) naive: one N×N Gram pair per layer pair", t_naive, c_naive, 1,
                    tracemalloc_peak, maxdiff(Mn, ref, done), note=note))
    info["naive"] = t_naive
    info["naive_note"] = note


def stream_sweep(d: int, L: int, ns: list[int], args, log) -> list[tuple[int, float, float, float]]:
    """StreamingCKA time and tracemalloc peak for growing N, fixed batch; data made on the fly."""
    out = []
    for n in ns:
        src = ResidualStream(d, L, seed=args.seed)
        acc = S.StreamingCKA()
        t_upd = 0.0
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for a in range(0, n, args.batch):
            B = src.batch(min(args.batch, n - a))
            t0 = time.perf_counter()
            acc.update(B)
            t_upd += time.perf_counter() - t0
            del B
        t0 = time.perf_counter()
        acc.result()
        t_upd += time.perf_counter() - t0
        peak = (tracemalloc.get_traced_memory()[1] - base) / MiB
        tracemalloc.stop()
        state = (acc._Su.nbytes + acc._s.nbytes) / MiB
        out.append((n, t_upd, peak, state))
        log(f"  N={n}: {t_upd:.1f} s, peak {peak:.0f} MiB (state {state:.0f} MiB), "
            f"load {loadavg()}")
    return out


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------
def timing_table(rows: list[Timing], infos: dict) -> list[str]:
    """The results as Markdown table lines: each timing with its speed-up over the naive baseline and its ratio to the
    floor of its shape (``infos``), peak memory and largest difference to the reference."""
    out = ["| shape | method | seconds | CPU s | k | × vs naive | × vs floor | peak MiB "
           "| max \\|diff\\| vs reference |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        info = infos[r.shape]
        naive, floor = info["naive"], info["floor"]
        vs_naive = "—" if naive is None else f"{naive / r.seconds:.1f}×"
        mem = "—" if r.peak_mib is None else (
            f"{r.peak_mib:.0f}" if r.peak_mib >= 10 else f"{r.peak_mib:.1f}")
        mem += "†" if r.mem_kind == "rss" else ""
        diff = "—" if r.diff is None else f"{r.diff:.1e}"
        secs = f"{r.seconds:.2f}" + ("*" if r.note.startswith("extrapolated") else "")
        out.append(f"| {r.shape} | {r.method} | {secs} | {r.cpu:.2f} | {r.k} | "
                   f"{vs_naive} | {r.seconds / floor:.2f}× | {mem} | {diff} |")
    return out


# --------------------------------------------------------------------------------------
# command line: every argument is checked by argparse (usage error, exit code 2)
# --------------------------------------------------------------------------------------
ONLY_CHOICES = ("floor_centred", "auto", "feature", "gram", "streaming", "minibatch", "torch_cka",
                "naive")


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v >= 0:  # NaN fails too; inf is allowed (never stop early / never extrapolate)
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return v


def _stream_ns(text: str) -> list[int]:
    """``"3000,10000"`` -> ``[3000, 10000]`` (each N >= 2); ``""`` -> ``[]`` (no sweep)."""
    if not text.strip():
        return []
    out = []
    for item in filter(str.strip, text.split(",")):
        try:
            v = int(item)
        except ValueError:
            v = None
        if v is None or v < 2:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers N >= 2, or '' to skip the sweep, "
                f"got {item.strip()!r} in {text!r}")
        out.append(v)
    return out


def _only(text: str) -> str:
    items = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in items if v not in ONLY_CHOICES]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(map(repr, bad))}; choose a comma-separated subset of "
            f"{', '.join(ONLY_CHOICES)}")
    return ",".join(items)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, validated: any bad value is a usage error (exit code 2)."""
    ap = argparse.ArgumentParser(prog="python -m layersim.tools.bench",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", type=bench_args.shapes, default="3000x384,10000x768",
                    help="comma-separated NxD shapes, N >= 4, d >= 1 (default: 3000x384,10000x768)")
    ap.add_argument("--layers", type=bench_args.int_at_least(2), default=13, help="number of layers, >= 2")
    ap.add_argument("--batch", type=bench_args.int_at_least(4), default=512,
                    help="minibatch rows for streaming and the minibatch estimator, >= 4")
    ap.add_argument("--stream-n", type=_stream_ns, default="3000,10000,30000",
                    help="N values (>= 2) of the StreamingCKA memory sweep ('' to skip)")
    ap.add_argument("--stream-d", type=bench_args.int_at_least(1), default=None,
                    help="d of the sweep (default: that of the first shape)")
    ap.add_argument("--repeat", type=bench_args.int_at_least(1), default=2,
                    help="best of k for calls under --slow s")
    ap.add_argument("--slow", type=_seconds, default=20.0)
    ap.add_argument("--naive-budget", type=_seconds, default=180.0,
                    help="time all naive pairs only if projected under this many seconds")
    ap.add_argument("--naive-sample", type=_seconds, default=45.0,
                    help="otherwise time pairs for at least this many seconds, then extrapolate")
    ap.add_argument("--torch-cka-max-n", type=bench_args.int_at_least(0), default=3000)
    ap.add_argument("--no-torch-cka", action="store_true")
    ap.add_argument("--seed", type=bench_args.int_at_least(0), default=0)
    ap.add_argument("--only", type=_only, default="",
                    help=f"comma-separated subset of {','.join(ONLY_CHOICES)} "
                         "(the floor always runs: it is the reference)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny smoke run (shapes 400x16, sweep 400,800)")
    args = ap.parse_args(argv)
    if args.quick:
        args.shapes, args.stream_n, args.batch, args.layers = [(400, 16)], [400, 800], 128, 4
        args.torch_cka_max_n = 400
    # the minibatch estimator needs >= 4 rows in every batch, the last one included
    short = [n for n, _ in args.shapes if 0 < n % args.batch < 4]
    if short and (not args.only or {"minibatch", "torch_cka"} & set(args.only.split(","))):
        ap.error(f"argument --batch: N={short[0]} leaves a last batch of {short[0] % args.batch} "
                 f"rows; the minibatch estimator needs >= 4 (choose another --batch or N)")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:  # python -m layersim.tools.bench train: training throughput (layersim.tools.bench_train)
        return bench_train.main(argv[1:])
    if argv[:1] == ["device-cka"]:
        return bench_device_cka.main(argv[1:])
    if argv[:1] == ["lens"]:
        return bench_lens.main(argv[1:])
    if argv[:1] == ["paper"]:
        from layersim.tools import bench_paper

        return bench_paper.main(argv[1:])
    if argv[:1] == ["device"]:
        return bench_train.device_main(argv[1:])
    args = parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    log("## layersim.tools.bench: all-pairs linear CKA\n")
    for line in machine.describe():
        log(line)
    shapes = args.shapes
    rows, infos = [], {}
    for n, d in shapes:
        r, info = bench_shape(n, d, args.layers, args, log)
        rows += r
        infos[info["shape"]] = info

    log("\n### Results\n")
    for line in timing_table(rows, infos):
        log(line)
    log("\n`*` extrapolated from a sample of pairs (see notes); `†` peak growth of the resident "
        "set (torch allocations are invisible to tracemalloc); other memory: tracemalloc peak of "
        "the call.  seconds = best of k wall-clock runs, CPU s = process CPU time of that run.  "
        "Reference = exact float64 CKA read block by block off the floor's product.")
    log("\n### Notes and goals\n")
    ok_all = True
    for info in infos.values():
        sh = info["shape"]
        auto = next((r for r in rows if r.shape == sh and r.method.startswith(
            "layer_matrix cka, form=auto")), None)
        if auto is None or info["naive"] is None:
            log(f"- {sh}: goals not checked (layer_matrix auto or naive not run)")
            ok_all = False
            continue
        sp, fl = info["naive"] / auto.seconds, auto.seconds / info["floor"]
        ok = sp >= 5 and fl <= 3
        ok_all &= ok
        log(f"- {sh}: layer_matrix (auto → {info['auto_form']}) is {sp:.1f}× faster than "
            f"naive (goal ≥ 5×) and {fl:.2f}× the floor (goal ≤ 3×): "
            f"{'met' if ok else 'NOT met'}.  Naive: {info['naive_note']}.")
        if "torch_cka_version" in info:
            log(f"- {sh}: torch_cka {info['torch_cka_version']} computes Nguyen et al.'s "
                f"minibatch estimator from uncentred float32 Gram matrices; max |diff| to our "
                f"minibatch_cka_matrix on the same batches: "
                f"{info['torch_cka_vs_minibatch']:.1e} (on input centred beforehand: "
                f"{info['torch_cka_centred_vs_minibatch']:.1e}).")
        elif "torch_cka" in info:
            log(f"- {sh}: torch_cka {info['torch_cka']}")
    sweep_ns = args.stream_n
    if sweep_ns:
        d = args.stream_d or shapes[0][1]
        log(f"\n### StreamingCKA memory vs N ({args.layers} layers × d={d}, batches of "
            f"{args.batch}, generated on the fly)\n")
        sw = stream_sweep(d, args.layers, sweep_ns, args, log)
        log("\n| N | seconds (update + result) | peak MiB (tracemalloc) | state MiB |")
        log("|---:|---:|---:|---:|")
        for n, t, pk, st in sw:
            log(f"| {n} | {t:.2f} | {pk:.0f} | {st:.0f} |")
        flat = sw[-1][2] <= 1.05 * sw[0][2] + 1
        ok_all &= flat
        log(f"\n- streaming peak memory at N={sw[-1][0]} is {sw[-1][2] / sw[0][2]:.2f}× that at "
            f"N={sw[0][0]}: {'flat' if flat else 'GROWS'} (goal: does not grow with N).")
    log(f"\n- load average at end: {loadavg()}")
    log(f"- all goals met: {ok_all}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
