import json

import pytest

from layersim.core import progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_unwatched_bar_is_plain_tqdm_and_yields_everything(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    bar = progress.progress_bar(range(5), desc="x", disable=True)
    assert not isinstance(bar, progress.Reported)
    assert list(bar) == [0, 1, 2, 3, 4]


def test_watched_bar_reports_first_last_and_throttles(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    clock = Clock()

    def ticking():
        for i in range(10):
            clock.t += 0.2  # one item per 0.2 s: a report every 3rd item at most (EVERY = 0.5 s)
            yield i

    from tqdm import tqdm
    bar = progress.Reported(tqdm(ticking(), disable=True), str(path), "train", 10, clock=clock)
    assert list(bar) == list(range(10))
    got = events(path)
    assert got[0]["n"] == 0 and got[0]["rate"] is None and not got[0]["done"]
    assert got[-1] == {**got[-1], "n": 10, "total": 10, "done": True, "desc": "train"}
    assert got[-1]["rate"] == pytest.approx(10 / 2.0)
    middle = got[1:-1]
    assert 2 <= len(middle) <= 4  # throttled: not one per item
    assert all(b["elapsed"] - a["elapsed"] >= progress.EVERY - 1e-9 for a, b in zip(got[:-1], middle))


def test_watched_bar_reports_even_when_hidden_and_keeps_the_bars_methods(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    monkeypatch.setenv(progress.ENV, str(path))
    bar = progress.progress_bar([1, 2, 3], desc="steps", disable=True)
    assert isinstance(bar, progress.Reported) and len(bar) == 3
    for _ in bar:
        bar.set_postfix(loss="0.1")  # the tqdm bar's own method, through the wrapper
    assert events(path)[-1]["n"] == 3 and events(path)[-1]["total"] == 3


def test_an_unwritable_report_file_never_stops_the_loop(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV, str(tmp_path / "missing" / "p.jsonl"))
    assert list(progress.progress_bar(range(4), desc="x", disable=True)) == [0, 1, 2, 3]


def test_length_of_a_generator_is_unknown():
    assert progress.length(iter([1])) is None and progress.length([1, 2]) == 2
