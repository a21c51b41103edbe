"""Tests of layersim.papers.clusters.figures: the truncation curves (Fig. 3), the skip grids (Fig. 4), the CKA maps
(Fig. 1) and their diagonals with the split scores, each drawing what it is given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from layersim.measures import block_structure
from layersim.papers.clusters import figures, protocol as cf

from builders import CLUSTER_MAPS, TWO_CLUSTERS, skip_grid, truncation_curves


def test_truncation_figure_draws_every_curve_of_every_run():
    curves = {"m/a": truncation_curves([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], 0.3, 0.25),
              "m/b": truncation_curves([1.0, 0.0, 0.5], [0.25, 0.75, 0.5], [0.0, 0.0, 1.0], 0.5, 0.5)}
    fig = figures.truncation_figure(curves)
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["m/a", "m/b"]
        for ax, c in zip(axes, curves.values()):
            lines = {l.get_label(): l for l in ax.get_lines()}
            for name in cf.TRUNCATIONS:
                np.testing.assert_array_equal(lines[name].get_ydata(), c[name])
            assert lines["full fine-tuned model"].get_ydata()[0] == c["full"]
            assert lines["majority class"].get_ydata()[0] == c["majority"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.truncation_figure({})


def test_skip_grid_figure_shows_every_grid_on_its_baseline_scale():
    grids = {"m/a": skip_grid([0.5, 0.8, 0.85]), "m/b": skip_grid([0.2, 0.15, 0.3])}
    base = {"m/a": {"full": 0.9, "majority": 0.5}, "m/b": {"full": 0.25, "majority": 0.2}}
    fig = figures.skip_grid_figure(grids, base)
    try:
        panels = [ax for ax in fig.axes if ax.get_images()]
        assert [ax.get_title() for ax in panels] == ["m/a (full 0.90)", "m/b (full 0.25)"]
        for ax, (key, G) in zip(panels, grids.items()):
            im = ax.get_images()[0]
            np.testing.assert_array_equal(np.ma.filled(im.get_array(), np.nan), G)
            # from the majority class to the full model's score, or the grid's best where it is higher
            assert im.get_clim() == (base[key]["majority"], max(base[key]["full"], np.nanmax(G)))
        assert panels[1].get_images()[0].get_clim()[1] == 0.3
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="no baseline"):
        figures.skip_grid_figure(grids, {"m/a": base["m/a"]})
    with pytest.raises(ValueError, match="at least one"):
        figures.skip_grid_figure({}, {})


def test_cka_maps_figure_draws_every_map_on_one_scale():
    fig = figures.cka_maps_figure(CLUSTER_MAPS[("m", "a")], "m on a")
    panels = fig.axes[:4]
    assert [ax.get_title() for ax in panels] == ["ORIG-ORIG", "FT-ORIG", "FT-FT", "FT[1]-FT[2]"]
    assert (panels[1].get_ylabel(), panels[1].get_xlabel()) == ("FT block", "ORIG block")
    assert panels[0].images[0].get_clim() == (0.0, 1.0) and fig._suptitle.get_text() == "m on a"
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.cka_maps_figure({}, "x")


def test_diagonals_and_block_scores_figure():
    fig = figures.diagonals_and_block_scores(CLUSTER_MAPS)
    left, right = fig.axes
    assert [l.get_label() for l in left.lines] == ["a: FT vs ORIG", "a: FT[1] vs FT[2]", "b: FT vs ORIG"]
    np.testing.assert_array_equal(left.lines[0].get_ydata(), [0.9, 0.8, 0.3, 0.1])
    assert [l.get_label() for l in right.lines] == ["a: ORIG-ORIG", "a: FT-FT", "b: ORIG-ORIG", "b: FT-FT"]
    np.testing.assert_allclose(right.lines[1].get_ydata(), block_structure.split_scores(TWO_CLUSTERS))
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.diagonals_and_block_scores({})
