"""The interactive circuit viewer (accpp.viewer): the page holds every node and edge, loads
nothing from the network, round-trips its JSON, escapes hostile text, matches signal
descriptions, refuses bad input, and (when Chromium and Playwright are installed) works in a
browser opened from file:// without console errors."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import networkx as nx
import pytest

from accpp import viewer
from accpp.graph import graph_from_json, same_graph
from tests.browser_helpers import browser_or_skip

EVIL = "</script><script>alert(1)</script>"


@pytest.fixture(scope="module")
def circuit():
    """A real traced circuit: tiny float64 Llama, 12 random tokens, layer 0 expanded."""
    from accpp.testing import float64_exact, random_prompt, tiny_model
    from accpp.trace import TraceConfig, Tracer

    with float64_exact():
        model = tiny_model("llama", seed=3)
        tracer = Tracer(model, config=TraceConfig(expand_layer0=True))
        c = tracer.trace(random_prompt(12, seed=5), correct=7, wrong=11)
    kinds = {d["kind"] for _, d in c.graph.nodes(data=True)}
    assert {"head", "logits"} <= kinds and c.graph.number_of_edges() > 5, "the fixture circuit is too small to test"
    return c


def hand_graph() -> nx.MultiDiGraph:
    """A graph in the tracer's format with every node kind (two MLP positions at one layer)."""
    g = nx.MultiDiGraph()
    g.add_node("LOGITS@5", kind="logits", layer=3, head=-1, dest=5, src=-1)
    g.add_node("A2.1@5<3", kind="head", layer=2, head=1, dest=5, src=3, A=0.7, traced=True, tau=0.41,
               A_after_d=0.2, A_after_s=0.3)
    g.add_node("A1.0@3<1", kind="head", layer=1, head=0, dest=3, src=1, A=0.5, traced=False)
    for t in (3, 5):
        g.add_node(f"M0@{t}", kind="mlp", layer=0, head=-1, dest=t, src=-1, A=None, traced=False)
    g.add_node("E@1", kind="emb", layer=-1, head=-1, dest=1, src=-1, A=None, traced=False)
    g.add_node("B0@5", kind="bias", layer=0, head=-1, dest=5, src=-1, A=None, traced=False)
    g.add_node("O2.1@5", kind="offset", layer=2, head=1, dest=5, src=-1, A=None, traced=False)
    g.add_edge("A2.1@5<3", "LOGITS@5", side="seed", token=5, sing=[], rank=0, attribution=1.5, drop=1.5, weight=1.5)
    g.add_edge("M0@5", "A2.1@5<3", side="d", token=5, sing=[4, 0], rank=2, attribution=0.3, drop=0.2, weight=0.25)
    g.add_edge("M0@3", "A2.1@5<3", side="s", token=3, sing=[7], rank=1, attribution=0.1, drop=0.1, weight=0.12)
    g.add_edge("A1.0@3<1", "A2.1@5<3", side="s", token=3, sing=[2], rank=1, attribution=0.2, drop=0.2, weight=0.2)
    g.add_edge("E@1", "A2.1@5<3", side="s", token=1, sing=[1], rank=1, attribution=0.05, drop=0.04, weight=0.04)
    g.add_edge("B0@5", "A2.1@5<3", side="d", token=5, sing=[3], rank=1, attribution=0.02, drop=0.02, weight=0.02)
    g.add_edge("O2.1@5", "A2.1@5<3", side="d", token=5, sing=[5], rank=1, attribution=0.03, drop=0.03, weight=0.03)
    return g


def embedded_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="%s">(.*?)</script>' % viewer.DATA_ELEMENT_ID, page, re.S)
    assert m, "no data element in the page"
    return json.loads(m.group(1))


class _Doc(HTMLParser):
    """Counts elements and collects the <title> text as a browser's parser would."""

    def __init__(self):
        super().__init__()
        self.tags, self.title, self._in_title = [], "", False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data


def parse(page: str) -> _Doc:
    doc = _Doc()
    doc.feed(page)
    return doc


# -- the page --------------------------------------------------------------------------------------
def test_page_holds_every_node_and_edge(circuit):
    page = viewer.render_html(circuit, title="tiny")
    data = embedded_data(page)
    g = circuit.graph
    assert [n["id"] for n in data["nodes"]] == list(g.nodes)
    ids = viewer.edge_ids(g)
    assert len(set(ids)) == g.number_of_edges()
    assert [e["id"] for e in data["edges"]] == ids
    for e, (u, v, d) in zip(data["edges"], g.edges(data=True)):
        assert (e["source"], e["target"], e["side"], e["sing"]) == (u, v, d["side"], list(d["sing"]))
    for x in list(g.nodes) + ids:  # as they stand in the page's text (JSON with '<', '>' escaped)
        assert json.dumps(x)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e") in page


