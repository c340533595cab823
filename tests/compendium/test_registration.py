"""Registration a reader can check: each claim's ``check.registered`` names the commit that
registered the check as it stands, and a claim that says nothing else (no ``registered_after``)
was registered before its first result: git shows the commit is an ancestor of the revision
that produced every published result of the claim, the first one included (from the history of
``papers/<paper>/results/``). Checked with git on the repository's own history."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from compendium import claims, judge, paths

ROOT = paths.repo_root()


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


if git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
    pytest.skip("registration is checked against the git history; this copy has none", allow_module_level=True)


def _claims() -> list[claims.Claim]:
    return [c for p in claims.paper_ids() for c in claims.load_paper(p).claims.values() if c.check]


def _at(commit: str, paper: str) -> dict[str, dict]:
    shown = git("show", f"{commit}:papers/{paper}/claims.yaml")
    if shown.returncode:
        return {}
    return {c["id"]: c for c in yaml.safe_load(shown.stdout)["claims"] if isinstance(c, dict) and "id" in c}


def _result_revisions(claim: claims.Claim) -> list[tuple[str, str]]:
    """(where, git revision) of every version of the claim's published results: each committed
    version, and the file as it is now."""
    out = []
    for profile in ("cpu", "paper"):
        rel = f"papers/{claim.paper}/results/{claim.id}.{profile}.json"
        versions = [c for c in git("log", "--format=%H", "--", rel).stdout.split() if c]
        for commit in versions:
            text = git("show", f"{commit}:{rel}").stdout
            if text:
                out.append((f"{rel} at {commit[:7]}", (json.loads(text).get("provenance") or {}).get("git_revision")))
        path = ROOT / rel
        if path.exists():
            out.append((f"{rel} (working tree)", (json.loads(path.read_text()).get("provenance") or {}).get("git_revision")))
    return out


@pytest.mark.parametrize("claim", _claims(), ids=lambda c: c.key)
def test_registered_names_the_commit_that_registered_the_check(claim):
    commit = claim.check.registered
    assert commit, f"{claim.key}: check.registered must name the commit that registered the check"
    full = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").stdout.strip()
    assert full, f"{claim.key}: registered {commit!r} is not a commit of this repository"
    now = judge.check_sha256(claim)
    at = _at(full, claim.paper).get(claim.id)
    assert at is not None and judge.raw_check_sha256(at) == now, (
        f"{claim.key}: at {commit} the claim's check differs from the registered one (or is absent)")
    parents = git("rev-list", "--parents", "-n", "1", full).stdout.split()[1:]
    before = [judge.raw_check_sha256(p[claim.id]) for p in (_at(x, claim.paper) for x in parents) if claim.id in p]
    assert now not in before, f"{claim.key}: the check was already registered before {commit}; name the commit that registered it"


@pytest.mark.parametrize("claim", [c for c in _claims() if not c.check.registered_after], ids=lambda c: c.key)
def test_a_check_registered_before_measuring_precedes_every_result(claim):
    for where, revision in _result_revisions(claim):
        assert revision and revision != "unknown", f"{where}: records no git revision"
        base = revision.removesuffix("+dirty")
        is_ancestor = git("merge-base", "--is-ancestor", claim.check.registered, base).returncode == 0
        assert is_ancestor, (
            f"{claim.key} says its check was registered before measuring (no registered_after), but {where} was "
            f"measured at {revision}, which does not descend from the registering commit {claim.check.registered}")


def test_the_tables_say_when_a_check_came_after_a_first_measurement(demo_root):
    path = demo_root / "papers" / "demo" / "claims.yaml"
    text = path.read_text().replace('registered: "abc1234"', 'registered: "abc1234"\n      registered_after: a first measurement')
    path.write_text(text)
    table = claims.build_table("demo")
    row = next(line for line in table.splitlines() if line.startswith("| gain "))
    assert "(registered in abc1234 after a first measurement; see history)" in row
    assert "- **gain**: registered in abc1234 after a first measurement; see history." in table
    assert "  - 2026-11-30: check pre-registered" in table          # its history, under it
    flag = next(line for line in table.splitlines() if line.startswith("| flag "))
    assert "(registered before measuring)" in flag and "written before measuring" not in table
