"""What the redundancy notebooks r01, r02, r04 and r05 call: each function against the computation the notebook did
inline before (or an independent one), and its figure."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from builders import tiny_vit
from layersim.inputs import assets
from layersim.measures import redundancy, similarity, trends
from layersim.nets import linear_maps, models as net_models, readout, surgery
from layersim.notebook import lenses
from layersim.papers.redundancy import block_redundancy as br, block_similarity as bs, figures, models as rm, rba
from layersim.papers.redundancy import llm, skip_vs_approx as sva

IMAGE = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist", "digits"))
TEXT = rm.Spec("asset", "all-minilm-l6-v2", "text", ("austen",))
R01 = {"n_images": 24, "n_texts": 12, "max_length": 16, "batch_size": 8}


def _unit_rows(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# --- r01: block similarity -------------------------------------------------------------------------------------------

def test_block_matrices_are_the_notebooks_inline_computation_and_the_plain_cosine():
    model = tiny_vit(perturb=True)
    cos, cka, n = bs.block_matrices(model, None, IMAGE, "digits", R01, "smoke", seed=0, device="cpu")
    # r01's cell before the move
    batches, _ = rm.inputs(IMAGE, "digits", 24, None, scale="smoke", seed=0, batch_size=8, max_length=16)
    H = rm.block_tokens(model, batches, device="cpu")[1:]
    data = lenses.LayerData(hidden=H)
    np.testing.assert_array_equal(cos, lenses.apply("cos/matrix", data, center=False))
    np.testing.assert_array_equal(cka, lenses.apply("cka/matrix", data))
    assert n == 24 and cos.shape == cka.shape == (3, 3)
    # independently: the uncentred cosine of every sample's [CLS] vectors at two blocks, averaged over samples
    H64 = H.astype(np.float64)
    for i in range(3):
        for j in range(3):
            assert cos[i, j] == pytest.approx(np.mean(np.sum(_unit_rows(H64[i]) * _unit_rows(H64[j]), axis=1)),
                                              abs=1e-5)
            assert cka[i, j] == pytest.approx(similarity.linear_cka(H64[i], H64[j]), abs=1e-5)


@pytest.mark.filterwarnings("ignore:linear CKA on N")
def test_block_matrices_read_all_images_for_zero_and_texts_up_to_n_texts():
    model = tiny_vit()
    _, _, n = bs.block_matrices(model, None, IMAGE, "digits", {**R01, "n_images": 0}, "smoke", device="cpu")
    assert n == 360  # every digits test image
    lm, tokenizer = rm.load(TEXT, "smoke")
    cos, cka, n = bs.block_matrices(lm, tokenizer, TEXT, "austen", R01, "smoke", seed=0, device="cpu")
    assert n == 12 and cos.shape == (6, 6) and np.allclose(np.diag(cos), 1, atol=1e-5)
    with pytest.raises(ValueError, match="modality"):
        bs.block_matrices(model, None, rm.Spec("tracing_vit", "standard", "audio", ("x",)), "x", R01, "smoke")


def test_matrix_line_reports_the_off_diagonal_minimum_and_mean():
    cos = np.array([[1.0, 0.2, 0.4], [0.2, 1.0, 0.9], [0.4, 0.9, 1.0]])
    assert bs.matrix_line("ViT", "digits", 360, cos) == (
        "ViT             digits         N=  360  blocks= 3  cosine between blocks: min 0.200, mean 0.500")
    with pytest.raises(ValueError, match="square"):
        bs.matrix_line("ViT", "digits", 3, np.ones((2, 3)))


def test_correlation_lines_and_records():
    corr = {"same_model": {"A: x vs y": 0.91234}, "same_data": {"x: A vs B": 0.5, "y: A vs B": -0.25}}
    lines = bs.correlation_lines(corr).split("\n")
    assert lines == [f"{'same_model':10s} {'A: x vs y':55s} r = 0.912",
                     f"{'same_data':10s} {'x: A vs B':55s} r = 0.500",
                     f"{'same_data':10s} {'y: A vs B':55s} r = -0.250"]
    specs = {"A": IMAGE, "B": TEXT}
    assert bs.model_record(specs, {"A": 12, "B": 6}) == {
        "A": {"source": "tracing_vit", "name": "standard", "modality": "image", "data": ["fashion-mnist", "digits"],
              "blocks": 12},
        "B": {"source": "asset", "name": "all-minilm-l6-v2", "modality": "text", "data": ["austen"], "blocks": 6}}
    with pytest.raises(ValueError, match="block count"):
        bs.model_record(specs, {"A": 12})
    assert rm.by_pair({("A", "x"): 1, ("B", "y"): 2}) == {"A | x": 1, "B | y": 2}


def test_block_cosine_grid_draws_one_panel_per_model_and_data_set():
    M = np.eye(3)
    fig = figures.block_cosine_grid({("A", "x"): M, ("A", "y"): M, ("B", "x"): np.eye(2)})
    axes = np.array(fig.axes[:4]).reshape(2, 2)  # the four panels (colour bars follow)
    assert [ax.get_title() for ax in axes.ravel()] == ["A on x", "A on y", "B on x", ""]
    assert not axes[1, 1].axison and len(fig.axes) == 4 + 3
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.block_cosine_grid({})


# --- r04: skip vs approximate ----------------------------------------------------------------------------------------

R04 = {"n_fit": 16, "n_train": 40, "n_test": 20, "probe_lr": 0.01, "probe_epochs": 5, "batch_size": 16}
FMNIST = rm.Spec("tracing_vit", "standard", "image", ("fashion-mnist",))


def test_span_rows_are_the_notebooks_inline_computation():
    model = tiny_vit(perturb=True, depth=4)  # Table 2's spans 1-3, 0-1, 1-2, 2-3 fit in 4 blocks
    rows = sva.span_rows(model, "tiny", FMNIST, "fashion-mnist", R04, "smoke", seeds=[0, 1], seed=0, device="cpu")
    # r04's cell before the move
    L = net_models.n_layers(model)
    kw = dict(scale="smoke", seed=0, batch_size=16)
    fit, _ = rm.inputs(FMNIST, "fashion-mnist", 16, split="train", **kw)
    train, y_train = rm.inputs(FMNIST, "fashion-mnist", 40, split="train", **kw)
    test, y_test = rm.inputs(FMNIST, "fashion-mnist", 20, split="test", **kw)
    expected = []
    for span in rba.spans_for(L, rba.TABLE2_SPANS):
        row = {"model": "tiny", "data": "fashion-mnist", "span": rba.span_label(span),
               "blocks": rba.blocks_kept(span, L)}
        for mode in ("skip", "approx"):
            m = rba.span_model(model, span, mode, fit, device="cpu")
            acc = rba.probe_accuracies(m, train, y_train, test, y_test, seeds=[0, 1], lr=0.01, device="cpu")
            row[mode], row[f"{mode}_std"], row[f"{mode}_per_seed"] = np.mean(acc), np.std(acc), acc
        expected.append(row)
    assert rows == expected
    assert [r["span"] for r in rows] == ["1-3", "0-1", "1-2", "2-3", "none"]
    assert rows[-1]["skip_per_seed"] == rows[-1]["approx_per_seed"]  # nothing removed: the same model twice
    longer = sva.span_rows(model, "tiny", FMNIST, "fashion-mnist", {**R04, "probe_epochs": 7}, "smoke", seeds=[0],
                           seed=0, device="cpu")[-1]  # the unmodified model, its classifier trained for 7 epochs
    assert longer["skip_per_seed"] == rba.probe_accuracies(model, train, y_train, test, y_test, seeds=[0], epochs=7,
                                                           lr=0.01, device="cpu")


def _r04_row(model, data, span, blocks, skip, approx):
    return {"model": model, "data": data, "span": span, "blocks": blocks, "skip": skip, "skip_std": 0.01,
            "skip_per_seed": [skip, skip], "approx": approx, "approx_std": 0.02, "approx_per_seed": [approx, approx]}


#: B before A in the table, to check that the gains per pair are sorted
R04_ROWS = [_r04_row("B", "x", "1-3", 2, 0.5, 0.6), _r04_row("B", "x", "0-1", 3, 0.7, 0.65),
            _r04_row("B", "x", "none", 4, 0.8, 0.8),
            _r04_row("A", "y", "1-3", 2, 0.4, 0.45), _r04_row("A", "y", "2-3", 3, 0.6, 0.7),
            _r04_row("A", "y", "none", 4, 0.75, 0.75)]


def test_gain_line_counts_the_spans_won():
    assert sva.gain_line(R04_ROWS[:3]) == (
        "B               x              approx > skip in 1 of 2 spans; mean gain 2.5 points")
    with pytest.raises(ValueError, match="at least one row"):
        sva.gain_line(R04_ROWS[2:3])
    with pytest.raises(ValueError, match="one model and data set"):
        sva.gain_line(R04_ROWS)


def test_approx_wins_and_gain_by_pair_are_the_claims_numbers():
    table = pd.DataFrame(R04_ROWS)
    fraction, counts = sva.approx_wins(table)
    # r04's claims cell before the move
    spans = table[table.span != "none"]
    wins = spans.approx > spans.skip
    assert fraction == float(wins.mean()) == 0.75
    assert counts == {"cases": 4, "wins": 3, "mean_gain_points": float(100 * (spans.approx - spans.skip).mean())}
    assert counts["mean_gain_points"] == pytest.approx(100 * (0.1 - 0.05 + 0.05 + 0.1) / 4)
    gains = sva.gain_by_pair(table)
    assert list(gains) == ["A | y", "B | x"]
    assert gains == pytest.approx({"A | y": 0.075, "B | x": 0.025})
    with pytest.raises(ValueError, match="only the unmodified"):
        sva.approx_wins(table[table.span == "none"])
    with pytest.raises(ValueError, match="columns"):
        sva.gain_by_pair(table.drop(columns="skip"))


def test_accuracy_record_keys_every_row():
    record = sva.accuracy_record(R04_ROWS)
    assert list(record)[:3] == ["B | x | 1-3", "B | x | 0-1", "B | x | none"]
    assert record["A | y | 2-3"] == {"blocks": 3, "skip": 0.6, "skip_std": 0.01, "skip_per_seed": [0.6, 0.6],
                                     "approx": 0.7, "approx_std": 0.02, "approx_per_seed": [0.7, 0.7]}


def test_skip_vs_approx_figure_has_one_panel_per_pair_in_table_order():
    fig = figures.skip_vs_approx(pd.DataFrame(R04_ROWS))
    assert [ax.get_title() for ax in fig.axes] == ["B, x", "A, y"]
    ax = fig.axes[1]
    multi, single = ax.collections  # two scatters: multi-block spans, then single blocks (most blocks kept)
    np.testing.assert_allclose(multi.get_offsets(), [[0.4, 0.45]])
    np.testing.assert_allclose(single.get_offsets(), [[0.6, 0.7]])
    assert ax.lines[-1].get_ydata()[0] == 0.75  # the unmodified model
    plt.close(fig)
    with pytest.raises(ValueError, match="columns"):
        figures.skip_vs_approx(pd.DataFrame(R04_ROWS).drop(columns="approx"))


# --- r02: Block Redundancy and the output MSE -----------------------------------------------------------------------

R02 = {"n_fit": 24, "n_eval": 20, "max_length": 16, "batch_size": 8}


@pytest.fixture(scope="module")
def measured():
    model = tiny_vit(perturb=True)
    return br.measure(model, None, IMAGE, "digits", R02, "smoke", seed=0, device="cpu")


def test_measure_is_the_notebooks_inline_computation(measured):
    model = measured.model
    # r02's cell before the move
    kw = dict(tokenizer=None, scale="smoke", seed=0, batch_size=8, max_length=16)
    fit, _ = rm.inputs(IMAGE, "digits", 24, split="train", **kw)
    held, labels = rm.inputs(IMAGE, "digits", 20, split="test", **kw)
    H = rm.block_tokens(model, held, device="cpu")
    np.testing.assert_array_equal(measured.br, redundancy.block_redundancy(H))
    np.testing.assert_array_equal(measured.mse, np.array(list(linear_maps.block_approximation_errors(
        model, fit, held, device="cpu").values())))
    np.testing.assert_array_equal(measured.labels, labels)
    assert [b.shape for b in measured.fit] == [b.shape for b in fit] and len(measured.held) == len(held)
    # eq. 1 by hand: minus the mean squared difference of a block's [CLS] output and its input
    H64 = H.astype(np.float64)
    np.testing.assert_allclose(measured.br, [-np.mean((H64[k] - H64[k - 1]) ** 2) for k in range(1, len(H))],
                               rtol=1e-5)
    assert measured.br.shape == measured.mse.shape == (3,) and (measured.mse > 0).all()


def test_pca_representations_approximate_the_most_and_least_redundant_blocks(measured):
    most, least, original, approx = br.pca_representations(measured, device="cpu")
    assert most == int(np.argmax(measured.br)) + 1 and least == int(np.argmin(measured.br)) + 1 and most != least
    np.testing.assert_array_equal(original, linear_maps.final_representation(measured.model, measured.held,
                                                                              device="cpu"))
    assert list(approx) == [f"block {most} approximated (most redundant)",
                            f"block {least} approximated (least redundant)"]
    for k, z in zip((most, least), approx.values()):
        rba_map = linear_maps.fit_rba(measured.model, measured.fit, k, k, device="cpu")
        expected = linear_maps.final_representation(surgery.replace(measured.model, k, k, rba_map), measured.held,
                                                    device="cpu")
        np.testing.assert_array_equal(z, expected)
        # the output MSE of approximating block k is the mean squared change of this representation
        assert redundancy.representation_mse(original, z) == pytest.approx(measured.mse[k - 1], rel=1e-4)


def test_redundancy_line_names_the_most_and_least_redundant_blocks():
    line = br.redundancy_line("ViT", "digits", np.array([-0.3, -0.01, -0.1]), np.array([0.5, 0.01, 0.2]))
    assert line == "ViT             digits         most redundant block  2, least  1; Spearman(BR, -MSE) = 1.000"
    with pytest.raises(ValueError, match="one length"):
        br.redundancy_line("ViT", "digits", np.zeros(3), np.zeros(4))


def test_rank_agreement_and_most_redundant_are_the_claims_numbers():
    BR = {("A", "x"): np.array([-0.3, -0.01, -0.1, -0.2]), ("B", "y"): np.array([-0.05, -0.5, -0.2, -0.1])}
    MSE = {("A", "x"): np.array([0.4, 0.02, 0.3, 0.1]), ("B", "y"): np.array([0.9, 0.1, 0.3, 0.2])}
    rhos, wins = br.rank_agreement(BR, MSE)
    assert list(rhos) == list(wins) == ["A | x", "B | y"]
    assert rhos["A | x"] == pytest.approx(trends.spearman(BR[("A", "x")], -MSE[("A", "x")]))
    assert rhos["A | x"] == pytest.approx(0.8)  # ranks of BR 1, 4, 3, 2 against ranks of -MSE 1, 4, 2, 3
    assert rhos["B | y"] == pytest.approx(-0.8)  # ranks 4, 1, 2, 3 against 1, 4, 2, 3
    assert wins == {"A | x": True, "B | y": False}  # most redundant: A block 2 (0.02 < 0.4), B block 1 (0.9 > 0.1)
    assert br.most_redundant(BR) == {"A | x": 2, "B | y": 1}
    with pytest.raises(ValueError, match="no output MSE"):
        br.rank_agreement(BR, {("A", "x"): MSE[("A", "x")]})


def test_depth_trend_is_the_rank_correlation_of_depth_and_br():
    """Against scipy's Spearman on hand-made profiles: falling, rising, and a monotone transform changes nothing."""
    from scipy.stats import spearmanr

    BR = {("A", "x"): np.array([-0.01, -0.02, -0.05, -0.3]), ("B", "y"): np.array([-0.3, -0.1, -0.2, -0.01]),
          ("C", "z"): np.array([-0.2, -0.1, -0.15, -0.3, -0.05])}
    rho = br.depth_trend(BR)
    assert rho["A | x"] == pytest.approx(-1.0) and rho["B | y"] == pytest.approx(0.8)
    assert rho["C | z"] == pytest.approx(spearmanr(np.arange(5), BR[("C", "z")]).statistic)
    assert br.depth_trend({k: np.exp(v) for k, v in BR.items()}) == pytest.approx(rho)
    with pytest.raises(ValueError, match="fewer than three blocks"):
        br.depth_trend({("D", "w"): np.array([-0.1, -0.2])})


