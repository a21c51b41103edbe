"""Tests of layersim.inputs.text_data: the Jane Austen novels and their cache, the sentence splitter, the Austen
BPE tokenizer and its cache, the two halves of a text source, GLUE offline, and the text loaders and their caches
under hostile inputs.

Offline throughout (LAYERSIM_OFFLINE=1); the tests of the real novels skip with a reason when `make assets` has not
been run. Every refusal is one ``ValueError`` line naming the problem (or the documented error: ``DiskFull``,
``AssetNotFoundError``); no temporary file is left behind. Everything happens in a private cache under
``tmp_path``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import warnings

import pytest

from layersim.core.paths import CacheWarning
from layersim.inputs import cache, data, fetch, locate, text_data
from layersim.inputs.assets import AssetNotFoundError

from builders import BAD_COUNT_IDS, BAD_COUNTS, CACHE_FAULTS, full_disk_on_cache, one_line_raised


SENTENCES = [f"Miss {w} walked to the {v} with her sister and spoke of {u}." for w in ("Bennet", "Woodhouse", "Elliot")
             for v in ("village", "garden", "abbey", "park") for u in ("balls", "letters", "marriage")]


@pytest.fixture
def bpe_text(tmp_cache, monkeypatch):
    """The BPE tokenizer learns from a few sentences (not the novels); returns the training calls."""
    calls = []
    monkeypatch.setattr(text_data, "text_sample", lambda *a, **k: calls.append(a) or SENTENCES)
    return calls


needs_austen = pytest.mark.skipif(not locate.is_available("janeaustenr"),
                                  reason="r-cran-janeaustenr not extracted: run `make assets`")


# ----- Jane Austen --------------------------------------------------------------------------


@needs_austen
def test_austen_six_novels_lines_and_sentences(tmp_cache):
    lines = text_data.load_austen()  # parses the R database (cache is empty)
    assert list(lines.columns) == ["novel", "index", "text"]
    assert list(lines["novel"].cat.categories) == list(text_data.AUSTEN_NOVELS.values())
    counts = lines["novel"].value_counts()
    assert len(counts) == 6 and counts.min() > 6000
    assert len(text_data.load_austen(drop_empty=False)) == 73422
    assert lines["text"].str.strip().ne("").all()
    assert (tmp_cache / "text" / "janeaustenr.json").is_file()
    sentences = data.load_dataset("austen", unit="sentence")
    assert sentences["novel"].nunique() == 6 and 25000 < len(sentences) < 40000
    assert not sentences["text"].str.endswith("Mr.").any()


@pytest.mark.parametrize("fault", ["garbage", "truncated", "empty", "wrong content"])
def test_austen_broken_json_cache_is_moved_aside_and_rebuilt(tmp_cache, tmp_path, monkeypatch, fault):
    fake = {key: [f"{key} line {i}" for i in range(3)] for key in text_data.AUSTEN_NOVELS}
    parsed = []
    monkeypatch.setattr(fetch, "resolve", lambda name, allow_download=None: tmp_path)
    monkeypatch.setattr(text_data, "_read_rdb", lambda folder: parsed.append(folder) or fake)
    expected = {title: fake[key] for key, title in text_data.AUSTEN_NOVELS.items()}
    assert text_data._austen_lines() == expected and len(parsed) == 1
    cached = tmp_cache / "text" / "janeaustenr.json"
    if fault == "wrong content":
        cached.write_text('{"Emma": []}')
    else:
        CACHE_FAULTS[fault](cached)
    damaged = cached.read_bytes()
    with pytest.warns(CacheWarning, match=re.escape(str(cached))):
        assert text_data._austen_lines() == expected
    assert len(parsed) == 2
    [aside] = cached.parent.glob("janeaustenr.json.corrupt-*")
    assert aside.read_bytes() == damaged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text_data._austen_lines() == expected and len(parsed) == 2  # from the rebuilt cache


def test_austen_missing_is_the_clear_error(tmp_cache, system):
    with pytest.raises(AssetNotFoundError, match="apt-get download r-cran-janeaustenr"):
        text_data.load_austen()


def test_sentence_splitter():
    lines = ["Mr. Darcy came. \"Why?\" said she;", "then _Mrs._ Bennet left.", "",
             "A new one!\" Yes."]
    assert text_data._sentences(lines) == ["Mr. Darcy came.", "\"Why?\" said she; then _Mrs._ Bennet left.",
                                           "A new one!\"", "Yes."]


def test_austen_tokenizer_round_trips_and_pads_with_id_0(tok):
    text = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    assert tok.decode(tok(text)["input_ids"]) == text and len(tok) == 512 and tok.pad_token_id == 0
    with pytest.raises(ValueError, match="vocab_size"):
        text_data.austen_tokenizer(100)


def test_text_halves_are_disjoint():
    test, train = (text_data.text_sample("python-docs", 300, seed=1, split=s) for s in ("test", "train"))
    assert len(test) == len(train) == 300 and not set(test) & set(train)
    assert text_data.text_sample("python-docs", 300, seed=1, split="test") == test  # deterministic
    with pytest.raises(ValueError, match="half"):
        text_data.text_sample("python-docs", 10**6, split="train")
    with pytest.raises(ValueError, match="unknown text source"):
        text_data.text_sample("fortunes", 3)


def test_glue_offline_is_the_clear_error(tmp_cache):
    with pytest.raises(AssetNotFoundError) as info:
        text_data.load_glue("rte", "train")
    text = str(info.value)
    assert "glue/rte" in text and str(tmp_cache / "hf-datasets" / "glue" / "rte") in text
    assert "nyu-mll/glue" in text


# ----- a full disk: DiskFull naming the file, nothing left behind ----------------------------------


def _austen_cache(tmp_cache):
    return tmp_cache / "text" / "janeaustenr.json", text_data._austen_lines


def _bpe_cache(tmp_cache):
    return tmp_cache / "text" / "austen-bpe-300.json", lambda: text_data.austen_tokenizer(300)


@pytest.mark.parametrize("entry, fault", [
    (_austen_cache, "pathlib.Path.write_text"),
    (_austen_cache, "os.replace"),
    (_bpe_cache, "os.replace"),
])
def test_a_full_disk_is_named_and_leaves_no_temporary_file(austen, bpe_text, tmp_cache, monkeypatch, entry, fault):
    path, load = entry(tmp_cache)
    full_disk_on_cache(path, load, fault, monkeypatch, tmp_cache)


# ----- one checksum for every derived cache file --------------------------------------------------


def test_an_austen_cache_with_a_flipped_byte_that_still_parses_is_moved_aside_and_rebuilt(austen, austen_lines,
                                                                                         tmp_cache):
    assert text_data._austen_lines() == austen_lines and len(austen) == 1
    cached = tmp_cache / "text" / "janeaustenr.json"
    raw = cached.read_bytes()
    damaged = raw.replace(b"Emma wrote line 1", b"Emma wrote lime 1", 1)  # one byte, inside a string
    assert damaged != raw and sum(a != b for a, b in zip(raw, damaged)) == 1
    cached.write_bytes(damaged)
    assert json.loads(damaged)["Emma"][1] == "Emma wrote lime 1 of the story today."  # still parses
    with pytest.warns(CacheWarning, match=rf"broken cache entry {re.escape(str(cached))} \(ValueError: sha256"):
        assert text_data._austen_lines() == austen_lines
    assert len(austen) == 2  # rebuilt from the source
    [aside] = cached.parent.glob("janeaustenr.json.corrupt-*")
    assert aside.read_bytes() == damaged and cached.read_bytes() == raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text_data._austen_lines() == austen_lines and len(austen) == 2


def test_the_record_is_in_sha256sum_format(austen, tmp_cache):
    text_data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    record = cache.sha256_record(cached)
    assert record.name == "janeaustenr.json.sha256"
    assert record.read_text() == f"{hashlib.sha256(cached.read_bytes()).hexdigest()}  janeaustenr.json\n"


def test_an_entry_of_an_earlier_version_gets_its_sha256_recorded(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(austen_lines))  # as written before checksums: no record
    with pytest.warns(CacheWarning, match="had no sha256 .*: recorded it"):
        assert text_data._austen_lines() == austen_lines
    assert austen == [] and cache.sha256_record(cached).is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text_data._austen_lines() == austen_lines and austen == []


def test_a_damaged_entry_of_an_earlier_version_is_moved_aside(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text('{"Emma": ["half a')
    with pytest.warns(CacheWarning, match="JSONDecodeError"):
        assert text_data._austen_lines() == austen_lines
    assert len(austen) == 1 and len(list(cached.parent.glob("*.corrupt-*"))) == 1


def test_an_unreadable_record_counts_as_damage(austen, austen_lines, tmp_cache):
    text_data._austen_lines()
    cache.sha256_record(tmp_cache / "text" / "janeaustenr.json").write_text("not a checksum\n")
    with pytest.warns(CacheWarning, match="sha256 record .* is unreadable"):
        assert text_data._austen_lines() == austen_lines
    assert len(austen) == 2


def test_the_tokenizer_cache_is_checked_too(bpe_text, tmp_cache):
    tok = text_data.austen_tokenizer(300)
    path = tmp_cache / "text" / "austen-bpe-300.json"
    assert len(bpe_text) == 1 and cache.sha256_record(path).is_file()
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"<pad>"', b'"<pad_"', 1))  # still a tokenizer file
    with pytest.warns(CacheWarning, match=re.escape(str(path))):
        again = text_data.austen_tokenizer(300)
    assert len(bpe_text) == 2 and path.read_bytes() == raw
    assert again("Miss Bennet walked")["input_ids"] == tok("Miss Bennet walked")["input_ids"]


# ----- counts, names and splits -----------------------------------------------------------------


@pytest.mark.parametrize("n, problem", BAD_COUNTS, ids=BAD_COUNT_IDS)
def test_bad_counts_are_one_line_errors(n, problem):
    one_line_raised(lambda: text_data.text_sample("python-docs", n, split="test"), problem)


@pytest.mark.parametrize("call, match", [
    (lambda: text_data.text_sample("fortunes", 3), r"unknown text source 'fortunes'"),
    (lambda: text_data.load_hf_text("gpt2"), r"'gpt2' is not a text classification data set"),
    (lambda: text_data.text_sample("austen", 3, split="validation"), r"austen: unknown split 'validation'"),
    (lambda: text_data.load_glue("sst3"), "unknown GLUE task"),
    (lambda: text_data.load_glue("mnli", "validation"), "unknown split"),
    (lambda: text_data.load_wikitext103("dev"), "unknown split"),
    (lambda: text_data.load_austen(unit="word"), "unknown split"),
])
def test_unknown_names_and_splits_are_one_line_errors(call, match):
    one_line_raised(call, match)


# ----- damaged cache entries ---------------------------------------------------------------------


def test_a_damaged_entry_that_cannot_be_moved_aside_is_named(austen, tmp_cache, monkeypatch):
    text_data._austen_lines()
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.write_text("{}")

    def refused(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied", str(src))

    monkeypatch.setattr(os, "rename", refused)
    one_line_raised(text_data._austen_lines,
                    rf"^cache entry {re.escape(str(cached))} is damaged \(ValueError: sha256 .*\) "
                    r"and cannot be moved aside: Permission denied")


def test_warnings_turned_into_errors_are_not_taken_for_damage(austen, austen_lines, tmp_cache):
    cached = tmp_cache / "text" / "janeaustenr.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(austen_lines))  # an earlier version's entry: reading it warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CacheWarning, match="had no sha256"):
            text_data._austen_lines()
    assert cached.read_text() == json.dumps(austen_lines) and not list(cached.parent.glob("*.corrupt-*"))
    assert text_data._austen_lines() == austen_lines and austen == []  # recorded: read without a rebuild
