"""``layersim report``: every lens of the four papers on any model, from one extraction pass.

A report reads every layer of a **model** once on a **data set** (:func:`extract`) and applies every lens of
:mod:`layersim.analysis.lenses` that the inputs allow (:func:`run_lenses`); a lens that does not apply is listed as
skipped, with the reason. Models (:func:`model_spec`): a registered asset, ``tracing-vit[:scale]``, a folder
with a Hugging Face ``config.json``, or ``timm:<name>``. Data sets (:func:`data_spec`): :data:`DATA_SETS`, the
text tasks, a folder of images with one sub-folder per class, or a ``.txt`` file of one text per line. :func:`check`
refuses a bad name or combination with one ``ValueError`` before anything loads (see docs/modules.md,
`layersim.tools.report`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layersim.core import locks, markup, writers
from layersim.core.device import check_device
from layersim.core.paths import cache_dir, check_locations, repo_root, resolved_variables
from layersim.inputs import assets, fetch, image_data, text_data, text_tasks
from layersim.measures import block_structure, similarity
from layersim.nets import adapters, models, readout
from layersim.analysis import lenses as lens_registry
from layersim.notebook import plotting, results, settings
from layersim.notebook.run import shown_path
from layersim.notebook.presets import TRACING_VIT
from layersim.tools import committed
from layersim.tools.plans import lock_place
from layersim.tools.runner import describe_failure, kernel_options, publish, temporary_environ
from layersim.train import training

__all__ = ["DATA_SETS", "LENS_GROUPS", "DataSpec", "ModelSpec", "Report", "check", "data_spec", "extract",
           "key_numbers", "load_data", "load_model", "local_path", "model_spec", "run_lenses", "slug"]

#: offline and paper-scale image data sets a report reads (the test split), and the text sources
IMAGE_SETS = ("fashion-mnist", "digits", "mnist", "cifar10", "cifar100")
TEXT_SOURCES = ("austen", "python-docs")
DATA_SETS = IMAGE_SETS + TEXT_SOURCES
#: lens name patterns, one per paper: what ``lenses=None`` applies
LENS_GROUPS = ("cos/*", "cka/to_last", "cka/matrix", "residual/*", "logit_lens/*", "redundancy/*",
               "alignment/*", "clusters/*", "collapse/*", "probe/*")
#: the weight files transformers loads from a model folder (one of them must be there)
WEIGHT_FILES = ("model.safetensors", "model-*.safetensors", "pytorch_model.bin", "pytorch_model-*.bin")
#: a logit lens over a vocabulary bigger than this is skipped (its [E, N, V] logits would not fit)
MAX_LOGIT_CLASSES = 1000


@dataclass(frozen=True)
class ModelSpec:
    """What :func:`model_spec` found out about a model name, without loading it."""

    name: str
    kind: str  # "asset" | "tracing-vit" | "folder" | "timm"
    modality: str  # "image" | "text"
    detail: str = ""  # the asset name, the scale, the folder or the timm name


@dataclass(frozen=True)
class DataSpec:
    """What :func:`data_spec` found out about a data set name, without loading it."""

    name: str
    kind: str  # "image-set" | "text-source" | "text-task" | "image-folder" | "text-file"
    modality: str
    labelled: bool


def slug(name: str) -> str:
    """A folder name for a model or data set name (``runs/report/<slug>/``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name).strip().rstrip("/")).strip("-").lower() or "model"


# ----------------------------------------------------------------------------- what a name means


