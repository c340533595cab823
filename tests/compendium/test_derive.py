"""The tables derive every verdict from the recorded values and the registered check: a verdict
written in a results file is never read, a NaN or infinity is refused naming the file, and a
result measured for another version of the check is not judged."""
from __future__ import annotations

import json
import os

import pytest

from compendium import claims, judge, tables

from ledger_demo import write_published

GOOD = {"gain": 7.5, "ci_low": 0.4, "context_effect": 0.3}


@pytest.fixture
def published(run_dir, demo_root):
    """A genuine result of demo/gain (holds), placed among the published results; returns its path."""
    claims.conclude(claims.Measurement("demo/gain", dict(GOOD)), profile="cpu", seed=0)
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    path = results / "gain.cpu.json"
    path.write_text((run_dir / "results" / "demo" / "gain.cpu.json").read_text())
    write_published(demo_root)  # as a publish lists it (an edit below is then marked, not refused)
    return path


def _edit(path, **changes):
    entry = json.loads(path.read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            entry[outer][inner] = value
        else:
            entry[key] = value
    path.write_text(json.dumps(entry))


def _row(claim_id="gain"):
    return next(l for l in claims.build_table("demo").splitlines() if l.startswith(f"| {claim_id} "))


def test_a_genuine_result_shows_its_derived_verdict(published):
    row = _row()
    assert "**holds**" in row and "| 7.5 % (no interval) |" in row


def test_a_tampered_verdict_is_not_read(published):
    _edit(published, verdict="does not hold", reason="edited by hand")
    assert "**holds**" in _row() and "edited by hand" not in claims.build_table("demo")
    _edit(published, **{"values.ci_low": -0.1})       # the values decide, whatever the file says
    _edit(published, verdict="holds")
    assert "**does not hold**" in _row()


def test_a_tampered_value_gives_its_own_verdict(published):
    _edit(published, **{"values.gain": 1.0})          # the file still says "holds" and value 7.5
    row = _row()
    assert "**does not hold**" in row and "| 1 % (no interval) |" in row and "7.5" not in row
    _edit(published, **{"values.gain": 7.5, "values.context_effect": 0.01})
    assert "**inconclusive**: failed `uses-context`" in _row()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_value_is_refused_naming_the_file(published, number):
    text = published.read_text().replace('"gain": 7.5', f'"gain": {number}')
    assert number in text
    published.write_text(text)
    with pytest.raises(tables.ResultsFileError, match=r"papers/demo/results/gain.cpu.json: .*(NaN|Infinity|not finite)"):
        claims.build_table("demo")


def test_a_non_finite_evidence_number_is_refused_too(published):
    _edit(published, evidence={"spread": [1.0, 2.0]})
    published.write_text(published.read_text().replace("2.0]", "1e999]"))  # a number JSON reads as infinity
    with pytest.raises(tables.ResultsFileError, match=r"gain.cpu.json: evidence.spread\[1\] is not finite"):
        claims.build_table("demo")


def test_a_value_of_the_wrong_type_is_refused_naming_the_file(published):
    _edit(published, **{"values.gain": "big"})
    with pytest.raises(tables.ResultsFileError, match=r"gain.cpu.json: demo/gain: value 'gain' = 'big' must be a number"):
        claims.build_table("demo")


def test_a_stale_check_hash_is_not_judged(published):
    _edit(published, check_sha256="0" * 64)
    row = _row()
    assert "**not judged (recorded under an earlier check)**" in row and "**holds**" not in row


def test_a_changed_threshold_makes_earlier_results_stale(published, demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text().replace("threshold: 5.0", "threshold: 6.0", 1))
    assert "**not judged (recorded under an earlier check)**" in _row()


def test_results_without_a_hash_are_matched_by_the_check_they_recorded(published):
    entry = json.loads(published.read_text())
    del entry["check_sha256"]                          # as results written before the hash was kept
    published.write_text(json.dumps(entry))
    assert "**holds**" in _row()
    entry["registered_check"]["threshold"] = 4.0       # recorded under another threshold
    published.write_text(json.dumps(entry))
    assert "**not judged (recorded under an earlier check)**" in _row()


def test_how_a_check_is_judged_is_part_of_its_hash(published, demo_root):
    """The whole check is hashed: an interval rule, a point reason or min_units added after a
    result makes that result one of an earlier check (it is not judged by a rule it was not
    measured for)."""
    base = claims.get_claim("demo/gain")
    path = demo_root / "papers" / "demo" / "claims.yaml"
    text = path.read_text()
    for edit in ('registered: "def5678"\n      interval: [lo, hi]', 'registered: "def5678"\n      point: exact'):
        path.write_text(text.replace('registered: "abc1234"', edit))
        changed = claims.get_claim("demo/gain")
        assert judge.check_sha256(changed, "cpu") != judge.check_sha256(base, "cpu")
        assert "**not judged (recorded under an earlier check)**" in _row()
    path.write_text(text.replace("    history:\n", "    min_units: {quantity: gain, at_least: 2, units: prompts}\n    history:\n", 1))
    assert claims.get_claim("demo/gain").min_units is not None
    assert "**not judged (recorded under an earlier check)**" in _row()
    path.write_text(text)
    assert "**holds**" in _row()


def test_a_result_of_scheme_1_is_read_by_the_check_it_recorded(published):
    """Results recorded before the whole check was hashed (no check_hash_scheme) state a scheme-1
    hash: the check they list is trusted only where that hash matches it, and is then hashed as a
    whole with the protocol they ran."""
    entry = json.loads(published.read_text())
    assert entry["check_hash_scheme"] == judge.CHECK_HASH_SCHEME
    del entry["check_hash_scheme"]
    parts = judge._recorded_parts(entry)
    entry["check_sha256"] = judge._scheme1_sha256(*parts)
    published.write_text(json.dumps(entry))
    assert judge.recorded_check_sha256(entry) == judge.check_sha256(claims.get_claim("demo/gain"), "cpu")
    assert "**holds**" in _row()
    entry["registered_check"]["interval"] = ["ci_low", "gain"]   # lists another check than its hash says
    published.write_text(json.dumps(entry))
    assert "**not judged (recorded under an earlier check)**" in _row()
    entry["check_sha256"] = judge._scheme1_sha256(*judge._recorded_parts(entry))   # consistent, but another rule
    published.write_text(json.dumps(entry))
    assert "**not judged (recorded under an earlier check)**" in _row()


def test_the_published_results_are_judged_by_the_registered_checks():
    """Every published result of the real papers derives a verdict; one that recorded no values
    (judged by its notebook's own test) is not judged."""
    root = os.environ.pop("COMPENDIUM_ROOT", None)
    try:
        for paper in claims.paper_ids():
            for claim_id, by_profile in tables.read_results(paper).items():
                for profile, entry in by_profile.items():
                    assert entry["verdict"] in (*claims.VERDICTS, f"{claims.NOT_JUDGED} ({judge.EARLIER_CHECK})")
                    if "values" not in entry:
                        assert not entry["judged"], (paper, claim_id, profile)
    finally:
        if root is not None:
            os.environ["COMPENDIUM_ROOT"] = root


# --- the protocol is registered with the check ---------------------------------------------------
PROTOCOL = """\
  - id: sized
    statement: The ratio is at least 2.
    where: "§6"
    paper_value: null
    unit: x
    source: paper
    notebook: null
    check: {quantity: ratio, op: ">=", threshold: 2, registered: abc1234}
    protocol:
      all: {aggregation: geometric mean, selection: first N prompts}
      cpu: {n_prompts: 8, model: small}
      paper: {n_prompts: 64, model: large}
    history:
      - "2026-11-30: check registered"
"""


@pytest.fixture
def sized(run_dir, demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + PROTOCOL)
    claims.conclude(claims.Measurement("demo/sized", {"ratio": 3.0}), profile="cpu")
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / "sized.cpu.json").write_text((run_dir / "results" / "demo" / "sized.cpu.json").read_text())
    write_published(demo_root)
    return path


