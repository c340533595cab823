"""What produced a result: git revision, library versions, machine."""
from __future__ import annotations

import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata

from compendium.paths import repo_root

LIBRARIES = ("torch", "triton", "transformers", "nnsight", "datasets", "numpy", "papermill")


def git_revision() -> str:
    """The commit of the working tree, with '+dirty' when there are uncommitted changes."""
    try:
        root = repo_root()
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return {
        "git_revision": git_revision(),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "device": device,
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
