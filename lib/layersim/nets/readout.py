"""The tracing paper's layer-wise readout (the logit lens): the last-layer classifier applied to every layer.

:func:`layer_logits` computes ``W · norm(h^(l)) + b`` for every layer ``l`` (§2), ``norm`` the model's final
norm recomputed on each layer's own features, so the last layer's readout equals the model's logits. The
rest are functions of the logits ``[L+1, N, K]``: layer-wise accuracy (eq. 2), saturation layers (§2.2),
the eps-effective depth (Definition 1), and the lens on language models. Layer indices follow
``layersim.nets.models``.
(see docs/modules.md, ``layersim.nets.readout``)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from layersim.measures import probe
from layersim.nets.models import (classifier_head, collect, evaluating, final_norm, layer_ids,
                                  n_layers, resolve_device, stream)

__all__ = [
    "GreedyLens",
    "LayerNextToken",
    "LayerProbs",
    "TokenLens",
    "NextToken",
    "effective_depth",
    "layer_accuracy",
    "layer_logits",
    "layer_next_token_scores",
    "layer_probs",
    "greedy_lens",
    "next_token_scores",
    "token_lens",
    "predictions",
    "saturation_layer",
]


def _param_of(*modules: nn.Module) -> torch.Tensor | None:
    return next((p for m in modules for p in m.parameters()), None)


def layer_logits(
    model: nn.Module,
    hidden: np.ndarray | torch.Tensor,
    apply_final_norm: bool = True,
    chunk: int = 1024,
    layers: Sequence[int] | None = None,
    out: str | os.PathLike | None = None,
    head: nn.Module | None = None,
) -> np.ndarray:
    """Float32 logits ``[n_entries, N, K]`` of the last-layer classifier on every entry of ``hidden``
    ``[n_entries, N, d]`` (a memmap is read ``chunk`` samples at a time).

    ``layers``: each entry's layer index (default all). ``apply_final_norm``: per layer and chunk. ``out``: a
    ``.npy`` path for a memmap. ``head``: another classifier (e.g. a probe); ``nn.Identity()`` returns the normed
    features."""
    L = n_layers(model)
    ids = layer_ids(layers, L) if layers is not None else list(range(hidden.shape[0]))
    if len(ids) != hidden.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} entries, expected {len(ids)}: pass layers=")
    if layers is None and hidden.shape[0] != L + 1:
        raise ValueError(f"hidden has {hidden.shape[0]} entries, model has {L + 1}: pass layers=")
    norm, head, device, dtype = _lens_head(model, apply_final_norm, head)
    result = None
    n = hidden.shape[1]
    with evaluating(model):
        for j in range(len(ids)):
            for s in range(0, n, chunk):
                x = hidden[j, s:s + chunk]
                x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
                x = x.to(device=device, dtype=dtype)
                x = norm(x)
                z = head(x).float().cpu().numpy()
                if result is None:
                    shape = (len(ids), n, z.shape[-1])
                    result = (np.empty(shape, np.float32) if out is None else
                              np.lib.format.open_memmap(out, "w+", np.float32, shape))
                result[j, s:s + chunk] = z
    if out is not None:
        result.flush()
    return result


def predictions(logits: np.ndarray) -> np.ndarray:
    """Top-1 class ``g(h^(l)) = argmax_j [SoftMax(W h^(l))]_j``: ``[L+1, N]`` from logits."""
    return np.argmax(np.asarray(logits), axis=-1)


def layer_accuracy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Layer-wise accuracy, eq. (2): ``Acc^(l) = mean_i 1[g(h_i^(l)) = y_i]`` → ``[L+1]``.

    ``logits`` ``[L+1, N, K]`` (or already predictions ``[L+1, N]``), ``labels`` ``[N]``.
    """
    if np.ndim(logits) == 3:
        return probe.top1_accuracy(logits, labels)
    return (np.asarray(logits) == np.asarray(labels)[None, :]).mean(axis=1)


class LayerProbs(NamedTuple):
    """Softmax probabilities per layer and sample: ``true`` of the labelled class (None
    without labels) and ``top`` of the predicted (top-1) class, each ``[L+1, N]``."""

    true: np.ndarray | None
    top: np.ndarray