def test_redundant_block_fidelity_is_the_most_redundant_blocks_mse_over_the_spread():
    """By hand: the most redundant block (highest BR) is block 3 for A, block 1 for B; its MSE over the spread. The
    spread is what relative_change divides by, so the value equals it on a representation whose MSE is known."""
    BR = {("A", "x"): np.array([-0.3, -0.2, -0.01]), ("B", "y"): np.array([-0.05, -0.2, -0.3])}
    MSE = {("A", "x"): np.array([4.0, 2.0, 0.5]), ("B", "y"): np.array([1.0, 3.0, 6.0])}
    out = br.redundant_block_fidelity(BR, MSE, {("A", "x"): 10.0, ("B", "y"): 4.0})
    assert out == pytest.approx({"A | x": 0.05, "B | y": 0.25})
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 4))
    changed = ref + rng.normal(scale=0.3, size=ref.shape)
    spread = float(np.mean((ref - ref.mean(0)) ** 2))
    one = br.redundant_block_fidelity({("C", "z"): np.array([0.0])},
                                      {("C", "z"): np.array([redundancy.representation_mse(ref, changed)])},
                                      {("C", "z"): spread})
    assert one["C | z"] == pytest.approx(redundancy.relative_change(ref, changed))
    with pytest.raises(ValueError, match="constant"):
        br.redundant_block_fidelity(BR, MSE, {("A", "x"): 0.0, ("B", "y"): 4.0})
    with pytest.raises(ValueError, match="no output MSE or spread"):
        br.redundant_block_fidelity(BR, MSE, {("A", "x"): 1.0})


