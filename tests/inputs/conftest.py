"""Fixtures of the tests of layersim.inputs: a cache with private system roots, a tiny stand-in for the Jane Austen
novels."""

import pytest

from layersim.inputs import data, fetch, locate

#: the stand-in's lines, by the R database's key of each novel
AUSTEN = {key: [f"{key.title()} wrote line {i} of the story today." for i in range(5)] for key in data.AUSTEN_NOVELS}


@pytest.fixture
def asset_cache(tmp_cache, tmp_path, monkeypatch):
    """The private project cache, plus private system roots (system copies found nowhere)."""
    cache = tmp_cache
    roots = [tmp_path / "sys1", tmp_path / "sys2"]
    monkeypatch.setattr(locate, "system_roots", lambda: list(roots))
    return cache


@pytest.fixture
def austen(tmp_cache, tmp_path, monkeypatch):
    """The Austen lines come from a tiny stand-in for the R database; returns the list of parses."""
    parsed, resolve = [], fetch.resolve
    monkeypatch.setattr(fetch, "resolve", lambda name, allow_download=None: (
        tmp_path if name == "janeaustenr" else resolve(name, allow_download)))
    monkeypatch.setattr(data, "_read_rdb", lambda folder: parsed.append(folder) or AUSTEN)
    return parsed


@pytest.fixture
def austen_lines():
    """The lines of the ``austen`` stand-in as ``data._austen_lines`` gives them: by novel title."""
    return {title: AUSTEN[key] for key, title in data.AUSTEN_NOVELS.items()}
