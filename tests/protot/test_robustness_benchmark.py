"""protot.robustness.benchmark: the authors' released inputs read as released (counts, copies and
tag flips of the files in data/ checked against what the files hold), every bad record refused with
a message naming its file and line, and the first records of each slice kept in file order."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from compendium import claims, data
from protot.robustness import benchmark as bm
from protot.robustness.rules import CHANGING, PRESERVING

CLAIM = "protot/robustness-jsd"


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _rec(slice_="typo", original="A cat sat.", perturbed="A cta sat."):
    return json.dumps({"slice": slice_, "original": original, "perturbed": perturbed})


def test_read_records_in_file_order(tmp_path):
    f = _write(tmp_path / "b.jsonl", [_rec(), _rec("synonym", "He is angry.", "He is mad."), _rec()])
    got = bm.read_records(f, PRESERVING)
    want = pd.DataFrame({"line": [1, 2, 3], "slice": ["typo", "synonym", "typo"],
                         "original": ["A cat sat.", "He is angry.", "A cat sat."],
                         "perturbed": ["A cta sat.", "He is mad.", "A cta sat."]})
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("line,message", [
    ('{"slice": "typo", "original": "A."', "not JSON (Expecting ',' delimiter at column 35)"),
    ('["typo", "A.", "B."]', "a record is a JSON object, got list"),
    ('{"slice": "typo", "original": "A."}', "the keys are ['slice', 'original', 'perturbed']; missing ['perturbed'], unexpected []"),
    ('{"slice": "typo", "original": "A.", "perturbed": "B.", "id": 3}',
     "the keys are ['slice', 'original', 'perturbed']; missing [], unexpected ['id']"),
    ('{"slice": "typo", "original": "  ", "perturbed": "B."}', "'original' must be a text that is not empty, got '  '"),
    ('{"slice": "typo", "original": "A.", "perturbed": 7}', "'perturbed' must be a text that is not empty, got 7"),
    ('{"slice": "gender", "original": "A.", "perturbed": "B."}',
     "slice 'gender' is not one of ['abbreviation', 'contraction', 'morphology', 'punctuation', 'spelling', 'synonym', 'typo']"),
    ("", "an empty line (every line holds one record)"),
])
def test_bad_records_name_the_file_and_the_line(tmp_path, line, message):
    f = _write(tmp_path / "bad.jsonl", [_rec(), line, _rec()])
    with pytest.raises(bm.BenchmarkError, match="^" + re.escape(f"bad.jsonl, line 2: {message}") + "$"):
        bm.read_records(f, PRESERVING)
    assert f.read_text(encoding="utf-8").count("\n") == 3        # nothing written


def test_an_empty_file_is_refused(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("", encoding="utf-8")
    with pytest.raises(bm.BenchmarkError, match="^empty.jsonl: no records$"):
        bm.read_records(f, PRESERVING)


def test_distinct_pairs_group_copies_in_order_of_first_appearance():
    records = pd.DataFrame({"line": [1, 2, 3, 4, 5], "slice": ["typo", "typo", "synonym", "typo", "synonym"],
                            "original": ["a.", "b.", "a.", "a.", "a."], "perturbed": ["x.", "y.", "x.", "x.", "z."],
                            "meaning": "preserved"})
    pairs, pair_of = bm.distinct_pairs(records)
    assert pairs["slice"].tolist() == ["typo", "typo", "synonym", "synonym"]      # same texts, other slice: distinct
    assert pairs["original"].tolist() == ["a.", "b.", "a.", "a."]
    assert pairs["edited"].tolist() == pairs["perturbed"].tolist() == ["x.", "y.", "x.", "z."]
    assert pairs["copies"].tolist() == [2, 1, 1, 1] and "line" not in pairs and (pairs["meaning"] == "preserved").all()
    assert pair_of.tolist() == [0, 1, 2, 0, 3]


def test_trailing_tag():
    assert bm.trailing_tag("The cat sat. [gender: male]", "The cat sat. [gender: female]") == (
        "The cat sat.", "[gender: male]", "[gender: female]")
    assert bm.trailing_tag("The cat sat. [gender: male]", "The dog sat. [gender: female]") is None   # sentence edited
    assert bm.trailing_tag("The cat sat. [gender: male]", "The cat sat. [number: plural]") is None   # another tag
    assert bm.trailing_tag("The cat sat. [gender: male]", "The cat sat. [gender: male]") is None     # nothing flips
    assert bm.trailing_tag("The cat sat.", "The cat sits.") is None


def test_describe_by_hand():
    records = pd.DataFrame({"slice": ["gender", "gender", "typo", "typo", "typo"],
                            "original": ["A. [gender: male]", "A. [gender: male]", "Ab.", "Ab.", "Ab."],
                            "perturbed": ["A. [gender: female]", "A. [gender: female]", "Ba.", "Ab.", "Ab!"]})
    got = bm.describe(records, ["typo", "gender"])
    assert got.to_dict("index") == {
        "typo": {"records": 3, "distinct": 3, "tag_flips": 0, "identical": 1, "last_char_edited": 1},
        "gender": {"records": 2, "distinct": 1, "tag_flips": 2, "identical": 0, "last_char_edited": 0}}


def test_the_released_files_as_they_are():
    records = bm.load_both()
    pre, chg = records[records.meaning == "preserved"], records[records.meaning == "changed"]
    assert len(pre) == 3500 and len(chg) == 1500
    # the meaning-preserving file holds its slices in blocks of 500, in this order
    assert list(dict.fromkeys(pre["slice"])) == ["synonym", "typo", "spelling", "morphology", "contraction",
                                                 "punctuation", "abbreviation"]
    assert (pre.groupby("slice", sort=False).size() == 500).all() and (chg.groupby("slice").size() == 500).all()
    d = bm.describe(records, PRESERVING + CHANGING)
    assert d["distinct"].to_dict() == {"abbreviation": 21, "contraction": 99, "morphology": 495, "punctuation": 499,
                                       "spelling": 71, "synonym": 70, "typo": 500,
                                       "gender": 338, "negation": 450, "number": 442}
    assert d.loc[list(PRESERVING), "distinct"].sum() == 1755
    assert (d.loc[list(CHANGING), "tag_flips"] == 500).all() and (d.loc[list(PRESERVING), "tag_flips"] == 0).all()
    assert (d["identical"] == 0).all()
    pairs, pair_of = bm.distinct_pairs(records)
    assert len(pairs) == 1755 + 338 + 450 + 442 and pairs["copies"].sum() == 5000
    assert (pairs.loc[pair_of, ["slice", "original", "perturbed"]].to_numpy()
            == records[["slice", "original", "perturbed"]].to_numpy()).all()


def test_first_records_of_each_slice_in_file_order():
    every = bm.load_benchmark(bm.CHANGING_FILE, CHANGING)
    first = bm.load_benchmark(bm.CHANGING_FILE, CHANGING, 12)
    assert (first.groupby("slice").size() == 12).all()
    want = every[every.groupby("slice").cumcount() < 12].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, want)
    assert first["line"].is_monotonic_increasing
    with pytest.raises(bm.BenchmarkError, match=r"slices with fewer than 501 records: \{'gender': 500, 'negation': 500, 'number': 500\}$"):
        bm.load_benchmark(bm.CHANGING_FILE, CHANGING, 501)
    for bad in (0, -1, "12", True, 2.5):
        with pytest.raises(ValueError, match=re.escape(f"per_slice must be a positive number of records or 'all', got {bad!r}")):
            bm.load_benchmark(bm.CHANGING_FILE, CHANGING, bad)


def test_the_files_are_read_only_as_data_lists_them():
    assert {bm.PRESERVING_FILE, bm.CHANGING_FILE} <= set(data.listed())
    with pytest.raises(FileNotFoundError):
        bm.load_benchmark("protot_robustness/not_there.jsonl", PRESERVING)


def test_the_protocol_names_these_files():
    for profile in ("cpu", "paper", "smoke"):
        p = claims.protocol(CLAIM, profile)
        assert (p["benchmark_preserving"], p["benchmark_changing"]) == (bm.PRESERVING_FILE, bm.CHANGING_FILE)
    assert claims.protocol(CLAIM, "cpu")["benchmark_per_slice"] == "all"
    assert claims.protocol(CLAIM, "paper")["benchmark_per_slice"] == "all"
