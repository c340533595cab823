"""Run profiles: the published ones (cpu, paper) and the test-only smoke profile."""
from __future__ import annotations

import pytest

from compendium import profiles


def test_every_published_profile_and_smoke_pass_the_check_and_others_fail():
    for name in (*profiles.PROFILES, "smoke"):
        assert profiles.check(name) == name
    with pytest.raises(ValueError, match=r"unknown profile 'gpu'; valid profiles are 'cpu', 'paper' \(and, for tests only, 'smoke'\)"):
        profiles.check("gpu")


def test_smoke_runs_the_cpu_profile_and_is_never_published():
    assert profiles.base("smoke") == "cpu" and profiles.base("paper") == "paper"
    assert profiles.check_published("cpu") == "cpu"
    with pytest.raises(ValueError, match="'smoke' is for tests only"):
        profiles.check_published("smoke")
    assert "tests only" in profiles.describe("smoke") and profiles.describe("cpu") == profiles.PROFILES["cpu"]


def test_pick_needs_every_published_profile_and_gives_smoke_the_cpu_value():
    assert profiles.pick("smoke", cpu=3, paper=300) == 3
    assert profiles.pick("paper", cpu=3, paper=300) == 300
    with pytest.raises(ValueError, match="missing \\['paper'\\]"):
        profiles.pick("cpu", cpu=3)
    with pytest.raises(ValueError, match="unknown \\['smoke'\\]"):    # smaller samples belong in the protocol
        profiles.pick("cpu", cpu=3, paper=300, smoke=1)
