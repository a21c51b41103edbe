"""Tests of layersim.analysis.lenses: one generic test walks every registered lens and checks what its row claims
(output shape, finiteness, every declared invariance, and that the invariances it does not declare really fail),
after repsim's table-driven invariance test."""

import dataclasses

import numpy as np
import pytest

from layersim.measures import alignment, block_structure, collapse, redundancy, similarity
from layersim.nets import linear_maps
from layersim.analysis import lenses
from layersim.analysis.lenses import LayerData, Lens

E, N, D, K = 4, 60, 8, 3
# a plain affine readout head: the logits of transformed hidden states are recomputed with it
_HEAD_RNG = np.random.default_rng(7)
W, B = _HEAD_RNG.standard_normal((D, K)), 2.0 * _HEAD_RNG.standard_normal(K)


def make_data(seed: int = 0) -> LayerData:
    """A small residual stream with class structure: ``h_0`` = class mean + noise + an offset,
    ``h_l = h_{l-1} + tanh(h_{l-1} A_l) / 2``; logits from the fixed affine head."""
    rng = np.random.default_rng(seed)
    labels = np.arange(N) % K
    means = 0.7 * rng.standard_normal((K, D))
    h = [means[labels] + rng.standard_normal((N, D)) + 1.5]
    for _ in range(E - 1):
        A = rng.standard_normal((D, D)) / np.sqrt(D)
        h.append(h[-1] + 0.5 * np.tanh(h[-1] @ A) + 0.3 * rng.standard_normal((N, D)))
    return with_hidden(LayerData(labels=labels), np.stack(h))


def with_hidden(data: LayerData, hidden: np.ndarray) -> LayerData:
    return LayerData(hidden=hidden, labels=data.labels, logits=hidden @ W + B, layers=data.layers)


def _orth(rng) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((D, D)))[0]


def transform(kind: str, data: LayerData, rng) -> tuple[LayerData, np.ndarray | None]:
    """Apply one invariance transformation of the module docstring; returns the new data and
    the sample permutation (None if the samples keep their order)."""
    h, z = data.hidden, data.logits
    scales = np.array([0.05, 2.5, 7.0, 0.3])[:, None, None]
    hidden_maps = {
        "invertible_linear": lambda: np.stack([x @ (rng.standard_normal((D, D)) + 2 * np.eye(D)) for x in h]),
        "isotropic_scale": lambda: h * scales,
        "shared_scale": lambda: h * 3.7,
        "orthogonal": lambda: np.stack([x @ _orth(rng) for x in h]),
        "shared_orthogonal": lambda: h @ _orth(rng),
        "translation": lambda: h + 5.0 * rng.standard_normal((E, 1, D)),
        "shared_translation": lambda: h + 5.0 * rng.standard_normal((1, 1, D)),
    }
    if kind in hidden_maps:
        return with_hidden(data, hidden_maps[kind]()), None
    if kind == "sample_permutation":
        p = rng.permutation(N)
        return LayerData(hidden=h[:, p], labels=data.labels[p], logits=z[:, p], layers=data.layers), p
    if kind == "logit_scale":
        return LayerData(hidden=h, labels=data.labels, logits=z * scales, layers=data.layers), None
    if kind == "logit_shift":
        return LayerData(hidden=h, labels=data.labels, logits=z + 5.0 * rng.standard_normal((E, N, 1)),
                         layers=data.layers), None
    raise AssertionError(f"no transformation for {kind}")


def permuted(out: np.ndarray, kind: str, p: np.ndarray | None) -> np.ndarray:
    """What the output should become when the samples are permuted by ``p``."""
    if p is None or kind not in ("per_sample", "per_sample_layer", "per_sample_step"):
        return out
    return out[p] if kind == "per_sample" else out[:, p]


def applicable(lens: Lens) -> list[str]:
    """The transformations that change an input the lens reads (hidden transformations change the
    logits too, which are recomputed from the hidden states); none for a lens that reads only the
    model (its values are checked by ``test_model_lenses_*``)."""
    if lens.needs == {"model"}:
        return []
    out = ["sample_permutation"]
    if lens.needs & {"hidden", "logits"}:
        out += list(lenses.HIDDEN_INVARIANCES)
    if "logits" in lens.needs:
        out += list(lenses.LOGIT_INVARIANCES)
    return out


