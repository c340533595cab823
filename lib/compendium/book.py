"""The compendium as an offline static book: ``make book`` (``python -m compendium.book``).

The book is built by Sphinx with myst-nb, which renders notebooks without executing them, from
a staging folder that this module fills:

    <stage>/index.md                     the README (the map of the compendium), notebook names linked
    <stage>/start_here.md                docs/start_here.md (a reading path for learners), notebook names
                                         linked; first in the table of contents (``compendium.start_here``)
    <stage>/notebooks/<name>.ipynb       every notebook: its executed copy from the last run that
                                         completed it, else its source without outputs (the page says so)
    <stage>/notebooks/<name>-<profile>-profile.ipynb
                                         the copy of the last publish of the notebook at another profile
                                         than the default one (``paper``), titled "<name> (<profile>
                                         profile)", where that run's folder is in build/runs/ (else the
                                         notebook's page and the home page say it is not available here)
    <stage>/claims/<paper>.md            the paper's verdict board (``compendium.board``: every claim against
                                         the profiles, derived from the published results), then
                                         papers/<paper>/CLAIMS.md, one block per claim (fits the page width),
                                         and any claim of claims.yaml it does not list yet
    <stage>/figures/<paper>.md + PNGs    papers/<paper>/figures/ (the figures of the last published run);
                                         where papers/<paper>/figures/<profile>/ holds another profile's,
                                         one section per profile (the default one first), headed by its
                                         description and its last publish (run, revision), its figures
                                         copied to <stage>/figures/<paper>/<profile>/
    <stage>/viewers/<paper>/*.html       the interactive circuit viewer pages published beside the figures
                                         (``*_viewer.html``, written by ``accpp.viewer.save``; another
                                         profile's in <stage>/viewers/<paper>/<profile>/)

Circuit viewer pages are shown twice: on the notebook's page, where the notebook displayed them
inline (an ``<iframe srcdoc>`` output of the executed copy), and on the paper's figures page, in
an ``<iframe>`` of the page file, which the build copies next to it (``html/figures/<paper>/``).
Both are self-contained (their data and script inlined, a Content-Security-Policy forbidding any
other source), so they work from ``file://``.

The Sphinx configuration (theme, offline MathJax, styles) is ``docs/book/conf.py``. Everything goes
under ``build/book/``: the staged pages in ``src/``, the HTML in ``html/`` (open
``build/book/html/index.html``); the HTML loads nothing from the network. Machine paths
in notebook outputs are rewritten relative to the repository before rendering.

Which executed copy a notebook page shows, first match wins:
0. with ``--run <run>`` (a folder name under ``build/runs/``), that run's copy where it completed
   the notebook (to look at a run before it is published; figures pages still show ``papers/``),
1. the run that ``papers/<paper>/results/PUBLISHED.json`` names for it (the published main run): the
   default profile's, else another profile's,
2. the newest ``build/runs/<run>/`` whose ``status.json`` marks it completed,
3. ``build/notebooks/<name>.ipynb`` (an executed copy written with ``--output``).
The last publish of the notebook at each other profile (``paper``) gets a page of its own unless the
notebook's page already shows that run.

The pages are made by ``compendium.book_notebooks`` (finding and staging the executed notebooks),
``compendium.book_pages`` (claims pages and the home page, from the ledger) and
``compendium.book_figures`` (figures pages); this module stages them all, runs Sphinx and is the
command line. Their public names are importable from here.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from compendium import paths, start_here
from compendium.book_figures import VIEWER_GLOB, VIEWER_HEIGHT, stage_figures  # noqa: F401
from compendium.book_notebooks import (COMPLETED, PUBLISHED, SOURCE_ONLY_NOTE, Executed,  # noqa: F401
                                       ProfileCopy, _machine_paths, _notebook_names, find_executed,
                                       paper_ids, published_elsewhere, scrub, stage_notebook)
from compendium.book_pages import (_missing_claims, _paper_title, _readme_page, _toctree,  # noqa: F401
                                   claims_page, with_board)


@dataclass
class Staged:
    """What :func:`stage` put in the staging folder."""

    folder: Path
    executed: dict[str, Executed] = field(default_factory=dict)   # notebook name -> executed copy
    source_only: list[str] = field(default_factory=list)          # notebooks shown without outputs
    papers: list[str] = field(default_factory=list)
    figures: dict[str, list[str]] = field(default_factory=dict)   # paper -> figure file names
    viewers: dict[str, list[str]] = field(default_factory=dict)   # paper -> circuit viewer page names
    start_here: list[str] = field(default_factory=list)           # where docs/start_here.md is out of sync
    # the other profiles' published copies of each notebook (staged where their run folder is here)
    profile_copies: dict[str, list[ProfileCopy]] = field(default_factory=dict)
    # paper -> {profile besides the default one: its figure files / its viewer pages} (figures/<profile>/)
    profile_figures: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    profile_viewers: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    not_shown: list[str] = field(default_factory=list)            # folders of papers/*/figures/ no profile's

    def n_figures(self) -> int:
        return sum(map(len, self.figures.values())) + sum(len(f) for p in self.profile_figures.values()
                                                          for f in p.values())

    def n_viewers(self) -> int:
        return sum(map(len, self.viewers.values())) + sum(len(v) for p in self.profile_viewers.values()
                                                          for v in p.values())


def stage(folder: Path, prefer_run: str | None = None) -> Staged:
    """Fill ``folder`` (emptied first) with the book's pages; see the module docstring."""
    if prefer_run and not (paths.output_dir() / "runs" / prefer_run / "status.json").is_file():
        raise ValueError(f"--run {prefer_run!r}: no run folder {paths.display(paths.output_dir() / 'runs' / prefer_run)} "
                         "with a status.json")
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    pairs = _machine_paths()
    out = Staged(folder=folder, papers=paper_ids())
    notebook_names = _notebook_names()
    names = set(notebook_names)
    for name in notebook_names:
        found, copies = stage_notebook(folder, name, pairs, prefer_run)
        if found:
            out.executed[name] = found
        else:
            out.source_only.append(name)
        if copies:
            out.profile_copies[name] = copies

    for paper in out.papers:
        claims_md = paths.papers_dir() / paper / "CLAIMS.md"
        text = claims_md.read_text(encoding="utf-8") if claims_md.is_file() else (
            f"# Claims: {_paper_title(paper)}\n\nNo claims table yet: `make claims` builds it.\n")
        (folder / "claims").mkdir(exist_ok=True)
        page = claims_page(text, names)
        page += _missing_claims(page, paper)
        page = with_board(page, paper, names)
        (folder / "claims" / f"{paper}.md").write_text(scrub(page, pairs), encoding="utf-8")

        figures = stage_figures(folder, paper, names, pairs)
        out.figures[paper] = figures.files
        out.viewers[paper] = figures.viewers
        if figures.others:
            out.profile_figures[paper] = {p: files for p, (files, _) in figures.others.items()}
            out.profile_viewers[paper] = {p: viewers for p, (_, viewers) in figures.others.items()}
        out.not_shown += figures.not_shown

    readme = (paths.repo_root() / "README.md").read_text(encoding="utf-8")
    index = [_readme_page(readme, names, out.papers).rstrip(), "", "## About this book", ""]
    runs = sorted({e.run for e in out.executed.values() if e.run})
    index.append(f"Built by `make book` from the compendium's files. {len(out.executed)} of "
                 f"{len(notebook_names)} notebook pages show executed notebooks"
                 + (f" (run{'s' if len(runs) > 1 else ''} {', '.join(f'`{r}`' for r in runs)})" if runs else "")
                 + ".")
    if out.source_only:
        index.append(f"{len(out.source_only)} show their source without outputs, as no executed copy was found: "
                     + ", ".join(f"`{n}`" for n in out.source_only) + ". `make all` executes them.")
    index += _copies_paragraph(out.profile_copies)
    if start_here.source().is_file():
        text = start_here.source().read_text(encoding="utf-8")
        (folder / "start_here.md").write_text(scrub(_readme_page(text, names, out.papers), pairs), encoding="utf-8")
        missing, unknown = start_here.out_of_sync(text, notebook_names)
        out.start_here = ([f"{paths.display(start_here.source())} does not name {n}" for n in missing]
                          + [f"{paths.display(start_here.source())} names {n}, which is not a notebook" for n in unknown])
        index.append(_toctree("Start here", ["start_here"]))
    groups: dict[str, list[str]] = {}
    for name in notebook_names:
        group = groups.setdefault(name.split("/", 1)[0] if "/" in name else "", [])
        group.append(f"notebooks/{name}")
        group += [f"notebooks/{c.page}" for c in out.profile_copies.get(name, []) if c.executed]
    index.append(_toctree("Notebooks", groups.pop("", [])))
    for paper, entries in groups.items():
        index.append(_toctree(f"Notebooks: {paper}", entries))
    index.append(_toctree("Claims", [f"claims/{p}" for p in out.papers]))
    index.append(_toctree("Figures", [f"figures/{p}" for p in out.papers]))
    (folder / "index.md").write_text(scrub("\n".join(index), pairs) + "\n", encoding="utf-8")
    return out


