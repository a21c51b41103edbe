"""Tests of layersim.papers.tracing.transfer: accuracy under a shift, probes on a new task, Figure 17."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from layersim.inputs import image_data  # noqa: E402
from layersim.nets import readout  # noqa: E402
from layersim.notebook import settings  # noqa: E402
from layersim.papers.tracing import transfer  # noqa: E402


@pytest.fixture
def vit_and_sets():
    """The tiny test ViT (3 blocks, 28x28 grey, 10 classes) and two labelled image sets."""
    from builders import tiny_vit

    g = torch.Generator().manual_seed(0)
    sets = {name: (torch.randn(48, 1, 28, 28, generator=g), torch.randint(0, 3, (48,), generator=g))
            for name in ("clean", "noisy")}
    return tiny_vit(perturb=True), sets


def test_shift_accuracy_is_the_layerwise_accuracy_of_every_model_on_every_set(vit_and_sets, shared_logits):
    from builders import tiny_vit

    perturbed, sets = vit_and_sets
    models = {"standard": perturbed, "aligned": tiny_vit()}  # two different models: each keeps its own curve
    got = transfer.shift_accuracy(models, sets, device="cpu")
    assert list(got) == ["clean", "noisy"] and all(list(v) == ["standard", "aligned"] for v in got.values())
    for label, (x, y) in sets.items():
        for name, model in models.items():
            with torch.no_grad():  # each block's class token through the final norm and the head, by hand
                expected = [(z.argmax(-1) == y.numpy()).mean() for z in shared_logits(model, x)]
            np.testing.assert_allclose(got[label][name], expected)
    assert not np.array_equal(got["clean"]["standard"], got["clean"]["aligned"])


def test_normed_blocks_are_the_final_norm_of_every_block(vit_and_sets):
    model, sets = vit_and_sets
    x, y = sets["clean"]
    hidden = readout.evaluate(model, (x, y), device="cpu").hidden
    got = transfer.normed_blocks(model, hidden)
    h = torch.from_numpy(np.asarray(hidden[1:], dtype=np.float64))
    w, b, eps = (model.norm.weight.detach().double(), model.norm.bias.detach().double(), model.norm.eps)
    mean, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
    expected = ((h - mean) / torch.sqrt(var + eps) * w + b).numpy()
    assert got.shape == (hidden.shape[0] - 1, len(y), hidden.shape[2])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    with pytest.raises(ValueError, match="at least one block"):
        transfer.normed_blocks(model, hidden[:1])


def _normed_class_tokens(model, x):
    """[L, N, d]: the class token after every block through the model's final norm, block by block."""
    feats, h = [], model.norm_pre(model._pos_embed(model.patch_embed(x)))
    with torch.no_grad():
        for block in model.blocks:
            h = block(h)
            feats.append(model.norm(h)[:, 0])
    return torch.stack(feats).double().numpy()


def _sklearn_probe(train_features, train_labels, C):
    """scikit-learn's logistic regression on features centred and divided by their one global RMS scale."""
    from sklearn.linear_model import LogisticRegression

    mean = train_features.mean(0)
    scale = np.sqrt(((train_features - mean) ** 2).sum(1).mean() / train_features.shape[1])
    clf = LogisticRegression(C=C, max_iter=2000).fit((train_features - mean) / scale, train_labels)
    return lambda f: clf.predict((f - mean) / scale)


def test_probe_transfer_fits_one_shared_probe_and_one_per_block(vit_and_sets):
    model, sets = vit_and_sets
    train, test = sets["clean"], sets["noisy"]
    got = transfer.probe_transfer(model, train, test, C=0.5, device="cpu")
    assert list(got) == ["shared_probe", "per_layer_probes"] and got["shared_probe"].shape == (3,)
    tr, te = _normed_class_tokens(model, train[0]), _normed_class_tokens(model, test[0])
    y_tr, y_te = train[1].numpy(), test[1].numpy()
    shared = _sklearn_probe(tr[-1], y_tr, 0.5)  # fitted on the last block, read at every block
    np.testing.assert_allclose(got["shared_probe"], [(shared(f) == y_te).mean() for f in te])
    per_block = [(_sklearn_probe(tr[i], y_tr, 0.5)(te[i]) == y_te).mean() for i in range(len(tr))]
    np.testing.assert_allclose(got["per_layer_probes"], per_block)
    assert got["per_layer_probes"][-1] == pytest.approx(got["shared_probe"][-1])  # the same probe at block L


def test_task_inputs_are_the_new_task_prepared_like_the_source():
    x, y = transfer.task_inputs("digits", "test", 40, "fashion-mnist", seed=0)
    images, labels = image_data.image_dataset("digits", "test", limit=40, seed=0, normalize=False).tensors()
    assert tuple(images.shape) == (40, 1, 8, 8) and images.min() >= 0 and images.max() <= 1
    assert tuple(x.shape) == (40, 1, 28, 28) and x.dtype == torch.float32 and torch.equal(y, labels)
    # upsampled bilinearly from 8 to 28 pixels, then normalised with Fashion-MNIST's mean and std
    resized = F.interpolate(images.float(), size=(28, 28), mode="bilinear", align_corners=False).clamp(0, 1)
    torch.testing.assert_close(x, (resized - 0.2860) / 0.3530, rtol=1e-5, atol=1e-5)


