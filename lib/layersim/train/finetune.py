"""Fine-tuning pretrained Hugging Face encoders for text classification, one loop, cached.

:class:`FinetuneConfig`'s defaults are the clusters paper's (§2 "Optimization"): Adam, batch 4, learning rate 1e-5,
1,000 warm-up steps, up to 10,000 steps, linear decay (:func:`lr_at`). :func:`finetune` is the loop, :func:`predict`
/ :func:`evaluate` score a task, :func:`load_classifier` adds a fresh head, and :func:`cached_finetune` trains once
per configuration and restart (a restart changes the seed of the head, dropout and batch order).
:func:`cls_features` and :func:`layer_scores` read a fine-tuned encoder layer by layer (see docs/modules.md,
`layersim.train.finetune`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.inputs import assets, fetch, text_tasks
from layersim.nets import adapters, models, readout
from layersim.nets.models import evaluating, resolve_device
from layersim.train import objectives, training
from layersim.train.training import StepConfig

__all__ = ["FinetuneConfig", "OBJECTIVES", "aligned_loss", "cached_finetune", "check_names", "check_steps_or_epochs",
           "cls_features", "config_from", "evaluate", "fine_tuned", "finetune", "layer_scores", "load_classifier",
           "lr_at", "predict", "steps_for", "steps_of", "task_data"]


#: ``"ce"``: the task loss on the last layer (standard fine-tuning); ``"aligned"``: the tracing
#: paper's eq. (5) over the encoder's layers with the one shared head (AlignedBERT, §4)
OBJECTIVES = ("ce", "aligned")


@dataclass(frozen=True)
class FinetuneConfig(StepConfig):
    """One fine-tuning run (defaults: the clusters paper's, §2); ``objective``: one of :data:`OBJECTIVES`."""

    lr: float = 1e-5
    batch_size: int = 4
    warmup_steps: int = 1000
    steps: int = 10_000
    max_length: int = 128
    weight_decay: float = 0.0
    seed: int = 0
    objective: str = "ce"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.max_length < 4:
            raise ValueError(f"max_length must be >= 4, got {self.max_length}")


def steps_for(n_examples: int, batch_size: int, epochs: float) -> int:
    """Optimiser steps of ``epochs`` passes over ``n_examples`` in batches of ``batch_size``:
    ``ceil(epochs * n_examples / batch_size)``; ``ValueError`` for non-positive inputs."""
    if n_examples < 1 or batch_size < 1 or not (math.isfinite(epochs) and epochs > 0):
        raise ValueError(f"need n_examples, batch_size >= 1 and epochs > 0, got {n_examples}, {batch_size}, {epochs}")
    return int(math.ceil(epochs * n_examples / batch_size))


def lr_at(step: int, cfg: FinetuneConfig) -> float:
    """Learning rate at optimiser step ``step`` (0-based): ``lr * (step + 1) / warmup`` during the
    warm-up, then linear decay to 0 at ``cfg.steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - cfg.warmup_steps))


def _to(batch: dict, dev: torch.device) -> dict:
    return {k: v.to(dev) for k, v in batch.items()}


def aligned_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """The tracing paper's aligned loss, eq. (5), for a fine-tuned encoder (AlignedBERT, §4, App. C.2):
    ``sum_l lambda_l CE(W h^(l), y)`` over blocks ``1..L`` with the model's own classifier on each block's CLS token
    and ``lambda_l = 2l/(L(L+1))``. ``ValueError`` unless a BERT-like single-label classifier."""
    adapter = adapters.get(model)
    if adapter.name not in ("bert", "albert", "distilbert") or type(model).__name__.endswith("ForMultipleChoice"):
        raise ValueError(f"the aligned loss is implemented for BERT-like sequence classifiers, not {type(model).__name__}")
    labels = batch["labels"]
    if labels.dtype.is_floating_point:
        raise ValueError("the aligned loss needs class labels (a regression task has none)")
    out = model.base_model(**{k: v for k, v in batch.items() if k != "labels"}, output_hidden_states=True)
    head, norm = adapter.head(model), adapter.final_norm(model)
    logits = torch.stack([head(norm(h[:, 0])) for h in out.hidden_states[1:]])
    return objectives.weighted_ce(logits, labels, objectives.layer_weights(len(logits)))


def finetune(model: nn.Module, task: text_tasks.TextTask, cfg: FinetuneConfig, tokenizer: Any = None,
             device: Any = "auto", progress: bool = True, precision: str = "auto") -> list[dict]:
    """Fine-tune ``model`` (a HF ``*ForSequenceClassification`` or ``*ForMultipleChoice``) in place on ``task`` for
    ``cfg.steps`` AdamW steps (``cfg.seed``-ed batch order); ``tokenizer`` defaults to ``model.layersim_tokenizer``.
    Returns :func:`~layersim.train.training.run_steps`'s history. ``ValueError`` when the model does not fit the
    task, ``FloatingPointError`` on a non-finite loss."""
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "layersim_tokenizer", None)
    if tokenizer is None:
        raise ValueError("finetune needs the model's tokenizer (pass tokenizer=)")
    mc = type(model).__name__.endswith("ForMultipleChoice")
    if mc != task.multiple_choice:
        raise ValueError(f"task {task.name!r} is {'' if task.multiple_choice else 'not '}multiple choice but the model is "
                         f"a {type(model).__name__}: load it with load_classifier(..., multiple_choice={task.multiple_choice})")
    if not mc and task.num_labels != getattr(model.config, "num_labels", task.num_labels):
        raise ValueError(f"the model has {model.config.num_labels} outputs, task {task.name!r} has "
                         f"{task.num_labels} labels")
    dev = resolve_device(device)
    prec = training.resolve_precision(precision, dev)
    torch.manual_seed(cfg.seed)
    model.to(dev).train()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith("bias") and "LayerNorm" not in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and (n.endswith("bias") or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr)
    rng = np.random.default_rng(cfg.seed)
    order = np.empty(0, dtype=np.int64)

    def loss_at(step: int) -> torch.Tensor:
        nonlocal order
        if len(order) < cfg.batch_size:
            order = np.concatenate([order, rng.permutation(len(task))])
        take, order = order[:cfg.batch_size], order[cfg.batch_size:]
        batch = _to(text_tasks.encode(task, tokenizer, cfg.batch_size, cfg.max_length, order=take)[0], dev)
        return model(**batch).loss if cfg.objective == "ce" else aligned_loss(model, batch)

    history = training.run_steps(opt, cfg.steps, loss_at, lambda step: lr_at(step, cfg), f"fine-tune {task.name}",
                                 progress, what="fine-tuning", precision=prec)
    model.eval()
    return history


def predict(model: nn.Module, batches: list[dict], device: Any = "auto") -> np.ndarray:
    """Logits ``[N, num_labels]`` (float64) of ``model`` on tokenised ``batches`` (labels ignored;
    a multiple-choice model: ``[N, C]``, one per ending)."""
    dev = resolve_device(device)
    out = []
    with evaluating(model.to(dev)):
        for b in batches:
            out.append(model(**_to({k: v for k, v in b.items() if k != "labels"}, dev)).logits.double().cpu())
    return torch.cat(out).numpy()


def evaluate(model: nn.Module, task: text_tasks.TextTask, tokenizer: Any = None, batch_size: int = 64,
             max_length: int = 128, device: Any = "auto") -> float:
    """``model``'s score on ``task`` (its metric: accuracy, Matthews or Pearson correlation)."""
    tokenizer = tokenizer if tokenizer is not None else model.layersim_tokenizer
    logits = predict(model, text_tasks.encode(task, tokenizer, batch_size, max_length), device)
    return text_tasks.score(task, text_tasks.predictions(task, logits))


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' "newly initialized weights" notice (the head is new by design)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_classifier(name: str, num_labels: int, seed: int = 0, random_init: bool = False,
                    config: dict | None = None, multiple_choice: bool = False) -> nn.Module:
    """The registered encoder ``name`` with a new ``num_labels`` head initialised under ``seed``
    (``multiple_choice``: one logit per (context, ending) pair), its tokenizer as ``model.layersim_tokenizer``.
    ``random_init``: random weights, ``config`` overriding fields (tests)."""
    torch.manual_seed(seed)
    auto = "AutoModelForMultipleChoice" if multiple_choice else "AutoModelForSequenceClassification"
    kwargs = {} if multiple_choice else {"num_labels": num_labels}
    with quiet_transformers():
        model, tok = fetch.load_model(name, random_init=random_init, auto_class=auto, eval_mode=False,
                                       config=config, **kwargs)
    if tok is not None and tok.pad_token is None:  # decoders (LLaMA, GPT-2): pad with EOS, right side
        tok.pad_token = tok.eos_token
    if tok is not None:
        tok.padding_side = "right"
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tok.pad_token_id
    model.layersim_tokenizer = tok
    return model


