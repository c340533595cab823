"""claims.yaml: checks, preconditions and history load into frozen dataclasses; mistakes are
reported at load time naming the file, the claim and the field."""
from __future__ import annotations

import dataclasses
import os

import pytest

from compendium import claims

from ledger_demo import DEMO_CLAIMS


def test_the_real_papers_load_with_their_checks():
    root = os.environ.pop("COMPENDIUM_ROOT", None)  # the repository's own papers/
    try:
        assert set(claims.paper_ids()) >= {"protot", "accpp"}
        for paper in claims.paper_ids():
            p = claims.load_paper(paper)
            assert p.claims, paper
            for c in p.claims.values():
                assert c.source in {"paper", "brief", "aggregator", "reviews", "definition", "compendium"}, c.key
                assert c.statement and c.where
    finally:
        if root is not None:
            os.environ["COMPENDIUM_ROOT"] = root


def test_check_preconditions_history_are_loaded(demo_root):
    c = claims.get_claim("demo/gain")
    assert c.check == claims.Check(
        quantity="gain", op=">=", threshold=5.0,
        all_of=(claims.Condition("ci_low", ">", 0),), assert_at=("cpu",), expect="holds",
        measured_only_at=("paper",), registered="abc1234")
    assert c.preconditions == (claims.Condition("context_effect", ">=", 0.1, id="uses-context",
                                                statement="the output depends on context beyond the last token"),)
    assert c.history == ("2026-11-30: check pre-registered",)
    assert c.quantities == ("gain", "ci_low", "context_effect")
    assert claims.get_claim("demo/loss").check.threshold == (0, 2)
    assert claims.get_claim("demo/loss").check.expect == "does not hold"
    assert claims.get_claim("demo/plain").check is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.check.threshold = 1.0


def _with_check(demo_root, check_yaml: str, extra: str = "") -> None:
    text = DEMO_CLAIMS + ("  - id: bad\n    statement: s\n    where: w\n    notebook: null\n"
                          f"    check: {check_yaml}\n{extra}")
    (demo_root / "papers" / "demo" / "claims.yaml").write_text(text)


@pytest.mark.parametrize("check, message", [
    ("{quantity: x, op: '=>', threshold: 1}", r"check: unknown op '=>'; valid ops: '>=', '>'"),
    ("{quantity: x, op: between, threshold: 1}", r"check: op 'between' needs threshold \[lo, hi\] \(two numbers\), got 1"),
    ("{quantity: x, op: outside, threshold: [1, 2, 3]}", r"check: op 'outside' needs threshold \[lo, hi\]"),
    ("{quantity: x, op: between, threshold: [2, 1]}", r"check: op 'between' needs threshold \[lo, hi\] with lo <= hi, got \[2, 1\]"),
    ("{quantity: x, op: '>=', threshold: big}", r"check: op '>=' needs a number as threshold, got 'big'"),
    ("{quantity: x, op: is, threshold: 1}", r"check: op 'is' needs threshold true or false"),
    ("{quantity: x, op: '>', threshold: 1, assert_at: [gpu]}", r"check: assert_at names unknown profile\(s\) 'gpu'; valid profiles: cpu, paper"),
    ("{quantity: x, op: '>', threshold: 1, measured_only_at: cpu}", r"check: measured_only_at must be a list of profiles"),
    ("{quantity: x, op: '>', threshold: 1, expect: maybe}", r"check: expect must be a verdict \('holds', 'does not hold', 'inconclusive', 'measured only'\), got 'maybe'"),
    ("{quantity: x, op: '>', threshold: 1, treshold: 2}", r"check: unknown field\(s\) treshold"),
    ("{quantity: x, op: '>'}", r"check: missing 'threshold'"),
    ("{quantity: x, op: '>', threshold: 1, all_of: [{quantity: y, op: '<<', threshold: 1}]}", r"check: all_of\[0\]: unknown op '<<'"),
    ("{quantity: x, op: '>', threshold: 1, assert_at: [cpu], measured_only_at: [cpu]}", r"check: profile\(s\) cpu are in both assert_at and measured_only_at"),
])
def test_malformed_checks_name_file_claim_and_field(demo_root, check, message):
    _with_check(demo_root, check)
    with pytest.raises(claims.ClaimsFileError, match=r"papers/demo/claims.yaml: claim 'bad': " + message):
        claims.load_paper("demo")


@pytest.mark.parametrize("pre, message", [
    ("    preconditions:\n      - {statement: s, quantity: q, op: '>', threshold: 1}\n", r"preconditions\[0\]: missing 'id'"),
    ("    preconditions:\n      - {id: a, quantity: q, op: '>', threshold: 1}\n", r"preconditions\[0\]: missing 'statement'"),
    ("    preconditions:\n      - {id: a, statement: s, quantity: q, op: '>', threshold: 1}\n"
     "      - {id: a, statement: t, quantity: q, op: '<', threshold: 1}\n", r"preconditions: ids must be unique"),
    ("    preconditions:\n      - {id: a, statement: s, quantity: q, op: between, threshold: [1]}\n", r"preconditions\[0\]: op 'between'"),
    ("    history: not a list\n", r"history must be a list of dated strings"),
    ("    checks: {}\n", r"unknown field\(s\) checks"),
])
def test_malformed_preconditions_and_history(demo_root, pre, message):
    _with_check(demo_root, "{quantity: x, op: '>', threshold: 1}", pre)
    with pytest.raises(claims.ClaimsFileError, match=r"papers/demo/claims.yaml: claim 'bad': " + message):
        claims.load_paper("demo")


def test_unknown_claims_are_clear_errors(demo_root):
    with pytest.raises(ValueError, match="not defined in papers/demo/claims.yaml; defined: flag, gain, loss, plain"):
        claims.get_claim("demo/nope")
    with pytest.raises(ValueError, match="unknown paper 'nopaper'"):
        claims.get_claim("nopaper/x")
    with pytest.raises(ValueError, match="look like"):
        claims.get_claim("gain")
