"""layersim.papers.clusters.protocol: the paper-scale path on random-init RoBERTa / ALBERT / ELECTRA (fine-tune,
CLS features, CKA maps, truncation checked against layersim.nets.surgery.truncate, skipping))."""

import copy

import numpy as np
import pytest
import torch

from layersim.inputs import assets, text_tasks as tt
from layersim.measures import similarity
from layersim.nets import readout, surgery
from layersim.notebook import presets
from layersim.papers.clusters import protocol as cf
from layersim.train import finetune as ft

TINY = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
FAMILIES = {"roberta-base": dict(TINY, type_vocab_size=2),  # the MiniLM tokenizer marks second segments
            "albert-large-v2": dict(TINY, embedding_size=16, vocab_size=30522),
            "electra-base-discriminator": dict(TINY, embedding_size=16)}
SETTINGS = dict(steps=3, batch_size=8, lr=1e-3, warmup_steps=1, max_length=24, weight_decay=0.0, eval_batch_size=16)


@pytest.fixture(scope="module")
def tokenizer():
    return assets.load_model("all-minilm-l6-v2")[1]


def _task(split, n=24):
    return tt.load_task("austen-novel", split, n=n, seed=0)


def _tol(z):
    """How far two routes to the same float32 logits may drift apart (other batching, other CPU kernels):
    1e-4 of their scale, hundreds of times the drift measured (~4e-7)."""
    return 1e-4 * float(np.abs(z).max()) + 1e-12


def _accuracy_range(task, logits, tol):
    """``(lo, hi)``: the accuracies of ``task``'s predictions from ``logits`` when any score within ``tol``
    of an example's best may win. A random-init head scores by a hair (at the embedding output every ending
    of an example even has the same CLS vector: exact ties), so another route to these logits breaks such
    ties its own way; ``lo`` counts the examples that are right for sure, ``hi`` those that may be right."""
    assert task.metric == "accuracy"
    z = np.asarray(logits, dtype=np.float64).reshape(len(task), -1)  # [N, K], or [N, C] for multiple choice
    near = z >= z.max(1, keepdims=True) - tol
    hit = near[np.arange(len(task)), task.labels]
    return float((hit & (near.sum(1) == 1)).mean()), float(hit.mean())


def _scores_like(task, score, ref):
    """``score``, reached by another route to the logits ``ref`` (which rounds differently, by less than
    ``_tol``), is ``ref``'s accuracy wherever no near tie decides a prediction."""
    lo, hi = _accuracy_range(task, ref, 2 * _tol(ref))
    assert lo <= score <= hi, (score, lo, hi)


