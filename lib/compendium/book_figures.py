"""The book's figures pages: each paper's published figures and the circuit viewer pages beside them."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from compendium import board, paths, profiles
from compendium.book_notebooks import scrub
from compendium.book_pages import _link_notebook, _paper_title


VIEWER_GLOB = "*_viewer.html"
VIEWER_HEIGHT = 760
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")


def _notebook_of(paper: str, fname: str, names: set[str]) -> list[str]:
    return [n for n in names if n.startswith(f"{paper}/") and fname.startswith(n.split("/", 1)[1][:3])]


def _viewers_section(paper: str, viewers: list[str], names: set[str], level: int = 2, profile: str = "") -> list[str]:
    """The circuit viewer pages of ``paper`` (of ``profile``'s folder where given), framed; headings
    at ``level``."""
    if not viewers:
        return []
    mark = f" ({profile} profile)" if profile else ""
    lines = [f"{'#' * level} Interactive circuit viewers{mark}", "",
             "Each traced circuit as the notebook saved it: hover (click to pin) a node for its firing, an "
             "edge for its signal. The pages need no network; each also opens on its own.", ""]
    for fname in viewers:
        stem = Path(fname).stem
        by = _notebook_of(paper, fname, names)
        src = f"{paper}/{profile + '/' if profile else ''}{fname}"
        lines += [f"{'#' * (level + 1)} {stem}{mark}", "",
                  f'<iframe class="accpp-viewer-page" src="{src}" title="{stem}{mark}" sandbox="allow-scripts" '
                  f'style="width:100%;height:{VIEWER_HEIGHT}px;border:1px solid #ccc" loading="eager"></iframe>', "",
                  f'<p><a class="accpp-viewer-link" href="{src}">Open {fname} on its own</a></p>', ""]
        if len(by) == 1:
            lines += [f"From {_link_notebook(by[0], names, '../')}.", ""]
    return lines


def _figure(paper: str, fname: str, names: set[str], level: int = 2, profile: str = "", caption: str = "") -> list[str]:
    """One figure of ``paper`` (of ``profile``'s folder where given) with its heading at ``level``;
    its caption names the file and ``caption``, else the notebook that made it where one matches."""
    stem = Path(fname).stem
    mark = f" ({profile} profile)" if profile else ""
    rel = f"{profile}/{fname}" if profile else fname
    by = _notebook_of(paper, fname, names)
    lines = [f"{'#' * level} {stem}{mark}", "", f"```{{figure}} {paper}/{rel}", f":alt: {stem}{mark}", ":width: 100%", ""]
    if caption:
        lines.append(f"`{rel}`: {caption}")
    else:
        lines.append(f"`{rel}`" + (f", from {_link_notebook(by[0], names, '../')}" if len(by) == 1 else ""))
    return lines + ["```", ""]


def _last_publish(paper: str, profile: str) -> str:
    """The line naming the last publish of ``paper`` at ``profile`` (run, revision, time)."""
    from compendium import provenance, tables

    try:
        last = tables.last_publishes(tables.read_published(paper)).get(profile)
    except tables.ResultsFileError as err:
        return f"Last publish unknown: {err}."
    if not last:
        return f"No publish at this profile is recorded in `papers/{paper}/results/{tables.PUBLISHED}`."
    return (f"Last publish: run `{last.get('run')}` (revision {provenance.short_revision(last.get('git_revision'))}, "
            f"{last.get('time_utc') or 'time unknown'}).")


def _figures_page(paper: str, files: list[str], names: set[str], viewers: list[str] = (),
                  others: dict[str, tuple[list[str], list[str]]] | None = None) -> str:
    """The figures page of ``paper``: the default profile's ``files`` and ``viewers``; with ``others``
    ({profile: (figure files, viewer pages)} of ``figures/<profile>/``), one section per profile, the
    default one first, each headed by the profile's description and last publish."""
    if not others:
        lines = [f"# Figures: {paper}", "", f"*{_paper_title(paper)}*", "",
                 f"The figures of the last published run (`papers/{paper}/figures/`). "
                 "Each notebook page shows the same figures where they were made.", ""]
        if not files:
            lines.append("No figure has been published yet (`make all` publishes them).")
        for fname in files:
            lines += _figure(paper, fname, names)
        return "\n".join(lines + _viewers_section(paper, list(viewers), names))
    folders = ", ".join(f"the `{p}` profile's in `papers/{paper}/figures/{p}/`" for p in others)
    lines = [f"# Figures: {paper}", "", f"*{_paper_title(paper)}*", "",
             f"The figures of the last published run at each profile: the `{profiles.DEFAULT}` profile's in "
             f"`papers/{paper}/figures/`, {folders}. Each notebook page shows the same figures where they were made.", ""]
    if board.FIGURE_NAME in files:  # every claim against every profile: no one profile's figure
        lines += _figure(paper, board.FIGURE_NAME, names, caption="every claim at every profile, from the published results")
    for profile, (p_files, p_viewers) in {profiles.DEFAULT: (files, list(viewers)), **others}.items():
        sub = "" if profile == profiles.DEFAULT else profile
        shown = [f for f in p_files if sub or f != board.FIGURE_NAME]
        lines += [f"## Profile `{profile}`: {profiles.describe(profile)}", "", _last_publish(paper, profile), ""]
        if not shown and not p_viewers:
            lines += ["No figure has been published at this profile.", ""]
        for fname in shown:
            lines += _figure(paper, fname, names, 3, sub)
        lines += _viewers_section(paper, p_viewers, names, 3, sub)
    return "\n".join(lines)


def figure_folders(paper: str) -> tuple[list[str], list[str]]:
    """(the profiles, besides the default one, whose folder ``figures/<profile>/`` the paper has, in the
    order of ``profiles.PROFILES``; the other folders of ``figures/``, which no profile publishes into)."""
    base = paths.published_figures_dir(paper)
    found = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    known = [p for p in profiles.PROFILES if p != profiles.DEFAULT and p in found]
    return known, [f for f in found if f not in known]


def _copy_folder(src: Path, folder: Path, paper: str, sub: str, pairs) -> tuple[list[str], list[str]]:
    """Copy the figures of ``src`` to ``<folder>/figures/<paper>/<sub>`` and its viewer pages, machine
    paths made relative, to ``<folder>/viewers/<paper>/<sub>``; return (figure files, viewer pages)."""
    files = sorted(p.name for p in src.glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    (folder / "figures" / paper / sub).mkdir(parents=True, exist_ok=True)
    for fname in files:
        shutil.copy2(src / fname, folder / "figures" / paper / sub / fname)
    viewers = sorted(p.name for p in src.glob(VIEWER_GLOB) if p.is_file())
    for fname in viewers:
        (folder / "viewers" / paper / sub).mkdir(parents=True, exist_ok=True)
        (folder / "viewers" / paper / sub / fname).write_text(
            scrub((src / fname).read_text(encoding="utf-8"), pairs), encoding="utf-8")
    return files, viewers


@dataclass
class PaperFigures:
    """What :func:`stage_figures` staged for one paper."""

    files: list[str]                      # the default profile's figures (and the verdict board)
    viewers: list[str]                    # the default profile's circuit viewer pages
    others: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)  # profile -> (files, viewers)
    not_shown: list[str] = field(default_factory=list)  # folders of figures/ that are no profile's


def stage_figures(folder: Path, paper: str, names: set[str], pairs) -> PaperFigures:
    """Copy the published figures of ``paper`` and its circuit viewer pages into the staging ``folder``
    (the default profile's to ``figures/<paper>/`` and ``viewers/<paper>/``, another profile's to
    ``figures/<paper>/<profile>/`` and ``viewers/<paper>/<profile>/``) and write its figures page."""
    src = paths.published_figures_dir(paper)
    files, viewers = _copy_folder(src, folder, paper, "", pairs)
    known, unknown = figure_folders(paper)
    others = {p: _copy_folder(paths.published_figures_dir(paper, p), folder, paper, p, pairs) for p in known}
    page = _figures_page(paper, files, names, viewers, others)
    (folder / "figures" / f"{paper}.md").write_text(scrub(page, pairs), encoding="utf-8")
    return PaperFigures(files, viewers, others, [paths.display(src / f) for f in unknown])
