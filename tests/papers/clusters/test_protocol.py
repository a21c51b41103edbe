"""Tests of layersim.papers.clusters.protocol: the CKA maps, the truncation curves of Fig. 3 (UNTUNED checked
against layersim.nets.surgery.truncate), the skip grid of Fig. 4 on random-init RoBERTa / ALBERT / ELECTRA
(classification and multiple choice), and the numbers of the notebooks' statements."""

import copy

import numpy as np
import pytest
import torch

from layersim.inputs import text_tasks as tt
from layersim.nets import readout, surgery
from layersim.papers.clusters import protocol as cf
from layersim.train import finetune as ft

from builders import (TINY_ENCODER, TINY_FAMILIES, TINY_FINETUNE, austen_choice_task, austen_task, linear_cka,
                      scores_like, skip_grid, truncation_curves)


CURVE_SETTINGS = dict(max_length=24, eval_batch_size=16, head_epochs=2, head_lr=1e-3)


@pytest.fixture(scope="module")
def tiny_pair(tokenizer):
    """A random-init 3-block MiniLM-like classifier (the 'fine-tuned' model) and another (the 'pretrained')."""
    pair = []
    for seed in (0, 1):
        model = ft.load_classifier("all-minilm-l6-v2", 6, seed=seed, random_init=True, config=TINY_ENCODER).eval()
        model.layersim_tokenizer = tokenizer
        pair.append(model)
    return pair


# --- CKA maps (Fig. 1) ----------------------------------------------------------------------------------------------

def test_cka_maps_are_linear_cka_over_blocks_1_to_L():
    """Against numpy's linear CKA of every pair of blocks 1..L (rows: the first stack named, the embedding output
    left out)."""
    rng = np.random.default_rng(0)
    ft1, ft2, orig = (rng.normal(size=(5, 30, 6)) for _ in range(3))
    for x in (ft1, ft2, orig):
        x[0] = 1.0  # the embedding output at the CLS position: one vector for every input
    maps = cf.cka_maps(ft1, ft2, orig)
    assert list(maps) == ["ORIG-ORIG", "FT-ORIG", "FT-FT", "FT[1]-FT[2]"]
    for name, (A, B) in {"ORIG-ORIG": (orig, orig), "FT-ORIG": (ft1, orig), "FT-FT": (ft1, ft1),
                         "FT[1]-FT[2]": (ft1, ft2)}.items():
        expected = [[linear_cka(A[i], B[j]) for j in range(1, 5)] for i in range(1, 5)]
        np.testing.assert_allclose(maps[name], expected, rtol=1e-10, err_msg=name)
    assert not np.allclose(maps["FT-ORIG"], maps["FT-ORIG"].T)  # rows are fine-tuned blocks, not pretrained ones
    single = cf.cka_maps(orig, None, orig)
    assert "FT[1]-FT[2]" not in single
    np.testing.assert_allclose(single["FT-ORIG"], maps["ORIG-ORIG"], rtol=1e-12)
    np.testing.assert_allclose(cf.diagonal(maps["FT[1]-FT[2]"]),
                               [linear_cka(ft1[i], ft2[i]) for i in range(1, 5)], rtol=1e-10)


# --- truncation curves (Fig. 3) -------------------------------------------------------------------------------------