def check_claims(lens: Lens, data: LayerData) -> None:
    """Shape and finiteness for the lens's kind; every declared invariance holds numerically;
    every applicable invariance it does not declare fails (so the flags are neither false nor
    vacuous)."""
    out = np.asarray(lens.fn(data))
    assert out.shape == lenses.expected_shape(lens.returns, data)
    assert np.isfinite(out).all()
    assert lens.invariances <= set(applicable(lens)), "declares an invariance it cannot be tested on"
    held = []
    for i, kind in enumerate(applicable(lens)):
        new, p = transform(kind, data, np.random.default_rng(100 + i))
        got, want = np.asarray(lens.fn(new)), permuted(out, lens.returns, p)
        if kind in lens.invariances:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8,
                                       err_msg=f"{lens.name} is not invariant to {kind}")
        elif got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-8):
            held.append(kind)
    assert not held, f"{lens.name}: invariances that hold but are not declared: {held}"


@pytest.fixture(scope="module")
def data():
    return make_data()


def model_runs(model=None, n=8, token=None):
    """A ``ModelRuns`` on the tiny test ViT (3 blocks): ``n`` images to fit on, ``n`` to compare on."""
    from builders import image_batch, tiny_vit

    x = image_batch(28, 1, n=2 * n)
    return lenses.ModelRuns(tiny_vit(perturb=True) if model is None else model, [x[:n]], [x[n:]], token, "cpu")


@pytest.fixture(scope="module")
def with_model(data):
    """``data`` with a model to run again (the tiny ViT's four entries: embedding, blocks 1-3)."""
    return dataclasses.replace(data, model=model_runs())


@pytest.mark.parametrize("name", lenses.names())
def test_lens_claims(name, data, with_model):
    """The one table-driven test: every registered lens does what its row claims."""
    lens = lenses.get(name)
    data = with_model if "model" in lens.needs else data
    assert lenses.apply(name, data).shape == lenses.expected_shape(lens.returns, data)
    check_claims(lens, data)


def test_model_lenses_are_span_changes_of_the_steps_between_entries(with_model):
    """skip_change / rba_change of entries at layers [0, 2, 3] remove blocks 1-2, then block 3; an
    identity block costs nothing to skip, a linear one nothing to approximate."""
    import torch

    runs = with_model.model
    two = lenses.LayerData(layers=[0, 2, 3], model=runs)
    want = linear_maps.span_changes(runs.model, runs.fit, runs.eval, [(1, 2), (3, 3)], "skip", device="cpu")
    np.testing.assert_allclose(lenses.apply("redundancy/skip_change", two), want, rtol=1e-12)
    assert lenses.apply("redundancy/rba_change", two).shape == (2,)
    from builders import tiny_vit

    vit = tiny_vit(perturb=True)
    vit.blocks[1] = torch.nn.Identity()  # block 2 does nothing
    skip = lenses.apply("redundancy/skip_change", lenses.LayerData(layers=[0, 1, 2, 3], model=model_runs(vit)))
    assert skip[1] < 1e-12 < min(skip[0], skip[2])
    torch.manual_seed(3)
    vit.blocks[1] = torch.nn.Linear(32, 32, bias=False)  # block 2 is a linear map of every token
    approx = lenses.apply("redundancy/rba_change", lenses.LayerData(layers=[0, 1, 2, 3], model=model_runs(vit)))
    assert approx[1] < 1e-8 < min(approx[0], approx[2])
    with pytest.raises(ValueError, match="two increasing layer indices"):
        lenses.apply("redundancy/skip_change", lenses.LayerData(layers=[2, 1], model=runs))


@pytest.mark.parametrize("name, claim", [
    ("cos/to_last", "orthogonal"),  # COS is not invariant to rotating one layer (tracing §2.1)
    ("cka/matrix", "invertible_linear"),  # CKA is not invariant to general linear maps
    ("redundancy/block", "shared_scale"),  # BR scales with c^2
    ("alignment/area", "translation"),  # the constant-1 column and unit rows see offsets
    ("probe/accuracy", "sample_permutation"),  # the split follows the sample order
])
def test_a_false_claim_is_caught(name, claim, data):
    """The checker is not vacuous: adding an invariance a lens lacks fails it."""
    lens = lenses.get(name)
    wrong = dataclasses.replace(lens, invariances=lens.invariances | {claim})
    with pytest.raises(AssertionError, match=f"not invariant to {claim}"):
        check_claims(wrong, data)


