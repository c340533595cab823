"""The offline book (``make book``), built from a small copy of the compendium and opened in Chromium.

The copy holds the real README, start page, claims and figures, five notebooks, and a run folder in which
one notebook completed (with a figure, maths, a widget, a circuit viewer shown inline and a machine
path among its outputs) and one failed; a circuit viewer page is published beside the ACC++ figures.
ACC++ also has a paper profile's ledger: a figure and a viewer page in papers/accpp/figures/paper/, and a
publish at that profile of the tour (its run folder here) and of accpp/01_ioi (its run folder missing).
Every page must load from ``file://`` with no request leaving the machine and no console error;
every image must load; maths must be typeset; every claim id must be on its paper's claims page;
every circuit viewer (inline in a notebook page or framed on a figures page) must load, with no
console error and no external request, and draw every node of its circuit; no page may contain a
machine path; every display equation must fit the text column (no horizontal scrollbar); no table
cell may split a word across lines; each claims page (and the tour) shows the verdict board of its
paper, every claim a row with its short statement (the compendium's own claims marked), every cell
with a result showing its value, units and model, in one screen, its links leading to existing pages
and sections; each claims page opens with the summary table (a row per claim, inside the text
column). The copy's CLAIMS.md and boards are rebuilt by the code under test. The same checks run on
the main build when there is one.
"""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from compendium.paths import repo_root
from page_checks import check_boards, check_summary, check_words

pytestmark = pytest.mark.browser

ROOT = repo_root()
PAPERS = sorted(p.parent.name for p in (ROOT / "papers").glob("*/claims.yaml"))
# the two derivations hold the book's display equations (shown from their source)
NOTEBOOKS = ["00_tour", "protot/06_women_ablation", "accpp/01_ioi", "accpp/00_method", "protot/01_mixer_derivation"]
RUN = "20990101T000000Z-cpu-s0"
PAPER_RUN = "20990102T000000Z-paper-s0"      # publishes the tour at the paper profile
GONE_RUN = "20990103T000000Z-paper-s0"       # publishes accpp/01_ioi at the paper profile; its folder is not here