def test_tuned_heads_are_copies_trained_per_layer(tokenizer):
    model = ft.load_classifier("all-minilm-l6-v2", 6, seed=0, random_init=True, config=TINY_ENCODER)
    model.layersim_tokenizer = tokenizer
    train, val = austen_task("train", 60), austen_task("validation", 24)
    Htr, Hva = ft.cls_features(model, train, TINY_FINETUNE, "cpu"), ft.cls_features(model, val, TINY_FINETUNE, "cpu")
    before = copy.deepcopy(model.state_dict())
    a = cf.tuned_head_curve(model, Htr, train, Hva, val, epochs=2, lr=1e-3, batch_size=16)
    b = cf.tuned_head_curve(model, Htr, train, Hva, val, epochs=2, lr=1e-3, batch_size=16)
    assert a.shape == (4,) and np.array_equal(a, b) and ((0 <= a) & (a <= 1)).all()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_truncation_curves_read_the_fine_tuned_and_the_pretrained_features(tiny_pair, monkeypatch):
    """UNTUNED entry ``l`` is the score of the model truncated after block ``l`` (up to the near ties of a
    random-init head); TUNED and TUNEDORIG re-train the fine-tuned model's head with the settings' budget on the
    fine-tuned / the pretrained encoder's features. With the fine-tuned model as its own pretrained encoder,
    TUNEDORIG is TUNED, and nothing else depends on the pretrained encoder."""
    model, orig = tiny_pair
    head_train = tt.load_task("austen-novel", "train", 60, seed=1)
    val = tt.load_task("austen-novel", "validation", 24, seed=0)
    calls, read, real, real_scores = [], [], cf.tuned_head_curve, ft.layer_scores

    def spy(*args, **kw):
        calls.append((args, kw))
        return real(*args, **kw)

    def spy_scores(*args):
        read.append(args)
        return real_scores(*args)

    monkeypatch.setattr(cf, "tuned_head_curve", spy)
    monkeypatch.setattr(ft, "layer_scores", spy_scores)
    c = cf.truncation_curves(model, orig, head_train, val, CURVE_SETTINGS, seed=3, device="cpu")
    assert list(c) == ["UNTUNED", "TUNED", "TUNEDORIG", "full", "majority"]
    assert all(len(c[k]) == 4 for k in cf.TRUNCATIONS)
    # TUNED, then TUNEDORIG: the fine-tuned head, on the features of the model, then of the pretrained encoder
    assert [(kw["epochs"], kw["lr"], kw["seed"]) for _, kw in calls] == [(2, 1e-3, 3)] * 2
    for (args, _), encoder in zip(calls, (model, orig)):
        head_model, H_tr, train, H_val, task = args
        assert head_model is model and train is head_train and task is val
        np.testing.assert_array_equal(H_tr, ft.cls_features(encoder, head_train, CURVE_SETTINGS, "cpu"))
        np.testing.assert_array_equal(H_val, ft.cls_features(encoder, val, CURVE_SETTINGS, "cpu"))
    # UNTUNED: the fine-tuned head on the fine-tuned model's validation features, entry l = the model cut after
    # block l (a random-init head may predict one class throughout, so the route is checked as well as the score)
    (head_model, H_val, task), = read
    assert head_model is model and task is val
    np.testing.assert_array_equal(H_val, ft.cls_features(model, val, CURVE_SETTINGS, "cpu"))
    batches = tt.encode(val, model.layersim_tokenizer, 16, 24)
    for k in range(4):
        with surgery.truncate(model, k) as cut:
            scores_like(val, c["UNTUNED"][k], ft.predict(cut, batches, device="cpu"))
    assert c["full"] == float(c["UNTUNED"][-1]) and isinstance(c["full"], float)
    assert c["majority"] == pytest.approx(1 / 6)  # four validation examples of each of the six novels
    same = cf.truncation_curves(model, model, head_train, val, CURVE_SETTINGS, seed=3, device="cpu")
    np.testing.assert_array_equal(same["TUNEDORIG"], same["TUNED"])
    for key in ("UNTUNED", "TUNED"):
        np.testing.assert_array_equal(same[key], c[key])
    assert (same["full"], same["majority"]) == (c["full"], c["majority"])


def test_fine_tune_note_says_where_the_model_came_from():
    assert cf.fine_tune_note({"from_cache": True, "train_seconds": 12.0}) == "from the cache"
    assert cf.fine_tune_note({"from_cache": False, "train_seconds": 84.6}) == "fine-tuned in 85 s"


