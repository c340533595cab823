"""What the schema's objects say and hold, exactly: the text the claims tables print (describe,
threshold_text, _fmt, registration), the mappings recorded with every result (as_dict) and hashed
to tell one check from another (definition), each profile's protocol, and each comparator's edge.
"""
from __future__ import annotations

import pytest

from compendium.checks import Check, Claim, Condition, MinUnits, _fmt


@pytest.mark.parametrize("value, text", [
    (None, "—"), (True, "true"), (False, "false"),
    (0, "0"), (3, "3"), (-7, "-7"), (10 ** 12, "1000000000000"),
    (0.0, "0"), (-0.0, "-0"), (2.0, "2"), (0.5, "0.5"), (-2.5, "-2.5"), (16.6, "16.6"), (1 / 3, "0.3333"),
    (12.345, "12.35"), (99999.0, "1e+05"), (123456.0, "1.235e+05"), (32768.0, "3.277e+04"), (1e21, "1e+21"),
    (1e-4, "0.0001"), (1e-5, "1e-05"), (-0.000123456, "-0.0001235"),
    ("yes", "yes"), ("", ""),
    ([], "[]"), ([1, 0.5, None, True], "[1, 0.5, —, true]"), ((1, 2), "[1, 2]"), ([[1, 2.25]], "[[1, 2.25]]"),
    ({"a": 1, "b": [0.25, None]}, "a: 1, b: [0.25, —]"), ({}, ""),
])
def test_fmt_without_a_unit(value, text):
    assert _fmt(value) == text


@pytest.mark.parametrize("value, unit, text", [
    (16.6, "%", "16.6 %"), (3, "nats", "3 nats"), (-0.25, "nats", "-0.25 nats"), (2.0, "x", "2 x"),
    (5, "", "5"), (5.5, "  ", "5.5"),                       # a blank unit leaves no space behind
    ("yes", "%", "yes"), (True, "%", "true"), (None, "%", "—"), ([1, 2], "%", "[1, 2]"),   # numbers only
    ({"a": 1}, "%", "a: 1"),
])
def test_fmt_puts_the_unit_after_numbers_only(value, unit, text):
    assert _fmt(value, unit) == text


@pytest.mark.parametrize("condition, text", [
    (Condition("gain", ">=", 5.0), "gain >= 5"),
    (Condition("p", "<", 0.05), "p < 0.05"),
    (Condition("n", ">", 32768), "n > 32768"),
    (Condition("n", "<=", 32768.0), "n <= 3.277e+04"),
    (Condition("loss", "between", (0, 2)), "loss between [0, 2]"),
    (Condition("gap", "outside", (-1.5, 1e-6)), "gap outside [-1.5, 1e-06]"),
    (Condition("label", "==", "yes"), "label == 'yes'"),
    (Condition("label", "==", "it's"), "label == \"it's\""),
    (Condition("n", "==", 3), "n == 3"),
    (Condition("ok", "is", True), "ok is true"),
    (Condition("ok", "is", False), "ok is false"),
])
def test_a_condition_reads_as_the_tables_print_it(condition, text):
    assert condition.describe() == text
    assert condition.threshold_text() == text.split(" ", 2)[2]


def test_a_check_reads_as_its_conditions_joined():
    alone = Check("gain", ">=", 5.0)
    assert alone.describe() == "gain >= 5"
    both = Check("gain", ">=", 5.0, all_of=(Condition("ci_low", ">", 0), Condition("n", "between", (1, 3))),
                 interval=("g_lo", "g_hi"), point=None)
    assert both.describe() == "gain >= 5 and ci_low > 0 and n between [1, 3]"
    assert both.main == Condition("gain", ">=", 5.0, interval=("g_lo", "g_hi"))
    assert both.conditions == (both.main, *both.all_of)
    assert Check("x", "<", 1, point="exact").main.point == "exact"


