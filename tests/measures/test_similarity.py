"""Tests of layersim.measures.similarity: CKA, cosine, Procrustes and CCA against published numbers, naive
references and invariances, at extreme scales, on the device path, and on bad inputs (one clear error or a valid
value)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.linalg
from scipy.spatial.distance import cdist
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layersim.measures import similarity as S
from layersim.measures.redundancy import block_redundancy

from builders import bad_input_tests, naive_hsic, naive_linear_cka

FAST = settings(max_examples=30, deadline=None)


# --------------------------------------------------------------------------------------
# deliberately naive float64 references (explicit centring matrix, loops; naive_hsic and naive_linear_cka in builders)
# --------------------------------------------------------------------------------------


def naive_hsic_u(K, L):
    """Unbiased HSIC as an explicit U-statistic over distinct index tuples (Song et al. 2012)."""
    n = K.shape[0]
    pairs = sum(K[i, j] * L[i, j] for i, j in itertools.permutations(range(n), 2))
    quads = sum(K[i, j] * L[q, r] for i, j, q, r in itertools.permutations(range(n), 4))
    trips = sum(K[i, j] * L[i, q] for i, j, q in itertools.permutations(range(n), 3))
    return (pairs / (n * (n - 1)) + quads / (n * (n - 1) * (n - 2) * (n - 3))
            - 2 * trips / (n * (n - 1) * (n - 2)))


def naive_debiased_cka(X, Y):
    K, L = X @ X.T, Y @ Y.T
    return naive_hsic_u(K, L) / np.sqrt(naive_hsic_u(K, K) * naive_hsic_u(L, L))


def naive_cosines(X, Y, center):
    if center:
        X = X - X.mean(0)
        Y = Y - Y.mean(0)
    return np.array([np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y))
                     for x, y in zip(X, Y)])


def random_orthogonal(rng, d):
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.diag(R))


def kornblith_demo():
    np.random.seed(1337)
    X = np.random.randn(100, 10)
    Y = np.random.randn(100, 10) + X
    return X, Y


# --------------------------------------------------------------------------------------
# published numbers
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["auto", "feature", "gram"])
def test_kornblith_demo_linear_and_debiased(form):
    X, Y = kornblith_demo()
    assert S.linear_cka(X, Y, form=form) == pytest.approx(0.55761, abs=1e-5)
    assert S.linear_cka(X, Y, debiased=True, form=form) == pytest.approx(0.51346, abs=1e-5)


def test_kornblith_demo_rbf():
    X, Y = kornblith_demo()
    assert S.rbf_cka(X, Y, threshold=0.5) == pytest.approx(0.65483, abs=1e-5)


# --------------------------------------------------------------------------------------
# against naive references
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d1,d2", [(40, 5, 7), (12, 30, 25), (9, 9, 3), (50, 1, 60)])
@pytest.mark.parametrize("form", ["auto", "feature", "gram"])
def test_linear_cka_matches_naive(n, d1, d2, form):
    rng = np.random.default_rng(n * 100 + d1)
    X = rng.standard_normal((n, d1)) + 3.0
    Y = X[:, :1] @ rng.standard_normal((1, d2)) + rng.standard_normal((n, d2)) - 2.0
    assert S.linear_cka(X, Y, form=form) == pytest.approx(naive_linear_cka(X, Y), abs=1e-8)


@pytest.mark.parametrize("n,d1,d2", [(6, 2, 3), (7, 12, 9), (8, 8, 1)])
@pytest.mark.parametrize("form", ["feature", "gram"])
def test_debiased_cka_matches_ustatistic_loops(n, d1, d2, form):
    rng = np.random.default_rng(7 * n + d2)
    X = rng.standard_normal((n, d1)) + 1.0
    Y = np.tanh(X.sum(1, keepdims=True)) + rng.standard_normal((n, d2))
    ref = naive_debiased_cka(X, Y)
    assert S.linear_cka(X, Y, debiased=True, form=form) == pytest.approx(ref, abs=1e-8)


@pytest.mark.parametrize("debiased", [False, True])
def test_hsic_matches_naive_on_rbf_grams(debiased):
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((7, 3)), rng.standard_normal((7, 4))
    K, L = S.gram_rbf(X, 0.7), S.gram_rbf(Y, 0.7)
    ref = naive_hsic_u(K, L) if debiased else naive_hsic(K, L)
    assert S.hsic(K, L, debiased=debiased) == pytest.approx(ref, abs=1e-10)


def test_gram_rbf_matches_naive_bandwidth():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((15, 4)) * 3 + 100.0
    D2 = cdist(X, X, "sqeuclidean")
    ref = np.exp(-D2 / (2 * 0.5**2 * np.median(D2)))
    np.testing.assert_allclose(S.gram_rbf(X, 0.5), ref, atol=1e-10)


def test_gram_linear_and_center_gram():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((10, 4)) + 50
    H = np.eye(10) - 1 / 10
    np.testing.assert_allclose(S.gram_linear(X), H @ X @ X.T @ H, atol=1e-8)
    np.testing.assert_allclose(S.center_gram(X @ X.T), H @ X @ X.T @ H, atol=1e-8)


@pytest.mark.parametrize("center", [True, False])
def test_cosine_matches_naive(center):
    rng = np.random.default_rng(6)
    X, Y = rng.standard_normal((20, 5)) + 1, rng.standard_normal((20, 5)) + 1
    ref = naive_cosines(X, Y, center)
    np.testing.assert_allclose(S.cosine_per_sample(X, Y, center=center), ref, atol=1e-12)
    assert S.cosine(X, Y, center=center) == pytest.approx(ref.mean(), abs=1e-12)


# --------------------------------------------------------------------------------------
# whole-model matrices
# --------------------------------------------------------------------------------------
def random_layers(rng, n=30, dims=(6, 6, 6, 6), offset=0.0):
    h = rng.standard_normal((n, dims[0]))
    out = []
    for d in dims:
        A = rng.standard_normal((h.shape[1], d)) / np.sqrt(h.shape[1])
        h = h @ A + 0.5 * rng.standard_normal((n, d))
        out.append(h + offset)
    return out


@pytest.mark.parametrize("metric,pairwise", [
    ("cka", lambda a, b: S.linear_cka(a, b)),
    ("debiased_cka", lambda a, b: S.linear_cka(a, b, debiased=True)),
    ("cos", lambda a, b: S.cosine(a, b)),
])
@pytest.mark.parametrize("form", ["auto", "feature", "gram"])
def test_layer_matrix_equals_pairwise(metric, pairwise, form):
    rng = np.random.default_rng(8)
    layers = random_layers(rng, n=25, dims=(5, 40, 8, 12) if metric != "cos" else (9,) * 4,
                           offset=4.0)
    M = S.layer_matrix(layers, metric=metric, form=form)
    L = len(layers)
    assert M.shape == (L, L)
    for i, j in itertools.product(range(L), range(L)):
        assert M[i, j] == pytest.approx(pairwise(layers[i], layers[j]), abs=1e-8), (i, j)
    np.testing.assert_array_equal(M, M.T)
    np.testing.assert_array_equal(np.diag(M), 1.0)


def test_layer_matrix_is_batched_not_pairwise(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("layer_matrix must not call the pairwise functions")
    monkeypatch.setattr(S, "linear_cka", boom)
    monkeypatch.setattr(S, "cosine", boom)
    monkeypatch.setattr(S, "cosine_per_sample", boom)
    layers = np.stack(random_layers(np.random.default_rng(9)))
    for metric in S.METRICS:
        assert S.layer_matrix(layers, metric=metric).shape == (4, 4)


@pytest.mark.parametrize("metric", ["cka", "debiased_cka"])
def test_layer_matrix_low_memory_fallback(monkeypatch, metric):
    layers = random_layers(np.random.default_rng(23), n=20, dims=(3, 30, 4))
    ref = S.layer_matrix(layers, metric, form="gram")
    monkeypatch.setattr(S, "_MAX_BYTES", 64)  # forces the block-row loop of the feature form
    assert S._choose_form(20, [3, 30, 4]) == "feature"
    np.testing.assert_allclose(S.layer_matrix(layers, metric), ref, atol=1e-12)


@pytest.mark.parametrize("metric", ["cka", "debiased_cka"])
def test_gram_form_in_row_blocks(monkeypatch, metric):
    # a Gram buffer of 3 rows of all layers: 9 row blocks of 3, and a last one of 1
    layers = random_layers(np.random.default_rng(24), n=28, dims=(5, 40, 8, 12), offset=3.0)
    ref = S.layer_matrix(layers, metric, form="feature")
    monkeypatch.setattr(S, "_MAX_BYTES", 4 * 8 * 4 * 28 * 3)
    np.testing.assert_allclose(S.layer_matrix(layers, metric, form="gram"), ref, atol=1e-12)
    monkeypatch.setattr(S, "_MAX_BYTES", 1)  # one row per block
    np.testing.assert_allclose(S.layer_matrix(layers, metric, form="gram"), ref, atol=1e-12)


def test_auto_form_follows_shape():
    # Gram form when N is well below sum(d), feature form when well above
    assert S._choose_form(500, [768] * 13) == "gram"
    assert S._choose_form(20000, [384] * 13) == "feature"
    assert S._choose_form(100, [3, 4]) == "feature"
    assert S._choose_form(10, [300, 400]) == "gram"


def _traced_peak(fn):
    import tracemalloc
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_layer_matrix_memory_no_float64_copies():
    # float32 [L, N, d]: the only big allocations are Z = [N, sum d] float64 and Z^T Z;
    # a float64 copy of every layer beforehand would add another |Z|
    rng = np.random.default_rng(25)
    L, n, d = 4, 20000, 16
    X = (rng.standard_normal((L, n, d)) + 1e3).astype(np.float32)
    M, peak = _traced_peak(lambda: S.layer_matrix(X))
    z_bytes = n * L * d * 8
    assert peak < 1.35 * z_bytes, (peak, z_bytes)
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(M, S.layer_matrix(Xc), atol=1e-6)


def test_gram_form_memory_is_bounded(monkeypatch):
    # all L Gram matrices at once would be L N^2 8 bytes = 29 MB; the row blocks stay in 1 MB
    rng = np.random.default_rng(26)
    L, n, d = 4, 960, 3
    layers = [rng.standard_normal((n, d)) for _ in range(L)]
    ref = S.layer_matrix(layers, form="feature")
    monkeypatch.setattr(S, "_MAX_BYTES", 4 << 20)
    M, peak = _traced_peak(lambda: S.layer_matrix(layers, form="gram"))
    assert peak < 3 << 20, peak
    np.testing.assert_allclose(M, ref, atol=1e-12)


def test_streaming_update_accumulates_in_place():
    # after the first batch, an update allocates only its own [b, D] block, not D x D
    rng = np.random.default_rng(27)
    L, d, b = 4, 100, 20
    acc = S.StreamingCKA()
    acc.update((rng.standard_normal((L, b, d)) + 50).astype(np.float32))
    batch = (rng.standard_normal((L, b, d)) + 50).astype(np.float32)
    _, peak = _traced_peak(lambda: acc.update(batch))
    D = L * d
    assert peak < 0.25 * D * D * 8, (peak, D * D * 8)
    for _ in range(10):  # and the memory does not grow with the number of batches seen
        _, p = _traced_peak(lambda: acc.update(batch))
        assert p <= peak + 4096


def test_streaming_result_reads_the_triangle_in_block_rows():
    rng = np.random.default_rng(28)
    L, d, b = 8, 50, 40
    layers = (rng.standard_normal((L, 3 * b, d)) @ rng.standard_normal((d, d)) + 30.0)
    for debiased in (False, True):
        acc = S.StreamingCKA(debiased=debiased)
        for a in range(0, 3 * b, b):
            acc.update(layers[:, a:a + b])
        M, peak = _traced_peak(acc.result)
        D = L * d
        assert peak < 0.5 * D * D * 8, (peak, D * D * 8)  # no full D x D temporaries
        np.testing.assert_allclose(
            M, S.layer_matrix(layers, "debiased_cka" if debiased else "cka"), atol=1e-10)


def test_layer_matrix_stacked_equals_list():
    layers = random_layers(np.random.default_rng(10))
    for metric in S.METRICS:
        np.testing.assert_allclose(S.layer_matrix(np.stack(layers), metric),
                                   S.layer_matrix(layers, metric), atol=1e-12)


@pytest.mark.parametrize("metric", S.METRICS)
def test_to_last_is_last_column(metric):
    layers = random_layers(np.random.default_rng(11), n=20, dims=(7,) * 5, offset=-3.0)
    np.testing.assert_allclose(S.to_last(layers, metric),
                               S.layer_matrix(layers, metric)[:, -1], atol=1e-10)


def test_cos_center_flag_matters():
    layers = random_layers(np.random.default_rng(12), offset=2.0)
    a = S.layer_matrix(layers, "cos", center=True)
    b = S.layer_matrix(layers, "cos", center=False)
    assert np.abs(a - b).max() > 1e-3
    assert b[0, 1] == pytest.approx(S.cosine(layers[0], layers[1], center=False), abs=1e-12)


# --------------------------------------------------------------------------------------
# residual-stream diagnostics
# --------------------------------------------------------------------------------------
def test_adjacent_cosine_matches_naive():
    layers = random_layers(np.random.default_rng(13), offset=1.5)
    A = S.adjacent_cosine(layers)
    assert A.shape == (3, 30)
    for l in range(3):
        np.testing.assert_allclose(A[l], naive_cosines(layers[l], layers[l + 1], False),
                                   atol=1e-12)
    np.testing.assert_allclose(S.adjacent_cosine(layers, center=True)[1],
                               naive_cosines(layers[1], layers[2], True), atol=1e-12)


def test_residual_norm_ratio_is_uncentred():
    rng = np.random.default_rng(14)
    h = rng.standard_normal((10, 6)) + 5.0  # an offset: centring would change the answer
    f = 0.1 * rng.standard_normal((10, 6))
    ref = np.array([np.linalg.norm(h[i]) / np.linalg.norm(f[i]) for i in range(10)])
    np.testing.assert_allclose(S.residual_norm_ratio(h, h + f), ref, rtol=1e-10)


# --------------------------------------------------------------------------------------
# property tests
# --------------------------------------------------------------------------------------
shape = st.tuples(st.integers(5, 14), st.integers(2, 8), st.integers(1, 8))
seeds = st.integers(0, 2**32 - 1)


def draw(seed, n, d1, d2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d1)) + rng.standard_normal(d1)
    Y = X @ rng.standard_normal((d1, d2)) + rng.standard_normal((n, d2))
    return rng, X, Y


@FAST
@given(seed=seeds, shp=shape, scale=st.floats(1e-3, 1e3), debiased=st.booleans())
def test_cka_orthogonal_and_isotropic_invariance(seed, shp, scale, debiased):
    rng, X, Y = draw(seed, *shp)
    Q1, Q2 = random_orthogonal(rng, X.shape[1]), random_orthogonal(rng, Y.shape[1])
    base = S.linear_cka(X, Y, debiased=debiased)
    moved = S.linear_cka(scale * X @ Q1 + 7.0, Y @ Q2 / scale, debiased=debiased)
    assert moved == pytest.approx(base, abs=1e-9)


@FAST
@given(seed=seeds, shp=shape, scale=st.floats(1e-2, 1e2))
def test_rbf_cka_orthogonal_and_isotropic_invariance(seed, shp, scale):
    rng, X, Y = draw(seed, *shp)
    Q = random_orthogonal(rng, X.shape[1])
    assert S.rbf_cka(scale * X @ Q, Y) == pytest.approx(S.rbf_cka(X, Y), abs=1e-9)


def test_rbf_cka_matrix_holds_rbf_cka_of_every_pair():
    rng = np.random.default_rng(4)
    layers = rng.standard_normal((3, 30, 5))
    layers[2] = np.tanh(layers[1] @ rng.standard_normal((5, 5)))
    M = S.rbf_cka_matrix(layers)
    want = np.array([[S.rbf_cka(a, b) if i != j else 1.0 for j, b in enumerate(layers)] for i, a in enumerate(layers)])
    np.testing.assert_allclose(M, want, rtol=1e-12)
    assert M[1, 2] > M[0, 2]  # layer 2 is a function of layer 1, not of layer 0
    np.testing.assert_allclose(S.rbf_cka_matrix(list(layers), threshold=2.0)[0, 1], S.rbf_cka(*layers[:2], 2.0),
                               rtol=1e-12)


@FAST
@given(seed=seeds, shp=shape, debiased=st.booleans())
def test_cka_symmetric_and_self_one(seed, shp, debiased):
    _, X, Y = draw(seed, *shp)
    assert S.linear_cka(X, Y, debiased=debiased) == pytest.approx(
        S.linear_cka(Y, X, debiased=debiased), abs=1e-12)
    assert S.linear_cka(X, X, debiased=debiased) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= S.linear_cka(X, Y) <= 1.0 + 1e-12


@FAST
@given(seed=seeds, n=st.integers(12, 30), d=st.integers(2, 6))
def test_cka_not_invariant_to_ill_conditioned_map(seed, n, d):
    # X is whitened (centred, X^T X = n I), so that no unlucky small sample makes X nearly
    # one-dimensional (seed=24872, n=12, d=2 gave 0.99005 for a raw Gaussian X); then
    # CKA(X, XA) = sum s^2 / (sqrt(d) sqrt(sum s^4)) exactly, s = singular values of A.
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X = np.linalg.qr(X - X.mean(0))[0] * np.sqrt(n)
    s = np.logspace(0, 3, d)
    A = random_orthogonal(rng, d) @ np.diag(s) @ random_orthogonal(rng, d)
    expected = np.sum(s**2) / (np.sqrt(d) * np.sqrt(np.sum(s**4)))
    assert S.linear_cka(X, X @ A) == pytest.approx(expected, abs=1e-9)
    assert S.linear_cka(X, X @ A) < 0.99


@FAST
@given(seed=seeds, n=st.integers(1, 12), d=st.integers(1, 8), center=st.booleans())
def test_cosine_matches_definition(seed, n, d, center):
    n = max(n, 3) if center else n  # centred cosine needs N >= 3; uncentred, any N
    rng = np.random.default_rng(seed)
    X, Y = rng.standard_normal((n, d)) + 0.3, rng.standard_normal((n, d)) - 0.3
    np.testing.assert_allclose(S.cosine_per_sample(X, Y, center=center),
                               naive_cosines(X, Y, center), atol=1e-10)


@FAST
@given(seed=seeds, n=st.integers(2, 12), d=st.integers(1, 8))
def test_cosine_invariant_to_positive_per_sample_scaling(seed, n, d):
    rng = np.random.default_rng(seed)
    X, Y = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    a, b = rng.uniform(0.01, 100, (n, 1)), rng.uniform(0.01, 100, (n, 1))
    np.testing.assert_allclose(S.cosine_per_sample(a * X, b * Y, center=False),
                               S.cosine_per_sample(X, Y, center=False), atol=1e-12)


@FAST
@given(seed=seeds, n=st.integers(4, 12), d=st.integers(3, 8), center=st.booleans())
def test_cosine_not_invariant_to_one_sided_rotation(seed, n, d, center):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    u, v = random_orthogonal(rng, d)[:, :2].T  # a random plane, rotated by 90 degrees
    Q = np.eye(d) - np.outer(u, u) - np.outer(v, v) + np.outer(v, u) - np.outer(u, v)
    assert S.cosine(X, X, center=center) == pytest.approx(1.0)
    assert S.cosine(X, X @ Q, center=center) < 0.999
    # ... while rotating both arguments changes nothing
    Y = rng.standard_normal((n, d))
    assert S.cosine(X @ Q, Y @ Q, center=center) == pytest.approx(
        S.cosine(X, Y, center=center), abs=1e-12)


# --------------------------------------------------------------------------------------
# numerical robustness
# --------------------------------------------------------------------------------------
def offset_pair(rng, n=300, d=48):
    X = rng.standard_normal((n, d))
    Y = X @ rng.standard_normal((d, d)) / np.sqrt(d) + 0.6 * rng.standard_normal((n, d))
    return X, Y


def test_float32_with_large_offset():
    X, Y = offset_pair(np.random.default_rng(16))
    ref_cka, ref_cos = S.linear_cka(X, Y), S.cosine(X, Y, center=True)
    assert 0.3 < ref_cka < 0.95
    X32, Y32 = (X + 1e3).astype(np.float32), (Y + 1e3).astype(np.float32)
    assert S.linear_cka(X32, Y32) == pytest.approx(ref_cka, abs=1e-4)
    assert S.linear_cka(X32, Y32, debiased=True) == pytest.approx(
        S.linear_cka(X, Y, debiased=True), abs=1e-4)
    assert S.cosine(X32, Y32, center=True) == pytest.approx(ref_cos, abs=1e-4)
    np.testing.assert_allclose(S.layer_matrix([X32, Y32]), S.layer_matrix([X, Y]), atol=1e-4)
    t = torch.from_numpy(np.stack([X32, Y32]))
    np.testing.assert_allclose(S.layer_matrix(t, "cos"), S.layer_matrix([X, Y], "cos"),
                               atol=1e-4)
    # the trap this guards against: a float32 Gram matrix formed before centring
    K = torch.from_numpy(X32) @ torch.from_numpy(X32).T
    L = torch.from_numpy(Y32) @ torch.from_numpy(Y32).T
    H = torch.eye(len(X)) - 1.0 / len(X)
    Kc, Lc = H @ K @ H, H @ L @ H
    naive32 = float((Kc * Lc).sum() / (Kc.norm() * Lc.norm()))
    assert abs(naive32 - ref_cka) > 1e-3


def test_bfloat16_and_half_tensors_accepted():
    X, Y = offset_pair(np.random.default_rng(17), n=50, d=8)
    for dt in (torch.float16, torch.bfloat16):
        a, b = torch.from_numpy(X).to(dt), torch.from_numpy(Y).to(dt)
        ref = S.linear_cka(a.double().numpy(), b.double().numpy())
        assert S.linear_cka(a, b) == pytest.approx(ref, abs=1e-12)


# --------------------------------------------------------------------------------------
# torch input
# --------------------------------------------------------------------------------------
def test_torch_tensors_match_numpy():
    X, Y = offset_pair(np.random.default_rng(18), n=40, d=6)
    tX, tY = torch.from_numpy(X).requires_grad_(), torch.from_numpy(Y)
    assert S.linear_cka(tX, tY) == S.linear_cka(X, Y)
    assert S.linear_cka(tX, tY, debiased=True) == S.linear_cka(X, Y, debiased=True)
    assert S.rbf_cka(tX, tY) == S.rbf_cka(X, Y)
    assert S.cosine(tX, tY) == S.cosine(X, Y)
    np.testing.assert_array_equal(S.cosine_per_sample(tX, tY), S.cosine_per_sample(X, Y))
    np.testing.assert_array_equal(S.layer_matrix(torch.stack([tX, tY])),
                                  S.layer_matrix([X, Y]))
    np.testing.assert_array_equal(S.layer_matrix([tX, tY], "cos"), S.layer_matrix([X, Y], "cos"))
    X32 = X.astype(np.float32)
    assert S.linear_cka(torch.from_numpy(X32), tY) == S.linear_cka(X32, Y)
    assert isinstance(S.linear_cka(tX, tY), float)
    assert isinstance(S.cosine(tX, tY), float)


# --------------------------------------------------------------------------------------
# input validation
# --------------------------------------------------------------------------------------
def good(n=10, d=3, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("fn", [S.linear_cka, S.cosine, S.rbf_cka, S.procrustes_similarity,
                                lambda a, b: S.layer_matrix([a, b])])
def test_rejects_nonfinite(fn, bad):
    X = good()
    X[3, 1] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        fn(X, good(seed=1))


@pytest.mark.parametrize("fn", [S.linear_cka, S.rbf_cka, S.procrustes_similarity, S.cca_r2,
                                lambda a, b: S.layer_matrix([a, b])])
def test_rejects_mismatched_n(fn):
    with pytest.raises(ValueError, match="same number of samples"):
        fn(good(10), good(9))


def test_cosine_rejects_mismatched_shape():
    with pytest.raises(ValueError, match="same shape"):
        S.cosine(good(10, 3), good(9, 3))
    with pytest.raises(ValueError, match="same shape"):
        S.cosine(good(10, 3), good(10, 4))
    with pytest.raises(ValueError, match="same feature dimension"):
        S.layer_matrix([good(10, 3), good(10, 4)], "cos")


def test_rejects_too_few_samples():
    with pytest.raises(ValueError, match="at least 3 samples"):
        S.linear_cka(good(1), good(1))
    with pytest.raises(ValueError, match="at least 3 samples"):
        S.cosine(good(1), good(1))
    with pytest.raises(ValueError, match="at least 4 samples"):
        S.linear_cka(good(3), good(3), debiased=True)
    with pytest.raises(ValueError, match="at least 4 samples"):
        S.layer_matrix([good(3), good(3)], "debiased_cka")
    with pytest.raises(ValueError, match="at least 4 samples"):
        S.hsic(np.eye(3), np.eye(3), debiased=True)
    assert np.isfinite(S.linear_cka(good(3), good(3, seed=1)))
    assert np.isfinite(S.linear_cka(good(4), good(4, seed=1), debiased=True))
    assert np.isfinite(S.cosine(good(1), good(1, seed=1), center=False))  # no centring: any N


@pytest.mark.parametrize("fn", [S.linear_cka, S.rbf_cka, S.procrustes_similarity,
                                lambda a, b: S.linear_cka(a, b, debiased=True),
                                lambda a, b: S.layer_matrix([b, a])])
def test_rejects_constant_representation(fn):
    const = np.full((10, 3), 1e3 + 0.1)
    with pytest.raises(ValueError, match="constant"):
        fn(const, good())


def test_rejects_constant_in_every_path():
    const = np.full((10, 3), -7.3)
    for form in ("feature", "gram"):
        with pytest.raises(ValueError, match="constant"):
            S.layer_matrix([good(), const], form=form)
    with pytest.raises(ValueError, match="constant"):
        S.to_last([const, good()])
    with pytest.raises(ValueError, match="constant"):
        S.StreamingCKA().update([good(), const]).result()


def test_rejects_nonpositive_debiased_self_hsic():
    X = np.array([[0.0], [0.0], [0.0], [1.0]])  # unbiased self-HSIC is exactly 0
    with pytest.raises(ValueError, match="not positive"):
        S.linear_cka(X, good(4), debiased=True)
    with pytest.raises(ValueError, match="not positive"):
        S.gram_cka(S.gram_linear(X), S.gram_linear(good(4)), debiased=True)


@pytest.mark.parametrize("arr", [np.ones(10), np.ones((2, 10, 3)), np.ones((1, 2, 10, 3))])
def test_rejects_wrong_ndim(arr):
    with pytest.raises(ValueError, match="2-D"):
        S.linear_cka(arr, good())
    with pytest.raises(ValueError, match="2-D"):
        S.cosine(good(), arr)


def test_layers_wrong_ndim():
    with pytest.raises(ValueError, match="3-D stacked"):
        S.layer_matrix(np.ones((2, 3, 10, 3)))
    with pytest.raises(ValueError, match="2-D"):
        S.layer_matrix([np.ones((2, 10, 3)), good()])  # [B, T, D] per layer
    with pytest.raises(ValueError, match="same number of samples"):
        S.layer_matrix([good(10), good(11)])
    with pytest.raises(ValueError, match="empty"):
        S.layer_matrix([])
    with pytest.raises(ValueError, match="metric"):
        S.layer_matrix([good(), good()], metric="CKA")
    with pytest.raises(ValueError, match="center=False"):
        S.layer_matrix([good(), good()], metric="cka", center=False)


def test_cosine_rejects_zero_norm_rows():
    X = good()
    X[4] = 0.0
    with pytest.raises(ValueError, match="zero-norm"):
        S.cosine(X, good(), center=False)
    with pytest.raises(ValueError, match="zero-norm"):
        S.adjacent_cosine([good(), X])
    Z = good() + 1e3
    Z[2] = np.delete(Z, 2, axis=0).mean(0)  # the global mean itself: zero after centring
    with pytest.raises(ValueError, match="zero-norm row.*after centring"):
        S.cosine(Z, good(), center=True)
    with pytest.raises(ValueError, match="zero-norm"):
        S.layer_matrix([Z, good()], "cos")


def test_residual_norm_ratio_rejects_zero_residual():
    h = good() + 10
    h2 = h.copy()
    h2[1:] += 0.5
    with pytest.raises(ValueError, match="zero-norm residual"):
        S.residual_norm_ratio(h, h2)


def test_gram_validation():
    with pytest.raises(ValueError, match="square"):
        S.hsic(np.ones((3, 4)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="symmetric"):
        S.hsic(np.triu(np.ones((4, 4))), np.eye(4))
    with pytest.raises(ValueError, match="threshold"):
        S.gram_rbf(good(), threshold=0.0)


# --------------------------------------------------------------------------------------
# streaming and minibatch CKA
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_cka_is_exact(debiased):
    rng = np.random.default_rng(19)
    layers = [x.astype(np.float32) for x in random_layers(rng, n=64, dims=(5, 9, 3, 7),
                                                          offset=1e3)]
    metric = "debiased_cka" if debiased else "cka"
    ref = S.layer_matrix(layers, metric)
    acc = S.StreamingCKA(debiased=debiased)
    cuts = [0, 3, 20, 21, 50, 64]
    for a, b in zip(cuts[:-1], cuts[1:]):
        acc.update([torch.from_numpy(x[a:b]) for x in layers])
    assert acc.n == 64
    np.testing.assert_allclose(acc.result(), ref, atol=1e-9)


def test_streaming_cka_validation():
    acc = S.StreamingCKA()
    with pytest.raises(ValueError, match="no batches"):
        acc.result()
    acc.update([good(3, 2), good(3, 4)])
    with pytest.raises(ValueError, match="dimensions changed"):
        acc.update([good(3, 2), good(3, 5)])
    with pytest.raises(ValueError, match="at least 4 samples"):
        S.StreamingCKA(debiased=True).update([good(3), good(3)]).result()


def test_minibatch_cka_matches_naive_estimator():
    rng = np.random.default_rng(20)
    layers = random_layers(rng, n=40, dims=(4, 6, 5))
    batches = [[x[a:a + 10] for x in layers] for a in range(0, 40, 10)]
    M = S.minibatch_cka_matrix(batches)
    np.testing.assert_array_equal(np.diag(M), 1.0)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        K = [S.gram_linear(b[i]) for b in batches]
        L = [S.gram_linear(b[j]) for b in batches]
        kl = sum(S.hsic(k, l, True) for k, l in zip(K, L))
        kk = sum(S.hsic(k, k, True) for k in K)
        ll = sum(S.hsic(l, l, True) for l in L)
        assert M[i, j] == pytest.approx(kl / np.sqrt(kk * ll), abs=1e-10)
        assert S.minibatch_cka([(b[i], b[j]) for b in batches]) == pytest.approx(M[i, j])
    # one batch: the estimator is debiased CKA; it is not the full-data CKA in general
    assert S.minibatch_cka([(layers[0], layers[1])]) == pytest.approx(
        S.linear_cka(layers[0], layers[1], debiased=True), abs=1e-12)
    with pytest.raises(ValueError, match="at least 4 samples"):
        S.minibatch_cka([(good(3), good(3))])


# --------------------------------------------------------------------------------------
# Procrustes and CCA
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", [(30, 5), (8, 20)])
def test_procrustes_matches_scipy(n, d):
    rng = np.random.default_rng(21)
    X, Y = rng.standard_normal((n, d)) + 2, rng.standard_normal((n, d)) - 1
    Xt, Yt = X - X.mean(0), Y - Y.mean(0)
    Xt, Yt = Xt / np.linalg.norm(Xt), Yt / np.linalg.norm(Yt)
    R, _ = scipy.linalg.orthogonal_procrustes(Yt, Xt)
    dist2 = np.linalg.norm(Xt - Yt @ R) ** 2
    assert S.procrustes_similarity(X, Y) == pytest.approx(1 - dist2 / 2, abs=1e-10)
    Q = random_orthogonal(rng, d)
    assert S.procrustes_similarity(3 * X @ Q, Y) == pytest.approx(
        S.procrustes_similarity(X, Y), abs=1e-10)
    assert S.procrustes_similarity(X, -2 * X @ Q + 5) == pytest.approx(1.0, abs=1e-10)


def test_cca_matches_whitening_formula_and_invariance():
    rng = np.random.default_rng(22)
    X = rng.standard_normal((60, 4))
    Y = X @ rng.standard_normal((4, 3)) + rng.standard_normal((60, 3))
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    Wx = np.linalg.inv(scipy.linalg.sqrtm(Xc.T @ Xc))
    Wy = np.linalg.inv(scipy.linalg.sqrtm(Yc.T @ Yc))
    rho = np.linalg.svd(Wx @ Xc.T @ Yc @ Wy, compute_uv=False)
    np.testing.assert_allclose(S.canonical_correlations(X, Y), rho, atol=1e-10)
    assert S.cca_r2(X, Y) == pytest.approx(np.mean(rho**2), abs=1e-10)
    A = rng.standard_normal((4, 4)) @ np.diag([1, 10, 100, 1000])  # invertible, ill-conditioned
    assert S.cca_r2(X @ A, Y) == pytest.approx(S.cca_r2(X, Y), abs=1e-8)
    assert S.svcca(X, Y, keep=1.0) == pytest.approx(np.mean(rho), abs=1e-10)
    Q = random_orthogonal(rng, 4)
    assert S.svcca(2 * X @ Q, Y) == pytest.approx(S.svcca(X, Y), abs=1e-10)
    with pytest.raises(ValueError, match="too few samples for CCA"):
        S.cca_r2(good(10, 6), good(10, 6, seed=1))


# --------------------------------------------------------------------------------------
# scale: values do not depend on the magnitude of the inputs in floating point either
# --------------------------------------------------------------------------------------
def scale_pair():
    rng = np.random.default_rng(29)
    X = rng.standard_normal((40, 6)) * 3 + 5
    Y = X @ rng.standard_normal((6, 6)) + rng.standard_normal((40, 6))
    Z = 0.01 * rng.standard_normal((40, 6)) + 0.3
    return X, Y, Z


_, _, _Z = scale_pair()
INVARIANT = {
    "cosine": lambda a, b: S.cosine(a, b),
    "cosine_uncentred": lambda a, b: S.cosine(a, b, center=False),
    "cosine_per_sample": lambda a, b: S.cosine_per_sample(a, b),
    "linear_cka_feature": lambda a, b: S.linear_cka(a, b, form="feature"),
    "linear_cka_gram": lambda a, b: S.linear_cka(a, b, form="gram"),
    "debiased_cka": lambda a, b: S.linear_cka(a, b, debiased=True),
    "rbf_cka": lambda a, b: S.rbf_cka(a, b),
    "rbf_cka_debiased": lambda a, b: S.rbf_cka(a, b, debiased=True),
    "gram_rbf": lambda a, b: S.gram_rbf(a),
    "gram_cka": lambda a, b: S.gram_cka(S.gram_rbf(a), S.gram_rbf(b), debiased=True),
    "layer_matrix_cka": lambda a, b: S.layer_matrix([a, b, _Z]),
    "layer_matrix_cka_gram": lambda a, b: S.layer_matrix([a, b, _Z], form="gram"),
    "layer_matrix_debiased": lambda a, b: S.layer_matrix([a, b, _Z], "debiased_cka"),
    "layer_matrix_cos": lambda a, b: S.layer_matrix([a, b, _Z], "cos"),
    "to_last_cka": lambda a, b: S.to_last([a, _Z, b]),
    "to_last_debiased": lambda a, b: S.to_last([a, _Z, b], "debiased_cka"),
    "to_last_cos": lambda a, b: S.to_last([a, _Z, b], "cos"),
    "adjacent_cosine": lambda a, b: S.adjacent_cosine([a, b, _Z]),
    "streaming": lambda a, b: S.StreamingCKA().update([a[:15], b[:15]]).update(
        [a[15:], b[15:]]).result(),
    "streaming_debiased": lambda a, b: S.StreamingCKA(debiased=True).update(
        [a[:15], b[:15]]).update([a[15:], b[15:]]).result(),
    "minibatch_cka_matrix": lambda a, b: S.minibatch_cka_matrix(
        [[a[:20], b[:20]], [a[20:], b[20:]]]),
    "minibatch_cka": lambda a, b: S.minibatch_cka([(a[:20], b[:20]), (a[20:], b[20:])]),
    "procrustes_similarity": lambda a, b: S.procrustes_similarity(a, b),
    "canonical_correlations": lambda a, b: S.canonical_correlations(a, b),
    "cca_r2": lambda a, b: S.cca_r2(a, b),
    "svcca": lambda a, b: S.svcca(a, b),
}
SCALES = [(1e100, 1.0), (1e-100, 1.0), (1.0, 1e150), (1e300, 1e-300), (1e-300, 1e300)]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("name", sorted(INVARIANT))
def test_scale_invariant_functions_at_extreme_scales(name):
    fn = INVARIANT[name]
    X, Y, _ = scale_pair()
    ref = np.asarray(fn(X, Y))
    for sx, sy in SCALES:
        np.testing.assert_allclose(fn(X * sx, Y * sy), ref, rtol=1e-12, atol=1e-15,
                                   err_msg=f"{name} at X*{sx:g}, Y*{sy:g}")


@pytest.mark.filterwarnings("error")
def test_user_example_cka_at_1e100():
    X, Y = kornblith_demo()
    for a, b in [(X * 1e100, Y), (X, Y * 1e-100), (X * 1e160, Y * 1e-160)]:
        assert S.linear_cka(a, b) == pytest.approx(0.55761, abs=1e-5)
        assert S.linear_cka(a, b) == pytest.approx(S.linear_cka(X, Y), rel=1e-12)
    assert S.cosine(X * 1e160, X) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.filterwarnings("error")
def test_ordinary_inputs_are_bit_identical_after_power_of_two_scaling():
    # the rescaling is by powers of two: exact, so results do not move by a single bit
    X, Y, Z = scale_pair()
    for k in (-300, -37, 5, 200):
        c = 2.0**k
        assert S.linear_cka(X * c, Y) == S.linear_cka(X, Y)
        assert S.linear_cka(X * c, Y * c, debiased=True) == S.linear_cka(X, Y, debiased=True)
        np.testing.assert_array_equal(S.layer_matrix([X * c, Y, Z]), S.layer_matrix([X, Y, Z]))
        np.testing.assert_array_equal(S.cosine_per_sample(X * c, Y), S.cosine_per_sample(X, Y))
        np.testing.assert_array_equal(S.residual_norm_ratio(X * c, Y * c),
                                      S.residual_norm_ratio(X, Y))
        np.testing.assert_array_equal(block_redundancy([X * c, Y * c]),
                                      block_redundancy([X, Y]) * c * c)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("k", [100, 120, -100, -110])
def test_float32_near_its_range(k):
    # max |Y| * 2^120 ~ 6e37 (float32 max 3.4e38); 2^-110 ~ 8e-34: exact multiples of the data
    X, Y, Z = (a.astype(np.float32) for a in scale_pair())
    c = np.float32(2.0**k)
    Xc, Yc, Zc = X * c, Y * c, Z * c
    for a, ac in [(X, Xc), (Y, Yc), (Z, Zc)]:
        assert ac.dtype == np.float32 and np.array_equal(ac / c, a)  # no overflow, no subnormals
    assert S.linear_cka(Xc, Yc) == S.linear_cka(X, Y)
    np.testing.assert_array_equal(S.layer_matrix(np.stack([Xc, Yc, Zc])),
                                  S.layer_matrix(np.stack([X, Y, Z])))
    np.testing.assert_array_equal(S.layer_matrix(torch.from_numpy(np.stack([Xc, Yc, Zc])), "cos"),
                                  S.layer_matrix(np.stack([X, Y, Z]), "cos"))
    np.testing.assert_array_equal(S.StreamingCKA().update([Xc, Yc]).result(),
                                  S.StreamingCKA().update([X, Y]).result())
    assert S.cosine(torch.from_numpy(Xc), Yc) == S.cosine(X, Y)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("c", [1e100, 1e-100, 1e300, 1e-300])
def test_residual_norm_ratio_under_common_scaling(c):
    X, Y, _ = scale_pair()
    np.testing.assert_allclose(S.residual_norm_ratio(X * c, Y * c), S.residual_norm_ratio(X, Y),
                               rtol=1e-12)
    # not invariant to scaling one argument
    assert not np.allclose(S.residual_norm_ratio(X * 2, Y), S.residual_norm_ratio(X, Y))


@pytest.mark.filterwarnings("error")
def test_scale_dependent_functions_scale_exactly_or_raise():
    X, Y, Z = scale_pair()
    K, L = S.gram_linear(X), S.gram_linear(Y)
    # values scale with the inputs and are computed without intermediate overflow
    for c in (1e100, 1e-100, 1e150):
        np.testing.assert_allclose(S.gram_linear(X * c), K * c * c, rtol=1e-12, atol=0)
        np.testing.assert_allclose(block_redundancy([X * c, Y * c, Z * c]),
                                   block_redundancy([X, Y, Z]) * c * c, rtol=1e-12)
    for a, b in [(1e300, 1e-300), (1e200, 1e100), (1e-150, 1e-150), (1e300, 1.0)]:
        for debiased in (False, True):
            assert S.hsic(K * a, L * b, debiased) == pytest.approx(
                S.hsic(K, L, debiased) * a * b, rel=1e-12)
    np.testing.assert_allclose(S.center_gram(K * 1e300), S.center_gram(K) * 1e300, rtol=1e-12,
                               atol=1e-12 * 1e300 * np.abs(K).max())
    # a value beyond float64's range is an error, not inf with a warning
    with pytest.raises(ValueError, match="beyond the range of float64"):
        S.hsic(K * 1e160, K * 1e160)
    with pytest.raises(ValueError, match="beyond the range of float64"):
        S.gram_linear(X * 1e200)
    with pytest.raises(ValueError, match="beyond the range of float64"):
        block_redundancy([X * 1e160, Y * 1e160])
    # the CKA of such Gram matrices is fine: it is scale invariant
    assert S.gram_cka(K * 1e300, L) == pytest.approx(S.gram_cka(K, L), rel=1e-12)


@pytest.mark.parametrize("c", [1e-100, 1e100, 1e-300])
def test_constant_and_nonfinite_still_rejected_at_any_scale(c):
    const = np.full((10, 3), 1e3 + 0.1) * c
    for fn in (S.linear_cka, S.rbf_cka, S.procrustes_similarity, S.cca_r2,
               lambda a, b: S.layer_matrix([b, a]), lambda a, b: S.to_last([a, b]),
               lambda a, b: S.StreamingCKA().update([a, b]).result()):
        with pytest.raises(ValueError, match="constant"):
            fn(const, good())
        # a small (or large) but varying representation is not constant
        assert np.all(np.isfinite(fn(good(seed=2) * c, good())))
    X = good() * c
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        S.linear_cka(X, good())


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("debiased", [False, True])
def test_streaming_batches_share_one_scale(monkeypatch, debiased):
    # batches of very different magnitude: the result is the CKA of the concatenated data,
    # so no batch may be rescaled on its own
    rng = np.random.default_rng(30)
    layers = random_layers(rng, n=48, dims=(5, 7, 4), offset=2.0)
    big = [np.concatenate([x[:16], 4.0 * x[16:32], 0.5 * x[32:]]) for x in layers]
    metric = "debiased_cka" if debiased else "cka"
    ref = S.layer_matrix(big, metric)
    for headroom in (32, 0):  # 0: every larger batch rescales the accumulators
        monkeypatch.setattr(S, "_STREAM_HEADROOM", headroom)
        for c in (1.0, 1e150, 1e-150):
            acc = S.StreamingCKA(debiased=debiased)
            for a in (0, 16, 32):
                acc.update([x[a:a + 16] * c for x in big])
            np.testing.assert_allclose(acc.result(), ref, rtol=1e-12, atol=1e-13)
    # a stream whose later batch is 2^200 times larger: rescaled, no overflow
    monkeypatch.setattr(S, "_STREAM_HEADROOM", 32)
    acc = S.StreamingCKA(debiased=debiased)
    acc.update([x[:16] * 1e-100 for x in layers]).update([x[16:] * 1e-100 * 2.0**200 for x in layers])
    ref = S.layer_matrix([np.concatenate([x[:16], x[16:] * 2.0**200]) for x in layers], metric)
    np.testing.assert_allclose(acc.result(), ref, rtol=1e-12, atol=1e-13)


@pytest.mark.filterwarnings("error")
def test_minibatch_batches_share_one_scale():
    rng = np.random.default_rng(31)
    layers = random_layers(rng, n=40, dims=(4, 6, 5))
    batches = [[x[a:a + 10] * w for x in layers] for a, w in zip(range(0, 40, 10), (1, 4, 0.25, 2))]
    ref = S.minibatch_cka_matrix(batches)
    for c in (1e100, 1e-100, 1e300):
        np.testing.assert_allclose(S.minibatch_cka_matrix([[x * c for x in b] for b in batches]),
                                   ref, rtol=1e-12)
    # the estimator weights each batch by its HSIC, so the relative scales matter
    assert not np.allclose(S.minibatch_cka_matrix([[x / w for x in b] for b, w in
                                                   zip(batches, (1, 4, 0.25, 2))]), ref)


@FAST
@given(seed=seeds, shp=shape, kx=st.integers(-300, 300), ky=st.integers(-300, 300),
       debiased=st.booleans())
def test_cka_and_cosine_scale_free(seed, shp, kx, ky, debiased):
    _, X, Y = draw(seed, *shp)
    sx, sy = 10.0**kx, 10.0**ky
    assert S.linear_cka(X * sx, Y * sy, debiased=debiased) == pytest.approx(
        S.linear_cka(X, Y, debiased=debiased), rel=1e-12, abs=1e-14)
    Yd = Y[:, :1] * np.ones(X.shape[1])  # same d for cosine
    assert S.cosine(X * sx, Yd * sy) == pytest.approx(S.cosine(X, Yd), rel=1e-12, abs=1e-14)


def test_cross_matrix_is_pairwise_cka_between_two_stacks():
    rng = np.random.default_rng(5)
    A = [rng.normal(size=(50, d)) for d in (3, 7, 4)]
    B = [rng.normal(size=(50, d)) @ rng.normal(size=(d, d)) for d in (6, 2)]
    M = S.cross_matrix(A, B)
    assert M.shape == (3, 2)
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            assert M[i, j] == pytest.approx(S.linear_cka(a, b), rel=1e-12)
    np.testing.assert_allclose(S.cross_matrix(A, A), S.layer_matrix(A), rtol=1e-12)
    with pytest.raises(ValueError, match="same samples"):
        S.cross_matrix(A, [rng.normal(size=(49, 3))])
    with pytest.raises(ValueError, match="computes"):
        S.cross_matrix(A, B, metric="cca")
    C = [rng.normal(size=(50, 4)) for _ in range(3)]
    D = [c + rng.normal(size=(50, 4)) for c in C[:2]]
    M = S.cross_matrix(C, D, metric="cos")
    assert M.shape == (3, 2)
    assert M[2, 1] == pytest.approx(S.cosine(C[2], D[1]), rel=1e-12)


# --------------------------------------------------------------------------------------
# the device path (CUDA tensors stay on their GPU); checked here on CPU tensors with
# device="torch", which runs the same torch code
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("metric,center", [("cka", True), ("debiased_cka", True), ("cos", True), ("cos", False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_path_layer_matrix_equals_the_cpu_path(metric, center, dtype):
    rng = np.random.default_rng(41)
    layers = [x.astype(dtype) for x in random_layers(rng, n=80, dims=(6, 6, 6, 6, 6), offset=1e3)]
    ref = S.layer_matrix(layers, metric, center=center)
    for form in ("auto", "feature", "gram"):
        got = S.layer_matrix([torch.from_numpy(x) for x in layers], metric, center=center, form=form, device="torch")
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)
    stacked = S.layer_matrix(torch.from_numpy(np.stack(layers)), metric, center=center, device="torch")
    np.testing.assert_allclose(stacked, ref, rtol=0, atol=1e-10)
    if metric != "cos":  # layers of different widths
        mixed = [x.astype(dtype) for x in random_layers(rng, n=40, dims=(3, 8, 5), offset=-7.0)]
        np.testing.assert_allclose(S.layer_matrix([torch.from_numpy(x) for x in mixed], metric, device="torch"),
                                   S.layer_matrix(mixed, metric), rtol=0, atol=1e-10)


def test_device_path_gram_form_in_row_blocks(monkeypatch):
    rng = np.random.default_rng(44)
    layers = random_layers(rng, n=37, dims=(40, 50, 30), offset=3.0)  # N < sum d / 2: the Gram form
    assert S._choose_form(37, [40, 50, 30]) == "gram"
    monkeypatch.setattr(S, "_MAX_BYTES", 8 * 3 * 37 * 5)  # row blocks of 5 rows
    for metric in ("cka", "debiased_cka"):
        np.testing.assert_allclose(S.layer_matrix([torch.from_numpy(x) for x in layers], metric, device="torch"),
                                   S.layer_matrix(layers, metric), rtol=0, atol=1e-10)


def test_device_path_kornblith_demo_and_scale():
    X, Y = kornblith_demo()
    ref = S.layer_matrix([X, Y], "cka")
    for c in (1.0, 1e-150, 1e150):
        got = S.layer_matrix([torch.from_numpy(X * c), torch.from_numpy(Y * c)], "cka", device="torch")
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_device_path_rejects_bad_input_like_the_cpu_path():
    good_t = [torch.randn(10, 3), torch.randn(10, 3)]
    bad = [good_t[0].clone(), good_t[1]]
    bad[0][2, 1] = float("nan")
    with pytest.raises(ValueError, match="layer 0 contains NaN or inf"):
        S.layer_matrix(bad, device="torch")
    with pytest.raises(ValueError, match="same number of samples"):
        S.layer_matrix([torch.randn(10, 3), torch.randn(9, 3)], device="torch")
    with pytest.raises(ValueError, match="constant across samples"):
        S.layer_matrix([torch.ones(10, 3), torch.randn(10, 3)], device="torch")
    with pytest.raises(ValueError, match="same feature dimension"):
        S.layer_matrix([torch.randn(10, 3), torch.randn(10, 4)], "cos", device="torch")
    with pytest.raises(ValueError, match="need at least 4 samples"):
        S.layer_matrix([torch.randn(3, 3), torch.randn(3, 3)], "debiased_cka", device="torch")
    with pytest.raises(ValueError, match="device must be"):
        S.layer_matrix(good_t, device="gpu")
    with pytest.raises(ValueError, match="form must be"):
        S.layer_matrix(good_t, form="fast", device="torch")
    assert not S._on_cuda(good_t) and not S._on_cuda(np.zeros((2, 3, 4)))


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("debiased", [False, True])
def test_device_path_streaming_equals_the_cpu_stream(monkeypatch, debiased):
    rng = np.random.default_rng(43)
    layers = [x.astype(np.float32) for x in random_layers(rng, n=64, dims=(5, 9, 3, 7), offset=1e3)]
    metric = "debiased_cka" if debiased else "cka"
    ref = S.layer_matrix(layers, metric)
    acc = S.StreamingCKA(debiased=debiased, device="torch")
    for a, b in zip([0, 3, 20, 21, 50], [3, 20, 21, 50, 64]):
        acc.update([torch.from_numpy(x[a:b]) for x in layers])
    assert acc._torch and isinstance(acc._Su, torch.Tensor) and acc.n == 64
    np.testing.assert_allclose(acc.result(), ref, rtol=0, atol=1e-10)
    # a later batch 2^200 times larger is rescaled on the device as on the host
    monkeypatch.setattr(S, "_STREAM_HEADROOM", 32)
    base = random_layers(rng, n=48, dims=(5, 7, 4), offset=2.0)
    acc = S.StreamingCKA(debiased=debiased, device="torch")
    acc.update([torch.from_numpy(x[:16] * 1e-100) for x in base])
    acc.update([torch.from_numpy(x[16:] * 1e-100 * 2.0**200) for x in base])
    ref = S.layer_matrix([np.concatenate([x[:16], x[16:] * 2.0**200]) for x in base], metric)
    np.testing.assert_allclose(acc.result(), ref, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="device must be"):
        S.StreamingCKA(device="cuda:0")


def test_streamed_cosine_matrix_equals_the_in_memory_one(tmp_path):
    """The memmap path (two passes of chunks, the global mean first) against layer_matrix(metric="cos"),
    with chunks that do not divide N and a subset of the layers."""
    rng = np.random.default_rng(3)
    stack = rng.normal(size=(4, 203, 16)) + rng.normal(size=(4, 1, 16)) * 3  # layers with a common offset
    mm = np.lib.format.open_memmap(tmp_path / "h.npy", mode="w+", dtype=np.float32, shape=stack.shape)
    mm[:] = stack
    ref = S.layer_matrix(np.asarray(mm, dtype=np.float64)[[0, 2, 3]], metric="cos")
    got = S.streamed_cosine_matrix(mm, entries=[0, 2, 3], chunk=50)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    bad = np.array(mm)
    bad[1, 7] = np.nan
    with pytest.raises(ValueError, match="layer 1"):
        S.streamed_cosine_matrix(bad, chunk=50)
    with pytest.raises(ValueError, match="N=2 samples"):
        S.streamed_cosine_matrix(stack[:, :2], chunk=50)
    const = np.array(stack)
    const[2, 60] = np.delete(const[2], 60, axis=0).mean(axis=0)  # a sample at its layer's mean: no cosine
    with pytest.raises(ValueError, match="zero-norm row"):
        S.streamed_cosine_matrix(const, chunk=50)


# --------------------------------------------------------------------------------------
# bad inputs: a valid value or one clear ValueError (the contract of tests/measures/conftest.py);
# hypothesis draws the data, derandomize=True keeps every run the same
# --------------------------------------------------------------------------------------
HOSTILE = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])
FEW = settings(HOSTILE, max_examples=4)


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
    "rbf_cka_matrix": (lambda X, Y: S.rbf_cka_matrix([X, Y]), "unit"),
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
}


test_classic_bad_inputs, test_arbitrary_float_arrays = bad_input_tests(MEASURES, FEW, HOSTILE)


rotation_scale = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(6, 14), d=st.integers(2, 6),
                      k=st.sampled_from([-150, -37, 0, 42, 150]))


@HOSTILE
@given(**rotation_scale)
def test_cka_is_invariant_to_rotation_and_scale_up_to_1e150(bad_inputs, seed, n, d, k):
    """CKA is scale invariant: X and 1e150 X give the same value (not an overflow, not a refusal)."""
    X, Y = bad_inputs.base_pair(seed, n, d)
    Q = random_orthogonal(np.random.default_rng(seed + 1), d)
    moved = 10.0**k * (X @ Q + 5.0)
    for fn, kind in (MEASURES["linear_cka"], MEASURES["debiased_cka"], MEASURES["rbf_cka"], MEASURES["procrustes"],
                     MEASURES["layer_matrix_cka"], MEASURES["streaming_cka"], MEASURES["layer_matrix_torch"]):
        ref, exc = bad_inputs.outcome(fn, X, Y)
        assert exc is None
        got, exc = bad_inputs.outcome(fn, moved, Y)
        assert exc is None, exc
        bad_inputs.valid(got, kind)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


@HOSTILE
@given(**rotation_scale)
def test_cosine_is_invariant_to_a_common_rotation_and_scale(bad_inputs, seed, n, d, k):
    X, Y = bad_inputs.base_pair(seed, n, d)
    Q = random_orthogonal(np.random.default_rng(seed + 2), d)
    c = 10.0**k
    for center in (True, False):
        ref = S.cosine(X, Y, center=center)
        assert -1 <= ref <= 1
        assert S.cosine(c * X @ Q, Y @ Q / c, center=center) == pytest.approx(ref, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("fn", [
    lambda X, Y: S.linear_cka(X, Y), lambda X, Y: S.linear_cka(X, Y, form="gram"), lambda X, Y: S.rbf_cka(X, Y),
    lambda X, Y: S.layer_matrix([X, Y])[0, 1], lambda X, Y: S.to_last([X, Y])[0],
    lambda X, Y: S.cross_matrix([X], [Y])[0, 0], lambda X, Y: S.StreamingCKA().update([X, Y]).result()[0, 1],
    lambda X, Y: S.layer_matrix([torch.from_numpy(X), torch.from_numpy(Y)], device="torch")[0, 1],
    lambda X, Y: S.procrustes_similarity(X, Y), lambda X, Y: S.cosine(X, Y),
    lambda X, Y: S.gram_cka(S.gram_linear(X), S.gram_linear(Y))])
def test_two_samples_are_refused_not_a_similarity_of_one(bad_inputs, fn):
    """Two samples centre to +-(x_1 - x_2)/2: CKA was exactly 1 for any data, even independent noise."""
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((2, 5)), rng.standard_normal((2, 7))
    if fn.__code__.co_names[-1:] == ("cosine",):
        Y = Y[:, :5]
    with pytest.raises(ValueError, match=r"N=2 samples; need at least 3 samples") as info:
        fn(X, Y)
    bad_inputs.check_refusal(info.value)
    assert np.isfinite(fn(rng.standard_normal((3, 5)), rng.standard_normal((3, Y.shape[1]))))  # N = 3 is fine


def test_uncentred_cosine_takes_any_number_of_samples():
    x, y = np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]])
    assert S.cosine(x, y, center=False) == pytest.approx(np.sqrt(0.5))
    with pytest.raises(ValueError, match="at least 3"):
        S.cosine(x, y)


# --------------------------------------------------------------------------------------
# the small-sample warning: CKA of few samples of wide layers is near 1 for any data
# --------------------------------------------------------------------------------------
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
