"""Tests of layersim.nets.cnn: the small CNN's layers and forward pass, its configuration, the features of every
hidden layer, torchvision ResNet / VGG layers and heads."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from layersim.nets import cnn

from builders import TINY_CNN


def test_small_cnn_layers_shapes_and_forward():
    m = cnn.build_cnn(TINY_CNN, seed=0)
    x = torch.randn(7, 1, 8, 8)
    hs = m.hidden(x)
    assert m.layer_names == ["conv1", "conv2", "fc1", "fc2"] == cnn.feature_layers(m)
    assert [tuple(h.shape) for h in hs] == [(7, 2, 4, 4), (7, 4, 2, 2), (7, 6), (7, 5)]
    assert all((h >= 0).all() for h in hs)  # after ReLU
    assert torch.allclose(m(x), m.head(hs[-1]))
    # same seed, same weights; global RNG untouched
    state = torch.random.get_rng_state()
    m2 = cnn.build_cnn(TINY_CNN, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))


def test_config_validation():
    with pytest.raises(ValueError, match="arch"):
        cnn.CNNConfig(arch="alexnet9")
    with pytest.raises(ValueError, match="pooling"):
        cnn.CNNConfig(img_size=4, channels=(2, 2, 2))


def test_extract_features_matches_hidden_and_batches():
    m = cnn.build_cnn(TINY_CNN, seed=1)
    x = torch.randn(10, 1, 8, 8)
    f = cnn.extract_features(m, x, batch_size=3)
    hs = m.hidden(x)
    assert set(f) == set(m.layer_names)
    for name, h in zip(m.layer_names, hs):
        assert f[name].dtype == np.float64
        # float32 features of batches of 3 against one batch of 10: equal to float32 rounding (a few ulps)
        np.testing.assert_allclose(f[name], h.detach().flatten(1).double().numpy(), rtol=1e-5, atol=1e-6)
    avg = cnn.extract_features(m, TensorDataset(x, torch.zeros(10)), layers=["conv2"], spatial="avg")
    np.testing.assert_allclose(avg["conv2"], hs[1].detach().mean(dim=(2, 3)).double().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown layer"):
        cnn.extract_features(m, x, layers=["fc9"])


def test_torchvision_resnet_hooks_and_head():
    m = cnn.build_cnn(cnn.CNNConfig(arch="resnet18", in_chans=3, img_size=32, num_classes=4), seed=0)
    x = torch.randn(2, 3, 32, 32)
    f = cnn.extract_features(m, x, layers=["layer4", "avgpool"], spatial="avg")
    assert f["avgpool"].shape == (2, 512) and f["layer4"].shape == (2, 512)
    np.testing.assert_allclose(f["avgpool"], f["layer4"], rtol=1e-5, atol=1e-6)  # avgpool = mean of layer4
    cnn.replace_head(m, 7)
    assert m.fc.out_features == 7
    vgg_layers = cnn.feature_layers(cnn.build_cnn(cnn.CNNConfig(arch="vgg11", in_chans=3, img_size=32), seed=0))
    assert vgg_layers[-1] == "classifier.4"
