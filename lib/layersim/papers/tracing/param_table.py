"""The tracing paper's Table 1: the parameters one shared classifier saves in a multi-exit model, the paper's
numbers (:data:`PAPER_TABLE1`, :func:`paper_table`) beside the counts of the real architectures
(:data:`ARCHITECTURES`, :func:`architecture_params`, :func:`architectures`, :func:`counted_table`,
:func:`comparison`), how the paper's numbers were made (:func:`reconstruction`, :func:`describe_reconstruction`),
:func:`overhead_figure` and t07's :data:`RULES` (see docs/modules.md, `layersim.papers.tracing.param_table`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from layersim.nets import params
from layersim.notebook import settings

#: Table 1 of the paper, as printed: classifier inputs ``dim``, outputs ``classes``, blocks ``layers``, the
#: multi- and single-classifier parameter counts and the saving in percent
PAPER_TABLE1 = {
    "deit_small": dict(dim=384, classes=1000, layers=12, multi=26.27e6, single=22.05e6, saving=16.07),
    "deit_base": dict(dim=768, classes=1000, layers=12, multi=95.02e6, single=86.57e6, saving=8.89),
    "gpt2": dict(dim=768, classes=50257, layers=12, multi=541.57e6, single=117.35e6, saving=78.39),
    "gpt3": dict(dim=12288, classes=50257, layers=96, multi=233.67e9, single=175.63e9, saving=25.10),
    "llama2": dict(dim=4096, classes=32000, layers=40, multi=75.11e9, single=70.35e9, saving=6.81),
}

#: the model sizes the language models' papers name (GPT-2's retracted "117M", "175B", "70B"); the DeiTs'
#: nominal sizes are their exact counts
NOMINAL_LM_SIZES = {"gpt2": 117e6, "gpt3": 175e9, "llama2": 70e9}

#: The real architectures of Table 1, their published sizes. ``kind`` picks the counting function and
#: :func:`layersim.nets.params.build_on_meta`'s model, ``dim`` / ``classes`` / ``layers`` are the classifier's input
#: width, its outputs and the number of blocks (Table 1's columns), ``head_bias`` whether the model's classifier has
#: a bias (a copy of it is one exit head).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    # timm deit_small_patch16_224 / deit_base_patch16_224 (Touvron et al. 2021), ImageNet-1K
    "deit_small": dict(kind="vit", timm="deit_small_patch16_224", dim=384, classes=1000, layers=12, head_bias=True,
                       config=dict(embed_dim=384, depth=12, num_classes=1000)),
    "deit_base": dict(kind="vit", timm="deit_base_patch16_224", dim=768, classes=1000, layers=12, head_bias=True,
                      config=dict(embed_dim=768, depth=12, num_classes=1000)),
    # GPT-2 small, HF GPT2Config() defaults (Radford et al. 2019): LM head tied to the embedding
    "gpt2": dict(kind="gpt2", dim=768, classes=50257, layers=12, head_bias=False,
                 config=dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)),
    # GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, n_ctx 2048,
    # GPT-2's 50257-token BPE vocabulary
    "gpt3": dict(kind="gpt2", dim=12288, classes=50257, layers=96, head_bias=False,
                 config=dict(n_embd=12288, n_layer=96, n_head=96, n_positions=2048, vocab_size=50257)),
    # LLaMA-2 (Touvron et al. 2023), the released configurations; 32000-token vocabulary, untied head
    "llama2_7b": dict(kind="llama", dim=4096, classes=32000, layers=32, head_bias=False,
                      config=dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                  num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)),
    "llama2_13b": dict(kind="llama", dim=5120, classes=32000, layers=40, head_bias=False,
                       config=dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                   num_attention_heads=40, num_key_value_heads=40, vocab_size=32000)),
    "llama2_70b": dict(kind="llama", dim=8192, classes=32000, layers=80, head_bias=False,
                       config=dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                   num_attention_heads=64, num_key_value_heads=8, vocab_size=32000)),
}

_COUNTERS = {
    "vit": lambda c: params.vit_params(**c),
    "gpt2": lambda c: params.gpt2_params(c["n_embd"], c["n_layer"], c["vocab_size"], c["n_positions"]),
    "llama": lambda c: params.llama_params(**c),
}


def architecture_params(name: str, head_bias: bool | None = None, head_norm: bool = False) -> dict[str, int]:
    """``{"single": n, "multi": n}`` for one of :data:`ARCHITECTURES` (closed forms).

    An exit head is a copy of the model's classifier (with its bias unless ``head_bias`` says
    otherwise; with a LayerNorm of its own when ``head_norm``).
    """
    arch = _architecture(name)
    single = _COUNTERS[arch["kind"]](arch["config"])
    bias = arch["head_bias"] if head_bias is None else head_bias
    multi = params.multi_exit_params(single, arch["layers"], arch["dim"], arch["classes"], bias, head_norm)
    return {"single": single, "multi": multi}


def _architecture(name: str) -> dict[str, Any]:
    """The entry ``name`` of :data:`ARCHITECTURES`; a ``ValueError`` naming the known ones otherwise."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}: one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


