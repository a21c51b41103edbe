"""Tests of layersim.papers.alignment.layers: tasks, label shares and layer-wise alignment before and after training
(alignment paper, Figures 2 and 7)."""

import numpy as np
import pytest
import torch

from layersim.inputs import image_data
from layersim.measures import alignment as al
from layersim.notebook import settings
from layersim.papers.alignment import layers as la
from layersim.train import small_nets


def orthonormal(n, m, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, m)))
    return q


def known_svd(n=40, d=6, seed=0):
    """Phi = U diag(s) V^T with known pieces (s descending, distinct)."""
    U, V = orthonormal(n, d, seed), orthonormal(d, d, seed + 1)
    s = np.array([9.0, 6.0, 4.0, 2.0, 1.0, 0.5])[:d]
    return U, s, U @ np.diag(s) @ V.T


# ----------------------------------------------------------------------------- tasks


def test_binary_task_on_digits():
    from sklearn.datasets import load_digits

    X, t = la.binary_task("digits", [0, 1], 50, seed=1)
    assert X.shape == (100, 64) and t.sum() == 50
    assert X.min() >= 0 and X.max() <= 1 and X.max() > 0.9
    # every row is a real digit image of the right class (pixels / 16)
    ref = load_digits()
    for x, tt in zip(X[:10], t[:10]):
        match = np.flatnonzero(np.all(np.isclose(ref.data / 16.0, x), axis=1))
        assert len(match) >= 1 and set(ref.target[match]) == {int(tt)}
    for bad in ([0], [1, 1], [0, 1, 2]):
        with pytest.raises(ValueError, match="two distinct classes"):
            la.binary_task("digits", bad, 5)
    with pytest.raises(ValueError, match="fewer"):
        la.binary_task("digits", [0, 1], 1000)
    with pytest.raises(ValueError, match="unknown image"):
        la.binary_task("svhn", [0, 1], 5)


def test_regression_task_and_unit_interval():
    X, y = la.regression_task("diabetes")
    assert X.shape == (442, 10) and y.shape == (442,)
    assert y.min() == -1.0 and y.max() == 1.0
    assert np.allclose(X.mean(0), 0, atol=0.2) and np.allclose(X.std(0), 1, atol=0.2)
    Xs, ys = la.regression_task("diabetes", n=100, seed=2)
    assert Xs.shape == (100, 10) and -1 <= ys.min() and ys.max() <= 1
    assert np.allclose(la.unit_interval([2.0, 4.0, 3.0]), [-1.0, 1.0, 0.0])
    with pytest.raises(ValueError):
        la.unit_interval([1.0, 1.0])
    with pytest.raises(ValueError):
        la.regression_task("ct-position")
    assert set(la.REGRESSION_DATA) == {"diabetes", "digits"}


def digits_rows():
    """Digits' 61 varying pixels standardised over all 1797 images, and the digit values, built here by hand."""
    images, labels = image_data.load_digits("all")
    flat = images.reshape(len(images), -1).astype(np.float64)
    varying = flat[:, flat.std(0) > 0]
    return (varying - varying.mean(0)) / varying.std(0), labels


def test_digits_regression_task_is_the_digit_value_on_the_varying_pixels():
    """The larger regression stand-in: each image's digit value 0..9 moved to [-1, 1] (0 -> -1, 9 -> 1, each step
    2/9), the pixels that are constant over the 1797 images dropped, the others standardised."""
    X, y = la.regression_task("digits", seed=3)
    assert X.shape == (1797, 61) and y.shape == (1797,)
    assert np.allclose(X.mean(0), 0, atol=1e-12) and np.allclose(X.std(0), 1, atol=1e-12)
    assert set(np.round((y + 1) * 4.5, 9)) == set(range(10))
    # the same permutation orders features and targets: match rows back to the images by their pixels
    standard, labels = digits_rows()
    order = np.random.default_rng(3).permutation(len(labels))
    assert np.allclose(X, standard[order]) and np.allclose(y, labels[order] / 4.5 - 1)


