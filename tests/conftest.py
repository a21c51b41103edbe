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
