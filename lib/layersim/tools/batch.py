"""Notebooks side by side on Ray: ``python -m layersim.tools.runner --jobs N`` (or ``--address ADDR``).

The runner's serial loop, spread over a Ray instance: each notebook is one Ray task that does what the serial
loop does for it (the runner hands :func:`run` its ``batch_work``: the notebook's seeds and its own run, where
its ``plan`` says), so the outputs land exactly where a serial run writes them and committed results are protected
the same way (a notebook's run is published only when it succeeded).

- ``--jobs N`` alone starts a local Ray instance of ``N`` CPUs for the batch and stops it at the end;
  ``--address`` (``auto``, ``host:port``, ``ray://host:port``) submits to an existing cluster instead, whose
  nodes must see the repository and the data cache at the same path (a shared file system) and hold the same
  environment; ``--jobs`` then caps how many notebooks run at once.
- What a notebook needs is declared once, in :data:`NEEDS` (:class:`Needs`: CPUs, a GPU at the paper scale,
  memory); Ray places it on a node with those free. Its BLAS and torch threads are set from its CPU share
  (``OMP_NUM_THREADS`` and friends in its kernel's environment): several processes each using every core slowed
  small models 10-25x on two cores.
- Notebooks that share a trained model (the tracing ViTs are read by t01-t06 and the redundancy notebooks) do not
  train it twice: the first to need it claims the checkpoint and trains it, the others wait on the claim and load
  it (:func:`layersim.train.training.cached_model`, :func:`layersim.core.paths.claim`). So that a reader does not
  hold a CPU while it waits, the groups of :data:`SHARED_MODELS` are also scheduled (:func:`schedule`): the first
  notebook of a group in the batch (its trainer in a serial run) starts first, the group's other notebooks only
  after it ended, and notebooks that share nothing fill the CPUs meanwhile.
- One notebook's failure, or the death of the worker running it, is reported with its error and the others go on
  (no retries: a notebook writes files). The driver prints a line per finished notebook and a summary table
  (notebook, node, seconds, outcome) at the end.

What a dead worker leaves: the committed notebook is not replaced (that happens only after a run succeeded), every
file is whole (the library's writers write to a temporary name and rename), and a shared checkpoint it was training
is neither saved nor locked (its claim dies with it). Its executed copy under ``runs/`` stops where it died; in a
run that replaces the committed results its ``figures/<paper>/<stem>/`` holds what it wrote before dying (the
folder is cleared when a run starts) until the runner puts back the outputs it kept aside before the run
(``runner.snapshot`` / ``restore``, on the driver, which also does it for a failed notebook and for a batch
interrupted before the notebook ended).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from layersim.core.paths import repo_root


@dataclass(frozen=True)
class Needs:
    """What one notebook needs to run: ``cpus`` (also its BLAS/torch threads), ``gpus`` at the paper scale (none at
    the others: their models are small enough for the CPU), and ``memory_gb`` of RAM (a Ray placement hint)."""

    cpus: int = 1
    gpus: float = 0.0
    memory_gb: float = 2.0


#: What each notebook needs (stem -> :class:`Needs`); a notebook not listed needs ``Needs()``: one CPU, no GPU,
#: 2 GB. At the paper scale the notebooks that train or read large models take one GPU each; the peaks of RAM
#: are those of ``benchmarks/PAPER_SCALE.md`` (r03/r04 hold 36 GB of images, a08 50 GB of features).
NEEDS: dict[str, Needs] = {
    **{stem: Needs(gpus=1.0, memory_gb=8) for stem in (
        "t01_cos_vs_cka", "t02_saturation_events", "t03_aligned_training", "t04_early_exit", "t06_transfer",
        "t08_llm_saturation", "t09_aligned_bert", "t10_aligned_gpt", "t11_clip", "a09_source_similarity",
        "a10_negative_transfer", "a11_pretrained_text", "r01_block_similarity", "r02_block_redundancy",
        "r05_llm_redundancy", "c01_cka_structure", "c02_truncation", "c03_layer_skipping")},
    "a08_pretrained_cnn": Needs(gpus=1.0, memory_gb=64),
    "r03_rba_classification": Needs(gpus=1.0, memory_gb=100),
    "r04_skip_vs_approx": Needs(gpus=1.0, memory_gb=100),
}

#: Notebooks that read the same trained models through the checkpoint cache (a description -> the notebooks).
#: In a batch the first of a group (in the batch's order, the serial runner's) trains them and the others start after
#: it ended (:func:`schedule`). A reader missing here is still correct (the checkpoint's claim makes it wait or
#: train), only idle while it waits.
SHARED_MODELS: dict[str, tuple[str, ...]] = {
    "the tracing ViTs, standard and aligned (presets.tracing_vit)": (
        "r01_block_similarity", "r02_block_redundancy", "r03_rba_classification", "r04_skip_vs_approx",
        "r05_llm_redundancy", "t01_cos_vs_cka", "t02_saturation_events", "t03_aligned_training", "t04_early_exit",
        "t06_transfer"),
    "MiniLM-L6 fine-tuned on the Austen tasks (presets.CLUSTERS_FINETUNE)": (
        "c01_cka_structure", "c02_truncation", "c03_layer_skipping", "t09_aligned_bert"),
    "the clothing network of a09, a10's None network (transfer.none_network)": (
        "a09_source_similarity", "a10_negative_transfer"),
}


def schedule(notebooks: Sequence[Path]) -> tuple[list[Path], dict[Path, set[Path]]]:
    """The order in which a batch submits ``notebooks`` and, for each, the notebooks it waits for.

    For every group of :data:`SHARED_MODELS` with members in the batch, its first member (in ``notebooks``' order)
    trains the models: it goes to the front of the queue, and the group's other members wait for it to end. The
    rest keep their order. Notebooks outside every group wait for nothing."""
    trainers: list[Path] = []
    waits: dict[Path, set[Path]] = {nb: set() for nb in notebooks}
    for members in SHARED_MODELS.values():
        present = [nb for nb in notebooks if nb.stem in members]
        if not present:
            continue
        trainer = present[0]
        if trainer not in trainers:
            trainers.append(trainer)
        for nb in present[1:]:
            waits[nb].add(trainer)
    trainers.sort(key=list(notebooks).index)
    order = trainers + [nb for nb in notebooks if nb not in trainers]
    return order, waits


#: the thread-count variables a notebook's kernel gets from its CPU share
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def resources(stem: str, scale: str, cluster: Mapping[str, float] | None = None) -> dict:
    """The Ray task options of notebook ``stem`` at ``scale``: ``num_cpus``, ``num_gpus`` (only at the paper scale)
    and ``memory`` (bytes; only at the paper scale, where it matters), each at most what ``cluster`` (Ray's
    ``cluster_resources()``) has in all, so that no notebook waits for resources that do not exist (a paper-scale
    notebook on a cluster without GPUs runs on the CPU, as it would serially)."""
    need = NEEDS.get(stem, Needs())
    cluster = cluster or {}
    out = {"num_cpus": max(1, min(need.cpus, int(cluster.get("CPU", need.cpus)))),
           "num_gpus": min(need.gpus, cluster.get("GPU", 0.0)) if scale == "paper" else 0}
    if scale == "paper":
        out["memory"] = int(min(need.memory_gb * 2**30, cluster.get("memory", float("inf"))))
    return out


def _run_on_worker(work: Callable[..., dict], nb: str, cpus: int, root: str) -> dict:
    """One notebook on a Ray worker: its threads set from ``cpus``, then ``work(notebook, say)``. Returns what
    ``work`` returned, with the node's name and the lines ``work`` said."""
    import socket

    for var in THREAD_VARIABLES:
        os.environ[var] = str(cpus)
    os.environ["LAYERSIM_ROOT"] = root
    lines: list[str] = []
    got = work(Path(nb), lines.append)
    return {**got, "node": socket.gethostname(), "lines": lines}


def run(notebooks: Sequence[Path], work: Callable[..., dict], scale: str, jobs: int | None = None,
        address: str | None = None, say: Callable[[str], None] | None = None,
        on_done: Callable[[Path, dict], None] | None = None) -> list[dict]:
    """Run ``work(notebook, say) -> {"ok", "seconds", "error", "claims"}`` for each of ``notebooks`` as a Ray task
    (module docstring; the runner's work is :func:`layersim.tools.runner.batch_work`) and return the results, each
    with its ``node``, in the order given. ``jobs``: the CPUs of the local instance (or, with ``address``, the most
    notebooks at once). ``on_done(notebook, result)`` is called on the driver as each notebook ends."""
    import ray

    say = say or (lambda line: print(line, flush=True))
    root = str(repo_root())
    started_here = address is None
    if started_here:
        ray.init(address="local", num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"LAYERSIM_ROOT": root}})
    else:
        ray.init(address=address, log_to_driver=False)
    try:
        cluster = ray.cluster_resources()
        limit = jobs or len(notebooks)
        task = ray.remote(_run_on_worker)
        names = {nb: nb.relative_to(Path(root) / "notebooks").with_suffix("").as_posix() for nb in notebooks}
        say(f"{len(notebooks)} notebooks on Ray ({'a local instance' if started_here else address}: "
            f"{int(cluster.get('CPU', 0))} CPUs, {int(cluster.get('GPU', 0))} GPUs), at most {limit} at once")
        pending: dict = {}
        queue, waits = schedule(notebooks)
        results: dict[Path, dict] = {}
        t0 = time.perf_counter()
        while queue or pending:
            while queue and len(pending) < limit:
                ready = [nb for nb in queue if waits[nb] <= results.keys()]
                if not ready and pending:
                    break  # every queued notebook waits for a trainer still running
                nb = (ready or queue)[0]
                queue.remove(nb)
                opts = resources(nb.stem, scale, cluster)
                ref = task.options(max_retries=0, **opts).remote(work, str(nb), opts["num_cpus"], root)
                pending[ref] = (nb, time.perf_counter())
                say(f"[started] {names[nb]} (scale={scale}, {opts['num_cpus']} CPU"
                    f"{', 1 GPU' if opts['num_gpus'] else ''})")
            done, _ = ray.wait(list(pending), num_returns=1)
            nb, t_start = pending.pop(done[0])
            try:
                got = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - a task error or a dead worker: reported, the others go on
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                got = {"ok": False, "seconds": time.perf_counter() - t_start, "error": f"{type(exc).__name__}: {first}",
                       "claims": "", "node": "(lost)", "lines": []}
            results[nb] = got
            if on_done is not None:
                on_done(nb, got)
            for line in got["lines"]:
                say(line)
            status = "ok" if got["ok"] else f"FAILED at {got['error']}"
            say(f"[{len(results)}/{len(notebooks)}] {names[nb]}: {status} ({got['seconds']:.1f} s on {got['node']})")
            if got["claims"]:
                say(f"    {got['claims']}")
        say("\n| notebook | node | seconds | outcome |\n|---|---|---:|---|")
        for nb in notebooks:
            r = results[nb]
            say(f"| {names[nb]} | {r['node']} | {r['seconds']:.1f} | {'ok' if r['ok'] else 'failed: ' + r['error']} |")
        say(f"\nwall time of the batch: {time.perf_counter() - t0:.0f} s")
        return [results[nb] for nb in notebooks]
    finally:
        ray.shutdown()