def test_a_regression_subsample_is_n_distinct_points_of_the_set_drawn_by_the_seed():
    standard, labels = digits_rows()
    X, y = la.regression_task("digits", n=450, seed=4)
    assert X.shape == (450, 61) and y.shape == (450,)
    # every point is one image of the set (standardised over all of it; digits has no two equal images), none twice
    rows = [np.flatnonzero(np.all(np.isclose(standard, x), axis=1)) for x in X]
    assert all(len(r) == 1 for r in rows) and len({r[0] for r in rows}) == 450
    values = labels[[r[0] for r in rows]].astype(float)  # its digit, moved to [-1, 1] over the subsample's range
    assert np.allclose(y, 2 * (values - values.min()) / (values.max() - values.min()) - 1)
    again, _ = la.regression_task("digits", n=450, seed=4)
    other, _ = la.regression_task("digits", n=450, seed=5)
    np.testing.assert_array_equal(X, again)
    assert not np.array_equal(X, other)
    whole, _ = la.regression_task("digits", n=None, seed=4)
    assert whole.shape == (1797, 61)
    for bad in (0, 1798):
        with pytest.raises(ValueError, match="1797"):
            la.regression_task("digits", n=bad)
    assert {name: len(la.regression_data(name)[0]) for name in la.REGRESSION_DATA} == la.REGRESSION_SIZES
    runs = la.layer_runs("regression", "diabetes", epochs=1, n_seeds=1, width=4, depth=1, regression_points=64)
    assert runs["n"] == 64


def test_shuffled_keeps_labels_and_is_seeded():
    y = al.binary_targets(np.r_[np.zeros(50), np.ones(50)].astype(int))
    s = la.shuffled(y, seed=1)
    assert np.array_equal(np.sort(s), np.sort(y)) and not np.array_equal(s, y)
    assert np.array_equal(s, la.shuffled(y, seed=1))


def test_binary_task_reads_torchvision_arrays(monkeypatch):
    """The paper-scale path (MNIST / CIFAR through torchvision) without the download: a stand-in
    Dataset with torchvision's ``data`` (uint8 images) and ``targets`` attributes."""
    from layersim.inputs import image_data

    class Fake:
        data = torch.arange(6 * 4, dtype=torch.uint8).reshape(6, 2, 2) * 10
        targets = torch.tensor([0, 1, 0, 1, 2, 2])

    seen = {}

    def fake_loader(name, split="train", **kw):
        seen["args"] = (name, split)
        return Fake()

    monkeypatch.setattr(image_data, "load_torchvision", fake_loader)
    X, t = la.binary_task("mnist", [1, 0], 2, seed=0, split="test")
    assert seen["args"] == ("mnist", "test")
    assert X.shape == (4, 4) and t.sum() == 2
    for x, tt in zip(X, t):  # each row is one of the images of its class, scaled by 255
        rows = [i for i in range(6) if np.allclose(Fake.data[i].numpy().ravel() / 255.0, x)]
        assert len(rows) == 1 and int(Fake.targets[rows[0]]) == (0 if tt else 1)


def test_figure7_task_draws_a_balanced_binary_task_or_the_regression_task():
    X, y, loss = la.figure7_task("classification", "digits", seed=2, classes=(3, 5), n_points=60)
    assert X.shape == (60, 64) and loss == "bce" and sorted(set(y)) == [-1.0, 1.0] and y.sum() == 0
    X0, t0 = la.binary_task("digits", (3, 5), 30, seed=2)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, 2.0 * t0 - 1.0)
    X, y, loss = la.figure7_task("regression", "diabetes", seed=2)
    assert X.shape == (442, 10) and loss == "mse" and y.min() == -1.0 and y.max() == 1.0
    X, y, _ = la.figure7_task("regression", "digits", seed=2, regression_points=100)
    Xs, ys = la.regression_task("digits", n=100, seed=2)  # the run's seed draws the subsample
    np.testing.assert_array_equal(X, Xs)
    np.testing.assert_array_equal(y, ys)
    with pytest.raises(ValueError, match="kind"):
        la.figure7_task("ranking", "digits")


