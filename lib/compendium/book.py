"""The compendium as an offline static book: ``make book`` (``python -m compendium.book``).

The book is built by Sphinx with myst-nb, which renders notebooks without executing them, from
a staging folder that this module fills:

    <stage>/index.md                     the README (the map of the compendium), notebook names linked
    <stage>/start_here.md                docs/start_here.md (a reading path for learners), notebook names
                                         linked; first in the table of contents (``compendium.start_here``)
    <stage>/notebooks/<name>.ipynb       every notebook: its executed copy from the last run that
                                         completed it, else its source without outputs (the page says so)
    <stage>/claims/<paper>.md            the paper's verdict board (``compendium.board``: every claim against
                                         the profiles, derived from the published results), then
                                         papers/<paper>/CLAIMS.md, one block per claim (fits the page width),
                                         and any claim of claims.yaml it does not list yet
    <stage>/figures/<paper>.md + PNGs    papers/<paper>/figures/ (the figures of the last published run)
    <stage>/viewers/<paper>/*.html       the interactive circuit viewer pages published beside the figures
                                         (``*_viewer.html``, written by ``accpp.viewer.save``)

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
1. the run that ``papers/<paper>/results/PUBLISHED.json`` names for it (the published main run),
2. the newest ``build/runs/<run>/`` whose ``status.json`` marks it completed,
3. ``build/notebooks/<name>.ipynb`` (an executed copy written with ``--output``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from compendium import paths, start_here

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
# making pages


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


_ROW = re.compile(r"^\s*\|(.*)\|\s*$")


def _cells(line: str) -> list[str]:
    """Cells of one markdown table row (``\\|`` is a literal bar)."""
    body = _ROW.match(line).group(1)
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _is_rule(cells: list[str]) -> bool:
    return all(re.fullmatch(r":?-{3,}:?", c) for c in cells)


def _link_notebook(value: str, names: set[str], prefix: str) -> str:
    return f"[`{value}`]({prefix}notebooks/{value}.ipynb)" if value in names else value


HISTORY_HEADING = "## Registration and history"   # the section of CLAIMS.md (compendium.tables)


def _split_history(text: str) -> tuple[str, dict[str, tuple[str, list[str]]]]:
    """CLAIMS.md without its registration-and-history section, and that section per claim:
    {claim id: (how its check was registered, [history lines: earlier checks and verdicts])}."""
    start = text.find(f"\n{HISTORY_HEADING}\n")
    if start < 0:
        return text, {}
    end = text.find("\n## ", start + 1)
    section = text[start + 1:end if end >= 0 else len(text)]
    rest = text[:start + 1] + (text[end + 1:] if end >= 0 else "")
    out: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in section.splitlines()[1:]:
        head = re.match(r"- \*\*([^*]+)\*\*: (.*?)\.?$", line)
        if head:
            current = head.group(1)
            out[current] = (head.group(2), [])
        elif current and line.startswith("  - "):
            out[current][1].append(line[4:])
    return rest, out


def claims_page(text: str, names: set[str]) -> str:
    """CLAIMS.md made to fit a page: each table becomes one block per claim (its first column),
    with the values every row shares as a field list and the rest (one row per profile) as a
    small table, then how its check was registered and its history (every earlier check and
    verdict, dated, with the reason); notebook names link to their pages."""
    text, history = _split_history(text)
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and _ROW.match(lines[i]) and _ROW.match(lines[i + 1]) and _is_rule(_cells(lines[i + 1])):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and _ROW.match(lines[i]):
                cells = _cells(lines[i])
                rows.append(dict(zip(header, cells + [""] * (len(header) - len(cells)))))
                i += 1
            out.extend(_claim_blocks(header, rows, names, history))
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out) + "\n"


def _claim_blocks(header: list[str], rows: list[dict], names: set[str],
                  history: dict[str, tuple[str, list[str]]] | None = None) -> list[str]:
    key, rest = header[0], header[1:]
    text_col = "statement" if "statement" in rest else None
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    out = []
    for claim_id, group in groups.items():
        out += ["", f"## {claim_id}", ""]
        if text_col:
            out += [group[0][text_col], ""]
        shared = [c for c in rest if c != text_col and len({r[c] for r in group}) == 1]
        varying = [c for c in rest if c != text_col and c not in shared]
        for col in shared:
            out.append(f":{col}: {_link_notebook(group[0][col], names, '../')}")
        if varying:
            out += ["", "| " + " | ".join(varying) + " |", "|" + "---|" * len(varying)]
            for row in group:
                out.append("| " + " | ".join(_link_notebook(row[c], names, "../") for c in varying) + " |")
        if history and claim_id in history:
            registration, lines = history[claim_id]
            out += ["", f":registration: {registration}"]
            if lines:
                out += ["", "History (earlier checks and verdicts, dated, with the reasons):", ""]
                out += [f"- {line}" for line in lines]
        out.append("")
    return out


def _readme_page(readme: str, names: set[str], papers: list[str]) -> str:
    """The README as the book's home page: notebook names and claims tables become links, and
    images of published figures (``papers/<paper>/figures/x.png``) point to the book's copies."""
    text = re.sub(r"`((?:[a-z0-9_]+/)?[0-9]{2}_[a-z0-9_]+)`",
                  lambda m: _link_notebook(m.group(1), names, ""), readme)
    for paper in papers:
        text = text.replace(f"`papers/{paper}/CLAIMS.md`", f"[`papers/{paper}/CLAIMS.md`](claims/{paper}.md)")
        text = text.replace(f"](papers/{paper}/figures/", f"](figures/{paper}/")
    return text