def test_truncation_table_holds_every_curve_by_layer():
    curves = {"m/a": truncation_curves([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], 0.3),
              "m/b": truncation_curves([1.0, 0.0, 0.5], [0.25, 0.75, 0.5], [0.0, 0.0, 1.0], 0.5)}
    table = cf.truncation_table(curves)
    assert table.index.name == "layer" and list(table.index) == [0, 1, 2]
    assert list(table.columns) == [(n, k) for n in ("UNTUNED", "TUNED", "TUNEDORIG") for k in ("m/a", "m/b")]
    assert table.loc[1, ("TUNED", "m/b")] == 0.75 and table.loc[2, ("TUNEDORIG", "m/a")] == 0.9
    for name in cf.TRUNCATIONS:
        for key, c in curves.items():
            np.testing.assert_array_equal(table[(name, key)].to_numpy(), c[name])
    with pytest.raises(ValueError, match="at least one"):
        cf.truncation_table({})
    deeper = {**curves, "m24/a": truncation_curves([0.5] * 5, [0.5] * 5, [0.5] * 5, 0.5)}  # the paper's ALBERT-large
    table = cf.truncation_table(deeper)  # beside 12-layer models: their cells below their last layer are empty
    assert list(table.index) == [0, 1, 2, 3, 4] and table[("TUNED", "m/a")].isna().tolist() == [False] * 3 + [True] * 2


def test_truncation_gaps_are_the_claims_numbers():
    """By hand: the best of UNTUNED and TUNED one block below the top, minus the full model; the mean over blocks
    1..L of TUNED minus TUNEDORIG."""
    curves = {"m/a": truncation_curves([0.5, 0.6, 0.7, 0.8], [0.5, 0.65, 0.75, 0.9], [0.5, 0.6, 0.7, 0.6], 0.8),
              "m/b": truncation_curves([0.2, 0.2, 0.1, 0.3], [0.2, 0.3, 0.35, 0.25], [0.2, 0.3, 0.4, 0.3], 0.3)}
    discard, orig_gap = cf.truncation_gaps(curves)
    assert list(discard) == list(orig_gap) == ["m/a", "m/b"]
    assert discard["m/a"] == pytest.approx(0.75 - 0.8) and discard["m/b"] == pytest.approx(0.35 - 0.3)
    assert orig_gap["m/a"] == pytest.approx(np.mean([0.05, 0.05, 0.3]))
    assert orig_gap["m/b"] == pytest.approx(np.mean([0.0, -0.05, -0.05]))
    with pytest.raises(ValueError, match="needs a block"):
        cf.truncation_gaps({"m/a": truncation_curves([0.5], [0.5], [0.5], 0.5)})