def test_no_external_resources(circuit):
    page = viewer.render_html(circuit, title="tiny", tokens=[f"https://example.com/{i}" for i in range(12)])
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", page, re.I)
    assert refs == []
    start = page.index(f'id="{viewer.DATA_ELEMENT_ID}"')
    code = page[:start] + page[page.index("</script>", start):]  # everything but the data
    assert not re.search(r"https?://", code), "the page's own markup, CSS or script names a URL"
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert parse(page).tags.count("script") == 2  # the data and our script, nothing else
    assert "<link" not in page.replace('<link rel="icon" href="data:,">', "")


def test_json_round_trip(circuit):
    page = viewer.render_html(circuit, title="tiny")
    data = embedded_data(page)
    assert data == json.loads(json.dumps(viewer.page_data(circuit, title="tiny")))
    assert data["tokens"] == circuit.tokens and data["title"] == "tiny"
    assert data["meta"]["logit_diff"] == pytest.approx(circuit.logit_diff, rel=1e-15)
    back = graph_from_json({
        "nodes": [{k: v for k, v in n.items() if k != "view"} for n in data["nodes"]],
        "edges": [{k: v for k, v in e.items() if k not in ("id", "desc")} for e in data["edges"]]})
    assert same_graph(circuit.graph, back, atol=1e-12)
    for n in data["nodes"]:
        assert n == {**n, **{k: v for k, v in circuit.graph.nodes[n["id"]].items()}}


def test_accepts_graph_and_json_forms(circuit):
    ref = viewer.page_data(circuit, title="t")
    assert viewer.page_data(circuit.to_json(), title="t") == json.loads(json.dumps(ref))
    from_graph = viewer.page_data(circuit.graph, title="t", tokens=circuit.tokens)
    assert from_graph["nodes"] == ref["nodes"] and from_graph["edges"] == ref["edges"]
    assert viewer.page_data(circuit.graph, title="t")["tokens"] is None


def test_hostile_text_is_escaped(circuit, tmp_path):
    tokens = list(circuit.tokens)
    tokens[3] = EVIL
    first = next((u, d) for u, _, d in circuit.graph.edges(data=True) if d["side"] != "seed")
    desc = {(first[0], tuple(first[1]["sing"])): {"description": EVIL, "contexts": [EVIL, ("a & b <i>", 0.5)]}}
    title = "t </title><script>alert(2)</script> & co"
    path = viewer.write_html(circuit, tmp_path / "evil.html", title=title, tokens=tokens, descriptions=desc)
    page = path.read_text(encoding="utf-8")
    doc = parse(page)
    assert doc.tags.count("script") == 2 and doc.title == title
    assert page.count("</script>") == 2 and page.count("<script") == 2
    assert "alert(1)" in page and EVIL not in page and "<i>" not in page
    data = embedded_data(page)
    assert data["tokens"][3] == EVIL and data["title"] == title
    assert sum(e.get("desc", {}).get("description") == EVIL for e in data["edges"]) >= 1
    assert "\u2028" not in viewer.render_html(circuit, title="x", tokens=["a\u2028b"] * 12)


def test_descriptions_match_by_edge_component_and_signal():
    g = hand_graph()
    ids = dict(zip([(u, v, d["side"]) for u, v, d in g.edges(data=True)], viewer.edge_ids(g)))
    descs = {
        ids[("M0@5", "A2.1@5<3", "d")]: "by edge id",
        ("A1.0", "A2.1", "s", (2,)): {"description": "by upstream, downstream, side, sing",
                                     "contexts": ["ctx", ("ctx2", 1.5), {"text": "ctx3", "value": 2}]},
        ("E@1", (1,)): "by upstream node id and sing",
        ("M0", (0, 4)): "by component and sing (shadowed by the edge id)",
        ("M9", (1,)): "matches nothing",
    }
    data = viewer.page_data(g, title="t", descriptions=descs)
    got = {(e["source"], e["side"]): e.get("desc", {}).get("description") for e in data["edges"]}
    assert got[("M0@5", "d")] == "by edge id"
    assert got[("A1.0@3<1", "s")] == "by upstream, downstream, side, sing"
    assert got[("E@1", "s")] == "by upstream node id and sing"
    assert got[("M0@3", "s")] is None and got[("B0@5", "d")] is None
    ctx = next(e["desc"]["contexts"] for e in data["edges"] if e["source"] == "A1.0@3<1")
    assert ctx == [dict(text="ctx", value=None), dict(text="ctx2", value=1.5), dict(text="ctx3", value=2)]
    assert data["descriptions"] == dict(given=5, matched=3)


