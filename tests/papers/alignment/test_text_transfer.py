"""Tests of layersim.papers.alignment.text_transfer: the pre-trained-network protocol on text (alignment paper,
Figures 13, 19, 20), against evaluate_task and the small-set errors run task by task, and values by hand."""

import numpy as np
import pytest

from layersim.inputs import locate
from layersim.measures import alignment as al
from layersim.notebook import registry, settings
from layersim.papers.alignment import pretrain as pt, text as at, text_transfer as tt
from layersim.train import linear


def test_sizes_within_points_names_the_parameter():
    tt.sizes_within_points({"sizes": [10, 20], "n_points": 20})
    with pytest.raises(ValueError, match="parameter 'sizes'"):
        tt.sizes_within_points({"sizes": [10, 30], "n_points": 20})


def test_novel_pairs_are_sorted_draws_of_all_pairs():
    got = tt.novel_pairs(6, 4, seed=3)
    every = [(a, b) for a in range(6) for b in range(a + 1, 6)]
    idx = np.random.default_rng(3).choice(15, size=4, replace=False)
    assert got == [every[i] for i in sorted(idx)]
    assert tt.novel_pairs(3, 10) == [(0, 1), (0, 2), (1, 2)]
    with pytest.raises(ValueError, match="n_tasks"):
        tt.novel_pairs(6, 0)
    with pytest.raises(ValueError, match="no pair"):
        tt.novel_pairs(1, 2)


@pytest.fixture(scope="module")
def text_setup():
    """Real sentence pools (5 per novel and split) and random stand-in encoder features, 3 layers, width 6."""
    pools = {split: at.sentence_pool(split, 5, seed=0) for split in ("train", "validation")}
    rng = np.random.default_rng(0)
    feats = {(tag, split): {tok: rng.standard_normal((3, len(pools[split].labels), 6)).astype(np.float32)
                            for tok in ("cls", "mean")}
             for tag in tt.STATES for split in pools}
    return pools, feats


def test_task_representations_take_the_pairs_sentences_and_every_layer(text_setup):
    pools, feats = text_setup
    reps, y_tr, y_te = tt.task_representations(pools, feats, (1, 4), lsa_dims=3, char_features=40, seed=0)
    i_tr = np.flatnonzero(np.isin(pools["train"].labels, [1, 4]))
    i_te = np.flatnonzero(np.isin(pools["validation"].labels, [1, 4]))
    np.testing.assert_array_equal(y_tr, np.where(pools["train"].labels[i_tr] == 4, 1.0, -1.0))
    np.testing.assert_array_equal(y_te, np.where(pools["validation"].labels[i_te] == 4, 1.0, -1.0))
    ref = at.text_representations([pools["train"].text_a[i] for i in i_tr],
                                  [pools["validation"].text_a[i] for i in i_te], lsa_dims=3, char_features=40, seed=0)
    for name in ref:
        np.testing.assert_array_equal(reps[name][0], ref[name][0])
        np.testing.assert_array_equal(reps[name][1], ref[name][1])
    np.testing.assert_array_equal(reps["init cls 1"][0], feats["init", "train"]["cls"][1, i_tr])
    np.testing.assert_array_equal(reps["pre-trained mean 0"][1], feats["pre-trained", "validation"]["mean"][0, i_te])
    assert reps[tt.PRE] is reps["pre-trained mean 2"] and reps[tt.INIT] is reps["init mean 2"]
    assert len(reps) == 3 + 2 * 2 * 3 + 2


@pytest.fixture(scope="module")
def text_runs(text_setup):
    pools, feats = text_setup
    tau = al.thresholds_for(10)
    lines = []
    runs, small = tt.text_transfer_runs(pools, feats, [(0, 1), (2, 5)], tau, 3, 40, [0.1, 1.0], 8, [4, 6], 2, seed=2,
                                        log=lines.append)
    return tau, runs, small, lines


