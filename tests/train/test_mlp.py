"""Tests of layersim.train.mlp: the MLPs of the tracing paper's appendix B.2, read, spliced, trained and cached."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from builders import REPO
from layersim.nets import adapters, models, readout, surgery
from layersim.notebook import presets
from layersim.train import mlp, training

CFG = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=5)


def blocks(model, x, **kw):
    """Hidden layers 1..L through the MLP's adapter (index 0, the flattened image, left out)."""
    L = models.n_layers(model)
    return models.collect(model, [x], layers=range(1, L + 1), progress=False, device="cpu", **kw)


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 3, 4, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    return x, y


def accuracy_range(logits, labels):
    """``(lo, hi)``: the accuracy of ``logits`` [N, K] when any class within float32 rounding of a row's best
    (1e-4 of the logits' scale, hundreds of times the drift between two routes to them: other batch sizes,
    other CPU kernels) may be its top-1. A random-init model's top two logits can be closer than that drift,
    and another route breaks such a near tie its own way; ``lo`` counts the rows right for sure, ``hi`` those
    that may be right."""
    z = np.asarray(logits, dtype=np.float64)
    near = z >= z.max(1, keepdims=True) - 1e-4 * np.abs(z).max()
    hit = near[np.arange(len(z)), labels]
    return (hit & (near.sum(1) == 1)).mean(), hit.mean()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
def test_shapes_and_readout_of_last_layer_is_the_models_logits(residual, final_norm):
    cfg = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=5, residual=residual, final_norm=final_norm)
    model = mlp.build_mlp(cfg, seed=1)
    x, y = _data()
    ev = readout.evaluate(model, TensorDataset(x, y), device="cpu", batch_size=16, embedding=False)
    H, labels, logits = ev.hidden, ev.labels, ev.logits
    assert H.shape == (5, 40, 8) and H.dtype == np.float32
    np.testing.assert_array_equal(labels, y.numpy())
    assert logits.shape == (5, 40, 4)
    with torch.no_grad():
        ref = model(x).numpy()
        np.testing.assert_allclose(H, torch.stack(model.hidden(x)).numpy(), atol=1e-6)
    np.testing.assert_allclose(logits[-1], ref, rtol=1e-5, atol=1e-6)
    assert ev.accuracy.shape == (5,)
    lo, hi = accuracy_range(ref, y.numpy())
    assert lo <= ev.accuracy[-1] <= hi


def test_the_adapter_reads_hidden_layers_and_refuses_mixed_widths():
    model = mlp.build_mlp(CFG, seed=0)
    assert adapters.get(model).name == "mlp" and models.n_layers(model) == 5
    x, _ = _data(10)
    feats = blocks(model, x)
    assert feats.labels is None and feats.hidden.shape == (5, 10, 8) and feats.layers == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="different widths"):
        models.collect(model, [x], progress=False, device="cpu")  # index 0 is 12 wide, the layers 8


def test_skipping_a_residual_layer_equals_dropping_its_update():
    cfg = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=4, residual=True)
    model = mlp.build_mlp(cfg, seed=0)
    x, _ = _data(6)
    with torch.no_grad():
        h = model.layers[1](model.layers[0](x.flatten(1)))
        h = model.layers[3](h)  # layer 3 skipped
        np.testing.assert_allclose(surgery.skip(model, 3, 3)(x).numpy(), model.classify(h).numpy(), atol=1e-6)


def test_forward_definitions_plain_and_residual():
    """Layer 1 = ReLU(W_1 x + b_1) in both; then plain h = ReLU(W h + b), residual h = h + ReLU(W h + b)."""
    x, _ = _data(7)
    for residual in (False, True):
        cfg = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=5, residual=residual)
        model = mlp.build_mlp(cfg, seed=3)
        hs = model.hidden(x)
        with torch.no_grad():
            h = torch.relu(x.flatten(1) @ model.layers[0].weight.T + model.layers[0].bias)
            torch.testing.assert_close(hs[0], h)
            for i in range(1, 5):
                z = torch.relu(h @ model.layers[i].weight.T + model.layers[i].bias)
                h = h + z if residual else z
                torch.testing.assert_close(hs[i], h)
            torch.testing.assert_close(model(x), h @ model.head.weight.T + model.head.bias)


def test_plain_and_residual_share_parameters_and_initialisation():
    plain = mlp.build_mlp(mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=5), seed=4)
    res = mlp.build_mlp(mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=5, residual=True), seed=4)
    for (n1, p1), (n2, p2) in zip(plain.named_parameters(), res.named_parameters()):
        assert n1 == n2
        torch.testing.assert_close(p1, p2)
    x, _ = _data(5)
    torch.testing.assert_close(plain.hidden(x)[0], res.hidden(x)[0])  # no skip on the input layer
    assert not torch.allclose(plain.hidden(x)[1], res.hidden(x)[1])


