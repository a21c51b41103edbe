"""Tests of layersim.papers.redundancy.block_redundancy: Block Redundancy (eq. 1) beside the output MSE of
approximating each block, the representations Figs. 4, 5 and 8-10 project, and the numbers of the statements."""

import numpy as np
import pytest
import torch

from builders import tiny_vit
from layersim.measures import redundancy, trends
from layersim.papers.redundancy import block_redundancy as br, models as rm

IMAGE = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist", "digits"))
R02 = {"n_fit": 24, "n_eval": 20, "max_length": 16, "batch_size": 8}


@pytest.fixture(scope="module")
def measured():
    model = tiny_vit(perturb=True)
    return br.measure(model, None, IMAGE, "digits", R02, "smoke", seed=0, device="cpu")


def test_measure_reads_eq_1_and_the_output_mse_of_approximating_each_block(measured, spliced_vit,
                                                                          final_representation):
    """Against references built here: eq. 1 by hand on the [CLS] token of every block's output, and the output
    MSE of block ``k`` as the mean squared change of the final [CLS] representation when the ViT's block ``k`` is
    replaced by its least-squares map fitted on the ``n_fit`` training inputs."""
    model = measured.model
    kw = dict(tokenizer=None, scale="smoke", seed=0, batch_size=8, max_length=16)
    fit, _ = rm.inputs(IMAGE, "digits", 24, split="train", **kw)
    held, labels = rm.inputs(IMAGE, "digits", 20, split="test", **kw)
    np.testing.assert_array_equal(measured.labels, labels)
    assert len(measured.fit) == len(fit) and all(torch.equal(a, b) for a, b in zip(measured.fit, fit))
    assert len(measured.held) == len(held) and all(torch.equal(a, b) for a, b in zip(measured.held, held))
    # eq. 1 by hand: minus the mean squared difference of a block's [CLS] output and its input
    H = rm.block_tokens(model, held, device="cpu").astype(np.float64)
    np.testing.assert_allclose(measured.br, [-np.mean((H[k] - H[k - 1]) ** 2) for k in range(1, len(H))],
                               rtol=1e-5)
    assert measured.br.shape == measured.mse.shape == (3,) and (measured.mse > 0).all()
    original = final_representation(model, held)
    for k in (1, 2, 3):
        approx = final_representation(spliced_vit(model, k, k, fit), held)
        assert measured.mse[k - 1] == pytest.approx(np.mean((approx - original) ** 2), rel=1e-3)
    # the spread: the mean squared deviation of the final representation from its mean
    assert measured.spread == pytest.approx(float(np.mean((original - original.mean(0)) ** 2)), rel=1e-6)


def test_pca_representations_approximate_the_most_and_least_redundant_blocks(measured, spliced_vit,
                                                                            final_representation):
    most, least, original, approx = br.pca_representations(measured, device="cpu")
    assert most == int(np.argmax(measured.br)) + 1 and least == int(np.argmin(measured.br)) + 1 and most != least
    np.testing.assert_allclose(original, final_representation(measured.model, measured.held), rtol=0, atol=1e-5)
    assert list(approx) == [f"block {most} approximated (most redundant)",
                            f"block {least} approximated (least redundant)"]
    for k, z in zip((most, least), approx.values()):
        # the ViT with block k replaced by its least-squares map, built here without layersim
        expected = final_representation(spliced_vit(measured.model, k, k, measured.fit), measured.held)
        np.testing.assert_allclose(z, expected, rtol=0, atol=1e-4)
        # the output MSE of approximating block k is the mean squared change of this representation
        assert redundancy.representation_mse(original, z) == pytest.approx(measured.mse[k - 1], rel=1e-4)


def test_redundancy_line_names_the_most_and_least_redundant_blocks():
    line = br.redundancy_line("ViT", "digits", np.array([-0.3, -0.01, -0.1]), np.array([0.5, 0.01, 0.2]))
    assert line == "ViT             digits         most redundant block  2, least  1; Spearman(BR, -MSE) = 1.000"
    with pytest.raises(ValueError, match="one length"):
        br.redundancy_line("ViT", "digits", np.zeros(3), np.zeros(4))