def _shown(name: str, limit: int = 120) -> str:
    """``name`` quoted for a message, cut after ``limit`` characters."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


def _path_like(name: str) -> bool:
    """Whether ``name`` is spelt as a path (a separator, a leading ``~`` or ``.``, a ``.txt`` suffix), and so is
    reported as a missing file."""
    return "/" in name or os.sep in name or name.startswith(("~", ".")) or name.lower().endswith(".txt")


def local_path(name: str, what: str) -> Path | None:
    """The file or folder ``name`` names as the operating system reads it (``~`` expanded, relative to the working
    directory, symlinks followed), or None. ``ValueError`` starting with ``what`` when it cannot be looked up."""
    try:
        path = writers.resolved(name)
        return path if path.exists() else None
    except ValueError:  # a NUL byte: no file has this name
        return None
    except OSError as err:
        raise ValueError(f"{what} {_shown(name)}: {err.strerror or err}") from None


def _missing(name: str, what: str, instead: str) -> ValueError | None:
    """The error for a path-like ``name`` (:func:`_path_like`) where nothing is, naming the path looked at and what
    else the name could be (``instead``)."""
    if not _path_like(name):
        return None
    try:
        where = writers.resolved(name)
    except ValueError:
        return None
    return ValueError(f"{what} {_shown(name)}: no file or folder at {where} (or give {instead})")


def model_spec(name: str) -> ModelSpec:
    """The kind and modality of ``name`` (module docstring), from names and files only; ValueError
    naming the accepted forms when it is none of them."""
    name = str(name).strip()
    if not name:
        raise ValueError("model is empty: give a registered model, tracing-vit, a model folder or timm:<name>")
    if name == "tracing-vit" or name.startswith("tracing-vit:"):
        scale = name.partition(":")[2] or "default"

        if scale not in TRACING_VIT:
            raise ValueError(f"tracing-vit:{scale}: the scale must be one of {sorted(TRACING_VIT)}")
        return ModelSpec(name, "tracing-vit", "image", scale)
    if name.startswith("timm:"):
        timm_adapter(name[5:])
        return ModelSpec(name, "timm", "image", name[5:])
    path = local_path(name, "unknown model")
    if path is not None and not path.is_dir() and _path_like(name):
        raise ValueError(f"{_shown(name)} is a file; a model folder holds a Hugging Face config.json and the weights "
                         "(model.save_pretrained(folder))")
    if path is not None and path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{name!r} is a folder without a Hugging Face config.json; save the model with "
                             "model.save_pretrained(folder) (and its tokenizer) first")
        adapter = folder_adapter(path)
        if not any(any(path.glob(pattern)) for pattern in WEIGHT_FILES):
            raise ValueError(f"{name!r} holds a config.json but no weights ({', '.join(WEIGHT_FILES)}); save the "
                             "model with model.save_pretrained(folder) first")
        return ModelSpec(name, "folder", "text" if adapter.inputs == "text" else "image", str(path))
    missing = _missing(name, "unknown model", "a registered model, tracing-vit[:scale] or timm:<name>")
    if missing:
        raise missing
    try:
        asset = assets.get_asset(name)
    except ValueError as err:
        raise ValueError(f"unknown model {_shown(name)}: use a registered model ({', '.join(a.name for a in assets.list_assets('model'))}), "
                         f"tracing-vit[:scale], a folder with a Hugging Face config.json, or timm:<name> ({err})") from None
    if asset.kind != "model":
        raise ValueError(f"{name!r} is a data set; pass it as the data set (--data) and choose a model")
    return ModelSpec(name, "asset", "text" if asset.has_tokenizer else "image", asset.name)


def _skeleton_adapter(build: Any, what: str) -> Any:
    """The adapter of the model ``build()`` makes on PyTorch's meta device (no memory, no weights); ``ValueError``
    starting with ``what`` when none fits."""
    import torch

    with torch.device("meta"):
        skeleton = build()
    try:
        return adapters.get(skeleton)
    except NotImplementedError as err:
        raise ValueError(f"{what} ({type(skeleton).__name__}), but {err}") from None


def folder_adapter(path: str | os.PathLike) -> Any:
    """The adapter of the model saved in ``path``, found from its ``config.json`` on the meta device **before any
    weight is read**; ``ValueError`` naming the family when no adapter fits or transformers does not know it."""
    import transformers as tr

    try:
        config = tr.AutoConfig.from_pretrained(str(path))
    except (ValueError, KeyError, OSError) as err:
        raise ValueError(f"{str(path)!r}: transformers cannot read its config.json ({err})") from None
    if config.model_type == "clip":
        raise ValueError(f"{str(path)!r} holds a whole CLIP model; a report reads one tower: save it on its own, e.g. "
                         "CLIPVisionModelWithProjection.from_pretrained(folder).save_pretrained(vision_folder)")
    try:
        return _skeleton_adapter(lambda: tr.AutoModel.from_config(config),
                                 f"{str(path)!r} holds a {config.model_type!r} model")
    except KeyError as err:
        raise ValueError(f"{str(path)!r}: transformers has no model for model_type={config.model_type!r} ({err})") from None


def timm_adapter(name: str) -> Any:
    """The adapter of timm model ``name``, found on the meta device before any download; ``ValueError`` for an unknown
    name or a family without an adapter."""
    import difflib

    import timm

    if not name or not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.7) if name else []
        raise ValueError(f"timm has no model {name!r}" + (f"; close names: {', '.join(close)}" if close else "")
                         + " (timm.list_models('*vit*') lists them)")
    return _skeleton_adapter(lambda: timm.create_model(name, pretrained=False), f"timm:{name} is a timm model")


def data_spec(name: str) -> DataSpec:
    """The kind, modality and labels of data set ``name`` (module docstring); ValueError listing the
    accepted names when it is none of them."""
    name = str(name).strip()
    key = name.lower().replace("_", "-")
    if key in ("fashion-mnist", "digits", "mnist", "cifar10", "cifar100"):
        return DataSpec(key, "image-set", "image", True)
    if key in ("austen", "janeaustenr"):
        return DataSpec("austen", "text-source", "text", True)
    if key == "python-docs":
        return DataSpec(key, "text-source", "text", False)
    if key in text_tasks.OFFLINE_TASKS or key in text_tasks.PAPER_TASKS:
        return DataSpec(key, "text-task", "text", True)
    path = local_path(name, "unknown data set")
    if path is not None and path.is_dir():
        try:
            classes = [p for p in sorted(path.iterdir()) if p.is_dir()]
        except OSError as err:
            raise ValueError(f"{name!r}: cannot read the folder {path} ({err.strerror or err})") from None
        if not classes:
            raise ValueError(f"{name!r}: an image folder needs one sub-folder of images per class")
        return DataSpec(str(path), "image-folder", "image", True)
    if path is not None:
        if path.suffix.lower() != ".txt":
            raise ValueError(f"{name!r}: a text file must be a .txt file with one text per line")
        return DataSpec(str(path), "text-file", "text", False)
    missing = _missing(name, "unknown data set", f"one of {', '.join(DATA_SETS)} or a text task")
    if missing:
        raise missing
    raise ValueError(f"unknown data set {_shown(name)}: use one of {', '.join(DATA_SETS)}, a text task "
                     f"({', '.join(text_tasks.OFFLINE_TASKS)}, or a GLUE name), a folder of images in one "
                     "sub-folder per class, or a .txt file with one text per line")


def check(model: str, data: str, lenses: list[str] | None = None) -> tuple[ModelSpec, DataSpec, list[str]]:
    """Check ``model``, ``data`` and ``lenses`` (default :data:`LENS_GROUPS`) before anything loads, and that the
    modalities agree; returns the two specs and the lens names, or raises ``ValueError``."""
    m, d = model_spec(model), data_spec(data)
    if m.modality != d.modality:
        raise ValueError(f"{model!r} reads {m.modality}s but {data!r} is {'an' if d.modality == 'image' else 'a'} {d.modality} data set; choose "
                         f"{'an image' if m.modality == 'image' else 'a text'} data set "
                         f"({', '.join(IMAGE_SETS if m.modality == 'image' else TEXT_SOURCES)}, ...)")
    names: list[str] = []
    for pattern in (LENS_GROUPS if lenses is None else lenses):
        found = lens_registry.names(pattern)
        if not found:
            lens_registry.get(pattern)  # the registry's error, with the closest names
        names += [n for n in found if n not in names]
    return m, d, names


# ----------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    """A loaded model: the module, its tokenizer (text) and the image data set its inputs are
    normalised like (images), with a one-line description."""

    model: Any
    tokenizer: Any = None
    input_like: str | None = None
    trained_on: str | None = None
    description: str = ""


def load_model(spec: ModelSpec, device: Any = "auto", progress: bool = False) -> Loaded:
    """Load the model of ``spec`` (weights downloaded only where the asset allows), and check that
    its family has an adapter (ValueError naming the supported families otherwise)."""
    if spec.kind == "tracing-vit":
        s = TRACING_VIT[spec.detail]
        model, meta = training.vit_from_settings(s, device=device, progress=progress)
        out = Loaded(model, None, s["dataset"], s["dataset"],
                     f"the tracing paper's ViT at the {spec.detail} scale ({s['depth']} blocks, width {s['embed_dim']}), "
                     f"trained here on {s['dataset']} ({'cached' if meta.get('from_cache') else 'trained now'})")
    elif spec.kind == "timm":
        import timm

        model = timm.create_model(spec.detail, pretrained=assets.downloads_allowed()).eval()
        out = Loaded(model, None, "imagenet", None, f"timm {spec.detail}")
    elif spec.kind == "folder":
        import transformers as tr

        model = tr.AutoModel.from_pretrained(spec.detail).eval()
        tok = tr.AutoTokenizer.from_pretrained(spec.detail) if spec.modality == "text" else None
        out = Loaded(model, tok, None if tok else "imagenet", None, f"the model in {spec.detail}")
    else:
        model, tok = fetch.load_model(spec.detail)
        out = Loaded(model, tok, None if tok is not None else "imagenet", None,
                     assets.get_asset(spec.detail).description)
    if out.tokenizer is not None and out.tokenizer.pad_token is None:  # decoders: pad with EOS
        out.tokenizer.pad_token = out.tokenizer.eos_token
    try:
        adapters.get(out.model)
    except NotImplementedError as err:
        raise ValueError(f"{spec.name!r} loaded, but {err}") from None
    return out


@dataclass
class Inputs:
    """The samples of a report: ``images`` (``[N, C, H, W]`` in [0, 1]) or ``texts`` (and ``pairs``
    for a sentence-pair task), ``labels`` ``[N]`` or None, ``label_names``."""

    spec: DataSpec
    images: Any = None
    texts: list[str] | None = None
    pairs: list[str] | None = None
    labels: np.ndarray | None = None
    label_names: tuple = ()

    def __len__(self) -> int:
        """N, the number of samples."""
        return len(self.images) if self.images is not None else len(self.texts)


def load_data(spec: DataSpec, n: int, seed: int = 0) -> Inputs:
    """At most ``n`` samples of ``spec`` (all of a smaller set): an image set's test split (stratified), held-out
    Austen sentences, a text task's validation split, a seeded sample of a text source, or a seeded choice from a
    class folder or a text file. ``ValueError`` below 4 samples."""
    import torch

    if n < 4:
        raise ValueError(f"n_samples must be at least 4, got {n}")
    if spec.kind == "image-set":
        split = "all" if spec.name == "digits" else "test"
        ds = image_data.image_dataset(spec.name, split, limit=n, seed=seed, normalize=False, at_most=True)
        x, y = ds.tensors()
        return Inputs(spec, images=x, labels=y.numpy(), label_names=tuple(ds.classes))
    if spec.kind == "text-source" and spec.name == "austen":
        task = text_tasks.load_task("austen-novel", "validation", n=n, seed=seed, at_most=True)
        return Inputs(spec, texts=task.text_a, labels=task.labels, label_names=task.label_names)
    if spec.kind == "text-source":
        return Inputs(spec, texts=text_data.text_sample(spec.name, n, seed=seed, at_most=True))
    if spec.kind == "text-task":
        task = text_tasks.load_task(spec.name, "validation", n=n, seed=seed, at_most=True)
        if task.multiple_choice:
            raise ValueError(f"{spec.name!r} is multiple choice; a report reads one text (or pair) per sample")
        return Inputs(spec, texts=task.text_a, pairs=task.text_b, labels=np.asarray(task.labels),
                      label_names=task.label_names)
    rng = np.random.default_rng(seed)
    if spec.kind == "text-file":
        lines = [t.strip() for t in Path(spec.name).read_text(encoding="utf-8").splitlines() if t.strip()]
        if len(lines) < 4:
            raise ValueError(f"{spec.name}: need at least 4 non-empty lines, found {len(lines)}")
        keep = np.sort(rng.choice(len(lines), min(n, len(lines)), replace=False))
        return Inputs(spec, texts=[lines[i] for i in keep])
    from PIL import Image

    classes = [p for p in sorted(Path(spec.name).iterdir()) if p.is_dir()]
    files = [(f, k) for k, c in enumerate(classes) for f in sorted(c.iterdir())
             if f.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")]
    if len(files) < 4:
        raise ValueError(f"{spec.name}: need at least 4 images in its class folders, found {len(files)}")
    keep = np.sort(rng.choice(len(files), min(n, len(files)), replace=False))
    images = []
    for i in keep:
        with Image.open(files[i][0]) as im:
            arr = np.asarray(im.convert("RGB").resize((224, 224)), dtype=np.float32) / 255.0
        images.append(torch.from_numpy(arr).permute(2, 0, 1))
    return Inputs(spec, images=torch.stack(images), labels=np.array([files[i][1] for i in keep]),
                  label_names=tuple(c.name for c in classes))


# ----------------------------------------------------------------------------- one pass, then every lens


def _batches(loaded: Loaded, inputs: Inputs, batch_size: int, max_length: int) -> list:
    """The model's batches: normalised images (``image_data.as_model_input``) or tokenised texts (right
    padding, truncated to ``max_length``), each with its labels."""
    import torch

    out = []
    n = len(inputs)
    if inputs.texts is not None:  # batches of similar length: far less padding (the order is irrelevant to every lens)
        inputs = _by_length(inputs, loaded.tokenizer, max_length)
    for s in range(0, n, batch_size):
        y = None if inputs.labels is None else torch.as_tensor(inputs.labels[s:s + batch_size])
        if inputs.images is not None:
            x = image_data.as_model_input(inputs.images[s:s + batch_size], loaded.input_like)
            out.append(x if y is None else (x, y))
            continue
        tok = loaded.tokenizer
        second = None if inputs.pairs is None else inputs.pairs[s:s + batch_size]
        enc = dict(tok(inputs.texts[s:s + batch_size], second, padding=True, truncation=True, max_length=max_length,
                       return_tensors="pt"))
        if y is not None:
            enc["labels"] = y
        out.append(enc)
    return out


def _by_length(inputs: Inputs, tokenizer: Any, max_length: int) -> Inputs:
    """``inputs`` with its texts (pairs, labels) sorted by tokenised length (stable)."""
    return _subset(inputs, text_tasks.length_order(tokenizer, inputs.texts, inputs.pairs, max_length))


@dataclass
class Report:
    """The extracted layers (``layersim.analysis.lenses.LayerData``), each lens's result or the reason it was
    skipped, and what was read (``meta``)."""

    data: Any
    results: dict[str, np.ndarray] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    streamed: dict[str, np.ndarray] = field(default_factory=dict)  # lenses computed over every sample while streaming


def _logits(loaded: Loaded, inputs: Inputs, hidden: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The logit lens's input (``readout.layer_logits``) when the model's own classifier can be read
    against these labels, else None and why."""
    try:
        head = models.classifier_head(loaded.model)
    except (ValueError, NotImplementedError, AttributeError) as err:
        return None, f"the model has no classifier head to read every layer with ({err})"
    k = getattr(head, "out_features", None) or getattr(getattr(head, "weight", None), "shape", [None])[0]
    if k is not None and k > MAX_LOGIT_CLASSES:
        return None, (f"its head has {k} outputs (a vocabulary): the [layers, samples, {k}] logits are not kept; "
                      "the token-level logit lens of a language model is notebook t08")
    if inputs.labels is None:
        return None, "the data set has no labels"
    if loaded.trained_on is None or loaded.trained_on != inputs.spec.name:
        return None, (f"the head was not trained on {inputs.spec.name}'s classes"
                      + (f" (it was trained on {loaded.trained_on})" if loaded.trained_on else ""))
    if hidden is None:
        return None, "not read in a streamed report (more samples than max_in_memory)"
    return readout.layer_logits(loaded.model, hidden), ""


