"""Tests of layersim.tools.committed: nothing lost, whatever stops a run (the runner's ``--update-committed``).

A real runner process rewrites the committed results of a temporary git repository (never this checkout) and is
stopped at a named phase -- before its snapshot (``locked``), after it (``kept``), while its notebook writes,
while it publishes (``publishing``, ``published``) -- by SIGTERM, SIGINT, SIGHUP, ``timeout`` or SIGKILL. After
the run, or after the next one starts (or ``runner --recover``) for a hard kill, every committed file is as it
was (``git status`` shows nothing) and nothing is left kept aside or locked.

The runs cost a kernel start each (about 5 s); the two that ``make test`` runs are SIGTERM while the notebook
writes and SIGKILL then recovery; the other phases and signals are marked ``full`` (``make test-all``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layersim.core import locks
from layersim.tools import committed
from builders import tree_files, write_notebook

WRITES = ("from layersim.notebook import results\nimport os, time\nfrom pathlib import Path\n"
          "OUT = results.output_dir('p', 'n', scale)\n"
          "(OUT / 'new.png').write_bytes(b'new')\n"
          "(OUT / 'metrics.json').write_text('{\"half\": ')\n"
          "if os.environ.get('MARK'):\n"
          "    Path(os.environ['MARK']).write_text('writing')\n"
          "    time.sleep(120)")
FINISHES = "results.write_metrics(OUT, 'p/n', scale, {}, {})"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A git repository with one notebook ``p/n`` and its committed figures folder (a PNG and ``metrics.json``),
    everything committed; ``runs/`` ignored, as in the project."""
    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / ".gitignore").write_text("runs/\n")
    figures = root / "figures" / "p" / "n"
    figures.mkdir(parents=True)
    (figures / "metrics.json").write_text('{"committed": true}\n')
    (figures / "old.png").write_bytes(b"old")
    write_notebook(root / "notebooks" / "p" / "n.ipynb", [WRITES, FINISHES])
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "committed results")
    return root


def _environment(root: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LAYERSIM_OUT", "LAYERSIM_UPDATE_COMMITTED",
                                                              committed.PAUSE, "MARK")}
    return {**env, "LAYERSIM_ROOT": str(root), "LAYERSIM_CACHE": str(root / "runs" / "cache"), **extra}


def _start(root: Path, *prefix: str, **extra: str) -> subprocess.Popen:
    """The runner rewriting ``p/n``'s committed results; its standard error goes to ``<root>/../stderr``."""
    cmd = [*prefix, sys.executable, "-m", "layersim.tools.runner", "--update-committed", "--nb", "p/n", "--seeds", "1"]
    err = open(root.parent / "stderr", "w")  # noqa: SIM115 - read back by _finish
    return subprocess.Popen(cmd, cwd=root, env=_environment(root, **extra), stdout=subprocess.PIPE, stderr=err,
                            text=True)


def _stderr(root: Path) -> str:
    return (root.parent / "stderr").read_text()


def _finish(proc: subprocess.Popen, root: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    out, _ = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, _stderr(root))


