"""The alignment paper's lesson helpers of notebooks a02, a07 and a11, each checked against an independent
computation (the steps done one by one, plain loops, explicit means and standard errors):

- peaks-function transfer (``papers.alignment.peaks``: Figures 10-12, a07);
- alignment emerging on shuffled labels (``papers.alignment.emergence``: Figure 2, a02);
- the pre-trained-network protocol on text (``papers.alignment.text_transfer``: Figures 13, 19, 20, a11).
"""

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import torch  # noqa: E402

from layersim.measures import alignment as al  # noqa: E402
from layersim.inputs import assets  # noqa: E402
from layersim.papers.alignment import emergence as em, peaks, pretrain as pt, text as at  # noqa: E402
from layersim.papers.alignment import text_transfer as tt  # noqa: E402
from layersim.train import small_nets  # noqa: E402
from layersim.notebook import registry


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _mean_se(v):
    """Mean and standard error (``std(ddof=1) / sqrt(n)``) along the first axis, written out."""
    v = np.asarray(v, dtype=np.float64)
    return v.mean(axis=0), v.std(axis=0, ddof=1) / np.sqrt(len(v))


# ----------------------------------------------------------------------------- peaks transfer (Figures 10-12)

TINY = dict(width=8, n_source=200, n_test=50, epochs=1, n_target=20, lrs=[0.1, 1.0], steps=20)


@pytest.fixture(scope="module")
def peaks_runs():
    lines = []
    out = peaks.transfer_runs(2, seed=5, log=lines.append, **TINY)
    return out, lines


def test_transfer_runs_repeat_the_steps_of_each_run(peaks_runs):
    (runs, deep, linear, seconds), lines = peaks_runs
    assert len(runs) == len(deep) == len(linear) == len(seconds) == len(lines) == 2
    record = np.unique(np.r_[0, np.geomspace(1, TINY["steps"], 60).astype(int)])
    for r in range(2):
        kw = dict(n_source=200, n_test=50, epochs=1)
        one = peaks.peaks_transfer_run(5 + r, hidden=[8], **kw)
        three = peaks.peaks_transfer_run(5 + r, hidden=[8, 8, 8], **kw)
        assert runs[r]["setup"] == one["setup"] and "reps" not in runs[r] and "reps_test" not in deep[r]
        assert runs[r]["areas"] == one["areas"] and deep[r]["areas"] == three["areas"]
        np.testing.assert_array_equal(deep[r]["layer_curves"]["related"]["transfer"],
                                      three["layer_curves"]["related"]["transfer"])
        for kind in ("related", "unrelated"):
            ref = peaks.linear_transfer(one["reps"], one["reps_test"], one["y"][kind], one["y_test"][kind],
                                        n_target=20, lrs=[0.1, 1.0], steps=20, record=record, seed=5 + r)
            for name in peaks.REPRESENTATIONS:
                np.testing.assert_array_equal(linear[r][kind][name]["steps"], record)
                np.testing.assert_array_equal(linear[r][kind][name]["test_rel"], ref[name]["test_rel"])
                assert linear[r][kind][name]["lr"] == ref[name]["lr"]
        assert lines[r].startswith(f"run {r}: ")
    with pytest.raises(ValueError, match="n_runs"):
        peaks.transfer_runs(0)


def test_area_table_and_summary_collect_every_run(peaks_runs):
    runs = peaks_runs[0][0]
    areas = peaks.area_table(runs)
    for kind in peaks.TASK_KINDS:
        for name in peaks.REPRESENTATIONS:
            np.testing.assert_array_equal(areas[kind][name], [r["areas"][kind][name] for r in runs[:2]])
    text = peaks.area_summary(areas)
    m, se = _mean_se(areas["unrelated"]["transfer"])
    assert f"transfer {m:.3f} ± {se:.3f}" in text.splitlines()[2]
    with pytest.raises(ValueError):
        peaks.area_table([])


def _fake_linear(n_runs=3, n_steps=5, seed=0):
    rng = np.random.default_rng(seed)
    return [{k: {n: {"steps": np.arange(n_steps), "test_rel": rng.random(n_steps), "train_rel": rng.random(n_steps),
                     "weight_norm": rng.random(n_steps), "lr": float(rng.choice([0.1, 1.0]))}
                 for n in peaks.REPRESENTATIONS} for k in peaks.TARGET_KINDS} for _ in range(n_runs)]


