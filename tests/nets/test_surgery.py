"""Tests of layersim.nets.surgery: skip / replace / truncate spans of blocks, on a tiny model of every family.

References are independent of the splicing: forward hooks that make the original blocks return
their input (the identity, computed the slow way), the logit lens of layersim.nets.readout, and the
untouched model. A replacement of the wrong width is refused up front in one line, and a deep copy, pickle or
shallow copy made inside a surgery is the whole model, without the splice.
"""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from builders import DEPTH, tiny, tiny_vit
from layersim.nets import adapters, linear_maps, models, readout, surgery
from layersim.train import mlp

NAMES = [a.name for a in adapters.REGISTRY if a.uniform]
RAGGED = [a.name for a in adapters.REGISTRY if not a.uniform]


@pytest.fixture(scope="module", params=NAMES)
def t(request):
    return tiny(request.param)


def close(a, b, atol=2e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=atol)


def one_line(exc_info):
    msg = str(exc_info.value)
    assert msg and "\n" not in msg, msg
    return msg


def identity_by_hooks(model, first, last):
    """Blocks first..last made the identity by forward hooks on the unmodified model (calls are
    counted, so ALBERT's shared group is the identity only at those steps)."""
    blocks = models.block_modules(model)
    calls = {"n": 0}
    seen_in = {}

    def pre(module, args, kwargs):
        calls["n"] += 1
        seen_in[calls["n"]] = args[0] if args else kwargs["hidden_states"]

    def post(module, args, kwargs, out):
        step = calls["n"]
        if first <= step <= last:
            return seen_in[step]
        return None

    handles = []
    for blk in dict.fromkeys(blocks):
        handles.append(blk.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(blk.register_forward_hook(post, with_kwargs=True))
    return handles


@pytest.mark.parametrize("span", [(1, 1), (2, 3), (1, 3)])
def test_skip_equals_identity_blocks(t, span):
    handles = identity_by_hooks(t.model, *span)
    try:
        ref = t.output()
    finally:
        for h in handles:
            h.remove()
    close(t.output(surgery.skip(t.model, *span)), ref)
    assert not torch.allclose(ref, t.output(), atol=1e-4)  # the span does something


def test_skip_one_equals_replace_by_identity(t):
    for i in range(1, t.n_layers + 1):
        close(t.output(surgery.skip(t.model, i, i)), t.output(surgery.replace(t.model, i, i, torch.nn.Identity())))


def test_truncate_all_is_the_model_and_context_restores(t):
    before = models.block_modules(t.model)
    ref = t.output()
    close(t.output(surgery.truncate(t.model, t.n_layers)), ref, atol=0)
    with surgery.skip(t.model, 2, 3) as m:
        assert m is t.model and models.n_layers(m) == t.n_layers - 2
        assert not torch.allclose(t.output(m), ref, atol=1e-4)
    assert models.block_modules(t.model) == before
    close(t.output(), ref, atol=0)
    with pytest.raises(ZeroDivisionError):  # restored after an error too
        with surgery.skip(t.model, 1, 2):
            1 / 0
    assert models.block_modules(t.model) == before


@pytest.mark.parametrize("k", [1, 2])
def test_truncated_model_reads_out_like_the_logit_lens(t, k):
    """truncate(k)'s output = the model's head on block k's output: the readout of layer k."""
    if t.readout() is None:
        pytest.skip("no head (DINOv2)")
    hidden = models.collect(t.model, [t.batch], progress=False, device="cpu").hidden
    lens = readout.layer_logits(t.model, hidden)[k]
    cut = surgery.truncate(t.model, k)
    with cut as m:
        ref_cut = type(t)(m, t.batch, t._output, t._readout).readout()
    np.testing.assert_allclose(lens, ref_cut.numpy(), atol=2e-5)


def test_collect_on_a_spliced_model_counts_the_kept_blocks(t):
    full = models.collect(t.model, [t.batch], progress=False, device="cpu").hidden
    skipped = models.collect(surgery.skip(t.model, 2, 2), [t.batch], progress=False, device="cpu").hidden
    assert skipped.shape[0] == t.n_layers  # L - 1 + 1 entries
    np.testing.assert_allclose(skipped[:2], full[:2], atol=1e-6)  # embedding, block 1: untouched
    lin = torch.nn.Linear(full.shape[-1], full.shape[-1])
    replaced = models.collect(surgery.replace(t.model, 2, 3, lin), [t.batch], progress=False, device="cpu")
    assert replaced.hidden.shape[0] == t.n_layers  # L - 2 + 2 entries: the replacement is one
    with torch.no_grad():  # token-wise map: entry 2 = lin(entry 1) at every token
        np.testing.assert_allclose(replaced.hidden[2], lin(torch.from_numpy(full[1])).numpy(), atol=1e-5)


def test_parameter_counts(t):
    model = t.model
    total = sum(p.numel() for p in model.parameters())
    blocks = models.block_modules(model)
    per_block = sum(p.numel() for p in blocks[1].parameters())
    shared = len({id(b) for b in blocks}) == 1
    assert surgery.truncate(model, t.n_layers).n_parameters() == total
    assert surgery.skip(model, 2, 2).n_parameters() == total - (0 if shared else per_block)
    d = 32
    assert surgery.replace(model, 2, 3, torch.nn.Linear(d, d)).n_parameters() == (
        total - (0 if shared else 2 * per_block) + d * d + d)
    assert sum(p.numel() for p in model.parameters()) == total  # nothing was deleted


def test_gradients_reach_the_replacement_and_kept_blocks(t):
    lin = torch.nn.Linear(32, 32)
    sk = surgery.replace(t.model, 2, 2, lin)
    t.model.zero_grad()
    out = t._output(sk, t.batch)
    out.float().pow(2).mean().backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
    first = models.block_modules(t.model)[0]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in first.parameters())
    t.model.zero_grad()


