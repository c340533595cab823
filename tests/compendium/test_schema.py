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
    ("{quantity: x, op: '>', threshold: 1, registered: '2026-11-30'}", r"check: registered must name the commit that registered the check \(7 to 40 hex digits\), got '2026-11-30'"),
    ("{quantity: x, op: '>', threshold: 1, registered: abc1234, registered_after: lunch}", r"check: registered_after must be one of 'a first measurement', .*measurements., got 'lunch'"),
    ("{quantity: x, op: '>', threshold: 1, interval: [lo]}", r"check: interval must name two recorded values \[low, high\], got \['lo'\]"),
    ("{quantity: x, op: is, threshold: true, interval: [lo, hi]}", r"check: op 'is' compares no numbers, so it takes no interval"),
    ("{quantity: x, op: '>', threshold: 1, all_of: [{quantity: y, op: '<', threshold: 1, interval: [a, 3]}]}", r"check: all_of\[0\]: interval must name two recorded values"),
    ("{quantity: x, op: '>', threshold: 1, point: ''}", r"check: point must say why the condition is judged on its value alone, got ''"),
    ("{quantity: x, op: '>', threshold: 1, point: 3}", r"check: point must say why the condition is judged on its value alone, got 3"),
    ("{quantity: x, op: '>', threshold: 1, interval: [lo, hi], point: exact}", r"check: a condition judged by its interval cannot also be judged on its point value"),
    ("{quantity: x, op: '>', threshold: 1, all_of: [{quantity: y, op: '<', threshold: 1, interval: [a, b], point: exact}]}", r"check: all_of\[0\]: a condition judged by its interval cannot also"),
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
    ("    min_units: 8\n", r"min_units must be a mapping with quantity, at_least and units, got 8"),
    ("    min_units: {quantity: n, at_least: 8}\n", r"min_units: missing 'units'"),
    ("    min_units: {quantity: n, at_least: 0, units: prompts}\n", r"min_units: at_least must be a positive whole number, got 0"),
    ("    min_units: {quantity: n, at_least: 8, units: prompts, floor: 2}\n", r"min_units: unknown field\(s\) floor"),
    ("    preconditions:\n      - {id: a, statement: s, quantity: q, op: '>', threshold: 1, interval: [l, h]}\n",
     r"preconditions\[0\]: unknown field\(s\) interval"),
    ("    protocol: {gpu: {n: 1}}\n", r"protocol: unknown key 'gpu'; allowed: all, cpu, paper"),
    ("    protocol: {cpu: 8}\n", r"protocol.cpu must be a mapping of settings, got 8"),
    ("    protocol: {all: {model: {name: x}}}\n", r"protocol.all.model: settings are numbers, strings, true/false or lists"),
    ("    protocol: []\n", r"protocol must be a mapping of all, cpu, paper, smoke to settings"),
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


def test_registration_interval_and_min_units_are_loaded(demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + (
        "  - id: ratio\n    statement: s\n    where: w\n    notebook: null\n"
        "    check: {quantity: r, op: between, threshold: [2, 10], interval: [r_lo, r_hi], registered: 0123abcd,\n"
        "            registered_after: a first measurement, all_of: [{quantity: g, op: '>', threshold: 0, interval: [g_lo, g_hi]}]}\n"
        "    min_units: {quantity: n_prompts, at_least: 8, units: prompts, why: the interval's width}\n"))
    c = claims.get_claim("demo/ratio")
    assert c.check.interval == ("r_lo", "r_hi") and c.check.main.interval == ("r_lo", "r_hi")
    assert c.check.all_of[0].interval == ("g_lo", "g_hi")
    assert c.check.registered == "0123abcd" and c.check.registered_after == "a first measurement"
    assert c.check.registration() == "registered in 0123abcd after a first measurement; see history"
    assert claims.get_claim("demo/gain").check.registration() == "registered in abc1234 before measuring"
    assert c.min_units == claims.MinUnits("n_prompts", 8, "prompts", "the interval's width")
    assert c.quantities == ("r", "g", "n_prompts")
    pre = c.all_preconditions()[-1]
    assert (pre.id, pre.quantity, pre.op, pre.threshold) == ("min-units", "n_prompts", ">=", 8)
