"""Tests of layersim.papers.tracing.progression: COS and CKA across blocks, residual-stream views, figures."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from layersim.papers.tracing import progression  # noqa: E402


def _centred_cos(a, b):
    a, b = a - a.mean(0), b - b.mean(0)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _linear_cka(a, b):
    a, b = a - a.mean(0), b - b.mean(0)
    return np.linalg.norm(a.T @ b) ** 2 / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))


@pytest.fixture
def stream():
    """A residual stream [L + 1, N, d]: h^(l) = h^(l-1) + f(h^(l-1)) with random small updates."""
    rng = np.random.default_rng(0)
    h = [rng.normal(size=(40, 6))]
    for _ in range(4):
        h.append(h[-1] + 0.5 * np.tanh(h[-1] @ rng.normal(size=(6, 6))))
    return np.stack(h)


def test_to_last_and_all_pairs_is_cos_and_cka_of_every_pair(stream):
    blocks = stream[1:]
    got = progression.to_last_and_all_pairs(blocks)
    L = len(blocks)
    cos = np.array([[_centred_cos(blocks[i], blocks[j]).mean() for j in range(L)] for i in range(L)])
    cka = np.array([[_linear_cka(blocks[i], blocks[j]) for j in range(L)] for i in range(L)])
    np.testing.assert_allclose(got["cos_matrix"], cos, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["cka_matrix"], cka, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["cos_last"], cos[:, -1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["cka_last"], cka[:, -1], rtol=1e-10, atol=1e-12)


def test_residual_stream_views_are_figures_10_and_11(stream):
    got = progression.residual_stream_views(stream)
    L = stream.shape[0] - 1
    cos = np.stack([_centred_cos(stream[l], stream[L]) for l in range(1, L + 1)])
    norms = np.linalg.norm(stream, axis=2)
    raw = np.stack([(stream[l - 1] * stream[l]).sum(1) / (norms[l - 1] * norms[l]) for l in range(1, L + 1)])
    ratio = np.stack([np.linalg.norm(stream[l - 1], axis=1) / np.linalg.norm(stream[l] - stream[l - 1], axis=1)
                      for l in range(1, L + 1)])
    np.testing.assert_allclose(got["cos_samples"], cos, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["adjacent"], raw, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["norm_ratio"], ratio, rtol=1e-10)
    assert got["cos_samples"].shape == got["adjacent"].shape == got["norm_ratio"].shape == (L, stream.shape[1])


@pytest.mark.parametrize("bad", [np.zeros((3, 4)), np.zeros((1, 5, 2))])
def test_residual_stream_views_refuses_what_is_not_a_stream(bad):
    with pytest.raises(ValueError, match=r"\[L \+ 1, N, d\]"):
        progression.residual_stream_views(bad)


def test_progression_figures_draw_the_given_curves(stream):
    S = progression.to_last_and_all_pairs(stream[1:])
    layers = np.arange(1, 5)
    fig = progression.curves_figure([("a", {"COS": S["cos_last"]}), ("b", {"CKA": S["cka_last"]})], layers,
                                    ylim=(-0.05, 1.05), suptitle="t")
    axes = fig.axes
    assert len(axes) == 2 and [ax.get_title() for ax in axes] == ["a", "b"] and axes[0].get_ylim() == (-0.05, 1.05)
    np.testing.assert_allclose(axes[1].lines[0].get_ydata(), S["cka_last"])
    plt.close(fig)
    fig = progression.heatmap_grid([[(S["cos_matrix"], "COS"), (S["cka_matrix"], "CKA")]] * 2, layers)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["COS", "CKA"] * 2
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), S["cos_matrix"])
    plt.close(fig)
    views = progression.residual_stream_views(stream)
    for fig in (progression.cos_boxes_figure(views["cos_samples"], layers),
                progression.residual_figure(views["adjacent"], views["norm_ratio"], layers)):
        assert all(len(ax.get_xticklabels()) == 4 for ax in fig.axes)
        plt.close(fig)
    with pytest.raises(ValueError, match="at least one panel"):
        progression.curves_figure([], layers)
    with pytest.raises(ValueError, match="every row as long"):
        progression.heatmap_grid([[(S["cos_matrix"], "a")], []], layers)


def test_evaluate_models_reads_every_hidden_layer_of_each_model(stream, monkeypatch):
    """Each model is read once without its embedding output; its accuracy is the readout's and its similarities
    are COS and CKA of its hidden layers; one line per model, worked out by hand."""
    from types import SimpleNamespace

    from layersim.nets import readout

    calls = []

    def fake_evaluate(model, images, device="auto", embedding=True):
        calls.append((model, images, device, embedding))
        hidden = stream[1:] if model == "plain" else stream[:2]
        return SimpleNamespace(hidden=hidden, accuracy=np.linspace(0.1, 0.9, len(hidden)))

    monkeypatch.setattr(readout, "evaluate", fake_evaluate)
    logged = []
    acc, S = progression.evaluate_models({"plain": "plain", "residual": "res"}, "imgs", device="cpu",
                                         log=logged.append)
    assert calls == [("plain", "imgs", "cpu", False), ("res", "imgs", "cpu", False)]
    assert list(acc) == list(S) == ["plain", "residual"] and acc["residual"].tolist() == [0.1, 0.9]
    np.testing.assert_allclose(S["plain"]["cka_last"], [_linear_cka(stream[l], stream[4]) for l in range(1, 5)],
                               rtol=1e-10)
    np.testing.assert_allclose(S["residual"]["cos_last"], [_centred_cos(stream[0], stream[1]).mean(), 1.0],
                               rtol=1e-10)
    cka = np.round(_linear_cka(stream[0], stream[1]), 3)
    cos = np.round(_centred_cos(stream[0], stream[1]).mean(), 3)
    assert logged[1] == (f"residual: hidden states (2, 40, 6) (layers, samples, width)\n  layer-wise accuracy: "
                         f"[0.1 0.9] \n  COS to last        : [{cos} 1.   ] \n  CKA to last        : [{cka} 1.   ]")


def test_mlp_figures_draw_a_panel_per_model(stream):
    """Figure 12: a panel per MLP, titled by its letter, depth and residual connections, with its accuracy, COS
    and CKA; the heatmaps a row per MLP, COS then CKA."""
    S = {n: progression.to_last_and_all_pairs(stream[1:] * k) for n, k in (("plain", 1.0), ("residual", 2.0))}
    acc = {"plain": np.full(4, 0.5), "residual": np.full(4, 0.75)}
    layers = np.arange(1, 5)
    fig = progression.mlp_curves_figure(acc, S, {"plain": False, "residual": True}, layers, suptitle="t")
    assert [ax.get_title() for ax in fig.axes] == ["(a) 4-layer MLP, without residual connections",
                                                   "(b) 4-layer MLP, with residual connections"]
    assert fig.axes[0].get_ylim() == (-0.05, 1.05) and fig._suptitle.get_text() == "t"
    assert [line.get_label() for line in fig.axes[1].lines[:3]] == ["layer-wise accuracy", "COS to last layer",
                                                                    "CKA to last layer"]
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), 0.75)
    np.testing.assert_allclose(fig.axes[0].lines[2].get_ydata(), S["plain"]["cka_last"])
    plt.close(fig)
    fig = progression.mlp_heatmaps(S, {"plain": False, "residual": True}, layers)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [
        "COS, without residual", "linear CKA, without residual", "COS, with residual", "linear CKA, with residual"]
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), S["plain"]["cos_matrix"])
    plt.close(fig)


def test_vit_figures_are_figure_2_a_and_c(stream):
    """Figure 2 (a): one panel, CKA, COS and accuracy in that order; (c): COS then CKA between all pairs."""
    S = progression.to_last_and_all_pairs(stream[1:])
    layers = np.arange(1, 5)
    fig = progression.vit_curves_figure(np.full(4, 0.6), S, layers, "digits, 4-block ViT")
    (ax,) = fig.axes
    assert ax.get_title() == "digits, 4-block ViT"
    assert [line.get_label() for line in ax.lines[:3]] == ["CKA to last layer", "COS to last layer",
                                                           "layer-wise accuracy"]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), S["cos_last"])
    np.testing.assert_allclose(ax.lines[2].get_ydata(), 0.6)
    plt.close(fig)
    fig = progression.vit_heatmaps(S, layers)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["COS between all pairs of layers",
                                                                    "linear CKA between all pairs of layers"]
    (cka,) = [ax for ax in fig.axes if ax.get_title().startswith("linear CKA")]
    np.testing.assert_allclose(cka.images[0].get_array(), S["cka_matrix"])
    plt.close(fig)