def _copies_paragraph(copies: dict[str, list[ProfileCopy]]) -> list[str]:
    """What the home page says of the notebooks' copies from other profiles' publishes (nothing when none)."""
    shown = [c for cs in copies.values() for c in cs if c.executed]
    missing = [c for cs in copies.values() for c in cs if not c.executed]
    out = []
    if shown:
        out.append(f"{len(shown)} notebook{'s' if len(shown) > 1 else ''} also "
                   f"{'have pages' if len(shown) > 1 else 'has a page'} for the last publish at another profile: "
                   + ", ".join(f"`{c.title}` (run `{c.run}`)" for c in shown) + ".")
    if missing:
        many = len(missing) > 1
        out.append(f"{len(missing)} last publish{'es' if many else ''} at another profile {'have' if many else 'has'} "
                   f"no page, as {'their run folders are' if many else 'its run folder is'} not in "
                   f"`{paths.display(paths.output_dir() / 'runs')}/` here: "
                   + ", ".join(f"`{c.title}` (run `{c.run}`)" for c in missing) + ".")
    return out


# ----------------------------------------------------------------------------------------------
# building


def conf_dir() -> Path:
    return paths.repo_root() / "docs" / "book"


def build(out: Path | None = None, *, stage_dir: Path | None = None, strict: bool = False,
          quiet: bool = True, prefer_run: str | None = None) -> tuple[Path, Staged, list[str]]:
    """Stage the pages and run Sphinx; return the path of ``index.html``, what was staged and
    Sphinx's warnings. ``strict`` makes a warning (a broken link, a missing figure) an error."""
    out = Path(out) if out else paths.output_dir() / "book" / "html"
    stage_dir = Path(stage_dir) if stage_dir else out.parent / "src"
    if out.resolve() == stage_dir.resolve() or stage_dir.resolve() in out.resolve().parents:
        raise ValueError(f"the book's output folder {out} must not be (inside) its staging folder {stage_dir}")
    staged = stage(stage_dir, prefer_run)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(conf_dir()), "-d", str(stage_dir / ".doctrees"),
           "-j", "1", "-E", "--keep-going"]
    if strict:
        cmd.append("-W")
    if quiet:
        cmd.append("-q")
    cmd += [str(stage_dir), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    warnings = [scrub(line) for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-build failed (exit {proc.returncode}):\n{scrub(proc.stdout[-4000:])}\n"
                           f"{scrub(proc.stderr[-8000:])}")
    framed = [(paper, "", fname) for paper, viewers in staged.viewers.items() for fname in viewers]
    framed += [(paper, profile, fname) for paper, per in staged.profile_viewers.items()
               for profile, viewers in per.items() for fname in viewers]
    for paper, sub, fname in framed:  # beside the figures page that frames them
        dest = out / "figures" / paper / sub / fname
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stage_dir / "viewers" / paper / sub / fname, dest)
    return out / "index.html", staged, warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compendium.book", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="HTML output folder (default build/book/html)")
    parser.add_argument("--stage", default=None, help="staging folder for the pages (default: src/ beside the output folder)")
    parser.add_argument("--strict", action="store_true", help="fail on any Sphinx warning")
    parser.add_argument("--run", default=None, metavar="RUN",
                        help="show this run's executed notebooks first (a folder name under build/runs/)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        index, staged, warnings = build(Path(args.out) if args.out else None,
                                        stage_dir=Path(args.stage) if args.stage else None, strict=args.strict,
                                        prefer_run=args.run)
    except (RuntimeError, ValueError) as err:
        print(f"book: {err}", file=sys.stderr)
        return 1
    for line in warnings:
        print(line, file=sys.stderr)
    copies = [c for cs in staged.profile_copies.values() for c in cs]
    print(f"book: {paths.display(index)} ({len(staged.executed)} executed notebook page(s), "
          f"{len(staged.source_only)} from source, "
          + (f"{sum(1 for c in copies if c.executed)} from other profiles' publishes, " if copies else "")
          + f"{staged.n_figures()} figures, {staged.n_viewers()} circuit viewer page(s), "
          f"{len(warnings)} Sphinx warning(s); {time.perf_counter() - start:.0f} s)")
    for name in staged.source_only:
        print(f"  {name}: no executed copy found, shown from its source without outputs")
    for c in copies:
        if not c.executed:
            print(f"  {c.title}: its published run {c.run} is not in "
                  f"{paths.display(paths.output_dir() / 'runs')} here, so the book has no page for it")
    for folder in staged.not_shown:
        print(f"  {folder}/: not a profile's figures folder (publishing writes figures/<profile>/ only), "
              "not shown", file=sys.stderr)
    for line in staged.start_here:
        print(f"  start here: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