def test_gaps_shortfalls_and_their_line():
    curves = {"standard": np.array([0.2, 0.4, 0.6, 0.9]), "aligned": np.array([0.5, 0.6, 0.8, 0.88])}
    assert transfer.shallow_gap(curves, slice(0, 2)) == pytest.approx((0.5 + 0.6 - 0.2 - 0.4) / 2)
    assert transfer.final_shortfall(curves) == pytest.approx(0.02)
    assert transfer.describe(curves, slice(0, 2)) == ("last block: standard 0.900, aligned 0.880; "
                                                     "mean over blocks 1..2: standard 0.300, aligned 0.550")


def test_the_lines_of_the_shifts_and_the_probes():
    """By hand: a line per test set with its size, and the two probes' lines."""
    a = {"standard": np.array([0.2, 0.4, 0.6, 0.9]), "aligned": np.array([0.5, 0.6, 0.8, 0.88])}
    b = {n: c / 2 for n, c in a.items()}
    sets = {"clean": (None, torch.zeros(12)), "blur": (None, torch.zeros(7))}
    assert transfer.describe_shifts({"clean": a, "blur": b}, sets, slice(0, 2)).split("\n") == [
        "clean" + " " * 23 + " n=   12  last block: standard 0.900, aligned 0.880; mean over blocks 1..2: standard "
        "0.300, aligned 0.550",
        "blur" + " " * 24 + " n=    7  last block: standard 0.450, aligned 0.440; mean over blocks 1..2: standard "
        "0.150, aligned 0.275"]
    probes = {n: {"shared_probe": a[n], "per_layer_probes": b[n]} for n in a}
    assert transfer.describe_probes(probes, slice(0, 2)) == (
        "shared probe: last block: standard 0.900, aligned 0.880; mean over blocks 1..2: standard 0.300, aligned 0.550 "
        "\nper-block probes: last block: standard 0.450, aligned 0.440; mean over blocks 1..2: standard 0.150, "
        "aligned 0.275")


def test_figure17_panels_are_the_shifts_then_the_two_probes():
    curves = {"standard": np.zeros(3), "aligned": np.ones(3)}
    shift_acc = {"clean": curves, "noise": {n: c + 0.1 for n, c in curves.items()}, "blur": curves}
    probes = {n: {"shared_probe": c + 0.2, "per_layer_probes": c + 0.3} for n, c in curves.items()}
    panels = transfer.figure17_panels(shift_acc, probes, ["noise", "blur"], "new task digits")
    assert [(title, with_clean) for title, _, with_clean in panels] == [
        ("noise", True), ("blur", True), ("new task digits: last-block probe on every block", False),
        ("new task digits: one probe per block", False)]
    assert list(panels[2][1]) == ["standard", "aligned"] and panels[3][1]["aligned"].tolist() == [1.3] * 3
    assert panels[0][1]["standard"].tolist() == [0.1] * 3 and panels[2][1]["standard"].tolist() == [0.2] * 3


def test_rules_take_t06s_smoke_settings_and_name_a_bad_value():
    smoke = {"n_eval": 256, "shifts": transfer.CORRUPTIONS, "transfer_to": "digits", "n_transfer_train": 400,
             "n_transfer_test": 200, "probe_C": 1.0}
    assert settings.pick({"smoke": smoke}, "smoke", rules=transfer.RULES) == smoke
    for name, bad in [("shifts", {"x": {"corruption": "melt", "severity": 1}}), ("transfer_to", "imagenet"),
                      ("probe_C", 0.0), ("n_transfer_test", -1)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=transfer.RULES, **{name: bad})


def test_transfer_figure_draws_each_panel_with_its_clean_reference():
    blocks = np.arange(1, 5)
    clean = {"standard": np.linspace(0.1, 0.9, 4), "aligned": np.linspace(0.3, 0.9, 4)}
    shifted = {n: c - 0.05 for n, c in clean.items()}
    fig = transfer.transfer_figure([("noise", shifted, True), ("blur", shifted, True), ("task", clean, False),
                                    ("probes", clean, False)], clean, blocks)
    assert len(fig.axes) == 6 and [ax.get_title() for ax in fig.axes[:4]] == ["noise", "blur", "task", "probes"]
    assert len(fig.axes[0].lines) == 4 and len(fig.axes[2].lines) == 2 and not fig.axes[5].axison
    np.testing.assert_allclose(fig.axes[0].lines[1].get_ydata(), clean["standard"])
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one panel"):
        transfer.transfer_figure([], clean, blocks)
