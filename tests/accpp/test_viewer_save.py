"""viewer.save: the page as a figure of the run (named by the notebook's number) and shown inline."""
from __future__ import annotations

import networkx as nx
import pytest

from accpp import viewer
from compendium import runs


def _graph():
    g = nx.MultiDiGraph()
    g.add_node("M0@1", kind="mlp", layer=0, dest=1)
    g.add_node("A1.0@2<1", kind="head", layer=1, head=0, dest=2, src=1)
    g.add_node("logits@2", kind="logits", layer=2, dest=2)
    g.add_edge("M0@1", "A1.0@2<1", side="d", token=2, weight=0.2, sing=[1])
    g.add_edge("A1.0@2<1", "logits@2", side="seed", token=2, weight=1.0)
    return g


@pytest.fixture
def run(tmp_path, monkeypatch):
    run = tmp_path / "build" / "runs" / "r"
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(tmp_path / "build"))
    monkeypatch.setenv(runs.RUN_ENV, str(run))
    monkeypatch.setenv(runs.NOTEBOOK_ENV, "accpp/06_gendered_pronoun")
    return run


def test_save_writes_the_page_into_the_figure_folder_and_shows_it(run, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    path = viewer.save(_graph(), "accpp/circuit_m", title="t", tokens=["a", "b", "c"])
    page = run / "figures" / "accpp" / "06_circuit_m_viewer.html"
    assert page.is_file() and str(path).endswith("figures/accpp/06_circuit_m_viewer.html")
    assert page.read_text(encoding="utf-8") == viewer.render_html(_graph(), title="t", tokens=["a", "b", "c"])
    assert len(shown) == 1 and shown[0].data == viewer.iframe_html(_graph(), title="t", tokens=["a", "b", "c"])
    # idempotent names: the number and the suffix are not doubled
    viewer.save(_graph(), "accpp/06_circuit_m_viewer", title="t", show=False)
    assert sorted(p.name for p in page.parent.iterdir()) == ["06_circuit_m_viewer.html"] and len(shown) == 1


@pytest.mark.parametrize("name", ["circuit", "accpp/../x", "accpp/a b", "/accpp/x", "a/b/c"])
def test_bad_names_are_named(run, name):
    with pytest.raises(ValueError, match="viewer page names look like"):
        viewer.save(_graph(), name, title="t", show=False)
