"""The model and data set of a layer report: names checked before anything loads, then loaded and batched.

:func:`model_spec` reads a model name (a registered asset, ``tracing-vit[:scale]``, a folder with a Hugging Face
``config.json``, or ``timm:<name>``) and :func:`data_spec` a data set name (:data:`DATA_SETS`, the text tasks, a
folder of images with one sub-folder per class, or a ``.txt`` file of one text per line) without loading them;
:func:`check` refuses a bad name or combination with one ``ValueError``. :func:`load_model`, :func:`load_data` and
:func:`batches` make what :func:`layersim.analysis.layer_report.analyze` reads; :func:`model_runs` and
:func:`logit_lens` its surgery runs and logit-lens verdict (see docs/modules.md, `layersim.tools.report_inputs`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from layersim.analysis import extraction, layer_report, lenses as lens_registry
from layersim.core import writers
from layersim.inputs import assets, fetch, image_data, text_data, text_tasks
from layersim.nets import adapters
from layersim.notebook.presets import TRACING_VIT
from layersim.train import training

__all__ = ["DATA_SETS", "DataSpec", "Inputs", "Loaded", "ModelSpec", "batches", "check", "data_spec", "load_data",
           "load_model", "local_path", "logit_lens", "model_runs", "model_spec"]

#: offline and paper-scale image data sets a report reads (the test split), and the text sources
IMAGE_SETS = ("fashion-mnist", "digits", "mnist", "cifar10", "cifar100")
TEXT_SOURCES = ("austen", "python-docs")
DATA_SETS = IMAGE_SETS + TEXT_SOURCES
#: the weight files transformers loads from a model folder (one of them must be there)
WEIGHT_FILES = ("model.safetensors", "model-*.safetensors", "pytorch_model.bin", "pytorch_model-*.bin")



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
    """Check ``model``, ``data`` and ``lenses`` (default every lens of the four papers,
    :data:`layersim.analysis.layer_report.PAPER_LENSES`) before anything loads, and that the modalities agree;
    returns the two specs and the lens names, or raises ``ValueError``."""
    m, d = model_spec(model), data_spec(data)
    if m.modality != d.modality:
        raise ValueError(f"{model!r} reads {m.modality}s but {data!r} is {'an' if d.modality == 'image' else 'a'} {d.modality} data set; choose "
                         f"{'an image' if m.modality == 'image' else 'a text'} data set "
                         f"({', '.join(IMAGE_SETS if m.modality == 'image' else TEXT_SOURCES)}, ...)")
    return m, d, layer_report.lens_names("all" if lenses is None else lenses)


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



# ----------------------------------------------------------------------------- what analyze reads


def batches(loaded: Loaded, inputs: Inputs, batch_size: int = 64, max_length: int = 128) -> list:
    """The model's batches: normalised images (``image_data.as_model_input``) or tokenised texts (right padding,
    truncated to ``max_length``, sorted by length: far less padding), each with its labels."""
    import torch

    out = []
    n = len(inputs)
    if inputs.texts is not None:  # batches of similar length (the order is irrelevant to every lens)
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



def _subset(inputs: Inputs, index: Any) -> Inputs:
    """The samples ``index`` of ``inputs``, in that order."""
    import dataclasses

    pick = (lambda seq: None if seq is None else [seq[i] for i in index])
    return dataclasses.replace(
        inputs, images=None if inputs.images is None else inputs.images[index], texts=pick(inputs.texts),
        pairs=pick(inputs.pairs), labels=None if inputs.labels is None else np.asarray(inputs.labels)[index])



def model_runs(loaded: Loaded, inputs: Inputs, n: int, token: str | None = None, batch_size: int = 64,
               max_length: int = 128, device: Any = "auto") -> Any:
    """What the lenses that run the model again read (``layersim.analysis.lenses.ModelRuns``; None for ``n=0``):
    ``n`` stratified samples (``layersim.analysis.extraction.stratified``), alternately to fit RBA maps on and to
    compare final representations on, in batches of at most ``extraction.SURGERY_BATCH``."""
    if n == 0:
        return None
    if n < 4:
        raise ValueError(f"n_surgery must be 0 (off) or at least 4, got {n}")
    pick = extraction.stratified(inputs.labels, len(inputs), n)
    size = min(batch_size, extraction.SURGERY_BATCH)
    fit, ev = (batches(loaded, _subset(inputs, rows), size, max_length) for rows in (pick[0::2], pick[1::2]))
    return lens_registry.ModelRuns(loaded.model, fit, ev, token, device)


def logit_lens(loaded: Loaded, inputs: Inputs) -> bool | str:
    """True where the logit lens reads ``loaded`` on ``inputs`` (its own head, trained on these classes), else why
    not: no head or a vocabulary (``layersim.analysis.extraction.head_note``), no labels, other classes."""
    why = extraction.head_note(loaded.model)
    if why:
        return why
    if inputs.labels is None:
        return "the data set has no labels"
    if loaded.trained_on is None or loaded.trained_on != inputs.spec.name:
        return (f"the head was not trained on {inputs.spec.name}'s classes"
                + (f" (it was trained on {loaded.trained_on})" if loaded.trained_on else ""))
    return True
