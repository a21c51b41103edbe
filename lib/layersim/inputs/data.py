"""Any data set of the asset registry by name (:func:`load_dataset`): image sets through
:func:`layersim.inputs.image_data.image_dataset`, the Austen novels, GLUE tasks and WikiText-103 through
:mod:`layersim.inputs.text_data`; a model's name is refused.

(see docs/modules.md, ``layersim.inputs.data``)
"""

from __future__ import annotations

from typing import Any

from layersim.inputs import assets
from layersim.inputs.image_data import IMAGE_DATASETS, image_dataset
from layersim.inputs.subsets import check_split
from layersim.inputs.text_data import load_austen, load_glue, load_wikitext103

__all__ = ["load_dataset"]


def load_dataset(name: str, split: str | None = None, **kwargs: Any):
    """Load any data set by name: image sets via :func:`image_dataset`, ``"austen"`` via :func:`load_austen`,
    ``"glue/<task>"`` via :func:`load_glue`, ``"wikitext-103"`` via :func:`load_wikitext103`."""
    base, _, variant = name.partition("/")
    asset = assets.ASSETS[assets.canonical_name(base)]
    if asset.kind != "data":
        raise ValueError(f"{asset.name!r} is a model; use layersim.inputs.fetch.load_model")
    if asset.name in IMAGE_DATASETS:
        return image_dataset(asset.name, split or "train", **kwargs)
    if asset.name == "janeaustenr":
        check_split("janeaustenr", split or "all", ("all",))
        return load_austen(**kwargs)
    if asset.name == "glue":
        task = variant or kwargs.pop("task", None)
        if not task:
            raise ValueError("GLUE needs a task: load_dataset('glue/sst2') or task='sst2'")
        return load_glue(task, split or "train", **kwargs)
    return load_wikitext103(split or "train", **kwargs)
