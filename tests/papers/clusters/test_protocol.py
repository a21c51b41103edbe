"""Tests of layersim.papers.clusters.protocol: the CKA maps, the truncation curves of Fig. 3 (UNTUNED checked
against layersim.nets.surgery.truncate), the skip grid of Fig. 4 on random-init RoBERTa / ALBERT / ELECTRA
(classification and multiple choice), and the numbers of the notebooks' statements."""

import copy

import numpy as np
import pytest
import torch

from layersim.inputs import assets, text_tasks as tt
from layersim.nets import readout, surgery
from layersim.papers.clusters import protocol as cf
from layersim.train import finetune as ft

TINY = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
FAMILIES = {"roberta-base": dict(TINY, type_vocab_size=2),  # the MiniLM tokenizer marks second segments
            "albert-large-v2": dict(TINY, embedding_size=16, vocab_size=30522),
            "electra-base-discriminator": dict(TINY, embedding_size=16)}
SETTINGS = dict(steps=3, batch_size=8, lr=1e-3, warmup_steps=1, max_length=24, weight_decay=0.0, eval_batch_size=16)
CURVE_SETTINGS = dict(max_length=24, eval_batch_size=16, head_epochs=2, head_lr=1e-3)


@pytest.fixture(scope="module")
def tokenizer():
    return assets.load_model("all-minilm-l6-v2")[1]


@pytest.fixture(scope="module")
def tiny_pair(tokenizer):
    """A random-init 3-block MiniLM-like classifier (the 'fine-tuned' model) and another (the 'pretrained')."""
    pair = []
    for seed in (0, 1):
        model = ft.load_classifier("all-minilm-l6-v2", 6, seed=seed, random_init=True, config=TINY).eval()
        model.layersim_tokenizer = tokenizer
        pair.append(model)
    return pair


def _task(split, n=24):
    return tt.load_task("austen-novel", split, n=n, seed=0)


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


