"""The tracing paper's lesson helpers (layersim.papers.tracing: progression, ...), against independent
computations written out here (the notebooks' former inline code, or plain numpy)."""

from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from layersim.inputs import assets, data  # noqa: E402
from layersim.measures import probe  # noqa: E402
from layersim.nets import params, readout  # noqa: E402
from layersim.papers.tracing import clip as tracing_clip  # noqa: E402
from layersim.papers.tracing import param_table, progression, saturation_events, transfer  # noqa: E402


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


# ----- saturation events (Figures 3 and 6) ---------------------------------------------------------------------


@pytest.fixture
def readout_run():
    """Blocks [L, N, d], labels [N] and logits [L, N, K] whose predictions change at known blocks."""
    rng = np.random.default_rng(1)
    L, N, K = 5, 60, 4
    blocks = np.cumsum(rng.normal(size=(L, N, 3)), axis=0)
    labels = rng.integers(0, K, N)
    logits = rng.normal(size=(L, N, K))
    return blocks, labels, logits


def _naive_saturation(preds):
    """First block (1..L) from which the prediction equals the last one at every later block."""
    L = len(preds)
    return next(l for l in range(1, L + 1) if all(p == preds[-1] for p in preds[l - 1:]))


def test_subset_events_counts_saturation_blocks_like_a_loop(readout_run):
    blocks, labels, logits = readout_run
    mask = labels != 0
    got = saturation_events.subset_events(blocks, labels, logits, mask)
    sat = np.array([_naive_saturation(list(logits[:, i].argmax(-1))) for i in range(len(labels))])[mask]
    L = logits.shape[0]
    assert got["n"] == mask.sum()
    assert list(got["counts"]) == [int((sat == l).sum()) for l in range(1, L + 1)]
    assert got["mean_saturation"] == pytest.approx(sat.mean())
    np.testing.assert_allclose(got["cos_last"], [_centred_cos(b[mask], blocks[-1][mask]).mean() for b in blocks],
                               rtol=1e-10)
    np.testing.assert_allclose(got["accuracy"], [(lg[mask].argmax(-1) == labels[mask]).mean() for lg in logits])


def test_by_subset_splits_easy_and_hard_classes(readout_run):
    blocks, labels, logits = readout_run
    got = saturation_events.by_subset(blocks, labels, logits, [1, 3])
    assert list(got) == ["all", "easy", "hard"]
    assert got["all"]["n"] == len(labels) and got["hard"]["n"] == int(np.isin(labels, [1, 3]).sum())
    assert got["easy"]["n"] + got["hard"]["n"] == len(labels)
    np.testing.assert_array_equal(got["easy"]["counts"] + got["hard"]["counts"], got["all"]["counts"])
    one = saturation_events.subset_events(blocks, labels, logits, np.isin(labels, [1, 3]))
    np.testing.assert_array_equal(got["hard"]["counts"], one["counts"])
    assert saturation_events.cos_before_last(got["hard"]) == pytest.approx(one["cos_last"][:-1].mean())
    assert "mean saturation block" in saturation_events.describe(got["all"])


def test_easy_above_hard_needs_both_higher_cos_and_earlier_saturation():
    easy = {"cos_last": np.array([0.6, 0.8, 1.0]), "mean_saturation": 1.5}
    assert saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.5, 0.7, 1.0]), "mean_saturation": 2.0})
    assert not saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.5, 0.7, 1.0]), "mean_saturation": 1.0})
    assert not saturation_events.easy_above_hard(easy, {"cos_last": np.array([0.9, 0.7, 1.0]), "mean_saturation": 2.0})


@pytest.mark.parametrize("mask, match", [(np.zeros(60, bool), "selects no sample"), (np.ones(60), "boolean mask"),
                                         (np.ones(59, bool), "boolean mask")])
def test_subset_events_refuses_bad_masks(readout_run, mask, match):
    blocks, labels, logits = readout_run
    with pytest.raises(ValueError, match=match):
        saturation_events.subset_events(blocks, labels, logits, mask)


def test_events_figure_draws_the_fraction_of_events(readout_run):
    R = saturation_events.by_subset(*readout_run, [1])
    layers = np.arange(1, 6)
    fig = saturation_events.events_figure([("a", [(R["easy"], "easy", "tab:green"), (R["hard"], "hard", "tab:red")]),
                                           ("b", [(R["all"], "all", "tab:blue")])], layers)
    main = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in main] == ["a", "b"]
    heights = [p.get_height() for p in main[1].patches]
    np.testing.assert_allclose(heights, R["all"]["counts"] / R["all"]["n"])
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one panel"):
        saturation_events.events_figure([], layers)


