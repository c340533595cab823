"""Registration a reader can check, per profile, against the repository's own git history.

Each claim's ``check.registered`` names the commit that registered its whole check as it stands
(:func:`compendium.judge.raw_check_sha256`: every condition with its interval rule and point
reason, the preconditions, min_units and the protocol at the profile); a claim that says nothing
else (no ``registered_after``) had all of it committed before its first published result at every
profile (:mod:`compendium.registration` derives both from the history of claims.yaml and of
``papers/<paper>/results/``)."""
from __future__ import annotations

import json

import pytest
import yaml

from compendium import claims, judge, profiles, registration

if not registration.has_history():
    pytest.skip("registration is checked against the git history; this copy has none", allow_module_level=True)


def _claims() -> list[tuple[str, str, dict]]:
    return [(p, cid, item) for p in claims.paper_ids() for cid, item in registration.current(p).items()]


CLAIMS = _claims()
IDS = [f"{p}/{cid}" for p, cid, _ in CLAIMS]


@pytest.mark.parametrize(("paper", "claim_id", "item"), CLAIMS, ids=IDS)
def test_registered_names_the_commit_that_registered_the_whole_check(paper, claim_id, item):
    claim = claims.load_paper(paper).claims[claim_id]
    commit = claim.check.registered
    assert commit, f"{claim.key}: check.registered must name the commit that registered the check"
    full = registration.git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").stdout.strip()
    assert full, f"{claim.key}: registered {commit!r} is not a commit of this repository"
    d = registration.derive(paper, claim_id, item)
    for at in d.at:
        now = judge.check_sha256(claim, at.profile)
        assert judge.raw_check_sha256(item, at.profile) == now
        assert at.commit is not None, f"{claim.key}: the whole check at {at.profile} is in no commit yet"
        # the profile's registering commit: the check as it stands there, in none of its parents
        assert registration.hash_at(at.commit, paper, claim_id, at.profile) == now
        parents = registration.git("rev-list", "--parents", "-n", "1", at.commit).stdout.split()[1:]
        assert all(registration.hash_at(p, paper, claim_id, at.profile) != now for p in parents)
        # the claim's commit: from it on the whole check stands at this profile too
        assert registration.descends(at.commit, full), (
            f"{claim.key}: at {at.profile} the whole check was registered in {at.commit[:7]}, after {commit}")
        assert registration.hash_at(full, paper, claim_id, at.profile) == now, (
            f"{claim.key}: at {commit} the whole check at {at.profile} differs from the one registered now")
    assert full == d.registered, (f"{claim.key}: registered {commit}, but the whole check as it stands was "
                                  f"registered in {d.registered and d.registered[:7]}")


@pytest.mark.parametrize(("paper", "claim_id", "item"), CLAIMS, ids=IDS)
def test_before_measuring_only_where_the_whole_check_preceded_every_result_at_its_profile(paper, claim_id, item):
    claim = claims.load_paper(paper).claims[claim_id]
    d = registration.derive(paper, claim_id, item)
    if claim.check.registered_after is None:
        for at in d.at:
            for where, revision, _ in at.results:
                assert revision and revision != "unknown", f"{where}: records no git revision"
                assert registration.descends(at.commit, revision), (
                    f"{claim.key} says its check was registered before measuring (no registered_after), but {where} "
                    f"was measured at {revision}, which does not descend from {at.commit[:7]}, where the whole check "
                    f"at {at.profile} was registered")
    assert registration.wording_holds(claim.check.registered, claim.check.registered_after, d), (
        f"{claim.key}: the history gives {d.registered and d.registered[:7]}, after {d.registered_after}")


