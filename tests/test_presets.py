import pytest

from layersim.inputs import data
from layersim.notebook import presets
from layersim.train import training


def test_standard_variant_is_the_shared_checkpoint():
    """The standard variant must keep t01's cache key: same configs as TRACING_VIT[scale]."""
    info = data.dataset_info("fashion-mnist")
    for scale in ("smoke", "default"):
        assert training.configs_from(presets.tracing_vit(scale), info) == \
            training.configs_from(presets.TRACING_VIT[scale], info)


def test_variants_change_only_the_objective():
    info = data.dataset_info("fashion-mnist")
    _, base = training.configs_from(presets.tracing_vit("default"), info)
    for name in presets.TRACING_VARIANTS:
        m, t = training.configs_from(presets.tracing_vit("default", name), info)
        assert t.objective in training.OBJECTIVES
        assert (t.epochs, t.lr, t.batch_size) == (base.epochs, base.lr, base.batch_size)
    _, reg = training.configs_from(presets.tracing_vit("default", "CE-reg"), info)
    assert reg.extra == {"beta": presets.CE_REG_BETA}


def test_reduced_budget_and_overrides():
    s = presets.tracing_vit("default", "aligned", reduced=True, depth=6)
    assert s["n_train"] == presets.TRACING_ABLATION_BUDGET["default"]["n_train"]
    assert s["depth"] == 6 and s["objective"] == "aligned"
    assert presets.tracing_vit("paper", reduced=True) == presets.TRACING_VIT["paper"]
    with pytest.raises(ValueError):
        presets.tracing_vit("default", "nope")
