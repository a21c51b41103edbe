"""layersim.tools.report and `python -m layersim report`: names checked before loading, one pass, every lens
run or skipped with its reason, and an HTML page with every section and figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layersim.inputs import assets
from layersim.notebook import lenses
from layersim.tools import report

MINILM = "all-minilm-l6-v2"
needs_minilm = pytest.mark.skipif(not assets.is_available(MINILM), reason="MiniLM is not installed")


def test_describe_model_and_data_from_names_only(tmp_path):
    assert report.describe_model(MINILM).modality == "text"
    assert report.describe_model("smollm2-135m").modality == "text"
    assert report.describe_model("deit_small_patch16_224").modality == "image"
    vit = report.describe_model("tracing-vit:smoke")
    assert (vit.kind, vit.modality, vit.detail) == ("tracing-vit", "image", "smoke")
    assert report.describe_model("timm:vit_small_patch16_224").kind == "timm"
    assert report.describe_data("Fashion_MNIST").name == "fashion-mnist"
    assert report.describe_data("austen").labelled and not report.describe_data("python-docs").labelled
    assert report.describe_data("austen-excerpt").kind == "text-task"
    (tmp_path / "texts.txt").write_text("one\ntwo\n")
    assert report.describe_data(str(tmp_path / "texts.txt")).kind == "text-file"
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    assert report.describe_data(str(tmp_path / "imgs")).kind == "image-folder"


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
        report.check(model, data)


def test_check_folders_and_lens_names(tmp_path):
    (tmp_path / "model").mkdir()
    with pytest.raises(ValueError, match="without a Hugging Face config.json"):
        report.describe_model(str(tmp_path / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="one sub-folder of images per class"):
        report.describe_data(str(tmp_path / "empty"))
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(ValueError, match=".txt file"):
        report.describe_data(str(tmp_path / "x.csv"))
    with pytest.raises(ValueError, match="Did you mean 'cka/matrix'"):
        report.check(MINILM, "austen", ["cka/matix"])
    _, _, names = report.check(MINILM, "austen", ["cka/*", "cka/matrix"])
    assert names == lenses.names("cka/*")
    _, _, every = report.check(MINILM, "austen")
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
        report.describe_model(str(tmp_path / "bert"))
    for name in ("bert", "vit"):
        (tmp_path / name / "model.safetensors").touch()
    assert report.describe_model(str(tmp_path / "bert")).modality == "text"
    assert report.describe_model(str(tmp_path / "vit")).modality == "image"
    with pytest.raises(ValueError, match="holds a 't5' model .*layersim has adapters for"):
        report.check(str(tmp_path / "t5"), "austen")
    with pytest.raises(ValueError, match="a report reads one tower"):
        report.describe_model(str(tmp_path / "clip"))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"model_type": "no-such-family"}')
    with pytest.raises(ValueError, match="transformers cannot read its config.json"):
        report.describe_model(str(tmp_path / "odd"))


def test_stratified_subsample_keeps_class_proportions():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)[np.random.default_rng(0).permutation(100)]
    pick = report.stratified(labels, 100, 20)
    assert len(pick) == 20 and np.all(np.diff(pick) > 0)
    assert np.bincount(labels[pick]).tolist() == [12, 6, 2]
    assert report.stratified(None, 10, 4).tolist() == [0, 3, 6, 9] and len(report.stratified(labels, 100, 500)) == 100


def test_constant_entries_and_skip_reasons():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((4, 30, 5)).astype(np.float32)
    hidden[0] = hidden[0, :1]  # the same vector in every sample (a CLS token before attention)
    assert report.constant_entries(hidden) == [0]
    data = lenses.LayerData(hidden=hidden[1:], labels=None, layers=[1, 2, 3])
    r = report.run_lenses(report.Report(data, meta={"logits": "not available: no head"}),
                          ["cka/to_last", "alignment/area", "logit_lens/accuracy"])
    assert set(r.results) == {"cka/to_last"}
    assert r.skipped["alignment/area"] == "needs labels, which this data set does not have"
    assert r.skipped["logit_lens/accuracy"].startswith("needs logits: no head")
    table = report.summary_table(r)
    assert "| `cka/to_last` | tracing | " in table and "skipped: needs labels" in table
    labelled = lenses.LayerData(hidden=hidden[1:], labels=np.zeros(30, dtype=np.int64), layers=[1, 2, 3])
    one_class = report.run_lenses(report.Report(labelled, meta={}), ["alignment/area"])
    assert one_class.skipped["alignment/area"].startswith("did not apply: alignment/area needs at least two classes")


def test_rba_error_lens_is_zero_for_linear_blocks_and_about_one_for_noise():
    rng = np.random.default_rng(1)
    h0 = rng.standard_normal((200, 6))
    h1 = h0 @ rng.standard_normal((6, 6)) + 3.0  # an affine block
    h2 = rng.standard_normal((200, 6))  # unrelated to h1
    err = lenses.apply("redundancy/rba_error", lenses.LayerData(hidden=np.stack([h0, h1, h2])))
    assert err[0] < 1e-20 and 0.9 < err[1] < 1.3


@needs_minilm
def test_one_pass_report_on_minilm_and_its_figures():
    m, d, names = report.check(MINILM, "austen")
    loaded = report.load_model(m, device="cpu")
    inputs = report.load_data(d, 24, seed=0)
    r = report.run_lenses(report.extract(loaded, inputs, batch_size=8, max_length=24, device="cpu", n_surgery=12), names)
    assert r.meta["constant_layers_left_out"] == [0] and r.data.layers == [1, 2, 3, 4, 5, 6]
    assert r.meta["surgery"].startswith("6 samples to fit RBA maps on, 6 to compare")
    assert r.results["redundancy/skip_change"].shape == r.results["redundancy/rba_change"].shape == (5,)
    assert r.results["cka/to_last"][-1] == pytest.approx(1.0) and r.results["cka/matrix"].shape == (6, 6)
    assert "no classifier" in r.skipped["logit_lens/accuracy"]
    figs = report.figures(r, title="t")
    assert set(figs) == {"matrices", "per_layer", "per_step"}
    digest = report.digest(r)
    assert set(digest) == set(r.results) and "median_per_layer" in digest["cos/adjacent"]
    mean = report.extract(loaded, inputs, token="mean", batch_size=8, max_length=24, device="cpu", n_surgery=0)
    assert mean.meta["constant_layers_left_out"] == [] and mean.data.layers[0] == 0
    off = report.run_lenses(mean, ["redundancy/skip_change"])
    assert off.skipped["redundancy/skip_change"].endswith("n_surgery=0 turned that off")
    # texts are batched by length: every label must still sit with its own text's features
    from layersim.papers.alignment import text as alignment_text

    ref = alignment_text.encoder_features(loaded.model, loaded.tokenizer, inputs.texts, tokens=("mean",),
                                          max_length=24, device="cpu")["mean"]
    ref_data = lenses.LayerData(hidden=ref, labels=np.asarray(inputs.labels, dtype=np.int64))
    np.testing.assert_allclose(lenses.apply("alignment/area", mean.data), lenses.apply("alignment/area", ref_data),
                               rtol=1e-5)


@needs_minilm
def test_command_line_writes_notebook_html_figures_and_metrics(tmp_path, capsys):
    from layersim.__main__ import main

    out = tmp_path / "rep"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "16", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"layer_report.ipynb", "report.html", "metrics.json", "matrices.png",
                                               "per_layer.png", "per_step.png"}
    html = (out / "report.html").read_text()
    for section in ("Layer report: every lens of the four papers", "One pass over the data", "Every lens", "Figures"):
        assert section in html
    assert html.count("data:image/png;base64") >= 3  # the figures, embedded
    metrics = json.loads((out / "metrics.json").read_text())
    for name in metrics["lenses"]:
        assert f"<code>{name}</code>" in html
    for name in metrics["skipped"]:
        assert f"<code>{name}</code>" in html and "skipped" in html
    assert metrics["params"]["n_samples"] == 16 and metrics["dataset"] == "austen"
    assert "report.html" in capsys.readouterr().out


@needs_minilm
def test_a_committed_example_names_no_machine_folder(tmp_path, monkeypatch):
    """A report written into the committed results (a repository of its own here) keeps no absolute path of
    the repository: not in the executed notebook (parameters, outputs, papermill's metadata), not in its HTML."""
    import shutil

    from layersim.__main__ import main
    from layersim.core.paths import cache_dir, repo_root

    fake = tmp_path / "repo"
    (fake / "lib" / "layersim").mkdir(parents=True)
    (fake / "pyproject.toml").write_text("")
    (fake / report.NOTEBOOK).parent.mkdir(parents=True)
    shutil.copy(repo_root() / report.NOTEBOOK, fake / report.NOTEBOOK)
    monkeypatch.setenv("LAYERSIM_CACHE", str(cache_dir()))  # the installed model, from the real repository
    monkeypatch.setenv("LAYERSIM_ROOT", str(fake))
    out = fake / "figures" / "report" / "example"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "16", "--out", str(out),
                 "--update-committed"]) == 0
    executed = (out / "layer_report.ipynb").read_text()
    for name in ("report.html", "metrics.json"):
        assert str(fake) not in (out / name).read_text(), name
    assert str(fake) not in executed
    assert json.loads((out / "metrics.json").read_text())["params"]["out"] == "figures/report/example"
    nb = json.loads(executed)
    assert nb["metadata"]["papermill"]["parameters"]["out"] == "figures/report/example"
    assert nb["metadata"]["papermill"]["input_path"] == "notebooks/report/layer_report.ipynb"