# ----- transfer (Figure 17) ------------------------------------------------------------------------------------


@pytest.fixture
def vit_and_sets():
    """The tiny test ViT (3 blocks, 28x28 grey, 10 classes) and two labelled image sets."""
    from builders import tiny_vit

    g = torch.Generator().manual_seed(0)
    sets = {name: (torch.randn(48, 1, 28, 28, generator=g), torch.randint(0, 3, (48,), generator=g))
            for name in ("clean", "noisy")}
    return tiny_vit(perturb=True), sets


def test_shift_accuracy_is_the_layerwise_accuracy_of_every_model_on_every_set(vit_and_sets):
    model, sets = vit_and_sets
    models = {"standard": model, "aligned": model}
    got = transfer.shift_accuracy(models, sets, device="cpu")
    assert list(got) == ["clean", "noisy"] and all(list(v) == ["standard", "aligned"] for v in got.values())
    for label, (x, y) in sets.items():
        expected = readout.evaluate(model, (x, y), device="cpu").accuracy  # the notebook's former loop body
        for name in models:
            np.testing.assert_array_equal(got[label][name], expected)


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


def test_probe_transfer_fits_one_shared_probe_and_one_per_block(vit_and_sets):
    model, sets = vit_and_sets
    train, test = sets["clean"], sets["noisy"]
    got = transfer.probe_transfer(model, train, test, C=0.5, device="cpu")
    # the notebook's former inline code
    feats = [readout.evaluate(model, s, device="cpu", logits_fn=transfer.normed_blocks).logits for s in (train, test)]
    head = probe.fit_linear_probe(feats[0][-1], train[1].numpy(), C=0.5)
    shared = [probe.probe_accuracy(head, f, test[1].numpy()) for f in feats[1]]
    per_layer = probe.per_layer_probe_accuracy(feats[0], train[1].numpy(), feats[1], test[1].numpy(), C=0.5)
    np.testing.assert_allclose(got["shared_probe"], shared)
    np.testing.assert_allclose(got["per_layer_probes"], per_layer)
    assert list(got) == ["shared_probe", "per_layer_probes"] and got["shared_probe"].shape == (3,)


def test_task_inputs_are_the_new_task_prepared_like_the_source():
    x, y = transfer.task_inputs("digits", "test", 40, "fashion-mnist", seed=0)
    images, labels = data.image_dataset("digits", "test", limit=40, seed=0, normalize=False).tensors()
    assert tuple(x.shape) == (40, 1, 28, 28) and torch.equal(y, labels)
    torch.testing.assert_close(x, data.as_model_input(images, "fashion-mnist"))


def test_gaps_shortfalls_and_their_line():
    curves = {"standard": np.array([0.2, 0.4, 0.6, 0.9]), "aligned": np.array([0.5, 0.6, 0.8, 0.88])}
    assert transfer.shallow_gap(curves, slice(0, 2)) == pytest.approx((0.5 + 0.6 - 0.2 - 0.4) / 2)
    assert transfer.final_shortfall(curves) == pytest.approx(0.02)
    assert transfer.describe(curves, slice(0, 2)) == ("last block: standard 0.900, aligned 0.880; "
                                                     "mean over blocks 1..2: standard 0.300, aligned 0.550")


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


# ----- Table 1: parameter counts -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counted():
    return param_table.counted_table()


def test_build_on_meta_instantiates_the_published_architectures():
    deit = params.build_on_meta("deit_small")
    assert next(deit.parameters()).is_meta and params.count_module(deit) == 22_050_664
    assert params.count_module(params.build_on_meta("gpt2")) == 124_439_808
    with pytest.raises(ValueError, match="unknown architecture 'gpt5'"):
        params.build_on_meta("gpt5")
    with pytest.raises(ValueError, match="unknown architecture"):
        params.architecture_params("gpt5")


def test_counted_table_counts_single_and_multi_classifier_models(counted):
    assert list(counted.index) == list(params.ARCHITECTURES) and counted["closed_form_equals_instantiated"].all()
    deit = counted.loc["deit_small"]
    assert deit["single"] == 22_050_664 and deit["multi"] == 22_050_664 + 11 * (384 * 1000 + 1000)
    gpt2 = counted.loc["gpt2"]
    assert gpt2["overhead"] == 11 * 768 * 50257  # copies of the tied LM head, no bias
    assert gpt2["saving"] == pytest.approx(100 * 11 * 768 * 50257 / (124_439_808 + 11 * 768 * 50257))
    no_bias = param_table.counted_table(head_bias=False, head_norm=True).loc["deit_small"]
    assert no_bias["overhead"] == 11 * (384 * 1000 + 2 * 384)


