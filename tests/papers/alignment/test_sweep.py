"""Tests of layersim.papers.alignment.sweep: alignment across network designs (alignment paper, Section 5,
Figures 6, 17, 18)."""

import numpy as np
import pytest

from layersim.measures import alignment as al
from layersim.papers.alignment import sweep as sw
from layersim.train import small_nets


def test_settings_grid_varies_one_choice_around_the_base():
    rows = sw.settings_grid({"depth": [1, 4], "optimizer": ["sgd", "adam"]})
    assert [r[1] for r in rows] == ["depth=1", "depth=4", "optimizer=sgd", "optimizer=adam"]
    for family, _, cfg in rows:
        assert {k: v for k, v in cfg.items() if k != family} == {k: v for k, v in sw.BASE.items() if k != family}
    # the base network (depth 4 / adam) appears twice but is trained once
    assert len(sw.unique_configs(rows)) == 3
    assert sw.config_name(sw.BASE) == "d4-w128-adam-relu-b64"
    with pytest.raises(ValueError):
        sw.settings_grid({"dropout": [0.1]})


def test_classification_task_has_pm1_labels_and_disjoint_samples():
    task = sw.alignment_task("digits", 200, 100, seed=1)
    assert task["kind"] == "classification"
    assert task["X_train"].shape == (200, 64) and task["X_test"].shape == (100, 64)
    assert set(np.unique(task["y_train"])) == {-1.0, 1.0}
    assert 0.0 <= task["X_train"].min() and task["X_train"].max() <= 1.0
    rows_tr = {r.tobytes() for r in task["X_train"]}
    # digits has a few duplicate images; nearly all test rows are new
    assert np.mean([r.tobytes() not in rows_tr for r in task["X_test"]]) > 0.95
    again = sw.alignment_task("digits", 200, 100, seed=1)
    np.testing.assert_array_equal(task["X_train"], again["X_train"])


def test_regression_task_is_moved_to_minus_one_one():
    task = sw.alignment_task("diabetes", 300, 142, seed=0)
    assert task["kind"] == "regression"
    assert task["y_train"].min() == pytest.approx(-1.0) and task["y_train"].max() == pytest.approx(1.0)
    from sklearn.datasets import load_diabetes

    X, t = load_diabetes(return_X_y=True)
    idx = [int(np.flatnonzero((X == row).all(axis=1))[0]) for row in task["X_train"]]
    raw = t[idx]
    np.testing.assert_allclose(task["y_train"], 2 * (raw - raw.min()) / (raw.max() - raw.min()) - 1)


def test_task_rejects_bad_requests():
    with pytest.raises(ValueError):
        sw.alignment_task("diabetes", 400, 100)
    with pytest.raises(ValueError):
        sw.alignment_task("ct-position", 10, 10)


@pytest.fixture(scope="module")
def digits_task():
    return sw.alignment_task("digits", 250, 100, seed=0)


def test_before_after_curves_follow_eq2(digits_task):
    cfg = {**sw.BASE, "depth": 1, "width": 16}
    out = sw.alignment_before_after(digits_task, cfg, epochs=1, seed=2)
    for split in ("train", "test"):
        for c in out[split]["curves"].values():
            assert c[0] == pytest.approx(1.0) and np.all(np.diff(c) <= 1e-12)
    tau = out["train"]["thresholds"]
    y = digits_task["y_train"]
    ref = [al.alignment_loop(al.prepare(digits_task["X_train"]), y, [t])[0] / len(y) for t in tau[::7]]
    np.testing.assert_allclose(out["train"]["curves"]["input"][::7], ref, atol=1e-9)
    net = small_nets.make_mlp(64, [16], seed=2)
    H = small_nets.hidden_representations(net, digits_task["X_test"])[-1]
    ref_init = al.alignment_curve(al.prepare(H), digits_task["y_test"], out["test"]["thresholds"]) / 100
    np.testing.assert_allclose(out["test"]["curves"]["init"], ref_init, atol=1e-6)
    assert out["train"]["thresholds"][-1] == pytest.approx(30 * np.sqrt(0.25))


def test_training_raises_alignment_of_the_last_layer(digits_task):
    out = sw.alignment_before_after(digits_task, {**sw.BASE, "depth": 2, "width": 32}, epochs=20, seed=0)
    a = out["train"]["areas"]
    assert a["trained"] > a["init"] and a["trained"] > a["input"]
    assert out["history"][-1] < out["history"][0]


def test_before_after_rejects_bad_configs(digits_task):
    with pytest.raises(ValueError):
        sw.alignment_before_after(digits_task, {"depth": 1}, epochs=1)
    with pytest.raises(ValueError):
        sw.alignment_before_after(digits_task, {**sw.BASE, "optimizer": "lbfgs"}, epochs=1)


def test_input_curves_can_be_shared_between_networks(digits_task):
    inp = sw.input_alignment(digits_task)
    cfg = {**sw.BASE, "depth": 1, "width": 8}
    a = sw.alignment_before_after(digits_task, cfg, epochs=1, seed=0, input_curves=inp)
    b = sw.alignment_before_after(digits_task, cfg, epochs=1, seed=0)
    for split in ("train", "test"):
        for rep in ("input", "init", "trained"):
            np.testing.assert_allclose(a[split]["curves"][rep], b[split]["curves"][rep], atol=1e-6)
    np.testing.assert_allclose(al.thresholds_for(4000), 2 * al.default_thresholds())