def test_a_notebook_reads_its_settings_from_the_registered_protocol(sized):
    want = {"aggregation": "geometric mean", "selection": "first N prompts", "n_prompts": 8, "model": "small"}
    assert claims.protocol("demo/sized", "cpu") == want
    assert claims.protocol("demo/sized", "paper")["n_prompts"] == 64
    entry = json.loads((sized.parent / "results" / "sized.cpu.json").read_text())
    assert entry["protocol"] == want and entry["protocol_sha256"] == judge.protocol_sha256(claims.get_claim("demo/sized"), "cpu")
    assert "**holds**" in _row("sized")


def test_a_protocol_change_without_a_dated_history_line_is_refused(sized):
    sized.write_text(sized.read_text().replace("n_prompts: 8", "n_prompts: 16"))
    with pytest.raises(tables.ResultsFileError, match=r"sized.cpu.json: recorded under another protocol than the one "
                                                      r"demo/sized registers now.*no dated line about a protocol change"):
        claims.build_table("demo")
    sized.write_text(sized.read_text().replace(   # a protocol line older than the result does not count
        '      - "2026-11-30: check registered"\n',
        '      - "2026-11-30: check registered"\n      - "2000-01-01: protocol registered"\n'))
    with pytest.raises(tables.ResultsFileError, match="no dated line about a protocol change"):
        claims.build_table("demo")
    sized.write_text(sized.read_text().replace(
        '      - "2000-01-01: protocol registered"\n',
        '      - "2099-01-01: protocol: 16 prompts at cpu (the interval was too wide)"\n'))
    row = _row("sized")
    assert "**not judged (recorded under an earlier check)**" in row and "earlier protocol" in row


