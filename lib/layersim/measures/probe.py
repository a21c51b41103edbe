"""Linear probes on frozen features: transfer to a new task (tracing paper, appendix B.4).

The tracing paper's task-transfer experiment (Figure 17, right) keeps a pretrained model's
feature map fixed and "only fine-tunes a linear classifier" for the new task; the layer-wise
accuracy is then that one classifier applied to every layer (eq. 2 with the new classifier,
``readout.layer_logits(model, hidden, head=probe)``). A separate probe per layer — the usual
measure of how transferable each layer is on its own — is :func:`per_layer_probe_accuracy`.

Probes are multinomial logistic regression with an L2 penalty (scikit-learn, L-BFGS), fitted
on the features the classifier reads (after the model's final norm). With an L2 penalty the
fitted probe turns with the features: rotating a layer's features by an orthogonal matrix
leaves its own probe's accuracy unchanged (a property the tests check), while a probe fitted
on another layer is not invariant — which is what separates the two measurements.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from layersim.measures import arrays

__all__ = ["fit_linear_probe", "per_layer_probe_accuracy", "probe_accuracy", "top1_accuracy"]


def fit_linear_probe(features, labels, C: float = 1.0, max_iter: int = 2000) -> nn.Linear:
    """A linear classifier ``W h + b`` for ``labels`` fitted on frozen ``features`` [N, d].

    Multinomial logistic regression minimising mean cross-entropy ``+ ||W'||^2 / (2 C N)``
    (scikit-learn's ``LogisticRegression(C=C)``; the bias is not penalised) on the features
    centred and divided by one global scale (``W'`` acts on those; the returned layer is folded
    back to act on the raw features). Every class
    ``0..K-1`` must occur (K = ``labels.max() + 1``). Returns a float32 ``nn.Linear(d, K)``
    whose logits give the probe's predictions (``layersim.nets.readout.layer_logits(..., head=)``).
    """
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
    """Top-1 accuracy ``mean_i 1[argmax_j z_ij = y_i]`` (the tracing paper's eq. 2 for one layer) of
    ``logits`` ``[..., N, K]`` against ``labels`` ``[N]``: a float for ``[N, K]``, one value per leading
    index otherwise (``[L+1, N, K]`` -> ``[L+1]``). The one accuracy of the library: probes, heads,
    fine-tuned models (``layersim.papers.alignment.pretrain.accuracy``) and every layer's readout
    (``layersim.nets.readout.layer_accuracy``)."""
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
