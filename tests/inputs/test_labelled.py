"""Tests of layersim.inputs.labelled: labelled subsets, random labels, stacked images, what a network sees and
one domain's data."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from layersim.inputs import labelled


def test_labelled_subset_and_random_labels():
    base = TensorDataset(torch.arange(10.0).view(10, 1), torch.zeros(10, dtype=torch.long))
    sub = labelled.LabelledSubset(base, [2, 5], [1, 0], transform=lambda x: x * 2)
    assert len(sub) == 2 and sub[1][0].item() == 10.0 and sub[1][1] == 0
    X, y = labelled.stack(sub)
    assert X.shape == (2, 1) and y.tolist() == [1, 0]
    r = labelled.random_labels(20000, 4, seed=3)
    assert set(np.unique(r)) == {0, 1, 2, 3} and abs(np.bincount(r) / 20000 - 0.25).max() < 0.02
    with pytest.raises(ValueError, match="labels"):
        labelled.LabelledSubset(base, [1, 2], [0])


def test_domain_sets_offline_and_relabelled():
    (X_tr, y_tr), (X_te, y_te), idx = labelled.domain_sets("fashion-mnist", "inverted", 3, 2, classes=(0, 5), seed=0)
    assert X_tr.shape == (6, 1, 28, 28) and X_te.shape == (4, 1, 28, 28) and len(idx) == 6
    assert np.array_equal(np.bincount(y_tr.numpy()), [3, 3])
    (C_tr, _), _, idx_c = labelled.domain_sets("fashion-mnist", "clean", 3, 2, classes=(0, 5), seed=0)
    assert np.array_equal(idx, idx_c)
    mean, std = 0.2860, 0.3530  # inverted pixels 1 - x, both standardised with Fashion-MNIST's statistics
    np.testing.assert_allclose((X_tr * std + mean).numpy(), 1 - (C_tr * std + mean).numpy(), atol=1e-5)
    r = labelled.relabelled((X_tr, y_tr), [1, 1, 1, 0, 0, 0])
    assert r[0][1].item() == 1 and torch.equal(r[0][0], X_tr[0])
    assert np.array_equal(labelled.labels_of((X_tr, y_tr)), y_tr.numpy()) and labelled.images_of((X_tr, y_tr)) is X_tr
    sub = labelled.LabelledSubset(TensorDataset(X_tr, y_tr), [0, 1], [0, 1])
    assert labelled.relabelled(sub, [1, 0]).targets.tolist() == [1, 0] and labelled.labels_of(sub).tolist() == [0, 1]
    with pytest.raises(ValueError, match="labels"):
        labelled.relabelled((X_tr, y_tr), [0])


def test_model_input_standardises_like_the_data_set():
    x = labelled.model_input(torch.full((2, 1, 28, 28), 0.286), "fashion-mnist")
    assert torch.allclose(x, torch.zeros_like(x), atol=1e-3)
