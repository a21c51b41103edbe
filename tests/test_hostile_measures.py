"""Hostile inputs to the array measures: CKA and cosine (layersim.measures.similarity), the alignment score
(layersim.measures.alignment), Block Redundancy and the RBA least-squares map (layersim.measures.redundancy), NC1
(layersim.measures.collapse).

The contract, for every measure and every input: a finite, valid result (CKA-type scores in
[0, 1], cosines in [-1, 1], invariances intact), or one ``ValueError`` whose message is a single
line naming the problem. Never a NaN, never a raw numpy / torch error (IndexError, LinAlgError,
RuntimeError, a RuntimeWarning on the way).

Hypothesis draws the data; ``derandomize=True`` keeps every run the same.
"""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from layersim.measures import alignment as al, collapse, redundancy as R, similarity as S

HOSTILE = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])
FEW = settings(HOSTILE, max_examples=4)


def _labels(n):
    return np.arange(n) % 3


def _tensor(x):
    """A torch tensor of ``x`` where torch can make one (else ``x`` itself: the device path must refuse
    it as the CPU path does)."""
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        return x


# name -> (fn(X, Y), range of a valid result: "unit" [0, 1], "signed" [-1, 1], "any" finite)
MEASURES = {
    "linear_cka": (lambda X, Y: S.linear_cka(X, Y), "unit"),
    "linear_cka_gram": (lambda X, Y: S.linear_cka(X, Y, form="gram"), "unit"),
    "debiased_cka": (lambda X, Y: S.linear_cka(X, Y, debiased=True), "signed"),
    "rbf_cka": (lambda X, Y: S.rbf_cka(X, Y), "unit"),
    "cosine": (lambda X, Y: S.cosine(X, Y), "signed"),
    "cosine_uncentred": (lambda X, Y: S.cosine(X, Y, center=False), "signed"),
    "cosine_per_sample": (lambda X, Y: S.cosine_per_sample(X, Y), "signed"),
    "layer_matrix_cka": (lambda X, Y: S.layer_matrix([X, Y]), "unit"),
    "layer_matrix_cos": (lambda X, Y: S.layer_matrix([X, Y], "cos"), "signed"),
    "layer_matrix_torch": (lambda X, Y: S.layer_matrix([_tensor(X), _tensor(Y)], device="torch"), "unit"),
    "to_last": (lambda X, Y: S.to_last([X, Y]), "unit"),
    "cross_matrix": (lambda X, Y: S.cross_matrix([X], [Y]), "unit"),
    "streaming_cka": (lambda X, Y: S.StreamingCKA().update([X, Y]).result(), "unit"),
    "minibatch_cka": (lambda X, Y: S.minibatch_cka([(X, Y)]), "signed"),
    "procrustes": (lambda X, Y: S.procrustes_similarity(X, Y), "unit"),
    "cca_r2": (lambda X, Y: S.cca_r2(X, Y[:, :1]), "unit"),
    "svcca": (lambda X, Y: S.svcca(X, Y[:, :1]), "unit"),
    "alignment_area": (lambda X, Y: al.curve_and_area(X, np.sign(Y[:, 0]) + (Y[:, 0] == 0),
                                                      al.thresholds_for(len(Y)))[1], "unit"),
    "alignment_relative": (lambda X, Y: al.curve_and_area(X, Y[:, 0], al.thresholds_for(len(Y)), relative=True)[1],
                           "unit"),
    "block_redundancy": (lambda X, Y: R.block_redundancy([X, Y]), "any"),
    "rba_fit": (lambda X, Y: R.fit_linear_map(X, Y), "any"),
    "rba_fit_bias": (lambda X, Y: R.fit_linear_map(X, Y, bias=True), "any"),
    "nc1": (lambda X, Y: collapse.nc1(X, _labels(len(Y))), "any"),
    "nc1_per_layer": (lambda X, Y: collapse.nc1_per_layer([X, Y], _labels(len(Y))), "any"),
}


