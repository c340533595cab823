"""Figures for the ACC++ notebooks (compute first, plot second).

:func:`draw_circuit` draws a traced circuit as the interactive viewer does (``accpp.viewer``):
x = layer (one column per layer the circuit uses; the embedding at the left, the logits at the
right), y = token position (one band per position used, the prompt's token as the band's label).
Inside a band, nodes share a row only when their columns leave room for a label between them,
so no two nodes share a place and no labels overlap; a head firing from two sources at one
position is labelled with each source (``26.2\u21903``). By default MLP and embedding nodes, the
leaves that dominate a circuit by number, are collapsed into one node per layer (``M5``, ``E``)
in a band of their own at the bottom, their edges merged. Edges and nodes take the viewer's
colours: query side solid blue, key side dashed orange, seeds red.

Every text is legible where the figure is read, the book's text column (:data:`BOOK_WIDTH_PX`
wide): no font is smaller than :func:`book_font` (:data:`BOOK_MIN_PX` pixels once the figure is
scaled to that width). The label font is as large as the rows allow (``max_font`` at most); when
the rows do not fit at the smallest legible font, the figure grows taller instead.
"""
from __future__ import annotations

import math
from collections import defaultdict

import matplotlib.pyplot as plt
import networkx as nx

from accpp.graph import KINDS, signal_ranks

__all__ = ["draw_circuit", "circuit_layout", "collapse_leaves", "rank_histogram", "book_font"]

# the viewer's colours (viewer_assets/viewer.css: node borders, edge sides)
_COLORS = {"head": "#3a6aa8", "mlp": "#c8702a", "emb": "#4b8f4b", "bias": "#7a64a8", "offset": "#7a64a8",
           "logits": "#b03a2e"}
_EDGE_STYLE = {"d": ("#1f6fd1", "-", "query side (d)"), "s": ("#e07b00", "--", "key side (s)"),
               "seed": ("#c0392b", "-", "seed")}
#: the book's text column, in CSS pixels, where figures are shown scaled to its width
BOOK_WIDTH_PX = 688
#: the smallest text, in CSS pixels at that width, that a figure may carry
BOOK_MIN_PX = 8.5
_SUB = {"offset": 0, "head": 1, "bias": 2, "mlp": 3, "emb": 4, "logits": 5}
LEAVES = "leaves"  # the band of collapsed MLP and embedding nodes
MIN_FONT = 5.0


def book_font(fig) -> float:
    """The smallest font (points) of ``fig`` that is :data:`BOOK_MIN_PX` pixels high once the figure
    is shown :data:`BOOK_WIDTH_PX` pixels wide."""
    return BOOK_MIN_PX * 72.0 * fig.get_figwidth() / BOOK_WIDTH_PX


