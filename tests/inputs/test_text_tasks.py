"""Tests of layersim.inputs.text_tasks: the Austen tasks (balanced, disjoint splits, labels that are true), encoding,
scores, and the one-line refusal of a task, split or count it cannot give."""


import numpy as np
import pytest

from layersim.inputs import text_tasks as tt

from builders import BAD_COUNT_IDS, BAD_COUNTS, one_line_raised


@pytest.fixture(scope="module")
def novels():
    return tt._novel_sentences()


def test_novel_task_is_balanced_labelled_truly_and_splits_are_disjoint(novels):
    train = tt.load_task("austen-novel", "train", n=600, seed=1)
    val = tt.load_task("austen-novel", "validation", n=120, seed=1)
    assert len(train) == 600 and len(val) == 120 and train.num_labels == 6 and not train.pairs
    assert np.bincount(train.labels).tolist() == [100] * 6 and np.bincount(val.labels).tolist() == [20] * 6
    titles = list(novels)
    for text, label in zip(val.text_a[:30], val.labels[:30]):
        assert text in novels[titles[label]] and len(text.split()) >= tt.MIN_WORDS
    everything_train = set(tt.load_task("austen-novel", "train").text_a)
    assert not everything_train & set(tt.load_task("austen-novel", "validation").text_a)
    again = tt.load_task("austen-novel", "train", n=600, seed=1)
    assert again.text_a == train.text_a and np.array_equal(again.labels, train.labels)
    assert tt.load_task("austen-novel", "train", n=600, seed=2).text_a != train.text_a


def test_next_sentence_pairs_are_true_neighbours_or_not(novels):
    task = tt.load_task("austen-next", "validation", n=200, seed=0)
    assert task.pairs and task.num_labels == 2 and np.bincount(task.labels).tolist() == [100, 100]
    where = {}
    for title, texts in novels.items():
        for i, t in enumerate(texts):
            where.setdefault(t, []).append((title, i))
    for a, b, y in zip(task.text_a, task.text_b, task.labels):
        pa, pb = where[a], where[b]
        adjacent = any(na == nb and j == i + 1 for na, i in pa for nb, j in pb)
        same_novel = any(na == nb for na, _ in pa for nb, _ in pb)
        assert same_novel and adjacent == bool(y)


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match="unknown task"):
        tt.load_task("austen-novels")
    with pytest.raises(ValueError, match="split"):
        tt.load_task("austen-novel", "test")
    with pytest.raises(ValueError, match=r"^austen-novel validation: n=60000 asks for 10000 examples per class, "
                                         r"its smallest class has \d+; use n <= \d+"):
        tt.load_task("austen-novel", "validation", n=60000)
    with pytest.raises(ValueError, match=r"^n=0: at least 1 of the examples of the train split of austen-novel is needed"):
        tt.load_task("austen-novel", n=0)
    with pytest.raises(ValueError, match=r"^austen-novel train: n=5 is too small; a balanced draw needs at least 1 "
                                         r"example of each of its 6 classes \(n >= 6\)"):
        tt.load_task("austen-novel", n=5)
    with pytest.raises(ValueError, match=r"^n=1000000000 is more than the \d+ sentences of the train split of austen-excerpt"):
        tt.load_task("austen-excerpt", n=10**9)
    capped = tt.load_task("austen-novel", "validation", n=60000, at_most=True)  # a cap: all of the balanced split
    assert len(capped) == len(tt.load_task("austen-novel", "validation"))
    from layersim.inputs import assets

    with pytest.raises(assets.AssetNotFoundError, match="hellaswag"):
        tt.load_task("hellaswag")  # offline: the paper-scale data set is not here


def test_encode_pairs_and_labels():
    from layersim.inputs import fetch

    _, tok = fetch.load_model("all-minilm-l6-v2")
    task = tt.load_task("austen-next", "validation", n=10)
    batches = tt.encode(task, tok, batch_size=4, max_length=32, order=np.arange(9, -1, -1))
    assert [len(b["labels"]) for b in batches] == [4, 4, 2]
    assert batches[0]["labels"].tolist() == task.labels[[9, 8, 7, 6]].tolist()
    assert batches[0]["input_ids"].shape[1] <= 32 and (batches[0]["token_type_ids"] == 1).any()
    single = tt.encode(tt.load_task("austen-novel", "validation", n=12), tok, batch_size=12)[0]
    assert (single["token_type_ids"] == 0).all()


