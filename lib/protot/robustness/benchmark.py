"""The authors' robustness benchmark as released (data/protot_robustness), read and described.

Each file holds one JSON object per line with the keys ``slice``, ``original`` and ``perturbed``
(data/MANIFEST.md). The texts are used exactly as released: copies are kept (the authors' tables
weigh every record), and :func:`distinct_pairs` groups the copies of a pair, so that a pair is
scored once and resampled with its copies (:mod:`protot.robustness.benchmark_compare`).

    read_records      one file's records, checked line by line (errors name the file and line)
    load_benchmark    a file of data/ (checked against data/SHA256SUMS), the first n records of
                      each slice in file order
    distinct_pairs    the distinct (slice, original, perturbed) pairs with their number of copies
    trailing_tag      the sentence and the two tags of a record that only flips a trailing tag
    describe          per slice: records, distinct pairs, tag flips, identical sides, edits at the end
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from protot.robustness.rules import CHANGING, PRESERVING

#: the authors' files (under data/) of the measurement: meaning-preserving pairs, tag flips
PRESERVING_FILE = "protot_robustness/noise_perturbation_benchmark_clean.jsonl"
CHANGING_FILE = "protot_robustness/intervention_benchmark_clean.jsonl"
KEYS = ("slice", "original", "perturbed")
_TAG = re.compile(r"^(?P<sentence>.*\S) \[(?P<name>[a-z]+): (?P<value>[a-z]+)\]$", re.S)


class BenchmarkError(ValueError):
    """A record of a benchmark file that cannot be read as the measurement needs it."""


def _shown(path: Path) -> str:
    from compendium import paths

    return paths.portable(path)


def read_records(path: str | Path, slices: Sequence[str]) -> pd.DataFrame:
    """Every record of the JSON-lines file ``path``: columns line (1-based), slice, original,
    perturbed, in file order. Each line must be a JSON object with exactly the keys ``KEYS``, string
    texts that are not empty, and a slice among ``slices``; BenchmarkError naming the file and the
    line otherwise (and for an empty file). Nothing is written."""
    path = Path(path)
    where = _shown(path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, start=1):
            text = raw.rstrip("\n")
            if not text.strip():
                raise BenchmarkError(f"{where}, line {n}: an empty line (every line holds one record)")
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                raise BenchmarkError(f"{where}, line {n}: not JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise BenchmarkError(f"{where}, line {n}: a record is a JSON object, got {type(rec).__name__}")
            missing = [k for k in KEYS if k not in rec]
            extra = sorted(set(rec) - set(KEYS))
            if missing or extra:
                raise BenchmarkError(f"{where}, line {n}: the keys are {list(KEYS)}; "
                                     f"missing {missing}, unexpected {extra}")
            for k in KEYS:
                if not isinstance(rec[k], str) or not rec[k].strip():
                    raise BenchmarkError(f"{where}, line {n}: {k!r} must be a text that is not empty, got {rec[k]!r}")
            if rec["slice"] not in slices:
                raise BenchmarkError(f"{where}, line {n}: slice {rec['slice']!r} is not one of {list(slices)}")
            rows.append((n, rec["slice"], rec["original"], rec["perturbed"]))
    if not rows:
        raise BenchmarkError(f"{where}: no records")
    return pd.DataFrame(rows, columns=["line", *KEYS])


def load_benchmark(relative: str, slices: Sequence[str], per_slice: int | str = "all") -> pd.DataFrame:
    """The records of ``relative`` (a file under data/, checked against data/SHA256SUMS) as
    :func:`read_records` gives them, keeping the first ``per_slice`` records of each slice in file
    order (``"all"``: every record). Every slice of ``slices`` must have at least ``per_slice``."""
    from compendium import data

    path = data.data_file(relative)
    records = read_records(path, slices)
    counts = records["slice"].value_counts()
    if per_slice == "all":
        need = 1
    elif isinstance(per_slice, int) and not isinstance(per_slice, bool) and per_slice >= 1:
        need = per_slice
    else:
        raise ValueError(f"per_slice must be a positive number of records or 'all', got {per_slice!r}")
    short = {s: int(counts.get(s, 0)) for s in slices if counts.get(s, 0) < need}
    if short:
        raise BenchmarkError(f"{_shown(path)}: slices with fewer than {need} records: {short}")
    if per_slice != "all":
        records = records[records.groupby("slice").cumcount() < per_slice]
    return records.reset_index(drop=True)


def distinct_pairs(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """(pairs, pair_of_record): the distinct (slice, original, perturbed) triples of ``records`` in
    order of first appearance (with the other columns of its first record, ``line`` dropped), with
    ``copies`` (records holding it) and ``edited`` (= perturbed, the column
    :func:`protot.robustness.scoring.score_pairs` reads); and for each record the index of its pair."""
    key = list(KEYS)
    first = records.drop_duplicates(key).reset_index(drop=True)
    index = pd.MultiIndex.from_frame(first[key])
    pair_of = pd.Series(index.get_indexer(pd.MultiIndex.from_frame(records[key])), index=records.index, name="pair")
    copies = pair_of.value_counts().reindex(range(len(first))).to_numpy()
    pairs = first.drop(columns=["line"], errors="ignore").assign(edited=first["perturbed"], copies=copies)
    return pairs, pair_of


def trailing_tag(original: str, perturbed: str) -> tuple[str, str, str] | None:
    """(sentence, tag of original, tag of perturbed) when both texts are one sentence followed by a
    tag " [name: value]" of the same name and only the value differs; else None."""
    a, b = _TAG.match(original), _TAG.match(perturbed)
    if not a or not b or a["sentence"] != b["sentence"] or a["name"] != b["name"] or a["value"] == b["value"]:
        return None
    return a["sentence"], f"[{a['name']}: {a['value']}]", f"[{b['name']}: {b['value']}]"


def describe(records: pd.DataFrame, slices: Sequence[str] | None = None) -> pd.DataFrame:
    """Per slice (``slices`` order, default the order of first appearance): records, distinct
    pairs, tag_flips (records that only flip a trailing tag, :func:`trailing_tag`), identical
    (records whose two sides are the same text) and last_char_edited (records whose two sides end
    in different characters)."""
    slices = list(slices) if slices is not None else list(dict.fromkeys(records["slice"]))
    rows = {}
    for s in slices:
        r = records[records["slice"] == s]
        rows[s] = {"records": len(r), "distinct": len(r.drop_duplicates(list(KEYS))),
                   "tag_flips": sum(trailing_tag(o, p) is not None for o, p in zip(r.original, r.perturbed)),
                   "identical": int((r.original == r.perturbed).sum()),
                   "last_char_edited": int((r.original.str[-1] != r.perturbed.str[-1]).sum())}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("slice")


def load_both(per_slice: int | str = "all", preserving: str = PRESERVING_FILE,
              changing: str = CHANGING_FILE) -> pd.DataFrame:
    """The measurement's records: the meaning-preserving file's seven slices, then the tag flips'
    three (files under data/), with ``meaning`` ("preserved" / "changed") and ``file``."""
    pre = load_benchmark(preserving, PRESERVING, per_slice).assign(meaning="preserved", file=preserving)
    chg = load_benchmark(changing, CHANGING, per_slice).assign(meaning="changed", file=changing)
    return pd.concat([pre, chg], ignore_index=True)
