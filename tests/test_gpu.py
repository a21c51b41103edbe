"""CUDA against the CPU: the library's paths that move tensors to a GPU give the CPU's answer there.

Marked ``gpu`` and skipped without CUDA, so ``make test`` (CPU only) is unchanged; ``make test-gpu`` runs them
on a machine with a GPU. Most tests run float32 in the strict mode (IEEE, no TF32:
``layersim.core.device.float32("strict")``), so that the CUDA and CPU kernels differ only by summation order:
tolerances are a few float32 ulps scaled by the sizes involved. The tests named ``fast`` run the library's
default on CUDA (TF32 matmuls and convolutions, or bf16 autocast) and hold it to the looser tolerances stated
in each.
"""

import copy

import numpy as np
import pytest
import torch

from builders import image_batch, tiny_vit, toy_data
from layersim.core import device
from layersim.inputs import image_data
from layersim.measures import similarity
from layersim.nets import cnn, models, readout, surgery
from layersim.analysis import lenses
from layersim.train import training, transfer_learning
from layersim.train.training import TrainConfig, ViTConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: the device the tests compare with the CPU
GPU = "cuda"
TINY = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=2, num_heads=2)


@pytest.fixture(autouse=True)
def strict_float32(request):
    mode = "fast" if "fast" in request.node.name else "strict"
    with device.float32(mode):
        yield


def test_one_training_run_agrees_on_cuda_and_the_cpu():
    """The epoch loop (training.train_classifier -> train_epochs) on CUDA in float32: the same batches in the
    same order, so the same losses and weights as on the CPU up to rounding."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, seed=3)
    cpu, gpu = training.build_vit(TINY), training.build_vit(TINY)
    h_cpu = training.train_classifier(cpu, toy_data(), cfg, device="cpu", progress=False)
    h_gpu = training.train_classifier(gpu, toy_data(), cfg, device=GPU, progress=False, precision="fp32", workers=0)
    np.testing.assert_allclose([h["loss"] for h in h_gpu], [h["loss"] for h in h_cpu], rtol=1e-4)
    for (name, a), b in zip(cpu.state_dict().items(), gpu.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-4, msg=name)


def test_augmentation_on_the_device_trains_and_restores_the_data_set():
    ds = image_data.image_dataset("digits", "train", limit=64, augment=True)
    vit = training.build_vit(ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=10, embed_dim=16, depth=1,
                                       num_heads=2))
    hist = training.train_classifier(vit, ds, TrainConfig(epochs=3, batch_size=16, lr=3e-3), device=GPU,
                                     progress=False, workers=0)
    assert len(hist) == 3 and all(np.isfinite(h["loss"]) for h in hist) and ds.defer_augment is False
    assert next(vit.parameters()).device.type == GPU


def test_bf16_training_runs_and_learns():
    cfg = TrainConfig(epochs=4, batch_size=16, lr=3e-3, seed=3)
    hist = training.train_classifier(training.build_vit(TINY), toy_data(), cfg, device=GPU, progress=False,
                                     precision="bf16", workers=0)
    assert hist[-1]["loss"] < hist[0]["loss"]


def test_reading_every_layer_and_the_readout_agree():
    model = tiny_vit(perturb=True)
    x = torch.randn(24, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    on_cpu = models.collect(model, [x], device="cpu", progress=False).hidden
    on_gpu = models.collect(model, [x], device=GPU, progress=False).hidden
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(readout.layer_logits(model.to(GPU), on_gpu), readout.layer_logits(model.cpu(), on_cpu),
                               rtol=1e-4, atol=1e-4)


def test_similarity_of_cuda_tensors_equals_numpy_in_float64():
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(4, 60, 12)) + 3.0
    expected = similarity.layer_matrix(layers, metric="cka")
    got = similarity.layer_matrix(torch.tensor(layers, device=GPU), metric="cka")
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(similarity.to_last(torch.tensor(layers, device=GPU), "cos"),
                               similarity.to_last(layers, "cos"), rtol=1e-10, atol=1e-12)


def test_a_skipped_span_agrees_on_cuda_and_the_cpu():
    model = tiny_vit(perturb=True)
    x = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), surgery.skip(model, 2, 2) as m:
        cpu = m(x)
    model.to(GPU)
    with torch.no_grad(), surgery.skip(model, 2, 2) as m:
        gpu = m(x.to(GPU)).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_fine_tuning_a_small_cnn_agrees_on_cuda_and_the_cpu():
    cfg = cnn.CNNConfig(in_chans=1, img_size=16, num_classes=3, channels=(4, 8), fc=(16,))
    X = torch.rand(48, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    y = torch.arange(48) % 3
    net = cnn.build_cnn(cfg, seed=0)
    a, ha = transfer_learning.finetune(net, (X, y), (X, y), num_classes=3, epochs=2, batch_size=16, seed=5, device="cpu")
    b, hb = transfer_learning.finetune(net, (X, y), (X, y), num_classes=3, epochs=2, batch_size=16, seed=5, device=GPU)
    np.testing.assert_allclose(hb["train_loss"], ha["train_loss"], rtol=1e-4)
    assert abs(hb["final_accuracy"] - ha["final_accuracy"]) <= 1 / 48


def test_the_reports_model_lenses_agree_on_cuda_and_the_cpu():
    """The lenses that run the model again (a skipped span, a span replaced by its least-squares map) on
    CUDA and on the CPU."""
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=48)
    for name in ("redundancy/skip_change", "redundancy/rba_change"):
        got = {}
        for dev in ("cpu", GPU):
            runs = lenses.ModelRuns(copy.deepcopy(model), [x[:24]], [x[24:]], None, dev)
            got[dev] = lenses.apply(name, lenses.LayerData(layers=[0, 2, 3], model=runs))
        np.testing.assert_allclose(got[GPU], got["cpu"], rtol=1e-3, atol=1e-5, err_msg=name)


def test_fast_float32_training_follows_the_strict_run():
    """TF32 (10 mantissa bits in the products) on the epoch loop: the losses within 1 % of the CPU's."""
    assert device.float32_mode() == "fast"
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, seed=3)
    cpu, gpu = training.build_vit(TINY), training.build_vit(TINY)
    h_cpu = training.train_classifier(cpu, toy_data(), cfg, device="cpu", progress=False)
    h_gpu = training.train_classifier(gpu, toy_data(), cfg, device=GPU, progress=False, precision="fp32", workers=0)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    np.testing.assert_allclose([h["loss"] for h in h_gpu], [h["loss"] for h in h_cpu], rtol=1e-2)


