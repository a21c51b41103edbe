"""The layer report's settings at each scale (``layersim report``, ``notebooks/report/layer_report.ipynb``): the presets,
their rules and :func:`settings_for`, which cuts the paper preset in a rehearsal of the paper scale; apart from
:mod:`layersim.tools.report`, which runs the notebook, so that the fetch-ahead list
(:mod:`layersim.tools.assets`) reads them without importing the runner (see docs/modules.md,
``layersim.tools.report_settings``).
"""

from __future__ import annotations

from typing import Any

from layersim.notebook import rehearsal, settings

__all__ = ["PRESETS", "RULES", "rehearsal_mark", "settings_for"]

#: the report's settings at each scale (``None``: the model's default token, every lens, the notebook's own folder)
PRESETS = {
    "smoke": dict(model="all-minilm-l6-v2", dataset="austen", token=None, n_samples=48, lenses=None, max_length=32,
                  batch_size=16, max_in_memory=20000, n_surgery=8, out=None),
    "default": dict(model="all-minilm-l6-v2", dataset="austen", token=None, n_samples=2000, lenses=None,
                    max_length=128, batch_size=64, max_in_memory=20000, n_surgery=128, out=None),
    "paper": dict(model="bert-base-uncased", dataset="sst2", token=None, n_samples=10000, lenses=None,
                  max_length=128, batch_size=128, max_in_memory=20000, n_surgery=1000, out=None),
}


#: the validation of every setting of :data:`PRESETS` (``layersim.notebook.settings`` rules)
RULES = {
    "model": settings.text(), "dataset": settings.text(),
    "token": settings.optional(settings.choice("cls", "mean", "last"), "the model's default"),
    "n_samples": settings.integer(4), "lenses": settings.optional(settings.seq(settings.text()), "every lens"),
    "max_length": settings.integer(4), "batch_size": settings.integer(1), "max_in_memory": settings.integer(4),
    "n_surgery": settings.integer(0, meaning="0 turns the skip / approximate lenses off"),
    "out": settings.optional(settings.text(), "the notebook's own folder"),
}


def settings_for(scale: str, seed: Any = 0, device: Any = "auto", **overrides: Any) -> dict:
    """The report's validated settings: :data:`PRESETS` ``[scale]`` with the non-None ``overrides``
    (``layersim.notebook.settings.pick``); one ``ValueError`` naming a bad value. In a rehearsal of the paper scale
    the paper preset's counts are cut (``layersim.notebook.rehearsal.CUTS["layer_report"]``)."""
    presets = rehearsal.presets_of("layer_report", PRESETS) if scale == "paper" and rehearsal.active() else PRESETS
    return settings.pick(presets, scale, seed=seed, device=device, rules=RULES, **overrides)


def rehearsal_mark(scale: str) -> dict:
    """What the report's ``metrics.json`` adds in a rehearsal of the paper scale: the rehearsal's mark with what it
    cut (``{"rehearsal": ...}``, :func:`layersim.notebook.rehearsal.mark`); ``{}`` otherwise."""
    if scale == "paper" and rehearsal.active():
        return {rehearsal.KEY: rehearsal.mark(rehearsal.cuts_of("layer_report", PRESETS))}
    return {}