def _png(size: tuple[float, float] = (2, 1.5)) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    ax.plot([0, 1, 2], [1, 0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _tiny_circuit():
    """A four-node traced circuit in the tracer's graph form (an embedding, an MLP, a head, the logits)."""
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_node("E@1", kind="emb", dest=1)
    g.add_node("M0@1", kind="mlp", layer=0, dest=1)
    g.add_node("A1.0@2<1", kind="head", layer=1, head=0, dest=2, src=1)
    g.add_node("logits@2", kind="logits", layer=2, dest=2)
    g.add_edge("E@1", "A1.0@2<1", side="s", token=1, weight=0.5, sing=[0])
    g.add_edge("M0@1", "A1.0@2<1", side="d", token=2, weight=0.2, sing=[1, 2])
    g.add_edge("A1.0@2<1", "logits@2", side="seed", token=2, weight=1.0)
    return g


VIEWER_PAGE = "00_tiny_circuit_viewer.html"


def _executed_tour(fixture_root: Path) -> nbformat.NotebookNode:
    """00_tour as if a run had executed it: text, a figure, LaTeX, a widget, a circuit viewer shown
    inline (``accpp.viewer.show``'s output) and a machine path in its outputs."""
    from accpp import viewer

    import jupytext

    nb = jupytext.read(ROOT / "notebooks" / "00_tour.py")
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                              text=f"loaded {fixture_root}/data/corpus.txt from {Path.home()}/x\n")]
    code[1].outputs = [nbformat.v4.new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"})]
    code[2].outputs = [nbformat.v4.new_output("display_data", data={"text/latex": r"$\alpha + \beta^2$",
                                                                    "text/plain": "alpha + beta^2"})]
    # a progress bar drawn as a widget: offline, the page shows its text (no widget scripts from a CDN)
    code[3].outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "f00d", "version_major": 2, "version_minor": 0},
        "text/plain": "tokens: 100%|##########| 3/3"})]
    code[4].outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": viewer.iframe_html(_tiny_circuit(), title="tiny circuit", tokens=["a", "b", "c"]),
        "text/plain": "<IPython.core.display.HTML object>"})]
    from compendium import board

    boards = next(c for c in code if "board.html_for" in c.source)  # what the cell displays
    boards.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": board.html_for(paper, claims_page=f"../claims/{paper}.html", notebooks_base="",
                                    notebooks=NOTEBOOKS),
        "text/plain": "<IPython.core.display.HTML object>"}) for paper in PAPERS]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0}}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _paper_profile_ledger(root: Path) -> None:
    """ACC++ at the paper profile: a figure (under the name of a cpu figure, other pixels) and a viewer
    page in figures/paper/; PUBLISHED.json gives each profile its last publish, the cpu one naming RUN
    for the tour, the paper one PAPER_RUN for the tour and GONE_RUN for accpp/01_ioi."""
    from accpp import viewer
    from compendium import tables

    folder = root / "papers" / "accpp" / "figures" / "paper"
    folder.mkdir()
    (folder / "01_ioi_logit_diff.png").write_bytes(base64.b64decode(_png((3, 1))))
    viewer.write_html(_tiny_circuit(), folder / VIEWER_PAGE, title="tiny circuit at the paper profile",
                      tokens=["a", "b", "c"])
    path = root / "papers" / "accpp" / "results" / "PUBLISHED.json"
    info = json.loads(path.read_text(encoding="utf-8"))
    time_utc = "2099-01-02T00:00:00+00:00"
    lasts = tables.last_publishes(info)
    info["last_publish"] = {**lasts, "paper": {  # the notebooks the cpu publish ran: no row marked as not run
        "run": PAPER_RUN, "profile": "paper", "seed": 0, "time_utc": time_utc, "git_revision": "f" * 40,
        "notebooks": {**lasts["cpu"]["notebooks"], "00_tour": "completed"}}}
    info["notebooks"]["cpu"]["00_tour"] = {"status": "completed", "run": RUN, "time_utc": "2099-01-01T00:00:00+00:00"}
    info["notebooks"]["paper"] = {"00_tour": {"status": "completed", "run": PAPER_RUN, "time_utc": time_utc},
                                  "accpp/01_ioi": {"status": "completed", "run": GONE_RUN, "time_utc": time_utc}}
    path.write_text(json.dumps(info), encoding="utf-8")


