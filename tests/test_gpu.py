"""CUDA against the CPU: the library's paths that move tensors to a GPU give the CPU's answer there.

Marked ``gpu`` and skipped without CUDA, so ``make test`` (CPU only) is unchanged; ``make test-gpu`` runs them
on a machine with a GPU. float32 work runs with TF32 off, so that the CUDA and CPU kernels differ only by
summation order: tolerances are a few float32 ulps scaled by the sizes involved.
"""

import numpy as np
import pytest
import torch

from builders import tiny_vit, toy_data
from layersim.inputs import data
from layersim.measures import similarity
from layersim.nets import models, readout, surgery
from layersim.papers.alignment import pretrain
from layersim.train import training
from layersim.train.training import TrainConfig, ViTConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TINY = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=2, num_heads=2)


@pytest.fixture(autouse=True)
def strict_float32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def test_one_training_run_agrees_on_cuda_and_the_cpu():
    """The epoch loop (training.train_classifier -> train_epochs) on CUDA in float32: the same batches in the
    same order, so the same losses and weights as on the CPU up to rounding."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, seed=3)
    cpu, gpu = training.build_vit(TINY), training.build_vit(TINY)
    h_cpu = training.train_classifier(cpu, toy_data(), cfg, device="cpu", progress=False)
    h_gpu = training.train_classifier(gpu, toy_data(), cfg, device="cuda", progress=False, precision="fp32", workers=0)
    np.testing.assert_allclose([h["loss"] for h in h_gpu], [h["loss"] for h in h_cpu], rtol=1e-4)
    for (name, a), b in zip(cpu.state_dict().items(), gpu.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-4, msg=name)


def test_augmentation_on_the_device_trains_and_restores_the_data_set():
    ds = data.image_dataset("digits", "train", limit=64, augment=True)
    vit = training.build_vit(ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=10, embed_dim=16, depth=1,
                                       num_heads=2))
    hist = training.train_classifier(vit, ds, TrainConfig(epochs=3, batch_size=16, lr=3e-3), device="cuda",
                                     progress=False, workers=0)
    assert len(hist) == 3 and all(np.isfinite(h["loss"]) for h in hist) and ds.defer_augment is False
    assert next(vit.parameters()).device.type == "cuda"


def test_bf16_training_runs_and_learns():
    cfg = TrainConfig(epochs=4, batch_size=16, lr=3e-3, seed=3)
    hist = training.train_classifier(training.build_vit(TINY), toy_data(), cfg, device="cuda", progress=False,
                                     precision="bf16", workers=0)
    assert hist[-1]["loss"] < hist[0]["loss"]


def test_reading_every_layer_and_the_readout_agree():
    model = tiny_vit(perturb=True)
    x = torch.randn(24, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    on_cpu = models.collect(model, [x], device="cpu", progress=False).hidden
    on_gpu = models.collect(model, [x], device="cuda", progress=False).hidden
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(readout.layer_logits(model.cuda(), on_gpu), readout.layer_logits(model.cpu(), on_cpu),
                               rtol=1e-4, atol=1e-4)


def test_similarity_of_cuda_tensors_equals_numpy_in_float64():
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(4, 60, 12)) + 3.0
    expected = similarity.layer_matrix(layers, metric="cka")
    got = similarity.layer_matrix(torch.tensor(layers, device="cuda"), metric="cka")
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(similarity.to_last(torch.tensor(layers, device="cuda"), "cos"),
                               similarity.to_last(layers, "cos"), rtol=1e-10, atol=1e-12)


def test_a_skipped_span_agrees_on_cuda_and_the_cpu():
    model = tiny_vit(perturb=True)
    x = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), surgery.skip(model, 2, 2) as m:
        cpu = m(x)
    model.cuda()
    with torch.no_grad(), surgery.skip(model, 2, 2) as m:
        gpu = m(x.cuda()).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_fine_tuning_a_small_cnn_agrees_on_cuda_and_the_cpu():
    cfg = pretrain.CNNConfig(in_chans=1, img_size=16, num_classes=3, channels=(4, 8), fc=(16,))
    X = torch.rand(48, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    y = torch.arange(48) % 3
    net = pretrain.build_cnn(cfg, seed=0)
    a, ha = pretrain.finetune(net, (X, y), (X, y), num_classes=3, epochs=2, batch_size=16, seed=5, device="cpu")
    b, hb = pretrain.finetune(net, (X, y), (X, y), num_classes=3, epochs=2, batch_size=16, seed=5, device="cuda")
    np.testing.assert_allclose(hb["train_loss"], ha["train_loss"], rtol=1e-4)
    assert abs(hb["final_accuracy"] - ha["final_accuracy"]) <= 1 / 48
