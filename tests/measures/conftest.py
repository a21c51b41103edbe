"""Shared by the tests of layersim.measures: the bad-input contract every array measure keeps.

For every measure and every input: a finite, valid result (CKA-type scores in [0, 1], cosines in
[-1, 1], invariances intact), or one ``ValueError`` whose message is a single line naming the problem.
Never a NaN, never a raw numpy / torch error (IndexError, LinAlgError, RuntimeError, a RuntimeWarning
on the way). Each test module lists its measures as ``name -> (fn(X, Y), range of a valid result)``,
the range being "unit" [0, 1], "signed" [-1, 1] or "any" finite, and checks them with the
``bad_inputs`` fixture.
"""

import warnings

import numpy as np
import pytest
import torch

from layersim.measures import similarity as S


def _with(X, value):
    X = X.copy()
    X[len(X) // 2, 0] = value
    return X


#: kind -> (make(X, Y) -> (X', Y'), must it be refused?, words one of which the refusal must contain)
KINDS = {
    "empty rows": (lambda X, Y: (X[:0], Y[:0]), True, ("N=0", "empty", "no rows", "same rows")),
    "no features": (lambda X, Y: (X[:, :0], Y), False, ("no features", "empty", "features")),
    "1-D": (lambda X, Y: (X[:, 0], Y), False, ("2-D", "2-d", "shape", "[n")),
    "3-D": (lambda X, Y: (X[None], Y), False, ("2-D", "2-d", "shape", "[n")),
    "mismatched N": (lambda X, Y: (X[:-1], Y), True, ("same", "samples", "rows", "shape", "one per sample", "[n")),
    "NaN": (lambda X, Y: (_with(X, np.nan), Y), True, ("NaN",)),
    "inf": (lambda X, Y: (_with(X, np.inf), Y), True, ("NaN or inf", "finite")),
    "-inf": (lambda X, Y: (_with(X, -np.inf), Y), True, ("NaN or inf", "finite")),
    "integers": (lambda X, Y: (np.round(10 * X).astype(np.int64), Y), False, ("constant", "coincide", "zero")),
    "booleans": (lambda X, Y: (X > 0, Y), False, ("constant", "coincide", "zero", "not positive")),
    "objects": (lambda X, Y: (X.astype(object), Y), False, ()),
    "complex": (lambda X, Y: (X + 1j * X, Y), True, ("complex",)),
    "strings": (lambda X, Y: (X.astype(str), Y), True, ("not numbers",)),
    "constant": (lambda X, Y: (np.full_like(X, 3.25), Y), False, ("constant", "coincide", "zero-norm", "zero")),
    "huge": (lambda X, Y: (X * 1e150, Y), False, ("beyond the range",)),
    "tiny": (lambda X, Y: (X * 1e-150, Y), False, ()),
    "N=2": (lambda X, Y: (X[:2], Y[:2]), False, ("at least", "two classes", "coincide")),
    "N=1": (lambda X, Y: (X[:1], Y[:1]), False, ("at least", "two classes", "coincide")),
    "torch float32": (lambda X, Y: (torch.from_numpy(X.astype(np.float32)), Y), False, ()),
}


class BadInputs:
    """The contract's checks (what the ``bad_inputs`` fixture returns)."""

    kinds = KINDS

    @staticmethod
    def base_pair(seed, n, d):
        """Ordinary data: ``X`` [n, d] with an offset, ``Y`` a noisy linear map of it."""
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, d)) + rng.standard_normal(d)
        Y = X @ rng.standard_normal((d, d)) / np.sqrt(d) + rng.standard_normal((n, d))
        return X, Y

    @staticmethod
    def valid(value, kind):
        arr = np.asarray(value, dtype=np.float64)
        assert np.all(np.isfinite(arr)), f"non-finite result {value!r}"
        if kind == "unit":
            assert np.all((arr >= -1e-12) & (arr <= 1 + 1e-12)), f"{value!r} outside [0, 1]"
        elif kind == "signed":
            assert np.all((arr >= -1 - 1e-12) & (arr <= 1 + 1e-12)), f"{value!r} outside [-1, 1]"

    @staticmethod
    def outcome(fn, X, Y):
        """``(result, None)`` or ``(None, the ValueError)``; any other exception, or a RuntimeWarning
        (numpy's overflow / invalid value: a NaN in the making), fails the test."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            warnings.simplefilter("ignore", S.SmallSampleWarning)  # small samples are the point here
            try:
                return fn(X, Y), None
            except ValueError as exc:
                assert type(exc) is ValueError, f"{type(exc).__name__} (a ValueError subclass): {exc}"
                return None, exc

    @staticmethod
    def check_refusal(exc, words=()):
        msg = str(exc)
        assert msg and "\n" not in msg, f"the message must be one line: {msg!r}"
        if words:
            assert any(w in msg for w in words), f"the message does not name the problem {words}: {msg!r}"

    @classmethod
    def classic(cls, name, fn, kind, seed, n, d):
        """Ordinary data give a valid result; every kind of :data:`KINDS` gives a valid result or a
        one-line refusal naming the problem (and the kinds that must be refused are)."""
        X0, Y0 = cls.base_pair(seed, n, d)
        value, exc = cls.outcome(fn, X0, Y0)
        assert exc is None, f"{name} refused ordinary data: {exc}"
        cls.valid(value, kind)
        for bad, (make, must_refuse, words) in KINDS.items():
            X, Y = make(X0, Y0)
            value, exc = cls.outcome(fn, X, Y)
            if exc is not None:
                cls.check_refusal(exc, words)
            else:
                assert not must_refuse, f"{name} accepted {bad} input: {value!r}"
                cls.valid(value, kind)

    @classmethod
    def arbitrary(cls, fn, kind, X, seed):
        """Any float64 array ``X`` against a standard normal partner of the same N: a valid result or
        a one-line refusal."""
        Y = np.random.default_rng(seed).standard_normal((X.shape[0], max(X.shape[1], 1)))
        value, exc = cls.outcome(fn, X, Y)
        if exc is not None:
            cls.check_refusal(exc)
        else:
            cls.valid(value, kind)


@pytest.fixture(scope="session")
def bad_inputs():
    """The bad-input contract's checks (session-scoped, so that hypothesis tests may take it)."""
    return BadInputs
