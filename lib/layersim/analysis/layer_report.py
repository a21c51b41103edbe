"""``analyze``: every lens on any model from one pass, and the :class:`LayerReport` it returns.

:func:`analyze` reads every layer of a model once (:func:`layersim.analysis.extraction.read`) and applies the lenses
asked for (:func:`lens_names`: ``"all"`` is :data:`PAPER_LENSES`); a lens whose inputs are missing is listed as
skipped, with the reason. A :class:`LayerReport` holds each lens's array (``rep["cka/matrix"]``, or ``rep.cka``
for the names of :data:`SHORT`), the reasons, what was read (``meta``), its figures, an HTML page and a plain dict
(see docs/modules.md, ``layersim.analysis.layer_report``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layersim.analysis import extraction, figures as report_figures, lenses as registry
from layersim.core import markup, writers
from layersim.nets import adapters

__all__ = ["PAPER_LENSES", "SHORT", "LayerReport", "analyze", "lens_names", "run_lenses"]

#: what ``lenses="all"`` applies: every lens of the four papers, by name pattern (the Kornblith et al. variants
#: ``cka/debiased_matrix`` and ``cka/rbf_matrix`` only when asked for, e.g. ``"cka/*"`` or ``"*"``)
PAPER_LENSES = ("cos/*", "cka/to_last", "cka/matrix", "residual/*", "logit_lens/*", "redundancy/*", "alignment/*",
                "clusters/*", "collapse/*", "probe/*")
#: the attributes of a :class:`LayerReport` that name the results people reach for first
SHORT = {"cka": "cka/matrix", "cos": "cos/matrix", "cka_to_last": "cka/to_last", "cos_to_last": "cos/to_last",
         "logit_lens": "logit_lens/accuracy", "saturation": "logit_lens/saturation",
         "block_redundancy": "redundancy/block", "alignment": "alignment/area"}


def lens_names(lenses: Any = "all") -> list[str]:
    """The registered lens names ``lenses`` asks for, in order and once each: ``"all"`` (:data:`PAPER_LENSES`), a
    name or glob pattern, or a list of them; ``ValueError`` naming an unknown one (with the closest names)."""
    patterns = PAPER_LENSES if lenses == "all" else [lenses] if isinstance(lenses, str) else list(lenses)
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"lenses must be 'all', a lens name or pattern, or a list of them, got {lenses!r}")
    names: list[str] = []
    for pattern in patterns:
        found = registry.names(pattern)
        if not found:
            registry.get(pattern)  # the registry's error, with the closest names
        names += [n for n in found if n not in names]
    return names


def _plain(x: Any) -> Any:
    """``x`` with numpy arrays and scalars made lists and Python numbers, in dicts and lists alike."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.ndarray, np.generic)):
        return x.tolist()
    return x


@dataclass
class LayerReport:
    """The layers read (``data``, a :class:`~layersim.analysis.lenses.LayerData`), each lens's result (``results``)
    or the reason it was skipped (``skipped``), and what was read (``meta``). ``rep[name]`` is a result;
    ``rep.cka``, ``rep.cos``, ... the names of :data:`SHORT`."""

    data: Any
    results: dict[str, np.ndarray] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    streamed: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # computed over every sample

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.results:
            return self.results[name]
        if name in self.skipped:
            raise KeyError(f"{name} did not run: {self.skipped[name]}")
        raise KeyError(f"{name} was not asked for; the results are {sorted(self.results)}")

    def __getattr__(self, name: str) -> np.ndarray:
        if name not in SHORT:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        lens = SHORT[name]
        if lens in self.__dict__.get("results", {}):
            return self.results[lens]
        why = self.__dict__.get("skipped", {}).get(lens, "it was not asked for")
        raise AttributeError(f"{name} ({lens}) did not run: {why}")

    @property
    def layers(self) -> list[int]:
        """The layer index of each entry (0 = embedding output, i = output of block i)."""
        return list(self.data.layers or range(self.data.n_entries or 0))

    def summary_rows(self) -> list[tuple[str, str, str]]:
        """``(lens, paper, result)`` per lens, sorted: a one-line digest of what it gave, or ``skipped: why``."""
        rows = []
        for name in sorted(set(self.results) | set(self.skipped)):
            lens = registry.get(name)
            if name in self.skipped:
                rows.append((name, lens.paper, f"skipped: {self.skipped[name]}"))
                continue
            v = np.asarray(self.results[name], dtype=float)
            if lens.returns == "per_pair":
                text = f"{v.shape[0]} × {v.shape[1]} matrix, off-diagonal mean {v[~np.eye(len(v), dtype=bool)].mean():.3f}"
            elif lens.returns in ("per_sample_step", "per_sample_layer"):
                text = "median per layer: " + ", ".join(f"{x:.3g}" for x in np.median(v, axis=1))
            elif lens.returns == "per_sample":
                text = f"mean {v.mean():.2f}, median {np.median(v):.0f} over {v.size} samples"
            else:
                text = ", ".join(f"{x:.3g}" for x in v)
            rows.append((name, lens.paper, text))
        return rows

    def summary_table(self) -> str:
        """Markdown: the layers read, then :meth:`summary_rows`, every string escaped (:mod:`layersim.core.markup`:
        a reason may quote a user's path or model name)."""
        rows = [[markup.code(name), markup.cell(paper), markup.cell(text)] for name, paper, text in self.summary_rows()]
        intro = (f"Layers read: {markup.cell(', '.join(map(str, self.layers)))} (0 = embedding output, i = output of "
                 "block i). Per-layer results are listed in this order; per-step ones compare each layer with the one "
                 "before it (from the second on).")
        return intro + "\n\n" + markup.table(["lens", "paper", "result"], rows, raw=True)

    def to_dict(self, per_sample: bool = True) -> dict:
        """A plain dict (lists, numbers, strings): ``layers``, ``lenses`` (each result), ``skipped`` and ``meta``.
        ``per_sample=False``: results per sample as their mean and median per layer (or their counts per layer for
        the saturation layer), what ``metrics.json`` keeps."""
        out = {}
        for name, v in self.results.items():
            kind = registry.get(name).returns
            v = np.asarray(v, dtype=float)
            if per_sample or kind not in ("per_sample_step", "per_sample_layer", "per_sample"):
                out[name] = v
            elif kind == "per_sample":
                out[name] = {"mean": float(v.mean()), "median": float(np.median(v)),
                             "counts": np.bincount(v.astype(int)).tolist()}
            else:
                out[name] = {"median_per_layer": np.median(v, axis=1), "mean_per_layer": v.mean(axis=1)}
        return _plain({"layers": self.layers, "lenses": out, "skipped": dict(self.skipped), "meta": self.meta})

    def figures(self, title: str = "") -> dict[str, Any]:
        """``{stem: matplotlib figure}`` (:func:`layersim.analysis.figures.figures`)."""
        return report_figures.figures(self, title)

    def to_html(self, path: str | os.PathLike, title: str = "") -> Path:
        """Write :func:`layersim.analysis.figures.html_page` to ``path`` (whole or not at all; never into the
        committed results) and return it."""
        return writers.write_text(path, report_figures.html_page(self, title), protect=True)


