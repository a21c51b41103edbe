"""Tests of layersim.papers.alignment.transfer_figures: the figures of the transfer notebooks draw the curves they are
given."""

import numpy as np
import torch

from layersim.measures import alignment as al
from layersim.papers.alignment import transfer_figures as figures


def _images(n, seed=0):
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


def test_figures_draw_the_given_curves(fake_runs):
    runs = fake_runs
    tau = al.thresholds_for(20)
    fig = figures.alignment_bands(runs, tau, "c2")
    assert [len(ax.lines) for ax in fig.axes] == [3, 3]
    assert "'c2'" in fig.axes[0].get_title()
    mean_norm = np.mean([r["curves"]["HOG"] / r["curves"]["HOG"][0] for r in runs], axis=0)
    np.testing.assert_allclose(fig.axes[1].lines[1].get_ydata(), mean_norm)
    fig = figures.layer_profile(["c1", "c2"], {"init": [0.1, 0.2], "pre-trained": [0.3, 0.4]}, 0.25)
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), [0.3, 0.4])
    assert len(figures.learning_curves(runs).axes) == 2
    mean_diff = {"c": np.array([0.0, 0.1]), "f": np.array([0.0, 0.2])}
    tasks = [{"group": "g", "diff": {"f": np.array([0.0, 0.3])}}, {"group": "h", "diff": {"f": np.array([0.0, 0.1])}}]
    fig = figures.similarity_differences([0.0, 1.0], tasks, mean_diff, ["g", "h"])
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), [0.0, 0.2])
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [0.0, 0.3])
    assert "'f'" in fig.axes[1].get_title()
    fig = figures.domain_examples({"a": (_images(8),), "b": (_images(8, 1),)}, ["a", "b"])
    assert len(fig.axes) == 16 and fig.axes[8].get_ylabel() == "b"
    fig = figures.drop_curves({("a", "b"): np.array([0.0, 0.5])}, np.array([0.0, 2.0]), 4000, "fc2")
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), [0.0, 1.0])
