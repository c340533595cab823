"""Publishing a run: the only code that writes into ``papers/``.

``compendium run --publish`` (``make all``) calls :func:`publish` on its run folder once the
notebooks have run. For each notebook that completed, the results it recorded go to
``papers/<paper>/results/`` and its figures (and their CSV data) to ``papers/<paper>/figures/``;
nothing of a notebook that failed or did not run is copied. Then every ``CLAIMS.md`` is rebuilt.

Figure files carry their notebook's number (``05_concept_coherence.png``, see
:func:`compendium.plotting.prefixed`). A completed notebook's figures replace its earlier ones:
the files of ``papers/<paper>/figures/`` that start with its number (``05_``) and that this run
did not write are removed, and so is the unnumbered name of each file it wrote
(``concept_coherence.png`` beside a new ``05_concept_coherence.png``: the name from before the
rule). A number that two notebooks of a paper share removes nothing by prefix.

All or nothing: every result to be published is read and checked, and every table is built in
memory, before the first file is written; a malformed results file (new or already published)
raises :class:`compendium.tables.ResultsFileError` naming it, and ``papers/`` stays as it was.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from compendium import atomic, paths, runs, tables
from compendium import claims as _claims


@dataclass
class Published:
    run: Path
    results: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)             # stale figure files deleted
    tables: list[Path] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    not_completed: dict[str, str] = field(default_factory=dict)   # name -> status
    skipped_files: list[str] = field(default_factory=list)         # written by a notebook that did not complete

    def summary(self) -> str:
        lines = [f"published run {paths.display(self.run)}: {len(self.results)} result(s), "
                 f"{len(self.figures)} figure file(s) from {len(self.completed)} completed notebook(s)"
                 + (f", {len(self.removed)} stale figure file(s) removed" if self.removed else "") + "; "
                 f"rebuilt {len(self.tables)} claims table(s)"]
        for name, status in self.not_completed.items():
            lines.append(f"  not published: {name} ({status})")
        return "\n".join(lines)


def _paper_of_notebook(name: str, papers: list[str], owners: dict[str, set[str]]) -> set[str]:
    out = {p for p, names in owners.items() if name in names}
    head = name.split("/", 1)[0]
    if "/" in name and head in papers:
        out.add(head)
    return out


def publish(run: Path) -> Published:
    """Copy the completed notebooks' results and figures of ``run`` into ``papers/`` and rebuild
    every CLAIMS.md (see the module docstring)."""
    run = Path(run).resolve()
    params = runs.read_json(run / "params.json")
    status = runs.read_status(run)
    if not params or "profile" not in params:
        raise ValueError(f"{paths.display(run)} is not a run folder made by `compendium run` (no params.json with a profile)")
    if not status:
        raise ValueError(f"{paths.display(run)}/status.json lists no notebooks: nothing to publish")
    out = Published(run=run)
    for name, entry in status.items():
        if entry.get("status") == runs.COMPLETED:
            out.completed.append(name)
        else:
            out.not_completed[name] = entry.get("status", "unknown")

    # which notebook wrote each file last (notebooks run in the order status.json lists them)
    owner: dict[str, str] = {}
    for name, entry in status.items():
        for rel in entry.get("files", []):
            owner[rel] = name
    papers = _claims.paper_ids()
    loaded = {p: _claims.load_paper(p) for p in papers}
    new_results: dict[str, dict[str, Path]] = {p: {} for p in papers}
    new_figures: dict[str, dict[str, Path]] = {p: {} for p in papers}
    writers: dict[str, set[str]] = {p: set() for p in papers}
    for rel, name in sorted(owner.items()):
        parts = rel.split("/")
        if len(parts) != 3 or parts[1] not in papers or parts[0] not in ("results", "figures"):
            continue  # e.g. figures/tour/...: not a paper's
        src = run / rel
        if status[name].get("status") != runs.COMPLETED:
            out.skipped_files.append(rel)
            continue
        if not src.is_file():
            raise FileNotFoundError(f"{paths.display(src)}: listed in status.json as written by {name}, but missing")
        (new_results if parts[0] == "results" else new_figures)[parts[1]][parts[2]] = src
        writers[parts[1]].add(name)

    # read and check everything, build every table in memory
    merged_tables: dict[str, str] = {}
    published_info: dict[str, dict] = {}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    owners = {p: {c.notebook for c in loaded[p].claims.values() if c.notebook} for p in papers}
    for paper in papers:
        files = tables.result_files(paper)
        for fname, src in new_results[paper].items():
            if not fname.endswith(".json"):
                raise tables.ResultsFileError(f"{paths.display(src)}: results files are JSON (<claim-id>.<profile>.json)")
            tables.read_entry(src, loaded[paper])  # raises naming the file
        files.update(new_results[paper])
        results = tables.read_results(paper, files)
        info = tables.read_published(paper)
        mine = {n: status[n].get("status", "unknown") for n in status
                if paper in _paper_of_notebook(n, papers, owners) or n in writers[paper]}
        if not mine:  # the run did not include this paper's notebooks: its last publish stays as it was
            published_info[paper] = info
            merged_tables[paper] = tables.build_table(paper, results, info)
            continue
        last = {"run": run.name, "profile": params["profile"], "seed": params.get("seed"),
                "time_utc": now, "git_revision": params.get("git_revision"),
                "diff_sha256": params.get("diff_sha256"), "notebooks": mine}
        per_profile = dict((info.get("notebooks") or {}).get(params["profile"], {}))
        for n, st in mine.items():
            per_profile[n] = {"status": st, "run": run.name, "time_utc": now}
        info = {"last_publish": last,
                "notebooks": {**(info.get("notebooks") or {}), params["profile"]: per_profile}}
        published_info[paper] = info
        merged_tables[paper] = tables.build_table(paper, results, info)

    stale = {p: _stale_figures(p, new_figures[p], [n for n in out.completed
                                                     if p in _paper_of_notebook(n, papers, owners) or n in writers[p]])
             for p in papers}

    # write: results, figures (stale ones removed), PUBLISHED.json, then the tables
    for paper in papers:
        for fname, src in sorted(new_results[paper].items()):
            out.results.append(_copy(src, paths.results_dir(paper) / fname))
        for fname, src in sorted(new_figures[paper].items()):
            out.figures.append(_copy(src, paths.published_figures_dir(paper) / fname))
        for path in stale[paper]:
            path.unlink(missing_ok=True)
            out.removed.append(path)
        if published_info[paper]:
            atomic.write_json(paths.results_dir(paper) / tables.PUBLISHED, published_info[paper])
    out.tables = tables.write_tables(merged_tables)
    return out


def _stale_figures(paper: str, new: dict[str, Path], notebooks: list[str]) -> list[Path]:
    """Published figure files of ``paper`` that the completed ``notebooks`` replace (module docstring)."""
    from compendium import runner
    from compendium.plotting import notebook_prefix

    folder = paths.published_figures_dir(paper)
    if not folder.is_dir() or not notebooks:
        return []
    existing = {p.name: p for p in folder.iterdir() if p.is_file()}
    all_prefixes = [notebook_prefix(n) for n in runner.list_notebooks() if n.split("/", 1)[0] == paper]
    out = set()
    for name in notebooks:
        prefix = notebook_prefix(name)
        if not prefix:
            continue
        if all_prefixes.count(prefix) <= 1:
            out |= {f for f in existing if f.startswith(prefix) and f not in new}
        out |= {f[len(prefix):] for f in new if f.startswith(prefix) and f[len(prefix):] in existing
                and f[len(prefix):] not in new}
    return [existing[f] for f in sorted(out)]


def _copy(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return dest
