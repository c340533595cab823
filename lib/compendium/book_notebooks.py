"""The book's notebook pages: which executed copy of each notebook a page shows, and staging it
(see :mod:`compendium.book` for the order in which copies are looked for). Text that will be
published has this machine's paths made relative (:func:`scrub`).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compendium import paths

COMPLETED = "completed"          # a notebook's status in <run>/status.json when it ran to the end
PUBLISHED = "PUBLISHED.json"     # written by `compendium run --publish` beside each paper's results
SOURCE_ONLY_NOTE = "No executed copy of this notebook was found"


@dataclass(frozen=True)
class Executed:
    """Where an executed notebook was found: its file and the run that produced it."""

    path: Path
    run: str | None = None        # run folder name (None: an executed copy outside a run folder)
    profile: str | None = None
    seed: int | None = None


# ----------------------------------------------------------------------------------------------
# finding the executed notebooks


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def paper_ids() -> list[str]:
    """The papers: folders of papers/ holding a claims.yaml."""
    return sorted(p.parent.name for p in paths.papers_dir().glob("*/claims.yaml"))


def _runs_newest_first() -> list[Path]:
    """Run folders of ``compendium run`` (not interactive kernels), newest first."""
    base = paths.output_dir() / "runs"
    if not base.is_dir():
        return []
    found = []
    for run in base.iterdir():
        params = _read_json(run / "params.json")
        if not run.is_dir() or run.name.startswith("interactive-") or params.get("kind", "runner") != "runner":
            continue
        found.append((params.get("time_utc", ""), run.name, run))
    return [run for _, _, run in sorted(found, reverse=True)]


def _executed_in(run: Path, name: str) -> Executed | None:
    entry = _read_json(run / "status.json").get("notebooks", {}).get(name, {})
    path = run / "notebooks" / f"{name}.ipynb"
    if entry.get("status") != COMPLETED or not path.is_file():
        return None
    params = _read_json(run / "params.json")
    return Executed(path, run.name, params.get("profile"), params.get("seed"))


def _published_runs(name: str) -> list[str]:
    """Run names that published ``name``: the latest publish's profile first, then the others by time."""
    out = []
    for paper in paper_ids():
        info = _read_json(paths.results_dir(paper) / PUBLISHED)
        per_profile = info.get("notebooks") or {}
        last = _latest_profile(info.get("last_publish") or {})
        order = sorted(per_profile, key=lambda p: (p != last, -_stamp(per_profile[p].get(name, {}))))
        for profile in order:
            entry = per_profile[profile].get(name)
            if entry and entry.get("status") == COMPLETED and entry.get("run"):
                out.append(entry["run"])
    return out


def _latest_profile(last: dict) -> str | None:
    """The profile of the most recent publish: ``last_publish`` is {profile: publish}, or (a file
    written before each profile kept its own) one publish naming its profile."""
    if "run" in last or isinstance(last.get("profile"), str):
        return last.get("profile")
    lasts = {k: v for k, v in last.items() if isinstance(v, dict)}
    return max(lasts, key=lambda k: str(lasts[k].get("time_utc") or ""), default=None)


def _stamp(entry: dict) -> float:
    try:
        from datetime import datetime

        return datetime.fromisoformat(entry.get("time_utc", "")).timestamp()
    except ValueError:
        return 0.0


def find_executed(name: str, prefer_run: str | None = None) -> Executed | None:
    """The executed copy of notebook ``name`` the book shows (see the module docstring), or None."""
    runs_dir = paths.output_dir() / "runs"
    if prefer_run:
        found = _executed_in(runs_dir / prefer_run, name)
        if found:
            return found
    for run_name in _published_runs(name):
        found = _executed_in(runs_dir / run_name, name)
        if found:
            return found
    for run in _runs_newest_first():
        found = _executed_in(run, name)
        if found:
            return found
    legacy = paths.output_dir() / "notebooks" / f"{name}.ipynb"
    return Executed(legacy) if legacy.is_file() else None


# ----------------------------------------------------------------------------------------------
# staging a notebook page, machine paths made relative


def _machine_paths() -> list[tuple[str, str]]:
    """(absolute prefix, replacement) pairs, longest first, for text that will be published."""
    pairs = {}
    root = paths.repo_root()
    for p in {str(root), os.path.realpath(root)}:
        pairs[p + "/"] = ""
        pairs[p] = "."
    home = os.path.expanduser("~")
    if home not in ("/", "~"):
        pairs[home.rstrip("/") + "/"] = "~/"
    tmp = os.path.realpath(tempfile.gettempdir())
    if tmp != "/":
        pairs[tmp + "/"] = "<tmp>/"
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def scrub(text: str, pairs: list[tuple[str, str]] | None = None) -> str:
    """``text`` with this machine's absolute paths (repository, home, temp folder) made relative."""
    for prefix, repl in pairs or _machine_paths():
        text = text.replace(prefix, repl)
    return text


def _scrub_tree(value, pairs):
    if isinstance(value, str):
        return scrub(value, pairs)
    if isinstance(value, list):
        return [_scrub_tree(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_tree(v, pairs) for k, v in value.items()}
    return value


def _notebook_names() -> list[str]:
    from compendium import runner

    return runner.list_notebooks()


def _markdown_cell(text: str):
    import nbformat

    return nbformat.v4.new_markdown_cell(text)


def _stage_notebook(name: str, dest: Path, pairs, prefer_run: str | None = None) -> Executed | None:
    import jupytext
    import nbformat

    found = find_executed(name, prefer_run)
    if found:
        nb = nbformat.read(found.path, as_version=4)
        where = f"run `{found.run}`" if found.run else "an executed copy outside a run folder"
        details = ", ".join(x for x in (
            f"profile `{found.profile}`" if found.profile else "", f"seed {found.seed}" if found.seed is not None else "") if x)
        note = f":::{{note}}\nExecuted in {where}{' (' + details + ')' if details else ''}.\n:::"
    else:
        nb = jupytext.read(paths.notebooks_dir() / f"{name}.py")
        note = (f":::{{warning}}\n{SOURCE_ONLY_NOTE} (`make all` executes every notebook): "
                "this page shows its source, without outputs.\n:::")
    # the note goes after the opening cell (the notebook's title and claim)
    nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, _markdown_cell(note))
    nb.metadata.pop("widgets", None)  # widget state would make the page load widget scripts
    # a source read by jupytext carries no language: name it, so code cells are highlighted
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    nb.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
    nb = nbformat.from_dict(_scrub_tree(nb, pairs))
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return found