# kind -> (make(X, Y) -> (X', Y'), must it be refused?, words one of which the refusal must contain)
def _with(X, value):
    X = X.copy()
    X[len(X) // 2, 0] = value
    return X


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


def _valid(value, kind):
    arr = np.asarray(value, dtype=np.float64)
    assert np.all(np.isfinite(arr)), f"non-finite result {value!r}"
    if kind == "unit":
        assert np.all((arr >= -1e-12) & (arr <= 1 + 1e-12)), f"{value!r} outside [0, 1]"
    elif kind == "signed":
        assert np.all((arr >= -1 - 1e-12) & (arr <= 1 + 1e-12)), f"{value!r} outside [-1, 1]"


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


def check_refusal(exc, words=()):
    msg = str(exc)
    assert msg and "\n" not in msg, f"the message must be one line: {msg!r}"
    if words:
        assert any(w in msg for w in words), f"the message does not name the problem {words}: {msg!r}"


def base_pair(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + rng.standard_normal(d)
    Y = X @ rng.standard_normal((d, d)) / np.sqrt(d) + rng.standard_normal((n, d))
    return X, Y


@pytest.mark.parametrize("name", sorted(MEASURES))
@FEW
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 14), d=st.integers(2, 5))
def test_classic_bad_inputs(name, seed, n, d):
    fn, kind = MEASURES[name]
    X0, Y0 = base_pair(seed, n, d)
    value, exc = outcome(fn, X0, Y0)
    assert exc is None, f"{name} refused ordinary data: {exc}"
    _valid(value, kind)
    for bad, (make, must_refuse, words) in KINDS.items():
        X, Y = make(X0, Y0)
        value, exc = outcome(fn, X, Y)
        if exc is not None:
            check_refusal(exc, words)
        else:
            assert not must_refuse, f"{name} accepted {bad} input: {value!r}"
            _valid(value, kind)


@pytest.mark.parametrize("name", sorted(MEASURES))
@HOSTILE
@given(X=hnp.arrays(np.float64, st.tuples(st.integers(0, 7), st.integers(0, 3)),
                    elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)),
       seed=st.integers(0, 2**32 - 1))
def test_arbitrary_float_arrays(name, X, seed):
    """Any float64 array at all (NaN, inf, subnormals, 1e308 next to 1e-308, repeated rows) against
    a partner of the same N."""
    fn, kind = MEASURES[name]
    Y = np.random.default_rng(seed).standard_normal((X.shape[0], max(X.shape[1], 1)))
    value, exc = outcome(fn, X, Y)
    if exc is not None:
        check_refusal(exc)
    else:
        _valid(value, kind)


# ----------------------------------------------------------------------------- invariances on drawn data

rotation_scale = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(6, 14), d=st.integers(2, 6),
                      k=st.sampled_from([-150, -37, 0, 42, 150]))


def _orthogonal(rng, d):
    Q, Rr = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.diag(Rr))


@HOSTILE
@given(**rotation_scale)
def test_cka_is_invariant_to_rotation_and_scale_up_to_1e150(seed, n, d, k):
    """CKA is scale invariant: X and 1e150 X give the same value (not an overflow, not a refusal)."""
    X, Y = base_pair(seed, n, d)
    Q = _orthogonal(np.random.default_rng(seed + 1), d)
    moved = 10.0**k * (X @ Q + 5.0)
    for fn, kind in (MEASURES["linear_cka"], MEASURES["debiased_cka"], MEASURES["rbf_cka"], MEASURES["procrustes"],
                     MEASURES["layer_matrix_cka"], MEASURES["streaming_cka"], MEASURES["layer_matrix_torch"]):
        ref, exc = outcome(fn, X, Y)
        assert exc is None
        got, exc = outcome(fn, moved, Y)
        assert exc is None, exc
        _valid(got, kind)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


@HOSTILE
@given(**rotation_scale)
def test_cosine_is_invariant_to_a_common_rotation_and_scale(seed, n, d, k):
    X, Y = base_pair(seed, n, d)
    Q = _orthogonal(np.random.default_rng(seed + 2), d)
    c = 10.0**k
    for center in (True, False):
        ref = S.cosine(X, Y, center=center)
        assert -1 <= ref <= 1
        assert S.cosine(c * X @ Q, Y @ Q / c, center=center) == pytest.approx(ref, rel=1e-9, abs=1e-12)


@HOSTILE
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(9, 20), d=st.integers(2, 5),
       k=st.sampled_from([-250, -160, 0, 160, 250]))
def test_nc1_is_invariant_to_rotation_translation_and_any_scale(seed, n, d, k):
    """NC1 at 1e160 and 1e-160 used to be NaN (squares over- or underflowed)."""
    X, _ = base_pair(seed, n, d)
    labels = _labels(n)
    Q = _orthogonal(np.random.default_rng(seed + 3), d)
    ref = collapse.nc1(X, labels)
    got = collapse.nc1(10.0**k * (X @ Q - 4.0), labels)
    assert np.isfinite(got) and got >= 0
    assert got == pytest.approx(ref, rel=1e-8)


