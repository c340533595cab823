"""What produced a result: git revision (with a fingerprint of uncommitted changes), library
versions, machine.

The published outputs (``papers/*/results``, ``papers/*/figures``, ``papers/*/CLAIMS.md``) are not
code: changing them does not make the working tree "dirty", so publishing a run does not mark
the next one as produced by modified code.
"""
from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from compendium.paths import repo_root

LIBRARIES = ("torch", "triton", "transformers", "nnsight", "datasets", "numpy", "papermill")

#: Paths whose changes are outputs, not code (git pathspecs, relative to the root).
OUTPUT_PATHS = ("papers/*/results", "papers/*/figures", "papers/*/CLAIMS.md")
_PATHSPEC = [".", *(f":(exclude,glob){p}" for p in OUTPUT_PATHS),
             *(f":(exclude,glob){p}/**" for p in OUTPUT_PATHS[:2])]


def _git(*args: str, root: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=root or repo_root(), capture_output=True, text=True,
                          check=True).stdout


def code_state(root: Path | None = None) -> dict:
    """``{"git_revision": "<sha>" or "<sha>+dirty", "diff_sha256": None or <hex>}``.

    Dirty means: a tracked file differs from HEAD, or an untracked file that git does not ignore
    exists, outside :data:`OUTPUT_PATHS`. ``diff_sha256`` fingerprints exactly those changes
    (``git diff HEAD`` plus the untracked files' names and contents), so two results made from
    the same uncommitted code carry the same fingerprint.
    """
    try:
        rev = _git("rev-parse", "HEAD", root=root).strip()
        diff = _git("diff", "HEAD", "--binary", "--", *_PATHSPEC, root=root)
        untracked = sorted(_git("ls-files", "--others", "--exclude-standard", "-z", "--", *_PATHSPEC,
                                root=root).split("\0"))
    except (OSError, subprocess.CalledProcessError):
        return {"git_revision": "unknown", "diff_sha256": None}
    untracked = [u for u in untracked if u]
    if not diff and not untracked:
        return {"git_revision": rev, "diff_sha256": None}
    h = hashlib.sha256(diff.encode("utf-8", "surrogateescape"))
    base = root or repo_root()
    for name in untracked:
        h.update(b"\0untracked\0" + name.encode() + b"\0")
        try:
            h.update(hashlib.sha256((base / name).read_bytes()).digest())
        except OSError:  # vanished or unreadable: the name still counts
            pass
    return {"git_revision": rev + "+dirty", "diff_sha256": h.hexdigest()}


def git_revision() -> str:
    """The commit of the working tree, with '+dirty' when the code has uncommitted changes."""
    return code_state()["git_revision"]


def short_revision(revision: str | None) -> str:
    """10 hex digits of the commit, keeping the '+dirty' flag (never cut away)."""
    if not revision:
        return "—"
    sha, plus, flag = revision.partition("+")
    return sha[:10] + (plus + flag if plus else "")


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def describe() -> dict:
    """A dict to store beside any result."""
    device = "cpu"
    torch = sys.modules.get("torch")  # a process that never imported torch computed nothing on a GPU
    if torch is not None and torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    return {
        **code_state(),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "device": device,
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def changed_tracked_files(root: Path | None = None) -> dict[str, str]:
    """{path: sha256 of its content (or "deleted")} of every tracked file that differs from HEAD.

    Two snapshots taken before and after running something tell whether it wrote into tracked
    files, even into files that were already modified before.
    """
    base = root or repo_root()
    out = {}
    entries = iter(_git("status", "--porcelain", "--untracked-files=no", "-z", root=base).split("\0"))
    for line in entries:
        if len(line) < 4:
            continue
        name = line[3:]
        if line[0] in "RC":  # a rename or copy is followed by its source path
            next(entries, None)
        path = base / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "deleted"
    return out
