"""How far the fast evaluation precision moves the tracing paper's claim quantities, on any CPU.

A small ViT trained on the digits is read layer by layer in float32 and under bf16 autocast (on the CPU:
the GPU's bf16 emulated, a coarser rounding than TF32's, so a bound for both fast modes). The stated
tolerances: cosine and CKA to the last layer within 0.005, each layer's readout accuracy within one point,
the saturation layer the same for at least 95 % of the samples.
"""

import numpy as np
import pytest
import torch

from layersim.core import device
from layersim.inputs import data
from layersim.measures import similarity
from layersim.nets import models, readout
from layersim.train import training
from layersim.train.training import TrainConfig, ViTConfig

CFG = ViTConfig(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=32, depth=4, num_heads=2,
                mlp_ratio=2.0)


@pytest.fixture(scope="module")
def strict_and_fast():
    model = training.build_vit(CFG, seed=0)
    training.train_classifier(model, data.image_dataset("digits", "train", limit=1000),
                              TrainConfig(epochs=25, batch_size=64, lr=3e-3, seed=0), device="cpu", progress=False)
    test = data.image_dataset("digits", "test")
    strict = readout.evaluate(model, test, device="cpu")
    fast = readout.evaluate(model, test, device="cpu", precision="bf16")
    return strict, fast


def test_bf16_reading_rounds_the_features_and_keeps_them_float32(strict_and_fast):
    strict, fast = strict_and_fast
    assert fast.hidden.dtype == np.float32 and fast.hidden.shape == strict.hidden.shape
    rel = np.abs(fast.hidden - strict.hidden).max() / np.abs(strict.hidden).max()
    assert 1e-4 < rel < 0.05  # autocast did act (the check can fail), at bf16's scale


def test_similarity_to_the_last_layer_moves_less_than_the_tolerance(strict_and_fast):
    strict, fast = strict_and_fast
    for metric in ("cos", "cka"):
        a, b = similarity.to_last(strict.hidden[1:], metric), similarity.to_last(fast.hidden[1:], metric)
        np.testing.assert_allclose(b, a, atol=0.005, err_msg=metric)


def test_readout_accuracy_and_saturation_layers_move_less_than_the_tolerance(strict_and_fast):
    strict, fast = strict_and_fast
    assert strict.accuracy[-1] > 0.6  # a model that learnt something
    np.testing.assert_allclose(fast.accuracy, strict.accuracy, atol=0.01)
    same = readout.saturation_layer(fast.logits) == readout.saturation_layer(strict.logits)
    assert same.mean() >= 0.95


def test_an_unknown_evaluation_precision_is_refused_before_any_work():
    model = training.build_vit(CFG, seed=0)
    with pytest.raises(ValueError, match="evaluation precision"):
        models.collect(model, [torch.zeros(2, 1, 8, 8)], device="cpu", progress=False, precision="fp16")
    with pytest.raises(ValueError, match="evaluation precision"):
        device.evaluation_autocast("half", "cpu")
