"""Tests of layersim.train.checkpoints: the checkpoint cache heals itself. A broken or tampered checkpoint is
moved aside with a warning and trained again, leftovers of killed saves are removed, folders get normal
permissions, concurrent identical saves leave one checkpoint, the cache key is stable, and a checkpoint is
never saved into the committed results.

Every fault test checks that a warning names the folder, the broken folder still exists under its new
name, the model was retrained bit-identically to a clean training, and the next call loads the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch

from layersim.core import paths
from layersim.core.paths import CacheWarning
from layersim.train import checkpoints, training
from layersim.train.training import TrainConfig, ViTConfig

from builders import REPO, committed_files, temporaries, toy_data

TINY = ViTConfig(img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=2, num_heads=2)
CFG = TrainConfig(epochs=1, batch_size=16, seed=0)
DESC = {"name": "toy", "n": 64}


def train(cfg: TrainConfig = CFG, data=None):
    """cached_vit on the toy data; ``data=None`` passes a loader so that a retraining is visible."""
    return training.cached_vit(TINY, cfg, data if data is not None else toy_data, DESC, device="cpu",
                               progress=False)


def folder_of(meta: dict):
    return paths.cache_dir("checkpoints") / f"vit-{meta['key']}"


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def moved_aside(folder):
    return sorted(folder.parent.glob(f"{folder.name}.corrupt-*"))


def _data_offset(path) -> int:
    """Where the tensor bytes of a safetensors file start (after the 8-byte length and the JSON header)."""
    return 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]


def _flip_100_bytes(folder, other):
    path = folder / "model.safetensors"
    raw = bytearray(path.read_bytes())
    start = _data_offset(path)
    for i in range(start, start + 100):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


def _swap_weights(folder, other):
    shutil.copyfile(other / "model.safetensors", folder / "model.safetensors")


def _foreign_meta(folder, other):
    for name in ("model.safetensors", "meta.json"):
        shutil.copyfile(other / name, folder / name)


FAULTS = {
    "garbage weights": lambda f, o: (f / "model.safetensors").write_bytes(os.urandom(2000)),
    "truncated weights": lambda f, o: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:1000]),
    "empty weights": lambda f, o: (f / "model.safetensors").write_bytes(b""),
    "missing weights": lambda f, o: (f / "model.safetensors").unlink(),
    "garbage meta": lambda f, o: (f / "meta.json").write_text('{"key": "abc", '),
    "meta not a dict": lambda f, o: (f / "meta.json").write_text("[1, 2]"),
    "100 flipped bytes": _flip_100_bytes,
    "another checkpoint's weights": _swap_weights,
    "another checkpoint copied in": _foreign_meta,
}


def test_config_key_is_stable_and_sensitive():
    a = checkpoints.config_key(TINY, TrainConfig(), {"n": 10})
    assert a == checkpoints.config_key(TINY, TrainConfig(), {"n": 10})
    assert a != checkpoints.config_key(TINY, TrainConfig(seed=1), {"n": 10})
    assert a != checkpoints.config_key(TINY, TrainConfig(), {"n": 11})


@pytest.mark.parametrize("fault", list(FAULTS))
def test_broken_checkpoint_is_moved_aside_and_retrained(tmp_cache, fault):
    clean, meta = train(data=toy_data())
    folder = folder_of(meta)
    _, other_meta = train(TrainConfig(epochs=1, batch_size=16, seed=1), data=toy_data())  # same architecture
    FAULTS[fault](folder, folder_of(other_meta))
    damaged = {p.name: p.read_bytes() for p in folder.iterdir()}

    with pytest.warns(CacheWarning, match=re.escape(str(folder))):
        model, meta2 = train()
    assert meta2["from_cache"] is False and meta2["key"] == meta["key"]
    assert_same_weights(model, clean)
    [aside] = moved_aside(folder)  # kept, with the damaged files as they were
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == damaged

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again, meta3 = train()
    assert meta3["from_cache"] is True and meta3["weights_sha256"] == meta["weights_sha256"]
    assert_same_weights(again, clean)
    assert moved_aside(folder) == [aside]


def test_checkpoint_records_the_sha256_of_its_weights(tmp_cache):
    _, meta = train(data=toy_data())
    folder = folder_of(meta)
    stored = json.loads((folder / "meta.json").read_text())
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert stored["weights_sha256"] == meta["weights_sha256"] == digest
    assert train()[1]["weights_sha256"] == digest


def test_checkpoint_without_checksum_is_loaded_and_given_one(tmp_cache):
    """Checkpoints of earlier versions have no checksum: trusted if they load cleanly, then checksummed."""
    clean, meta = train(data=toy_data())
    folder = folder_of(meta)
    old = json.loads((folder / "meta.json").read_text())
    del old["weights_sha256"]
    (folder / "meta.json").write_text(json.dumps(old, indent=2))

    with pytest.warns(CacheWarning, match=re.escape(str(folder)) + ".*no checksum"):
        model, meta2 = train(data=[])  # loading needs no data
    assert meta2["from_cache"] is True and moved_aside(folder) == []
    assert_same_weights(model, clean)
    assert json.loads((folder / "meta.json").read_text())["weights_sha256"] == meta["weights_sha256"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert train(data=[])[1]["from_cache"] is True


def test_checkpoint_without_checksum_that_does_not_load_is_moved_aside(tmp_cache):
    clean, meta = train(data=toy_data())
    folder = folder_of(meta)
    old = json.loads((folder / "meta.json").read_text())
    del old["weights_sha256"]
    (folder / "meta.json").write_text(json.dumps(old))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    with pytest.warns(CacheWarning, match=re.escape(str(folder))):
        model, meta2 = train()
    assert meta2["from_cache"] is False and len(moved_aside(folder)) == 1
    assert_same_weights(model, clean)


def test_retrain_replaces_the_checkpoint(tmp_cache):
    clean, meta = train(data=toy_data())
    folder = folder_of(meta)
    (folder / "marker").write_text("old")
    model, meta2 = training.cached_vit(TINY, CFG, toy_data, DESC, device="cpu", progress=False, retrain=True)
    assert meta2["from_cache"] is False and not (folder / "marker").exists()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
    assert_same_weights(model, clean)
    assert train()[1]["from_cache"] is True


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_saves_are_removed_at_the_next_save(tmp_cache):
    key = checkpoints.config_key(TINY, CFG, DESC)
    parent = paths.cache_dir("checkpoints")
    host = checkpoints._HOST
    dead = parent / f".vit-{key}.tmp-{host}-{_dead_pid()}-0123abcd"  # this host, process gone
    old_style = parent / f".vit-{key}-a1b2_c3d"  # tempfile.mkdtemp name of earlier versions, two hours old
    live = parent / f".vit-{key}.tmp-{host}-{os.getpid()}-4567cdef"  # a save in progress: kept
    recent_old_style = parent / f".vit-{key}-zz99_x0y"  # might be an earlier version saving now: kept
    other_host = parent / f".vit-{key}.tmp-elsewhere-1-89abcdef"  # cannot tell if alive: kept until stale
    for p in (dead, old_style, live, recent_old_style, other_host):
        p.mkdir()
        (p / "model.safetensors").write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(old_style, (two_hours_ago, two_hours_ago))

    model, meta = train()
    assert meta["from_cache"] is False  # the leftovers were never loaded
    left = sorted(p.name for p in parent.iterdir())
    assert left == sorted([f"vit-{key}", live.name, recent_old_style.name, other_host.name])
    assert train()[1]["from_cache"] is True


def test_kill_9_during_a_save_leaves_nothing_that_is_loaded(tmp_cache):
    """A process killed while writing its checkpoint: the next run trains, its save removes the leftover."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from builders import toy_data
        from layersim.train import training
        from layersim.train.training import TrainConfig, ViTConfig

        import safetensors.torch
        save_model = safetensors.torch.save_model

        def stall(*args, **kwargs):  # model.safetensors is written, meta.json and the rename are not
            save_model(*args, **kwargs)
            print("saving", flush=True)
            time.sleep(60)

        safetensors.torch.save_model = stall
        training.cached_vit(ViTConfig(**{TINY.__dict__!r}), TrainConfig(epochs=1, batch_size=16, seed=0), toy_data(),
                            {DESC!r}, device="cpu", progress=False)
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "saving"
    finally:
        proc.kill()
        proc.wait()
    parent = paths.cache_dir("checkpoints")
    [leftover] = list(parent.iterdir())
    assert leftover.name.startswith(".") and (leftover / "model.safetensors").is_file()

    clean, meta = train()
    assert meta["from_cache"] is False
    assert [p.name for p in parent.iterdir()] == [f"vit-{meta['key']}"]
    assert train()[1]["from_cache"] is True


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_checkpoint_folders_respect_the_umask(tmp_cache, umask):
    before = os.umask(umask)
    try:
        _, meta = train(data=toy_data())
    finally:
        os.umask(before)
    folder = folder_of(meta)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    for name in ("model.safetensors", "meta.json"):
        assert (folder / name).stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("replace", [False, True])