@HOSTILE
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 20), d=st.integers(2, 5))
def test_alignment_area_of_huge_representations(seed, n, d):
    """The paper's form appends a bias column of ones and scales every row to unit length: beside
    entries ~1e150 the bias is negligible, and it stays so at 1e200 (whose squared norms used to
    overflow, every row became 0 and the area a number of no meaning). Without the bias column the
    unit rows do not depend on the scale at all."""
    X, Y = base_pair(seed, n, d)
    y = np.where(Y[:, 0] > np.median(Y[:, 0]), 1.0, -1.0)
    tau = al.thresholds_for(n)
    at_150 = al.curve_and_area(X * 1e150, y, tau)[1]
    for c in (1e200, 1e300):
        area = al.curve_and_area(X * c, y, tau)[1]
        assert 0 <= area <= 1
        assert area == pytest.approx(at_150, rel=1e-9)
    unit = al.prepare(X, bias=False)
    for c in (1e-300, 1e-150, 1e150, 1e300):
        np.testing.assert_allclose(al.prepare(X * c, bias=False), unit, rtol=1e-12, atol=1e-15)


@HOSTILE
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 20), d=st.integers(1, 4),
       k=st.sampled_from([-100, -30, 30, 100]))
def test_rba_map_scales_inversely_with_its_input(seed, n, d, k):
    X, Y = base_pair(seed, n, d)
    ref = R.fit_linear_map(X, Y)
    np.testing.assert_allclose(R.fit_linear_map(X * 10.0**k, Y) * 10.0**k, ref, rtol=1e-8, atol=1e-12)


# ----------------------------------------------------------------------------- the cases fixed here


@pytest.mark.parametrize("fn", [
    lambda X, Y: S.linear_cka(X, Y), lambda X, Y: S.linear_cka(X, Y, form="gram"), lambda X, Y: S.rbf_cka(X, Y),
    lambda X, Y: S.layer_matrix([X, Y])[0, 1], lambda X, Y: S.to_last([X, Y])[0],
    lambda X, Y: S.cross_matrix([X], [Y])[0, 0], lambda X, Y: S.StreamingCKA().update([X, Y]).result()[0, 1],
    lambda X, Y: S.layer_matrix([torch.from_numpy(X), torch.from_numpy(Y)], device="torch")[0, 1],
    lambda X, Y: S.procrustes_similarity(X, Y), lambda X, Y: S.cosine(X, Y),
    lambda X, Y: S.gram_cka(S.gram_linear(X), S.gram_linear(Y))])
def test_two_samples_are_refused_not_a_similarity_of_one(fn):
    """Two samples centre to +-(x_1 - x_2)/2: CKA was exactly 1 for any data, even independent noise."""
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((2, 5)), rng.standard_normal((2, 7))
    if fn.__code__.co_names[-1:] == ("cosine",):
        Y = Y[:, :5]
    with pytest.raises(ValueError, match=r"N=2 samples; need at least 3 samples") as info:
        fn(X, Y)
    check_refusal(info.value)
    assert np.isfinite(fn(rng.standard_normal((3, 5)), rng.standard_normal((3, Y.shape[1]))))  # N = 3 is fine


def test_uncentred_cosine_takes_any_number_of_samples():
    x, y = np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]])
    assert S.cosine(x, y, center=False) == pytest.approx(np.sqrt(0.5))
    with pytest.raises(ValueError, match="at least 3"):
        S.cosine(x, y)


def test_random_feature_baseline_matches_simulation():
    """Biased linear CKA of independent isotropic Gaussian features ~ 1 / sqrt((1 + N/d1)(1 + N/d2))."""
    rng = np.random.default_rng(7)
    for n, d1, d2 in [(20, 200, 200), (48, 384, 384), (10, 100, 300), (30, 30, 30), (100, 20, 500)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", S.SmallSampleWarning)  # the very case it warns about
            sims = [S.linear_cka(rng.standard_normal((n, d1)), rng.standard_normal((n, d2))) for _ in range(12)]
        assert np.mean(sims) == pytest.approx(S._random_feature_cka(n, d1, d2), abs=0.015), (n, d1, d2)


def _warnings_of(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, S.SmallSampleWarning)]


@pytest.mark.parametrize("call", ["linear_cka", "layer_matrix", "layer_matrix_torch", "to_last", "cross_matrix",
                                  "streaming"])