def test_scores_and_majority_baseline():
    from sklearn.metrics import matthews_corrcoef

    task = tt.TextTask("t", "validation", ["a"] * 6, None, np.array([0, 0, 1, 1, 1, 2]), 3)
    assert tt.score(task, np.array([0, 1, 1, 1, 2, 2])) == pytest.approx(4 / 6)
    assert tt.majority_baseline(task) == pytest.approx(3 / 6)
    cola = tt.TextTask("cola", "validation", ["a"] * 6, None, np.array([0, 1, 1, 0, 1, 0]), 2, metric="matthews")
    p = np.array([0, 1, 0, 0, 1, 1])
    assert tt.score(cola, p) == pytest.approx(matthews_corrcoef(cola.labels, p))
    sts = tt.TextTask("stsb", "validation", ["a"] * 4, ["b"] * 4, np.array([0.0, 1.0, 2.0, 4.0]), 1, metric="pearson")
    assert tt.score(sts, np.array([1.0, 2.0, 3.0, 5.0])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        tt.score(task, np.zeros(5))


def test_excerpt_pairs_come_from_the_sentence_or_its_successor(novels):
    task = tt.load_task("austen-excerpt", "train", n=120, seed=3)
    assert task.pairs and np.bincount(task.labels).tolist() == [60, 60]
    following = {texts[i]: texts[i + 1] for texts in novels.values() for i in range(len(texts) - 1)}
    for a, b, y in zip(task.text_a, task.text_b, task.labels):
        source = " ".join((a if y else following[a]).split())
        assert b in source and 4 <= len(b.split()) < len(source.split())


def test_same_novel_pairs(novels):
    task = tt.load_task("austen-same-novel", "validation", n=80, seed=0)
    assert np.bincount(task.labels).tolist() == [40, 40]
    novel_of = {t: title for title, texts in novels.items() for t in texts}
    for a, b, y in zip(task.text_a, task.text_b, task.labels):
        assert (novel_of[a] == novel_of[b]) == bool(y) and a != b


def test_length_order_sorts_by_tokenised_length_stably():
    class Words:  # a tokenizer of whitespace words, truncating like Hugging Face's
        def __call__(self, texts, second=None, truncation=True, max_length=128):
            rows = [t.split() + (second[i].split() if second else []) for i, t in enumerate(texts)]
            return {"input_ids": [r[:max_length] for r in rows]}

    texts = ["a b c", "a", "a b", "x y", "a b c d e"]
    np.testing.assert_array_equal(tt.length_order(Words(), texts), [1, 2, 3, 0, 4])
    np.testing.assert_array_equal(tt.length_order(Words(), texts, max_length=2), [1, 0, 2, 3, 4])  # truncated: ties
    np.testing.assert_array_equal(tt.length_order(Words(), ["a", "a b"], ["a b c", "a"]), [1, 0])


# ----- counts, names and splits: one-line refusals ----------------------------------------------------------------


@pytest.mark.parametrize("n, problem", BAD_COUNTS, ids=BAD_COUNT_IDS)
def test_bad_counts_are_one_line_errors(austen, n, problem):
    one_line_raised(lambda: tt.load_task("austen-next", "train", n=n), problem)


def test_a_paper_task_refuses_more_examples_than_its_split_holds(tmp_cache):
    import datasets

    rte = datasets.DatasetDict({s: datasets.Dataset.from_dict(
        {"sentence1": ["a", "b", "c"], "sentence2": ["x", "y", "z"], "label": [0, 1, 0]}) for s in ("train", "validation")})
    rte.save_to_disk(str(tmp_cache / "hf-datasets" / "glue" / "rte"))
    one_line_raised(lambda: tt.load_task("rte", "validation", n=5000),
                   r"^n=5000 is more than the 3 examples of the validation split of rte; use at most 3")
    assert len(tt.load_task("rte", "validation", n=5000, at_most=True)) == 3
    assert len(tt.load_task("rte", "validation", n=2)) == 2


@pytest.mark.parametrize("call, match", [
    (lambda: tt.load_task("austen-poems"), r"unknown task 'austen-poems'"),
    (lambda: tt.load_task("austen-novel", "test"), r"split must be one of"),
])
def test_unknown_names_and_splits_are_one_line_errors(call, match):
    one_line_raised(call, match)
