"""Tests of layersim.papers.alignment.expressivity: the steps of the alignment paper's opening experiment (notebook
a01, Figures 1 and 5), against independent computations and values by hand."""

import numpy as np
import pytest
import torch

from layersim.measures import alignment as al
from layersim.notebook import registry, settings
from layersim.papers.alignment import expressivity as ex
from layersim.train import small_nets


def _images(n=60, seed=0):
    r = np.random.default_rng(seed)
    return r.integers(0, 256, size=(n, 4, 4), dtype=np.uint8), r.integers(0, 4, size=n)


def test_binary_task_cuts_disjoint_sets_of_the_two_classes():
    images, labels = _images()
    flat = images.reshape(len(images), -1) / 255.0
    assert len({row.tobytes() for row in flat}) == len(flat)  # 60 distinct images: each row names its image

    def indices(X):
        return [int(np.flatnonzero(np.all(flat == x, axis=1))[0]) for x in X]

    X_tr, X_te, X_c, y_tr, y_te = ex.binary_task(images, labels, [1, 3], 8, 5, 4, seed=2)
    assert X_tr.shape == (8, 16) and X_te.shape == (5, 16) and X_c.shape == (4, 16) and X_tr.dtype == np.float64
    i_tr, i_te, i_c = indices(X_tr), indices(X_te), indices(X_c)  # every row is an image, pixels / 255
    assert set(labels[i_tr + i_te + i_c]) <= {1, 3}
    assert len(set(i_tr) | set(i_te) | set(i_c)) == 8 + 5 + 4  # no image in two sets, none twice
    np.testing.assert_array_equal(y_tr, np.where(labels[i_tr] == 3, 1.0, -1.0))  # +1 for classes[1]
    np.testing.assert_array_equal(y_te, np.where(labels[i_te] == 3, 1.0, -1.0))
    again = ex.binary_task(images, labels, [1, 3], 8, 5, 4, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(again, (X_tr, X_te, X_c, y_tr, y_te)))  # seeded
    assert indices(ex.binary_task(images, labels, [1, 3], 8, 5, 4, seed=3)[0]) != i_tr
    # asking for every image of the two classes uses each exactly once
    pool = np.flatnonzero(np.isin(labels, [1, 3]))
    parts = ex.binary_task(images, labels, [1, 3], len(pool) - 6, 4, 2, seed=0)[:3]
    assert sorted(sum((indices(X) for X in parts), [])) == sorted(pool.tolist())
    with pytest.raises(ValueError, match="two classes"):
        ex.binary_task(images, labels, [1, 2, 3], 2, 2, 2)
    with pytest.raises(ValueError, match="points asked"):
        ex.binary_task(images, labels, [1, 3], 30, 30, 30)


def test_learned_representations_are_the_three_trained_ones(capsys):
    r = np.random.default_rng(0)
    X_tr, X_te, X_c = r.random((24, 10)), r.random((12, 10)), r.random((8, 10))
    X_te[0] = X_tr[5]  # a test point that is also a training point: every representation gives it the same row
    y_tr = np.sign(r.standard_normal(24))
    torch.manual_seed(7)  # the RBF network's output layer is drawn from torch's global generator
    reps, seconds, nn_hist, rbf_hist = ex.learned_representations(X_tr, X_te, X_c, y_tr, 8, 30, 20, 1.5, 0.1, 1, seed=4)
    assert list(reps) == [ex.AT_INIT, ex.NETWORK, ex.RBF, ex.SPARSE] and list(seconds) == list(ex.MAIN)
    assert len(nn_hist) == 30 and len(rbf_hist) == 20 and len(capsys.readouterr().out.splitlines()) == 3
    assert all(v >= 0 for v in seconds.values())
    for name, (A_tr, A_te) in reps.items():
        assert A_tr.shape == (24, 8) and A_te.shape == (12, 8)
        np.testing.assert_allclose(A_te[0], A_tr[5], rtol=1e-5, atol=1e-6)
    # at initialisation: relu(x W^T + b) of the untrained network of that seed, by hand in float64
    lin = small_nets.make_mlp(10, [8], seed=4).layers[0]
    W, b = lin.weight.detach().double().numpy(), lin.bias.detach().double().numpy()
    for X, A in zip((X_tr, X_te), reps[ex.AT_INIT]):
        np.testing.assert_allclose(A, np.maximum(X @ W.T + b, 0.0), atol=1e-5)
    # both networks are trained on the squared loss: it falls, and the ReLU layer leaves its initial values
    assert nn_hist[-1] < nn_hist[0] and rbf_hist[-1] < rbf_hist[0]
    assert np.all(reps[ex.NETWORK][0] >= 0) and not np.allclose(reps[ex.NETWORK][0], reps[ex.AT_INIT][0], atol=1e-3)
    assert np.all((reps[ex.RBF][0] > 0) & (reps[ex.RBF][0] <= 1))  # Gaussian units