def extract(loaded: Loaded, inputs: Inputs, token: str | None = None, batch_size: int = 64, max_length: int = 128,
            device: Any = "auto", progress: bool = False, max_in_memory: int = 20000,
            workdir: str | os.PathLike | None = None, n_surgery: int = 128) -> Report:
    """One forward pass over the samples (:func:`layersim.nets.models.collect`; texts batched by length, so samples and
    labels come in that order), then every layer's logits where they apply: a :class:`Report` without lens results.
    Beyond ``max_in_memory`` samples the features go to a memmap in ``workdir``, the similarity lenses are streamed
    (:func:`streamed_similarity`) and the rest read a stratified subsample. ``n_surgery`` samples feed
    :func:`model_runs`."""
    import tempfile
    import time

    n = len(inputs)
    streamed = n > max_in_memory
    out = None
    if streamed:
        folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="layersim-report-"))
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "hidden.npy"
    t0 = time.perf_counter()
    feats = models.collect(loaded.model, _batches(loaded, inputs, batch_size, max_length), token=token, device=device,
                           progress=progress, out=out)
    seconds = time.perf_counter() - t0
    labels = None if feats.labels is None else np.asarray(feats.labels).astype(np.int64)  # in the batches' order
    const = constant_entries(feats.hidden)
    keep = [i for i in range(feats.hidden.shape[0]) if i not in const]
    if len(keep) < 2:
        raise ValueError(f"the token read ({token or 'the default'}) is the same in every sample at all but "
                         f"{len(keep)} layer(s); choose another token (e.g. token='mean')")
    layers = [feats.layers[i] for i in keep]
    meta = {"n_samples": int(feats.hidden.shape[1]), "n_entries": len(keep), "constant_layers_left_out":
            [feats.layers[i] for i in const], "width": int(feats.hidden.shape[2]),
            "token": token or "the model's default", "extract_seconds": seconds, "model": loaded.description,
            "label_names": list(inputs.label_names)}
    streamed_results = {}
    if streamed:
        streamed_results = streamed_similarity(feats.hidden, keep)
        sub = stratified(labels, n, max_in_memory)
        meta["subsample"] = {"n": len(sub), "why": f"{n} samples > max_in_memory={max_in_memory}: the similarity "
                             "lenses are streamed over all of them, the others read this evenly spaced subsample"}
        hidden = np.stack([np.asarray(feats.hidden[i, sub]) for i in keep])
        labels = None if labels is None else labels[sub]
    else:
        hidden = feats.hidden if not const else feats.hidden[keep]
    logits, why = _logits(loaded, inputs, None if streamed else feats.hidden)
    if logits is not None and const:
        logits = logits[keep]
    meta["logits"] = "computed" if logits is not None else f"not available: {why}"
    runs, meta["surgery"] = (model_runs(loaded, inputs, n_surgery, token, batch_size, max_length, device)
                             if n_surgery else (None, "off (n_surgery=0)"))
    data = lens_registry.LayerData(hidden=hidden, labels=labels, logits=logits, layers=layers, model=runs)
    return Report(data, meta=meta, streamed=streamed_results)