#: the rules of t07's settings (``layersim.notebook.settings``): the classifiers' bias (None: as in the model's own
#: classifier), a final norm in every classifier, and the LLaMA-2 counted for Table 1's last row
RULES = {"head_bias": settings.optional(settings.flag(), "follow the model's own classifier"),
         "head_norm": settings.flag(), "llama2_size": settings.choice("7b", "13b", "70b")}


def architectures(llama2_size: str) -> dict[str, str]:
    """The architecture of :data:`ARCHITECTURES` counted for each row of :data:`PAPER_TABLE1`:
    the row's own, LLaMA-2 at ``llama2_size`` (``"7b"``, ``"13b"``, ``"70b"``; else ``ValueError``)."""
    arch = {m: f"llama2_{llama2_size}" if m == "llama2" else m for m in PAPER_TABLE1}
    if arch["llama2"] not in ARCHITECTURES:
        raise ValueError(f"no LLaMA-2 of size {llama2_size!r}: one of 7b, 13b, 70b")
    return arch


def paper_table() -> pd.DataFrame:
    """The paper's Table 1 (:data:`PAPER_TABLE1`), one row per model, with ``overhead`` = multi - single."""
    table = pd.DataFrame(PAPER_TABLE1).T
    table["overhead"] = table["multi"] - table["single"]
    return table


def counted_table(head_bias: bool | None = None, head_norm: bool = False) -> pd.DataFrame:
    """One row per architecture of :data:`ARCHITECTURES`: ``dim``, ``classes``, ``layers``,
    ``single`` (counted on the meta device), ``multi`` (plus ``L - 1`` classifiers), whether the closed form agrees,
    ``overhead`` and ``saving`` (percent of the multi model)."""
    rows = {}
    for name, arch in ARCHITECTURES.items():
        model = params.build_on_meta(arch)
        counted = params.count_module(model)
        closed = architecture_params(name, head_bias=head_bias, head_norm=head_norm)
        rows[name] = dict(dim=arch["dim"], classes=arch["classes"], layers=arch["layers"], single=counted,
                          multi=closed["multi"], closed_form_equals_instantiated=counted == closed["single"])
        del model
    table = pd.DataFrame(rows).T
    table["overhead"] = table["multi"] - table["single"]
    table["saving"] = 100 * table["overhead"] / table["multi"]
    table[["single", "multi", "overhead"]] = table[["single", "multi", "overhead"]].astype(np.int64)
    return table


def comparison(paper: pd.DataFrame, ours: pd.DataFrame) -> pd.DataFrame:
    """The paper's rows beside ours: single, multi, overhead (millions), saving (percent), ``ours / paper - 1`` and
    the saving's difference in points."""
    cmp = pd.DataFrame({
        "paper single (M)": paper["single"] / 1e6, "ours single (M)": ours["single"] / 1e6,
        "paper multi (M)": paper["multi"] / 1e6, "ours multi (M)": ours["multi"] / 1e6,
        "paper overhead (M)": paper["overhead"] / 1e6, "ours overhead (M)": ours["overhead"] / 1e6,
        "paper saving (%)": paper["saving"], "ours saving (%)": ours["saving"].astype(float),
    })
    cmp["single rel. diff"] = cmp["ours single (M)"] / cmp["paper single (M)"] - 1
    cmp["multi rel. diff"] = cmp["ours multi (M)"] / cmp["paper multi (M)"] - 1
    cmp["overhead rel. diff"] = cmp["ours overhead (M)"] / cmp["paper overhead (M)"] - 1
    cmp["saving diff (pt)"] = cmp["ours saving (%)"] - cmp["paper saving (%)"]
    return cmp


