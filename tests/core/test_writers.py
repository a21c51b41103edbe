"""Tests of layersim.core.writers: the guard of the committed results and sources, the writers of committed files,
and atomic writes that leave the old file and no temporary behind.

Every refusal is a ``ProtectedPath`` (a ``ValueError``) naming why; nothing is written into the committed results
of a private repository under ``tmp_path``.
"""

from __future__ import annotations

import errno
import json

import pytest

from layersim.core import writers

from builders import SPELLINGS, spelled, temporaries


# ----------------------------------------------------------------------------- committed results


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_a_path_into_figures_is_refused(repo_with_figures, monkeypatch, spelling):
    """``symlink then dotdot``: with ``deep`` -> ``figures/p``, the operating system reads ``deep/../p/n`` as
    ``figures/p/n``; a guard that collapsed ``..`` before following the link read ``p/n`` and let the write in."""
    path = spelled(repo_with_figures, monkeypatch, spelling)
    with pytest.raises(writers.ProtectedPath, match="committed results"):
        writers.check_target(path)
    monkeypatch.setenv(writers.SWITCH, "1")  # the one switch lets it through
    assert writers.check_target(path) == repo_with_figures / "figures" / "p" / "n"
    assert json.loads((repo_with_figures / "figures" / "p" / "n" / "metrics.json").read_text()) == {"committed": True}


@pytest.mark.parametrize("writer, target", [("tolerances", "README.md"), ("readme", "tests/notebooks/tolerances.json"),
                                            ("smoke-refs", "figures/p/n/metrics.json"), ("results", "lib/x.py"),
                                            ("results", "../elsewhere.ipynb"), ("smoke-refs", "tests/test_x.py")])
def test_each_writer_of_committed_files_writes_only_its_own(repo_with_figures, writer, target):
    with pytest.raises(writers.ProtectedPath, match="write only"):
        writers.write_committed(repo_with_figures / target, "x", writer, repo_with_figures)
    assert not (repo_with_figures / "lib" / "x.py").exists() and not (repo_with_figures / "README.md").exists()
    with pytest.raises(ValueError, match="unknown writer"):
        writers.write_committed(repo_with_figures / "README.md", "x", "anyone", repo_with_figures)
    writers.write_committed(repo_with_figures / "tests" / "notebooks" / "tolerances.json", "{}", "tolerances", repo_with_figures)


@pytest.mark.parametrize("where", ["lib/layersim", "tests/notebooks/p", "docs", "README.md"])
def test_no_output_folder_inside_the_sources(repo_with_figures, monkeypatch, where):
    monkeypatch.setenv(writers.SWITCH, "1")  # not even with the switch of the committed results
    with pytest.raises(writers.ProtectedPath, match="committed sources"):
        writers.check_target(repo_with_figures / where / "out")


# ----------------------------------------------------------------------------- safe writes


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, failure):
    target = tmp_path / "metrics.json"
    target.write_text("old")
    with pytest.raises(type(failure) if isinstance(failure, KeyboardInterrupt) else writers.DiskFull) as info:
        with writers.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise failure
    if isinstance(failure, OSError):
        assert str(info.value) == f"[Errno {errno.ENOSPC}] disk full at {target}"
    assert target.read_text() == "old" and temporaries(tmp_path) == []