def test_small_sample_warning_names_n_widths_and_baseline(call):
    rng = np.random.default_rng(8)
    X, Y = rng.standard_normal((20, 400)), rng.standard_normal((20, 300))
    run = {"linear_cka": lambda: S.linear_cka(X, Y), "layer_matrix": lambda: S.layer_matrix([X, Y]),
           "layer_matrix_torch": lambda: S.layer_matrix([torch.from_numpy(X), torch.from_numpy(Y)], device="torch"),
           "to_last": lambda: S.to_last([X, Y]), "cross_matrix": lambda: S.cross_matrix([X], [Y]),
           "streaming": lambda: S.StreamingCKA().update([X[:10], Y[:10]]).update([X[10:], Y[10:]]).result()}[call]
    caught = _warnings_of(run)
    assert len(caught) == 1
    msg = str(caught[0].message)
    base = S._random_feature_cka(20, 300, 400)
    assert base > 0.9
    assert "N=20" in msg and "300" in msg and "400" in msg and f"{base:.3f}" in msg
    assert caught[0].filename == __file__  # points at the caller's line
    assert issubclass(S.SmallSampleWarning, UserWarning) and "SmallSampleWarning" in S.__all__


def test_no_small_sample_warning_where_it_does_not_apply():
    rng = np.random.default_rng(9)
    wide = rng.standard_normal((20, 400))
    # the notebooks' smoke scale: 48 texts x 384 (MiniLM-L6, c01 / r01 / layer_report), 256 x 32 (t01 / t05)
    for n, d in [(48, 384), (256, 32), (600, 384), (64, 64)]:
        assert not _warnings_of(lambda: S.layer_matrix([rng.standard_normal((n, d)) for _ in range(3)]))
    assert not _warnings_of(lambda: S.linear_cka(wide, wide[:, :300], debiased=True))  # no pull toward 1
    assert not _warnings_of(lambda: S.layer_matrix([wide, wide], "cos"))
    assert not _warnings_of(lambda: S.layer_matrix([wide]))  # one layer: no pair
    # cross_matrix compares only across the stacks: two wide layers in one stack do not matter
    narrow = rng.standard_normal((20, 2))
    assert _warnings_of(lambda: S.layer_matrix([wide, wide, narrow]))
    assert not _warnings_of(lambda: S.cross_matrix([wide, wide], [narrow]))


def test_nc1_refuses_what_it_cannot_measure():
    X = np.random.default_rng(10).standard_normal((12, 3))
    labels = _labels(12)
    for features, words in [(X[:, 0], "2-D"), (np.nan * X, "NaN"), (X + 1j, "complex"), (3.0, "2-D")]:
        with pytest.raises(ValueError, match=words):
            collapse.nc1(features, labels)
    with pytest.raises(ValueError, match=r"one per sample, shape \[12\], got shape \(11,\)"):
        collapse.nc1(X, labels[:-1])
    with pytest.raises(ValueError, match="one per sample"):
        collapse.nc1(X, labels[:, None])
    with pytest.raises(ValueError, match="at least two classes, got 1"):
        collapse.nc1(X, np.zeros(12))
    with pytest.raises(ValueError, match="layer 1 contains NaN"):
        collapse.nc1_per_layer([X, np.nan * X], labels)
    with pytest.raises(ValueError, match="3-D stacked"):
        collapse.nc1_per_layer(X, labels)


def test_alignment_refuses_what_it_cannot_measure():
    X = np.random.default_rng(11).standard_normal((12, 3))
    y, tau = np.where(X[:, 0] > 0, 1.0, -1.0), al.thresholds_for(12)
    for Phi, words in [(X + 1j, "complex"), (3.0, "scalar"), (X[:0], "empty"), (X.astype(str), "not numbers")]:
        with pytest.raises(ValueError, match=words):
            al.curve_and_area(Phi, y, tau)
    with pytest.raises(ValueError, match="complex"):
        al.curve_and_area(X, y + 1j, tau)
    with pytest.raises(ValueError, match="curve is 0 at the first threshold"):  # was NaN
        al.curve_and_area(X, np.zeros(12), tau)
    with pytest.raises(ValueError, match="a label vector y is 0"):  # was a curve of NaN
        al.curve_and_area(X, np.zeros(12), tau, relative=True)
    with pytest.raises(ValueError, match="span no range"):  # was NaN
        al.alignment_area(np.ones(3), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="finite"):
        al.alignment_curve(al.prepare(X), y, [0.0, np.nan])


def test_rba_fit_refuses_complex_data():
    X = np.random.default_rng(12).standard_normal((12, 3))
    with pytest.raises(ValueError, match="complex"):  # the imaginary part used to be dropped with a warning
        R.fit_linear_map(X + 1j, X)
    with pytest.raises(ValueError, match="not numbers"):
        R.fit_linear_map(X, X.astype(str))
