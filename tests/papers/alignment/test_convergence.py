"""Tests of layersim.papers.alignment.convergence: learning on a fixed representation (Figures 8-9, Propositions 1-2),
against gradient descent done step by step, plain loops and hand-worked curves."""

import numpy as np
import pytest

from layersim.measures import alignment as al
from layersim.notebook import settings
from layersim.papers.alignment import convergence
from layersim.train import linear


def test_processes_match_gradient_descent_in_the_singular_basis():
    sigma, steps = np.array([6.0, 1.0]), 10
    lr = 0.5 / 36.0
    out = convergence.processes(steps)
    assert list(out) == list(convergence.SHARES_FIG8)
    for name, share in convergence.SHARES_FIG8.items():
        p = np.sqrt([share, 1 - share])  # u_i^T y
        w = np.zeros(2)  # w_i^V: gradient descent decouples along the singular directions
        for _ in range(steps):
            w = w - lr * sigma * (sigma * w - p)
        assert out[name]["loss_0"] == pytest.approx(1.0, rel=1e-12)
        assert out[name]["loss_t"] == pytest.approx(np.sum((sigma * w - p) ** 2), rel=1e-12)
    assert out["(a) high alignment"]["loss_t"] < out["(b) low alignment"]["loss_t"]  # 0.08 vs 0.38
    with pytest.raises(ValueError, match="share"):
        convergence.processes(3, shares={"bad": 1.5})
    with pytest.raises(ValueError, match="lr_factor"):
        convergence.processes(3, lr_factor=1.0)


def test_pixel_representation_draws_images_with_a_bias_column_and_raw_rows():
    from sklearn.datasets import load_digits

    Phi = convergence.pixel_representation("digits", 120, seed=4)
    images = load_digits().images
    idx = np.random.default_rng(4).choice(len(images), size=120, replace=False)
    np.testing.assert_array_equal(Phi[:, :-1], images[idx].reshape(120, -1) / 16.0)
    np.testing.assert_array_equal(Phi[:, -1], 1.0)  # the bias column, rows not normalised
    with pytest.raises(ValueError, match="n_points"):
        convergence.pixel_representation("digits", 5000)
    with pytest.raises(ValueError, match="unknown image data set"):
        convergence.pixel_representation("ct-position", 10)


@pytest.fixture
def wide():
    """A representation with more than 50 distinct singular values: 90 x 61 (a bias column)."""
    rng = np.random.default_rng(0)
    return al.prepare(rng.random((90, 60)) * np.linspace(2.0, 0.1, 60), bias=True, normalize=False)


def test_synthetic_labels_sit_on_the_named_singular_vectors(wide):
    U = np.linalg.svd(wide, full_matrices=False)[0]
    Y, names = convergence.synthetic_labels(wide, 0.1)
    proj2 = (U.T @ Y) ** 2
    np.testing.assert_allclose(proj2[9, 0], 1.0, rtol=1e-12)
    np.testing.assert_allclose([proj2[4, 1], proj2[49, 1]], [0.9, 0.1], rtol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(Y, axis=0), 1.0, rtol=1e-12)
    assert names == ["$y_1$ = $u_{10}$", "$y_2$ = 0.95 $u_5$ + 0.32 $u_{50}$"]
    with pytest.raises(ValueError, match="share_50"):
        convergence.synthetic_labels(wide, -0.1)


def test_prop1_agreement_takes_relative_errors_above_the_floor_only():
    closed = np.array([[1.0, 0.5, 1e-13, 1e-14, 7.0], [2.0, 1.0, 0.5, 0.25, 7.0]])
    gd = closed[:, :4] * np.array([[1.0, 1.0 + 1e-9, 2.0, 3.0], [1.0, 1.0, 1.0 + 2e-9, 1.0]])
    out = convergence.prop1_agreement(closed, gd)
    assert out["max_relative_error"] == pytest.approx(2e-9, rel=1e-6)  # the two steps below 1e-12 left out
    assert out["pairs_checked"] == 6 and out["pairs"] == 8
    assert out["max_abs_error_over_initial"] == pytest.approx(max(2e-14, 1e-9 * 0.5, 2e-9 * 0.5) / 2.0, rel=1e-6)
    with pytest.raises(ValueError, match="does not cover"):
        convergence.prop1_agreement(closed[:, :2], gd)


