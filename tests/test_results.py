import json
import math

import numpy as np
import pytest
import torch

from layersim.notebook import results


def test_output_dir_keeps_other_scales_out_of_figures(tmp_path, monkeypatch):
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    monkeypatch.delenv("LAYERSIM_UPDATE_COMMITTED", raising=False)
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    # a default-scale run writes the committed figures/ only with the switch on (make reproduce)
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "runs" / "default" / "tracing" / "t01"
    assert not (tmp_path / "figures").exists()
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "1")
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "figures" / "tracing" / "t01"
    smoke = results.output_dir("tracing", "t01", "smoke")
    assert smoke == tmp_path / "runs" / "smoke" / "tracing" / "t01" and smoke.is_dir()
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "elsewhere"))
    assert results.output_dir("a", "b", "paper") == tmp_path / "elsewhere" / "a" / "b"


@pytest.mark.parametrize("scale", ["smoke", "paper"])
def test_output_dir_refuses_other_scales_pointed_into_figures(tmp_path, monkeypatch, scale):
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    monkeypatch.setenv("LAYERSIM_OUT", str(tmp_path / "figures"))
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "1")  # not even the switch lets another scale in
    with pytest.raises(ValueError, match="may not write into"):
        results.output_dir("tracing", "t01", scale)
    assert not (tmp_path / "figures").exists()
    assert results.output_dir("tracing", "t01", "default") == tmp_path / "figures" / "tracing" / "t01"
    monkeypatch.setenv("LAYERSIM_UPDATE_COMMITTED", "0")
    with pytest.raises(ValueError, match="committed results"):
        results.output_dir("tracing", "t01", "default")


def test_claim_is_computed_from_the_value():
    assert results.claim(0.95, 0.9)["holds"] is True
    assert results.claim(0.85, 0.9)["holds"] is False
    c = results.claim(2.0, 3.0, op="<=", note="gap in points")
    assert c == {"holds": True, "value": 2.0, "threshold": 3.0, "op": "<=", "note": "gap in points"}
    with pytest.raises(ValueError, match="measurement failed"):
        results.claim(float("nan"), 0.9)
    with pytest.raises(ValueError, match="comparison"):
        results.claim(1.0, 0.9, op="=>")


def test_a_measurement_carries_no_verdict_until_it_is_judged():
    m = results.measure(np.float32(0.5), "fraction", kind="scale", reason="small data", per_task={"a": 0.5})
    assert m == {"value": 0.5, "note": "fraction", "kind": "scale", "reason": "small data", "per_task": {"a": 0.5}}
    c = results.judge(m, 0.4, ">")
    assert c == {"holds": True, "value": 0.5, "threshold": 0.4, "op": ">", "note": "fraction", "kind": "scale",
                 "reason": "small data", "per_task": {"a": 0.5}}
    assert results.judge(m, 0.5, ">")["holds"] is False and results.judge(m, 0.5, ">=")["holds"] is True
    with pytest.raises(ValueError, match="measurement failed"):
        results.measure(float("nan"))
    with pytest.raises(ValueError, match="carries no holds, threshold"):
        results.measure(1.0, holds=True, threshold=0.5)
    with pytest.raises(ValueError, match="not a measurement"):
        results.judge(results.claim(1.0, 0.5), 0.5)
    with pytest.raises(ValueError, match="diagnosis"):
        results.measure(1.0, kind="scale")


def test_a_value_on_its_threshold_up_to_rounding_is_on_it():
    """12 of 600 examples lost is -0.02 exactly; in floats 0.935 - 0.955 is -0.020000000000000018."""
    drop = 0.935 - 0.955
    assert drop != -0.02 and drop == pytest.approx(-0.02)
    assert results.claim(drop, -0.02, ">=")["holds"] and results.claim(drop, -0.02, "<=")["holds"]
    assert not results.claim(drop, -0.02, ">")["holds"] and not results.claim(drop, -0.02, "<")["holds"]
    assert results.claim(0.1 + 0.2, 0.3, "<=")["holds"] and not results.claim(0.1 + 0.2, 0.3, ">")["holds"]
    # a real difference stays one, also next to 0 (no absolute tolerance) and at a relative 1e-6
    assert results.claim(1e-17, 0.0, ">")["holds"] and not results.claim(-1e-17, 0.0, ">=")["holds"]
    assert not results.claim(-0.02 * (1 + 1e-6), -0.02, ">=")["holds"]
    assert results.compare(0.5, 0.5, ">") is False and results.compare(0.5, 0.5, ">=") is True
    with pytest.raises(ValueError, match="comparison"):
        results.compare(1.0, 1.0, "==")


def test_write_metrics_round_trips_numpy_and_torch(tmp_path):
    claims = {"c": results.claim(np.float32(0.95), 0.9)}
    path = results.write_metrics(tmp_path, "tracing/t01", "smoke", {"seed": np.int64(3)}, claims,
                                 curve=np.array([0.5, 1.0]), t=torch.tensor([1.5]), bad=math.inf)
    data = json.loads(path.read_text())
    assert data["notebook"] == "tracing/t01" and data["scale"] == "smoke"
    assert data["params"] == {"seed": 3}
    assert data["curve"] == [0.5, 1.0] and data["t"] == [1.5] and data["bad"] is None
    assert data["claims"]["c"]["holds"] is True
    with pytest.raises(ValueError, match="lacks"):
        results.write_metrics(tmp_path, "x", "smoke", {}, {"c": {"value": 1.0}})


def test_summary_rounds_and_keeps_claim_verdicts():
    claims = {"a": {"holds": True, "value": 1.0}, "b": {"holds": False, "value": 0.1}}
    s = results.summary(claims, digits=2, acc=[0.12345, 0.6789], r=np.float64(0.98765))
    assert s == {"acc": [0.12, 0.68], "r": 0.99, "claims": {"a": True, "b": False}}
    nested = results.summary(claims, digits=3, area={"input": 0.25420379391465814, "runs": [{"x": 1 / 3}]})
    assert nested["area"] == {"input": 0.254, "runs": [{"x": 0.333}]}


def test_claims_table_lists_every_claim_with_its_verdict():
    claims = {"up": results.claim(0.95, 0.9, note="r"), "down": results.claim(0.5, 0.9)}
    table = results.claims_table(claims).splitlines()
    assert len(table) == 4
    assert table[2] == "| `up` | yes (1/1) | 0.950 | >= 0.9 | r |"
    assert table[3].startswith("| `down` | **no** (0/1) | 0.500 | >= 0.9 |")


def test_claims_table_shows_tiny_values():
    table = results.claims_table({"exact": results.claim(6.5e-11, 1e-8, op="<=")})
    assert "| 6.5e-11 | <= 1e-08 |" in table


def test_numbers_that_are_not_finite_are_formatted_as_what_they_are():
    assert results.format_value(0.5) == "0.500" and results.format_value(2e-5) == "2e-05"
    assert [results.format_value(v) for v in (math.nan, math.inf, -math.inf, None)] == ["NaN", "inf", "-inf", "none"]
    assert results.format_threshold(0.9) == "0.9" and results.format_threshold(math.nan) == "NaN"


def test_a_threshold_that_is_not_a_finite_number_is_refused():
    for threshold in (math.nan, math.inf, None, "0.5"):
        with pytest.raises(ValueError, match="threshold"):
            results.claim(0.5, threshold)
    assert results.claim(0.5, np.float32(0.25))["holds"] and results.claim(1, 0, ">")["holds"]
