"""Tests of layersim.inputs.shift: the corruptions that stand in for a re-collected test set (Figure 17)."""

import numpy as np
import pytest
import torch

from layersim.inputs import image_data, shift


def batch(n=6, c=1, side=12, seed=0):
    return torch.rand(n, c, side, side, generator=torch.Generator().manual_seed(seed))


def test_identity_severities_leave_images_unchanged():
    x = batch()
    assert torch.equal(shift.gaussian_noise(x, 0.0), x)
    assert torch.equal(shift.gaussian_blur(x, 0.0), x)
    assert torch.allclose(shift.contrast(x, 1.0), x, atol=1e-6)
    assert torch.equal(shift.translate(x, 0), x)


def test_noise_has_the_asked_spread_and_is_seeded():
    x = torch.full((200, 1, 16, 16), 0.5)
    y = shift.gaussian_noise(x, 0.05, seed=3)  # 10 sd from the clip limits: no clipping
    assert abs((y - x).std().item() - 0.05) < 1e-3 and abs((y - x).mean().item()) < 1e-3
    assert torch.equal(y, shift.gaussian_noise(x, 0.05, seed=3))
    assert not torch.equal(y, shift.gaussian_noise(x, 0.05, seed=4))
    assert shift.gaussian_noise(batch(), 2.0).min() >= 0 and shift.gaussian_noise(batch(), 2.0).max() <= 1


def test_blur_keeps_constants_and_mean_and_smooths():
    const = torch.full((2, 3, 10, 10), 0.3)
    assert torch.allclose(shift.gaussian_blur(const, 1.5), const, atol=1e-6)
    x = batch(side=32)
    y = shift.gaussian_blur(x, 1.0)
    assert torch.allclose(y.mean(dim=(2, 3)), x.mean(dim=(2, 3)), atol=0.02)  # reflected borders
    assert y.std() < 0.5 * x.std()  # i.i.d. pixels: blur removes most of the variance


def test_contrast_scales_deviations_from_each_image_mean():
    x = 0.25 + 0.5 * batch()
    y = shift.contrast(x, 0.4)
    m = x.mean(dim=(1, 2, 3), keepdim=True)
    torch.testing.assert_close(y - m, 0.4 * (x - m))
    torch.testing.assert_close(y.mean(dim=(1, 2, 3)), x.mean(dim=(1, 2, 3)))


def test_translate_moves_content_and_fills_black():
    x = torch.zeros(1, 1, 7, 7)
    x[0, 0, 3, 3] = 1.0
    moved = shift.translate(x.repeat(50, 1, 1, 1), 2, seed=0)
    pos = [tuple(np.argwhere(m[0].numpy() == 1.0)[0]) for m in moved]
    offsets = {(r - 3, c - 3) for r, c in pos}
    assert all(abs(dy) <= 2 and abs(dx) <= 2 for dy, dx in offsets) and len(offsets) > 5
    assert torch.all(moved.sum(dim=(1, 2, 3)) == 1.0)  # nothing lost when the content stays inside
    edge = torch.ones(20, 1, 5, 5)
    assert (shift.translate(edge, 1, seed=1) == 0).any()  # uncovered border is black


def test_corrupt_dispatches_and_rejects_bad_input():
    x = batch()
    assert torch.equal(shift.corrupt(x, "gaussian_noise", 0.1, seed=2), shift.gaussian_noise(x, 0.1, seed=2))
    assert torch.equal(shift.corrupt(x, "contrast", 0.5), shift.contrast(x, 0.5))
    with pytest.raises(ValueError, match="unknown corruption 'fog'"):
        shift.corrupt(x, "fog", 1.0)
    with pytest.raises(ValueError, match="sigma must be"):
        shift.gaussian_noise(x, -0.1)
    with pytest.raises(ValueError, match="sigma must be"):
        shift.gaussian_blur(x, float("nan"))
    with pytest.raises(ValueError, match="whole number"):
        shift.translate(x, 1.5)
    with pytest.raises(ValueError, match="smaller than the image side"):
        shift.translate(x, 12)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        shift.contrast(x[0], 0.5)
    with pytest.raises(ValueError, match="floats"):
        shift.contrast((x * 255).to(torch.uint8), 0.5)


def test_shifted_inputs_clean_equals_the_normalised_test_set():
    x, y = shift.shifted_inputs("fashion-mnist", {}, limit=40, seed=1)
    ref_x, ref_y = image_data.image_dataset("fashion-mnist", "test", limit=40, seed=1).tensors()
    torch.testing.assert_close(x, ref_x)
    assert torch.equal(y, ref_y)
    noisy, _ = shift.shifted_inputs("fashion-mnist", {"corruption": "gaussian_noise", "severity": 0.2},
                                    limit=40, seed=1)
    assert noisy.shape == x.shape and not torch.allclose(noisy, x)


@pytest.mark.parametrize("spec, msg", [({"corruption": "contrast"}, "needs a 'severity'"),
                                       ({"dataset": "digits", "corruption": "contrast"}, "a shift is"),
                                       ({"severity": 1, "noise": 2}, "a shift is")])
def test_shifted_inputs_rejects_malformed_specs(spec, msg):
    with pytest.raises(ValueError, match=msg):
        shift.shifted_inputs("fashion-mnist", spec, limit=10)


@pytest.mark.parametrize("spec", [
    {"corruption": "fog", "severity": 1}, {"corruption": "contrast"}, {"severity": 1.0},
    {"corruption": "contrast", "severity": -0.5}, {"corruption": "translate", "severity": 1.5},
    {"corruption": "gaussian_blur", "severity": float("nan")}, {"corruption": "contrast", "severity": "high"},
    {"dataset": "cifar10.2", "severity": 1}, {"dataset": ""}, {"noise": 0.1}, ["contrast", 0.5],
])
def test_check_spec_refuses_what_shifted_inputs_cannot_run(spec):
    with pytest.raises(ValueError):
        shift.check_spec(spec)


def test_check_spec_accepts_the_three_forms():
    assert shift.check_spec({}) == {}
    assert shift.check_spec({"dataset": "cifar10.2"}) == {"dataset": "cifar10.2"}
    assert shift.check_spec({"corruption": "translate", "severity": 2}) == {"corruption": "translate", "severity": 2}


def test_domain_shift():
    X = torch.rand(3, 1, 8, 8)
    assert torch.equal(shift.domain_shift(X, "clean"), X)
    assert torch.allclose(shift.domain_shift(X, "inverted"), 1 - X)
    low = shift.domain_shift(X, "lowres", noise=0.0)
    # a 2x2-constant image is unchanged by averaging and upsampling... up to bilinear smoothing at edges:
    flat = torch.ones(1, 1, 8, 8) * 0.3
    assert torch.allclose(shift.domain_shift(flat, "lowres", noise=0.0), flat)
    assert low.min() >= 0 and low.max() <= 1 and not torch.allclose(low, X)
    assert torch.equal(shift.domain_shift(X, "lowres", seed=1), shift.domain_shift(X, "lowres", seed=1))
    with pytest.raises(ValueError, match="domain"):
        shift.domain_shift(X, "sepia")
