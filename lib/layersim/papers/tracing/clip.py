"""The tracing paper's CLIP appendix (App. D, Figs. 22-23, eq. 23; notebook t11): layer-wise cosine within and
across the two towers of a CLIP model, every layer read through the final norm and projection into the shared space.

No pretrained CLIP exists offline, so the default scale trains a small CLIP (:func:`small_clip`, :func:`train_clip`,
:func:`cached_clip`) on Fashion-MNIST with templated captions; :func:`clip_for` gives the notebook's model.
:func:`projected_layers` reads every layer (``[L+1, N, e]``); :func:`zero_shot_accuracy`, :func:`rising_steps`,
:func:`late_minus_early` and :func:`layer_cosine_figure` test and draw App. D (see docs/modules.md,
`layersim.papers.tracing.clip`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.inputs import fetch, image_data
from layersim.nets import adapters, models, readout
from layersim.notebook import plotting
from layersim.nets.models import resolve_device
from layersim.train import training
from layersim.train.training import StepConfig

__all__ = ["ClipConfig", "TEMPLATES", "WordTokenizer", "cached_clip", "captions", "class_names", "clip_for", "describe",
           "image_layers", "late_minus_early", "layer_cosine_figure", "pixels_for", "projected_layers", "rising_steps",
           "small_clip", "text_layers", "train_clip", "zero_shot_accuracy"]

#: caption templates of the small CLIP's training (one drawn per image); the first is used to read it
TEMPLATES = ("a photo of a {}", "a picture of a {}", "an image of the {}", "a black and white photo of a {}",
             "this is a {}")


class WordTokenizer:
    """Lower-cased words -> ids: 0 padding, 1 start, one id per word of ``vocabulary_texts``, the end token last
    (the id CLIP's pooling reads); called like a Hugging Face tokenizer, right padding."""

    def __init__(self, vocabulary_texts: Sequence[str]):
        words = sorted({w for t in vocabulary_texts for w in self._words(t)})
        self.vocab = {w: i + 2 for i, w in enumerate(words)}
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, len(words) + 2

    @staticmethod
    def _words(text: str) -> list[str]:
        return text.lower().replace("/", " ").split()

    def __len__(self) -> int:
        return self.eos_token_id + 1

    def __call__(self, texts: str | Sequence[str], padding: bool = True, return_tensors: str = "pt", **_: Any) -> dict:
        texts = [texts] if isinstance(texts, str) else list(texts)
        rows = []
        for t in texts:
            unknown = [w for w in self._words(t) if w not in self.vocab]
            if unknown:
                raise ValueError(f"words {unknown} are not in the vocabulary of this tokenizer")
            rows.append([self.bos_token_id] + [self.vocab[w] for w in self._words(t)] + [self.eos_token_id])
        T = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), T, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1
        return {"input_ids": ids, "attention_mask": mask}


@dataclass(frozen=True)
class ClipConfig(StepConfig):
    """The small CLIP and its training (CLIP's contrastive loss, AdamW, warm-up then cosine; the
    optimisation fields and their checks: ``layersim.train.training.StepConfig``)."""

    image_size: int = 28
    patch_size: int = 7
    channels: int = 1
    width: int = 64
    layers: int = 6
    heads: int = 4
    projection: int = 64
    steps: int = 600
    batch_size: int = 128
    lr: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.width % self.heads or self.image_size % self.patch_size:
            raise ValueError("width must be a multiple of heads and image_size of patch_size")


def small_clip(cfg: ClipConfig, vocab_size: int, eos_token_id: int) -> nn.Module:
    """An untrained HF ``CLIPModel`` of ``cfg``'s size, weights drawn under ``cfg.seed``."""
    import transformers as tr

    torch.manual_seed(cfg.seed)
    common = dict(hidden_size=cfg.width, num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                  intermediate_size=2 * cfg.width)
    conf = tr.CLIPConfig(
        text_config=dict(vocab_size=vocab_size, max_position_embeddings=16, pad_token_id=0, bos_token_id=1,
                         eos_token_id=eos_token_id, **common),
        vision_config=dict(image_size=cfg.image_size, patch_size=cfg.patch_size, num_channels=cfg.channels, **common),
        projection_dim=cfg.projection)
    return tr.CLIPModel(conf)


