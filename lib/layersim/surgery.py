"""Block surgery: run blocks 1..i, then a replacement (or nothing), then blocks j+1..L.

The redundancy paper replaces a span of blocks by a linear map fitted in closed form (RBA) or
skips it; the clusters paper truncates fine-tuned encoders and skips spans of layers. Every
family with an adapter (``layersim.adapters``) supports the three operations:

- :func:`skip` ``(model, first, last)``: blocks ``first..last`` (1-based, inclusive) removed,
  i.e. replaced by the identity;
- :func:`replace` ``(model, first, last, module)``: blocks ``first..last`` replaced by
  ``module``, applied to the hidden states of every token (``[B, T, d] -> [B, T, d]``, e.g. the
  RBA linear map ``nn.Linear(d, d)``);
- :func:`truncate` ``(model, k)``: blocks ``k+1..L`` removed, so block ``k``'s output goes to the
  final norm and the head (``truncate(model, L)`` is the model itself).

Each returns a :class:`Surgery`, which is both

- a **context manager**: ``with skip(model, 3, 5) as m:`` splices ``model``'s own block list in
  place (no weights copied) and restores it on exit, even after an error; ``m`` is ``model``;
- a **standalone module**: ``skip(model, 3, 5)(inputs)`` runs ``model`` with the span spliced
  for that call only; it can be trained (gradients reach the replacement and the kept blocks)
  and passed to ``layersim.models.collect``.

Hidden-state convention after surgery: the blocks of the spliced model are counted afresh, so
``collect`` on a model with ``s`` blocks skipped returns ``L - s + 1`` entries (index 0 the
embedding output, then the kept blocks in order); with a replacement, ``L - s + 2`` (the
replacement's output is an entry of its own).

ALBERT's single shared layer group is never deleted: the spliced model calls the same module
at each kept step. Causal LMs run a spliced model without a KV cache (``use_cache=False``),
since the cache is indexed by the original layer numbers.
"""

from __future__ import annotations

import numbers
from typing import Any

from torch import nn

from . import adapters

__all__ = ["StandIn", "Surgery", "replace", "skip", "truncate"]


class StandIn(nn.Module):
    """Takes a block's place: ``module(hidden_states)``, whatever else the model passes to its
    blocks (attention masks, position embeddings, caches) ignored."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, hidden_states: Any = None, *args: Any, **kwargs: Any) -> Any:
        if hidden_states is None:
            hidden_states = kwargs["hidden_states"]
        return self.module(hidden_states)


def _check_index(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer block number, got {value!r}")
    return int(value)


def _check_span(first: Any, last: Any, n_blocks: int) -> tuple[int, int]:
    """``(first, last)`` with ``1 <= first <= last <= n_blocks``, else one ValueError saying which."""
    first, last = _check_index(first, "first"), _check_index(last, "last")
    if last == first - 1:
        raise ValueError(f"the span first={first}, last={last} is empty: it names no block "
                         "(blocks are 1-based and both ends are included)")
    if last < first:
        raise ValueError(f"the span first={first}, last={last} is reversed: need first <= last")
    if first < 1 or last > n_blocks:
        raise ValueError(f"the span first={first}, last={last} is out of range: the model has blocks "
                         f"1..{n_blocks}")
    return first, last


class Surgery(nn.Module):
    """``model`` with blocks ``first..last`` (1-based, inclusive) replaced by ``replacement``
    (None: removed). Made by :func:`skip`, :func:`replace` and :func:`truncate`; see the module
    docstring for its two uses. ``first = L + 1, last = L`` (only from ``truncate(model, L)``)
    is the model unchanged.
    """

    def __init__(self, model: nn.Module, first: int, last: int, replacement: nn.Module | None):
        super().__init__()
        self.adapter = adapters.get(model)
        if not self.adapter.uniform:
            raise ValueError(f"{type(model).__name__} ({self.adapter.name}) does not support block surgery: its "
                             f"blocks change the shape of the representation, so no span can be skipped or replaced")
        self.surgery_base = model
        self.first, self.last = first, last
        self.replacement = None if replacement is None else StandIn(replacement)
        self._restore = None

    @property
    def n_removed(self) -> int:
        """How many blocks of the original model the span removes."""
        return self.last - self.first + 1

    def n_layers(self) -> int:
        """Blocks of the spliced model: ``L - n_removed`` (+1 with a replacement)."""
        return self.adapter.n_layers(self.surgery_base) - self.n_removed + (self.replacement is not None)

    def __enter__(self) -> nn.Module:
        model = self.surgery_base
        if model.__dict__.get("_layersim_surgery", False):
            raise RuntimeError(f"{type(model).__name__} is already under surgery; leave that block first")
        blocks = self.adapter.blocks(model)
        middle = [] if self.replacement is None else [self.replacement]
        self._restore = self.adapter.set_blocks(model, blocks[:self.first - 1] + middle + blocks[self.last:])
        model.__dict__["_layersim_surgery"] = True
        return model

    def __exit__(self, *exc: Any) -> None:
        restore, self._restore = self._restore, None
        self.surgery_base.__dict__["_layersim_surgery"] = False
        if restore is not None:
            restore()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.adapter.token == "last" and self.adapter.inputs == "text" and "use_cache" not in kwargs:
            kwargs["use_cache"] = False  # causal LMs: the cache is indexed by the original layers
        with self as model:
            return model(*args, **kwargs)

    def n_parameters(self) -> int:
        """Parameters of the spliced model (shared ones counted once, the replacement's included,
        the removed blocks' not)."""
        with self as model:
            return sum(p.numel() for p in model.parameters())

    def extra_repr(self) -> str:
        what = "skip" if self.replacement is None else "replace"
        return f"{what} blocks {self.first}..{self.last} of {type(self.surgery_base).__name__}"


def skip(model: nn.Module, first: int, last: int) -> Surgery:
    """``model`` without blocks ``first..last`` (1-based, inclusive): the identity in their place."""
    first, last = _check_span(first, last, adapters.get(model).n_layers(model))
    return Surgery(model, first, last, None)


def replace(model: nn.Module, first: int, last: int, module: nn.Module) -> Surgery:
    """``model`` with blocks ``first..last`` replaced by ``module`` (applied to every token's hidden
    state, ``[B, T, d] -> [B, T, d]``); ``module``'s parameters are trained with the model's."""
    if not isinstance(module, nn.Module):
        raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    first, last = _check_span(first, last, adapters.get(model).n_layers(model))
    return Surgery(model, first, last, module)


def truncate(model: nn.Module, k: int) -> Surgery:
    """``model`` cut after block ``k`` (``0 <= k <= L``): block ``k``'s output goes straight to the
    final norm and the head (the clusters paper's truncated encoders); ``k = L`` changes nothing."""
    L = adapters.get(model).n_layers(model)
    k = _check_index(k, "k")
    if not 0 <= k <= L:
        raise ValueError(f"k={k} is out of range: truncate keeps blocks 1..k of 1..{L}, so 0 <= k <= {L}")
    return Surgery(model, k + 1, L, None)