def test_paper_scale_tasks_read_torchvision_arrays(monkeypatch):
    """mnist / cifar10 (paper scale) go through image_data.load_torchvision; a stand-in with torchvision's
    attributes (uint8 ``data``, tensor ``targets``) checks the path offline."""
    import torch

    from layersim.inputs import image_data

    class Fake:
        data = torch.arange(40 * 4 * 4 * 3, dtype=torch.int64).reshape(40, 4, 4, 3).remainder(256).to(torch.uint8)
        targets = torch.tensor([0, 1, 2, 3] * 10)

    monkeypatch.setattr(image_data, "load_torchvision", lambda name, split="train": Fake())
    task = sw.alignment_task("cifar10", 12, 8, seed=0)
    assert task["X_train"].shape == (12, 48) and task["X_test"].shape == (8, 48)
    assert task["X_train"].max() <= 1.0 and set(np.unique(task["y_test"])) <= {-1.0, 1.0}
    with pytest.raises(ValueError):
        sw.alignment_task("mnist", 15, 10)  # only 20 images of classes 0 and 1


@pytest.mark.parametrize("families, message", [
    ({"dropout": [0.1]}, "unknown family 'dropout'"),
    ({}, "non-empty dict"),
    ({"depth": []}, "non-empty list"),
    ({"depth": "4"}, "non-empty list"),
    ({"depth": [2, 0]}, r"family 'depth': \[0\] not allowed; use integers >= 1"),
    ({"width": [64, 1.5]}, r"family 'width': \[1.5\] not allowed"),
    ({"optimizer": ["adamw"]}, r"family 'optimizer': \['adamw'\] not allowed; use \['adam', 'momentum'"),
    ({"activation": ["gelu"]}, r"family 'activation': \['gelu'\] not allowed"),
])
def test_check_families_names_the_bad_family_and_value(families, message):
    with pytest.raises(ValueError, match=message):
        sw.check_families(families)


def test_every_listed_activation_builds():
    for act in sw.ACTIVATIONS:
        small_nets.make_mlp(3, [4], activation=act)


# ----------------------------------------------------------------------------- the sweep (Figures 6, 17, 18)


def test_run_sweep_against_the_loop_done_by_hand(tiny_sweep):
    rows, configs, res, seconds = tiny_sweep
    assert list(configs) == ["d1-w128-adam-relu-b64", "d4-w128-adam-linear-b64", "d4-w128-adam-relu-b64"]
    assert list(res) == [(t, c) for t in ("digits", "diabetes") for c in configs] and list(seconds) == ["digits", "diabetes"]
    for r in range(2):
        task = sw.alignment_task("diabetes", 30, 20, seed=3 + r)
        ref = sw.alignment_before_after(task, configs["d1-w128-adam-relu-b64"], epochs=1, seed=3 + r)
        out = res[("diabetes", "d1-w128-adam-relu-b64")][r]
        np.testing.assert_allclose(out["history"], ref["history"], rtol=1e-6)
        for split in ("train", "test"):
            for rep in ("input", "init", "trained"):
                np.testing.assert_allclose(out[split]["curves"][rep], ref[split]["curves"][rep], rtol=1e-6, atol=1e-9)
    stacked = sw.stacked_curves(res, "digits", configs["d4-w128-adam-linear-b64"], "test", "trained")
    assert stacked.shape == (2, 62)
    np.testing.assert_array_equal(stacked[1], res[("digits", "d4-w128-adam-linear-b64")][1]["test"]["curves"]["trained"])
    with pytest.raises(ValueError, match="no runs"):
        sw.stacked_curves(res, "mnist", configs["d4-w128-adam-relu-b64"], "test", "trained")
    with pytest.raises(ValueError, match="n_seeds"):
        sw.run_sweep({"digits": [30, 20]}, configs, n_seeds=0, epochs=1)


def test_area_cells_compare_mean_areas_over_the_runs(tiny_sweep):
    _, configs, res, _ = tiny_sweep
    cells = sw.area_cells(res)
    assert len(cells) == 2 * 3 * 2 and [c["split"] for c in cells[:2]] == ["train", "test"]
    for c in cells:
        outs = res[(c["task"], c["network"])]
        areas = {rep: [o[c["split"]]["areas"][rep] for o in outs] for rep in ("input", "init", "trained")}
        for rep, v in areas.items():
            assert c[f"area_{rep}"] == pytest.approx(np.mean(v), rel=1e-12)
        assert c["area_trained_se"] == pytest.approx(np.std(areas["trained"], ddof=1) / np.sqrt(2), rel=1e-9)
        assert c["above"] == (np.mean(areas["trained"]) > max(np.mean(areas["input"]), np.mean(areas["init"])))
    text = sw.describe_cells(cells, ["digits", "diabetes"]).split("\n")
    assert len(text) == 4 and text[0].startswith("train digits") and text[3].startswith("test  diabetes")
    sub = [c["area_trained"] for c in cells if c["split"] == "test" and c["task"] == "diabetes"]
    assert text[3].endswith(f"trained {np.mean(sub):.3f}")
    with pytest.raises(ValueError, match="no cells"):
        sw.describe_cells(cells, ["mnist"])
    losses = sw.final_losses(res)
    key = ("digits", "d4-w128-adam-relu-b64")
    assert losses["digits/d4-w128-adam-relu-b64"] == pytest.approx(np.mean([o["history"][-1] for o in res[key]]))