def cached_finetune(name: str, task: text_tasks.TextTask, cfg: FinetuneConfig, restart: int = 1,
                    device: Any = "auto", progress: bool = True, retrain: bool = False,
                    tokenizer: Any = None, random_init: bool = False,
                    config: dict | None = None) -> tuple[nn.Module, dict]:
    """Model ``name`` fine-tuned on ``task`` under ``cfg`` with restart ``restart`` (1, 2, ...: seed
    ``cfg.seed + restart - 1``), or loaded from the checkpoint cache. Returns ``(model in eval mode, meta)``;
    ``random_init`` / ``config``: from random weights (pass ``tokenizer`` then)."""
    if isinstance(restart, bool) or int(restart) < 1:
        raise ValueError(f"restart must be 1, 2, ..., got {restart!r}")
    run_cfg = dataclasses.replace(cfg, seed=cfg.seed + int(restart) - 1)
    holder: dict[str, Any] = {}

    def build() -> nn.Module:
        model = load_classifier(name, task.num_labels, seed=run_cfg.seed, random_init=random_init, config=config,
                                multiple_choice=task.multiple_choice)
        holder["tokenizer"] = tokenizer if tokenizer is not None else model.layersim_tokenizer
        model.layersim_tokenizer = holder["tokenizer"]
        return model

    def fit(model, train_set, train_cfg, device, progress, precision):
        return finetune(model, train_set, run_cfg, holder["tokenizer"], device=device, progress=progress,
                        precision=precision)

    key_cfg = dataclasses.asdict(run_cfg)
    if run_cfg.objective == "ce":  # checkpoints made before objectives existed keep their keys
        del key_cfg["objective"]
    model_desc = {"asset": name, "num_labels": task.num_labels,
                  "auto_class": "AutoModelForMultipleChoice" if task.multiple_choice else "AutoModelForSequenceClassification",
                  **({"random_init": True, "config": config} if random_init else {})}
    data_desc = {**task.record(), "labels_sha": _labels_digest(task)}
    model, meta = training.cached_model(f"ft-{name}", build, model_desc, key_cfg, task, data_desc,
                                        device=device, progress=progress, retrain=retrain, fit=fit)
    model.layersim_tokenizer = holder["tokenizer"]
    meta["restart"] = int(restart)
    return model, meta