def test_the_derivation_tells_before_from_after_on_planted_histories(monkeypatch):
    """derive() on a planted history: the whole check registered in c2 (its protocol changed
    there); a result measured at c1 (under the earlier protocol) makes it "after earlier checks'
    measurements"; one recorded under the check as it stands, "after a first measurement"."""
    base = {"id": "x", "check": {"quantity": "q", "op": ">", "threshold": 0, "registered": "c2"},
            "protocol": {"all": {"n": 8}}}
    now = {**base, "protocol": {"all": {"n": 16}}}
    history = {"c3": now, "c2": now, "c1": base, "c0": None}
    parents = {"c3": ("c2",), "c2": ("c1",), "c1": ("c0",), "c0": ()}
    order = ["c3", "c2", "c1", "c0"]
    monkeypatch.setattr(registration, "_commits", lambda: tuple((c, parents[c]) for c in order))
    monkeypatch.setattr(registration, "claims_at", lambda c, p: {} if history[c] is None else {"x": history[c]})
    monkeypatch.setattr(registration, "descends", lambda a, r: order.index(r.removesuffix("+dirty")) <= order.index(a))
    monkeypatch.setattr(registration, "_latest", lambda cs: min(cs, key=order.index))
    results = {"cpu": [("r at c3", "c3", judge.raw_check_sha256(now, "cpu"))], "paper": []}
    monkeypatch.setattr(registration, "result_revisions", lambda p, c, prof: results[prof])
    d = registration.derive("demo", "x", now)
    assert d.registered == "c2" and d.registered_after is None
    assert registration.wording_holds("c2", None, d) and not registration.wording_holds("c1", None, d)
    results["cpu"].insert(0, ("r at c1", "c1", judge.raw_check_sha256(base, "cpu")))
    d = registration.derive("demo", "x", now)
    assert d.registered_after == registration.AFTER_EARLIER and d.at[0].measured_first == ("r at c1",)
    assert not registration.wording_holds("c2", None, d)
    assert registration.wording_holds("c2", registration.AFTER_EARLIER, d)
    assert registration.wording_holds("c2", registration.AFTER, d)        # the stronger wording is allowed
    results["cpu"][0] = ("r at c1", "c1+dirty", judge.raw_check_sha256(now, "cpu"))  # the check, uncommitted
    d = registration.derive("demo", "x", now)
    assert d.registered_after == registration.AFTER
    assert not registration.wording_holds("c2", registration.AFTER_EARLIER, d)
    # the paper protocol alone changes: the paper profile's registering commit moves, cpu's stays
    later = {**now, "protocol": {"all": {"n": 16}, "paper": {"n": 64}}}
    history.update(c4=later)
    parents["c4"] = ("c3",)
    order.insert(0, "c4")
    results["cpu"] = [("r at c3", "c3", judge.raw_check_sha256(later, "cpu"))]
    d = registration.derive("demo", "x", later)
    assert [(a.profile, a.commit) for a in d.at] == [("cpu", "c2"), ("paper", "c4")]
    assert d.registered_after is None         # no paper result; the cpu one followed c2


def test_a_check_changed_and_restored_counts_from_the_restore_only_where_a_result_came_between(monkeypatch):
    base = {"id": "x", "check": {"quantity": "q", "op": ">", "threshold": 0}, "protocol": {"all": {"n": 8}}}
    now = {**base, "protocol": {"all": {"n": 16}}}
    order = ["c4", "c3", "c2", "c1"]            # c2 registers, c3 reverts it, c4 restores it
    history = {"c4": now, "c3": base, "c2": now, "c1": base}
    parents = {"c4": ("c3",), "c3": ("c2",), "c2": ("c1",), "c1": ()}
    monkeypatch.setattr(registration, "_commits", lambda: tuple((c, parents[c]) for c in order))
    monkeypatch.setattr(registration, "claims_at", lambda c, p: {"x": history[c]})
    monkeypatch.setattr(registration, "descends", lambda a, r: order.index(r) <= order.index(a))
    h_now, h_base = judge.raw_check_sha256(now, "cpu"), judge.raw_check_sha256(base, "cpu")
    assert registration.introducing_commits("demo", "x", "cpu", h_now) == ["c4", "c2"]
    assert registration.registering_commit("demo", "x", "cpu", h_now, [("r", "c4", h_now)]) == "c2"
    assert registration.registering_commit("demo", "x", "cpu", h_now, [("r", "c3", h_base), ("r", "c4", h_now)]) == "c4"
    assert registration.registering_commit("demo", "x", "cpu", h_now, [("r", "c2", h_now), ("r", "c4", h_now)]) == "c2"
    assert registration.registering_commit("demo", "x", "cpu", h_base, []) == "c1"