def test_a_change_of_another_profiles_protocol_leaves_this_result_judged(sized):
    sized.write_text(sized.read_text().replace("n_prompts: 64", "n_prompts: 128"))
    assert "**holds**" in _row("sized")


def test_the_smoke_profile_runs_the_cpu_protocol_made_smaller_and_is_never_tabled(sized, run_dir):
    sized.write_text(sized.read_text().replace("      paper: {n_prompts: 64, model: large}\n",
                                               "      paper: {n_prompts: 64, model: large}\n      smoke: {n_prompts: 2}\n"))
    claim = claims.get_claim("demo/sized")
    assert claims.protocol("demo/sized", "smoke") == {**claims.protocol("demo/sized", "cpu"), "n_prompts": 2}
    assert claim.smaller_for("smoke") and not claim.smaller_for("cpu")
    # the smoke block changes neither the cpu nor the paper protocol: the published cpu row stays judged
    assert "**holds**" in _row("sized")
    claims.conclude(claims.Measurement("demo/sized", {"ratio": 3.0}), profile="smoke")
    smoke = run_dir / "results" / "demo" / "sized.smoke.json"
    assert json.loads(smoke.read_text())["protocol"]["n_prompts"] == 2
    (sized.parent / "results" / "sized.smoke.json").write_text(smoke.read_text())
    with pytest.raises(tables.ResultsFileError, match=r"sized.smoke.json: unknown profile 'smoke'"):
        claims.build_table("demo")


