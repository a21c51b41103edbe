"""Tests of layersim.notebook.presets: the tracing ViT's presets, variants and budgets, the aligned-training
notebook's models and their ablation budget, the checks of the ViT's settings against the data, the tracing MLP
presets, and the clusters paper's fine-tuning scales."""

import pytest

from layersim.inputs import assets, image_data, text_tasks as tt
from layersim.notebook import presets, results, settings
from layersim.train import finetune as ft, training

ABL = " (ablation budget)"


def test_standard_variant_is_the_shared_checkpoint():
    """The standard variant must keep t01's cache key: same configs as TRACING_VIT[scale]."""
    info = image_data.dataset_info("fashion-mnist")
    for scale in ("smoke", "default"):
        assert training.configs_from(presets.tracing_vit(scale), info) == \
            training.configs_from(presets.TRACING_VIT[scale], info)


def test_variants_change_only_the_objective():
    info = image_data.dataset_info("fashion-mnist")
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


def test_aligned_training_models_are_the_full_pair_the_ablations_and_the_shallow_models():
    objective = {"standard": None, "aligned": "aligned", "multi-exit": "multi_exit", "CE-reg": "ce_reg",
                 "aligned (uniform)": "aligned_uniform"}
    for scale, shallow in (("smoke", [2, 3]), ("default", [6, 9]), ("paper", [6, 9])):
        base, budget = presets.TRACING_VIT[scale], presets.TRACING_ABLATION_BUDGET[scale]
        got = presets.aligned_training_models(scale)
        assert list(got) == ["standard", "aligned", *[v + ABL for v in objective],
                             *[f"standard {d}-block{ABL}" for d in shallow]], scale
        for name, spec in got.items():
            variant, depth = name.removesuffix(ABL), None
            if variant.endswith("-block"):
                variant, depth = "standard", int(variant.split()[1].removesuffix("-block"))
            # the scale's settings, the ablation budget for the ablations, and only the objective (and depth) besides
            expected = {**base, **(budget if name.endswith(ABL) else {})}
            if objective[variant]:
                expected["objective"] = objective[variant]
            if variant == "CE-reg":
                expected["extra"] = {"beta": presets.CE_REG_BETA}
            if depth:
                expected["depth"] = depth
            assert spec == expected, (scale, name)
        assert got["standard"] == base  # no objective key: the same settings, so the same checkpoint, as t01's
    assert presets.shallow_depths(12) == [6, 9] and presets.shallow_depths(3) == [1, 2]
    with pytest.raises(ValueError, match="at least 2 blocks"):
        presets.shallow_depths(1)


def test_an_ablation_budget_changes_only_the_ablation_models():
    reduced, full = presets.aligned_training_models("default"), presets.aligned_training_models("default", budget={})
    assert {n: full[n] for n in ("standard", "aligned")} == {n: reduced[n] for n in ("standard", "aligned")}
    for name, spec in full.items():  # at the full budget every model trains on the full budget's images
        assert (spec["n_train"], spec["epochs"]) == (presets.TRACING_VIT["default"]["n_train"],
                                                      presets.TRACING_VIT["default"]["epochs"]), name
        assert {k: v for k, v in spec.items() if k not in presets.BUDGET_KEYS} == \
            {k: v for k, v in reduced[name].items() if k not in presets.BUDGET_KEYS}, name
    assert full["standard" + ABL] == full["standard"] and full["aligned" + ABL] == full["aligned"]  # one checkpoint
    longer = presets.aligned_training_models("default", budget={"epochs": 7})["CE-reg" + ABL]
    assert (longer["epochs"], longer["n_train"]) == (7, presets.TRACING_VIT["default"]["n_train"])
    with pytest.raises(ValueError, match="sets only n_train, epochs"):
        presets.aligned_training_models("default", budget={"depth": 6})
    with pytest.raises(ValueError, match="unknown scale"):
        presets.aligned_training_models("huge")


