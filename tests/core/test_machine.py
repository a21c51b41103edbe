"""Tests of layersim.core.machine: the facts printed beside every measured time."""

import builtins
import io

from layersim.core import machine

CPUINFO = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx2{}\n"


def _reading(monkeypatch, files: dict) -> None:
    """``open`` answers ``files`` (path -> text); the two /proc files not in it raise OSError."""
    real = builtins.open

    def fake(path, *args, **kwargs):
        if path in files:
            return io.StringIO(files[path])
        if str(path) in ("/proc/cpuinfo", "/proc/loadavg"):
            raise OSError(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake)


def test_cpu_model_reads_the_model_name_and_the_avx512_flag(monkeypatch):
    _reading(monkeypatch, {"/proc/cpuinfo": CPUINFO.format(" avx512f")})
    assert machine.cpu_model() == "Test CPU 9000"
    assert machine.cpu_model(flags=True) == "Test CPU 9000 with AVX-512"
    _reading(monkeypatch, {"/proc/cpuinfo": CPUINFO.format("")})
    assert machine.cpu_model(flags=True) == "Test CPU 9000 without AVX-512"


def test_without_proc_the_facts_say_what_is_unknown(monkeypatch):
    _reading(monkeypatch, {})
    monkeypatch.setattr(machine.platform, "processor", lambda: "")
    assert machine.cpu_model() == "unknown CPU" and machine.loadavg() == "n/a"


def test_describe_lists_the_date_the_machine_and_the_load(monkeypatch):
    _reading(monkeypatch, {"/proc/cpuinfo": CPUINFO.format(""), "/proc/loadavg": "0.50 0.25 0.10 1/100 42\n"})
    lines = machine.describe()
    assert lines[0].startswith("- date: 20") and "(Test CPU 9000)" in lines[1]
    assert lines[-1] == "- load average at start: 0.50 0.25 0.10"
    assert all(line.startswith("- ") for line in lines)
