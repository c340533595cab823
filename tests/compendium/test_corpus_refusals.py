"""A corpus file that parses to nothing, or to records of another schema, is refused naming the file
and the line, by the corpus loader and by the trainer's token streams that read through it, even
when data/SHA256SUMS was updated with the file (so the checksum rule alone lets it through)."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from compendium import data, paths

ROOT = paths.repo_root()
GOOD = {"id": "doc/1", "source": "nltk_brown", "lang": "en", "license": "public domain", "text": "A sentence."}


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """write(lines): data/corpus/en/nltk_brown.jsonl.gz holding ``lines`` (raw bytes, or records),
    listed with its sha256 in SHA256SUMS (with the project's tokenizer), in a data folder of its own."""
    root = tmp_path / "data"
    tok = f"tokenizers/{__import__('protot.train.tokenizer', fromlist=['x']).TOKENIZER_FILE}"
    (root / "tokenizers").mkdir(parents=True)
    shutil.copy(ROOT / "data" / tok, root / tok)
    (root / "corpus" / "en").mkdir(parents=True)
    monkeypatch.setenv("COMPENDIUM_DATA", str(root))
    monkeypatch.setenv("COMPENDIUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(data.TRAIN_MIX, "en", ("nltk_brown",))

    def write(lines) -> Path:
        path = root / "corpus" / "en" / "nltk_brown.jsonl.gz"
        body = lines if isinstance(lines, bytes) else "".join(
            (ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines).encode()
        with gzip.open(path, "wb") as fh:
            fh.write(body)
        sums = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest()
                for rel in (tok, "corpus/en/nltk_brown.jsonl.gz")}
        (root / "SHA256SUMS").write_text("".join(f"{h}  {rel}\n" for rel, h in sums.items()))
        return path

    return write


def _refused(match: str) -> None:
    from protot.train import packing

    for read in (lambda: data.load_corpus("all", sources=["nltk_brown"]),
                 lambda: data.load_corpus("train"),
                 lambda: packing.token_stream("train")):
        with pytest.raises(data.CorpusFileError, match=match):
            read()


def test_an_empty_corpus_file_is_refused_naming_it(corpus):
    """Before: StopIteration from inside datasets' JSON loader."""
    corpus(b"")
    _refused(r"^data/corpus/en/nltk_brown\.jsonl\.gz: holds no record")
    corpus(b"\n  \n")
    _refused(r"^data/corpus/en/nltk_brown\.jsonl\.gz: holds no record")


@pytest.mark.parametrize("bad, problem", [
    ({k: v for k, v in GOOD.items() if k != "text"}, "no field text"),
    ({**GOOD, "text": ""}, "text not a non-empty string"),
    ({**GOOD, "text": 3}, "text not a non-empty string"),
    ({**GOOD, "body": "x"}, "fields the corpus does not have: body"),
    (["a", "list"], "a JSON list, not a record"),
    ('{"id": "doc/2", "text": ', "not valid JSON"),
])
def test_a_record_of_the_wrong_schema_is_refused_naming_the_line(corpus, bad, problem):
    corpus([GOOD, {**GOOD, "id": "doc/2"}, "", bad])
    _refused(rf"^data/corpus/en/nltk_brown\.jsonl\.gz line 4: {problem}")


def test_a_file_that_is_not_gzip_is_refused_naming_it(corpus):
    path = corpus([GOOD])
    path.write_bytes(b"not gzip at all")
    sums = (path.parents[2] / "SHA256SUMS")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums.write_text("".join(ln if "nltk_brown" not in ln else f"{digest}  corpus/en/nltk_brown.jsonl.gz\n"
                            for ln in sums.read_text().splitlines(keepends=True)))
    _refused(r"^data/corpus/en/nltk_brown\.jsonl\.gz: cannot be read as gzip'd UTF-8 JSON lines")


def test_good_records_load_and_are_counted(corpus):
    corpus([GOOD, {**GOOD, "id": "doc/2", "text": "Another one."}])
    assert data.check_records(paths.data_dir() / "corpus/en/nltk_brown.jsonl.gz") == 2
    assert sorted(data.load_corpus("all", sources=["nltk_brown"])["id"]) == ["doc/1", "doc/2"]


def test_every_committed_corpus_file_is_a_corpus_of_records():
    files = [p for lang in data.TRAIN_MIX for p in data.corpus_files(lang)]
    assert files and all(data.check_records(f) > 0 for f in files)


def test_an_empty_wikitext_is_refused_naming_it(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "corpus").mkdir(parents=True)
    with gzip.open(root / "corpus/en_eval_wikitext2_test.raw.gz", "wb") as fh:
        fh.write(b"\n")
    digest = hashlib.sha256((root / "corpus/en_eval_wikitext2_test.raw.gz").read_bytes()).hexdigest()
    (root / "SHA256SUMS").write_text(f"{digest}  corpus/en_eval_wikitext2_test.raw.gz\n")
    monkeypatch.setenv("COMPENDIUM_DATA", str(root))
    with pytest.raises(data.CorpusFileError, match="en_eval_wikitext2_test.raw.gz: holds no text"):
        data.load_wikitext2_test()


def test_the_circuit_tracers_corpus_reader_refuses_the_same(corpus):
    from accpp import interpret

    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(range(len(text.split())))}

    spec = interpret.CorpusSpec(n_windows=4, window=4, min_pos=1, sources=("nltk_brown",))
    corpus([GOOD, {k: v for k, v in GOOD.items() if k != "text"}])
    with pytest.raises(data.CorpusFileError, match=r"^data/corpus/en/nltk_brown\.jsonl\.gz line 2: no field text"):
        list(interpret.corpus_windows(Tok(), spec))
    corpus(b"")
    with pytest.raises(data.CorpusFileError, match="holds no record"):
        interpret.project_corpus(spec)


def test_check_data_names_the_line_too(corpus):
    import subprocess
    import sys

    corpus([GOOD, {**GOOD, "id": "doc/2", "license": None}])
    root = paths.data_dir()
    want = "data/corpus/en/nltk_brown.jsonl.gz line 2: license not a non-empty string"
    assert [p for p in data.problems(root) if p.startswith(want)]
    out = subprocess.run([sys.executable, "-m", "compendium.data", str(root)], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 1 and want in out.stdout, out.stdout + out.stderr
    corpus([GOOD])
    assert data.problems(root) == []
