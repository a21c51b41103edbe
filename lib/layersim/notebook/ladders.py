"""Budget ladders of a *scale* miss, and the status their trend supports.

A ladder runs a notebook at several budgets along the axis its diagnosis names (steps, data, width, depth); each
rung records the claim as every run does (:func:`layersim.notebook.seeds.combine`). :func:`ladder_status` turns the
rungs into one of :data:`layersim.notebook.seeds.SCALE_STATUSES` by :data:`RULE`, written down on 2026-11-28 before
any ladder ran; :func:`margin` orients a value so that positive means "holds". :data:`LADDERS` defines every ladder
(its claims, axis and rungs: each rung the notebooks' ``-p`` values), ``python -m layersim.tools.runner --ladder NAME``
runs it rung by rung into ``figures/ladders/<ladder>/<budget>/<paper>/<stem>/`` (:func:`rung_folder`), and
:func:`rungs_of` reads a claim's rungs back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layersim.notebook import seeds

#: the folder (under ``figures/`` or a run's output folder) of the rungs:
#: ``<ladder>/<budget>/<paper>/<stem>/metrics.json`` (:func:`rung_folder`)
FOLDER = "ladders"
#: the fewest rungs a ladder needs, and the fewest seeds on each of its two largest rungs
MIN_RUNGS, MIN_TOP_SEEDS = 3, 3

#: the rule, verbatim as fixed on 2026-11-28 before any ladder ran
RULE = (
    "A ladder is judged only with at least 3 rungs and at least 3 seeds (finite values) on each of its two largest "
    "rungs; otherwise its status is 'not yet retested'. A rung's verdict is the claim's own majority-of-seeds rule. "
    "'confirmed': the largest rung holds. 'trending': it does not, but (a) the mean margin (the value's distance "
    "to the threshold, positive on the side where the claim holds) gains from the smallest to the largest rung more "
    "than the seeds' spread (the larger of the two largest rungs' sample standard deviations of the value over "
    "their seeds), and (b) the last step still gains (the largest rung's mean margin exceeds the second largest's). "
    "'not supported': otherwise. The threshold and the comparison must be the same on every rung. Reported beside "
    "it, for information only: the least-squares slope of the mean margin per doubling of the budget, and where "
    "that line would cross the threshold."
)


@dataclass(frozen=True)
class Rung:
    """One rung: its ``budget`` (a positive number on the ladder's axis) and the ``claim`` recorded there (with
    ``value``, ``threshold``, ``op``, ``holds`` and, over several seeds, ``values``)."""

    budget: float
    claim: Mapping


def margin(value: float, threshold: float, op: str) -> float:
    """``value - threshold`` for ``>``/``>=``, ``threshold - value`` for ``<``/``<=``: positive where the claim holds
    (or on its boundary for ``>=``/``<=`` at 0); ``ValueError`` for another ``op``."""
    if op in (">", ">="):
        return float(value) - float(threshold)
    if op in ("<", "<="):
        return float(threshold) - float(value)
    raise ValueError(f"unknown comparison {op!r}: one of >, >=, <, <=")


def seed_values(claim: Mapping) -> list[float]:
    """The claim's finite values over its seeds (``values``, else its one ``value``)."""
    values = claim.get("values", [claim.get("value")])
    return [float(v) for v in values if seeds.is_finite_number(v)]