def test_extremes_name_both_ends_of_the_ranking_with_their_output_mse():
    BR = {("A", "x"): np.array([-0.3, -0.2, -0.01]), ("B", "y"): np.array([-0.05, -0.2, -0.3])}
    MSE = {("A", "x"): np.array([4.0, 2.0, 0.5]), ("B", "y"): np.array([1.0, 3.0, 6.0])}
    out = br.extremes(BR, MSE)
    assert out["A | x"] == {"most": 3, "least": 1, "br_most": -0.01, "br_least": -0.3, "mse_most": 0.5,
                            "mse_least": 4.0, "ratio": 8.0}
    assert (out["B | y"]["most"], out["B | y"]["least"], out["B | y"]["ratio"]) == (1, 3, 6.0)


def test_br_and_output_mse_figure_has_a_column_per_model():
    BR = {("A", "x"): np.array([-0.3, -0.1]), ("A", "y"): np.array([-0.2, -0.1]), ("B", "x"): np.array([-1.0, -2.0])}
    MSE = {k: -v for k, v in BR.items()}
    fig = figures.br_and_output_mse(BR, MSE)
    top, bottom = fig.axes[:2], fig.axes[2:]
    assert [ax.get_title() for ax in top] == ["A", "B"] and [len(ax.lines) for ax in top] == [2, 1]
    np.testing.assert_array_equal(bottom[0].lines[1].get_ydata(), [0.2, 0.1])
    assert bottom[0].get_yscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError, match="no output MSE"):
        figures.br_and_output_mse(BR, {})


