"""Hashes from run to table (compendium.integrity): the runner records the sha256 of every file a
notebook writes; publish refuses a run whose files changed since, naming each; PUBLISHED.json lists
every published file with its sha256; every table build checks papers/ against it, marking a
changed, unlisted or deleted result in its row and on the board; a missing PUBLISHED.json is an
error naming it. Provenance checks (revisions, intervals, profiles): test_integrity_provenance.py."""
from __future__ import annotations

import hashlib
import json

import pytest

from compendium import board, claims, publish, runs, tables

from ledger_demo import tree_digest
from test_publish import GOOD, _as_notebook, _figure, complete_run

NOTEBOOKS = ["demo/01_good", "demo/02_bad", "demo/03_dies"]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(root) -> dict[tuple[str, str], str]:
    """{(claim, profile): row} of the demo paper's CLAIMS.md."""
    out = {}
    for line in (root / "papers" / "demo" / "CLAIMS.md").read_text().splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) > 5 and cells[0][2:] in ("gain", "loss", "plain", "flag"):
            out[(cells[0][2:], cells[5])] = line
    return out


def _cells(paper="demo") -> dict[tuple[str, str], board.Cell]:
    return {(r.claim, prof): c for r in board.build(paper).rows for prof, c in r.cells.items()}


def _edit(path, **values):
    entry = json.loads(path.read_text())
    entry["values"].update(values)
    path.write_text(json.dumps(entry))


def complete_run_at(run, profile):
    """A complete main run of the demo compendium at ``profile`` (every notebook completed)."""
    def good():
        claims.conclude(claims.Measurement("demo/gain", dict(GOOD)), profile=profile, seed=0)
        _figure("demo/good")

    _as_notebook(run, "demo/01_good", runs.COMPLETED, good)
    _as_notebook(run, "demo/02_bad", runs.COMPLETED,
                 lambda: claims.conclude(claims.Measurement("demo/loss", {"loss": 2.5}), profile=profile, seed=0))
    _as_notebook(run, "demo/03_dies", runs.COMPLETED,
                 lambda: claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile=profile, seed=0))


@pytest.fixture
def published(run_dir, demo_root):
    """The demo compendium with a complete cpu run published."""
    complete_run(run_dir)
    publish.publish(run_dir)
    return demo_root / "papers" / "demo"


# -- run folder -> publish -------------------------------------------------------------------------
def test_status_records_the_sha256_of_every_file_a_notebook_wrote(run_dir):
    complete_run(run_dir)
    status = runs.read_status(run_dir)
    good = status["demo/01_good"]
    assert {"results/demo/gain.cpu.json", "figures/demo/good.png", "figures/demo/gain_curve.csv"} <= set(good["files"])
    for entry in status.values():
        assert entry["files"] and set(entry["sha256"]) == set(entry["files"])
        assert all(entry["sha256"][rel] == _sha(run_dir / rel) for rel in entry["files"])


def test_publish_refuses_a_run_whose_files_changed_after_it_ran_naming_each(run_dir, demo_root):
    complete_run(run_dir)
    result, figure = run_dir / "results" / "demo" / "gain.cpu.json", run_dir / "figures" / "demo" / "good.png"
    original = result.read_text()
    _edit(result, gain=70.0)                              # a value edited by hand after the run
    figure.write_bytes(figure.read_bytes() + b"\0")       # and a figure
    with pytest.raises(publish.PublishError) as err:
        publish.publish(run_dir)
    message = str(err.value)
    assert "2 of its files do not match the sha256 recorded when their notebook ended" in message
    assert f"build/runs/{run_dir.name}/results/demo/gain.cpu.json: its content differs" in message
    assert f"build/runs/{run_dir.name}/figures/demo/good.png: its content differs" in message
    assert not (demo_root / "papers" / "demo" / "results").exists()      # nothing published
    result.write_text(original)                           # the run's own files: published (the figure too)
    with pytest.raises(publish.PublishError, match=r"(?s)1 of its files .*figures/demo/good.png"):
        publish.publish(run_dir)


def test_a_run_recorded_without_hashes_is_not_published(run_dir, demo_root):
    complete_run(run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    for entry in status["notebooks"].values():
        del entry["sha256"]                               # as status.json was written before hashes were kept
    (run_dir / "status.json").write_text(json.dumps(status))
    with pytest.raises(publish.PublishError, match=r"results/demo/gain.cpu.json: status.json records no sha256"):
        publish.publish(run_dir)
    assert not (demo_root / "papers" / "demo" / "results").exists()


def test_published_json_lists_every_published_file_with_its_sha256(published, demo_root, monkeypatch):
    info = json.loads((published / "results" / "PUBLISHED.json").read_text())
    on_disk = {p.relative_to(published).as_posix(): _sha(p) for sub in ("results", "figures")
               for p in (published / sub).rglob("*") if p.is_file()}
    del on_disk["results/PUBLISHED.json"], on_disk["figures/verdict_board.png"]   # rewritten by every table build
    assert info["sha256"] == on_disk
    assert {"results/gain.cpu.json", "figures/good.png", "figures/gain_curve.csv"} <= set(on_disk)
    assert not any("⚠" in row for row in _rows(demo_root).values())
    # a second publish at another profile keeps the first one's entries and adds its own files
    second = runs.create("paper", 0, notebooks=NOTEBOOKS)
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(second))
    complete_run_at(second, "paper")
    publish.publish(second)
    listing = json.loads((published / "results" / "PUBLISHED.json").read_text())["sha256"]
    assert {k: v for k, v in listing.items() if k in info["sha256"]} == info["sha256"]
    assert listing["results/gain.paper.json"] == _sha(published / "results" / "gain.paper.json")
    assert listing["figures/paper/good.png"] == _sha(published / "figures" / "paper" / "good.png")
    assert not any("⚠" in row for row in _rows(demo_root).values())


