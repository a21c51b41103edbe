"""Linear maps that stand in for blocks of a model: the redundancy paper's RBA (§3) fitted on a model's
own hidden states, put in with ``layersim.nets.surgery``, and what skipping or approximating a span does
to the final representation (§4.3).

:class:`LinearMap` applies a least-squares solution (:class:`layersim.measures.redundancy.LeastSquares`) to every
token; :func:`fit_rba` / :func:`fit_rba_spans` fit the maps from one streamed pass over the data
(``layersim.nets.models.stream``); :func:`final_representation` is what a linear probe on the frozen model
reads; :func:`span_changes` and :func:`block_approximation_errors` compare skipping with approximating.
Block numbering follows ``layersim.nets.surgery`` (1..L, ``first..last`` inclusive);
:func:`layersim.measures.redundancy.paper_span` converts the paper's.
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
    """``h -> h W (+ b)`` on the last axis of ``h`` (every token of ``[B, T, d]``, or ``[B, d]``),
    from a solution of :class:`layersim.measures.redundancy.LeastSquares` (``bias=True`` solutions: ``W`` then ``b`` rows).
    ``per_token``: ``weight [T, d_in, d_out]``, token ``t`` mapped by its own ``W_t``. Float32
    parameters (trainable, like any module put in by ``layersim.nets.surgery.replace``)."""

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
    """RBA (§3): the linear map from the output of block ``first - 1`` to the output of block ``last``
    (``layersim.nets.surgery``'s 1-based blocks; :func:`layersim.measures.redundancy.paper_span` converts the paper's), fitted on
    every token of every sample of ``data`` in one streamed pass (``layersim.nets.models.stream``,
    token ``"tokens"``; padding tokens of text batches are left out), in float64
    (:class:`layersim.measures.redundancy.LeastSquares`). ``per_token``: one map per token position (inputs of one length,
    no padding). Returns the :class:`LinearMap` to put in with
    ``surgery.replace(model, first, last, rba)``. :func:`fit_rba_spans` fits several spans at once.
    """
    return fit_rba_spans(model, data, [(first, last)], per_token, bias, ridge, batch_size, device, progress)[0]


def fit_rba_spans(model: nn.Module, data: Any, spans: Any, per_token: bool = False, bias: bool = False,
                  ridge: float = 0.0, batch_size: int = 64, device: Any = "auto",
                  progress: bool = False) -> list[LinearMap]:
    """:func:`fit_rba` for every ``(first, last)`` of ``spans``, from **one** streamed pass over
    ``data`` (each batch reads the layers the spans need and updates every span's
    :class:`layersim.measures.redundancy.LeastSquares`): the same maps as one :func:`fit_rba` per span, for the cost of one
    forward pass instead of ``len(spans)``. Returns the maps in the order of ``spans``."""
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
    """What a linear probe on the frozen model reads (the redundancy paper's §4.3, as its code:
    the token of the last block's output after the final norm), ``[N, d]`` float64, for a model
    or a ``layersim.nets.surgery`` model of it (its span spliced)."""
    base = getattr(model, "surgery_base", model)
    h = models.collect(model, batches, token=token, layers=[-1], device=device, progress=False).hidden
    normed = readout.layer_logits(base, h, layers=[-1], head=nn.Identity())  # the final norm, no head
    return normed[0].astype(np.float64)


def span_changes(model: nn.Module, fit_batches: Any, eval_batches: Any, spans: Any, mode: str, token: Any = None,
                 bias: bool = False, relative: bool = True, device: Any = "auto",
                 reference: np.ndarray | None = None) -> np.ndarray:
    """How far each span of blocks moves the final representation when it is skipped
    (``mode="skip"``: ``surgery.skip``) or approximated (``"approx"``: RBA maps of every span fitted
    on ``fit_batches`` in one pass, :func:`fit_rba_spans`, then ``surgery.replace``): the redundancy
    paper's comparison of approximating with skipping (§4.3, Table 2), measured as in its Figs. 3 and
    7 by the MSE between the :func:`final_representation` of the changed and the original model on
    ``eval_batches`` — :func:`layersim.measures.redundancy.relative_change` when ``relative`` (the default), the raw MSE otherwise.
    ``reference``: the original model's final representation, if already computed. ``[len(spans)]``."""
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
    """For every block ``k`` of ``blocks`` (default all, 1..L): RBA of that block alone (fitted on
    ``fit_batches``, every block's map from one pass) and the MSE of the approximated model's
    :func:`final_representation` on ``eval_batches`` against the original's (the paper's Figs. 3 and
    7, which set it beside Block Redundancy): :func:`span_changes` with ``relative=False``. ``reference``: the
    original's final representation, if already computed. ``{k: mse}``."""
    blocks = range(1, models.n_layers(model) + 1) if blocks is None else [int(k) for k in blocks]
    mse = span_changes(model, fit_batches, eval_batches, [(k, k) for k in blocks], "approx", token, bias,
                       relative=False, device=device, reference=reference)
    return {int(k): float(v) for k, v in zip(blocks, mse)}