def test_numerical_rank():
    assert ex.numerical_rank(np.array([5.0, 1.0, 1e-12, 0.0])) == 2
    assert ex.numerical_rank(np.array([2.0, 1e-9]), rtol=1e-8) == 1
    assert ex.numerical_rank(np.array([])) == 0


def _reps(seed=0):
    r = np.random.default_rng(seed)
    y_tr, y_te = np.sign(r.standard_normal(30)), np.sign(r.standard_normal(20))
    reps = {ex.NETWORK: (np.c_[y_tr, r.random((30, 5))], np.c_[y_te, r.random((20, 5))]),
            ex.RBF: (r.random((30, 40)), r.random((20, 40))),
            ex.SPARSE: (r.random((30, 8)), r.random((20, 8))),
            ex.AT_INIT: (r.random((30, 6)), r.random((20, 6)))}
    return reps, y_tr, y_te


def _curve_by_hand(P, y, tau):
    """eq. 2 from numpy's full SVD: the part of ||y||^2 on the left singular vectors with sigma >= tau (the
    directions of sigma = 0 count at tau = 0)."""
    U, s, _ = np.linalg.svd(P)
    s = np.r_[s, np.zeros(len(P) - len(s))]
    proj = (U.T @ y) ** 2
    return np.array([proj[s >= t].sum() for t in tau])


def test_compare_representations_against_numpy(capsys):
    reps, y_tr, y_te = _reps()
    tau = al.thresholds_for(30)
    rows = ex.compare_representations(reps, y_tr, y_te, tau, [0.1, 1.0], 40, n_record=10)
    assert list(rows) == list(reps) and len(capsys.readouterr().out.splitlines()) == 4
    record = np.unique(np.r_[0, np.geomspace(1, 40, 10).astype(int)])

    def paper_form(A):  # a bias column, then every row scaled to unit length
        B = np.c_[A, np.ones(len(A))]
        return B / np.linalg.norm(B, axis=1, keepdims=True)

    for name, (A_tr, A_te) in reps.items():
        P, Pt = paper_form(A_tr), paper_form(A_te)
        row = rows[name]
        assert row["rank"] == np.linalg.matrix_rank(P)
        assert row["sigma_1"] == pytest.approx(np.linalg.norm(P, 2), rel=1e-12)
        w = np.linalg.lstsq(P, y_tr, rcond=None)[0]
        assert row["ls_train"] == pytest.approx(np.mean((P @ w - y_tr) ** 2), rel=1e-6, abs=1e-20)
        assert row["ls_test"] == pytest.approx(np.mean((Pt @ w - y_te) ** 2), rel=1e-6)
        curve = _curve_by_hand(P, y_tr, tau)
        np.testing.assert_allclose(row["curve"], curve, rtol=1e-9, atol=1e-9)
        trapezoid = np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(tau)) / (tau[-1] - tau[0])
        assert row["area"] == pytest.approx(trapezoid / (y_tr @ y_tr), rel=1e-9)
        # full-batch gradient descent on the mean squared error from w = 0 for each step size; the lowest final
        # training loss is kept
        runs = {}
        for lr in (0.1, 1.0):
            w, train, test = np.zeros(P.shape[1]), [], []
            for t in range(41):
                if t in record:
                    train.append(np.mean((P @ w - y_tr) ** 2))
                    test.append(np.mean((Pt @ w - y_te) ** 2))
                w = w - lr * 2 * P.T @ (P @ w - y_tr) / len(P)
            runs[lr] = train, test
        best = min(runs, key=lambda lr: runs[lr][0][-1])
        assert row["gd"]["lr"] == best and np.array_equal(row["gd"]["steps"], record)
        np.testing.assert_allclose(row["gd"]["train"], runs[best][0], rtol=1e-9)
        np.testing.assert_allclose(row["gd"]["test"], runs[best][1], rtol=1e-9)
    assert rows[ex.RBF]["rank"] == 30 and rows[ex.RBF]["ls_train"] < 1e-20  # d > n: expressive
    assert rows[ex.SPARSE]["rank"] == 9  # 8 columns and the bias


