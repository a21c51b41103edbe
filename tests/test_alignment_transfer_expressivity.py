"""The steps of the alignment paper's opening experiment (notebook a01, Figures 1 and 5) in
``layersim.papers.alignment.expressivity``, against the notebook's former inline code and values by hand."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.measures import alignment as al  # noqa: E402
from layersim.papers.alignment import expressivity as ex  # noqa: E402
from layersim.train import small_nets  # noqa: E402
from layersim.notebook import registry


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _images(n=60, seed=0):
    r = np.random.default_rng(seed)
    return r.integers(0, 256, size=(n, 4, 4), dtype=np.uint8), r.integers(0, 4, size=n)


def test_binary_task_cuts_one_shuffle_of_the_two_classes():
    images, labels = _images()
    X_tr, X_te, X_c, y_tr, y_te = ex.binary_task(images, labels, [1, 3], 8, 5, 4, seed=2)
    # a01's former inline code
    pool = np.random.default_rng(2).permutation(np.flatnonzero(np.isin(labels, [1, 3])))
    i_tr, i_te, i_c = pool[:8], pool[8:13], pool[13:17]
    np.testing.assert_array_equal(X_tr, images[i_tr].reshape(8, -1) / 255.0)
    np.testing.assert_array_equal(X_c, images[i_c].reshape(4, -1) / 255.0)
    np.testing.assert_array_equal(y_te, np.where(labels[i_te] == 3, 1.0, -1.0))
    assert X_te.shape == (5, 16) and X_tr.dtype == np.float64 and set(np.unique(y_tr)) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="two classes"):
        ex.binary_task(images, labels, [1, 2, 3], 2, 2, 2)
    with pytest.raises(ValueError, match="points asked"):
        ex.binary_task(images, labels, [1, 3], 30, 30, 30)


def test_learned_representations_are_the_three_trained_ones(capsys):
    r = np.random.default_rng(0)
    X_tr, X_te, X_c = r.random((24, 10)), r.random((12, 10)), r.random((8, 10))
    y_tr = np.sign(r.standard_normal(24))
    torch.manual_seed(7)  # the RBF network's output layer is drawn from torch's global generator
    reps, seconds, nn_hist, rbf_hist = ex.learned_representations(X_tr, X_te, X_c, y_tr, 8, 3, 2, 1.5, 0.1, 1, seed=4)
    assert list(reps) == [ex.AT_INIT, ex.NETWORK, ex.RBF, ex.SPARSE] and list(seconds) == list(ex.MAIN)
    assert len(nn_hist) == 3 and len(rbf_hist) == 2 and len(capsys.readouterr().out.splitlines()) == 3
    assert all(v >= 0 for v in seconds.values())
    # a01's former inline code, same seeds
    torch.manual_seed(7)
    net = small_nets.make_mlp(10, [8], seed=4)
    init = small_nets.hidden_representations(net, X_te)[0]
    hist = small_nets.train_mlp(net, X_tr, y_tr, loss="mse", epochs=3, batch_size=64, lr=1e-3, seed=4)
    rbf = small_nets.RBFNet(X_c, width=1.5)
    small_nets.train_mlp(rbf, X_tr, y_tr, loss="mse", epochs=2, batch_size=64, lr=1e-2, seed=4)
    codes = al.sparse_coding_features(X_tr, 8, alpha=0.1, seed=4, others=[X_te], max_iter=1)
    np.testing.assert_allclose(reps[ex.AT_INIT][1], init, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(nn_hist, hist, rtol=1e-6)
    trained = small_nets.hidden_representations(net, X_tr)[0]
    np.testing.assert_allclose(reps[ex.NETWORK][0], trained, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reps[ex.RBF][1], small_nets.hidden_representations(rbf, X_te)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reps[ex.SPARSE][1], codes[1], rtol=1e-6, atol=1e-9)
    assert reps[ex.NETWORK][0].shape == (24, 8) and reps[ex.SPARSE][0].shape == (24, 8)


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


def test_compare_representations_matches_the_inline_measures(capsys):
    reps, y_tr, y_te = _reps()
    tau = al.thresholds_for(30)
    rows = ex.compare_representations(reps, y_tr, y_te, tau, [0.1, 1.0], 40, n_record=10)
    assert list(rows) == list(reps) and len(capsys.readouterr().out.splitlines()) == 4
    record = np.unique(np.r_[0, np.geomspace(1, 40, 10).astype(int)])
    for name, (A_tr, A_te) in reps.items():  # a01's former inline code
        Phi_tr, Phi_te = al.prepare(A_tr), al.prepare(A_te)
        dec = al.svd(Phi_tr)
        ls = al.least_squares_fit(Phi_tr, y_tr, Phi_te, y_te)
        curve, area = al.curve_and_area(dec, y_tr, tau)
        gd = al.best_linear_curves(Phi_tr, y_tr, [0.1, 1.0], steps=40, Phi_test=Phi_te, y_test=y_te, record=record)
        row = rows[name]
        assert row["rank"] == int(np.sum(dec.sigma > dec.sigma[0] * 1e-10)) and row["sigma_1"] == dec.sigma[0]
        assert row["ls_train"] == ls["train_mse"] and row["ls_test"] == ls["test_mse"] and row["area"] == area
        np.testing.assert_array_equal(row["curve"], curve)
        np.testing.assert_array_equal(row["gd"]["train"], gd["train"])
        assert row["gd"]["lr"] == gd["lr"] and np.array_equal(row["gd"]["steps"], record)
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