def test_a_check_and_the_check_it_replaced_never_share_a_hash():
    """Over the history of every claims.yaml: wherever any part of a claim's whole check changed
    between a commit and its parent (a condition, interval rule, point reason, precondition,
    min_units, the protocol at the profile), the hash at that profile changed too."""
    compared = changed = 0
    for paper in claims.paper_ids():
        rel = f"papers/{paper}/claims.yaml"
        for commit in registration.git("log", "--full-history", "--format=%H", "--", rel).stdout.split():
            parents = registration.git("rev-list", "--parents", "-n", "1", commit).stdout.split()[1:]
            new = registration.claims_at(commit, paper)
            for parent in parents:
                old = registration.claims_at(parent, paper)
                for cid, item in new.items():
                    if cid not in old or not item.get("check") or not old[cid].get("check"):
                        continue
                    for profile in profiles.PROFILES:
                        compared += 1
                        parts = registration.changed_parts(old[cid], item, profile)
                        same = judge.raw_check_sha256(old[cid], profile) == judge.raw_check_sha256(item, profile)
                        assert bool(parts) != same, (paper, cid, commit[:7], profile, parts)
                        changed += bool(parts)
    assert compared > 500 and changed > 50, (compared, changed)


def _scheme1(item: dict) -> str:
    """The hash scheme 1 gave a claim as written (quantities, comparators, thresholds, the
    explicit preconditions): what results recorded before the whole check was hashed."""
    c = item["check"]
    conds = [judge._condition_def(x["quantity"], x["op"], x["threshold"]) for x in [c, *(c.get("all_of") or [])]]
    pre = [judge._precondition_def(p) for p in item.get("preconditions") or []]
    return judge._scheme1_sha256(conds, c.get("measured_only_at") or [], pre)


def test_the_discredited_concept_check_and_todays_differ():
    """The 2026-11-30 concept-prototypes check (registered in 2811a19, replaced on 2026-12-01
    because the trained model with its prototypes re-drawn passed it) had the same scheme-1 hash
    as today's check; under the whole-check hash they differ, so a result of the one is never
    judged by the other and the registration cannot be carried over."""
    old = registration.claims_at(registration.git("rev-parse", "2811a19").stdout.strip(), "protot")["concept-prototypes"]
    now = registration.current("protot")["concept-prototypes"]
    assert _scheme1(old) == _scheme1(now)
    for profile in profiles.PROFILES:
        assert judge.raw_check_sha256(old, profile) != judge.raw_check_sha256(now, profile)
    assert registration.changed_parts(old, now, "cpu")[:2] == ["interval rule", "min_units"]


def test_every_published_result_is_read_under_the_scheme_it_was_recorded_in():
    """A result recorded under scheme 1 is read by its recorded check: its stated hash matches the
    scheme-1 hash of the check it lists, and its whole-check hash is computed from that check and
    the protocol it ran; so none becomes "not judged" unless its whole check differs from today's."""
    for paper in claims.paper_ids():
        for path in sorted((claims.paths.results_dir(paper)).glob("*.json")):
            if path.name == "PUBLISHED.json":
                continue
            entry = json.loads(path.read_text())
            if entry.get("check_hash_scheme") is None and entry.get("check_sha256"):
                parts = judge._recorded_parts(entry)
                assert parts is not None and entry["check_sha256"] == judge._scheme1_sha256(*parts), path.name


def test_the_tables_say_when_a_check_came_after_a_first_measurement(demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    text = path.read_text().replace('registered: "abc1234"', 'registered: "abc1234"\n      registered_after: a first measurement')
    path.write_text(text)
    table = claims.build_table("demo")
    row = next(line for line in table.splitlines() if line.startswith("| gain "))
    assert "(registered in abc1234 after a first measurement; see history)" in row
    assert "- **gain**: registered in abc1234 after a first measurement; see history." in table
    assert "  - 2026-11-30: check pre-registered" in table          # its history, under it
    flag = next(line for line in table.splitlines() if line.startswith("| flag "))
    assert "(registered before measuring)" in flag and "written before measuring" not in table


def test_the_re_derived_wording_is_shown_with_its_history_line():
    """Each claim whose registration the whole-check hash moved says so in a dated history line,
    which the claims table prints under the claim's registration."""
    moved = 0
    for paper in claims.paper_ids():
        raw = yaml.safe_load((claims.paths.papers_dir() / paper / "claims.yaml").read_text())["claims"]
        for item in raw:
            lines = [h for h in item.get("history") or [] if "registration re-derived under the whole-check hash" in h]
            for line in lines:
                assert line.startswith("2026-12-04: ")
                moved += 1
    assert moved >= 20
