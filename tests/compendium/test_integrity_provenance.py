"""Provenance checked (compendium.integrity): a result's git revision must name a commit of the
repository's history (or its row says it cannot be verified, as in a shallow clone), "+dirty" needs
its diff_sha256, a point value must lie inside its own recorded interval, and a result's profile
must match the protocol it records, so that a cpu result relabelled "paper" cannot pass as one.
Each tamper below is made consistent with PUBLISHED.json (its hash listed again), so that what
catches it is the provenance check, not the file's hash (test_integrity_hashes.py)."""
from __future__ import annotations

import json
import subprocess

import pytest

from compendium import board, claims, integrity, judge, publish, tables

from ledger_demo import tree_digest, write_published
from test_publish import GOOD, complete_run

RANGED = """\
  - id: ranged
    statement: The effect is positive.
    where: "§5"
    paper_value: 0.06
    unit: ""
    source: paper
    notebook: null
    check: {quantity: effect, op: ">", threshold: 0, interval: [effect_lo, effect_hi]}
"""

SIZED = """\
  - id: sized
    statement: The ratio is at least 2.
    where: "§6"
    paper_value: null
    unit: x
    source: paper
    notebook: null
    check: {quantity: ratio, op: ">=", threshold: 2, assert_at: [cpu, paper]}
    protocol:
      all: {aggregation: geometric mean}
      cpu: {n_prompts: 8, model: small-model}
      paper: {n_prompts: 64, model: large-model}
"""


def _git(root, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=demo", "-c", "user.email=demo@example.org", "-c", "commit.gpgsign=false",
                           *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def _add_claims(root, text):
    path = root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + text)


def _place(root, run_dir, name, **changes):
    """Copy the run's result ``name`` (demo) into papers/demo/results with ``changes`` (a dotted key
    sets a field of a mapping), and list the published files' hashes as a publish would: the
    tamper made consistent with PUBLISHED.json. Returns the placed entry."""
    entry = json.loads((run_dir / "results" / "demo" / name).read_text())
    for key, value in changes.items():
        outer, _, inner = key.partition(".")
        if inner:
            entry[outer][inner] = value
        else:
            entry[outer] = value
    results = root / "papers" / "demo" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{entry['claim'].split('/')[1]}.{entry['profile']}.json").write_text(json.dumps(entry))
    write_published(root)
    return entry


def _row(claim_id, profile="cpu"):
    return next(line for line in tables.build_table("demo").splitlines()
                if line.startswith(f"| {claim_id} ") and f"| {profile} |" in line)


# -- git revision ----------------------------------------------------------------------------------
@pytest.fixture
def gain(run_dir, demo_root):
    """A genuine cpu result of demo/gain (holds), from the demo repository's HEAD."""
    claims.conclude(claims.Measurement("demo/gain", dict(GOOD)), profile="cpu", seed=0)
    entry = _place(demo_root, run_dir, "gain.cpu.json")
    assert entry["provenance"]["git_revision"] == _git(demo_root, "rev-parse", "HEAD")
    return entry


def test_a_genuine_revision_gives_no_mark(gain):
    row = _row("gain")
    assert "**holds**" in row and "⚠" not in row


@pytest.mark.parametrize("revision, mark", [
    ("0" * 40, "⚠ git revision 0000000000 is no commit of this repository"),
    (None, "⚠ no git revision recorded (None)"),
    ("", "⚠ no git revision recorded ('')"),
    ("unknown", "⚠ no git revision recorded ('unknown')"),
    ("not-a-commit", "⚠ git revision 'not-a-commit' is not a commit hash"),
])
def test_a_revision_that_names_no_commit_is_marked(gain, run_dir, demo_root, revision, mark):
    _place(demo_root, run_dir, "gain.cpu.json", **{"provenance.git_revision": revision})
    row = _row("gain")
    assert mark in row and "**holds**" in row         # the value is shown, and the reader told
    cell = next(r.cells["cpu"] for r in board.build("demo").rows if r.claim == "gain")
    assert any(mark in m for m in cell.marks)


