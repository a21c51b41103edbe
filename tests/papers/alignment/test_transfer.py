"""Tests of layersim.papers.alignment.transfer: the steps of the alignment paper's transfer notebooks (a08, a09, a10:
Figures 13-16, 19-21, Table 1), each against independent computations or values worked out by hand."""

import collections
import itertools

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from layersim.inputs import image_data, labelled
from layersim.measures import alignment as al
from layersim.nets import cnn
from layersim.notebook import registry, settings
from layersim.papers.alignment import pretrain as pt, transfer
from layersim.train import transfer_learning
from layersim.train.training import TrainConfig


CNN28 = cnn.CNNConfig(in_chans=1, img_size=28, num_classes=3, channels=(2, 3), fc=(5, 4))


def _images(n, seed=0):
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


#: Fashion-MNIST's pixel mean and standard deviation: the networks read (x - MEAN) / STD
MEAN, STD = 0.2860, 0.3530


def _curve_and_area_by_hand(A, y, tau):
    """eq. 2 on the paper's form of ``A`` (rows flattened, a bias column, unit rows) from numpy's full SVD (the
    directions of sigma = 0 count at tau = 0), and its area: the trapezoidal mean over ``tau`` divided by ||y||^2."""
    P = np.c_[np.asarray(A, dtype=np.float64).reshape(len(A), -1), np.ones(len(A))]
    P = P / np.linalg.norm(P, axis=1, keepdims=True)
    U, s, _ = np.linalg.svd(P)
    s = np.r_[s, np.zeros(len(P) - len(s))]
    proj = (U.T @ y) ** 2
    curve = np.array([proj[s >= t].sum() for t in tau])
    return curve, np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(tau)) / (tau[-1] - tau[0]) / (y @ y)


def _hidden(net, X):
    """Every hidden layer of a SmallCNN on images ``X`` in [0, 1] (standardised first), flattened to float64."""
    with torch.no_grad():
        return [h.flatten(1).double().numpy() for h in net.eval().hidden((X - MEAN) / STD)]


def _train_index():
    """Fashion-MNIST's training split: ``(labels, {image bytes: index})``, to find which images a set holds."""
    images, labels = image_data.load_fashion_mnist("train")
    return labels, {im.tobytes(): i for i, im in enumerate(images)}


def _indices(X, index, invert=False):
    """The training-split indices of standardised images ``X [N, 1, 28, 28]`` (``invert``: of 1 - x)."""
    raw = X[:, 0].numpy().astype(np.float64) * STD + MEAN
    raw = np.rint(255 * (1 - raw if invert else raw)).astype(np.uint8)
    return [index[r.tobytes()] for r in raw]


# ----------------------------------------------------------------------------- shared steps


def test_recorded_steps_are_the_log_grid_from_step_zero():
    for steps, n in [(50, 40), (500, 40), (2000, 60), (1, 5)]:
        ref = np.unique(np.r_[0, np.geomspace(1, steps, n).astype(int)])
        got = transfer.recorded_steps(steps, n)
        assert np.array_equal(got, ref) and got[0] == 0 and got[-1] == steps and np.all(np.diff(got) > 0)
    with pytest.raises(ValueError, match="positive"):
        transfer.recorded_steps(0, 10)
    with pytest.raises(ValueError, match="positive"):
        transfer.recorded_steps(10, 0)


def test_without_indices_and_network_input():
    meta = {"key": "k", "source_indices": np.arange(3), "history": []}
    assert transfer.without_indices(meta) == {"key": "k", "history": []} and "source_indices" in meta
    assert transfer.network_input("small") == (None, "flatten")
    tf, spatial = transfer.network_input("resnet18")
    assert spatial == "avg" and tuple(tf(torch.rand(1, 3, 32, 32)).shape) == (1, 3, 224, 224)
    with pytest.raises(ValueError, match="unknown arch"):
        transfer.network_input("alexnet")


def test_accuracy_table_rows_sources_columns_targets():
    acc = {("a", "a"): 90.0, ("a", "b"): 80.125, ("b", "a"): 70.5, ("b", "b"): 60.0, ("None", "a"): 1.0,
           ("None", "b"): 2.0}
    assert transfer.accuracy_table(acc, ["a", "b"], ["a", "b"]) == (
        "| source \\ target | a | b |\n|---|---|---|\n| a | 90.00 | 80.12 |\n| b | 70.50 | 60.00 |")
    assert transfer.accuracy_table(acc, ["None", "a", "b"], ["a", "b"], digits=1, skip_same=True) == (
        "| source \\ target | a | b |\n|---|---|---|\n| None | 1.0 | 2.0 |\n| a | - | 80.1 |\n| b | 70.5 | - |")


# ----------------------------------------------------------------------------- a08


