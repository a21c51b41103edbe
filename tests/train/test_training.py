"""Tests of layersim.train.training: ViT configs and builds, schedules, the training loop and its epoch loop,
cached models (trained once, then loaded; one training for two runs that need it), precision and the GPU data
path on the CPU, torch.compile."""

import copy
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from builders import toy_data
from layersim.train import checkpoints, heads, training
from layersim.train.training import TrainConfig, ViTConfig

TINY = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=2, num_heads=2)


def test_build_vit_matches_config_and_rejects_bad_shapes():
    m = training.build_vit(TINY)
    assert len(m.blocks) == 2 and m.head.out_features == 2 and m.embed_dim == 16
    with pytest.raises(ValueError, match="divisible"):
        training.build_vit(ViTConfig(embed_dim=30, num_heads=4))
    with pytest.raises(ValueError, match="multiple"):
        training.build_vit(ViTConfig(img_size=28, patch_size=5))


def test_train_config_validation():
    with pytest.raises(ValueError, match="objective"):
        TrainConfig(objective="nope")
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="nope")
    with pytest.raises(ValueError, match="positive"):
        TrainConfig(epochs=0)


def test_lr_schedules():
    cos = TrainConfig(epochs=2, lr=1.0, warmup_epochs=0.5)
    lrs = [training.lr_at(s, 10, cos) for s in range(20)]
    assert lrs[0] == pytest.approx(0.2) and lrs[4] == pytest.approx(1.0)  # linear warm-up over 5 steps
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))  # then non-increasing
    assert lrs[-1] < 0.02
    ms = TrainConfig(epochs=4, lr=1.0, schedule="multistep", milestones=(1, 3))
    assert [training.lr_at(s, 10, ms) for s in (0, 9, 10, 29, 30)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])


def test_training_learns_and_is_deterministic():
    cfg = TrainConfig(epochs=4, batch_size=16, lr=3e-3, seed=3)
    m1, m2 = training.build_vit(TINY), training.build_vit(TINY)
    h1 = training.train_classifier(m1, toy_data(), cfg, device="cpu", progress=False)
    training.train_classifier(m2, toy_data(), cfg, device="cpu", progress=False)
    assert h1[-1]["loss"] < 0.5 * h1[0]["loss"]
    for p1, p2 in zip(m1.state_dict().values(), m2.state_dict().values()):
        torch.testing.assert_close(p1, p2, rtol=0, atol=0)


def test_cached_vit_trains_once_then_loads(tmp_cache):
    checkpoints.forget_uses()
    cfg = TrainConfig(epochs=1, batch_size=16, seed=0)
    desc = {"name": "toy", "n": 64}
    m1, meta1 = training.cached_vit(TINY, cfg, toy_data(), desc, device="cpu", progress=False)
    m2, meta2 = training.cached_vit(TINY, cfg, None, desc, device="cpu", progress=False)  # no data needed
    assert meta1["from_cache"] is False and meta2["from_cache"] is True and meta1["key"] == meta2["key"]
    name = f"vit-{meta1['key']}"  # the run's record: trained once, then loaded, counts as trained
    assert checkpoints.uses() == {"loaded": [], "trained": [name]}
    checkpoints.forget_uses()
    training.cached_vit(TINY, cfg, None, desc, device="cpu", progress=False)
    assert checkpoints.uses() == {"loaded": [name], "trained": []}
    x = toy_data()[:8][0]
    torch.testing.assert_close(m1(x), m2(x))
    # only the finished checkpoint is left: no temporary folders
    assert sorted(p.name for p in (tmp_cache / "checkpoints").iterdir()) == [f"vit-{meta1['key']}"]


def test_interrupted_training_leaves_no_checkpoint(tmp_cache, monkeypatch):
    def exploding(model, x, y, cfg):
        raise KeyboardInterrupt

    monkeypatch.setitem(training.OBJECTIVES, "explode", exploding)
    with pytest.raises(KeyboardInterrupt):
        training.cached_vit(TINY, TrainConfig(objective="explode"), toy_data(), {"n": 1}, device="cpu", progress=False)
    assert not any((tmp_cache / "checkpoints").iterdir())


def test_divergence_raises(monkeypatch):
    monkeypatch.setitem(training.OBJECTIVES, "nan", lambda m, x, y, c: m(x).sum() * float("nan"))
    with pytest.raises(FloatingPointError, match="diverged"):
        training.train_classifier(training.build_vit(TINY), toy_data(), TrainConfig(objective="nan"),
                                  device="cpu", progress=False)


