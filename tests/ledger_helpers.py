"""Shared by the tests of the claims' measure_* functions."""
from __future__ import annotations

from compendium import claims


def fits_ledger(m: claims.Measurement) -> None:
    """Every quantity the claim's check and preconditions read is there and evaluable (with the
    interval ends its conditions name, from the values or the evidence)."""
    claim = claims.get_claim(m.claim)
    missing = set(claim.quantities) - set(m.values)
    assert not missing, missing
    claims.evaluate(claim, m.values, "cpu", m.evidence)  # raises on a wrong type or a missing interval end
