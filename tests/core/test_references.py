"""Tests of layersim.core.references: the four papers, one entry each, found by their notebooks' folder."""

import pytest

from layersim.core import references

from builders import REPO


def test_every_paper_names_a_folder_of_notebooks_and_is_found_by_it():
    keys = [p.key for p in references.PAPERS]
    assert keys == ["tracing", "alignment", "redundancy", "clusters"]  # the order the project presents them
    assert sorted(keys) == sorted(d.name for d in (REPO / "notebooks").iterdir() if d.is_dir() and d.name != "report")
    for p in references.PAPERS:
        assert references.paper(p.key) is p and p.url.startswith("https://") and p.question.endswith("?")


def test_a_citation_is_one_line_and_an_unknown_key_is_named():
    tracing = references.paper("tracing")
    assert tracing.citation() == ("Jiachen Jiang, Jinxin Zhou, Zhihui Zhu (2025). *Tracing Representation "
                                  "Progression: Analyzing and Enhancing Layer-Wise Similarity*. ICLR.")
    with pytest.raises(ValueError, match="no paper 'tracer'.*'tracing'"):
        references.paper("tracer")
