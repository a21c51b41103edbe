"""Tests of layersim.train.small_nets: the seeded MLP and RBF network, their training and hidden representations."""

import numpy as np
import pytest

from layersim.measures import alignment as al
from layersim.train import small_nets


def rng(seed=0):
    return np.random.default_rng(seed)


def test_mlp_training_and_hidden_layers():
    torch = pytest.importorskip("torch")
    r = rng(33)
    X = r.normal(size=(200, 6)).astype(np.float32)
    y = al.binary_targets((X[:, 0] * X[:, 1] > 0).astype(int))
    m1, m2 = small_nets.make_mlp(6, [16, 8], seed=4), small_nets.make_mlp(6, [16, 8], seed=4)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    before = small_nets.hidden_representations(m1, X)
    assert [h.shape for h in before] == [(200, 16), (200, 8)] and np.all(before[0] >= 0)
    W = [(lin.weight.detach().double().numpy(), lin.bias.detach().double().numpy()) for lin in m1.layers]
    h = X.astype(np.float64)
    for (w, b), got in zip(W, before):  # relu(W h + b), layer by layer, by hand in float64
        h = np.maximum(h @ w.T + b, 0)
        np.testing.assert_allclose(got, h, atol=1e-5)
    assert isinstance(m1, __import__("layersim.train.mlp", fromlist=["MLP"]).MLP)  # one MLP class in the project
    hist = small_nets.train_mlp(m1, X, y, loss="bce", epochs=30, batch_size=32, lr=1e-2, seed=1)
    assert hist[-1] < hist[0]
    hist2 = small_nets.train_mlp(m2, X, y, loss="bce", epochs=30, batch_size=32, lr=1e-2, seed=1)
    assert hist == hist2  # deterministic
    after = small_nets.hidden_representations(m1, X)
    tau = np.linspace(0, 8, 30)
    a0 = al.alignment_area(al.alignment_curve(al.prepare(before[-1]), y, tau), tau)
    a1 = al.alignment_area(al.alignment_curve(al.prepare(after[-1]), y, tau), tau)
    assert a1 > a0  # training aligns the last hidden layer with the labels
    nobias = small_nets.make_mlp(6, [4], hidden_bias=False)
    assert nobias.layers[0].bias is None
    with pytest.raises(ValueError):
        small_nets.train_mlp(m1, X, y, loss="hinge")


def test_rbf_net_trains():
    r = rng(34)
    X = r.random((150, 3)).astype(np.float32)
    y = np.sin(3 * X[:, 0]) - X[:, 1]
    net = small_nets.RBFNet(X[:20], width=0.5)
    (h0,) = small_nets.hidden_representations(net, X)
    d2 = ((X[:, None, :].astype(np.float64) - X[None, :20]) ** 2).sum(-1)
    np.testing.assert_allclose(h0, np.exp(-d2 / (2 * 0.5 ** 2)), atol=1e-5)  # the Gaussian units, by hand
    rbf = net.layers[0]
    c0 = rbf.centers.detach().clone()
    hist = small_nets.train_mlp(net, X, y, loss="mse", epochs=40, batch_size=32, lr=1e-2)
    assert hist[-1] < hist[0]
    assert not np.allclose(rbf.centers.detach().numpy(), c0.numpy())  # the centres are trained
    (h,) = small_nets.hidden_representations(net, X)
    assert h.shape == (150, 20) and np.all((h > 0) & (h <= 1))
