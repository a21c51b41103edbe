"""layersim.papers.redundancy.rba: the paper's spans and parameter counts (against the numbers the paper
prints), span models and the probe protocol."""

import numpy as np
import pytest
import torch

from builders import image_batch, tiny_vit
from layersim.measures import redundancy
from layersim.nets import linear_maps, surgery
from layersim.papers.redundancy import rba as rr


def test_table_spans_and_blocks_kept():
    assert len(rr.TABLE1_SPANS) == 13 and rr.TABLE1_SPANS[-1] is None
    assert len(rr.TABLE2_SPANS) == 20 and rr.TABLE2_SPANS[8:19] == [(i, i + 1) for i in range(11)]
    assert [rr.blocks_kept(s) for s in rr.TABLE1_SPANS] == [8, 9, 9, 10, 10, 10, 10, 10, 11, 11, 11, 11, 12]
    assert rr.spans_for(4) == [(1, 3), (2, 3), None]
    assert rr.span_label((2, 3)) == "2-3" and rr.span_label(None) == "none"
    assert rr.PAPER_PARAMS_M["vit_small"]["1-5"] == 15.31 and rr.PAPER_PARAMS_M["dino_small"]["none"] == 22.06


def test_parameter_counts_against_the_papers_table():
    """Single-block spans and the full encoders match the paper's counts; longer spans differ by one
    d x d map per additional removed block (the paper counts a map per block, RBA uses one per span)."""
    ours = rr.parameter_table(models={k: rr.PARAM_MODELS[k] for k in ("vit_small", "dino_small")})
    for model, row in ours.items():
        paper = rr.PAPER_PARAMS_M[model]
        for span in rr.TABLE1_SPANS:
            label = rr.span_label(span)
            extra_maps = 0 if span is None else 12 - rr.blocks_kept(span) - 1
            assert row[label] + extra_maps * 384 * 384 / 1e6 == pytest.approx(paper[label], abs=0.011), (model, label)


def test_span_models_skip_and_approximate():
    model, x = tiny_vit(perturb=True), image_batch(28, 1, n=6)
    assert rr.span_model(model, None, "skip") is model
    sk = rr.span_model(model, (0, 1), "skip")
    with torch.no_grad():
        torch.testing.assert_close(sk(x), surgery.skip(model, 2, 2)(x))
    ap = rr.span_model(model, (0, 2), "approx", [x], device="cpu")
    assert (ap.first, ap.last) == redundancy.paper_span(0, 2) == (2, 3)
    assert isinstance(ap.replacement.module, linear_maps.LinearMap)
    with pytest.raises(ValueError, match="fit_batches"):
        rr.span_model(model, (0, 1), "approx")
    with pytest.raises(ValueError, match="mode"):
        rr.span_model(model, (0, 1), "drop")


def test_probe_accuracies_are_per_seed_and_deterministic():
    model = tiny_vit(perturb=True)
    x, y = image_batch(28, 1, n=40), np.arange(40) % 3
    a = rr.probe_accuracies(model, [x[:30]], y[:30], [x[30:]], y[30:], seeds=(0, 1), epochs=2, batch_size=8, device="cpu")
    b = rr.probe_accuracies(model, [x[:30]], y[:30], [x[30:]], y[30:], seeds=(0, 1), epochs=2, batch_size=8, device="cpu")
    assert a == b and len(a) == 2 and all(0 <= v <= 1 for v in a)
