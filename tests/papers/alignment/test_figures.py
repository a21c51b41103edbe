"""Tests of layersim.papers.alignment.figures: the layer-wise (Figure 7) and sweep (Figures 6, 17, 18) figures draw
every series they are given."""

import numpy as np
import pytest

from layersim.papers.alignment import figures, layers as la


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