def test_concurrent_identical_saves_leave_one_checkpoint(tmp_cache, monkeypatch, replace):
    """Three saves that all wrote their files before any renames: one checkpoint, no temporary folders."""
    model, meta = train(data=toy_data())
    folder = folder_of(meta)
    shutil.rmtree(folder)
    import safetensors.torch

    barrier, save_model = threading.Barrier(3), safetensors.torch.save_model

    def synchronised(*args, **kwargs):
        save_model(*args, **kwargs)
        barrier.wait(timeout=30)

    save_meta = {k: v for k, v in meta.items() if k not in ("from_cache", "weights_sha256")}
    results, errors = [], []

    def save():
        try:
            kwargs = {"replace": True} if replace else {}  # the plain call also runs on earlier versions
            results.append(checkpoints.save(folder, model, save_meta, **kwargs))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    with monkeypatch.context() as patch:
        patch.setattr(safetensors.torch, "save_model", synchronised)
        threads = [threading.Thread(target=save) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == [] and results == [meta["weights_sha256"]] * 3
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded, meta2 = train()
    assert meta2["from_cache"] is True
    assert_same_weights(loaded, model)


def test_a_checkpoint_is_never_saved_into_the_committed_folders(repo):
    before = committed_files(repo)
    with pytest.raises(ValueError, match="committed"):
        checkpoints.save(repo / "notebooks" / "p" / "vit-0123", torch.nn.Linear(2, 2), {"key": "0123"})
    assert committed_files(repo) == before and temporaries(repo) == []
