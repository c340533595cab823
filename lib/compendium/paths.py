"""Where things live. Every location can be moved with an environment variable.

| what                                   | default                                  | variable            |
|----------------------------------------|------------------------------------------|---------------------|
| the repository root                    | found from this file                     | COMPENDIUM_ROOT     |
| offline data                           | <root>/data                              | COMPENDIUM_DATA     |
| caches (models, SVDs, ...)             | <root>/.cache                            | COMPENDIUM_CACHE    |
| build outputs (run folders, figures)   | <root>/build                             | COMPENDIUM_OUTPUT   |
| the current run folder                 | made by the runner, or build/runs/interactive-<time> | COMPENDIUM_RUN_DIR |

Notebooks write only into their run folder (``compendium.runs``): results under
``<run>/results/<paper>/``, figures and their data under ``<run>/figures/<paper>/``.
``papers/<paper>/results``, ``papers/<paper>/figures`` and ``papers/<paper>/CLAIMS.md`` are written
by one thing only: ``compendium run --publish`` (``make all``), see ``compendium.publish``.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

_MARKERS = ("pyproject.toml", "papers", "notebooks")
#: Folders of the repository that hold sources or committed outputs: nothing a run makes goes there.
PROTECTED = ("notebooks", "papers", "lib", "models", "data", "tests", "kernels", "docs", ".git")


def repo_root() -> Path:
    """The compendium's root folder (the one holding pyproject.toml, papers/ and notebooks/)."""
    env = os.environ.get("COMPENDIUM_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if all((parent / m).exists() for m in _MARKERS):
            return parent
    raise RuntimeError(
        "cannot find the compendium root above "
        f"{here}; set COMPENDIUM_ROOT to the folder holding pyproject.toml"
    )


def _env_or(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).resolve() if value else default


def data_dir() -> Path:
    return _env_or("COMPENDIUM_DATA", repo_root() / "data")


def cache_dir() -> Path:
    path = _env_or("COMPENDIUM_CACHE", repo_root() / ".cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


def output_dir() -> Path:
    """``<root>/build``, or COMPENDIUM_OUTPUT, which may not point into the repository's sources or
    committed files (:func:`check_output`)."""
    if os.environ.get("COMPENDIUM_OUTPUT"):
        path = check_output(os.environ["COMPENDIUM_OUTPUT"], "COMPENDIUM_OUTPUT")
    else:
        path = repo_root() / "build"
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir() -> Path:
    """``<output>/figures``: a mirror of the latest figure saved under each name, by any run."""
    path = output_dir() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir() -> Path:
    """``<output>/runs``: one folder per ``compendium run`` invocation or interactive kernel."""
    path = output_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def papers_dir() -> Path:
    return repo_root() / "papers"


def results_dir(paper: str) -> Path:
    """The published results of one paper, ``papers/<paper>/results`` (written only by publish)."""
    return papers_dir() / paper / "results"


def published_figures_dir(paper: str, profile: str | None = None) -> Path:
    """The published figures of one paper at one profile (written only by publish): the default
    profile's (and the verdict board) in ``papers/<paper>/figures``, another profile's in
    ``papers/<paper>/figures/<profile>`` (``profile`` None: the default profile)."""
    from compendium import profiles

    folder = papers_dir() / paper / "figures"
    if profile is None or profiles.check_published(profile) == profiles.DEFAULT:
        return folder
    return folder / profile


def display(path: str | os.PathLike) -> str:
    """``path`` relative to the repository root when it lies inside it (what notebooks print and
    store: outputs never carry the absolute layout of one machine); otherwise unchanged."""
    path = Path(path)
    try:
        return path.resolve().relative_to(repo_root()).as_posix()
    except ValueError:
        return path.as_posix()


#: The folders a notebook's outputs may name paths from, as the variables that move them.
_PORTABLE_BASES = ("COMPENDIUM_OUTPUT", "COMPENDIUM_RUN_DIR", "COMPENDIUM_CACHE", "COMPENDIUM_DATA")


def portable(path: str | os.PathLike) -> str:
    """``path`` as a notebook's outputs show it, never as an absolute path of one machine: relative
    to the repository root when it lies inside it (``build/runs/<run>``); else, inside a folder
    moved by one of COMPENDIUM_OUTPUT, COMPENDIUM_RUN_DIR, COMPENDIUM_CACHE, COMPENDIUM_DATA,
    relative to that variable (``$COMPENDIUM_OUTPUT/runs/<run>``); else its name alone."""
    path = Path(path).resolve()
    bases = [("", repo_root())] + [(f"${name}", Path(os.environ[name]).resolve())
                                   for name in _PORTABLE_BASES if os.environ.get(name)]
    for label, base in bases:
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            continue
        if not label:
            return rel
        return label if rel == "." else f"{label}/{rel}"
    return path.name


class UnsafeOutputError(ValueError):
    """An output folder points into the repository's sources or committed files."""


def _tracked_under(folder: Path, root: Path) -> list[str]:
    """Files git tracks at or below ``folder`` (a path inside ``root``); [] without git."""
    rel = folder.relative_to(root).as_posix() or "."
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", rel], cwd=root, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [f for f in out.stdout.split("\0") if f] if out.returncode == 0 else []


def check_output(path: str | os.PathLike, what: str = "--output") -> Path:
    """``path`` resolved (symbolic links and ``..`` first), or :class:`UnsafeOutputError` when it lies
    in one of the repository's :data:`PROTECTED` folders or in any folder holding files git tracks
    (the repository root included): a run writes into build/ or a folder outside the repository."""
    target = Path(path).expanduser().resolve()
    if target.exists() and not target.is_dir():
        raise UnsafeOutputError(f"{what} {os.fspath(path)} is an existing file, not a folder: name a folder (it is "
                                "made when missing) in build/ or outside the repository")
    root = repo_root().resolve()
    try:
        rel = target.relative_to(root)
    except ValueError:
        return target  # outside the repository
    if rel.parts and rel.parts[0] in PROTECTED:
        raise UnsafeOutputError(
            f"{what} {os.fspath(path)} resolves to {rel.as_posix()}/, inside {rel.parts[0]}/, which holds the "
            f"compendium's sources or committed results; a run writes only into build/ (its run folder) or a "
            f"folder outside the repository")
    tracked = ["the repository's own files"] if target == root else _tracked_under(target, root) if target.exists() else []
    if tracked:
        shown = rel.as_posix() + "/" if rel.parts else "the repository root"
        raise UnsafeOutputError(
            f"{what} {os.fspath(path)} resolves to {shown}, which holds files git tracks "
            f"({', '.join(tracked[:3])}{', ...' if len(tracked) > 3 else ''}); a run would overwrite them. "
            f"Write into build/ or a folder outside the repository")
    return target
