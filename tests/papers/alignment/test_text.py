"""Tests of layersim.papers.alignment.text: the Austen pair tasks, the text features and the encoder readout of a11."""

import numpy as np
import pytest
import torch

from layersim.inputs import assets, fetch, locate
from layersim.nets import models
from layersim.papers.alignment import text as at


TRAIN = ["the cat sat on the mat", "a dog sat", "the the cat", "dogs and cats sat together"]


TEST = ["the unicorn sat", "zebra"]


def test_pair_examples_takes_two_classes_in_pool_order():
    labels = np.array([3, 0, 1, 3, 1, 2, 0])
    idx, t = at.pair_examples(labels, (1, 3))
    np.testing.assert_array_equal(idx, [0, 2, 3, 4])
    np.testing.assert_array_equal(t, [1, 0, 1, 0])  # 0 for pair[0] = class 1, 1 for class 3
    with pytest.raises(ValueError, match="two different"):
        at.pair_examples(labels, (1, 1))
    with pytest.raises(ValueError, match=r"\[5\] are not in the pool"):
        at.pair_examples(labels, (1, 5))


def test_sentence_pools_are_balanced_and_share_no_sentence():
    tr, va = at.sentence_pool("train", 20, seed=1), at.sentence_pool("validation", 20, seed=1)
    assert np.bincount(tr.labels).tolist() == [20] * 6 == np.bincount(va.labels).tolist()
    assert not set(tr.text_a) & set(va.text_a)
    assert at.sentence_pool("train", 20, seed=1).text_a == tr.text_a
    with pytest.raises(ValueError, match="per_novel"):
        at.sentence_pool("train", 0)


def test_bag_of_words_counts_the_training_vocabulary_only():
    A_tr, A_te = at.bag_of_words(TRAIN, TEST)
    from sklearn.feature_extraction.text import CountVectorizer

    vocab = CountVectorizer().fit(TRAIN).vocabulary_
    assert A_tr.shape == (4, len(vocab)) and A_tr.dtype == np.float64
    assert A_tr[2, vocab["the"]] == 2 and A_tr[2, vocab["cat"]] == 1 and A_tr[2].sum() == 3
    # unseen words ("unicorn", "zebra") are not features
    assert A_te[0].sum() == 2 and A_te[1].sum() == 0
    with pytest.raises(ValueError, match="at least one"):
        at.bag_of_words([], TEST)


def test_lsa_is_a_truncated_svd_of_the_training_tfidf():
    texts = [f"word{i % 7} word{i % 5} common text {i % 3}" for i in range(40)]
    A_tr, A_te = at.lsa(texts, texts[:5], dims=4)
    assert A_tr.shape == (40, 4) and A_te.shape == (5, 4)
    np.testing.assert_allclose(A_te, A_tr[:5], atol=1e-12)  # same texts, same projection
    G = A_tr.T @ A_tr  # columns are U * sigma: orthogonal, decreasing norms
    np.testing.assert_allclose(G - np.diag(np.diag(G)), 0, atol=1e-8)
    assert np.all(np.diff(np.diag(G)) <= 1e-10)
    assert at.lsa(TRAIN, TEST, dims=100)[0].shape[1] == 3  # clipped to n - 1


def test_char_ngrams_are_unit_tfidf_rows_of_the_most_frequent_ngrams():
    A_tr, A_te = at.char_ngrams(TRAIN, TEST, max_features=25)
    assert A_tr.shape == (4, 25)
    np.testing.assert_allclose(np.linalg.norm(A_tr, axis=1), 1.0)
    reps = at.text_representations(TRAIN, TEST, lsa_dims=2, char_features=25)
    assert list(reps) == [at.INPUT, *at.HANDCRAFTED]


def _reference_top_terms(texts, k, ngram_range=(2, 4)):
    """The k most frequent char_wb n-grams, ties alphabetical, counted in pure Python (scikit-learn's char_wb
    analyser: each word padded with one space, n-grams of a word shorter than n+2 characters is the word)."""
    from collections import Counter

    counts = Counter()
    for text in texts:
        for word in text.lower().split():
            w = f" {word} "
            for n in range(ngram_range[0], ngram_range[1] + 1):
                if len(w) <= n:
                    counts[w] += 1
                    break
                counts.update(w[i:i + n] for i in range(len(w) - n + 1))
    return sorted(sorted(counts, key=lambda t: (-counts[t], t))[:k])


