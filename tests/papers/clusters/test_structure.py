"""Tests of layersim.papers.clusters.structure: the four CKA maps of a fine-tuned encoder with its scores and
checkpoint records (c01), the best two-cluster splits, and the numbers of the paper's three statements."""

import numpy as np
import pytest
import torch

from layersim.inputs import fetch, text_tasks as tt
from layersim.measures import block_structure
from layersim.papers.clusters import protocol as cf, structure
from layersim.train import finetune as ft

from builders import CLUSTER_MAPS, FLAT_MAP, TWO_CLUSTERS, cka_maps, linear_cka

TINY = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
SETTINGS = dict(n_train=24, n_val=20, steps=3, batch_size=8, lr=1e-3, warmup_steps=1, max_length=24,
                weight_decay=0.0, eval_batch_size=16, restarts=2)


@pytest.fixture(scope="module")
def tiny_models():
    """Three random-init 3-block MiniLM-like classifiers for the six novels, with the MiniLM tokenizer: two
    'restarts' and the 'pretrained' encoder."""
    tokenizer = fetch.load_model("all-minilm-l6-v2")[1]
    out = []
    for seed in (0, 1, 2):
        model = ft.load_classifier("all-minilm-l6-v2", 6, seed=seed, random_init=True, config=TINY).eval()
        model.layersim_tokenizer = tokenizer
        out.append(model)
    return out


def _meta(restart):
    return {"key": f"key-{restart}", "weights_sha256": f"sha-{restart}", "train_seconds": 10.0 * restart,
            "from_cache": restart == 2, "history": [{"loss": 1.5 + restart}, {"loss": 1.0 + restart}]}


def _accuracy(model, task):
    """The accuracy of ``model``'s argmax on ``task`` (one forward pass per batch of 16, at most 24 tokens)."""
    hits = 0
    with torch.no_grad():
        for b in tt.encode(task, model.layersim_tokenizer, 16, 24):
            z = model(**{k: v for k, v in b.items() if k != "labels"}).logits
            hits += int((z.argmax(-1) == b["labels"]).sum())
    return hits / len(task)


def test_task_maps_compare_the_restarts_and_the_pretrained_encoder_by_linear_cka(tiny_models, monkeypatch):
    """Each restart is fine-tuned once with the settings' budget; the maps are numpy's linear CKA of the CLS
    features of blocks 1..L on the validation set (FT = restart 1, ORIG = the pretrained encoder); each restart's
    row holds its own validation accuracy and its checkpoint's record."""
    calls = []

    def fake_fine_tuned(model, train, settings, restart=1, seed=0, device="auto", progress=True):
        calls.append((model, len(train), restart, seed))
        return tiny_models[restart - 1], _meta(restart)

    evaluated, real_evaluate = [], ft.evaluate

    def spy_evaluate(model, task, *args, **kw):
        evaluated.append((model, task))
        return real_evaluate(model, task, *args, **kw)

    monkeypatch.setattr(ft, "fine_tuned", fake_fine_tuned)
    monkeypatch.setattr(ft, "evaluate", spy_evaluate)
    monkeypatch.setattr(cf, "original", lambda model, num_labels, seed=0: tiny_models[2])
    maps, scores, records = structure.task_maps("all-minilm-l6-v2", "austen-novel", SETTINGS, seed=3, device="cpu")
    assert calls == [("all-minilm-l6-v2", 24, 1, 3), ("all-minilm-l6-v2", 24, 2, 3)]
    val = tt.load_task("austen-novel", "validation", 20, seed=3)
    feats = [ft.cls_features(m, val, SETTINGS, device="cpu").astype(np.float64) for m in tiny_models]
    assert list(maps) == ["ORIG-ORIG", "FT-ORIG", "FT-FT", "FT[1]-FT[2]"]
    pairs = {"ORIG-ORIG": (2, 2), "FT-ORIG": (0, 2), "FT-FT": (0, 0), "FT[1]-FT[2]": (0, 1)}
    for kind, (a, b) in pairs.items():
        expected = [[linear_cka(feats[a][i], feats[b][j]) for j in range(1, 4)] for i in range(1, 4)]
        np.testing.assert_allclose(maps[kind], expected, rtol=0, atol=1e-5, err_msg=kind)
    # each restart is scored on the validation split (a random-init head may predict one class throughout, so
    # the split it reads is checked as well as the score)
    assert [m for m, _ in evaluated[:2]] == tiny_models[:2]
    for _, task in evaluated[:2]:
        assert task.split == "validation" and task.text_a == val.text_a
    for restart, row in zip((1, 2), scores):
        assert row == {"model": "all-minilm-l6-v2", "task": "austen-novel", "restart": restart,
                       "validation": pytest.approx(_accuracy(tiny_models[restart - 1], val)),
                       "majority": pytest.approx(np.bincount(val.labels).max() / len(val)),
                       "train_seconds": 10.0 * restart, "from_cache": restart == 2}
    assert records == {f"all-minilm-l6-v2/austen-novel/{r}": {"checkpoint": f"key-{r}", "weights_sha256": f"sha-{r}",
                                                              "train_seconds": 10.0 * r, "loss": [1.5 + r, 1.0 + r]}
                       for r in (1, 2)}
    maps1, scores1, _ = structure.task_maps("all-minilm-l6-v2", "austen-novel", {**SETTINGS, "restarts": 1}, seed=3,
                                            device="cpu")
    assert "FT[1]-FT[2]" not in maps1 and len(scores1) == 1