def test_crossing_on_hand_worked_curves():
    # d = L_1 - L_2 = [0, -1, 1, 0.5, -0.5, 0.5]: the sign flips at steps 2, 4 and 5 (step 0, where d = 0, is left
    # out); y_2 leads by 1 at step 2, y_1 by 1 at step 1
    closed = np.array([[10.0, 8.0, 6.0, 5.0, 4.0, 3.5], [10.0, 9.0, 5.0, 4.5, 4.5, 3.0]])
    out = convergence.crossing(closed)
    assert (out["crossing_step"], out["sign_changes"]) == (2, 3)
    assert (out["lead_y2"], out["lead_y2_step"], out["lead_y1"], out["lead_y1_step"]) == (1.0, 2, 1.0, 1)
    assert out["y2_leads_first"] is False
    swapped = convergence.crossing(closed[::-1])  # d negated: the same crossings, the leads exchanged
    assert (swapped["crossing_step"], swapped["sign_changes"], swapped["lead_y2_step"]) == (2, 3, 1)
    # smooth curves: y_2 (a fast component) ahead at first, y_1 ahead from the one crossing on
    t = np.arange(400)
    closed = np.stack([np.exp(-t / 100.0), 0.3 * np.exp(-t / 10.0) + 0.7 * np.exp(-t / 1000.0)])
    out = convergence.crossing(closed)
    diff = closed[0] - closed[1]
    c = out["crossing_step"]
    assert out["sign_changes"] == 1 and 2 <= c < 400
    assert np.all(diff[1:c] > 0) and np.all(diff[c:] < 0)  # y_2 ahead, then behind
    assert out["lead_y2"] == diff.max() and out["lead_y2_step"] == np.argmax(diff)
    assert out["lead_y1"] == -diff.min() and out["lead_y1_step"] == np.argmax(-diff)
    assert out["y2_leads_first"] is True
    assert convergence.crossing(closed[::-1])["y2_leads_first"] is False
    assert convergence.crossing(np.stack([t + 1.0, t + 2.0]))["crossing_step"] == -1
    with pytest.raises(ValueError, match="two learning curves"):
        convergence.crossing(closed[:1])


def test_prop2_table_against_a_loop_and_the_bound_holds(wide):
    dec = al.svd(wide)
    Y, _ = convergence.synthetic_labels(dec, 0.1)
    lr = 0.9 / dec.sigma[0] ** 2
    closed = al.gd_loss_curve(dec, Y, lr, 20000)
    table = convergence.prop2_table(dec, Y, closed, lr, num=12)
    tau = np.geomspace(dec.sigma[49] / 2, dec.sigma[0] * (1 - 1e-9), 12)
    np.testing.assert_array_equal(table["thresholds"], tau)
    expected = []
    for k in range(2):
        for tj in tau:
            delta = al.alignment_loop(wide, Y[:, k], [tj])[0]
            if delta <= 1e-12:
                continue
            needed = np.flatnonzero(closed[k] <= closed[k, 0] - 0.9 * delta)[0]
            expected.append((k, tj, delta, -np.log(0.1) / (2 * lr * tj ** 2), needed))
    np.testing.assert_allclose(table["rows"], np.array(expected), rtol=1e-9, atol=1e-12)
    assert table["within"].all() and table["fraction"] == 1.0  # Proposition 2 is a theorem
    assert 0 < table["median_ratio"] <= 1
    fig = convergence.prop2_figure(table, ["y1", "y2"], lr)
    assert len(fig.axes[0].lines) == 3
    with pytest.raises(ValueError, match="sigma_50"):
        convergence.prop2_table(wide[:, :20], Y, closed, lr)


def test_convergence_figures(wide):
    dec = al.svd(wide)
    Y, names = convergence.synthetic_labels(dec, 0.1)
    fig = convergence.processes_figure(10)
    assert len(fig.axes) == 2 and fig.axes[0].get_title().startswith("(a) high alignment: loss 1.00 → 0.08")
    tau = np.linspace(0, dec.sigma[4], 30)
    fig = convergence.alignment_figure(al.alignment_curve(dec, Y, tau), tau, names, dec.sigma, "digits")
    assert len(fig.axes[0].lines) == 2 + 3  # two curves, three marked singular values
    lr = 0.9 / dec.sigma[0] ** 2
    closed, gd = al.gd_loss_curve(dec, Y, lr, 500), linear.gd_loss_reference(wide, Y, lr, 50)
    fig = convergence.learning_curves_figure(closed, gd, names, convergence.crossing(closed)["crossing_step"], 0.9)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), closed[0, 1:])


def test_rules_take_a06s_smoke_settings_and_name_a_bad_value():
    """The labels use the 50th singular vector (at least 50 points); the step-size factor lies strictly inside
    (0, 1) and y_2's share in [0, 1]."""
    smoke = dict(dataset="fashion-mnist", n_points=1000, share_50=0.1, lr_factor=0.9, steps=3000, gd_steps=150,
                 fig8_steps=10)
    assert settings.pick({"smoke": smoke}, "smoke", rules=convergence.RULES) == smoke
    assert settings.pick({"smoke": smoke}, "smoke", rules=convergence.RULES, share_50=1.0)["share_50"] == 1.0
    for name, bad in [("n_points", 49), ("lr_factor", 1.0), ("lr_factor", 0.0), ("share_50", 1.5),
                      ("dataset", "mnist")]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=convergence.RULES, **{name: bad})
