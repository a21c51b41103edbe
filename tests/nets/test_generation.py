"""Tests of layersim.nets.generation: eq. (22) diversity, eq. (21) coherence, nucleus sampling."""

import numpy as np
import pytest
import torch

from layersim.nets import generation as gen


def test_diversity_is_the_product_of_unique_ngram_ratios():
    assert gen.diversity("the cat sat on the mat") == 1.0
    loop = "a b a b a b a b"  # 2-grams: 7, unique 2; 3-grams: 6, unique 2; 4-grams: 5, unique 2
    assert gen.diversity(loop) == pytest.approx((2 / 7) * (2 / 6) * (2 / 5))
    assert gen.ngram_repetition(["x", "x", "x"], 2) == 0.5 and gen.ngram_repetition("one", 2) == 1.0
    assert gen.diversity([1, 2, 1, 2, 3]) == pytest.approx((3 / 4) * 1 * 1)
    with pytest.raises(ValueError):
        gen.ngram_repetition("a b", 0)


def test_coherence_is_a_cosine_and_invariant_to_scale():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    c = gen.coherence(a, b)
    assert c == pytest.approx([x @ y / np.linalg.norm(x) / np.linalg.norm(y) for x, y in zip(a, b)])
    assert gen.coherence(3 * a, 0.5 * b) == pytest.approx(c) and gen.coherence(a, a) == pytest.approx(np.ones(5))
    with pytest.raises(ValueError):
        gen.coherence(a, b[:4])


def test_nucleus_sampling_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([gen.nucleus_sample(logits, p=0.8, generator=g) for _ in range(400)])
    assert set(draws.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.8
    assert set(gen.nucleus_sample(logits.repeat(400, 1), p=0.1, generator=g).tolist()) == {0}
    freq = np.bincount(gen.nucleus_sample(logits.repeat(4000, 1), p=1.0, generator=g).numpy(), minlength=4) / 4000
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)


def test_sentence_embeddings_mean_pool_real_tokens():
    from layersim.inputs import fetch

    enc, tok = fetch.load_model("all-minilm-l6-v2")
    e = gen.sentence_embeddings(enc, tok, ["It is a truth universally acknowledged.", "Short."], batch_size=2)
    alone = gen.sentence_embeddings(enc, tok, ["Short."])
    # padding does not leak into the mean (that would move it by ~1e-2); the two batches' float32 rounding
    # differs by ~1e-6, which atol=1e-6 did not leave room for on every CPU's kernels
    np.testing.assert_allclose(e[1], alone[0], rtol=1e-5, atol=2e-5)
    assert e.shape == (2, 384)
