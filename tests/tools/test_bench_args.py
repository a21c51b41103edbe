"""Tests of layersim.tools.bench_args: the benchmarks' argument types, read directly and through a parser (a bad
value is a usage error naming the argument)."""

from __future__ import annotations

import argparse

import pytest

from layersim.tools import bench_args


def test_an_integer_with_a_lower_bound():
    at_least_2 = bench_args.int_at_least(2)
    assert at_least_2("2") == 2 and at_least_2(" 17 ") == 17
    for text in ("1", "-3", "two", "2.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be an integer >= 2, got {text!r}"):
            at_least_2(text)


def test_shapes_are_comma_separated_n_by_d():
    assert bench_args.shapes("3000x384,10000X768") == [(3000, 384), (10000, 768)]
    assert bench_args.shapes(" 40x4, ,64x8,") == [(40, 4), (64, 8)]
    for text, bad in (("3x384", "3x384"), ("30x0", "30x0"), ("10x2x3", "10x2x3"), ("4x", "4x")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got {bad!r}"):
            bench_args.shapes(text)
    with pytest.raises(argparse.ArgumentTypeError, match="at least one NxD shape"):
        bench_args.shapes(" , ")


def test_a_bad_value_is_a_usage_error_naming_the_argument(capsys):
    ap = argparse.ArgumentParser(prog="p")
    ap.add_argument("--layers", type=bench_args.int_at_least(2))
    with pytest.raises(SystemExit) as exc:
        ap.parse_args(["--layers", "1"])
    assert exc.value.code == 2 and "argument --layers: must be an integer >= 2, got '1'" in capsys.readouterr().err