def stratified(labels: np.ndarray | None, n: int, k: int) -> np.ndarray:
    """Sorted indices of ``k`` of ``n`` samples, evenly spaced over the samples ordered by label (each class in
    proportion), or over their own order when ``labels`` is None; all when ``k >= n``."""
    ranked = np.arange(n) if labels is None else np.argsort(np.asarray(labels), kind="stable")  # by class
    return np.unique(ranked[np.linspace(0, n - 1, min(k, n)).round().astype(int)])


def _subset(inputs: Inputs, index: Any) -> Inputs:
    """The samples ``index`` of ``inputs``, in that order."""
    import dataclasses

    pick = (lambda seq: None if seq is None else [seq[i] for i in index])
    return dataclasses.replace(
        inputs, images=None if inputs.images is None else inputs.images[index], texts=pick(inputs.texts),
        pairs=pick(inputs.pairs), labels=None if inputs.labels is None else np.asarray(inputs.labels)[index])


#: batch size of the passes that run the model again: a few dozen texts sorted by length pad far less in
#: batches of 16 than in one batch (MiniLM, 64 Austen sentences: 0.43 s a pass instead of 1.55 s)
SURGERY_BATCH = 16


def model_runs(loaded: Loaded, inputs: Inputs, n: int, token: str | None = None, batch_size: int = 64,
               max_length: int = 128, device: Any = "auto") -> tuple[Any, str]:
    """What the lenses that run the model again read (``layersim.analysis.lenses.ModelRuns``), and a line saying so:
    ``n`` stratified samples, alternately to fit RBA maps on and to compare final representations on, in batches of
    at most :data:`SURGERY_BATCH`."""
    total = len(inputs)
    if n < 4:
        raise ValueError(f"n_surgery must be 0 (off) or at least 4, got {n}")
    pick = stratified(inputs.labels, total, n)
    fit, ev = pick[0::2], pick[1::2]
    size = min(batch_size, SURGERY_BATCH)
    runs = lens_registry.ModelRuns(loaded.model, _batches(loaded, _subset(inputs, fit), size, max_length),
                            _batches(loaded, _subset(inputs, ev), size, max_length), token, device)
    why = f"{len(fit)} samples to fit RBA maps on, {len(ev)} to compare the final representations on"
    return runs, why


