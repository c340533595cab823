from __future__ import annotations

import pytest

from compendium import data


def test_split_is_deterministic_and_disjoint():
    ids = [f"doc/{i}" for i in range(5000)]
    val = [i for i in ids if data.in_validation(i)]
    assert val == [i for i in ids if data.in_validation(i)]
    assert 0.01 < len(val) / len(ids) < 0.03  # 2% requested


def test_corpus_split_documents_do_not_overlap():
    val = data.load_corpus("validation", sources=["nltk_brown"])
    train = data.load_corpus("train", sources=["nltk_brown"])
    assert set(val["id"]).isdisjoint(train["id"])
    assert len(val) + len(train) == len(data.load_corpus("all", sources=["nltk_brown"]))


def test_missing_data_file_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPENDIUM_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="git checkout -- data/"):
        data.load_wikitext2_test()
    with pytest.raises(FileNotFoundError, match="missing"):
        data.corpus_files("en")


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown split"):
        data.load_corpus("test")
    with pytest.raises(ValueError, match="unknown corpus language 'de'"):
        data.corpus_files("de")


def test_wikitext_is_the_raw_test_split():
    text = data.load_wikitext2_test()
    assert " = Robert Boulter = " in text[:200]