def test_text_transfer_runs_repeat_evaluate_task_and_the_small_sets(text_setup, text_runs):
    pools, feats = text_setup
    tau, runs, small, lines = text_runs
    assert len(lines) == 3 and lines[0].startswith("task 1/2") and lines[-1].startswith("dimensions:")
    record = np.unique(np.r_[0, np.geomspace(1, 8, 40).astype(int)])
    for k, pair in enumerate([(0, 1), (2, 5)]):
        reps, y_tr, y_te = tt.task_representations(pools, feats, pair, 3, 40, seed=2)
        ref = pt.evaluate_task(reps, y_tr, y_te, tau, list(tt.MAIN), [0.1, 1.0], 8, record)
        assert runs[k]["pair"] == pair and runs[k]["areas"] == ref["areas"]
        np.testing.assert_array_equal(runs[k]["gd"][tt.PRE]["logistic"]["test"], ref["gd"][tt.PRE]["logistic"]["test"])
        for n in tt.MAIN:
            err = linear.sample_size_errors(al.prepare(reps[n][0]), y_tr, al.prepare(reps[n][1]), y_te, [4, 6],
                                            [0.1, 1.0], steps=8, repeats=2, seed=2 + k)
            np.testing.assert_array_equal(small[k][n], err.mean(axis=1))


def test_layer_areas_spreads_and_small_set_errors(text_setup, text_runs):
    _, feats = text_setup
    _, runs, small, _ = text_runs
    mean_area = pt.mean_areas(runs)
    got = tt.layer_areas(mean_area, 3)
    assert list(got) == ["pre-trained mean", "pre-trained cls", "init mean", "init cls"]
    assert got["init cls"] == [float(np.mean([r["areas"][f"init cls {i}"] for r in runs])) for i in range(3)]
    spread = tt.token_spreads(feats)
    H = feats["pre-trained", "train"]["cls"].astype(np.float64)
    ref = [np.mean(np.sum((h - h.mean(0)) ** 2, axis=1)) / np.sum(h.mean(0) ** 2) for h in H]
    np.testing.assert_allclose(spread["pre-trained cls"], ref, rtol=1e-10)
    assert tt.spread_summary(spread).count("\n") == 4
    err = tt.small_set_errors(small)
    np.testing.assert_allclose(err[tt.PRE], (small[0][tt.PRE] + small[1][tt.PRE]) / 2)
    errors = tt.final_test_errors(runs)
    assert errors["LSA"] == pytest.approx(np.mean([r["gd"]["LSA"]["logistic"]["test_error"][-1] for r in runs]))
    text = tt.learning_summary(pt.final_losses(runs), errors, err, [4, 6])
    assert len(text.splitlines()) == 3 and "after [4, 6] training sentences" in text
    with pytest.raises(ValueError):
        tt.small_set_errors([])


def _spearman_by_hand(x, y):
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731 (no ties here)
    return float(np.corrcoef(rank(np.asarray(x)), rank(np.asarray(y)))[0, 1])


def test_depth_claim_is_the_spearman_correlation_with_depth():
    layer_area = {"pre-trained mean": [0.1, 0.3, 0.2, 0.5], "pre-trained cls": [0.4, 0.3, 0.2, 0.1],
                  "init mean": [0.2, 0.1, 0.3, 0.25], "init cls": [0.1, 0.2, 0.3, 0.4]}
    c = tt.depth_claim(layer_area)
    assert c["value"] == pytest.approx(_spearman_by_hand(range(4), layer_area["pre-trained mean"]))
    judged = registry.judge("alignment/a11_pretrained_text", {"alignment_rises_with_depth_pretrained": c})
    assert c["value"] == pytest.approx(0.8) and judged["alignment_rises_with_depth_pretrained"]["holds"]
    assert c["spearman"]["pre-trained cls"] == pytest.approx(-1.0)
    assert c["last_minus_embedding"]["init cls"] == pytest.approx(0.3) and c["best_layer"]["init mean"] == 2


def test_the_monotone_claim_counts_the_rising_layer_steps():
    from layersim.papers.alignment import text_transfer as tt

    def judged(layer_area):  # measured by the library, judged by the threshold registered for a11
        return registry.judge("alignment/a11_pretrained_text",
                              {"no_monotone_rise_on_target_task": tt.monotone_claim(layer_area)})[
            "no_monotone_rise_on_target_task"]

    c = judged({"pre-trained mean": [0.3, 0.2, 0.25, 0.24, 0.5]})  # rises at steps 2 and 4 of 4
    assert (c["value"], c["steps_rising"], c["steps"], c["holds"]) == (0.5, 2, 4, True)
    assert judged({"pre-trained mean": [0.1, 0.2, 0.3]})["holds"] is False  # a monotone rise
    with pytest.raises(ValueError, match="two layers"):
        tt.monotone_claim({"pre-trained mean": [0.1]})


