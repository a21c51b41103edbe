"""Tests of layersim.tools.report_settings: the layer report's presets pass their rules at every scale, a bad value
is one line naming it, and a rehearsal of the paper scale cuts the counts and marks the metrics."""

import pytest

from layersim.notebook import rehearsal
from layersim.tools import report_settings as rs


@pytest.mark.parametrize("scale", ["smoke", "default", "paper"])
def test_every_scale_passes_its_rules(scale):
    P = rs.settings_for(scale)
    assert {k: P[k] for k in rs.PRESETS[scale]} == rs.PRESETS[scale]


def test_a_bad_value_is_one_line_naming_it():
    with pytest.raises(ValueError, match="n_samples"):
        rs.settings_for("smoke", n_samples=1)


def test_the_layer_report_is_cut_and_marked_in_a_rehearsal(monkeypatch):
    assert rs.settings_for("paper")["n_samples"] == rs.PRESETS["paper"]["n_samples"] and rs.rehearsal_mark("paper") == {}
    monkeypatch.setenv(rehearsal.ENV, "1")
    P, smoke = rs.settings_for("paper"), rs.PRESETS["smoke"]
    assert P["model"] == rs.PRESETS["paper"]["model"] and P["dataset"] == rs.PRESETS["paper"]["dataset"]
    assert {k: P[k] for k in ("n_samples", "n_surgery", "max_length")} == {
        k: smoke[k] for k in ("n_samples", "n_surgery", "max_length")}
    mark = rs.rehearsal_mark("paper")[rehearsal.KEY]
    assert mark["cuts"]["n_samples"] == smoke["n_samples"] and rs.rehearsal_mark("default") == {}
