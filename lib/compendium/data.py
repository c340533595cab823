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
"""
from __future__ import annotations

import gzip
import hashlib
import json
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


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"data file {path} is missing. The data ship with the repository: restore them with "
        "`git checkout -- data/` (or point COMPENDIUM_DATA at a copy); data/MANIFEST.md lists every file."
    )


def data_file(relative: str) -> Path:
    """Path of a file under data/, with a clear error when it is missing."""
    path = paths.data_dir() / relative
    if not path.exists():
        raise _missing(path)
    return path


def corpus_files(lang: str = "en", sources: Iterable[str] | None = None) -> list[Path]:
    """The .jsonl.gz files of ``lang`` matching ``sources`` (glob patterns; default: the training mix)."""
    if lang not in TRAIN_MIX:
        raise ValueError(f"unknown corpus language {lang!r}; available: {', '.join(TRAIN_MIX)}")
    folder = paths.data_dir() / "corpus" / lang
    if not folder.is_dir():
        raise _missing(folder)
    files: list[Path] = []
    for pattern in sources if sources is not None else TRAIN_MIX[lang]:
        found = sorted(folder.glob(f"{pattern}.jsonl.gz"))
        if not found:
            raise _missing(folder / f"{pattern}.jsonl.gz")
        files.extend(f for f in found if f not in files)
    return files


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
    with gzip.open(data_file("corpus/en_eval_wikitext2_test.raw.gz"), "rt", encoding="utf-8") as fh:
        return fh.read()


def load_fineweb_edu(name: str = "sample-10BT", split: str = "train", streaming: bool = True):
    """FineWeb-Edu (HuggingFaceFW/fineweb-edu), the paper's training corpus. Needs the Hub (online).

    Returns a streaming `datasets.IterableDataset` with a ``text`` column, like :func:`load_corpus`.
    """
    import datasets

    return datasets.load_dataset("HuggingFaceFW/fineweb-edu", name=name, split=split, streaming=streaming)


def load_json(relative: str):
    """Load a JSON list file under data/ (e.g. ``names/first_names.json``)."""
    return json.loads(data_file(relative).read_text(encoding="utf-8"))
