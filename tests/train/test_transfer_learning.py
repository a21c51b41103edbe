"""Tests of layersim.train.transfer_learning: fine-tuning a copy of a CNN, its accuracy, and cached pre-training
that continues from another checkpoint."""

import pytest
import torch
from torch.utils.data import TensorDataset

from layersim.nets import cnn
from layersim.train import transfer_learning
from layersim.train.training import TrainConfig

from builders import TINY_CNN, blobs


def test_finetune_learns_and_leaves_model_alone():
    X, y = blobs()
    m = cnn.build_cnn(cnn.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(8, 8), fc=(16,)), seed=0)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    net, hist = transfer_learning.finetune(m, (X[:90], y[:90]), (X[90:], y[90:]), num_classes=3, epochs=15, lr=0.05)
    assert hist["final_accuracy"] >= 0.9 and len(hist["test_accuracy"]) == 16
    assert hist["train_loss"][-1] < hist["train_loss"][0]
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert transfer_learning.accuracy(net, (X[90:], y[90:])) == hist["final_accuracy"]
    _, sparse = transfer_learning.finetune(m, (X[:90], y[:90]), (X[90:], y[90:]), num_classes=3, epochs=15, lr=0.05, eval_every=10)
    assert sparse["eval_epochs"] == [0, 10, 15] and sparse["final_accuracy"] == hist["final_accuracy"]
    assert sparse["train_loss"] == hist["train_loss"]  # evaluating does not change the training
    with pytest.raises(ValueError, match="positive"):
        transfer_learning.finetune(m, (X, y), (X, y), 3, epochs=0)


def test_pretrain_cnn_caches_and_continues(tmp_cache):
    X, y = blobs()
    tc = TrainConfig(epochs=2, batch_size=32, lr=3e-3, weight_decay=1e-4)
    calls = []

    def load():
        calls.append(1)
        return TensorDataset(X, y)

    m1, meta1 = transfer_learning.pretrain_cnn(TINY_CNN, tc, load, {"toy": 1}, device="cpu")
    m2, meta2 = transfer_learning.pretrain_cnn(TINY_CNN, tc, load, {"toy": 1}, device="cpu")
    assert calls == [1] and not meta1["from_cache"] and meta2["from_cache"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    cfg2 = cnn.CNNConfig(in_chans=1, img_size=8, num_classes=2, channels=(2, 4), fc=(6, 5))
    m3, meta3 = transfer_learning.pretrain_cnn(cfg2, tc, TensorDataset(X, y % 2), {"toy": 2}, init_from=(m1, meta1["key"]),
                                device="cpu")
    assert m3.head.out_features == 2 and meta3["data"]["init_from"] == meta1["key"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
