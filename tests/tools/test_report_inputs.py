"""Tests of layersim.tools.report_inputs: model and data set names read before anything loads (folders matched to an
adapter from their configuration alone), the data loaded from a user's folder or text file, and what
``layersim.analyze`` reads from them: batches sorted by length with each label beside its own text, the surgery
samples and the logit lens's verdict."""

from __future__ import annotations

import numpy as np
import pytest

from layersim.analysis import extraction, layer_report, lenses
from layersim.inputs import locate
from layersim.tools import report_inputs

MINILM = "all-minilm-l6-v2"
needs_minilm = pytest.mark.skipif(not locate.is_available(MINILM), reason="MiniLM is not installed")


def test_model_and_data_specs_from_names_only(tmp_path):
    assert report_inputs.model_spec(MINILM).modality == "text"
    assert report_inputs.model_spec("smollm2-135m").modality == "text"
    assert report_inputs.model_spec("deit_small_patch16_224").modality == "image"
    vit = report_inputs.model_spec("tracing-vit:smoke")
    assert (vit.kind, vit.modality, vit.detail) == ("tracing-vit", "image", "smoke")
    assert report_inputs.model_spec("timm:vit_small_patch16_224").kind == "timm"
    assert report_inputs.data_spec("Fashion_MNIST").name == "fashion-mnist"
    assert report_inputs.data_spec("austen").labelled and not report_inputs.data_spec("python-docs").labelled
    assert report_inputs.data_spec("austen-excerpt").kind == "text-task"
    (tmp_path / "texts.txt").write_text("one\ntwo\n")
    assert report_inputs.data_spec(str(tmp_path / "texts.txt")).kind == "text-file"
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    assert report_inputs.data_spec(str(tmp_path / "imgs")).kind == "image-folder"


@pytest.mark.parametrize("model,data,message", [
    ("minilm-l7", "austen", "unknown model 'minilm-l7'"),
    ("fashion-mnist", "austen", "is a data set; pass it as the data set"),
    ("tracing-vit:huge", "fashion-mnist", "the scale must be one of"),
    (MINILM, "digits", "reads texts but 'digits' is an image data set"),
    ("tracing-vit", "austen", "reads images but 'austen' is a text data set"),
    (MINILM, "wikipedia", "unknown data set 'wikipedia'"),
    ("", "austen", "model is empty"),
    ("timm:resnet18", "digits", "timm:resnet18 is a timm model \\(ResNet\\), but unsupported model ResNet"),
    ("timm:vit_smol_patch16_224", "digits", "timm has no model 'vit_smol_patch16_224'; close names: "),
])
def test_check_refuses_bad_names_before_loading(model, data, message):
    with pytest.raises(ValueError, match=message):
        report_inputs.check(model, data)


def test_check_folders_and_lens_names(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(ValueError, match="without a Hugging Face config.json"):
        report_inputs.model_spec(str(tmp_path / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="one sub-folder of images per class"):
        report_inputs.data_spec(str(tmp_path / "empty"))
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(ValueError, match=".txt file"):
        report_inputs.data_spec(str(tmp_path / "x.csv"))
    with pytest.raises(ValueError, match="Did you mean 'cka/matrix'"):
        report_inputs.check(MINILM, "austen", ["cka/matix"])
    _, _, names = report_inputs.check(MINILM, "austen", ["cka/*", "cka/matrix"])
    assert names == lenses.names("cka/*")
    _, _, every = report_inputs.check(MINILM, "austen")
    assert set(every) >= {"cos/to_last", "cka/matrix", "redundancy/rba_error", "alignment/area", "clusters/block_diagonal",
                          "logit_lens/accuracy", "probe/accuracy"}


def test_a_folder_is_matched_to_an_adapter_from_its_config_before_any_weight(tmp_path):
    """Folders hold only config.json and an empty weights file here (no tokenizer): the family and modality
    come from the configuration alone, a family without an adapter is refused by name, and a folder without
    weights is refused before anything loads."""
    import transformers as tr

    small = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    tr.BertConfig(hidden_size=32, **small).save_pretrained(tmp_path / "bert")
    tr.ViTConfig(hidden_size=32, **small).save_pretrained(tmp_path / "vit")
    tr.T5Config(d_model=32, num_layers=2, num_heads=2, d_ff=64, d_kv=16).save_pretrained(tmp_path / "t5")
    tr.CLIPConfig().save_pretrained(tmp_path / "clip")
    with pytest.raises(ValueError, match="holds a config.json but no weights"):
        report_inputs.model_spec(str(tmp_path / "bert"))
    for name in ("bert", "vit"):
        (tmp_path / name / "model.safetensors").touch()
    assert report_inputs.model_spec(str(tmp_path / "bert")).modality == "text"
    assert report_inputs.model_spec(str(tmp_path / "vit")).modality == "image"
    with pytest.raises(ValueError, match="holds a 't5' model .*layersim has adapters for"):
        report_inputs.check(str(tmp_path / "t5"), "austen")
    with pytest.raises(ValueError, match="a report reads one tower"):
        report_inputs.model_spec(str(tmp_path / "clip"))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"model_type": "no-such-family"}')
    with pytest.raises(ValueError, match="transformers cannot read its config.json"):
        report_inputs.model_spec(str(tmp_path / "odd"))


def test_load_data_from_a_users_folder_and_text_file(tmp_path):
    from PIL import Image

    for k, cls in enumerate(("cats", "dogs")):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((10, 12, 3), 40 * k + i, dtype=np.uint8)).save(tmp_path / "imgs" / cls / f"{i}.png")
    (tmp_path / "imgs" / "cats" / "notes.txt").write_text("not an image")
    inputs = report_inputs.load_data(report_inputs.data_spec(str(tmp_path / "imgs")), 100)
    assert inputs.images.shape == (6, 3, 224, 224) and inputs.label_names == ("cats", "dogs")
    assert sorted(inputs.labels.tolist()) == [0, 0, 0, 1, 1, 1] and float(inputs.images.max()) <= 1.0
    (tmp_path / "t.txt").write_text("first line\n\nsecond\nthird\nfourth\nfifth\n")
    texts = report_inputs.load_data(report_inputs.data_spec(str(tmp_path / "t.txt")), 4, seed=1)
    assert len(texts.texts) == 4 and texts.labels is None and set(texts.texts) <= {"first line", "second", "third",
                                                                                   "fourth", "fifth"}
    with pytest.raises(ValueError, match="at least 4"):
        report_inputs.load_data(report_inputs.data_spec(str(tmp_path / "t.txt")), 3)


