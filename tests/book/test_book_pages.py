"""The book's page making, without a browser: claims tables made to fit, machine paths removed,
which executed copy of a notebook a page shows, and one ledger per profile (each profile's figures
under its own heading, another profile's published run on a page of its own)."""
from __future__ import annotations

import json
import shutil
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


# ----------------------------------------------------------------------------------------------
# one ledger per profile: the demo compendium of the ledger's tests, with figures of the default
# profile in papers/demo/figures/ and of the paper profile in papers/demo/figures/paper/

CPU_RUN, PAPER_RUN, GONE_RUN = "20990101T000000Z-cpu-s0", "20990102T000000Z-paper-s0", "20990103T000000Z-paper-s0"
DEMO_NOTEBOOKS = ["demo/01_good", "demo/02_bad", "demo/03_dies"]


@pytest.fixture
def demo_book(tmp_path, monkeypatch):
    """The demo compendium (tests/compendium/ledger_demo.py) with a README, a published cpu figure
    and circuit viewer page; its build/ its own."""
    from tests.compendium.ledger_demo import make_root

    root = make_root(tmp_path / "root", {n: "x = 1\n" for n in DEMO_NOTEBOOKS})
    (root / "README.md").write_text("# Demo\n\nThe notebook `demo/01_good` measures the gain.\n")
    figures = root / "papers" / "demo" / "figures"
    figures.mkdir()
    (figures / "01_curve.png").write_bytes(b"the cpu curve")
    (figures / "01_circuit_viewer.html").write_text(f"<html>{root}/x</html>")
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
    return root


def _paper_figures(root: Path) -> Path:
    folder = root / "papers" / "demo" / "figures" / "paper"
    folder.mkdir()
    (folder / "01_curve.png").write_bytes(b"the paper curve")       # the same name as the cpu figure
    (folder / "02_only_paper.png").write_bytes(b"a figure of the paper profile only")
    (folder / "01_circuit_viewer.html").write_text("<html>the paper circuit</html>")
    return folder


def _published(root: Path, notebooks: dict[str, dict[str, str]], paper_time: str = "2099-01-02T00:00:00+00:00"):
    """PUBLISHED.json of the demo paper: the last publish at each profile, and ``notebooks``
    ({profile: {notebook: run}}) completed."""
    last = {"cpu": {"run": CPU_RUN, "profile": "cpu", "git_revision": "a" * 40, "time_utc": "2099-01-01T00:00:00+00:00"},
            "paper": {"run": PAPER_RUN, "profile": "paper", "git_revision": "b" * 40, "time_utc": paper_time}}
    stamps = {"cpu": "2099-01-01T00:00:00+00:00", "paper": paper_time}
    (root / "papers" / "demo" / "results").mkdir(exist_ok=True)
    (root / "papers" / "demo" / "results" / book.PUBLISHED).write_text(json.dumps({
        "last_publish": last,
        "notebooks": {p: {n: {"status": "completed", "run": run, "time_utc": stamps[p]} for n, run in nbs.items()}
                      for p, nbs in notebooks.items()}}))


def _executed_run(root: Path, run: str, profile: str, time_utc: str, notebooks: list[str]) -> None:
    """A run folder whose copy of each of ``notebooks`` completed, printing the run's name."""
    import nbformat

    folder = root / "build" / "runs" / run
    for name in notebooks:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}\n\nWhat it checks."),
                                             nbformat.v4.new_code_cell("print(RUN)")])
        nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"executed in {run}\n")]
        (folder / "notebooks" / name).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / "notebooks" / f"{name}.ipynb")
    (folder / "params.json").write_text(json.dumps({"kind": "runner", "profile": profile, "seed": 0, "time_utc": time_utc}))
    (folder / "status.json").write_text(json.dumps({"notebooks": {n: {"status": "completed"} for n in notebooks}}))


def _sections(page: str) -> dict[str, str]:
    """The page's level-2 sections, {heading: text up to the next one}."""
    parts = page.split("\n## ")
    return {part.split("\n", 1)[0]: part for part in parts[1:]}


def _figure_paths(text: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("```{figure} ")]


