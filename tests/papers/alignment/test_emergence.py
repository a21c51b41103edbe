"""Tests of layersim.papers.alignment.emergence: alignment emerging on shuffled labels (alignment paper, Figure 2),
against a full SVD, the training steps done by hand and explicit means and standard errors."""

import numpy as np
import pytest
import torch

from layersim.measures import alignment as al
from layersim.notebook import registry, settings
from layersim.papers.alignment import emergence as em
from layersim.train import small_nets


def _mean_se(v):
    """Mean and standard error (``std(ddof=1) / sqrt(n)``) along the first axis, written out."""
    v = np.asarray(v, dtype=np.float64)
    return v.mean(axis=0), v.std(axis=0, ddof=1) / np.sqrt(len(v))


def _top_share_by_hand(Phi, y, k):
    """The fraction of ||y||^2 on the top k left singular vectors, from numpy's full SVD."""
    U, _, _ = np.linalg.svd(np.asarray(Phi, dtype=np.float64), full_matrices=False)
    return float(np.sum((U[:, :k].T @ y) ** 2) / (y @ y))


@pytest.fixture(scope="module")
def emergence_task():
    rng = np.random.default_rng(4)
    X = rng.random((48, 7))
    y = al.binary_targets(np.arange(48) % 2)
    return X, y


def test_shuffled_labels_use_seeds_from_seed_plus_1000(emergence_task):
    _, y = emergence_task
    got = em.shuffled_labels(y, 3, seed=2)
    assert len(got) == 3
    for s, ys in enumerate(got):
        np.testing.assert_array_equal(ys, np.random.default_rng(1002 + s).permutation(y))
    with pytest.raises(ValueError, match="n_seeds"):
        em.shuffled_labels(y, 0)


def test_pixel_shares_against_a_full_svd(emergence_task):
    X, y = emergence_task
    shuffles = em.shuffled_labels(y, 2, seed=0)
    got = em.pixel_shares(X, y, shuffles, k=3)
    Phi = al.prepare(X)
    assert got["true"] == pytest.approx(_top_share_by_hand(Phi, y, 3), rel=1e-10)
    np.testing.assert_allclose(got["shuffled"], [_top_share_by_hand(Phi, ys, 3) for ys in shuffles], rtol=1e-10)
    np.testing.assert_allclose(got["dec"].sigma, np.linalg.svd(Phi, compute_uv=False)[: len(got["dec"].sigma)],
                               rtol=1e-10)


@pytest.fixture(scope="module")
def emergence_runs(emergence_task):
    X, y = emergence_task
    shuffles = em.shuffled_labels(y, 2, seed=1)
    lines = []
    runs = em.shuffled_label_runs(X, shuffles, n_train=40, depth=2, width=0, epochs=2, k=3, seed=1, log=lines.append)
    return X, shuffles, runs, lines


def test_shuffled_label_runs_repeat_the_steps_by_hand(emergence_runs):
    X, shuffles, runs, lines = emergence_runs
    assert len(runs) == len(lines) == 2 and lines[1].startswith("seed 1: BCE")
    for s, r in enumerate(runs):
        Xs, yt = X[:40], shuffles[s][:40]
        net = small_nets.make_mlp(7, [7, 7], hidden_bias=False, seed=1 + s)
        h_init = small_nets.hidden_representations(net, Xs)[-1]
        hist = small_nets.train_mlp(net, Xs, yt, loss="bce", epochs=2, batch_size=64, lr=1e-3, seed=1 + s)
        h_end = small_nets.hidden_representations(net, Xs)[-1]
        with torch.no_grad():
            out = net(torch.as_tensor(Xs, dtype=torch.float32))[:, 0].numpy()
        np.testing.assert_array_equal(r["hist"], hist)
        np.testing.assert_array_equal(r["y"], yt)
        assert r["acc"] == np.mean((out > 0) == (yt > 0))
        for name, H in (("input", Xs), ("init", h_init), ("trained", h_end)):
            assert r["share"][name] == pytest.approx(_top_share_by_hand(al.prepare(H), yt, 3), rel=1e-8)
    with pytest.raises(ValueError, match="n_train"):
        em.shuffled_label_runs(X, shuffles, n_train=100, depth=1, width=0, epochs=1, k=3)


def test_network_shares_are_mean_and_standard_error(emergence_runs):
    runs = emergence_runs[2]
    got = em.network_shares(runs)
    assert list(got) == ["input", "init", "trained"]
    for name, (m, se) in got.items():
        ref_m, ref_se = _mean_se([r["share"][name] for r in runs])
        assert m == pytest.approx(ref_m, rel=1e-12) and se == pytest.approx(ref_se, rel=1e-12)
    with pytest.raises(ValueError):
        em.network_shares([])