# --- r05: a language model and the tracing ViTs ---------------------------------------------------------------------

R05 = {"n_fit": 6, "n_eval": 5, "max_length": 12, "batch_size": 4, "blocks": [1, 3], "spans": [[2, 4]]}
TINY_LM = dict(num_hidden_layers=4, hidden_size=32, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64)


@pytest.fixture(scope="module")
def tiny_lm():
    """A random-init 4-block LLaMA-style LM with SmolLM2's tokenizer (right padding, as the notebook loads it)."""
    _, tokenizer = rm.load(rm.LLM, "smoke")
    lm, _ = assets.load_model(rm.LLM.name, random_init=True, config=TINY_LM)
    return lm.eval(), tokenizer


def test_texts_and_last_token_redundancy_are_the_notebooks_inline_computation(tiny_lm):
    lm, tok = tiny_lm
    fit, held = llm.texts(tok, R05, "smoke", seed=0)
    cos, BR, base = llm.last_token_redundancy(lm, held, device="cpu")
    # r05's cell before the move
    kw = dict(tokenizer=tok, scale="smoke", seed=0, batch_size=4, max_length=12)
    fit0, _ = rm.inputs(rm.LLM, "austen", 6, split="train", **kw)
    held0, _ = rm.inputs(rm.LLM, "austen", 5, split="test", **kw)
    for a, b in zip((fit, held), (fit0, held0)):
        assert len(a) == len(b) and all((x["input_ids"] == y["input_ids"]).all() for x, y in zip(a, b))
    H = net_models.collect(lm, held0, token="last", device="cpu", progress=False).hidden
    np.testing.assert_array_equal(cos, lenses.apply("cos/matrix", lenses.LayerData(hidden=H[1:]), center=False))
    np.testing.assert_array_equal(BR, redundancy.block_redundancy(H))
    assert base == readout.next_token_scores(lm, held0, device="cpu")
    assert cos.shape == (4, 4) and BR.shape == (4,) and base.n_tokens > 0
    # eq. 1 by hand on the last token
    H64 = H.astype(np.float64)
    np.testing.assert_allclose(BR, [-np.mean((H64[k] - H64[k - 1]) ** 2) for k in range(1, 5)], rtol=1e-5)


