"""Run profiles. Every notebook and script takes one.

- ``cpu`` (default): small, runs on 2 CPU cores in minutes; its numbers are measured at that
  scale and are never presented as the paper's.
- ``paper``: the paper's scale; meant for a GPU.
"""
from __future__ import annotations

PROFILES: dict[str, str] = {
    "cpu": "small scale, 2 CPU cores, minutes per notebook",
    "paper": "the paper's scale (a GPU)",
}
DEFAULT = "cpu"


def check(profile: str) -> str:
    """Return ``profile`` if it is a known profile name, else raise ValueError naming the valid ones."""
    if not isinstance(profile, str) or profile not in PROFILES:
        valid = ", ".join(f"'{p}'" for p in PROFILES)
        raise ValueError(f"unknown profile {profile!r}; valid profiles are {valid}")
    return profile


def pick(profile: str, **values):
    """Choose a value per profile: ``pick(PROFILE, cpu=256, paper=32768)``.

    Every profile must be given, so that adding a profile fails loudly where it is not handled.
    """
    check(profile)
    missing = set(PROFILES) - set(values)
    extra = set(values) - set(PROFILES)
    if missing or extra:
        raise ValueError(f"pick() needs exactly the profiles {sorted(PROFILES)}; missing {sorted(missing)}, unknown {sorted(extra)}")
    return values[profile]


def check_device(device: str) -> str:
    """Return ``device`` if it is "cpu", "cuda" or "cuda:N", else raise ValueError.

    Only the spelling is checked here; :func:`compendium.notebook.start` also checks that a
    requested GPU exists.
    """
    import re

    if isinstance(device, str) and re.fullmatch(r"cpu|cuda(:\d+)?", device):
        return device
    raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N' (N a GPU index, e.g. 'cuda:0')")