def test_a_profile_s_figures_appear_only_under_its_heading(demo_book, tmp_path):
    from compendium import profiles

    paper_folder = _paper_figures(demo_book)
    (demo_book / "papers" / "demo" / "figures" / "stray").mkdir()      # no profile's: not shown, reported
    _published(demo_book, {"cpu": {}, "paper": {}})
    staged = book.stage(tmp_path / "stage")
    page = (tmp_path / "stage" / "figures" / "demo.md").read_text()
    sections = _sections(page)
    assert list(sections) == [f"Profile `cpu`: {profiles.describe('cpu')}", f"Profile `paper`: {profiles.describe('paper')}"]
    cpu, paper = sections.values()
    assert f"Last publish: run `{CPU_RUN}` (revision {'a' * 10}, 2099-01-01T00:00:00+00:00)." in cpu
    assert f"Last publish: run `{PAPER_RUN}` (revision {'b' * 10}, 2099-01-02T00:00:00+00:00)." in paper
    assert PAPER_RUN not in cpu and CPU_RUN not in paper
    assert _figure_paths(cpu) == ["demo/01_curve.png"]
    assert _figure_paths(paper) == ["demo/paper/01_curve.png", "demo/paper/02_only_paper.png"]
    assert _figure_paths(page) == _figure_paths(cpu) + _figure_paths(paper)          # none outside a section
    assert 'src="demo/01_circuit_viewer.html"' in cpu and "demo/paper/" not in cpu
    assert 'src="demo/paper/01_circuit_viewer.html"' in paper and "### Interactive circuit viewers (paper profile)" in paper
    stage_figures = tmp_path / "stage" / "figures" / "demo"
    assert (stage_figures / "01_curve.png").read_bytes() == b"the cpu curve"
    assert (stage_figures / "paper" / "01_curve.png").read_bytes() == b"the paper curve"
    assert (tmp_path / "stage" / "viewers" / "demo" / "paper" / "01_circuit_viewer.html").read_text() == \
        (paper_folder / "01_circuit_viewer.html").read_text()
    assert str(demo_book) not in (tmp_path / "stage" / "viewers" / "demo" / "01_circuit_viewer.html").read_text()
    assert staged.profile_figures == {"demo": {"paper": ["01_curve.png", "02_only_paper.png"]}}
    assert staged.profile_viewers == {"demo": {"paper": ["01_circuit_viewer.html"]}}
    assert staged.n_figures() == 3 and staged.n_viewers() == 2
    assert staged.not_shown == ["papers/demo/figures/stray"] and "stray" not in page


def test_a_profile_without_a_recorded_publish_says_so(demo_book, tmp_path):
    _paper_figures(demo_book)
    book.stage(tmp_path / "stage")
    paper = _sections((tmp_path / "stage" / "figures" / "demo.md").read_text())["Profile `paper`: the paper's scale (a GPU)"]
    assert "No publish at this profile is recorded in `papers/demo/results/PUBLISHED.json`." in paper
    assert _figure_paths(paper) == ["demo/paper/01_curve.png", "demo/paper/02_only_paper.png"]


def _digest(folder: Path) -> dict[str, str]:
    """{relative path: content} of the staged files, notebooks without their random cell ids."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix == ".ipynb":
            nb = json.loads(path.read_text())
            for cell in nb["cells"]:
                cell.pop("id", None)
            out[path.relative_to(folder).as_posix()] = json.dumps(nb, sort_keys=True)
        else:
            out[path.relative_to(folder).as_posix()] = path.read_bytes().decode("utf-8", "replace")
    return out


FIGURES_PAGE_OF_ONE_PROFILE = """# Figures: demo

*A demo paper*

The figures of the last published run (`papers/demo/figures/`). Each notebook page shows the same figures where they were made.

## 01_curve

```{figure} demo/01_curve.png
:alt: 01_curve
:width: 100%

`01_curve.png`, from [`demo/01_good`](../notebooks/demo/01_good.ipynb)
```

## Interactive circuit viewers

Each traced circuit as the notebook saved it: hover (click to pin) a node for its firing, an edge for its signal. The pages need no network; each also opens on its own.

### 01_circuit_viewer

<iframe class="accpp-viewer-page" src="demo/01_circuit_viewer.html" title="01_circuit_viewer" sandbox="allow-scripts" style="width:100%;height:760px;border:1px solid #ccc" loading="eager"></iframe>

<p><a class="accpp-viewer-link" href="demo/01_circuit_viewer.html">Open 01_circuit_viewer.html on its own</a></p>

From [`demo/01_good`](../notebooks/demo/01_good.ipynb).
"""


def test_a_tree_without_another_profile_s_figures_stages_as_before(demo_book, tmp_path):
    """Without figures/paper/ the figures page is the one page of before (no profile headings); adding
    the folder changes that page alone and adds the folder's copies."""
    _executed_run(demo_book, CPU_RUN, "cpu", "2099-01-01T00:00:00+00:00", ["demo/01_good"])
    before = book.stage(tmp_path / "before")
    assert (tmp_path / "before" / "figures" / "demo.md").read_text() == FIGURES_PAGE_OF_ONE_PROFILE
    assert before.profile_figures == {} and before.profile_viewers == {} and before.not_shown == []
    _paper_figures(demo_book)
    after = book.stage(tmp_path / "after")
    old, new = _digest(tmp_path / "before"), _digest(tmp_path / "after")
    assert {k for k in old if old[k] != new.get(k)} == {"figures/demo.md"}
    assert sorted(set(new) - set(old)) == ["figures/demo/paper/01_curve.png", "figures/demo/paper/02_only_paper.png",
                                           "viewers/demo/paper/01_circuit_viewer.html"]
    assert after.figures == before.figures and after.viewers == before.viewers


