"""Shared by the tests of the claims' measure_* functions."""
from __future__ import annotations

from compendium import claims


def fits_ledger(m: claims.Measurement) -> None:
    """Every quantity the claim's check and preconditions read is there and evaluable."""
    claim = claims.get_claim(m.claim)
    missing = set(claim.quantities) - set(m.values)
    assert not missing, missing
    claims.evaluate(claim, m.values, "cpu")  # raises on a value of the wrong type