def layer_probs(logits: np.ndarray, labels: np.ndarray | None = None) -> LayerProbs:
    """Predicted probability ``[SoftMax(W h^(l))]_k`` of the true class ``k`` (Theorem 2's
    quantity) and of the top class, for every layer (computed one layer at a time)."""
    logits = np.asarray(logits)
    true = None if labels is None else np.empty(logits.shape[:2], np.float32)
    top = np.empty(logits.shape[:2], np.float32)
    rows = np.arange(logits.shape[1])
    for layer in range(logits.shape[0]):
        z = logits[layer].astype(np.float64)
        z = z - z.max(axis=-1, keepdims=True)
        log_norm = np.log(np.exp(z).sum(axis=-1))
        top[layer] = np.exp(-log_norm)  # the top class has z = 0 after the shift
        if true is not None:
            true[layer] = np.exp(z[rows, np.asarray(labels)] - log_norm)
    return LayerProbs(true, top)


def saturation_layer(logits: np.ndarray) -> np.ndarray:
    """Saturation layer of every sample (§2.2, after Geva et al. 2022), ``[N]`` ints: the smallest ``l`` such
    that the top-1 prediction is the same at layers ``l..L``. ``logits [L+1, N, K]`` or predictions ``[L+1, N]``."""
    preds = predictions(logits) if np.ndim(logits) == 3 else np.asarray(logits)
    same = preds == preds[-1][None, :]
    run = np.cumprod(same[::-1], axis=0).sum(axis=0)  # trailing run of final predictions
    return preds.shape[0] - run


def effective_depth(accuracy: np.ndarray, eps: float) -> int:
    """Definition 1 (eps-effective depth): the smallest layer index with
    ``Acc^(l) >= 1 - eps``, or ``L`` (the last index) if there is none."""
    accuracy = np.asarray(accuracy)
    hits = np.flatnonzero(accuracy >= 1 - eps)
    return int(hits[0]) if hits.size else accuracy.shape[0] - 1


def effective_depth_within(block_accuracy: np.ndarray, reference: float, margin: float) -> tuple[int, float]:
    """Definition 1 with ``1 - eps = reference - margin`` (e.g. the standard model's last-block
    train accuracy minus a margin): ``(depth, eps)``, depth 0 meaning no block (accuracy 0 before
    block 1) and ``L`` when no block reaches it. ``block_accuracy`` is ``[L]`` for blocks 1..L."""
    eps = 1 - (reference - margin)
    return effective_depth(np.concatenate([[0.0], np.asarray(block_accuracy, float)]), eps), eps


class LayerEval(NamedTuple):
    """A model evaluated layer by layer on a set of images (:func:`evaluate`).

    ``hidden``: ``[L+1, N, d]`` token features (index 0 = embedding output); ``labels``: ``[N]``;
    ``logits``: ``[L, N, K]`` and ``accuracy``: ``[L]`` for blocks ``1..L`` (index ``l-1``).
    """

    hidden: np.ndarray
    labels: np.ndarray
    logits: np.ndarray
    accuracy: np.ndarray


def evaluate(model: nn.Module, images, device="auto", batch_size: int = 256, token=None,
             logits_fn=None, embedding: bool = True, progress: bool = False, precision: str = "fp32") -> LayerEval:
    """Read out blocks 1..L of ``model`` on ``images`` (a Dataset of ``(image, label)`` or ``(x, y)``):
    ``logits_fn(model, hidden)`` (default :func:`layer_logits`) and the layer-wise accuracy (eq. 2), as a
    :class:`LayerEval`. ``embedding=False``: no embedding entry (the MLPs). ``precision`` as in
    :func:`layersim.nets.models.collect`."""
    from torch.utils.data import DataLoader, TensorDataset

    if isinstance(images, (tuple, list)):
        images = TensorDataset(*images)
    L = n_layers(model)
    layers = None if embedding else list(range(1, L + 1))
    feats = collect(model, DataLoader(images, batch_size=batch_size), token=token, layers=layers, device=device,
                    progress=progress, precision=precision)
    if feats.labels is None:
        raise ValueError("the images carry no labels: pass (image, label) pairs or (x, y) tensors")
    if logits_fn is not None:
        logits = logits_fn(model, feats.hidden)
    elif embedding:
        logits = layer_logits(model, feats.hidden)[1:]
    else:
        logits = layer_logits(model, feats.hidden, layers=layers)
    return LayerEval(feats.hidden, feats.labels, logits, layer_accuracy(logits, feats.labels))


class NextToken(NamedTuple):
    """Next-token prediction of a causal LM over a set of texts: mean negative log-likelihood
    (nats per predicted token), its perplexity ``exp(nll)``, top-1 accuracy, tokens scored."""

    nll: float
    perplexity: float
    accuracy: float
    n_tokens: int