def test_cpu_assertions_apply_at_smoke_only_where_the_protocol_is_the_cpu_one(demo_root, run_dir):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + PROTOCOL.replace("registered: abc1234}", "registered: abc1234, assert_at: [cpu]}"))
    failing = claims.Measurement("demo/sized", {"ratio": 1.0})
    with pytest.raises(AssertionError, match="at profile 'smoke'"):   # same protocol as cpu: the cpu assertion holds
        claims.conclude(failing, profile="smoke")
    path.write_text(path.read_text().replace("      paper: {n_prompts: 64, model: large}\n",
                                             "      paper: {n_prompts: 64, model: large}\n      smoke: {n_prompts: 2}\n"))
    assert claims.conclude(failing, profile="smoke").status == "does not hold"   # smaller sample: recorded, not asserted
    with pytest.raises(AssertionError, match="at profile 'cpu'"):
        claims.conclude(failing, profile="cpu")


def test_rows_not_judged_say_why_and_keep_the_recorded_value(published):
    _edit(published, check_sha256="0" * 64, value=7.5)
    row = _row()
    assert "| 7.5 % |" in row and "Recorded under an earlier version of the check or its preconditions; re-run the " \
                                  "notebook to judge it by the registered check." in row
    entry = json.loads(published.read_text())
    del entry["values"]
    published.write_text(json.dumps(entry))
    assert "Recorded by its notebook's own test before the registered check was applied to results; re-run the " \
           "notebook to judge it." in _row()


def test_recorded_check_hashes():
    claim = claims.Claim("demo", "x", "s", "w", None, "", "paper", None,
                         check=claims.Check("q", ">", 1, all_of=(claims.Condition("r", "<", 2),)),
                         preconditions=(claims.Condition("n", ">=", 3, id="n-min", statement="s"),))
    pre = [{"id": "n-min", "statement": "s", "quantity": "n", "op": ">=", "threshold": 3, "value": 4, "passed": True}]
    rc = claim.check.as_dict()
    h = judge.check_sha256
    assert judge.recorded_check_sha256({"registered_check": rc, "preconditions": pre}) == h(claim, "cpu")
    assert judge.recorded_check_sha256({"registered_check": {**rc, "all_of": []}, "preconditions": pre}) != h(claim, "cpu")
    no_all_of = {k: v for k, v in rc.items() if k != "all_of"}
    lone = claims.Claim("demo", "x", "s", "w", None, "", "paper", None, check=claims.Check("q", ">", 1),
                        preconditions=claim.preconditions)
    assert judge.recorded_check_sha256({"registered_check": no_all_of, "preconditions": pre}) == h(lone, "cpu")
    plain = claims.Claim("demo", "x", "s", "w", None, "", "paper", None, preconditions=claim.preconditions)
    assert judge.recorded_check_sha256({"registered_check": None, "preconditions": pre}) == h(plain, "cpu")
    assert h(plain, "cpu") != h(claims.Claim("demo", "x", "s", "w", None, "", "paper", None), "cpu")
    assert judge.recorded_check_sha256({"registered_check": rc}) is None            # no preconditions recorded
    assert judge.recorded_check_sha256({"preconditions": pre}) is None               # no check recorded
    stated = {"check_sha256": "ab", "check_hash_scheme": judge.CHECK_HASH_SCHEME, "registered_check": rc, "preconditions": pre}
    assert judge.recorded_check_sha256(stated) == "ab"
    assert judge.recorded_check_sha256({**stated, "check_hash_scheme": None}) == "ab"   # a scheme-1 hash its check does not give
    mo = claims.Claim("demo", "x", "s", "w", None, "", "paper", None, check=claims.Check("q", ">", 1, measured_only_at=("cpu",)))
    assert h(mo, "cpu") != h(lone.__class__(**{**lone.__dict__, "preconditions": ()}), "cpu")
    # the protocol at the profile is part of it: the all block and the profile's own, not another's
    sized = claims.Claim("demo", "x", "s", "w", None, "", "paper", None, check=claims.Check("q", ">", 1),
                         protocol={"all": {"a": 1}, "cpu": {"n": 8}, "paper": {"n": 64}})
    other = claims.Claim(**{**sized.__dict__, "protocol": {"all": {"a": 1}, "cpu": {"n": 8}, "paper": {"n": 128}}})
    assert h(sized, "cpu") == h(other, "cpu") and h(sized, "paper") != h(other, "paper") and h(sized, "cpu") != h(sized, "paper")
    moved = claims.Claim(**{**sized.__dict__, "protocol": {"all": {"a": 2}, "cpu": {"n": 8}, "paper": {"n": 64}}})
    assert h(moved, "cpu") != h(sized, "cpu") and h(moved, "paper") != h(sized, "paper")
    entry = {"registered_check": sized.check.as_dict(), "preconditions": [], "protocol": sized.protocol_for("cpu")}
    assert judge.recorded_check_sha256(entry) == h(sized, "cpu")
    assert judge.recorded_check_sha256(entry, protocol=moved.protocol_for("cpu")) == h(moved, "cpu")