def _labels_digest(task: text_tasks.TextTask) -> str:
    """A short digest of the task's texts and labels, so another draw of the data trains another model."""
    import hashlib

    h = hashlib.sha256()
    seconds = task.text_b or (["\x02".join(c) for c in task.choices] if task.multiple_choice else [""] * len(task))
    for a, b in zip(task.text_a, seconds):
        h.update(a.encode())
        h.update(b"\x00")
        h.update(b.encode())
        h.update(b"\x01")
    h.update(np.asarray(task.labels).tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- a fine-tuned encoder, layer by layer


def check_names(settings: Mapping[str, Any]) -> None:
    """A notebook check: ``ValueError`` naming the parameter unless every model is a registered model asset and
    every task a known task."""
    for name in settings.get("models", ()):
        try:
            kind = assets.get_asset(name).kind
        except ValueError as err:
            raise ValueError(f"parameter 'models': {err}") from None
        if kind != "model":
            raise ValueError(f"parameter 'models': {name!r} is a data set, not a model")
    known = set(text_tasks.OFFLINE_TASKS) | set(text_tasks.PAPER_TASKS)
    bad = [t for t in settings.get("tasks", ()) if t.lower().replace("_", "-") not in known]
    if bad:
        raise ValueError(f"parameter 'tasks': unknown task(s) {bad}; choose from {sorted(known)}")


def check_steps_or_epochs(settings: Mapping[str, Any]) -> None:
    """A notebook check: ``ValueError`` when neither ``steps`` nor ``epochs`` is given."""
    if settings.get("steps") is None and settings.get("epochs") is None:
        raise ValueError("parameters 'steps' and 'epochs' are both None: give one of them")


def steps_of(settings: Mapping[str, Any], n_examples: int) -> int:
    """The fine-tuning steps of a settings dict: ``settings["steps"]``, else :func:`steps_for` of
    ``settings["epochs"]`` and ``settings["batch_size"]``."""
    check_steps_or_epochs(settings)
    return settings["steps"] or steps_for(n_examples, settings["batch_size"], settings["epochs"])


def config_from(settings: Mapping[str, Any], seed: int = 0) -> FinetuneConfig:
    """The :class:`FinetuneConfig` of a settings dict (keys ``lr``, ``batch_size``, ``warmup_steps``, ``steps``,
    ``max_length``, ``weight_decay``, optional ``objective``)."""
    keys = ("lr", "batch_size", "warmup_steps", "steps", "max_length", "weight_decay", "objective")
    return FinetuneConfig(**{k: settings[k] for k in keys if k in settings}, seed=seed)


def task_data(task: str, settings: Mapping[str, Any], seed: int = 0) -> tuple[text_tasks.TextTask, text_tasks.TextTask]:
    """``(train, validation)`` splits of ``task`` with ``settings["n_train"]`` / ``["n_val"]`` examples
    (None: all), drawn with ``seed``."""
    return (text_tasks.load_task(task, "train", settings.get("n_train"), seed=seed),
            text_tasks.load_task(task, "validation", settings.get("n_val"), seed=seed))


def fine_tuned(model: str, train: text_tasks.TextTask, settings: Mapping[str, Any], restart: int = 1, seed: int = 0,
               device: Any = "auto", progress: bool = True) -> tuple[nn.Module, dict]:
    """``model`` fine-tuned on ``train`` under ``settings`` (restart 1, 2, ...), from the cache when
    this configuration was trained before."""
    return cached_finetune(model, train, config_from(settings, seed), restart=restart, device=device,
                                    progress=progress)


def cls_features(model: nn.Module, task: text_tasks.TextTask, settings: Mapping[str, Any], device: Any = "auto") -> np.ndarray:
    """``[L+1, N, d]`` float32 features of every layer at the token the classifier reads (CLS for an encoder, the
    paper's §3; the last token for a decoder); a multiple-choice task gives ``[L+1, N * C, d]``."""
    batches = text_tasks.encode(task, model.layersim_tokenizer, settings.get("eval_batch_size", 64),
                                settings["max_length"])
    return models.collect(model, text_tasks.flat_choices(batches), token=None, device=device, progress=False).hidden


def layer_scores(model: nn.Module, features: np.ndarray, task: text_tasks.TextTask) -> np.ndarray:
    """The task score of the fine-tuned head reading each layer of ``features`` ``[L+1, N, d]`` directly (the model
    truncated after block ``l``): the clusters paper's UNTUNED curve (§4 (a)), the tracing paper's layer-wise
    accuracy."""
    logits = readout.layer_logits(model, features)
    return np.array([text_tasks.score(task, text_tasks.predictions(task, z)) for z in logits])
