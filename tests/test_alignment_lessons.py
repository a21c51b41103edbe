"""The alignment paper's lesson helpers, each checked against an independent computation (plain loops, a full
SVD, explicit gradient descent, the steps done by hand):

- the circle of Figure 4 (``papers.alignment.circle``);
- convergence on a fixed representation (``papers.alignment.convergence``: Figures 8-9, Propositions 1-2);
- every layer before and after training (``papers.alignment.layers``: Figure 7);
- the architecture sweep (``papers.alignment.sweep``: Figures 6, 17, 18);
- the figures of the last two (``papers.alignment.figures``).
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from layersim.measures import alignment as al  # noqa: E402
from layersim.papers.alignment import circle, convergence, figures, layers as la, sweep as sw  # noqa: E402
from layersim.train import small_nets  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ----------------------------------------------------------------------------- circle (Figure 4)


@pytest.fixture
def circ():
    c = al.circle_dataset(200, spread=0.3, seed=3)
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
    ref = [np.linalg.svd(al.circle_dataset(50, 0.3, seed=7 + r)["X"], compute_uv=False) for r in range(4)]
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


# ----------------------------------------------------------------------------- convergence (Figures 8-9)


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


def test_crossing_against_the_inline_computation():
    t = np.arange(400)
    closed = np.stack([np.exp(-t / 100.0), 0.3 * np.exp(-t / 10.0) + 0.7 * np.exp(-t / 1000.0)])
    out = convergence.crossing(closed)
    diff = closed[0] - closed[1]
    sign = np.sign(diff[1:])
    changes = np.flatnonzero(sign[1:] != sign[:-1]) + 2
    assert out["crossing_step"] == changes[0] and out["sign_changes"] == len(changes) == 1
    assert diff[out["crossing_step"] - 1] > 0 > diff[out["crossing_step"]]  # y_2 ahead, then behind
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
    closed, gd = al.gd_loss_curve(dec, Y, lr, 500), al.gd_loss_reference(wide, Y, lr, 50)
    fig = convergence.learning_curves_figure(closed, gd, names, convergence.crossing(closed)["crossing_step"], 0.9)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), closed[0, 1:])


# ----------------------------------------------------------------------------- every layer, before and after (Figure 7)


def test_layer_names():
    assert la.layer_names(3) == ["input", "hidden 1", "hidden 2", "hidden 3"]
    with pytest.raises(ValueError, match="depth"):
        la.layer_names(0)


def test_figure7_task_draws_a_balanced_binary_task_or_the_regression_task():
    X, y, loss = la.figure7_task("classification", "digits", seed=2, classes=(3, 5), n_points=60)
    assert X.shape == (60, 64) and loss == "bce" and sorted(set(y)) == [-1.0, 1.0] and y.sum() == 0
    X0, t0 = la.binary_task("digits", (3, 5), 30, seed=2)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, 2.0 * t0 - 1.0)
    X, y, loss = la.figure7_task("regression", "diabetes", seed=2)
    assert X.shape == (442, 10) and loss == "mse" and y.min() == -1.0 and y.max() == 1.0
    with pytest.raises(ValueError, match="kind"):
        la.figure7_task("ranking", "digits")


@pytest.fixture(scope="module")
def digit_runs():
    return la.layer_runs("classification", "digits", epochs=2, n_seeds=2, width=8, depth=2, seed=5,
                         classes=(0, 1), n_points=40)


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


def test_layer_figures_draw_every_layer_of_every_task(digit_runs):
    runs = {"one": digit_runs, "two": digit_runs}
    titles = {"one": "first", "two": "second"}
    fig = figures.layer_alignment_figure(runs, titles, la.layer_names(2))
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 2 * 3  # before and after, three representations
    assert fig.axes[1].get_title() == "second, 40 points, 2 runs"
    fig = figures.layer_areas_figure(runs, titles, la.layer_names(2))
    heights = [p.get_height() for p in fig.axes[0].patches]
    np.testing.assert_allclose(heights[3:], digit_runs["area_trained"].mean(0))
    with pytest.raises(ValueError, match="at least one task"):
        figures.layer_alignment_figure({}, {}, [])


# ----------------------------------------------------------------------------- the architecture sweep (Figures 6, 17, 18)


@pytest.fixture(scope="module")
def tiny_sweep():
    rows = sw.settings_grid({"depth": [1], "activation": ["linear", "relu"]})  # relu at depth 4 = the base
    configs = sw.unique_configs(rows)
    res, seconds = sw.run_sweep({"digits": [30, 20], "diabetes": [30, 20]}, configs, n_seeds=2, epochs=1, seed=3,
                                progress=False)
    return rows, configs, res, seconds


def test_run_sweep_against_the_loop_done_by_hand(tiny_sweep):
    rows, configs, res, seconds = tiny_sweep
    assert list(configs) == ["d1-w128-adam-relu-b64", "d4-w128-adam-linear-b64", "d4-w128-adam-relu-b64"]
    assert list(res) == [(t, c) for t in ("digits", "diabetes") for c in configs] and list(seconds) == ["digits", "diabetes"]
    for r in range(2):
        task = sw.alignment_task("diabetes", 30, 20, seed=3 + r)
        ref = sw.alignment_before_after(task, configs["d1-w128-adam-relu-b64"], epochs=1, seed=3 + r)
        out = res[("diabetes", "d1-w128-adam-relu-b64")][r]
        np.testing.assert_allclose(out["history"], ref["history"], rtol=1e-6)
        for split in ("train", "test"):
            for rep in ("input", "init", "trained"):
                np.testing.assert_allclose(out[split]["curves"][rep], ref[split]["curves"][rep], rtol=1e-6, atol=1e-9)
    stacked = sw.stacked_curves(res, "digits", configs["d4-w128-adam-linear-b64"], "test", "trained")
    assert stacked.shape == (2, 62)
    np.testing.assert_array_equal(stacked[1], res[("digits", "d4-w128-adam-linear-b64")][1]["test"]["curves"]["trained"])
    with pytest.raises(ValueError, match="no runs"):
        sw.stacked_curves(res, "mnist", configs["d4-w128-adam-relu-b64"], "test", "trained")
    with pytest.raises(ValueError, match="n_seeds"):
        sw.run_sweep({"digits": [30, 20]}, configs, n_seeds=0, epochs=1)


def test_area_cells_compare_mean_areas_over_the_runs(tiny_sweep):
    _, configs, res, _ = tiny_sweep
    cells = sw.area_cells(res)
    assert len(cells) == 2 * 3 * 2 and [c["split"] for c in cells[:2]] == ["train", "test"]
    for c in cells:
        outs = res[(c["task"], c["network"])]
        areas = {rep: [o[c["split"]]["areas"][rep] for o in outs] for rep in ("input", "init", "trained")}
        for rep, v in areas.items():
            assert c[f"area_{rep}"] == pytest.approx(np.mean(v), rel=1e-12)
        assert c["area_trained_se"] == pytest.approx(np.std(areas["trained"], ddof=1) / np.sqrt(2), rel=1e-9)
        assert c["above"] == (np.mean(areas["trained"]) > max(np.mean(areas["input"]), np.mean(areas["init"])))
    text = sw.describe_cells(cells, ["digits", "diabetes"]).split("\n")
    assert len(text) == 4 and text[0].startswith("train digits") and text[3].startswith("test  diabetes")
    sub = [c["area_trained"] for c in cells if c["split"] == "test" and c["task"] == "diabetes"]
    assert text[3].endswith(f"trained {np.mean(sub):.3f}")
    with pytest.raises(ValueError, match="no cells"):
        sw.describe_cells(cells, ["mnist"])
    losses = sw.final_losses(res)
    key = ("digits", "d4-w128-adam-relu-b64")
    assert losses["digits/d4-w128-adam-relu-b64"] == pytest.approx(np.mean([o["history"][-1] for o in res[key]]))


def test_sweep_figure_draws_the_swept_families_only(tiny_sweep):
    rows, _, res, _ = tiny_sweep
    fig = figures.sweep_figure(res, rows, ["digits", "diabetes"], ["width", "activation", "depth"], "test", "t")
    assert len(fig.axes) == 2 * 2  # width was not swept: two rows (activation, depth) x two tasks
    assert [ax.get_title() for ax in fig.axes[:2]] == ["digits, activation (test)", "diabetes, activation (test)"]
    # the input (orange) and, per setting, init (dashed) and trained: 1 + 2 x 2 lines
    assert len(fig.axes[0].lines) == 5
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(),
                               np.mean([o["test"]["curves"]["input"] for o in res[("digits", "d4-w128-adam-linear-b64")]], 0))
    with pytest.raises(ValueError, match="nothing to draw"):
        figures.sweep_figure(res, rows, ["digits"], ["width"], "test", "t")