def test_linear_test_errors_average_after_step_zero_and_read_the_last_step():
    lin = _fake_linear()
    errors = peaks.linear_test_errors(lin)
    assert list(errors["mean"]) == [(k, n) for k in peaks.TARGET_KINDS for n in peaks.REPRESENTATIONS]
    for (k, n), v in errors["mean"].items():
        for r in range(3):
            c = lin[r][k][n]["test_rel"]
            assert v[r] == pytest.approx(sum(c[1:]) / 4, rel=1e-12)
            assert errors["final"][(k, n)][r] == c[4]
        assert errors["step_sizes"][f"{k}/{n}"] == [lin[r][k][n]["lr"] for r in range(3)]
    text = peaks.error_summary(errors, 4)
    assert "at step 4" in text and text.splitlines()[-1].startswith("step sizes kept:")
    with pytest.raises(ValueError):
        peaks.linear_test_errors([])


def test_layer_areas_are_the_area_of_every_layer_curve(peaks_runs):
    deep = peaks_runs[0][1]
    tau = deep[0]["thresholds"]
    got = peaks.layer_areas(deep, tau)
    assert set(got) == {"source", "related"} and got["source"]["transfer"].shape == (2, 3)
    for kind in got:
        for state in ("init", "transfer"):
            for r, d in enumerate(deep):
                for layer, c in enumerate(d["layer_curves"][kind][state]):
                    # the trapezoidal mean of curve / curve[0] over the grid, by hand
                    f = c / c[0]
                    ref = np.sum((f[1:] + f[:-1]) / 2 * np.diff(tau)) / (tau[-1] - tau[0])
                    assert got[kind][state][r, layer] == pytest.approx(ref, rel=1e-10)


def test_gap_claim_is_mean_minus_two_standard_errors():
    d = np.array([0.3, 0.1, 0.2, -0.05])
    c = peaks.gap_claim(d, "gap")
    m, se = d.mean(), d.std(ddof=1) / 2
    assert c["value"] == pytest.approx(m - 2 * se, rel=1e-12) and "holds" not in c  # judged by the registry
    assert c["fraction_of_runs"] == 0.75 and c["note"] == f"gap; mean {m:.3f} ± {se:.3f}"
    judged = registry.judge("alignment/a07_peaks_transfer", {"source_alignment_increases": c,
                                                              "related_alignment_increases": peaks.gap_claim(
                                                                  [1.0, 1.1, 0.9], "x")})
    assert judged["source_alignment_increases"]["holds"] == (m - 2 * se > 0)
    assert judged["related_alignment_increases"]["holds"]


def test_transfer_claims_compare_transfer_with_the_better_or_worse_other():
    def reps(original, init, transfer):
        return {"original": np.array(original), "init": np.array(init), "transfer": np.array(transfer)}

    areas = {"source": reps([0.1, 0.2], [0.05, 0.3], [0.4, 0.5]), "related": reps([0.1, 0.1], [0.2, 0.0], [0.3, 0.3]),
             "unrelated": reps([0.1, 0.2], [0.3, 0.1], [0.0, 0.05])}
    test_mean = {("related", "original"): np.array([0.7, 0.8]), ("related", "init"): np.array([0.6, 0.9]),
                 ("related", "transfer"): np.array([0.4, 0.5]), ("unrelated", "original"): np.array([0.7, 0.6]),
                 ("unrelated", "init"): np.array([0.8, 0.5]), ("unrelated", "transfer"): np.array([0.9, 0.7])}
    claims = peaks.transfer_claims(areas, test_mean)
    expected = {"source_alignment_increases": [0.4 - 0.1, 0.5 - 0.3],
                "related_alignment_increases": [0.3 - 0.2, 0.3 - 0.1],
                "unrelated_alignment_decreases": [0.1 - 0.0, 0.1 - 0.05],
                "related_transfer_generalizes_better": [0.6 - 0.4, 0.8 - 0.5],
                "unrelated_negative_transfer": [0.9 - 0.8, 0.7 - 0.6]}
    assert list(claims) == list(expected)
    for name, d in expected.items():
        np.testing.assert_allclose(claims[name]["per_run"], d, rtol=1e-12)
        m, se = _mean_se(d)
        assert claims[name]["value"] == pytest.approx(m - 2 * se, rel=1e-9)