def test_final_norm_is_recomputed_per_layer_in_the_readout():
    cfg = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=3, residual=True, final_norm=True)
    model = mlp.build_mlp(cfg, seed=0)
    x, _ = _data(6)
    H = blocks(model, x).hidden
    with torch.no_grad():
        h0 = torch.from_numpy(H[0])
        normed = torch.nn.functional.layer_norm(h0, (8,), model.norm.weight, model.norm.bias, model.norm.eps)
        expected = (normed @ model.head.weight.T + model.head.bias).numpy()
        raw = (h0 @ model.head.weight.T + model.head.bias).numpy()
    layers = [1, 2, 3]
    np.testing.assert_allclose(readout.layer_logits(model, H, layers=layers)[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(readout.layer_logits(model, H, layers=layers, apply_final_norm=False)[0], raw,
                               rtol=1e-5, atol=1e-6)


def test_config_validation():
    with pytest.raises(ValueError):
        mlp.MLPConfig(depth=0)


def test_build_is_deterministic_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = mlp.build_mlp(CFG, seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = mlp.build_mlp(CFG, seed=7)
    c = mlp.build_mlp(CFG, seed=8)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_training_is_deterministic_with_a_seed():
    x, y = _data(64)
    cfg_t = training.TrainConfig(epochs=2, batch_size=16, lr=1e-2, seed=5)
    runs = []
    for _ in range(2):
        model = mlp.build_mlp(mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=4, residual=True), seed=5)
        hist = training.train_classifier(model, TensorDataset(x, y), cfg_t, device="cpu", progress=False)
        runs.append((hist, blocks(model, x).hidden))
    assert [h["loss"] for h in runs[0][0]] == [h["loss"] for h in runs[1][0]]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_cached_mlp_trains_once_then_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path))
    x, y = _data(32)
    calls = []

    def load():
        calls.append(1)
        return TensorDataset(x, y)

    cfg_t = training.TrainConfig(epochs=1, batch_size=16, seed=2)
    cfg_m = mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=3, residual=True)
    desc = {"name": "toy", "n": 32}
    m1, meta1 = mlp.cached_mlp(cfg_m, cfg_t, load, desc, device="cpu", progress=False)
    m2, meta2 = mlp.cached_mlp(cfg_m, cfg_t, load, desc, device="cpu", progress=False)
    assert calls == [1] and not meta1["from_cache"] and meta2["from_cache"]
    assert meta1["key"] == meta2["key"] and (tmp_path / "checkpoints" / f"mlp-{meta1['key']}").is_dir()
    assert meta2["n_params"] == sum(p.numel() for p in m1.parameters())
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu())
    # the plain variant is another model, hence another key
    _, meta3 = mlp.cached_mlp(mlp.MLPConfig(in_features=12, num_classes=4, width=8, depth=3), cfg_t, load, desc,
                              device="cpu", progress=False)
    assert meta3["key"] != meta1["key"] and calls == [1, 1]


def test_configs_from_settings_take_the_input_size_from_the_data_set():
    info = {"channels": 1, "image_size": 28, "classes": 10}
    model_cfg, train_cfg = training.configs_from({**presets.TRACING_MLP["default"], "residual": True}, info, mlp.MLPConfig, seed=3)
    assert model_cfg.in_features == 784 and model_cfg.num_classes == 10 and model_cfg.depth == 9
    assert model_cfg.residual and train_cfg.seed == 3 and train_cfg.objective == "ce"


@pytest.mark.slow
def test_t05_runs_the_paper_path_offline_on_tiny_settings(tmp_path, monkeypatch):
    """The notebook's paper-scale path end to end, with MNIST swapped for Fashion-MNIST and tiny sizes."""
    import json

    import papermill as pm

    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp_path / "cache"))
    nb = REPO / "notebooks" / "tracing" / "t05_residual_mlp.ipynb"
    pm.execute_notebook(str(nb), str(tmp_path / "t05.ipynb"), kernel_name="python3", progress_bar=False,
                        cwd=str(nb.parent), parameters=dict(scale="paper", dataset="fashion-mnist", n_train=256,
                                                            n_eval=128, width=16, epochs=1))
    metrics = json.loads((tmp_path / "out" / "tracing" / "t05_residual_mlp" / "metrics.json").read_text())
    assert metrics["scale"] == "paper" and metrics["params"]["depth"] == 9
    assert len(metrics["accuracy_layerwise"]["residual"]) == 9 and set(metrics["claims"]) == {
        "cos_tracks_cka_with_residual", "cka_misleads_without_residual", "cka_tracks_accuracy_with_residual"}
