"""Tests of layersim.inputs.assets: the registry's names, aliases and suggestions, and the download switch.

All offline: LAYERSIM_OFFLINE=1 and the hub's offline switch are set for every test.
"""

from __future__ import annotations

import pytest

from layersim.inputs import assets

REQUIRED = ["fashion-mnist", "digits", "janeaustenr", "mnist", "cifar10", "cifar100", "imagenet",
            "glue", "wikitext-103", "all-minilm-l6-v2", "smollm2-135m", "deit_small_patch16_224",
            "deit_base_patch16_224", "vit-small-patch16-224", "vit-base-patch16-224",
            "dinov2-small", "bert-base-uncased", "roberta-base", "albert-base-v2",
            "electra-base-discriminator", "gpt2", "clip-vit-base-patch32"]


def test_registry_lists_every_required_asset_with_metadata():
    names = {a.name for a in assets.list_assets()}
    assert set(REQUIRED) <= names
    for a in assets.list_assets():
        assert a.kind in ("data", "model") and a.scale in ("offline", "paper")
        assert a.description and a.how
    offline_models = {a.name for a in assets.list_assets(kind="model", scale="offline")}
    assert offline_models == {"all-minilm-l6-v2", "smollm2-135m"}
    assert all(a.kind == "data" for a in assets.list_assets(kind="data"))


@pytest.mark.parametrize("alias,name", [
    ("deit_small", "deit_small_patch16_224"), ("DeiT-S", "deit_small_patch16_224"),
    ("vit_small", "vit-small-patch16-224"), ("vit_base", "vit-base-patch16-224"),
    ("austen", "janeaustenr"), ("fashion_mnist", "fashion-mnist"), ("CIFAR-10", "cifar10"),
    ("clip", "clip-vit-base-patch32"), ("smollm2", "smollm2-135m"), ("minilm", "all-minilm-l6-v2"),
])
def test_aliases_resolve_to_canonical_names(alias, name):
    assert assets.canonical_name(alias) == name


def test_unknown_name_is_a_value_error_with_suggestion():
    with pytest.raises(ValueError, match="unknown asset 'cifar1O'.*cifar10"):
        assets.get_asset("cifar1O")
    with pytest.raises(ValueError, match="task"):
        assets.split_name("glue")
    with pytest.raises(ValueError, match="no variants"):
        assets.split_name("gpt2/small")


@pytest.mark.parametrize("typo", ["fashion-mnis", "fashon-mnist", "Fashion_MNST", "vit-smal"])
def test_suggestions_name_each_asset_once(typo):
    # fashion-mnist is reachable by several keys (its name and aliases); each is suggested once
    with pytest.raises(ValueError, match="did you mean") as err:
        assets.canonical_name(typo)
    hint = str(err.value).split("did you mean ", 1)[1].split("?", 1)[0]
    names = [n.strip().strip("'") for n in hint.split(",")]
    assert len(names) == len(set(names)), hint
    assert all(n in assets.ASSETS for n in names), hint
    assert names[0] == ("vit-small-patch16-224" if typo == "vit-smal" else "fashion-mnist")


def test_download_policy(monkeypatch):
    import huggingface_hub.constants as hc

    assert assets.downloads_allowed() is False  # the autouse fixture set offline
    assert assets.downloads_allowed(True) is True
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("LAYERSIM_OFFLINE", "0")
    assert assets.downloads_allowed() is True
    assert assets.downloads_allowed(False) is False
    monkeypatch.setenv("LAYERSIM_OFFLINE", "1")
    assert assets.downloads_allowed() is False
    assert assets.downloads_allowed(True) is True
    monkeypatch.delenv("LAYERSIM_OFFLINE")
    assert assets.downloads_allowed() is True  # unset: allowed
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert assets.downloads_allowed() is False