def test_figure2_panels_curves_and_areas(emergence_task, emergence_runs):
    X, y = emergence_task
    _, shuffles, runs, _ = emergence_runs
    dec = al.svd(al.prepare(X))
    panels = em.figure2_panels(dec, y, shuffles[0], runs[0], 40)
    assert list(panels) == ["(a) pixels, true", "(b) pixels, shuffled", "(c) network at init", "(d) network trained"]
    assert panels["(a) pixels, true"][0] == "(a) pixels, true labels (48 points)"
    assert panels["(d) network trained"][1] is runs[0]["dec"]["trained"]
    np.testing.assert_array_equal(panels["(b) pixels, shuffled"][2], shuffles[0])

    curves = em.panel_curves(panels)
    tn, c = curves["(b) pixels, shuffled"]
    tau = al.default_thresholds() * np.sqrt(48 / 1000)
    np.testing.assert_allclose(tn, tau / np.sqrt(48))
    np.testing.assert_allclose(c, al.alignment_loop(al.prepare(X), shuffles[0], tau), rtol=1e-9, atol=1e-9)
    tn_c, c_c = curves["(c) network at init"]
    np.testing.assert_allclose(tn_c, al.default_thresholds() / np.sqrt(1000))  # 40 points: same grid over sqrt(n)

    areas = em.panel_areas(curves)
    f = c / c[0]
    assert areas["(b) pixels, shuffled"] == pytest.approx(np.sum((f[1:] + f[:-1]) / 2 * np.diff(tn)) / (tn[-1] - tn[0]),
                                                           rel=1e-10)

    fig = em.curves_figure(curves)
    ax = fig.get_axes()[0]
    assert len(ax.lines) == 4
    np.testing.assert_allclose(ax.lines[1].get_ydata(), f)

    fig = em.projections_figure(panels, k=3, show=5)
    axes = fig.get_axes()
    assert len(axes) == 8  # four panels, each with a twin axis for the singular values
    U, _, _ = np.linalg.svd(al.prepare(X), full_matrices=False)
    heights = [b.get_height() for b in axes[0].patches]
    np.testing.assert_allclose(heights, ((U.T @ y) ** 2)[:5], rtol=1e-8, atol=1e-12)
    assert "top-3 share" in axes[0].get_title()


def test_emergence_claims_and_numbers(emergence_task, emergence_runs):
    X, y = emergence_task
    _, shuffles, runs, _ = emergence_runs
    pixels = em.pixel_shares(X, y, shuffles, 3)
    shares = em.network_shares(runs)
    areas = {"(a) pixels, true": 0.4, "(b) pixels, shuffled": 0.1, "(c) network at init": 0.2,
             "(d) network trained": 0.3}
    claims = em.emergence_claims(pixels, shares, runs, areas, 3, 40)
    a, b, c = (claims[n] for n in ("true_labels_aligned", "shuffled_labels_unaligned_in_input",
                                   "training_on_shuffled_creates_alignment"))
    assert a["value"] == pixels["true"] and a["chance"] == 3 / 48
    assert a["alignment_area"] == 0.4
    # the shuffled labels' share in units of chance k/n, judged against the registered 10 (ten times chance)
    assert b["value"] == pytest.approx(np.mean(pixels["shuffled"]) / (3 / 48)) and b["share"] == pytest.approx(
        np.mean(pixels["shuffled"]))
    judged = registry.judge("alignment/a02_emergence", claims)
    assert judged["shuffled_labels_unaligned_in_input"]["holds"] == (np.mean(pixels["shuffled"]) <= 10 * 3 / 48)
    assert (judged["true_labels_aligned"]["op"], judged["shuffled_labels_unaligned_in_input"]["op"]) == (">=", "<=")
    assert c["value"] == pytest.approx(np.mean([r["share"]["trained"] for r in runs])) and c["chance"] == 3 / 40
    assert c["training_accuracy"] == [r["acc"] for r in runs] and c["at_init"] == shares["init"][0]
    assert "mean of 2 seeds" in c["note"]

    got = em.emergence_numbers(pixels, shares, runs, areas)
    assert list(got) == ["top_share_true", "top_share_shuffled", "sigma_pixels_top", "network", "training_accuracy",
                         "final_bce", "train_seconds", "alignment_area", "projections_panel_d"]
    assert got["network"]["trained"]["per_seed"] == [r["share"]["trained"] for r in runs]
    assert got["final_bce"] == [r["hist"][-1] for r in runs]
    H = runs[0]["dec"]["trained"]
    np.testing.assert_allclose(got["projections_panel_d"], ((H.U.T @ runs[0]["y"]) ** 2)[:50])


def test_rules_and_checks_take_a02s_smoke_settings_and_name_a_bad_value():
    """A width of 0 (as wide as the input) is allowed; the network trains on at most the task's 2 n_per_class
    points, and the classes must exist in the data set."""
    smoke = dict(dataset="fashion-mnist", classes=[0, 1], n_per_class=300, n_train=200, depth=3, width=0,
                 epochs=20, n_seeds=2, top_k=10)
    assert settings.pick({"smoke": smoke}, "smoke", rules=em.RULES, checks=em.CHECKS) == smoke
    assert settings.pick({"smoke": smoke}, "smoke", rules=em.RULES, checks=em.CHECKS, n_train=600)["n_train"] == 600
    for name, bad in [("n_train", 601), ("classes", [0, 10]), ("dataset", "cifar10"), ("width", -1), ("top_k", 0)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=em.RULES, checks=em.CHECKS, **{name: bad})