def test_albert_skipping_keeps_the_shared_group():
    t = tiny("albert")
    group = models.block_modules(t.model)[0]
    with surgery.skip(t.model, 1, 2) as m:
        assert models.block_modules(m) == [group]
        assert m.config.num_hidden_layers == 1
    assert t.model.config.num_hidden_layers == 3 and models.block_modules(t.model) == [group] * 3
    assert len(t.model.base_model.encoder.albert_layer_groups) == 1


@pytest.mark.parametrize("args, match", [
    ((3, 2), "is empty"), ((3, 1), "is reversed"), ((0, 1), "out of range"), ((2, 4), "out of range"),
    ((1.0, 2), "integer"), ((True, 2), "integer")])
def test_bad_spans(args, match):
    vit = tiny("timm_vit").model
    with pytest.raises(ValueError, match=match):
        surgery.skip(vit, *args)
    with pytest.raises(ValueError, match=match):
        surgery.replace(vit, *args, torch.nn.Identity())


def test_bad_truncation_and_replacement():
    vit = tiny("timm_vit").model
    for k in (-1, 4):
        with pytest.raises(ValueError, match="0 <= k <= 3"):
            surgery.truncate(vit, k)
    with pytest.raises(ValueError, match="torch.nn.Module"):
        surgery.replace(vit, 1, 1, lambda x: x)
    with surgery.skip(vit, 1, 1):
        with pytest.raises(RuntimeError, match="already under surgery"):
            with surgery.skip(vit, 2, 2):
                pass
    with pytest.raises(ValueError, match="no blocks left"):
        models.collect(surgery.truncate(vit, 0), [torch.zeros(2, 1, 28, 28)], progress=False, device="cpu")
    assert surgery.truncate(vit, 0)(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_skipped_timm_vit_equals_a_hand_run_of_the_kept_blocks():
    """timm ViT by hand: embedding, blocks 1 and 3 only, final norm, head on the class token."""
    vit = tiny("timm_vit").model
    x = tiny("timm_vit").batch
    with torch.no_grad():
        h = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))
        for i in (0, 2):
            h = vit.blocks[i](h)
        ref = vit.head(vit.norm(h)[:, 0])
        close(surgery.skip(vit, 2, 2)(x), ref)
        lin = torch.nn.Linear(32, 32)
        ref = vit.head(vit.norm(vit.blocks[2](lin(vit.blocks[0](
            vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x))))))))[:, 0])
        close(surgery.replace(vit, 2, 2, lin)(x), ref)


@pytest.mark.parametrize("name", RAGGED)
def test_families_whose_blocks_change_shape_refuse_surgery(name):
    model = tiny(name).model
    for make in (lambda: surgery.skip(model, 1, 1), lambda: surgery.truncate(model, 1),
                 lambda: surgery.replace(model, 1, 1, torch.nn.Identity())):
        with pytest.raises(ValueError, match="does not support block surgery"):
            make()
    assert models.block_modules(model) == adapters.get(model).blocks(model)  # untouched


# ----------------------------------------------------------------------------- replacement widths


def test_a_replacement_of_the_wrong_width_is_refused_up_front(t):
    before = models.block_modules(t.model)
    with pytest.raises(ValueError, match=r"maps hidden states of width 32 to width 31; the model needs width 32") as info:
        surgery.replace(t.model, 2, 2, nn.Linear(32, 31))
    one_line(info)
    with pytest.raises(ValueError, match=r"fails on hidden states of width 32, shape \(1, 1, 32\): RuntimeError") as info:
        surgery.replace(t.model, 2, 3, nn.Linear(31, 32))
    one_line(info)
    assert models.block_modules(t.model) == before  # nothing was spliced
    surgery.replace(t.model, 2, 3, nn.Linear(32, 32))  # the right width is accepted


