"""Tests of layersim.train.heads: classifier heads trained on frozen features (Adam on minibatches, against a hand
run), standardized inputs, regression."""

import copy

import numpy as np
import pytest
import torch

from layersim.measures import probe
from layersim.train import heads


def test_adam_head_learns_is_deterministic_and_matches_a_hand_run():
    r = np.random.default_rng(3)
    centers = r.normal(size=(3, 6)) * 4
    y = np.repeat(np.arange(3), 100)
    X = centers[y] + r.normal(size=(300, 6))
    a = heads.train_linear_head(X, y, epochs=5, lr=0.05, batch_size=32, seed=1)
    b = heads.train_linear_head(X, y, epochs=5, lr=0.05, batch_size=32, seed=1)
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert probe.probe_accuracy(a, X, y) > 0.95
    # the same steps by hand: seeded init, seeded minibatch order, Adam on mean cross-entropy
    torch.manual_seed(1)
    ref = torch.nn.Linear(6, 3)
    opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    for _ in range(5):
        for idx in torch.randperm(300, generator=gen).split(32):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ref(Xt[idx]), yt[idx]).backward()
            opt.step()
    torch.testing.assert_close(a.weight, ref.weight)
    c = heads.train_linear_head(X, y, epochs=1, lr=0.05, seed=2, num_classes=5)
    assert c.out_features == 5
    with pytest.raises(ValueError, match="epochs"):
        heads.train_linear_head(X, y, epochs=0)
    with pytest.raises(ValueError, match="labels"):
        heads.train_linear_head(X, y, num_classes=2)


def test_train_head_fits_from_its_start_and_regresses():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = (X[:, 0] > 0).astype(int)
    head = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 2))
    start = copy.deepcopy(head)
    trained = heads.train_head(head, X, y, epochs=30, lr=1e-2, batch_size=32)
    with torch.no_grad():
        pred = trained(torch.tensor(X, dtype=torch.float32)).argmax(1).numpy()
    assert not trained.training and (pred == y).mean() > 0.9
    assert not torch.equal(start[0].weight, trained[0].weight)
    t = X @ np.array([1.0, -2.0, 0.5, 0.0, 0.0])
    reg = heads.train_head(torch.nn.Linear(5, 1), X, t, epochs=80, lr=5e-2, batch_size=32, loss="mse")
    np.testing.assert_allclose(reg.weight.detach().numpy()[0], [1.0, -2.0, 0.5, 0.0, 0.0], atol=0.05)
    with pytest.raises(ValueError, match="loss"):
        heads.train_head(torch.nn.Linear(5, 1), X, t, loss="l1")


def test_standardized_head_learns_a_tiny_signal_on_a_large_constant():
    """The CLS token of early BERT blocks: a signal of 1e-3 on a vector of norm ~10. Raw, Adam stays
    at chance; standardized (an affine reparameterisation of the head's first layer), it learns."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 400)
    X = 10.0 / np.sqrt(8) + 1e-3 * (rng.normal(size=(400, 8)) + 2.0 * y[:, None] * np.eye(8)[0])

    def head():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    def acc(h):
        with torch.no_grad():
            return float((h(torch.tensor(X, dtype=torch.float32)).argmax(1).numpy() == y).mean())

    raw = heads.train_head(head(), X, y, epochs=10, lr=1e-3, batch_size=32)
    std = heads.train_head(head(), X, y, epochs=10, lr=1e-3, batch_size=32, standardize=True)
    assert acc(raw) < 0.65 and acc(std) > 0.8
    assert isinstance(std[0], heads.Standardize)
    mean, scale = X.mean(0), np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean() / 8)
    with torch.no_grad():  # the standardizing map folds into the first linear layer
        lin = std[1][0]
        folded = torch.nn.Linear(8, 8)
        folded.weight.copy_(lin.weight / scale)
        folded.bias.copy_(lin.bias - lin.weight @ torch.tensor(mean / scale, dtype=torch.float32))
        xt = torch.tensor(X[:5], dtype=torch.float32)
        torch.testing.assert_close(folded(xt), std[1][0](std[0](xt)), rtol=1e-3, atol=1e-3)
