"""layersim.nets.surgery: skip / replace / truncate spans of blocks, on a tiny model of every family.

References are independent of the splicing: forward hooks that make the original blocks return
their input (the identity, computed the slow way), the logit lens of layersim.nets.readout, and the
untouched model.
"""

import numpy as np
import pytest
import torch

from builders import tiny
from layersim.nets import adapters, models, readout, surgery

NAMES = [a.name for a in adapters.REGISTRY if a.uniform]
RAGGED = [a.name for a in adapters.REGISTRY if not a.uniform]


@pytest.fixture(scope="module", params=NAMES)
def t(request):
    return tiny(request.param)


def close(a, b, atol=2e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=atol)


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
