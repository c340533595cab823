"""The revision flag: published outputs do not make the code dirty; code changes do, and carry a
fingerprint of the diff."""
from __future__ import annotations

import subprocess

import pytest

from compendium import provenance


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "papers" / "demo" / "results").mkdir(parents=True)
    (root / "papers" / "demo" / "figures").mkdir()
    (root / "lib").mkdir()
    (root / "lib" / "code.py").write_text("x = 1\n")
    (root / "papers" / "demo" / "claims.yaml").write_text("claims: []\n")
    (root / "papers" / "demo" / "CLAIMS.md").write_text("# table\n")
    (root / "papers" / "demo" / "results" / "a.cpu.json").write_text("{}\n")
    (root / "papers" / "demo" / "figures" / "f.png").write_bytes(b"png")
    (root / ".gitignore").write_text("build/\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    return root


def test_published_outputs_do_not_make_the_code_dirty(repo):
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert provenance.code_state(repo) == {"git_revision": sha, "diff_sha256": None}
    (repo / "papers/demo/results/a.cpu.json").write_text('{"value": 2}\n')
    (repo / "papers/demo/results/new.cpu.json").write_text("{}\n")
    (repo / "papers/demo/figures/f.png").write_bytes(b"other")
    (repo / "papers/demo/CLAIMS.md").write_text("# new table\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("ignored\n")
    assert provenance.code_state(repo) == {"git_revision": sha, "diff_sha256": None}


def test_code_changes_are_dirty_with_a_fingerprint_of_the_diff(repo):
    (repo / "lib/code.py").write_text("x = 2\n")
    first = provenance.code_state(repo)
    assert first["git_revision"].endswith("+dirty") and len(first["diff_sha256"]) == 64
    assert provenance.code_state(repo) == first  # the same change, the same fingerprint
    (repo / "papers/demo/CLAIMS.md").write_text("# new table\n")
    assert provenance.code_state(repo) == first  # outputs do not enter the fingerprint
    (repo / "lib/code.py").write_text("x = 3\n")
    assert provenance.code_state(repo)["diff_sha256"] != first["diff_sha256"]
    (repo / "papers/demo/claims.yaml").write_text("claims: [changed]\n")  # claims.yaml is not an output
    assert provenance.code_state(repo)["git_revision"].endswith("+dirty")


def test_an_untracked_source_file_is_dirty(repo):
    (repo / "lib" / "new.py").write_text("y = 1\n")
    state = provenance.code_state(repo)
    assert state["git_revision"].endswith("+dirty") and state["diff_sha256"]
    (repo / "lib" / "new.py").write_text("y = 2\n")
    assert provenance.code_state(repo)["diff_sha256"] != state["diff_sha256"]


def test_short_revision_keeps_the_dirty_flag():
    assert provenance.short_revision("0123456789abcdef+dirty") == "0123456789+dirty"
    assert provenance.short_revision("0123456789abcdef") == "0123456789"
    assert provenance.short_revision(None) == "—"


def test_changed_tracked_files_sees_a_second_change_to_a_modified_file(repo):
    assert provenance.changed_tracked_files(repo) == {}
    (repo / "lib/code.py").write_text("x = 2\n")
    first = provenance.changed_tracked_files(repo)
    assert list(first) == ["lib/code.py"]
    (repo / "lib/code.py").write_text("x = 3\n")
    assert provenance.changed_tracked_files(repo) != first
