from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compendium import data, paths


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


# -- one rule for every reader: listed in SHA256SUMS, present, no symbolic links ----------------------
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_links(tmp_path, monkeypatch):
    """A data/ folder of hard links to the real files (the same bytes, no copy), as COMPENDIUM_DATA."""
    real = paths.data_dir()
    copy = tmp_path / "data"
    for f in sorted(real.rglob("*")):
        if f.is_file():
            dst = copy / f.relative_to(real)
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, dst)
            except OSError:
                shutil.copy2(f, dst)
    monkeypatch.setenv("COMPENDIUM_DATA", str(copy))
    return copy


def _check_data(data_dir: Path):
    """``python -m compendium.data`` and ``make check-data`` on ``data_dir``: [(returncode, stdout)]."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env["PYTHONPATH"] = str(ROOT / "lib")
    module = subprocess.run([sys.executable, "-m", "compendium.data", str(data_dir)], capture_output=True,
                            text=True, env=env, timeout=120)
    make = subprocess.run(["make", "-s", "-C", str(data_dir.parent), "-f", str(ROOT / "Makefile"), "check-data"],
                          capture_output=True, text=True, env=env, timeout=120)
    return [(module.returncode, module.stdout), (make.returncode, make.stdout)]


def test_a_linked_corpus_file_is_refused_by_every_reader(data_links):
    link = data_links / "corpus/en/openstax_linked.jsonl.gz"  # the training mix's openstax_* picks it up
    link.symlink_to(data_links / "corpus/en/udhr.jsonl.gz")
    for read in (lambda: data.corpus_files("en"), lambda: data.load_corpus("validation"),
                 lambda: data.check_files([link])):
        with pytest.raises(data.DataFileError, match="data/corpus/en/openstax_linked.jsonl.gz is not listed"):
            read()
    for code, out in _check_data(data_links):
        assert code != 0 and "data/corpus/en/openstax_linked.jsonl.gz is a symbolic link, and not listed" in out
    link.unlink()
    # a listed file replaced by a link to the very same bytes is refused too
    brown = data_links / "corpus/en/nltk_brown.jsonl.gz"
    brown.unlink()
    brown.symlink_to(ROOT / "data/corpus/en/nltk_brown.jsonl.gz")
    with pytest.raises(data.DataFileError, match="data/corpus/en/nltk_brown.jsonl.gz is a symbolic link"):
        data.load_corpus("train", sources=["nltk_brown"])
    for code, out in _check_data(data_links):
        assert code != 0 and "data/corpus/en/nltk_brown.jsonl.gz is a symbolic link" in out
    # and so is a file under a linked folder
    brown.unlink()
    os.link(ROOT / "data/corpus/en/nltk_brown.jsonl.gz", brown)
    shutil.move(data_links / "corpus/fr", data_links.parent / "fr")
    (data_links / "corpus/fr").symlink_to(data_links.parent / "fr")
    with pytest.raises(data.DataFileError, match="data/corpus/fr is a symbolic link"):
        data.corpus_files("fr")


def test_unlisted_missing_and_modified_files_are_refused(data_links):
    assert [p.name for p in data.corpus_files("en", ["nltk_*"])] == ["nltk_brown.jsonl.gz", "nltk_misc.jsonl.gz"]
    extra = data_links / "corpus/en/nltk_extra.jsonl.gz"
    shutil.copy(data_links / "corpus/en/udhr.jsonl.gz", extra)
    with pytest.raises(data.DataFileError, match="data/corpus/en/nltk_extra.jsonl.gz is not listed in data/SHA256SUMS"):
        data.corpus_files("en", ["nltk_*"])
    extra.unlink()
    (data_links / "corpus/en/nltk_misc.jsonl.gz").unlink()  # listed, gone: refused, not skipped
    with pytest.raises(data.DataFileError, match="data/corpus/en/nltk_misc.jsonl.gz is missing .*git checkout -- "
                                                 "data/corpus/en/nltk_misc.jsonl.gz"):
        data.corpus_files("en", ["nltk_*"])
    for code, out in _check_data(data_links):
        assert code != 0 and "restore it with: git checkout -- data/corpus/en/nltk_misc.jsonl.gz" in out
    shutil.copy(data_links / "corpus/en/udhr.jsonl.gz", data_links / "corpus/en/nltk_misc.jsonl.gz")
    with pytest.raises(data.DataFileError, match="nltk_misc.jsonl.gz does not match its sha256"):
        data.corpus_files("en", ["nltk_*"])
    with pytest.raises(data.DataFileError, match="names/none.json is not listed"):
        (data_links / "names/none.json").write_text("[]")
        data.load_json("names/none.json")


def test_check_data_passes_on_the_committed_data():
    assert data.problems() == []
    assert all(code == 0 for code, _ in _check_data(paths.data_dir()))
