"""The rehearsal of the paper scale: every notebook at ``scale="paper"``, only its step and sample counts cut.

A rehearsal runs the paper path end to end on a CPU without the network: the papers' architectures at their published
sizes (random weights, from fixture folders in the formats the real downloads leave), data from fixture files in the
real on-disk formats (``layersim.tools.fixtures``), and the notebooks' own code. ``LAYERSIM_REHEARSE=1`` (the runner's
``--rehearse``) turns it on for ``scale="paper"``: :func:`presets_of` gives a notebook's presets with its
:data:`CUTS` over the paper preset, :func:`shared` cuts the model presets several notebooks share (:data:`SHARED`),
a run writes below ``runs/rehearsal/`` (never ``figures/``) and its ``metrics.json`` carries the mark :func:`mark`,
which every reader of results refuses as a result. A rehearsal's numbers mean nothing; that it ran means the paper
path works (see docs/modules.md, ``layersim.notebook.rehearsal``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["CUTS", "ENV", "KEY", "REDUNDANCY_LOOP", "REDUNDANCY_SPANS", "SHARED", "active", "cuts_of", "mark", "not_measurable", "presets_of", "runs_folder", "shared"]

#: the environment variable that turns the rehearsal on (``1``, ``true``, ``yes``, ``on``)
ENV = "LAYERSIM_REHEARSE"
#: the key of the mark in a rehearsal's ``metrics.json``
KEY = "rehearsal"

#: a cut's value meaning "the notebook's smoke preset's": the smoke counts run every code path in seconds and give
#: every measurement a value, so a rehearsal cuts a count to them
SMOKE = "as smoke"

#: the model presets several notebooks share, cut in a rehearsal (``layersim.notebook.presets``): name -> the keys
#: set to that preset's smoke values. Only counts: images, epochs, batch sizes; the architectures stay.
SHARED: dict[str, tuple[str, ...]] = {
    "TRACING_VIT": ("n_train", "epochs", "batch_size", "milestones"),
    "ALIGNMENT_SOURCE_CNN": ("epochs", "batch_size", "milestones"),  # all images: ImageNet's halves have 424 and
    # 576 classes, more than the smoke preset's 480 images draw one of each
}


#: the redundancy notebooks' loop over models and data sets (``layersim.papers.redundancy.models.MODELS``, not a
#: preset key), cut in a rehearsal to one model of each family the paper reads (transformers' ViT and DINOv2, at
#: their published sizes) and one data set of each torchvision format (MNIST's idx files, CIFAR's pickled batches):
#: the five models on four data sets took 25 minutes of r02's rehearsal alone, and r01-r04 repeat that loop
REDUNDANCY_LOOP = {"models": ("ViT-B", "DiNO-S"), "data": ("mnist", "cifar100")}
#: the spans of blocks r03 and r04 replace (Tables 1 and 2: 13 and 20 spans, each a pass of every probe image through
#: the changed model), cut to a multi-block span, a single block (one of ``rba_keeps_accuracy``'s) and the
#: unmodified model (``layersim.papers.redundancy.rba.spans_for``)
REDUNDANCY_SPANS = ((9, 11), (9, 10), None)
#: r02-r04's counts in a rehearsal: below their smoke presets', which are sized for the small ViTs of the smoke scale
#: at 28 px; the paper's encoders read 224 px (ViT-B: about 40 times a smoke ViT's work per image), so the smoke
#: counts made r03 alone take most of an hour. An RBA map of ViT-B is still fitted on more tokens (16 images x 197)
#: than its width (768).
_REDUNDANCY_COUNTS = {"n_fit": 16, "n_train": 64, "n_test": 32, "n_seeds": 1}


def _smoke(*keys: str, **given: Any) -> dict:
    return {**dict.fromkeys(keys, SMOKE), **given}


#: what a rehearsal cuts in each notebook's paper preset (notebook stem -> settings; :data:`SMOKE`: the smoke
#: preset's value): sample and step counts, and loops over tasks, models or repeats cut to one or two (the clusters
#: notebooks and t09 keep a GLUE task and a multiple-choice or three-class one). A notebook not listed runs its paper
#: preset as it is (t07: it builds its models on the meta device).
CUTS: dict[str, dict] = {
    # alignment
    "a01_expressivity": _smoke("n_train", "n_test", "nn_epochs", "rbf_epochs", "dl_iter", "steps"),
    "a02_emergence": _smoke("n_per_class", "n_train", "epochs"),
    "a03_circle": _smoke("n_points", "n_repeats", "steps"),
    "a04_architectures": _smoke("n_seeds", "epochs",
                                tasks={"cifar10": [150, 100], "mnist": [150, 100], "diabetes": [150, 100]}),
    "a05_layers": _smoke("n_points", "image_epochs", "regression_epochs", "n_seeds"),
    "a06_convergence": _smoke("n_points", "steps", "gd_steps"),
    "a07_peaks_transfer": _smoke("n_runs", "n_source", "n_test", "epochs", "steps"),
    "a08_pretrained_cnn": _smoke("n_tasks", "n_points", "steps"),
    "a09_source_similarity": _smoke("n_points", "n_finetune", "ft_epochs", "ft_batch"),
    "a10_negative_transfer": _smoke("rl_epochs", "rl_milestones", "ft_epochs", "batch"),
    "a11_pretrained_text": _smoke("n_tasks", "n_points", "steps", "sizes", "repeats", "char_features", "lsa_dims"),
    # clusters (c02 adds its heads' settings)
    "c01_cka_structure": _smoke("n_train", "n_val", "steps", "warmup_steps", "max_length",
                                tasks=["rte", "hellaswag"]),
    "c02_truncation": _smoke("n_train", "n_val", "steps", "warmup_steps", "max_length", "n_head_train",
                             "head_epochs", tasks=["rte", "hellaswag"]),
    "c03_layer_skipping": _smoke("n_train", "steps", "warmup_steps", "max_length", n_val=8, tasks=["rte"]),
    # (each of ALBERT-large's 300 spans is a pass over the validation texts: 48 of them took most of an hour)
    # redundancy
    "r01_block_similarity": _smoke("n_images", "batch_size"),
    "r02_block_redundancy": _smoke("batch_size", n_fit=16, n_eval=32),
    "r03_rba_classification": _smoke("batch_size", **_REDUNDANCY_COUNTS),
    "r04_skip_vs_approx": _smoke("probe_epochs", "batch_size", **_REDUNDANCY_COUNTS),
    "r05_llm_redundancy": _smoke("n_fit", "n_eval", "max_length", "batch_size", "n_images"),
    # tracing
    "t01_cos_vs_cka": _smoke("n_eval", *SHARED["TRACING_VIT"]),
    "t02_saturation_events": _smoke("n_eval"),
    "t03_aligned_training": _smoke("n_eval", "n_train_eval"),
    "t04_early_exit": _smoke("n_eval"),
    "t05_residual_mlp": _smoke("n_train", "n_eval", "epochs"),
    "t06_transfer": _smoke("n_eval", "n_transfer_train", "n_transfer_test"),
    "t08_llm_saturation": _smoke("steps", "n_texts", "max_length", "batch_size"),
    "t09_aligned_bert": _smoke("n_train", "n_val", "steps", "max_length", tasks=["rte", "mnli"]),
    "t10_aligned_gpt": _smoke("n_train", "n_eval", "n_prompts", "steps", "new_tokens", "max_length", "prompt_tokens"),
    "t11_clip": _smoke("n_eval"),
    # the layer report (its settings are layersim.tools.report_settings.PRESETS)
    "layer_report": _smoke("n_samples", "max_length", "batch_size", "n_surgery"),
}

_TRUE = {"1", "true", "yes", "on"}


def active() -> bool:
    """Whether this process rehearses the paper scale (``$LAYERSIM_REHEARSE``)."""
    return os.environ.get(ENV, "").strip().lower() in _TRUE


def runs_folder(scale: str) -> str:
    """The folder under ``runs/`` a run at ``scale`` writes to: ``rehearsal`` for a rehearsal of the paper scale, else
    the scale's name."""
    return KEY if scale == "paper" and active() else scale