def test_configs_from_takes_the_image_shape_from_the_data_set():
    from layersim.notebook import presets

    info = {"image_size": 32, "channels": 3, "classes": 100}
    model_cfg, train_cfg = training.configs_from(presets.TRACING_VIT["paper"], info, seed=7)
    assert (model_cfg.img_size, model_cfg.in_chans, model_cfg.num_classes) == (32, 3, 100)
    assert (model_cfg.depth, model_cfg.embed_dim, model_cfg.num_heads) == (12, 384, 6)  # DeiT-S
    assert train_cfg.schedule == "multistep" and train_cfg.milestones == (100, 150) and train_cfg.seed == 7
    # the built model is DeiT-S-sized: 21.3M parameters at 32x32 with patches of 4 and 100 classes
    assert 21e6 < sum(p.numel() for p in training.build_vit(model_cfg).parameters()) < 22e6


def test_cached_multi_exit_model_keeps_its_heads(tmp_cache):
    cfg = TrainConfig(epochs=1, batch_size=16, objective="multi_exit")
    m1, meta1 = training.cached_vit(TINY, cfg, toy_data(), {"n": 64}, device="cpu", progress=False)
    m2, meta2 = training.cached_vit(TINY, cfg, None, {"n": 64}, device="cpu", progress=False)
    assert meta2["from_cache"] and len(m2.exit_heads) == TINY.depth - 1
    for a, b in zip(m1.exit_heads.parameters(), m2.exit_heads.parameters()):
        torch.testing.assert_close(a, b)


CLAIMANT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import torch
    from layersim.train import training

    out, i = Path(sys.argv[1]), sys.argv[2]

    def fit(model, train_set, cfg, device, progress, precision):
        (out / f"trained-{i}").touch()
        other = out / f"started-{'2' if i == '1' else '1'}"
        deadline = time.time() + 60
        while not other.exists() and time.time() < deadline:  # the other run has arrived (its imports done) ...
            time.sleep(0.05)
        time.sleep(1.0)  # ... and reaches the claim while this one still trains
        with torch.no_grad():
            model.weight.fill_(float(i))
        return [{"epoch": 1, "loss": 0.0, "seconds": 2.0}]

    (out / f"started-{i}").touch()
    model, meta = training.cached_model("toy", lambda: torch.nn.Linear(2, 2), {"model": 1}, {"train": 1}, [],
                                        {"data": 1}, device="cpu", progress=False, fit=fit)
    (out / f"meta-{i}.json").write_text(json.dumps({"from_cache": meta["from_cache"],
                                                    "weight": float(model.weight[0, 0])}))