@pytest.mark.parametrize("registered, after, text", [
    (None, None, "registered before measuring"),
    ("", None, "registered before measuring"),
    ("abc1234", None, "registered in abc1234 before measuring"),
    ("abc1234", "a first measurement", "registered in abc1234 after a first measurement; see history"),
    (None, "earlier checks' measurements", "registered after earlier checks' measurements; see history"),
    ("0123abcd", "earlier checks' measurements",
     "registered in 0123abcd after earlier checks' measurements; see history"),
])
def test_registration_says_how_the_check_came_to_be(registered, after, text):
    assert Check("x", ">", 1, registered=registered, registered_after=after).registration() == text


def test_as_dict_holds_every_field_that_is_set_in_order():
    plain = Condition("q", ">", 1).as_dict()
    assert plain == {"quantity": "q", "op": ">", "threshold": 1} and list(plain) == ["quantity", "op", "threshold"]
    ranged = Condition("q", "between", (0, 2.5), interval=("lo", "hi")).as_dict()
    assert ranged == {"quantity": "q", "op": "between", "threshold": [0, 2.5], "interval": ["lo", "hi"]}
    assert isinstance(ranged["threshold"], list) and isinstance(ranged["interval"], list)
    point = Condition("q", "is", True, point="a yes/no outcome").as_dict()
    assert point == {"quantity": "q", "op": "is", "threshold": True, "point": "a yes/no outcome"}
    precondition = Condition("q", ">=", 8, id="min-units", statement="").as_dict()
    assert list(precondition) == ["id", "statement", "quantity", "op", "threshold"]
    assert precondition == {"id": "min-units", "statement": "", "quantity": "q", "op": ">=", "threshold": 8}


def test_a_checks_as_dict_is_its_main_condition_and_every_setting():
    c = Check("gain", "outside", (1, 2), all_of=(Condition("n", ">", 0),), assert_at=("cpu",),
              expect="does not hold", measured_only_at=("paper",), registered="abc1234",
              registered_after="a first measurement", interval=("lo", "hi"))
    assert c.as_dict() == {
        "quantity": "gain", "op": "outside", "threshold": [1, 2], "interval": ["lo", "hi"],
        "all_of": [{"quantity": "n", "op": ">", "threshold": 0}], "assert_at": ["cpu"], "expect": "does not hold",
        "measured_only_at": ["paper"], "registered": "abc1234", "registered_after": "a first measurement"}
    assert Check("x", "<", 1).as_dict() == {
        "quantity": "x", "op": "<", "threshold": 1, "all_of": [], "assert_at": [], "expect": "holds",
        "measured_only_at": [], "registered": None, "registered_after": None}


def test_definition_is_what_is_tested_and_nothing_else():
    """The hash of a check reads definition(): quantity, comparator, threshold and a precondition's
    id; how the condition is judged (interval, point) and a precondition's wording are left out."""
    base = Condition("q", "between", (0, 1))
    assert base.definition() == {"quantity": "q", "op": "between", "threshold": [0, 1]}
    for same in (Condition("q", "between", (0, 1), interval=("lo", "hi")),
                 Condition("q", "between", (0, 1), point="exact")):
        assert same.definition() == base.definition()
    for other in (Condition("r", "between", (0, 1)), Condition("q", "outside", (0, 1)),
                  Condition("q", "between", (0, 2))):
        assert other.definition() != base.definition()
    pre = Condition("n", ">=", 8, id="enough", statement="at least 8 prompts")
    assert pre.definition() == {"id": "enough", "quantity": "n", "op": ">=", "threshold": 8}
    assert list(pre.definition()) == ["id", "quantity", "op", "threshold"]
    reworded = Condition("n", ">=", 8, id="enough", statement="eight prompts or more")
    assert reworded.definition() == pre.definition()
    assert Condition("n", ">=", 8, id="other", statement="at least 8 prompts").definition() != pre.definition()


