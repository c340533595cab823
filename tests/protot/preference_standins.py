"""Stand-ins shared by the value-level tests of protot.preference (test_preference_judging_exact.py,
test_preference_ratings_exact.py): the pattern that matches a refusal's whole message."""
from __future__ import annotations

import re


def exactly(message):
    """A pattern matching the whole of ``message`` and nothing more."""
    return "^" + re.escape(message) + "$"
