"""Tests of layersim.papers.redundancy.figures: every figure of the redundancy notebooks draws the series it is
given, and refuses an empty or incomplete input."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from layersim.papers.redundancy import figures

from builders import TABLE1_ROWS, TABLE2_ROWS


def test_accuracy_vs_blocks_draws_every_series():
    table = pd.DataFrame(TABLE1_ROWS)
    fig = figures.accuracy_vs_blocks(table)
    try:
        assert [ax.get_title() for ax in fig.axes] == ["A", "B"]
        a = fig.axes[0]
        assert len(a.containers) == 2  # one error-bar series per data set
        for container, dataset, shift in zip(a.containers, ("x", "y"), (-0.08, 0.08)):
            sub = table[(table.model == "A") & (table.data == dataset)]
            x, y = container.lines[0].get_data()
            np.testing.assert_allclose(np.asarray(x, float), sub.blocks + shift)
            np.testing.assert_allclose(np.asarray(y, float), sub.accuracy)
        dotted = [l for l in a.get_lines() if l.get_linestyle() == ":"]
        assert [l.get_ydata()[0] for l in dotted] == [TABLE1_ROWS[3]["accuracy"], TABLE1_ROWS[7]["accuracy"]]
        assert [t.get_text() for t in a.get_legend().get_texts()] == ["x", "y"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="columns"):
        figures.accuracy_vs_blocks(table.drop(columns="std"))
    with pytest.raises(ValueError, match="at least one"):
        figures.accuracy_vs_blocks(table.iloc[:0])


def test_block_cosine_grid_draws_one_panel_per_model_and_data_set():
    M = np.eye(3)
    fig = figures.block_cosine_grid({("A", "x"): M, ("A", "y"): M, ("B", "x"): np.eye(2)})
    axes = np.array(fig.axes[:4]).reshape(2, 2)  # the four panels (colour bars follow)
    assert [ax.get_title() for ax in axes.ravel()] == ["A on x", "A on y", "B on x", ""]
    assert not axes[1, 1].axison and len(fig.axes) == 4 + 3
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        figures.block_cosine_grid({})


def test_skip_vs_approx_figure_has_one_panel_per_pair_in_table_order():
    fig = figures.skip_vs_approx(pd.DataFrame(TABLE2_ROWS))
    assert [ax.get_title() for ax in fig.axes] == ["B, x", "A, y"]
    ax = fig.axes[1]
    multi, single = ax.collections  # two scatters: multi-block spans, then single blocks (most blocks kept)
    np.testing.assert_allclose(multi.get_offsets(), [[0.4, 0.45]])
    np.testing.assert_allclose(single.get_offsets(), [[0.6, 0.7]])
    assert ax.lines[-1].get_ydata()[0] == 0.75  # the unmodified model
    plt.close(fig)
    with pytest.raises(ValueError, match="columns"):
        figures.skip_vs_approx(pd.DataFrame(TABLE2_ROWS).drop(columns="approx"))


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