def _reach(proc: subprocess.Popen, ready, timeout: float = 90.0) -> None:
    """Wait until ``ready()`` (the run reached its phase); fail with the runner's output if it ended first."""
    t0 = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            out, _ = proc.communicate()
            pytest.fail(f"the runner ended before its phase (exit {proc.returncode}):\n{out}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("the runner did not reach its phase")
        time.sleep(0.1)


def _stop_at(root: Path, phase: str, signum: int, tmp_path: Path) -> subprocess.CompletedProcess:
    """Start the runner, wait for ``phase`` (``writing``: the notebook's own cell), send ``signum``, and return the
    finished process."""
    mark = tmp_path / "mark"
    extra = {"MARK": str(mark)} if phase == "writing" else {committed.PAUSE: phase}
    proc = _start(root, **extra)
    if phase == "writing":
        _reach(proc, mark.is_file)
    else:
        _reach(proc, lambda: f"paused at {phase}" in _stderr(root))
    proc.send_signal(signum)
    return _finish(proc, root)


def _as_it_was(root: Path) -> None:
    """Every committed file as committed, nothing kept aside or locked."""
    assert _git(root, "status", "--porcelain") == ""
    assert committed.leftovers(root) == []
    assert not [p for p in (root / "runs").rglob(locks.NAME)] if (root / "runs").is_dir() else True


def _no_kernel_of(pid: int) -> bool:
    import psutil

    return not any(p.info["environ"] and p.info["environ"].get("JPY_PARENT_PID") == str(pid)
                   for p in psutil.process_iter(["environ"]))


# ----------------------------------------------------------------------------- the pieces, in this process


@pytest.fixture
def plain(tmp_path):
    """A repository root with a committed folder ``figures/p/n`` and its notebook (no git, no runner)."""
    root = tmp_path / "plain"
    folder = root / "figures" / "p" / "n"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text("{}")
    (folder / "a.png").write_bytes(b"a")
    (folder / "notes.txt").write_text("not a run output: never touched")
    (root / "notebooks" / "p").mkdir(parents=True)
    (root / "notebooks" / "p" / "n.ipynb").write_text("old notebook")
    return root


def test_a_snapshot_puts_back_the_folder_and_the_notebook_as_they_were(plain):
    folder, nb = plain / "figures" / "p" / "n", plain / "notebooks" / "p" / "n.ipynb"
    before = {**tree_files(folder), "nb": nb.read_bytes()}
    keep = committed.snapshot(folder, nb, plain)
    (folder / "a.png").write_bytes(b"half")
    (folder / "b.png").write_bytes(b"new")
    (folder / "metrics.json").unlink()
    nb.write_text("new notebook")
    assert committed.restore(keep, plain) == folder
    assert {**tree_files(folder), "nb": nb.read_bytes()} == before
    assert not keep.exists() and committed.leftovers(plain) == []


def test_a_copy_of_a_live_run_refuses_a_second_snapshot_and_a_dead_one_is_put_back(plain, monkeypatch):
    folder = plain / "figures" / "p" / "n"
    committed.snapshot(folder, None, plain)
    with pytest.raises(locks.Busy, match="is being rewritten by process"):  # this very process: alive
        committed.snapshot(folder, None, plain)
    (folder / "a.png").write_bytes(b"half")
    monkeypatch.setattr(locks, "stale", lambda info: True)  # as if its process were gone
    said = []
    assert committed.recover(plain, say=said.append) == [folder]
    assert (folder / "a.png").read_bytes() == b"a" and "put back figures/p/n as it was" in said[0]


def test_half_made_and_half_dropped_copies_are_never_restored(plain):
    """A copy is whole only once renamed into place with its keep.json: a snapshot or a drop cut short by a kill
    leaves a hidden folder that the next run removes without restoring from it."""
    folder = plain / "figures" / "p" / "n"
    keep = committed.keep_folder(folder, plain)
    for name in (f".{keep.name}.tmp-999999999", f".{keep.name}.discard-999999999"):
        (keep.parent / name / "files").mkdir(parents=True)
        (keep.parent / name / "files" / "a.png").write_bytes(b"partial")
    (folder / "a.png").write_bytes(b"complete and new")
    assert committed.recover(plain) == []
    committed.snapshot(folder, None, plain)  # finds and removes the leftovers first
    assert sorted(p.name for p in keep.parent.iterdir()) == [keep.name]
    assert (folder / "a.png").read_bytes() == b"complete and new"


def test_the_guard_keeps_each_notebooks_outputs_until_it_settles(plain, monkeypatch):
    """A failed notebook's folder and notebook are put back, a finished one's copy is dropped, and ``settle_all``
    puts back what is still kept; a notebook that rewrites nothing committed is not kept."""
    monkeypatch.setenv("LAYERSIM_ROOT", str(plain))
    folder, nb = plain / "figures" / "p" / "n", plain / "notebooks" / "p" / "n.ipynb"
    before = {**tree_files(folder), "nb": nb.read_bytes()}
    guard = committed.Guard(lambda n: (folder, nb) if n == nb else None, say=None)
    guard.keep(plain / "notebooks" / "p" / "other.ipynb")
    assert guard.kept == {}
    for ok in (False, True, None):
        guard.keep(nb)
        (folder / "a.png").write_bytes(b"new")
        nb.write_text("new notebook")
        if ok is None:
            assert guard.settle_all() == [folder]
        else:
            guard.settle(nb, ok)
        assert ({**tree_files(folder), "nb": nb.read_bytes()} == before) != bool(ok)
        assert committed.leftovers(plain) == [] and guard.kept == {}
        folder.joinpath("a.png").write_bytes(b"a")
        nb.write_text("old notebook")


def test_sigterm_and_sighup_become_stopped_and_a_shielded_block_finishes():
    before = signal.getsignal(signal.SIGTERM)
    for signum in committed.SIGNALS:
        with pytest.raises(committed.Stopped) as stop:
            with committed.stops():
                os.kill(os.getpid(), signum)
                time.sleep(5)
        assert stop.value.exit_code == 128 + signum
    with committed.shielded() as got:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
    assert got == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) == before


# ----------------------------------------------------------------------------- in make test


