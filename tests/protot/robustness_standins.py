"""Stand-ins shared by the value-level tests of protot.robustness (test_robustness_metrics_exact.py,
test_robustness_orders_exact.py, test_robustness_directions_exact.py): pairs of given edit types with
given scores, pairs with seeded spread scores, and the whole-message ``pytest.raises``."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest


def _raises(message: str):
    """pytest.raises(ValueError) matching the whole message."""
    return pytest.raises(ValueError, match="^" + re.escape(message) + "$")


def _pairs(values: dict[str, list[float]], start: int = 3):
    """Pairs of the given types (in order) and one score column per name: {type: [js, ...]}."""
    types = [t for t, xs in values.items() for _ in xs]
    idx = pd.RangeIndex(start, start + len(types))
    pairs = pd.DataFrame({"edit_type": types}, index=idx)
    js = [x for xs in values.values() for x in xs]
    return pairs, pd.DataFrame({"js": js, "other": [10 * x for x in js]}, index=idx)


def _continuous(types, n=12, seed=0):
    """Pairs of ``types`` with spread, seeded scores (type i around 0.1 x (i + 1)): bootstrap ends that
    move with the seed and the number of resamples."""
    rng = np.random.default_rng(seed)
    return _pairs({t: list(0.1 * (i + 1) + rng.uniform(-0.15, 0.15, n)) for i, t in enumerate(types)})
