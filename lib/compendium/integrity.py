"""The ledger checked: every published file traceable by its sha256 from the run that wrote it to
the table, and every result's provenance checked against the repository and its own record.

The chain of hashes:

1. **run folder**: when a notebook ends, the runner records in ``<run>/status.json`` the sha256 of
   every file it wrote (``"sha256": {path relative to the run: hex}``, :func:`hash_files`, called
   by :func:`compendium.runs.set_status`);
2. **publish**: ``compendium publish`` refuses a run any of whose files differs from its recorded
   sha256, or has none recorded, naming each file (:func:`run_file_problems`); it writes into
   ``papers/<paper>/results/PUBLISHED.json`` the sha256 of every published file (``"sha256":
   {path relative to papers/<paper>/: hex}``, :func:`published_listing`);
3. **tables and boards**: every build checks ``papers/`` against PUBLISHED.json. A result whose file
   changed since it was published, one that PUBLISHED.json does not list, and one that it lists but
   that is missing each get a ⚠ with the reason, in the table row and on the board
   (:func:`result_marks`, :func:`missing_results`); the figures are checked the same way
   (:func:`figure_problems`). A paper with results but no PUBLISHED.json is an error naming it
   (:func:`compendium.tables.read_published`).

A PUBLISHED.json written before hashes were recorded (no ``"sha256"``) is read as it is: every row
says *not verifiable: published before hashes were recorded* until a complete main run republishes
the paper. A publish carries such a file's entry over as ``null`` (still not verifiable) for the
results of a profile it does not republish; one it rewrites gets its hash.

Provenance, checked for every result at every build:

- ``git_revision`` must name a commit of the repository's history (an ancestor of HEAD); where the
  history cannot tell (a shallow clone, no git), the row says it cannot be verified;
  ``+dirty`` needs its ``diff_sha256`` (:func:`provenance_marks`, a ⚠ in the row);
- a point value must lie inside its own recorded interval, and a result's profile must match the
  protocol it records (the model and sample sizes of that profile's protocol block, in its
  recorded ``protocol`` and ``config``): otherwise the result is refused, naming the claim and the
  values (:func:`contradictions`, raised by :func:`compendium.tables.read_entry`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from pathlib import Path
from typing import Iterable

from compendium import paths

PUBLISHED = "PUBLISHED.json"
#: PUBLISHED.json's mapping {path relative to papers/<paper>/: sha256 hex, or null}
KEY = "sha256"
#: status.json's mapping, per notebook, {path relative to the run: sha256 hex}
STATUS_KEY = "sha256"
#: files of a paper that the publish path rewrites from the others (not listed, not checked)
DERIVED = ("figures/verdict_board.png",)
NOT_VERIFIABLE = "⚠ not verifiable: published before hashes were recorded (PUBLISHED.json lists no sha256)"

_HEX = re.compile(r"^[0-9a-f]{7,40}$")


# -- hashing ----------------------------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hash_files(run: Path, rels: Iterable[str]) -> dict[str, str | None]:
    """{path relative to ``run``: sha256 of its content} (None for a file that is no longer there)."""
    out: dict[str, str | None] = {}
    for rel in rels:
        path = Path(run) / rel
        out[rel] = sha256_file(path) if path.is_file() else None
    return out


# -- run folder -> publish --------------------------------------------------------------------------
def run_file_problems(run: Path, status: dict[str, dict], owner: dict[str, str]) -> list[str]:
    """Why the files ``owner`` names ({path relative to the run: the notebook that wrote it}) may not
    be published: each one whose content differs from the sha256 that ``status.json`` recorded for
    it when its notebook ended, or that has none recorded; [] when every one matches."""
    problems = []
    for rel, name in sorted(owner.items()):
        path = Path(run) / rel
        recorded = (status.get(name) or {}).get(STATUS_KEY)
        if not isinstance(recorded, dict) or rel not in recorded:
            problems.append(f"{paths.display(path)}: status.json records no sha256 for it (written by {name}); "
                            "a run made before hashes were recorded publishes nothing: run it again")
        elif not path.is_file():
            problems.append(f"{paths.display(path)}: listed in status.json as written by {name}, but missing")
        elif sha256_file(path) != recorded[rel]:
            problems.append(f"{paths.display(path)}: its content differs from the sha256 recorded when {name} "
                            f"ended ({str(recorded[rel])[:12]}...): changed after the run")
    return problems


def paper_files(paper: str) -> dict[str, Path]:
    """{path relative to papers/<paper>/: path} of the files a publish writes and PUBLISHED.json
    lists: every results file but PUBLISHED.json, every figure file (any profile's folder) but the
    verdict board, which the tables' build rewrites."""
    base = paths.papers_dir() / paper
    out = {}
    for sub in ("results", "figures"):
        folder = base / sub
        if folder.is_dir():
            for f in sorted(folder.rglob("*")):
                rel = f.relative_to(base).as_posix()
                if f.is_file() and rel != f"results/{PUBLISHED}" and rel not in DERIVED:
                    out[rel] = f
    return out


def published_listing(paper: str, old: dict, written: dict[str, str], removed: Iterable[str]) -> dict[str, str | None]:
    """PUBLISHED.json's ``sha256`` after a publish of ``paper``: ``written`` ({path relative to
    papers/<paper>/: its sha256}) as this publish writes it; every other entry of the old listing
    kept as it was (so a file changed, missing or unlisted before the publish stays marked), less
    the ``removed`` files; where the old PUBLISHED.json has no listing (written before hashes were
    recorded), each file already published is carried as None (not verifiable)."""
    removed = set(removed)
    before = old.get(KEY) if old else None
    if isinstance(before, dict):
        listing = {rel: h for rel, h in before.items() if rel not in removed}
    else:
        listing = {rel: None for rel in paper_files(paper) if rel not in removed} if old else {}
    listing.update(written)
    return dict(sorted(listing.items()))


# -- papers/ -> the tables --------------------------------------------------------------------------
def _listing(published: dict) -> dict | None:
    listing = published.get(KEY)
    return listing if isinstance(listing, dict) else None


def result_marks(paper: str, entry: dict, published: dict) -> list[str]:
    """The ⚠ marks of a published result read by :func:`compendium.tables.read_entry`: its file
    checked against PUBLISHED.json (``published``; nothing to check against when it is empty), and
    its provenance (:func:`provenance_marks`)."""
    marks = []
    if published:
        listing = _listing(published)
        rel = f"results/{entry.get('file_name') or ''}"
        shown = f"papers/{paper}/{rel}"
        if listing is None:
            marks.append(NOT_VERIFIABLE)
        elif rel not in listing:
            marks.append(f"⚠ not published: {shown} is not listed in PUBLISHED.json (added or replaced by hand "
                         "after the last publish)")
        elif listing[rel] is None:
            marks.append(NOT_VERIFIABLE)
        elif entry.get("file_sha256") != listing[rel]:
            marks.append(f"⚠ changed since published: {shown} does not match its sha256 in PUBLISHED.json "
                         f"({str(listing[rel])[:12]}...)")
    return marks + provenance_marks(entry)


def missing_results(paper: str, results: dict[str, dict[str, dict]], published: dict) -> dict[tuple[str, str], str]:
    """{(claim id, profile): its ⚠ mark} of the results PUBLISHED.json lists that ``results`` (as
    :func:`compendium.tables.read_results` returns them) lacks: a published result deleted."""
    out = {}
    for rel, digest in (_listing(published) or {}).items():
        folder, _, name = rel.partition("/")
        if folder != "results" or "/" in name or not name.endswith(".json"):
            continue
        claim_id, _, profile = name[:-len(".json")].rpartition(".")
        if claim_id and profile not in results.get(claim_id, {}):
            out[(claim_id, profile)] = (f"⚠ missing: papers/{paper}/{rel} is listed in PUBLISHED.json "
                                        f"(sha256 {str(digest)[:12]}...) but is not there")
    return out


def figure_problems(paper: str, published: dict) -> list[str]:
    """A line per figure file of ``papers/<paper>/figures`` that does not match PUBLISHED.json:
    changed, not listed, or listed and missing ([] when PUBLISHED.json has no listing)."""
    listing = _listing(published)
    if listing is None:
        return []
    files = {rel: p for rel, p in paper_files(paper).items() if rel.startswith("figures/")}
    out = []
    for rel, path in files.items():
        if rel not in listing:
            out.append(f"`{rel}`: not listed in PUBLISHED.json")
        elif listing[rel] is not None and sha256_file(path) != listing[rel]:
            out.append(f"`{rel}`: changed since published (its sha256 differs from PUBLISHED.json's)")
    out += [f"`{rel}`: listed in PUBLISHED.json but missing"
            for rel in listing if rel.startswith("figures/") and rel not in files]
    return out


# -- provenance -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _commit_state(root: str, sha: str) -> tuple[bool | None, str]:
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    try:
        if git("rev-parse", "--git-dir").returncode != 0:
            return None, "cannot be verified: the compendium is not a git repository here"
        rc = git("merge-base", "--is-ancestor", sha, "HEAD").returncode
        if rc == 0:
            return True, ""
        known = git("cat-file", "-e", f"{sha}^{{commit}}").returncode == 0
        if known:
            return False, "is a commit outside the history of HEAD"
        if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            return None, "cannot be verified: the repository is a shallow clone"
        return False, "is no commit of this repository"
    except OSError:
        return None, "cannot be verified: git cannot be run"


def commit_state(sha: str) -> tuple[bool | None, str]:
    """(True, "") when ``sha`` names a commit of the history of HEAD; (False, why) when it does not;
    (None, why) when the repository cannot tell (a shallow clone, no git)."""
    return _commit_state(str(paths.repo_root()), sha)


def provenance_marks(entry: dict) -> list[str]:
    """⚠ marks for a result whose code state cannot be traced: no git revision, one that names no
    commit of the repository's history (or cannot be verified), ``+dirty`` without its diff_sha256."""
    prov = entry.get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    revision = prov.get("git_revision")
    if not isinstance(revision, str) or not revision or revision == "unknown":
        return [f"⚠ no git revision recorded ({revision!r}): the code that produced it cannot be named"]
    sha, plus, flag = revision.partition("+")
    marks = []
    if plus and flag != "dirty":
        marks.append(f"⚠ git revision {revision!r}: the only suffix a revision may carry is '+dirty'")
    elif flag == "dirty" and not prov.get("diff_sha256"):
        marks.append(f"⚠ git revision {sha[:10]}+dirty without its diff_sha256: the uncommitted changes it "
                     "ran with are not fingerprinted")
    if not _HEX.match(sha):
        return marks + [f"⚠ git revision {sha!r} is not a commit hash"]
    known, why = commit_state(sha)
    if not known:  # False: names no commit of the history; None: the repository cannot tell
        marks.append(f"⚠ git revision {sha[:10]} {why}")
    return marks


# -- what a result contradicts in itself --------------------------------------------------------------
def _size_mismatches(expected: dict, recorded: dict, where: str) -> dict[str, tuple]:
    """{setting: (recorded, registered)} where ``recorded`` (a result's ``protocol`` or ``config``)
    departs from the registered protocol ``expected`` in its model or sample sizes. A recorded
    protocol is what :func:`compendium.claims.conclude` copied from the registration, so it must be
    equal to it; a config may describe its model in words (``models/<name>: ...``), so it needs only
    to name each registered model, and to give each registered ``n_*`` setting its value."""
    out = {}
    for k, want in expected.items():
        if k not in recorded:
            continue
        got = recorded[k]
        if k.startswith("n_") or where == "protocol":
            if got != want:
                out[k] = (got, want)
        elif k in ("model", "models"):
            names = [want] if isinstance(want, str) else [n for n in want if isinstance(n, str)] \
                if isinstance(want, list) else []
            text = json.dumps(got, sort_keys=True, default=str)
            if any(n not in text for n in names):
                out[k] = (got, want)
    return out


def contradictions(claim, entry: dict, conditions: Iterable[dict]) -> list[str]:
    """What a result contradicts in itself, each naming the claim and the values (for a refusal):
    a point value outside its own recorded interval (``conditions``: the derived outcomes, as
    :meth:`compendium.judge.Outcome.as_dict` gives them); and, for a result that says it was
    measured under its profile's registered protocol (its ``protocol_sha256`` is that profile's),
    a recorded protocol that is not that protocol, or a config whose model or sample sizes
    (``model``, ``models``, ``n_*``) are not its."""
    from compendium import judge

    profile = entry.get("profile")
    out = []
    for c in conditions:
        interval, value = c.get("interval_values"), c.get("value")
        if interval and judge._is_number(value) and not interval[0] <= value <= interval[1]:
            out.append(f"{claim.key} at {profile}: {c.get('quantity')} = {value!r} lies outside its own recorded "
                       f"interval [{interval[0]!r}, {interval[1]!r}]; a point estimate lies inside its interval")
    registered = judge.protocol_sha256(claim, profile) if claim.protocol else None
    if registered is None or entry.get("protocol_sha256") != registered:
        return out  # no protocol, or recorded under another one (compendium.judge decides what that gives)
    expected = claim.protocol_for(profile)
    for where in ("protocol", "config"):
        recorded = entry.get(where)
        if not isinstance(recorded, dict):
            continue
        sizes = {k: v for k, v in expected.items() if k in ("model", "models") or k.startswith("n_")}
        wrong = _size_mismatches(expected if where == "protocol" else sizes, recorded, where)
        if where == "protocol" and not wrong and recorded != expected:
            wrong = {"(its settings)": ("other settings", "the registered ones")}
        if wrong:
            out.append(f"{claim.key} at {profile}: its recorded {where} is not the {profile} protocol's ("
                       + ", ".join(f"{k} = {_short(got)}, registered {_short(want)}" for k, (got, want) in wrong.items())
                       + f"), though its protocol_sha256 says it was measured under it: a result of another "
                       f"profile relabelled {profile!r}?")
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"
