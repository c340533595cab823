"""Publishing a run: the only code that writes into ``papers/``.

``compendium run --publish`` (``make all``) and ``compendium publish RUN`` call :func:`publish` on a
run folder. Only a complete main run publishes (:func:`check_main_run`): every notebook of the
compendium ran in it and completed, with the default value of every parameter of its parameters
cell (only PROFILE, SEED and DEVICE set), at a published profile, from a known code state (a commit,
with the fingerprint of uncommitted changes when there are any). A run of one paper
(``compendium run --paper P --publish``, ``make all PAPER=P``, or ``compendium publish RUN --paper
P`` on any run) publishes that paper alone under the same rules applied to its notebooks
(:func:`compendium.runner.paper_notebooks`): only ``papers/P/`` changes, and only with what P's
notebooks wrote into it. Anything else is refused before anything is written, naming every reason.

Each profile keeps its own ledger. The results each notebook recorded go to
``papers/<paper>/results/`` (named ``<claim>.<profile>.json``); its figures (and their CSV data) to
``papers/<paper>/figures/`` at the default profile and to ``papers/<paper>/figures/<profile>/`` at
another, so that a publish at one profile leaves the other's figures as they were.
``PUBLISHED.json`` says, per profile, which run was last published (``last_publish``) and how each
notebook ended (``notebooks``); the ``CLAIMS.md`` of every paper published is rebuilt, with its
verdict board (``figures/verdict_board.png``, :mod:`compendium.board`, both profiles). Figure files
carry their notebook's number (``05_concept_coherence.png``, see
:func:`compendium.plotting.prefixed`). A notebook's figures replace its earlier ones at the same
profile: the files of that profile's folder that start with its number (``05_``) and that this run
did not write are removed, and so is the unnumbered name of each file it wrote
(``concept_coherence.png`` beside a new ``05_concept_coherence.png``: the name from before the
rule). A number that two notebooks of a paper share removes nothing by prefix.

All or nothing, at every instant:

1. one publisher at a time: ``.publish.lock`` at the root is held (``flock``) for the whole
   publish; a second publisher is refused with the holder's pid and run (:class:`PublishLocked`);
2. every result is read and checked and every table built in memory first; a malformed results
   file raises :class:`compendium.tables.ResultsFileError` naming it;
3. the complete new ``papers/`` is staged in a sibling folder ``.papers.publish-<pid>-<time>``:
   unchanged files are hard links to the published ones (no copy, no extra space), new and
   rewritten files are written and fsync'ed, then the folders;
4. one atomic exchange of the two folders (``renameat2(RENAME_EXCHANGE)``) switches ``papers/`` from
   the complete old state to the complete new one; the old tree is then removed. Where the
   filesystem cannot exchange, two renames do it, and the one moment between them (no ``papers/``)
   is repaired by the next publish, which puts the old tree back.

A crash, a kill or a full disk at any step before the exchange leaves ``papers/`` exactly as it was
(a full disk is reported as such, not as a traceback); a crash after it leaves the new state. The
next publish removes (and reports) whatever an interrupted one left beside ``papers/``.
``compendium claims`` (:func:`write_claims`) rebuilds the tables the same way.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from compendium import atomic, board, integrity, paths, profiles, runs, tables
from compendium import claims as _claims

LOCK = ".publish.lock"
STAGE_PREFIX = ".papers.publish-"
#: Parameters (besides PROFILE, SEED, DEVICE) a published run may set, per profile: none today. A
#: profile that allowed some would have them listed in PUBLISHED.json (``last_publish.parameters``).
ALLOWED_OVERRIDES: dict[str, frozenset[str]] = {}

#: Test hook: called with a label before every step that writes (staging each file, the switch,
#: the clean-up); a test makes it kill the process or raise ENOSPC there. None in normal use.
_fault: Callable[[str], None] | None = None


class PublishError(RuntimeError):
    """A publish was refused or stopped; ``papers/`` is as it was (the message says why)."""


class NotAMainRun(PublishError):
    """The run folder is not a complete main run (see :func:`check_main_run`)."""


class PublishLocked(PublishError):
    """Another publish holds the lock."""


@dataclass
class Published:
    run: Path
    results: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)             # stale figure files deleted
    tables: list[Path] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)              # leftovers of an interrupted publish
    paper: str | None = None                                      # the one paper published (None: all)
    profile: str | None = None
    other_papers: list[str] = field(default_factory=list)         # files left for another paper's publish

    def summary(self) -> str:
        lines = [f"removed the leftovers of an interrupted publish: {c}" for c in self.cleaned]
        scope = f" (paper {self.paper} only, profile {self.profile})" if self.paper else ""
        lines.append(
            f"published run {paths.display(self.run)}{scope}: {len(self.results)} result(s), "
            f"{len(self.figures)} figure file(s) from {len(self.completed)} completed notebook(s)"
            + (f", {len(self.removed)} stale figure file(s) removed" if self.removed else "") + "; "
            f"rebuilt {len(self.tables)} claims table(s)")
        if self.other_papers:
            lines.append(f"not published: {len(self.other_papers)} file(s) its notebooks wrote for other papers "
                         f"({_names(self.other_papers, 3)}); a run of those papers publishes them")
        return "\n".join(lines)


def _step(label: str) -> None:
    if _fault is not None:
        _fault(label)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- which runs may publish ---------------------------------------------------------------------
def check_main_run(run: Path, params: dict, status: dict[str, dict], paper: str | None = None) -> None:
    """Raise :class:`NotAMainRun`, listing every reason, unless ``run`` is a complete main run: made
    by ``compendium run`` with every notebook of the compendium (with ``paper``: every notebook of
    that paper, :func:`compendium.runner.paper_notebooks`), each completed, with default parameters
    (PROFILE, SEED and DEVICE only, or overrides :data:`ALLOWED_OVERRIDES` allows), at a published
    profile, from a commit (uncommitted changes recorded by their ``diff_sha256``)."""
    from compendium import runner

    shown = paths.display(run)
    if params.get("kind") != "runner" or "profile" not in params:
        raise NotAMainRun(f"{shown} is not a run folder made by `compendium run` (no params.json with a profile)")
    try:
        expected = runner.paper_notebooks(paper) if paper else runner.list_notebooks()
    except ValueError as err:
        raise NotAMainRun(f"{shown} cannot be published for paper {paper!r}: {err}") from None
    of = f" of paper '{paper}'" if paper else ""
    reasons = []
    if params["profile"] in profiles.TEST_ONLY:
        reasons.append(f"its profile '{params['profile']}' is for tests only (smaller protocols), never published")
    ran = list(params.get("notebooks") or status)
    absent = [n for n in expected if n not in ran]
    if absent:
        reasons.append(f"it ran {len(expected) - len(absent)} of the {len(expected)} notebooks{of}; not run: "
                       + _names(absent))
    not_done = {n: status.get(n, {}).get("status", "no status") for n in expected if n in ran}
    not_done = {n: s for n, s in not_done.items() if s != runs.COMPLETED}
    if not_done:
        reasons.append(f"{len(not_done)} notebook(s){of} did not complete: "
                       + ", ".join(f"{n} ({s})" for n, s in list(not_done.items())[:6])
                       + (", ..." if len(not_done) > 6 else ""))
    notebook_reasons = len(reasons) - bool(params["profile"] in profiles.TEST_ONLY)
    allowed = ALLOWED_OVERRIDES.get(params["profile"], frozenset())
    overrides = {k: v for k, v in (params.get("parameters") or {}).items() if k not in allowed}
    for name, entry in status.items():
        if paper and name not in expected:
            continue  # another paper's notebook in the run: not published, not judged here
        overrides.update({k: v for k, v in (entry.get("parameters") or {}).items()
                          if k not in runner.RESERVED and k not in allowed})
    if overrides:
        reasons.append("it set notebook parameters away from their defaults ("
                       + ", ".join(f"{k}={v!r}" for k, v in overrides.items())
                       + f"), which no published run may do at profile '{params['profile']}'")
    revision = params.get("git_revision")
    if not revision or revision == "unknown":
        reasons.append("its code state is unknown (no git revision in params.json)")
    elif revision.endswith("+dirty") and not params.get("diff_sha256"):
        reasons.append("it ran from uncommitted changes whose fingerprint (diff_sha256) was not recorded")
    if reasons:
        if paper:
            how = (f"Only a run of every notebook of paper '{paper}' at default parameters publishes it: `make all "
                   f"PAPER={paper}`, or `compendium run --paper {paper} --publish`.")
        else:
            how = ("Only a run of every notebook at default parameters publishes: `make all`, or `compendium run "
                   "--publish` without notebook names.")
            if notebook_reasons == len(reasons):  # only notebooks missing or failed: name the papers it completes
                done = _complete_papers(status)
                if done:
                    how += (f" Its notebooks of {', '.join(done)} all completed: `compendium publish {shown} "
                            f"--paper {done[0]}` publishes that paper alone.")
        raise NotAMainRun(
            f"{shown} is not {'a complete run' + of if paper else 'a complete main run'}, so it is not published "
            "(papers/ unchanged):\n  - " + "\n  - ".join(reasons)
            + f"\n{how} Other runs keep their results in their run folder.")


def _complete_papers(status: dict[str, dict]) -> list[str]:
    """The papers every notebook of which completed in a run with this ``status``."""
    from compendium import runner

    out = []
    for paper in _claims.paper_ids():
        try:
            names = runner.paper_notebooks(paper)
        except ValueError:
            continue
        if all(status.get(n, {}).get("status") == runs.COMPLETED for n in names):
            out.append(paper)
    return out


def _names(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names) - most} more)" if len(names) > most else "")


def _why(err: OSError) -> str:
    """An OSError in words: what a reader can act on."""
    words = {errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
             errno.EPERM: "operation not permitted", errno.ENOSPC: "no space left on the device",
             errno.EDQUOT: "the disk quota is exceeded"}
    return words.get(err.errno, f"{type(err).__name__}: {err.strerror or err}")


# -- the lock -------------------------------------------------------------------------------------
@contextmanager
def lock(what: str) -> Iterator[None]:
    """Hold ``<root>/.publish.lock`` (flock) while publishing ``what``; :class:`PublishLocked`, naming
    the holder's pid and run, when another process holds it."""
    path = paths.repo_root() / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # a read-only repository, a folder not ours, a full disk
        raise PublishError(
            f"cannot take the publish lock {LOCK} in the repository root ({_why(err)}): nothing was done, papers/ "
            "is unchanged. Publishing writes papers/ and the lock beside it: publish from a writable "
            "checkout") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "a process that has not said which"
            raise PublishLocked(
                f"another publish is writing papers/ ({holder}; lock {LOCK}): nothing was done. Wait for it to "
                "finish, then publish again") from None
        now = _now().isoformat(timespec="seconds")
        try:  # who holds it, for the message a second publisher gets (best effort: a full disk still publishes)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, publishing {what}, since {now}\n".encode(), 0)
        except OSError:
            pass
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _recover() -> list[str]:
    """Remove what an interrupted publish left beside papers/ (called under the lock, so no other
    publish is running); put the old tree back if one was caught between its two renames."""
    root, papers = paths.repo_root(), paths.papers_dir()
    left = sorted(p for p in root.glob(STAGE_PREFIX + "*") if p.is_dir() and not p.is_symlink())
    done = []
    if not papers.exists():
        olds = [p for p in left if p.name.endswith(".old")]
        if len(olds) != 1:
            raise PublishError(f"papers/ is missing and {len(olds)} saved copies of it were found "
                               f"({', '.join(p.name for p in olds) or 'none'}): restore it with `git checkout -- papers/`")
        os.rename(olds[0], papers)
        atomic.fsync_dir(root)
        left.remove(olds[0])
        done.append(f"{olds[0].name} put back as papers/ (a publish stopped between its two renames)")
    for p in left:
        shutil.rmtree(p, ignore_errors=True)
        done.append(f"{p.name}/ removed")
    return done


