"""The book's "Start here" page, written in ``docs/start_here.md``: what each notebook teaches, in which
order to read them, what to know first and how to run one.

The page names every notebook in backticks by its runner name (`00_tour`, `protot/01_mixer_derivation`);
the book links each name that exists to its page. :func:`out_of_sync` says which notebooks the page
leaves out and which names on it are not notebooks; the test suite requires both lists to be empty.
"""
from __future__ import annotations

import re
from pathlib import Path

from compendium import paths

# a notebook name in backticks: an optional paper folder, then NN_name
NOTEBOOK_NAME = re.compile(r"`((?:[a-z0-9_]+/)?[0-9]{2}_[a-z0-9_]+)`")


def source() -> Path:
    """The page's source file."""
    return paths.repo_root() / "docs" / "start_here.md"


def named(text: str) -> list[str]:
    """The notebook names the page mentions, each once, in the order of first mention."""
    return list(dict.fromkeys(NOTEBOOK_NAME.findall(text)))


def out_of_sync(text: str, notebooks: list[str]) -> tuple[list[str], list[str]]:
    """(notebooks the page does not name, names on the page that are not notebooks), both sorted."""
    mentioned, existing = set(named(text)), set(notebooks)
    return sorted(existing - mentioned), sorted(mentioned - existing)