def test_text_numbers_gather_what_the_run_records(text_setup, text_runs):
    pools, feats = text_setup
    tau, runs, small, _ = text_runs
    mean_area = pt.mean_areas(runs)
    layer_area = tt.layer_areas(mean_area, 3)
    err = tt.small_set_errors(small)
    final = pt.final_losses(runs)
    got = tt.text_numbers(pools, [(0, 1), (2, 5)], tau, mean_area, layer_area, tt.token_spreads(feats), runs, final,
                          err, [4, 6])
    assert list(got) == ["pairs", "thresholds", "mean_area", "layer_area", "token_spread", "dims", "areas_per_task",
                         "mean_curves", "final_losses", "chosen_step_sizes", "small_training_sets"]
    names = pools["train"].label_names
    assert got["pairs"] == [[names[0], names[1]], [names[2], names[5]]]
    np.testing.assert_allclose(got["mean_curves"]["LSA"], (runs[0]["curves"]["LSA"] + runs[1]["curves"]["LSA"]) / 2)
    assert got["final_losses"][f"{tt.PRE} | squared | test"] == final[(tt.PRE, "squared", "test")]
    assert got["chosen_step_sizes"][tt.INIT]["logistic"] == [r["gd"][tt.INIT]["logistic"]["lr"] for r in runs]
    assert got["small_training_sets"]["sizes"] == [4, 6]
    assert got["areas_per_task"]["LSA"] == [r["areas"]["LSA"] for r in runs]


def test_text_figures_draw_their_series(text_runs):
    tau, runs, small, _ = text_runs
    fig = tt.alignment_figure(runs, tau, 3)
    axes = fig.get_axes()
    assert len(axes) == 2 and len(axes[0].lines) == 3 and len(axes[1].lines) == 3
    assert axes[0].get_title().startswith("(a) mean-pooled block 2, 2 tasks")
    mean_area = pt.mean_areas(runs)
    layer_area = tt.layer_areas(mean_area, 3)
    ax = tt.layers_figure(layer_area, mean_area).get_axes()[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), layer_area["pre-trained mean"])
    best = max(at.HANDCRAFTED, key=lambda h: mean_area[h])
    assert ax.lines[-1].get_label() == best and ax.lines[-1].get_ydata()[0] == mean_area[best]
    err = tt.small_set_errors(small)
    axes = tt.learning_figure(runs, err, [4, 6]).get_axes()
    assert len(axes) == 3
    np.testing.assert_allclose(axes[2].lines[1].get_ydata(), err[tt.INIT])


def test_read_pools_reads_both_networks_on_both_splits():
    if not locate.is_available("all-minilm-l6-v2"):
        pytest.skip("MiniLM is not installed")
    pools, feats, secs = tt.read_pools("all-minilm-l6-v2", 12, 16, seed=1, device="cpu")
    assert set(pools) == {"train", "validation"} and len(pools["train"].labels) == 36 and secs >= 0
    pre, init, tok = at.encoders("all-minilm-l6-v2", seed=1)
    for tag, net in (("pre-trained", pre), ("init", init)):
        ref = at.encoder_features(net, tok, pools["validation"].text_a, max_length=16, device="cpu")
        for t in ("cls", "mean"):
            np.testing.assert_allclose(feats[tag, "validation"][t], ref[t], atol=1e-5)
    assert tt.describe_pools("all-minilm-l6-v2", pools, feats, secs).startswith("all-minilm-l6-v2: 6 blocks, width 384")


def test_rules_take_a11s_smoke_settings_and_name_a_bad_value():
    """At most 15 novel pairs (the six novels' pairs) and 1200 points; the small training-set sizes distinct."""
    smoke = dict(encoder="all-minilm-l6-v2", n_tasks=2, n_points=60, max_length=32, lsa_dims=20, char_features=500,
                 steps=30, sizes=[10, 20], repeats=2)
    assert settings.pick({"smoke": smoke}, "smoke", rules=tt.RULES, checks=[tt.sizes_within_points]) == smoke
    for name, bad in [("n_tasks", 16), ("n_points", 1201), ("sizes", [10, 10]), ("sizes", [1]), ("max_length", 3)]:
        with pytest.raises(ValueError, match=name):
            settings.pick({"smoke": smoke}, "smoke", rules=tt.RULES, **{name: bad})
