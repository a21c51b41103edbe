"""A notebook's settings: the presets of each scale, the user's overrides, and their validation.

:func:`pick` merges a notebook's papermill parameters (None: this scale's preset) with its presets and checks every
value before any data or model is loaded, raising one ``ValueError`` naming the parameter, the value and what is
allowed. A :class:`Rule` (built by :func:`integer`, :func:`real`, :func:`choice`, :func:`flag`, :func:`text`,
:func:`seq`, :func:`mapping`, :func:`optional`, :func:`custom`) says what a setting accepts; :data:`COMMON` holds the
shared ones, and every setting needs a rule (see docs/modules.md, `layersim.notebook.settings`).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layersim.inputs.image_data import dataset_info
from layersim.notebook.results import check_scale

__all__ = [
    "Rule", "integer", "real", "choice", "flag", "text", "seq", "mapping", "optional", "custom",
    "COMMON", "MIN_EVAL", "RUN_RULES", "check_value", "pick",
]


@dataclass(frozen=True)
class Rule:
    """The values one setting accepts: ``allowed`` is the phrase an error shows ("an integer >= 1"); ``convert``
    returns the normalised value or raises ``TypeError`` / ``ValueError``."""

    allowed: str
    convert: Callable[[Any], Any]

    def apply(self, name: str, value: Any) -> Any:
        """``convert(value)``, or one ``ValueError`` naming ``name``, the value and :attr:`allowed`."""
        try:
            return self.convert(value)
        except (TypeError, ValueError) as exc:
            detail = f" ({exc})" if str(exc) else ""
            raise ValueError(f"parameter {name!r}: {value!r} is not allowed; {name} must be "
                             f"{self.allowed}{detail}") from None


def _bounds(low: float | None, high: float | None, open_low: bool = False, open_high: bool = False) -> str:
    if low is not None and high is not None:
        return f" in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    if low is not None:
        return f" {'>' if open_low else '>='} {low:g}"
    if high is not None:
        return f" {'<' if open_high else '<='} {high:g}"
    return ""


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _in_range(v: float, low, high, open_low: bool, open_high: bool) -> bool:
    if low is not None and (v <= low if open_low else v < low):
        return False
    return not (high is not None and (v >= high if open_high else v > high))


def integer(low: int | None = None, high: int | None = None, meaning: str = "") -> Rule:
    """An integer (not a bool or a float) in ``[low, high]``; ``meaning`` is appended to the allowed phrase
    (``"0 means the whole split"``)."""
    allowed = "an integer" + _bounds(low, high) + (f" ({meaning})" if meaning else "")

    def convert(v: Any) -> int:
        if not _is_int(v):
            raise TypeError(f"got {type(v).__name__}")
        if not _in_range(v, low, high, False, False):
            raise ValueError
        return int(v)

    return Rule(allowed, convert)


def real(low: float | None = None, high: float | None = None, open_low: bool = False,
         open_high: bool = False) -> Rule:
    """A finite real number (an int is accepted and converted) in the given interval;
    ``open_low`` / ``open_high`` exclude the end points."""
    allowed = "a finite number" + _bounds(low, high, open_low, open_high)

    def convert(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"got {type(v).__name__}")
        v = float(v)
        if not math.isfinite(v) or not _in_range(v, low, high, open_low, open_high):
            raise ValueError
        return v

    return Rule(allowed, convert)


def choice(*values: Any) -> Rule:
    """One of ``values`` (compared with type: ``True`` is not ``1``)."""
    if not values:
        raise ValueError("choice() needs at least one allowed value")
    allowed = "one of " + ", ".join(repr(v) for v in values)

    def convert(v: Any) -> Any:
        for ok in values:
            if type(v) is type(ok) and v == ok:
                return v
        raise ValueError

    return Rule(allowed, convert)


def flag() -> Rule:
    """``True`` or ``False``."""
    return choice(True, False)


def text(pattern: str | None = None, allowed: str = "a non-empty string") -> Rule:
    """A non-empty string, optionally matching the regular expression ``pattern`` in full."""
    regex = re.compile(pattern) if pattern else None

    def convert(v: Any) -> str:
        if not isinstance(v, str):
            raise TypeError(f"got {type(v).__name__}")
        if not v or (regex and not regex.fullmatch(v)):
            raise ValueError
        return v

    return Rule(allowed, convert)


def _count(n: int | None, low: int, high: int | None) -> str:
    if n is not None:
        return f"of {n} "
    if high is not None:
        return f"of {low} to {high} "
    return f"of at least {low} " if low > 1 else ""


def seq(item: Rule, length: int | None = None, min_length: int = 1, max_length: int | None = None,
        distinct: bool = False) -> Rule:
    """A list (a tuple is accepted and converted) whose items follow ``item``."""
    allowed = (f"a list {_count(length, min_length, max_length)}{'distinct ' if distinct else ''}items, "
               f"each {item.allowed}")

    def convert(v: Any) -> list:
        if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Sequence):
            raise TypeError(f"got {type(v).__name__}")
        n = len(v)
        if (length is not None and n != length) or n < min_length or (max_length is not None and n > max_length):
            raise ValueError(f"{n} items")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item.convert(x))
            except (TypeError, ValueError):
                raise ValueError(f"item {i} is {x!r}") from None
        if distinct and len({repr(x) for x in out}) < len(out):
            raise ValueError("repeated items")
        return out

    return Rule(allowed, convert)


def mapping(key: Rule, value: Rule, min_length: int = 1) -> Rule:
    """A dict whose keys follow ``key`` and values follow ``value``."""
    allowed = f"a dict {_count(None, min_length, None)}entries, keys {key.allowed}, values {value.allowed}"

    def convert(v: Any) -> dict:
        if not isinstance(v, Mapping):
            raise TypeError(f"got {type(v).__name__}")
        if len(v) < min_length:
            raise ValueError(f"{len(v)} entries")
        out = {}
        for k, x in v.items():
            try:
                out[key.convert(k)] = value.convert(x)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"entry {k!r}: {exc}" if str(exc) else f"entry {k!r}") from None
        return out

    return Rule(allowed, convert)


def optional(rule: Rule, meaning: str = "") -> Rule:
    """``None`` (a setting whose preset is ``None`` on purpose, e.g. "no pre-trained weights") or ``rule``."""
    return Rule(f"None{f' ({meaning})' if meaning else ''} or {rule.allowed}",
                lambda v: None if v is None else rule.convert(v))


def custom(convert: Callable[[Any], Any], allowed: str) -> Rule:
    """A rule from a function that returns the (normalised) value or raises ``ValueError`` / ``TypeError``."""
    return Rule(allowed, convert)


def _device(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
        raise ValueError
    return v


#: what ``seed`` and ``device`` (in every parameters cell beside ``scale``) accept
RUN_RULES: dict[str, Rule] = {
    "seed": integer(0, 2**32 - 1),
    "device": custom(_device, "'auto' (a GPU when there is one), 'cpu', 'cuda', 'cuda:N' or 'mps'"),
}

#: the fewest held-out examples a notebook measures (``n_eval``): they are drawn stratified from 10-class test
#: splits (Fashion-MNIST, CIFAR-10), and fewer than one per class leaves classes out of what is measured on them
#: (t02's easy and hard classes, each needing two samples for a centred cosine; t03's within-class collapse
#: over all classes); CKA and the centred cosine need at least 2 samples, debiased CKA 4
MIN_EVAL = 10

#: settings that mean the same in every notebook that has them; a notebook's own rules override these
COMMON: dict[str, Rule] = {
    "epochs": integer(1),
    "n_eval": integer(MIN_EVAL, meaning="held-out examples measured, at least one per class of a 10-class test set"),
    "n_seeds": integer(1),
    "n_runs": integer(1),
    "steps": integer(1),
    "depth": integer(1),
    "embed_dim": integer(1),
    "batch_size": integer(1),
    "lr": real(0, open_low=True),
    "weight_decay": real(0),
}


def check_value(name: str, value: Any, rules: Mapping[str, Rule] | None = None) -> Any:
    """Validate one setting against ``rules[name]`` (else :data:`COMMON` / :data:`RUN_RULES`)."""
    rule = (rules or {}).get(name) or COMMON.get(name) or RUN_RULES.get(name)
    if rule is None:
        raise ValueError(f"no rule for setting {name!r}: give one in `rules`")
    return rule.apply(name, value)


def pick(presets: Mapping[str, Mapping[str, Any]], scale: str, *, seed: Any = 0, device: Any = "auto",
         rules: Mapping[str, Rule] | None = None, derived: Mapping[str, Callable[[dict], Any]] | None = None,
         checks: Iterable[Callable[[dict], None]] = (), **overrides: Any) -> dict:
    """The validated settings for ``scale``: ``presets[scale]`` with the non-None ``overrides``.

    Each step raises one ``ValueError`` naming the parameter: ``scale`` and every override must exist in the
    presets; ``seed``, ``device`` (:data:`RUN_RULES`, not returned) and every setting are checked against ``rules``
    or :data:`COMMON`; ``derived[name](settings)`` fills settings left None; ``checks`` test consistency.
    """
    check_scale(scale)
    if scale not in presets:
        raise ValueError(f"no preset for scale {scale!r}; presets have {sorted(presets)}")
    settings = dict(presets[scale])
    unknown = sorted(k for k in overrides if k not in settings)
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; settings are {sorted(settings)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    settings.update(given)
    derived = dict(derived or {})
    for name, value in (("seed", seed), ("device", device)):
        RUN_RULES[name].apply(name, value)
    for name in settings:
        if name not in derived or name in given:
            settings[name] = check_value(name, settings[name], rules)
    for name, fn in derived.items():
        if name not in given:
            settings[name] = check_value(name, fn(settings), rules)
    for check in checks:
        check(settings)
    return settings


def classes_exist(classes_key: str, dataset_key: str) -> Callable[[dict], None]:
    """A check: every class index in ``settings[classes_key]`` exists in the image data set
    ``settings[dataset_key]`` (its class count from :func:`layersim.inputs.image_data.dataset_info`)."""

    def check(settings: dict) -> None:
        n = dataset_info(settings[dataset_key])["classes"]
        bad = [c for c in settings[classes_key] if not 0 <= c < n]
        if bad:
            raise ValueError(f"parameter {classes_key!r}: classes {bad} do not exist in "
                             f"{settings[dataset_key]!r}; {classes_key} must be in [0, {n - 1}]")

    return check


def at_most(key: str, limit: Callable[[dict], int], why: str) -> Callable[[dict], None]:
    """A check: ``settings[key] <= limit(settings)``, ``why`` naming the limit in the error."""

    def check(settings: dict) -> None:
        bound = limit(settings)
        if settings[key] > bound:
            raise ValueError(f"parameter {key!r}: {settings[key]!r} is not allowed; {key} must be <= {bound} ({why})")

    return check