def _linear_cka(X, Y):
    """Kornblith et al.'s linear CKA on column-centred features: ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))


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
        expected = [[_linear_cka(A[i], B[j]) for j in range(1, 5)] for i in range(1, 5)]
        np.testing.assert_allclose(maps[name], expected, rtol=1e-10, err_msg=name)
    assert not np.allclose(maps["FT-ORIG"], maps["FT-ORIG"].T)  # rows are fine-tuned blocks, not pretrained ones
    single = cf.cka_maps(orig, None, orig)
    assert "FT[1]-FT[2]" not in single
    np.testing.assert_allclose(single["FT-ORIG"], maps["ORIG-ORIG"], rtol=1e-12)
    np.testing.assert_allclose(cf.diagonal(maps["FT[1]-FT[2]"]),
                               [_linear_cka(ft1[i], ft2[i]) for i in range(1, 5)], rtol=1e-10)


# --- truncation curves (Fig. 3) -------------------------------------------------------------------------------------

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
            _scores_like(val, c["UNTUNED"][k], ft.predict(cut, batches, device="cpu"))
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


def _curves(untuned, tuned, tunedorig, full, majority=0.5):
    return {"UNTUNED": np.asarray(untuned, float), "TUNED": np.asarray(tuned, float),
            "TUNEDORIG": np.asarray(tunedorig, float), "full": full, "majority": majority}


def test_truncation_table_holds_every_curve_by_layer():
    curves = {"m/a": _curves([0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], 0.3),
              "m/b": _curves([1.0, 0.0, 0.5], [0.25, 0.75, 0.5], [0.0, 0.0, 1.0], 0.5)}
    table = cf.truncation_table(curves)
    assert table.index.name == "layer" and list(table.index) == [0, 1, 2]
    assert list(table.columns) == [(n, k) for n in ("UNTUNED", "TUNED", "TUNEDORIG") for k in ("m/a", "m/b")]
    assert table.loc[1, ("TUNED", "m/b")] == 0.75 and table.loc[2, ("TUNEDORIG", "m/a")] == 0.9
    for name in cf.TRUNCATIONS:
        for key, c in curves.items():
            np.testing.assert_array_equal(table[(name, key)].to_numpy(), c[name])
    with pytest.raises(ValueError, match="at least one"):
        cf.truncation_table({})


def test_truncation_gaps_are_the_claims_numbers():
    """By hand: the best of UNTUNED and TUNED one block below the top, minus the full model; the mean over blocks
    1..L of TUNED minus TUNEDORIG."""
    curves = {"m/a": _curves([0.5, 0.6, 0.7, 0.8], [0.5, 0.65, 0.75, 0.9], [0.5, 0.6, 0.7, 0.6], 0.8),
              "m/b": _curves([0.2, 0.2, 0.1, 0.3], [0.2, 0.3, 0.35, 0.25], [0.2, 0.3, 0.4, 0.3], 0.3)}
    discard, orig_gap = cf.truncation_gaps(curves)
    assert list(discard) == list(orig_gap) == ["m/a", "m/b"]
    assert discard["m/a"] == pytest.approx(0.75 - 0.8) and discard["m/b"] == pytest.approx(0.35 - 0.3)
    assert orig_gap["m/a"] == pytest.approx(np.mean([0.05, 0.05, 0.3]))
    assert orig_gap["m/b"] == pytest.approx(np.mean([0.0, -0.05, -0.05]))
    with pytest.raises(ValueError, match="needs a block"):
        cf.truncation_gaps({"m/a": _curves([0.5], [0.5], [0.5], 0.5)})


# --- skip grid (Fig. 4) ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(FAMILIES))
def test_skip_grid_on_random_init_paper_models(name, tokenizer, tmp_cache):
    """Every span of blocks is scored once, nothing below the diagonal; with every block skipped the head reads
    the embedding output."""
    train, val = _task("train"), _task("validation", 18)
    model, _ = ft.cached_finetune(name, train, ft.config_from(SETTINGS), tokenizer=tokenizer, random_init=True,
                                  config=FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    lens = readout.layer_logits(model, ft.cls_features(model, val, SETTINGS, device="cpu"))
    G = cf.skip_grid(model, val, SETTINGS, device="cpu", progress=False)
    assert G.shape == (L, L) and np.isnan(G[np.tril_indices(L, -1)]).all()
    assert not np.isnan(G[np.triu_indices(L)]).any()
    _scores_like(val, G[0, L - 1], lens[0])  # every block skipped: the head reads the embedding output


@pytest.mark.parametrize("name", list(FAMILIES))
def test_tuned_heads_and_skip_grid_on_multiple_choice(name, tokenizer, tmp_cache):
    """On a multiple-choice model (one logit per (context, ending) row): a tuned head per layer, and the skip grid
    with every block skipped reading the embedding output."""
    train, val = _choice_task("train", 16), _choice_task("validation", 10)
    model, _ = ft.cached_finetune(name, train, ft.config_from(SETTINGS), tokenizer=tokenizer, random_init=True,
                                  config=FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    H = ft.cls_features(model, val, SETTINGS, device="cpu")
    lens = readout.layer_logits(model, H)  # [L+1, 10 * 3, 1]
    Htr = ft.cls_features(model, train, SETTINGS, device="cpu")
    tuned = cf.tuned_head_curve(model, Htr, train, H, val, epochs=1, lr=1e-3, batch_size=4)
    assert tuned.shape == (L + 1,) and ((0 <= tuned) & (tuned <= 1)).all()
    G = cf.skip_grid(model, val, SETTINGS, device="cpu", progress=False)
    _scores_like(val, G[0, L - 1], lens[0])


def _grid(diag):
    """A skip grid with the single-block scores ``diag`` on its diagonal, NaN below, 0.3 above."""
    L = len(diag)
    G = np.full((L, L), np.nan)
    G[np.triu_indices(L, 1)] = 0.3
    G[np.diag_indices(L)] = diag
    return G


def test_single_skip_drops_are_the_claims_numbers():
    """By hand: the drops are the full score minus the diagonal; block 1's drop minus the largest other, and the
    mean drop over the upper half of the blocks (4-6 of 6, 3-4 of 4)."""
    grids = {"m/a": _grid([0.5, 0.8, 0.85, 0.9, 0.88, 0.7]), "m/b": _grid([0.2, 0.15, 0.3, 0.1])}
    base = {"m/a": {"full": 0.9, "majority": 0.5}, "m/b": {"full": 0.25, "majority": 0.2}}
    first_margin, late_drop = cf.single_skip_drops(grids, base)
    assert list(first_margin) == list(late_drop) == ["m/a", "m/b"]
    assert first_margin["m/a"] == pytest.approx(0.4 - 0.2) and late_drop["m/a"] == pytest.approx((0 + 0.02 + 0.2) / 3)
    assert first_margin["m/b"] == pytest.approx(0.05 - 0.15) and late_drop["m/b"] == pytest.approx((-0.05 + 0.15) / 2)
    with pytest.raises(ValueError, match="no full-model score"):
        cf.single_skip_drops(grids, {"m/a": base["m/a"]})
    with pytest.raises(ValueError, match="needs 2"):
        cf.single_skip_drops({"m/c": _grid([0.5])}, {"m/c": {"full": 0.5}})