def test_random_pairs_are_distinct_pairs_of_the_classes_drawn_by_the_seed():
    classes = [5, 7, 8, 9]
    every = set(itertools.combinations(classes, 2))
    for n_tasks, seed in [(2, 0), (5, 0), (3, 4), (6, 1), (10, 2)]:
        got = transfer.random_pairs(classes, n_tasks, seed=seed)
        assert len(set(got)) == len(got) == min(n_tasks, 6) and set(got) <= every
        assert transfer.random_pairs(classes, n_tasks, seed=seed) == got  # seeded
    assert set(transfer.random_pairs(classes, 10, seed=3)) == every  # more asked than there are: all of them
    # other seeds draw other tasks, every pair about equally often (300 draws of 2 of 6: 100 each)
    counts = collections.Counter(p for seed in range(300) for p in transfer.random_pairs(classes, 2, seed=seed))
    assert set(counts) == every and min(counts.values()) > 60
    with pytest.raises(ValueError, match="positive"):
        transfer.random_pairs(classes, 0)
    with pytest.raises(ValueError, match="no pair"):
        transfer.random_pairs([3], 1)


def test_unit_rows_flatten_and_normalise():
    A = np.arange(1.0, 25.0).reshape(3, 2, 4)
    U = transfer.unit_rows(A)
    assert U.dtype == np.float64 and U.shape == (3, 8)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0)
    np.testing.assert_allclose(U[1], A[1].ravel() / np.sqrt((A[1] ** 2).sum()))
    with pytest.raises(ValueError, match="zeros"):
        transfer.unit_rows(np.zeros((2, 3)))


def test_source_summary_names_data_cache_losses_and_last_layer():
    meta = {"data": {"name": "fashion-mnist"}, "from_cache": True, "history": [{"loss": 1.23456}, {"loss": 0.5}]}
    s = transfer.source_summary(meta, ["conv1", "fc2"])
    assert s == ("source: {'name': 'fashion-mnist'}; from cache: True; training loss per epoch [1.235, 0.5]; "
                 "hidden layers ['conv1', 'fc2'], last = 'fc2'")
    assert "source: ImageNet" in transfer.source_summary({"source": "ImageNet", "from_cache": None}, ["avgpool"])


