"""Tests of layersim.nets.linear_maps: the token-wise linear map, RBA fits on models against numpy.linalg.lstsq
(padding left out of text fits), the final representation, and the changes a skipped or approximated span
makes."""

import numpy as np
import pytest
import torch

from builders import TEXT_IDS, image_batch, tiny, tiny_vit
from layersim.nets import linear_maps, models, surgery


def test_linear_map_on_every_token_and_per_token():
    r = np.random.default_rng(6)
    h = torch.from_numpy(r.normal(size=(3, 5, 4)).astype(np.float32))
    T = r.normal(size=(5, 6))  # with an intercept row
    m = linear_maps.LinearMap(T, bias=True)
    want = h.double().numpy() @ T[:-1] + T[-1]
    np.testing.assert_allclose(m(h).detach().numpy(), want, atol=1e-5)
    np.testing.assert_allclose(m(h[:, 0]).detach().numpy(), want[:, 0], atol=1e-5)  # [B, d] too
    Tt = r.normal(size=(5, 4, 4))
    mt = linear_maps.LinearMap(Tt, per_token=True)
    want_t = np.stack([h[:, t].double().numpy() @ Tt[t] for t in range(5)], axis=1)
    np.testing.assert_allclose(mt(h).detach().numpy(), want_t, atol=1e-5)
    with pytest.raises(ValueError, match="per-token map of 5 tokens"):
        mt(h[:, :3])
    with pytest.raises(ValueError, match="solution"):
        linear_maps.LinearMap(Tt)
    assert sum(p.numel() for p in m.parameters()) == 5 * 6


def _linear_block_vit():
    """The tiny test ViT with block 2 replaced by a token-wise affine map (so RBA over block 2 is exact)."""
    model = tiny_vit(perturb=True)
    torch.manual_seed(5)
    lin = torch.nn.Linear(32, 32)
    model.blocks[1] = lin
    return model, lin


def test_rba_recovers_a_linear_block_and_the_approximated_model_is_the_original():
    model, lin = _linear_block_vit()
    x = image_batch(28, 1, n=8)
    rba = linear_maps.fit_rba(model, [x[:3], x[3:]], 2, 2, bias=True)
    np.testing.assert_allclose(rba.weight.detach().numpy(), lin.weight.detach().numpy().T, atol=1e-4)
    np.testing.assert_allclose(rba.bias.detach().numpy(), lin.bias.detach().numpy(), atol=1e-4)
    with torch.no_grad():
        ref = model(x)
        np.testing.assert_allclose(surgery.replace(model, 2, 2, rba)(x).numpy(), ref.numpy(), atol=1e-4)
    no_bias = linear_maps.fit_rba(model, [x], 2, 2)  # the paper's map has no intercept: not exact here
    assert no_bias.bias is None
    assert len(models.block_modules(model)) == 3  # the model is untouched


def test_rba_map_is_lstsq_on_every_token_of_the_two_blocks():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=6)
    h = models.layer_outputs(model, x, layers=[0, 2], token="all", device="cpu")
    X, Y = (a.reshape(-1, 32) for a in h)  # every token of every sample
    rba = linear_maps.fit_rba(model, [x[:2], x[2:]], 1, 2, device="cpu")
    np.testing.assert_allclose(rba.weight.detach().numpy(), np.linalg.lstsq(X, Y, rcond=None)[0], atol=1e-4)
    per = linear_maps.fit_rba(model, [x[:2], x[2:]], 1, 2, per_token=True, device="cpu")
    T = X.reshape(6, -1, 32).shape[1]
    assert per.weight.shape == (T, 32, 32)
    Xt, Yt = X.reshape(6, T, 32), Y.reshape(6, T, 32)
    np.testing.assert_allclose(per.weight[3].detach().numpy(), np.linalg.lstsq(Xt[:, 3], Yt[:, 3], rcond=None)[0],
                               atol=1e-4)


