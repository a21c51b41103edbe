"""Tests of layersim.papers.alignment.circle: the circle of Figure 4, each step against a plain loop, a full SVD or
explicit gradient descent."""

import numpy as np
import pytest

from layersim.inputs import synthetic
from layersim.measures import alignment as al
from layersim.papers.alignment import circle


@pytest.fixture
def circ():
    c = synthetic.circle_dataset(200, spread=0.3, seed=3)
    Phi = al.prepare(c["X"], bias=False, normalize=True)
    return c, Phi, np.stack([c["y_v1"], c["y_v2"]], axis=1)


def test_oriented_svd_turns_every_right_singular_vector_towards_the_direction(circ):
    c, Phi, _ = circ
    for direction in (c["d1"], -c["d1"], c["d2"]):
        U, sigma, Vt = circle.oriented_svd(Phi, direction)
        assert np.all(Vt @ direction >= 0)
        np.testing.assert_allclose(U @ np.diag(sigma) @ Vt, Phi, atol=1e-12)
        np.testing.assert_allclose(sigma, np.linalg.svd(Phi, compute_uv=False), rtol=1e-12)
        np.testing.assert_allclose(U.T @ U, np.eye(2), atol=1e-12)
    # v_1 lies along the line through both clusters, at most a few degrees off
    assert abs(circle.oriented_svd(Phi, c["d1"])[2][0] @ c["d1"]) > 0.99


def test_oriented_svd_refuses_a_direction_of_another_width(circ):
    with pytest.raises(ValueError, match="direction"):
        circle.oriented_svd(circ[1], [1.0, 0.0, 0.0])


def test_singular_value_draws_repeat_the_draw_with_consecutive_seeds():
    S = circle.singular_value_draws(50, 4, 0.3, seed=7)
    ref = [np.linalg.svd(synthetic.circle_dataset(50, 0.3, seed=7 + r)["X"], compute_uv=False) for r in range(4)]
    np.testing.assert_array_equal(S, np.array(ref))
    np.testing.assert_allclose((S ** 2).sum(axis=1), 50.0, rtol=1e-12)  # unit rows: sigma_1^2 + sigma_2^2 = n
    spread = circle.singular_value_spread(50, 4, 0.3, seed=7)
    np.testing.assert_array_equal(spread["mean"], S.mean(0))
    np.testing.assert_array_equal(spread["std"], S.std(0))
    assert spread["n_draws"] == 4
    with pytest.raises(ValueError, match="repeats"):
        circle.singular_value_draws(50, 0, 0.3)


def test_two_labellings_against_a_loop_over_the_full_svd(circ):
    c, Phi, Y = circ
    U, sigma, _ = circle.oriented_svd(Phi, c["d1"])
    fit = circle.two_labellings(Phi, U, sigma, Y, num=31)
    tau = np.linspace(0.0, 1.05 * sigma[0], 31)
    np.testing.assert_array_equal(fit["thresholds"], tau)
    for k in range(2):
        np.testing.assert_allclose(fit["curves"][k], al.alignment_loop(Phi, Y[:, k], tau), rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(fit["proj2"][:, k], [(U[:, i] @ Y[:, k]) ** 2 for i in range(2)], rtol=1e-12)
    mid = al.alignment_loop(Phi, Y[:, 0], [0.5 * (sigma[0] + sigma[1])])[0]
    assert fit["fraction_mid"][0] == pytest.approx(mid / len(Phi), rel=1e-10)
    assert fit["fraction_mid"][0] == pytest.approx(fit["proj2"][0, 0] / len(Phi), rel=1e-10)  # only u_1 counts
    expected = np.mean([a >= b - 1e-9 for a, b in zip(fit["curves"][0], fit["curves"][1])])
    assert fit["fraction_first_at_least_second"] == expected == 1.0  # the clusters' labels: never below


def test_two_labellings_needs_two_singular_values(circ):
    c, Phi, Y = circ
    with pytest.raises(ValueError, match="two singular values"):
        circle.two_labellings(Phi, np.ones((len(Phi), 1)), [3.0], Y)


def test_convergence_against_plain_gradient_descent(circ):
    c, Phi, Y = circ
    sigma = np.linalg.svd(Phi, compute_uv=False)
    lr, steps = 0.5 / sigma[0] ** 2, 40
    conv = circle.convergence(Phi, Y, lr, steps, logistic_lr=1.0)
    n = len(Phi)
    for k in range(2):
        w, sq = np.zeros(2), []
        for _ in range(steps + 1):
            sq.append(np.sum((Phi @ w - Y[:, k]) ** 2))
            w = w - lr * Phi.T @ (Phi @ w - Y[:, k])
        np.testing.assert_allclose(conv["squared"][k], sq, rtol=1e-10)
        w_star = np.linalg.lstsq(Phi, Y[:, k], rcond=None)[0]
        floor = np.sum((Phi @ w_star - Y[:, k]) ** 2)
        assert conv["irreducible"][k] == pytest.approx(floor, rel=1e-10)
        red = np.array(sq) - floor
        np.testing.assert_allclose(conv["reducible"][k], red, rtol=1e-8, atol=1e-9 * n)
        assert conv["steps_to_90pct"][k] == np.flatnonzero(red <= 0.1 * red[0])[0]
        # logistic loss in bits, by hand: gradient of mean log2(1 + exp(-y phi.w))
        w, losses = np.zeros(2), []
        for _ in range(steps + 1):
            m = Y[:, k] * (Phi @ w)
            losses.append(np.mean(np.log1p(np.exp(-m))) / np.log(2))
            w = w - 1.0 * Phi.T @ (-Y[:, k] / (1 + np.exp(m))) / (n * np.log(2))
        np.testing.assert_allclose(conv["logistic"]["train"][k], losses, rtol=1e-10)
    assert conv["prop1_max_relative_error"] < 1e-10
    assert conv["steps_to_90pct"][0] < conv["steps_to_90pct"][1]  # the paper's statement, with a wide margin


def test_circle_figures_draw_every_labelling(circ):
    c, Phi, Y = circ
    U, sigma, Vt = circle.oriented_svd(Phi, c["d1"])
    names = ["along v1", "along v2"]
    fig = circle.labellings_figure(c["X"], dict(zip(names, Y.T)), Vt, sigma, 0.3)
    assert len(fig.axes) == 2 and all(len(ax.collections) == 1 for ax in fig.axes)
    fig = circle.alignment_figure(circle.two_labellings(Phi, U, sigma, Y), sigma, names)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == names
    assert len(fig.axes[1].patches) == 4  # two bars per label vector
    conv = circle.convergence(Phi, Y, 0.5 / sigma[0] ** 2, 20, 1.0)
    fig = circle.learning_curves_figure(conv, names, 0.5, 1.0)
    assert len(fig.axes) == 3 and all(len(ax.lines) == 2 for ax in fig.axes)
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), conv["logistic"]["train"][0])
