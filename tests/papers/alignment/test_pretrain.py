"""Tests of layersim.papers.alignment.pretrain: the small CNN and its features, the source and target data, fine-tuning
and Section 7.2's comparison of representations."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from layersim.inputs import image_data
from layersim.notebook import registry
from layersim.papers.alignment import pretrain as pt
from layersim.train.training import TrainConfig


TINY = pt.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(2, 4), fc=(6, 5))


def test_small_cnn_layers_shapes_and_forward():
    m = pt.build_cnn(TINY, seed=0)
    x = torch.randn(7, 1, 8, 8)
    hs = m.hidden(x)
    assert m.layer_names == ["conv1", "conv2", "fc1", "fc2"] == pt.feature_layers(m)
    assert [tuple(h.shape) for h in hs] == [(7, 2, 4, 4), (7, 4, 2, 2), (7, 6), (7, 5)]
    assert all((h >= 0).all() for h in hs)  # after ReLU
    assert torch.allclose(m(x), m.head(hs[-1]))
    # same seed, same weights; global RNG untouched
    state = torch.random.get_rng_state()
    m2 = pt.build_cnn(TINY, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))


def test_config_validation():
    with pytest.raises(ValueError, match="arch"):
        pt.CNNConfig(arch="alexnet9")
    with pytest.raises(ValueError, match="pooling"):
        pt.CNNConfig(img_size=4, channels=(2, 2, 2))


def test_extract_features_matches_hidden_and_batches():
    m = pt.build_cnn(TINY, seed=1)
    x = torch.randn(10, 1, 8, 8)
    f = pt.extract_features(m, x, batch_size=3)
    hs = m.hidden(x)
    assert set(f) == set(m.layer_names)
    for name, h in zip(m.layer_names, hs):
        assert f[name].dtype == np.float64
        # float32 features of batches of 3 against one batch of 10: equal to float32 rounding (a few ulps)
        np.testing.assert_allclose(f[name], h.detach().flatten(1).double().numpy(), rtol=1e-5, atol=1e-6)
    avg = pt.extract_features(m, TensorDataset(x, torch.zeros(10)), layers=["conv2"], spatial="avg")
    np.testing.assert_allclose(avg["conv2"], hs[1].detach().mean(dim=(2, 3)).double().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown layer"):
        pt.extract_features(m, x, layers=["fc9"])


def test_torchvision_resnet_hooks_and_head():
    m = pt.build_cnn(pt.CNNConfig(arch="resnet18", in_chans=3, img_size=32, num_classes=4), seed=0)
    x = torch.randn(2, 3, 32, 32)
    f = pt.extract_features(m, x, layers=["layer4", "avgpool"], spatial="avg")
    assert f["avgpool"].shape == (2, 512) and f["layer4"].shape == (2, 512)
    np.testing.assert_allclose(f["avgpool"], f["layer4"], rtol=1e-5, atol=1e-6)  # avgpool = mean of layer4
    pt.replace_head(m, 7)
    assert m.fc.out_features == 7
    vgg_layers = pt.feature_layers(pt.build_cnn(pt.CNNConfig(arch="vgg11", in_chans=3, img_size=32), seed=0))
    assert vgg_layers[-1] == "classifier.4"


def test_labelled_subset_and_random_labels():
    base = TensorDataset(torch.arange(10.0).view(10, 1), torch.zeros(10, dtype=torch.long))
    sub = pt.LabelledSubset(base, [2, 5], [1, 0], transform=lambda x: x * 2)
    assert len(sub) == 2 and sub[1][0].item() == 10.0 and sub[1][1] == 0
    X, y = pt.stack(sub)
    assert X.shape == (2, 1) and y.tolist() == [1, 0]
    r = pt.random_labels(20000, 4, seed=3)
    assert set(np.unique(r)) == {0, 1, 2, 3} and abs(np.bincount(r) / 20000 - 0.25).max() < 0.02
    with pytest.raises(ValueError, match="labels"):
        pt.LabelledSubset(base, [1, 2], [0])


def test_domain_shift():
    X = torch.rand(3, 1, 8, 8)
    assert torch.equal(pt.domain_shift(X, "clean"), X)
    assert torch.allclose(pt.domain_shift(X, "inverted"), 1 - X)
    low = pt.domain_shift(X, "lowres", noise=0.0)
    # a 2x2-constant image is unchanged by averaging and upsampling... up to bilinear smoothing at edges:
    flat = torch.ones(1, 1, 8, 8) * 0.3
    assert torch.allclose(pt.domain_shift(flat, "lowres", noise=0.0), flat)
    assert low.min() >= 0 and low.max() <= 1 and not torch.allclose(low, X)
    assert torch.equal(pt.domain_shift(X, "lowres", seed=1), pt.domain_shift(X, "lowres", seed=1))
    with pytest.raises(ValueError, match="domain"):
        pt.domain_shift(X, "sepia")


def _blobs(n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    X = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    X[:, 0, :4, :4] += (y == 0).float().view(-1, 1, 1) * 2
    X[:, 0, 4:, 4:] += (y == 1).float().view(-1, 1, 1) * 2
    return X, y


def test_finetune_learns_and_leaves_model_alone():
    X, y = _blobs()
    m = pt.build_cnn(pt.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(8, 8), fc=(16,)), seed=0)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    net, hist = pt.finetune(m, (X[:90], y[:90]), (X[90:], y[90:]), num_classes=3, epochs=15, lr=0.05)
    assert hist["final_accuracy"] >= 0.9 and len(hist["test_accuracy"]) == 16
    assert hist["train_loss"][-1] < hist["train_loss"][0]
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert pt.accuracy(net, (X[90:], y[90:])) == hist["final_accuracy"]
    _, sparse = pt.finetune(m, (X[:90], y[:90]), (X[90:], y[90:]), num_classes=3, epochs=15, lr=0.05, eval_every=10)
    assert sparse["eval_epochs"] == [0, 10, 15] and sparse["final_accuracy"] == hist["final_accuracy"]
    assert sparse["train_loss"] == hist["train_loss"]  # evaluating does not change the training
    with pytest.raises(ValueError, match="positive"):
        pt.finetune(m, (X, y), (X, y), 3, epochs=0)


def test_pretrain_cnn_caches_and_continues(tmp_cache):
    X, y = _blobs()
    tc = TrainConfig(epochs=2, batch_size=32, lr=3e-3, weight_decay=1e-4)
    calls = []

    def load():
        calls.append(1)
        return TensorDataset(X, y)

    m1, meta1 = pt.pretrain_cnn(TINY, tc, load, {"toy": 1}, device="cpu")
    m2, meta2 = pt.pretrain_cnn(TINY, tc, load, {"toy": 1}, device="cpu")
    assert calls == [1] and not meta1["from_cache"] and meta2["from_cache"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    cfg2 = pt.CNNConfig(in_chans=1, img_size=8, num_classes=2, channels=(2, 4), fc=(6, 5))
    m3, meta3 = pt.pretrain_cnn(cfg2, tc, TensorDataset(X, y % 2), {"toy": 2}, init_from=(m1, meta1["key"]),
                                device="cpu")
    assert m3.head.out_features == 2 and meta3["data"]["init_from"] == meta1["key"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_binary_pairs_counts():
    assert len(pt.binary_pairs(pt.FASHION_GROUPS["clothing"])) == 15
    assert len(pt.binary_pairs(pt.CIFAR10_GROUPS["artificial"])) == 6


def test_source_settings_and_groups():
    assert pt.source_settings("default", epochs=1)["epochs"] == 1
    with pytest.raises(ValueError, match="unknown source setting"):
        pt.source_settings("default", epochz=1)
    nat, art = set(pt.IMAGENET_GROUPS["natural"]), set(pt.IMAGENET_GROUPS["artificial"])
    assert not nat & art and len(nat | art) == 1000
    with pytest.raises(ValueError, match="unknown source"):
        pt.source_model(pt.source_settings("smoke"), "animals")


def test_pretrained_and_init_smoke_source(tmp_cache):
    s = pt.source_settings("smoke", n_source=64)
    pre, init, meta, tf = pt.pretrained_and_init(s, "footwear_bags", seed=3, device="cpu")
    assert tf is None and meta["data"]["classes"] == [5, 7, 8, 9] and len(meta["source_indices"]) == 64
    again = pt.build_cnn(pt.CNNConfig(channels=(4, 8, 8), fc=(32, 16), num_classes=4), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(init.state_dict().values(), again.state_dict().values()))
    assert not torch.equal(pre.head.weight, init.head.weight)  # trained
    x = pt.model_input(torch.full((2, 1, 28, 28), 0.286), "fashion-mnist")
    assert torch.allclose(x, torch.zeros_like(x), atol=1e-3)


def test_the_related_source_sees_every_target_class_but_no_target_image(tmp_cache):
    """Section 7.2's protocol: the source (ImageNet) is related to the target tasks (Cifar's classes), the
    target images are new. ``all``: the ten classes, balanced; a footwear pair drawn with ``exclude`` shares no
    image with the source, while ``clothing`` shares no class with it."""
    assert pt.FASHION_GROUPS["all"] == tuple(range(10))
    assert not set(pt.FASHION_GROUPS["clothing"]) & {5, 7}
    s = pt.source_settings("smoke", n_source=100)
    _, meta = pt.source_model(s, "all", seed=1, device="cpu")
    src = np.asarray(meta["source_indices"])
    assert meta["data"]["classes"] == list(range(10)) and len(src) == 100
    labels = image_data.load_fashion_mnist("train")[1]
    assert np.array_equal(np.bincount(labels[src], minlength=10), np.full(10, 10))
    _, _, target = pt.load_images("fashion-mnist", "train", (5, 7), 20, seed=1, exclude=src)
    assert len(target) == 40 and not set(target.tolist()) & set(src.tolist())


def test_domain_sets_offline_and_relabelled():
    (X_tr, y_tr), (X_te, y_te), idx = pt.domain_sets("fashion-mnist", "inverted", 3, 2, classes=(0, 5), seed=0)
    assert X_tr.shape == (6, 1, 28, 28) and X_te.shape == (4, 1, 28, 28) and len(idx) == 6
    assert np.array_equal(np.bincount(y_tr.numpy()), [3, 3])
    (C_tr, _), _, idx_c = pt.domain_sets("fashion-mnist", "clean", 3, 2, classes=(0, 5), seed=0)
    assert np.array_equal(idx, idx_c)
    mean, std = 0.2860, 0.3530  # inverted pixels 1 - x, both standardised with Fashion-MNIST's statistics
    np.testing.assert_allclose((X_tr * std + mean).numpy(), 1 - (C_tr * std + mean).numpy(), atol=1e-5)
    r = pt.relabelled((X_tr, y_tr), [1, 1, 1, 0, 0, 0])
    assert r[0][1].item() == 1 and torch.equal(r[0][0], X_tr[0])
    assert np.array_equal(pt.labels_of((X_tr, y_tr)), y_tr.numpy()) and pt.images_of((X_tr, y_tr)) is X_tr
    sub = pt.LabelledSubset(TensorDataset(X_tr, y_tr), [0, 1], [0, 1])
    assert pt.relabelled(sub, [1, 0]).targets.tolist() == [1, 0] and pt.labels_of(sub).tolist() == [0, 1]
    with pytest.raises(ValueError, match="labels"):
        pt.relabelled((X_tr, y_tr), [0])


def test_random_label_model_trains_from_base(tmp_cache):
    X, y = _blobs(60)
    base = pt.build_cnn(TINY, seed=0)
    tc = TrainConfig(epochs=1, batch_size=16, lr=1e-3, weight_decay=1e-4, schedule="constant")
    m, meta = pt.random_label_model(base, "base-key", TINY, (X, y), 5, tc, {"toy": 1}, device="cpu")
    assert m.head.out_features == 5 and meta["data"]["init_from"] == "base-key"
    assert meta["data"]["labels"] == "uniform random" and meta["data"]["n"] == 60
    assert not torch.equal(m.blocks[0][0].weight, base.blocks[0][0].weight)  # trained further, base untouched
    assert torch.equal(base.blocks[0][0].weight, pt.build_cnn(TINY, seed=0).blocks[0][0].weight)


def test_domain_and_group_checks_name_the_parameter():
    ok = {"dataset": "fashion-mnist", "domains": ["clean", "lowres", "inverted"], "train_per_class": [1, 2, 3]}
    pt.check_domains(ok)
    pt.check_domains({"dataset": "office31", "domains": ["amazon", "webcam", "dslr"], "train_per_class": [0, 0, 0]})
    with pytest.raises(ValueError, match=r"parameter 'domains': \['amazon'\] are not domains of 'fashion-mnist'"):
        pt.check_domains({**ok, "domains": ["clean", "amazon", "inverted"]})
    with pytest.raises(ValueError, match="parameter 'train_per_class'"):
        pt.check_domains({**ok, "train_per_class": [1, 2]})
    with pytest.raises(ValueError, match="parameter 'dataset'"):
        pt.check_domains({**ok, "dataset": "mnist"})
    pt.check_groups({"target": "cifar10", "groups": ["natural", "artificial"]})
    with pytest.raises(ValueError, match=r"parameter 'groups': \['natural'\] are not class groups of 'fashion-mnist'"):
        pt.check_groups({"target": "fashion-mnist", "groups": ["clothing", "natural"]})


# ----------------------------------------------------------------------------- Section 7.2's comparison


def _task(seed=0, n=40, m=30):
    r = np.random.default_rng(seed)
    y_tr, y_te = np.sign(r.standard_normal(n)), np.sign(r.standard_normal(m))
    good = (np.c_[y_tr, r.standard_normal((n, 3)) * 0.1], np.c_[y_te, r.standard_normal((m, 3)) * 0.1])
    noise = (r.standard_normal((n, 60)), r.standard_normal((m, 60)))
    return {"good": good, "noise": noise}, y_tr, y_te


def test_evaluate_task_alignment_and_linear_models():
    from layersim.measures import alignment as al

    reps, y_tr, y_te = _task()
    tau = al.thresholds_for(40)
    run = pt.evaluate_task(reps, y_tr, y_te, tau, ["good", "noise"], [0.1, 1.0], steps=20, record=[0, 5, 20])
    for name, (A, _) in reps.items():
        c, a = al.curve_and_area(A, y_tr, tau)  # thin SVD: same curve as the Gram route
        np.testing.assert_allclose(run["curves"][name], c, atol=1e-9)
        assert run["areas"][name] == pytest.approx(a)
    assert run["areas"]["good"] > run["areas"]["noise"] and run["dims"] == {"good": 4, "noise": 60}
    g = run["gd"]["good"]["logistic"]
    ref = al.best_linear_curves(al.prepare(reps["good"][0]), y_tr, [0.1, 1.0], loss="logistic", steps=20,
                                Phi_test=al.prepare(reps["good"][1]), y_test=y_te, record=[0, 5, 20])
    np.testing.assert_allclose(g["test"], ref["test"])
    assert list(g["steps"]) == [0, 5, 20] and g["lr"] == ref["lr"]
    assert g["test_error"][-1] < 0.1 < run["gd"]["noise"]["logistic"]["test_error"][-1]
    with pytest.raises(ValueError, match="not among"):
        pt.evaluate_task(reps, y_tr, y_te, tau, ["missing"], [0.1], 5)
    with pytest.raises(ValueError, match="rows"):
        pt.evaluate_task(reps, y_tr[:-1], y_te, tau, [], [0.1], 5)


def _run(areas, final_test):
    """A fake evaluate_task result: given areas and final test losses per trained representation."""
    gd = {n: {loss: {"train": np.array([1.0, v + 0.05]), "test": np.array([1.0, v]), "steps": np.array([0, 1]),
                     "test_error": np.array([0.5, v / 2])} for loss in pt.LOSSES} for n, v in final_test.items()}
    return {"areas": areas, "gd": gd}


def test_transfer_claims_values_from_known_runs():
    runs = [_run({"pre": 0.5, "init": 0.1, "in": 0.3, "h1": 0.2, "h2": 0.6}, {"pre": 0.2, "h1": 0.5, "h2": 0.3}),
            _run({"pre": 0.3, "init": 0.2, "in": 0.4, "h1": 0.2, "h2": 0.2}, {"pre": 0.4, "h1": 0.3, "h2": 0.5})]
    # measured by the library, judged by the thresholds registered for a08 (as its run does)
    c = registry.judge("alignment/a08_pretrained_cnn", pt.transfer_claims(runs, "pre", "init", "in", ["h1", "h2"],
                                                                           subject="cnn"))
    assert list(c) == ["pretrained_beats_init_and_input", "cnn_beats_handcrafted", "cnn_best_test_performance"]
    first = c["pretrained_beats_init_and_input"]
    assert first["value"] == pytest.approx(0.4 - 0.35) and first["holds"] and first["tasks_holding"] == 1
    hand = c["cnn_beats_handcrafted"]
    assert hand["value"] == pytest.approx(0.4 - 0.4) and not hand["holds"] and hand["tasks_holding"] == 1
    best = c["cnn_best_test_performance"]  # mean final test: pre 0.3, h1 0.4, h2 0.4
    assert best["value"] == pytest.approx(0.1) and best["holds"] and best["tasks_holding"] == 1
    assert best["final_test_classification_error"]["pre"] == pytest.approx(0.15)
    with pytest.raises(ValueError, match="gradient descent"):
        pt.transfer_claims(runs, "init", "pre", "in", ["h1"])