@pytest.mark.parametrize("override, words", [
    ({"n_eval": 100000}, ("n_eval", "100000", "10000 images of the test split")),
    ({"n_eval": 2}, ("n_eval", ">= 10")),
    ({"dataset": "digits"}, ("n_train", "1437 images")),
])
def test_a_count_the_data_cannot_give_is_refused_before_anything_loads(override, words):
    """t01 recorded ``n_eval 100000`` in metrics.json while 10,000 test images were used; ``n_eval 2`` failed
    deep in the notebook. Its settings are checked against the split sizes (``presets.check_vit_shape``)."""
    evals = {"smoke": {"n_eval": 256}, "default": {"n_eval": 5000}, "paper": {"n_eval": 10000}}
    table = {s: {**presets.TRACING_VIT[s], **evals[s]} for s in results.SCALES}
    with pytest.raises(ValueError) as info:
        settings.pick(table, "default", rules=presets.TRACING_VIT_RULES, derived=presets.TRACING_VIT_DERIVED,
                      checks=[presets.check_vit_shape], **override)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_a_vit_shape_changes_only_the_shape_it_names():
    for scale in ("smoke", "default", "paper"):
        for variant in ("standard", "aligned"):
            base = presets.tracing_vit(scale, variant)
            assert presets.shaped_vit(scale, variant) == presets.shaped_vit(scale, variant, {}) == base
            wide = presets.shaped_vit(scale, variant, {"embed_dim": 192, "depth": 6})  # 192: 2, 4 or 6 heads
            assert wide == {**base, "embed_dim": 192, "depth": 6}
    assert presets.shaped_vit("default", shape={"mlp_ratio": 3})["mlp_ratio"] == 3.0


@pytest.mark.parametrize("vit, words", [
    ({"width": 256, "embed_dim": 64, "heads": 4}, ("parameter 'vit'", "unknown key(s) ['heads', 'width']")),
    ([("embed_dim", 64)], ("parameter 'vit'", "a dict")),
    ({"embed_dim": 0}, ("parameter 'vit'", "embed_dim must be an integer >= 1")),
    ({"num_heads": 2.0}, ("parameter 'vit'", "num_heads must be an integer")),
    ({"embed_dim": 250}, ("parameter 'vit'", "not a multiple of num_heads=4")),
    ({"num_heads": 3}, ("parameter 'vit'", "embed_dim must be a multiple of 3")),
    ({"patch_size": 5}, ("parameter 'vit'", "does not divide the 28-pixel images")),
])
def test_a_bad_vit_shape_is_refused_before_anything_loads(vit, words):
    table = {"default": {"n_seeds": 3, "vit": None}}
    assert settings.pick(table, "default", rules={"vit": presets.VIT_SHAPE_RULE},
                         checks=[presets.vit_shape_check("default")], vit={"embed_dim": 64})["vit"] == {"embed_dim": 64}
    with pytest.raises(ValueError) as info:
        settings.pick(table, "default", rules={"vit": presets.VIT_SHAPE_RULE},
                      checks=[presets.vit_shape_check("default")], vit=vit)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    with pytest.raises(ValueError, match="parameter 'vit'"):
        presets.shaped_vit("default", "aligned", vit)


def test_tracing_mlp_presets_cover_every_scale():
    assert set(presets.TRACING_MLP) == {"smoke", "default", "paper"}
    assert all(p["depth"] == 9 for p in presets.TRACING_MLP.values())


def test_clusters_finetune_scales_name_registered_models_and_loadable_tasks():
    for scale, preset in presets.CLUSTERS_FINETUNE.items():
        for name in preset["models"]:
            assert assets.get_asset(name).kind == "model"
        ft.check_names(preset)
    assert set(presets.CLUSTERS_FINETUNE["paper"]["tasks"]) == set(tt.PAPER_TASKS)
    assert "wnli" not in presets.CLUSTERS_FINETUNE["paper"]["tasks"]
