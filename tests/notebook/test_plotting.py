"""Tests of layersim.notebook.plotting: the figure helpers draw what they are given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from layersim.notebook import plotting


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_alignment_curves_one_line_per_curve_optionally_relative():
    tau = np.linspace(0, 2, 5)
    curves = {"a": [4.0, 3, 2, 1, 0], "b": [2.0, 2, 1, 1, 0]}
    ax = plotting.alignment_curves(curves, tau, title="t", styles={"b": dict(color="red", ls="--")})
    assert [line.get_label() for line in ax.lines] == ["a", "b"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), curves["a"])
    assert ax.lines[1].get_linestyle() == "--" and ax.get_title() == "t"
    _, ax2 = plt.subplots()
    plotting.alignment_curves(curves, tau, ax=ax2, normalize=True, ylabel="share")
    np.testing.assert_allclose(ax2.lines[0].get_ydata(), np.array(curves["a"]) / 4)
    assert ax2.get_ylabel() == "share"


def test_label_projection_bars_and_singular_values():
    _, ax = plt.subplots()
    sigma, proj2 = np.array([5.0, 3, 2, 1, 0.5, 0.1]), np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    ax, tw = plotting.label_projection_bars(sigma, proj2, ax, show=4, title="t")
    assert len(ax.patches) == 4 and len(tw.lines) == 1
    np.testing.assert_allclose(tw.lines[0].get_ydata(), sigma[:4])


def test_layer_alignment_curves_relative_with_bands():
    _, ax = plt.subplots()
    plotting.layer_alignment_curves(ax, [0, 1, 2], [[4, 2, 1], [4, 3, 2]], [[0, 0.1, 0.1], [0, 0, 0]],
                                    labels=["a", "b"])
    assert len(ax.lines) == 2 and ax.lines[0].get_ydata()[0] == 1.0
    assert len(ax.collections) == 1  # a band only where the standard error is not zero
    _, ax2 = plt.subplots()
    plotting.layer_alignment_curves(ax2, [0, 1, 2], [4, 2, 1], normalize=False)
    np.testing.assert_allclose(ax2.lines[0].get_ydata(), [4, 2, 1])


def test_alignment_family_draws_input_and_every_setting():
    tau = np.linspace(0, 1, 5)
    runs = np.tile(np.linspace(1, 0, 5), (3, 1))
    _, ax = plt.subplots()
    plotting.alignment_family(ax, tau, runs, {"a": (runs, runs), "b": (runs * 0.5, runs)}, title="t")
    assert len(ax.lines) == 1 + 2 * 2
    np.testing.assert_allclose(ax.lines[0].get_ydata(), runs[0])
    np.testing.assert_allclose(ax.lines[3].get_ydata(), runs[0] * 0.5)  # setting b at initialisation


def test_pca_comparison_projects_every_panel_on_the_references_axes():
    r = np.random.default_rng(0)
    X = r.normal(size=(200, 5)) * np.array([5.0, 2.0, 0.5, 0.1, 0.1])
    pc1 = np.linalg.svd(X - X.mean(0), full_matrices=False)[2][0]  # the reference's first principal axis
    shifted = X + pc1
    fig = plotting.pca_comparison(X, {"shifted": shifted}, labels=np.arange(200) % 3, title="t")
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["original", "shifted"]
    p0, p1 = (a.collections[0].get_offsets() for a in axes)
    # the same axes for both panels: a shift along the first principal axis moves PC 1 by 1, PC 2 not at all
    np.testing.assert_allclose(np.abs(np.asarray(p1)[:, 0] - np.asarray(p0)[:, 0]), 1.0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(p1)[:, 1], np.asarray(p0)[:, 1], atol=1e-9)
    with pytest.raises(ValueError, match="reference"):
        plotting.pca_comparison(X[:2], {})


def _fake_runs(names, T=5, steps=(0, 1, 10)):
    r = np.random.default_rng(0)
    runs = []
    for _ in range(3):
        gd = {n: {loss: {"steps": np.array(steps), "train": r.random(len(steps)) + 0.1, "test": r.random(len(steps)) + 0.1}
                  for loss in ("squared", "logistic")} for n in names}
        runs.append({"curves": {n: np.sort(r.random(T))[::-1] + 1 for n in names}, "gd": gd})
    return runs


def test_task_alignment_bands_and_linear_learning_curves_draw_every_representation():
    runs = _fake_runs(["a", "b"])
    fig, ax = plt.subplots()
    plotting.task_alignment_bands(ax, runs, ["a", "b"], np.arange(5), {"a": "red"}, title="t")
    assert [l.get_label() for l in ax.get_lines()] == ["a", "b"] and ax.get_title() == "t"
    m = np.mean([r["curves"]["a"] / r["curves"]["a"][0] for r in runs], axis=0)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), m)
    fig, axes = plt.subplots(1, 2)
    plotting.linear_learning_curves(axes, runs, ["a", "b"])
    for ax in axes:
        lines = ax.get_lines()
        assert [l.get_label() for l in lines] == ["a train", "a test", "b train", "b test"]
        assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
        assert ax.get_xscale() == "log" and lines[0].get_xdata()[0] == 0.5


@pytest.mark.parametrize("n", [1, 5, 16, 17, 31, 32, 33, 49, 97])
def test_tick_positions_thin_long_layer_axes_and_keep_both_ends(n):
    at = plotting.tick_positions(n)
    assert at[0] == 0 and at[-1] == n - 1 and all(b > a for a, b in zip(at, at[1:]))
    if n <= 16:
        assert at == list(range(n))
    else:
        gaps = np.diff(at)
        assert len(at) <= 17 and gaps[:-1].min() == gaps[:-1].max() >= 2  # evenly spaced but for the last


def test_layer_heatmap_of_31_layers_labels_every_other_layer():
    import matplotlib.pyplot as plt

    ax = plotting.layer_heatmap(np.eye(31), layers=list(range(31)), label="linear CKA")
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(i) for i in range(0, 31, 2)]
    colour_bar = ax.figure.axes[-1]  # the colour bar's own axes, added beside the heatmap
    assert colour_bar.get_ylabel() == "linear CKA"
    with pytest.raises(TypeError, match="label"):
        plotting.layer_heatmap(np.eye(3))  # every colour bar says what it measures
    plt.close("all")


def test_budget_ladder_draws_seeds_means_spread_and_threshold():
    values = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7]]
    ax = plotting.budget_ladder([100, 200, 400], values, 0.5, xlabel="steps", title="t")
    dots = [line for line in ax.lines if line.get_linestyle() == "None" and line.get_marker() == "o"]
    assert [list(d.get_ydata()) for d in dots] == values and list(dots[0].get_xdata()) == [100.0] * 3
    threshold = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(threshold) == 1 and list(threshold[0].get_ydata()) == [0.5, 0.5]
    bars = ax.containers[0]  # the error bar: means, and each rung's sample sd (0 for one seed)
    assert np.allclose(bars.lines[0].get_ydata(), [0.2, 0.5, 0.7])
    segments = bars.lines[2][0].get_segments()
    assert np.allclose([s[1][1] - s[0][1] for s in segments], [0.2, 0.2, 0.0])
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["100", "200", "400"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="one list of seed values per budget"):
        plotting.budget_ladder([1, 2], [[0.1]], 0.0)
