"""The book's figures pages: each paper's published figures and the circuit viewer pages beside them."""
from __future__ import annotations

import shutil
from pathlib import Path

from compendium import paths
from compendium.book_notebooks import scrub
from compendium.book_pages import _link_notebook, _paper_title


VIEWER_GLOB = "*_viewer.html"
VIEWER_HEIGHT = 760
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")


def _notebook_of(paper: str, fname: str, names: set[str]) -> list[str]:
    return [n for n in names if n.startswith(f"{paper}/") and fname.startswith(n.split("/", 1)[1][:3])]


def _viewers_section(paper: str, viewers: list[str], names: set[str]) -> list[str]:
    if not viewers:
        return []
    lines = ["## Interactive circuit viewers", "",
             "Each traced circuit as the notebook saved it: hover (click to pin) a node for its firing, an "
             "edge for its signal. The pages need no network; each also opens on its own.", ""]
    for fname in viewers:
        stem = Path(fname).stem
        by = _notebook_of(paper, fname, names)
        src = f"{paper}/{fname}"
        lines += [f"### {stem}", "",
                  f'<iframe class="accpp-viewer-page" src="{src}" title="{stem}" sandbox="allow-scripts" '
                  f'style="width:100%;height:{VIEWER_HEIGHT}px;border:1px solid #ccc" loading="eager"></iframe>', "",
                  f'<p><a class="accpp-viewer-link" href="{src}">Open {fname} on its own</a></p>', ""]
        if len(by) == 1:
            lines += [f"From {_link_notebook(by[0], names, '../')}.", ""]
    return lines


def _figures_page(paper: str, files: list[str], names: set[str], viewers: list[str] = ()) -> str:
    lines = [f"# Figures: {paper}", "", f"*{_paper_title(paper)}*", "",
             f"The figures of the last published run (`papers/{paper}/figures/`). "
             "Each notebook page shows the same figures where they were made.", ""]
    if not files:
        lines.append("No figure has been published yet (`make all` publishes them).")
    for fname in files:
        stem = Path(fname).stem
        by = _notebook_of(paper, fname, names)
        lines += [f"## {stem}", "", f"```{{figure}} {paper}/{fname}", f":alt: {stem}", ":width: 100%", ""]
        lines.append(f"`{fname}`" + (f", from {_link_notebook(by[0], names, '../')}" if len(by) == 1 else ""))
        lines += ["```", ""]
    lines += _viewers_section(paper, list(viewers), names)
    return "\n".join(lines)


def stage_figures(folder: Path, paper: str, names: set[str], pairs) -> tuple[list[str], list[str]]:
    """Copy the published figures of ``paper`` (``<folder>/figures/<paper>/``) and its circuit viewer
    pages, machine paths made relative (``<folder>/viewers/<paper>/``), into the staging ``folder``,
    and write its figures page; return (figure files, viewer pages)."""
    src = paths.published_figures_dir(paper)
    files = sorted(p.name for p in src.glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    (folder / "figures" / paper).mkdir(parents=True, exist_ok=True)
    for fname in files:
        shutil.copy2(src / fname, folder / "figures" / paper / fname)
    viewers = sorted(p.name for p in src.glob(VIEWER_GLOB) if p.is_file())
    for fname in viewers:
        (folder / "viewers" / paper).mkdir(parents=True, exist_ok=True)
        (folder / "viewers" / paper / fname).write_text(scrub((src / fname).read_text(encoding="utf-8"), pairs),
                                                        encoding="utf-8")
    (folder / "figures" / f"{paper}.md").write_text(_figures_page(paper, files, names, viewers), encoding="utf-8")
    return files, viewers
