"""Every condition that judges a claim is decided by an interval over its units, or says, in the
check itself, why it is judged on its value alone (``point``: an exact invariant over every case,
a deterministic measurement). A new check that rests on a point estimate without a reason fails here."""
from __future__ import annotations

import pytest

from compendium import claims, profiles

PUBLISHED = [p for p in profiles.PROFILES if p not in profiles.TEST_ONLY]


def _judged():
    out = []
    for paper in claims.paper_ids():
        for claim in claims.load_paper(paper).claims.values():
            # a claim no notebook measures yet is not judged anywhere; its check is registered again
            # when a notebook comes (and must then pass here)
            if claim.check and claim.notebook and any(p not in claim.check.measured_only_at for p in PUBLISHED):
                out.append(claim)
    return out


@pytest.mark.parametrize("claim", _judged(), ids=lambda c: c.key)
def test_each_condition_has_an_interval_or_a_registered_reason(claim):
    bare = [c.describe() for c in claim.check.conditions if c.interval is None and c.point is None]
    assert not bare, (f"{claim.key}: condition(s) {bare} are judged on a point value with no interval and no "
                      "`point:` reason in claims.yaml")


def test_the_rule_catches_a_bare_condition():
    bare = claims.Condition("x", ">", 0)
    assert bare.interval is None and bare.point is None
    assert claims.Condition("x", ">", 0, point="exact").point == "exact"