def test_paper_table_and_comparison(counted):
    paper = param_table.paper_table()
    assert list(paper.index) == ["deit_small", "deit_base", "gpt2", "gpt3", "llama2"]
    assert paper.loc["gpt2", "overhead"] == pytest.approx(541.57e6 - 117.35e6)
    ours = counted.loc[["deit_small", "deit_base", "gpt2", "gpt3", "llama2_70b"]].set_axis(paper.index)
    cmp = param_table.comparison(paper, ours)
    gpt3_heads = 95 * 12288 * 50257
    assert cmp.loc["gpt3", "overhead rel. diff"] == pytest.approx(gpt3_heads / (233.67e9 - 175.63e9) - 1)
    assert cmp.loc["deit_base", "ours single (M)"] == pytest.approx(86.567656)
    assert cmp.loc["llama2", "saving diff (pt)"] == pytest.approx(ours.loc["llama2", "saving"] - 6.81)
    gpt2_m = 124.439808
    assert param_table.per_model(ours, ["gpt2"]) == {
        "gpt2": {"single": pytest.approx(gpt2_m), "multi": pytest.approx(gpt2_m + 11 * 768 * 50257 / 1e6)}}
    assert param_table.column(paper, "saving", ["gpt2", "llama2"]) == {"gpt2": 78.39, "llama2": 6.81}


def test_reconstruction_rebuilds_the_paper_from_nominal_sizes(counted):
    paper = param_table.paper_table()
    rec, stats = param_table.reconstruction(paper, counted)
    nominal = [22_050_664, 86_567_656, 117e6, 175e9, 70e9]
    rebuilt = [n + (row["layers"] - 1) * row["dim"] * row["classes"] for n, (_, row) in zip(nominal, paper.iterrows())]
    np.testing.assert_allclose(rec["reconstructed multi"], rebuilt)
    printed = [round(r / u, 2) == round(p / u, 2) for r, p, u in
               zip(rebuilt, paper["multi"], [1e6, 1e6, 1e6, 1e9, 1e9])]
    assert stats["rows_matching"] == sum(printed) == 5
    rel = max(abs(r / p - 1) for r, p in zip(rebuilt, paper["multi"]))
    assert stats["max_rel_diff"] == pytest.approx(rel)
    savings = [100 * (r - n) / r for r, n in zip(rebuilt, nominal)]
    assert stats["max_saving_diff_points"] == pytest.approx(max(abs(s - p) for s, p in zip(savings, paper["saving"])))
    assert stats["max_saving_diff_points"] < 0.01 < stats["printed_single_saving_diff_points"]
    param_table.styled_reconstruction(rec).to_html()


def test_overhead_figure_draws_the_paper_beside_ours(counted):
    paper = param_table.paper_table()
    ours = counted.loc[["deit_small", "deit_base", "gpt2", "gpt3", "llama2_70b"]].set_axis(paper.index)
    fig = param_table.overhead_figure(paper, ours, list("ABCDE"))
    left, right = fig.axes
    np.testing.assert_allclose([p.get_height() for p in left.patches[5:]], ours["overhead"].astype(float))
    np.testing.assert_allclose([p.get_height() for p in right.patches[:5]], paper["saving"])
    np.testing.assert_allclose(right.lines[0].get_ydata(), 100 * ours["classes"].astype(float)
                               / (ours["classes"].astype(float) + 12 * ours["dim"].astype(float)))
    plt.close(fig)
    with pytest.raises(ValueError, match="one label per model"):
        param_table.overhead_figure(paper, ours, ["A"])


# ----- CLIP (App. D, Figures 22 and 23) ------------------------------------------------------------------------

needs_fmnist = pytest.mark.skipif(not assets.is_available("fashion-mnist"), reason="Fashion-MNIST is not installed")
TINY_CLIP = {"pretrained": "scratch", "dataset": "fashion-mnist", "n_train": 64, "layers": 2, "width": 16, "steps": 3,
             "batch_size": 16, "lr": 1e-3, "template": "a photo of a {}"}


def test_class_names_of_the_caption_data_sets():
    assert tracing_clip.class_names("fashion-mnist")[0] == "T-shirt/top"
    assert tracing_clip.class_names("cifar10")[-1] == "truck" and tracing_clip.class_names("mnist")[3] == "3"
    with pytest.raises(ValueError, match="no class names for data set 'digits'"):
        tracing_clip.class_names("digits")


