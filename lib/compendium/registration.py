"""When each claim's whole check was registered, from the repository's git history.

For a claim and a profile, the *registering commit* is the commit at which the whole check at that
profile (:func:`compendium.judge.raw_check_sha256`: conditions, interval rules, points,
preconditions, min_units and the protocol at the profile) became what ``claims.yaml`` says now: its
``claims.yaml`` gives the current hash and none of its parents' does; where a check returned to an
earlier form, the earliest such commit from which on every published result was recorded under it
(:func:`registering_commit`). The check was registered *before measuring* at the profile
when every published result of the claim at that profile (each committed version of
``papers/<paper>/results/<claim>.<profile>.json``, and the file as it is now) was measured at a
revision descending from that commit. Otherwise it came *after a first measurement* where one of
the results before it was recorded under the whole check as it stands (measured with the check in
an uncommitted tree), and *after earlier checks' measurements* where every result before it was
recorded under an earlier version of the whole check, or judged by its notebook's own test (which
recorded no preconditions, protocol or interval rule: an earlier check).

A claim's ``check.registered`` names the latest registering commit over the published profiles
(the commit since which the whole check stands at every profile), and ``registered_after`` is set
when the check came after a first measurement at any profile. ``python -m compendium.registration``
prints the derivation for every claim (``--changed``: only where claims.yaml says otherwise).
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import dataclass

import yaml

from compendium import judge, paths, profiles

AFTER = "a first measurement"               # a result of the check as it stands came before it
AFTER_EARLIER = "earlier checks' measurements"  # only results of earlier versions came before it


def git(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(paths.repo_root()), *args], capture_output=True, text=True, input=stdin)


def has_history() -> bool:
    return git("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"


@functools.lru_cache(maxsize=None)
def _commits() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(commit, parents) of every commit reachable from HEAD, newest first (topological order)."""
    out = git("rev-list", "--topo-order", "--parents", "HEAD").stdout.split("\n")
    return tuple((line.split()[0], tuple(line.split()[1:])) for line in out if line.strip())


@functools.lru_cache(maxsize=None)
def _blob_claims(blob: str) -> dict[str, dict]:
    text = git("cat-file", "blob", blob).stdout
    raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    return {c["id"]: c for c in raw.get("claims") or [] if isinstance(c, dict) and "id" in c}


@functools.lru_cache(maxsize=None)
def _blobs(rel: str) -> dict[str, str | None]:
    """{commit: blob id of ``rel`` there (None where absent)} over every commit."""
    commits = [c for c, _ in _commits()]
    out = git("cat-file", "--batch-check=%(objectname) %(objecttype)",
              stdin="".join(f"{c}:{rel}\n" for c in commits)).stdout.splitlines()
    return {c: (line.split()[0] if line.endswith(" blob") else None) for c, line in zip(commits, out)}


def claims_at(commit: str, paper: str) -> dict[str, dict]:
    """{claim id: the claim as written} in ``papers/<paper>/claims.yaml`` at ``commit``."""
    blob = _blobs(f"papers/{paper}/claims.yaml").get(commit)
    if blob is None:
        shown = git("rev-parse", "--verify", "--quiet", f"{commit}:papers/{paper}/claims.yaml").stdout.strip()
        blob = shown or None
    return {} if blob is None else _blob_claims(blob)


def hash_at(commit: str, paper: str, claim_id: str, profile: str) -> str | None:
    item = claims_at(commit, paper).get(claim_id)
    return None if item is None else judge.raw_check_sha256(item, profile)


def introducing_commits(paper: str, claim_id: str, profile: str, now: str) -> list[str]:
    """The commits whose claims.yaml gives the claim the whole-check hash ``now`` at ``profile``
    while none of their parents' does, newest first."""
    return [commit for commit, parents in _commits()
            if hash_at(commit, paper, claim_id, profile) == now
            and all(hash_at(p, paper, claim_id, profile) != now for p in parents)]


def registering_commit(paper: str, claim_id: str, profile: str, now: str,
                       results: tuple | list = ()) -> str | None:
    """The commit that registered the whole check ``now`` at ``profile``: of the commits that
    introduced it (:func:`introducing_commits`), the earliest from which on every published result
    at the profile (``results``: (where, revision, recorded hash)) was recorded under it; so a check
    changed and later restored counts from the restoring commit once a result was measured under
    the other one in between, and from its first commit where none was (None where no commit
    introduced it)."""
    candidates = introducing_commits(paper, claim_id, profile, now)
    for commit in reversed(candidates):
        if all(h == now for _, rev, h in results if descends(commit, rev)):
            return commit
    return candidates[0] if candidates else None


def result_revisions(paper: str, claim_id: str, profile: str) -> list[tuple[str, str | None, str | None]]:
    """(where, git revision, whole-check hash it was recorded under) of every version of the
    claim's published result at ``profile``: each committed version, oldest first, and the file as
    it is now (the hash is None for a result that recorded no check)."""
    rel = f"papers/{paper}/results/{claim_id}.{profile}.json"
    texts = []
    for commit in reversed(git("log", "--full-history", "--format=%H", "--", rel).stdout.split()):
        text = git("show", f"{commit}:{rel}").stdout
        if text:
            texts.append((f"{rel} at {commit[:7]}", text))
    path = paths.repo_root() / rel
    if path.exists():
        texts.append((f"{rel} (working tree)", path.read_text()))
    out = []
    for where, text in texts:
        entry = json.loads(text)
        out.append((where, (entry.get("provenance") or {}).get("git_revision"), judge.recorded_check_sha256(entry)))
    return out


