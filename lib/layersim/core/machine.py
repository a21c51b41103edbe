"""The machine a measurement ran on, in words: CPU model, load, thread pools, printed by the benchmarks and
portability checks beside every time they report.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform

import numpy as np


def cpu_model(flags: bool = False) -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere); ``flags``:
    followed by whether it has AVX-512 (the kernels torch and BLAS pick depend on it)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"
    if flags:
        model += " with AVX-512" if " avx512f" in info else " without AVX-512"
    return model


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages (``n/a`` where the system does not say)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def describe() -> list[str]:
    """Markdown list lines: the date, the machine (architecture, logical CPUs, CPU model, Python,
    numpy), every BLAS/OpenMP thread pool (threadpoolctl) and the load average now."""
    lines = [f"- date: {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"- machine: {platform.machine()}, {os.cpu_count()} logical CPUs "
             f"({cpu_model()}), Python {platform.python_version()}, numpy {np.__version__}"]
    try:
        from threadpoolctl import threadpool_info
        for p in threadpool_info():
            lines.append(f"- thread pool: {p.get('internal_api')} {p.get('version')} "
                         f"({p.get('architecture', '')}), {p.get('num_threads')} threads, "
                         f"{os.path.basename(p.get('filepath', ''))}")
    except ImportError:
        lines.append("- threadpoolctl not installed; BLAS threads unknown")
    lines.append(f"- load average at start: {loadavg()}")
    return lines
