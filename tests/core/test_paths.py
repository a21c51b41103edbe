"""Tests of layersim.core.paths: a broken cache entry is moved aside with a warning (every broken copy kept), a
claim on a lock dies with the process that holds it, a cache or data folder inside the committed results is refused
before anything is written, and ``~`` and relative paths in LAYERSIM_CACHE / LAYERSIM_DATA mean what the writers make
of them; outside a repository the library uses the user's data and cache folders and only what needs the
repository refuses, in one line, while inside one nothing changes."""

import re
import subprocess
import sys
import textwrap

import pytest

from layersim.core import paths, writers
from layersim.core.paths import CacheWarning

from builders import committed_files


def test_quarantine_keeps_every_broken_copy(tmp_path):
    entry = tmp_path / "a.npz"
    targets = []
    for i in range(3):
        entry.write_text(str(i))
        with pytest.warns(CacheWarning, match=re.escape(str(entry)) + r".*ValueError: bad"):
            targets.append(paths.quarantine(entry, ValueError("bad\nsecond line")))
    assert not entry.exists() and len(set(targets)) == 3
    assert sorted(t.read_text() for t in targets) == ["0", "1", "2"]
    assert paths.quarantine(entry, "gone") is None  # moved by someone else first: no warning, no error


def test_a_claim_dies_with_its_process(tmp_path):
    """A run killed while it holds a claim leaves no lock behind: the next claimant gets it at once."""
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from layersim.core import paths
        with paths.claim({str(lock)!r}):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=30)
    said = []
    with paths.claim(lock, "x", say=said.append) as waited:
        assert waited is False and said == []


@pytest.mark.parametrize("spelling", ["figures", "notebooks", "tests/notebooks", "relative", "home", "symlink",
                                      "dotdot"])
def test_a_cache_inside_the_committed_folders_is_refused_before_anything_is_written(repo, monkeypatch, spelling):
    (repo / "link").symlink_to(repo / "notebooks")
    monkeypatch.setenv("HOME", str(repo))
    value = {"figures": str(repo / "figures" / "cache"), "notebooks": str(repo / "notebooks" / "p" / "cache"),
             "tests/notebooks": str(repo / "tests" / "notebooks" / "cache"), "relative": "repo/figures/cache",
             "home": "~/notebooks/cache", "symlink": str(repo / "link" / "cache"),
             "dotdot": str(repo / "lib" / ".." / "figures")}[spelling]
    before = committed_files(repo)
    monkeypatch.setenv("LAYERSIM_CACHE", value)
    with pytest.raises(ValueError) as info:
        paths.cache_dir("checkpoints")
    line = str(info.value)
    assert "\n" not in line and f"LAYERSIM_CACHE={value}" in line and "committed" in line
    monkeypatch.setenv(writers.SWITCH, "1")  # the switch that lets a run update results never admits a cache
    with pytest.raises(ValueError, match="LAYERSIM_CACHE"):
        paths.check_locations()
    assert committed_files(repo) == before and not list(repo.rglob("checkpoints"))


def test_a_data_folder_inside_the_committed_folders_is_refused_where_the_cache_goes_in_it(repo, monkeypatch):
    monkeypatch.setenv("LAYERSIM_DATA", str(repo / "figures" / "data"))
    with pytest.raises(ValueError, match="LAYERSIM_DATA=.*figures/data.*committed"):
        paths.cache_dir()
    monkeypatch.setenv("LAYERSIM_CACHE", str(repo / "cache"))  # a cache elsewhere: nothing is written under data
    assert paths.cache_dir("x") == repo / "cache" / "x"
    assert not (repo / "figures" / "data").exists()


@pytest.mark.parametrize("variable", ["LAYERSIM_CACHE", "LAYERSIM_DATA"])
def test_the_path_variables_read_home_and_relative_paths_like_the_writers(repo, tmp_path, monkeypatch, variable):
    """``LAYERSIM_CACHE=~/c`` was a folder named ``~`` in the working directory. Each spelling names the folder
    worked out by hand: ``~`` is the home folder, a relative path starts at the working directory, and ``..`` after
    a link is the folder above the link's target (``home/deep``), not the folder holding the link; the writers read
    every spelling the same way."""
    home = tmp_path / "home"
    (home / "deep" / "real").mkdir(parents=True)
    (home / "link").symlink_to(home / "deep" / "real")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    read = paths.cache_dir if variable == "LAYERSIM_CACHE" else paths.data_dir
    expected = {"~/c": home / "c", "c": home / "c", "./link/c": home / "deep" / "real" / "c",
                "link/../c": home / "deep" / "c"}
    for value, folder in expected.items():
        monkeypatch.setenv(variable, value)
        assert read() == folder.resolve(), value
        assert writers.resolved(value) == folder.resolve(), value
    assert not (home / "~").exists()


def test_outside_a_repository_the_library_uses_the_users_folders(outside_repository, monkeypatch):
    """An installed package used from any folder: no repository is found, the cache and data folders are the user's
    (``platformdirs``, here under ``XDG_CACHE_HOME`` and ``XDG_DATA_HOME``), the writers protect nothing, and what
    needs the repository raises one line that says so."""
    tmp = outside_repository
    assert paths.find_root() is None
    assert paths.cache_root() == (tmp / "user-cache" / "layersim").resolve()
    assert paths.data_dir() == (tmp / "user-data" / "layersim").resolve()
    assert paths.cache_dir("checkpoints").is_dir() and paths.check_locations() == paths.cache_root()
    assert paths.committed_folder(tmp / "work" / "figures") is None
    assert writers.check_target(tmp / "work" / "figures" / "x.png") == (tmp / "work" / "figures" / "x.png").resolve()
    assert not writers.owns(tmp / "work")
    with pytest.raises(paths.RepositoryNotFound) as info:
        paths.repo_root()
    assert isinstance(info.value, FileNotFoundError) and "\n" not in str(info.value)
    assert "needs the layersim repository" in str(info.value) and "LAYERSIM_ROOT" in str(info.value)
    monkeypatch.setenv("LAYERSIM_CACHE", str(tmp / "mine"))  # the variables still move every folder
    monkeypatch.setenv("LAYERSIM_DATA", str(tmp / "data"))
    assert paths.cache_root() == tmp / "mine" and paths.data_dir() == tmp / "data"
    monkeypatch.delenv("LAYERSIM_CACHE")
    assert paths.cache_root() == tmp / "data" / "cache"


def test_inside_a_repository_its_data_folder_holds_the_cache_as_before(outside_repository, monkeypatch):
    """Found from the working directory (any folder below the root) or named by LAYERSIM_ROOT, the repository keeps
    the cache in ``data/cache`` and refuses one in its committed folders, whatever the user's folders are."""
    tmp = outside_repository
    root = tmp / "checkout"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "notebooks" / "p").mkdir(parents=True)
    monkeypatch.chdir(root / "notebooks" / "p")
    assert paths.find_root() == root and paths.repo_root() == root
    assert paths.data_dir() == root / "data" and paths.cache_root() == (root / "data" / "cache").resolve()
    monkeypatch.chdir(tmp / "work")
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    assert paths.cache_root() == (root / "data" / "cache").resolve()
    monkeypatch.setenv("LAYERSIM_DATA", str(root / "notebooks"))
    with pytest.raises(ValueError, match="committed"):
        paths.cache_root()