def descends(ancestor: str, revision: str | None) -> bool:
    """Whether ``revision`` (a result's git_revision, ``+dirty`` allowed) descends from ``ancestor``."""
    if not revision or revision == "unknown":
        return False
    return git("merge-base", "--is-ancestor", ancestor, revision.removesuffix("+dirty")).returncode == 0


@dataclass(frozen=True)
class AtProfile:
    profile: str
    commit: str | None              # the registering commit of the whole check at the profile
    results: tuple[tuple[str, str | None, str | None], ...]
    measured_first: tuple[str, ...]  # the results not descending from the commit
    same_check_first: tuple[str, ...]  # those of them recorded under the whole check as it stands

    @property
    def before(self) -> bool:
        return self.commit is not None and not self.measured_first


@dataclass(frozen=True)
class Derivation:
    paper: str
    claim_id: str
    at: tuple[AtProfile, ...]
    registered: str | None          # the latest registering commit over the profiles
    registered_after: str | None    # AFTER, or None (before measuring at every profile)

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.claim_id}"


def changed_parts(old: dict | None, new: dict, profile: str) -> list[str]:
    """What differs between two versions of a claim as written, among the parts of its whole
    check at ``profile`` (for the history line of a re-derived registration)."""
    if old is None:
        return ["the claim"]
    def parts(item: dict) -> dict:
        c = item.get("check") or {}
        conds = [c, *(c.get("all_of") or [])] if c else []
        proto = item.get("protocol") or {}
        return {
            "quantities, comparators or thresholds": [(x.get("quantity"), x.get("op"), x.get("threshold")) for x in conds],
            "interval rule": [x.get("interval") for x in conds],
            "point reason": [x.get("point") for x in conds],
            "measured_only_at": c.get("measured_only_at"),
            "preconditions": [(p.get("id"), p.get("quantity"), p.get("op"), p.get("threshold"))
                              for p in item.get("preconditions") or []],
            "min_units": None if not item.get("min_units") else (item["min_units"].get("quantity"),
                                                               item["min_units"].get("at_least")),
            f"protocol at {profile}": {**proto.get("all", {}), **proto.get(profile, {})},
        }
    a, b = parts(old), parts(new)
    return [k for k in b if a[k] != b[k]]


def _latest(commits: list[str]) -> str | None:
    """The commit of ``commits`` that descends from every other (None if they are not in one line)."""
    for c in commits:
        if all(c == o or git("merge-base", "--is-ancestor", o, c).returncode == 0 for o in commits):
            return c
    return None


def derive(paper: str, claim_id: str, item: dict) -> Derivation:
    """The registration of claim ``claim_id`` as written now (``item``), from the git history."""
    at = []
    for profile in profiles.PROFILES:
        now = judge.raw_check_sha256(item, profile)
        results = tuple(result_revisions(paper, claim_id, profile))
        commit = registering_commit(paper, claim_id, profile, now, results)
        first = [(w, h) for w, rev, h in results if commit is None or not descends(commit, rev)]
        at.append(AtProfile(profile, commit, results, tuple(w for w, _ in first),
                            tuple(w for w, h in first if h == now)))
    commits = [a.commit for a in at]
    registered = None if None in commits else _latest(list(dict.fromkeys(commits)))
    if all(a.before for a in at):
        after = None
    else:
        after = AFTER if any(a.same_check_first for a in at) or None in commits else AFTER_EARLIER
    return Derivation(paper, claim_id, tuple(at), registered, after)


def wording_holds(registered: str | None, registered_after: str | None, d: Derivation) -> bool:
    """Whether a claim's written ``registered`` / ``registered_after`` say what the history shows:
    the commit is the derived one; no ``registered_after`` only where the whole check preceded
    every result at every profile; "earlier checks' measurements" only where no result of the
    check as it stands came before it ("a first measurement", the stronger, is always allowed
    after a measurement)."""
    if not registered or d.registered is None or not d.registered.startswith(str(registered)):
        return False
    if d.registered_after is None:
        return registered_after is None
    if d.registered_after == AFTER:
        return registered_after == AFTER
    return registered_after in (AFTER, AFTER_EARLIER)


def current(paper: str) -> dict[str, dict]:
    path = paths.papers_dir() / paper / "claims.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {c["id"]: c for c in raw["claims"] if c.get("check") is not None}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from compendium import checks

    for paper in checks.paper_ids():
        for cid, item in current(paper).items():
            d = derive(paper, cid, item)
            check = item["check"]
            written = (check.get("registered"), check.get("registered_after"))
            derived = (d.registered[:7] if d.registered else None, d.registered_after)
            same = wording_holds(*written, d)
            if "--changed" in argv and same:
                continue
            mark = "ok" if same else "CHANGED"
            print(f"{d.key}: {mark}: written {written}, derived {derived}")
            for a in d.at:
                line = f"  {a.profile}: whole check registered in {a.commit[:7] if a.commit else None}"
                if a.commit:
                    parent = git("rev-parse", f"{a.commit}^").stdout.strip()
                    old = claims_at(parent, paper).get(cid) if parent else None
                    line += f" (changed: {', '.join(changed_parts(old, claims_at(a.commit, paper)[cid], a.profile))})"
                line += f", {len(a.results)} published result version(s)"
                if a.measured_first:
                    line += f"; {len(a.measured_first)} measured before it (first: {a.measured_first[0]})"
                if a.same_check_first:
                    line += f", under the current check: {', '.join(a.same_check_first)}"
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
