"""The offline corpus and lists, loaded with `datasets` (local JSONL, no network).

Layout of ``data/`` (see data/MANIFEST.md for sources and licences)::

    corpus/<lang>/<source>.jsonl.gz   one document per line: {"id", "source", "lang", "license", "text"}
    corpus/en_eval_wikitext2_test.raw.gz   WikiText-2 raw test split (out-of-domain evaluation)
    names/first_names.json, names/ioi_greaterthan_templates.json
    tokenizers/gpt2_tokenizer.json

The train/validation split is at the document level and deterministic: a document goes to
validation when the first 8 hex digits of sha256(id) fall below ``validation_fraction`` of 2**32.
It depends on nothing but the document id, so adding files never moves a document across splits.

FineWeb-Edu, the paper's corpus, is reachable through :func:`load_fineweb_edu` for users who are
online (it streams from the Hugging Face Hub).

What may be read is what ``data/SHA256SUMS`` lists. One rule, :func:`check_files`, serves every
reader (the corpus loaders here, the trainer's token streams, ``make check-data`` through
``python -m compendium.data``): a file must be listed, present, a regular file (not a symbolic
link, nor under a linked folder) and match its sha256. :func:`corpus_files` lists the corpus from
the manifest and refuses any file on disk that a pattern would pick up but the manifest does not
list, so an extra or linked file can never slip into the training or validation text.
:func:`load_corpus` reads a corpus file only once :func:`check_records` has found every line a
record of the corpus's schema (:data:`RECORD_FIELDS`, each a non-empty string) and at least one
record; anything else (an empty file whose sha256 was updated with it, a line that is not JSON, a
record missing ``text``) is :class:`CorpusFileError` naming the file and the line.
"""
from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from compendium import paths

#: The training mix per language (glob patterns over data/corpus/<lang>/<pattern>.jsonl.gz).
#: English: OpenStax textbooks + Wikipedia leads + Brown + misc (about 23.7 M GPT-2 tokens).
TRAIN_MIX: dict[str, tuple[str, ...]] = {
    "en": ("openstax_*", "wiki_vital_summaries", "nltk_brown", "nltk_misc"),
    "es": ("wiki_vital_summaries", "openstax_quimica-bundle", "fortunes_es"),
    "fr": ("wiki_vital_summaries", "genesis"),
    "pt": ("mac_morpho", "fortunes_br", "genesis"),
}
SPLITS = ("train", "validation", "all")
DEFAULT_VALIDATION_FRACTION = 0.02
SUMS = "SHA256SUMS"


class DataFileError(ValueError):
    """A data file is not listed in data/SHA256SUMS, is missing, is a symbolic link, or differs from
    its listed sha256; the message names the file and the fix."""


class CorpusFileError(DataFileError):
    """A corpus file holds no record, or a line that is not a record of the corpus's schema; the
    message names the file and the line."""


#: The fields of every corpus record (one JSON object a line), each a non-empty string.
RECORD_FIELDS = ("id", "source", "lang", "license", "text")


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"data file {path} is missing. The data ship with the repository: restore them with "
        "`git checkout -- data/` (or point COMPENDIUM_DATA at a copy); data/MANIFEST.md lists every file."
    )