def test_command_line_bad_input_is_one_usage_error(capsys):
    from layersim.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["report", "--model", MINILM, "--data", "digits"])
    assert exc.value.code == 2 and "choose a text data set" in capsys.readouterr().err
    assert main(["bogus"]) == 2


def test_load_data_from_a_users_folder_and_text_file(tmp_path):
    from PIL import Image

    for k, cls in enumerate(("cats", "dogs")):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((10, 12, 3), 40 * k + i, dtype=np.uint8)).save(tmp_path / "imgs" / cls / f"{i}.png")
    (tmp_path / "imgs" / "cats" / "notes.txt").write_text("not an image")
    inputs = report.load_data(report.describe_data(str(tmp_path / "imgs")), 100)
    assert inputs.images.shape == (6, 3, 224, 224) and inputs.label_names == ("cats", "dogs")
    assert sorted(inputs.labels.tolist()) == [0, 0, 0, 1, 1, 1] and float(inputs.images.max()) <= 1.0
    (tmp_path / "t.txt").write_text("first line\n\nsecond\nthird\nfourth\nfifth\n")
    texts = report.load_data(report.describe_data(str(tmp_path / "t.txt")), 4, seed=1)
    assert len(texts.texts) == 4 and texts.labels is None and set(texts.texts) <= {"first line", "second", "third",
                                                                                   "fourth", "fifth"}
    with pytest.raises(ValueError, match="at least 4"):
        report.load_data(report.describe_data(str(tmp_path / "t.txt")), 3)