def ladder_status(rungs: Sequence[Rung]) -> dict:
    """The status of a *scale* miss from its ladder by :data:`RULE`: ``status``, ``why`` (one line with the numbers),
    ``rungs``, ``margins`` (mean per rung, by budget), ``gain``, ``spread``, ``slope_per_doubling`` and
    ``crossing_budget`` (None unless the fitted line rises and crosses above the largest budget). ``ValueError`` for
    budgets that are not positive and distinct, or a threshold or comparison that differs between rungs."""
    rungs = sorted(rungs, key=lambda r: r.budget)
    budgets = [float(r.budget) for r in rungs]
    if any(not math.isfinite(b) or b <= 0 for b in budgets) or len(set(budgets)) != len(budgets):
        raise ValueError(f"the budgets of a ladder must be positive, finite and distinct: {budgets}")
    tests = {(float(r.claim["threshold"]), r.claim["op"]) for r in rungs}
    if len(tests) > 1:
        raise ValueError(f"the rungs judge the claim differently ({sorted(tests)}): one threshold and comparison")
    out = {"rungs": len(rungs), "margins": [], "gain": None, "spread": None, "slope_per_doubling": None,
           "crossing_budget": None}
    if len(rungs) < MIN_RUNGS or any(len(seed_values(r.claim)) < MIN_TOP_SEEDS for r in rungs[-2:]):
        return {**out, "status": seeds.SCALE_STATUSES[0],
                "why": f"{len(rungs)} rung(s), seeds on the two largest "
                       f"{[len(seed_values(r.claim)) for r in rungs[-2:]]}: needs {MIN_RUNGS} rungs and "
                       f"{MIN_TOP_SEEDS} seeds on each of the two largest"}
    threshold, op = tests.pop()
    means = [float(np.mean([margin(v, threshold, op) for v in seed_values(r.claim)])) for r in rungs]
    spread = max(float(np.std(seed_values(r.claim), ddof=1)) for r in rungs[-2:])
    gain = means[-1] - means[0]
    slope, intercept = np.polyfit(np.log2(budgets), means, 1)
    crossing = 2 ** (-intercept / slope) if slope > 0 and means[-1] < 0 else None
    crossing = crossing if crossing is not None and crossing > budgets[-1] else None
    out.update(margins=means, gain=gain, spread=spread, slope_per_doubling=float(slope),
               crossing_budget=float(crossing) if crossing is not None else None)
    numbers = (f"mean margin {means[0]:+.3g} at {budgets[0]:g} -> {means[-1]:+.3g} at {budgets[-1]:g} "
               f"(gain {gain:+.3g}, seeds' spread {spread:.3g})")
    if seeds.holds(rungs[-1].claim):
        return {**out, "status": seeds.SCALE_STATUSES[1], "why": f"holds at the largest rung; {numbers}"}
    if gain > spread and means[-1] > means[-2]:
        return {**out, "status": seeds.SCALE_STATUSES[2], "why": f"gains more than the spread and still at the "
                f"last step; {numbers}"}
    return {**out, "status": seeds.SCALE_STATUSES[3],
            "why": f"{'no gain beyond the spread' if gain <= spread else 'the last step loses'}; {numbers}"}


@dataclass(frozen=True)
class Ladder:
    """One ladder: the ``claims`` it judges (``("<paper>/<stem>", claim)``), the ``axis`` the diagnosis names, and its
    ``rungs``: ``budget -> {stem: -p values}``, the notebooks run at that budget in that order (a budget's notebooks
    share cached models: the first trains them). Every rung runs each notebook at ``seeds`` seeds. ``checks``: what
    must hold of a rung before its claims are read (written down with the ladder, before it ran); ``why``: the
    diagnosis and the choice of rungs; ``paper``: the run with the paper's own models or data that would test the
    claim where the effect plausibly needs them (beside the ladder, never a rung of it), its cost from
    benchmarks/PAPER_SCALE.md and its command."""

    name: str
    axis: str
    claims: tuple[tuple[str, str], ...]
    rungs: Mapping[float, Mapping[str, Mapping]]
    why: str
    checks: tuple[str, ...] = ()
    seeds: int = 3
    paper: str = ""

    @property
    def budgets(self) -> list[float]:
        """The rungs' budgets, smallest first."""
        return sorted(self.rungs)

    @property
    def notebooks(self) -> list[str]:
        """The stems run at some rung, in the order of the first rung that runs them."""
        return list(dict.fromkeys(stem for b in self.budgets for stem in self.rungs[b]))