def test_rank_agreement_and_most_redundant_are_the_claims_numbers():
    BR = {("A", "x"): np.array([-0.3, -0.01, -0.1, -0.2]), ("B", "y"): np.array([-0.05, -0.5, -0.2, -0.1])}
    MSE = {("A", "x"): np.array([0.4, 0.02, 0.3, 0.1]), ("B", "y"): np.array([0.9, 0.1, 0.3, 0.2])}
    rhos, wins = br.rank_agreement(BR, MSE)
    assert list(rhos) == list(wins) == ["A | x", "B | y"]
    assert rhos["A | x"] == pytest.approx(trends.spearman(BR[("A", "x")], -MSE[("A", "x")]))
    assert rhos["A | x"] == pytest.approx(0.8)  # ranks of BR 1, 4, 3, 2 against ranks of -MSE 1, 4, 2, 3
    assert rhos["B | y"] == pytest.approx(-0.8)  # ranks 4, 1, 2, 3 against 1, 4, 2, 3
    assert wins == {"A | x": True, "B | y": False}  # most redundant: A block 2 (0.02 < 0.4), B block 1 (0.9 > 0.1)
    assert br.most_redundant(BR) == {"A | x": 2, "B | y": 1}
    with pytest.raises(ValueError, match="no output MSE"):
        br.rank_agreement(BR, {("A", "x"): MSE[("A", "x")]})


def test_depth_trend_is_the_rank_correlation_of_depth_and_br():
    """Against scipy's Spearman on hand-made profiles: falling, rising, and a monotone transform changes nothing."""
    from scipy.stats import spearmanr

    BR = {("A", "x"): np.array([-0.01, -0.02, -0.05, -0.3]), ("B", "y"): np.array([-0.3, -0.1, -0.2, -0.01]),
          ("C", "z"): np.array([-0.2, -0.1, -0.15, -0.3, -0.05])}
    rho = br.depth_trend(BR)
    assert rho["A | x"] == pytest.approx(-1.0) and rho["B | y"] == pytest.approx(0.8)
    assert rho["C | z"] == pytest.approx(spearmanr(np.arange(5), BR[("C", "z")]).statistic)
    assert br.depth_trend({k: np.exp(v) for k, v in BR.items()}) == pytest.approx(rho)
    with pytest.raises(ValueError, match="fewer than three blocks"):
        br.depth_trend({("D", "w"): np.array([-0.1, -0.2])})


def test_redundant_block_fidelity_is_the_most_redundant_blocks_mse_over_the_spread():
    """By hand: the most redundant block (highest BR) is block 3 for A, block 1 for B; its MSE over the spread. The
    spread is what relative_change divides by, so the value equals it on a representation whose MSE is known."""
    BR = {("A", "x"): np.array([-0.3, -0.2, -0.01]), ("B", "y"): np.array([-0.05, -0.2, -0.3])}
    MSE = {("A", "x"): np.array([4.0, 2.0, 0.5]), ("B", "y"): np.array([1.0, 3.0, 6.0])}
    out = br.redundant_block_fidelity(BR, MSE, {("A", "x"): 10.0, ("B", "y"): 4.0})
    assert out == pytest.approx({"A | x": 0.05, "B | y": 0.25})
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 4))
    changed = ref + rng.normal(scale=0.3, size=ref.shape)
    spread = float(np.mean((ref - ref.mean(0)) ** 2))
    one = br.redundant_block_fidelity({("C", "z"): np.array([0.0])},
                                      {("C", "z"): np.array([redundancy.representation_mse(ref, changed)])},
                                      {("C", "z"): spread})
    assert one["C | z"] == pytest.approx(redundancy.relative_change(ref, changed))
    with pytest.raises(ValueError, match="constant"):
        br.redundant_block_fidelity(BR, MSE, {("A", "x"): 0.0, ("B", "y"): 4.0})
    with pytest.raises(ValueError, match="no output MSE or spread"):
        br.redundant_block_fidelity(BR, MSE, {("A", "x"): 1.0})


def test_extremes_name_both_ends_of_the_ranking_with_their_output_mse():
    BR = {("A", "x"): np.array([-0.3, -0.2, -0.01]), ("B", "y"): np.array([-0.05, -0.2, -0.3])}
    MSE = {("A", "x"): np.array([4.0, 2.0, 0.5]), ("B", "y"): np.array([1.0, 3.0, 6.0])}
    out = br.extremes(BR, MSE)
    assert out["A | x"] == {"most": 3, "least": 1, "br_most": -0.01, "br_least": -0.3, "mse_most": 0.5,
                            "mse_least": 4.0, "ratio": 8.0}
    assert (out["B | y"]["most"], out["B | y"]["least"], out["B | y"]["ratio"]) == (1, 3, 6.0)