def _same_scores(task, score, z, ref):
    """``score`` is ``task``'s accuracy from the logits ``z`` of the route under test, and ``z`` equals
    ``ref``, the same logits by another route, up to float32 rounding (and ties broken either way)."""
    z = np.asarray(z, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(z.reshape(ref.shape), ref, rtol=0, atol=_tol(ref))
    assert score == tt.score(task, tt.predictions(task, z))
    _scores_like(task, score, ref)


def test_scale_tables_name_registered_models_and_loadable_tasks():
    for scale, preset in presets.CLUSTERS_FINETUNE.items():
        for name in preset["models"]:
            assert assets.get_asset(name).kind == "model"
        ft.check_names(preset)
    assert set(presets.CLUSTERS_FINETUNE["paper"]["tasks"]) == set(tt.PAPER_TASKS)
    assert "wnli" not in presets.CLUSTERS_FINETUNE["paper"]["tasks"]
    with pytest.raises(ValueError, match="parameter 'tasks'"):
        ft.check_names({"tasks": ["no-such-task"]})
    cfg = ft.config_from(dict(SETTINGS, n_train=5), seed=4)
    assert cfg.steps == 3 and cfg.seed == 4 and cfg.max_length == 24


@pytest.mark.parametrize("name", list(FAMILIES))
def test_paper_scale_path_on_random_init_models(name, tokenizer, tmp_cache):
    train, val = _task("train"), _task("validation", 18)
    model, meta = ft.cached_finetune(name, train, ft.config_from(SETTINGS), tokenizer=tokenizer, random_init=True,
                                     config=FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    assert L == 3 and not meta["from_cache"]
    H = ft.cls_features(model, val, SETTINGS, device="cpu")
    assert H.shape == (L + 1, 18, 32)
    untuned = ft.layer_scores(model, H, val)
    lens = readout.layer_logits(model, H)  # what UNTUNED scores
    batches = tt.encode(val, tokenizer, 16, SETTINGS["max_length"])
    for k in range(L + 1):  # the head on layer k = the model cut after block k
        with surgery.truncate(model, k) as cut:
            z = ft.predict(cut, batches, device="cpu")
        _same_scores(val, untuned[k], lens[k], z)
    _scores_like(val, ft.evaluate(model, val, tokenizer, max_length=SETTINGS["max_length"], device="cpu"), lens[L])
    G = cf.skip_grid(model, val, SETTINGS, device="cpu", progress=False)
    assert G.shape == (L, L) and np.isnan(G[np.tril_indices(L, -1)]).all()
    assert not np.isnan(G[np.triu_indices(L)]).any()
    _scores_like(val, G[0, L - 1], lens[0])  # every block skipped: the head reads the embedding output


def test_cka_maps_are_the_similarity_engines_over_blocks_1_to_L():
    rng = np.random.default_rng(0)
    ft1, ft2, orig = (rng.normal(size=(5, 30, 6)) for _ in range(3))
    for x in (ft1, ft2, orig):
        x[0] = 1.0  # the embedding output at the CLS position: one vector for every input
    maps = cf.cka_maps(ft1, ft2, orig)
    assert list(maps) == ["ORIG-ORIG", "FT-ORIG", "FT-FT", "FT[1]-FT[2]"]
    assert all(m.shape == (4, 4) for m in maps.values())
    np.testing.assert_allclose(maps["FT-FT"], similarity.layer_matrix(ft1[1:]))
    np.testing.assert_allclose(maps["FT-ORIG"][1, 2], similarity.linear_cka(ft1[2], orig[3]), rtol=1e-12)
    np.testing.assert_allclose(cf.cka_maps(orig, None, orig)["FT-ORIG"], maps["ORIG-ORIG"], rtol=1e-12)
    np.testing.assert_allclose(cf.diagonal(maps["FT[1]-FT[2]"]),
                               [similarity.linear_cka(ft1[i], ft2[i]) for i in range(1, 5)], rtol=1e-12)


def test_tuned_heads_are_copies_trained_per_layer(tokenizer):
    model = ft.load_classifier("all-minilm-l6-v2", 6, seed=0, random_init=True, config=TINY)
    model.layersim_tokenizer = tokenizer
    train, val = _task("train", 60), _task("validation", 24)
    Htr, Hva = ft.cls_features(model, train, SETTINGS, "cpu"), ft.cls_features(model, val, SETTINGS, "cpu")
    before = copy.deepcopy(model.state_dict())
    a = cf.tuned_head_curve(model, Htr, train, Hva, val, epochs=2, lr=1e-3, batch_size=16)
    b = cf.tuned_head_curve(model, Htr, train, Hva, val, epochs=2, lr=1e-3, batch_size=16)
    assert a.shape == (4,) and np.array_equal(a, b) and ((0 <= a) & (a <= 1)).all()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def _choice_task(split, n=12, C=3):
    """Multiple choice from Austen: which of C texts is the excerpt of the context."""
    base = tt.load_task("austen-excerpt", split, n=n * C, seed=0)
    rng = np.random.default_rng(0)
    contexts, choices, labels = [], [], []
    for k in range(n):
        rows = list(range(k * C, (k + 1) * C))
        contexts.append(base.text_a[rows[0]])
        endings = [" ".join(base.text_a[r].split()[:6]) for r in rows]
        y = int(rng.integers(C))
        endings[0], endings[y] = endings[y], endings[0]
        choices.append(endings)
        labels.append(y)
    return tt.TextTask("toy-choice", split, contexts, None, np.array(labels), C, choices=choices)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_multiple_choice_path_on_random_init_models(name, tokenizer, tmp_cache):
    train, val = _choice_task("train", 16), _choice_task("validation", 10)
    model, meta = ft.cached_finetune(name, train, ft.config_from(SETTINGS), tokenizer=tokenizer, random_init=True,
                                     config=FAMILIES[name], progress=False, device="cpu")
    assert type(model).__name__.endswith("ForMultipleChoice") and meta["data"]["multiple_choice"]
    L = surgery.adapters.get(model).n_layers(model)
    H = ft.cls_features(model, val, SETTINGS, device="cpu")
    assert H.shape == (L + 1, 10 * 3, 32)
    untuned = ft.layer_scores(model, H, val)
    lens = readout.layer_logits(model, H)  # what UNTUNED scores: [L+1, 10 * 3, 1]
    batches = tt.encode(val, tokenizer, 4, SETTINGS["max_length"])
    assert batches[0]["input_ids"].shape[:2] == (4, 3)
    for k in (0, L - 1, L):  # the head on every (context, ending) row of layer k = the model cut after block k
        with surgery.truncate(model, k) as cut:
            z = ft.predict(cut, batches, device="cpu")
        assert z.shape == (10, 3) and lens[k].shape == (10 * 3, 1)
        _same_scores(val, untuned[k], lens[k], z)
    Htr = ft.cls_features(model, train, SETTINGS, device="cpu")
    tuned = cf.tuned_head_curve(model, Htr, train, H, val, epochs=1, lr=1e-3, batch_size=4)
    assert tuned.shape == (L + 1,) and ((0 <= tuned) & (tuned <= 1)).all()
    G = cf.skip_grid(model, val, SETTINGS, device="cpu", progress=False)
    _scores_like(val, G[0, L - 1], lens[0])
    with pytest.raises(ValueError, match="multiple choice"):
        ft.finetune(ft.load_classifier(name, 3, random_init=True, config=FAMILIES[name]), train,
                    ft.config_from(SETTINGS), tokenizer, progress=False)