def test_transfer_numbers_record_what_metrics_json_had(peaks_runs):
    (runs, deep, linear, seconds), _ = peaks_runs
    errors = peaks.linear_test_errors(linear)
    deep_areas = peaks.layer_areas(deep, runs[0]["thresholds"])
    got = peaks.transfer_numbers(runs, deep, errors, deep_areas, seconds)
    assert list(got) == ["seconds_per_run", "setups", "thresholds", "alignment_areas", "alignment_curves_mean",
                         "source_final_mse", "linear_test_error_mean", "linear_test_error_final", "step_sizes_kept",
                         "three_layer_areas"]
    assert got["setups"] == [r["setup"]["names"] for r in runs] and got["seconds_per_run"] == seconds
    np.testing.assert_allclose(got["alignment_curves_mean"]["related"]["init"],
                               (runs[0]["curves"]["related"]["init"] + runs[1]["curves"]["related"]["init"]) / 2)
    assert got["source_final_mse"]["three_layers"] == [d["history"][-1] for d in deep]
    np.testing.assert_array_equal(got["linear_test_error_final"]["unrelated/init"],
                                  errors["final"][("unrelated", "init")])
    np.testing.assert_allclose(got["three_layer_areas"]["source"]["transfer"], deep_areas["source"]["transfer"].mean(0))


def test_peaks_figures_draw_the_mean_curves(peaks_runs):
    (runs, deep, linear, _), _ = peaks_runs
    fig = peaks.alignment_figure(runs)
    axes = fig.get_axes()
    assert len(axes) == 3 and [len(ax.lines) for ax in axes] == [3, 3, 3]
    np.testing.assert_allclose(axes[1].lines[2].get_ydata(),
                               (runs[0]["curves"]["related"]["transfer"]
                                + runs[1]["curves"]["related"]["transfer"]) / 2)

    fig = peaks.linear_transfer_figure(linear)
    axes = fig.get_axes()
    assert len(axes) == 4
    wn = np.array([peaks.weight_norm_at_reduction(x["unrelated"]["init"]["train_rel"],
                                                  x["unrelated"]["init"]["weight_norm"], peaks.REDUCTION_LEVELS)
                   for x in linear])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a level no run reaches: NaN
        ref = np.nanmean(wn, axis=0)
    drawn = axes[3].containers[1].lines[0].get_ydata()  # (d) unrelated task, the second representation (init)
    np.testing.assert_allclose(np.asarray(drawn, dtype=float), ref)

    fig = peaks.layers_figure(deep)
    axes = fig.get_axes()
    assert len(axes) == 2 and len(axes[0].lines) == 1 + 2 * 3
    np.testing.assert_allclose(axes[0].lines[-1].get_ydata(),
                               (deep[0]["layer_curves"]["source"]["transfer"][2]
                                + deep[1]["layer_curves"]["source"]["transfer"][2]) / 2)


# ----------------------------------------------------------------------------- emergence (Figure 2)


def _top_share_by_hand(Phi, y, k):
    """The fraction of ||y||^2 on the top k left singular vectors, from numpy's full SVD."""
    U, _, _ = np.linalg.svd(np.asarray(Phi, dtype=np.float64), full_matrices=False)
    return float(np.sum((U[:, :k].T @ y) ** 2) / (y @ y))


@pytest.fixture(scope="module")
def emergence_task():
    rng = np.random.default_rng(4)
    X = rng.random((48, 7))
    y = al.binary_targets(np.arange(48) % 2)
    return X, y


def test_shuffled_labels_use_seeds_from_seed_plus_1000(emergence_task):
    _, y = emergence_task
    got = em.shuffled_labels(y, 3, seed=2)
    assert len(got) == 3
    for s, ys in enumerate(got):
        np.testing.assert_array_equal(ys, np.random.default_rng(1002 + s).permutation(y))
    with pytest.raises(ValueError, match="n_seeds"):
        em.shuffled_labels(y, 0)