def test_rba_leaves_padding_out_of_text_fits():
    t = tiny("bert")
    batch = t.batch
    rba = linear_maps.fit_rba(t.model, [batch], 1, 3, device="cpu")
    xs, ys = [], []
    for b in models.stream(t.model, [batch], layers=[0, 3], token="tokens", device="cpu"):
        m = b.mask.bool()
        xs.append(b.entries[0][m].double().numpy())
        ys.append(b.entries[1][m].double().numpy())
    X, Y = np.concatenate(xs), np.concatenate(ys)
    assert len(X) == sum(sum(1 for i in row if i) for row in TEXT_IDS) < batch["input_ids"].numel()  # pads out
    # 18 tokens, 32 features: the minimum-norm map is ill-conditioned (weights ~1e5), so its float32 weights
    # match lstsq to a few float32 ulps (rtol 1e-7 left no room for how the CPU's BLAS rounds); a fit with
    # the padding rows in is another map altogether
    np.testing.assert_allclose(rba.weight.detach().numpy(), np.linalg.lstsq(X, Y, rcond=None)[0], rtol=1e-6,
                               atol=1e-4)
    with pytest.raises(ValueError, match="padding"):
        linear_maps.fit_rba(t.model, [batch], 1, 3, per_token=True, device="cpu")


def test_rba_span_errors():
    model, x = tiny_vit(), image_batch(28, 1, n=2)
    for first, last in [(0, 1), (2, 1), (1, 4), (1.0, 2)]:
        with pytest.raises(ValueError, match="first"):
            linear_maps.fit_rba(model, [x], first, last)
    with pytest.raises(ValueError, match="no batches"):
        linear_maps.fit_rba(model, [], 1, 1)


def test_final_representation_is_the_normed_last_token_and_follows_surgery():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=5)
    got = linear_maps.final_representation(model, [x], device="cpu")
    with torch.no_grad():
        np.testing.assert_allclose(got, model.forward_features(x)[:, 0].double().numpy(), atol=1e-5)
        cut = model.norm(model.blocks[0](model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(x))))))
    np.testing.assert_allclose(linear_maps.final_representation(surgery.truncate(model, 1), [x], device="cpu"),
                               cut[:, 0].double().numpy(), atol=1e-5)


def test_block_approximation_errors_vanish_for_a_linear_block_only():
    model, _ = _linear_block_vit()
    x = image_batch(28, 1, n=12)
    err = linear_maps.block_approximation_errors(model, [x[:6], x[6:]], [x], bias=True, device="cpu")
    assert list(err) == [1, 2, 3]
    assert err[2] < 1e-8 < min(err[1], err[3])


def test_fit_rba_spans_equals_one_fit_per_span_from_one_pass(monkeypatch):
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=10)
    spans = [(1, 1), (2, 3), (1, 3)]
    passes = {"n": 0}
    stream = models.stream

    def counted(*args, **kwargs):
        passes["n"] += 1
        yield from stream(*args, **kwargs)

    monkeypatch.setattr(models, "stream", counted)
    together = linear_maps.fit_rba_spans(model, [x[:4], x[4:]], spans, bias=True, device="cpu")
    assert passes["n"] == 1
    for span, got in zip(spans, together):
        want = linear_maps.fit_rba(model, [x[:4], x[4:]], *span, bias=True, device="cpu")
        np.testing.assert_array_equal(got.weight.detach().numpy(), want.weight.detach().numpy())
        np.testing.assert_array_equal(got.bias.detach().numpy(), want.bias.detach().numpy())
    with pytest.raises(ValueError, match="spans is empty"):
        linear_maps.fit_rba_spans(model, [x], [])
    with pytest.raises(ValueError, match="1 <= first <= last <= 3"):
        linear_maps.fit_rba_spans(model, [x], [(1, 1), (3, 4)])


def test_span_changes_skip_and_approximate():
    """Skipping an identity block changes nothing; approximating a linear block changes nothing;
    the raw form is the MSE of block_approximation_errors."""
    model, _ = _linear_block_vit()
    x = image_batch(28, 1, n=12)
    fit, ev = [x[:6], x[6:]], [x]
    approx = linear_maps.span_changes(model, fit, ev, [(1, 1), (2, 2)], "approx", bias=True, device="cpu")
    assert approx[1] < 1e-8 < approx[0]
    raw = linear_maps.span_changes(model, fit, ev, [(1, 1), (2, 2)], "approx", bias=True, relative=False, device="cpu")
    errors = linear_maps.block_approximation_errors(model, fit, ev, blocks=[1, 2], bias=True, device="cpu")
    np.testing.assert_allclose(raw, [errors[1], errors[2]], rtol=1e-12)
    model.blocks[1] = torch.nn.Identity()
    skip = linear_maps.span_changes(model, fit, ev, [(1, 1), (2, 2), (2, 3)], "skip", device="cpu")
    assert skip[1] < 1e-12 < min(skip[0], skip[2])
    with pytest.raises(ValueError, match="mode must be"):
        linear_maps.span_changes(model, fit, ev, [(1, 1)], "drop")
