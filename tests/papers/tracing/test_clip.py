"""Tests of layersim.papers.tracing.clip: the caption tokenizer, the small CLIP (readout of every layer in the shared
space ends at CLIP's own embeddings), training and caching, pixels for a pretrained-style CLIP, zero-shot accuracy
and the figures of App. D (Figures 22 and 23)."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.inputs import image_data, locate  # noqa: E402
from layersim.papers.tracing import clip as tc  # noqa: E402

NAMES = image_data.FASHION_MNIST_CLASSES
CFG = tc.ClipConfig(width=16, layers=2, heads=2, projection=8, steps=6, batch_size=8, warmup_steps=1)
needs_fmnist = pytest.mark.skipif(not locate.is_available("fashion-mnist"), reason="Fashion-MNIST is not installed")
TINY_CLIP = {"pretrained": "scratch", "dataset": "fashion-mnist", "n_train": 64, "layers": 2, "width": 16, "steps": 3,
             "batch_size": 16, "lr": 1e-3, "template": "a photo of a {}"}


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


def test_class_names_of_the_caption_data_sets():
    assert tc.class_names("fashion-mnist")[0] == "T-shirt/top"
    assert tc.class_names("cifar10")[-1] == "truck" and tc.class_names("mnist")[3] == "3"
    with pytest.raises(ValueError, match="no class names for data set 'digits'"):
        tc.class_names("digits")


@needs_fmnist
def test_clip_for_trains_the_small_clip_of_the_settings_then_loads_it(tmp_cache):
    names = tc.class_names("fashion-mnist")
    clip, tok, meta = tc.clip_for(TINY_CLIP, names, seed=1, device="cpu")
    assert not meta["from_cache"] and len(meta["history"]) == 3
    assert meta["train"]["warmup_steps"] == 1 and meta["train"]["width"] == meta["train"]["projection"] == 16
    assert clip.config.vision_config.num_hidden_layers == 2 and meta["data"] == {
        "dataset": "fashion-mnist", "n_train": 64, "seed": 1}
    assert "small CLIP, 2 blocks per tower, width 16: 3 steps of 16 pairs (trained in" in tc.describe(meta)
    # the same model as the library's own steps, one by one
    images, labels = image_data.image_dataset("fashion-mnist", "train", limit=64, seed=1, normalize=False).tensors()
    texts = tc.captions(labels.numpy(), names, np.random.default_rng(1))
    cfg = tc.ClipConfig(width=16, layers=2, projection=16, steps=3, batch_size=16, lr=1e-3, warmup_steps=1,
                                  seed=1)
    assert meta["train"] == dataclasses.asdict(cfg) and tok("a photo of a shirt")["input_ids"].shape == (1, 7)
    again, _, meta2 = tc.clip_for(TINY_CLIP, names, seed=1, device="cpu")
    assert meta2["from_cache"] and meta2["key"] == meta["key"] and "(from the cache)" in tc.describe(meta2)
    assert all(torch.equal(a, b) for a, b in zip(clip.state_dict().values(), again.state_dict().values()))
    assert texts[0].endswith(names[int(labels[0])].lower().replace("/", " "))


def test_image_and_text_layers_read_in_batches_like_one_pass():
    names = tc.class_names("fashion-mnist")
    tok = tc.WordTokenizer([t.format(n) for t in tc.TEMPLATES for n in names])
    cfg = tc.ClipConfig(width=16, layers=2, heads=2, projection=8, steps=1, batch_size=8, warmup_steps=1)
    clip = tc.small_clip(cfg, len(tok), tok.eos_token_id).eval()
    images = torch.rand(7, 1, 28, 28)
    one = tc.projected_layers(clip, "vision", [tc.pixels_for(clip, images)], device="cpu")
    got = tc.image_layers(clip, images, "fashion-mnist", device="cpu", batch_size=3)
    np.testing.assert_allclose(got, one, rtol=1e-4, atol=1e-5)
    caps = tc.captions(np.arange(7) % 10, names, np.random.default_rng(0))
    whole = tc.projected_layers(clip, "text", [dict(tok(caps))], device="cpu")
    got = tc.text_layers(clip, tok, caps, device="cpu", batch_size=2)
    assert got.shape == whole.shape == (3, 7, 8)
    np.testing.assert_allclose(got, whole, rtol=1e-4, atol=1e-5)  # padding differs per batch, not the end token


def test_zero_shot_accuracy_is_the_nearest_class_prompt_by_cosine():
    classes = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    images = np.array([[5.0, 0.1], [0.2, 3.0], [-2.0, -1.5], [0.1, 4.0]])  # scaled: only the direction counts
    assert tc.zero_shot_accuracy(images, classes, np.array([0, 1, 2, 0])) == 0.75
    assert tc.zero_shot_accuracy(images, classes, torch.tensor([0, 1, 2, 1])) == 1.0
    with pytest.raises(ValueError, match="labels"):
        tc.zero_shot_accuracy(images, classes, np.array([0, 1]))


def test_rising_steps_and_late_minus_early():
    v, t = np.array([0.5, 0.6, 0.55, 0.9, 1.0]), np.array([0.8, 0.9, 0.95, 0.97, 1.0])
    # steps 1->2, 2->3, 3->4 of each curve (the step into the last block, always to 1, left out)
    assert tc.rising_steps(v, t).tolist() == [True, False, True, True, True, True]
    curve = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])  # thirds of ceil(7 / 3) = 3 blocks
    assert tc.late_minus_early(curve) == pytest.approx(0.6 - 0.2)


def test_layer_cosine_figure_draws_curves_and_three_maps():
    rng = np.random.default_rng(0)
    within_v, within_t, cross = (rng.uniform(size=(4, 4)) for _ in range(3))
    fig = tc.layer_cosine_figure(within_v, within_t, cross)
    curves = fig.axes[0]
    assert [ln.get_label() for ln in curves.lines][:2] == ["vision: COS(v^l, v^L)", "text: COS(t^l, t^L)"]
    np.testing.assert_allclose(curves.lines[3].get_ydata(), cross[-1, :])
    np.testing.assert_allclose(fig.axes[3].images[0].get_array(), cross)
    plt.close(fig)