@needs_minilm
def test_streamed_report_equals_the_in_memory_one(tmp_path):
    """More samples than max_in_memory: features go to a memmap, the similarity lenses are streamed
    over every sample (same numbers as in memory), the others read an evenly spaced subsample."""
    m, d, names = report.check(MINILM, "austen", ["cka/*", "cos/matrix", "cos/to_last", "clusters/*", "probe/*"])
    loaded = report.load_model(m, device="cpu")
    inputs = report.load_data(d, 30, seed=0)
    full = report.run_lenses(report.extract(loaded, inputs, token="mean", batch_size=8, max_length=16, device="cpu"),
                             names)
    part = report.extract(loaded, inputs, token="mean", batch_size=8, max_length=16, device="cpu", max_in_memory=12,
                          workdir=tmp_path)
    assert (tmp_path / "hidden.npy").exists() and part.meta["subsample"]["n"] == 12
    part = report.run_lenses(part, names)
    for name in report.STREAMED:
        np.testing.assert_allclose(part.results[name], full.results[name], rtol=1e-7, atol=1e-9)
    assert part.data.n_samples == 12 and part.results["probe/accuracy"].shape == full.results["probe/accuracy"].shape
    with pytest.raises(ValueError, match="cosine similarity is undefined"):
        report.streamed_similarity(np.ones((2, 5, 3), np.float32), [0, 1])


@needs_minilm
def test_a_subset_of_lenses_runs_to_the_end_and_reports_only_those(tmp_path):
    """``--lenses`` naming two lenses (neither of the two the last cell used to show) runs every cell, and the page,
    ``metrics.json`` and the last cell hold those lenses alone."""
    from layersim.__main__ import main

    out = tmp_path / "rep"
    assert main(["report", "--model", MINILM, "--data", "austen", "--scale", "smoke", "--n", "8", "--n-surgery", "0",
                 "--lenses", "cos/adjacent,residual/*", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["lenses"]) == {"cos/adjacent", "residual/norm_ratio"} and metrics["skipped"] == {}
    html = (out / "report.html").read_text()
    rows = {name for name in lenses.names() if f"<td><code>{name}</code></td>" in html}  # the table of lenses run
    assert rows == {"cos/adjacent", "residual/norm_ratio"}
    last = json.loads((out / "layer_report.ipynb").read_text())["cells"][-1]["outputs"][0]["data"]["text/plain"]
    assert "'ran': ['cos/adjacent', 'residual/norm_ratio']" in "".join(last) and "cka_to_last" not in "".join(last)