@needs_fmnist
def test_clip_for_trains_the_small_clip_of_the_settings_then_loads_it(tmp_cache):
    names = tracing_clip.class_names("fashion-mnist")
    clip, tok, meta = tracing_clip.clip_for(TINY_CLIP, names, seed=1, device="cpu")
    assert not meta["from_cache"] and len(meta["history"]) == 3
    assert meta["train"]["warmup_steps"] == 1 and meta["train"]["width"] == meta["train"]["projection"] == 16
    assert clip.config.vision_config.num_hidden_layers == 2 and meta["data"] == {
        "dataset": "fashion-mnist", "n_train": 64, "seed": 1}
    assert "small CLIP, 2 blocks per tower, width 16: 3 steps of 16 pairs (trained in" in tracing_clip.describe(meta)
    # the same model as the library's own steps, one by one
    images, labels = data.image_dataset("fashion-mnist", "train", limit=64, seed=1, normalize=False).tensors()
    texts = tracing_clip.captions(labels.numpy(), names, np.random.default_rng(1))
    cfg = tracing_clip.ClipConfig(width=16, layers=2, projection=16, steps=3, batch_size=16, lr=1e-3, warmup_steps=1,
                                  seed=1)
    assert meta["train"] == dataclasses.asdict(cfg) and tok("a photo of a shirt")["input_ids"].shape == (1, 7)
    again, _, meta2 = tracing_clip.clip_for(TINY_CLIP, names, seed=1, device="cpu")
    assert meta2["from_cache"] and meta2["key"] == meta["key"] and "(from the cache)" in tracing_clip.describe(meta2)
    assert all(torch.equal(a, b) for a, b in zip(clip.state_dict().values(), again.state_dict().values()))
    assert texts[0].endswith(names[int(labels[0])].lower().replace("/", " "))


def test_image_and_text_layers_read_in_batches_like_one_pass():
    names = tracing_clip.class_names("fashion-mnist")
    tok = tracing_clip.WordTokenizer([t.format(n) for t in tracing_clip.TEMPLATES for n in names])
    cfg = tracing_clip.ClipConfig(width=16, layers=2, heads=2, projection=8, steps=1, batch_size=8, warmup_steps=1)
    clip = tracing_clip.small_clip(cfg, len(tok), tok.eos_token_id).eval()
    images = torch.rand(7, 1, 28, 28)
    one = tracing_clip.projected_layers(clip, "vision", [tracing_clip.pixels_for(clip, images)], device="cpu")
    got = tracing_clip.image_layers(clip, images, "fashion-mnist", device="cpu", batch_size=3)
    np.testing.assert_allclose(got, one, rtol=1e-4, atol=1e-5)
    caps = tracing_clip.captions(np.arange(7) % 10, names, np.random.default_rng(0))
    whole = tracing_clip.projected_layers(clip, "text", [dict(tok(caps))], device="cpu")
    got = tracing_clip.text_layers(clip, tok, caps, device="cpu", batch_size=2)
    assert got.shape == whole.shape == (3, 7, 8)
    np.testing.assert_allclose(got, whole, rtol=1e-4, atol=1e-5)  # padding differs per batch, not the end token


def test_zero_shot_accuracy_is_the_nearest_class_prompt_by_cosine():
    classes = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    images = np.array([[5.0, 0.1], [0.2, 3.0], [-2.0, -1.5], [0.1, 4.0]])  # scaled: only the direction counts
    assert tracing_clip.zero_shot_accuracy(images, classes, np.array([0, 1, 2, 0])) == 0.75
    assert tracing_clip.zero_shot_accuracy(images, classes, torch.tensor([0, 1, 2, 1])) == 1.0
    with pytest.raises(ValueError, match="labels"):
        tracing_clip.zero_shot_accuracy(images, classes, np.array([0, 1]))


def test_rising_steps_and_late_minus_early():
    v, t = np.array([0.5, 0.6, 0.55, 0.9, 1.0]), np.array([0.8, 0.9, 0.95, 0.97, 1.0])
    # steps 1->2, 2->3, 3->4 of each curve (the step into the last block, always to 1, left out)
    assert tracing_clip.rising_steps(v, t).tolist() == [True, False, True, True, True, True]
    curve = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])  # thirds of ceil(7 / 3) = 3 blocks
    assert tracing_clip.late_minus_early(curve) == pytest.approx(0.6 - 0.2)


def test_layer_cosine_figure_draws_curves_and_three_maps():
    rng = np.random.default_rng(0)
    within_v, within_t, cross = (rng.uniform(size=(4, 4)) for _ in range(3))
    fig = tracing_clip.layer_cosine_figure(within_v, within_t, cross)
    curves = fig.axes[0]
    assert [ln.get_label() for ln in curves.lines][:2] == ["vision: COS(v^l, v^L)", "text: COS(t^l, t^L)"]
    np.testing.assert_allclose(curves.lines[3].get_ydata(), cross[-1, :])
    np.testing.assert_allclose(fig.axes[3].images[0].get_array(), cross)
    plt.close(fig)
