"""The locked environment: which Pythons and platforms ``requirements/lock.txt`` serves, and proof
that it has a wheel for every package on each of them, checked without installing anything.

``make lock`` resolves ``requirements/lock.txt`` with uv's universal resolution for the environments
that ``pyproject.toml`` lists under ``[tool.uv] environments`` (from ``requires-python`` up), each
package at an exact version (a package may have one version for older Pythons and another for
newer ones, told apart by environment markers) with the sha256 of its files. uv records hashes but
not which file each hash belongs to, so ``make lock`` also has uv write the same resolution as a
PEP 751 ``pylock.toml`` (which names every file) and then runs ``python -m compendium.lockfiles
manifest``, which

* keeps in the lock files only the hashes of files for the served platforms,
* finds, for every served Python and platform, the oldest glibc (Linux) or macOS release on which
  every package that applies there has a wheel, and refuses to write anything where some package
  has none (the message names the package, the Python and the platform),
* writes the manifest ``requirements/lock-files.txt``: one ``serves`` line per platform (its
  Pythons and the oldest system release) and one ``file`` line per locked file (package, version,
  sha256, file name).

``make setup`` asks ``python -m compendium.lockfiles serves`` (the standard library only, so it runs
before any set-up) whether the interpreter it was given is one the lock serves; where it is not,
``python -m compendium.lockfiles constraints`` prints the lock's versions for the nearest served
environment, which pip then takes as constraints (no hashes) while installing pyproject's ranges.
``tests/test_lock.py`` repeats the manifest's checks on the committed files.

The marker, tag and version logic comes from ``packaging`` (imported where needed, from pip's own
copy when the package itself is not installed); reading the manifest needs nothing but Python.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: The platforms a lock can serve: name -> (sys_platform, platform_system, platform_machine, os_name).
PLATFORMS: dict[str, tuple[str, str, str, str]] = {
    "linux-x86_64": ("linux", "Linux", "x86_64", "posix"),
    "linux-aarch64": ("linux", "Linux", "aarch64", "posix"),
    "macos-arm64": ("darwin", "Darwin", "arm64", "posix"),
    "macos-x86_64": ("darwin", "Darwin", "x86_64", "posix"),
    "windows-amd64": ("win32", "Windows", "AMD64", "nt"),
}
#: The CPython minor versions looked at when reading which ones pyproject's environments include.
MINORS = range(6, 17)
#: The micro versions each Python is checked at (a marker may split a minor version).
MICROS = (0, 99)

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*(.*?))?\s*\\?$")
_HASH = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*\\?$")


class LockError(Exception):
    """A lock file, manifest or pylock that cannot be read, or a lock that does not serve what it says."""


def canonical(name: str) -> str:
    """A project name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------
# reading the lock files and the manifest (standard library only)
# ---------------------------------------------------------------------------------------------
@dataclass
class Pin:
    """One ``name==version ; marker`` entry of a lock file, with its hashes."""

    name: str  # canonical
    version: str
    marker: str | None
    hashes: list[str] = field(default_factory=list)
    source: str = ""

    def applies(self, environment: dict) -> bool:
        return self.marker is None or _marker(self.marker).evaluate(environment)


def read_pins(path: Path) -> list[Pin]:
    """The entries of a requirements file written by ``uv pip compile --generate-hashes``."""
    pins: list[Pin] = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _PIN.match(line)
        if m:
            pins.append(Pin(canonical(m.group(1)), m.group(2), m.group(3) or None, [], Path(path).name))
            continue
        h = _HASH.match(line)
        if h and pins:
            pins[-1].hashes.append(h.group(1))
            continue
        raise LockError(f"{Path(path).name}, line {number}: not a pin, a hash or a comment: {line!r}")
    return pins


@dataclass(frozen=True)
class LockedFile:
    name: str  # canonical
    version: str
    sha256: str
    filename: str