def collapse_leaves(g: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """A copy of ``g`` with its MLP nodes merged into one node per layer (``agg:M5``) and its
    embedding nodes into one (``agg:E``); parallel edges of the same side between the same nodes
    are merged, their weights summed."""
    def key(n):
        d = g.nodes[n]
        if d["kind"] == "mlp":
            return f"agg:M{d['layer']}"
        if d["kind"] == "emb":
            return "agg:E"
        return n

    out = nx.MultiDiGraph()
    for n, d in g.nodes(data=True):
        k = key(n)
        if k == n:
            out.add_node(n, **d)
        elif k not in out:
            out.add_node(k, kind=d["kind"], layer=d.get("layer", -1), dest=None, collapsed=0)
        if k != n:
            out.nodes[k]["collapsed"] += 1
    merged: dict[tuple, dict] = {}
    for u, v, d in g.edges(data=True):
        ku, kv, side = key(u), key(v), d.get("side")
        if (ku, kv) == (u, v):
            out.add_edge(u, v, **d)
            continue
        m = merged.setdefault((ku, kv, side), {"side": side, "weight": 0.0, "n_merged": 0})
        m["weight"] += float(d.get("weight") or 0.0)
        m["n_merged"] += 1
    for (ku, kv, _), d in merged.items():
        out.add_edge(ku, kv, **d)
    return out


def circuit_layout(g: nx.MultiDiGraph, spacing: int = 1):
    """(positions, columns, rows) of the layered drawing (see the module docstring).

    Inside a band, nodes share a row only when their columns are at least ``spacing`` apart (room
    for a label beside each). ``positions``: node -> (x, y), x the column index, y the row (0 at
    the top); ``columns``: the layers in column order (-1: embedding, ``n_layers``: logits);
    ``rows``: a list of (band, first row, number of rows), band a token position or ``LEAVES``.
    """
    if spacing < 1:
        raise ValueError(f"spacing must be a positive number of columns, got {spacing!r}")
    for n, d in g.nodes(data=True):
        if d.get("kind") not in KINDS:
            raise ValueError(f"node {n!r}: 'kind' must be one of {', '.join(KINDS)}; got {d.get('kind')!r}")
    n_layers = max([int(d["layer"]) for _, d in g.nodes(data=True) if d["kind"] == "logits"] or
                   [int(d["layer"]) + 1 for _, d in g.nodes(data=True) if d["kind"] != "emb"] or [0])

    def column_layer(d):
        return -1 if d["kind"] == "emb" else n_layers if d["kind"] == "logits" else int(d["layer"])

    def band(n, d):
        if str(n).startswith("agg:") or d.get("dest") is None:
            return LEAVES
        return int(d["dest"])

    layers = sorted({column_layer(d) for _, d in g.nodes(data=True)})
    col = {layer: i for i, layer in enumerate(layers)}
    by_band: dict = defaultdict(list)
    for n, d in g.nodes(data=True):
        by_band[band(n, d)].append(n)
    bands = sorted(b for b in by_band if b != LEAVES) + ([LEAVES] if LEAVES in by_band else [])
    pos, rows, top = {}, [], 0
    for b in bands:
        nodes = sorted(by_band[b], key=lambda n: (col[column_layer(g.nodes[n])], _SUB.get(g.nodes[n]["kind"], 9),
                                                  g.nodes[n].get("head") or 0, g.nodes[n].get("src") or 0, str(n)))
        last: list[int] = []  # per row: the column of its rightmost node
        for n in nodes:  # first fit, left to right: the fewest rows for this spacing
            c = col[column_layer(g.nodes[n])]
            r = next((i for i, lc in enumerate(last) if c - lc >= spacing), None)
            if r is None:
                r = len(last)
                last.append(c)
            last[r] = c
            pos[n] = (c, top + r)
        rows.append((b, top, len(last)))
        top += len(last)
    return pos, layers, rows


def _label(n, d) -> str:
    kind = d["kind"]
    if str(n).startswith("agg:"):
        return str(n)[4:]
    if kind == "head":
        return f"{d['layer']}.{d['head']}"
    if kind == "offset":
        return f"o{d['layer']}.{d['head']}"
    return {"mlp": f"M{d.get('layer')}", "emb": "E", "bias": f"B{d.get('layer')}", "logits": "logit"}[kind]


def draw_circuit(g: nx.MultiDiGraph, tokens: list[str], ax=None, title: str = "", *, collapse: bool = True,
                 max_font: float = 10.0):
    """Layered drawing (x = layer, y = token position; module docstring); edge colour and style as
    in the viewer: query side ('d', solid blue), key side ('s', dashed orange), seed (red).
    ``collapse`` merges MLP and embedding nodes into one node per layer (bottom band). Every text is
    at least :func:`book_font` points; the figure grows taller when the rows need it. Returns the axes."""
    if collapse:
        g = collapse_leaves(g)
    n_cols = len({(-1 if d["kind"] == "emb" else d.get("layer")) for _, d in g.nodes(data=True)}) or 1
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, min(10.0, 0.6 * n_cols + 2.5)), 7.0))
    fig = ax.figure
    small = book_font(fig)
    max_font = max(max_font, small)
    box = ax.get_window_extent()
    height_pt, width_pt = box.height * 72 / fig.dpi, box.width * 72 / fig.dpi
    col_pt = width_pt / (n_cols + 0.4)
    labels = {n: _label(n, d) for n, d in g.nodes(data=True)}
    seen: dict = defaultdict(list)  # a head firing twice at one position (two sources): name the source
    for n, d in g.nodes(data=True):
        if d["kind"] == "head":
            seen[(labels[n], d.get("dest"))].append(n)
    for same in seen.values():
        if len(same) > 1:
            for n in same:
                labels[n] += f"\u2190{g.nodes[n].get('src')}"
    chars = max(map(len, labels.values()), default=1)

    def fit(f):
        spacing = max(1, math.ceil((chars * 0.62 * f + 1.6 * f) / col_pt))
        pos, layers, rows = circuit_layout(g, spacing)
        return pos, layers, rows, sum(h for *_, h in rows) or 1

    # the largest legible font whose labels fit beside their nodes and whose rows fit the axes' height
    steps = int((max_font - small) / 0.5) + 1
    for f in [max_font - 0.5 * i for i in range(steps)]:
        pos, layers, rows, n_rows = fit(f)
        if 1.25 * f <= height_pt / (n_rows + 0.6):
            font = f
            break
    else:  # the rows do not fit at the smallest legible font: the figure grows taller
        font = small
        pos, layers, rows, n_rows = fit(font)
        need_pt = 1.25 * font * (n_rows + 0.6)
        fig.set_figheight(fig.get_figheight() * need_pt / height_pt)
    node_size = (0.8 * font) ** 2

    for i, (_, top, h) in enumerate(rows):  # alternate band shading
        if i % 2:
            ax.axhspan(top - 0.5, top + h - 0.5, color="0.95", zorder=0, lw=0)
    widths = [float(d.get("weight") or 0.0) for *_, d in g.edges(data=True)]
    wmax = max(widths) if widths and max(widths) > 0 else 1.0
    for side, (color, style, label) in _EDGE_STYLE.items():
        edges = [(u, v, d) for u, v, d in g.edges(data=True) if d.get("side") == side]
        if not edges:
            continue
        for leaf, alpha in ((False, 0.55), (True, 0.2)):  # edges from collapsed leaves drawn light
            part = [(u, v, d) for u, v, d in edges if str(u).startswith("agg:") == leaf]
            if part:
                nx.draw_networkx_edges(g, pos, edgelist=[(u, v) for u, v, _ in part], ax=ax, edge_color=color,
                                       style=style, alpha=alpha, arrows=True, arrowsize=6, node_size=node_size,
                                       width=[0.5 + 1.8 * float(d.get("weight") or 0.0) / wmax for *_, d in part])
        ax.plot([], [], color=color, ls=style, lw=1.6, label=label)
    for kind, color in _COLORS.items():
        nodes = [n for n, d in g.nodes(data=True) if d["kind"] == kind]
        if nodes:
            nx.draw_networkx_nodes(g, pos, nodelist=nodes, ax=ax, node_color=color, node_size=node_size,
                                   label={"mlp": "MLP", "emb": "embedding"}.get(kind, kind))
    for n in g.nodes:
        x, y = pos[n]
        ax.text(x + 0.12, y, labels[n], fontsize=font, va="center", ha="left", zorder=5, clip_on=False)

    has_logits = any(d["kind"] == "logits" for _, d in g.nodes(data=True))
    names = ["E" if l < 0 else "out" if has_logits and l == layers[-1] else str(l) for l in layers]
    tick_font = max(small, min(9.0, 0.5 * col_pt))
    every = max(1, math.ceil(0.62 * tick_font * max(map(len, names)) * 1.6 / col_pt))  # room for each label
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels([t if i % every == 0 or t in ("E", "out") else "" for i, t in enumerate(names)],
                       fontsize=tick_font)
    yticks, ylabels = [], []
    for b, top, h in rows:
        yticks.append(top + (h - 1) / 2)
        if b == LEAVES:
            ylabels.append("MLP / emb\n(all positions)" if collapse else "leaves")
        else:
            tok = tokens[b].replace("\n", "\\n") if tokens is not None and 0 <= b < len(tokens) else ""
            ylabels.append(f"{tok} [{b}]".strip())
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=max(small, min(9.0, font)))
    ax.set_xlim(-0.4, len(layers) - 0.4)
    ax.set_ylim(n_rows - 0.4, -0.6)
    ax.grid(False)
    ax.tick_params(left=True, labelleft=True, bottom=True, labelbottom=True)
    ax.set_xlabel("layer (E: embedding, out: logits)", fontsize=max(small, 10.0))
    ax.set_ylabel("token position", fontsize=max(small, 10.0))
    ax.legend(fontsize=max(small, 7.0), loc="upper center", bbox_to_anchor=(0.5, -0.09), ncols=4, frameon=False)
    ax.set_title(title, fontsize=max(small, 9.0))
    return ax


def rank_histogram(graphs: list[nx.MultiDiGraph], ax=None, title: str = ""):
    ranks = [r for g in graphs for r in signal_ranks(g)]
    ax = ax or plt.subplots(figsize=(5, 3))[1]
    top = max(ranks) if ranks else 1
    ax.hist(ranks, bins=range(1, top + 2), align="left", rwidth=0.8)
    ax.set_xlabel("signal rank (singular directions kept)")
    ax.set_ylabel("signal edges")
    ax.set_title(title, fontsize=9)
    return ax
