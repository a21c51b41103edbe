"""Tests of layersim.tools.bench_device_cka: the CKA matrix of hidden states on their device
(``python -m layersim.tools.bench device-cka``), on the CPU: the form it picks and its agreement with the CPU."""

from __future__ import annotations

from layersim.tools import bench, bench_device_cka


def test_device_cka_on_the_cpu(capsys):
    assert bench.main(["device-cka", "--shape", "60x8", "--layers", "4", "--device", "cpu", "--check-n", "30"]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("| 4 x 60 x 8")][0]
    assert "| cpu | feature |" in row and float(row.split("|")[-2].split()[0]) < 1e-10
    got = bench_device_cka.device_cka(20, 40, 3, "cpu", check_n=20, log=lambda m: None)
    assert got["form"] == "gram" and got["maxdiff"] < 1e-10 and 0 < got["cka_last_first"] <= 1
