"""Tests of layersim.notebook.prose: fields render the values of a run's ``metrics.json`` at their printed rounding,
a cell whose text differs from its rendered template is found, and the numbers typed by hand are found (formulas,
code, citations, dates and names left out)."""

from __future__ import annotations

import json

import pytest

from layersim.notebook import prose

from builders import prose_notebook

METRICS = {
    "params": {"n_fit": 700},
    "claims": {"fit": {"value": 0.5512, "values": [0.5512, 0.6349, 0.671], "holds": True, "threshold": 0.5,
                       "per_pair": {"ViT | digits": 0.0123, "a.b/c": -0.25}}},
    "seed_run_seconds": {"1": 141.2, "2": 138.4},
    "br": [-0.3, -0.01, -0.2],
}


def test_a_field_prints_its_value_at_its_format():
    assert prose.render("on {{params.n_fit}} inputs", METRICS) == "on 700 inputs"
    assert prose.render("rho {{ claims.fit.value : .2f }}", METRICS) == "rho 0.55"
    assert prose.render('{{claims.fit.per_pair."ViT | digits":.3f}}, {{claims.fit.per_pair."a.b/c":.2f}}',
                        METRICS) == "0.012, -0.25"
    assert prose.render("{{claims.fit.values:.2f}}", METRICS) == "0.55, 0.63, 0.67"
    assert prose.render("{{claims.fit.holds}}; {{br.1}}", METRICS) == "yes; -0.01"
    assert prose.render("at least {{x}}, {{y}}, {{z:.1f}}", {"x": 1.0, "y": 1e-05, "z": 1.0}) == "at least 1, 1e-05, 1.0"


def test_filters_compute_what_the_prose_says_of_the_seeds_and_blocks():
    assert prose.render("{{claims.fit.values|range:.2f}}", METRICS) == "0.55–0.67"
    assert prose.render("{{claims.fit.values|median:.2f}}", METRICS) == "0.63"
    assert prose.render("{{seed_run_seconds|values|range:.0f}} s", METRICS) == "138–141 s"
    assert prose.render("{{seed_run_seconds|max|duration}}", METRICS) == "2.4 min"
    assert prose.render("block {{br|argmax1}}", METRICS) == "block 2"
    assert prose.render("{{claims.fit.per_pair|count}} pairs", METRICS) == "2 pairs"
    assert prose.render("{{claims.fit.value|percent:.0f}} %", METRICS) == "55 %"
    assert prose.render("it {{claims.fit.holds|verdict}}", METRICS) == "it holds"
    assert prose.render("{{claims.fit.values|range:.0f}}", METRICS) == "1"  # equal at the printed rounding
    pairs = {"extremes": {"a": {"ratio": 9.2, "most": 6}, "b": {"ratio": 151.7, "most": 11}}}
    assert prose.render("{{extremes|each(ratio)|range:.0f}}×; {{extremes|key(b)|key(most)}}", pairs) == "9–152×; 11"
    assert prose.render("{{x|div(1000):.2f}}B", {"x": 174604.2}) == "174.60B"
    nb = prose_notebook("{{run_seconds|duration}}", "")
    nb["metadata"]["papermill"] = {"duration": 100.4}
    assert "".join(prose.render_notebook(nb, METRICS)["cells"][0]["source"]) == "100 s"


def test_the_cache_filter_says_what_the_run_trained_and_what_it_loaded():
    said = [prose.render("{{from_cache|cache}}", {"from_cache": {"loaded": loaded, "trained": trained}})
            for loaded, trained in [([], ["a", "b"]), (["a", "b"], []), (["a"], ["b", "c"]), (["a"], []), ([], [])]]
    assert said == ["training its 2 checkpoints", "with its 2 checkpoints cached",
                    "with 1 of its 3 checkpoints cached, training the others", "with its checkpoint cached",
                    "with no checkpoint"]
    with pytest.raises(ValueError, match="record of checkpoints"):
        prose.render("{{x|cache}}", {"x": [1, 2]})


def test_a_field_that_names_nothing_or_cannot_print_says_which():
    with pytest.raises(ValueError, match=r"claims.fitt.value: claims has no 'fitt' \(it has: fit\)"):
        prose.render("{{claims.fitt.value}}", METRICS)
    with pytest.raises(ValueError, match="unknown filter 'mediam'"):
        prose.render("{{claims.fit.values|mediam}}", METRICS)
    with pytest.raises(ValueError, match="failed measurement"):
        prose.render("{{x}}", {"x": float("nan")})
    with pytest.raises(ValueError, match="br.7"):
        prose.render("{{br.7}}", METRICS)


def test_loose_numbers_leave_out_formulas_code_citations_dates_and_names():
    text = ("BR (eq. 1; $\\mathrm{BR}_i = -\\frac{1}{nd}$) of the 12-block ViT-B/16 and SmolLM2-135M (Figures 3–5, "
            "7–10; §4.2, Table 1, App. C.2), `-p n_fit 50`, [paper](https://arxiv.org/abs/2410.04941) "
            "(Cannistraci et al., 2024), on 2026-11-28: {{params.n_fit}} inputs, mean 0.55 over 3 seeds, 9–152× less, "
            "a gap of −0.028 and 1.7e-13.")
    assert prose.loose_numbers(text) == ["0.55", "3", "9", "152", "−0.028", "1.7e-13"]


def test_a_deliberately_wrong_number_fails_the_drift_check():
    good = prose_notebook("rho {{claims.fit.value:.2f}}", "rho 0.55")
    assert prose.stale_cells(good, METRICS) == []
    wrong = prose_notebook("rho {{claims.fit.value:.2f}}", "rho 0.56")
    assert prose.stale_cells(wrong, METRICS) == [(1, "rho 0.56", "rho 0.55")]


def test_render_file_fills_the_executed_notebook_from_its_run(tmp_path):
    nb_path, metrics = tmp_path / "x.ipynb", tmp_path / "metrics.json"
    nb_path.write_text(json.dumps(prose_notebook("rho {{claims.fit.value:.3f}} on {{params.n_fit}}", "rho ?")))
    assert not prose.render_file(nb_path, metrics)  # the run wrote no metrics: nothing to fill
    metrics.write_text(json.dumps(METRICS))
    assert prose.render_file(nb_path, metrics)
    cell = json.loads(nb_path.read_text())["cells"][0]
    assert "".join(cell["source"]) == "rho 0.551 on 700" and cell["metadata"][prose.KEY]["template"].startswith("rho")
    other = prose_notebook("rho {{claims.fit.per_pair.\"ViT | digits\":.2f}}", "rho 0.01")
    with pytest.raises(ValueError, match="cell 1: .*has no 'ViT | digits'"):
        prose.render_notebook(other, {"claims": {"fit": {"per_pair": {}}}})
    left = prose.render_notebook(other, {"claims": {"fit": {"per_pair": {}}}}, strict=False)["cells"][0]
    shown = "".join(left["source"])  # another run's notebook keeps none of the committed run's numbers
    assert shown.startswith("*A passage of the notebook's text is left out here") and "0.01" not in shown
    assert "has no 'ViT | digits'" in shown and prose.template_of(left) == prose.template_of(other["cells"][0])
    code = prose_notebook("x", "x")
    code["cells"][1]["metadata"] = {prose.KEY: {"template": "{{params.n_fit}}"}}
    with pytest.raises(ValueError, match="cell 2 holds a prose template but is a code cell"):
        prose.render_notebook(code, METRICS)