def sha256_of(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB pieces: the one file hash of the project's
    data, token caches, checkpoints and model folders."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=512)
def _cached_sha256(path: str, ino: int, mtime_ns: int, size: int) -> str:
    return sha256_of(Path(path))


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (path, inode, mtime, size)."""
    st = Path(path).stat()
    return _cached_sha256(str(path), st.st_ino, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=8)
def _parse_sums(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    out = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition(" ")
        name = name.lstrip(" *")
        if len(digest) != 64 or not name:
            raise DataFileError(f"data/{SUMS} line {n} is not '<sha256>  <file>': {line[:80]!r}; "
                                f"restore it with: git checkout -- data/{SUMS}")
        out[name[2:] if name.startswith("./") else name] = digest.lower()
    return out


def listed(root: Path | None = None) -> dict[str, str]:
    """{path relative to data/: sha256} of every file data/SHA256SUMS lists."""
    root = Path(root) if root is not None else paths.data_dir()
    sums = root / SUMS
    if not sums.is_file():
        raise DataFileError(f"data/{SUMS} is missing: it lists the data files that may be read; "
                            f"restore it with: git checkout -- data/{SUMS}")
    st = sums.stat()
    return _parse_sums(str(sums), st.st_mtime_ns, st.st_size)


def _relative(path: Path, root: Path) -> str:
    path = Path(path)
    if not path.is_absolute():
        path = root / path
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.resolve().relative_to(root.resolve()).as_posix()


def _link_under(rel: str, root: Path) -> str | None:
    """The first component of ``rel`` below ``root`` that is a symbolic link, if any."""
    here = root
    for part in Path(rel).parts:
        here = here / part
        if here.is_symlink():
            return here.relative_to(root).as_posix()
    return None


def check_files(files: Iterable[str | os.PathLike], *, hashes: bool = True, root: Path | None = None) -> list[Path]:
    """The one rule for every reader of data/: each file must be listed in data/SHA256SUMS, exist,
    be a regular file reached without symbolic links, and (``hashes``) match its listed sha256.
    Returns the files as paths; raises :class:`DataFileError` naming the first that breaks it."""
    root = Path(root) if root is not None else paths.data_dir()
    sums = listed(root)
    out = []
    for f in files:
        rel = _relative(Path(f), root)
        if rel not in sums:
            raise DataFileError(
                f"data/{rel} is not listed in data/{SUMS}: it is not part of the compendium's data, and "
                "reading it would change the training/evaluation text. Remove it (or, if it belongs, add it to "
                f"data/{SUMS} and data/MANIFEST.md).")
        link = _link_under(rel, root)
        if link is not None:
            raise DataFileError(
                f"data/{link} is a symbolic link: data are read only from the files themselves, so that what "
                f"is read is what data/{SUMS} checked; replace it with the file: git checkout -- data/{link}")
        path = root / rel
        if not path.is_file():
            raise DataFileError(f"data/{rel} is missing (listed in data/{SUMS}); restore it with: "
                                f"git checkout -- data/{rel}")
        if hashes and file_sha256(path) != sums[rel]:
            raise DataFileError(
                f"data/{rel} does not match its sha256 in data/{SUMS} (modified or damaged); restore it "
                f"with: git checkout -- data/{rel}")
        out.append(path)
    return out


def problems(root: Path | None = None) -> list[str]:
    """Everything wrong with data/ as a whole (what ``make check-data`` prints): every listed file
    checked by :func:`check_files` (and each corpus file by :func:`check_records`), and every entry
    on disk (links included) that is not listed.
    Documentation (``*.md``) and SHA256SUMS itself are not data."""
    root = Path(root) if root is not None else paths.data_dir()
    try:
        sums = listed(root)
    except DataFileError as err:
        return [str(err)]
    out = []
    for rel in sorted(sums):
        try:
            check_files([rel], root=root)
            if fnmatch.fnmatchcase(rel, "corpus/*/*.jsonl.gz"):  # a corpus file: records, at least one
                check_records(root / rel, root=root)
        except DataFileError as err:
            out.append(str(err))
    for dirpath, dirnames, filenames in os.walk(root):  # links to folders are listed, not entered
        for name in sorted(filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]):
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel == SUMS or name.endswith(".md") or rel in sums:
                continue
            kind = "a symbolic link, and " if (Path(dirpath) / name).is_symlink() else ""
            out.append(f"data/{rel} is {kind}not listed in data/{SUMS}: remove it (training would read it), "
                       f"or list it in {SUMS} and data/MANIFEST.md")
    return out


def data_file(relative: str) -> Path:
    """Path of a file under data/, checked by :func:`check_files` (a missing file names the fix)."""
    path = paths.data_dir() / relative
    if not path.exists() and not path.is_symlink():
        raise _missing(path)
    return check_files([path])[0]


def corpus_files(lang: str = "en", sources: Iterable[str] | None = None) -> list[Path]:
    """The .jsonl.gz files of ``lang`` matching ``sources`` (glob patterns; default: the training mix),
    listed from data/SHA256SUMS and checked by :func:`check_files`. A file in the folder that a
    pattern matches but the manifest does not list (a link included) is refused, not skipped."""
    if lang not in TRAIN_MIX:
        raise ValueError(f"unknown corpus language {lang!r}; available: {', '.join(TRAIN_MIX)}")
    root = paths.data_dir()
    folder = root / "corpus" / lang
    if not folder.is_dir():
        raise _missing(folder)
    sums = listed(root)
    on_disk = sorted(p.name for p in folder.iterdir())  # links too, dangling or not
    files: list[str] = []
    for pattern in sources if sources is not None else TRAIN_MIX[lang]:
        glob = f"{pattern}.jsonl.gz"
        found = sorted({f"corpus/{lang}/{n}" for n in on_disk if fnmatch.fnmatchcase(n, glob)}
                       | {rel for rel in sums if rel.startswith(f"corpus/{lang}/")
                          and "/" not in rel[len(f"corpus/{lang}/"):] and fnmatch.fnmatchcase(rel.rsplit("/", 1)[1], glob)})
        if not found:
            raise _missing(folder / glob)
        files.extend(f for f in found if f not in files)
    return check_files(files, root=root)


def _record_problem(line: str) -> str | None:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not a record {{{', '.join(RECORD_FIELDS)}}}"
    missing = [k for k in RECORD_FIELDS if k not in rec]
    extra = sorted(k for k in rec if k not in RECORD_FIELDS)
    bad = [k for k in RECORD_FIELDS if k in rec and not (isinstance(rec[k], str) and rec[k].strip())]
    if missing or extra or bad:
        return "; ".join(
            ([f"no field {', '.join(missing)}"] if missing else [])
            + ([f"fields the corpus does not have: {', '.join(extra)}"] if extra else [])
            + ([f"{', '.join(bad)} not a non-empty string"] if bad else []))
    return None


@lru_cache(maxsize=512)
def _checked_records(path: str, sha256: str, shown: str) -> int:
    fix = "restore it with: git checkout -- " + shown if shown.startswith("data/") else "restore the file"
    n = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                problem = _record_problem(line)
                if problem:
                    raise CorpusFileError(f"{shown} line {number}: {problem}; every line of a corpus file is a "
                                          f"record {{{', '.join(RECORD_FIELDS)}}} ({fix})")
                n += 1
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # not gzip, cut short, not UTF-8
        where = f" after line {n}" if n else ""
        raise CorpusFileError(f"{shown}{where}: cannot be read as gzip'd UTF-8 JSON lines "
                              f"({type(exc).__name__}: {exc}); {fix}") from None
    if n == 0:
        raise CorpusFileError(f"{shown}: holds no record (it decompresses to nothing but blank lines); a corpus "
                              f"file holds one record {{{', '.join(RECORD_FIELDS)}}} a line ({fix})")
    return n


def check_records(path: str | os.PathLike, root: Path | None = None) -> int:
    """The number of records in the corpus file ``path`` (a .jsonl.gz), each line checked against
    :data:`RECORD_FIELDS`; :class:`CorpusFileError` naming the file (as ``data/...`` when it lies in
    ``root``, default the data folder) and the line of the first that is not a record, or when there
    is none. Remembered per file content (its sha256)."""
    path = Path(path)
    try:
        shown = f"data/{_relative(path, Path(root) if root is not None else paths.data_dir())}"
    except ValueError:
        shown = str(path)
    return _checked_records(str(path), file_sha256(path), shown)


def in_validation(doc_id: str, validation_fraction: float = DEFAULT_VALIDATION_FRACTION) -> bool:
    """Deterministic document-level split: True when ``doc_id`` belongs to the validation split."""
    h = int(hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:8], 16)
    return h < validation_fraction * 2**32


def load_corpus(
    split: str = "train",
    lang: str = "en",
    sources: Iterable[str] | None = None,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
):
    """A `datasets.Dataset` of documents (columns id, source, lang, license, text) for ``split``."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must lie in (0, 1), got {validation_fraction}")
    import datasets

    files = [str(f) for f in corpus_files(lang, sources)]
    for f in files:
        check_records(f)
    ds = datasets.load_dataset(
        "json", data_files=files, split="train", cache_dir=str(paths.cache_dir() / "datasets")
    )
    if split == "all":
        return ds
    want_val = split == "validation"
    return ds.filter(
        lambda ids: [in_validation(i, validation_fraction) == want_val for i in ids],
        input_columns="id", batched=True, desc=f"{lang} {split} split",
    )