@dataclass(frozen=True)
class Served:
    """One ``serves`` line: a platform, the oldest system release it needs and its Pythons."""

    platform: str
    system: str  # "glibc 2.28", "macOS 14.0" or "any"
    pythons: tuple[str, ...]

    def line(self) -> str:
        return f"serves {self.platform} {self.system.replace(' ', '-')} {' '.join(self.pythons)}"

    def release(self) -> tuple[int, ...] | None:
        """The oldest glibc / macOS as numbers, (2, 28) or (14, 0); None where any will do."""
        return None if self.system == "any" else _numbers(self.system.partition(" ")[2])


def read_manifest(path: Path) -> tuple[list[Served], list[LockedFile]]:
    """The ``serves`` and ``file`` lines of a manifest written by :func:`write_manifest`."""
    served, files = [], []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "serves" and len(words) >= 4 and words[1] in PLATFORMS:
            served.append(Served(words[1], words[2].replace("-", " "), tuple(words[3:])))
        elif words[0] == "file" and len(words) == 5 and re.fullmatch(r"[0-9a-f]{64}", words[3]):
            files.append(LockedFile(words[1], words[2], words[3], words[4]))
        else:
            raise LockError(f"{Path(path).name}, line {number}: not a serves or file line: {line!r}")
    if not served:
        raise LockError(f"{Path(path).name} has no serves line (make lock writes it)")
    return served, files


# ---------------------------------------------------------------------------------------------
# the interpreter make setup was given (standard library only)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interpreter:
    implementation: str  # sys.implementation.name
    python: str  # "3.11"
    full: str  # "3.11.7"
    platform: str  # a PLATFORMS key, or "<sys.platform>-<machine>" for any other
    system: tuple[str, tuple[int, ...]] | None  # ("glibc", (2, 36)), ("macOS", (14, 5)) or None

    def describe(self) -> str:
        impl = "CPython" if self.implementation == "cpython" else self.implementation
        extra = f" ({self.system[0]} {'.'.join(map(str, self.system[1]))})" if self.system else ""
        return f"{impl} {self.full} on {self.platform}{extra}"


def this_interpreter() -> Interpreter:
    machine = platform.machine()
    if sys.platform.startswith("linux"):
        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())
        name = f"linux-{arch}"
        system = _glibc()
    elif sys.platform == "darwin":
        name = f"macos-{machine.lower()}"
        release = platform.mac_ver()[0]
        system = ("macOS", _numbers(release)) if release else None
    elif sys.platform == "win32":
        name, system = f"windows-{machine.lower()}", None
    else:
        name, system = f"{sys.platform}-{machine.lower()}", None
    v = sys.version_info
    return Interpreter(sys.implementation.name, f"{v.major}.{v.minor}", f"{v.major}.{v.minor}.{v.micro}",
                       name, system)


def _glibc() -> tuple[str, tuple[int, ...]] | None:
    """("glibc", its version) of this process, or None (musl, for instance)."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (AttributeError, OSError, ValueError):
        found = ""
    kind, _, version = found.partition(" ")
    if kind != "glibc":
        kind, version = platform.libc_ver()
    return ("glibc", _numbers(version)) if kind == "glibc" and version else None


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2])


def serves(served: list[Served], interp: Interpreter) -> bool:
    """Whether a lock serving ``served`` can be installed, hashes checked, by ``interp``."""
    if interp.implementation != "cpython":
        return False
    for s in served:
        if s.platform != interp.platform or interp.python not in s.pythons:
            continue
        if s.release() is None:
            return True
        kind = s.system.partition(" ")[0]
        return interp.system is not None and interp.system[0] == kind and interp.system[1] >= s.release()
    return False


def _python_list(pythons) -> str:
    minors = sorted(int(p.split(".")[1]) for p in pythons)
    if len(minors) > 1 and minors == list(range(minors[0], minors[-1] + 1)):
        return f"3.{minors[0]}-3.{minors[-1]}"
    return ", ".join(f"3.{m}" for m in minors)


def describe_served(served: list[Served]) -> str:
    parts = []
    for s in served:
        floor = "" if s.system == "any" else f" with {s.system} or newer"
        parts.append(f"CPython {_python_list(s.pythons)} on {s.platform}{floor}")
    return " and ".join(parts)


# ---------------------------------------------------------------------------------------------
# environments, tags and coverage (packaging)
# ---------------------------------------------------------------------------------------------
def _packaging():
    """``packaging`` (markers, specifiers, tags, utils, version), or pip's own copy of it."""
    try:
        import packaging.markers
        import packaging.specifiers
        import packaging.tags
        import packaging.utils
        import packaging.version

        return packaging
    except ImportError:  # a bare venv: pip carries a copy
        import pip._vendor.packaging.markers
        import pip._vendor.packaging.specifiers
        import pip._vendor.packaging.tags
        import pip._vendor.packaging.utils
        import pip._vendor.packaging.version

        return pip._vendor.packaging