# ----------------------------------------------------------------------------- measurements


def test_top_share_on_a_known_decomposition():
    U, s, Phi = known_svd()
    y = 3.0 * U[:, 0] + 1.0 * U[:, 2] + 2.0 * U[:, 4]  # ||y||^2 = 14
    assert la.top_share(Phi, y, 1) == pytest.approx(9 / 14)
    assert la.top_share(Phi, y, 3) == pytest.approx(10 / 14)
    assert la.top_share(al.svd(Phi), y, 6) == pytest.approx(1.0)
    # a part of y outside the span counts in ||y||^2 but in no share
    out = orthonormal(40, 7, 0)[:, 6]
    out = out - U @ (U.T @ out)
    out /= np.linalg.norm(out)
    assert la.top_share(Phi, y + np.sqrt(14) * out, 6) == pytest.approx(0.5)
    both = la.top_share(Phi, np.stack([y, U[:, 1]], axis=1), 2)
    assert np.allclose(both, [9 / 14, 1.0])
    for bad in (0, 1.5, -1):
        with pytest.raises(ValueError):
            la.top_share(Phi, y, bad)
    with pytest.raises(ValueError):
        la.top_share(Phi, np.zeros(40), 1)


def test_top_share_of_random_labels_is_k_over_n():
    """Chance level: a label vector spread evenly over n directions puts k/n of its norm on any k."""
    n = 60
    Phi = np.random.default_rng(0).normal(size=(n, n))
    Y = np.random.default_rng(1).normal(size=(n, 4000))
    assert la.top_share(Phi, Y, 6).mean() == pytest.approx(6 / n, rel=0.05)


def test_label_projections_sum_to_the_norm_in_the_span():
    U, s, Phi = known_svd()
    y = U @ np.array([1.0, -2.0, 0.5, 0.0, 3.0, 1.0])
    sigma, p = la.label_projections(Phi, y)
    assert np.allclose(sigma, s) and np.allclose(p, [1, 4, 0.25, 0, 9, 1])
    with pytest.raises(ValueError):
        la.label_projections(Phi, np.stack([y, y], 1))


def test_layer_alignment_is_each_layer_in_the_papers_form():
    r = np.random.default_rng(0)
    X = r.normal(size=(50, 5))
    y = al.binary_targets((X[:, 0] > 0).astype(int))
    net = small_nets.make_mlp(5, [8, 7, 6], seed=0)
    tau = np.linspace(0, 5, 11)
    curves = la.layer_alignment(net, X, y, tau)
    assert curves.shape == (4, 11)
    reps = [X, *small_nets.hidden_representations(net, X)]
    for c, R in zip(curves, reps):
        assert np.allclose(c, al.alignment_loop(al.prepare(R), y, tau))
    assert np.allclose(curves[:, 0], 50.0)


# ----------------------------------------------------------------------------- every layer, before and after (Figure 7)


def test_layer_names():
    assert la.layer_names(3) == ["input", "hidden 1", "hidden 2", "hidden 3"]
    with pytest.raises(ValueError, match="depth"):
        la.layer_names(0)


