"""Tests of layersim.inputs.data: ``load_dataset`` reaches GLUE and WikiText-103 in the project cache by name, and
refuses a model, a GLUE name without its task, an unknown name and a split the data set lacks, in one line."""

from __future__ import annotations

import pytest

from layersim.inputs import data, text_data

from builders import one_line_raised


def test_glue_and_wikitext_from_the_project_cache(tmp_cache):
    import datasets

    sst2 = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"sentence": ["good", "bad"], "label": [1, 0]}),
        "validation": datasets.Dataset.from_dict({"sentence": ["ok"], "label": [1]}),
        "test": datasets.Dataset.from_dict({"sentence": ["?"], "label": [-1]}),
    })
    sst2.save_to_disk(str(tmp_cache / "hf-datasets" / "glue" / "sst2"))
    train = data.load_dataset("glue/sst2", "train")
    assert train["sentence"] == ["good", "bad"]
    assert len(text_data.load_glue("SST-2", "validation")) == 1
    wiki = datasets.DatasetDict({s: datasets.Dataset.from_dict({"text": [f"= {s} ="]})
                                 for s in ("train", "validation", "test")})
    wiki.save_to_disk(str(tmp_cache / "hf-datasets" / "wikitext-103"))
    assert data.load_dataset("wikitext-103", "test")["text"] == ["= test ="]


@pytest.mark.parametrize("call, match", [
    (lambda: data.load_dataset("gpt2"), "is a model"),
    (lambda: data.load_dataset("glue"), "task"),
    (lambda: data.load_dataset("imagenet-22k"), r"unknown asset 'imagenet-22k'"),
    (lambda: data.load_dataset("janeaustenr", "train"), r"janeaustenr: unknown split 'train'"),
])
def test_unknown_names_and_splits_are_one_line_errors(call, match):
    one_line_raised(call, match)