@pytest.mark.parametrize("name, claim", [("cka/matrix", "orthogonal"), ("cos/matrix", "translation"),
                                         ("logit_lens/saturation", "logit_scale")])
def test_a_missing_claim_is_caught(name, claim, data):
    """...and leaving out an invariance a lens has fails it too."""
    lens = lenses.get(name)
    dropped = {claim} | {k for k, v in lenses.IMPLIED.items() if claim in v}
    less = dataclasses.replace(lens, invariances=lens.invariances - dropped)
    with pytest.raises(AssertionError, match=f"not declared: .*{claim}"):
        check_claims(less, data)


def test_logit_lens_accuracy_is_not_rotation_invariant(data):
    """Rotating one layer's features (the same affine head reads them) changes what it predicts."""
    h = data.hidden.copy()
    h[1] = h[1] @ np.linalg.qr(np.random.default_rng(3).standard_normal((D, D)))[0]
    rotated = with_hidden(data, h)
    acc, acc_rot = (lenses.apply("logit_lens/accuracy", x) for x in (data, rotated))
    assert acc_rot[1] != acc[1] and np.array_equal(np.delete(acc_rot, 1), np.delete(acc, 1))


def test_expected_shapes_cover_every_kind(data):
    shapes = {k: lenses.expected_shape(k, data) for k in lenses.KINDS}
    assert shapes == {"per_layer": (E,), "per_pair": (E, E), "per_step": (E - 1,),
                      "per_sample_step": (E - 1, N), "per_sample_layer": (E, N), "per_sample": (N,)}


def test_apply_equals_the_source_functions(data):
    from layersim.measures import probe
    from layersim.nets import readout

    h, y, z = data.hidden, data.labels, data.logits
    np.testing.assert_array_equal(lenses.apply("cka/matrix", data), similarity.layer_matrix(h, "cka"))
    np.testing.assert_array_equal(lenses.apply("cos/to_last", data), similarity.to_last(h, "cos"))
    np.testing.assert_array_equal(lenses.apply("redundancy/block", data), redundancy.block_redundancy(h))
    assert lenses.apply("cka/rbf_matrix", data)[0, 2] == pytest.approx(similarity.rbf_cka(h[0], h[2]), rel=1e-12)
    np.testing.assert_array_equal(lenses.apply("residual/norm_ratio", data)[1],
                                  similarity.residual_norm_ratio(h[1], h[2]))
    np.testing.assert_array_equal(lenses.apply("logit_lens/accuracy", data), readout.layer_accuracy(z, y))
    np.testing.assert_array_equal(lenses.apply("logit_lens/saturation", data), readout.saturation_layer(z))
    np.testing.assert_array_equal(lenses.apply("collapse/nc1", data), collapse.nc1_per_layer(h, y))
    train = np.arange(N) < 40
    acc = probe.per_layer_probe_accuracy(h[:, train], y[train], h[:, ~train], y[~train])
    np.testing.assert_array_equal(lenses.apply("probe/accuracy", data, train=train), acc)
    half = probe.half_split(y)
    acc = probe.per_layer_probe_accuracy(h[:, half], y[half], h[:, ~half], y[~half])
    np.testing.assert_array_equal(lenses.apply("probe/accuracy", data), acc)
    np.testing.assert_array_equal(lenses.apply("redundancy/rba_error", data), redundancy.rba_heldout_error(h))
    np.testing.assert_array_equal(lenses.apply("alignment/area", data), alignment.layer_areas(h, y))
    np.testing.assert_array_equal(lenses.apply("cka/rbf_matrix", data), similarity.rbf_cka_matrix(h))


