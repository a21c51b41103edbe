"""Tests of layersim.train.finetune: the schedule, the number of steps from steps or epochs, the loop (learns,
deterministic, restarts differ), the cache, the settings checks, and the paper-scale path on random-init RoBERTa /
ALBERT / ELECTRA (fine-tune, CLS features, the layer-wise score checked against layersim.nets.surgery.truncate),
classification and multiple choice."""

import dataclasses

import numpy as np
import pytest
import torch

from layersim.inputs import text_tasks as tt
from layersim.nets import models, readout, surgery
from layersim.train import checkpoints, finetune as ft, objectives

from builders import (TINY_FAMILIES, TINY_FINETUNE, austen_choice_task, austen_task, logit_tol,
                      scores_like)

SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)


def toy_task(n=64, split="train"):
    """Sentences whose label is which of two words they contain: learnable in a few steps."""
    rng = np.random.default_rng(0 if split == "train" else 1)
    labels = rng.integers(0, 2, n)
    fill = ["the", "house", "was", "quiet", "and", "warm"]
    texts = [" ".join([["dreadful", "delightful"][y]] + list(rng.choice(fill, 5))) for y in labels]
    return tt.TextTask("toy", split, texts, None, labels, 2)


def test_schedule_warms_up_then_decays_to_zero():
    cfg = ft.FinetuneConfig(lr=1e-3, warmup_steps=4, steps=12, batch_size=2)
    lrs = [ft.lr_at(s, cfg) for s in range(12)]
    np.testing.assert_allclose(lrs[:4], [2.5e-4, 5e-4, 7.5e-4, 1e-3])
    np.testing.assert_allclose(lrs[4:], 1e-3 * (12 - np.arange(4, 12)) / 8)
    assert ft.lr_at(12, cfg) == 0.0
    assert ft.lr_at(0, ft.FinetuneConfig(warmup_steps=0, steps=5)) == pytest.approx(1e-5)


def test_config_is_validated():
    with pytest.raises(ValueError, match="lr"):
        ft.FinetuneConfig(lr=0)
    with pytest.raises(ValueError, match="warmup"):
        ft.FinetuneConfig(steps=10, warmup_steps=11)
    with pytest.raises(ValueError, match="steps"):
        ft.FinetuneConfig(steps=0, warmup_steps=0)