@functools.lru_cache(maxsize=None)
def _marker(text: str):
    return _packaging().markers.Marker(text)


def marker_environment(python: str, platform_name: str, micro: int = 0) -> dict:
    """The PEP 508 marker values of CPython ``python`` (``"3.12"``) on one of :data:`PLATFORMS`."""
    sys_platform, system, machine, os_name = PLATFORMS[platform_name]
    full = f"{python}.{micro}"
    return {"implementation_name": "cpython", "implementation_version": full, "os_name": os_name,
            "platform_machine": machine, "platform_python_implementation": "CPython",
            "platform_release": "", "platform_system": system, "platform_version": "",
            "python_full_version": full, "python_version": python, "sys_platform": sys_platform,
            "extra": ""}


def declared_environments(pyproject: dict) -> dict[str, list[str]]:
    """{platform: [Python, ...]} that pyproject's ``requires-python`` and ``[tool.uv] environments``
    (the environments uv resolves the lock for) include, over :data:`PLATFORMS` and :data:`MINORS`."""
    pk = _packaging()
    try:
        markers = [pk.markers.Marker(m) for m in pyproject["tool"]["uv"]["environments"]]
    except KeyError:
        raise LockError("pyproject.toml has no [tool.uv] environments: the lock's platforms are not declared") from None
    requires = pk.specifiers.SpecifierSet(pyproject["project"].get("requires-python", ""))
    out: dict[str, list[str]] = {}
    for name in PLATFORMS:
        for minor in MINORS:
            python = f"3.{minor}"
            if requires.contains(f"{python}.0") and any(
                    m.evaluate(marker_environment(python, name, micro)) for m in markers for micro in MICROS):
                out.setdefault(name, []).append(python)
    return out


def _linux_platforms(arch: str, glibc_minor: int) -> list[str]:
    plats = [f"manylinux_2_{g}_{arch}" for g in range(glibc_minor, 4, -1)]
    for alias, g in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)):
        if glibc_minor >= g and (alias == "manylinux2014" or arch in ("x86_64", "i686")):
            plats.append(f"{alias}_{arch}")
    return plats + [f"linux_{arch}"]


@functools.lru_cache(maxsize=None)
def supported_tags(python: str, platform_name: str, system: tuple[int, ...] | None) -> frozenset:
    """The wheel tags pip accepts for CPython ``python`` on ``platform_name`` with glibc / macOS ``system``."""
    tags = _packaging().tags
    machine = PLATFORMS[platform_name][2]
    if platform_name.startswith("linux-"):
        plats = _linux_platforms(machine, system[1])
    elif platform_name.startswith("macos-"):
        plats = list(tags.mac_platforms(system, machine))
    else:
        plats = ["win_amd64"]
    version = tuple(int(x) for x in python.split("."))
    interpreter = f"cp{version[0]}{version[1]}"
    return frozenset(tags.cpython_tags(version, abis=[interpreter], platforms=plats)) | frozenset(
        tags.compatible_tags(version, interpreter, plats))