def cuts_of(stem: str, presets: Mapping[str, Mapping[str, Any]]) -> dict:
    """The cuts of notebook ``stem`` (``"t01_cos_vs_cka"`` or ``"tracing/t01_cos_vs_cka"``) with ``presets`` (its
    ``PRESETS``), each :data:`SMOKE` replaced by the smoke preset's value; ``{}`` if none. A cut of a key the paper
    preset lacks, or :data:`SMOKE` for one the smoke preset lacks, is a ``ValueError``: the table and the notebook
    disagree."""
    cut = CUTS.get(stem.split("/")[-1], {})
    paper, smoke = presets["paper"], presets.get("smoke", {})
    unknown = sorted(set(cut) - set(paper))
    if unknown:
        raise ValueError(f"the rehearsal cuts {unknown} of {stem}, which its paper preset lacks; its keys are "
                         f"{sorted(paper)}")
    lacking = sorted(k for k, v in cut.items() if v == SMOKE and k not in smoke)
    if lacking:
        raise ValueError(f"the rehearsal takes {lacking} of {stem} from its smoke preset, which lacks them")
    return {k: smoke[k] if v == SMOKE else v for k, v in cut.items()}


def presets_of(stem: str, presets: Mapping[str, Mapping[str, Any]]) -> dict:
    """``presets`` with the paper preset cut by :func:`cuts_of`."""
    return {**presets, "paper": {**presets["paper"], **cuts_of(stem, presets)}}


def shared(name: str, scale: str, presets: Mapping[str, Mapping[str, Any]]) -> dict:
    """The ``scale`` preset of the shared model preset ``name`` (``presets``: all its scales) with the keys of
    :data:`SHARED` ``[name]`` at their smoke values when a rehearsal of the paper scale is on; else unchanged."""
    out = dict(presets[scale])
    if scale == "paper" and active():
        out.update({k: presets["smoke"][k] for k in SHARED.get(name, ())})
    return out


def mark(cut: Mapping[str, Any]) -> dict:
    """What a rehearsal's ``metrics.json`` carries under :data:`KEY`: that it is one, and what it cut (``cut``, from
    :func:`cuts_of`; the shared presets' keys at their smoke values)."""
    return {"note": "a rehearsal of the paper scale: random weights, fixture data, counts cut; not a result",
            "cuts": dict(cut), "shared_at_smoke": {k: list(v) for k, v in SHARED.items()}}


def not_measurable(mark: Mapping[str, Any], message: str) -> dict:
    """A rehearsal's mark (:func:`mark`) with ``message``, the ``ValueError`` a claim's measurement raised, under
    ``"not_measurable"``: quantities that only trained weights or real data define (see
    :meth:`layersim.notebook.run.Run.measuring`)."""
    if not message.strip():
        raise ValueError("a measurement that is not measurable says why: the message is empty")
    return {**mark, "not_measurable": message}