def test_block_diagonal_lens_scores_the_cka_lens_matrix():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(40, 8))
    # two groups of layers: three near one representation, three near an unrelated one
    other = rng.normal(size=(40, 8))
    H = np.stack([base + 0.05 * rng.normal(size=base.shape) for _ in range(3)]
                 + [other + 0.05 * rng.normal(size=base.shape) for _ in range(3)])
    out = lenses.apply("clusters/block_diagonal", LayerData(hidden=H))
    assert out.shape == (5,) and int(np.argmax(out)) + 1 == 3
    np.testing.assert_allclose(out, block_structure.split_scores(lenses.apply("cka/matrix", LayerData(hidden=H))))


def test_saturation_reports_layer_indices_when_given(data):
    shifted = LayerData(logits=data.logits, layers=[1, 2, 3, 4])
    np.testing.assert_array_equal(lenses.apply("logit_lens/saturation", shifted),
                                  lenses.apply("logit_lens/saturation", data) + 1)


def test_the_probe_lens_is_deterministic_and_checks_its_split(data):
    np.testing.assert_array_equal(lenses.apply("probe/accuracy", data), lenses.apply("probe/accuracy", data))
    with pytest.raises(ValueError, match="both sides"):
        lenses.apply("probe/accuracy", data, train=np.ones(N, bool))


def test_register_rejects_a_duplicate_name(monkeypatch):
    monkeypatch.setattr(lenses, "_REGISTRY", dict(lenses._REGISTRY))
    lens = Lens("test/x", lenses.cka_matrix, "here", "none", {"hidden"}, "per_pair")
    assert lenses.register(lens) is lens and "test/x" in lenses.names("test/*")
    with pytest.raises(ValueError, match="already registered"):
        lenses.register(lens)
    with pytest.raises(ValueError, match="already registered"):
        lenses.register(Lens("cka/matrix", lenses.cka_matrix, "here", "none", {"hidden"}, "per_pair"))


def test_unknown_name_lists_names_and_suggests():
    with pytest.raises(ValueError, match=r"Did you mean 'cka/matrix'.*Registered: .*cos/matrix"):
        lenses.get("cka/matrx")
    with pytest.raises(ValueError, match="unknown lens 'zzz'. Registered"):
        lenses.apply("zzz", LayerData())


def test_missing_input_names_the_lens_and_the_input(data):
    with pytest.raises(ValueError, match=r"lens 'logit_lens/accuracy' needs labels"):
        lenses.apply("logit_lens/accuracy", LayerData(logits=data.logits))
    with pytest.raises(ValueError, match=r"lens 'cka/matrix' needs hidden"):
        lenses.apply("cka/matrix", LayerData(logits=data.logits))


def test_layer_data_validation(data):
    h, z, y = data.hidden, data.logits, data.labels
    with pytest.raises(ValueError, match=r"hidden must be \[E, N, d\]"):
        LayerData(hidden=h[0])
    with pytest.raises(ValueError, match="disagree in E or N"):
        LayerData(hidden=h, logits=z[1:])
    with pytest.raises(ValueError, match="labels has 59 entries"):
        LayerData(hidden=h, labels=y[1:])
    with pytest.raises(ValueError, match="integers"):
        LayerData(hidden=h, labels=y.astype(float))
    with pytest.raises(ValueError, match="has no logit"):
        LayerData(logits=z[..., :2], labels=y)
    with pytest.raises(ValueError, match="layers has 3 indices for 4 entries"):
        LayerData(hidden=h, layers=[0, 1, 2])


def test_model_only_lenses_declare_no_invariance():
    with pytest.raises(ValueError, match="reads only the model"):
        Lens("x/y", lambda d: d, "p", "e", {"model"}, "per_step", {"sample_permutation"})


def test_lens_rows_are_validated():
    with pytest.raises(ValueError, match="returns must be one of"):
        Lens("x", lenses.cka_matrix, "p", "e", {"hidden"}, "per_thing")
    with pytest.raises(ValueError, match="unknown invariances"):
        Lens("x", lenses.cka_matrix, "p", "e", {"hidden"}, "per_pair", {"affine"})
    with pytest.raises(ValueError, match="does not read hidden"):
        Lens("x", lenses.saturation, "p", "e", {"logits"}, "per_sample", {"orthogonal"})
    lens = Lens("x", lenses.cka_matrix, "p", "e", {"hidden"}, "per_pair", {"orthogonal"})
    assert lens.invariances == {"orthogonal", "shared_orthogonal"}


