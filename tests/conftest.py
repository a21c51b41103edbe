"""Shared fixtures. Every test runs offline: downloads are switched off for layersim and the
Hugging Face hub, so a test that would reach the network fails at once instead of hanging."""

import pytest

pytest_plugins = ["pytester"]  # tests/tools/test_smoke_check.py runs pytest itself


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test may reach the network: layersim downloads off, hub offline."""
    import huggingface_hub.constants as hc

    monkeypatch.setenv("LAYERSIM_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private, empty project cache (``LAYERSIM_CACHE``) under the test's tmp_path."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAYERSIM_CACHE", str(cache))
    return cache


@pytest.fixture
def fake_assets(monkeypatch):
    """``fake_assets(Asset(...), ...)`` puts assets into the registry (names, aliases, ``list_assets``) for one test."""
    from layersim.inputs import assets

    def register(*items):
        monkeypatch.setattr(assets, "_ASSET_LIST", [*assets._ASSET_LIST, *items])
        for a in items:
            monkeypatch.setitem(assets.ASSETS, a.name, a)
            for n in (a.name, *a.aliases):
                monkeypatch.setitem(assets._BY_KEY, assets._key(n), a.name)
        return items

    return register


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of its own (committed figures/, notebooks/ and tests/notebooks/), the switch off, no
    LAYERSIM_OUT, LAYERSIM_CACHE or LAYERSIM_DATA, and the working directory outside it."""
    from layersim.core import writers

    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    for folder in ("figures/p/n", "notebooks/p", "tests/notebooks/p"):
        (root / folder).mkdir(parents=True)
    (root / "figures" / "p" / "n" / "metrics.json").write_text('{"committed": true}')
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    for name in ("LAYERSIM_OUT", "LAYERSIM_CACHE", "LAYERSIM_DATA", writers.SWITCH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return root


@pytest.fixture
def fake_repo(tmp_path, monkeypatch):
    """An empty repository of the test's own (``LAYERSIM_ROOT``): notebooks, runs and figures go under it."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "lib" / "layersim").mkdir(parents=True)
    monkeypatch.setenv("LAYERSIM_ROOT", str(tmp_path))
    return tmp_path


@pytest.fixture
def outside_repository(tmp_path, monkeypatch):
    """layersim as a package installed outside any repository: no LAYERSIM_* location variable, the module's own
    file under ``tmp_path/site-packages``, the working directory ``tmp_path/work``, and the user's data and cache
    folders (``XDG_DATA_HOME``, ``XDG_CACHE_HOME``) under ``tmp_path``. Returns ``tmp_path``."""
    from layersim.core import paths, writers

    for name in (*paths.VARIABLES, writers.SWITCH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "site-packages" / "layersim" / "core" / "paths.py"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


@pytest.fixture
def repo_with_figures(tmp_path, monkeypatch):
    """A repository of its own in ``tmp_path/repo`` with committed figures/ only (unlike ``repo``: no notebooks/,
    LAYERSIM_CACHE and LAYERSIM_DATA and the working directory untouched), the switch off, LAYERSIM_OUT unset."""
    from layersim.core import writers

    root = tmp_path / "repo"
    (root / "lib" / "layersim").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "figures" / "p" / "n").mkdir(parents=True)
    (root / "figures" / "p" / "n" / "metrics.json").write_text('{"committed": true}')
    monkeypatch.setenv("LAYERSIM_ROOT", str(root))
    monkeypatch.delenv("LAYERSIM_OUT", raising=False)
    monkeypatch.delenv(writers.SWITCH, raising=False)
    return root


@pytest.fixture(scope="module")
def tokenizer():
    """The MiniLM tokenizer (for the tiny random-init encoders)."""
    from layersim.inputs import fetch

    return fetch.load_model("all-minilm-l6-v2")[1]


@pytest.fixture(scope="module")
def tok():
    """The 512-token Austen tokenizer of the small GPT-2."""
    from layersim.inputs import text_data

    return text_data.austen_tokenizer(512)


@pytest.fixture(scope="module")
def batches(tok):
    """Batches (8 x 32 tokens) of 48 Austen training lines for the small GPT-2."""
    from layersim.inputs import text_data
    from layersim.papers.tracing import lm

    return lm.lm_batches(text_data.text_sample("austen", 48, split="train"), tok, 8, 32)


@pytest.fixture
def phi_y():
    """A representation in the alignment paper's form (``layersim.measures.alignment.prepare``, 80 x 13) and
    +-1 labels."""
    import numpy as np

    from layersim.measures import alignment as al

    r = np.random.default_rng(0)
    return al.prepare(r.normal(size=(80, 12)) + 0.3), al.binary_targets(r.integers(0, 2, size=80))