def test_span_scores_are_the_notebooks_inline_computation(tiny_lm):
    lm, tok = tiny_lm
    fit, held = llm.texts(tok, R05, "smoke", seed=0)
    BR = np.array([-1.0, -2.0, -3.0, -4.0])
    assert llm.spans(R05) == [(1, 1), (3, 3), (2, 4)]
    row = llm.span_scores(lm, fit, held, 2, 4, BR, device="cpu")
    # r05's loop body before the move
    rba = linear_maps.fit_rba(lm, fit, 2, 4, device="cpu")
    approx = readout.next_token_scores(surgery.replace(lm, 2, 4, rba), held, device="cpu")
    skipped = readout.next_token_scores(surgery.skip(lm, 2, 4), held, device="cpu")
    assert row == {"span": "2-4", "first": 2, "last": 4, "n_blocks": 3, "BR": -3.0,
                   "ppl_approx": approx.perplexity, "acc_approx": approx.accuracy,
                   "ppl_skip": skipped.perplexity, "acc_skip": skipped.accuracy}
    assert llm.span_scores(lm, fit, held, 3, 3, BR, device="cpu")["span"] == "3"
    with pytest.raises(ValueError, match="not a span"):
        llm.span_scores(lm, fit, held, 3, 5, BR, device="cpu")