def test_all_task_maps_gather_every_model_and_task(monkeypatch):
    """Models outer, tasks inner: the maps keyed (model, task), every restart's score a row of one table in that
    order, every checkpoint's record kept; the seed and device reach each run."""
    calls = []

    def fake_task_maps(model_name, task, settings, seed=0, device="auto"):
        calls.append((model_name, task, seed, device))
        rows = [{"model": model_name, "task": task, "restart": r, "validation": 0.5 + r / 10} for r in (1, 2)]
        return {"FT-FT": np.eye(2) * len(calls)}, rows, {f"{model_name}/{task}/{r}": {"checkpoint": r} for r in (1, 2)}

    monkeypatch.setattr(structure, "task_maps", fake_task_maps)
    maps, scores, records = structure.all_task_maps({"models": ["m", "n"], "tasks": ["a", "b"]}, seed=4, device="cpu")
    assert calls == [("m", "a", 4, "cpu"), ("m", "b", 4, "cpu"), ("n", "a", 4, "cpu"), ("n", "b", 4, "cpu")]
    assert list(maps) == [("m", "a"), ("m", "b"), ("n", "a"), ("n", "b")]
    np.testing.assert_array_equal(maps[("n", "a")]["FT-FT"], 3 * np.eye(2))
    assert list(scores.columns) == ["model", "task", "restart", "validation"] and len(scores) == 8
    assert scores.iloc[5].tolist() == ["n", "a", 2, 0.7]
    assert list(records) == [f"{m}/{t}/{r}" for m in "mn" for t in "ab" for r in (1, 2)]