#: the lenses :func:`streamed_similarity` computes over all samples when a report streams
STREAMED = ("cka/matrix", "cka/to_last", "clusters/block_diagonal", "cos/matrix", "cos/to_last")


def streamed_similarity(hidden: np.ndarray, keep: list[int], chunk: int = 4096) -> dict[str, np.ndarray]:
    """The lenses of :data:`STREAMED` over every sample of ``hidden [E, N, d]`` for the entries ``keep``, read
    ``chunk`` samples at a time (memory independent of N): exact linear CKA and centred COS."""
    cos = similarity.streamed_cosine_matrix(hidden, keep, chunk)
    acc = similarity.StreamingCKA()
    for s in range(0, hidden.shape[1], chunk):
        acc.update(np.asarray(hidden[keep, s:s + chunk]))
    cka = acc.result()
    return {"cka/matrix": cka, "cka/to_last": cka[:, -1].copy(), "clusters/block_diagonal": block_structure.split_scores(cka),
            "cos/matrix": cos, "cos/to_last": cos[:, -1].copy()}


def constant_entries(hidden: np.ndarray) -> list[int]:
    """The entries of ``hidden [E, N, d]`` whose token is the same vector in every sample (to float64 rounding), such
    as a CLS token at the embedding output: no centred measure is defined on them."""
    out = []
    n, chunk = hidden.shape[1], 4096
    for i in range(hidden.shape[0]):  # two passes of chunks: memory independent of N (a memmap is fine)
        total, absmax = np.zeros(hidden.shape[2]), 0.0
        for s in range(0, n, chunk):
            h = np.asarray(hidden[i, s:s + chunk], dtype=np.float64)
            total += h.sum(axis=0)
            absmax = max(absmax, float(np.abs(h).max()))
        mean, ss = total / n, 0.0
        for s in range(0, n, chunk):
            ss += float(((np.asarray(hidden[i, s:s + chunk], dtype=np.float64) - mean) ** 2).sum())
        if np.sqrt(ss) <= 64 * np.finfo(float).eps * np.sqrt(n * hidden.shape[2]) * absmax:
            out.append(i)
    return out


def _why_not(lens, data, logit_reason: str) -> str | None:
    """Why ``lens`` cannot run on ``data`` (None if it can)."""
    missing = sorted(k for k in lens.needs if getattr(data, k) is None)
    if not missing:
        return None
    if "logits" in missing and logit_reason:
        return f"needs logits: {logit_reason}"
    if missing == ["model"]:
        return "runs the model again with blocks skipped or approximated; n_surgery=0 turned that off"
    return f"needs {', '.join(missing)}, which this data set does not have"


def run_lenses(report: Report, names: list[str], progress: bool = False) -> Report:
    """Apply each lens of ``names`` to ``report.data``; one that cannot run (a missing input, its own ``ValueError``)
    goes to ``report.skipped`` with why. Seconds per lens: ``report.meta["lens_seconds"]``."""
    import time

    reason = report.meta.get("logits", "")
    reason = reason.split(": ", 1)[1] if reason.startswith("not available") else ""
    seconds = {}
    streamed = report.streamed
    for name in names:
        lens = lens_registry.get(name)
        if name in streamed:  # computed over every sample while streaming (memory independent of N)
            report.results[name] = streamed[name]
            seconds[name] = 0.0
            continue
        why = _why_not(lens, report.data, reason)
        if why:
            report.skipped[name] = why
            continue
        t0 = time.perf_counter()
        try:
            report.results[name] = lens_registry.apply(name, report.data)
        except ValueError as err:
            report.skipped[name] = f"did not apply: {err}"
        seconds[name] = time.perf_counter() - t0
        if progress:
            print(f"{name}: {seconds[name]:.1f} s", flush=True)
    report.meta["lens_seconds"] = seconds
    return report


