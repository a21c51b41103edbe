"""Where work runs (``layersim.core.device``): the float32 switch and the ``device="auto"`` rule, on any machine."""

import pytest
import torch

from layersim.core import device
from layersim.nets import models
from layersim.train import training
from layersim.train.training import ViTConfig


@pytest.fixture(autouse=True)
def restore_mode(monkeypatch):
    monkeypatch.delenv(device.FLOAT32_ENV, raising=False)
    yield
    monkeypatch.delenv(device.FLOAT32_ENV, raising=False)
    device.set_float32_mode(None)


def flags() -> tuple[str, str]:
    return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision


def test_fast_by_default_strict_on_request_and_restored_after_the_block():
    assert device.float32_mode() == "fast" and device.apply_float32() == "fast"
    assert flags() == ("tf32", "tf32")
    with device.float32("strict"):
        assert device.float32_mode() == "strict" and flags() == ("ieee", "ieee")
    assert device.float32_mode() == "fast" and flags() == ("tf32", "tf32")


def test_the_environment_sets_the_mode_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.setenv(device.FLOAT32_ENV, "strict")
    assert device.float32_mode() == "strict"
    device.set_float32_mode("fast")  # an explicit choice wins over the environment
    assert device.float32_mode() == "fast"
    device.set_float32_mode(None)
    monkeypatch.setenv(device.FLOAT32_ENV, "tf32")
    with pytest.raises(ValueError, match="LAYERSIM_FLOAT32"):
        device.float32_mode()
    with pytest.raises(ValueError, match="float32 mode"):
        device.set_float32_mode("half")


def test_auto_keeps_small_work_on_the_cpu_and_big_work_on_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert device.resolve_device("auto", work=device.GPU_MIN_WORK - 1).type == "cpu"
    assert flags()[0] == "ieee"  # a CPU answer leaves the flags alone
    assert device.resolve_device("auto", work=device.GPU_MIN_WORK).type == "cuda"
    assert flags() == ("tf32", "tf32")  # a CUDA answer applies the switch ("fast" by default)
    assert device.resolve_device("auto").type == "cuda"  # no work given: the GPU
    assert device.resolve_device("cpu", work=10**12).type == "cpu"  # a device given is a device forced
    assert device.resolve_device("cuda", work=1).type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve_device("auto", work=10**12).type == "cpu"
    assert models.resolve_device is device.resolve_device


def test_training_work_counts_trainable_parameters_times_the_batch():
    vit = training.build_vit(ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=1,
                                       num_heads=2))
    n = sum(p.numel() for p in vit.parameters())
    assert device.training_work(vit, 32) == 32 * n
    vit.head.weight.requires_grad_(False)
    assert device.training_work(vit, 32) == 32 * (n - vit.head.weight.numel())
    with pytest.raises(ValueError, match="batch_size"):
        device.training_work(vit, 0)


def test_the_measured_models_fall_on_the_side_of_the_threshold_they_were_measured_on():
    """GPU_MIN_WORK's comment in numbers: the 3 x 64 MLP at batch 64 (faster on the H100 machine's CPU in both runs)
    below it; the 3 x 128 and 3 x 256 MLPs at batch 64 and the tracing notebooks' 9-layer MLP and default ViT at
    batch 128 above."""
    from layersim.inputs import data
    from layersim.notebook.presets import TRACING_VIT
    from layersim.train import mlp

    assert device.training_work(mlp.MLP(mlp.MLPConfig(width=64, depth=3)), 64) < device.GPU_MIN_WORK
    assert device.training_work(mlp.MLP(mlp.MLPConfig(width=128, depth=3)), 64) >= device.GPU_MIN_WORK
    assert device.training_work(mlp.MLP(mlp.MLPConfig(width=256, depth=3)), 64) >= device.GPU_MIN_WORK
    assert device.training_work(mlp.MLP(mlp.MLPConfig()), 128) >= device.GPU_MIN_WORK
    s = TRACING_VIT["default"]
    cfg, _ = training.configs_from(s, data.dataset_info(s["dataset"]))
    assert device.training_work(training.build_vit(cfg), s["batch_size"]) >= device.GPU_MIN_WORK