def captions(labels: np.ndarray, class_names: Sequence[str], rng: np.random.Generator | None = None,
             templates: Sequence[str] = TEMPLATES) -> list[str]:
    """One caption per label: a template (drawn with ``rng``; the first one without) filled with the
    class name (lower case, "/" as a space)."""
    names = [c.lower().replace("/", " ") for c in class_names]
    picks = np.zeros(len(labels), int) if rng is None else rng.integers(len(templates), size=len(labels))
    return [templates[k].format(names[int(y)]) for k, y in zip(picks, labels)]


def train_clip(model: nn.Module, images: torch.Tensor, texts: list[str], tokenizer: Any, cfg: ClipConfig,
               device: Any = "auto", progress: bool = True, precision: str = "auto") -> list[dict]:
    """Train ``model`` in place with CLIP's symmetric contrastive loss on (image, caption) pairs,
    minibatches of ``cfg.batch_size`` drawn in a ``cfg.seed``-ed order (``layersim.train.training.run_steps``;
    ``precision``: ``layersim.train.training.resolve_precision``, fp32 on the CPU)."""
    dev = resolve_device(device)
    prec = training.resolve_precision(precision, dev)
    torch.manual_seed(cfg.seed)
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    order: list[int] = []

    def loss_at(step: int) -> torch.Tensor:
        nonlocal order
        if len(order) < cfg.batch_size:
            order = order + rng.permutation(len(texts)).tolist()
        take, order = order[:cfg.batch_size], order[cfg.batch_size:]
        enc = tokenizer([texts[i] for i in take])
        return model(input_ids=enc["input_ids"].to(dev), attention_mask=enc["attention_mask"].to(dev),
                     pixel_values=images[take].to(dev), return_loss=True).loss

    history = training.run_steps(opt, cfg.steps, loss_at,
                                 lambda step: training.warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.steps),
                                 "train CLIP", progress, precision=prec)
    model.eval()
    return history


def cached_clip(cfg: ClipConfig, images: torch.Tensor, texts: list[str], tokenizer: WordTokenizer, data_desc: dict,
                device: Any = "auto", progress: bool = True) -> tuple[nn.Module, dict]:
    """:func:`small_clip` trained by :func:`train_clip`, or loaded from ``<cache>/checkpoints/clip-<key>/``."""
    def fit(model, train_set, train_cfg, device, progress, precision):
        return train_clip(model, images, texts, tokenizer, cfg, device=device, progress=progress, precision=precision)

    return training.cached_model("clip", lambda: small_clip(cfg, len(tokenizer), tokenizer.eos_token_id),
                                 {"vocabulary": sorted(tokenizer.vocab)}, dataclasses.asdict(cfg), None, data_desc,
                                 device=device, progress=progress, fit=fit)


def projected_layers(clip: nn.Module, which: str, inputs: list, device: Any = "auto") -> np.ndarray:
    """``[L+1, N, e]`` float32: every layer of ``clip``'s ``"vision"`` ([CLS]) or ``"text"`` (end token) tower on
    ``inputs``, through the tower's final LayerNorm and projection; the last entry is CLIP's own embedding."""
    tower = adapters.clip_tower(clip, which)
    hidden = models.collect(tower, inputs, device=device, progress=False).hidden
    return readout.layer_logits(tower, hidden)


