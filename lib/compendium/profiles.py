"""Run profiles. Every notebook and script takes one.

- ``cpu`` (default): small, runs on 2 CPU cores in minutes; its numbers are measured at that
  scale and are never presented as the paper's.
- ``paper``: the paper's scale; meant for a GPU.

One more profile exists for the test suite only: ``smoke`` runs the cpu profile's code with the
smallest protocol each claim registers for it (``protocol: {smoke: ...}`` in claims.yaml), so that
``make test`` executes every notebook in minutes. Its results are never published or tabled.
"""
from __future__ import annotations

PROFILES: dict[str, str] = {
    "cpu": "small scale, 2 CPU cores, minutes per notebook",
    "paper": "the paper's scale (a GPU)",
}
DEFAULT = "cpu"
#: Profiles for tests only: {name: the published profile whose code and settings it runs}.
TEST_ONLY: dict[str, str] = {"smoke": "cpu"}
_TEST_ONLY_TEXT = {"smoke": "the cpu profile's code at the smallest registered protocols; tests only, never published"}


def describe(profile: str) -> str:
    """One line saying what ``profile`` is."""
    check(profile)
    return PROFILES.get(profile) or _TEST_ONLY_TEXT[profile]


def base(profile: str) -> str:
    """The published profile whose code ``profile`` runs: itself, or ``cpu`` for ``smoke``."""
    check(profile)
    return TEST_ONLY.get(profile, profile)


def check(profile: str) -> str:
    """Return ``profile`` if it is a known profile name, else raise ValueError naming the valid ones."""
    if not isinstance(profile, str) or (profile not in PROFILES and profile not in TEST_ONLY):
        valid = ", ".join(f"'{p}'" for p in PROFILES)
        raise ValueError(f"unknown profile {profile!r}; valid profiles are {valid} (and, for tests only, "
                         f"{', '.join(map(repr, TEST_ONLY))})")
    return profile


def check_published(profile: str) -> str:
    """Return ``profile`` if it is a profile whose results may be published (not a test-only one)."""
    check(profile)
    if profile in TEST_ONLY:
        raise ValueError(f"profile {profile!r} is for tests only: its results are never published; "
                         f"use one of {', '.join(map(repr, PROFILES))}")
    return profile


def pick(profile: str, **values):
    """Choose a value per profile: ``pick(PROFILE, cpu=256, paper=32768)``.

    Every profile must be given, so that adding a profile fails loudly where it is not handled. A
    test-only profile takes the value of the profile it runs (``smoke``: ``cpu``'s); a smaller
    sample for tests belongs in the claim's registered protocol, not here.
    """
    check(profile)
    missing = set(PROFILES) - set(values)
    extra = set(values) - set(PROFILES)
    if missing or extra:
        raise ValueError(f"pick() needs exactly the profiles {sorted(PROFILES)}; missing {sorted(missing)}, unknown {sorted(extra)}")
    return values[base(profile)]


def check_device(device: str) -> str:
    """Return ``device`` if it is "cpu", "cuda" or "cuda:N", else raise ValueError.

    Only the spelling is checked here; :func:`compendium.notebook.start` also checks that a
    requested GPU exists.
    """
    import re

    if isinstance(device, str) and re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return device
    raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N' (N a GPU index, e.g. 'cuda:0')")
