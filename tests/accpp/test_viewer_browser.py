"""The circuit viewer's reading aids, in Chromium (book-sized frames, pages from file://, no network):
row labels that stay put, the compact layout chosen for wide graphs, search, the reader's groups, the
view kept in the URL, dark mode following the book, and descriptions shown only with their judge
score (labelled "not informative" when a check of their describer failed)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import networkx as nx
import pytest

from accpp import viewer
from compendium.paths import repo_root
from tests.browser_helpers import browser_or_skip

pytestmark = pytest.mark.browser

FRAME = {"width": 784, "height": 760}   # the book's frame of a viewer
N_LAYERS = 28


def wide_graph() -> tuple[nx.MultiDiGraph, list[str]]:
    """A circuit through every one of 28 layers at three positions: wide when layers run across."""
    tokens = ["<s>", " When", " Mary", " and", " John", " went", " to", " the", " store", " gave"]
    g = nx.MultiDiGraph()
    g.add_node("logits@9", kind="logits", layer=N_LAYERS, dest=9)
    for p in (2, 4):
        g.add_node(f"E@{p}", kind="emb", dest=p)
    for layer in range(N_LAYERS):
        src = 2 if layer % 2 else 4
        head = f"A{layer}.1@9<{src}"
        g.add_node(head, kind="head", layer=layer, head=1, dest=9, src=src, A=0.5, traced=True, tau=0.1)
        g.add_node(f"M{layer}@9", kind="mlp", layer=layer, dest=9)
        g.add_edge(f"E@{src}", head, side="s", token=src, sing=[layer % 5], weight=0.1 + 0.01 * layer)
        if layer:
            g.add_edge(f"M{layer - 1}@9", head, side="d", token=9, sing=[1], weight=0.2)
            g.add_edge(f"A{layer - 1}.1@9<{2 if (layer - 1) % 2 else 4}", head, side="d", token=9, sing=[0, 3], weight=0.3)
    g.add_edge(f"A{N_LAYERS - 1}.1@9<2", "logits@9", side="seed", token=9, weight=1.0)
    return g, tokens


def small_graph() -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    g.add_node("E@1", kind="emb", dest=1)
    g.add_node("M0@1", kind="mlp", layer=0, dest=1)
    g.add_node("M0@2", kind="mlp", layer=0, dest=2)
    g.add_node("A1.0@2<1", kind="head", layer=1, head=0, dest=2, src=1, A=0.4, traced=True)
    g.add_node("logits@2", kind="logits", layer=2, dest=2)
    g.add_edge("E@1", "A1.0@2<1", side="s", token=1, weight=0.5, sing=[0])
    g.add_edge("M0@1", "A1.0@2<1", side="s", token=1, weight=0.3, sing=[2])
    g.add_edge("M0@2", "A1.0@2<1", side="d", token=2, weight=0.2, sing=[1, 2])
    g.add_edge("A1.0@2<1", "logits@2", side="seed", token=2, weight=1.0)
    return g


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    exe = browser_or_skip()
    args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=args)
        yield b
        b.close()


class Page:
    """A page with its problems (console errors, page errors, dialogs, requests off file:) collected."""

    def __init__(self, browser, viewport=FRAME, color_scheme="light"):
        self.problems = []
        self.context = browser.new_context(viewport=viewport, color_scheme=color_scheme)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "about:"))
                     else self.problems.append(f"request {r.url}"))

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=10_000)
        return self.page

    def close(self):
        self.context.close()
        assert self.problems == []


@pytest.fixture
def pages(browser):
    opened = []

    def make(**kw) -> Page:
        p = Page(browser, **kw)
        opened.append(p)
        return p

    yield make
    for p in opened:
        p.close()


def _write(tmp_path, graph, name="page.html", **kw) -> Path:
    kw.setdefault("title", "a circuit")
    return viewer.write_html(graph, tmp_path / name, **kw)


def test_row_labels_stay_put_when_the_graph_scrolls_sideways(tmp_path, pages):
    g, tokens = wide_graph()
    page = pages().open(_write(tmp_path, g, tokens=tokens).as_uri() + "#layout=layers")
    assert page.get_attribute("body", "data-layout") == "layers"
    wrap = page.locator("#graph")
    geometry = """() => { const w = document.getElementById('graph'), r = document.querySelector('.pane.rowhead');
      const c = document.querySelector('.pane.colhead');
      return {wrap: w.getBoundingClientRect().left, rows: r.getBoundingClientRect().left,
              top: w.getBoundingClientRect().top, cols: c.getBoundingClientRect().top,
              scroll: w.scrollLeft, room: w.scrollWidth - w.clientWidth}; }"""
    before = page.evaluate(geometry)
    assert before["room"] > 500, "the graph is not wider than its frame: nothing to check"
    wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; w.scrollTop = w.scrollHeight; }")
    after = page.evaluate(geometry)
    assert after["scroll"] > 500
    assert abs(after["rows"] - after["wrap"]) <= 2, "the row labels scrolled away with the graph"
    assert abs(after["cols"] - after["top"]) <= 2, "the column labels scrolled away with the graph"
    # the labels pane shows the positions' tokens
    assert "Mary" in page.locator(".pane.rowhead").text_content()


def test_a_wide_graph_is_drawn_tokens_across_layers_up_and_the_reader_can_switch(tmp_path, pages):
    g, tokens = wide_graph()
    p = pages()
    page = p.open(_write(tmp_path, g, tokens=tokens).as_uri())
    assert page.get_attribute("body", "data-layout") == "tokens"
    assert "tokens across" in page.locator("#layout-note").inner_text()

    def xy(node):
        return page.locator(f'g.node[data-node="{node}"]').evaluate(
            "n => { const b = n.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; }")

    width_tokens = page.locator(".graph-grid").evaluate("g => g.getBoundingClientRect().width")
    assert width_tokens <= FRAME["width"] - 20, "the compact layout does not fit the book's frame"
    logits, emb, low, high = xy("logits@9"), xy("E@2"), xy("A1.1@9<2"), xy("A20.1@9<4")
    assert logits[1] < high[1] < low[1] < emb[1] + 1e-6 or logits[1] < high[1] < low[1]   # layers go up
    assert abs(low[0] - high[0]) < 1 and abs(xy("M3@9")[0] - low[0]) < 60          # one column per position
    assert abs(emb[0] - xy("E@4")[0]) > 20                                          # different positions
    assert page.locator("g.node").count() == g.number_of_nodes()
    assert page.locator("g.edge").count() == g.number_of_edges()
    page.select_option("#layout", "layers")
    assert page.get_attribute("body", "data-layout") == "layers"
    width_layers = page.locator(".graph-grid").evaluate("g => g.getBoundingClientRect().width")
    assert width_layers > 2 * width_tokens
    # a small graph keeps layers across
    q = pages()
    small = q.open(_write(tmp_path, small_graph(), "small.html", tokens=["a", "b", "c"]).as_uri())
    assert small.get_attribute("body", "data-layout") == "layers"


def test_search_highlights_tokens_layers_heads_and_descriptions(tmp_path, pages):
    g, tokens = wide_graph()
    descs = {("E", (3,)): {"description": "names of people", "score": 0.7}}
    page = pages().open(_write(tmp_path, g, tokens=tokens, descriptions=descs).as_uri())

    def matches():
        return sorted(page.locator("g.node.match").evaluate_all("ns => ns.map(n => n.dataset.node)"))

    page.fill("#search", "L5")
    assert matches() == ["A5.1@9<2", "M5@9"] and "2 nodes, 0 edges match" in page.inner_text("#search-count")
    page.fill("#search", "A12.1")
    assert matches() == ["A12.1@9<4"]
    page.fill("#search", "12.1")
    assert matches() == ["A12.1@9<4"]
    page.fill("#search", "mary")                      # the token " Mary" at position 2: its embedding and
    found = matches()                                 # every head reading it as its source
    assert "E@2" in found and all(n == "E@2" or n.endswith("<2") for n in found) and len(found) == 1 + N_LAYERS // 2
    page.fill("#search", "people")                    # words of a description: the described edges
    described = page.locator("g.edge.match").count()
    assert described == sum(1 for u, v, d in g.edges(data=True) if u.startswith("E@") and d["sing"] == [3])
    assert described > 0 and matches() == []
    page.fill("#search", "")
    assert matches() == [] and page.locator("svg.searching").count() == 0


def test_the_reader_groups_nodes_into_one_named_node_and_expands_it_again(tmp_path, pages):
    g = small_graph()
    page = pages().open(_write(tmp_path, g, tokens=["a", "b", "c"]).as_uri())
    page.click("#tools summary")
    page.locator('g.node[data-node="M0@1"]').click(modifiers=["Shift"])
    page.locator('g.node[data-node="E@1"]').click(modifiers=["Shift"])
    assert page.locator("g.node.selected").count() == 2 and "2 nodes selected" in page.inner_text("#selection-count")
    page.fill("#group-name", "inputs <b>of</b> b")
    page.click("#group-make")
    group = page.locator("g.node.kind-group")
    assert group.count() == 1 and page.locator('g.node[data-node="M0@1"]').count() == 0
    assert page.locator("g.node").count() == g.number_of_nodes() - 1
    assert "inputs" in group.text_content() and page.locator("g.node b").count() == 0   # text, never markup
    edge = page.locator('g.edge[data-edge^="grp:0|A1.0@2<1|s"]')
    assert edge.count() == 1                           # the members' two key-side edges, merged
    group.hover()
    assert "group of 2 nodes" in page.inner_text("#tip")
    page.click("#group-list .group-toggle")            # expand: the members are back, marked
    assert page.locator("g.node.kind-group").count() == 0
    assert page.locator("g.node.in-group").count() == 2 and page.locator("g.node").count() == g.number_of_nodes()
    page.click("#group-list .group-toggle")            # collapse again
    assert page.locator("g.node.kind-group").count() == 1
    page.click("#group-list .group-remove")            # ungroup
    assert page.locator("g.node.kind-group, g.node.in-group").count() == 0
    # the search matches as a selection
    page.fill("#search", "M0")
    page.click("#select-matches")
    page.click("#group-make")
    assert page.locator("g.node.kind-group").count() == 1 and "group 1" in page.inner_text("#group-list")


def test_the_view_is_kept_in_the_url_and_a_link_reproduces_it(tmp_path, pages):
    g, tokens = wide_graph()
    url = _write(tmp_path, g, tokens=tokens).as_uri()
    page = pages().open(url)
    page.locator("#layer-lo").fill("3")
    page.locator("#layer-hi").fill("20")
    page.check("#collapse-leaves")
    page.fill("#min-weight", "0.15")
    page.select_option("#layout", "layers")
    page.fill("#search", "mary")
    page.click("#tools summary")
    for n in ("A4.1@9<4", "A5.1@9<2"):
        page.locator(f'g.node[data-node="{n}"]').click(modifiers=["Shift"])
    page.fill("#group-name", "pair")
    page.click("#group-make")
    page.locator('g.node[data-node="A10.1@9<4"]').click()   # pinned
    link = page.url
    assert "#" in link
    page.click("#view-link-button")
    assert page.input_value("#view-link") == link

    def snapshot(p):
        return dict(lo=p.input_value("#layer-lo"), hi=p.input_value("#layer-hi"), leaves=p.is_checked("#collapse-leaves"),
                    w=p.input_value("#min-weight"), layout=p.get_attribute("body", "data-layout"),
                    q=p.input_value("#search"), count=p.inner_text("#search-count"),
                    nodes=sorted(p.locator("g.node").evaluate_all("ns => ns.map(n => n.dataset.node)")),
                    groups=p.inner_text("#group-list"), tip=p.inner_text("#tip") if p.is_visible("#tip") else None)

    before = snapshot(page)
    assert before["groups"].startswith("pair") and before["tip"] and "A10.1" in before["tip"]
    again = pages().open(link)
    assert snapshot(again) == before
    # a link with hostile or malformed parts is read as text or ignored
    bad = url + "#" + "groups=" + json.dumps([["<img src=x onerror=alert(1)>", ["A4.1@9<4", "nope"], 0], "x"]) + \
        "&lo=banana&zoom=9999&layout=<b>&pin=n:nope"
    hostile = pages().open(bad)
    assert hostile.locator("img").count() == 0 and "<img" in hostile.locator("g.node.kind-group").text_content()
    assert hostile.input_value("#layer-lo") == "-1" and hostile.input_value("#zoom") == "100"
    assert not hostile.is_visible("#tip")


THEME = """() => ({theme: document.documentElement.getAttribute('data-theme'),
                  bg: getComputedStyle(document.body).backgroundColor})"""


def _dark(rgb: str) -> bool:
    r, gr, b = (int(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return r + gr + b < 3 * 80


def test_dark_mode_follows_the_system_setting_on_its_own(tmp_path, pages):
    url = _write(tmp_path, small_graph(), tokens=["a", "b", "c"]).as_uri()
    dark = pages(color_scheme="dark").open(url).evaluate(THEME)
    light = pages(color_scheme="light").open(url).evaluate(THEME)
    assert dark["theme"] == "dark" and _dark(dark["bg"])
    assert light["theme"] == "light" and not _dark(light["bg"])


def test_dark_mode_follows_the_book_around_a_sandboxed_frame(tmp_path, pages):
    """The book's page (its data-theme, and docs/book/_static/compendium.js) tells the viewer framed
    in it, whatever the system setting says."""
    script = (repo_root() / "docs" / "book" / "_static" / "compendium.js").read_text(encoding="utf-8")
    frame = viewer.iframe_html(small_graph(), title="t", tokens=["a", "b", "c"])
    host = tmp_path / "host.html"
    host.write_text(f'<!DOCTYPE html><html data-theme="dark"><head><script>{script}</script></head><body>{frame}'
                    "</body></html>", encoding="utf-8")
    p = pages(color_scheme="light")
    p.page.goto(host.as_uri())
    inner = p.page.frame_locator("iframe")
    inner.locator("body[data-ready='1']").wait_for(timeout=10_000)
    frame_el = p.page.locator("iframe").element_handle().content_frame()
    p.page.wait_for_function("() => true")
    frame_el.wait_for_function("() => document.documentElement.getAttribute('data-theme') === 'dark'", timeout=5_000)
    assert _dark(frame_el.evaluate(THEME)["bg"])
    p.page.evaluate("() => document.documentElement.setAttribute('data-theme', 'light')")
    frame_el.wait_for_function("() => document.documentElement.getAttribute('data-theme') === 'light'", timeout=5_000)
    # without the book's script the frame keeps to the system setting
    bare = tmp_path / "bare.html"
    bare.write_text(f'<!DOCTYPE html><html data-theme="dark"><body>{frame}</body></html>', encoding="utf-8")
    q = pages(color_scheme="light")
    q.page.goto(bare.as_uri())
    q.page.frame_locator("iframe").locator("body[data-ready='1']").wait_for(timeout=10_000)
    assert q.page.locator("iframe").element_handle().content_frame().evaluate(THEME)["theme"] == "light"


def test_descriptions_come_with_their_judge_score_and_their_describer_s_checks(tmp_path, pages):
    g = small_graph()
    descs = {
        ("E", (0,)): {"description": "copied words", "describer": "instruction model", "score": {"own": 0.5, "other": 0.75},
                      "checks": [{"check": "beats another signal's description", "passed": True},
                                 {"check": "does not repeat a context", "passed": False}],
                      "others": [{"description": "the word 'a'", "describer": "token baseline", "score": 0.6,
                                  "checks": [{"check": "baseline check", "passed": True}]}],
                      "contexts": [("a [b]", 1.5)]},
        ("M0", (2,)): "an unscored guess",
        ("M9", (1,)): {"description": "a signal of another circuit", "score": 0.9},
    }
    page = pages().open(_write(tmp_path, g, tokens=["a", "b", "c"], descriptions=descs).as_uri())
    ids = {(u, d["side"]): i for (u, v, d), i in zip(g.edges(data=True), viewer.edge_ids(g))}
    page.locator(f'g.edge[data-edge="{ids[("E@1", "s")]}"]').dispatch_event("mouseenter")
    tip = page.inner_text("#tip")
    assert "copied words" in tip and "not informative" in tip and "failed: does not repeat a context" in tip
    assert "judge: 0.500 with this description vs 0.750" in tip
    assert "the word 'a'" in tip and "judge score 0.600" in tip and tip.count("not informative") == 1
    page.locator(f'g.edge[data-edge="{ids[("M0@1", "s")]}"]').dispatch_event("mouseenter")
    tip = page.inner_text("#tip")
    assert "an unscored guess" not in tip and "without a judge score; not shown" in tip
    table = page.inner_text("#edge-table")
    assert "[not informative] copied words (judge 0.500 vs 0.750)" in table and "an unscored guess" not in table
    header = page.inner_text("#described")
    assert "2 of the 3 described signals are signals of this circuit" in header and "other 1 are not" in header


def test_the_title_does_not_repeat_the_prompt(tmp_path, pages):
    from accpp.graph import graph_to_json

    circuit = {"graph": graph_to_json(small_graph()), "tokens": ["a", "b", "c"], "meta": {"text": "a b c"}}
    with_prompt = pages().open(_write(tmp_path, circuit, "p1.html", title="model: 'a b c'").as_uri())
    assert with_prompt.locator("header .prompt").count() == 0 and "a b c" in with_prompt.inner_text("header h1")
    without = pages().open(_write(tmp_path, circuit, "p2.html", title="prompt 1 of 3").as_uri())
    assert without.inner_text("header .prompt") == "a b c"
