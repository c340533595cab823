"""The book's page making, without a browser: claims tables made to fit, machine paths removed,
and which executed copy of a notebook a page shows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compendium import book

TABLE = """# Claims: a paper

Intro text.

| claim | statement | where | paper | ours | profile | status | notebook |
|---|---|---|---|---|---|---|---|
| alpha | Alpha holds \\| always. | §3 | 1 | 1.01 | cpu | holds at cpu | p/01_a |
| alpha | Alpha holds \\| always. | §3 | 1 | 0.5 | paper | does not hold at paper | p/01_a |
| beta | Beta. | §4 | — | — | — | not run | not yet covered |

After the table.
"""


def test_claims_page_gives_each_claim_a_block_with_shared_fields_and_a_row_per_profile():
    page = book.claims_page(TABLE, {"p/01_a"})
    assert "| claim |" not in page                      # the wide table is gone
    assert page.count("## alpha") == 1 and page.count("## beta") == 1
    alpha = page[page.index("## alpha"):page.index("## beta")]
    assert "Alpha holds \\| always." in alpha
    assert ":where: §3" in alpha and ":paper: 1" in alpha
    assert ":notebook: [`p/01_a`](../notebooks/p/01_a.ipynb)" in alpha
    assert "| ours | profile | status |" in alpha           # what differs between the two profiles
    assert "| 1.01 | cpu | holds at cpu |" in alpha and "| 0.5 | paper | does not hold at paper |" in alpha
    beta = page[page.index("## beta"):]
    assert ":status: not run" in beta and ":notebook: not yet covered" in beta and "|" not in beta.split("After")[0]
    assert page.startswith("# Claims: a paper\n\nIntro text.") and "After the table." in page


def test_each_claims_block_carries_its_registration_and_history():
    text = TABLE + ("\n## Registration and history\n\nIntro.\n\n"
                    "- **alpha**: registered in abc1234 after a first measurement; see history.\n"
                    "  - 2026-11-30: check registered; earlier verdict: holds by the notebook's own test.\n"
                    "  - 2026-12-01: threshold unchanged.\n"
                    "- **beta**: registered in abc1234 before measuring.\n")
    page = book.claims_page(text, set())
    assert "## Registration and history" not in page
    alpha = page[page.index("## alpha"):page.index("## beta")]
    assert ":registration: registered in abc1234 after a first measurement; see history" in alpha
    assert "- 2026-11-30: check registered; earlier verdict: holds by the notebook's own test." in alpha
    assert alpha.index(":registration:") < alpha.index("- 2026-12-01: threshold unchanged.")
    beta = page[page.index("## beta"):]
    assert ":registration: registered in abc1234 before measuring" in beta and "History" not in beta


def test_scrub_removes_the_repository_home_and_temp_paths(monkeypatch, tmp_path):
    root = str(book.paths.repo_root())
    text = f"{root}/lib/x.py:3: warning; {Path.home()}/.cache/y; cwd {root}"
    out = book.scrub(text)
    assert root not in out and str(Path.home()) + "/" not in out
    assert out.startswith("lib/x.py:3") and out.endswith("cwd .")


def _run(output: Path, name: str, time_utc: str, status: dict[str, str], profile: str = "cpu") -> Path:
    run = output / "runs" / name
    for nb in status:
        (run / "notebooks" / nb).parent.mkdir(parents=True, exist_ok=True)
        (run / "notebooks" / f"{nb}.ipynb").write_text("{}")
    (run / "params.json").write_text(json.dumps({"kind": "runner", "profile": profile, "seed": 0, "time_utc": time_utc}))
    (run / "status.json").write_text(json.dumps({"notebooks": {nb: {"status": s} for nb, s in status.items()}}))
    return run


@pytest.fixture
def output(tmp_path, monkeypatch):
    out = tmp_path / "build"
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(out))
    return out


def test_find_executed_prefers_the_newest_completed_run(output):
    _run(output, "20990101T000000Z-cpu-s0", "2099-01-01T00:00:00+00:00", {"00_tour": "completed", "x/01": "completed"})
    _run(output, "20990102T000000Z-cpu-s0", "2099-01-02T00:00:00+00:00", {"00_tour": "completed", "x/01": "failed"})
    (output / "runs" / "interactive-20990103T000000Z").mkdir(parents=True)
    assert book.find_executed("00_tour").run == "20990102T000000Z-cpu-s0"
    found = book.find_executed("x/01")                     # the newer run failed it: the older copy
    assert found.run == "20990101T000000Z-cpu-s0" and found.profile == "cpu" and found.path.is_file()
    assert book.find_executed("x/02") is None


def test_find_executed_prefers_the_published_run(output, monkeypatch, tmp_path):
    papers = tmp_path / "papers"
    (papers / "x" / "results").mkdir(parents=True)
    (papers / "x" / "claims.yaml").write_text("paper: {title: X}\nclaims: []\n")
    (papers / "x" / "results" / book.PUBLISHED).write_text(json.dumps({
        "last_publish": {"profile": "cpu"},
        "notebooks": {"cpu": {"x/01": {"status": "completed", "run": "20990101T000000Z-cpu-s0",
                                       "time_utc": "2099-01-01T00:00:00+00:00"}}}}))
    monkeypatch.setattr(book.paths, "papers_dir", lambda: papers)
    _run(output, "20990101T000000Z-cpu-s0", "2099-01-01T00:00:00+00:00", {"x/01": "completed"})
    _run(output, "20990105T000000Z-paper-s0", "2099-01-05T00:00:00+00:00", {"x/01": "completed"}, profile="paper")
    assert book.find_executed("x/01").run == "20990101T000000Z-cpu-s0"


def test_legacy_executed_copy_is_the_last_resort(output):
    legacy = output / "notebooks" / "00_tour.ipynb"
    legacy.parent.mkdir(parents=True)
    legacy.write_text("{}")
    found = book.find_executed("00_tour")
    assert found.path == legacy and found.run is None


def test_build_refuses_an_output_inside_its_staging_folder(tmp_path):
    with pytest.raises(ValueError, match="must not be"):
        book.build(tmp_path / "src" / "html", stage_dir=tmp_path / "src")


def test_claims_missing_from_an_older_claims_table_are_listed(monkeypatch, tmp_path):
    paper = tmp_path / "papers" / "p"
    paper.mkdir(parents=True)
    (paper / "claims.yaml").write_text("paper: {title: P}\nclaims:\n  - {id: alpha, statement: A.}\n"
                                       "  - {id: gamma, statement: Gamma is new.}\n")
    monkeypatch.setattr(book.paths, "papers_dir", lambda: tmp_path / "papers")
    page = book.claims_page(TABLE, set())
    extra = book._missing_claims(page, "p")
    assert "## alpha" not in extra and "## gamma" in extra and "Gamma is new." in extra
    assert "make claims" in extra


def test_a_named_run_comes_first_where_it_completed_the_notebook(output):
    _run(output, "20990101T000000Z-cpu-s0", "2099-01-01T00:00:00+00:00", {"x/01": "completed", "x/02": "completed"})
    _run(output, "20990102T000000Z-cpu-s0", "2099-01-02T00:00:00+00:00", {"x/01": "completed", "x/02": "failed"})
    assert book.find_executed("x/01", "20990101T000000Z-cpu-s0").run == "20990101T000000Z-cpu-s0"
    assert book.find_executed("x/01").run == "20990102T000000Z-cpu-s0"
    assert book.find_executed("x/02", "20990102T000000Z-cpu-s0").run == "20990101T000000Z-cpu-s0"  # failed there
    with pytest.raises(ValueError, match="no run folder"):
        book.stage(output / "stage", "20990109T000000Z-cpu-s0")


def test_the_claims_page_opens_with_the_verdict_board_of_its_paper():
    page = book.claims_page(TABLE, {"accpp/01_ioi"})
    real = [p for p in book.paper_ids() if p == "accpp"][0]
    out = book.with_board(page, real, {"accpp/01_ioi"})
    title_end = out.index("\n", out.index("# Claims: a paper"))
    board_at = out.index('<div class="verdict-board" data-paper="accpp">')
    assert title_end < board_at < out.index("Intro text.")
    block = out[board_at:out.index("</div>\n", board_at)]
    assert "\n\n" not in block                               # one raw HTML block for MyST
    assert 'href="../notebooks/accpp/01_ioi.html"' in block      # a notebook with a page is linked
    assert 'href="../notebooks/accpp/02_greater_than.html"' not in block and "accpp/02_greater_than" in block
    assert 'href="#candidates-exact"' in block


def test_readme_images_of_published_figures_point_to_the_book_s_copies():
    text = "See ![board](papers/accpp/figures/verdict_board.png) and `papers/accpp/CLAIMS.md`."
    out = book._readme_page(text, set(), ["accpp"])
    assert "![board](figures/accpp/verdict_board.png)" in out and "(claims/accpp.md)" in out
