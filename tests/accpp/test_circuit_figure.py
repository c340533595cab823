"""accpp.figures.draw_circuit: x = layer, y = token position, leaves collapsed, labels that do not overlap."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import networkx as nx
import pytest

from accpp import figures


def _circuit(n_heads_per_cell: int = 3, layers: int = 12, positions=(2, 5, 9)) -> nx.MultiDiGraph:
    """Many heads at a few positions across many layers, an MLP and the embedding at every position."""
    g = nx.MultiDiGraph()
    g.add_node(f"logits@{positions[-1]}", kind="logits", layer=layers, dest=positions[-1])
    for p in positions:
        g.add_node(f"E@{p}", kind="emb", dest=p)
        for layer in range(layers):
            g.add_node(f"M{layer}@{p}", kind="mlp", layer=layer, dest=p)
            for h in range(n_heads_per_cell):
                n = f"A{layer}.{h}@{p}<{positions[0]}"
                g.add_node(n, kind="head", layer=layer, head=h, dest=p, src=positions[0])
                g.add_edge(f"M{layer}@{p}", n, side="d", token=p, weight=0.3, sing=[0])
                g.add_edge(f"E@{p}", n, side="s", token=p, weight=0.1, sing=[1])
                if layer == layers - 1 and p == positions[-1]:
                    g.add_edge(n, f"logits@{p}", side="seed", token=p, weight=1.0)
    return g


def test_collapse_merges_leaves_per_layer_and_sums_weights():
    g = _circuit()
    c = figures.collapse_leaves(g)
    kinds = [d["kind"] for _, d in c.nodes(data=True)]
    assert kinds.count("mlp") == 12 and kinds.count("emb") == 1     # one per layer, one embedding
    assert kinds.count("head") == 3 * 12 * 3
    e = [d for u, v, d in c.edges(data=True) if u == "agg:E" and v == "A0.0@2<2"]
    assert len(e) == 1 and e[0]["weight"] == pytest.approx(0.1)
    assert c.nodes["agg:M4"]["collapsed"] == 3


def test_layout_is_by_layer_and_position():
    g = figures.collapse_leaves(_circuit())
    pos, layers, rows = figures.circuit_layout(g)
    assert layers == [-1, *range(12), 12]                            # embedding, layers, logits
    assert pos["A3.1@5<2"][0] == layers.index(3) and pos["agg:E"][0] == 0
    band_of = {b: (top, top + h) for b, top, h in rows}
    assert [b for b, *_ in rows] == [2, 5, 9, figures.LEAVES]
    lo, hi = band_of[5]
    assert lo <= pos["A3.1@5<2"][1] < hi
    assert band_of[figures.LEAVES][0] <= pos["agg:M7"][1]
    assert len(set(pos.values())) == len(pos)                        # no two nodes in one place
    with pytest.raises(ValueError, match="spacing"):
        figures.circuit_layout(g, 0)


@pytest.mark.parametrize("collapse", [True, False])
def test_labels_do_not_overlap_and_are_readable(collapse):
    g = _circuit()
    fig, ax = plt.subplots(figsize=(11, 7))
    figures.draw_circuit(g, [f"t{i}" for i in range(10)], ax=ax, title="t", collapse=collapse)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_text()]
    assert len(texts) == (g.number_of_nodes() if not collapse else len(figures.collapse_leaves(g)))
    boxes = [t.get_window_extent(r) for t in texts]
    overlaps = [(texts[i].get_text(), texts[j].get_text()) for i in range(len(boxes)) for j in range(i)
                if boxes[i].overlaps(boxes[j])]
    assert overlaps == []
    if collapse:  # with the leaves collapsed the labels get a readable size on this figure
        assert min(t.get_fontsize() for t in texts) >= 6
    plt.close(fig)


def test_bad_kind_is_named():
    g = nx.MultiDiGraph()
    g.add_node("x", kind="neuron", layer=0, dest=0)
    with pytest.raises(ValueError, match="'kind' must be one of"):
        figures.circuit_layout(g)


def test_a_head_firing_from_two_sources_names_each_source():
    g = nx.MultiDiGraph()
    g.add_node("logits@9", kind="logits", layer=30, dest=9)
    for src in (0, 3):
        g.add_node(f"A26.2@9<{src}", kind="head", layer=26, head=2, dest=9, src=src)
        g.add_edge(f"A26.2@9<{src}", "logits@9", side="seed", weight=1.0)
    fig, ax = plt.subplots(figsize=(6, 4))
    figures.draw_circuit(g, [str(i) for i in range(10)], ax=ax)
    assert sorted(t.get_text() for t in ax.texts) == ["26.2\u21900", "26.2\u21903", "logit"]
    plt.close(fig)


def _texts(fig, ax):
    """Every non-empty text the figure shows: labels, ticks, axis labels, legend, title."""
    out = [t for t in ax.texts if t.get_text()]
    out += [t for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    out += [ax.xaxis.label, ax.yaxis.label, ax.title]
    out += list(ax.get_legend().get_texts())
    return out


@pytest.mark.parametrize("width, collapse", [(10, True), (10, False), (15, True)])
def test_every_text_is_legible_at_the_book_s_width(width, collapse):
    g = _circuit()
    fig, ax = plt.subplots(figsize=(width, 7))
    figures.draw_circuit(g, [f"t{i}" for i in range(10)], ax=ax, title="t", collapse=collapse)
    fig.canvas.draw()
    smallest = figures.book_font(fig)
    assert smallest == pytest.approx(figures.BOOK_MIN_PX * 72 * width / figures.BOOK_WIDTH_PX)
    small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig, ax) if t.get_fontsize() < smallest - 1e-9]
    assert small == []
    # labels still do not overlap at that size
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in ax.texts if t.get_text()]
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(len(boxes)) for j in range(i))
    plt.close(fig)


def test_a_crowded_circuit_makes_the_figure_taller_not_its_labels_smaller():
    g = _circuit(n_heads_per_cell=6)
    fig, ax = plt.subplots(figsize=(10, 4))
    figures.draw_circuit(g, [f"t{i}" for i in range(10)], ax=ax, collapse=False)
    assert fig.get_figheight() > 4
    assert min(t.get_fontsize() for t in ax.texts if t.get_text()) >= figures.book_font(fig) - 1e-9
    plt.close(fig)


def test_edges_take_the_viewer_s_style():
    """Query side solid blue, key side dashed orange, seeds red: the viewer's colours (viewer.css)."""
    from matplotlib.colors import to_rgb

    g = _circuit()
    fig, ax = plt.subplots(figsize=(10, 7))
    figures.draw_circuit(g, [f"t{i}" for i in range(10)], ax=ax, collapse=False)
    from pathlib import Path

    css = (Path(figures.__file__).with_name("viewer_assets") / "viewer.css").read_text(encoding="utf-8")
    for side, var in (("d", "--q"), ("s", "--k"), ("seed", "--seed")):
        colour = figures._EDGE_STYLE[side][0]
        assert f"{var}: {colour};" in css                     # the same colour as the viewer's light theme
        drawn = [p for p in ax.patches if tuple(round(x, 3) for x in p.get_edgecolor()[:3]) ==
                 tuple(round(x, 3) for x in to_rgb(colour))]
        n = sum(d["side"] == side for *_, d in g.edges(data=True))
        assert len(drawn) == n, side
        assert {p.get_linestyle() for p in drawn} == ({"--"} if side == "s" else {"-"})
    plt.close(fig)