def summary_table(report: Report) -> str:
    """Markdown: one row per lens (ran: its output's shape and a one-line digest; skipped: why), every
    string escaped (:mod:`layersim.core.markup`: a reason may quote a user's path or model name)."""
    layers = report.data.layers or list(range(report.data.n_entries or 0))
    rows = []
    for name in sorted(set(report.results) | set(report.skipped)):
        lens = lens_registry.get(name)
        if name in report.skipped:
            rows.append([markup.code(name), markup.cell(lens.paper), markup.cell(f"skipped: {report.skipped[name]}")])
            continue
        v = np.asarray(report.results[name], dtype=float)
        if lens.returns == "per_pair":
            digest = f"{v.shape[0]} × {v.shape[1]} matrix, off-diagonal mean {v[~np.eye(len(v), dtype=bool)].mean():.3f}"
        elif lens.returns in ("per_sample_step", "per_sample_layer"):
            digest = "median per layer: " + ", ".join(f"{x:.3g}" for x in np.median(v, axis=1))
        elif lens.returns == "per_sample":
            digest = f"mean {v.mean():.2f}, median {np.median(v):.0f} over {v.size} samples"
        else:
            digest = ", ".join(f"{x:.3g}" for x in v)
        rows.append([markup.code(name), markup.cell(lens.paper), markup.cell(digest)])
    intro = (f"Layers read: {markup.cell(', '.join(map(str, layers)))} (0 = embedding output, i = output of block i). "
             "Per-layer results are listed in this order; per-step ones compare each layer with the one before it "
             "(from the second on).")
    return intro + "\n\n" + markup.table(["lens", "paper", "result"], rows, raw=True)


#: the per-layer lenses whose values the report's last cell shows, by the key it shows them under
KEY_LENSES = {"cka_to_last": "cka/to_last", "cos_to_last": "cos/to_last"}


def key_numbers(report: Report) -> dict[str, Any]:
    """What the report's last cell shows: the number of layers, the lenses that ran and those skipped, and each lens of
    :data:`KEY_LENSES` that ran."""
    out = {"layers": len(report.data.layers), "ran": sorted(report.results), "skipped": sorted(report.skipped)}
    out.update({key: report.results[name] for key, name in KEY_LENSES.items() if name in report.results})
    return out


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
    (``layersim.notebook.settings.pick``); one ``ValueError`` naming a bad value."""
    return settings.pick(PRESETS, scale, seed=seed, device=device, rules=RULES, **overrides)


def recorded_settings(P: dict, seed: int) -> dict:
    """``P`` (:func:`settings_for`) with the seed, as ``metrics.json`` records it: an output folder inside the
    repository shown relative to it, so that no machine's folders are named."""
    out = P.get("out")
    return {**P, "seed": seed, "out": None if out is None else shown_path(Path(out))}


