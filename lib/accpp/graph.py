"""Circuit graphs: JSON round trip, summaries, a layered layout for drawing."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import networkx as nx

__all__ = ["graph_to_json", "graph_from_json", "save_circuit", "load_circuit", "summary", "signal_ranks",
           "layered_positions", "same_graph"]


def graph_to_json(g: nx.MultiDiGraph) -> dict:
    nodes = [dict(id=n, **d) for n, d in g.nodes(data=True)]
    edges = [dict(source=u, target=v, **d) for u, v, d in g.edges(data=True)]
    return dict(nodes=nodes, edges=edges)


def graph_from_json(data: dict) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    for nd in data["nodes"]:
        nd = dict(nd)
        g.add_node(nd.pop("id"), **nd)
    for ed in data["edges"]:
        ed = dict(ed)
        g.add_edge(ed.pop("source"), ed.pop("target"), **ed)
    return g


def save_circuit(circuit, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(circuit.to_json()), encoding="utf-8")
    tmp.replace(path)
    return path


def load_circuit(path):
    from accpp.trace import Circuit

    return Circuit.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def summary(g: nx.MultiDiGraph) -> dict:
    kinds = Counter(d["kind"] for _, d in g.nodes(data=True))
    heads = {(d["layer"], d["head"]) for _, d in g.nodes(data=True) if d["kind"] == "head"}
    signal_edges = [d for *_, d in g.edges(data=True) if d["side"] in ("d", "s")]
    return dict(nodes=g.number_of_nodes(), edges=g.number_of_edges(), signal_edges=len(signal_edges),
                heads=len(heads), **{f"nodes_{k}": v for k, v in sorted(kinds.items())})


def signal_ranks(g: nx.MultiDiGraph) -> list[int]:
    return [d["rank"] for *_, d in g.edges(data=True) if d["side"] in ("d", "s")]


def same_graph(g1: nx.MultiDiGraph, g2: nx.MultiDiGraph, atol: float = 1e-9) -> bool:
    """Same nodes, same edges with the same singular indices and (to atol) the same weights."""
    if set(g1.nodes) != set(g2.nodes):
        return False

    def key(g):
        return sorted((u, v, d["side"], d["token"], tuple(d["sing"]), round(d["attribution"] / atol) * atol)
                      for u, v, d in g.edges(data=True))

    k1, k2 = key(g1), key(g2)
    return len(k1) == len(k2) and all(a[:5] == b[:5] and abs(a[5] - b[5]) <= 10 * atol for a, b in zip(k1, k2))


def layered_positions(g: nx.MultiDiGraph) -> dict:
    """x = token position, y = layer (embedding at the bottom, logits on top); ties spread."""
    pos, slots = {}, Counter()
    for n, d in sorted(g.nodes(data=True), key=lambda x: str(x[0])):
        layer = d.get("layer", -1)
        y = -1 if d["kind"] == "emb" else layer + (0.5 if d["kind"] == "mlp" else 0.0)
        x = d.get("dest", 0)
        k = (x, y)
        pos[n] = (x + 0.18 * slots[k], y)
        slots[k] += 1
    return pos