def test_fast_reading_of_every_layer_and_bf16_reading_stay_within_their_tolerances():
    """TF32 and bf16 autocast against the CPU's float32 features: relative to the features' scale, within
    1e-2 (TF32) and 5e-2 (bf16); CKA to the last layer within 0.005 (TF32) and 0.02 (bf16: random weights on
    noise move it more than a trained model's, tests/core/test_device.py; 0.0055 under the CPU's bf16)."""
    model = tiny_vit(perturb=True)
    x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    on_cpu = models.collect(model, [x], device="cpu", progress=False).hidden
    scale = np.abs(on_cpu).max()
    for precision, tol, cka_tol in (("fp32", 1e-2, 0.005), ("bf16", 5e-2, 0.02)):
        got = models.collect(model, [x], device=GPU, progress=False, precision=precision).hidden
        assert got.dtype == np.float32
        assert np.abs(got - on_cpu).max() <= tol * scale, precision
        np.testing.assert_allclose(similarity.to_last(got[1:], "cka"), similarity.to_last(on_cpu[1:], "cka"),
                                   atol=cka_tol, err_msg=precision)


def test_bf16_aligned_training_runs_and_learns():
    """The aligned objective (one shared classifier on every block) under bf16 autocast."""
    cfg = TrainConfig(epochs=4, batch_size=16, lr=3e-3, seed=3, objective="aligned")
    hist = training.train_classifier(training.build_vit(TINY), toy_data(), cfg, device=GPU, progress=False,
                                     precision="bf16", workers=0)
    assert hist[-1]["loss"] < hist[0]["loss"]


def test_auto_keeps_a_tiny_model_on_the_cpu_and_trains_it_as_there():
    """``device="auto"`` with a GPU present: the tiny ViT (far below GPU_MIN_WORK) trains on the CPU, in float32,
    so its losses are the CPU's exactly."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, seed=3)
    assert device.training_work(training.build_vit(TINY), 16) < device.GPU_MIN_WORK
    a, b = training.build_vit(TINY), training.build_vit(TINY)
    h_auto = training.train_classifier(a, toy_data(), cfg, device="auto", progress=False)
    h_cpu = training.train_classifier(b, toy_data(), cfg, device="cpu", progress=False)
    assert next(a.parameters()).device.type == "cpu"
    assert [h["loss"] for h in h_auto] == [h["loss"] for h in h_cpu]
