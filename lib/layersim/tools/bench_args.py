"""Argument types of the benchmarks' command lines (``python -m layersim.tools.bench`` and ``device-cka``).

Each is an argparse ``type``: a bad value raises ``argparse.ArgumentTypeError``, which argparse reports as a usage
error naming the argument (exit status 2), never a traceback (see docs/modules.md, `layersim.tools.bench_args`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def int_at_least(lo: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo``, else a usage error naming the bound and the text given."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        return v
    parse.__name__ = f"integer >= {lo}"
    return parse


def shapes(text: str) -> list[tuple[int, int]]:
    """``"3000x384,10000x768"`` -> ``[(3000, 384), (10000, 768)]``; N >= 4, d >= 1."""
    out = []
    for item in filter(str.strip, text.split(",")):
        parts = item.strip().lower().split("x")
        try:
            n, d = (int(v) for v in parts)
        except ValueError:
            n = d = None
        if n is None or n < 4 or d < 1:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated NxD shapes with integers N >= 4 and d >= 1 "
                f"(e.g. 3000x384,10000x768), got {item.strip()!r} in {text!r}")
        out.append((n, d))
    if not out:
        raise argparse.ArgumentTypeError("expected at least one NxD shape, e.g. 3000x384")
    return out
