"""Circuit graphs: the :class:`Circuit` container, JSON round trip, comparisons, summaries, and a
layered layout for drawing.

Nodes: ``A{l}.{h}@{d}<{s}`` (attention firing), ``M{l}@{t}`` (MLP), ``E@{t}`` (embedding),
``B{l}@{t}`` (attention-output bias), ``O{l}.{h}@{t}`` (bias offset), ``LOGITS@{t}``. Edge data:
``side`` ("d" query, "s" key, "seed"), ``token``, ``sing`` (singular indices), ``rank``,
``attribution``, ``drop``, ``weight`` (see :mod:`accpp.signals`).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

__all__ = ["STATUSES", "Circuit", "graph_to_json", "graph_from_json", "save_circuit", "load_circuit", "summary",
           "signal_ranks", "layered_positions", "same_graph", "graph_diff", "node_jaccard", "edge_jaccard"]


#: Why a circuit is what it is (``Circuit.status``; set by :meth:`accpp.trace.Tracer.trace`).
STATUSES = {
    "traced": "at least one firing was expanded",
    "negative_logit_diff": "the metric's components sum to <= 0 (the model does not prefer the answer): nothing traced",
    "nonpositive_completeness": "prob seeding: the answer is no more likely than under the bias-only logits",
    "no_head_seed": "no seed is an attention head: nothing to recurse through",
    "tau_cut": "head seeds exist, but none of their firings passes the expansion rule (A_ds >= tau, layer > 0, ...)",
    "truncated": "max_firings stopped the trace before the first firing",
}


@dataclass
class Circuit:
    """A traced circuit: the graph, the prompt's tokens, the metric and how the trace ran."""

    graph: nx.MultiDiGraph
    tokens: list[str]
    logit_diff: float
    seconds: float
    n_firings: int
    meta: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`; "unknown" for a circuit saved before statuses were recorded."""
        return self.meta.get("status", "unknown")

    @property
    def reason(self) -> str:
        """Why the circuit is empty or has no expanded firing ("" when ``status == "traced"``)."""
        return self.meta.get("status_reason", "")

    @property
    def heads(self) -> set[tuple[int, int]]:
        return {(d["layer"], d["head"]) for _, d in self.graph.nodes(data=True) if d["kind"] == "head"}

    def to_json(self) -> dict:
        return dict(graph=graph_to_json(self.graph), tokens=self.tokens, logit_diff=self.logit_diff,
                    seconds=self.seconds, n_firings=self.n_firings, meta=self.meta)

    @classmethod
    def from_json(cls, data: dict) -> "Circuit":
        return cls(graph_from_json(data["graph"]), data["tokens"], data["logit_diff"], data["seconds"],
                   data["n_firings"], data.get("meta", {}))


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


def save_circuit(circuit: Circuit, path) -> Path:
    """Write the circuit as JSON (atomically: a reader never sees a half-written file)."""
    from compendium.atomic import write_text

    return write_text(path, json.dumps(circuit.to_json()))


def load_circuit(path) -> Circuit:
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


def _edge_key(u, v, d) -> tuple:
    return (u, v, d["side"], d["token"], tuple(d["sing"]))


def graph_diff(expected: nx.MultiDiGraph, got: nx.MultiDiGraph, weight_tol: float,
               weight: str = "weight") -> list[str]:
    """Differences between two circuits, as readable lines (empty: the same circuit).

    Topology (nodes, edges with side and token) and singular indices (in their stored order) must
    match exactly; the edge attribute ``weight`` (and the seed edges' values) within ``weight_tol``.
    """
    out = []
    n1, n2 = set(expected.nodes), set(got.nodes)
    out += [f"node missing: {n}" for n in sorted(n1 - n2)] + [f"node added: {n}" for n in sorted(n2 - n1)]
    e1, e2 = Counter(), Counter()
    w1, w2 = {}, {}
    for g, cnt, w in ((expected, e1, w1), (got, e2, w2)):
        for u, v, d in g.edges(data=True):
            k = _edge_key(u, v, d)
            cnt[k] += 1
            w.setdefault(k, []).append(float(d.get(weight, d.get("attribution", 0.0))))
    out += [f"edge missing: {k}" for k in sorted(e1 - e2)] + [f"edge added: {k}" for k in sorted(e2 - e1)]
    for k in sorted(set(e1) & set(e2)):
        if e1[k] != e2[k]:
            continue
        for a, b in zip(sorted(w1[k]), sorted(w2[k])):
            if not abs(a - b) <= weight_tol:
                out.append(f"edge {k}: {weight} {a:.6g} -> {b:.6g} (|diff| {abs(a - b):.2g} > {weight_tol})")
    return out


def node_jaccard(g1: nx.MultiDiGraph, g2: nx.MultiDiGraph) -> float:
    """|N1 & N2| / |N1 | N2| over node ids (1.0 for two empty graphs)."""
    a, b = set(g1.nodes), set(g2.nodes)
    return len(a & b) / len(a | b) if a | b else 1.0


def edge_jaccard(g1: nx.MultiDiGraph, g2: nx.MultiDiGraph, with_sing: bool = False) -> float:
    """Jaccard index of the edge sets (upstream node, downstream node, side), optionally with the
    singular-index sets."""
    def key(g):
        return {(u, v, d["side"]) + ((frozenset(d["sing"]),) if with_sing else ()) for u, v, d in g.edges(data=True)}

    a, b = key(g1), key(g2)
    return len(a & b) / len(a | b) if a | b else 1.0


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


#: Node kinds of a traced circuit graph.
KINDS = ("head", "mlp", "emb", "bias", "offset", "logits")


def component_name(d) -> str:
    """Position-free name of a node's component: ``A5.3``, ``M12``, ``E``, ``B5``, ``O5.3``, ``LOGITS``."""
    kind = d["kind"]
    if kind == "head":
        return f"A{d['layer']}.{d['head']}"
    if kind == "mlp":
        return f"M{d['layer']}"
    if kind == "emb":
        return "E"
    if kind == "bias":
        return f"B{d['layer']}"
    if kind == "offset":
        return f"O{d['layer']}.{d['head']}"
    if kind == "logits":
        return "LOGITS"
    raise ValueError(f"unknown node kind {kind!r}; known: {', '.join(KINDS)}")