def test_layer_runs_against_the_steps_done_by_hand(digit_runs):
    r = digit_runs
    assert len(r["init"]) == len(r["trained"]) == len(r["loss"]) == len(r["seconds"]) == 2
    assert r["n"] == 40 and r["area_init"].shape == r["area_trained"].shape == (2, 3)
    for s in range(2):
        X, t = la.binary_task("digits", (0, 1), 20, seed=5 + s)
        y = 2.0 * t - 1.0
        tau = np.linspace(0.0, 30.0, 62) * np.sqrt(40 / 1000.0)
        np.testing.assert_allclose(r["tau"], tau, rtol=1e-15)
        net = small_nets.make_mlp(64, [8, 8], hidden_bias=False, seed=5 + s)
        for when in ("init", "trained"):
            if when == "trained":
                history = small_nets.train_mlp(net, X, y, loss="bce", epochs=2, batch_size=64, lr=1e-3, seed=5 + s)
                np.testing.assert_allclose(r["loss"][s], history, rtol=1e-6)
            reps = [X, *small_nets.hidden_representations(net, X)]
            curves = [al.alignment_loop(al.prepare(R), y, tau) for R in reps]  # eq. 2 by a loop, paper's form
            np.testing.assert_allclose(r[when][s], curves, rtol=1e-7, atol=1e-7)
            areas = [np.trapezoid(c, tau) / (tau[-1] * c[0]) for c in curves]
            np.testing.assert_allclose(r[f"area_{when}"][s], areas, rtol=1e-7)
    with pytest.raises(ValueError, match="n_seeds"):
        la.layer_runs("classification", "digits", epochs=1, n_seeds=0)


def _runs(init, trained):
    """Runs of two tasks whose per-run areas are given: ``{task: [runs, layers]}``."""
    return {k: {"area_init": np.asarray(init[k], float), "area_trained": np.asarray(trained[k], float)} for k in init}


def test_area_steps_counts_the_paper_orderings():
    init = {"a": [[0.5, 0.4, 0.3, 0.2], [0.5, 0.3, 0.3, 0.1]], "b": [[0.3, 0.31, 0.2, 0.1], [0.3, 0.29, 0.2, 0.1]]}
    trained = {"a": [[0.5, 0.6, 0.8, 0.9], [0.5, 0.7, 0.6, 1.0]], "b": [[0.3, 0.29, 0.4, 0.5], [0.3, 0.29, 0.4, 0.6]]}
    out = la.area_steps(_runs(init, trained))
    # mean areas: a init .5 .35 .3 .15, trained .5 .65 .7 .95; b init .3 .3 .2 .1, trained .3 .29 .4 .55
    assert out["increase_after"] == {"pooled": 5 / 6, "per_task": {"a": 1.0, "b": 2 / 3}}
    assert out["decrease_at_init"] == {"pooled": 5 / 6, "per_task": {"a": 1.0, "b": 2 / 3}}
    # gains: a 0 .3 .4 .8 -> hidden steps .4>.3, .8>.4; b 0 -.01 .2 .45 -> .2>-.01, .45>.2
    assert out["gain_grows"] == {"pooled": 1.0, "per_task": {"a": 1.0, "b": 1.0}}
    per_run = np.mean([1.0, 2 / 3, 2 / 3, 2 / 3])  # a: 3 of 3 and 2 of 3 steps up; b: 2 of 3 in both
    assert out["per_run_increase_after"] == pytest.approx(per_run)
    with pytest.raises(ValueError, match="at least one task"):
        la.area_steps({})


def test_layer_metrics_gather_means_errors_and_losses(digit_runs):
    m = la.layer_metrics({"digits": digit_runs})
    assert list(m) == ["areas", "thresholds", "curves", "final_loss", "train_seconds"]
    a = digit_runs["area_trained"]
    np.testing.assert_allclose(m["areas"]["digits"]["trained"]["mean"], a.mean(0))
    np.testing.assert_allclose(m["areas"]["digits"]["trained"]["se"], a.std(0, ddof=1) / np.sqrt(2))
    np.testing.assert_array_equal(m["areas"]["digits"]["init"]["per_run"], digit_runs["area_init"])
    np.testing.assert_allclose(m["curves"]["digits"]["init"], np.mean(digit_runs["init"], axis=0))
    assert m["final_loss"]["digits"] == [h[-1] for h in digit_runs["loss"]]
    assert m["train_seconds"]["digits"] == digit_runs["seconds"]
    text = la.describe_layer_runs(digit_runs, "digits 0 vs 1", la.layer_names(2))
    assert text.startswith("digits 0 vs 1: 40 points") and len(text.split("\n")) == 3
    assert f"hidden 2 {a.mean(0)[2]:.3f}" in text


