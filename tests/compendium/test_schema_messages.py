"""Every mistake claims.yaml can hold, one at a time, and the whole message it gets.

Each case writes a minimal claims file holding exactly one mistake and compares the message of
the error with ``==``: the table below is the list of what compendium.checks refuses and how it
says so. A message is built here from the input it names, so a case fails as soon as the message
(or the rule behind it) changes. The accepted edge of each rule is tested beside its refusals.
"""
from __future__ import annotations

import pytest
import yaml

from compendium import checks

PAPER = {"title": "A paper", "arxiv": "0000.00001"}
FILE = "papers/p/claims.yaml"
OPS = "'>=', '>', '<=', '<', '==', 'between', 'outside', 'is'"
CHECK_FIELDS = ("all_of, assert_at, expect, interval, measured_only_at, op, point, quantity, registered, "
                "registered_after, threshold")
CONDITION_FIELDS = "interval, op, point, quantity, threshold"
PRECONDITION_FIELDS = "id, op, quantity, statement, threshold"
CLAIM_FIELDS = ("check, history, id, min_units, note, notebook, paper_value, preconditions, protocol, source, "
                "statement, unit, where")
VERDICTS = "'holds', 'does not hold', 'inconclusive', 'measured only'"
REGISTERED_AFTER = "'a first measurement', \"earlier checks' measurements\""
PROTOCOL_KEYS = "all, cpu, paper, smoke"
POINT = "point must say why the condition is judged on its value alone, got "
COMMIT = "registered must name the commit that registered the check (7 to 40 hex digits), got "
DROP = object()  # a field left out


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A compendium holding nothing but ``papers/``: load_paper reads it (no git, no notebooks)."""
    (tmp_path / "papers").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setenv("COMPENDIUM_ROOT", str(tmp_path))
    return tmp_path


def write(root, content, paper: str = "p") -> None:
    """``papers/<paper>/claims.yaml``: ``content`` as it is (a string) or as YAML (anything else)."""
    folder = root / "papers" / paper
    folder.mkdir(exist_ok=True)
    text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
    (folder / "claims.yaml").write_text(text)


def claim(**fields) -> dict:
    """The smallest valid claim (id ``c``), with ``fields`` added or replaced."""
    return {"id": "c", "statement": "s", "where": "w", **fields}


def check(**fields) -> dict:
    """The smallest valid check (``x > 1``), with ``fields`` added, replaced or (DROP) left out."""
    out = {"quantity": "x", "op": ">", "threshold": 1, **fields}
    return {k: v for k, v in out.items() if v is not DROP}


def pre(**fields) -> dict:
    """The smallest valid precondition (``a``: ``q >= 1``), with ``fields`` added, replaced or (DROP) left out."""
    out = {"id": "a", "statement": "st", "quantity": "q", "op": ">=", "threshold": 1, **fields}
    return {k: v for k, v in out.items() if v is not DROP}


def refused(root, claims_list: list, kind=checks.ClaimsFileError) -> str:
    write(root, {"paper": PAPER, "claims": claims_list})
    with pytest.raises(kind) as info:
        checks.load_paper("p")
    assert type(info.value) is kind
    return str(info.value)


def in_check(threshold_op: str, threshold) -> dict:
    return claim(check=check(op=threshold_op, threshold=threshold))


# (the claim, the message after "papers/p/claims.yaml: claim 'c': ")
CHECK_CASES = [
    (claim(check=5), "check: check must be a mapping, got 5"),
    (claim(check=[]), "check: check must be a mapping, got []"),
    (claim(check=check(treshold=2, zz=1)), f"check: unknown field(s) treshold, zz; allowed: {CHECK_FIELDS}"),
    (claim(check=check(quantity=DROP)), "check: missing 'quantity'"),
    (claim(check=check(op=DROP)), "check: missing 'op'"),
    (claim(check=check(threshold=DROP)), "check: missing 'threshold'"),
    (claim(check={}), "check: missing 'quantity'"),
    (claim(check=check(quantity="")), "check: quantity must be a name, got ''"),
    (claim(check=check(quantity=3)), "check: quantity must be a name, got 3"),
    (claim(check=check(op="=>")), f"check: unknown op '=>'; valid ops: {OPS}"),
    (claim(check=check(op=[">"])), f"check: unknown op ['>']; valid ops: {OPS}"),
    (claim(check=check(op="")), f"check: unknown op ''; valid ops: {OPS}"),
    (in_check("between", 1), "check: op 'between' needs threshold [lo, hi] (two numbers), got 1"),
    (in_check("between", "ab"), "check: op 'between' needs threshold [lo, hi] (two numbers), got 'ab'"),
    (in_check("between", [1]), "check: op 'between' needs threshold [lo, hi] (two numbers), got [1]"),
    (in_check("outside", [1, 2, 3]), "check: op 'outside' needs threshold [lo, hi] (two numbers), got [1, 2, 3]"),
    (in_check("between", [1, "a"]), "check: op 'between' needs threshold [lo, hi] (two numbers), got [1, 'a']"),
    (in_check("outside", [True, 2]), "check: op 'outside' needs threshold [lo, hi] (two numbers), got [True, 2]"),
    (in_check("between", [2, 1]), "check: op 'between' needs threshold [lo, hi] with lo <= hi, got [2, 1]"),
    (in_check("outside", [2.5, 2.25]), "check: op 'outside' needs threshold [lo, hi] with lo <= hi, got [2.5, 2.25]"),
    (in_check("is", 1), "check: op 'is' needs threshold true or false, got 1"),
    (in_check("is", "true"), "check: op 'is' needs threshold true or false, got 'true'"),
    (in_check("is", None), "check: op 'is' needs threshold true or false, got None"),
    (in_check("==", [1]), "check: op '==' needs a number or a string as threshold, got [1]"),
    (in_check("==", True), "check: op '==' needs a number or a string as threshold, got True"),
    (in_check(">=", "big"), "check: op '>=' needs a number as threshold, got 'big'"),
    (in_check(">", [1]), "check: op '>' needs a number as threshold, got [1]"),
    (in_check("<=", False), "check: op '<=' needs a number as threshold, got False"),
    (in_check("<", "1"), "check: op '<' needs a number as threshold, got '1'"),
    (claim(check=check(interval=["lo"])), "check: interval must name two recorded values [low, high], got ['lo']"),
    (claim(check=check(interval="lo")), "check: interval must name two recorded values [low, high], got 'lo'"),
    (claim(check=check(interval=["lo", 3])),
     "check: interval must name two recorded values [low, high], got ['lo', 3]"),
    (claim(check=check(interval=["lo", ""])),
     "check: interval must name two recorded values [low, high], got ['lo', '']"),
    (claim(check=check(interval=["a", "b", "c"])),
     "check: interval must name two recorded values [low, high], got ['a', 'b', 'c']"),
    (claim(check=check(op="is", threshold=True, interval=["lo", "hi"])),
     "check: op 'is' compares no numbers, so it takes no interval"),
    (claim(check=check(op="==", threshold=2, interval=["lo", "hi"])),
     "check: op '==' compares no numbers, so it takes no interval"),
    (claim(check=check(point="")), f"check: {POINT}''"),
    (claim(check=check(point="  ")), f"check: {POINT}'  '"),
    (claim(check=check(point=3)), f"check: {POINT}3"),
    (claim(check=check(interval=["lo", "hi"], point="exact")),
     "check: a condition judged by its interval cannot also be judged on its point value (interval and point "
     "both given)"),
    (claim(check=check(registered_after="lunch")),
     f"check: registered_after must be one of {REGISTERED_AFTER}, got 'lunch'"),
    (claim(check=check(registered_after=["a first measurement"])),
     f"check: registered_after must be one of {REGISTERED_AFTER}, got ['a first measurement']"),
    (claim(check=check(all_of=check())),
     "check: check.all_of must be a list of conditions, got {'quantity': 'x', 'op': '>', 'threshold': 1}"),
    (claim(check=check(all_of="x")), "check: check.all_of must be a list of conditions, got 'x'"),
    (claim(check=check(all_of=[5])), "check: all_of[0]: expected a mapping with quantity/op/threshold, got 5"),
    (claim(check=check(all_of=[check(), check(assert_at=["cpu"])])),
     f"check: all_of[1]: unknown field(s) assert_at; allowed: {CONDITION_FIELDS}"),
    (claim(check=check(all_of=[check(op=DROP)])), "check: all_of[0]: missing 'op'"),
    (claim(check=check(all_of=[check(op="<<")])), f"check: all_of[0]: unknown op '<<'; valid ops: {OPS}"),
    (claim(check=check(all_of=[check(op="between")])),
     "check: all_of[0]: op 'between' needs threshold [lo, hi] (two numbers), got 1"),
    (claim(check=check(all_of=[check(interval=["a", 3])])),
     "check: all_of[0]: interval must name two recorded values [low, high], got ['a', 3]"),
    (claim(check=check(all_of=[check(interval=["a", "b"], point="exact")])),
     "check: all_of[0]: a condition judged by its interval cannot also be judged on its point value (interval "
     "and point both given)"),
    (claim(check=check(expect="maybe")), f"check: expect must be a verdict ({VERDICTS}), got 'maybe'"),
    (claim(check=check(expect="not run")), f"check: expect must be a verdict ({VERDICTS}), got 'not run'"),
    (claim(check=check(assert_at="cpu")), "check: assert_at must be a list of profiles like [cpu], got 'cpu'"),
    (claim(check=check(assert_at=5)), "check: assert_at must be a list of profiles like [cpu], got 5"),
    (claim(check=check(measured_only_at={"cpu": 1})),
     "check: measured_only_at must be a list of profiles like [cpu], got {'cpu': 1}"),
    (claim(check=check(assert_at=["gpu", "cpu", "smoke"])),
     "check: assert_at names unknown profile(s) 'gpu', 'smoke'; valid profiles: cpu, paper"),
    (claim(check=check(measured_only_at=[["cpu"]])),
     "check: measured_only_at names unknown profile(s) ['cpu']; valid profiles: cpu, paper"),
    (claim(check=check(assert_at=["cpu", "paper"], measured_only_at=["paper", "cpu"])),
     "check: profile(s) cpu, paper are in both assert_at and measured_only_at, so the verdict there is "
     "'measured only' and asserting 'holds' would always fail"),
    (claim(check=check(assert_at=["paper"], measured_only_at=["paper"], expect="does not hold")),
     "check: profile(s) paper are in both assert_at and measured_only_at, so the verdict there is "
     "'measured only' and asserting 'does not hold' would always fail"),
    (claim(check=check(registered="2026-11-30")), f"check: {COMMIT}'2026-11-30'"),
    (claim(check=check(registered="abc123")), f"check: {COMMIT}'abc123'"),
    (claim(check=check(registered="ABC1234")), f"check: {COMMIT}'ABC1234'"),
    (claim(check=check(registered="a" * 41)), f"check: {COMMIT}'{'a' * 41}'"),
    (claim(check=check(registered="abc1234\n")), f"check: {COMMIT}'abc1234\\n'"),
    (claim(check=check(registered=1234567)), f"check: {COMMIT}1234567"),
]

PRECONDITION_CASES = [
    (claim(preconditions="x"), "preconditions must be a list, got 'x'"),
    (claim(preconditions=pre()), "preconditions must be a list, got "
     "{'id': 'a', 'statement': 'st', 'quantity': 'q', 'op': '>=', 'threshold': 1}"),
    (claim(preconditions=[5]), "preconditions[0]: expected a mapping with quantity/op/threshold, got 5"),
    (claim(preconditions=[pre(interval=["l", "h"])]),
     f"preconditions[0]: unknown field(s) interval; allowed: {PRECONDITION_FIELDS}"),
    (claim(preconditions=[pre(point="exact", note="n")]),
     f"preconditions[0]: unknown field(s) note, point; allowed: {PRECONDITION_FIELDS}"),
    (claim(preconditions=[pre(quantity=DROP)]), "preconditions[0]: missing 'quantity'"),
    (claim(preconditions=[pre(op=DROP)]), "preconditions[0]: missing 'op'"),
    (claim(preconditions=[pre(threshold=DROP)]), "preconditions[0]: missing 'threshold'"),
    (claim(preconditions=[pre(id=DROP)]), "preconditions[0]: missing 'id'"),
    (claim(preconditions=[pre(statement=DROP)]), "preconditions[0]: missing 'statement'"),
    (claim(preconditions=[pre(id="")]), "preconditions[0]: a precondition's id must be a name, got ''"),
    (claim(preconditions=[pre(id=3)]), "preconditions[0]: a precondition's id must be a name, got 3"),
    (claim(preconditions=[pre(), pre(id="b", op="between", threshold=[1])]),
     "preconditions[1]: op 'between' needs threshold [lo, hi] (two numbers), got [1]"),
    (claim(preconditions=[pre(), pre(id="b"), pre()]), "preconditions: ids must be unique, got ['a', 'b', 'a']"),
]

OTHER_FIELD_CASES = [
    (claim(min_units=8), "min_units must be a mapping with quantity, at_least and units, got 8"),
    (claim(min_units=["n", 8]), "min_units must be a mapping with quantity, at_least and units, got ['n', 8]"),
    (claim(min_units={"quantity": "n", "at_least": 8, "units": "prompts", "floor": 2}),
     "min_units: unknown field(s) floor; allowed: at_least, quantity, units, why"),
    (claim(min_units={"at_least": 8, "units": "prompts"}), "min_units: missing 'quantity'"),
    (claim(min_units={"quantity": "n", "units": "prompts"}), "min_units: missing 'at_least'"),
    (claim(min_units={"quantity": "n", "at_least": 8}), "min_units: missing 'units'"),
    *((claim(min_units={"quantity": "n", "at_least": bad, "units": "prompts"}),
       f"min_units: at_least must be a positive whole number, got {bad!r}") for bad in (0, -1, 1.5, True, "8")),
    (claim(protocol=[]), f"protocol must be a mapping of {PROTOCOL_KEYS} to settings, got []"),
    (claim(protocol={}), f"protocol must be a mapping of {PROTOCOL_KEYS} to settings, got {{}}"),
    (claim(protocol="cpu"), f"protocol must be a mapping of {PROTOCOL_KEYS} to settings, got 'cpu'"),
    (claim(protocol={"gpu": {"n": 1}}), f"protocol: unknown key 'gpu'; allowed: {PROTOCOL_KEYS}"),
    (claim(protocol={"cpu": 8}), "protocol.cpu must be a mapping of settings, got 8"),
    (claim(protocol={"smoke": [1]}), "protocol.smoke must be a mapping of settings, got [1]"),
    *((claim(protocol={"all": {"n": 1, "model": bad}}),
       f"protocol.all.model: settings are numbers, strings, true/false or lists of them, got {bad!r}")
      for bad in ({"name": "x"}, None, [1, [2, {"a": 1}]], [None])),
    (claim(history="not a list"), "history must be a list of dated strings, got 'not a list'"),
    (claim(history=[1]), "history must be a list of dated strings, got [1]"),
    (claim(history=["2026-01-01: x", None]), "history must be a list of dated strings, got ['2026-01-01: x', None]"),
    (claim(statement=""), "missing 'statement'"),
    (claim(where=None), "missing 'where'"),
    ({"id": "c", "where": "w"}, "missing 'statement'"),
    ({"id": "c", "statement": "s"}, "missing 'where'"),
    (claim(checks={}, Note="n"), f"unknown field(s) Note, checks; allowed: {CLAIM_FIELDS}"),
]


@pytest.mark.parametrize("item, message", CHECK_CASES + PRECONDITION_CASES + OTHER_FIELD_CASES,
                         ids=lambda x: None if isinstance(x, dict) else x[:60])
def test_each_mistake_in_a_claim_gets_its_message(root, item, message):
    assert refused(root, [item]) == f"{FILE}: claim 'c': {message}"


def test_a_number_as_a_field_name_is_named_among_the_unknown_fields(root):
    write(root, "paper: {title: T, arxiv: '1'}\nclaims:\n  - {id: c, statement: s, where: w, 7: x, zz: y}\n")
    with pytest.raises(checks.ClaimsFileError) as info:
        checks.load_paper("p")
    assert str(info.value) == f"{FILE}: claim 'c': unknown field(s) 7, zz; allowed: {CLAIM_FIELDS}"


def test_a_not_a_number_setting_is_refused(root):
    write(root, "paper: {title: T, arxiv: '1'}\nclaims:\n  - {id: c, statement: s, where: w, "
                "protocol: {cpu: {rate: .nan}}}\n")
    with pytest.raises(checks.ClaimsFileError) as info:
        checks.load_paper("p")
    assert str(info.value) == (f"{FILE}: claim 'c': protocol.cpu.rate: settings are numbers, strings, true/false "
                               "or lists of them, got nan")


@pytest.mark.parametrize("items, message", [
    ([5], "claim #1: every claim needs an 'id'"),
    ([claim(), {"statement": "s", "where": "w"}], "claim #2: every claim needs an 'id'"),
    ([claim(), claim(id="d"), claim(id="")], "claim #3: every claim needs an 'id'"),
    ([claim(id=5)], "claim 5: every claim needs an 'id'"),
    ([claim(), claim(id="d"), claim()], "claim 'c': this id is defined twice"),
    ([claim(), claim(id="d", where="")], "claim 'd': missing 'where'"),
])
def test_the_claim_named_in_a_message_is_the_one_at_fault(root, items, message):
    assert refused(root, items) == f"{FILE}: {message}"


@pytest.mark.parametrize("content, message", [
    ([], "needs a 'paper' mapping and a 'claims' list"),
    ("", "needs a 'paper' mapping and a 'claims' list"),
    ({"claims": []}, "needs a 'paper' mapping and a 'claims' list"),
    ({"paper": PAPER}, "needs a 'paper' mapping and a 'claims' list"),
    ({"paper": PAPER, "claims": {"c": claim()}}, "needs a 'paper' mapping and a 'claims' list"),
    ({"paper": "P", "claims": []}, "'paper' must be a mapping with 'title' and 'arxiv', got 'P'"),
    ({"paper": {"title": "T"}, "claims": []}, "'paper' must be a mapping with 'title' and 'arxiv', got {'title': 'T'}"),
    ({"paper": {"arxiv": "1"}, "claims": []}, "'paper' must be a mapping with 'title' and 'arxiv', got {'arxiv': '1'}"),
    ("paper: {title: T, arxiv: 2602.11850}\nclaims: []\n",
     'paper.arxiv must be quoted ("2602.11852"): unquoted, YAML reads it as a number and drops trailing zeros; '
     "got 2602.1185"),
])
def test_a_malformed_file_is_named(root, content, message):
    write(root, content)
    with pytest.raises(checks.ClaimsFileError) as info:
        checks.load_paper("p")
    assert str(info.value) == f"{FILE}: {message}"


def test_a_file_that_is_not_yaml_carries_the_parsers_own_words(root):
    text = "paper: [unclosed\nclaims: []\n"
    with pytest.raises(yaml.YAMLError) as parsed:
        yaml.safe_load(text)
    write(root, text)
    with pytest.raises(checks.ClaimsFileError) as info:
        checks.load_paper("p")
    assert str(info.value) == f"{FILE}: not valid YAML: {parsed.value}"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_unknown_paper_lists_the_papers_there_are(root):
    with pytest.raises(ValueError) as info:
        checks.load_paper("p")
    assert str(info.value) == "unknown paper 'p'; papers with claims: none"
    write(root, {"paper": PAPER, "claims": []}, paper="zeta")
    write(root, {"paper": PAPER, "claims": []}, paper="alpha")
    (root / "papers" / "empty").mkdir()                      # a folder without claims.yaml is no paper
    assert checks.paper_ids() == ["alpha", "zeta"]
    with pytest.raises(ValueError) as info:
        checks.load_paper("nopaper")
    assert type(info.value) is ValueError
    assert str(info.value) == "unknown paper 'nopaper'; papers with claims: alpha, zeta"


def test_get_claim_names_what_is_wrong_with_the_key(root):
    write(root, {"paper": PAPER, "claims": [claim(id="b"), claim(id="a")]})
    assert checks.get_claim("p/a").id == "a" and checks.get_claim("p/b").paper == "p"
    for key in ("a", "p/a/b", "", 5, None):
        with pytest.raises(ValueError) as info:
            checks.get_claim(key)
        assert str(info.value) == f"claim ids look like '<paper>/<claim-id>', got {key!r}"
    with pytest.raises(ValueError) as info:
        checks.get_claim("p/nope")
    assert str(info.value) == "claim 'nope' is not defined in papers/p/claims.yaml; defined: a, b"
    with pytest.raises(ValueError) as info:
        checks.get_claim("q/a")
    assert str(info.value) == "unknown paper 'q'; papers with claims: p"


def test_the_accepted_edge_of_each_rule(root):
    """Each refusal above has an edge that loads: equal ends, the shortest and longest commit, the
    fewest units, an empty profile list, a check measured only where it is also asserted."""
    write(root, {"paper": {"title": "T", "arxiv": "2602.11850"}, "claims": [
        claim(id="a", check=check(op="between", threshold=[1, 1], registered="abcdef0", interval=["l", "h"]),
              min_units={"quantity": "n", "at_least": 1, "units": "prompts"}),
        claim(id="b", check=check(op="outside", threshold=[-2.5, 0], registered="0" * 40, point="  exact  ",
                                  assert_at=["cpu"], measured_only_at=["cpu"], expect="measured only",
                                  registered_after="earlier checks' measurements"),
              preconditions=[pre(statement="  st  "), pre(id="b", op="==", threshold="yes")],
              min_units={"quantity": "n", "at_least": 2, "units": "prompts", "why": "  width  "}),
        claim(id="c", check=check(op="==", threshold=0.5, assert_at=[], all_of=[]),
              protocol={"all": {"n": 1, "xs": [1, [2.5, "a", True]]}, "smoke": {}}, history=[]),
        claim(id="d", check=None, statement="  Spaced.  ", note=None, unit=None),
    ]})
    p = checks.load_paper("p")
    assert (p.id, p.title, p.arxiv) == ("p", "T", "2602.11850")
    a, b, c, d = (p.claims[k] for k in "abcd")
    assert a.check.threshold == (1, 1) and a.check.registered == "abcdef0" and a.check.interval == ("l", "h")
    assert a.min_units == checks.MinUnits("n", 1, "prompts", "")
    assert b.check.threshold == (-2.5, 0) and b.check.registered == "0" * 40 and b.check.point == "exact"
    assert b.check.registered_after == "earlier checks' measurements" and b.check.expect == "measured only"
    assert b.preconditions[0].statement == "st" and b.preconditions[1].threshold == "yes"
    assert b.min_units.why == "width"
    assert c.check.assert_at == () and c.check.all_of == () and c.history == ()
    assert c.protocol == {"all": {"n": 1, "xs": [1, [2.5, "a", True]]}, "smoke": {}}
    assert d.check is None and d.statement == "Spaced." and d.note == "" and d.unit == ""
    assert (d.source, d.notebook, d.paper_value) == ("paper", None, None)