@pytest.mark.parametrize("bad, match", [
    ({("M0", "x"): "d"}, "singular indices"),
    ({("M0", "A2.1", "q", (1,)): "d"}, "side must be"),
    ({(1, (1,)): "d"}, "component"),
    ({("M0", (1,), 3): "d"}, "expected an edge id"),
    ({("M0", (1,)): {"text": "no description key"}}, "description"),
    ({("M0", (1,)): {"description": "x", "contexts": [3]}}, "context"),
    ({("M0", (1, 2)): "a", ("M0@3", (2, 1)): "b"}, "same signal"),
])
def test_bad_descriptions_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        viewer.page_data(hand_graph(), title="t", descriptions=bad)


def test_bad_input_is_named():
    g = hand_graph()
    with pytest.raises(TypeError, match="Circuit, a networkx graph"):
        viewer.page_data([1, 2], title="t")
    with pytest.raises(ValueError, match="uses position 5 but only 3 tokens"):
        viewer.page_data(g, title="t", tokens=["a", "b", "c"])
    with pytest.raises(TypeError, match="tokens must be a list of strings"):
        viewer.page_data(g, title="t", tokens="abcdef")
    with pytest.raises(TypeError, match="title"):
        viewer.page_data(g, title=None)
    g2 = hand_graph()
    del g2.nodes["M0@3"]["kind"]
    with pytest.raises(ValueError, match="node 'M0@3': 'kind'"):
        viewer.page_data(g2, title="t")
    g3 = hand_graph()
    g3.add_edge("M0@3", "A2.1@5<3", side="x", token=3, sing=[1], weight=0.1)
    with pytest.raises(ValueError, match="'side' must be one of"):
        viewer.page_data(g3, title="t")


def test_acc_baseline_form_uses_share_as_weight():
    g = nx.MultiDiGraph()  # the ACC baseline's attributes: no A, no weight/attribution, a share
    g.add_node("LOGITS@4", kind="logits", layer=2, head=-1, dest=4, src=-1)
    g.add_node("A1.0@4<2", kind="head", layer=1, head=0, dest=4, src=2, traced=True)
    g.add_node("M0@4", kind="mlp", layer=0, head=-1, dest=4, src=-1, traced=False)
    g.add_edge("A1.0@4<2", "LOGITS@4", side="seed", token=4, sing=[], rank=0)
    g.add_edge("M0@4", "A1.0@4<2", side="d", token=4, sing=[3, 1], rank=2, share=0.4)
    edges = viewer.page_data(g, title="acc")["edges"]
    assert [e["weight"] for e in edges] == [None, 0.4]


def test_labels_and_columns():
    data = viewer.page_data(hand_graph(), title="t", tokens=[f"w{i}" for i in range(6)])
    view = {n["id"]: n["view"] for n in data["nodes"]}
    assert (view["A2.1@5<3"]["name"], view["A2.1@5<3"]["pos"]) == ("A2.1", "5\u21903")
    assert (view["M0@3"]["name"], view["M0@3"]["pos"]) == ("M0", "@3")
    assert view["E@1"]["name"] == "E" and view["O2.1@5"]["name"] == "O2.1" and view["B0@5"]["name"] == "B0"
    assert view["LOGITS@5"]["name"] == "logits"
    cols = {k: v["col"] for k, v in view.items()}
    assert cols["E@1"] < cols["M0@3"] == cols["B0@5"] < cols["A1.0@3<1"] < cols["A2.1@5<3"] < cols["LOGITS@5"]
    assert data["n_layers"] == 3


def test_iframe_and_show(circuit, monkeypatch):
    frame = viewer.iframe_html(circuit, title="tiny", tokens=[EVIL] * 12)
    assert frame.startswith('<div class="accpp-viewer-frame"><iframe srcdoc="') and 'sandbox="allow-scripts"' in frame
    assert "<script" not in frame and "&lt;script" in frame  # the whole page is one escaped attribute
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    assert viewer.show(circuit) is None
    assert len(shown) == 1 and shown[0].data == viewer.iframe_html(circuit, title=circuit.meta["model"] or "ACC++ circuit")


