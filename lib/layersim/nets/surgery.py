"""Block surgery: run blocks 1..i, then a replacement (or nothing), then blocks j+1..L.

For every family with an adapter (the redundancy paper's RBA and skips; the clusters paper's truncation):

- :func:`skip` ``(model, first, last)``: blocks ``first..last`` (1-based, inclusive) removed;
- :func:`replace` ``(model, first, last, module)``: those blocks replaced by ``module`` on every token
  (``[B, T, d] -> [B, T, d]``), checked at once (``ValueError`` for a failure or a wrong width);
- :func:`truncate` ``(model, k)``: blocks ``k+1..L`` removed.

Each returns a :class:`Surgery`: a context manager splicing the model in place (restored on exit), or a
module of its own. Blocks are counted afresh after surgery (see docs/modules.md, ``layersim.nets.surgery``).
"""

from __future__ import annotations

import copy
import itertools
import numbers
from typing import Any

import torch
from torch import nn

from layersim.measures import arrays
from layersim.nets import adapters

__all__ = ["StandIn", "Surgery", "replace", "skip", "truncate"]

# Key of a spliced model's ``__dict__`` holding the function that restores its blocks; its presence
# is the "under surgery" flag. Kept out of modules and parameters, and dropped from deep copies.
_SPLICED = "_layersim_surgery"


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
    """``model`` with blocks ``first..last`` (1-based, inclusive) replaced by ``replacement`` (None: removed);
    a context manager or a standalone module. Made by :func:`skip`, :func:`replace` and :func:`truncate`."""

    def __init__(self, model: nn.Module, first: int, last: int, replacement: nn.Module | None):
        super().__init__()
        self.adapter = adapters.get(model)
        if not self.adapter.uniform:
            raise ValueError(f"{type(model).__name__} ({self.adapter.name}) does not support block surgery: its "
                             f"blocks change the shape of the representation, so no span can be skipped or replaced")
        self.surgery_base = model
        self.first, self.last = first, last
        self.replacement = None if replacement is None else StandIn(replacement)
        if self.replacement is not None:
            self._check_width()

    def _check_width(self) -> None:
        """Run the replacement once on a zero input ``[1, T, d_in]`` (width of entry ``first - 1``; eval mode, no
        gradients, modes restored) and raise one ``ValueError`` if it fails or its output width is not entry
        ``last``'s. Skipped where the adapter knows no widths."""
        widths = self.adapter.widths(self.surgery_base)
        if widths is None:
            return
        d_in, d_out = widths[self.first - 1], widths[self.last]
        module = self.replacement.module
        tensors = itertools.chain(module.parameters(), module.buffers(), self.surgery_base.parameters())
        ref = next((t for t in tensors if t.is_floating_point()), None)
        kind = dict(device=ref.device, dtype=ref.dtype) if ref is not None else {}
        x = torch.zeros(1, getattr(module, "n_tokens", None) or 1, d_in, **kind)
        what = f"the replacement of blocks {self.first}..{self.last} ({type(module).__name__})"
        modes = {m: m.training for m in module.modules()}
        try:
            module.eval()
            with torch.no_grad():
                out = self.replacement(x)
        except Exception as exc:
            raise ValueError(f"{what} fails on hidden states of width {d_in}, shape {tuple(x.shape)}: "
                             f"{type(exc).__name__}: {arrays.first_line(exc)}") from exc
        finally:
            for m, mode in modes.items():
                m.training = mode
        out = out[0] if isinstance(out, (tuple, list)) and out else out
        got = out.shape[-1] if isinstance(out, torch.Tensor) and out.ndim else None
        if got != d_out:
            raise ValueError(f"{what} maps hidden states of width {d_in} to width {got}; the model needs "
                             f"width {d_out} there")

    @property
    def n_removed(self) -> int:
        """How many blocks of the original model the span removes."""
        return self.last - self.first + 1

    def n_layers(self) -> int:
        """Blocks of the spliced model: ``L - n_removed`` (+1 with a replacement)."""
        return self.adapter.n_layers(self.surgery_base) - self.n_removed + (self.replacement is not None)

    def __enter__(self) -> nn.Module:
        model = self.surgery_base
        if _SPLICED in model.__dict__:
            raise RuntimeError(f"{type(model).__name__} is already under surgery; leave that block first")
        self._splice()
        return model

    def __exit__(self, *exc: Any) -> None:
        self._unsplice()

    def _splice(self) -> None:
        """Put the spliced block list in the model, with its restore function, ``__deepcopy__`` and
        ``__reduce_ex__`` in the model's ``__dict__``, so a copy or pickle taken meanwhile is of the whole model."""
        model = self.surgery_base
        blocks = self.adapter.blocks(model)
        middle = [] if self.replacement is None else [self.replacement]
        restore = self.adapter.set_blocks(model, blocks[:self.first - 1] + middle + blocks[self.last:])
        model.__dict__[_SPLICED] = restore
        model.__dict__["__deepcopy__"] = self._whole_copy
        model.__dict__["__reduce_ex__"] = self._whole_reduce

    def _unsplice(self) -> None:
        """Restore the model's own blocks and drop every trace of the surgery from it."""
        state = self.surgery_base.__dict__
        restore = state.pop(_SPLICED, None)
        state.pop("__deepcopy__", None)
        state.pop("__reduce_ex__", None)
        if restore is not None:
            restore()

    def _whole_copy(self, memo: dict) -> nn.Module:
        """``copy.deepcopy`` of the model while it is spliced: the model is restored for the copy and
        spliced again after, so the copy has all its blocks and no surgery state."""
        self._unsplice()
        try:
            return copy.deepcopy(self.surgery_base, memo)
        finally:
            self._splice()

    def _whole_reduce(self, protocol: int) -> Any:
        """Pickling (or ``copy.copy``) of the model while it is spliced: that of a whole deep copy."""
        return copy.deepcopy(self.surgery_base).__reduce_ex__(protocol)

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