def _system_candidates(platform_name: str, files: list[LockedFile]) -> list[tuple[int, ...] | None]:
    """The glibc / macOS releases at which a platform's wheels change (oldest first)."""
    if platform_name.startswith("linux-"):
        found = {(2, 17)}
        for f in files:
            for m in re.finditer(r"manylinux_(\d+)_(\d+)_|manylinux(2014|2010|1)_", f.filename):
                found.add((int(m.group(1)), int(m.group(2))) if m.group(1) else
                          (2, {"2014": 17, "2010": 12, "1": 5}[m.group(3)]))
        return sorted(found)
    if platform_name.startswith("macos-"):
        found = {(11, 0)} if platform_name == "macos-arm64" else {(10, 9)}
        for f in files:
            for m in re.finditer(r"macosx_(\d+)_(\d+)_", f.filename):
                found.add((int(m.group(1)), int(m.group(2))))
        return sorted(v for v in found if platform_name != "macos-arm64" or v >= (11, 0))
    return [None]


def _system_name(platform_name: str, system: tuple[int, ...] | None) -> str:
    if system is None:
        return "any"
    return f"{'glibc' if platform_name.startswith('linux-') else 'macOS'} {system[0]}.{system[1]}"


def coverage_problems(pins: list[Pin], files: list[LockedFile], platform_name: str, pythons,
                      system: tuple[int, ...] | None) -> list[str]:
    """What stops the pins from installing, hashes checked, on ``platform_name`` at ``system``: a
    package that applies there with no hash-listed wheel whose tags fit, or two versions of one package."""
    utils = _packaging().utils
    by_hash: dict[str, list[LockedFile]] = {}
    for f in files:
        by_hash.setdefault(f.sha256, []).append(f)
    problems = []
    for python in pythons:
        accepted = supported_tags(python, platform_name, system)
        where = f"CPython {python} on {platform_name} ({_system_name(platform_name, system)})"
        for micro in MICROS:
            environment = marker_environment(python, platform_name, micro)
            applying = [p for p in pins if p.applies(environment)]
            seen: dict[str, Pin] = {}
            for pin in applying:
                if pin.name in seen:
                    problems.append(f"{pin.name}: {seen[pin.name].version} and {pin.version} both apply to {where}")
                seen[pin.name] = pin
                wheels = [f.filename for h in pin.hashes for f in by_hash.get(h, ()) if f.filename.endswith(".whl")]
                if not any(utils.parse_wheel_filename(w)[3] & accepted for w in wheels):
                    problems.append(f"{pin.name} {pin.version}: no wheel among its hashes for {where}")
    return sorted(set(problems))


def check_served(pins: list[Pin], files: list[LockedFile], declared: dict[str, list[str]]) -> tuple[list[Served], list[str]]:
    """For each declared platform, the oldest system release at which every pin has a wheel for
    every declared Python; and the problems where no release works."""
    served, problems = [], []
    for name, pythons in declared.items():
        candidates = _system_candidates(name, files)
        oldest = next(((c,) for c in candidates if not coverage_problems(pins, files, name, pythons, c)), None)
        if oldest is not None:
            served.append(Served(name, _system_name(name, oldest[0]), tuple(pythons)))
        else:
            problems += coverage_problems(pins, files, name, pythons, candidates[-1])
    return served, problems


def check_files_match(pins: list[Pin], files: list[LockedFile]) -> list[str]:
    """Every hash of every pin names a file of the same package and version, and every file is a pin's."""
    by_hash: dict[str, list[LockedFile]] = {}
    for f in files:
        by_hash.setdefault(f.sha256, []).append(f)
    versions = _packaging().version.Version
    problems = []
    for pin in pins:
        if not pin.hashes:
            problems.append(f"{pin.source}: {pin.name} {pin.version} has no hash")
        for h in pin.hashes:
            if h not in by_hash:
                problems.append(f"{pin.source}: {pin.name} {pin.version}: hash {h[:12]}... names no file of the manifest")
            for f in by_hash.get(h, ()):
                if f.name != pin.name or versions(f.version) != versions(pin.version):
                    problems.append(f"{pin.source}: {pin.name} {pin.version}: hash {h[:12]}... is {f.filename}")
    locked = {h for p in pins for h in p.hashes}
    problems += [f"manifest: {f.filename} is in no lock file" for f in files if f.sha256 not in locked]
    return problems


