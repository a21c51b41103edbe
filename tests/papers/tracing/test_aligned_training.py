"""Tests of layersim.papers.tracing.aligned_training: held-out and training readings of every block, effective
depth (Definition 1), the statements' statistics and Figures 4, 5, 14-16 (t03), against numpy written out here."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.inputs import image_data  # noqa: E402
from layersim.nets import models, readout  # noqa: E402
from layersim.papers.tracing import aligned_training as AT  # noqa: E402
from layersim.train import objectives  # noqa: E402

ABL = " (ablation budget)"


def test_train_accuracy_models_are_the_compared_pairs_and_the_shallow_standard_models():
    assert AT.train_accuracy_models(12) == ["standard", "aligned", "standard" + ABL, "aligned" + ABL,
                                            "standard 6-block" + ABL, "standard 9-block" + ABL]
    assert AT.train_accuracy_models(4)[-2:] == ["standard 2-block" + ABL, "standard 3-block" + ABL]


def _nc1(h, y):
    """NC1 = tr(Sigma_W Sigma_B^+) / K of features h [N, d] with labels y, written out."""
    classes = np.unique(y)
    mu = h.mean(0)
    means = np.stack([h[y == c].mean(0) for c in classes])
    sw = sum(((h[y == c] - means[i]).T @ (h[y == c] - means[i])) for i, c in enumerate(classes)) / len(h)
    sb = (means - mu).T @ (means - mu) / len(classes)
    return np.trace(sw @ np.linalg.pinv(sb)) / len(classes)


@pytest.mark.parametrize("own_heads", [False, True])
def test_held_out_readings_are_every_blocks_accuracy_cos_and_nc1(vit_images, shared_logits, own_heads):
    model, (x, y) = vit_images
    y = y % 3  # three classes: NC1's between-class scatter has full rank in its span
    if own_heads:
        objectives.add_exit_heads(model, seed=1)
        model.eval()
    got = AT.held_out_readings(model, (x, y), own_heads=own_heads, device="cpu")
    assert list(got) == ["acc", "cos_last", "cos_mat", "nc1"]
    hidden = models.hidden_states(model, [x], device="cpu", progress=False)[1:].astype(np.float64)
    with torch.no_grad():
        if own_heads:
            logits = objectives.exit_head_logits(model, x).numpy()
        else:
            logits = shared_logits(model, x)
    np.testing.assert_allclose(got["acc"], [(z.argmax(-1) == y.numpy()).mean() for z in logits])
    centred = hidden - hidden.mean(1, keepdims=True)
    unit = centred / np.linalg.norm(centred, axis=2, keepdims=True)
    cos = np.einsum("ind,jnd->ijn", unit, unit).mean(-1)
    np.testing.assert_allclose(got["cos_mat"], cos, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["cos_last"], cos[:, -1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["nc1"], [_nc1(h, y.numpy()) for h in hidden], rtol=1e-4)


def test_train_accuracy_reads_the_first_images_of_the_models_training_set(vit_images, shared_logits):
    model = vit_images[0]
    spec = {"n_train": 64}
    subset = AT.train_subset("fashion-mnist", spec, 20, seed=1)
    full = image_data.image_dataset("fashion-mnist", "train", limit=64, seed=1)
    assert len(subset) == 20
    for i in (0, 7, 19):
        torch.testing.assert_close(subset[i][0], full[i][0])
        assert int(subset[i][1]) == int(full[i][1])
    assert len(AT.train_subset("fashion-mnist", spec, 500, seed=1)) == 64  # at most the whole training set
    x = torch.stack([subset[i][0] for i in range(20)])
    y = np.array([int(subset[i][1]) for i in range(20)])
    with torch.no_grad():
        expected = [(z.argmax(-1) == y).mean() for z in shared_logits(model, x)]
    np.testing.assert_allclose(AT.train_accuracy(model, "fashion-mnist", spec, 20, seed=1, device="cpu"), expected)
    np.testing.assert_allclose(readout.evaluate(model, subset, device="cpu").accuracy, expected)


TRAIN_ACC = {"standard": np.array([0.3, 0.5, 0.7, 0.8, 0.9, 0.95]),
             "aligned": np.array([0.6, 0.8, 0.9, 0.94, 0.95, 0.95]),
             "standard" + ABL: np.array([0.2, 0.4, 0.6, 0.7, 0.8, 0.85]),
             "aligned" + ABL: np.array([0.5, 0.7, 0.84, 0.86, 0.86, 0.86]),
             "standard 3-block" + ABL: np.array([0.4, 0.6, 0.7]),
             "standard 4-block" + ABL: np.array([0.3, 0.5, 0.7, 0.8])}


def _definition_1(acc, threshold):
    """The first block (1..L) with accuracy >= threshold, L if none."""
    return next((l + 1 for l, a in enumerate(acc) if a >= threshold), len(acc))


def test_effective_depths_are_definition_1_at_both_budgets():
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    assert list(depth) == [("full", "standard"), ("full", "aligned"), ("full", "eps"), ("ablation", "standard"),
                           ("ablation", "aligned"), ("ablation", "eps")]
    assert depth[("full", "eps")] == pytest.approx(1 - (0.95 - 0.01))
    assert depth[("ablation", "eps")] == pytest.approx(1 - (0.85 - 0.01))
    for budget, suffix in [("full", ""), ("ablation", ABL)]:
        threshold = 1 - depth[(budget, "eps")]
        for name in ("standard", "aligned"):
            assert depth[(budget, name)] == _definition_1(TRAIN_ACC[name + suffix], threshold)
    assert (depth[("full", "standard")], depth[("full", "aligned")]) == (6, 4)
    assert AT.describe_depths(depth).splitlines() == [
        "full budget: 1-eps = 0.940; effective depth standard 6, aligned 4",
        "ablation budget: 1-eps = 0.840; effective depth standard 6, aligned 3"]


def _readings(L=6, seed=0):
    rng = np.random.default_rng(seed)
    names = ["standard", "aligned"] + [v + ABL for v in ["standard", "aligned", "multi-exit", "CE-reg",
                                                          "aligned (uniform)"]]
    return {n: {"acc": rng.uniform(0.2, 0.9, L), "cos_last": np.append(rng.uniform(0, 1, L - 1), 1.0),
                "cos_mat": rng.uniform(-0.2, 1, (L, L)), "nc1": rng.uniform(0.1, 5, L)} for n in names}


def test_statistics_measure_each_statement_by_hand():
    R = _readings()
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    S = AT.statistics(R, depth)
    std, ali = R["standard"], R["aligned"]
    expected = {  # each statement's value, computed here from the readings
        "aligned_raises_shallow_accuracy": ali["acc"][:3].mean() - std["acc"][:3].mean(),
        "aligned_raises_similarity": (ali["cos_last"][:-1] - std["cos_last"][:-1]).mean(),
        "aligned_final_accuracy_close": abs(ali["acc"][-1] - std["acc"][-1]),
        "aligned_monotone_accuracy": max(0.0, max(ali["acc"][i] - ali["acc"][i + 1] for i in range(5))),
        "effective_depth_smaller": 2,
        "shared_vs_multi_classifier_on_par": np.abs(R["aligned" + ABL]["acc"] - R["multi-exit" + ABL]["acc"]).mean(),
        "ce_reg_weaker_than_aligned": R["aligned" + ABL]["acc"][:3].mean() - R["CE-reg" + ABL]["acc"][:3].mean(),
        "aligned_lowers_nc1": np.mean(ali["nc1"] < std["nc1"]),
        "uniform_weights_hurt_last_layer": R["aligned" + ABL]["acc"][-1] - R["aligned (uniform)" + ABL]["acc"][-1],
    }
    assert list(S) == list(expected)
    for name, value in expected.items():
        assert S[name]["value"] == pytest.approx(value), name
    assert S["aligned_raises_shallow_accuracy"]["note"] == \
        "mean test accuracy, blocks 1..3, aligned - standard (full budget)"
    assert S["aligned_raises_similarity"]["note"] == "mean COS to last, blocks 1..5, aligned - standard (full budget)"
    def beside(name):  # the numbers recorded beside the value: a measurement carries no verdict
        assert not {"holds", "threshold", "op"} & set(S[name]), name
        return {k: v for k, v in S[name].items() if k not in ("value", "note")}
    assert beside("aligned_final_accuracy_close") == {"standard": std["acc"][-1], "aligned": ali["acc"][-1]}
    assert beside("effective_depth_smaller") == {"standard": 6, "aligned": 4, "eps": depth[("full", "eps")]}
    assert beside("aligned_lowers_nc1") == {}


def test_describe_accuracy_by_model_and_cos_maps():
    R = _readings(L=3)
    lines = AT.describe_accuracy(R, {"standard": np.array([0.5, 0.25, 0.125])}).splitlines()
    assert len(lines) == len(R) + 1
    assert lines[0] == f"{'standard':40s} test accuracy per block {np.round(R['standard']['acc'], 3)}"
    assert lines[-1] == f"{'standard':40s} train accuracy per block [0.5   0.25  0.125]"
    nc1 = AT.by_model(R, "nc1")
    assert list(nc1) == list(R) and all(nc1[n] is R[n]["nc1"] for n in R)
    maps = AT.cos_maps(R)
    assert list(maps) == ["standard", "aligned", "standard" + ABL, "aligned" + ABL, "multi-exit" + ABL]
    assert all(maps[n] is R[n]["cos_mat"] for n in maps)


def test_figures_draw_the_readings():
    R = _readings()
    fig = AT.fig4_curves(R)
    cos_ax, acc_ax = fig.axes
    assert [l.get_label() for l in acc_ax.get_lines()] == ["standard", "aligned", "standard, ablation budget",
                                                           "aligned, ablation budget", "multi-exit, ablation budget"]
    np.testing.assert_allclose(cos_ax.get_lines()[1].get_ydata(), R["aligned"]["cos_last"])
    np.testing.assert_allclose(acc_ax.get_lines()[4].get_ydata(), R["multi-exit" + ABL]["acc"])
    plt.close(fig)
    fig = AT.fig4_heatmaps(R)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["COS, all pairs: standard", "COS, all pairs: aligned", "COS, all pairs: standard" + ABL,
                      "COS, all pairs: aligned" + ABL, "COS, all pairs: multi-exit" + ABL]
    plt.close(fig)
    fig = AT.fig14_15(R, 0.5)
    assert "beta=0.5" in fig.axes[0].get_title()
    np.testing.assert_allclose(fig.axes[1].get_lines()[1].get_ydata(), R["CE-reg" + ABL]["acc"])
    np.testing.assert_allclose(fig.axes[2].get_lines()[1].get_ydata(), R["aligned (uniform)" + ABL]["acc"])
    plt.close(fig)
    fig = AT.fig16(R)
    assert fig.axes[0].get_yscale() == "log" and len(fig.axes[0].get_lines()) == 4
    np.testing.assert_allclose(fig.axes[0].get_lines()[3].get_ydata(), R["aligned" + ABL]["nc1"])
    plt.close(fig)


def test_fig5_draws_train_accuracy_effective_depth_and_convergence():
    depth = AT.effective_depths(TRAIN_ACC, 0.01)
    metas = {n: {"history": [{"epoch": e, "loss": 2.0 / e + i} for e in (1, 2, 3)]} for i, n in enumerate(TRAIN_ACC)}
    fig = AT.fig5(TRAIN_ACC, depth, metas)
    a, b, c = fig.axes
    assert [l.get_label() for l in a.get_lines()] == ["standard 3-block", "standard 4-block", "standard 6-block",
                                                      "aligned 6-block"]
    np.testing.assert_allclose(a.get_lines()[0].get_ydata(), TRAIN_ACC["standard 3-block" + ABL])
    vlines = [l.get_xdata()[0] for l in b.get_lines() if l.get_linestyle() == ":"]
    assert vlines == [6, 4]
    assert [l.get_ydata()[0] for l in b.get_lines() if l.get_linestyle() == "--"] == [pytest.approx(0.94)]
    assert len(c.get_lines()) == 6
    np.testing.assert_allclose(c.get_lines()[-1].get_ydata(), [h["loss"] for h in metas["aligned"]["history"]])
    plt.close(fig)
