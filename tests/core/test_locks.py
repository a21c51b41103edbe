"""Tests of layersim.core.locks: one writer per folder. A live holder refuses a second writer with one line naming
it; a lock whose process is gone (killed, powered off) is broken with a message; a reused process id is not taken
for the holder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from layersim.core import locks


@pytest.fixture
def other():
    """A live process of this host that is not this one."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _lock_of(folder, pid, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    info = {"pid": pid, "host": socket.gethostname(), "start": locks.process_start(pid), "what": "a test run",
            "since": 0, **extra}
    (folder / locks.NAME).write_text(json.dumps(info))


def test_a_live_holder_refuses_a_second_writer_and_keeps_its_lock(tmp_path, other):
    _lock_of(tmp_path / "out", other.pid)
    with pytest.raises(locks.Busy, match=rf"is being written by process {other.pid} .*a test run"):
        locks.acquire(tmp_path / "out", "a second run")
    assert json.loads((tmp_path / "out" / locks.NAME).read_text())["pid"] == other.pid


def test_a_lock_whose_process_is_gone_is_broken_with_a_message(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _lock_of(tmp_path / "out", gone.pid, start="1")
    said = []
    locks.acquire(tmp_path / "out", "the next run", say=said.append)
    assert len(said) == 1 and f"broke a stale lock on {tmp_path / 'out'}" in said[0] and "is gone" in said[0]
    assert json.loads((tmp_path / "out" / locks.NAME).read_text())["pid"] == os.getpid()
    locks.release(tmp_path / "out")
    assert not (tmp_path / "out" / locks.NAME).exists()


def test_a_reused_process_id_is_not_the_holder(tmp_path, other):
    """The process id is alive, but it started at another time than the lock's holder: the holder is gone."""
    _lock_of(tmp_path / "out", other.pid, start="-1")
    assert locks.stale(locks.holder(tmp_path / "out")) == (locks.process_start(other.pid) is not None)


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]"])
def test_an_unreadable_lock_is_stale(tmp_path, text):
    """A writer killed between creating its lock and filling it leaves an empty or partial file."""
    (tmp_path / locks.NAME).write_text(text)
    assert locks.stale(locks.holder(tmp_path))
    locks.acquire(tmp_path, "the next run", say=lambda line: None)
    assert locks.holder(tmp_path)["pid"] == os.getpid()


def test_hold_takes_all_or_none_and_releases_after_an_error(tmp_path, other):
    _lock_of(tmp_path / "b", other.pid)
    with pytest.raises(locks.Busy):
        with locks.hold([tmp_path / "a", tmp_path / "b"], "a run"):
            pass
    assert not (tmp_path / "a" / locks.NAME).exists()  # the one taken before the refusal is released
    with pytest.raises(RuntimeError):
        with locks.hold([tmp_path / "a", tmp_path / "c"], "a run"):
            assert locks.holder(tmp_path / "c")["pid"] == os.getpid()
            raise RuntimeError
    assert not (tmp_path / "a" / locks.NAME).exists() and not (tmp_path / "c" / locks.NAME).exists()


def test_a_lock_of_another_host_is_never_judged_stale_here(tmp_path):
    _lock_of(tmp_path, 999_999_999, host="another-host")
    with pytest.raises(locks.Busy, match="another-host"):
        locks.acquire(tmp_path, "a run")
