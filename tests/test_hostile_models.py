"""Hostile inputs to the model readers (layersim.nets.models: collect, collect_tokens, stream,
layer_outputs) and to block surgery (layersim.nets.surgery): one clear, single-line ValueError up front,
or a correct result. Never labels dropped without a word, a raw torch error from deep inside the
model, or a deep copy that carries a surgery's splice along.

Tiny random-init models of tests/builders.py; nothing is downloaded.
"""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from builders import DEPTH, text_batch, tiny, tiny_vit
from layersim.nets import adapters, linear_maps, models, readout, surgery
from layersim.train import mlp

NAMES = [a.name for a in adapters.REGISTRY if a.uniform]


@pytest.fixture(scope="module")
def vit():
    return tiny_vit(perturb=True)


@pytest.fixture(scope="module")
def images():
    g = torch.Generator().manual_seed(3)
    return torch.randn(6, 1, 28, 28, generator=g), torch.arange(6) % 2


@pytest.fixture(scope="module", params=NAMES)
def t(request):
    return tiny(request.param)


def one_line(exc_info):
    msg = str(exc_info.value)
    assert msg and "\n" not in msg, msg
    return msg


def readers(model, batches, layers):
    """Every reader that takes ``layers``, each run far enough to validate them."""
    return {
        "collect": lambda: models.collect(model, batches, layers=layers, progress=False, device="cpu"),
        "collect_tokens": lambda: models.collect_tokens(model, batches, ("cls", "mean"), layers=layers,
                                                        progress=False, device="cpu"),
        "stream": lambda: next(iter(models.stream(model, batches, layers=layers, device="cpu"))),
        "layer_outputs": lambda: models.layer_outputs(model, batches, layers=layers, device="cpu"),
        "spliced collect": lambda: models.collect(surgery.replace(model, 1, 1, nn.Identity()), batches, layers=layers,
                                                  progress=False, device="cpu"),  # as many blocks as the model
    }


# ----------------------------------------------------------------------------- labels


def test_labels_of_another_length_are_refused_not_dropped(vit, images):
    x, y = images
    with pytest.raises(ValueError, match="batch 1 has 2 labels for 3 samples") as info:
        models.collect(vit, [(x[:3], y[:3]), (x[3:], y[3:5])], progress=False, device="cpu")
    one_line(info)
    with pytest.raises(ValueError, match="batch 0 has 5 labels for 6 samples"):
        models.collect(vit, [(x, y[:5])], progress=False, device="cpu")
    with pytest.raises(ValueError, match="labels for"):  # the stream under every reader checks it
        next(iter(models.stream(vit, [(x, y[:5])], device="cpu")))
    bert = tiny("bert").model
    batch = dict(text_batch(), labels=torch.tensor([0, 1, 2]))  # 3 labels, 4 texts
    with pytest.raises(ValueError, match="batch 0 has 3 labels for 4 samples"):
        models.collect(bert, [batch], progress=False, device="cpu")
    # labels of the right length are kept; per-token labels [B, T] (a language model's) are not labels
    got = models.collect(vit, [(x[:3], y[:3]), (x[3:], y[3:])], progress=False, device="cpu")
    np.testing.assert_array_equal(got.labels, y.numpy())
    batch = dict(text_batch(), labels=text_batch()["input_ids"])
    assert models.collect(bert, [batch], progress=False, device="cpu").labels is None


# ----------------------------------------------------------------------------- layer selections


@pytest.mark.parametrize("reader", ["collect", "collect_tokens", "stream", "layer_outputs", "spliced collect"])
@pytest.mark.parametrize("layers, match", [
    ([], "layers is empty"), ([DEPTH + 1], r"layers \[4\] out of range"), ([-(DEPTH + 2)], "out of range"),
    ([1, 1], "entry 1 more than once"), ([DEPTH, -1], f"entry {DEPTH} more than once"),
    ([1.5], "integer indices, got 1.5"), ([True], "integer indices"), (["1"], "integer indices"),
    ("12", "sequence of layer indices"), (3, "sequence of layer indices")])
def test_bad_layer_selections_are_one_value_error(vit, images, reader, layers, match):
    run = readers(vit, [images[0][:2]], layers)[reader]
    with pytest.raises(ValueError, match=match) as info:
        run()
    one_line(info)


def test_good_layer_selections_still_work(vit, images):
    x = images[0][:2]
    full = models.collect(vit, [x], progress=False, device="cpu").hidden
    for layers in ([0, -1], range(1, DEPTH + 1), np.array([2, 0]), [np.int64(3)]):
        got = models.collect(vit, [x], layers=layers, progress=False, device="cpu")
        ids = [int(i) % (DEPTH + 1) for i in layers]
        assert got.layers == ids
        np.testing.assert_array_equal(got.hidden, full[ids])


def test_readout_shares_the_layer_check(vit, images):
    hidden = models.collect(vit, [images[0][:2]], progress=False, device="cpu").hidden
    with pytest.raises(ValueError, match="more than once"):
        readout.layer_logits(vit, hidden[[1, 1]], layers=[1, 1])


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