def test_the_width_check_follows_the_module_and_the_model():
    vit = tiny_vit().double()
    x = torch.zeros(2, 1, 28, 28, dtype=torch.float64)
    for module in (nn.Identity(), nn.GELU(), nn.Linear(32, 32).double()):  # no parameters: the model's dtype
        assert surgery.replace(vit, 1, 2, module)(x).dtype == torch.float64
    # modes are put back module by module, and no gradient or running statistic is touched
    lin, drop, norm = nn.Linear(32, 32), nn.Dropout(0.5), nn.LayerNorm(32)
    module = nn.Sequential(lin, drop, norm).train()
    norm.eval()
    surgery.replace(tiny_vit(), 2, 2, module)
    assert module.training and lin.training and drop.training and not norm.training
    assert lin.weight.grad is None
    bn = nn.BatchNorm1d(32)
    with pytest.raises(ValueError, match="fails on hidden states of width 32"):  # BatchNorm1d reads [B, C, L]
        surgery.replace(tiny_vit(), 2, 2, bn)
    assert int(bn.num_batches_tracked) == 0


def test_per_token_maps_are_tried_on_their_own_number_of_tokens():
    vit, x = tiny_vit(perturb=True), torch.randn(2, 1, 28, 28)
    tokens = 1 + (28 // 7) ** 2
    per = linear_maps.LinearMap(np.stack([np.eye(32)] * tokens), per_token=True)
    assert per.n_tokens == tokens and linear_maps.LinearMap(np.eye(32)).n_tokens is None
    with torch.no_grad():
        np.testing.assert_allclose(surgery.replace(vit, 2, 2, per)(x).numpy(), surgery.skip(vit, 2, 2)(x).numpy(),
                                   atol=1e-5)
    with pytest.raises(ValueError, match="width 32 to width 16"):
        surgery.replace(vit, 2, 2, linear_maps.LinearMap(np.zeros((tokens, 32, 16)), per_token=True))


def test_an_mlp_of_several_widths_needs_the_span_s_own_widths():
    net = mlp.build_mlp(mlp.MLPConfig(in_features=12, num_classes=3, depth=3, width=8, widths=(16, 24, 8)))
    assert adapters.get(net).widths(net) == [12, 16, 24, 8]  # input, then each hidden layer
    x = torch.randn(5, 12)
    assert surgery.replace(net, 2, 2, nn.Linear(16, 24))(x).shape == (5, 3)
    assert surgery.replace(net, 2, 3, nn.Linear(16, 8))(x).shape == (5, 3)
    with pytest.raises(ValueError, match="width 16 to width 16; the model needs width 24"):
        surgery.replace(net, 2, 2, nn.Linear(16, 16))
    with pytest.raises(ValueError, match="fails on hidden states of width 12"):
        surgery.replace(net, 1, 1, nn.Linear(16, 16))


# ----------------------------------------------------------------------------- deep copies inside a surgery


def test_a_deep_copy_inside_a_surgery_is_the_whole_model(t):
    model, L = t.model, t.n_layers
    before, ref = models.block_modules(model), t.output()
    with surgery.skip(model, 2, 3) as m:
        copied = copy.deepcopy(m)
        assert models.n_layers(m) == L - 2  # the original stays spliced inside the block
        assert models.n_layers(copied) == L  # the copy has all its blocks ...
        assert "_layersim_surgery" not in vars(copied) and "__deepcopy__" not in vars(copied)  # ... no state
        with torch.no_grad():
            np.testing.assert_allclose(t._output(copied, t.batch).numpy(), ref.numpy(), atol=1e-6)
        with surgery.skip(copied, 1, 1) as c:  # the copy is not "under surgery": it can be spliced itself
            assert models.n_layers(c) == L - 1
        assert models.n_layers(copied) == L
    assert models.block_modules(model) == before  # the original is restored on exit
    assert "_layersim_surgery" not in vars(model) and "__deepcopy__" not in vars(model)
    np.testing.assert_allclose(t.output().numpy(), ref.numpy(), atol=0)
    assert models.n_layers(copied) == L and not any(b in before for b in models.block_modules(copied))


def test_a_deep_copy_of_the_surgery_itself_inside_its_block():
    vit, x = tiny_vit(perturb=True), torch.randn(2, 1, 28, 28)
    cut = surgery.skip(vit, 2, 2)
    with torch.no_grad():
        ref = cut(x)
        with cut:
            twin = copy.deepcopy(cut)
        assert len(twin.surgery_base.blocks) == DEPTH and len(vit.blocks) == DEPTH
        np.testing.assert_allclose(twin(x).numpy(), ref.numpy(), atol=1e-6)


def test_a_pickle_or_shallow_copy_inside_a_surgery_is_the_whole_model(tmp_path):
    vit, x = tiny_vit(perturb=True), torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        ref = vit(x)
        with surgery.skip(vit, 1, 2) as m:
            torch.save(m, tmp_path / "inside.pt")
            shallow = copy.copy(m)
        loaded = torch.load(tmp_path / "inside.pt", weights_only=False)
        for whole in (loaded, shallow):
            assert len(whole.blocks) == DEPTH and not {"_layersim_surgery", "__reduce_ex__"} & set(vars(whole))
            np.testing.assert_allclose(whole(x).numpy(), ref.numpy(), atol=1e-6)