@pytest.fixture(scope="module")
def fixture_book(tmp_path_factory):
    """Build the book of a small copy of the compendium; return (html folder, staging folder, root)."""
    root = tmp_path_factory.mktemp("compendium")
    for name in ("README.md", "pyproject.toml", "notebooks/jupytext.toml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(ROOT / "docs" / "book", root / "docs" / "book")
    shutil.copy2(ROOT / "docs" / "start_here.md", root / "docs" / "start_here.md")
    for paper in PAPERS:
        dest = root / "papers" / paper
        dest.mkdir(parents=True)
        for name in ("claims.yaml", "CLAIMS.md"):
            shutil.copy2(ROOT / "papers" / paper / name, dest / name)
        shutil.copytree(ROOT / "papers" / paper / "results", dest / "results")
        shutil.copytree(ROOT / "papers" / paper / "figures", dest / "figures")
        for old in (dest / "figures").glob("*_viewer.html"):
            old.unlink()
    from accpp import viewer

    viewer.write_html(_tiny_circuit(), root / "papers" / "accpp" / "figures" / VIEWER_PAGE, title="tiny circuit",
                      tokens=["a", "b", "c"])
    _paper_profile_ledger(root)
    env = {**os.environ, "COMPENDIUM_ROOT": str(root), "COMPENDIUM_OUTPUT": str(root / "build")}
    # the claims tables and boards as the code builds them now, from the copied ledger
    proc = subprocess.run([sys.executable, "-m", "compendium", "claims"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in NOTEBOOKS:
        (root / "notebooks" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "notebooks" / f"{name}.py", root / "notebooks" / f"{name}.py")
    # one run: the tour completed, the ablation notebook failed (its partial copy must not be shown)
    run = root / "build" / "runs" / RUN
    (run / "notebooks" / "protot").mkdir(parents=True)
    (run / "params.json").write_text(json.dumps({"kind": "runner", "profile": "cpu", "seed": 0,
                                                 "time_utc": "2099-01-01T00:00:00+00:00"}))
    (run / "status.json").write_text(json.dumps({"notebooks": {
        "00_tour": {"status": "completed"}, "protot/06_women_ablation": {"status": "failed"}}}))
    nbformat.write(_executed_tour(root), run / "notebooks" / "00_tour.ipynb")
    shutil.copy2(run / "notebooks" / "00_tour.ipynb", run / "notebooks" / "protot" / "06_women_ablation.ipynb")
    paper_run = root / "build" / "runs" / PAPER_RUN   # the paper profile's published run of the tour
    (paper_run / "notebooks").mkdir(parents=True)
    (paper_run / "params.json").write_text(json.dumps({"kind": "runner", "profile": "paper", "seed": 0,
                                                       "time_utc": "2099-01-02T00:00:00+00:00"}))
    (paper_run / "status.json").write_text(json.dumps({"notebooks": {"00_tour": {"status": "completed"}}}))
    tour = _executed_tour(root)
    tour.cells[[c.cell_type for c in tour.cells].index("code")].outputs[0]["text"] = f"executed in {PAPER_RUN}\n"
    nbformat.write(tour, paper_run / "notebooks" / "00_tour.ipynb")

    proc = subprocess.run([sys.executable, "-m", "compendium.book", "--strict"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = root / "build" / "book" / "html"
    assert (html / "index.html").is_file(), proc.stdout
    return html, root / "build" / "book" / "src", root


def _pages(html: Path) -> list[Path]:
    """The book's pages (not the circuit viewer pages that figures pages frame: check_viewers checks those)."""
    return sorted(p for p in html.rglob("*.html")
                  if not p.relative_to(html).parts[0].startswith("_") and not p.name.endswith("_viewer.html"))


def _wait_for_maths(page) -> int:
    """Wait for MathJax to finish typesetting; return the number of typeset formulas."""
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
    page.evaluate("() => MathJax.startup.promise")
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a formula error"
    return page.locator("mjx-container").count()


# every display equation of a page whose typeset width exceeds its box: [{n, overflow in px, tex}]
WIDE_EQUATIONS = """() => [...document.querySelectorAll('mjx-container[display="true"]')]
  .map((m, i) => ({n: i + 1, overflow: m.scrollWidth - m.clientWidth,
                   tex: ((m.closest('.math') || m.parentElement).getAttribute('data-tex') ||
                         (m.querySelector('mjx-assistive-mml') || m).textContent || '').slice(0, 80)}))
  .filter(e => e.overflow > 1)"""


VIEWER_STATE = """() => {
  const data = document.getElementById('accpp-circuit-data');
  if (!data || !document.getElementById('accpp-viewer')) return null;
  return {nodes: JSON.parse(data.textContent).nodes.length,
          drawn: document.querySelectorAll('#accpp-viewer svg g.node').length};
}"""


def check_viewers(page, rel: str) -> int:
    """Every circuit viewer framed in ``page`` drew every node of its circuit; returns how many there are."""
    frames = page.locator("iframe")
    n_frames = frames.count()
    checked = 0
    for i in range(n_frames):
        frame = frames.nth(i).element_handle().content_frame()
        assert frame is not None, f"{rel}: iframe {i} has no document"
        frame.wait_for_load_state("load")
        is_viewer = frame.evaluate("() => !!document.getElementById('accpp-circuit-data')")
        if not is_viewer:
            continue
        frame.wait_for_selector("#accpp-viewer svg g.node", timeout=15_000)
        state = frame.evaluate(VIEWER_STATE)
        assert state and state["nodes"] > 0 and state["drawn"] == state["nodes"], \
            f"{rel}: viewer {i} drew {state and state['drawn']} of {state and state['nodes']} nodes"
        checked += 1
    return checked


def check_book(html: Path, watched, forbidden: list[str]) -> int:
    """Check every page (module docstring); returns the number of circuit viewers checked."""
    pages = _pages(html)
    expected = {"index.html", *(f"claims/{p}.html" for p in PAPERS), *(f"figures/{p}.html" for p in PAPERS)}
    assert expected <= {p.relative_to(html).as_posix() for p in pages}
    claim_ids = {paper: [c["id"] for c in yaml.safe_load((ROOT / "papers" / paper / "claims.yaml").read_text())["claims"]]
                 for paper in PAPERS}
    w = watched("book")
    n_viewers = 0
    for page_file in pages:
        rel = page_file.relative_to(html).as_posix()
        w.name = rel.replace("/", "_")
        text = page_file.read_text(encoding="utf-8")
        for path in forbidden:
            assert path not in text, f"{rel} contains the machine path {path}"
        w.page.goto(page_file.as_uri(), wait_until="load")
        if w.page.locator("script[src*='mathjax']").count():
            _wait_for_maths(w.page)
            too_wide = w.page.evaluate(WIDE_EQUATIONS)
            assert not too_wide, f"{rel}: display equations wider than the text column (they scroll): {too_wide}"
        broken = w.page.evaluate(
            "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
        assert broken == [], f"{rel}: images that did not load: {broken}"
        kind, _, stem = rel.partition("/")
        check_words(w.page, rel)
        boards = check_boards(w.page, rel)
        if kind == "claims":
            assert boards == [stem.removesuffix(".html")], f"{rel} shows the verdict boards of {boards}"
            check_summary(w.page, rel, stem.removesuffix(".html"))
            overflow = w.page.evaluate("() => { const a = document.querySelector('.bd-article'); "
                                       "return a.scrollWidth - a.clientWidth }")
            assert overflow <= 1, f"{rel} is {overflow}px wider than the page's text column"
            headings = {h.strip().rstrip("#").strip() for h in w.page.locator(".bd-article h2").all_inner_texts()}
            missing = [i for i in claim_ids.get(stem.removesuffix(".html"), []) if i not in headings]
            assert not missing, f"{rel} has no section for {missing}"
        if kind == "figures":  # every published figure of the paper at every profile, each loaded (checked above)
            tree = html.parent.parent.parent / "papers" / stem.removesuffix(".html") / "figures"
            published = sorted(tree.glob("*.png")) + sorted(tree.glob("*/*.png"))
            assert published, f"no published figures in papers/ for {rel}"
            shown = w.page.locator(".bd-article img").count()
            assert shown == len(published), f"{rel} shows {shown} figures of {len(published)} published"
            viewers = sorted(tree.glob("*_viewer.html")) + sorted(tree.glob("*/*_viewer.html"))
            framed = w.page.locator("iframe.accpp-viewer-page").count()
            assert framed == len(viewers), f"{rel} frames {framed} circuit viewers of {len(viewers)} published"
        n_viewers += check_viewers(w.page, rel)
        w.assert_clean()
    return n_viewers


def test_fixture_book_pages_load_offline(fixture_book, watched):
    html, _, root = fixture_book
    # the tour's inline viewer (on its page and its paper profile's page), the framed pages of the ACC++
    # figures page (the cpu one and the paper profile's)
    assert check_book(html, watched, [str(root), str(ROOT), str(Path.home()) + "/"]) == 4
    assert (html / "figures" / "accpp" / VIEWER_PAGE).is_file()


def test_the_tour_shows_every_paper_s_verdict_board(fixture_book, watched):
    html, _, _ = fixture_book
    w = watched("tour-boards")
    w.page.goto((html / "notebooks" / "00_tour.html").as_uri(), wait_until="load")
    assert check_boards(w.page, "notebooks/00_tour.html") == PAPERS
    assert "**holds**" not in w.page.locator(".bd-article").inner_text()    # no raw Markdown from a table
    w.assert_clean()


def test_framed_viewers_follow_the_book_s_colour_theme(fixture_book, watched):
    """The theme switch of the book's page reaches the sandboxed viewers it frames (inline in a notebook
    page, and framed page files on a figures page)."""
    html, _, _ = fixture_book
    for rel in ("notebooks/00_tour.html", "figures/accpp.html"):
        w = watched(f"theme-{rel.replace('/', '-')}")
        w.page.goto((html / rel).as_uri(), wait_until="load")
        assert check_viewers(w.page, rel) >= 1
        for theme in ("dark", "light", "dark"):
            w.page.evaluate(f"() => document.documentElement.setAttribute('data-theme', '{theme}')")
            for frame in (f.element_handle().content_frame() for f in w.page.locator("iframe").all()):
                frame.wait_for_function(f"() => document.documentElement.getAttribute('data-theme') === '{theme}'",
                                        timeout=5_000)
        w.assert_clean()


def test_a_viewer_that_fails_to_draw_is_caught(fixture_book, watched, tmp_path):
    """check_viewers fails on a viewer whose script does not run (so the checks above can fail)."""
    html, _, _ = fixture_book
    page = (html / "figures" / "accpp" / VIEWER_PAGE).read_text(encoding="utf-8")
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace("<script>\n", "<script type=\"text/plain\">\n"), encoding="utf-8")
    host = tmp_path / "host.html"
    host.write_text(f'<!DOCTYPE html><html><body><iframe src="{broken.name}"></iframe></body></html>', encoding="utf-8")
    w = watched("broken-viewer")
    w.page.goto(host.as_uri(), wait_until="load")
    from playwright.sync_api import Error as PlaywrightError  # its wait for the drawn nodes times out

    with pytest.raises((AssertionError, PlaywrightError)):
        check_viewers(w.page, "host.html")


def test_fixture_book_shows_the_completed_run_and_marks_sources(fixture_book, watched):
    html, src, _ = fixture_book
    tour = (html / "notebooks" / "00_tour.html").read_text(encoding="utf-8")
    assert "Executed in run" in tour and RUN in tour
    assert "data/corpus.txt" in tour                          # the output, with the machine path made relative
    assert "tokens: 100%" in tour                             # the widget's text fallback
    for name in NOTEBOOKS[1:]:                                  # the failed run's copy is not shown
        page = (html / "notebooks" / f"{name}.html").read_text(encoding="utf-8")
        assert "No executed copy of this notebook was found" in page, name
    assert "this page shows its source" not in tour

    w = watched("tour-maths")
    w.page.goto((html / "notebooks" / "00_tour.html").as_uri())
    assert _wait_for_maths(w.page) >= 2                      # W_Q W_K^T in the text, alpha + beta^2 in an output
    assert w.page.locator("mjx-container svg").count() >= 2  # SVG output: no web fonts needed from file://
    figure = w.page.locator(".cell_output img")
    assert figure.count() == 1 and figure.evaluate("i => i.naturalWidth") > 0
    assert os.path.isfile(html / "_static" / "mathjax" / "tex-svg.js")
    w.assert_clean()

    index = (html / "index.html").read_text(encoding="utf-8")
    assert 'href="notebooks/accpp/01_ioi.html"' in index   # the README's map links the notebooks
    start = (html / "start_here.html").read_text(encoding="utf-8")
    assert 'href="notebooks/accpp/01_ioi.html"' in start   # the start page links the notebooks the copy has
    assert index.index('href="start_here.html"') < index.index('href="notebooks/00_tour.html"')


def test_main_build_pages_load_offline(watched):
    html = ROOT / "build" / "book" / "html"
    if not (html / "index.html").is_file():
        pytest.skip("no main build of the book (build/book/html): `make book` or `make all` makes it")
    embedded = sum(p.read_text(encoding="utf-8").count(marker) for p in _pages(html)
                   for marker in ('class="accpp-viewer-frame"', 'class="accpp-viewer-page"'))
    assert check_book(html, watched, [str(ROOT), str(Path.home()) + "/"]) == embedded


SECTIONS = """() => Array.from(document.querySelectorAll('.bd-article section > h2')).map(h => ({
  heading: h.textContent.replace(/#$/, '').replace(/\u2019/g, "'").trim(),   // Sphinx's curly apostrophes
  images: Array.from(h.parentElement.querySelectorAll('img')).map(i => i.src),
  frames: Array.from(h.parentElement.querySelectorAll('iframe')).map(f => f.src)}))"""


def _file_bytes(url: str) -> bytes:
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(url).path)).read_bytes()


def test_each_profile_s_figures_are_shown_under_its_own_heading(fixture_book, watched):
    """On the ACC++ figures page, the paper profile's figure and viewer page are in its section alone,
    which names its last publish; ProtoT, which has no figures/paper/, keeps its page of one profile."""
    from compendium import board, profiles

    html, _, root = fixture_book
    figures = root / "papers" / "accpp" / "figures"
    w = watched("profiles")
    w.page.goto((html / "figures" / "accpp.html").as_uri(), wait_until="load")
    sections = {s["heading"]: s for s in w.page.evaluate(SECTIONS)}
    cpu, paper = (f"Profile cpu: {profiles.describe('cpu')}", f"Profile paper: {profiles.describe('paper')}")
    assert list(sections) == ["verdict_board", cpu, paper]
    cpu_pngs = {p.read_bytes() for p in figures.glob("*.png") if p.name != board.FIGURE_NAME}
    paper_pngs = {p.read_bytes() for p in (figures / "paper").glob("*.png")}
    assert paper_pngs and not paper_pngs & cpu_pngs
    assert {_file_bytes(u) for u in sections[paper]["images"]} == paper_pngs
    assert len(sections[paper]["images"]) == len(paper_pngs)
    assert {_file_bytes(u) for u in sections[cpu]["images"]} == cpu_pngs
    assert [_file_bytes(u) for u in sections["verdict_board"]["images"]] == [(figures / board.FIGURE_NAME).read_bytes()]
    assert [u.rsplit("/figures/", 1)[1] for u in sections[paper]["frames"]] == [f"accpp/paper/{VIEWER_PAGE}"]
    assert [u.rsplit("/figures/", 1)[1] for u in sections[cpu]["frames"]] == [f"accpp/{VIEWER_PAGE}"]
    text = w.page.locator(".bd-article").inner_text()
    assert f"Last publish: run {PAPER_RUN} (revision {'f' * 10}" in text
    w.assert_clean()

    protot = (html / "figures" / "protot.html").read_text(encoding="utf-8")
    assert "Profile" not in protot and "/paper/" not in protot


def test_the_paper_profile_s_published_tour_has_a_page_of_its_own(fixture_book, watched):
    html, _, _ = fixture_book
    tour = (html / "notebooks" / "00_tour.html").read_text(encoding="utf-8")
    assert 'href="00_tour-paper-profile.html"' in tour and f"executed in {PAPER_RUN}" not in tour
    w = watched("paper-tour")
    w.page.goto((html / "notebooks" / "00_tour-paper-profile.html").as_uri(), wait_until="load")
    title = next(line[4:] for line in (ROOT / "notebooks" / "00_tour.py").read_text(encoding="utf-8").splitlines()
                 if line.startswith("# # "))
    assert w.page.locator(".bd-article h1").first.inner_text().rstrip("#").strip() == f"{title} (paper profile)"
    body = w.page.locator(".bd-article").inner_text()
    assert f"Executed in run {PAPER_RUN} (profile paper, seed 0)" in body and f"executed in {PAPER_RUN}" in body
    w.assert_clean()
    w.page.goto((html / "index.html").as_uri(), wait_until="load")   # in the table of contents, after the tour
    links = w.page.locator("nav.bd-links a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert links.index("notebooks/00_tour-paper-profile.html") == links.index("notebooks/00_tour.html") + 1
    ioi = (html / "notebooks" / "accpp" / "01_ioi.html").read_text(encoding="utf-8")
    assert GONE_RUN in ioi and "not available locally" in ioi
    assert not (html / "notebooks" / "accpp" / "01_ioi-paper-profile.html").exists()
