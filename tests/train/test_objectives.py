"""Tests of layersim.train.objectives: the tracing paper's training objectives (eq. 5, appendix B.3) on tiny
random-init timm ViTs, and the aligned LM loss of a small GPT-2, checked against the hook-based readout (an
independent path)."""

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from layersim.nets import models as M, readout as R
from layersim.papers.tracing import lm
from layersim.train import objectives as O, training
from layersim.train.training import TrainConfig, ViTConfig

from builders import gpt2_config, toy_data

TINY = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=3, embed_dim=16, depth=3, num_heads=2)


def make(depth=3, seed=0, **kw):
    model = training.build_vit(replace(TINY, depth=depth, **kw), seed=seed)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed + 1)
        for p in model.parameters():  # zero biases / unit norms are too special: make them generic
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch(n=12, seed=0, k=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, k, (n,), generator=g)


def cfg(objective="aligned", **extra):
    return TrainConfig(objective=objective, extra=extra)


def reference_layer_logits(model, x):
    """Blocks 1..L through the hook-based readout (layersim.nets.models / readout)."""
    H = M.hidden_states(model, [x], device="cpu", progress=False)
    return torch.from_numpy(R.layer_logits(model, H)[1:])


def test_registered_in_training():
    for name in ("aligned", "aligned_uniform", "alternating", "ce_reg", "multi_exit", "multi_exit_alternating"):
        assert training.OBJECTIVES[name] is O.OBJECTIVES[name]
        TrainConfig(objective=name)  # validates


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_shared_head_logits_match_model_and_readout(pool):
    model = make(global_pool=pool).eval()
    x, _ = batch()
    with torch.no_grad():
        z = O.shared_head_logits(model, x)
        torch.testing.assert_close(z[-1], model(x))
    assert z.shape == (3, 12, 3)
    if pool == "token":
        torch.testing.assert_close(z, reference_layer_logits(model, x), rtol=1e-4, atol=1e-5)


def test_layer_weights_sum_to_one_and_increase():
    for L in (1, 2, 7, 12):
        lin, uni = O.layer_weights(L), O.layer_weights(L, "uniform")
        assert float(lin.sum()) == pytest.approx(1.0) and float(uni.sum()) == pytest.approx(1.0)
        assert torch.all(lin[1:] > lin[:-1]) and torch.allclose(uni, torch.full((L,), 1 / L, dtype=torch.float64))
    assert O.layer_weights(3).tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    with pytest.raises(ValueError):
        O.layer_weights(3, "cubic")


def test_aligned_equals_weighted_layer_ce_of_the_readout():
    model = make().eval()
    x, y = batch()
    ref = reference_layer_logits(model, x)
    ce = torch.stack([F.cross_entropy(z, y) for z in ref])
    with torch.no_grad():
        torch.testing.assert_close(O.aligned(model, x, y, cfg()), (ce * torch.tensor([1, 2, 3]) / 6).sum(), rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(O.aligned_uniform(model, x, y, cfg()), ce.mean(), rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(O.aligned(model, x, y, cfg(weights="uniform")), ce.mean(), rtol=1e-4, atol=1e-6)


def test_weighted_ce_is_the_weighted_sum_of_each_layers_mean_cross_entropy():
    g = torch.Generator().manual_seed(4)
    logits, y, w = torch.randn(4, 9, 5, generator=g), torch.randint(0, 5, (9,), generator=g), O.layer_weights(4)
    for smoothing in (0.0, 0.1):
        loop = sum(float(w[i]) * F.cross_entropy(logits[i], y, label_smoothing=smoothing) for i in range(4))
        torch.testing.assert_close(O.weighted_ce(logits, y, w, smoothing), loop, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="weights"):
        O.weighted_ce(logits, y, O.layer_weights(3))


def test_aligned_with_one_block_is_ce():
    model = make(depth=1).eval()
    x, y = batch()
    with torch.no_grad():
        ce = training.OBJECTIVES["ce"](model, x, y, cfg())
        for name in ("aligned", "aligned_uniform"):
            torch.testing.assert_close(O.OBJECTIVES[name](model, x, y, cfg()), ce)


@pytest.mark.parametrize("name", ["aligned", "aligned_uniform", "ce_reg"])
def test_gradients_reach_every_block_and_the_head(name):
    model = make().train()
    x, y = batch()
    O.OBJECTIVES[name](model, x, y, cfg(beta=0.5)).backward()
    for i, blk in enumerate(model.blocks):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in blk.parameters()), f"block {i + 1}"
    assert model.head.weight.grad.abs().sum() > 0 and model.norm.weight.grad.abs().sum() > 0


def test_aligned_gives_the_first_block_gradient_that_ce_does_not_reach_directly():
    """CE reaches block 1 only through the later blocks; the aligned loss adds block 1's own
    CE, so the two gradients of block 1 differ (and agree when only the last layer is weighted)."""
    model = make().train()
    x, y = batch()

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.blocks[0].parameters()])

    g_ce = grads(training.OBJECTIVES["ce"](model, x, y, cfg()))
    g_al = grads(O.aligned(model, x, y, cfg()))
    assert not torch.allclose(g_ce, g_al)
    g_last = grads(O.weighted_ce(O.shared_head_logits(model, x), y, torch.tensor([0.0, 0.0, 1.0])))
    torch.testing.assert_close(g_last, g_ce, rtol=1e-4, atol=1e-7)