def test_rules_take_a05s_smoke_settings_and_name_a_bad_value():
    smoke = dict(image_dataset="fashion-mnist", classes=[0, 1], n_points=400, image_epochs=3,
                 regression_dataset="diabetes", regression_epochs=20, depth=3, width=128, n_seeds=2)
    assert settings.pick({"smoke": smoke}, "smoke", rules=la.RULES) == smoke
    assert settings.pick({"smoke": smoke}, "smoke", rules=la.RULES, regression_dataset="digits",
                         image_dataset="cifar100")["regression_dataset"] == "digits"
    for name, bad in [("image_dataset", "imagenet"), ("regression_dataset", "boston"), ("n_points", 1),
                      ("classes", [0, 1, 2])]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=la.RULES, **{name: bad})


def test_regression_points_are_checked_against_the_data_sets_size():
    smoke = dict(regression_dataset="diabetes", regression_points=None)

    def pick(**given):
        return settings.pick({"smoke": smoke}, "smoke", rules=la.RULES, checks=[la.check_regression_points], **given)

    assert pick() == smoke  # None: every point
    assert pick(regression_dataset="digits", regression_points=900)["regression_points"] == 900
    assert pick(regression_points=442)["regression_points"] == 442
    for given, size in [(dict(regression_points=443), "442"), (dict(regression_dataset="digits",
                                                                    regression_points=1798), "1797")]:
        with pytest.raises(ValueError, match=f"parameter 'regression_points': .* the {size} points"):
            pick(**given)
    for bad in (la.MIN_REGRESSION_POINTS - 1, 0, 100.0, True, "all"):
        with pytest.raises(ValueError, match="parameter 'regression_points'"):
            pick(regression_points=bad)


def test_figure7_runs_train_both_tasks_with_their_own_data_and_epochs(monkeypatch):
    """The classification task on two classes of the image data set, the regression task on its own data set, each
    with its epochs and the shared network settings; a line on each, titled by :func:`figure7_tasks`."""
    P = dict(image_dataset="digits", classes=[3, 8], n_points=40, image_epochs=2, regression_dataset="diabetes",
             regression_points=100, regression_epochs=5, depth=2, width=16, n_seeds=3)
    calls = []

    def fake_layer_runs(kind, dataset, epochs, n_seeds, width, depth, seed=0, classes=(0, 1), n_points=10000,
                        regression_points=None):
        calls.append((kind, dataset, epochs, n_seeds, width, depth, seed, list(classes), n_points, regression_points))
        return {"n": 40, "loss": [[1.0, 0.5]] * 3, "seconds": [1.0] * 3, "area_init": np.full((3, 3), 0.25),
                "area_trained": np.full((3, 3), 0.5)}

    monkeypatch.setattr(la, "layer_runs", fake_layer_runs)
    assert la.figure7_tasks(P) == {"classification": "digits 3 vs 8", "regression": "diabetes (label in [-1, 1])"}
    logged = []
    runs = la.figure7_runs(P, seed=7, log=logged.append)
    assert list(runs) == ["classification", "regression"]
    assert calls == [("classification", "digits", 2, 3, 16, 2, 7, [3, 8], 40, 100),
                     ("regression", "diabetes", 5, 3, 16, 2, 7, [3, 8], 40, 100)]
    assert [line.split("\n")[0].split(":")[0] for line in logged] == ["digits 3 vs 8", "diabetes (label in [-1, 1])"]
    assert logged[1].split("\n")[2] == "   area trained input 0.500±0.000  hidden 1 0.500±0.000  hidden 2 0.500±0.000"
