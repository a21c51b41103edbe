"""Tests of layersim.analysis.extraction: the one pass (the same features as ``collect``, constant entries left out,
logits where a head reads them), the input forms split into batches, the samples the surgery lenses run on, the
streamed similarity lenses and the stratified subsample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layersim.analysis import extraction
from layersim.nets import models, readout
from builders import image_batch, tiny, tiny_vit


def test_stratified_subsample_keeps_class_proportions():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)[np.random.default_rng(0).permutation(100)]
    pick = extraction.stratified(labels, 100, 20)
    assert len(pick) == 20 and np.all(np.diff(pick) > 0)
    assert np.bincount(labels[pick]).tolist() == [12, 6, 2]
    assert extraction.stratified(None, 10, 4).tolist() == [0, 3, 6, 9]
    assert len(extraction.stratified(labels, 100, 500)) == 100


def test_constant_entries():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((4, 30, 5)).astype(np.float32)
    hidden[0] = hidden[0, :1]  # the same vector in every sample (a CLS token before attention)
    hidden[2] = hidden[2] + 1e4  # a large offset is not constant
    assert extraction.constant_entries(hidden) == [0]


def test_streamed_similarity_equals_the_in_memory_matrices():
    from layersim.measures import block_structure, similarity

    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((4, 50, 6)) + 3.0
    got = extraction.streamed_similarity(hidden, [1, 2, 3], chunk=16)
    np.testing.assert_allclose(got["cka/matrix"], similarity.layer_matrix(hidden[1:]), rtol=1e-10)
    np.testing.assert_allclose(got["cos/to_last"], similarity.to_last(hidden[1:], "cos"), rtol=1e-10)
    np.testing.assert_allclose(got["clusters/block_diagonal"], block_structure.split_scores(got["cka/matrix"]))
    with pytest.raises(ValueError, match="cosine similarity is undefined"):
        extraction.streamed_similarity(np.ones((2, 5, 3), np.float32), [0, 1])
    ragged = extraction.streamed_similarity(hidden, [1, 2, 3], chunk=16, one_width=False)  # no cosine across widths
    assert set(ragged) == {"cka/matrix", "cka/to_last", "clusters/block_diagonal"}
    np.testing.assert_array_equal(ragged["cka/matrix"], got["cka/matrix"])


def test_every_input_form_becomes_batches():
    x, y = image_batch(28, 1, n=10), torch.arange(10) % 3
    assert [len(b) for b in extraction.batches_of(x, 4)] == [4, 4, 2]
    pairs = extraction.batches_of((x, y), 4)
    assert torch.equal(pairs[2][1], y[8:]) and torch.equal(pairs[1][0], x[4:8])
    enc = {"input_ids": torch.arange(30).reshape(10, 3), "attention_mask": torch.ones(10, 3), "note": "kept"}
    parts = extraction.batches_of(enc, 4)
    assert [p["input_ids"].shape[0] for p in parts] == [4, 4, 2] and parts[0]["note"] == "kept"
    one_shot = extraction.batches_of(iter([x[:5], x[5:]]), 4)
    assert isinstance(one_shot, list) and len(one_shot) == 2  # kept for a second pass
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    assert extraction.batches_of(loader, 4) is loader
    assert [len(b[0]) for b in extraction.batches_of(torch.utils.data.TensorDataset(x, y), 4)] == [4, 4, 2]
    for bad, words in [("text.txt", "got str"), (None, "got NoneType"), (3, "got int"), ({"note": "x"}, "no samples")]:
        with pytest.raises(ValueError, match=words):
            extraction.batches_of(bad, 4)
    with pytest.raises(ValueError, match="batch_size"):
        extraction.batches_of(x, 0)


def test_read_gives_collects_features_and_the_heads_logits():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=12)
    y = np.arange(12) % 10
    data, meta, streamed = extraction.read(model, [(x[:7], torch.as_tensor(y[:7])), (x[7:], torch.as_tensor(y[7:]))],
                                           device="cpu")
    feats = models.collect(model, [x], device="cpu", progress=False)
    # the class token at the embedding output is the same in every image: left out
    assert meta["constant_layers_left_out"] == [0] and data["layers"] == [1, 2, 3]
    np.testing.assert_allclose(data["hidden"], feats.hidden[1:], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(data["labels"], y)
    np.testing.assert_allclose(data["logits"], readout.layer_logits(model, feats.hidden)[1:], rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        own = model(x).numpy()
    np.testing.assert_allclose(data["logits"][-1], own, rtol=1e-4, atol=1e-4)  # the readout of the last layer
    assert meta["logits"] == "computed" and meta["n_samples"] == 12
    assert streamed == {}
    off, meta, _ = extraction.read(model, [x], device="cpu", logit_lens="the head knows other classes")
    assert off["logits"] is None and meta["logits"] == "not available: the head knows other classes"
    _, meta, _ = extraction.read(model, [x], labels=np.full(12, 10), device="cpu")
    assert meta["logits"].startswith("not available: the labels go up to 10 but the head has 10 outputs")


def test_read_checks_labels_and_tokens():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=8)
    with pytest.raises(ValueError, match="labels has shape \\(7,\\); the batches hold 8 samples"):
        extraction.read(model, [x], labels=np.zeros(7, int), device="cpu")
    with pytest.raises(ValueError, match="integers 0..K-1"):
        extraction.read(model, [x], labels=np.zeros(8), device="cpu")
    bert = tiny("bert")
    data, meta, _ = extraction.read(bert.model, [bert.batch], device="cpu", logit_lens=False)
    assert meta["logits"] == "not available: turned off (logit_lens=False)" and data["logits"] is None


def test_surgery_samples_are_the_stratified_rows_in_batches_of_at_most_16():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=40)
    y = torch.arange(40) % 4
    batches = extraction.batches_of((x, y), 6)
    runs = extraction.sample_runs(model, batches, y.numpy(), 20, device="cpu")
    pick = extraction.stratified(y.numpy(), 40, 20)
    fit = torch.cat([b[0] for b in runs.fit])
    ev = torch.cat([b[0] for b in runs.eval])
    assert torch.equal(fit, x[pick[0::2]]) and torch.equal(ev, x[pick[1::2]])
    assert max(len(b[0]) for b in runs.fit + runs.eval) <= extraction.SURGERY_BATCH
    assert extraction.describe_runs(runs) == "10 samples to fit RBA maps on, 10 to compare the final representations on"
    with pytest.raises(ValueError, match="at least 4"):
        extraction.sample_runs(model, batches, None, 3)


def test_surgery_text_batches_of_different_lengths_are_padded_and_masked():
    ids = [[5, 6, 7], [1, 2, 3], [8, 9], [4, 4]]
    parts = [{"input_ids": torch.tensor([t]), "attention_mask": torch.ones(1, len(t), dtype=torch.long)} for t in ids]
    runs = extraction.sample_runs(None, parts, None, 4)  # samples 0, 2 to fit on, 1, 3 to compare on
    batch = runs.fit[0]
    assert len(runs.fit) == 1 and batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    padded = [{"input_ids": torch.tensor([t + [0, 0]]), "attention_mask": torch.tensor([[1] * len(t) + [0, 0]])}
              for t in ids]
    again = extraction.sample_runs(None, padded, None, 4).eval[0]  # padding in every sample at the end: cut
    assert again["input_ids"].tolist() == [[1, 2, 3], [4, 4, 0]]
    unmasked = [{"input_ids": p["input_ids"]} for p in parts]  # no mask: padding would be read, so kept apart
    assert len(extraction.sample_runs(None, unmasked, None, 4).fit) == 2