def _is_report_folder(folder: Path) -> bool:
    """Whether ``folder`` holds what a report writes (its executed notebook or its metrics.json)."""
    if (folder / NOTEBOOK.name).is_file():
        return True
    try:
        return json.loads((folder / "metrics.json").read_text()).get("notebook") == "report/layer_report"
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out: str | os.PathLike) -> Path:
    """``out`` resolved, if a report may write there: outside the committed results unless the switch is on
    (:func:`layersim.core.writers.check_target`), and new, empty or an earlier report's folder. ``ValueError``
    otherwise."""
    path = writers.check_target(out, "the report folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"the report folder {out} is a file")
    try:  # layersim's own bookkeeping (the mark of a folder it made, a run's lock) is no one's file
        entries = writers.foreign_files(path) if path.is_dir() else []
    except OSError as err:
        raise ValueError(f"the report folder {out} cannot be read ({err.strerror or err})") from None
    if entries and not _is_report_folder(path):
        raise ValueError(f"the report folder {out} holds files that no report wrote: choose a new or empty folder")
    return path


def ready_out(out: str | os.PathLike) -> Path:
    """``out`` made ready for a report (:func:`check_out`, then :func:`layersim.core.writers.prepare_folder`): an
    earlier report's folder is adopted as layersim's (:func:`layersim.core.writers.adopt_folder`) and its figures,
    ``metrics.json`` and ``report.html`` removed."""
    path = check_out(out)
    if path.is_dir() and _is_report_folder(path):
        writers.adopt_folder(path)
    return writers.prepare_folder(path, "the report folder")


def output_folder(out: str | os.PathLike | None, scale: str) -> Path:
    """Where a report writes, made ready (checked, writable, an earlier report's figures and numbers removed): ``out``
    if given (:func:`ready_out`), else the notebook's own folder, ``results.output_dir("report", "layer_report",
    scale)``."""
    if out:
        return ready_out(out)
    return results.output_dir("report", "layer_report", scale)


# ----------------------------------------------------------------------------- figures


#: per-layer lenses drawn against the layer, with their axis label
#: what the colour of each all-pairs matrix of the report measures
MATRIX_LABELS = {"cka/matrix": "linear CKA", "cos/matrix": "COS"}
_PER_LAYER = {"cos/to_last": "COS with the last layer", "cka/to_last": "CKA with the last layer",
              "alignment/area": "alignment area", "probe/accuracy": "linear-probe accuracy",
              "logit_lens/accuracy": "logit-lens accuracy", "collapse/nc1": "NC1 (log scale)"}
#: per-step lenses (entry i-1 compares layers i-1 and i); per-sample-step ones are drawn by their median
_PER_STEP = {"redundancy/block": "Block Redundancy (-MSE)", "redundancy/rba_error": "RBA held-out 1 - R²",
             "clusters/block_diagonal": "two-cluster score (split after layer)",
             "cos/adjacent": "adjacent-layer cosine (median)", "residual/norm_ratio": "skip / residual norm (median)",
             "redundancy/skip_change": "final representation: relative MSE",
             "redundancy/rba_change": "final representation: relative MSE"}
#: per-step lenses drawn in one panel (the redundancy paper's skip vs approximate): panel title -> (lens, legend)
_TOGETHER = {"skip vs approximate (log scale)": (("redundancy/skip_change", "blocks skipped"),
                                                 ("redundancy/rba_change", "blocks approximated (RBA)"))}


def figures(report: Report, title: str = "") -> dict[str, Any]:
    """The report's figures, ``{file stem: matplotlib figure}``: ``matrices`` (CKA and COS between all pairs),
    ``per_layer`` and ``per_step`` (a panel per lens) and ``saturation`` (a histogram), each only when one of its
    lenses ran."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    res, layers = report.results, report.data.layers or list(range(report.data.n_entries))
    out = {}
    mats = [n for n in ("cka/matrix", "cos/matrix") if n in res]
    if mats:
        fig, axes = plt.subplots(1, len(mats), figsize=(6.2 * len(mats), 5), squeeze=False)
        for ax, name in zip(axes[0], mats):
            plotting.layer_heatmap(res[name], layers=layers, ax=ax, title=name, vmin=None,
                                   annotate=len(layers) <= 13, label=MATRIX_LABELS[name])
        fig.suptitle(title)
        out["matrices"] = fig
    for key, table, xs in (("per_layer", _PER_LAYER, np.asarray(layers)),
                           ("per_step", _PER_STEP, np.asarray(layers[1:]))):
        panels = [(n, ((n, None),)) for n in table if n in res]  # (heading, ((lens, legend), ...))
        if key == "per_step":
            for heading, members in _TOGETHER.items():
                present = tuple(m for m in members if m[0] in res)
                if len(present) > 1:
                    panels = [p for p in panels if p[0] not in dict(present)] + [(heading, present)]
        if not panels:
            continue
        cols = min(3, len(panels))
        rows = -(-len(panels) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
        for ax, (heading, members) in zip(axes.ravel(), panels):
            for (name, legend), color in zip(members, ("tab:blue", "tab:orange")):
                v = np.asarray(res[name], dtype=float)
                v = np.median(v, axis=1) if v.ndim == 2 else v
                ax.plot(xs, v, "o-", color=color, label=legend)
            if heading == "collapse/nc1" or len(members) > 1:
                ax.set_yscale("log")
            if len(members) > 1:
                ax.legend(frameon=False, fontsize=8)
            ax.set_title(heading, fontsize=10)
            ax.set_ylabel(table[members[0][0]], fontsize=9)
            ax.set_xlabel("layer (0 = embeddings)" if key == "per_layer" else "layer i (compared with i - 1)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(panels):]:
            ax.axis("off")
        fig.suptitle(title)
        fig.tight_layout()
        out[key] = fig
    if "logit_lens/saturation" in res:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        sat = np.asarray(res["logit_lens/saturation"])
        ax.hist(sat, bins=np.arange(min(layers), max(layers) + 2) - 0.5, color="tab:orange")
        ax.set_xlabel("saturation layer")
        ax.set_ylabel("samples")
        ax.set_title(f"logit_lens/saturation ({title})", fontsize=10)
        out["saturation"] = fig
    return out


def digest(report: Report) -> dict[str, Any]:
    """The numbers of ``metrics.json``: every per-layer and per-step result in full, matrices in
    full, per-sample results by their mean/median per layer (the raw arrays can be recomputed)."""
    out = {}
    for name, v in report.results.items():
        kind = lens_registry.get(name).returns
        v = np.asarray(v, dtype=float)
        if kind in ("per_sample_step", "per_sample_layer"):
            out[name] = {"median_per_layer": np.median(v, axis=1), "mean_per_layer": v.mean(axis=1)}
        elif kind == "per_sample":
            out[name] = {"mean": float(v.mean()), "median": float(np.median(v)),
                         "counts": np.bincount(v.astype(int)).tolist()}
        else:
            out[name] = v
    return out


def work_folder(model: str, data: str) -> Path:
    """Where a streamed report keeps its feature memmap: ``<cache>/report/<model>__<data>/`` (never in
    ``figures/``; removed by deleting the cache)."""
    return cache_dir("report", f"{slug(model)}__{slug(data)}")


# ----------------------------------------------------------------------------- the command line


NOTEBOOK = Path("notebooks") / "report" / "layer_report.ipynb"


def export_html(executed: Path, html: Path) -> Path:
    """The executed notebook as one self-contained, sanitised HTML page (nbconvert, the ``layersim_offline`` template:
    figures embedded, code kept, nothing loaded from the network, so formulas show as LaTeX source), written whole
    or not at all."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(sanitize_html=True, template_name="layersim_offline",
                            extra_template_basedirs=[str(Path(__file__).parent / "templates")])
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    return writers.write_text(html, body, protect=True)


def default_out(model: str, data: str) -> Path:
    """A report's folder when ``--out`` is not given: ``$LAYERSIM_OUT/report/<model>__<data>`` (a relative
    ``LAYERSIM_OUT`` against the working directory), else ``runs/report/<model>__<data>``."""
    env = os.environ.get("LAYERSIM_OUT")
    base = writers.resolved(env) if env else repo_root() / "runs"
    return base / "report" / f"{slug(model)}__{slug(data)}"