""")


def test_two_runs_that_need_one_checkpoint_train_it_once(tmp_path):
    """The batch runner's shared checkpoints: two processes ask for the same model at once; the first claims it and
    trains, the second waits on the claim and loads what the first saved (the same weights, from_cache)."""
    script = tmp_path / "claimant.py"
    script.write_text(CLAIMANT)
    env = {**os.environ, "LAYERSIM_CACHE": str(tmp_path / "cache")}
    first = subprocess.Popen([sys.executable, str(script), str(tmp_path), "1"], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "trained-1").exists() and time.time() < deadline:  # the first run is training
        time.sleep(0.05)
    second = subprocess.run([sys.executable, str(script), str(tmp_path), "2"], env=env, capture_output=True, text=True,
                            timeout=120)
    first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert (tmp_path / "trained-1").exists() and not (tmp_path / "trained-2").exists()
    assert "waiting: another run is making the checkpoint toy-" in second.stdout
    one, two = (json.loads((tmp_path / f"meta-{i}.json").read_text()) for i in (1, 2))
    assert one == {"from_cache": False, "weight": 1.0} and two == {"from_cache": True, "weight": 1.0}


def test_cpu_for_small_models_never_takes_more_threads_than_the_process_was_given(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert training.cpu_for_small_models(1) == 1 and torch.get_num_threads() == 1
        # a notebook asking for two threads gets one where its share is one (a batch of two on two cores) ...
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert training.cpu_for_small_models(2) == 1 and torch.get_num_threads() == 1
        # ... and two where it was given three, or, with no OMP_NUM_THREADS, where PyTorch has two
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert training.cpu_for_small_models(2) == 2
        monkeypatch.delenv("OMP_NUM_THREADS")
        torch.set_num_threads(2)
        assert training.cpu_for_small_models(4) == 2
        monkeypatch.setenv("OMP_NUM_THREADS", "two")  # not a count: PyTorch's
        assert training.thread_share() == torch.get_num_threads()
        with pytest.raises(ValueError):
            training.cpu_for_small_models(0)
    finally:
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)


def test_train_models_describes_each_and_records_its_checkpoint(tmp_cache, capsys):
    calls = []

    def build(spec, seed, device):
        calls.append((spec["depth"], seed, device))
        model_cfg = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, depth=spec["depth"],
                              embed_dim=16, num_heads=2)
        return training.cached_vit(model_cfg, TrainConfig(epochs=1, batch_size=16, seed=seed), toy_data(),
                                   {"name": "toy", "limit": 64}, device=device, progress=False)

    specs = {"one": {"depth": 1}, "two": {"depth": 2}}
    models, metas = training.train_models(specs, seed=3, device="cpu", build=build)
    assert calls == [(1, 3, "cpu"), (2, 3, "cpu")] and list(models) == ["one", "two"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("one: ce, depth 1, 64 toy images x 1 epochs") and metas["one"]["key"] in lines[0]
    training.train_models(specs, seed=3, device="cpu", build=build)
    assert "(from the cache)" in capsys.readouterr().out
    rec = training.checkpoint_records(specs, metas, history=True)
    assert rec["two"]["checkpoint"] == metas["two"]["key"] and rec["two"]["settings"] == {"depth": 2}
    assert rec["two"]["weights_sha256"] == metas["two"]["weights_sha256"] and len(rec["two"]["history_loss"]) == 1


def test_split_settings_serves_both_model_configs():
    from layersim.notebook import presets
    from layersim.train import mlp

    info = {"image_size": 28, "channels": 1, "classes": 10}
    vit_cfg, vit_train = training.split_settings(
        presets.TRACING_VIT["default"], ViTConfig, {"img_size": 28, "in_chans": 1, "num_classes": 10}, seed=2)
    assert (vit_cfg, vit_train) == training.configs_from(presets.TRACING_VIT["default"], info, seed=2)
    mlp_cfg, mlp_train = training.split_settings(presets.TRACING_MLP["default"], mlp.MLPConfig,
                                                 {"in_features": 784, "num_classes": 10}, seed=2)
    assert (mlp_cfg, mlp_train) == training.configs_from(presets.TRACING_MLP["default"], info, mlp.MLPConfig, seed=2)
    assert mlp_cfg.width == presets.TRACING_MLP["default"]["width"] and mlp_train.seed == 2


def test_epoch_loop_matches_a_hand_written_loop_and_reports_weighted_means():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ref = copy.deepcopy(model)
    X, y = torch.randn(50, 4), torch.arange(50) % 3
    gen, gen_ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lrs = []

    def lr_of(step):
        lrs.append(step)
        return 0.1 / (1 + step)

    seen = []
    hist = training.train_epochs(model, opt, 3, lambda e: ((X[i], y[i]) for i in torch.randperm(50, generator=gen).split(16)),
                                 lambda x, t: torch.nn.functional.cross_entropy(model(x), t), lr_of=lr_of,
                                 after_epoch=lambda e: seen.append(e) or {"seen": e})
    opt_ref, step, means = torch.optim.SGD(ref.parameters(), lr=0.1), 0, []
    for _ in range(3):
        total = 0.0
        for i in torch.randperm(50, generator=gen_ref).split(16):
            opt_ref.param_groups[0]["lr"] = 0.1 / (1 + step)
            loss = torch.nn.functional.cross_entropy(ref(X[i]), y[i])
            opt_ref.zero_grad()
            loss.backward()
            opt_ref.step()
            total += loss.item() * len(i)
            step += 1
        means.append(total / 50)
    torch.testing.assert_close(model.weight, ref.weight, rtol=0, atol=0)
    assert [h["loss"] for h in hist] == means and [h["epoch"] for h in hist] == [1, 2, 3]
    assert seen == [1, 2, 3] and [h["seen"] for h in hist] == [1, 2, 3] and lrs == list(range(12))
    assert not model.training and all(h["seconds"] >= 0 for h in hist)


def test_descend_refuses_a_loss_that_is_not_finite_and_leaves_the_weights():
    model = torch.nn.Linear(2, 1)
    before = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(FloatingPointError, match="fine-tuning at epoch 1, step 0 diverged"):
        training.descend(opt, model(torch.ones(1, 2)).sum() * float("inf"), "fine-tuning at epoch 1, step 0")
    assert torch.equal(model.weight, before)
    with pytest.raises(FloatingPointError, match="diverged"):
        heads.train_head(torch.nn.Linear(2, 2), np.full((8, 2), 1e38), np.arange(8) % 2, lr=1e30, epochs=3)


# ----------------------------------------------------------------------------- precision and the GPU data path


def test_resolve_precision_and_autocast_on_the_cpu():
    assert training.resolve_precision("auto", "cpu") == "fp32" == training.resolve_precision("fp32", "cpu")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        training.resolve_precision("bf16", "cpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        training.resolve_precision("fp16", "cpu")
    import contextlib

    assert isinstance(training.autocast("fp32"), contextlib.nullcontext)
    import warnings

    with warnings.catch_warnings():  # "CUDA is not available ... Disabling autocast": expected here
        warnings.simplefilter("ignore")
        assert isinstance(training.autocast("bf16"), torch.autocast)
    with pytest.raises(ValueError, match="resolved precision"):
        training.autocast("auto")


def test_precision_key_keeps_fp32_keys_and_separates_bf16(tmp_cache):
    parts = (TINY, TrainConfig(epochs=1, batch_size=16), {"name": "toy"})
    legacy = checkpoints.config_key(*parts)
    assert training.precision_key("fp32") == ()
    assert checkpoints.config_key(*parts, *training.precision_key("bf16")) != legacy
    _, meta = training.cached_vit(*parts[:2], toy_data(), parts[2], device="cpu", progress=False)
    assert meta["key"] == legacy and meta["precision"] == "fp32"  # checkpoints made before precisions load


def test_loader_settings_per_device():
    assert training.loader_settings("cpu") == {"num_workers": 0}
    assert training.loader_settings("cpu", workers=2) == {"num_workers": 2}
    assert training.loader_settings("cuda", workers=3) == {"num_workers": 3, "pin_memory": True, "persistent_workers": True}
    auto = training.loader_settings("cuda")
    assert 0 <= auto["num_workers"] <= 8 and auto["pin_memory"]
    with pytest.raises(ValueError, match="workers"):
        training.loader_settings("cpu", workers=-1)


def test_batch_augmentation_path_replaces_the_per_image_one(monkeypatch):
    """augment_on_device=True (what CUDA does by default) on the CPU: the per-image augmentation is
    never called, every batch goes through Augmentation.batch, and the switch is restored."""
    from layersim.inputs import image_data
    from layersim.inputs.augment import Augmentation

    ds = image_data.image_dataset("digits", "train", limit=64, augment=True)
    calls = {"image": 0, "batch": 0}
    per_image, per_batch = ds.augment.__call__, ds.augment.batch

    class Spy(Augmentation):
        def __call__(self, x):
            calls["image"] += 1
            return per_image(x)

        def batch(self, x, generator=None):
            calls["batch"] += 1
            assert x.shape[1:] == (1, 8, 8)
            return per_batch(x, generator)

    ds.augment = Spy(8, flip=False)
    vit = training.build_vit(ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=10, embed_dim=16, depth=1,
                                       num_heads=2))
    cfg = TrainConfig(epochs=2, batch_size=16)
    training.train_classifier(vit, ds, cfg, device="cpu", progress=False, augment_on_device=True)
    assert calls == {"image": 0, "batch": 8} and ds.defer_augment is False
    training.train_classifier(vit, ds, cfg, device="cpu", progress=False)  # the CPU default: per image
    assert calls == {"image": 128, "batch": 8}


@pytest.mark.parametrize("objective", ["ce", "aligned"])
def test_a_compiled_loss_trains_like_the_eager_one(objective):
    """torch.compile through the 'eager' backend (tracing without code generation: no compiler needed) gives
    the eager loop's losses and weights: the compiled path is the same objective."""
    cfg = TrainConfig(epochs=2, batch_size=16, lr=3e-3, seed=3, objective=objective)
    m1, m2 = training.build_vit(TINY), training.build_vit(TINY)
    h1 = training.train_classifier(m1, toy_data(), cfg, device="cpu", progress=False)
    h2 = training.train_classifier(m2, toy_data(), cfg, device="cpu", progress=False, compile="eager")
    assert [h["loss"] for h in h2] == pytest.approx([h["loss"] for h in h1], rel=1e-5)
    for p1, p2 in zip(m1.state_dict().values(), m2.state_dict().values()):
        torch.testing.assert_close(p2, p1, rtol=1e-4, atol=1e-5)


def test_compile_backend_from_the_argument_or_the_environment(monkeypatch):
    monkeypatch.delenv(training.COMPILE_ENV, raising=False)
    assert training.compile_backend() is None and training.compile_backend(False) is None
    assert training.compile_backend(True) == "inductor" and training.compile_backend("eager") == "eager"
    for env, want in (("0", None), ("", None), ("1", "inductor"), ("aot_eager", "aot_eager")):
        monkeypatch.setenv(training.COMPILE_ENV, env)
        assert training.compile_backend() == want
    monkeypatch.setenv(training.COMPILE_ENV, "fastest")
    with pytest.raises(ValueError, match="LAYERSIM_COMPILE"):
        training.compile_backend()
    with pytest.raises(ValueError, match="backend"):
        training.compile_backend(3)
