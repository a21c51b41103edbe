"""Tests of layersim.analysis.figures: which figures a report draws, the seaborn heatmaps' layer labels and values,
and the HTML page (every lens, the figures embedded, a user's strings inert, never written into the committed
results)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from layersim.analysis import figures, layer_report, lenses
from layersim.analysis.layer_report import LayerReport

matplotlib.use("Agg")
PAYLOAD = "<svg onload=alert(2)>"


def report(labels: bool = True, logits: bool = True) -> LayerReport:
    rng = np.random.default_rng(0)
    hidden = np.cumsum(rng.standard_normal((4, 40, 6)), axis=0) + 2.0
    y = np.arange(40) % 2
    data = lenses.LayerData(hidden=hidden, labels=y if labels else None, layers=[1, 2, 3, 4],
                            logits=hidden @ rng.standard_normal((6, 2)) if logits else None)
    return layer_report.run_lenses(LayerReport(data, meta={"n_samples": 40, "width": 6, "token": "cls",
                                                           "logits": "computed", "surgery": "off (n_surgery=0)"}),
                                   layer_report.lens_names("all"))


def test_the_figures_of_what_ran():
    import matplotlib.pyplot as plt

    figs = report().figures(title="tiny")
    assert set(figs) == {"matrices", "per_layer", "per_step", "saturation"}
    heat = figs["matrices"].axes[0]
    assert heat.get_title() == "cka/matrix" and [t.get_text() for t in heat.get_yticklabels()] == ["1", "2", "3", "4"]
    shown = [float(t.get_text()) for t in heat.texts]  # the values written in the cells, row by row
    np.testing.assert_allclose(shown, np.round(report().cka.ravel(), 2))
    per_layer = [ax.get_title() for ax in figs["per_layer"].axes if ax.get_title()]
    assert per_layer == [n for n in figures.PER_LAYER if n in report().results]
    for fig in figs.values():
        plt.close(fig)
    bare = report(labels=False, logits=False).figures()
    assert set(bare) == {"matrices", "per_layer", "per_step"}
    for fig in bare.values():
        plt.close(fig)


def test_the_page_holds_every_lens_and_the_figures_and_keeps_strings_inert(tmp_path):
    rep = report(logits=False)
    rep.skipped["logit_lens/accuracy"] = f"the head was not trained on /tmp/imgs_{PAYLOAD}'s classes"
    page = figures.html_page(rep, title=f"model {PAYLOAD}")
    assert PAYLOAD not in page and page.count("&lt;svg onload=alert(2)&gt;") == 3  # title, heading, reason
    for name in set(rep.results) | set(rep.skipped):
        assert f"<td><code>{name}</code></td>" in page
    assert page.count("data:image/png;base64,") == 3 and "http" not in page
    out = rep.to_html(tmp_path / "rep.html", title="t")
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_the_page_is_never_written_into_the_committed_results(repo):
    with pytest.raises(ValueError, match="committed results"):
        report().to_html(repo / "figures" / "p" / "x.html")
    assert not (repo / "figures" / "p" / "x.html").exists()