def test_a_commit_outside_the_history_of_head_is_marked(gain, run_dir, demo_root):
    stray = _git(demo_root, "commit-tree", "HEAD^{tree}", "-m", "a commit of no branch")
    _place(demo_root, run_dir, "gain.cpu.json", **{"provenance.git_revision": stray})
    assert f"⚠ git revision {stray[:10]} is a commit outside the history of HEAD" in _row("gain")


def test_dirty_needs_its_diff_fingerprint(gain, run_dir, demo_root):
    head = gain["provenance"]["git_revision"]
    _place(demo_root, run_dir, "gain.cpu.json", **{"provenance.git_revision": head + "+dirty", "provenance.diff_sha256": None})
    assert f"⚠ git revision {head[:10]}+dirty without its diff_sha256" in _row("gain")
    _place(demo_root, run_dir, "gain.cpu.json", **{"provenance.git_revision": head + "+dirty", "provenance.diff_sha256": "ab" * 32})
    assert "⚠" not in _row("gain")


def test_a_shallow_clone_says_the_revision_cannot_be_verified(gain, run_dir, demo_root, tmp_path, monkeypatch):
    first = gain["provenance"]["git_revision"]
    (demo_root / "later.txt").write_text("a later commit\n")
    _git(demo_root, "add", "later.txt")
    _git(demo_root, "commit", "-q", "-m", "later")
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{demo_root}", str(clone)], check=True, capture_output=True)
    (clone / "papers" / "demo" / "results").mkdir(parents=True)
    (clone / "papers" / "demo" / "results" / "gain.cpu.json").write_bytes(
        (demo_root / "papers" / "demo" / "results" / "gain.cpu.json").read_bytes())
    write_published(clone)
    monkeypatch.setenv("COMPENDIUM_ROOT", str(clone))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(clone / "build"))
    assert integrity.commit_state(first) == (None, "cannot be verified: the repository is a shallow clone")
    assert f"⚠ git revision {first[:10]} cannot be verified: the repository is a shallow clone" in _row("gain")


def test_publish_refuses_a_run_result_whose_revision_names_no_commit(run_dir, demo_root):
    complete_run(run_dir)
    path = run_dir / "results" / "demo" / "gain.cpu.json"
    entry = json.loads(path.read_text())
    entry["provenance"]["git_revision"] = "f" * 40
    path.write_text(json.dumps(entry))
    status = json.loads((run_dir / "status.json").read_text())     # its hash made consistent too
    status["notebooks"]["demo/01_good"]["sha256"]["results/demo/gain.cpu.json"] = integrity.sha256_file(path)
    (run_dir / "status.json").write_text(json.dumps(status))
    with pytest.raises(publish.PublishError, match=r"gain.cpu.json is not published .*git revision ffffffffff is no commit"):
        publish.publish(run_dir)
    assert not (demo_root / "papers" / "demo" / "results").exists()


# -- a point inside its own interval ---------------------------------------------------------------
def test_a_point_outside_its_own_interval_is_refused_naming_the_claim_and_values(run_dir, demo_root):
    _add_claims(demo_root, RANGED)
    claims.conclude(claims.Measurement("demo/ranged", {"effect": 0.06, "effect_lo": 0.043, "effect_hi": 0.075}),
                    profile="cpu", seed=0)
    _place(demo_root, run_dir, "ranged.cpu.json")
    assert "**holds**" in _row("ranged")
    _place(demo_root, run_dir, "ranged.cpu.json", **{"values.effect": -0.5})
    before = tree_digest(demo_root / "papers")
    with pytest.raises(tables.ResultsFileError,
                       match=r"papers/demo/results/ranged.cpu.json: demo/ranged at cpu: effect = -0.5 lies outside its own "
                             r"recorded interval \[0.043, 0.075\]"):
        publish.write_claims()
    assert tree_digest(demo_root / "papers") == before
    # the ends themselves are inside
    _place(demo_root, run_dir, "ranged.cpu.json", **{"values.effect": 0.075})
    assert "**holds**" in _row("ranged")


