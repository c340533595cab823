"""claims.conclude: records first into the run folder, then judges by the pre-registered check."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from compendium import claims

from ledger_demo import tree_digest

GOOD = {"gain": 7.5, "ci_low": 0.4, "context_effect": 0.3}


def M(claim="demo/gain", **values):
    return claims.Measurement(claim=claim, values=values)


def _read(run_dir, claim_id="gain", profile="cpu"):
    return json.loads((run_dir / "results" / "demo" / f"{claim_id}.{profile}.json").read_text())


def test_holds_records_everything_into_the_run_folder(run_dir, demo_root):
    papers_before = tree_digest(demo_root / "papers")
    table = pd.DataFrame({"context": [8, 16], "drop": [1.5, 7.5]})
    m = claims.Measurement(claim="demo/gain", values=dict(GOOD), evidence={"n_contexts": 67},
                           tables={"gain_by_context": table}, config={"word": " women"}, note="a note")
    v = claims.conclude(m, profile="cpu", seed=3)
    assert v.status == "holds" and v.failed_preconditions == () and v.value == 7.5
    e = _read(run_dir)
    assert e["verdict"] == "holds" and e["value"] == 7.5 and e["values"] == GOOD and e["seed"] == 3
    assert e["unit"] == "%" and e["evidence"] == {"n_contexts": 67} and e["config"] == {"word": " women"}
    assert [c["passed"] for c in e["conditions"]] == [True, True]
    assert e["registered_check"]["threshold"] == 5.0 and e["run"] == run_dir.name
    assert e["provenance"]["libraries"]["torch"] != "not installed"
    assert "diff_sha256" in e["provenance"]
    csv = run_dir / "figures" / "demo" / "gain_by_context.csv"
    assert pd.read_csv(csv).equals(table)
    assert e["tables"] == ["gain_by_context.csv"]
    assert tree_digest(demo_root / "papers") == papers_before, "conclude wrote into papers/"
    assert v.path == f"build/runs/{run_dir.name}/results/demo/gain.cpu.json"  # relative to the root


def test_does_not_hold_when_any_condition_of_all_of_fails(run_dir):
    with pytest.raises(AssertionError, match="expected 'holds', got 'does not hold'"):  # cpu is in assert_at
        claims.conclude(M(**{**GOOD, "ci_low": -0.1}), profile="cpu", seed=0)
    e = _read(run_dir)  # recorded before the assertion
    assert e["verdict"] == "does not hold" and [c["passed"] for c in e["conditions"]] == [True, False]


def test_inconclusive_names_the_failed_precondition(run_dir):
    values = {**GOOD, "context_effect": 0.02}
    with pytest.raises(AssertionError) as info:
        claims.conclude(M(**values), profile="cpu", seed=0)
    msg = str(info.value)
    assert "demo/gain at profile 'cpu': expected 'holds', got 'inconclusive'" in msg
    assert "uses-context (the output depends on context beyond the last token)" in msg
    assert "gain = 7.5" in msg and "context_effect = 0.02" in msg  # the values
    e = _read(run_dir)  # recorded before the assertion
    assert e["verdict"] == "inconclusive"
    assert [f["id"] for f in e["failed_preconditions"]] == ["uses-context"]


def test_measured_only_comes_before_preconditions(run_dir):
    # at 'paper' (measured_only_at) the check is not applied, so a failed precondition does not
    # make it inconclusive: there is no test whose power could be in question
    v = claims.conclude(M(**{**GOOD, "context_effect": 0.0}), profile="paper", seed=0)
    assert v.status == "measured only" and "not applied" in v.reason
    assert [p.id for p in v.failed_preconditions] == ["uses-context"]  # still reported, as information


def test_inconclusive_verdict_object(run_dir):
    with pytest.raises(AssertionError):  # cpu is in assert_at
        claims.conclude(M(**{**GOOD, "context_effect": 0.0}), profile="cpu", seed=0)
    e = _read(run_dir)
    assert e["verdict"] == "inconclusive"
    assert [(p["id"], p["statement"]) for p in e["failed_preconditions"]] == [
        ("uses-context", "the output depends on context beyond the last token")]


def test_measured_only_at_a_profile_and_without_a_check(run_dir):
    v = claims.conclude(M(**GOOD), profile="paper", seed=0)
    assert v.status == "measured only" and "not applied" in v.reason
    v = claims.conclude(M("demo/plain", size=12), profile="cpu", seed=0)
    assert v.status == "measured only" and v.value == 12
    assert _read(run_dir, "plain")["verdict"] == "measured only"


def test_expect_does_not_hold_and_is(run_dir):
    assert claims.conclude(M("demo/loss", loss=2.5), profile="cpu").status == "does not hold"
    assert claims.conclude(M("demo/loss", loss=2.0), profile="cpu").status == "holds"  # inclusive
    assert claims.conclude(M("demo/flag", ok=True), profile="cpu").status == "holds"
    with pytest.raises(AssertionError, match="demo/flag at profile 'cpu': expected 'holds', got 'does not hold'"):
        claims.conclude(M("demo/flag", ok=False), profile="cpu")


@pytest.mark.parametrize("op, threshold, value, passed", [
    (">=", 5, 5, True), (">", 5, 5, False), ("<=", 1, 1.0, True), ("<", 1, 1, False),
    ("==", "es-pt", "es-pt", True), ("==", 3, 3.5, False), ("between", (1, 2), 1, True),
    ("between", (1, 2), 2.01, False), ("outside", (1, 2), 2, False), ("outside", (1, 2), 0.5, True),
    ("is", False, False, True), ("is", True, False, False),
])
def test_condition_ops(op, threshold, value, passed):
    assert claims.Condition("q", op, threshold).test(value) is passed


def test_missing_quantity_is_a_value_error_before_recording(run_dir):
    with pytest.raises(ValueError, match=r"demo/gain: the Measurement lacks 'context_effect', which the check or "
                                         r"preconditions in papers/demo/claims.yaml name"):
        claims.conclude(M(gain=7.5, ci_low=0.4), profile="cpu", seed=0)
    with pytest.raises(ValueError, match=r"value 'gain' = 'big' must be a number for op '>='"):
        claims.conclude(M(**{**GOOD, "gain": "big"}), profile="cpu", seed=0)
    with pytest.raises(ValueError, match="non-finite"):
        claims.conclude(M(**{**GOOD, "gain": float("nan")}), profile="cpu", seed=0)
    with pytest.raises(ValueError, match="unknown profile 'gpu'"):
        claims.conclude(M(**GOOD), profile="gpu", seed=0)
    assert not (run_dir / "results").exists(), "something was recorded"


def test_numpy_values_are_recorded_as_plain_numbers(run_dir):
    import numpy as np

    v = claims.conclude(M(**{"gain": np.float32(6.0), "ci_low": np.float64(0.1), "context_effect": np.int64(1)}),
                        profile="cpu")
    assert v.status == "holds" and _read(run_dir)["values"] == {"gain": 6.0, "ci_low": 0.1, "context_effect": 1}


def test_interactive_kernel_gets_its_own_run_folder_lazily(demo_root):
    assert "COMPENDIUM_RUN_DIR" not in os.environ
    runs_dir = demo_root / "build" / "runs"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
    claims.conclude(M("demo/plain", size=1), profile="cpu")
    claims.conclude(M("demo/loss", loss=2.5), profile="cpu")
    made = sorted(runs_dir.iterdir())
    assert len(made) == 1 and made[0].name.startswith("interactive-")
    assert sorted(p.name for p in (made[0] / "results" / "demo").iterdir()) == ["loss.cpu.json", "plain.cpu.json"]
    assert json.loads((made[0] / "params.json").read_text())["kind"] == "interactive"
    assert not (demo_root / "papers" / "demo" / "results").exists()


def test_a_notebook_cannot_choose_its_own_verdict():
    # the only way to record is conclude(), which applies the registered check
    assert not hasattr(claims, "record")


def test_conclude_all_records_every_claim_before_failing(run_dir):
    bad = M(**{**GOOD, "ci_low": -0.1})                    # asserted at cpu: does not hold
    good = M("demo/plain", size=12)                          # no check: measured only
    with pytest.raises(AssertionError, match="demo/gain"):
        claims.conclude_all([bad, good], profile="cpu", seed=0)
    assert _read(run_dir)["verdict"] == "does not hold"
    assert (run_dir / "results" / "demo" / "plain.cpu.json").exists()  # recorded although an earlier one failed
    assert [v.status for v in claims.conclude_all([good], profile="cpu", seed=0)] == ["measured only"]


# --- intervals decide ----------------------------------------------------------------------------
INTERVAL_CLAIM = """\
  - id: ratio
    statement: The ratio lies between 2 and 10.
    where: "§5"
    paper_value: "2-10"
    unit: x
    source: paper
    notebook: null
    check:
      quantity: ratio
      op: between
      threshold: [2, 10]
      interval: [ratio_lo, ratio_hi]
      all_of:
        - {quantity: gap, op: ">", threshold: 0, interval: [gap_lo, spread.gap_hi]}
    min_units: {quantity: n_prompts, at_least: 8, units: prompts, why: "the interval's width"}
