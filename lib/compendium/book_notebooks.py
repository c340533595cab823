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

from compendium import paths, profiles

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


def _publishes(name: str) -> list[tuple[str, float, str]]:
    """(profile, time, run) of every publish that completed notebook ``name``, as each paper's
    PUBLISHED.json lists it (per profile, its last publish of each notebook)."""
    out = []
    for paper in paper_ids():
        per_profile = _read_json(paths.results_dir(paper) / PUBLISHED).get("notebooks") or {}
        for profile, entries in per_profile.items():
            entry = entries.get(name) if isinstance(entries, dict) else None
            if isinstance(entry, dict) and entry.get("status") == COMPLETED and entry.get("run"):
                out.append((profile, _stamp(entry), entry["run"]))
    return out


def _published_runs(name: str) -> list[str]:
    """Run names that published ``name``: the default profile's first, newest first, then the other
    profiles' by time (a notebook page shows the default profile's run wherever it can)."""
    ordered = sorted(_publishes(name), key=lambda e: (e[0] != profiles.DEFAULT, -e[1]))
    return [run for _, _, run in ordered]


def published_elsewhere(name: str) -> dict[str, str]:
    """{profile: run} of the last publish of notebook ``name`` at each profile but the default one
    (the newest where two papers list the notebook), in the order of ``profiles.PROFILES``."""
    newest: dict[str, tuple[float, str]] = {}
    for profile, stamp, run in _publishes(name):
        if profile != profiles.DEFAULT and (profile not in newest or stamp > newest[profile][0]):
            newest[profile] = (stamp, run)
    order = [p for p in profiles.PROFILES if p in newest] + sorted(p for p in newest if p not in profiles.PROFILES)
    return {p: newest[p][1] for p in order}


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


def _write_page(nb, note: str, dest: Path, pairs) -> None:
    """Write notebook ``nb`` as a page: ``note`` after its opening cell (the notebook's title and claim),
    no widget state, its language named, this machine's paths made relative."""
    import nbformat

    nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, _markdown_cell(note))
    nb.metadata.pop("widgets", None)  # widget state would make the page load widget scripts
    # a source read by jupytext carries no language: name it, so code cells are highlighted
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    nb.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
    nb = nbformat.from_dict(_scrub_tree(nb, pairs))
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)


@dataclass(frozen=True)
class ProfileCopy:
    """A notebook's executed copy from the last publish at a profile other than the default one,
    shown on a page of its own beside the notebook's page."""

    name: str                    # the notebook
    profile: str
    run: str                     # the run that PUBLISHED.json names for the notebook at this profile
    executed: Executed | None    # its copy in that run folder; None: the run folder is not here

    @property
    def page(self) -> str:
        """The page's name under ``notebooks/`` (without suffix): ``<name>-<profile>-profile``."""
        return f"{self.name}-{self.profile}-profile"

    @property
    def title(self) -> str:
        return f"{self.name} ({self.profile} profile)"


def _run_details(found: Executed) -> str:
    where = f"run `{found.run}`" if found.run else "an executed copy outside a run folder"
    details = ", ".join(x for x in (
        f"profile `{found.profile}`" if found.profile else "", f"seed {found.seed}" if found.seed is not None else "") if x)
    return f"{where}{' (' + details + ')' if details else ''}"


def _copies_text(copies: list[ProfileCopy]) -> str:
    """What the notebook's page says of its copies from other profiles' publishes ("" when none)."""
    out = ""
    for copy in copies:
        said = f"The `{copy.profile}` profile's published run `{copy.run}`"
        if copy.executed:
            base = copy.page.rsplit("/", 1)[-1]
            out += f"\n\n{said} has a page of its own: [{copy.title}]({base}.ipynb)."
        else:
            out += (f"\n\n{said} is not in `{paths.display(paths.output_dir() / 'runs')}/` here: its executed "
                    "copy is not available locally.")
    return out


def stage_notebook(folder: Path, name: str, pairs, prefer_run: str | None = None
                   ) -> tuple[Executed | None, list[ProfileCopy]]:
    """Stage the page of notebook ``name`` (``<folder>/notebooks/<name>.ipynb``) and, for each other
    profile whose last publish completed it in another run than the page shows, a page of that run's
    copy where its run folder is here; return the copy the page shows (None: its source) and the
    other profiles' copies (``executed`` None where the run folder is missing)."""
    import jupytext
    import nbformat

    found = find_executed(name, prefer_run)
    runs_dir = paths.output_dir() / "runs"
    copies = [ProfileCopy(name, profile, run, _executed_in(runs_dir / run, name))
              for profile, run in published_elsewhere(name).items() if not (found and found.run == run)]
    if found:
        nb = nbformat.read(found.path, as_version=4)
        note = f":::{{note}}\nExecuted in {_run_details(found)}.{_copies_text(copies)}\n:::"
    else:
        nb = jupytext.read(paths.notebooks_dir() / f"{name}.py")
        note = (f":::{{warning}}\n{SOURCE_ONLY_NOTE} (`make all` executes every notebook): "
                f"this page shows its source, without outputs.{_copies_text(copies)}\n:::")
    _write_page(nb, note, folder / "notebooks" / f"{name}.ipynb", pairs)
    for copy in copies:
        if copy.executed:
            _stage_copy(folder, copy, pairs)
    return found, copies


def _stage_copy(folder: Path, copy: ProfileCopy, pairs) -> None:
    """The page of another profile's copy: its title marked with the profile, a note naming the run."""
    import nbformat

    nb = nbformat.read(copy.executed.path, as_version=4)
    first = nb.cells[0] if nb.cells and nb.cells[0].cell_type == "markdown" else None
    lines = first.source.split("\n") if first else []
    at = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
    if at is None:  # no title to mark: give the page one
        nb.cells.insert(0, _markdown_cell(f"# {copy.title}"))
    else:
        lines[at] = f"{lines[at].rstrip()} ({copy.profile} profile)"
        first.source = "\n".join(lines)
    base = copy.name.rsplit("/", 1)[-1]
    note = (f":::{{note}}\nExecuted in {_run_details(copy.executed)}: the last publish of this notebook at the "
            f"`{copy.profile}` profile. The notebook's own page: [`{copy.name}`]({base}.ipynb).\n:::")
    _write_page(nb, note, folder / "notebooks" / f"{copy.page}.ipynb", pairs)