# -- in a browser ----------------------------------------------------------------------------------
@pytest.mark.browser
def test_page_in_chromium(circuit, tmp_path):
    import os

    from playwright.sync_api import sync_playwright

    exe = browser_or_skip()
    tokens = list(circuit.tokens)
    tokens[3] = EVIL
    first = next((u, d) for u, _, d in circuit.graph.edges(data=True) if d["side"] != "seed")
    descs = {(first[0], tuple(first[1]["sing"])): {"description": "fake description", "contexts": ["context one"],
                                                   "score": {"own": 0.75, "other": 0.5}}}
    path = viewer.write_html(circuit, tmp_path / "page.html", title="tiny", tokens=tokens, descriptions=descs)
    g = circuit.graph
    head = next(n for n, d in g.nodes(data=True) if d["kind"] == "head" and d.get("traced"))
    hd = g.nodes[head]
    leaves = [n for n, d in g.nodes(data=True) if d["kind"] in ("mlp", "emb")]
    leaf_comps = {viewer.component_name(g.nodes[n]) for n in leaves}
    assert leaves, "the fixture circuit has no MLP/embedding leaf to collapse"
    problems, dialogs = [], []
    args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(f"request {r.url}"))
            page.goto(path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=10_000)
            assert page.locator("g.node").count() == g.number_of_nodes()
            assert page.locator("g.edge").count() == g.number_of_edges()
            assert page.locator("#edge-table tbody tr").count() == g.number_of_edges()
            assert page.locator(".tok").nth(3).inner_text().endswith(EVIL.replace(" ", "\u00b7")[:13] + "\u2026")
            # hover a traced firing: the tooltip names its layer, head, tokens and A_ds
            page.locator(f'g.node[data-node="{head}"]').hover()
            tip = page.locator("#tip")
            assert tip.is_visible()
            text = tip.inner_text()
            assert f"layer {hd['layer']}, head {hd['head']}" in text
            assert f'{hd["dest"]} {json.dumps(tokens[hd["dest"]])}' in text and "tau" in text
            assert page.locator(f'.tok[data-pos="{hd["dest"]}"]').get_attribute("class").count("hl-d") == 1
            # an edge with a description shows it; click pins the tooltip, Escape unpins
            eid = next(e["id"] for e in embedded_data(path.read_text())["edges"] if "desc" in e)
            page.locator(f'g.edge[data-edge="{eid}"]').dispatch_event("mouseenter")
            assert "fake description" in tip.inner_text() and "context one" in tip.inner_text()
            assert "judge: 0.750 with this description vs 0.500" in tip.inner_text()
            page.locator(f'g.edge[data-edge="{eid}"]').dispatch_event("click")
            assert "pinned" in tip.inner_text()
            page.keyboard.press("Escape")
            assert not tip.is_visible()
            # collapse leaves: one node per (layer, kind), no per-position leaf left
            page.locator("#collapse-leaves").check()
            agg = page.locator('g.node[data-node^="agg:"]')
            assert agg.count() == len(leaf_comps)
            assert page.locator("g.node.kind-mlp:not(.agg), g.node.kind-emb:not(.agg)").count() == 0
            assert page.locator("g.node").count() == g.number_of_nodes() - len(leaves) + len(leaf_comps)
            agg.first.hover()
            assert "collapsed" in tip.inner_text()
            page.locator("#collapse-leaves").uncheck()
            assert page.locator("g.node").count() == g.number_of_nodes()
            # layer filter: only the top layer and the logits
            top = max(d["layer"] for _, d in g.nodes(data=True) if d["kind"] != "logits")
            page.locator("#layer-lo").fill(str(top))
            keep = [n for n, d in g.nodes(data=True) if d["kind"] == "logits" or (d["kind"] != "emb" and d["layer"] >= top)]
            assert page.locator("g.node").count() == len(keep)
            assert page.locator(".hl, .hl-d, .hl-s").count() == 0 and not tip.is_visible()
            # sort the table by weight, ascending then descending
            page.locator('th[data-key="weight"]').click()
            w = [float(x) for x in page.locator("#edge-table td.c-weight").all_inner_texts()]
            assert w == sorted(w) and len(w) >= 1
        finally:
            browser.close()
    assert problems == [] and dialogs == []