def test_rows_markdown_and_glob():
    rows = lenses.rows()
    assert [r.name for r in rows] == lenses.names()
    assert len(rows) >= 15 and all(r.paper and r.equation and r.needs for r in rows)
    assert lenses.names("cka/*") == ["cka/debiased_matrix", "cka/matrix", "cka/rbf_matrix", "cka/to_last"]
    md = lenses.markdown()
    assert md.count("\n") == len(rows) + 1 and "| redundancy/block | redundancy | redundancy eq. 1 |" in md


WIDTHS = [5, 9, 3, 7]


def ragged_layers(n=60):
    """Four layers of different widths (:data:`WIDTHS`, like a CNN's stages) that carry 3 classes, and the labels."""
    rng = np.random.default_rng(7)
    y = np.arange(n) % 3
    return [rng.normal(size=(n, w)) + 2 * rng.normal(size=(3, w))[y] for w in WIDTHS], y


def heldout_affine_error(X, Y):
    """Held-out 1 - R^2 of the affine least-squares map X -> Y (fitted on even samples, scored on odd ones), by
    numpy's lstsq on the unpadded layers: the reference of ``redundancy/rba_error``."""
    fit, test = slice(0, None, 2), slice(1, None, 2)
    T = np.linalg.lstsq(np.c_[X[fit], np.ones(len(X[fit]))], Y[fit], rcond=None)[0]
    resid = Y[test] - np.c_[X[test], np.ones(len(X[test]))] @ T
    return (resid ** 2).sum() / ((Y[test] - Y[test].mean(0)) ** 2).sum()


@pytest.mark.parametrize("name", [n for n in lenses.names() if "hidden" in lenses.get(n).needs])
def test_layers_of_different_widths_zero_padded(name):
    """Zero columns change no inner product between samples: a lens that reads each layer through its samples gives
    the same on layers zero-padded to the widest as with more zero columns, and what it gives on each layer (or pair
    of consecutive layers) alone; a lens that compares coordinates across layers refuses, naming the widths."""
    from builders import naive_linear_cka
    from layersim.nets.models import zero_pad

    layers, y = ragged_layers()
    padded = LayerData(hidden=zero_pad(layers), labels=y, widths=WIDTHS)
    lens = lenses.get(name)
    if lens.one_space:
        with pytest.raises(ValueError, match=r"one space of one width: the layers have widths \[5, 9, 3, 7\]"):
            lenses.apply(name, padded)
        return
    out = lenses.apply(name, padded)
    wider = LayerData(hidden=zero_pad(layers + [np.zeros((60, 14))])[:-1], labels=y, widths=WIDTHS)
    np.testing.assert_allclose(lenses.apply(name, wider), out, rtol=1e-7, atol=1e-9)
    if name == "cka/matrix":
        np.testing.assert_allclose(out, [[naive_linear_cka(a, b) for b in layers] for a in layers], rtol=1e-10)
    elif name == "redundancy/rba_error":
        np.testing.assert_allclose(out, [heldout_affine_error(a, b) for a, b in zip(layers, layers[1:])], rtol=1e-7)
    elif lens.returns == "per_layer" and name != "cka/to_last":
        alone = [lenses.apply(name, LayerData(hidden=h[None], labels=y))[0] for h in layers]
        np.testing.assert_allclose(out, alone, rtol=1e-7, atol=1e-9)


def test_widths_are_checked_and_one_width_means_one_space(data):
    h = data.hidden
    with pytest.raises(ValueError, match=r"widths \[1, 2\] must give one width in 1..d="):
        LayerData(hidden=h, widths=[1, 2])
    with pytest.raises(ValueError, match="must give one width"):
        LayerData(hidden=h, widths=[h.shape[2] + 1] * len(h))
    assert LayerData(hidden=h, widths=[h.shape[2]] * len(h)).one_width and LayerData(hidden=h).one_width
    same = LayerData(hidden=h, widths=[h.shape[2]] * len(h))
    np.testing.assert_array_equal(lenses.apply("cos/matrix", same), lenses.apply("cos/matrix", data))