def test_most_frequent_terms_break_ties_by_the_term_whatever_the_column_order():
    counts = np.array([[3, 1, 2, 2, 0], [0, 1, 1, 1, 2]])  # totals 3, 2, 3, 3, 2
    terms = ["d", "b", "a", "e", "c"]
    assert at.most_frequent_terms(counts, terms, 2) == ["a", "d"]  # 3, 3, 3 tie: a, d before e
    assert at.most_frequent_terms(counts, terms, 4) == ["a", "b", "d", "e"]  # 2, 2 tie: b before c
    rng = np.random.default_rng(0)
    for _ in range(5):  # any order of the columns (any sort kernel's order of the ties) keeps the same terms
        perm = rng.permutation(len(terms))
        assert at.most_frequent_terms(counts[:, perm], [terms[j] for j in perm], 2) == ["a", "d"]
    with pytest.raises(ValueError, match="k must be positive"):
        at.most_frequent_terms(counts, terms, 0)
    with pytest.raises(ValueError, match="5 count columns for 4 terms"):
        at.most_frequent_terms(counts, terms[:4], 2)


def test_char_ngrams_keep_the_most_frequent_ngrams_ties_alphabetical():
    from sklearn.feature_extraction.text import TfidfVectorizer

    for k in (5, 25, 40):  # the cut falls inside runs of tied counts for these texts
        kept = _reference_top_terms(TRAIN, k)
        vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), vocabulary=kept, sublinear_tf=True).fit(TRAIN)
        A_tr, A_te = at.char_ngrams(TRAIN, TEST, max_features=k)
        np.testing.assert_allclose(A_tr, vec.transform(TRAIN).toarray())
        np.testing.assert_allclose(A_te, vec.transform(TEST).toarray())


@pytest.fixture(scope="module")
def tokenizer():
    if not locate.is_available("all-minilm-l6-v2"):
        pytest.skip("MiniLM is not installed")
    return fetch.load_model("all-minilm-l6-v2")[1]


def tiny_bert():
    import transformers as tr

    torch.manual_seed(0)
    cfg = tr.BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                        vocab_size=30522, max_position_embeddings=64)
    return tr.BertModel(cfg).eval()


def test_encoder_features_restore_order_and_equal_one_text_at_a_time(tokenizer):
    model = tiny_bert()
    texts = ["A long sentence, with several words in it, and a comma.", "Short.", "Middling length here.",
             "Another one that is quite a bit longer than the short one."]
    got = at.encoder_features(model, tokenizer, texts, max_length=12, batch_size=2, device="cpu")
    assert set(got) == {"cls", "mean"} and got["cls"].shape == (3, 4, 32)
    for i, text in enumerate(texts):
        one = dict(tokenizer([text], truncation=True, max_length=12, return_tensors="pt"))
        for tok in ("cls", "mean"):
            ref = models.hidden_states(model, [one], token=tok, progress=False, device="cpu")[:, 0]
            np.testing.assert_allclose(got[tok][:, i], ref, atol=1e-5)
    with pytest.raises(ValueError, match="no texts"):
        at.encoder_features(model, tokenizer, [])


def test_encoders_pretrained_differs_from_a_reproducible_init():
    if not locate.is_available("all-minilm-l6-v2"):
        pytest.skip("MiniLM is not installed")
    state = torch.random.get_rng_state()
    pre, init, tok = at.encoders("all-minilm-l6-v2", seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    _, init2, _ = at.encoders("all-minilm-l6-v2", seed=3)
    w = lambda m: m.encoder.layer[0].attention.self.query.weight  # noqa: E731
    assert torch.equal(w(init), w(init2)) and not torch.allclose(w(pre), w(init))
    assert type(pre) is type(init) and tok is not None and not pre.training


def test_relative_spread_of_constant_and_varying_tokens():
    r = np.random.default_rng(0)
    const = np.tile(r.standard_normal(8), (50, 1))
    varying = 3.0 + r.standard_normal((50, 8))  # mean 3 per coordinate, unit variance
    got = at.relative_spread(np.stack([const, varying]))
    assert got[0] == pytest.approx(0.0, abs=1e-20)
    assert got[1] == pytest.approx(np.sum(varying.var(0)) / np.sum(varying.mean(0) ** 2))
    assert 0.05 < got[1] < 0.2  # about 8 / (8 * 9)
    assert at.relative_spread(varying) == pytest.approx(got[1])
    with pytest.raises(ValueError, match="N >= 2"):
        at.relative_spread(np.ones((1, 4)))


def test_encoders_refuse_non_text_models_before_loading_and_need_weights_offline():
    with pytest.raises(ValueError, match="not a text model"):
        at.encoders("fashion-mnist")
    with pytest.raises(ValueError, match="not a text model"):
        at.encoders("deit_small_patch16_224")
    with pytest.raises(ValueError, match="unknown asset"):
        at.encoders("minilm-l7")
    if not locate.is_available("bert-base-uncased"):  # the paper-scale encoder: a clear error offline
        with pytest.raises(assets.AssetNotFoundError):
            at.encoders("bert-base-uncased")
