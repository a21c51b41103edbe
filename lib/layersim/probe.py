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

__all__ = ["Standardize", "fit_linear_probe", "per_layer_probe_accuracy", "probe_accuracy", "train_head", "train_linear_head"]


def _check_xy(features, labels, what: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if X.ndim != 2:
        raise ValueError(f"{what}: features must be [N, d], got shape {X.shape}")
    if y.ndim != 1 or len(y) != len(X):
        raise ValueError(f"{what}: need one label per row: {len(X)} rows, labels of shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise ValueError(f"{what}: labels must be integers 0..K-1, got dtype {y.dtype}")
    if not np.isfinite(X).all():
        raise ValueError(f"{what}: features contain NaN or inf")
    return X, y.astype(np.int64)


def _standardizer(X: np.ndarray) -> tuple[np.ndarray, float]:
    """Mean feature vector and one global scale (root mean squared deviation per feature).

    Centring and a single scale keep the fit rotation-equivariant (per-feature scaling would
    not) while removing the offsets and magnitudes that make L-BFGS crawl on LayerNorm outputs.
    """
    mean = X.mean(axis=0)
    scale = float(np.sqrt(((X - mean) ** 2).sum(axis=1).mean() / X.shape[1]))
    return mean, (scale if scale > 0 else 1.0)


def fit_linear_probe(features, labels, C: float = 1.0, max_iter: int = 2000) -> nn.Linear:
    """A linear classifier ``W h + b`` for ``labels`` fitted on frozen ``features`` [N, d].

    Multinomial logistic regression minimising mean cross-entropy ``+ ||W'||^2 / (2 C N)``
    (scikit-learn's ``LogisticRegression(C=C)``; the bias is not penalised) on the features
    centred and divided by one global scale (``W'`` acts on those; the returned layer is folded
    back to act on the raw features). Every class
    ``0..K-1`` must occur (K = ``labels.max() + 1``). Returns a float32 ``nn.Linear(d, K)``
    whose logits give the probe's predictions (``layersim.readout.layer_logits(..., head=)``).
    """
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    X, y = _check_xy(features, labels, "fit_linear_probe")
    if not np.isfinite(C) or C <= 0:
        raise ValueError(f"C must be a positive number, got {C}")
    classes = np.unique(y)
    if len(classes) < 2 or not np.array_equal(classes, np.arange(classes[-1] + 1)):
        raise ValueError(f"labels must cover every class 0..K-1 (K >= 2); found {classes.tolist()}")
    mean, scale = _standardizer(X)
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


def train_linear_head(features, labels, epochs: int = 5, lr: float = 0.01, batch_size: int = 256, seed: int = 0,
                      num_classes: int | None = None) -> nn.Linear:
    """A linear classifier on frozen ``features`` [N, d] trained by minibatch Adam on the mean
    cross-entropy (the redundancy paper's probe, §4.3: Adam, 5 epochs, batch 256; its code's
    learning rate 0.01), float32, on the CPU with one thread. Deterministic given ``seed`` (the
    initialisation and the order of the minibatches). ``num_classes`` defaults to
    ``labels.max() + 1``. Unlike :func:`fit_linear_probe` this does not run to convergence: a few
    epochs of a fixed schedule, as the paper."""
    X, y = _check_xy(features, labels, "train_linear_head")
    K = int(y.max()) + 1 if num_classes is None else int(num_classes)
    if y.min() < 0 or y.max() >= K:
        raise ValueError(f"labels must be integers in 0..{K - 1}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = nn.Linear(X.shape[1], K)
    return train_head(head, X, y, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)


class Standardize(nn.Module):
    """``(h - mean) / scale`` with a fixed mean vector and one global scale (:func:`_standardizer`).
    Placed before a head whose first layer is linear, it is a reparameterisation, not a new model:
    the composition is again that linear layer on the raw features."""

    def __init__(self, mean: np.ndarray, scale: float):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.scale = float(scale)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return (h - self.mean.to(h.dtype)) / self.scale


def train_head(head: nn.Module, features, labels, epochs: int = 5, lr: float = 0.01, batch_size: int = 256,
               seed: int = 0, loss: str = "ce", standardize: bool = False, choices: int | None = None) -> nn.Module:
    """Train ``head`` (any ``[N, d] -> [N, K]`` module, in place, from its current weights) on frozen
    ``features`` by minibatch Adam: mean cross-entropy (``loss="ce"``, integer labels) or mean
    squared error on output 0 (``"mse"``, a regression). Float32, CPU, one thread; dropout in
    ``head`` is on while training. Deterministic given ``seed`` (the order of the minibatches and
    dropout). Used by :func:`train_linear_head` and by the clusters paper's TUNED heads
    (``layersim.clusters_finetune``). Returns ``head`` in eval mode.

    ``standardize``: train and return ``nn.Sequential(Standardize(mean, scale), head)`` with the
    features' mean and one global scale. Without it Adam cannot move a head whose input varies by
    1e-3 around a constant of norm 10 (the [CLS] token of a BERT's early blocks: a head re-trained
    on them stayed at chance where an L-BFGS probe reached 0.4); with a linear first layer the
    function class is unchanged.

    ``choices``: multiple choice (``C`` endings per example): ``features`` are ``[N * C, d]`` (the
    ``C`` rows of an example together), ``head`` scores each row with one logit, ``labels`` ``[N]``
    index the right ending, the loss is the cross-entropy over each example's ``C`` logits and
    minibatches hold whole examples."""
    if choices is not None:
        if loss != "ce" or choices < 2 or np.asarray(features).shape[0] != len(labels) * choices:
            raise ValueError(f"choices={choices}: need loss='ce' and features with {choices} rows per label "
                             f"({len(labels)} labels, {np.asarray(features).shape[0]} rows)")
    if standardize:
        mean, scale = _standardizer(np.asarray(features, dtype=np.float64))
        head = nn.Sequential(Standardize(mean, scale), head)
    if loss not in ("ce", "mse"):
        raise ValueError(f"loss must be 'ce' or 'mse', got {loss!r}")
    if choices is not None:
        X = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels)
        if not np.isfinite(X).all() or y.min() < 0 or y.max() >= choices:
            raise ValueError(f"train_head: features must be finite and labels in 0..{choices - 1}")
        yt = torch.from_numpy(y.astype(np.int64))
    elif loss == "ce":
        X, y = _check_xy(features, labels, "train_head")
        yt = torch.from_numpy(y.astype(np.int64))
    else:
        X = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        if X.ndim != 2 or y.shape != (len(X),) or not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError(f"train_head: need finite features [N, d] and targets [N], got {X.shape}, {y.shape}")
        yt = torch.from_numpy(y.astype(np.float32))
    if epochs < 1 or batch_size < 1 or not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"epochs and batch_size must be >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")
    Xt = torch.from_numpy(X.astype(np.float32))
    if choices is not None:
        Xt = Xt.view(len(yt), choices, -1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        head = head.float().cpu().train()
        opt = torch.optim.Adam(head.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # dropout
            for _ in range(epochs):
                for idx in torch.randperm(len(Xt), generator=gen).split(batch_size):
                    if choices is not None:  # one logit per ending, softmax over an example's endings
                        out = head(Xt[idx].reshape(-1, Xt.shape[-1])).view(len(idx), choices)
                    else:
                        out = head(Xt[idx])
                    err = (nn.functional.cross_entropy(out, yt[idx]) if loss == "ce"
                           else nn.functional.mse_loss(out[:, 0], yt[idx]))
                    opt.zero_grad(set_to_none=True)
                    err.backward()
                    opt.step()
    finally:
        torch.set_num_threads(threads)
    return head.eval()


def probe_accuracy(head: nn.Linear, features, labels) -> float:
    """Top-1 accuracy of a probe (any ``[N, d] -> [N, K]`` module) on ``features``."""
    X, y = _check_xy(features, labels, "probe_accuracy")
    with torch.no_grad():
        logits = head(torch.from_numpy(X).to(head.weight.dtype))
    return float((logits.argmax(dim=1).numpy() == y).mean())


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