def test_the_default_profile_s_publish_comes_first_however_recent_another_s(output, monkeypatch, tmp_path):
    papers = tmp_path / "papers"
    (papers / "x" / "results").mkdir(parents=True)
    (papers / "x" / "claims.yaml").write_text("paper: {title: X}\nclaims: []\n")
    monkeypatch.setattr(book.paths, "papers_dir", lambda: papers)
    (papers / "x" / "results" / book.PUBLISHED).write_text(json.dumps({
        "last_publish": {"cpu": {"run": CPU_RUN, "time_utc": "2099-01-01T00:00:00+00:00"},
                         "paper": {"run": PAPER_RUN, "time_utc": "2099-01-05T00:00:00+00:00"}},
        "notebooks": {"paper": {"x/01": {"status": "completed", "run": PAPER_RUN, "time_utc": "2099-01-05T00:00:00+00:00"}},
                      "cpu": {"x/01": {"status": "completed", "run": CPU_RUN, "time_utc": "2099-01-01T00:00:00+00:00"}}}}))
    _run(output, CPU_RUN, "2099-01-01T00:00:00+00:00", {"x/01": "completed"})
    _run(output, PAPER_RUN, "2099-01-05T00:00:00+00:00", {"x/01": "completed"}, profile="paper")
    assert book.find_executed("x/01").run == CPU_RUN
    assert book.published_elsewhere("x/01") == {"paper": PAPER_RUN}
    shutil.rmtree(output / "runs" / CPU_RUN)                   # the cpu copy gone: the paper profile's
    assert book.find_executed("x/01").run == PAPER_RUN


def _note(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    return "".join(next(c["source"] for c in nb["cells"] if "".join(c["source"]).startswith(":::")))


def test_the_paper_profile_s_published_run_gets_a_page_of_its_own(demo_book, tmp_path):
    """The notebook's page shows the cpu publish (though the paper one is newer); the paper publish's
    copy has a page of its own, titled with the profile, where its run folder is here; where it is
    not, the notebook's page and the home page say so."""
    _published(demo_book, {"cpu": {"demo/01_good": CPU_RUN}, "paper": {"demo/01_good": PAPER_RUN, "demo/02_bad": GONE_RUN}})
    _executed_run(demo_book, CPU_RUN, "cpu", "2099-01-01T00:00:00+00:00", ["demo/01_good"])
    _executed_run(demo_book, PAPER_RUN, "paper", "2099-01-02T00:00:00+00:00", ["demo/01_good"])
    staged = book.stage(tmp_path / "stage")
    notebooks = tmp_path / "stage" / "notebooks" / "demo"
    assert staged.executed["demo/01_good"].run == CPU_RUN
    assert f"executed in {CPU_RUN}" in (notebooks / "01_good.ipynb").read_text()
    note = _note(notebooks / "01_good.ipynb")
    assert f"run `{CPU_RUN}`" in note and "[demo/01_good (paper profile)](01_good-paper-profile.ipynb)" in note

    copy = json.loads((notebooks / "01_good-paper-profile.ipynb").read_text())
    assert "".join(copy["cells"][0]["source"]).startswith("# demo/01_good (paper profile)\n")
    assert f"run `{PAPER_RUN}` (profile `paper`, seed 0)" in _note(notebooks / "01_good-paper-profile.ipynb")
    assert f"executed in {PAPER_RUN}" in json.dumps(copy) and CPU_RUN not in json.dumps(copy)

    assert not (notebooks / "02_bad-paper-profile.ipynb").exists()
    assert f"The `paper` profile's published run `{GONE_RUN}` is not in `build/runs/` here" in _note(notebooks / "02_bad.ipynb")
    assert [(c.profile, c.run, bool(c.executed)) for c in staged.profile_copies["demo/02_bad"]] == [("paper", GONE_RUN, False)]
    assert "demo/03_dies" not in staged.profile_copies
    index = (tmp_path / "stage" / "index.md").read_text()
    assert "notebooks/demo/01_good\nnotebooks/demo/01_good-paper-profile\nnotebooks/demo/02_bad\n" in index
    assert f"`demo/01_good (paper profile)` (run `{PAPER_RUN}`)" in index
    assert f"`demo/02_bad (paper profile)` (run `{GONE_RUN}`)" in index and "02_bad-paper-profile" not in index


def test_no_second_page_where_the_notebook_s_page_shows_that_run(demo_book, tmp_path):
    _published(demo_book, {"paper": {"demo/01_good": PAPER_RUN}})
    _executed_run(demo_book, PAPER_RUN, "paper", "2099-01-02T00:00:00+00:00", ["demo/01_good"])
    staged = book.stage(tmp_path / "stage")
    assert staged.executed["demo/01_good"].run == PAPER_RUN and staged.profile_copies == {}
    assert not (tmp_path / "stage" / "notebooks" / "demo" / "01_good-paper-profile.ipynb").exists()
    assert "profile `paper`" in _note(tmp_path / "stage" / "notebooks" / "demo" / "01_good.ipynb")
