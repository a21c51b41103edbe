"""Tests of layersim.inputs.synthetic: the peaks functions, Figure 4's circle and labels from singular vectors."""

import numpy as np
import pytest

from layersim.inputs import synthetic
from layersim.measures import alignment as al


def test_singular_vector_labels_and_their_alignment():
    Phi = al.prepare(np.random.default_rng(16).normal(size=(90, 20)))
    s = np.linalg.svd(Phi, compute_uv=False)
    Y = synthetic.singular_vector_labels(Phi, [[(3, 1.0)], [(2, 0.8), (7, 0.6)]])
    assert Y.shape == (90, 2) and np.allclose(np.linalg.norm(Y, axis=0), 1.0)
    e = 1e-9
    a = al.alignment_curve(Phi, Y, [s[6] - e, s[6] + e, s[2] - e, s[2] + e, s[1] - e])
    assert np.allclose(a[0], [1, 1, 1, 0, 0], atol=1e-10)
    assert np.allclose(a[1], [1, 0.64, 0.64, 0.64, 0.64], atol=1e-10)
    with pytest.raises(ValueError):
        synthetic.singular_vector_labels(Phi, [[(0, 1.0)]])


def test_circle_dataset():
    c = synthetic.circle_dataset(1000, spread=0.3, seed=0)
    assert c["X"].shape == (1000, 2) and np.allclose(np.linalg.norm(c["X"], axis=1), 1.0)
    assert np.array_equal(c["y_v1"], np.where(c["cluster"] == 0, 1.0, -1.0))  # spread << pi/2
    assert set(np.unique(c["y_v2"])) == {-1.0, 1.0}
    s = np.linalg.svd(c["X"], compute_uv=False)
    assert s[0] ** 2 + s[1] ** 2 == pytest.approx(1000)  # unit rows: sum of sigma^2 = n
    curve = al.alignment_curve(c["X"], np.stack([c["y_v1"], c["y_v2"]], 1), [(s[0] + s[1]) / 2])
    assert curve[0, 0] > 0.9 * 1000 > 100 > curve[1, 0]


def test_peaks_tasks():
    tasks = synthetic.peaks_tasks()
    assert len(tasks) == 120 == len(set(tasks))
    assert all(len(set(t)) == 3 for t in tasks)
    assert synthetic.peaks_name(tasks[0]) == "P_ABC" and synthetic.peaks_name(tasks[-1]) == "P_FED"


def test_peaks_dataset_encoding_and_labels():
    d = synthetic.peaks_dataset(500, seed=3)
    assert d.V.shape == (500, 6) and d.X.shape == (500, 60) and d.Y.shape == (500, 120)
    assert np.all((d.V >= 0) & (d.V < 1))
    assert np.allclose(np.linalg.norm(d.X, axis=1), 1.0)
    assert np.allclose(d.Y.mean(axis=0), 0.0)
    # the encoding before normalisation: height 0.5 at the centre, s.d. 0.1
    raw = synthetic.peaks_encode(np.array([[0.3, 0.0, 0.95, 0.5, 0.5, 0.5]]), normalize=False)
    assert raw[0, 3] == pytest.approx(0.5) and raw[0, 4] == pytest.approx(0.5 * np.exp(-0.5))
    assert raw[0, 10] == pytest.approx(0.5) and raw[0, 29] == pytest.approx(0.5 * np.exp(-0.125))
    # each task's label is its rule on the raw variables
    for j in (0, 17, 64, 119):
        X, Yv, Z = d.tasks[j]
        rule = np.array([v[Yv] if v[X] > 0.5 else v[Z] for v in d.V])
        assert np.allclose(d.Y_raw[:, j], rule) and np.allclose(d.Y[:, j], rule - rule.mean())
    test = synthetic.peaks_dataset(100, seed=4, label_mean=d.label_mean)
    assert np.allclose(test.Y + d.label_mean, test.Y_raw)
    assert np.array_equal(synthetic.peaks_dataset(50, seed=3).V, synthetic.peaks_dataset(50, seed=3).V)


def test_peaks_pairs():
    tasks = synthetic.peaks_tasks()
    rel, unrel = synthetic.peaks_pairs("related"), synthetic.peaks_pairs("unrelated")
    assert len(rel) == 600 and len(unrel) == 720
    for i, j in rel[:50]:
        assert set(tasks[i]) == set(tasks[j]) and i != j
    for i, j in unrel[:50]:
        assert not set(tasks[i]) & set(tasks[j])
    assert synthetic.peaks_related((0, 1, 2), (1, 0, 2)) and not synthetic.peaks_related((0, 1, 2), (0, 1, 2))
    assert synthetic.peaks_unrelated((0, 1, 2), (4, 3, 5)) and not synthetic.peaks_unrelated((0, 1, 2), (2, 3, 4))
    s = synthetic.peaks_setup(5)
    assert synthetic.peaks_related(tasks[s["source"]], tasks[s["related"]])
    assert synthetic.peaks_unrelated(tasks[s["source"]], tasks[s["unrelated"]])
    with pytest.raises(ValueError):
        synthetic.peaks_pairs("similar")
