"""Tests of layersim.train.linear: linear models on a fixed representation (learning curves on both losses, the
step-size sweep, least squares, errors after small training sets)."""

import numpy as np
import pytest

from layersim.measures import alignment as al
from layersim.train import linear


def test_linear_squared_curve_matches_prop1_up_to_scaling(phi_y):
    Phi, y = phi_y
    n = len(y)
    lr = 0.3
    out = linear.linear_training_curves(Phi, y, "squared", lr=lr, steps=50)
    # mean loss with gradient (2/n) Phi^T r is the paper's GD with eta = 2 lr / n, loss divided by n
    ref = al.gd_loss_curve(Phi, y, 2 * lr / n, 50) / n
    assert np.allclose(out["train"], ref, rtol=1e-10)
    assert out["train"][0] == pytest.approx(1.0)
    rec = linear.linear_training_curves(Phi, y, "squared", lr=lr, steps=50, record=[0, 10, 50])
    assert np.array_equal(rec["steps"], [0, 10, 50]) and np.allclose(rec["train"], ref[[0, 10, 50]])


def test_linear_logistic_curve_decreases_and_gradient_is_right(phi_y):
    Phi, y = phi_y
    out = linear.linear_training_curves(Phi, y, "logistic", lr=1.0, steps=100, Phi_test=Phi[:10], y_test=y[:10])
    assert out["train"][0] == pytest.approx(1.0)  # log(2)/log(2) at w = 0
    assert np.all(np.diff(out["train"]) <= 1e-12)
    assert set(out) >= {"test", "train_error", "test_error", "weight_norm"}
    # gradient check of the logistic loss at the final weights, by central differences
    w = out["w"]

    def L(v):
        return np.mean(np.logaddexp(0, -y * (Phi @ v))) / np.log(2)

    g = Phi.T @ (-y * linear._sigmoid(-y * (Phi @ w))) / (len(y) * np.log(2))
    e = np.eye(len(w))[3] * 1e-6
    assert (L(w + e) - L(w - e)) / 2e-6 == pytest.approx(g[3], rel=1e-5, abs=1e-9)


def test_best_linear_curves_picks_the_best_finite_step(phi_y):
    Phi, y = phi_y
    out = linear.best_linear_curves(Phi, y, [0.01, 0.1, 1.0, 1e8], steps=30)
    assert out["all"][1e8] == float("inf")  # diverged
    assert out["lr"] == 1.0 and out["train"][-1] == min(v for v in out["all"].values())
    with pytest.raises(FloatingPointError):
        linear.best_linear_curves(Phi, y, [1e8, 1e9], steps=30)


def test_least_squares_fit_interpolates_wide_features():
    r = np.random.default_rng(20)
    Phi = r.normal(size=(30, 60))
    y = r.normal(size=30)
    fit = linear.least_squares_fit(Phi, y, Phi[:5], y[:5])
    assert fit["train_mse"] < 1e-20 and fit["test_mse"] < 1e-20 and fit["w"].shape == (60,)


def test_sample_size_errors_separable_vs_noise():
    r = np.random.default_rng(5)
    y, yt = np.repeat([-1.0, 1.0], 50), np.repeat([-1.0, 1.0], 100)
    good = al.prepare(np.c_[y, 0.3 * r.standard_normal((100, 5))])
    good_t = al.prepare(np.c_[yt, 0.3 * r.standard_normal((200, 5))])
    noise, noise_t = al.prepare(r.standard_normal((100, 50))), al.prepare(r.standard_normal((200, 50)))
    e_good = linear.sample_size_errors(good, y, good_t, yt, [4, 20], [0.1, 1.0, 10.0], steps=50, repeats=3, seed=0)
    e_noise = linear.sample_size_errors(noise, y, noise_t, yt, [4, 20], [0.1, 1.0, 10.0], steps=50, repeats=3, seed=0)
    assert e_good.shape == (2, 3) and e_good.max() < 0.05
    assert 0.3 < e_noise.mean() < 0.7
    np.testing.assert_array_equal(e_good, linear.sample_size_errors(good, y, good_t, yt, [4, 20], [0.1, 1.0, 10.0],
                                                                steps=50, repeats=3, seed=0))
    with pytest.raises(ValueError, match="sizes"):
        linear.sample_size_errors(good, y, good_t, yt, [102], [1.0])
    with pytest.raises(ValueError, match=r"\+-1"):
        linear.sample_size_errors(good, y * 2, good_t, yt, [4], [1.0])