def load_wikitext2_test() -> str:
    """The WikiText-2 raw test split as one string (the standard out-of-domain LM evaluation text)."""
    path = data_file("corpus/en_eval_wikitext2_test.raw.gz")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise CorpusFileError(f"data/corpus/en_eval_wikitext2_test.raw.gz: cannot be read as gzip'd UTF-8 text "
                              f"({type(exc).__name__}: {exc})") from None
    if not text.strip():
        raise CorpusFileError("data/corpus/en_eval_wikitext2_test.raw.gz: holds no text (it decompresses to "
                              "nothing); restore it with: git checkout -- data/corpus/en_eval_wikitext2_test.raw.gz")
    return text


def load_fineweb_edu(name: str = "sample-10BT", split: str = "train", streaming: bool = True):
    """FineWeb-Edu (HuggingFaceFW/fineweb-edu), the paper's training corpus. Needs the Hub (online).

    Returns a streaming `datasets.IterableDataset` with a ``text`` column, like :func:`load_corpus`.
    """
    import datasets

    return datasets.load_dataset("HuggingFaceFW/fineweb-edu", name=name, split=split, streaming=streaming)


def load_json(relative: str):
    """Load a JSON list file under data/ (e.g. ``names/first_names.json``)."""
    return json.loads(data_file(relative).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    """``python -m compendium.data [DATA_DIR]`` (what ``make check-data`` runs; the standard library
    only, no set-up needed): print every problem of :func:`problems` and exit 1, or confirm."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else paths.data_dir()
    found = problems(root)
    for line in found:
        print(line)
    if found:
        return 1
    print(f">> data/ checked against {SUMS} (every file listed, a regular file, and intact)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
