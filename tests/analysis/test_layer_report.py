"""Tests of layersim.analysis.layer_report: ``analyze`` on the tiny models (every input form gives the same arrays,
values against independent computations, what labels and a head enable, bad input as one ``ValueError``), the
lenses skipped with their reason, the streamed report, and the report object's table, dict and attributes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from layersim.analysis import extraction, layer_report, lenses
from layersim.analysis.layer_report import LayerReport, analyze
from layersim.measures import alignment, redundancy
from builders import image_batch, naive_linear_cka, tiny_vit

N = 40
PAYLOAD = "<svg onload=alert(2)>"


@pytest.fixture(scope="module")
def vit():
    """The tiny ViT (3 blocks, a 10-class head), 40 images and labels of 4 classes."""
    return tiny_vit(perturb=True), image_batch(28, 1, n=N), torch.arange(N) % 4


def bare_bert():
    """A random-init tiny BERT encoder without a classifier, and 12 right-padded texts as one dict."""
    import transformers as tr

    torch.manual_seed(0)
    model = tr.BertModel(tr.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=40)).eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 99, (12, 8), generator=g)
    lengths = torch.tensor([8, 5, 6, 3, 8, 7, 4, 8, 2, 6, 5, 8])
    mask = (torch.arange(8)[None] < lengths[:, None]).long()
    return model, {"input_ids": ids * mask, "attention_mask": mask}


SOME = ["cka/*", "cos/to_last", "redundancy/block", "logit_lens/*", "alignment/area"]


def test_a_tensor_pairs_a_dataloader_and_dicts_give_the_same_arrays(vit):
    model, x, y = vit
    whole = analyze(model, x, labels=y, lenses=SOME, device="cpu", batch_size=16, n_surgery=0)
    pairs = analyze(model, [(x[s:s + 8], y[s:s + 8]) for s in range(0, N, 8)], lenses=SOME, device="cpu", n_surgery=0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=5)
    loaded = analyze(model, loader, lenses=SOME, device="cpu", n_surgery=0)
    dicts = analyze(model, {"pixel_values": x, "labels": y}, lenses=SOME, device="cpu", batch_size=13, n_surgery=0)
    assert set(whole.results) == set(pairs.results) == set(loaded.results) == set(dicts.results)
    assert "alignment/area" in whole.results and "logit_lens/accuracy" in whole.results
    for other in (pairs, loaded, dicts):
        for name, value in whole.results.items():
            np.testing.assert_allclose(other.results[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    bert, enc = bare_bert()
    one = analyze(bert, enc, lenses=["cka/matrix", "cos/to_last"], device="cpu", batch_size=5, n_surgery=0)
    parts = analyze(bert, [{k: v[s:s + 4] for k, v in enc.items()} for s in range(0, 12, 4)],
                    lenses=["cka/matrix", "cos/to_last"], device="cpu", n_surgery=0)
    np.testing.assert_allclose(one.cka, parts.cka, rtol=1e-5)


def test_the_arrays_against_independent_computations(vit):
    model, x, y = vit
    rep = analyze(model, x, labels=y, lenses="all", device="cpu", n_surgery=0)
    with torch.no_grad():  # every block's class token, read here with plain forward hooks
        seen = []
        hooks = [b.register_forward_hook(lambda m, i, o: seen.append(o[:, 0].double().numpy())) for b in model.blocks]
        logits = model(x).numpy()
        for h in hooks:
            h.remove()
    h = np.stack(seen)  # layers 1..3 (the embedding's class token is constant: left out)
    assert rep.layers == [1, 2, 3] and rep.meta["constant_layers_left_out"] == [0]
    want = np.array([[naive_linear_cka(a, b) for b in h] for a in h])
    np.testing.assert_allclose(rep.cka, want, rtol=1e-4)
    np.testing.assert_allclose(rep.cka_to_last, want[:, -1], rtol=1e-4)
    c = h - h.mean(axis=1, keepdims=True)
    cos = (c * c[-1]).sum(-1) / np.linalg.norm(c, axis=-1) / np.linalg.norm(c[-1], axis=-1)
    np.testing.assert_allclose(rep.cos_to_last, cos.mean(axis=1), rtol=1e-4)
    np.testing.assert_allclose(rep.block_redundancy, [-np.mean((b - a) ** 2) for a, b in zip(h, h[1:])], rtol=1e-4)
    assert rep.logit_lens[-1] == pytest.approx(np.mean(logits.argmax(1) == y.numpy()))  # the model's own accuracy
    assert rep.saturation.shape == (N,) and set(rep.saturation) <= {1, 2, 3}
    np.testing.assert_allclose(rep.alignment, alignment.layer_areas(rep.data.hidden, y.numpy()), rtol=1e-12)
    assert set(rep.results) == set(layer_report.lens_names("all")) - {"redundancy/skip_change", "redundancy/rba_change"}


def test_labels_enable_the_lenses_that_read_them(vit):
    model, x, y = vit
    names = ["alignment/area", "collapse/nc1", "probe/accuracy", "logit_lens/accuracy", "logit_lens/saturation"]
    bare = analyze(model, x, lenses=names, device="cpu", n_surgery=0)
    assert set(bare.results) == {"logit_lens/saturation"}  # the head reads every layer; the rest needs labels
    assert bare.skipped["alignment/area"] == "needs labels, which this data set does not have"
    labelled = analyze(model, x, labels=y.numpy(), lenses=names, device="cpu", n_surgery=0)
    assert set(labelled.results) == set(names) and labelled.skipped == {}


def test_a_model_without_a_head_skips_the_logit_lens_with_a_note():
    bert, enc = bare_bert()
    rep = analyze(bert, enc, labels=np.arange(12) % 2, lenses=["logit_lens/*", "cka/matrix"], device="cpu",
                  n_surgery=0)
    note = "needs logits: the model has no classifier head to read every layer with (BertModel has no classifier"
    assert rep.skipped["logit_lens/accuracy"].startswith(note) and set(rep.results) == {"cka/matrix"}
    assert rep.meta["logits"].startswith("not available: the model has no classifier head")
    with pytest.raises(AttributeError, match="logit_lens .logit_lens/accuracy. did not run: needs logits"):
        rep.logit_lens
    with pytest.raises(KeyError, match="did not run: needs logits"):
        rep["logit_lens/saturation"]
    assert not hasattr(rep, "alignment") and not hasattr(rep, "no_such_name")


@pytest.mark.parametrize("change, words", [
    (dict(model="a model name"), "model must be a torch.nn.Module, got str"),
    (dict(model=torch.nn.Linear(3, 3)), "unsupported model Linear: layersim has adapters for"),
    (dict(batches="images.npy"), "batches must be a DataLoader, a list of batches, a tensor or a dict"),
    (dict(batches=[]), "no batches"),
    (dict(labels=np.zeros(7, int)), "labels has shape \\(7,\\); the batches hold 40 samples"),
    (dict(labels=np.linspace(0, 1, N)), "labels must be integers"),
    (dict(lenses="cka/matix"), "unknown lens 'cka/matix'. Did you mean 'cka/matrix'"),
    (dict(lenses=[]), "lenses must be 'all', a lens name or pattern"),
    (dict(n_surgery=2), "n_surgery must be 0 \\(off\\) or an integer of at least 4"),
    (dict(batch_size=0), "batch_size must be a positive integer"),
])
def test_bad_input_is_one_value_error_naming_the_problem(vit, change, words):
    model, x, y = vit
    args = dict(model=model, batches=x, labels=None, lenses=["cka/matrix"], n_surgery=0, batch_size=16)
    args.update(change)
    with pytest.raises(ValueError, match=words) as exc:
        analyze(args.pop("model"), args.pop("batches"), device="cpu", **args)
    assert "\n" not in str(exc.value.args[0])


def test_the_surgery_lenses_run_on_stratified_samples_or_say_why_not(vit):
    from layersim.nets import linear_maps

    model, x, y = vit
    rep = analyze(model, x, labels=y, lenses=["redundancy/*_change"], device="cpu", n_surgery=12)
    assert rep.meta["surgery"] == "6 samples to fit RBA maps on, 6 to compare the final representations on"
    runs = rep.data.model
    want = linear_maps.span_changes(model, runs.fit, runs.eval, [(2, 2), (3, 3)], "skip", device="cpu")
    np.testing.assert_allclose(rep["redundancy/skip_change"], want, rtol=1e-10)
    pick = extraction.stratified(y.numpy(), N, 12)
    assert torch.equal(torch.cat(runs.eval), x[pick[1::2]])
    off = analyze(model, x, lenses=["redundancy/skip_change"], device="cpu", n_surgery=0)
    assert off.skipped["redundancy/skip_change"].endswith("n_surgery=0 turned that off")
    assert off.meta["surgery"] == "off (n_surgery=0)"
    unneeded = analyze(model, x, lenses=["cka/matrix"], device="cpu")
    assert unneeded.meta["surgery"] == "not run: no lens asked for runs the model again" and unneeded.data.model is None


def test_a_streamed_report_equals_the_in_memory_one(vit, tmp_path):
    """More samples than max_in_memory: features go to a memmap, the similarity lenses are streamed
    over every sample (same numbers as in memory), the others read an evenly spaced subsample."""
    model, x, y = vit
    names = ["cka/*", "cos/matrix", "cos/to_last", "clusters/*", "probe/*", "logit_lens/*"]
    full = analyze(model, x, labels=y, lenses=names, token="mean", device="cpu", n_surgery=0)
    part = analyze(model, x, labels=y, lenses=names, token="mean", device="cpu", n_surgery=0, max_in_memory=12,
                   workdir=tmp_path)
    assert (tmp_path / "hidden.npy").exists() and part.meta["subsample"]["n"] == 12
    for name in extraction.STREAMED:
        np.testing.assert_allclose(part.results[name], full.results[name], rtol=1e-7, atol=1e-9)
    assert part.data.n_samples == 12 and part.results["probe/accuracy"].shape == full.results["probe/accuracy"].shape
    assert part.skipped["logit_lens/accuracy"] == ("needs logits: not read in a streamed report (more samples than "
                                                   "max_in_memory)")


def test_lens_names_all_patterns_and_lists():
    every = layer_report.lens_names("all")
    assert every[:4] == lenses.names("cos/*") and "cka/rbf_matrix" not in every and "probe/accuracy" in every
    assert layer_report.lens_names("cka/*") == lenses.names("cka/*")
    assert layer_report.lens_names(["cka/matrix", "cka/*"]) == ["cka/matrix"] + [n for n in lenses.names("cka/*")
                                                                                  if n != "cka/matrix"]
    assert len(layer_report.lens_names("*")) == len(lenses.names())


def test_skip_reasons_and_the_inert_summary_table():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((3, 30, 5))
    data = lenses.LayerData(hidden=hidden, labels=None, layers=[1, 2, 3])
    r = layer_report.run_lenses(LayerReport(data, meta={"logits": "not available: no head"}),
                                ["cka/to_last", "alignment/area", "logit_lens/accuracy"])
    assert set(r.results) == {"cka/to_last"} and set(r.meta["lens_seconds"]) == {"cka/to_last"}
    assert r.skipped["alignment/area"] == "needs labels, which this data set does not have"
    assert r.skipped["logit_lens/accuracy"].startswith("needs logits: no head")
    table = r.summary_table()
    assert "| `cka/to_last` | tracing | " in table and "skipped: needs labels" in table
    labelled = lenses.LayerData(hidden=hidden, labels=np.zeros(30, dtype=np.int64), layers=[1, 2, 3])
    one_class = layer_report.run_lenses(LayerReport(labelled), ["alignment/area"])
    assert one_class.skipped["alignment/area"].startswith("did not apply: the pairwise alignment area needs at least "
                                                          "two classes")
    r.skipped["logit_lens/accuracy"] = f"the head was not trained on /tmp/imgs_{PAYLOAD}'s classes"
    table = r.summary_table()  # a reason quoting a user's path stays text
    assert PAYLOAD not in table and "&lt;svg onload=alert(2)&gt;" in table


def test_the_plain_dict_and_the_digest():
    rng = np.random.default_rng(0)
    data = lenses.LayerData(hidden=rng.standard_normal((3, 12, 4)), labels=np.arange(12) % 2, layers=[0, 1, 2],
                            logits=rng.standard_normal((3, 12, 2)))
    r = layer_report.run_lenses(LayerReport(data), ["cos/adjacent", "cka/matrix", "logit_lens/saturation"])
    plain = r.to_dict()
    assert json.loads(json.dumps(plain)) == plain and plain["layers"] == [0, 1, 2]
    assert np.array_equal(plain["lenses"]["cos/adjacent"], r.results["cos/adjacent"])
    digest = r.to_dict(per_sample=False)["lenses"]
    np.testing.assert_allclose(digest["cos/adjacent"]["median_per_layer"], np.median(r.results["cos/adjacent"], axis=1))
    sat = r.results["logit_lens/saturation"]
    assert digest["logit_lens/saturation"]["counts"] == np.bincount(sat).tolist()
    assert digest["cka/matrix"] == plain["lenses"]["cka/matrix"]
    np.testing.assert_array_equal(r["cka/matrix"], r.cka)
    with pytest.raises(KeyError, match="was not asked for"):
        r["probe/accuracy"]


def test_rba_error_of_a_report_is_the_measure_on_its_layers(vit):
    model, x, _ = vit
    rep = analyze(model, x, lenses=["redundancy/rba_error"], token="mean", device="cpu", n_surgery=0)
    np.testing.assert_array_equal(rep["redundancy/rba_error"], redundancy.rba_heldout_error(rep.data.hidden))


@pytest.mark.parametrize("name", ["torchvision_resnet", "small_cnn", "torchvision_vgg"])
def test_a_cnn_with_stages_of_different_widths(name):
    """A CNN's stages differ in width: they are read zero-padded (CKA against the naive formula on each stage's own
    features), the lenses that compare coordinates across layers and the logit lens are skipped saying why."""
    from builders import RAGGED, naive_linear_cka, ragged_reference

    model, x = RAGGED[name]()
    x = image_batch(x.shape[-1], x.shape[1], n=24)  # the builder's 4 images are too few for alignment's pairs
    y = torch.arange(len(x)) % 3
    rep = analyze(model, x, labels=y, device="cpu", n_surgery=0)
    own = [h.flatten(1).double().numpy() for h in ragged_reference(name, model, x)]
    keep = rep.layers
    widths = [own[i].shape[1] for i in keep]
    assert rep.data.widths == widths and rep.meta["width"] == widths and len(set(widths)) > 1
    np.testing.assert_allclose(rep.cka, [[naive_linear_cka(own[i], own[j]) for j in keep] for i in keep], rtol=1e-4)
    for lens in ("cos/matrix", "cos/to_last", "redundancy/block", "residual/norm_ratio"):
        assert rep.skipped[lens] == f"{lenses.ACROSS_WIDTHS}; the layers have widths {widths}"
    assert rep.skipped["logit_lens/accuracy"].startswith(f"needs logits: the layers have widths {widths}")
    assert {"cka/matrix", "alignment/area", "collapse/nc1", "probe/accuracy", "redundancy/rba_error"} <= set(rep.results)
    assert set(rep.figures()) >= {"matrices", "per_layer"}
