"""Notebooks side by side on Ray: ``python -m layersim.tools.runner --jobs N`` (or ``--address ADDR``).

Each notebook is one Ray task that does what the runner's serial loop does for it
(:func:`layersim.tools.runner.batch_work`), so its outputs land where a serial run writes them and committed results
are replaced only by a notebook that succeeded. This module holds what each notebook needs (:data:`NEEDS`,
:func:`resources`), the notebooks that share a trained model and the order that follows (:data:`SHARED_MODELS`,
:func:`schedule`), the check of a cluster's address (:func:`check_address`) and the driver (:func:`run`): a failed
notebook or a dead worker is reported and the others go on (see docs/modules.md, `layersim.tools.batch`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from layersim.core.paths import repo_root
from layersim.tools import committed


@dataclass(frozen=True)
class Needs:
    """What a notebook needs: ``cpus`` (also its BLAS/torch threads), ``gpus`` at the paper scale and ``memory_gb`` of
    RAM (a Ray placement hint)."""

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
    """The order in which a batch submits ``notebooks``, and the notebooks each one waits for: the first member in the
    batch of each :data:`SHARED_MODELS` group goes first and trains, the group's others wait for it, the rest keep
    their order."""
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
    """Ray task options of notebook ``stem`` at ``scale``: ``num_cpus``, ``num_gpus`` (0 below the paper scale) and, at
    the paper scale, ``memory`` (bytes), each capped at ``cluster``'s total (``ray.cluster_resources()``)."""
    need = NEEDS.get(stem, Needs())
    cluster = cluster or {}
    out = {"num_cpus": max(1, min(need.cpus, int(cluster.get("CPU", need.cpus)))),
           "num_gpus": min(need.gpus, cluster.get("GPU", 0.0)) if scale == "paper" else 0}
    if scale == "paper":
        out["memory"] = int(min(need.memory_gb * 2**30, cluster.get("memory", float("inf"))))
    return out


#: how long :func:`check_address` waits for a TCP connection to a cluster's address (seconds)
CONNECT_TIMEOUT = 3.0
#: ``host:port`` or ``ray://host:port``: a host name, an IPv4 address or a bracketed IPv6 address, then the port
_ADDRESS = re.compile(r"(?P<scheme>ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]+)")
_FORMS = "give 'auto', 'host:port' or 'ray://host:port' (port 1-65535)"


def ray_address_file() -> Path:
    """Where ``ray start`` records its cluster's address, which ``ray.init(address="auto")`` reads:
    ``ray/ray_current_cluster`` under ``$RAY_TMPDIR``, else ``$TMPDIR`` on Linux, else ``/tmp``."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    if not base:
        base = "/tmp" if sys.platform.startswith(("linux", "darwin")) else tempfile.gettempdir()
    return Path(base) / "ray" / "ray_current_cluster"


def found_address() -> tuple[str, str]:
    """The address ``--address auto`` means and where it was found: ``$RAY_ADDRESS``, else :func:`ray_address_file`'s.
    ``ValueError`` when there is none."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        return env, f"RAY_ADDRESS={env!r}"
    path = ray_address_file()
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    if not text:
        raise ValueError(f"--address auto: there is no Ray cluster to find (RAY_ADDRESS is unset and {path} does not "
                         "name one, which `ray start --head` writes); start one, or give host:port")
    return text, f"found in {path}"


def _parse(address: str, origin: str = "") -> tuple[str, int]:
    """The host and port of ``host:port`` or ``ray://host:port``; ValueError naming ``address`` otherwise."""
    where = f" ({origin})" if origin else ""
    match = _ADDRESS.fullmatch(address)
    if match is None:
        raise ValueError(f"Ray address {address!r}{where} is not an address: {_FORMS}")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise ValueError(f"Ray address {address!r}{where}: the port must be 1-65535")
    return match["host"].strip("[]"), port