def _row(area, curve, ls_train, train):
    return {"area": area, "curve": np.asarray(curve), "ls_train": ls_train,
            "gd": {"train": np.asarray(train), "test": np.asarray(train), "lr": 1.0, "all": {1.0: train[-1]},
                   "steps": np.arange(len(train))}}


def test_claims_by_hand():
    rows = {ex.NETWORK: _row(0.5, [1.0, 0.8, 0.4], 1e-8, [1.0, 0.1, 0.01]),
            ex.RBF: _row(0.3, [1.0, 0.9, 0.1], 1e-7, [1.0, 0.1, 0.1]),
            ex.SPARSE: _row(0.2, [1.0, 0.5, 0.0], 2e-6, [1.0, 1.0, 0.001])}
    c = registry.judge("alignment/a01_expressivity", ex.claims(rows))  # judged by a01's registered thresholds
    assert list(c) == ["all_expressive", "nn_aligns_better", "nn_converges_faster"]
    assert c["all_expressive"]["value"] == 2e-6 and not c["all_expressive"]["holds"]
    assert c["all_expressive"]["ls_train_RBF network"] == 1e-7
    aligned = c["nn_aligns_better"]
    assert aligned["value"] == pytest.approx(0.2) and aligned["holds"]
    assert aligned["fraction_of_thresholds_nn_highest"] == pytest.approx(2 / 3)  # not at tau_1: 0.8 < 0.9
    faster = c["nn_converges_faster"]  # log10 gaps from step 1: RBF (0 + 1) / 2, sparse (1 - 1) / 2
    assert faster["value"] == pytest.approx(0.0) and not faster["holds"]
    assert faster["fraction_of_steps_nn_lowest"] == 0.5 and faster["final_train_sparse coding"] == 0.001


def test_representation_records_keep_the_measures_and_the_run():
    rows = {ex.NETWORK: {**_row(0.5, [1.0, 0.0], 0.0, [1.0, 0.5]), "rank": 3, "sigma_1": 2.0, "ls_test": 0.3}}
    rec = ex.representation_records(rows)[ex.NETWORK]
    assert list(rec) == ["rank", "sigma_1", "ls_train", "ls_test", "area", "curve", "gd_lr", "gd_final_losses",
                         "gd_steps", "gd_train", "gd_test"]
    assert rec["rank"] == 3 and rec["gd_final_losses"] == {1.0: 0.5} and list(rec["gd_train"]) == [1.0, 0.5]


def test_figures_draw_the_rows():
    reps, y_tr, y_te = _reps()
    tau = al.thresholds_for(30)
    rows = ex.compare_representations(reps, y_tr, y_te, tau, [1.0], 20, log=None)
    fig = ex.alignment_figure(rows, tau, 8, 30)
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == [*ex.MAIN, ex.AT_INIT] and ax.lines[3].get_linestyle() == ":"
    np.testing.assert_allclose(ax.lines[1].get_ydata(), rows[ex.RBF]["curve"])
    assert "8-d" in ax.get_title() and "30 points" in ax.get_title()
    ax = ex.learning_curves_figure(rows).axes[0]
    assert len(ax.lines) == 6 and ax.get_xscale() == "log" and ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.lines[0].get_xdata()[0], 0.5)  # step 0 drawn at 0.5
    np.testing.assert_allclose(ax.lines[5].get_ydata(), rows[ex.SPARSE]["gd"]["test"])


def test_rules_take_a01s_smoke_settings_and_name_a_bad_value():
    smoke = dict(dataset="fashion-mnist", classes=[2, 4], n_train=100, n_test=100, width=128, nn_epochs=5,
                 rbf_epochs=5, rbf_width=3.0, dl_alpha=0.1, dl_iter=2, steps=200)
    assert settings.pick({"smoke": smoke}, "smoke", rules=ex.RULES) == smoke
    for name, bad in [("dataset", "mnist"), ("classes", [2, 2]), ("rbf_width", 0.0), ("dl_alpha", -0.1),
                      ("n_test", 0)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=ex.RULES, **{name: bad})