def reconstruction(paper: pd.DataFrame, counted: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The paper's multi-classifier column rebuilt as a nominal size plus ``(L - 1) d K`` (the DeiTs' exact counts,
    the LMs' :data:`NOMINAL_LM_SIZES`). Returns the table, ``rows_matching`` (printed digits reproduced),
    ``max_rel_diff``, ``max_saving_diff_points`` and ``printed_single_saving_diff_points``."""
    nominal = {"deit_small": counted.loc["deit_small", "single"], "deit_base": counted.loc["deit_base", "single"],
               **NOMINAL_LM_SIZES}
    rec = pd.DataFrame({"nominal single": pd.Series(nominal, dtype=float)})
    rec["heads (L-1) d K"] = (paper["layers"] - 1) * paper["dim"] * paper["classes"]
    rec["reconstructed multi"] = rec["nominal single"] + rec["heads (L-1) d K"]
    rec["paper multi"] = paper["multi"]
    rec["multi rel. diff"] = rec["reconstructed multi"] / rec["paper multi"] - 1
    unit = np.where(paper["multi"] < 1e9, 1e6, 1e9)  # the paper prints M or B with two decimals
    rec["same printed digits"] = np.abs(rec["reconstructed multi"] - rec["paper multi"]) / unit <= 0.005 + 1e-9
    rec["reconstructed saving (%)"] = 100 * rec["heads (L-1) d K"] / rec["reconstructed multi"]
    rec["paper saving (%)"] = paper["saving"]
    rec["saving from printed single (%)"] = 100 * paper["overhead"] / paper["multi"]
    stats = {
        "rows_matching": int(rec["same printed digits"].sum()),
        "max_rel_diff": float(rec["multi rel. diff"].abs().max()),
        "max_saving_diff_points": float((rec["reconstructed saving (%)"] - rec["paper saving (%)"]).abs().max()),
        "printed_single_saving_diff_points": float((rec["saving from printed single (%)"]
                                                    - rec["paper saving (%)"]).abs().max()),
    }
    return rec, stats


def describe_reconstruction(rec: pd.DataFrame, stats: Mapping[str, float]) -> str:
    """:func:`reconstruction`'s findings in two lines: how many rows of the paper's multi column the nominal size
    plus ``(L - 1) d K`` reproduces to the printed digits, and how far the saving column lies from it."""
    return (f"paper multi column vs nominal + (L-1) d K: {stats['rows_matching']} of {len(rec)} rows give the printed "
            f"digits (max relative difference {stats['max_rel_diff']:.1e})\n"
            f"saving column vs the reconstruction: max difference {stats['max_saving_diff_points']:.3f} points "
            f"(vs {stats['printed_single_saving_diff_points']:.2f} points when computed from the printed single "
            "column)")


def styled_reconstruction(rec: pd.DataFrame):
    """:func:`reconstruction`'s table for display: the counts in millions, the percentages to three decimals."""
    counts = ["nominal single", "heads (L-1) d K", "reconstructed multi", "paper multi"]
    show = rec.assign(**{c: rec[c] / 1e6 for c in counts}).rename(columns={c: f"{c} (M)" for c in counts})
    return (show.style.format("{:,.3f}", subset=[f"{c} (M)" for c in counts])
            .format("{:+.1e}", subset=["multi rel. diff"])
            .format("{:.3f}", subset=[c for c in show if c.endswith("(%)")]))


def overhead_figure(paper: pd.DataFrame, ours: pd.DataFrame, labels: Sequence[str]):
    """Table 1 as a figure: the ``L - 1`` extra classifiers' parameters (log scale) and the saving, paper beside
    ours, with the approximation ``K / (K + 12 d)`` (a head costs ``d K``, a block about ``12 d^2``). Returns the
    figure."""
    import matplotlib.pyplot as plt

    if len(labels) != len(ours) or len(paper) != len(ours):
        raise ValueError(f"overhead_figure needs one label per model: {len(labels)} labels, {len(paper)} paper rows, "
                         f"{len(ours)} rows of ours")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    x, w = np.arange(len(ours)), 0.38
    for ax, col, ylabel in [(axes[0], "overhead", "extra parameters"), (axes[1], "saving", "saving (%)")]:
        ax.bar(x - w / 2, paper[col].astype(float), w, label="paper (Table 1)", color="0.6")
        ax.bar(x + w / 2, ours[col].astype(float), w, label="ours (real architectures)", color="C0")
        ax.set_xticks(x, labels)
        ax.set_ylabel(ylabel)
    approx = 100 * ours["classes"] / (ours["classes"] + 12 * ours["dim"])
    axes[1].plot(x + w / 2, approx.astype(float), "kD", ms=4, label="approximation K / (K + 12d)")
    axes[0].set_yscale("log")
    axes[0].set_title("parameters of the L-1 extra classifiers")
    axes[1].set_title("saving of one shared classifier")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def per_model(table: pd.DataFrame, models: Sequence[str], scale: float = 1e6) -> dict[str, dict[str, float]]:
    """``{model: {"single": n / scale, "multi": n / scale}}`` for the rows ``models`` of a table (in millions)."""
    return {m: {"single": table.loc[m, "single"] / scale, "multi": table.loc[m, "multi"] / scale} for m in models}


def column(table: pd.DataFrame, name: str, models: Sequence[str] | None = None) -> Mapping[str, float]:
    """``{model: float(value)}`` of one column, for the rows ``models`` (all rows by default)."""
    return {m: float(table.loc[m, name]) for m in (table.index if models is None else models)}