#: the kinds of model and data set whose name is a path on this machine
LOCAL_KINDS = ("folder", "image-folder", "text-file")


def kernel_name(spec: ModelSpec | DataSpec, given: str) -> str:
    """The model or data set name to hand the report's kernel, which runs in ``notebooks/report/``: the resolved
    absolute path of a local folder or file (:data:`LOCAL_KINDS`), else the name ``given``."""
    if spec.kind not in LOCAL_KINDS:
        return given
    return spec.detail if isinstance(spec, ModelSpec) else spec.name


def main(argv: list[str] | None = None) -> int:
    """``python -m layersim report --model M --data D [...]``: check the names, settings and output folder, run the
    report notebook with papermill into ``--out`` (default :func:`default_out`) with absolute paths
    (:func:`kernel_name`), and export ``report.html``. Exit 2 with one line for a bad name, value, device, cache or
    folder, before anything runs; 1 naming a failed cell."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m layersim report",
                                 description="every lens of the four papers on one model and data set")
    ap.add_argument("--model", required=True, help="a registered model, tracing-vit[:scale], a Hugging Face folder or timm:NAME")
    ap.add_argument("--data", required=True, help=f"{', '.join(DATA_SETS)}, a text task, an image folder or a .txt file")
    ap.add_argument("--n", type=int, default=None, help="samples (default 2000)")
    ap.add_argument("--token", choices=("cls", "mean", "last"), default=None)
    ap.add_argument("--lenses", default=None, help="comma-separated lens names or patterns (default: all)")
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--max-in-memory", type=int, default=None,
                    help="above this many samples, stream the similarity lenses (default 20000)")
    ap.add_argument("--n-surgery", type=int, default=None,
                    help="samples the skip / approximate lenses run the model again on (default 128; 0: off)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--scale", default="default", choices=("smoke", "default", "paper"),
                    help="the presets the unset options come from (default: default)")
    ap.add_argument("--out", default=None, help="output folder: new, empty or an earlier report's (default "
                    "runs/report/<model>__<data>, or $LAYERSIM_OUT/report/<model>__<data>)")
    ap.add_argument("--update-committed", action="store_true",
                    help="allow --out inside figures/ (the committed report examples)")
    args = ap.parse_args(argv)
    if args.out is not None and not args.out.strip():
        ap.error("--out is empty: give a folder, or leave --out out for runs/report/<model>__<data>")
    lens_list = None
    if args.lenses is not None:
        lens_list = [x.strip() for x in args.lenses.split(",") if x.strip()]
        if not lens_list:
            ap.error(f"--lenses {args.lenses!r} names no lens: give comma-separated lens names or patterns")
    overrides = {"n_samples": args.n, "token": args.token, "lenses": lens_list, "max_length": args.max_length,
                 "batch_size": args.batch_size, "max_in_memory": args.max_in_memory, "n_surgery": args.n_surgery}
    root = repo_root()
    switch = "1" if args.update_committed else "0"
    try:
        with temporary_environ(**{writers.SWITCH: switch}):
            settings_for(args.scale, device=args.device, model=args.model, dataset=args.data, **overrides)
            spec, dspec, _ = check(args.model, args.data, lens_list)
            check_device(args.device)
            check_locations()
            out = check_out(args.out or default_out(args.model, args.data))
    except ValueError as err:
        ap.error(str(err).splitlines()[0])
    params = {"scale": args.scale, "model": kernel_name(spec, args.model), "dataset": kernel_name(dspec, args.data),
              "device": args.device, "out": str(out), **{k: v for k, v in overrides.items() if v is not None}}
    try:
        with committed.stops(), locks.hold([lock_place(out)], "python -m layersim report"):
            committed.recover()
            # a committed example is kept aside before its folder is cleared, and put back unless the report ends
            keep = committed.snapshot(out) if args.update_committed else None
            try:
                with temporary_environ(**{writers.SWITCH: switch}):
                    ready_out(out)
                code = _execute(root, out, params, switch, args.update_committed)
            except BaseException:
                with committed.shielded():
                    committed.end_children()
                    if keep is not None:
                        committed.restore(keep)
                raise
            if keep is not None:
                if code == 0:
                    committed.drop(keep)
                else:
                    committed.restore(keep)
            return code
    except ValueError as err:  # a lock held by a live run, a folder that is not layersim's
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, committed.Stopped) as exc:
        print(f"report {exc or 'stopped by SIGINT'}: {out} is as it was" if args.update_committed else
              f"report {exc or 'stopped by SIGINT'}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, committed.Stopped) else 130


def _execute(root: Path, out: Path, params: dict, switch: str, update: bool) -> int:
    """Run the report notebook with ``params`` into ``out`` and export ``report.html``, publishing a committed example
    when ``update``; returns 0, or 1 after one line naming a failed cell."""
    import time

    import papermill as pm

    executed = out / NOTEBOOK.name
    t0 = time.perf_counter()
    print(f"report: {params['model']} on {params['dataset']} -> {out}", flush=True)
    try:
        with temporary_environ(**{writers.SWITCH: switch}, **resolved_variables()):
            pm.execute_notebook(str(root / NOTEBOOK), str(executed), parameters=params, progress_bar=False,
                                cwd=str(root / NOTEBOOK.parent), **kernel_options())
            if update:  # a committed example: no progress bars, no machine's folders
                publish(executed, executed, root)
            html = export_html(executed, out / "report.html")
    except Exception as exc:  # noqa: BLE001 - papermill's error for a failed cell: one line, the notebook kept
        print(f"report failed at {describe_failure(exc)} -- see {executed}", file=sys.stderr)
        return 1
    print(f"done in {time.perf_counter() - t0:.0f} s: {html} (open it in a browser), {executed}, figures and "
          f"metrics.json in {out}")
    return 0