# --- skip grid (Fig. 4) ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_skip_grid_on_random_init_paper_models(name, tokenizer, tmp_cache):
    """Every span of blocks is scored once, nothing below the diagonal; with every block skipped the head reads
    the embedding output."""
    train, val = austen_task("train"), austen_task("validation", 18)
    model, _ = ft.cached_finetune(name, train, ft.config_from(TINY_FINETUNE), tokenizer=tokenizer, random_init=True,
                                  config=TINY_FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    lens = readout.layer_logits(model, ft.cls_features(model, val, TINY_FINETUNE, device="cpu"))
    G = cf.skip_grid(model, val, TINY_FINETUNE, device="cpu", progress=False)
    assert G.shape == (L, L) and np.isnan(G[np.tril_indices(L, -1)]).all()
    assert not np.isnan(G[np.triu_indices(L)]).any()
    scores_like(val, G[0, L - 1], lens[0])  # every block skipped: the head reads the embedding output


@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_tuned_heads_and_skip_grid_on_multiple_choice(name, tokenizer, tmp_cache):
    """On a multiple-choice model (one logit per (context, ending) row): a tuned head per layer, and the skip grid
    with every block skipped reading the embedding output."""
    train, val = austen_choice_task("train", 16), austen_choice_task("validation", 10)
    model, _ = ft.cached_finetune(name, train, ft.config_from(TINY_FINETUNE), tokenizer=tokenizer, random_init=True,
                                  config=TINY_FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    H = ft.cls_features(model, val, TINY_FINETUNE, device="cpu")
    lens = readout.layer_logits(model, H)  # [L+1, 10 * 3, 1]
    Htr = ft.cls_features(model, train, TINY_FINETUNE, device="cpu")
    tuned = cf.tuned_head_curve(model, Htr, train, H, val, epochs=1, lr=1e-3, batch_size=4)
    assert tuned.shape == (L + 1,) and ((0 <= tuned) & (tuned <= 1)).all()
    G = cf.skip_grid(model, val, TINY_FINETUNE, device="cpu", progress=False)
    scores_like(val, G[0, L - 1], lens[0])


def test_skip_grids_score_restart_1_of_every_model_on_every_task(monkeypatch):
    """Restart 1 of each model, fine-tuned on each task's training split, is skipped over on the validation split
    and scored whole; the majority class is the validation split's; one line per run, worked out by hand."""
    val = austen_task("validation", 18)  # three sentences of each of the six novels: majority 1/6
    fine_tuned, skipped, logged = [], [], []
    monkeypatch.setattr(ft, "task_data", lambda task, settings, seed=0: (f"{task}@{seed}", val))

    def fake_fine_tuned(model, train, settings, restart=1, seed=0, device="auto", progress=True):
        fine_tuned.append((model, train, restart, seed, device))
        return f"{model} on {train}", {"from_cache": True}

    def fake_skip_grid(model, task, settings, device="auto", progress=True):
        skipped.append((model, task, device))
        return skip_grid([0.5, 0.25, 0.125]) if model.startswith("m1") else skip_grid([0.1, 0.2])

    monkeypatch.setattr(ft, "fine_tuned", fake_fine_tuned)
    monkeypatch.setattr(cf, "skip_grid", fake_skip_grid)
    monkeypatch.setattr(ft, "evaluate", lambda model, task, max_length=128, device="auto": 0.75 if task is val else 0)
    settings = {"models": ["m1", "m2"], "tasks": ["a", "b"], "max_length": 24}
    grids, base = cf.skip_grids(settings, seed=2, device="cpu", log=logged.append)
    assert list(grids) == list(base) == ["m1/a", "m1/b", "m2/a", "m2/b"]
    assert fine_tuned == [(m, f"{t}@2", 1, 2, "cpu") for m in ("m1", "m2") for t in ("a", "b")]
    assert skipped == [(f"{m} on {t}@2", val, "cpu") for m in ("m1", "m2") for t in ("a", "b")]
    np.testing.assert_array_equal(grids["m2/b"], skip_grid([0.1, 0.2]))
    assert base["m1/a"] == {"full": 0.75, "majority": pytest.approx(1 / 6)}
    assert logged[0] == "m1 / a: full model 0.750; single blocks skipped: [0.5, 0.25, 0.125]; all blocks skipped: 0.300"
    assert logged[3] == "m2 / b: full model 0.750; single blocks skipped: [0.1, 0.2]; all blocks skipped: 0.300"
    assert cf.skip_grids(settings, log=None)[1] == base  # quiet, the same runs


def test_single_skip_drops_are_the_claims_numbers():
    """By hand: the drops are the full score minus the diagonal; block 1's drop minus the largest other, and the
    mean drop over the upper half of the blocks (4-6 of 6, 3-4 of 4)."""
    grids = {"m/a": skip_grid([0.5, 0.8, 0.85, 0.9, 0.88, 0.7]), "m/b": skip_grid([0.2, 0.15, 0.3, 0.1])}
    base = {"m/a": {"full": 0.9, "majority": 0.5}, "m/b": {"full": 0.25, "majority": 0.2}}
    first_margin, late_drop = cf.single_skip_drops(grids, base)
    assert list(first_margin) == list(late_drop) == ["m/a", "m/b"]
    assert first_margin["m/a"] == pytest.approx(0.4 - 0.2) and late_drop["m/a"] == pytest.approx((0 + 0.02 + 0.2) / 3)
    assert first_margin["m/b"] == pytest.approx(0.05 - 0.15) and late_drop["m/b"] == pytest.approx((-0.05 + 0.15) / 2)
    with pytest.raises(ValueError, match="no full-model score"):
        cf.single_skip_drops(grids, {"m/a": base["m/a"]})
    with pytest.raises(ValueError, match="needs 2"):
        cf.single_skip_drops({"m/c": skip_grid([0.5])}, {"m/c": {"full": 0.5}})