"""


@pytest.fixture
def interval_claim(demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + INTERVAL_CLAIM)


def _ratio(ratio_lo, ratio_hi, gap_lo=0.1, gap_hi=0.3, n=8):
    return claims.Measurement("demo/ratio", {"ratio": (ratio_lo + ratio_hi) / 2, "ratio_lo": ratio_lo, "ratio_hi": ratio_hi,
                                              "gap": 0.2, "gap_lo": gap_lo, "n_prompts": n},
                              evidence={"spread": {"gap_hi": gap_hi}})


@pytest.mark.parametrize("lo, hi, status, straddles", [
    (2.0, 10.0, "holds", None),             # inclusive ends, as the point test
    (3.0, 9.0, "holds", None),
    (1.5, 6.0, "inconclusive", "2"),        # the point (3.75) lies inside, the interval does not
    (8.0, 12.0, "inconclusive", "10"),
    (1.0, 12.0, "inconclusive", "2 and 10"),
    (10.5, 14.0, "does not hold", None),    # wholly above
    (0.5, 1.9, "does not hold", None),      # wholly below
])
def test_the_interval_decides_a_between_check(run_dir, interval_claim, lo, hi, status, straddles):
    v = claims.conclude(_ratio(lo, hi), profile="cpu")
    assert v.status == status
    if straddles:
        assert f"the interval of ratio straddles {straddles}" in v.reason
    else:
        assert "straddles" not in v.reason


@pytest.mark.parametrize("gap_lo, gap_hi, status", [
    (0.1, 0.3, "holds"), (-0.1, 0.3, "inconclusive"), (-0.3, 0.0, "does not hold"), (0.0, 0.2, "inconclusive"),
])
def test_the_interval_decides_a_one_sided_condition(run_dir, interval_claim, gap_lo, gap_hi, status):
    # gap > 0 with the interval's high end read from the evidence by a dotted name
    assert claims.conclude(_ratio(3, 9, gap_lo, gap_hi), profile="cpu").status == status


def test_a_definite_failure_outweighs_a_straddle(run_dir, interval_claim):
    v = claims.conclude(_ratio(1.5, 6.0, -0.3, -0.1), profile="cpu")
    assert v.status == "does not hold"


def test_min_units_is_a_named_precondition(run_dir, interval_claim):
    v = claims.conclude(_ratio(3, 9, n=7), profile="cpu")
    assert v.status == "inconclusive" and [p.id for p in v.failed_preconditions] == ["min-units"]
    assert "the result rests on at least 8 prompts (the interval's width)" in v.reason
    assert claims.conclude(_ratio(3, 9, n=8), profile="cpu").status == "holds"


def test_interval_ends_must_be_recorded_and_ordered(run_dir, interval_claim):
    m = _ratio(3, 9)
    del m.values["ratio_hi"]
    with pytest.raises(ValueError, match=r"demo/ratio: the Measurement lacks the interval end 'ratio_hi'"):
        claims.conclude(m, profile="cpu")
    with pytest.raises(ValueError, match=r"low end above its high end"):
        claims.conclude(_ratio(9, 3), profile="cpu")
    assert not (run_dir / "results" / "demo" / "ratio.cpu.json").exists()


def test_a_condition_not_measured_is_allowed_only_under_a_failed_precondition(run_dir, interval_claim):
    # the gap to a model that does not exist yet: recorded as None, with its interval ends
    m = _ratio(3, 9, n=7)
    m.values.update(gap=None, gap_lo=None)
    m.evidence = {}
    v = claims.conclude(m, profile="cpu")
    assert v.status == "inconclusive" and [p.id for p in v.failed_preconditions] == ["min-units"]
    assert v.reason.endswith(" Not measured: gap.")
    assert [o.condition.quantity for o in v.conditions] == ["ratio"]        # the measured one still decided
    assert _read(run_dir, "ratio")["values"]["gap"] is None
    # every precondition passes: a value not measured cannot be judged, and nothing is recorded
    m = _ratio(3, 9, n=8)
    m.values.update(gap=None)
    (run_dir / "results" / "demo" / "ratio.cpu.json").unlink()
    with pytest.raises(ValueError, match=r"^demo/ratio: 'gap' not measured \(None\) although every precondition passed"):
        claims.conclude(m, profile="cpu")
    assert not (run_dir / "results" / "demo" / "ratio.cpu.json").exists()


def test_a_precondition_is_always_measured(run_dir, interval_claim):
    from compendium import judge

    with pytest.raises(judge.UnjudgeableResult, match=r"^demo/ratio: value 'n_prompts' = None must be a number"):
        judge.evaluate(claims.get_claim("demo/ratio"), _ratio(3, 9, n=None).values, "cpu")


@pytest.mark.parametrize("op, threshold, interval, text", [
    (">", 0, (0.0, 0.3), "undecided: the interval straddles 0"),        # an end on the threshold straddles it
    ("<=", 1, (0.5, 1.5), "undecided: the interval straddles 1"),
    ("outside", (2, 10), (9.0, 12.0), "undecided: the interval straddles 10"),
    ("outside", (2, 10), (1.0, 2.0), "undecided: the interval straddles 2"),
    ("outside", (2, 10), (11.0, 12.0), "yes"),
    ("outside", (2, 10), (3.0, 9.0), "no"),
    ("between", (2, 10), (10.0, 12.0), "undecided: the interval straddles 10"),
    ("outside", (2, 10), (1.0, 12.0), "undecided: the interval straddles 2 and 10"),   # covers the whole range
    (">=", 5, (5.0, 5.0), "yes"),                                                     # a degenerate interval
])
def test_how_an_interval_reads(op, threshold, interval, text):
    from compendium import judge

    c = claims.Condition("q", op, threshold, interval=("lo", "hi"))
    mid = sum(interval) / 2
    o = judge._decide(c, mid, {"lo": interval[0], "hi": interval[1]}, {})
    want = f"q = {claims._fmt(mid)}, interval [{claims._fmt(interval[0])}, {claims._fmt(interval[1])}]"
    assert o.describe() == f"{want} (needs {op} {c.threshold_text()}: {text})"
    d = o.as_dict()
    assert d["interval_values"] == list(interval) and d["value"] == mid and d["passed"] is (text == "yes")
    assert d["undecided"] is text.startswith("undecided")


def test_a_point_condition_reads_its_value():
    from compendium import judge

    o = judge._decide(claims.Condition("q", ">=", 5), 5, {}, {})
    assert o.describe() == "q = 5 (needs >= 5: yes)" and o.as_dict() == {
        "quantity": "q", "op": ">=", "threshold": 5, "value": 5, "passed": True}
    assert judge._decide(claims.Condition("q", ">", 5), 5, {}, {}).describe() == "q = 5 (needs > 5: no)"


def test_non_finite_values_cannot_be_judged(demo_root):
    from compendium import judge

    claim = claims.get_claim("demo/gain")
    with pytest.raises(judge.UnjudgeableResult, match=r"^demo/gain: value 'gain' = nan is not finite$"):
        judge.evaluate(claim, {**GOOD, "gain": float("nan")}, "cpu")
    c = claims.Condition("q", ">", 0, interval=("lo", "hi"))
    with pytest.raises(judge.UnjudgeableResult, match=r"^interval end 'hi' = inf must be a finite number$"):
        judge._decide(c, 1.0, {"lo": 0.5, "hi": float("inf")}, {})
    with pytest.raises(judge.UnjudgeableResult, match=r"^interval end 'lo' = 'x' must be a finite number$"):
        judge._decide(c, 1.0, {"lo": "x", "hi": 2.0}, {})
    with pytest.raises(judge.UnjudgeableResult, match=r"^interval \[lo, hi\] = \[2.0, 1.0\] has its low end above"):
        judge._decide(c, 1.0, {"lo": 2.0, "hi": 1.0}, {})
    assert judge.non_finite(float("nan")) == "value" and judge.non_finite({"a": [1.0, {"b": float("-inf")}]}) == "a[1].b"
    assert judge.non_finite({"a": [1.0, 2]}) is None


def test_the_value_shown_is_the_checks_quantity_or_every_value(demo_root):
    from compendium import judge

    assert judge.value_of(claims.get_claim("demo/gain"), GOOD) == 7.5
    assert judge.value_of(claims.get_claim("demo/plain"), {"size": 3}) == 3
    assert judge.value_of(claims.get_claim("demo/plain"), {"size": 3, "n": 4}) == {"size": 3, "n": 4}


def test_min_units_reads_as_a_precondition():
    plain = claims.MinUnits("n", 8, "prompts").as_precondition()
    assert plain.statement == "the result rests on at least 8 prompts"
    assert claims.MinUnits("n", 8, "prompts", "a narrow interval").as_precondition().statement == \
        "the result rests on at least 8 prompts (a narrow interval)"


@pytest.mark.parametrize("claim_values, message", [
    ({"ok": 1}, r"^demo/flag: value 'ok' = 1 must be true or false for op 'is'$"),
    ({"ok": "yes"}, r"^demo/flag: value 'ok' = 'yes' must be true or false for op 'is'$"),
])
def test_values_of_the_wrong_type_for_is(demo_root, claim_values, message):
    from compendium import judge

    with pytest.raises(judge.UnjudgeableResult, match=message):
        judge.evaluate(claims.get_claim("demo/flag"), claim_values, "cpu")


@pytest.mark.parametrize("threshold, value, message", [
    ("es-pt", 3, r"^demo/eq: value 'x' = 3 cannot be compared with 'es-pt' by '=='$"),
    (3, "es-pt", r"^demo/eq: value 'x' = 'es-pt' cannot be compared with 3 by '=='$"),
    (1, True, r"^demo/eq: value 'x' = True cannot be compared with 1 by '=='$"),
])
def test_values_of_the_wrong_type_for_equals(threshold, value, message):
    from compendium import judge

    claim = claims.Claim("demo", "eq", "s", "w", None, "", "paper", None, check=claims.Check("x", "==", threshold))
    with pytest.raises(judge.UnjudgeableResult, match=message):
        judge.evaluate(claim, {"x": value}, "cpu")
    assert judge.evaluate(claim, {"x": threshold}, "cpu")[0] == "holds"


def test_reasons_name_every_condition_and_the_registration(demo_root):
    from compendium import judge

    status, conds, pre, reason = judge.evaluate(claims.get_claim("demo/gain"), GOOD, "cpu")
    assert reason == ("Check (registered in abc1234 before measuring): gain = 7.5 (needs >= 5: yes); "
                      "ci_low = 0.4 (needs > 0: yes).")
    assert [o.value for o in pre] == [0.3]
    assert judge.evaluate(claims.get_claim("demo/plain"), {"size": 1}, "cpu")[3] == "The claim has no registered check."
