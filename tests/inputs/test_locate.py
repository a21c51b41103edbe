"""Tests of layersim.inputs.locate: the local chain's order (the project cache before system copies, system roots
in order), incomplete copies skipped, the default system roots.

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