def _reachable(host: str, port: int, timeout: float, origin: str = "") -> None:
    """Open and close one TCP connection to ``host:port`` within ``timeout`` seconds; ``ValueError`` saying why when it
    fails."""
    where = f"; {origin}" if origin else ""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror as err:
        raise ValueError(f"Ray address {host}:{port}: no host {host!r} is known ({err.strerror}{where}); fix "
                         "--address") from None
    except OSError as err:
        why = f"no answer within {timeout:g} s" if isinstance(err, TimeoutError) else err.strerror or type(err).__name__
        raise ValueError(f"nothing listens at {host}:{port} ({why}{where}): start the cluster there (ray start "
                         "--head) or fix --address") from None


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """``address`` (stripped) if a batch can submit to it: None as it is; ``host:port``, ``ray://host:port`` or
    ``auto`` (:func:`found_address`) when well formed and accepting a TCP connection within ``timeout`` seconds.
    Otherwise one ``ValueError`` naming it."""
    if address is None:
        return None
    address = str(address).strip()
    if not address:
        raise ValueError(f"the Ray address is empty: {_FORMS}")
    origin = ""
    target = address
    if address == "auto":
        target, origin = found_address()
    host, port = _parse(target, origin)
    _reachable(host, port, timeout, origin)
    return address


def _run_on_worker(work: Callable[..., dict], nb: str, cpus: int, root: str) -> dict:
    """One notebook on a Ray worker: threads set from ``cpus``, then what ``work(notebook, say)`` returns, with the
    node's name and the lines said."""
    import socket

    for var in THREAD_VARIABLES:
        os.environ[var] = str(cpus)
    os.environ["LAYERSIM_ROOT"] = root
    lines: list[str] = []
    got = work(Path(nb), lines.append)
    return {**got, "node": socket.gethostname(), "lines": lines}


#: seconds of one wait for the next finished notebook (:func:`run`): how late a stop is taken at most
WAIT_SLICE = 1.0


def _signal_handlers(restore: dict | None = None) -> dict:
    """The handlers of SIGINT, SIGTERM and SIGHUP (main thread only), or, given ``restore``, put those back: the
    runner's must outlive ``ray.init``."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    if restore is not None:
        for signum, handler in restore.items():
            if handler is not None:
                signal.signal(signum, handler)
        return restore
    names = ("SIGINT", "SIGTERM", "SIGHUP")
    return {getattr(signal, n): signal.getsignal(getattr(signal, n)) for n in names if hasattr(signal, n)}


def run(notebooks: Sequence[Path], work: Callable[..., dict], scale: str, jobs: int | None = None,
        address: str | None = None, say: Callable[[str], None] | None = None,
        on_done: Callable[[Path, dict], None] | None = None) -> list[dict]:
    """Run ``work(notebook, say)`` (returning ``{"ok", "seconds", "error", "claims"}``) for each of ``notebooks`` as a
    Ray task; return the results, each with its ``node``, in the order given. ``jobs``: the local instance's CPUs,
    or with ``address`` the most notebooks at once; ``on_done(notebook, result)`` runs on the driver as each ends. A
    bad ``address`` raises ``ValueError`` before Ray is imported."""
    address = check_address(address)
    import ray

    say = say or (lambda line: print(line, flush=True))
    root = str(repo_root())
    started_here = address is None
    handlers = _signal_handlers()
    if started_here:
        ray.init(address="local", num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"LAYERSIM_ROOT": root}})
    else:
        ray.init(address=address, log_to_driver=False)
    _signal_handlers(handlers)  # ray.init replaces the driver's SIGTERM handler with one that exits at once
    pending: dict = {}
    try:
        cluster = ray.cluster_resources()
        limit = jobs or len(notebooks)
        task = ray.remote(_run_on_worker)
        names = {nb: nb.relative_to(Path(root) / "notebooks").with_suffix("").as_posix() for nb in notebooks}
        say(f"{len(notebooks)} notebooks on Ray ({'a local instance' if started_here else address}: "
            f"{int(cluster.get('CPU', 0))} CPUs, {int(cluster.get('GPU', 0))} GPUs), at most {limit} at once")
        queue, waits = schedule(notebooks)
        results: dict[Path, dict] = {}
        t0 = time.perf_counter()
        # a stop is taken between waits: raised inside Ray's wait, a signal's exception would break its C call
        with committed.shielded() as stops:
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
                done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE)
                if stops:
                    raise KeyboardInterrupt if stops[0] == signal.SIGINT else committed.Stopped(stops[0])
                if not done:
                    continue
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
    finally:  # stopped or failed with notebooks running: end them (a cluster's tasks outlive the driver otherwise)
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        if pending and not started_here:
            time.sleep(2)  # a cancelled worker's kernel follows it out within a second (ipykernel's parent poller)
        ray.shutdown()