def test_an_interval_read_from_the_evidence_decides_the_row(run_dir, demo_root):
    from test_conclude import INTERVAL_CLAIM, _ratio

    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + INTERVAL_CLAIM)
    claims.conclude(_ratio(3, 9, gap_lo=-0.1, gap_hi=0.4), profile="cpu")
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / "ratio.cpu.json").write_text((run_dir / "results" / "demo" / "ratio.cpu.json").read_text())
    write_published(demo_root)
    row = _row("ratio")
    assert "| 6 x (95% interval 3 to 9) |" in row
    assert "**inconclusive**: the interval of gap (-0.1 to 0.4) straddles 0" in row
    entry = json.loads((results / "ratio.cpu.json").read_text())
    entry["evidence"]["spread"]["gap_hi"] = -0.05       # the whole interval below 0 now,
    entry["values"]["gap"] = -0.08                      # and the point inside it (test_integrity_provenance.py)
    (results / "ratio.cpu.json").write_text(json.dumps(entry))
    assert "**does not hold**" in _row("ratio")
    del entry["evidence"]["spread"]
    (results / "ratio.cpu.json").write_text(json.dumps(entry))
    row = _row("ratio")
    assert "**not judged (recorded under an earlier check)**: The result lacks the interval end 'spread.gap_hi'" in row


def test_the_hash_of_a_claim_as_written_equals_the_hash_of_the_loaded_claim(demo_root):
    import yaml

    raw = yaml.safe_load((demo_root / "papers" / "demo" / "claims.yaml").read_text())["claims"]
    for item in raw:
        for profile in ("cpu", "paper"):
            assert judge.raw_check_sha256(item, profile) == judge.check_sha256(claims.get_claim(f"demo/{item['id']}"), profile), item["id"]
    gain = next(i for i in raw if i["id"] == "gain")

    def raw(item):
        return judge.raw_check_sha256(item, "cpu")

    for change in ({"threshold": 6.0}, {"op": ">"}, {"quantity": "g"}, {"measured_only_at": []},
                   {"all_of": []}, {"all_of": [{"quantity": "ci_low", "op": ">", "threshold": 0.1}]},
                   {"interval": ["a", "b"]}, {"point": "exact"},
                   {"all_of": [{**gain["check"]["all_of"][0], "interval": ["a", "b"]}]}):
        assert raw({**gain, "check": {**gain["check"], **change}}) != raw(gain), change
    for change in ({"registered": "def5678"}, {"registered_after": "a first measurement"}, {"assert_at": []},
                   {"expect": "does not hold"}):
        assert raw({**gain, "check": {**gain["check"], **change}}) == raw(gain), change
    moved = {**gain, "preconditions": [{**gain["preconditions"][0], "threshold": 0.2}]}
    assert raw(moved) != raw(gain)
    renamed = {**gain, "preconditions": [{**gain["preconditions"][0], "id": "other"}]}
    assert raw(renamed) != raw(gain)
    reworded = {**gain, "preconditions": [{**gain["preconditions"][0], "statement": "other words"}]}
    assert raw(reworded) == raw(gain)
    units = {**gain, "min_units": {"quantity": "n", "at_least": 3, "units": "prompts"}}
    assert raw(units) != raw(gain) and raw({**units, "min_units": {**units["min_units"], "at_least": 4}}) != raw(units)
    assert raw({**units, "min_units": {**units["min_units"], "why": "a reason", "units": "items"}}) == raw(units)
    assert raw({**gain, "check": None}) == judge.check_sha256(
        claims.Claim("demo", "gain", "s", "w", None, "", "paper", None, preconditions=claims.get_claim("demo/gain").preconditions), "cpu")


