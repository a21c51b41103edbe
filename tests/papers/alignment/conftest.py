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


@pytest.fixture
def fake_runs():
    """Two evaluate_task results on synthetic representations named as a08's."""
    import numpy as np

    from layersim.measures import alignment as al
    from layersim.papers.alignment import pretrain as pt, transfer

    r = np.random.default_rng(0)
    runs = []
    for k in range(2):
        y_tr, y_te = np.sign(r.standard_normal(20)), np.sign(r.standard_normal(15))
        reps = {name: (np.c_[y_tr * s, r.standard_normal((20, 4))], np.c_[y_te * s, r.standard_normal((15, 4))])
                for name, s in [("pre-trained c1", 1.0), ("pre-trained c2", 0.5), ("init c1", 0.2), ("init c2", 0.1),
                                (transfer.PRETRAINED, 0.5), (transfer.INIT, 0.1), (transfer.INPUT, 0.3),
                                ("HOG", 0.8), ("RBF", 0.05)]}
        runs.append(pt.evaluate_task(reps, y_tr, y_te, al.thresholds_for(20), list(transfer.TRAINED), [0.1, 1.0], 6,
                                     [0, 3, 6]))
        runs[-1]["pair"] = (k, k + 1)
    return runs
