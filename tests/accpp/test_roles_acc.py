"""IOI role rule, and the ACC baseline on a tiny model."""
from __future__ import annotations

import networkx as nx

from accpp.roles import ROLES, circuit_roles, firing_role, merge_roles, roles_table

POS = {"IO": 2, "S1": 4, "S2": 10, "S1+1": 5, "END": 14}


def test_firing_roles():
    assert firing_role(14, 2, POS) == "name mover"
    assert firing_role(14, 10, POS) == "S-inhibition"
    assert firing_role(10, 5, POS) == "induction"
    assert firing_role(10, 4, POS) == "duplicate-token"
    assert firing_role(7, 6, POS) == "previous-token"
    assert firing_role(14, 0, POS) is None


def test_circuit_roles_and_table():
    g = nx.MultiDiGraph()
    for i, (l, h, d, s) in enumerate([(9, 9, 14, 2), (7, 3, 14, 10), (5, 5, 10, 5), (0, 1, 10, 4), (2, 2, 5, 4),
                                      (3, 3, 12, 0)]):
        g.add_node(f"n{i}", kind="head", layer=l, head=h, dest=d, src=s)
    g.add_node("m", kind="mlp", layer=1, head=-1, dest=3, src=-1)
    r = circuit_roles(g, POS)
    assert all(r[k] for k in ROLES) and r["other"] == ["3.3"]
    merged = merge_roles([r, {"name mover": ["10.0", "9.9"]}])
    assert merged["name mover"] == ["9.9", "10.0"]
    assert all(row["present"] for row in roles_table(merged, "m"))


def test_acc_baseline_runs_and_is_larger_or_equal():
    from accpp.acc import acc_trace
    from accpp.testing import float64_exact, random_prompt, tiny_model
    from accpp.trace import TraceConfig, Tracer

    with float64_exact():
        tracer = Tracer(tiny_model("llama", seed=3), config=TraceConfig())
        ids = random_prompt(12, seed=5)
        a = acc_trace(tracer, ids, 7, 11)
        c = tracer.trace(ids, 7, 11)
    assert a.graph.number_of_nodes() >= 1 and c.graph.number_of_nodes() >= 1
    for u, v, d in a.graph.edges(data=True):
        assert d["side"] in ("d", "s", "seed")
