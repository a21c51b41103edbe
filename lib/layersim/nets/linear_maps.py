"""Linear maps that stand in for blocks of a model: the redundancy paper's RBA (§3), fitted on the model's own
hidden states and put in with ``layersim.nets.surgery``, and what skipping or approximating a span does to the
final representation (§4.3): :class:`LinearMap`, :func:`fit_rba`, :func:`fit_rba_spans`,
:func:`final_representation`, :func:`span_changes`, :func:`block_approximation_errors`. Blocks are numbered
as in ``layersim.nets.surgery``.
(see docs/modules.md, ``layersim.nets.linear_maps``)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from layersim.measures import redundancy
from layersim.nets import models, readout, surgery

__all__ = ["LinearMap", "block_approximation_errors", "final_representation", "fit_rba", "fit_rba_spans",
           "span_changes"]


class LinearMap(nn.Module):
    """``h -> h W (+ b)`` on the last axis of ``h`` (``[B, T, d]`` or ``[B, d]``), from a
    :class:`layersim.measures.redundancy.LeastSquares` solution; ``per_token``: ``weight [T, d_in, d_out]``. Float32,
    trainable."""

    def __init__(self, solution: Any, bias: bool = False, per_token: bool = False):
        super().__init__()
        T = torch.as_tensor(np.asarray(solution), dtype=torch.float32)
        if T.ndim != (3 if per_token else 2):
            raise ValueError(f"a {'per-token' if per_token else 'shared'} map needs a "
                             f"{'[T, d_in, d_out]' if per_token else '[d_in, d_out]'} solution, got {tuple(T.shape)}")
        self.per_token = per_token
        self.weight = nn.Parameter(T[..., :-1, :] if bias else T)
        self.bias = nn.Parameter(T[..., -1, :]) if bias else None

    @property
    def n_tokens(self) -> int | None:
        """The token positions a per-token map takes (its inputs are ``[B, n_tokens, d]``); None for a
        shared map (any number). ``layersim.nets.surgery.replace`` tries a replacement on that many tokens."""
        return int(self.weight.shape[0]) if self.per_token else None

    def forward(self, h: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.per_token:
            if h.ndim != 3 or h.shape[1] != self.weight.shape[0]:
                raise ValueError(f"a per-token map of {self.weight.shape[0]} tokens got input {tuple(h.shape)}")
            out = torch.einsum("btd,tde->bte", h, self.weight.to(h.dtype))
        else:
            out = h @ self.weight.to(h.dtype)
        return out if self.bias is None else out + self.bias.to(h.dtype)


def fit_rba(model: nn.Module, data: Any, first: int, last: int, per_token: bool = False, bias: bool = False,
            ridge: float = 0.0, batch_size: int = 64, device: Any = "auto", progress: bool = False) -> LinearMap:
    """RBA (§3): the :class:`LinearMap` from the output of block ``first - 1`` to that of block ``last``, fitted in
    float64 on every non-padding token of ``data`` in one streamed pass. ``per_token``: one map per position.
    Put it in with ``surgery.replace(model, first, last, rba)``."""
    return fit_rba_spans(model, data, [(first, last)], per_token, bias, ridge, batch_size, device, progress)[0]


def fit_rba_spans(model: nn.Module, data: Any, spans: Any, per_token: bool = False, bias: bool = False,
                  ridge: float = 0.0, batch_size: int = 64, device: Any = "auto",
                  progress: bool = False) -> list[LinearMap]:
    """:func:`fit_rba` for every ``(first, last)`` of ``spans`` from one streamed pass over ``data``; returns
    the maps in the order of ``spans``."""
    L = models.n_layers(model)
    spans = [tuple(s) for s in spans]
    if not spans:
        raise ValueError("spans is empty: give at least one (first, last) span of blocks")
    for span in spans:
        if len(span) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in span) \
                or not 1 <= span[0] <= span[1] <= L:
            raise ValueError(f"blocks first={span[0]!r}..last={span[-1]!r} must satisfy 1 <= first <= last <= {L}")
    needed = sorted({int(i) for first, last in spans for i in (first - 1, last)})
    where = {layer: k for k, layer in enumerate(needed)}
    fits: list[list[redundancy.LeastSquares]] = [[] for _ in spans]
    seen = False
    for b in models.stream(model, data, layers=needed, token="tokens", batch_size=batch_size,
                           device=device, progress=progress):
        seen = True
        entries = [h if h.ndim == 3 else h[:, None] for h in b.entries]  # [B, T, d]
        keep = None if b.mask is None else b.mask.reshape(-1).bool()
        if per_token and keep is not None and not bool(keep.all()):
            raise ValueError("per-token maps need inputs of one length (the batch has padding)")
        for (first, last), span_fits in zip(spans, fits):
            x, y = entries[where[first - 1]], entries[where[last]]
            if per_token:
                if not span_fits:
                    span_fits += [redundancy.LeastSquares(bias) for _ in range(x.shape[1])]
                if len(span_fits) != x.shape[1]:
                    raise ValueError(f"per-token maps of {len(span_fits)} tokens got a batch of {x.shape[1]}")
                for t, ls in enumerate(span_fits):
                    ls.update(x[:, t], y[:, t])
            else:
                if not span_fits:
                    span_fits.append(redundancy.LeastSquares(bias))
                rows_x, rows_y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
                span_fits[0].update(rows_x if keep is None else rows_x[keep], rows_y if keep is None else rows_y[keep])
    if not seen:
        raise ValueError("no batches")
    out = []
    for span_fits in fits:
        solutions = [ls.solve(ridge=ridge) for ls in span_fits]
        out.append(LinearMap(np.stack(solutions) if per_token else solutions[0], bias=bias, per_token=per_token))
    return out


def final_representation(model: nn.Module, batches: Any, token: Any = None, device: Any = "auto") -> np.ndarray:
    """What a linear probe on the frozen model reads (redundancy paper §4.3): the token of the last block's
    output after the final norm, ``[N, d]`` float64, for a model or a surgery model of it."""
    base = getattr(model, "surgery_base", model)
    h = models.collect(model, batches, token=token, layers=[-1], device=device, progress=False).hidden
    normed = readout.layer_logits(base, h, layers=[-1], head=nn.Identity())  # the final norm, no head
    return normed[0].astype(np.float64)


def span_changes(model: nn.Module, fit_batches: Any, eval_batches: Any, spans: Any, mode: str, token: Any = None,
                 bias: bool = False, relative: bool = True, device: Any = "auto",
                 reference: np.ndarray | None = None) -> np.ndarray:
    """How far each span moves the :func:`final_representation` on ``eval_batches`` when skipped
    (``mode="skip"``) or RBA-approximated (``"approx"``, fitted on ``fit_batches``): redundancy paper §4.3,
    Table 2, Figs. 3, 7. :func:`layersim.measures.redundancy.relative_change` (``relative``) or the raw MSE;
    ``[len(spans)]``."""
    if mode not in ("skip", "approx"):
        raise ValueError(f"mode must be 'skip' or 'approx', got {mode!r}")
    spans = [tuple(int(v) for v in s) for s in spans]
    ref = final_representation(model, eval_batches, token, device) if reference is None else reference
    score = redundancy.relative_change if relative else redundancy.representation_mse
    maps = fit_rba_spans(model, fit_batches, spans, bias=bias, device=device) if mode == "approx" else [None] * len(spans)
    out = []
    for (first, last), rba in zip(spans, maps):
        changed = surgery.skip(model, first, last) if rba is None else surgery.replace(model, first, last, rba)
        out.append(score(ref, final_representation(changed, eval_batches, token, device)))
    return np.array(out)


def block_approximation_errors(model: nn.Module, fit_batches: Any, eval_batches: Any, blocks: Any = None,
                               token: Any = None, bias: bool = False, device: Any = "auto",
                               reference: np.ndarray | None = None) -> dict[int, float]:
    """``{k: mse}`` for every block ``k`` of ``blocks`` (default all): :func:`span_changes` of the one-block RBA
    with ``relative=False`` (the paper's Figs. 3, 7). ``reference``: the original's final representation."""
    blocks = range(1, models.n_layers(model) + 1) if blocks is None else [int(k) for k in blocks]
    mse = span_changes(model, fit_batches, eval_batches, [(k, k) for k in blocks], "approx", token, bias,
                       relative=False, device=device, reference=reference)
    return {int(k): float(v) for k, v in zip(blocks, mse)}
