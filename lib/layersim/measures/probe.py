"""Linear probes on frozen features: transfer to a new task (tracing paper, App. B.4, Figure 17 right).

One classifier fitted on the final features, applied to every layer (``readout.layer_logits(model, hidden,
head=probe)``), or one probe per layer (:func:`per_layer_probe_accuracy`). Probes are L2-penalised multinomial
logistic regression (scikit-learn, L-BFGS) on the features after the final norm
(see docs/modules.md, ``layersim.measures.probe``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from layersim.measures import arrays

__all__ = ["fit_linear_probe", "half_split", "per_layer_probe_accuracy", "probe_accuracy", "top1_accuracy"]


def fit_linear_probe(features, labels, C: float = 1.0, max_iter: int = 2000) -> nn.Linear:
    """A linear classifier for ``labels`` fitted on frozen ``features [N, d]``: multinomial logistic regression,
    mean cross-entropy ``+ ||W||^2 / (2 C N)`` (bias unpenalised), on features centred and divided by one global
    scale. Every class ``0..K-1`` must occur. Returns a float32 ``nn.Linear(d, K)`` acting on the raw features."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    X, y = arrays.labelled_rows(features, labels, "fit_linear_probe")
    if not np.isfinite(C) or C <= 0:
        raise ValueError(f"C must be a positive number, got {C}")
    classes = np.unique(y)
    if len(classes) < 2 or not np.array_equal(classes, np.arange(classes[-1] + 1)):
        raise ValueError(f"labels must cover every class 0..K-1 (K >= 2); found {classes.tolist()}")
    mean, scale = arrays.standardizer(X)
    # one BLAS/OpenMP thread: on this small problem more threads only spin (measured: 0.15 s with
    # one thread, 18 s with two on a busy 2-core machine, for 1437 x 128 features and 10 classes)
    with threadpool_limits(1):
        clf = LogisticRegression(C=C, max_iter=max_iter).fit((X - mean) / scale, y)
    coef, intercept = clf.coef_, clf.intercept_
    if len(classes) == 2:  # sklearn keeps one row for two classes: logits (0, w.h + b)
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    coef, intercept = coef / scale, intercept - coef @ mean / scale  # back to the raw features
    head = nn.Linear(X.shape[1], len(classes))
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(coef))
        head.bias.copy_(torch.from_numpy(intercept))
    return head


def top1_accuracy(logits, labels) -> float | np.ndarray:
    """Top-1 accuracy ``mean_i 1[argmax_j z_ij = y_i]`` (tracing eq. 2 for one layer) of ``logits [..., N, K]``
    against ``labels [N]``: a float for ``[N, K]``, else one per leading index (``[L+1, N, K]`` -> ``[L+1]``)."""
    z = arrays.to_numpy(logits, native=True, name="logits")
    y = np.asarray(labels)
    if z.ndim < 2 or z.shape[-2] != len(y) or y.ndim != 1:
        raise ValueError(f"top1_accuracy: logits [..., N, K] and labels [N], got {z.shape} and {y.shape}")
    if len(y) == 0:
        raise ValueError("top1_accuracy of an empty set")
    hits = (np.argmax(z, axis=-1) == y).mean(axis=-1)
    return float(hits) if z.ndim == 2 else hits


def probe_accuracy(head: nn.Linear, features, labels) -> float:
    """Top-1 accuracy of a probe (any ``[N, d] -> [N, K]`` module) on ``features``."""
    X, y = arrays.labelled_rows(features, labels, "probe_accuracy")
    with torch.no_grad():
        logits = head(torch.from_numpy(X).to(head.weight.dtype))
    return top1_accuracy(logits, y)


def per_layer_probe_accuracy(train_features, train_labels, test_features, test_labels,
                             C: float = 1.0) -> np.ndarray:
    """Test accuracy ``[n_layers]`` of one probe per layer, each fitted on that layer's
    training features: ``train_features`` ``[n_layers, N, d]``, ``test_features``
    ``[n_layers, M, d]`` (the same layers in the same order)."""
    tr, te = np.asarray(train_features), np.asarray(test_features)
    if tr.ndim != 3 or te.ndim != 3 or tr.shape[0] != te.shape[0] or tr.shape[2] != te.shape[2]:
        raise ValueError(f"features must be [n_layers, N, d] with the same layers and width; "
                         f"got {tr.shape} (train) and {te.shape} (test)")
    return np.array([probe_accuracy(fit_linear_probe(tr[i], train_labels, C=C), te[i], test_labels)
                     for i in range(tr.shape[0])])


def half_split(labels) -> np.ndarray:
    """A deterministic stratified half split of samples labelled ``labels [N]``: within each class, the samples in
    their order alternate train, test, train, ... (True = train)."""
    labels = np.asarray(labels)
    train = np.zeros(len(labels), bool)
    for k in np.unique(labels):
        train[np.flatnonzero(labels == k)[::2]] = True
    return train