def test_publish_refuses_a_run_with_a_point_outside_its_interval(run_dir, demo_root):
    _add_claims(demo_root, RANGED)
    _git(demo_root, "commit", "-q", "-am", "the ranged claim")

    def good():
        claims.conclude(claims.Measurement("demo/gain", dict(GOOD)), profile="cpu", seed=0)
        claims.conclude(claims.Measurement("demo/ranged", {"effect": 0.2, "effect_lo": 0.043, "effect_hi": 0.075}),
                        profile="cpu", seed=0)

    complete_run(run_dir, good=good)
    with pytest.raises(tables.ResultsFileError, match=r"ranged.cpu.json: demo/ranged at cpu: effect = 0.2 lies outside"):
        publish.publish(run_dir)
    assert not (demo_root / "papers" / "demo" / "results").exists()


# -- the profile matches the protocol it records ---------------------------------------------------
@pytest.fixture
def sized(run_dir, demo_root):
    """A genuine cpu result of demo/sized, measured under the cpu protocol (8 prompts, the small model)."""
    _add_claims(demo_root, SIZED)
    claims.conclude(claims.Measurement("demo/sized", {"ratio": 3.0}, config={"n_prompts": 8, "model": "small-model"}),
                    profile="cpu", seed=0)
    entry = _place(demo_root, run_dir, "sized.cpu.json")
    assert "**holds**" in _row("sized")
    return entry


def test_a_cpu_result_relabelled_paper_is_refused(sized, run_dir, demo_root):
    claim = claims.get_claim("demo/sized")
    # file name, profile, protocol and check hashes made consistent with the paper profile
    paper = {"profile": "paper", "protocol_sha256": judge.protocol_sha256(claim, "paper"),
             "check_sha256": judge.check_sha256(claim, "paper")}
    _place(demo_root, run_dir, "sized.cpu.json", **paper)
    (demo_root / "papers" / "demo" / "results" / "sized.cpu.json").unlink()
    write_published(demo_root)
    with pytest.raises(tables.ResultsFileError) as err:
        tables.build_table("demo")
    message = str(err.value)
    assert "papers/demo/results/sized.paper.json: demo/sized at paper: its recorded protocol is not the paper protocol's" in message
    assert "n_prompts = 8, registered 64" in message and "model = 'small-model', registered 'large-model'" in message
    # the recorded protocol replaced by the paper's too: the config still says what was measured
    _place(demo_root, run_dir, "sized.cpu.json", **paper, protocol=claim.protocol_for("paper"))
    write_published(demo_root)
    with pytest.raises(tables.ResultsFileError,
                       match=r"demo/sized at paper: its recorded config is not the paper protocol's \(n_prompts = 8, "
                             r"registered 64, model = 'small-model', registered 'large-model'\)"):
        tables.build_table("demo")
    # without those checks the relabelled result passes as a paper one
    entry = json.loads((demo_root / "papers" / "demo" / "results" / "sized.paper.json").read_text())
    assert judge.derive(claim, entry).status == claims.HOLDS


def test_a_genuine_paper_result_of_the_same_claim_is_judged(sized, run_dir, demo_root):
    claims.conclude(claims.Measurement("demo/sized", {"ratio": 2.5},
                                       config={"n_prompts": 64, "model": "models/large-model: 12 layers"}),
                    profile="paper", seed=0)
    _place(demo_root, run_dir, "sized.paper.json")
    assert "**holds**" in _row("sized", "paper") and "⚠" not in _row("sized", "paper")


def test_a_result_recorded_under_another_protocol_is_left_to_the_judge(sized, run_dir, demo_root):
    """A result whose protocol hash is not its profile's current one is one of an earlier protocol:
    not refused here (compendium.judge shows it not judged, or refuses it without a dated history line)."""
    entry = json.loads((demo_root / "papers" / "demo" / "results" / "sized.cpu.json").read_text())
    claim = claims.get_claim("demo/sized")
    assert integrity.contradictions(claim, {**entry, "protocol_sha256": "0" * 64}, []) == []
    assert integrity.contradictions(claim, entry, []) == []
