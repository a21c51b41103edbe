"""Tests of layersim.papers.alignment.pretrain: the source networks and their data, a10's checks and random-label
source, and Section 7.2's comparison of representations."""

import numpy as np
import pytest
import torch

from layersim.inputs import image_data, labelled
from layersim.nets import cnn
from layersim.notebook import registry
from layersim.papers.alignment import pretrain as pt
from layersim.train import linear
from layersim.train.training import TrainConfig

from builders import TINY_CNN, blobs


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
    again = cnn.build_cnn(cnn.CNNConfig(channels=(4, 8, 8), fc=(32, 16), num_classes=4), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(init.state_dict().values(), again.state_dict().values()))
    assert not torch.equal(pre.head.weight, init.head.weight)  # trained


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
    _, _, target = labelled.load_images("fashion-mnist", "train", (5, 7), 20, seed=1, exclude=src)
    assert len(target) == 40 and not set(target.tolist()) & set(src.tolist())


def test_random_label_model_trains_from_base(tmp_cache):
    X, y = blobs(60)
    base = cnn.build_cnn(TINY_CNN, seed=0)
    tc = TrainConfig(epochs=1, batch_size=16, lr=1e-3, weight_decay=1e-4, schedule="constant")
    m, meta = pt.random_label_model(base, "base-key", TINY_CNN, (X, y), 5, tc, {"toy": 1}, device="cpu")
    assert m.head.out_features == 5 and meta["data"]["init_from"] == "base-key"
    assert meta["data"]["labels"] == "uniform random" and meta["data"]["n"] == 60
    assert not torch.equal(m.blocks[0][0].weight, base.blocks[0][0].weight)  # trained further, base untouched
    assert torch.equal(base.blocks[0][0].weight, cnn.build_cnn(TINY_CNN, seed=0).blocks[0][0].weight)


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
    ref = linear.best_linear_curves(al.prepare(reps["good"][0]), y_tr, [0.1, 1.0], loss="logistic", steps=20,
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
