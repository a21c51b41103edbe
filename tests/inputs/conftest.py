"""Fixtures of the tests of layersim.inputs: private system roots (alone, or with the private project cache), a
tiny stand-in for the Jane Austen novels."""

import pytest

from layersim.inputs import fetch, locate, text_data

#: the stand-in's lines, by the R database's key of each novel
AUSTEN = {key: [f"{key.title()} wrote line {i} of the story today." for i in range(5)]
          for key in text_data.AUSTEN_NOVELS}


@pytest.fixture
def system(tmp_path, monkeypatch):
    """System copies live only under tmp_path/sys."""
    root = tmp_path / "sys"
    monkeypatch.setattr(locate, "system_roots", lambda: [root])
    return root


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
    monkeypatch.setattr(text_data, "_read_rdb", lambda folder: parsed.append(folder) or AUSTEN)
    return parsed


@pytest.fixture
def austen_lines():
    """The lines of the ``austen`` stand-in as ``text_data._austen_lines`` gives them: by novel title."""
    return {title: AUSTEN[key] for key, title in text_data.AUSTEN_NOVELS.items()}
