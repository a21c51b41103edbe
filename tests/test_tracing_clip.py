"""layersim.papers.tracing.clip: the caption tokenizer, the small CLIP (readout of every layer in the shared
space ends at CLIP's own embeddings), training and caching, pixels for a pretrained-style CLIP."""

import numpy as np
import pytest
import torch

from layersim.inputs import data
from layersim.papers.tracing import clip as tc

NAMES = data.FASHION_MNIST_CLASSES
CFG = tc.ClipConfig(width=16, layers=2, heads=2, projection=8, steps=6, batch_size=8, warmup_steps=1)


@pytest.fixture(scope="module")
def tok():
    return tc.WordTokenizer([t.format(n) for t in tc.TEMPLATES for n in NAMES])


def _tensor(out):
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def test_word_tokenizer(tok):
    enc = tok(["a photo of a coat", "this is a coat"])
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert ids.shape == (2, 7) and mask[0].tolist() == [1] * 7 and mask[1].tolist() == [1] * 6 + [0]
    assert ids[0, 0] == tok.bos_token_id and ids[0, -1] == tok.eos_token_id == ids.max() and ids[1, 6] == 0
    assert tc.captions(np.array([4, 0]), NAMES) == ["a photo of a coat", "a photo of a t-shirt top"]
    with pytest.raises(ValueError, match="vocabulary"):
        tok("a photo of a giraffe")


def test_projected_layers_end_at_clips_own_embeddings(tok):
    clip = tc.small_clip(CFG, len(tok), tok.eos_token_id).eval()
    imgs = torch.rand(5, 1, 28, 28)
    enc = tok(tc.captions(np.arange(5), NAMES))
    V = tc.projected_layers(clip, "vision", [imgs], device="cpu")
    T = tc.projected_layers(clip, "text", [enc], device="cpu")
    assert V.shape == (3, 5, 8) and T.shape == (3, 5, 8)
    with torch.no_grad():
        np.testing.assert_allclose(V[-1], _tensor(clip.get_image_features(pixel_values=imgs)).numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(T[-1], _tensor(clip.get_text_features(**enc)).numpy(), rtol=1e-4, atol=1e-5)


def test_training_lowers_the_contrastive_loss_and_is_cached(tok, tmp_cache):
    imgs, labels = torch.rand(32, 1, 28, 28), np.arange(32) % 10
    texts = tc.captions(labels, NAMES, np.random.default_rng(0))
    cfg = tc.ClipConfig(width=16, layers=2, heads=2, projection=8, steps=30, batch_size=16, warmup_steps=2, lr=3e-3)
    m, meta = tc.cached_clip(cfg, imgs, texts, tok, {"n": 32}, device="cpu", progress=False)
    assert not meta["from_cache"] and meta["history"][-1]["loss"] < meta["history"][0]["loss"]
    again, meta2 = tc.cached_clip(cfg, imgs, texts, tok, {"n": 32}, device="cpu", progress=False)
    assert meta2["from_cache"] and all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                                        again.state_dict().values()))


def test_pixels_for_a_pretrained_style_clip():
    import transformers as tr

    clip = tr.CLIPModel(tr.CLIPConfig(text_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=32),
                                      vision_config=dict(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1,
                                                         num_attention_heads=2, intermediate_size=32)))
    x = tc.pixels_for(clip, torch.full((2, 1, 28, 28), 0.5))
    assert x.shape == (2, 3, 32, 32) and torch.allclose(x[:, 0], torch.full((2, 32, 32), (0.5 - 0.48145466) / 0.26862954))
    with pytest.raises(ValueError):
        tc.ClipConfig(width=10, heads=4)