def test_finetuning_learns_is_deterministic_and_restarts_differ(tokenizer, tmp_cache):
    train, val = toy_task(96), toy_task(64, "validation")
    cfg = ft.FinetuneConfig(lr=3e-3, batch_size=16, warmup_steps=2, steps=30, max_length=16)
    m1, meta1 = ft.cached_finetune("all-minilm-l6-v2", train, cfg, restart=1, tokenizer=tokenizer, random_init=True,
                                   config=SMALL, progress=False, device="cpu")
    assert not meta1["from_cache"] and meta1["history"][-1]["loss"] < meta1["history"][0]["loss"]
    assert ft.evaluate(m1, val, tokenizer, device="cpu") >= 0.9
    again, meta_again = ft.cached_finetune("all-minilm-l6-v2", train, cfg, restart=1, tokenizer=tokenizer,
                                           random_init=True, config=SMALL, progress=False, device="cpu")
    assert meta_again["from_cache"] and meta_again["key"] == meta1["key"]
    for a, b in zip(m1.state_dict().values(), again.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    retrained = ft.load_classifier("all-minilm-l6-v2", 2, seed=cfg.seed, random_init=True, config=SMALL)
    ft.finetune(retrained, train, cfg, tokenizer, device="cpu", progress=False)
    for a, b in zip(m1.state_dict().values(), retrained.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the cache holds what the loop makes
    m2, meta2 = ft.cached_finetune("all-minilm-l6-v2", train, cfg, restart=2, tokenizer=tokenizer, random_init=True,
                                   config=SMALL, progress=False, device="cpu")
    assert meta2["key"] != meta1["key"] and meta2["restart"] == 2
    w1, w2 = m1.classifier.weight, m2.classifier.weight
    assert not torch.allclose(w1, w2)
    other = toy_task(96)
    other = tt.TextTask("toy", "train", other.text_a, None, 1 - other.labels, 2)
    assert ft.cached_finetune("all-minilm-l6-v2", other, cfg, restart=1, tokenizer=tokenizer, random_init=True,
                              config=SMALL, progress=False, device="cpu")[1]["key"] != meta1["key"]


def test_bad_inputs_are_named(tokenizer):
    model = ft.load_classifier("all-minilm-l6-v2", 3, random_init=True, config=SMALL)
    with pytest.raises(ValueError, match="3 outputs"):
        ft.finetune(model, toy_task(8), ft.FinetuneConfig(steps=1, warmup_steps=0), tokenizer, progress=False)
    with pytest.raises(ValueError, match="tokenizer"):
        ft.finetune(model, toy_task(8), ft.FinetuneConfig(steps=1, warmup_steps=0), progress=False)
    with pytest.raises(ValueError, match="restart"):
        ft.cached_finetune("all-minilm-l6-v2", toy_task(8), ft.FinetuneConfig(), restart=0)


def test_pretrained_minilm_gets_its_tokenizer_and_a_seeded_head():
    a = ft.load_classifier("all-minilm-l6-v2", 6, seed=3)
    b = ft.load_classifier("all-minilm-l6-v2", 6, seed=3)
    assert a.layersim_tokenizer is not None and a.config.num_labels == 6
    torch.testing.assert_close(a.classifier.weight, b.classifier.weight)


def test_aligned_loss_is_eq5_over_the_blocks_with_the_shared_head(tokenizer):
    model = ft.load_classifier("all-minilm-l6-v2", 2, seed=1, random_init=True, config=SMALL).eval()
    task = toy_task(12)
    batch = tt.encode(task, tokenizer, 12, 16)[0]
    with torch.no_grad():
        loss = ft.aligned_loss(model, batch)
        standard = model(**batch).loss
    H = models.collect(model, [{k: v for k, v in batch.items() if k != "labels"}], device="cpu", progress=False).hidden
    z = torch.from_numpy(readout.layer_logits(model, H)[1:]).double()  # blocks 1..L through the hooks
    w = objectives.layer_weights(len(z))
    ce = torch.stack([torch.nn.functional.cross_entropy(zl, torch.as_tensor(task.labels)) for zl in z])
    assert float(loss) == pytest.approx(float((w * ce).sum()), rel=1e-5)
    assert float(ce[-1]) == pytest.approx(float(standard), rel=1e-5)  # the last term is the standard loss


def test_aligned_finetuning_is_cached_apart_and_standard_keys_do_not_move(tokenizer, tmp_cache):
    train = toy_task(32)
    cfg = ft.FinetuneConfig(lr=3e-3, batch_size=16, warmup_steps=1, steps=2, max_length=16)
    _, std = ft.cached_finetune("all-minilm-l6-v2", train, cfg, tokenizer=tokenizer, random_init=True, config=SMALL,
                                progress=False, device="cpu")
    _, ali = ft.cached_finetune("all-minilm-l6-v2", train, dataclasses.replace(cfg, objective="aligned"),
                                tokenizer=tokenizer, random_init=True, config=SMALL, progress=False, device="cpu")
    assert std["key"] != ali["key"] and ali["train"]["objective"] == "aligned" and "objective" not in std["train"]
    legacy = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "objective"}
    assert std["key"] == checkpoints.config_key(
        {"asset": "all-minilm-l6-v2", "num_labels": 2, "auto_class": "AutoModelForSequenceClassification",
         "random_init": True, "config": SMALL}, legacy, std["data"])
    with pytest.raises(ValueError, match="objective"):
        ft.FinetuneConfig(objective="multi_exit")


def test_steps_for_epochs():
    assert ft.steps_for(100, 32, 3) == 10 and ft.steps_for(96, 32, 1) == 3 and ft.steps_for(10, 4, 0.5) == 2
    with pytest.raises(ValueError):
        ft.steps_for(10, 4, 0)


def test_steps_of_takes_steps_or_epochs_and_needs_one():
    assert ft.steps_of({"steps": 7, "epochs": None, "batch_size": 4}, 100) == 7
    assert ft.steps_of({"steps": 7, "epochs": 3.0, "batch_size": 4}, 100) == 7  # steps decide
    assert ft.steps_of({"steps": None, "epochs": 3.0, "batch_size": 32}, 100) == 10  # ceil(300 / 32)
    assert ft.steps_of({"steps": None, "epochs": 0.5, "batch_size": 4}, 10) == 2
    ft.check_steps_or_epochs({"steps": None, "epochs": 1.0})
    for bad in ({"steps": None, "epochs": None}, {}):
        with pytest.raises(ValueError, match="'steps' and 'epochs' are both None"):
            ft.check_steps_or_epochs(bad)
        with pytest.raises(ValueError, match="'steps' and 'epochs' are both None"):
            ft.steps_of({**bad, "batch_size": 4}, 10)


def test_check_names_and_config_from():
    with pytest.raises(ValueError, match="parameter 'tasks'"):
        ft.check_names({"tasks": ["no-such-task"]})
    cfg = ft.config_from(dict(TINY_FINETUNE, n_train=5), seed=4)
    assert cfg.steps == 3 and cfg.seed == 4 and cfg.max_length == 24


# ----------------------------------------------------------------------------- paper-scale path on random-init models


def _same_scores(task, score, z, ref):
    """``score`` is ``task``'s accuracy from the logits ``z`` of the route under test, and ``z`` equals
    ``ref``, the same logits by another route, up to float32 rounding (and ties broken either way)."""
    z = np.asarray(z, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(z.reshape(ref.shape), ref, rtol=0, atol=logit_tol(ref))
    assert score == tt.score(task, tt.predictions(task, z))
    scores_like(task, score, ref)


@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_paper_scale_path_on_random_init_models(name, tokenizer, tmp_cache):
    train, val = austen_task("train"), austen_task("validation", 18)
    model, meta = ft.cached_finetune(name, train, ft.config_from(TINY_FINETUNE), tokenizer=tokenizer, random_init=True,
                                     config=TINY_FAMILIES[name], progress=False, device="cpu")
    L = surgery.adapters.get(model).n_layers(model)
    assert L == 3 and not meta["from_cache"]
    H = ft.cls_features(model, val, TINY_FINETUNE, device="cpu")
    assert H.shape == (L + 1, 18, 32)
    untuned = ft.layer_scores(model, H, val)
    lens = readout.layer_logits(model, H)  # what UNTUNED scores
    batches = tt.encode(val, tokenizer, 16, TINY_FINETUNE["max_length"])
    for k in range(L + 1):  # the head on layer k = the model cut after block k
        with surgery.truncate(model, k) as cut:
            z = ft.predict(cut, batches, device="cpu")
        _same_scores(val, untuned[k], lens[k], z)
    scores_like(val, ft.evaluate(model, val, tokenizer, max_length=TINY_FINETUNE["max_length"], device="cpu"), lens[L])


@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_multiple_choice_path_on_random_init_models(name, tokenizer, tmp_cache):
    train, val = austen_choice_task("train", 16), austen_choice_task("validation", 10)
    model, meta = ft.cached_finetune(name, train, ft.config_from(TINY_FINETUNE), tokenizer=tokenizer, random_init=True,
                                     config=TINY_FAMILIES[name], progress=False, device="cpu")
    assert type(model).__name__.endswith("ForMultipleChoice") and meta["data"]["multiple_choice"]
    L = surgery.adapters.get(model).n_layers(model)
    H = ft.cls_features(model, val, TINY_FINETUNE, device="cpu")
    assert H.shape == (L + 1, 10 * 3, 32)
    untuned = ft.layer_scores(model, H, val)
    lens = readout.layer_logits(model, H)  # what UNTUNED scores: [L+1, 10 * 3, 1]
    batches = tt.encode(val, tokenizer, 4, TINY_FINETUNE["max_length"])
    assert batches[0]["input_ids"].shape[:2] == (4, 3)
    for k in (0, L - 1, L):  # the head on every (context, ending) row of layer k = the model cut after block k
        with surgery.truncate(model, k) as cut:
            z = ft.predict(cut, batches, device="cpu")
        assert z.shape == (10, 3) and lens[k].shape == (10 * 3, 1)
        _same_scores(val, untuned[k], lens[k], z)
    with pytest.raises(ValueError, match="multiple choice"):
        ft.finetune(ft.load_classifier(name, 3, random_init=True, config=TINY_FAMILIES[name]), train,
                    ft.config_from(TINY_FINETUNE), tokenizer, progress=False)
