"""Tests of layersim.inputs.locate: the local chain's order (the project cache before system copies, system roots
in order), incomplete copies skipped, the default system roots, Office-31 where its loader reads it.

All offline, in a private cache and private system roots (``asset_cache``).
"""

from __future__ import annotations

from pathlib import Path

from layersim.inputs import assets, locate

FMNIST_FILES = assets.get_asset("fashion-mnist").files


def _fake_dir(folder: Path, files, content: bytes = b"x") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f).parent.mkdir(parents=True, exist_ok=True)
        (folder / f).write_bytes(content)
    return folder


def test_cache_copy_wins_over_system_copy(asset_cache, tmp_path):
    sys_copy = _fake_dir(tmp_path / "sys1/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert locate.find_local("fashion-mnist") == sys_copy
    cache_copy = _fake_dir(asset_cache / "fashion-mnist", FMNIST_FILES)
    assert locate.find_local("fashion-mnist") == cache_copy


def test_system_roots_are_searched_in_order(asset_cache, tmp_path):
    second = _fake_dir(tmp_path / "sys2/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert locate.find_local("fashion-mnist") == second
    first = _fake_dir(tmp_path / "sys1/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert locate.find_local("fashion-mnist") == first


def test_incomplete_copy_is_skipped(asset_cache, tmp_path):
    _fake_dir(asset_cache / "fashion-mnist", FMNIST_FILES[:2])  # half a copy
    full = _fake_dir(tmp_path / "sys2/usr/share/datasets/fashion-mnist", FMNIST_FILES)
    assert locate.find_local("fashion-mnist") == full


def test_default_system_roots_put_data_system_before_root():
    roots = locate.system_roots()
    assert roots[0].parts[-2:] == ("data", "system") and roots[-1] == Path("/")



def test_office31_is_found_where_load_office31_reads_it(asset_cache, tmp_path, monkeypatch):
    """``$LAYERSIM_OFFICE31`` when set (and only there), else the project cache; every domain's images/ needed."""
    monkeypatch.delenv("LAYERSIM_OFFICE31", raising=False)
    files = assets.get_asset("office31").files
    assert locate.find_local("office31") is None
    cached = _fake_dir(asset_cache / "office31", files)
    assert locate.find_local("office31") == cached
    given = _fake_dir(tmp_path / "office", files[:2])  # one domain missing
    monkeypatch.setenv("LAYERSIM_OFFICE31", str(given))
    assert locate.find_local("office31") is None
    _fake_dir(given, files)
    assert locate.find_local("office31") == given
    assert [loc.where for loc in locate.locations("office31")] == [
        f"ImageFolder root {given} (amazon/images/, webcam/images/, dslr/images/)"]