# ---------------------------------------------------------------------------------------------
# make lock: the manifest
# ---------------------------------------------------------------------------------------------
def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(Path(path).read_text())


def read_pylock(path: Path) -> list[LockedFile]:
    """Every wheel and sdist of a ``pylock.toml`` written by uv, by file name."""
    out = []
    for package in _toml(path).get("packages", []):
        entries = list(package.get("wheels", []))
        if "sdist" in package:
            entries.append(package["sdist"])
        for entry in entries:
            where = entry.get("url") or entry.get("path") or ""
            filename = entry.get("name") or unquote(Path(urlsplit(where).path).name)
            sha = entry.get("hashes", {}).get("sha256")
            if not filename or not sha:
                raise LockError(f"{Path(path).name}: {package['name']} {package['version']}: a file without name or sha256")
            out.append(LockedFile(canonical(package["name"]), package["version"], sha, filename))
    return out


def _filtered_text(path: Path, keep: set[str]) -> str:
    """A lock file's text with only the hashes in ``keep`` (uv's layout: a pin line and each of its
    hash lines but the last end in a backslash)."""
    lines = []
    for line in Path(path).read_text().splitlines():
        h = _HASH.match(line)
        if h:
            if h.group(1) in keep:
                lines.append(f"    --hash=sha256:{h.group(1)}")
        elif _PIN.match(line):
            lines.append(line.rstrip(" \\"))
        else:
            lines.append(line)
    out = []
    for i, line in enumerate(lines):
        continued = i + 1 < len(lines) and lines[i + 1].startswith("    --hash=")
        entry = bool(_PIN.match(line)) or line.startswith("    --hash=")
        out.append(line + " \\" if entry and continued else line)
    return "\n".join(out) + "\n"


def write_manifest(locks: list[Path], pylocks: list[Path], pyproject: Path, output: Path) -> list[Served]:
    """Check and write: the lock files keep the hashes of the pylocks' files, the manifest names them
    and says what the lock serves. Nothing is written when a declared environment is not served."""
    files = [f for p in pylocks for f in read_pylock(p)]
    pins = [p for lock in locks for p in read_pins(lock)]
    version = _packaging().version.Version
    listed = {(f.name, version(f.version)) for f in files}
    missing = sorted(f"{p.name}=={p.version}" for p in pins if (p.name, version(p.version)) not in listed)
    if missing:
        raise LockError("the pylock resolution lacks " + ", ".join(missing) + " (make lock writes both from one resolution)")
    keep_by_pin = {}
    for pin in pins:
        named = {f.sha256 for f in files if f.name == pin.name and version(f.version) == version(pin.version)}
        kept = [h for h in pin.hashes if h in named]
        if not kept:
            raise LockError(f"{pin.source}: no file of {pin.name} {pin.version} is for a served platform")
        keep_by_pin[id(pin)] = kept
    for pin in pins:
        pin.hashes = keep_by_pin[id(pin)]
    kept_hashes = {h for p in pins for h in p.hashes}
    files = sorted({f for f in files if f.sha256 in kept_hashes}, key=lambda f: (f.name, f.version, f.filename))
    declared = declared_environments(_toml(pyproject))
    served, problems = check_served(pins, files, declared)
    problems += check_files_match(pins, files)
    if problems:
        raise LockError("the lock does not serve what pyproject.toml declares:\n  " + "\n  ".join(problems))
    for lock in locks:
        Path(lock).write_text(_filtered_text(lock, kept_hashes))
    names = ", ".join(Path(p).as_posix() for p in locks)
    lines = [
        f"# Written by `make lock` with {names}: do not edit.",
        "# serves PLATFORM OLDEST-SYSTEM PYTHONS: every package of the lock that applies there has a wheel",
        "# among its hashes for each of those CPythons (checked when written, and by tests/test_lock.py).",
        *(s.line() for s in served),
        "# file PACKAGE VERSION SHA256 FILE-NAME: the file behind every hash of the lock files.",
        *(f"file {f.name} {f.version} {f.sha256} {f.filename}" for f in files),
    ]
    Path(output).write_text("\n".join(lines) + "\n")
    return served


