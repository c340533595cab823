"""Where things live. Every location can be moved with an environment variable.

| what                      | default                      | variable                 |
|---------------------------|------------------------------|--------------------------|
| the repository root       | found from this file         | COMPENDIUM_ROOT          |
| offline data              | <root>/data                  | COMPENDIUM_DATA          |
| caches (models, SVDs, ...)| <root>/.cache                | COMPENDIUM_CACHE         |
| run outputs (executed notebooks, figures) | <root>/build | COMPENDIUM_OUTPUT        |
| recorded claim values     | <root>/papers/<paper>/results| COMPENDIUM_RESULTS       |
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
    path = output_dir() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def papers_dir() -> Path:
    return repo_root() / "papers"


def results_dir(paper: str) -> Path:
    """Folder of recorded claim values for one paper."""
    base = os.environ.get("COMPENDIUM_RESULTS")
    path = Path(base).resolve() / paper if base else papers_dir() / paper / "results"
    path.mkdir(parents=True, exist_ok=True)
    return path
