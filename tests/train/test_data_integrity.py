"""What training reads is what data/SHA256SUMS lists: the token cache is verified on every load
(flipped tokens are caught and rebuilt), unlisted or modified corpus files are refused by the loader
and by ``make check-data``, which names the fix and needs nothing but sha256sum."""
import gzip
import json
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

from compendium import data, paths
from protot.train import packing

from train_helpers import ROOT


def test_flipped_tokens_in_the_cache_are_detected_and_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    good = np.array(packing.token_stream("validation", cache=cache))
    npy = next(cache.glob("*.npy"))
    meta = npy.with_suffix(".json")
    info = json.loads(meta.read_text())
    assert info["npy_sha256"] == data.sha256_of(npy)
    # flip one token in place (the file keeps its size; the tokens stay in the vocabulary)
    offset = npy.stat().st_size - 2 * 1000
    with open(npy, "r+b") as fh:
        fh.seek(offset)
        tok = int.from_bytes(fh.read(2), "little")
        fh.seek(offset)
        fh.write(((tok + 1) % 12288).to_bytes(2, "little"))
    assert not np.array_equal(np.load(npy, mmap_mode="r"), good)
    with pytest.warns(UserWarning, match="does not match the sha256"):
        again = packing.token_stream("validation", cache=cache)
    np.testing.assert_array_equal(again, good)
    assert json.loads(meta.read_text())["npy_sha256"] == data.sha256_of(npy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # now intact: no warning, no rebuild
        np.testing.assert_array_equal(packing.token_stream("validation", cache=cache), good)
    # a truncated cache and a cache written without a recorded sha256 are rebuilt too
    with open(npy, "r+b") as fh:
        fh.truncate(npy.stat().st_size - 64)
    with pytest.warns(UserWarning, match="does not match the sha256"):
        np.testing.assert_array_equal(packing.token_stream("validation", cache=cache), good)
    info = json.loads(meta.read_text())
    del info["npy_sha256"]
    meta.write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="no recorded sha256"):
        np.testing.assert_array_equal(packing.token_stream("validation", cache=cache), good)


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A data/ folder of hard links to the real files (data are never read through symbolic links),
    with a copy of the real SHA256SUMS (COMPENDIUM_DATA)."""
    real = paths.data_dir()
    copy = tmp_path / "data"
    for f in sorted(real.rglob("*")):
        if f.is_file():
            dst = copy / f.relative_to(real)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if f.name == "SHA256SUMS":
                shutil.copy(f, dst)
            else:
                try:
                    os.link(f, dst)
                except OSError:
                    shutil.copy(f, dst)
    monkeypatch.setenv("COMPENDIUM_DATA", str(copy))
    return copy


def test_loader_refuses_unlisted_corpus_files(data_copy, tmp_path, tracked_unchanged):
    key, desc = packing.source_key("train")
    assert key == packing.source_key("train")[0]
    # an extra file that the training mix's pattern openstax_* would pick up
    extra = data_copy / "corpus/en/openstax_extra.jsonl.gz"
    shutil.copy(data_copy / "corpus/en/udhr.jsonl.gz", extra)
    for split in ("train", "validation"):
        with pytest.raises(packing.UnlistedDataError, match="data/corpus/en/openstax_extra.jsonl.gz is not listed"):
            packing.token_stream(split, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    extra.unlink()
    # a modified file is refused, with the command that restores it
    brown = data_copy / "corpus/en/nltk_brown.jsonl.gz"
    brown.unlink()
    shutil.copy(data_copy / "corpus/en/udhr.jsonl.gz", brown)
    with pytest.raises(packing.UnlistedDataError, match=r"git checkout -- data/corpus/en/nltk_brown.jsonl.gz"):
        packing.source_key("train")
    (data_copy / "SHA256SUMS").unlink()
    with pytest.raises(packing.UnlistedDataError, match="SHA256SUMS is missing"):
        packing.source_key("validation")


def _make(folder, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-s", "-C", str(folder), "-f", str(ROOT / "Makefile"), *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def small_repo(tmp_path):
    """A folder with a data/ of three files and their SHA256SUMS, and a pyproject.toml but no .venv."""
    root = tmp_path / "repo"
    (root / "data/corpus/en").mkdir(parents=True)
    for name, text in (("a", "a" * 100), ("openstax_b", "b" * 100)):   # one record of the corpus's schema each
        record = {"id": name, "source": "openstax", "lang": "en", "license": "CC-BY-4.0", "text": text}
        (root / f"data/corpus/en/{name}.jsonl.gz").write_bytes(
            gzip.compress((json.dumps(record) + "\n").encode(), mtime=0))
    (root / "data/names.json").write_text("[]\n")
    (root / "data/MANIFEST.md").write_text("# data\n")
    subprocess.run("sha256sum ./corpus/en/a.jsonl.gz ./corpus/en/openstax_b.jsonl.gz ./names.json > SHA256SUMS",
                   shell=True, cwd=root / "data", check=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def test_check_data_needs_no_setup(small_repo, tracked_unchanged):
    dry = _make(small_repo, "-n", "check-data")
    assert dry.returncode == 0, dry.stderr
    assert "pip" not in dry.stdout and "venv" not in dry.stdout
    r = _make(small_repo, "check-data")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked against SHA256SUMS" in r.stdout
    assert not (small_repo / ".venv").exists()


def test_check_data_fails_on_unlisted_files(small_repo, tracked_unchanged):
    (small_repo / "data/corpus/en/openstax_extra.jsonl.gz").write_bytes(b"x")
    r = _make(small_repo, "check-data")
    assert r.returncode != 0
    assert "data/corpus/en/openstax_extra.jsonl.gz is not listed in data/SHA256SUMS" in r.stdout
    # a name that only extends a listed one is not listed either
    (small_repo / "data/corpus/en/openstax_extra.jsonl.gz").unlink()
    (small_repo / "data/corpus/en/a.jsonl.gz.bak").write_bytes(b"a")
    r = _make(small_repo, "check-data")
    assert r.returncode != 0 and "data/corpus/en/a.jsonl.gz.bak is not listed" in r.stdout


def test_check_data_names_the_fix_for_modified_and_missing_files(small_repo, tracked_unchanged):
    (small_repo / "data/corpus/en/a.jsonl.gz").write_bytes(b"changed")
    (small_repo / "data/names.json").unlink()
    r = _make(small_repo, "check-data")
    assert r.returncode != 0
    assert "restore it with: git checkout -- data/corpus/en/a.jsonl.gz" in r.stdout
    assert "restore it with: git checkout -- data/names.json" in r.stdout
    assert "openstax_b" not in r.stdout
    (small_repo / "data/SHA256SUMS").unlink()
    r = _make(small_repo, "check-data")
    assert r.returncode != 0 and "git checkout -- data/SHA256SUMS" in r.stdout


def test_check_data_passes_on_the_committed_data():
    r = _make(ROOT, "check-data")
    assert r.returncode == 0, r.stdout + r.stderr