# -- staging and the switch -----------------------------------------------------------------------
def _write_new(path: Path, data: bytes, mode: int | None = None) -> None:
    """A new file at ``path`` (an existing one, maybe a hard link to the published file, is unlinked
    first, so the published file is never written through), fsync'ed."""
    _step(f"write {path.name}")
    if path.exists() or path.is_symlink():
        mode = path.stat().st_mode & 0o777 if mode is None and not path.is_symlink() else mode
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _mirror(src: Path, dst: Path) -> None:
    """``dst`` as a tree of hard links to the files of ``src`` (copies where links are refused)."""
    dst.mkdir()
    shutil.copystat(src, dst)
    for entry in sorted(src.iterdir()):
        target = dst / entry.name
        if entry.is_symlink():
            _step(f"link {entry.name}")
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            _mirror(entry, target)
        else:
            _step(f"link {entry.name}")
            try:
                os.link(entry, target)
            except OSError as err:
                if err.errno == errno.ENOSPC:
                    raise
                shutil.copy2(entry, target)


def _fsync_tree(folder: Path) -> None:
    for dirpath, _dirs, _files in os.walk(folder, topdown=False):
        atomic.fsync_dir(dirpath)


def switch(changes: dict[str, bytes | Path | None]) -> None:
    """Make ``papers/`` the published tree with ``changes`` applied ({path relative to papers/: new
    content (bytes, or a file to copy), or None to remove}), in one atomic step (module docstring).
    Call it holding :func:`lock`. Any failure before the switch leaves papers/ as it was and raises
    :class:`PublishError` saying so."""
    root, papers = paths.repo_root(), paths.papers_dir()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")  # unique: not _now()
    stage = root / f"{STAGE_PREFIX}{os.getpid()}-{stamp}"
    switched = False
    try:
        _mirror(papers, stage)
        for rel, content in sorted(changes.items()):
            path = stage / rel
            if content is None:
                _step(f"remove {rel}")
                path.unlink(missing_ok=True)
            else:
                _write_new(path, content if isinstance(content, bytes) else Path(content).read_bytes())
        _step("fsync")
        _fsync_tree(stage)
        atomic.fsync_dir(root)
        _step("switch")
        if atomic.exchange(stage, papers):
            switched = True
        else:  # two renames; _recover repairs a stop between them
            old = stage.with_name(stage.name + ".old")
            os.rename(papers, old)
            switched = True
            _step("between the two renames")
            os.rename(stage, papers)
            stage = old
        atomic.fsync_dir(root)
    except BaseException as err:
        if not switched:
            shutil.rmtree(stage, ignore_errors=True)
            if isinstance(err, OSError):
                what = ("no space left on the device" if err.errno in (errno.ENOSPC, errno.EDQUOT)
                        else f"{type(err).__name__}: {err}")
                raise PublishError(f"publishing stopped while staging the new papers/ ({what}); papers/ is "
                                   "unchanged and the staged copy was removed"
                                   + ("; free some space and publish again" if err.errno in (errno.ENOSPC, errno.EDQUOT)
                                      else "")) from err
        raise
    _step("remove the old tree")
    shutil.rmtree(stage, ignore_errors=True)


