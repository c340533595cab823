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