def test_pixel_shares_against_a_full_svd(emergence_task):
    X, y = emergence_task
    shuffles = em.shuffled_labels(y, 2, seed=0)
    got = em.pixel_shares(X, y, shuffles, k=3)
    Phi = al.prepare(X)
    assert got["true"] == pytest.approx(_top_share_by_hand(Phi, y, 3), rel=1e-10)
    np.testing.assert_allclose(got["shuffled"], [_top_share_by_hand(Phi, ys, 3) for ys in shuffles], rtol=1e-10)
    np.testing.assert_allclose(got["dec"].sigma, np.linalg.svd(Phi, compute_uv=False)[: len(got["dec"].sigma)],
                               rtol=1e-10)


@pytest.fixture(scope="module")
def emergence_runs(emergence_task):
    X, y = emergence_task
    shuffles = em.shuffled_labels(y, 2, seed=1)
    lines = []
    runs = em.shuffled_label_runs(X, shuffles, n_train=40, depth=2, width=0, epochs=2, k=3, seed=1, log=lines.append)
    return X, shuffles, runs, lines


def test_shuffled_label_runs_repeat_the_steps_by_hand(emergence_runs):
    X, shuffles, runs, lines = emergence_runs
    assert len(runs) == len(lines) == 2 and lines[1].startswith("seed 1: BCE")
    for s, r in enumerate(runs):
        Xs, yt = X[:40], shuffles[s][:40]
        net = small_nets.make_mlp(7, [7, 7], hidden_bias=False, seed=1 + s)
        h_init = small_nets.hidden_representations(net, Xs)[-1]
        hist = small_nets.train_mlp(net, Xs, yt, loss="bce", epochs=2, batch_size=64, lr=1e-3, seed=1 + s)
        h_end = small_nets.hidden_representations(net, Xs)[-1]
        with torch.no_grad():
            out = net(torch.as_tensor(Xs, dtype=torch.float32))[:, 0].numpy()
        np.testing.assert_array_equal(r["hist"], hist)
        np.testing.assert_array_equal(r["y"], yt)
        assert r["acc"] == np.mean((out > 0) == (yt > 0))
        for name, H in (("input", Xs), ("init", h_init), ("trained", h_end)):
            assert r["share"][name] == pytest.approx(_top_share_by_hand(al.prepare(H), yt, 3), rel=1e-8)
    with pytest.raises(ValueError, match="n_train"):
        em.shuffled_label_runs(X, shuffles, n_train=100, depth=1, width=0, epochs=1, k=3)


def test_network_shares_are_mean_and_standard_error(emergence_runs):
    runs = emergence_runs[2]
    got = em.network_shares(runs)
    assert list(got) == ["input", "init", "trained"]
    for name, (m, se) in got.items():
        ref_m, ref_se = _mean_se([r["share"][name] for r in runs])
        assert m == pytest.approx(ref_m, rel=1e-12) and se == pytest.approx(ref_se, rel=1e-12)
    with pytest.raises(ValueError):
        em.network_shares([])


def test_figure2_panels_curves_and_areas(emergence_task, emergence_runs):
    X, y = emergence_task
    _, shuffles, runs, _ = emergence_runs
    dec = al.svd(al.prepare(X))
    panels = em.figure2_panels(dec, y, shuffles[0], runs[0], 40)
    assert list(panels) == ["(a) pixels, true", "(b) pixels, shuffled", "(c) network at init", "(d) network trained"]
    assert panels["(a) pixels, true"][0] == "(a) pixels, true labels (48 points)"
    assert panels["(d) network trained"][1] is runs[0]["dec"]["trained"]
    np.testing.assert_array_equal(panels["(b) pixels, shuffled"][2], shuffles[0])

    curves = em.panel_curves(panels)
    tn, c = curves["(b) pixels, shuffled"]
    tau = al.default_thresholds() * np.sqrt(48 / 1000)
    np.testing.assert_allclose(tn, tau / np.sqrt(48))
    np.testing.assert_allclose(c, al.alignment_loop(al.prepare(X), shuffles[0], tau), rtol=1e-9, atol=1e-9)
    tn_c, c_c = curves["(c) network at init"]
    np.testing.assert_allclose(tn_c, al.default_thresholds() / np.sqrt(1000))  # 40 points: same grid over sqrt(n)

    areas = em.panel_areas(curves)
    f = c / c[0]
    assert areas["(b) pixels, shuffled"] == pytest.approx(np.sum((f[1:] + f[:-1]) / 2 * np.diff(tn)) / (tn[-1] - tn[0]),
                                                           rel=1e-10)

    fig = em.curves_figure(curves)
    ax = fig.get_axes()[0]
    assert len(ax.lines) == 4
    np.testing.assert_allclose(ax.lines[1].get_ydata(), f)

    fig = em.projections_figure(panels, k=3, show=5)
    axes = fig.get_axes()
    assert len(axes) == 8  # four panels, each with a twin axis for the singular values
    U, _, _ = np.linalg.svd(al.prepare(X), full_matrices=False)
    heights = [b.get_height() for b in axes[0].patches]
    np.testing.assert_allclose(heights, ((U.T @ y) ** 2)[:5], rtol=1e-8, atol=1e-12)
    assert "top-3 share" in axes[0].get_title()