# -- publishing a run -----------------------------------------------------------------------------
def _paper_of_notebook(name: str, papers: list[str], owners: dict[str, set[str]]) -> set[str]:
    out = {p for p, names in owners.items() if name in names}
    head = name.split("/", 1)[0]
    if "/" in name and head in papers:
        out.add(head)
    return out


def publish(run: Path, paper: str | None = None) -> Published:
    """Publish the complete main run ``run`` into ``papers/`` (see the module docstring); with
    ``paper`` (or for a run made with ``compendium run --paper``), publish only that paper, from a
    run in which its notebooks all completed. Raises :class:`PublishError` (papers/ unchanged) when
    it may not or cannot."""
    run = Path(run).resolve()
    with lock(f"run {run.name}" + (f" (paper {paper})" if paper else "")):
        cleaned = _recover()
        out = _publish_locked(run, paper)
        out.cleaned = cleaned
        return out


def _publish_locked(run: Path, paper: str | None) -> Published:
    from compendium import runner

    params = runs.read_json(run / "params.json")
    status = runs.read_status(run)
    scope = paper or params.get("paper")
    check_main_run(run, params, status, paper=scope)
    profile = params["profile"]
    if scope:  # only the paper's notebooks publish, and only into papers/<scope>/
        mine_only = runner.paper_notebooks(scope)
        status = {n: e for n, e in status.items() if n in mine_only}
    out = Published(run=run, completed=list(status), paper=scope, profile=profile)

    # which notebook wrote each file last (notebooks run in the order status.json lists them)
    owner: dict[str, str] = {}
    for name, entry in status.items():
        for rel in entry.get("files", []):
            owner[rel] = name
    every = _claims.paper_ids()
    papers = [scope] if scope else every
    loaded = {p: _claims.load_paper(p) for p in papers}
    new_results: dict[str, dict[str, Path]] = {p: {} for p in papers}
    new_figures: dict[str, dict[str, Path]] = {p: {} for p in papers}
    writers: dict[str, set[str]] = {p: set() for p in papers}
    to_publish: dict[str, str] = {}                               # path relative to the run: its notebook
    for rel, name in sorted(owner.items()):
        parts = rel.split("/")
        if len(parts) != 3 or parts[1] not in papers or parts[0] not in ("results", "figures"):
            if len(parts) == 3 and parts[1] in every and parts[0] in ("results", "figures"):
                out.other_papers.append(rel)  # another paper's file: published with that paper's run
            continue  # e.g. figures/tour/...: not a paper's
        src = run / rel
        if not src.is_file():
            raise PublishError(f"{paths.display(src)}: listed in status.json as written by {name}, but missing")
        (new_results if parts[0] == "results" else new_figures)[parts[1]][parts[2]] = src
        writers[parts[1]].add(name)
        to_publish[rel] = name
    # every file published is the one its notebook wrote: its sha256 recorded in status.json
    problems = integrity.run_file_problems(run, status, to_publish)
    if problems:
        raise PublishError(f"{paths.display(run)} is not published (papers/ unchanged): {len(problems)} of its files "
                           "do not match the sha256 recorded when their notebook ended:\n  - " + "\n  - ".join(problems))

    # read and check everything, build every table in memory
    changes: dict[str, bytes | Path | None] = {}
    now = _now().isoformat(timespec="seconds")
    owners = {p: {c.notebook for c in loaded[p].claims.values() if c.notebook} for p in papers}
    for paper in papers:
        # this profile's figure folder, relative to papers/ (figures/, or figures/<profile>/)
        figure_folder = paths.published_figures_dir(paper, profile).relative_to(paths.papers_dir()).as_posix()
        files = tables.result_files(paper)
        for fname, src in new_results[paper].items():
            if not fname.endswith(".json"):
                raise tables.ResultsFileError(f"{paths.display(src)}: results files are JSON (<claim-id>.<profile>.json)")
            untraced = integrity.provenance_marks(tables.read_entry(src, loaded[paper]))  # raises naming the file
            if untraced:
                raise PublishError(f"{paths.display(src)} is not published (papers/ unchanged): "
                                   + "; ".join(m.lstrip("⚠ ") for m in untraced))
        files.update(new_results[paper])
        results = tables.read_results(paper, files)
        info = tables.read_published(paper)
        before = info
        mine = {n: status[n].get("status", "unknown") for n in status
                if paper in _paper_of_notebook(n, every, owners) or n in writers[paper]}
        if mine:
            last = {"run": run.name, "profile": profile, "seed": params.get("seed"),
                    "time_utc": now, "git_revision": params.get("git_revision"),
                    "diff_sha256": params.get("diff_sha256"), "parameters": dict(params.get("parameters") or {}),
                    "notebooks": mine, **({"paper": scope} if scope else {})}
            per_profile = dict((info.get("notebooks") or {}).get(profile, {}))
            for n, st in mine.items():
                per_profile[n] = {"status": st, "run": run.name, "time_utc": now}
            info = {"last_publish": {**tables.last_publishes(info), profile: last},
                    "notebooks": {**(info.get("notebooks") or {}), profile: per_profile}}
            changes[f"{paper}/results/{tables.PUBLISHED}"] = _json_bytes(info)
        for fname, src in new_results[paper].items():
            changes[f"{paper}/results/{fname}"] = src
            out.results.append(paths.results_dir(paper) / fname)
        for fname, src in new_figures[paper].items():
            changes[f"{figure_folder}/{fname}"] = src
            out.figures.append(paths.published_figures_dir(paper, profile) / fname)
        notebooks = [n for n in out.completed if paper in _paper_of_notebook(n, every, owners) or n in writers[paper]]
        stale = _stale_figures(paper, profile, new_figures[paper], notebooks)
        for path in stale:
            changes[f"{figure_folder}/{path.name}"] = None
            out.removed.append(path)
        if f"{paper}/results/{tables.PUBLISHED}" in changes:  # the sha256 of every published file
            own = figure_folder[len(paper) + 1:]   # figures/ or figures/<profile>/, relative to papers/<paper>/
            written = {f"results/{f}": _recorded(run, status, owner, src) for f, src in new_results[paper].items()}
            written.update({f"{own}/{f}": _recorded(run, status, owner, src) for f, src in new_figures[paper].items()})
            removed = [f"{own}/{path.name}" for path in stale]
            info = {**info, integrity.KEY: integrity.published_listing(paper, before, written, removed)}
            changes[f"{paper}/results/{tables.PUBLISHED}"] = _json_bytes(info)
        changes[f"{paper}/CLAIMS.md"] = tables.build_table(paper, results, info).encode("utf-8")
        changes[f"{paper}/figures/{board.FIGURE_NAME}"] = board.png_bytes(board.build(paper, results, info))
        out.tables.append(paths.papers_dir() / paper / "CLAIMS.md")
    switch(changes)
    return out