@pytest.mark.parametrize("why, statement", [
    ("", "the result rests on at least 8 prompts"),
    ("the interval's width", "the result rests on at least 8 prompts (the interval's width)"),
])
def test_min_units_is_the_last_precondition(why, statement):
    units = MinUnits("n_prompts", 8, "prompts", why)
    assert units.as_precondition() == Condition("n_prompts", ">=", 8, id="min-units", statement=statement)
    claim = _claim(check=Check("g", ">", 0, all_of=(Condition("n_prompts", ">", 1), Condition("g", "<", 9))),
                   preconditions=(Condition("ctx", ">=", 0.1, id="uses-context"),), min_units=units)
    assert claim.all_preconditions() == (claim.preconditions[0], units.as_precondition())
    assert claim.all_conditions() == (*claim.check.conditions, *claim.all_preconditions())
    assert claim.quantities == ("g", "n_prompts", "ctx")
    assert claim.key == "p/c"


def test_a_claim_without_check_or_min_units():
    claim = _claim(preconditions=(Condition("ctx", ">=", 0.1, id="a"),))
    assert claim.all_preconditions() == claim.preconditions == claim.all_conditions()
    assert claim.quantities == ("ctx",)
    assert _claim().quantities == () and _claim().all_conditions() == ()


PROTOCOL = {"all": {"n": 1, "m": 2}, "cpu": {"n": 4}, "paper": {"n": 64, "k": 3}, "smoke": {"m": 9}}


@pytest.mark.parametrize("protocol, profile, settings, smaller", [
    (PROTOCOL, "cpu", {"n": 4, "m": 2}, False),
    (PROTOCOL, "paper", {"n": 64, "m": 2, "k": 3}, False),
    (PROTOCOL, "smoke", {"n": 4, "m": 9}, True),            # cpu's settings, then its own
    ({"all": {"n": 1}}, "smoke", {"n": 1}, False),
    ({"all": {"n": 1}, "smoke": {}}, "smoke", {"n": 1}, False),
    ({"cpu": {"n": 4}}, "paper", {}, False),
    ({"smoke": {"n": 2}}, "cpu", {}, False),                 # the test-only settings never reach cpu
    ({"smoke": {"n": 2}}, "smoke", {"n": 2}, True),
    (None, "smoke", {}, False),
    (None, "paper", {}, False),
])
def test_protocol_for_each_profile(protocol, profile, settings, smaller):
    claim = _claim(protocol=protocol)
    assert claim.protocol_for(profile) == settings
    assert claim.smaller_for(profile) is smaller


def test_an_unknown_profile_is_refused():
    message = "unknown profile 'gpu'; valid profiles are 'cpu', 'paper' (and, for tests only, 'smoke')"
    with pytest.raises(ValueError) as info:
        _claim(protocol=PROTOCOL).protocol_for("gpu")
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        _claim().smaller_for("gpu")
    assert str(info.value) == message


@pytest.mark.parametrize("op, threshold, passing, failing", [
    (">=", 5, [5, 5.001, 1e9], [4.999, -5]),
    (">", 5, [5.001, 6], [5, 4]),
    ("<=", 5, [5, 4.999, -1e9], [5.001]),
    ("<", 5, [4.999, -6], [5, 5.001]),
    ("between", (0, 2), [0, 1, 2], [-0.001, 2.001]),
    ("outside", (0, 2), [-0.001, 2.001], [0, 1, 2]),
    ("==", "yes", ["yes"], ["no", "Yes", ""]),
    ("==", 3, [3, 3.0], [3.001, "3"]),
    ("is", True, [True], [False, 1, "true"]),
    ("is", False, [False], [True, 0, None]),
])
def test_each_comparator_at_its_edge(op, threshold, passing, failing):
    condition = Condition("q", op, threshold)
    assert [condition.test(v) for v in passing] == [True] * len(passing)
    assert [condition.test(v) for v in failing] == [False] * len(failing)


def test_an_op_that_escaped_validation_stops_the_test():
    with pytest.raises(AssertionError) as info:
        Condition("q", "~", 1).test(1)
    assert info.value.args == ("~",)


def _claim(**fields) -> Claim:
    return Claim(paper="p", id="c", statement="s", where="w", paper_value=None, unit="", source="paper",
                 notebook=None, **fields)