def test_emergence_claims_and_numbers(emergence_task, emergence_runs):
    X, y = emergence_task
    _, shuffles, runs, _ = emergence_runs
    pixels = em.pixel_shares(X, y, shuffles, 3)
    shares = em.network_shares(runs)
    areas = {"(a) pixels, true": 0.4, "(b) pixels, shuffled": 0.1, "(c) network at init": 0.2,
             "(d) network trained": 0.3}
    claims = em.emergence_claims(pixels, shares, runs, areas, 3, 40)
    a, b, c = (claims[n] for n in ("true_labels_aligned", "shuffled_labels_unaligned_in_input",
                                   "training_on_shuffled_creates_alignment"))
    assert a["value"] == pixels["true"] and a["chance"] == 3 / 48
    assert a["alignment_area"] == 0.4
    # the shuffled labels' share in units of chance k/n, judged against the registered 10 (ten times chance)
    assert b["value"] == pytest.approx(np.mean(pixels["shuffled"]) / (3 / 48)) and b["share"] == pytest.approx(
        np.mean(pixels["shuffled"]))
    judged = registry.judge("alignment/a02_emergence", claims)
    assert judged["shuffled_labels_unaligned_in_input"]["holds"] == (np.mean(pixels["shuffled"]) <= 10 * 3 / 48)
    assert (judged["true_labels_aligned"]["op"], judged["shuffled_labels_unaligned_in_input"]["op"]) == (">=", "<=")
    assert c["value"] == pytest.approx(np.mean([r["share"]["trained"] for r in runs])) and c["chance"] == 3 / 40
    assert c["training_accuracy"] == [r["acc"] for r in runs] and c["at_init"] == shares["init"][0]
    assert "mean of 2 seeds" in c["note"]

    got = em.emergence_numbers(pixels, shares, runs, areas)
    assert list(got) == ["top_share_true", "top_share_shuffled", "sigma_pixels_top", "network", "training_accuracy",
                         "final_bce", "train_seconds", "alignment_area", "projections_panel_d"]
    assert got["network"]["trained"]["per_seed"] == [r["share"]["trained"] for r in runs]
    assert got["final_bce"] == [r["hist"][-1] for r in runs]
    H = runs[0]["dec"]["trained"]
    np.testing.assert_allclose(got["projections_panel_d"], ((H.U.T @ runs[0]["y"]) ** 2)[:50])


# ----------------------------------------------------------------------------- text transfer (Figures 13, 19, 20)


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
            err = al.sample_size_errors(al.prepare(reps[n][0]), y_tr, al.prepare(reps[n][1]), y_te, [4, 6], [0.1, 1.0],
                                        steps=8, repeats=2, seed=2 + k)
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


def test_text_numbers_record_what_metrics_json_had(text_setup, text_runs):
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
    if not assets.is_available("all-minilm-l6-v2"):
        pytest.skip("MiniLM is not installed")
    pools, feats, secs = tt.read_pools("all-minilm-l6-v2", 12, 16, seed=1, device="cpu")
    assert set(pools) == {"train", "validation"} and len(pools["train"].labels) == 36 and secs >= 0
    pre, init, tok = at.encoders("all-minilm-l6-v2", seed=1)
    for tag, net in (("pre-trained", pre), ("init", init)):
        ref = at.encoder_features(net, tok, pools["validation"].text_a, max_length=16, device="cpu")
        for t in ("cls", "mean"):
            np.testing.assert_allclose(feats[tag, "validation"][t], ref[t], atol=1e-5)
    assert tt.describe_pools("all-minilm-l6-v2", pools, feats, secs).startswith("all-minilm-l6-v2: 6 blocks, width 384")
