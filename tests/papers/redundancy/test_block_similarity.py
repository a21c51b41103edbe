"""Tests of layersim.papers.redundancy.block_similarity: the block-by-block cosine and CKA matrices of Figs. 2 and
6, the notebook's printed lines and its ``models`` record."""

import numpy as np
import pytest

from builders import tiny_vit
from layersim.papers.redundancy import block_similarity as bs, models as rm

IMAGE = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist", "digits"))
TEXT = rm.Spec("asset", "all-minilm-l6-v2", "text", ("austen",))
R01 = {"n_images": 24, "n_texts": 12, "max_length": 16, "batch_size": 8}


def _unit_rows(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _linear_cka(X, Y):
    """Kornblith et al.'s linear CKA on column-centred features: ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))


def test_block_matrices_are_the_plain_cosine_and_linear_cka_of_the_cls_token():
    """Against numpy on the [CLS] vector of every block's output (the embedding output left out): the uncentred
    cosine of each sample's vectors at two blocks, averaged over samples, and linear CKA."""
    model = tiny_vit(perturb=True)
    cos, cka, n = bs.block_matrices(model, None, IMAGE, "digits", R01, "smoke", seed=0, device="cpu")
    batches, _ = rm.inputs(IMAGE, "digits", 24, None, scale="smoke", seed=0, batch_size=8, max_length=16)
    H = rm.block_tokens(model, batches, device="cpu")[1:].astype(np.float64)
    assert n == 24 and cos.shape == cka.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            assert cos[i, j] == pytest.approx(np.mean(np.sum(_unit_rows(H[i]) * _unit_rows(H[j]), axis=1)),
                                              abs=1e-5)
            assert cka[i, j] == pytest.approx(_linear_cka(H[i], H[j]), abs=1e-5)


@pytest.mark.filterwarnings("ignore:linear CKA on N")
def test_block_matrices_read_all_images_for_zero_and_texts_up_to_n_texts():
    model = tiny_vit()
    _, _, n = bs.block_matrices(model, None, IMAGE, "digits", {**R01, "n_images": 0}, "smoke", device="cpu")
    assert n == 360  # every digits test image
    lm, tokenizer = rm.load(TEXT, "smoke")
    cos, cka, n = bs.block_matrices(lm, tokenizer, TEXT, "austen", R01, "smoke", seed=0, device="cpu")
    assert n == 12 and cos.shape == (6, 6) and np.allclose(np.diag(cos), 1, atol=1e-5)
    with pytest.raises(ValueError, match="modality"):
        bs.block_matrices(model, None, rm.Spec("tracing_vit", "standard", "audio", ("x",)), "x", R01, "smoke")


def test_matrix_line_reports_the_off_diagonal_minimum_and_mean():
    cos = np.array([[1.0, 0.2, 0.4], [0.2, 1.0, 0.9], [0.4, 0.9, 1.0]])
    assert bs.matrix_line("ViT", "digits", 360, cos) == (
        "ViT             digits         N=  360  blocks= 3  cosine between blocks: min 0.200, mean 0.500")
    with pytest.raises(ValueError, match="square"):
        bs.matrix_line("ViT", "digits", 3, np.ones((2, 3)))


def test_correlation_lines_and_records():
    corr = {"same_model": {"A: x vs y": 0.91234}, "same_data": {"x: A vs B": 0.5, "y: A vs B": -0.25}}
    lines = bs.correlation_lines(corr).split("\n")
    assert lines == [f"{'same_model':10s} {'A: x vs y':55s} r = 0.912",
                     f"{'same_data':10s} {'x: A vs B':55s} r = 0.500",
                     f"{'same_data':10s} {'y: A vs B':55s} r = -0.250"]
    specs = {"A": IMAGE, "B": TEXT}
    assert bs.model_record(specs, {"A": 12, "B": 6}) == {
        "A": {"source": "tracing_vit", "name": "standard", "modality": "image", "data": ["fashion-mnist", "digits"],
              "blocks": 12},
        "B": {"source": "asset", "name": "all-minilm-l6-v2", "modality": "text", "data": ["austen"], "blocks": 6}}
    with pytest.raises(ValueError, match="block count"):
        bs.model_record(specs, {"A": 12})