def test_lm_lines_and_record():
    base = readout.NextToken(nll=np.log(113.4567), perplexity=113.4567, accuracy=0.2261, n_tokens=1684)
    BR = np.array([-5.0, -0.4, -1.0, -0.5, -20.0, -0.9, -3.0])
    assert llm.lm_line(BR, base) == ("7 blocks; held-out perplexity 113.46, next-token accuracy 0.226 over 1684 "
                                     "tokens; most redundant blocks [2, 4, 6, 3, 7]")
    row = {"span": "22-29", "ppl_approx": 217.04, "ppl_skip": 9.5e9, "acc_approx": 0.1619, "acc_skip": 0.004}
    assert llm.span_line(row, base) == ("blocks  22-29: perplexity 113.46 -> approx 217.04, skip 9500000000.00; "
                                        "accuracy 0.226 -> 0.162 / 0.004")
    cos = np.eye(7)
    record = llm.lm_record("smollm2-135m", cos, BR, base, [row])
    assert record == {"model": "smollm2-135m", "blocks": 7, "base": base._asdict(), "cos_matrix": cos,
                      "block_redundancy": BR, "spans": [row]}


def test_lm_claims_are_the_notebooks_inline_numbers():
    table = pd.DataFrame([
        {"span": "2", "n_blocks": 1, "BR": -0.5, "ppl_approx": 120.0, "ppl_skip": 130.0},
        {"span": "5", "n_blocks": 1, "BR": -0.1, "ppl_approx": 111.0, "ppl_skip": 140.0},
        {"span": "29", "n_blocks": 1, "BR": -100.0, "ppl_approx": 166.0, "ppl_skip": 160.0},
        {"span": "26-29", "n_blocks": 4, "BR": -50.0, "ppl_approx": 199.0, "ppl_skip": 3.3e5}])
    fraction, rho = llm.lm_claims(table, 113.0)
    single = table[table.n_blocks == 1]  # r05's claims cell before the move
    assert fraction == float((table.ppl_approx < table.ppl_skip).mean()) == 0.75
    assert rho == trends.spearman(single.BR, -(single.ppl_approx - 113.0)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="columns"):
        llm.lm_claims(table.drop(columns="BR"), 113.0)


