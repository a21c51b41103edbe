import json
import warnings

import numpy as np
import pytest

from layersim.core import memo
from layersim.core.paths import CacheWarning


def counting(result):
    calls = []

    def compute():
        calls.append(1)
        return result

    return compute, calls


def test_computes_once_then_reuses_with_the_same_values(tmp_cache):
    compute, calls = counting({"top": np.arange(6).reshape(2, 3), "err": 1.5e-6, "n": 3})
    first = memo.remember("lens", {"steps": 4}, compute)
    again = memo.remember("lens", {"steps": 4}, compute)
    assert len(calls) == 1
    for got in (first, again):  # the same form on the first call as on later ones
        assert np.array_equal(got["top"], np.arange(6).reshape(2, 3)) and got["top"].shape == (2, 3)
        assert got["err"] == 1.5e-6 and isinstance(got["err"], float) and got["n"] == 3 and isinstance(got["n"], int)


def test_a_changed_input_computes_anew(tmp_cache):
    compute, calls = counting({"x": np.ones(2)})
    memo.remember("lens", {"steps": 4}, compute)
    memo.remember("lens", {"steps": 5}, compute)
    memo.remember("other", {"steps": 4}, compute)
    assert len(calls) == 3
    assert memo.key_of("a", {"k": [1, 2]}) == memo.key_of("a", {"k": [1, 2]}) != memo.key_of("a", {"k": [2, 1]})


def test_a_corrupt_entry_is_recomputed_with_a_warning(tmp_cache):
    compute, calls = counting({"x": np.arange(3.0)})
    memo.remember("lens", {"s": 1}, compute)
    (data,) = (tmp_cache / "memo" / "lens").glob("*.npz")
    data.write_bytes(data.read_bytes()[:-7] + b"garbage")
    with pytest.warns(CacheWarning, match="checksum"):
        got = memo.remember("lens", {"s": 1}, compute)
    assert len(calls) == 2 and np.array_equal(got["x"], np.arange(3.0))
    meta = json.loads(data.with_suffix(".json").read_text())
    assert meta["parts"] == {"s": 1} and meta["name"] == "lens"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # repaired: read back without a warning
        memo.remember("lens", {"s": 1}, compute)
    assert len(calls) == 2


def test_an_interrupted_compute_leaves_nothing_behind(tmp_cache):
    def broken():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        memo.remember("lens", {"s": 1}, broken)
    compute, calls = counting({"x": np.zeros(1)})
    memo.remember("lens", {"s": 1}, compute)
    assert len(calls) == 1


@pytest.mark.parametrize("parts, result, message", [
    ({"model": object()}, {"x": 1}, "key parts of 'lens' must be JSON values"),
    ({"s": 1}, {"x": "text", "y": {"a": 1}}, "field 'y' is not an array or a number"),
])
def test_bad_input_is_one_value_error(tmp_cache, parts, result, message):
    with pytest.raises(ValueError, match=message):
        memo.remember("lens", parts, lambda: result)


def test_source_of_changes_with_the_code():
    def f():
        return 1

    def g():
        return 2

    assert memo.source_of(f) != memo.source_of(g) and len(memo.source_of(memo)) == 64
