"""Tests of layersim.tools.bench: the CKA benchmark's command line (bad arguments are usage errors), a tiny run, and
its baselines against layersim.measures.similarity and a naive CKA."""

from __future__ import annotations

import re

import numpy as np
import pytest

from layersim.measures import similarity as S
from layersim.tools import bench
from builders import naive_linear_cka, one_line_error

PAYLOAD = "<svg onload=alert(2)>"


@pytest.mark.parametrize("argv,message", [
    (["--shapes", "bogus"], "argument --shapes: expected comma-separated NxD shapes"),
    (["--shapes", "3000x"], "got '3000x'"),
    (["--shapes", "3000x384,10x2x3"], "got '10x2x3'"),
    (["--shapes", "3x384"], "N >= 4"),
    (["--shapes", "30x0"], "d >= 1"),
    (["--shapes", ","], "argument --shapes: expected at least one NxD shape"),
    (["--layers", "-1"], "argument --layers: must be an integer >= 2, got '-1'"),
    (["--layers", "1"], "argument --layers: must be an integer >= 2"),
    (["--layers", "two"], "argument --layers: must be an integer >= 2, got 'two'"),
    (["--batch", "0"], "argument --batch: must be an integer >= 4"),
    (["--batch", "3"], "argument --batch: must be an integer >= 4"),
    (["--stream-n", "3000,x"], "argument --stream-n: expected comma-separated integers N >= 2"),
    (["--stream-n", "1"], "argument --stream-n: .*got '1'"),
    (["--stream-d", "0"], "argument --stream-d: must be an integer >= 1"),
    (["--repeat", "0"], "argument --repeat: must be an integer >= 1"),
    (["--slow", "-1"], "argument --slow: must be a number of seconds >= 0"),
    (["--slow", "nan"], "argument --slow: must be a number of seconds >= 0"),
    (["--naive-budget", "soon"], "argument --naive-budget: must be a number of seconds >= 0"),
    (["--naive-sample", "-0.5"], "argument --naive-sample: must be a number of seconds >= 0"),
    (["--torch-cka-max-n", "-1"], "argument --torch-cka-max-n: must be an integer >= 0"),
    (["--seed", "-3"], "argument --seed: must be an integer >= 0"),
    (["--seed", "1.5"], "argument --seed: must be an integer >= 0"),
    (["--only", "floor"], "argument --only: unknown method.*'floor'.*floor_centred, auto, feature"),
    (["--only", "auto,Gram"], "argument --only: unknown method.*'Gram'"),
    (["--shapes", "1002x8", "--batch", "500"], "argument --batch: N=1002 leaves a last batch of 2"),
    (["--layers"], "argument --layers: expected one argument"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: python -m layersim.tools.bench" in captured.err
    assert "Traceback" not in captured.err
    assert re.search(message, captured.err), captured.err


@pytest.mark.parametrize("argv, words", [
    (["--layers", "1"], ("--layers",)),
    (["--shapes", "0x4"], ("--shapes",)),
    (["--shapes", "ten"], ("--shapes",)),
    (["train", "--steps", "0"], ("--steps",)),
    (["train", "--objectives", f"ce,{PAYLOAD}"], ("--objectives",)),
])
def test_bench_refuses_bad_arguments(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    one_line_error(capsys.readouterr().err, *words)


def test_parsed_values():
    args = bench.parse_args(["--shapes", "40x4, 64X8,", "--stream-n", "", "--only", "auto, gram",
                             "--naive-budget", "inf"])
    assert args.shapes == [(40, 4), (64, 8)]
    assert args.stream_n == []
    assert args.only == "auto,gram"
    assert args.naive_budget == float("inf")
    default = bench.parse_args([])
    assert default.shapes == [(3000, 384), (10000, 768)] and default.stream_n == [3000, 10000, 30000]
    # a short last batch is fine when the minibatch estimator does not run
    assert bench.parse_args(["--shapes", "1002x8", "--batch", "500", "--only", "auto"]).batch == 500


def test_tiny_valid_run(capsys):
    argv = ["--shapes", "40x4", "--layers", "2", "--stream-n", "20,40", "--batch", "8",
            "--repeat", "1", "--no-torch-cka"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "| 2×40×4 | (a) naive" in out and "StreamingCKA memory vs N" in out


def test_bench_baselines_and_smoke_run(capsys):
    X = bench.ResidualStream(d=12, n_layers=4, seed=3).batch(60)
    assert X.dtype == np.float32 and X.shape == (4, 60, 12)
    ref = bench.reference_from_product(bench.floor_product(bench.centred_stack(X)), 4)
    np.testing.assert_allclose(ref, S.layer_matrix(X), atol=1e-12)
    assert bench.naive_baseline(X[0], X[2]) == pytest.approx(
        naive_linear_cka(X[0].astype(np.float64), X[2].astype(np.float64)), abs=1e-10)
    assert bench.main(["--quick", "--no-torch-cka", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 4×400×16 | (a) naive" in out and "StreamingCKA memory vs N" in out