def test_sigterm_while_the_notebook_writes_leaves_the_committed_folder_as_it_was(repo, tmp_path):
    """SIGTERM (``timeout``, ``scancel``, CI cancellation) reached the runner while its notebook had written half of
    the new figures folder: the folder lost its PNG and metrics.json, and nothing put them back."""
    done = _stop_at(repo, "writing", signal.SIGTERM, tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "put back figures/p/n as it was" in done.stderr
    assert "Traceback (most recent call last)" not in done.stderr.split("[IPKernelApp]")[0]
    _as_it_was(repo)


def test_a_hard_kill_is_put_back_by_the_next_run_before_its_snapshot(repo, tmp_path):
    """SIGKILL leaves the half-written folder and the copy kept aside; the next run's snapshot used to wipe that
    copy. Now the next run (here ``--recover``) puts the folder back first, and the dead run's lock is broken."""
    done = _stop_at(repo, "writing", signal.SIGKILL, tmp_path)
    assert done.returncode == -signal.SIGKILL
    assert (repo / "figures" / "p" / "n" / "new.png").is_file()  # half-written: the kill left it so
    assert committed.leftovers(repo)
    recovered = subprocess.run([sys.executable, "-m", "layersim.tools.runner", "--recover"], cwd=repo,
                               env=_environment(repo), capture_output=True, text=True, timeout=60)
    assert recovered.returncode == 0, recovered.stderr
    assert "put back figures/p/n as it was" in recovered.stderr and "1 committed folder(s) put back" in recovered.stdout
    assert _git(repo, "status", "--porcelain") == ""
    assert committed.leftovers(repo) == []


# ----------------------------------------------------------------------------- make test-all


@pytest.mark.full
@pytest.mark.parametrize("phase", ["locked", "kept", "writing", "publishing", "published"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_every_stopping_signal_at_every_phase_leaves_the_committed_results_as_they_were(repo, tmp_path, phase,
                                                                                         signum):
    done = _stop_at(repo, phase, signum, tmp_path)
    assert done.returncode == (130 if signum == signal.SIGINT else 128 + signum), done.stderr
    _as_it_was(repo)


@pytest.mark.full
@pytest.mark.parametrize("phase", ["kept", "writing", "publishing", "published"])
def test_a_hard_kill_at_every_phase_is_put_back_when_the_next_run_starts(repo, tmp_path, phase):
    """After SIGKILL the next real run starts by putting the folder back, breaks the dead run's lock with a message,
    and completes: the committed folder is then complete and new (the notebook's full run)."""
    done = _stop_at(repo, phase, signal.SIGKILL, tmp_path)
    assert done.returncode == -signal.SIGKILL
    pid = int(json.loads((repo / "runs" / "default" / "p" / "n" / locks.NAME).read_text())["pid"])
    t0 = time.monotonic()
    while not _no_kernel_of(pid) and time.monotonic() - t0 < 10:  # its kernel follows its parent out
        time.sleep(0.2)
    again = _finish(_start(repo), repo)
    err = again.stderr
    assert again.returncode == 0, again.stdout + err
    assert "broke a stale lock" in err
    assert phase == "kept" or "put back figures/p/n as it was" in err
    figures = repo / "figures" / "p" / "n"
    assert sorted(p.name for p in figures.iterdir()) == ["metrics.json", "new.png"]
    assert json.loads((figures / "metrics.json").read_text())["notebook"] == "p/n"
    assert committed.leftovers(repo) == []


@pytest.mark.full
def test_timeout_stops_the_run_and_the_committed_results_stay(repo, tmp_path):
    """``timeout 20 make reproduce``: coreutils' timeout sends SIGTERM to the runner (and its process group)."""
    mark = tmp_path / "mark"
    proc = _start(repo, "timeout", "-s", "TERM", "25", MARK=str(mark))
    _reach(proc, mark.is_file)
    done = _finish(proc, repo)
    assert done.returncode == 124, done.stderr
    _as_it_was(repo)


@pytest.mark.full
def test_a_second_runner_on_the_same_notebook_is_refused_while_the_first_runs(repo, tmp_path):
    """Two runners writing one output folder overwrote each other, both reporting ok."""
    mark = tmp_path / "mark"
    first = _start(repo, MARK=str(mark))
    _reach(first, mark.is_file)
    second = subprocess.run(first.args, cwd=repo, env=_environment(repo), capture_output=True, text=True, timeout=60)
    first.send_signal(signal.SIGTERM)
    _finish(first, repo)
    assert second.returncode == 2
    assert "is being written by process" in second.stderr and "Traceback" not in second.stderr
    _as_it_was(repo)


@pytest.mark.full
def test_a_batch_on_ray_stopped_by_sigterm_cancels_its_notebooks_and_puts_the_results_back(repo, tmp_path):
    """``--jobs``: the notebooks run in Ray workers; a stop cancels them before the driver puts the committed
    outputs back, so no worker writes into a folder that was just restored."""
    mark = tmp_path / "mark"
    cmd = [sys.executable, "-m", "layersim.tools.runner", "--update-committed", "--nb", "p/n", "--seeds", "1",
           "--jobs", "1"]
    err = open(repo.parent / "stderr", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=repo, env=_environment(repo, MARK=str(mark)), stdout=subprocess.PIPE,
                            stderr=err, text=True)
    _reach(proc, mark.is_file, timeout=180)
    proc.send_signal(signal.SIGTERM)
    done = _finish(proc, repo)
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr
    time.sleep(3)  # a worker that outlived the stop would write its metrics.json now
    _as_it_was(repo)
