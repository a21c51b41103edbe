"""Fixed representations of the alignment paper (Sections 3 and 7.2) that no network learns: RBF kernel features
(:func:`rbf_features`), HOG descriptors of grey images (:func:`hog_features`) and sparse codes from dictionary learning
(:func:`sparse_coding_features`). Each returns float64 numpy ``[n, n_features]`` (see docs/modules.md,
``layersim.inputs.features``)."""

from __future__ import annotations

import numpy as np


def rbf_features(X, centers, gamma: float) -> np.ndarray:
    """RBF kernel features ``exp(-gamma ||x - c||^2)`` ``[n, n_centers]``; a bandwidth ``b`` is
    ``gamma = 1 / (2 b^2)``."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    C = np.asarray(centers, dtype=np.float64).reshape(len(centers), -1)
    d2 = (X ** 2).sum(1)[:, None] + (C ** 2).sum(1)[None, :] - 2.0 * X @ C.T
    return np.exp(-gamma * np.maximum(d2, 0.0))


def hog_features(images, orientations: int = 9, pixels_per_cell=(8, 8), cells_per_block=(2, 2)) -> np.ndarray:
    """HOG descriptors (scikit-image) of grey images ``[n, H, W]``: ``[n, n_features]``; §7.2: 9
    orientations, 8 x 8 pixels per cell, 2 x 2 cells per block."""
    from skimage.feature import hog

    images = np.asarray(images, dtype=np.float64)
    return np.stack([hog(im, orientations=orientations, pixels_per_cell=tuple(pixels_per_cell),
                         cells_per_block=tuple(cells_per_block), feature_vector=True) for im in images])


def sparse_coding_features(X_fit, n_components: int, alpha: float = 1.0, seed: int = 0, others=(),
                           batch_size: int = 256, max_iter: int = 20, fit_algorithm: str = "cd",
                           transform_algorithm: str = "lasso_cd") -> list[np.ndarray]:
    """Sparse codes from dictionary learning (Mairal et al. 2009; scikit-learn, l1 penalty ``alpha``): the
    dictionary fit on ``X_fit``; returns ``[X_fit codes, *codes of others]``."""
    import warnings

    from sklearn.decomposition import MiniBatchDictionaryLearning
    from sklearn.exceptions import ConvergenceWarning

    X_fit = np.asarray(X_fit, dtype=np.float64).reshape(len(X_fit), -1)
    dl = MiniBatchDictionaryLearning(n_components=n_components, alpha=alpha, batch_size=batch_size,
                                     max_iter=max_iter, random_state=seed, fit_algorithm=fit_algorithm,
                                     transform_algorithm=transform_algorithm, transform_alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dl.fit(X_fit)
        return [dl.transform(X_fit)] + [dl.transform(np.asarray(o, dtype=np.float64).reshape(len(o), -1))
                                        for o in others]