#: MiniLM-L6's fine-tuning at three times each step count: batch 32, warm-up 10 % of the steps, training examples
#: grown with the steps (every example seen about once) until austen-novel's 14,796 run out
_BERT = {100: {"n_train": 3840, "steps": 100, "warmup_steps": 10},
         300: {"n_train": 9600, "steps": 300, "warmup_steps": 30},
         900: {"n_train": 14796, "steps": 900, "warmup_steps": 90}}

#: every ladder, fixed on 2026-11-28 before any rung ran: ``name -> Ladder``
LADDERS: dict[str, Ladder] = {ladder.name: ladder for ladder in (
    Ladder(
        "a05_regression_points", "regression points (digits)",
        (("alignment/a05_layers", "later_layers_more_aligned_after_training"),),
        {450: {"a05_layers": {"regression_dataset": "digits", "regression_points": 450}},
         900: {"a05_layers": {"regression_dataset": "digits", "regression_points": 900}},
         1797: {"a05_layers": {"regression_dataset": "digits"}}},
        "Diagnosis: diabetes (442 points, 10 features) is far smaller than the paper's CT Position (10,000 points, "
        "384 features). diabetes cannot grow, so the ladder is on digits (1,797 points, 61 varying pixels), from about "
        "diabetes' size to all of it; the data set caps it at 1,797.",
        paper="The paper's CT Position data (10,000 points, 384 features) is not in the data registry, and the paper "
              "scale keeps diabetes for the regression task: no run of this repository tests the claim on it yet "
              "(once the data is added, minutes on a CPU)."),
    Ladder(
        "a10_none_images", "training images of the None network",
        (("alignment/a10_negative_transfer", "random_label_pretraining_hurts"),
         ("alignment/a10_negative_transfer", "random_label_pretraining_reduces_alignment"),
         ("alignment/a10_negative_transfer", "alignment_drop_orders_transfer_drop")),
        {n: {"a10_negative_transfer": {"none_source": "all", "none_n_source": n, "none_epochs": 8}}
         for n in (6000, 12000, 24000, 48000)},
        "Diagnosis: a small CNN trained on 12,000 garment images is a weak stand-in for an ImageNet network. The "
        "None network sees all ten Fashion-MNIST classes for 8 epochs on every rung (the larger run's settings); only "
        "its number of training images doubles, up to 48,000, the most the split leaves beside the three domains.",
        paper="An ImageNet ResNet-18 on Office-31 (500 random-label epochs, 9 fine-tunes of 100 epochs): about 2 h "
              "(1.3-3 h, estimated) on one GPU, Office-31 supplied by hand in $LAYERSIM_OFFICE31: "
              "python -m layersim.tools.runner --scale paper --nb a10"),
    Ladder(
        "t03_ablation_budget", "image-epochs of each ablation model",
        (("tracing/t03_aligned_training", "uniform_weights_hurt_last_layer"),),
        {30000: {"t03_aligned_training": {"ablation_budget": {"n_train": 10000, "epochs": 3}}},
         75000: {"t03_aligned_training": {"ablation_budget": {"n_train": 15000, "epochs": 5}}},
         150000: {"t03_aligned_training": {"ablation_budget": {}}}},
        "Diagnosis: the ablation models are trained on a fifth of the full budget. The rungs go from the default "
        "(10,000 images, 3 epochs) to the full models' budget (30,000 images, 5 epochs), which the only exposed "
        "knob, ablation_budget, allows.",
        paper="DeiT-S on CIFAR-10 at the paper's 200 epochs: the 5 ablation models are 1.58 GPU h measured on an "
              "H100 after t01/t02 (about 2.3 h alone); the paper's own ImageNet-1K ablation is in no preset: "
              "python -m layersim.tools.runner --scale paper --nb t03"),
    Ladder(
        "bert_steps", "fine-tuning steps of MiniLM-L6 (batch 32)",
        (("clusters/c03_layer_skipping", "single_late_skips_cheap"),
         ("tracing/t09_aligned_bert", "aligned_bert_better_intermediate"),
         ("clusters/c01_cka_structure", "ft_block_diagonal")),
        {steps: {"c03_layer_skipping": dict(p), "t09_aligned_bert": dict(p), "c01_cka_structure": {**p, "restarts": 1}}
         for steps, p in _BERT.items()},
        "Diagnosis: 100 steps leave austen-novel far from learned, and the paper fine-tunes for thousands. Each "
        "rung triples the steps; c03 trains restart 1's standard fine-tunes, which t09 and c01 read from the cache; "
        "c01 runs one restart, since ft_block_diagonal reads restart 1 alone.",
        paper="c01: RoBERTa, ALBERT-large and ELECTRA on 12 tasks, 2 restarts of 10,000 steps: 8.1 GPU h of "
              "fine-tunes measured on an H100, about 8 h in all (python -m layersim.tools.runner --scale paper "
              "--nb c01); c03: every span of the same encoders after c01, about 10 GPU h measured, 9.2 of them "
              "ALBERT-large (--nb c03); t09: bert-base on 6 GLUE tasks for 3 epochs, 2.2 GPU h measured (--nb t09). "
              "About 1.5 GB of downloads.",
        checks=("learned: from the 300- to the 900-step rung, the mean austen-novel validation accuracy of the "
                "restart-1 standard fine-tune gains less than 2 points (one 600-example score's binomial standard "
                "error); otherwise the task is not yet learned at 900 steps, and c01's and c03's ladders are "
                "reported as not learned, not as 'not supported'",
                "t09 readable: at the largest rung, at least one of the aligned model's blocks 1-3 is 2 points or "
                "more above the majority baseline on both tasks; otherwise t09's ladder cannot be judged (both "
                "models at chance give 0) and is reported so")),
    Ladder(
        "r04_vit_width", "width (embedding dimension) of the ViT, classifier trained 100 epochs",
        (("redundancy/r04_skip_vs_approx", "approx_beats_skip"),),
        {64: {"r04_skip_vs_approx": {"probe_epochs": 100, "vit": {"embed_dim": 64}}},
         128: {"r04_skip_vs_approx": {"probe_epochs": 100}},
         256: {"r04_skip_vs_approx": {"probe_epochs": 100, "vit": {"embed_dim": 256}}}},
        "Diagnosis: a 12-block ViT of width 128 trained here stands in for the paper's pretrained ViTs, with a "
        "classifier trained 5 epochs. Every rung trains the classifier 100 epochs (the larger run's setting, about "
        "the paper's number of Adam steps); the ViT's width doubles from 64 to 256, 4 heads each, same recipe.",
        paper="The paper's five pretrained ViT, DINO and DeiT models on MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100: "
              "1.49 GPU h measured for the GPU part, plus about 1.5-2 h of CPU work estimated (QR fits, heads, "
              "resizing), host memory near 100 GB: python -m layersim.tools.runner --scale paper --nb r04"),
)}


