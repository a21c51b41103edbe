"""What the clusters notebooks c02 and c03 call: the truncation curves of Fig. 3 and their statements, the
skip grid's statements of Fig. 4 and the two figures, each against the computation the notebooks did inline."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from layersim.inputs import assets, text_tasks as tt
from layersim.papers.clusters import figures, protocol as cf
from layersim.train import finetune as ft

TINY = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
SETTINGS = dict(max_length=24, eval_batch_size=16, head_epochs=2, head_lr=1e-3)


@pytest.fixture(scope="module")
def tiny_pair():
    """A random-init 3-block MiniLM-like classifier (the 'fine-tuned' model) and another (the 'pretrained')."""
    tokenizer = assets.load_model("all-minilm-l6-v2")[1]
    pair = []
    for seed in (0, 1):
        model = ft.load_classifier("all-minilm-l6-v2", 6, seed=seed, random_init=True, config=TINY).eval()
        model.layersim_tokenizer = tokenizer
        pair.append(model)
    return pair


def _curves(untuned, tuned, tunedorig, full, majority=0.5):
    return {"UNTUNED": np.asarray(untuned, float), "TUNED": np.asarray(tuned, float),
            "TUNEDORIG": np.asarray(tunedorig, float), "full": full, "majority": majority}


def test_truncation_curves_are_the_notebooks_inline_computation(tiny_pair):
    model, orig = tiny_pair
    head_train = tt.load_task("austen-novel", "train", 60, seed=1)
    val = tt.load_task("austen-novel", "validation", 24, seed=0)
    c = cf.truncation_curves(model, orig, head_train, val, SETTINGS, seed=3, device="cpu")
    assert list(c) == ["UNTUNED", "TUNED", "TUNEDORIG", "full", "majority"]
    # c02's cell before the move
    H_val, H_tr = ft.cls_features(model, val, SETTINGS, "cpu"), ft.cls_features(model, head_train, SETTINGS, "cpu")
    O_val, O_tr = ft.cls_features(orig, val, SETTINGS, "cpu"), ft.cls_features(orig, head_train, SETTINGS, "cpu")
    kw = dict(epochs=2, lr=1e-3, seed=3)
    np.testing.assert_array_equal(c["UNTUNED"], ft.layer_scores(model, H_val, val))
    np.testing.assert_array_equal(c["TUNED"], cf.tuned_head_curve(model, H_tr, head_train, H_val, val, **kw))
    np.testing.assert_array_equal(c["TUNEDORIG"], cf.tuned_head_curve(model, O_tr, head_train, O_val, val, **kw))
    assert c["full"] == float(c["UNTUNED"][-1]) and isinstance(c["full"], float)
    assert c["majority"] == tt.majority_baseline(val) == pytest.approx(1 / 6)
    assert all(len(c[k]) == 4 for k in cf.TRUNCATIONS)


def test_fine_tune_note_says_where_the_model_came_from():
    assert cf.fine_tune_note({"from_cache": True, "train_seconds": 12.0}) == "from the cache"
    assert cf.fine_tune_note({"from_cache": False, "train_seconds": 84.6}) == "fine-tuned in 85 s"


def test_truncation_table_holds_every_curve_by_layer():
    curves = {"m/a": _curves([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], 0.3),
              "m/b": _curves([1.0, 0.0, 0.5], [0.25, 0.75, 0.5], [0.0, 0.0, 1.0], 0.5)}
    table = cf.truncation_table(curves)
    assert table.index.name == "layer" and list(table.index) == [0, 1, 2]
    assert list(table.columns) == [(n, k) for n in ("UNTUNED", "TUNED", "TUNEDORIG") for k in ("m/a", "m/b")]
    # the notebook's pivot of one row per (model, task, layer), before the move
    rows = [{"run": key, "layer": l, **{n: float(c[n][l]) for n in cf.TRUNCATIONS}}
            for key, c in curves.items() for l in range(3)]
    pivot = pd.DataFrame(rows).pivot_table(index="layer", columns="run", values=list(cf.TRUNCATIONS))
    for name in cf.TRUNCATIONS:
        for key in curves:
            np.testing.assert_array_equal(table[(name, key)].to_numpy(), pivot[(name, key)].to_numpy())
    with pytest.raises(ValueError, match="at least one"):
        cf.truncation_table({})


def test_truncation_gaps_are_the_claims_numbers():
    curves = {"m/a": _curves([0.5, 0.6, 0.7, 0.8], [0.5, 0.65, 0.75, 0.9], [0.5, 0.6, 0.7, 0.6], 0.8),
              "m/b": _curves([0.2, 0.2, 0.1, 0.3], [0.2, 0.3, 0.35, 0.25], [0.2, 0.3, 0.4, 0.3], 0.3)}
    discard, orig_gap = cf.truncation_gaps(curves)
    assert list(discard) == list(orig_gap) == ["m/a", "m/b"]
    assert discard["m/a"] == pytest.approx(0.75 - 0.8) and discard["m/b"] == pytest.approx(0.35 - 0.3)
    assert orig_gap["m/a"] == pytest.approx(np.mean([0.05, 0.05, 0.3]))
    assert orig_gap["m/b"] == pytest.approx(np.mean([0.0, -0.05, -0.05]))
    for key, c in curves.items():  # c02's cell before the move
        assert discard[key] == float(max(c["UNTUNED"][-2], c["TUNED"][-2]) - c["full"])
        assert orig_gap[key] == float(np.mean(c["TUNED"][1:] - c["TUNEDORIG"][1:]))
    with pytest.raises(ValueError, match="needs a block"):
        cf.truncation_gaps({"m/a": _curves([0.5], [0.5], [0.5], 0.5)})


def test_truncation_figure_draws_every_curve_of_every_run():
    curves = {"m/a": _curves([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], 0.3, 0.25),
              "m/b": _curves([1.0, 0.0, 0.5], [0.25, 0.75, 0.5], [0.0, 0.0, 1.0], 0.5, 0.5)}
    fig = figures.truncation_figure(curves)
    try:
        axes = fig.axes
        assert [ax.get_title() for ax in axes] == ["m/a", "m/b"]
        for ax, c in zip(axes, curves.values()):
            lines = {l.get_label(): l for l in ax.get_lines()}
            for name in cf.TRUNCATIONS:
                np.testing.assert_array_equal(lines[name].get_ydata(), c[name])
            assert lines["full fine-tuned model"].get_ydata()[0] == c["full"]
            assert lines["majority class"].get_ydata()[0] == c["majority"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.truncation_figure({})


def _grid(diag):
    """A skip grid with the single-block scores ``diag`` on its diagonal, NaN below, 0.3 above."""
    L = len(diag)
    G = np.full((L, L), np.nan)
    G[np.triu_indices(L, 1)] = 0.3
    G[np.diag_indices(L)] = diag
    return G


def test_single_skip_drops_are_the_claims_numbers():
    grids = {"m/a": _grid([0.5, 0.8, 0.85, 0.9, 0.88, 0.7]), "m/b": _grid([0.2, 0.15, 0.3, 0.1])}
    base = {"m/a": {"full": 0.9, "majority": 0.5}, "m/b": {"full": 0.25, "majority": 0.2}}
    first_margin, late_drop = cf.single_skip_drops(grids, base)
    assert list(first_margin) == list(late_drop) == ["m/a", "m/b"]
    assert first_margin["m/a"] == pytest.approx(0.4 - 0.2) and late_drop["m/a"] == pytest.approx((0 + 0.02 + 0.2) / 3)
    assert first_margin["m/b"] == pytest.approx(0.05 - 0.15) and late_drop["m/b"] == pytest.approx((-0.05 + 0.15) / 2)
    for key, G in grids.items():  # c03's cell before the move
        drops = base[key]["full"] - np.diag(G)
        assert first_margin[key] == float(drops[0] - drops[1:].max())
        assert late_drop[key] == float(drops[len(G) // 2:].mean())
    with pytest.raises(ValueError, match="no full-model score"):
        cf.single_skip_drops(grids, {"m/a": base["m/a"]})
    with pytest.raises(ValueError, match="needs 2"):
        cf.single_skip_drops({"m/c": _grid([0.5])}, {"m/c": {"full": 0.5}})


def test_skip_grid_figure_shows_every_grid_on_its_baseline_scale():
    grids = {"m/a": _grid([0.5, 0.8, 0.85]), "m/b": _grid([0.2, 0.15, 0.3])}
    base = {"m/a": {"full": 0.9, "majority": 0.5}, "m/b": {"full": 0.25, "majority": 0.2}}
    fig = figures.skip_grid_figure(grids, base)
    try:
        panels = [ax for ax in fig.axes if ax.get_images()]
        assert [ax.get_title() for ax in panels] == ["m/a (full 0.90)", "m/b (full 0.25)"]
        for ax, (key, G) in zip(panels, grids.items()):
            im = ax.get_images()[0]
            np.testing.assert_array_equal(np.ma.filled(im.get_array(), np.nan), G)
            # from the majority class to the full model's score, or the grid's best where it is higher
            assert im.get_clim() == (base[key]["majority"], max(base[key]["full"], np.nanmax(G)))
        assert panels[1].get_images()[0].get_clim()[1] == 0.3
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="no baseline"):
        figures.skip_grid_figure(grids, {"m/a": base["m/a"]})
    with pytest.raises(ValueError, match="at least one"):
        figures.skip_grid_figure({}, {})
