"""What a verdict rests on (compendium.basis), on planted entries: the units from min_units, from a
recorded count, from the run's config or from the protocol; the model from the config, a model the
notebook trained, the protocol's per-architecture models or its model size; what failed, in the
words of judge.derive's outcomes; and when two profiles disagree, including a value recorded under
an earlier check (the older format, without values) that lies on the other side of the check."""
from __future__ import annotations

from compendium import basis, checks


def _claim(**kw) -> checks.Claim:
    base = dict(paper="demo", id="c", statement="S.", where="§1", paper_value=None, unit="x", source="paper",
                notebook=None, check=checks.Check("ratio", ">", 1.0))
    return checks.Claim(**{**base, **kw})


def test_units_come_from_min_units_then_a_recorded_count_then_the_config_then_the_protocol():
    mu = checks.MinUnits("n_used", 5, "validation blocks of 256 tokens")
    claim = _claim(min_units=mu, protocol={"all": {"n_blocks": 64}, "paper": {"n_blocks": 1024}})
    got = basis.units_of(claim, {"values": {"n_used": 30, "n_prompts": 9}}, "cpu")
    assert (got.text, got.short, got.source) == ("30 validation blocks of 256 tokens", "30 blocks", "min_units")
    got = basis.units_of(_claim(), {"values": {"n_prompts": 9, "n_circuits": 4}}, "cpu")
    assert (got.text, got.source) == ("9 prompts", "values")                    # the first known count only
    got = basis.units_of(_claim(), {"values": {}, "config": {"n_behaviour": {"m1": 480, "m2": 200}, "n_traced": 40}},
                         "cpu")
    assert got.text == "40 traced prompts, ≥200 behaviour prompts" and got.short == "40 traced prompts +1"
    assert "the run's recorded sizes (n_traced, n_behaviour)" == got.where
    got = basis.units_of(claim, {"values": {"n_used": True}}, "paper")         # a flag is no count
    assert (got.text, got.source) == ("1024 blocks", "protocol")
    assert basis.units_of(_claim(), {"values": {"ratio": 2.0}}, "cpu") is None
    assert basis.units_of(claim, None, "cpu") is None


def test_the_model_comes_from_what_the_run_recorded_before_the_protocol():
    claim = _claim(protocol={"all": {"model": "registered-model"}})
    assert basis.models_of(claim, {"config": {"model": "models/run-model: run (10 M params)"}}, "cpu") == ("run-model",)
    assert basis.models_of(claim, {"config": {}}, "cpu") == ("registered-model",)
    many = {"config": {"models": {"A": "models/a-small: a", "B": "models/b-small: b", "C": "models/a-small: a"}}}
    assert basis.models_of(claim, many, "cpu") == ("a-small", "b-small")
    listed = _claim(protocol={"all": {"models": ["b-small", "a-small"]}})     # in the protocol's order
    assert basis.models_of(listed, many, "cpu") == ("b-small", "a-small")
    assert basis.models_text(("a-small", "b-small", "c")) == "a-small +2" and basis.models_text(()) == ""
    trained = {"config": {"train": {"arch": "protot", "size": "tiny"}}}
    assert basis.models_of(claim, trained, "cpu") == ("protot tiny (trained here)",)
    built = {"config": {"model": {"size": "small", "num_hidden_layers": 2}}}
    assert basis.models_of(claim, built, "cpu") == ("small size, 2 layers",)
    arch = _claim(protocol={"all": {"protot_model": "p-small", "llama_model": "l-small"}})
    assert basis.models_of(arch, {"config": {}}, "cpu") == ("p-small", "l-small")
    sized = _claim(protocol={"all": {"model_size": "small"}})
    assert basis.models_of(sized, None, "cpu") == ("small size",)
    assert basis.models_of(_claim(), {"config": {}}, "cpu") == ()


def _judged(status, passed, value=2.0, **main):
    return {"derived_status": status, "value": value, "unit": "x", "values": {"ratio": value},
            "conditions": [{"quantity": "ratio", "op": ">", "threshold": 1.0, "value": value, "passed": passed, **main}],
            "failed_preconditions": []}


def test_what_failed_is_read_from_the_outcomes():
    assert basis.failing(_judged("does not hold", False, 0.5)) == ["ratio > 1 failed (0.5)"]
    undecided = _judged("inconclusive", False, 1.2, interval_values=[0.8, 1.6], undecided=True)
    assert basis.failing(undecided) == ["ratio > 1 undecided: its interval 0.8 to 1.6 straddles the threshold"]
    assert basis.failing_short(undecided) == "undecided ratio > 1"
    pre = {**_judged("inconclusive", True), "failed_preconditions": [
        {"id": "enough", "quantity": "n", "op": ">=", "threshold": 5, "value": 3}]}
    assert basis.failing(pre)[0] == "precondition enough failed: n = 3 (needs >= 5)"
    assert basis.failing_short(pre) == "precondition enough"
    assert basis.failing(_judged("holds", True)) == [] and basis.failing_short(None) == ""


def test_profiles_disagree_on_opposite_verdicts_or_opposite_sides_of_the_main_condition():
    claim = _claim()
    holds, fails = _judged("holds", True), _judged("does not hold", False, 0.5)
    assert basis.disagreement(claim, holds, fails, "paper") == "at odds with paper, where it does not hold"
    assert basis.disagreement(claim, holds, _judged("holds", True, 3.0), "paper") == ""
    inconclusive = _judged("inconclusive", False, 1.2, interval_values=[0.8, 1.6], undecided=True)
    assert basis.disagreement(claim, holds, inconclusive, "paper") == ""
    # the older format: no values, its value in the unit of the other profile's judged result
    old = {"derived_status": "not judged", "value": 0.4, "unit": "x"}
    assert basis.disagreement(claim, old, holds, "cpu").startswith(
        "at odds with cpu: does not meet ratio > 1 on its value alone (recorded under an earlier check)")
    assert basis.disagreement(claim, holds, old, "paper").startswith("at odds with paper: meets ratio > 1")
    assert basis.disagreement(claim, {**old, "unit": "another quantity"}, holds, "cpu") == ""   # not comparable
    assert basis.disagreement(claim, {**old, "value": 4.0}, holds, "cpu") == ""                  # same side
    measured = {**_judged("measured only", False, 0.5)}
    assert basis.disagreement(claim, measured, holds, "cpu").startswith("at odds with cpu: does not meet ratio > 1")
    assert basis.disagreement(claim, holds, None, "paper") == ""


def test_own_claims_are_those_of_source_compendium():
    assert basis.is_own(_claim(source="compendium")) and not basis.is_own(_claim(source="brief"))