def pixels_for(clip: nn.Module, images: torch.Tensor, trained_on: str = "fashion-mnist") -> torch.Tensor:
    """Images in [0, 1] ``[N, C, H, W]`` as ``clip``'s vision tower reads them: ``trained_on``'s normalisation for a
    CLIP trained here, else RGB resized to its ``image_size`` with OpenAI CLIP's mean and std."""
    from transformers.utils.constants import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

    vc = clip.config.vision_config
    if vc.num_channels == 1:
        return image_data.as_model_input(images, trained_on)
    x = images.float()
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    if x.shape[-1] != vc.image_size:
        from torchvision.transforms.functional import resize

        x = resize(x, [vc.image_size, vc.image_size], antialias=True).clamp_(0.0, 1.0)
    mean, std = (torch.tensor(v, dtype=x.dtype).view(1, -1, 1, 1) for v in (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD))
    return (x - mean) / std


def class_names(dataset: str) -> list[str]:
    """The class names a caption is made of: Fashion-MNIST's and CIFAR-10's names, the digits ``"0"``..``"9"``
    for MNIST."""
    if dataset == "fashion-mnist":
        return list(image_data.FASHION_MNIST_CLASSES)
    if dataset == "cifar10":
        return list(image_data.CIFAR10_CLASSES)
    if dataset == "mnist":
        return [str(i) for i in range(10)]
    raise ValueError(f"no class names for data set {dataset!r}: 'fashion-mnist', 'cifar10' or 'mnist'")


