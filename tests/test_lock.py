"""The lock files agree with pyproject.toml and the Makefile, and the environment is the locked one.

``make lock`` writes ``requirements/lock.txt`` (every package ``make setup`` installs, at an exact
version with its hashes) and ``requirements/lock-no-deps.txt`` (the SmolLM2 weights, installed
without dependencies); ``make setup`` installs both.
"""
from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from compendium.paths import repo_root

ROOT = repo_root()
LOCK = ROOT / "requirements" / "lock.txt"
LOCK_NODEPS = ROOT / "requirements" / "lock-no-deps.txt"
# the platform the lock is resolved for (the Makefile's LOCK_TARGET)
ENVIRONMENT = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;.*?)?\s*\\?$")


def read_lock(path) -> dict[str, tuple[Version, list[str]]]:
    """{canonical name: (version, hashes)} of a requirements file written by `uv pip compile --generate-hashes`."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            current = canonicalize_name(m.group(1))
            assert current not in pins, f"{path.name}: {current} is pinned twice"
            pins[current] = (Version(m.group(2)), [])
        elif line.strip().startswith("--hash=sha256:") and current:
            pins[current][1].append(line.strip().split(":", 1)[1].rstrip(" \\"))
        elif line.strip() and not line.lstrip().startswith("#"):
            pytest.fail(f"{path.name}: unexpected line {line!r}")
    return pins


def _makefile_var(name: str) -> str:
    return re.search(rf"^{name}\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def test_every_pyproject_dependency_is_locked_within_its_range():
    lock = read_lock(LOCK)
    problems = []
    for req in _pyproject_requirements():
        if req.marker is not None and not req.marker.evaluate(ENVIRONMENT):
            continue
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{req.name} is not in {LOCK.name}")
        elif not req.specifier.contains(lock[name][0], prereleases=True):
            problems.append(f"{req.name}: locked {lock[name][0]} does not satisfy {req.specifier}")
    assert not problems, "make lock refreshes the lock:\n" + "\n".join(problems)


def test_lock_pins_the_makefile_torch_and_smollm_and_has_hashes():
    lock = read_lock(LOCK)
    torch_pin = Requirement(_makefile_var("TORCH"))
    assert torch_pin.specifier.contains(lock["torch"][0]), f"lock has torch {lock['torch'][0]}, Makefile {torch_pin}"
    assert lock["torch"][0].local == "cpu", "the lock is the CPU environment"

    nodeps = read_lock(LOCK_NODEPS)
    smollm = Requirement(_makefile_var("SMOLLM"))
    assert list(nodeps) == [canonicalize_name(smollm.name)] and smollm.specifier.contains(nodeps[smollm.name][0])
    assert canonicalize_name(smollm.name) not in lock, "SmolLM2 is installed without dependencies, apart"

    for path, pins in ((LOCK, lock), (LOCK_NODEPS, nodeps)):
        unhashed = [n for n, (_, hashes) in pins.items() if not hashes]
        assert not unhashed, f"{path.name}: no hash for {unhashed}"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for _, hs in pins.values() for h in hs)
        text = path.read_text()
        assert not re.search(r"(^|\s)(/|file:)", text.replace("# ", "")), f"{path.name} names a path of this machine"


def test_installed_environment_is_the_locked_one():
    """What make setup installed matches the lock (torch and triton excepted: a GPU set-up,
    LOCK=0, takes its own build of them)."""
    lock = read_lock(LOCK)
    lock.update(read_lock(LOCK_NODEPS))
    wrong = []
    for name, (version, _) in lock.items():
        if name in ("torch", "triton"):
            continue
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} (locked {version}) is not installed")
            continue
        if installed != version:
            wrong.append(f"{name}: installed {installed}, locked {version}")
    assert not wrong, "the environment differs from the lock (`make setup` installs it):\n" + "\n".join(wrong)