def budget_name(budget: float) -> str:
    """The folder name of a rung: its budget as written (``900``, ``48000``)."""
    return f"{float(budget):g}"


def rung_folder(folder: Path, ladder: str, budget: float) -> Path:
    """Where a rung's notebooks write under ``folder`` (``figures/`` or a run's output folder):
    ``<folder>/ladders/<ladder>/<budget>/``, each notebook's results in ``<paper>/<stem>/`` below it."""
    return Path(folder) / FOLDER / ladder / budget_name(budget)


def ladder_of(notebook: str, claim: str) -> Ladder | None:
    """The ladder that judges ``claim`` of ``notebook`` (``"<paper>/<stem>"``), or None."""
    return next((ladder for ladder in LADDERS.values() if (notebook, claim) in ladder.claims), None)


def rungs_of(folder: Path, notebook: str, claim: str) -> list[Rung]:
    """The rungs run so far of ``claim`` of ``notebook`` (``"<paper>/<stem>"``) under ``folder``: each
    ``<rung_folder>/<paper>/<stem>/metrics.json`` holding the claim, by budget; [] when the claim has no ladder or
    none of its rungs ran. ``ValueError`` for a rung folder not named by a number."""
    ladder = ladder_of(notebook, claim)
    if ladder is None:
        return []
    out = []
    for path in sorted((Path(folder) / FOLDER / ladder.name).glob(f"*/{notebook}/metrics.json")):
        rung = path.parents[2]
        try:
            budget = float(rung.name)
        except ValueError:
            raise ValueError(f"{rung}: a rung's folder is named by its budget, a number") from None
        claims = json.loads(path.read_text(encoding="utf-8")).get("claims", {})
        if claim in claims:
            out.append(Rung(budget, claims[claim]))
    return sorted(out, key=lambda r: r.budget)