def next_token_scores(model: nn.Module, batches, device="auto") -> NextToken:
    """How well a causal LM (or a ``layersim.nets.surgery`` model of one) predicts each next token of
    ``batches`` (HF dicts with ``input_ids`` and ``attention_mask``, right padding): every position
    whose next token is not padding is scored (log-probabilities in float32, summed in float64)."""
    base = getattr(model, "surgery_base", model)
    dev = resolve_device(device)
    base.to(dev)
    nll = correct = count = 0.0
    with evaluating(base):
        for batch in batches:
            ids = batch["input_ids"].to(dev)
            mask = batch.get("attention_mask", torch.ones_like(ids)).to(dev)
            kwargs = {"input_ids": ids, "attention_mask": mask}
            if not hasattr(model, "surgery_base"):
                kwargs["use_cache"] = False
            logits = model(**kwargs).logits[:, :-1].float()
            target, keep = ids[:, 1:], mask[:, 1:].bool() & mask[:, :-1].bool()
            picked = logits.gather(-1, target[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)
            nll -= picked[keep].double().sum().item()
            correct += (logits.argmax(-1) == target)[keep].sum().item()
            count += keep.sum().item()
    if count == 0:
        raise ValueError("no token to score: every text is shorter than two tokens")
    mean = nll / count
    return NextToken(mean, float(np.exp(mean)), correct / count, int(count))


# ----------------------------------------------------------------------------- the logit lens on a language model


def _lens_head(model: nn.Module, apply_final_norm: bool = True,
               head: nn.Module | None = None) -> tuple[nn.Module, nn.Module, torch.device, torch.dtype]:
    """The readout every lens applies to a layer: ``(final norm or Identity, classifier head (the
    model's own unless ``head`` is given), the device and floating dtype of their parameters)``."""
    norm = final_norm(model) if apply_final_norm else nn.Identity()
    head = classifier_head(model) if head is None else head
    ref = _param_of(head, norm)
    device = ref.device if ref is not None else torch.device("cpu")
    dtype = ref.dtype if ref is not None and ref.dtype.is_floating_point else torch.float32
    return norm, head, device, dtype


class TokenLens(NamedTuple):
    """The logit lens on every scored position: ``top [L+1, N]`` each layer's top-1 token, ``confidence [N]``
    the model's top-1 probability, ``max_error`` the largest relative gap between the last layer's lens and the
    model's logits, ``target [N]`` the next token (-1 at a text's end)."""

    top: np.ndarray
    confidence: np.ndarray
    max_error: float
    target: np.ndarray | None = None


def next_tokens(input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``[B, T]`` the next token of every position of right-padded texts ``input_ids`` (``mask``: 1 on real
    tokens, None = all real), -1 where the next position is padding or past the end."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if mask is None else mask.bool()
    nxt = torch.full_like(input_ids, -1)
    nxt[:, :-1] = torch.where(real[:, 1:], input_ids[:, 1:], torch.full_like(input_ids[:, 1:], -1))
    return nxt


def token_lens(model: nn.Module, batches, device="auto") -> TokenLens:
    """The logit lens at every non-padding position of ``batches`` (HF dicts) of a causal LM, from one forward
    pass per batch: the tracing paper's saturation analysis (§2.2, App. C.1). Only each layer's top-1 token is
    kept; ``saturation_layer(result.top)`` gives the saturation layers. Returns a :class:`TokenLens`."""
    norm, head, dev, _ = _lens_head(model)
    tops, conf, errs, targets = [], [], [], []
    for batch in stream(model, batches, token="tokens", device=device):
        first = batch.entries[0]
        keep = batch.mask.bool() if batch.mask is not None else torch.ones(first.shape[:2], dtype=torch.bool)
        rows = keep.flatten().nonzero().squeeze(1).to(first.device)  # the real positions, in boolean-mask order
        ids = batch.inputs.get("input_ids") if isinstance(batch.inputs, Mapping) else None
        if ids is not None:
            targets.append(next_tokens(ids, batch.mask).flatten().index_select(0, rows.to(ids.device)).cpu())
        last = getattr(batch.output, "last_hidden_state", None)
        if last is None:
            raise ValueError(f"{type(model).__name__}: its run returned no last_hidden_state, so token_lens cannot "
                             "read the model's own logits (a Hugging Face causal LM is needed)")
        with torch.no_grad():
            # every layer's top-1 stays on the device until the batch is done: one copy to the host per batch
            layer_tops = []
            for h in batch.entries:
                normed = norm(h.flatten(0, 1).index_select(0, rows.to(h.device)).to(dev))
                z = head(normed).float()
                layer_tops.append(z.argmax(-1))
            last = last.flatten(0, 1).index_select(0, rows.to(last.device)).to(dev)
            # the model's own logits: where the lens's last input is the model's, bit for bit, the head gives the
            # same logits (the lens is exact there); otherwise the head runs on the model's own input
            own = z if torch.equal(normed, last) else head(last).float()
            errs.append((z - own).abs().max() / own.abs().max().clamp_min(1e-30))
            conf.append((own.max(-1).values - torch.logsumexp(own, -1)).exp())  # max softmax, not materialised
        tops.append(torch.stack(layer_tops).cpu().numpy())
    err = float(torch.stack([e.cpu() for e in errs]).max()) if errs else 0.0
    target = torch.cat(targets).numpy() if targets and len(targets) == len(tops) else None
    return TokenLens(np.concatenate(tops, axis=1), torch.cat([c.cpu() for c in conf]).numpy(), err, target)


class GreedyLens(NamedTuple):
    """Greedy decoding read through the logit lens, ``S`` steps: ``tokens`` ``[S]`` the generated
    ids (the model's own argmax), ``top`` / ``top_prob`` ``[L+1, S]`` each layer's top-1 token and
    its probability, ``chosen_prob`` ``[L+1, S]`` each layer's probability of the token the model
    chose, ``max_error`` as in :class:`TokenLens`."""

    tokens: np.ndarray
    top: np.ndarray
    top_prob: np.ndarray
    chosen_prob: np.ndarray
    max_error: float


def greedy_lens(model: nn.Module, tokenizer, prompt: str, steps: int, device="auto") -> GreedyLens:
    """Decode ``steps`` tokens after ``prompt`` greedily (the model's argmax, as ``generate(do_sample=False)``) and
    read every layer's next-token distribution at each step through the logit lens (tracing Fig. 20)."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    norm, head, dev, _ = _lens_head(model)
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    tokens, top, top_prob, chosen, err = [], [], [], [], 0.0
    with evaluating(model), torch.no_grad():
        for _ in range(steps):
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            hidden = next(iter(stream(model, [inputs], token="last", device=device))).entries
            probs = torch.stack([torch.softmax(head(norm(h.to(dev))).float()[0], -1) for h in hidden])  # [L+1, V]
            own = model(**{k: v.to(dev) for k, v in inputs.items()}, use_cache=False).logits[0, -1].float()
            lens_last = head(norm(hidden[-1].to(dev))).float()[0]
            err = max(err, float((lens_last - own).abs().max() / own.abs().max().clamp_min(1e-30)))
            nxt = int(own.argmax())
            p, t = probs.max(-1)
            tokens.append(nxt)
            top.append(t.cpu().numpy())
            top_prob.append(p.cpu().numpy())
            chosen.append(probs[:, nxt].cpu().numpy())
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return GreedyLens(np.array(tokens), np.stack(top, 1), np.stack(top_prob, 1), np.stack(chosen, 1), err)


class LayerNextToken(NamedTuple):
    """Next-token prediction read at every layer through the shared final norm and LM head:
    ``nll`` ``[L+1]`` (nats per predicted token), ``perplexity`` ``exp(nll)``, top-1 ``accuracy``
    ``[L+1]`` (eq. 20 of the tracing paper), over ``n_tokens`` predicted tokens."""

    nll: np.ndarray
    perplexity: np.ndarray
    accuracy: np.ndarray
    n_tokens: int


def layer_next_token_scores(model: nn.Module, batches, device="auto") -> LayerNextToken:
    """:func:`next_token_scores` at every layer of a causal LM (tracing Fig. 9 a, b): final norm and LM head on
    each block's output, right-padded ``batches``; the last entry equals the model's own."""
    norm, head, dev, _ = _lens_head(model)
    nll = correct = None
    count = 0
    with torch.no_grad():
        for batch, inputs in zip(stream(model, batches, token="tokens", device=device), batches):
            ids = inputs["input_ids"].to(dev)
            mask = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"])).to(dev).bool()
            keep = mask[:, 1:] & mask[:, :-1]
            target = ids[:, 1:][keep]
            per_nll, per_acc = [], []
            for h in batch.entries:
                z = head(norm(h.to(dev)[:, :-1][keep])).float()
                per_nll.append(float((torch.logsumexp(z, -1) - z.gather(-1, target[:, None])[:, 0]).double().sum()))
                per_acc.append(float((z.argmax(-1) == target).sum()))
            nll = np.array(per_nll) if nll is None else nll + per_nll
            correct = np.array(per_acc) if correct is None else correct + per_acc
            count += int(keep.sum())
    if not count:
        raise ValueError("no token to score: every text is shorter than two tokens")
    mean = nll / count
    return LayerNextToken(mean, np.exp(mean), correct / count, count)