def _why_not(lens: registry.Lens, data: registry.LayerData, logit_reason: str) -> str | None:
    """Why ``lens`` cannot run on ``data`` (None if it can)."""
    missing = sorted(k for k in lens.needs if getattr(data, k) is None)
    if not missing:
        return None if data.one_width or not lens.one_space else \
            f"{registry.ACROSS_WIDTHS}; the layers have widths {data.widths}"
    if "logits" in missing and logit_reason:
        return f"needs logits: {logit_reason}"
    if missing == ["model"]:
        return "runs the model again with blocks skipped or approximated; n_surgery=0 turned that off"
    return f"needs {', '.join(missing)}, which this data set does not have"


def run_lenses(report: LayerReport, names: list[str], progress: bool = False) -> LayerReport:
    """Apply each lens of ``names`` to ``report.data``; one that cannot run (a missing input, its own ``ValueError``)
    goes to ``report.skipped`` with why. Seconds per lens: ``report.meta["lens_seconds"]``."""
    reason = report.meta.get("logits", "")
    reason = reason.split(": ", 1)[1] if reason.startswith("not available") else ""
    seconds = {}
    for name in names:
        lens = registry.get(name)
        if name in report.streamed:  # computed over every sample while streaming (memory independent of N)
            report.results[name] = report.streamed[name]
            seconds[name] = 0.0
            continue
        why = _why_not(lens, report.data, reason)
        if why:
            report.skipped[name] = why
            continue
        t0 = time.perf_counter()
        try:
            report.results[name] = registry.apply(name, report.data)
        except ValueError as err:
            report.skipped[name] = f"did not apply: {err}"
        seconds[name] = time.perf_counter() - t0
        if progress:
            print(f"{name}: {seconds[name]:.1f} s", flush=True)
    report.meta["lens_seconds"] = seconds
    return report


def analyze(model: Any, batches: Any, labels: Any = None, lenses: Any = "all", *, token: Any = None,
            batch_size: int = 64, device: Any = "auto", logit_lens: bool | str = True, n_surgery: int = 128,
            surgery: registry.ModelRuns | None = None, max_in_memory: int = 20000,
            workdir: str | os.PathLike | None = None, progress: bool = False) -> LayerReport:
    """Every lens of ``lenses`` (:func:`lens_names`) on ``model`` (any model an adapter reads) from one pass over
    ``batches``: a DataLoader, a list of batches, or one tensor or dict of all samples (:func:`extraction.batches_of`).
    ``labels [N]``: default those the batches carry. ``logit_lens``: False, or why not, when the head was not
    trained on these classes. ``n_surgery`` samples (0: off), or the given ``surgery`` runs, feed the lenses that
    run the model again. Layers of different widths (a CNN's stages) are read zero-padded, their own widths in
    ``rep.data.widths``; the lenses that compare layers coordinate by coordinate are then skipped, saying why.
    ``ValueError`` naming a bad input."""
    import torch

    names = lens_names(lenses)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    try:
        adapters.get(model)
    except NotImplementedError as err:
        raise ValueError(str(err)) from None
    if isinstance(n_surgery, bool) or not isinstance(n_surgery, int) or 0 < n_surgery < 4 or n_surgery < 0:
        raise ValueError(f"n_surgery must be 0 (off) or an integer of at least 4, got {n_surgery!r}")
    batches = extraction.batches_of(batches, batch_size)
    data, meta, streamed = extraction.read(model, batches, labels, token, device, logit_lens, max_in_memory, workdir,
                                           progress)
    runs = surgery
    if runs is None and n_surgery and any("model" in registry.get(n).needs for n in names):
        y = None if "subsample" in meta else data["labels"]  # the labels of every sample, in the batches' order
        runs = extraction.sample_runs(model, batches, y, n_surgery, token, device)
    meta["surgery"] = (extraction.describe_runs(runs) if runs is not None else
                       "off (n_surgery=0)" if not n_surgery else "not run: no lens asked for runs the model again")
    report = LayerReport(registry.LayerData(**data, model=runs), meta=meta, streamed=streamed)
    return run_lenses(report, names)