def clip_for(settings: dict, names: Sequence[str], seed: int = 0, device: Any = "auto") -> tuple[nn.Module, Any, dict]:
    """``(clip, tokenizer, meta)`` for App. D: with ``settings["pretrained"] == "scratch"`` the small CLIP of
    ``settings`` trained on ``n_train`` images of ``dataset`` with :data:`TEMPLATES` captions, or cached
    (:func:`cached_clip`); otherwise the pretrained CLIP of that name (``meta`` without a checkpoint)."""
    if settings["pretrained"] != "scratch":
        clip, tok = fetch.load_model(settings["pretrained"], device=device)
        return clip, tok, {"key": None, "train_seconds": 0.0}
    images, labels = image_data.image_dataset(settings["dataset"], "train", limit=settings["n_train"], seed=seed,
                                              normalize=False).tensors()
    tok = WordTokenizer([t.format(n) for t in TEMPLATES + (settings["template"],) for n in names])
    steps = settings["steps"]
    cfg = ClipConfig(width=settings["width"], layers=settings["layers"], projection=settings["width"], steps=steps,
                     batch_size=settings["batch_size"], lr=settings["lr"], warmup_steps=max(1, steps // 12), seed=seed)
    texts = captions(labels.numpy(), names, np.random.default_rng(seed))
    clip, meta = cached_clip(cfg, image_data.as_model_input(images, settings["dataset"]), texts, tok,
                             {"dataset": settings["dataset"], "n_train": len(texts), "seed": seed}, device=device)
    return clip, tok, meta


def describe(meta: dict) -> str:
    """One line on a CLIP of :func:`clip_for`: the small CLIP's size, training and contrastive loss, or that it
    was loaded pretrained."""
    if meta.get("key") is None:
        return "pretrained CLIP"
    cfg = meta["train"]
    how = "from the cache" if meta.get("from_cache") else f"trained in {meta['train_seconds']:.0f} s"
    return (f"small CLIP, {cfg['layers']} blocks per tower, width {cfg['width']}: {cfg['steps']} steps of "
            f"{cfg['batch_size']} pairs ({how}); contrastive loss {meta['history'][0]['loss']:.2f} -> "
            f"{meta['history'][-1]['loss']:.2f}")


def image_layers(clip: nn.Module, images: torch.Tensor, dataset: str, device: Any = "auto",
                 batch_size: int = 256) -> np.ndarray:
    """:func:`projected_layers` of the vision tower ([CLS] token) on ``images`` in [0, 1] (:func:`pixels_for`
    ``dataset``), read ``batch_size`` at a time: ``[L+1, N, e]``."""
    x = pixels_for(clip, images, dataset)
    return projected_layers(clip, "vision", [x[i:i + batch_size] for i in range(0, len(x), batch_size)], device=device)


def text_layers(clip: nn.Module, tokenizer: Any, texts: Sequence[str], device: Any = "auto",
                batch_size: int = 256) -> np.ndarray:
    """:func:`projected_layers` of the text tower (end token) on ``texts``, tokenised ``batch_size`` at a time
    (padded within each batch): ``[L+1, N, e]``."""
    texts = list(texts)
    return projected_layers(clip, "text", [dict(tokenizer(texts[i:i + batch_size], padding=True, return_tensors="pt"))
                                           for i in range(0, len(texts), batch_size)], device=device)


def zero_shot_accuracy(image_embeddings: np.ndarray, class_embeddings: np.ndarray, labels: Any) -> float:
    """CLIP's zero-shot accuracy: the fraction of images ``[N, e]`` whose embedding is closest in cosine to their
    own class's caption ``[K, e]``."""
    images, classes, labels = np.asarray(image_embeddings), np.asarray(class_embeddings), np.asarray(labels)
    if images.ndim != 2 or classes.ndim != 2 or images.shape[1] != classes.shape[1] or labels.shape != images.shape[:1]:
        raise ValueError(f"zero_shot_accuracy needs images [N, e], classes [K, e] and labels [N]; got {images.shape}, "
                         f"{classes.shape} and {labels.shape}")

    def unit(a):
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    return float(((unit(images) @ unit(classes).T).argmax(1) == labels).mean())


def rising_steps(*to_last: np.ndarray) -> np.ndarray:
    """App. D's within-tower statement: for each COS-with-last curve ``[L]``, whether each step ``l -> l+1``,
    ``l = 1..L-2``, rises; pooled into one boolean array."""
    return np.concatenate([np.diff(np.asarray(c)[:-1]) > 0 for c in to_last])


def late_minus_early(curve: np.ndarray) -> float:
    """App. D's cross-modal statement: a per-block curve's mean over its last third of blocks minus that over its
    first third (``ceil(L / 3)`` blocks each)."""
    curve = np.asarray(curve)
    third = int(np.ceil(len(curve) / 3))
    return float(curve[-third:].mean() - curve[:third].mean())


def layer_cosine_figure(within_vision: np.ndarray, within_text: np.ndarray, cross: np.ndarray):
    """The tracing paper's Figures 22 and 23: COS of every block with the last, within and across towers (left), and
    the all-pairs maps within each tower and across (vision rows, text columns). Returns the figure."""
    import matplotlib.pyplot as plt

    L = len(within_vision)
    blocks = np.arange(1, L + 1)
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.4))
    axes[0].plot(blocks, within_vision[:, -1], "o-", label="vision: COS(v^l, v^L)")
    axes[0].plot(blocks, within_text[:, -1], "s-", label="text: COS(t^l, t^L)")
    axes[0].plot(blocks, cross[:, -1], "^--", label="cross: COS(v^l, t^L)")
    axes[0].plot(blocks, cross[-1, :], "v--", label="cross: COS(t^l, v^L)")
    axes[0].set(xlabel="block l", ylabel="COS with the last block", title="Fig. 22: similarity with the last layer",
                xticks=blocks)
    axes[0].grid()
    axes[0].legend(fontsize=8)
    for ax, (M, title, xl, yl) in zip(axes[1:], [(within_vision, "(a) within the vision tower", "block", "block"),
                                                 (within_text, "(b) within the text tower", "block", "block"),
                                                 (cross, "(c) vision (rows) vs text (columns)", "text block",
                                                  "vision block")]):
        plotting.layer_heatmap(M, layers=blocks, ax=ax, vmin=min(0.0, float(np.min(M))), title=title, xlabel=xl,
                               ylabel=yl, label="COS")
    fig.tight_layout()
    return fig
