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

__all__ = ["CUTS", "ENV", "KEY", "SHARED", "active", "cuts_of", "mark", "presets_of", "runs_folder", "shared"]

#: the environment variable that turns the rehearsal on (``1``, ``true``, ``yes``, ``on``)
ENV = "LAYERSIM_REHEARSE"
#: the key of the mark in a rehearsal's ``metrics.json``
KEY = "rehearsal"

#: the model presets several notebooks share, cut in a rehearsal (``layersim.notebook.presets``): name -> settings
#: that replace the paper preset's. Only counts: images, epochs, batch sizes; the architectures stay.
SHARED: dict[str, dict] = {
    "TRACING_VIT": dict(n_train=256, epochs=1, batch_size=64, milestones=()),
    "ALIGNMENT_SOURCE_CNN": dict(n_source=200, epochs=1, batch_size=32, milestones=()),
}

#: what a rehearsal cuts in each notebook's paper preset (notebook stem -> settings): sample and step counts, and
#: loops over tasks, models or repeats cut to one or two. A notebook not listed runs its paper preset as it is.
CUTS: dict[str, dict] = {
    # alignment
    "a01_expressivity": dict(n_train=64, n_test=64, nn_epochs=2, rbf_epochs=2, dl_iter=2, steps=20),
    "a02_emergence": dict(n_per_class=64, n_train=128, epochs=2),
    "a03_circle": dict(n_points=100, n_repeats=4, steps=20),
    "a04_architectures": dict(tasks={"cifar10": [64, 64], "mnist": [64, 64], "diabetes": [64, 32]}, n_seeds=1,
                              epochs=2),
    "a05_layers": dict(n_points=128, image_epochs=2, regression_epochs=2, n_seeds=2),
    "a06_convergence": dict(n_points=100, steps=50, gd_steps=50),
    "a07_peaks_transfer": dict(n_runs=2, n_source=200, n_test=100, epochs=2, steps=20),
    "a08_pretrained_cnn": dict(n_tasks=1, n_points=64, steps=20),
    "a09_source_similarity": dict(n_points=64, n_finetune=64, ft_epochs=1, ft_batch=32),
    "a10_negative_transfer": dict(rl_epochs=2, rl_milestones=[1], ft_epochs=1, batch=16),
    "a11_pretrained_text": dict(n_tasks=2, n_points=64, steps=20, sizes=[10, 30], repeats=1, char_features=500,
                                lsa_dims=10),
    # clusters (c02 adds its heads' settings)
    "c01_cka_structure": dict(n_train=32, n_val=16, steps=2, batch_size=4, warmup_steps=1, max_length=32,
                              tasks=["rte", "hellaswag"]),
    "c02_truncation": dict(n_train=32, n_val=16, steps=2, batch_size=4, warmup_steps=1, max_length=32,
                           tasks=["rte", "hellaswag"], n_head_train=32, head_epochs=1),
    "c03_layer_skipping": dict(n_train=32, n_val=16, steps=2, batch_size=4, warmup_steps=1, max_length=32,
                               tasks=["rte", "hellaswag"]),
    # redundancy
    "r01_block_similarity": dict(n_images=16, batch_size=16),
    "r02_block_redundancy": dict(n_fit=16, n_eval=16, batch_size=16),
    "r03_rba_classification": dict(n_fit=16, n_train=32, n_test=16, n_seeds=1, batch_size=16),
    "r04_skip_vs_approx": dict(n_fit=16, n_train=32, n_test=16, n_seeds=1, probe_epochs=1, batch_size=16),
    "r05_llm_redundancy": dict(n_fit=16, n_eval=16, max_length=32, batch_size=8, n_images=32),
    # tracing
    "t01_cos_vs_cka": dict(n_eval=64, **SHARED["TRACING_VIT"]),
    "t02_saturation_events": dict(n_eval=64),
    "t03_aligned_training": dict(n_eval=64, n_train_eval=64),
    "t04_early_exit": dict(n_eval=64),
    "t05_residual_mlp": dict(n_train=256, n_eval=64, epochs=1),
    "t06_transfer": dict(n_eval=64, n_transfer_train=64, n_transfer_test=64),
    "t08_llm_saturation": dict(steps=2, n_texts=8, max_length=32, batch_size=4),
    "t09_aligned_bert": dict(tasks=["rte", "mnli"], n_train=32, n_val=16, steps=2, max_length=32),
    "t10_aligned_gpt": dict(n_train=64, n_eval=16, n_prompts=2, steps=2, new_tokens=4, max_length=32,
                            prompt_tokens=8),
    "t11_clip": dict(n_eval=64),
}

_TRUE = {"1", "true", "yes", "on"}


def active() -> bool:
    """Whether this process rehearses the paper scale (``$LAYERSIM_REHEARSE``)."""
    return os.environ.get(ENV, "").strip().lower() in _TRUE


def runs_folder(scale: str) -> str:
    """The folder under ``runs/`` a run at ``scale`` writes to: ``rehearsal`` for a rehearsal of the paper scale, else
    the scale's name."""
    return KEY if scale == "paper" and active() else scale


def cuts_of(stem: str) -> dict:
    """The cuts of notebook ``stem`` (``"t01_cos_vs_cka"`` or ``"tracing/t01_cos_vs_cka"``), ``{}`` if none."""
    return dict(CUTS.get(stem.split("/")[-1], {}))


def presets_of(stem: str, presets: Mapping[str, Mapping[str, Any]]) -> dict:
    """``presets`` with the paper preset cut by :func:`cuts_of` (a cut of a key the preset lacks is a ``ValueError``:
    the table and the notebook disagree)."""
    cut = cuts_of(stem)
    paper = dict(presets["paper"])
    unknown = sorted(set(cut) - set(paper))
    if unknown:
        raise ValueError(f"the rehearsal cuts {unknown} of {stem}, which its paper preset lacks; its keys are "
                         f"{sorted(paper)}")
    return {**presets, "paper": {**paper, **cut}}


def shared(name: str, scale: str, settings: Mapping[str, Any]) -> dict:
    """``settings`` (the ``scale`` preset of the shared model preset ``name``) with :data:`SHARED` ``[name]`` over it
    when a rehearsal of the paper scale is on; else unchanged."""
    out = dict(settings)
    if scale == "paper" and active():
        out.update(SHARED.get(name, {}))
    return out


def mark(stem: str) -> dict:
    """What a rehearsal's ``metrics.json`` carries under :data:`KEY`: that it is one, and what it cut."""
    return {"note": "a rehearsal of the paper scale: random weights, fixture data, counts cut; not a result",
            "cuts": cuts_of(stem), "shared": {k: dict(v) for k, v in SHARED.items()}}