# -- papers/ -> the tables -------------------------------------------------------------------------
def test_a_published_result_edited_by_hand_is_marked_in_its_row_and_on_the_board(published, demo_root):
    _edit(published / "results" / "gain.cpu.json", gain=1.0)
    publish.write_claims()                                # make claims
    row = _rows(demo_root)[("gain", "cpu")]
    assert "⚠ changed since published: papers/demo/results/gain.cpu.json does not match its sha256" in row
    assert "**does not hold**" in row and "| 1 % (no interval) |" in row   # the value shown, judged, and marked
    assert not any("⚠" in r for key, r in _rows(demo_root).items() if key != ("gain", "cpu"))
    cell = _cells()[("gain", "cpu")]
    assert any("changed since published" in m for m in cell.marks) and "changed since published" in cell.hover
    assert "\u26a0" in board.to_html(board.build("demo"))


def test_a_result_placed_by_hand_is_marked_as_not_published(published, demo_root):
    entry = json.loads((published / "results" / "gain.cpu.json").read_text())
    (published / "results" / "gain.paper.json").write_text(json.dumps({**entry, "profile": "paper"}))
    row = next(line for line in tables.build_table("demo").splitlines() if line.startswith("| gain ") and "| paper |" in line)
    assert "⚠ not published: papers/demo/results/gain.paper.json is not listed in PUBLISHED.json" in row
    assert any("not published" in m for m in _cells()[("gain", "paper")].marks)


@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_a_deleted_published_result_keeps_its_row_marked_missing(run_dir, demo_root, monkeypatch, profile):
    run = run_dir if profile == "cpu" else runs.create(profile, 0, notebooks=NOTEBOOKS)
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(run))
    complete_run_at(run, profile)
    publish.publish(run)
    (demo_root / "papers" / "demo" / "results" / f"gain.{profile}.json").unlink()
    publish.write_claims()
    row = _rows(demo_root)[("gain", profile)]           # the row is there, at its profile
    assert "**missing**" in row and "not run" not in row
    assert f"⚠ missing: papers/demo/results/gain.{profile}.json is listed in PUBLISHED.json" in row
    cell = _cells()[("gain", profile)]
    assert cell.status != board.NOT_RUN and any("missing" in m for m in cell.marks)


def test_a_deleted_published_json_is_an_error_naming_it(published, demo_root):
    (published / "results" / "PUBLISHED.json").unlink()
    before = tree_digest(published)
    for build in (lambda: tables.build_table("demo"), publish.write_claims, lambda: board.build("demo")):
        with pytest.raises(tables.ResultsFileError, match=r"papers/demo/results/PUBLISHED.json is missing"):
            build()
    assert tree_digest(published) == before               # no table rewritten without its marks


def test_the_cli_names_a_missing_published_json(published, capsys):
    from compendium import cli

    (published / "results" / "PUBLISHED.json").unlink()
    assert cli.main(["claims"]) != 0
    assert "papers/demo/results/PUBLISHED.json is missing" in capsys.readouterr().err


def test_a_ledger_published_before_hashes_reads_as_not_verifiable_until_republished(published, demo_root, monkeypatch):
    path = published / "results" / "PUBLISHED.json"
    info = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in info.items() if k != "sha256"}))   # today's ledger
    publish.write_claims()
    rows = _rows(demo_root)
    marked = [key for key, row in rows.items() if "⚠ not verifiable: published before hashes were recorded" in row]
    assert sorted(marked) == [("gain", "cpu"), ("loss", "cpu"), ("plain", "cpu")]  # every result; flag: not run
    # a result of another profile that predates the hashes stays not verifiable after a cpu publish
    entry = json.loads((published / "results" / "gain.cpu.json").read_text())
    (published / "results" / "gain.paper.json").write_text(json.dumps({**entry, "profile": "paper"}))
    path.write_text(json.dumps({k: v for k, v in info.items() if k != "sha256"}))
    second = runs.create("cpu", 0, notebooks=NOTEBOOKS)
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(second))
    complete_run(second)
    publish.publish(second)
    listing = json.loads(path.read_text())["sha256"]
    assert listing["results/gain.paper.json"] is None and listing["results/gain.cpu.json"] == _sha(published / "results" / "gain.cpu.json")
    rows = _rows(demo_root)
    assert "⚠ not verifiable" in rows[("gain", "paper")]
    assert not any("⚠" in rows[(c, "cpu")] for c in ("gain", "loss", "plain"))


def test_a_published_figure_edited_or_deleted_is_named_in_the_table(published):
    (published / "figures" / "good.png").write_bytes(b"not the figure")
    (published / "figures" / "gain_curve.csv").unlink()
    (published / "figures" / "extra.png").write_bytes(b"never published")
    table = tables.build_table("demo")
    line = next(line for line in table.splitlines() if line.startswith("⚠ Figure files"))
    assert "`figures/good.png`: changed since published" in line
    assert "`figures/gain_curve.csv`: listed in PUBLISHED.json but missing" in line
    assert "`figures/extra.png`: not listed in PUBLISHED.json" in line