def _recorded(run: Path, status: dict[str, dict], owner: dict[str, str], src: Path) -> str:
    """The sha256 status.json recorded for the file ``src`` of ``run`` (checked by
    :func:`compendium.integrity.run_file_problems` before anything is staged)."""
    rel = src.relative_to(run).as_posix()
    return status[owner[rel]][integrity.STATUS_KEY][rel]


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


def write_claims() -> list[Path]:
    """Rebuild every ``papers/<paper>/CLAIMS.md`` and verdict board (``figures/verdict_board.png``)
    from the published results (``compendium claims``), under the lock and in one switch, like a publish."""
    with lock("the claims tables (compendium claims)"):
        _recover()
        texts = {paper: tables.build_table(paper) for paper in _claims.paper_ids()}  # all built first
        boards = {paper: board.png_bytes(board.build(paper)) for paper in texts}
        switch({**{f"{paper}/CLAIMS.md": text.encode("utf-8") for paper, text in texts.items()},
                **{f"{paper}/figures/{board.FIGURE_NAME}": png for paper, png in boards.items()}})
    return [path for paper in texts for path in (paths.papers_dir() / paper / "CLAIMS.md",
                                                 paths.published_figures_dir(paper) / board.FIGURE_NAME)]


def _stale_figures(paper: str, profile: str, new: dict[str, Path], notebooks: list[str]) -> list[Path]:
    """Published figure files of ``paper`` at ``profile`` (in that profile's folder only) that the
    completed ``notebooks`` replace (module docstring)."""
    from compendium import runner
    from compendium.plotting import notebook_prefix

    folder = paths.published_figures_dir(paper, profile)
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
