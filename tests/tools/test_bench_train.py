"""Tests of layersim.tools.bench_train: training throughput (``python -m layersim.tools.bench train``) and the
crossover check of ``device="auto"`` (``python -m layersim.tools.bench device``), on the CPU."""

from __future__ import annotations

import re

import pytest
import torch

from layersim.core import device
from layersim.inputs.augment import Augmentation
from layersim.tools import bench, bench_train


def test_bench_train_quick_on_the_cpu(capsys):
    assert bench.main(["train", "--quick", "--steps", "2", "--batch", "8", "--objectives", "ce,aligned",
                       "--augmentations", "none,batch"]) == 0
    out = capsys.readouterr().out
    assert "device: CPU" in out and "| objective | precision |" in out
    assert re.search(r"\| ce \| fp32 \| [\d,]+ \| [\d,]+ \(\d\.\d\d×\) \|", out)
    assert "| aligned | bf16 | n/a | n/a |" in out  # no bf16 on the CPU: listed, not measured
    imgs = bench_train.RandomImages(4, augment=Augmentation(32))
    assert imgs[0][0].shape == (3, 32, 32) and len(imgs) == 4


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps and --batch must be positive"),
    (["--objectives", "ce,nope"], "--objectives: choose from ce,aligned"),
    (["--precisions", ""], "--precisions: choose from fp32,bf16"),
    (["--augmentations", "flip"], "--augmentations: choose from none,per-image,batch"),
])
def test_bench_train_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_train.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_crossover_check_times_each_model_and_names_autos_pick(capsys):
    assert bench.main(["device", "--quick", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "auto picks" in out and f"GPU_MIN_WORK = {device.GPU_MIN_WORK:.1e}" in out
    rows = bench_train.crossover(quick=True, steps=1, log=lambda _: None)
    assert [r["auto"] for r in rows] == ["cpu", "cpu"] or torch.cuda.is_available()
    assert all(r["ms"]["cpu"] > 0 for r in rows)
