"""The book's "Start here" page (docs/start_here.md): it names every notebook and nothing else, puts the
teaching notebooks first, points to the notebooks' "Try it" sections, and the book stages it first."""
from __future__ import annotations

import re

import jupytext

from compendium import book, paths, runner, start_here

TEACHING = {"protot": ["protot/01_mixer_derivation"], "accpp": ["accpp/00_method", "accpp/01_ioi"]}


def _page() -> str:
    return start_here.source().read_text(encoding="utf-8")


def test_the_page_names_every_notebook_and_only_notebooks():
    missing, unknown = start_here.out_of_sync(_page(), runner.list_notebooks())
    assert not missing, f"docs/start_here.md does not name these notebooks: {missing}"
    assert not unknown, f"docs/start_here.md names notebooks that do not exist: {unknown}"


def test_out_of_sync_reports_a_missing_and_an_unknown_name():
    text = "Read `00_tour`, then `p/01_a` and `p/03_gone`; `docs/x.md` and `build/runs/` are no notebooks."
    assert start_here.named(text) == ["00_tour", "p/01_a", "p/03_gone"]
    assert start_here.out_of_sync(text, ["00_tour", "p/01_a", "p/02_b"]) == (["p/02_b"], ["p/03_gone"])


def test_the_teaching_notebooks_come_first_for_each_paper():
    order = start_here.named(_page())
    for paper, first in TEACHING.items():
        of_paper = [n for n in order if n.startswith(f"{paper}/")]
        assert of_paper[: len(first)] == first, f"{paper}: the page names {of_paper[:len(first)]} first"


def test_each_teaching_notebook_the_page_sends_to_has_a_try_it_section():
    section = _page().split("## Try it", 1)[1].split("\n## ", 1)[0]
    sent = start_here.named(section)
    assert sent == [n for names in TEACHING.values() for n in names]
    for name in sent:
        nb = jupytext.read(paths.notebooks_dir() / f"{name}.py")
        heads = [c for c in nb.cells if c.cell_type == "markdown" and re.search(r"^## .*Try it", c.source, re.M)]
        assert len(heads) == 1, f"{name}: {len(heads)} 'Try it' sections"
        after = nb.cells[nb.cells.index(heads[0]) + 1:]
        assert after and after[0].cell_type == "code", f"{name}: the 'Try it' section has no cell"


def test_the_book_stages_the_page_first_with_notebooks_linked(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(tmp_path / "build"))  # no run: notebooks staged from source
    staged = book.stage(tmp_path / "stage")
    page = (tmp_path / "stage" / "start_here.md").read_text(encoding="utf-8")
    assert page.startswith("# Start here")
    assert "[`accpp/00_method`](notebooks/accpp/00_method.ipynb)" in page
    assert all(f"(notebooks/{n}.ipynb)" in page for n in runner.list_notebooks())
    assert staged.start_here == []
    captions = re.findall(r"^:caption: (.*)$", (tmp_path / "stage" / "index.md").read_text(encoding="utf-8"), re.M)
    assert captions[0] == "Start here" and "Notebooks" in captions