def test_vit_redundancy_reads_both_tracing_vits_on_their_data_set(monkeypatch):
    vits = {"standard": tiny_vit(perturb=True), "aligned": tiny_vit()}
    monkeypatch.setattr(rm, "load", lambda spec, scale, seed=0, device="auto": (vits[spec.name], None))
    vit_br, dataset = llm.vit_redundancy("smoke", 20, seed=0, device="cpu")
    assert list(vit_br) == ["ViT (standard)", "ViT (aligned)"]
    for name, spec in rm.tracing_vits("smoke").items():  # r05's loop before the move
        batches, _ = rm.inputs(spec, spec.data[0], 20, scale="smoke", seed=0)
        np.testing.assert_array_equal(vit_br[name], redundancy.block_redundancy(
            rm.block_tokens(vits[spec.name], batches, device="cpu")))
        assert dataset == spec.data[0]
    assert sum(len(b) for b in batches) == 20 and vit_br["ViT (aligned)"].shape == (3,)


def test_aligned_minus_standard_and_vit_lines():
    vit_br = {"ViT (standard)": np.array([-0.05, -0.04, -0.07]), "ViT (aligned)": np.array([-0.06, -0.01, -0.02])}
    diff, higher = llm.aligned_minus_standard(vit_br)
    assert diff == pytest.approx((-0.09 + 0.16) / 3) and higher == 2
    assert llm.vit_lines(vit_br).split("\n") == ["ViT (standard)  BR per block: [-0.05, -0.04, -0.07]",
                                                 "ViT (aligned)   BR per block: [-0.06, -0.01, -0.02]"]
    with pytest.raises(ValueError, match="aligned"):
        llm.aligned_minus_standard({"ViT (standard)": vit_br["ViT (standard)"]})


def test_r05_figures():
    BR = np.array([-1.0, -0.5, -3.0])
    fig = figures.lm_cosine_and_br(np.eye(3), BR)
    np.testing.assert_array_equal(fig.axes[1].lines[0].get_ydata(), BR)
    plt.close(fig)
    with pytest.raises(ValueError, match="L, L"):
        figures.lm_cosine_and_br(np.eye(2), BR)
    table = pd.DataFrame({"span": ["2", "26-29"], "ppl_approx": [120.0, 199.0], "ppl_skip": [130.0, 3.3e5]})
    fig = figures.lm_approx_vs_skip(table, 113.0)
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [120.0, 199.0, 130.0, 3.3e5]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "26-29"] and ax.get_yscale() == "log"
    plt.close(fig)
    fig = figures.vit_redundancy({"ViT (standard)": BR, "ViT (aligned)": BR / 2}, "fashion-mnist")
    assert fig.axes[0].get_title() == "tracing ViTs on fashion-mnist ([CLS] token)" and len(fig.axes[0].lines) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.vit_redundancy({}, "x")


def test_spread_is_the_mse_of_the_mean_and_what_relative_change_divides_by():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(40, 5)) * np.arange(1, 6)
    mean = np.tile(ref.mean(axis=0), (40, 1))
    assert redundancy.spread(ref) == pytest.approx(redundancy.representation_mse(ref, mean))
    assert redundancy.spread(ref) == pytest.approx(float(np.var(ref, axis=0).mean()))
    assert redundancy.relative_change(ref, mean) == pytest.approx(1.0)