# ---------------------------------------------------------------------------------------------
# make setup: outside the lock, the constraints
# ---------------------------------------------------------------------------------------------
def nearest_served(served: list[Served], interp: Interpreter) -> tuple[str, str]:
    """The served (Python, platform) closest to ``interp``: its own Python where some platform serves
    it, else the nearest served Python (newer on a tie); its own platform where that serves the
    Python, else one of the same system, else the first."""
    def minor(p: str) -> int:
        return int(p.split(".")[1])

    pythons = {p for s in served for p in s.pythons}
    python = interp.python if interp.python in pythons else min(
        pythons, key=lambda p: (abs(minor(p) - minor(interp.python)), -minor(p)))
    offering = [s.platform for s in served if python in s.pythons]
    family = [p for p in offering if p.split("-")[0] == interp.platform.split("-")[0]]
    return python, interp.platform if interp.platform in offering else (family or offering)[0]


def constraints(pins: list[Pin], python: str, platform_name: str, exclude=()) -> list[str]:
    """``name==version`` of every pin that applies to CPython ``python`` on ``platform_name``."""
    environment = marker_environment(python, platform_name)
    skip = {canonical(n) for n in exclude}
    return sorted(f"{p.name}=={p.version}" for p in pins if p.name not in skip and p.applies(environment))


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compendium.lockfiles", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("manifest", help="make lock: check the lock files against pyproject, write the manifest")
    m.add_argument("--lock", action="append", required=True, type=Path, help="a lock file (repeatable)")
    m.add_argument("--pylock", action="append", required=True, type=Path, help="uv's pylock.toml of the same resolution")
    m.add_argument("--pyproject", default=Path("pyproject.toml"), type=Path)
    m.add_argument("-o", "--output", required=True, type=Path)
    s = sub.add_parser("serves", help="make setup: exit 0 if the lock serves this interpreter, else say so and exit 1")
    s.add_argument("manifest", type=Path)
    s.add_argument("--lock-name", default="requirements/lock.txt")
    c = sub.add_parser("constraints", help="print the lock's versions for this interpreter or the nearest served one")
    c.add_argument("manifest", type=Path)
    c.add_argument("--lock", action="append", required=True, type=Path)
    c.add_argument("--exclude", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        if args.command == "manifest":
            served = write_manifest(args.lock, args.pylock, args.pyproject, args.output)
            print(f">> {args.output}: the lock serves {describe_served(served)}")
            return 0
        served, _ = read_manifest(args.manifest)
        interp = this_interpreter()
        if args.command == "serves":
            if serves(served, interp):
                return 0
            print(f">> {interp.describe()} is outside {args.lock_name}, which serves {describe_served(served)}: "
                  "installing pyproject.toml's ranges instead, with the lock's versions as constraints (no hashes)")
            return 1
        python, plat = nearest_served(served, interp)
        pins = [p for lock in args.lock for p in read_pins(lock)]
        print(f"# the versions of {', '.join(str(p) for p in args.lock)} for CPython {python} on {plat}")
        print("\n".join(constraints(pins, python, plat, args.exclude)))
        return 0
    except (LockError, OSError) as e:
        print(f"compendium.lockfiles: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
