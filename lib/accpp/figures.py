"""Figures for the ACC++ notebooks (compute first, plot second)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import networkx as nx

from accpp.graph import layered_positions, signal_ranks

__all__ = ["draw_circuit", "rank_histogram"]

_COLORS = {"head": "#4C72B0", "mlp": "#DD8452", "emb": "#55A868", "bias": "#8172B3", "offset": "#937860",
           "logits": "#C44E52"}


def draw_circuit(g: nx.MultiDiGraph, tokens: list[str], ax=None, title: str = ""):
    """Layered drawing: x = token position, y = layer; edge colour = query ('d') or key ('s') side."""
    ax = ax or plt.subplots(figsize=(11, 7))[1]
    pos = layered_positions(g)
    for side, color, style in (("d", "#1f77b4", "-"), ("s", "#2ca02c", "--"), ("seed", "#C44E52", "-")):
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["side"] == side]
        nx.draw_networkx_edges(g, pos, edgelist=edges, ax=ax, edge_color=color, style=style, alpha=0.5,
                               arrows=True, arrowsize=6, width=0.8, node_size=60)
    for kind, color in _COLORS.items():
        nodes = [n for n, d in g.nodes(data=True) if d["kind"] == kind]
        nx.draw_networkx_nodes(g, pos, nodelist=nodes, ax=ax, node_color=color, node_size=60, label=kind)
    heads = {n: f"{d['layer']}.{d['head']}" for n, d in g.nodes(data=True) if d["kind"] == "head"}
    nx.draw_networkx_labels(g, {n: (x, y + 0.25) for n, (x, y) in pos.items() if n in heads}, labels=heads,
                            font_size=6, ax=ax)
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels([t.replace("\n", "\\n") for t in tokens], rotation=60, fontsize=7)
    ax.tick_params(left=True, labelleft=True, bottom=True, labelbottom=True)
    ax.set_ylabel("layer")
    ax.legend(fontsize=7, loc="upper left", ncols=3)
    ax.set_title(title, fontsize=9)
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