def with_board(page: str, paper: str, names: set[str]) -> str:
    """The claims page with the paper's verdict board after its title, its notebook names linked to
    the pages of ``names`` (a note instead when the published results cannot be read: the page says
    which file and why)."""
    from compendium import board, tables

    try:
        block = board.html_for(paper, claims_page="", notebooks_base="../notebooks/", notebooks=names)
    except tables.ResultsFileError as err:
        block = f":::{{warning}}\nNo verdict board: {err}\n:::"
    lines = page.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
    return "\n".join(lines[:at] + ["", block, ""] + lines[at:])


def _toctree(caption: str, entries: list[str]) -> str:
    return "\n".join(["", "```{toctree}", f":caption: {caption}", ":hidden:", "", *entries, "```", ""])


def _claims_yaml(paper: str) -> dict:
    import yaml

    return yaml.safe_load((paths.papers_dir() / paper / "claims.yaml").read_text(encoding="utf-8")) or {}


def _paper_title(paper: str) -> str:
    return str((_claims_yaml(paper).get("paper") or {}).get("title") or paper)


def _missing_claims(page: str, paper: str) -> str:
    """Blocks for the claims of claims.yaml that the page (a CLAIMS.md older than it) lacks."""
    out = []
    for claim in _claims_yaml(paper).get("claims") or []:
        cid = str(claim.get("id", ""))
        if cid and not re.search(rf"^## {re.escape(cid)}\s*$", page, re.M):
            out += ["", f"## {cid}", "", str(claim.get("statement", "")).strip(), "",
                    ":status: not in CLAIMS.md yet (`make claims` rebuilds it from `claims.yaml`)", ""]
    return "\n".join(out)


VIEWER_GLOB = "*_viewer.html"
VIEWER_HEIGHT = 760


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
        found = _stage_notebook(name, folder / "notebooks" / f"{name}.ipynb", pairs, prefer_run)
        if found:
            out.executed[name] = found
        else:
            out.source_only.append(name)

    for paper in out.papers:
        claims_md = paths.papers_dir() / paper / "CLAIMS.md"
        text = claims_md.read_text(encoding="utf-8") if claims_md.is_file() else (
            f"# Claims: {_paper_title(paper)}\n\nNo claims table yet: `make claims` builds it.\n")
        (folder / "claims").mkdir(exist_ok=True)
        page = claims_page(text, names)
        page += _missing_claims(page, paper)
        page = with_board(page, paper, names)
        (folder / "claims" / f"{paper}.md").write_text(scrub(page, pairs), encoding="utf-8")

        src = paths.published_figures_dir(paper)
        files = sorted(p.name for p in src.glob("*") if p.suffix.lower() in (".png", ".svg", ".jpg", ".jpeg"))
        (folder / "figures" / paper).mkdir(parents=True, exist_ok=True)
        for fname in files:
            shutil.copy2(src / fname, folder / "figures" / paper / fname)
        viewers = sorted(p.name for p in src.glob(VIEWER_GLOB) if p.is_file())
        for fname in viewers:
            (folder / "viewers" / paper).mkdir(parents=True, exist_ok=True)
            (folder / "viewers" / paper / fname).write_text(scrub((src / fname).read_text(encoding="utf-8"), pairs),
                                                            encoding="utf-8")
        (folder / "figures" / f"{paper}.md").write_text(_figures_page(paper, files, names, viewers), encoding="utf-8")
        out.figures[paper] = files
        out.viewers[paper] = viewers

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
    if start_here.source().is_file():
        text = start_here.source().read_text(encoding="utf-8")
        (folder / "start_here.md").write_text(scrub(_readme_page(text, names, out.papers), pairs), encoding="utf-8")
        missing, unknown = start_here.out_of_sync(text, notebook_names)
        out.start_here = ([f"{paths.display(start_here.source())} does not name {n}" for n in missing]
                          + [f"{paths.display(start_here.source())} names {n}, which is not a notebook" for n in unknown])
        index.append(_toctree("Start here", ["start_here"]))
    groups: dict[str, list[str]] = {}
    for name in notebook_names:
        groups.setdefault(name.split("/", 1)[0] if "/" in name else "", []).append(f"notebooks/{name}")
    index.append(_toctree("Notebooks", groups.pop("", [])))
    for paper, entries in groups.items():
        index.append(_toctree(f"Notebooks: {paper}", entries))
    index.append(_toctree("Claims", [f"claims/{p}" for p in out.papers]))
    index.append(_toctree("Figures", [f"figures/{p}" for p in out.papers]))
    (folder / "index.md").write_text(scrub("\n".join(index), pairs) + "\n", encoding="utf-8")
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
    for paper, viewers in staged.viewers.items():  # beside the figures page that frames them
        for fname in viewers:
            dest = out / "figures" / paper / fname
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stage_dir / "viewers" / paper / fname, dest)
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
    print(f"book: {paths.display(index)} ({len(staged.executed)} executed notebook page(s), "
          f"{len(staged.source_only)} from source, {sum(map(len, staged.figures.values()))} figures, "
          f"{sum(map(len, staged.viewers.values()))} circuit viewer page(s), "
          f"{len(warnings)} Sphinx warning(s); {time.perf_counter() - start:.0f} s)")
    for name in staged.source_only:
        print(f"  {name}: no executed copy found, shown from its source without outputs")
    for line in staged.start_here:
        print(f"  start here: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
