"""Tests of layersim.notebook.settings: presets merged with a notebook's parameters, every value checked before
anything loads."""

import numpy as np
import pytest

from layersim.notebook import settings as st

PRESETS = {"smoke": {"n": 10, "lr": 0.1, "dataset": "fashion-mnist"},
           "default": {"n": 100, "lr": 0.1, "dataset": "fashion-mnist"}}
RULES = {"n": st.integer(1), "lr": st.real(0, open_low=True), "dataset": st.choice("fashion-mnist", "digits")}


def test_pick_merges_non_none_overrides():
    assert st.pick(PRESETS, "default", rules=RULES, n=None, lr=0.5) == {"n": 100, "lr": 0.5, "dataset": "fashion-mnist"}
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['n_trian'\]; settings are \['dataset', 'lr', 'n'\]"):
        st.pick(PRESETS, "default", rules=RULES, n_trian=5)
    with pytest.raises(ValueError, match="unknown scale"):
        st.pick(PRESETS, "huge", rules=RULES)
    with pytest.raises(ValueError, match="no preset"):
        st.pick(PRESETS, "paper", rules=RULES)


@pytest.mark.parametrize("name, value, allowed", [
    ("n", "abc", "n must be an integer >= 1"),
    ("n", -3, "n must be an integer >= 1"),
    ("n", 0, "n must be an integer >= 1"),
    ("n", 2.0, "n must be an integer >= 1"),
    ("n", True, "n must be an integer >= 1"),
    ("lr", 0, "lr must be a finite number > 0"),
    ("lr", float("nan"), "lr must be a finite number > 0"),
    ("lr", "fast", "lr must be a finite number > 0"),
    ("dataset", "cifar", "dataset must be one of 'fashion-mnist', 'digits'"),
])
def test_a_bad_value_gets_one_error_naming_the_parameter_and_what_is_allowed(name, value, allowed):
    with pytest.raises(ValueError) as info:
        st.pick(PRESETS, "smoke", rules=RULES, **{name: value})
    msg = str(info.value)
    assert msg.startswith(f"parameter {name!r}: {value!r} is not allowed") and allowed in msg


@pytest.mark.parametrize("seed, device", [(1.5, "auto"), (-1, "cpu"), ("0", "cpu"), (0, "gpu"), (0, "cuda:x")])
def test_seed_and_device_are_checked_too(seed, device):
    with pytest.raises(ValueError, match="parameter '(seed|device)'"):
        st.pick(PRESETS, "smoke", rules=RULES, seed=seed, device=device)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1", "mps"])
def test_devices_torch_knows_are_allowed(device):
    import torch

    st.pick(PRESETS, "smoke", rules=RULES, seed=3, device=device)
    if device != "auto":
        torch.device(device)  # the rule accepts only what torch can parse


def test_every_setting_needs_a_rule_presets_included():
    with pytest.raises(ValueError, match="no rule for setting 'dataset'"):
        st.pick(PRESETS, "smoke", rules={"n": st.integer(1)})
    bad_preset = {"smoke": {"n": 0, "lr": 0.1, "dataset": "digits"}}
    with pytest.raises(ValueError, match="parameter 'n': 0 is not allowed"):
        st.pick(bad_preset, "smoke", rules=RULES)


def test_values_are_normalised():
    rules = {"lr": st.real(0, 1), "ks": st.seq(st.integer(0), length=2), "m": st.mapping(st.text(), st.real())}
    out = st.pick({"smoke": {"lr": 0.5, "ks": [0, 1], "m": {"a": 1.0}}}, "smoke", rules=rules,
                  lr=np.int64(1), ks=(np.int64(3), 4), m={"b": 2})
    assert out == {"lr": 1.0, "ks": [3, 4], "m": {"b": 2.0}}
    assert type(out["lr"]) is float and type(out["ks"][0]) is int and type(out["m"]["b"]) is float


def test_containers_name_the_bad_item():
    rule = st.seq(st.integer(0, 9), length=2, distinct=True)
    for bad, detail in [([1, 1], "repeated items"), ([1, 10], "item 1 is 10"), ([1], "1 items"), ("12", "got str")]:
        with pytest.raises(ValueError, match=detail):
            rule.apply("classes", bad)
    with pytest.raises(ValueError, match="a list of 2 distinct items, each an integer in \\[0, 9\\]"):
        rule.apply("classes", [1, 1])
    with pytest.raises(ValueError, match="entry 'x'"):
        st.mapping(st.text(), st.integer(1)).apply("tasks", {"x": 0})


def test_optional_choice_and_flag_compare_types():
    assert st.optional(st.text()).apply("weights", None) is None
    with pytest.raises(ValueError, match="None \\(pre-train here\\) or a non-empty string"):
        st.optional(st.text(), "pre-train here").apply("weights", 3)
    with pytest.raises(ValueError):
        st.flag().apply("augment", 1)
    with pytest.raises(ValueError):
        st.choice(1, 2).apply("k", True)
    assert st.choice(1, 2).apply("k", 2) == 2


def test_derived_settings_follow_the_others_unless_given():
    presets = {"smoke": {"dataset": "fashion-mnist", "patch": 7}}
    rules = {"dataset": st.choice("fashion-mnist", "cifar10"), "patch": st.integer(1)}
    derived = {"patch": lambda s: {"fashion-mnist": 7, "cifar10": 4}[s["dataset"]]}
    assert st.pick(presets, "smoke", rules=rules, derived=derived, dataset="cifar10")["patch"] == 4
    assert st.pick(presets, "smoke", rules=rules, derived=derived, dataset="cifar10", patch=8)["patch"] == 8
    with pytest.raises(ValueError, match="parameter 'patch'"):
        st.pick(presets, "smoke", rules=rules, derived={"patch": lambda s: 0}, dataset="cifar10")


def test_checks_see_the_merged_settings():
    presets = {"smoke": {"dataset": "digits", "classes": [0, 1], "n_train": 5, "n_per_class": 5}}
    rules = {"dataset": st.text(), "classes": st.seq(st.integer(0)), "n_train": st.integer(1),
             "n_per_class": st.integer(1)}
    checks = [st.classes_exist("classes", "dataset"),
              st.at_most("n_train", lambda s: 2 * s["n_per_class"], "two classes of n_per_class points")]
    assert st.pick(presets, "smoke", rules=rules, checks=checks, classes=[8, 9])["classes"] == [8, 9]
    with pytest.raises(ValueError, match=r"parameter 'classes': classes \[10\] do not exist in 'digits'; classes "
                                         r"must be in \[0, 9\]"):
        st.pick(presets, "smoke", rules=rules, checks=checks, classes=[9, 10])
    with pytest.raises(ValueError, match=r"parameter 'n_train': 11 is not allowed; n_train must be <= 10"):
        st.pick(presets, "smoke", rules=rules, checks=checks, n_train=11)


def test_n_eval_below_what_the_measures_need_is_refused_up_front():
    """``-p n_eval 2`` used to fail deep in a notebook (a centred cosine over one sample of the hard
    classes); the shared rule refuses it before anything loads, saying what it must be."""
    presets = {"smoke": {"n_eval": 256}}
    with pytest.raises(ValueError) as info:
        st.pick(presets, "smoke", n_eval=2)
    msg = str(info.value)
    assert msg.startswith("parameter 'n_eval': 2 is not allowed; n_eval must be an integer >= 10 (")
    assert "one per class" in msg and "\n" not in msg
    assert st.pick(presets, "smoke", n_eval=st.MIN_EVAL) == {"n_eval": 10}
