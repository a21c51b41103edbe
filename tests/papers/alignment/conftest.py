"""Fixtures shared by the tests of layersim.papers.alignment: figures drawn off screen and closed after each test,
small layer-wise runs (Figure 7) and a tiny architecture sweep (Figures 6, 17, 18)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from layersim.papers.alignment import layers as la, sweep as sw  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def digit_runs():
    return la.layer_runs("classification", "digits", epochs=2, n_seeds=2, width=8, depth=2, seed=5,
                         classes=(0, 1), n_points=40)


@pytest.fixture(scope="module")
def tiny_sweep():
    rows = sw.settings_grid({"depth": [1], "activation": ["linear", "relu"]})  # relu at depth 4 = the base
    configs = sw.unique_configs(rows)
    res, seconds = sw.run_sweep({"digits": [30, 20], "diabetes": [30, 20]}, configs, n_seeds=2, epochs=1, seed=3,
                                progress=False)
    return rows, configs, res, seconds
