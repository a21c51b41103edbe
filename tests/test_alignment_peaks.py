"""Peaks-function transfer (alignment paper, Section 7.1): layersim.papers.alignment.peaks."""

import numpy as np
import pytest

from layersim.measures import alignment as al
from layersim.papers.alignment import peaks as tr
from layersim.train import small_nets


def test_weight_norm_at_reduction_takes_the_first_step_past_each_level():
    train_rel = np.array([1.0, 0.6, 0.3, 0.1])
    wn = np.array([0.0, 1.0, 2.0, 5.0])
    out = tr.weight_norm_at_reduction(train_rel, wn, [0.0, 0.4, 0.5, 0.9, 0.95])
    np.testing.assert_allclose(out, [0.0, 1.0, 2.0, 5.0, np.nan])
    with pytest.raises(ValueError):
        tr.weight_norm_at_reduction(train_rel, wn[:3], [0.5])


@pytest.fixture(scope="module")
def small_run():
    return tr.peaks_transfer_run(seed=3, hidden=(12, 12), n_source=400, n_test=150, epochs=2)


def test_run_uses_the_papers_tasks_and_normalised_curves(small_run):
    r = small_run
    tasks = al.peaks_tasks()
    s, t1, t2 = (tasks[r["setup"][k]] for k in tr.TASK_KINDS)
    assert al.peaks_related(s, t1) and al.peaks_unrelated(s, t2)
    for kind in tr.TASK_KINDS:
        for name in tr.REPRESENTATIONS:
            c = r["curves"][kind][name]
            assert c[0] == pytest.approx(1.0)
            assert np.all(np.diff(c) <= 1e-12)
        assert r["layer_curves"][kind]["transfer"].shape == (2, len(r["thresholds"]))
    # the last entry of the per-layer curves is Figure 10's curve
    np.testing.assert_allclose(r["layer_curves"]["related"]["transfer"][-1], r["curves"]["related"]["transfer"])
    assert len(r["history"]) == 2 and r["reps_test"]["init"].shape == (150, 12)


def test_run_original_curve_is_eq2_on_the_encoded_inputs(small_run):
    r = small_run
    train = al.peaks_dataset(400, seed=3)
    y = train.Y[:, r["setup"]["unrelated"]]
    np.testing.assert_allclose(r["y"]["unrelated"], y)
    ref = [al.alignment_loop(al.prepare(train.X), y, [tau])[0] / (y @ y) for tau in r["thresholds"][::10]]
    np.testing.assert_allclose(r["curves"]["unrelated"]["original"][::10], ref, atol=1e-9)
    # the grid is the demo's 0..30 scaled by sqrt(n / 1000)
    assert r["thresholds"][-1] == pytest.approx(30 * np.sqrt(0.4))


def test_run_init_representation_is_the_seeded_untrained_network(small_run):
    train = al.peaks_dataset(400, seed=3)
    net = small_nets.make_mlp(60, [12, 12], seed=3)
    np.testing.assert_allclose(small_run["reps"]["init"], small_nets.hidden_representations(net, train.X)[-1], atol=1e-6)


def test_training_on_the_source_raises_its_alignment():
    r = tr.peaks_transfer_run(seed=0, hidden=(60,), n_source=2000, n_test=100, epochs=15)
    a = r["areas"]["source"]
    assert a["transfer"] > a["init"] and a["transfer"] > a["original"]
    assert r["history"][-1] < 0.25 * r["history"][0]


def test_linear_transfer_matches_gradient_descent_on_the_subset(small_run):
    r = small_run
    out = tr.linear_transfer(r["reps"], r["reps_test"], r["y"]["related"], r["y_test"]["related"], n_target=50,
                             lrs=(0.1, 1.0), steps=30, seed=1)
    idx = np.random.default_rng(1).choice(400, size=50, replace=False)
    y = r["y"]["related"][idx]
    ref = al.best_linear_curves(al.prepare(r["reps"]["init"][idx]), y, (0.1, 1.0), steps=30,
                                Phi_test=al.prepare(r["reps_test"]["init"]), y_test=r["y_test"]["related"])
    np.testing.assert_allclose(out["init"]["train_rel"], ref["train"] / np.mean(y ** 2))
    for name in tr.REPRESENTATIONS:
        assert out[name]["train_rel"][0] == pytest.approx(1.0)  # w = 0 predicts 0
        assert out[name]["weight_norm"][0] == 0.0
        assert out[name]["train_rel"][-1] < 1.0
    with pytest.raises(ValueError):
        tr.linear_transfer(r["reps"], r["reps_test"], r["y"]["related"], r["y_test"]["related"], n_target=500)


def test_run_rejects_bad_sizes():
    with pytest.raises(ValueError):
        tr.peaks_transfer_run(seed=0, n_source=1)