def test_a_result_lacking_a_quantity_of_the_check_is_not_judged(published):
    entry = json.loads(published.read_text())
    del entry["values"]["ci_low"]
    published.write_text(json.dumps(entry))
    row = _row()
    assert "**not judged (recorded under an earlier check)**: The result lacks 'ci_low', which the registered check names." in row
    assert "| 7.5 % |" in row                                   # the value the file recorded, shown as such


def test_a_result_judged_by_its_notebook_keeps_its_value(published):
    entry = json.loads(published.read_text())
    for key in ("values", "registered_check", "check_sha256"):
        del entry[key]
    entry["value"] = 4.25
    published.write_text(json.dumps(entry))
    assert "| 4.25 % |" in _row()


def test_a_protocol_line_dated_the_day_of_the_result_counts(sized):
    entry = json.loads((sized.parent / "results" / "sized.cpu.json").read_text())
    day = entry["provenance"]["time_utc"][:10]
    sized.write_text(sized.read_text().replace("n_prompts: 8", "n_prompts: 16"))
    with pytest.raises(tables.ResultsFileError, match=f"no dated line about a protocol change since {day}: add one"):
        claims.build_table("demo")
    sized.write_text(sized.read_text().replace(
        '      - "2026-11-30: check registered"\n',
        f'      - "2026-11-30: check registered"\n      - "{day}: protocol: 16 prompts at cpu"\n'))
    row = _row("sized")
    assert "**not judged (recorded under an earlier check)**: Recorded under an earlier protocol (the claim's history " \
           "says what changed); re-run the notebook to judge it." in row and "| 3 x |" in row


def test_a_registered_point_reason_is_shown_in_place_of_no_interval(published, demo_root, run_dir):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    text = path.read_text()
    marked = text.replace("threshold: 5.0\n", "threshold: 5.0\n      point: exact over every case\n", 1)
    assert marked != text
    path.write_text(marked)
    # the reason is part of the whole check: a result recorded without it is of an earlier check
    assert judge.check_sha256(claims.load_paper("demo").claims["gain"], "cpu") != json.loads(published.read_text())["check_sha256"]
    assert "**not judged (recorded under an earlier check)**" in _row()
    claims.conclude(claims.Measurement("demo/gain", dict(GOOD)), profile="cpu", seed=0)    # measured with it
    published.write_text((run_dir / "results" / "demo" / "gain.cpu.json").read_text())
    write_published(demo_root)
    row = _row()
    assert "**holds**" in row and "| 7.5 % (no interval: exact over every case) |" in row


def test_a_main_quantity_not_measured_shows_no_other_conditions_interval(run_dir, demo_root):
    from test_conclude import INTERVAL_CLAIM, _ratio

    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + INTERVAL_CLAIM)
    m = _ratio(3, 9, gap_lo=0.1, gap_hi=0.4, n=7)
    m.values.update(ratio=None, ratio_lo=None, ratio_hi=None)
    claims.conclude(m, profile="cpu")
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / "ratio.cpu.json").write_text((run_dir / "results" / "demo" / "ratio.cpu.json").read_text())
    write_published(demo_root)
    row = _row("ratio")
    assert "**inconclusive**" in row and "failed `min-units`" in row
    assert "| — (no interval) |" in row and "95% interval 0.1 to 0.4" not in row     # not the gap's interval