def test_early_late_averages_the_first_and_last_third():
    assert structure.early_late([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.5, 5.5)  # ceil(6/3) = 2 blocks each
    assert structure.early_late(np.array([1.0, 2.0, 3.0, 4.0])) == (1.5, 3.5)  # ceil(4/3) = 2
    assert structure.early_late([0.25]) == (0.25, 0.25)
    with pytest.raises(ValueError, match="non-empty"):
        structure.early_late([])


def test_structure_gaps_are_the_claims_numbers():
    block_gain, ft_orig_gap, restart_gap = structure.structure_gaps(CLUSTER_MAPS)
    two, flat = block_structure.best_split(TWO_CLUSTERS).score, block_structure.best_split(FLAT_MAP).score
    assert two == pytest.approx((0.9 + 0.8) / 2 - 0.1) and flat == pytest.approx(0.0)  # within minus between
    assert block_gain == pytest.approx({"m/a": two - flat, "m/b": flat - two})
    # first and last third of 4 blocks: 2 blocks each
    assert ft_orig_gap == pytest.approx({"m/a": 0.85 - 0.2, "m/b": 0.7 - 0.55})
    assert restart_gap == pytest.approx({"m/a": 0.925 - 0.945})  # only the run with two restarts


def test_late_restart_margin_compares_restarts_with_the_best_pretrained_match():
    """Hand-worked on 4 blocks (late = blocks 3-4): the restarts agree 0.9 and 0.99 there; the fine-tuned
    blocks' best pretrained matches are 0.3 (block 3's own diagonal) and 0.6 (block 4 against pretrained block 1,
    off the diagonal): margin (0.9 + 0.99) / 2 - (0.3 + 0.6) / 2 = 0.495. A map whose late blocks are pretrained
    ones (FT-ORIG near 1) gives a negative margin; a run without a second restart gives none."""
    ft_orig = np.diag([0.9, 0.8, 0.3, 0.1])
    ft_orig[3, 0] = 0.6
    maps = {("m", "a"): {**CLUSTER_MAPS[("m", "a")], "FT-ORIG": ft_orig},
            ("m", "c"): cka_maps(TWO_CLUSTERS, FLAT_MAP, [0.9, 0.9, 0.95, 0.97], [0.9, 0.9, 0.9, 0.9]), ("m", "b"): CLUSTER_MAPS[("m", "b")]}
    margin = structure.late_restart_margin(maps)
    assert margin == pytest.approx({"m/a": 0.495, "m/c": 0.9 - 0.96})


def test_late_likeness_to_orig_reads_whole_rows_of_the_late_blocks():
    """Hand-worked on 4 blocks (late = blocks 3-4): in ("m", "a") block 3's best pretrained match is its own 0.3 and
    block 4's is pretrained block 1 at 0.6, off the diagonal, so the value is 0.6, though the diagonal says 0.3 and
    0.1; in ("m", "b") the diagonal's 0.6 and 0.5 give 0.6. Transposing FT-ORIG (pretrained rows) changes it."""
    ft_orig = np.diag([0.9, 0.8, 0.3, 0.1])
    ft_orig[3, 0] = 0.6
    maps = {("m", "a"): {**CLUSTER_MAPS[("m", "a")], "FT-ORIG": ft_orig}, ("m", "b"): CLUSTER_MAPS[("m", "b")]}
    assert structure.late_likeness_to_orig(maps) == pytest.approx({"m/a": 0.6, "m/b": 0.6})
    assert structure.late_likeness_to_orig({("m", "a"): {"FT-ORIG": ft_orig.T}}) == pytest.approx({"m/a": 0.3})
    six = np.eye(6) * 0.2  # 6 blocks: the last third is blocks 5-6
    six[4, 1] = 0.7
    six[2, 0] = 0.95  # block 3 is not late: it does not count
    assert structure.late_likeness_to_orig({("m", "c"): {"FT-ORIG": six}}) == pytest.approx({"m/c": 0.7})


def test_split_table_lists_the_best_split_of_both_matrices():
    splits = structure.split_table(CLUSTER_MAPS)
    assert list(splits.columns) == ["model", "task", "matrix", "early cluster: blocks 1 to", "score", "within",
                                    "between"]
    assert list(zip(splits.task, splits.matrix)) == [("a", "ORIG-ORIG"), ("a", "FT-FT"), ("b", "ORIG-ORIG"),
                                                     ("b", "FT-FT")]
    row = splits.iloc[1]
    assert row["early cluster: blocks 1 to"] == 2 and row["within"] == pytest.approx(0.85)
    assert row["between"] == pytest.approx(0.1) and row["score"] == pytest.approx(0.75)


def test_the_early_and_late_layers_are_a_third_of_the_blocks_rounded_up():
    assert [structure.third(n) for n in (1, 3, 4, 6, 7, 12, 30)] == [1, 1, 2, 2, 3, 4, 10]
