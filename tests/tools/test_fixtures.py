"""Tests of layersim.tools.fixtures: every fixture data set is read by the project's own loader, from the folder and
in the format the real download leaves; torchvision's integrity check refuses the fixture CIFAR files until the
rehearsal trusts their checksums."""

import numpy as np
import pytest

from layersim.inputs import image_data, labelled, text_data, text_tasks
from layersim.tools import fixtures


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    cache = tmp_path_factory.mktemp("fixtures") / "cache"
    return cache, fixtures.write_data(cache)


@pytest.fixture
def fixture_cache(written, monkeypatch):
    cache, _ = written
    monkeypatch.setenv("LAYERSIM_CACHE", str(cache))
    for name in ("LAYERSIM_TORCHVISION_ROOT", "LAYERSIM_IMAGENET", "LAYERSIM_OFFICE31"):
        monkeypatch.delenv(name, raising=False)
    from torchvision.datasets import CIFAR10, CIFAR100

    for cls in (CIFAR10, CIFAR100):  # trust_cifar changes these class attributes: restored after the test
        for attr in ("train_list", "test_list", "meta"):
            monkeypatch.setattr(cls, attr, getattr(cls, attr))
    return cache


def test_torchvision_folders_are_read_by_the_loaders(fixture_cache):
    mnist = image_data.load_torchvision("mnist", "train")
    assert len(mnist) == 10 * fixtures.IMAGES_PER_CLASS["train"] and np.asarray(mnist[0][0]).shape == (28, 28)
    with pytest.raises(RuntimeError, match="not found or corrupted"):  # torchvision checks every file's md5
        image_data.load_torchvision("cifar10", "test")
    fixtures.trust_cifar(fixture_cache / "torchvision")
    cifar = image_data.load_torchvision("cifar10", "test")
    assert len(cifar) == 10 * fixtures.IMAGES_PER_CLASS["test"] and cifar.classes.index("cat") == 3
    hundred = image_data.load_torchvision("cifar100", "train")
    assert len(hundred.classes) == 100 and len(hundred) == 100 * fixtures.IMAGES_PER_CLASS_100["train"]
    assert np.bincount(hundred.targets).tolist() == [fixtures.IMAGES_PER_CLASS_100["train"]] * 100
    images, labels = image_data.load_cifar102("test")
    assert images.shape == (10 * fixtures.IMAGES_PER_CLASS["test"], 32, 32, 3) and labels.max() == 9


def test_image_folders_are_read_by_the_loaders(fixture_cache):
    train = image_data.load_imagenet("train")
    assert len(train.classes) == 1000 and len(train) == 2000
    office = labelled.load_office31("webcam")
    assert office.classes == sorted(fixtures.OFFICE31_CLASSES) and tuple(office[0][0].shape) == (3, 224, 224)


def test_hugging_face_folders_are_read_by_the_loaders(fixture_cache):
    rte = text_tasks.load_task("rte", "validation", n=10)
    mnli = text_tasks.load_task("mnli", "validation", n=10)  # validation_matched
    sst2 = text_tasks.load_task("sst2", "validation", n=10)  # one sentence each: the layer report's data
    assert (rte.num_labels, mnli.num_labels, sst2.num_labels) == (2, 3, 2) and rte.text_b is not None
    assert sst2.text_b is None and len(sst2.text_a) == 10
    swag = text_tasks.load_task("hellaswag", "train", n=5)
    assert swag.num_labels == 4 and all(len(c) == 4 for c in swag.choices)
    wiki = text_data.load_wikitext103("test")["text"]
    assert any(t.startswith(" = ") for t in wiki) and "" in wiki


def test_sentences_are_seeded():
    assert fixtures.sentences(3, 1) == fixtures.sentences(3, 1) != fixtures.sentences(3, 2)
    assert all(s.endswith(".") and s[0].isupper() for s in fixtures.sentences(20, 0))