def test_a_model_folder_and_a_data_folder_are_named_by_their_resolved_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    assert report_inputs.data_spec("~/imgs").name == str(tmp_path / "imgs")
    monkeypatch.chdir(tmp_path / "imgs")
    assert report_inputs.data_spec("../imgs/").name == str(tmp_path / "imgs")


@needs_minilm
def test_minilm_on_austen_as_the_report_reads_it():
    m, d, names = report_inputs.check(MINILM, "austen")
    loaded = report_inputs.load_model(m, device="cpu")
    inputs = report_inputs.load_data(d, 24, seed=0)
    assert report_inputs.logit_lens(loaded, inputs).startswith("the model has no classifier head")
    runs = report_inputs.model_runs(loaded, inputs, 12, None, 8, 24, "cpu")
    assert extraction.describe_runs(runs) == "6 samples to fit RBA maps on, 6 to compare the final representations on"
    assert report_inputs.model_runs(loaded, inputs, 0) is None
    r = layer_report.analyze(loaded.model, report_inputs.batches(loaded, inputs, 8, 24), lenses=names, device="cpu",
                             surgery=runs, logit_lens=report_inputs.logit_lens(loaded, inputs))
    assert r.meta["constant_layers_left_out"] == [0] and r.data.layers == [1, 2, 3, 4, 5, 6]
    assert r.results["redundancy/skip_change"].shape == r.results["redundancy/rba_change"].shape == (5,)
    assert r.results["cka/to_last"][-1] == pytest.approx(1.0) and r.results["cka/matrix"].shape == (6, 6)
    assert "no classifier" in r.skipped["logit_lens/accuracy"]
    # texts are batched by length: every label must still sit with its own text's features
    from layersim.papers.alignment import text as alignment_text

    mean = layer_report.analyze(loaded.model, report_inputs.batches(loaded, inputs, 8, 24), lenses=["alignment/area"],
                                token="mean", device="cpu", n_surgery=0)
    assert mean.meta["constant_layers_left_out"] == [] and mean.data.layers[0] == 0
    ref = alignment_text.encoder_features(loaded.model, loaded.tokenizer, inputs.texts, tokens=("mean",),
                                          max_length=24, device="cpu")["mean"]
    ref_data = lenses.LayerData(hidden=ref, labels=np.asarray(inputs.labels, dtype=np.int64))
    np.testing.assert_allclose(mean["alignment/area"], lenses.apply("alignment/area", ref_data), rtol=1e-5)


def test_the_logit_lens_reads_a_head_trained_on_these_classes_only():
    from builders import tiny_vit

    spec = report_inputs.DataSpec("fashion-mnist", "image-set", "image", True)
    inputs = report_inputs.Inputs(spec, images=np.zeros((4, 1, 28, 28)), labels=np.arange(4))
    trained = report_inputs.Loaded(tiny_vit(), trained_on="fashion-mnist")
    assert report_inputs.logit_lens(trained, inputs) is True
    other = report_inputs.Loaded(tiny_vit(), trained_on="digits")
    assert report_inputs.logit_lens(other, inputs) == "the head was not trained on fashion-mnist's classes (it was " \
                                                      "trained on digits)"
    unlabelled = report_inputs.Inputs(spec, images=np.zeros((4, 1, 28, 28)))
    assert report_inputs.logit_lens(trained, unlabelled) == "the data set has no labels"