def test_alternating_alternates_and_counts_only_training_steps():
    model = make().train()
    x, y = batch()
    ce = training.OBJECTIVES["ce"](model, x, y, cfg())
    al = O.aligned(model, x, y, cfg())
    assert O.objective_step(model) == 1
    seen = [O.alternating(model, x, y, cfg()) for _ in range(4)]
    for loss, ref in zip(seen, [ce, al, ce, al]):  # iterations 1 (odd: CE), 2 (even: aligned), ...
        torch.testing.assert_close(loss, ref)
    assert O.objective_step(model) == 5
    with torch.no_grad():  # evaluation does not advance the counter: iteration 5 is odd → CE
        torch.testing.assert_close(O.alternating(model, x, y, cfg()), ce)
        torch.testing.assert_close(O.alternating(model, x, y, cfg()), ce)
    assert O.objective_step(model) == 5
    assert O.objective_step(make()) == 1  # a fresh model starts at iteration 1
    assert "_layersim_objective_step" not in "".join(model.state_dict())  # not in checkpoints


def test_ce_reg_with_beta_zero_is_ce_and_beta_adds_the_cosine_term():
    model = make().eval()
    x, y = batch()
    with torch.no_grad():
        ce = training.OBJECTIVES["ce"](model, x, y, cfg())
        torch.testing.assert_close(O.ce_reg(model, x, y, cfg("ce_reg", beta=0.0)), ce)
        H = torch.from_numpy(M.hidden_states(model, [x], device="cpu", progress=False))[1:]  # class tokens
        dis = torch.stack([(1 - F.cosine_similarity(h, H[-1], dim=-1)).mean() for h in H])
        expected = ce + 2.0 * (dis * torch.tensor([1, 2, 3]) / 6).sum()
        torch.testing.assert_close(O.ce_reg(model, x, y, cfg("ce_reg", beta=2.0)), expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(KeyError, match="beta"):
        O.ce_reg(model, x, y, cfg("ce_reg"))


def test_multi_exit_heads_logits_loss_and_gradients():
    model = make()
    with pytest.raises(AttributeError, match="add_exit_heads"):
        O.multi_exit(model, *batch(), cfg())
    heads = O.add_exit_heads(model)
    assert len(heads) == 2 and model.exit_heads is heads
    assert isinstance(heads[0][0], torch.nn.LayerNorm) and heads[0][1].out_features == 3
    x, y = batch()
    model.eval()
    with torch.no_grad():
        z = O.exit_head_logits(model, x)
        torch.testing.assert_close(z[-1], model(x))
        torch.testing.assert_close(z[0], heads[0](model.pool(O.block_outputs(model, x)[0])))
        H = M.hidden_states(model, [x], device="cpu", progress=False)
        np.testing.assert_allclose(O.multi_exit_logits(model, H), z.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(O.multi_exit_logits(model, H[1:]), z.numpy(), rtol=1e-4, atol=1e-5)
        ce = torch.stack([F.cross_entropy(zz, y) for zz in z])
        torch.testing.assert_close(O.multi_exit(model, x, y, cfg()), (ce * torch.tensor([1, 2, 3]) / 6).sum())
    model.train()
    O.multi_exit(model, x, y, cfg()).backward()
    for head in heads:
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
    assert model.head.weight.grad.abs().sum() > 0
    assert any(p.grad.abs().sum() > 0 for p in model.blocks[0].parameters())


def test_multi_exit_alternating_and_training_loop():
    model = make()
    O.add_exit_heads(model)
    x, y = batch()
    ce = training.OBJECTIVES["ce"](model, x, y, cfg())
    torch.testing.assert_close(O.multi_exit_alternating(model.train(), x, y, cfg()), ce)
    torch.testing.assert_close(O.multi_exit_alternating(model, x, y, cfg()), O.multi_exit(model, x, y, cfg()))
    before = model.exit_heads[0][1].weight.detach().clone()
    dataset = TensorDataset(*batch(32, seed=1))
    hist = training.train_classifier(model, dataset, TrainConfig(epochs=1, batch_size=8, objective="multi_exit"),
                                     device="cpu", progress=False)
    assert np.isfinite(hist[0]["loss"]) and not torch.equal(before, model.exit_heads[0][1].weight)


def test_add_exit_heads_is_seeded():
    a, b = make(), make()
    O.add_exit_heads(a, seed=3)
    O.add_exit_heads(b, seed=3)
    for p, q in zip(a.exit_heads.parameters(), b.exit_heads.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("name", ["alternating", "ce_reg"])
def test_objectives_train_in_the_loop(name):
    model = training.build_vit(replace(TINY, num_classes=2))
    hist = training.train_classifier(model, toy_data(), TrainConfig(epochs=2, batch_size=16, lr=3e-3,
                                     objective=name, extra={"beta": 1.0}), device="cpu", progress=False)
    assert hist[-1]["loss"] < hist[0]["loss"]


def test_aligned_training_narrows_the_gap_between_first_and_last_block():
    """Same init, data and batches: after a few epochs, the first block's CE (shared head) is
    closer to the last block's under the aligned loss than under standard CE. (Checked on seeds
    0-5 when written; the test runs seed 0, which is deterministic.)"""
    test_x, test_y = toy_data(256, seed=100).tensors
    gaps = {}
    for objective in ("ce", "aligned"):
        model = training.build_vit(replace(TINY, num_classes=2, depth=4), seed=0)
        training.train_classifier(model, toy_data(), TrainConfig(epochs=4, batch_size=16, lr=3e-3,
                                  objective=objective), device="cpu", progress=False)
        H = M.hidden_states(model, DataLoader(TensorDataset(test_x), batch_size=256), device="cpu", progress=False)
        ce = [F.cross_entropy(torch.from_numpy(z), test_y).item() for z in R.layer_logits(model, H)[1:]]
        gaps[objective] = ce[0] - ce[-1]
    assert gaps["aligned"] < 0.5 * gaps["ce"]


# ----------------------------------------------------------------------------- the aligned LM loss of a small GPT-2


GPT2 = gpt2_config()


def test_aligned_lm_loss_is_eq5_over_the_layer_scores(batches):
    model = lm.build_gpt2(GPT2).eval()
    with torch.no_grad():
        one = R.layer_next_token_scores(model, [batches[0]], device="cpu")
        loss = O.aligned_lm_loss(model, batches[0])
        standard = model(**batches[0]).loss
    expect = float((O.layer_weights(3) * torch.tensor(one.nll[1:])).sum())
    assert float(loss) == pytest.approx(expect, rel=1e-5) and float(standard) == pytest.approx(one.nll[-1], rel=1e-5)