def rung_records(folder: Path, ladder: str, budget: float, notebook: str) -> list[dict]:
    """Every seed's ``metrics.json`` of ``notebook`` (``"<paper>/<stem>"``) on one rung under ``folder``: its own
    run's, then the other seeds' that the runner keeps beside it (``seeds/seed-<s>/metrics.json``); [] when the rung
    has not run or not finished (its own run, the last, missing: the seeds kept so far wait for it)."""
    here = rung_folder(folder, ladder, budget) / notebook
    if not (here / "metrics.json").is_file():
        return []
    paths = [here / "metrics.json", *sorted((here / "seeds").glob("seed-*/metrics.json"))]
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths if p.is_file()]


#: a gain below this (two points: one 600-example score's binomial standard error) counts as a plateau
PLATEAU_GAIN = 0.02


def _mean_novel_validation(records: list[dict]) -> float | None:
    values = [s["validation"] for r in records for s in r.get("scores", [])
              if s.get("task") == "austen-novel" and s.get("restart") == 1]
    return float(np.mean(values)) if values else None


def bert_learned(folder: Path) -> dict:
    """The first check of ``bert_steps``: the mean (over seeds) austen-novel validation accuracy of restart 1's
    standard fine-tune (c01's ``scores``) gains less than :data:`PLATEAU_GAIN` from the 300- to the 900-step rung.
    ``{"passed": bool or None (a rung missing), "numbers": str}``."""
    means = [_mean_novel_validation(rung_records(folder, "bert_steps", b, "clusters/c01_cka_structure"))
             for b in (300, 900)]
    if None in means:
        return {"passed": None, "numbers": "the 300- and 900-step rungs of c01 have not both run"}
    gain = means[1] - means[0]
    return {"passed": bool(gain < PLATEAU_GAIN),
            "numbers": f"austen-novel validation {means[0]:.3f} at 300 steps -> {means[1]:.3f} at 900 (gain "
                       f"{gain:+.3f}; a plateau gains less than {PLATEAU_GAIN:g})"}


def t09_readable(folder: Path) -> dict:
    """The second check of ``bert_steps``: at its largest rung, one of blocks 1-3 of t09's aligned model is, on the
    mean over seeds, at least :data:`PLATEAU_GAIN` above the majority baseline on every task.
    ``{"passed": bool or None (the rung missing), "numbers": str}``."""
    records = rung_records(folder, "bert_steps", 900, "tracing/t09_aligned_bert")
    if not records:
        return {"passed": None, "numbers": "the 900-step rung of t09 has not run"}
    majority = {f"{m['model']}/{m['task']}": m["majority"] for m in records[0]["majority"]}
    above = {}
    for pair, base in majority.items():
        blocks = np.mean([r["accuracy"][f"{pair}/aligned"][:3] for r in records], axis=0)
        above[pair] = blocks - base
    best = max(range(3), key=lambda b: min(a[b] for a in above.values()))
    worst_of_best = min(a[best] for a in above.values())
    return {"passed": bool(worst_of_best >= PLATEAU_GAIN),
            "numbers": f"block {best + 1} of the aligned model, the best of blocks 1-3: "
                       + ", ".join(f"{pair.split('/')[-1]} {a[best]:+.3f}" for pair, a in above.items())
                       + f" above the majority baseline ({len(records)} seed(s))"}


#: the functions that evaluate each ladder's ``checks``, in the same order
CHECKS = {"bert_steps": (bert_learned, t09_readable)}