def test_image_representations_are_the_layers_pixels_hog_and_rbf_features():
    from skimage.feature import hog

    pre, init = cnn.build_cnn(CNN28, seed=0), cnn.build_cnn(CNN28, seed=1)
    layers = cnn.feature_layers(pre)
    X_tr, X_te = _images(6, 0), _images(4, 1)
    gamma = 0.7
    reps = transfer.image_representations(pre, init, layers, X_tr, X_te, "fashion-mnist", gamma)
    assert list(reps) == ([f"pre-trained {n}" for n in layers] + [f"init {n}" for n in layers]
                          + [transfer.PRETRAINED, transfer.INIT, transfer.INPUT, "HOG", "RBF"])
    # every hidden layer of each network on the standardised images
    for tag, net in (("pre-trained", pre), ("init", init)):
        for X, part in ((X_tr, 0), (X_te, 1)):
            for n, h in zip(layers, _hidden(net, X)):
                np.testing.assert_allclose(reps[f"{tag} {n}"][part], h, rtol=1e-5, atol=1e-6)
    assert reps[transfer.PRETRAINED] is reps[f"pre-trained {layers[-1]}"]
    np.testing.assert_array_equal(reps[transfer.INPUT][1], X_te.reshape(4, -1).numpy().astype(np.float64))
    # HOG (scikit-image): 9 orientations, cells of 8 x 8 pixels, blocks of 2 x 2 cells
    ref = [hog(x[0].numpy().astype(np.float64), orientations=9, pixels_per_cell=(8, 8), cells_per_block=(2, 2))
           for x in X_tr]
    np.testing.assert_allclose(reps["HOG"][0], np.stack(ref))
    assert reps["HOG"][0].shape == (6, 144)
    # RBF: exp(-gamma ||x - c||^2) of unit-length images, the centres all training images
    u = lambda X: X.reshape(len(X), -1).double().numpy() / np.linalg.norm(X.reshape(len(X), -1).double().numpy(),
                                                                           axis=1, keepdims=True)
    d2 = ((u(X_te)[:, None, :] - u(X_tr)[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(reps["RBF"][1], np.exp(-gamma * d2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.diag(reps["RBF"][0]), 1.0)


def test_cnn_transfer_runs_compare_every_task(capsys):
    pre, init = cnn.build_cnn(CNN28, seed=0), cnn.build_cnn(CNN28, seed=1)
    layers = cnn.feature_layers(pre)
    pairs = [(7, 9), (5, 8)]
    tau = al.thresholds_for(8)
    record = transfer.recorded_steps(5, 3)
    runs = transfer.cnn_transfer_runs(pre, init, layers, pairs, "fashion-mnist", 4, tau, [0.1, 1.0], 5, record,
                                      rbf_bandwidth=1.0, seed=3)
    out = capsys.readouterr().out.splitlines()
    assert len(runs) == 2 and [r["pair"] for r in runs] == pairs and len(out) == 3
    assert out[0].startswith("task 1/2 classes (7, 9): alignment area input ") and out[2].startswith("dimensions: ")
    for k, (pair, r) in enumerate(zip(pairs, runs)):
        assert set(r["gd"]) == set(transfer.TRAINED) and r["dims"]["input"] == 784 and r["dims"]["RBF"] == 8
        # the k-th task's training images (pixels in [0, 1]) and labels, eq. 2 on the pixels by hand
        X, t, _ = labelled.load_images("fashion-mnist", "train", pair, 4, seed=3 + k, normalize=False)
        y = np.where(t.numpy() == 1, 1.0, -1.0)
        c, a = _curve_and_area_by_hand(X, y, tau)
        np.testing.assert_allclose(r["curves"]["input"], c, rtol=1e-8, atol=1e-9)
        assert r["areas"]["input"] == pytest.approx(a, rel=1e-8)
        hog = r["gd"]["HOG"]["squared"]
        assert hog["lr"] in (0.1, 1.0) and list(hog["steps"]) == [0, 1, 2, 5]
    quiet = transfer.cnn_transfer_runs(pre, init, layers, pairs[:1], "fashion-mnist", 4, tau, [1.0], 5, record,
                                       rbf_bandwidth=1.0, seed=3, log=None)
    assert capsys.readouterr().out == "" and quiet[0]["areas"] == runs[0]["areas"]


def test_layer_areas_step_sizes_and_test_error_are_means_over_tasks(fake_runs):
    runs = fake_runs
    areas = transfer.layer_areas(runs, ["c1", "c2"])
    assert list(areas) == ["init", "pre-trained"]
    assert areas["pre-trained"][1] == pytest.approx((runs[0]["areas"]["pre-trained c2"]
                                                     + runs[1]["areas"]["pre-trained c2"]) / 2)
    steps = transfer.chosen_step_sizes(runs, ["HOG"])
    assert steps == {"HOG": {loss: [runs[0]["gd"]["HOG"][loss]["lr"], runs[1]["gd"]["HOG"][loss]["lr"]]
                             for loss in pt.LOSSES}}
    err = transfer.final_test_error(runs, transfer.TRAINED)
    assert err["RBF"] == pytest.approx(np.mean([r["gd"]["RBF"]["logistic"]["test_error"][-1] for r in runs]))
    text = transfer.learning_summary(runs).splitlines()
    assert len(text) == 3 and text[0].startswith("final losses (mean over tasks): {'CNN (pre-trained) squared train'")
    assert text[2] == f"chosen step sizes: {transfer.chosen_step_sizes(runs, transfer.TRAINED)}"


def test_cnn_transfer_numbers_are_what_a08_recorded(fake_runs):
    runs = fake_runs
    meta = {"key": "k", "source_indices": [1, 2]}
    nums = transfer.cnn_transfer_numbers(runs, ["c1", "c2"], meta, [(0, 1), (1, 2)], np.arange(3.0))
    assert list(nums) == ["source_meta", "pairs", "thresholds", "mean_area", "layer_area", "layers", "areas_per_task",
                          "mean_curves", "final_losses", "chosen_step_sizes"]
    assert nums["source_meta"] == {"key": "k"} and nums["mean_area"] == pt.mean_areas(runs)
    np.testing.assert_array_equal(nums["areas_per_task"]["HOG"], [runs[0]["areas"]["HOG"], runs[1]["areas"]["HOG"]])
    assert list(nums["mean_curves"]) == ["input", "CNN (init)", "CNN (pre-trained)", "HOG", "RBF"]
    np.testing.assert_allclose(nums["mean_curves"]["RBF"], (runs[0]["curves"]["RBF"] + runs[1]["curves"]["RBF"]) / 2)
    final = pt.final_losses(runs)
    assert nums["final_losses"]["HOG | logistic | test"] == final[("HOG", "logistic", "test")]
    assert len(nums["final_losses"]) == len(final) == 12


# ----------------------------------------------------------------------------- a09


def test_source_networks_are_the_cached_source_models(tmp_cache, capsys):
    s = pt.source_settings("smoke", n_source=64)
    models, metas = transfer.source_networks(s, ["footwear_bags"], seed=2, device="cpu")
    again, meta = pt.source_model(s, "footwear_bags", seed=2, device="cpu")
    assert meta["from_cache"] and meta["key"] == metas["footwear_bags"]["key"]
    assert all(torch.equal(a, b) for a, b in zip(models["footwear_bags"].state_dict().values(),
                                                  again.state_dict().values()))
    out = capsys.readouterr().out
    assert out.startswith("source 'footwear_bags': classes [5, 7, 8, 9], 64 images, from cache: False")


def test_seen_indices_only_for_the_same_data_set():
    metas = {"a": {"source_indices": np.array([5, 1, 3])}, "b": {"source_indices": np.array([3, 9])}}
    assert np.array_equal(transfer.seen_indices(metas, "fashion-mnist", "fashion-mnist"), [1, 3, 5, 9])
    assert transfer.seen_indices(metas, "imagenet", "cifar10") is None


def test_similarity_tasks_subtract_the_dissimilar_source():
    models = {"g": cnn.build_cnn(CNN28, seed=0), "h": cnn.build_cnn(CNN28, seed=1)}
    groups, target_groups = ["g", "h"], {"g": (0, 2, 4), "h": (5, 7)}
    layers = ["conv2", "fc1", "fc2"]
    tau = al.thresholds_for(6)
    tasks = transfer.similarity_tasks(models, groups, target_groups, "fashion-mnist", layers, 3, tau, seed=1, log=None)
    assert [(r["group"], r["pair"]) for r in tasks] == [("g", (0, 2)), ("g", (0, 4)), ("g", (2, 4)), ("h", (5, 7))]
    # the last task by hand: 3 test images of classes 5 and 7, eq. 2 on each layer of the similar source h minus
    # that of the dissimilar g, divided by ||y||^2 = 6
    X, t, _ = labelled.load_images("fashion-mnist", "test", (5, 7), 3, seed=1, normalize=False)
    y = np.where(t.numpy() == 1, 1.0, -1.0)
    (_, *h_sim), (_, *h_dis) = _hidden(models["h"], X), _hidden(models["g"], X)  # conv1 is not asked for
    for name, A_sim, A_dis in zip(layers, h_sim, h_dis):
        (c_sim, a_sim), (c_dis, a_dis) = _curve_and_area_by_hand(A_sim, y, tau), _curve_and_area_by_hand(A_dis, y, tau)
        np.testing.assert_allclose(tasks[-1]["diff"][name], (c_sim - c_dis) / 6, rtol=1e-8, atol=1e-9)
        assert tasks[-1]["area_diff"][name] == pytest.approx(a_sim - a_dis, rel=1e-8, abs=1e-9)
    # the same network as both sources: no difference anywhere
    same = transfer.similarity_tasks({"g": models["g"], "h": models["g"]}, groups, target_groups, "fashion-mnist",
                                     layers, 3, tau, seed=1, log=None)
    for r in same:
        for name in layers:
            assert np.all(r["diff"][name] == 0) and r["area_diff"][name] == 0


def test_difference_summary_means_and_counts():
    tasks = [{"diff": {"a": np.array([0.0, 1.0]), "b": np.array([0.0, -1.0])}, "area_diff": {"a": 0.2, "b": -0.1}},
             {"diff": {"a": np.array([0.0, 3.0]), "b": np.array([0.0, 2.0])}, "area_diff": {"a": 0.4, "b": 0.3}}]
    mean_diff, mean_area, positive = transfer.difference_summary(tasks, ["a", "b"])
    np.testing.assert_allclose(mean_diff["a"], [0.0, 2.0])
    np.testing.assert_allclose(mean_diff["b"], [0.0, 0.5])
    assert mean_area == pytest.approx({"a": 0.3, "b": 0.1}) and positive == {"a": 2, "b": 1}


def test_finetune_grid_is_every_source_on_every_target(capsys, monkeypatch):
    small = cnn.CNNConfig(in_chans=1, img_size=28, num_classes=2, channels=(2,), fc=(4,))
    models = {"g": cnn.build_cnn(small, seed=0), "h": cnn.build_cnn(small, seed=1)}
    target_groups = {"g": (0, 1), "h": (5, 7, 9)}
    acc, hist = transfer.finetune_grid(models, ["g", "h"], target_groups, "fashion-mnist", 4, epochs=1, lr=0.01,
                                       batch_size=8, seed=0, exclude=np.arange(100))
    assert list(acc) == [("g", "g"), ("h", "g"), ("g", "h"), ("h", "h")]
    assert list(hist) == ["g -> g", "h -> g", "g -> h", "h -> h"] and len(capsys.readouterr().out.splitlines()) == 4
    for (src, tg), a in acc.items():
        h = hist[f"{src} -> {tg}"]
        assert a == 100 * h["final_accuracy"] and h["eval_epochs"] == [0, 1]
        correct = a / 100 * 1000 * len(target_groups[tg])  # the target classes' whole test split: 1000 a class
        assert correct == pytest.approx(round(correct), abs=1e-6)

    # what each fine-tuning gets: the source network, 4 training images per target class that no source saw
    # (only 10 per class are not excluded), the whole test split of those classes, labels 0..k-1
    labels, index = _train_index()
    allowed = np.concatenate([np.flatnonzero(labels == c)[:10] for c in range(10)])
    calls = []

    def fake_finetune(model, train, test, num_classes, **kw):
        calls.append((model, train, test, num_classes, kw))
        return None, {"final_accuracy": len(calls) / 4}

    monkeypatch.setattr(transfer_learning, "finetune", fake_finetune)
    acc, hist = transfer.finetune_grid(models, ["g", "h"], target_groups, "fashion-mnist", 4, epochs=3, lr=0.05,
                                       batch_size=8, seed=0, exclude=np.setdiff1d(np.arange(len(labels)), allowed),
                                       log=None)
    assert acc == {("g", "g"): 25.0, ("h", "g"): 50.0, ("g", "h"): 75.0, ("h", "h"): 100.0}
    assert hist["g -> h"] == {"final_accuracy": 0.75}
    for (model, (X, y), (X_test, y_test), k, kw), (src, tg) in zip(calls, acc):
        classes = np.array(target_groups[tg])
        assert model is models[src] and k == len(classes)
        assert kw == dict(epochs=3, lr=0.05, batch_size=8, seed=0, device="cpu", eval_every=3)
        assert np.bincount(y.numpy()).tolist() == [4] * k and np.bincount(y_test.numpy()).tolist() == [1000] * k
        idx = _indices(X, index)
        assert set(idx) <= set(allowed.tolist()) and len(set(idx)) == 4 * k
        np.testing.assert_array_equal(labels[idx], classes[y.numpy()])


A09 = "alignment/a09_source_similarity"


def test_similarity_claims_by_hand():
    mean_diff = {"c": np.array([0.0, 0.1, -0.1]), "f": np.array([0.0, 0.2, 0.3])}
    acc = {("g", "g"): 80.0, ("h", "g"): 70.0, ("g", "h"): 90.0, ("h", "h"): 92.0}
    # measured by the library, judged by the thresholds registered for a09 (as its run does)
    c = registry.judge(A09, transfer.similarity_claims(mean_diff, {"c": 0.01, "f": 0.2}, {"c": 3, "f": 5}, 6, acc,
                                                       ["g", "h"]))
    more = c["similar_source_more_aligned"]
    assert more["holds"] and more["value"] == 0.01 and more["grows_toward_output"] and more["n_tasks"] == 6
    assert more["fraction_of_points_positive"] == 0.75 and more["fraction_of_layers_positive_everywhere"] == 0.5
    better = c["similar_source_better_finetune"]
    assert better["per_target"] == {"g": 10.0, "h": 2.0} and better["value"] == 2.0 and better["holds"]
    acc[("g", "h")] = 95.0
    assert not registry.judge(A09, transfer.similarity_claims(mean_diff, {"c": -0.1, "f": 0.2}, {}, 6, acc, ["g", "h"]))[
        "similar_source_better_finetune"]["holds"]


def test_similarity_numbers_are_what_a09_recorded():
    tasks = [{"group": "g", "pair": (0, 1), "diff": {}, "area_diff": {"c": 0.1, "f": 0.2}}]
    nums = transfer.similarity_numbers({"g": {"key": 1, "source_indices": [0]}}, ["c", "f"], [0.0], tasks,
                                       {"c": np.zeros(1)}, {"c": 0.1}, {("g", "h"): 50.0}, {"g -> h": {}})
    assert list(nums) == ["sources", "layers", "thresholds", "mean_difference_curves", "mean_area_difference",
                          "task_area_differences", "finetune_accuracy", "finetune_history"]
    assert nums["sources"] == {"g": {"key": 1}} and nums["finetune_accuracy"] == {"g -> h": 50.0}
    assert nums["task_area_differences"] == [{"group": "g", "pair": (0, 1), "c": 0.1, "f": 0.2}]


# ----------------------------------------------------------------------------- a10


def test_none_network_is_the_source_cnn_with_its_key_and_config(tmp_cache, monkeypatch):
    s = pt.source_settings("smoke", n_source=64)
    base, key, cfg, meta = transfer.none_network(s, "footwear_bags", seed=1, device="cpu")
    ref, ref_meta = pt.source_model(s, "footwear_bags", seed=1, device="cpu")
    assert key == meta["key"] == ref_meta["key"] and cfg == cnn.CNNConfig(channels=(4, 8, 8), fc=(32, 16), num_classes=4)
    assert all(torch.equal(a, b) for a, b in zip(base.state_dict().values(), ref.state_dict().values()))
    fake = {"model": {**meta["model"]}, "from_cache": None}
    monkeypatch.setattr(pt, "pretrained_and_init", lambda *a, **k: (base, None, fake, None))
    assert transfer.none_network({**s, "arch": "resnet18", "weights": "W"})[1] == "torchvision-resnet18-W"


def test_domain_data_draws_disjoint_images_of_every_class_none_excluded():
    labels, index = _train_index()
    allowed = np.concatenate([np.flatnonzero(labels == c)[:10] for c in range(10)])  # the only images not excluded
    exclude = np.setdiff1d(np.arange(len(labels)), allowed)
    domains, per = ["clean", "lowres", "inverted"], [3, 1, 4]
    train, test, n_classes = transfer.domain_data("fashion-mnist", domains, per, 1, seed=0, exclude=exclude, log=None)
    assert n_classes == 10
    for d, k in zip(domains, per):
        assert train[d][0].shape == (10 * k, 1, 28, 28) and test[d][0].shape == (10, 1, 28, 28)
        assert np.bincount(train[d][1].numpy(), minlength=10).tolist() == [k] * 10
        assert np.bincount(test[d][1].numpy(), minlength=10).tolist() == [1] * 10
    # the clean and the inverted images, found in the training split: allowed ones, of their class, disjoint
    clean, inverted = _indices(train["clean"][0], index), _indices(train["inverted"][0], index, invert=True)
    for idx, d in ((clean, "clean"), (inverted, "inverted")):
        assert set(idx) <= set(allowed.tolist()) and len(set(idx)) == len(idx)
        np.testing.assert_array_equal(labels[idx], train[d][1].numpy())
    assert not set(clean) & set(inverted)
    with pytest.raises(ValueError, match="one entry per domain"):
        transfer.domain_data("fashion-mnist", domains, [1, 2], 1)


def test_random_label_sources_are_the_cached_random_label_models(tmp_cache, capsys):
    base = cnn.build_cnn(CNN28, seed=0)
    train = {"a": (_images(12, 0), torch.arange(12) % 3), "b": (_images(9, 1), torch.arange(9) % 3)}
    nets, metas = transfer.random_label_sources(base, "base", CNN28, train, "toy", ["a", "b"], [4, 3], 3, epochs=1,
                                                lr=1e-3, milestones=[], batch_size=4, seed=5, device="cpu")
    assert list(nets) == ["None", "a", "b"] and nets["None"] is base and list(metas) == ["a", "b"]
    assert len(capsys.readouterr().out.splitlines()) == 2
    cfg = TrainConfig(epochs=1, batch_size=4, lr=1e-3, weight_decay=1e-4, schedule="multistep", milestones=(), seed=5)
    ref, meta = pt.random_label_model(base, "base", CNN28, train["b"], 3, cfg,
                                      {"name": "toy", "domain": "b", "train_per_class": 3, "seed": 5}, device="cpu")
    assert meta["from_cache"] and meta["key"] == metas["b"]["key"]
    assert all(torch.equal(x, y) for x, y in zip(nets["b"].state_dict().values(), ref.state_dict().values()))


def test_finetune_domains_and_accuracy_drops(monkeypatch):
    nets = {"None": cnn.build_cnn(CNN28, seed=0), "a": cnn.build_cnn(CNN28, seed=1), "b": cnn.build_cnn(CNN28, seed=2)}
    sets = {d: (_images(9, k), torch.arange(9) % 3) for k, d in enumerate(["a", "b"])}
    acc = transfer.finetune_domains(nets, sets, sets, ["a", "b"], 3, epochs=1, lr=0.01, batch_size=4, seed=0)
    assert list(acc) == [("None", "a"), ("b", "a"), ("None", "b"), ("a", "b")]
    for a in acc.values():  # per cent of the 9 test images
        assert 0 <= a <= 100 and a * 9 / 100 == pytest.approx(round(a * 9 / 100), abs=1e-9)
    # each target domain: the None network and every other domain's network, fine-tuned on the target's training
    # set, scored on its test set
    calls = []

    def fake_finetune(model, train, test, num_classes, **kw):
        calls.append((model, train, test, num_classes, kw))
        return None, {"final_accuracy": len(calls) / 8}

    monkeypatch.setattr(transfer_learning, "finetune", fake_finetune)
    tests = {d: (_images(6, 5 + k), torch.arange(6) % 3) for k, d in enumerate(["a", "b"])}
    acc = transfer.finetune_domains(nets, sets, tests, ["a", "b"], 3, epochs=2, lr=0.05, batch_size=4, seed=1)
    assert acc == {("None", "a"): 12.5, ("b", "a"): 25.0, ("None", "b"): 37.5, ("a", "b"): 50.0}
    for (model, train, test, k, kw), (src, tg) in zip(calls, acc):
        assert model is nets[src] and train is sets[tg] and test is tests[tg] and k == 3
        assert kw == dict(epochs=2, lr=0.05, batch_size=4, seed=1, device="cpu", eval_every=2)
    pairs, drop = transfer.accuracy_drops({("None", "a"): 50.0, ("b", "a"): 40.0, ("None", "b"): 30.0,
                                           ("a", "b"): 35.0}, ["a", "b"])
    assert pairs == [("a", "b"), ("b", "a")] and drop == {("a", "b"): -5.0, ("b", "a"): 10.0}
    assert transfer.pair_names(drop) == {"a->b": -5.0, "b->a": 10.0}


def test_alignment_drops_average_the_class_pairs():
    nets = {"None": cnn.build_cnn(CNN28, seed=0), "a": cnn.build_cnn(CNN28, seed=1), "b": cnn.build_cnn(CNN28, seed=2)}
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 2])
    X_a, X_b = _images(10, 3), _images(10, 4)
    test = {"a": ((X_a - MEAN) / STD, labels), "b": ((X_b - MEAN) / STD, labels)}
    out = transfer.alignment_drops(nets, test, ["a", "b"], "fc2", 3)
    assert list(out["diff"]) == [("b", "a"), ("a", "b")] and out["n_tasks"] == {"a": 3, "b": 3}
    assert out["n_pair"] == 7 and np.array_equal(out["thresholds"], al.thresholds_for(7))  # pair sizes 6, 7, 7
    # target b, source a, by hand: fc2 (the last layer) of the None network minus that of a, on the three class
    # pairs (labels +1 for the second class), curves over ||y||^2, averaged
    lab = labels.numpy()
    fc2 = {s: _hidden(nets[s], X_b)[-1] for s in ("None", "a")}
    curves, areas = [], []
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        rows = np.isin(lab, (a, b))
        y = np.where(lab[rows] == b, 1.0, -1.0)
        (c0, a0), (c1, a1) = (_curve_and_area_by_hand(fc2[s][rows], y, out["thresholds"]) for s in ("None", "a"))
        curves.append((c0 - c1) / len(y))
        areas.append(a0 - a1)
    np.testing.assert_allclose(out["diff"][("a", "b")], np.mean(curves, axis=0), rtol=1e-8, atol=1e-9)
    assert out["area_drop"][("a", "b")] == pytest.approx(np.mean(areas), rel=1e-8, abs=1e-9)
    # a source that is the None network itself drops nothing
    same = transfer.alignment_drops({**nets, "a": nets["None"]}, test, ["a", "b"], "fc2", 3)
    assert np.all(same["diff"][("a", "b")] == 0) and same["area_drop"][("a", "b")] == 0


def test_negative_transfer_claims_by_hand():
    domains = ["x", "y", "z"]
    pairs = [(s, t) for s in domains for t in domains if s != t]
    acc_drop = dict(zip(pairs, [1.0, 3.0, -2.0, 0.5, 4.0, 6.0]))
    area_drop = dict(zip(pairs, [0.2, 0.1, 0.05, 0.0, 0.3, 0.5]))
    diff = {p: np.array([0.0, 1.0, -1.0]) for p in pairs}
    c = registry.judge("alignment/a10_negative_transfer",
                       transfer.negative_transfer_claims(acc_drop, area_drop, diff, domains, pairs))
    hurts = c["random_label_pretraining_hurts"]
    assert hurts["value"] == 2.0 and not hurts["holds"] and hurts["accuracy_drop"]["y->x"] == -2.0
    reduces = c["random_label_pretraining_reduces_alignment"]
    assert reduces["value"] == 0.0 and not reduces["holds"] and reduces["fraction_of_points_positive"] == 0.5
    order = c["alignment_drop_orders_transfer_drop"]
    assert order["per_source_accuracy_drop"] == {"x": 2.0, "y": -0.75, "z": 5.0}
    assert order["per_source_alignment_drop"] == pytest.approx({"x": 0.15, "y": 0.025, "z": 0.4})
    assert order["value"] == 1.0 and order["holds"]
    assert order["spearman_pairs"] == pytest.approx(spearmanr([area_drop[p] for p in pairs],
                                                              [acc_drop[p] for p in pairs])[0])
    with pytest.warns(RuntimeWarning):  # scipy: the correlation of a constant input is not defined
        flat = transfer.negative_transfer_claims(dict.fromkeys(pairs, 0.0), area_drop, diff, domains, pairs)
    assert flat["alignment_drop_orders_transfer_drop"]["value"] == 0.0  # undefined correlation: does not hold


def test_negative_transfer_numbers_are_what_a10_recorded():
    metas = {"x": {"history": [{"loss": 2.3}], "from_cache": True}, "y": {"history": [{"loss": 2.1}]}}
    drops = {"diff": {("x", "y"): np.array([0.0, 0.5])}, "area_drop": {("x", "y"): 0.1}, "n_tasks": {"y": 3},
             "thresholds": np.array([0.0, 1.0]), "n_pair": 40}
    nums = transfer.negative_transfer_numbers("none-key", metas, {("None", "y"): 80.0, ("x", "y"): 75.5}, drops)
    assert list(nums) == ["none_network", "random_label_training", "accuracy", "thresholds", "n_tasks",
                          "difference_curves"]
    assert nums["none_network"] == "none-key" and nums["n_tasks"] == {"y": 3}
    assert nums["random_label_training"] == {"x": [{"loss": 2.3}], "y": [{"loss": 2.1}]}
    assert nums["accuracy"] == {"None->y": 80.0, "x->y": 75.5}
    assert list(nums["difference_curves"]) == ["x->y"] and nums["difference_curves"]["x->y"].tolist() == [0.0, 0.5]
    assert nums["thresholds"].tolist() == [0.0, 1.0]


# ----------------------------------------------------------------------------- settings


def test_none_settings_are_the_shared_ones_unless_larger_ones_are_given():
    shared = pt.source_settings("default")
    assert transfer.none_settings("default", "small", None) == shared
    larger = transfer.none_settings("default", "small", None, n_source=48000, epochs=8)
    assert (larger["n_source"], larger["epochs"]) == (48000, 8)
    assert {k: v for k, v in larger.items() if k not in ("n_source", "epochs")} == \
        {k: v for k, v in shared.items() if k not in ("n_source", "epochs")}
    assert transfer.none_settings("default", "small", None, epochs=8)["n_source"] == shared["n_source"]
    paper = transfer.none_settings("paper", "resnet18", "IMAGENET1K_V1")
    assert (paper["arch"], paper["weights"]) == ("resnet18", "IMAGENET1K_V1")
    with pytest.raises(ValueError, match="unknown scale"):
        transfer.none_settings("huge", "small", None)


#: the notebooks' smoke presets (a08, a09, a10)
A08_SMOKE = dict(target="fashion-mnist", target_classes=[5, 7, 8, 9], source="all", arch="small", weights=None,
                 n_tasks=2, n_points=100, rbf_bandwidth=1.0, steps=50)
A09_SMOKE = dict(target="fashion-mnist", groups=["clothing", "footwear_bags"], n_points=60, n_layers=4,
                 n_finetune=20, ft_epochs=1, ft_lr=0.01, ft_batch=64)
A10_SMOKE = dict(dataset="fashion-mnist", domains=["clean", "lowres", "inverted"], train_per_class=[8, 6, 4],
                 test_per_class=6, arch="small", none_source="clothing", none_n_source=None, none_epochs=None,
                 weights=None, rl_epochs=1, rl_lr=1e-3, rl_milestones=[], ft_epochs=1, ft_lr=0.01, batch=32)


@pytest.mark.parametrize("rules, preset, good, bad", [
    (transfer.CNN_TRANSFER_RULES, A08_SMOKE, {"source": "imagenet", "weights": "IMAGENET1K_V1", "arch": "resnet18"},
     {"target": "mnist", "target_classes": [3], "source": "shoes", "arch": "vit", "n_points": 1,
      "rbf_bandwidth": 0.0}),
    (transfer.SIMILARITY_RULES, A09_SMOKE, {"target": "cifar10", "n_finetune": 0},
     {"target": "office31", "groups": ["clothing", "clothing"], "n_finetune": -1, "ft_lr": 0.0, "n_layers": 0}),
    (transfer.NEGATIVE_TRANSFER_RULES, A10_SMOKE,
     {"dataset": "office31", "none_source": "footwear_bags", "rl_milestones": [30, 60]},
     {"dataset": "cifar10", "domains": ["clean", "lowres"], "none_source": "shoes", "rl_lr": -1.0, "batch": 0}),
], ids=["a08", "a09", "a10"])
def test_each_notebooks_rules_accept_its_presets_and_name_a_bad_value(rules, preset, good, bad):
    """The rules take the notebook's smoke settings as they are and the other scales' values; each bad value is
    one ValueError naming its parameter."""
    assert settings.pick({"smoke": preset}, "smoke", rules=rules) == preset
    assert settings.pick({"smoke": preset}, "smoke", rules=rules, **good) == {**preset, **good}
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": preset}, "smoke", rules=rules, **{name: value})
