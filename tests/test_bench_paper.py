"""The measured paper-scale plan (``python -m layersim.tools.bench paper``), the published architectures it
builds, and the crossover check of ``device="auto"`` (``python -m layersim.tools.bench device``), on the CPU."""

import math
from pathlib import Path

import nbformat
import pytest
import torch

from layersim.core import device
from layersim.inputs import data
from layersim.nets import params
from layersim.notebook import presets
from layersim.tools import bench, bench_paper, bench_train

NOTEBOOKS = sorted(p for p in Path(__file__).resolve().parents[1].glob("notebooks/*/*.ipynb")
                   if "start(" in "".join(c.source for c in nbformat.read(p, as_version=4).cells))

#: published parameter counts (millions; the model cards and papers) of the bare encoders / LMs
PUBLISHED_M = {"bert-base-uncased": 110, "roberta-base": 125, "albert-large-v2": 18, "electra-base-discriminator": 110,
               "gpt2": 124, "vit-small-patch16-224": 22, "vit-base-patch16-224": 86, "deit-small-patch16-224-hf": 22,
               "dinov2-small": 22, "dinov2-base": 86, "clip-vit-base-patch32": 88}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebooks_presets_are_read_from_the_notebook(path):
    got = bench_paper.notebook_presets(path.stem)
    assert {"smoke", "default", "paper"} <= set(got), path.stem


def test_presets_are_read_without_jupyter(monkeypatch):
    """A GPU machine or batch node may lack IPython: the settings cell's display import is left out."""
    import sys

    monkeypatch.setitem(sys.modules, "IPython", None)  # any import of IPython now raises ImportError
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    with pytest.raises(ImportError):
        import IPython.display  # noqa: F401
    assert bench_paper.notebook_presets("t10_aligned_gpt")["paper"]["pretrained"] == "gpt2"


def test_presets_shared_with_the_library_are_the_librarys_own_object():
    assert bench_paper.notebook_presets("c03_layer_skipping") is presets.CLUSTERS_FINETUNE
    with pytest.raises(ValueError, match="no notebook"):
        bench_paper.notebook_presets("t99_nothing")


def test_the_published_architectures_have_their_published_sizes():
    import transformers as tr

    assert set(PUBLISHED_M) == set(params.HF_ARCHITECTURES)
    for name, millions in PUBLISHED_M.items():
        cls = tr.GPT2LMHeadModel if name == "gpt2" else tr.AutoModel
        with torch.device("meta"):
            model = cls(params.hf_config(name)) if name == "gpt2" else cls.from_config(params.hf_config(name))
        assert params.count_module(model) / 1e6 == pytest.approx(millions, rel=0.03), name
    with pytest.raises(ValueError, match="no published configuration"):
        params.hf_config("bert-huge")
    with pytest.raises(ValueError, match="task"):
        params.build_random("gpt2", task="translation")


def test_the_image_encoders_are_the_redundancy_notebooks_paper_models():
    from layersim.papers.redundancy import models as redundancy_models

    assert sorted(params.IMAGE_ENCODERS) == sorted(spec.name for spec in redundancy_models.MODELS["paper"].values())


def test_the_tracing_vit_plan_multiplies_the_measured_step_by_the_presets_steps():
    rows = bench_paper.plan("cpu", tiny=True, only="t01", steps=1, log=lambda _: None)
    s = presets.tracing_vit("paper", "standard")
    n = s["n_train"] or data.split_size(s["dataset"], "train")
    assert [r["notebook"] for r in rows] == ["t01_cos_vs_cka"]
    assert rows[0]["steps"] == s["epochs"] * math.ceil(n / s["batch_size"]) == 200 * 196
    assert rows[0]["hours"] == pytest.approx(rows[0]["seconds"] * rows[0]["steps"] / 3600)
    assert rows[0]["precision"] == "fp32" and rows[0]["peak_gib"] is None


def test_every_workload_runs_one_tiny_step_on_the_cpu(capsys):
    assert bench.main(["paper", "--tiny", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    for w in bench_paper.workloads(tiny=True):
        assert f"| {w.notebook} | {w.label} |" in out
    assert "Measured hours per notebook" in out
    with pytest.raises(ValueError, match="steps"):
        bench_paper.time_workload(bench_paper.workloads(tiny=True)[0], "cpu", steps=0)


def test_the_crossover_check_times_each_model_and_names_autos_pick(capsys):
    assert bench.main(["device", "--quick", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "auto picks" in out and f"GPU_MIN_WORK = {device.GPU_MIN_WORK:.1e}" in out
    rows = bench_train.crossover(quick=True, steps=1, log=lambda _: None)
    assert [r["auto"] for r in rows] == ["cpu", "cpu"] or torch.cuda.is_available()
    assert all(r["ms"]["cpu"] > 0 for r in rows)


def test_notebook_hours_sums_the_known_workloads_and_can_leave_out_partial_notebooks():
    rows = [{"notebook": "t01", "hours": 0.25}, {"notebook": "t01", "hours": 0.5},
            {"notebook": "c03", "hours": 1.0}, {"notebook": "c03", "hours": None},
            {"notebook": "r01", "hours": None}]
    assert bench_paper.notebook_hours(rows) == {"t01": 0.75, "c03": 1.0}
    assert bench_paper.notebook_hours(rows, complete_only=True) == {"t01": 0.75}
    assert bench_paper.notebook_hours([]) == {}
