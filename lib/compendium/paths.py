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
from pathlib import Path

_MARKERS = ("pyproject.toml", "papers", "notebooks")


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
    path = _env_or("COMPENDIUM_OUTPUT", repo_root() / "build")
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


def published_figures_dir(paper: str) -> Path:
    """The published figures of one paper, ``papers/<paper>/figures`` (written only by publish)."""
    return papers_dir() / paper / "figures"


def display(path: str | os.PathLike) -> str:
    """``path`` relative to the repository root when it lies inside it (what notebooks print and
    store: outputs never carry the absolute layout of one machine); otherwise unchanged."""
    path = Path(path)
    try:
        return path.resolve().relative_to(repo_root()).as_posix()
    except ValueError:
        return path.as_posix()
