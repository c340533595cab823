"""accpp.ioi_inputs on stand-ins: the representative-prompt rule, the name-pair null's draws and
circuits, the ACC rows and the variant Jaccard, each against the notebook's inline code as it stood
(accpp/01_ioi at 246e9e8) where that code is a few lines."""
import random
from types import SimpleNamespace

import networkx as nx
import pandas as pd
import pytest
import torch

from accpp import ioi_inputs, roles
from accpp.multilingual import component_set, jaccard


def prompt(order, i, io_id=7, s_id=8):
    pos = {"IO": 1, "S1": 2, "S2": 4, "S1+1": 3, "END": 5}
    return SimpleNamespace(order=order, name=f"{order}{i}", io_id=io_id, s_id=s_id, pos=pos,
                           ids=lambda: torch.tensor([1, io_id, s_id, 2, s_id, 3]))


def test_representative_prompts_alternate_correct_abba_and_baba_in_order():
    ps = [prompt("ABBA", 0), prompt("ABBA", 1), prompt("BABA", 0), prompt("ABBA", 2), prompt("BABA", 1),
          prompt("BABA", 2), prompt("ABBA", 3)]
    ld = [1.0, -0.5, 2.0, 0.3, 0.0, 4.0, 1.0]      # ABBA1 wrong, BABA1 not solved (0 is not > 0)
    chosen = ioi_inputs.representative_prompts(ps, ld, 10)
    assert [p.name for p in chosen] == ["ABBA0", "BABA0", "ABBA2", "BABA2"]   # stops when BABA runs out
    assert [p.name for p in ioi_inputs.representative_prompts(ps, ld, 3)] == ["ABBA0", "BABA0", "ABBA2"]
    # the notebook's inline rule
    good = [p for p, d in zip(ps, ld) if d > 0]
    abba, baba = [p for p in good if p.order == "ABBA"], [p for p in good if p.order == "BABA"]
    assert chosen == [p for pair in zip(abba, baba) for p in pair][:10]
    with pytest.raises(ValueError, match="7 prompts but 6 logit differences"):
        ioi_inputs.representative_prompts(ps, ld[:-1], 3)


class FakeTokenizer:
    names = {" Ann": 20, " Bob": 21, " Cid": 22, " Dee": 23, " Eve": 24}


class FakeTracer:
    """trace() records its metric pair and returns a graph with one name-mover seed firing (END <- IO)."""

    def __init__(self):
        self.calls = []

    def trace(self, ids, a, b):
        self.calls.append((a, b))
        g = nx.MultiDiGraph()
        g.add_node("LOGITS@5", kind="logits", layer=2, head=-1, dest=5, src=-1)
        g.add_node("A1.0@5<1", kind="head", layer=1, head=0, dest=5, src=1)
        g.add_edge("A1.0@5<1", "LOGITS@5", side="seed")
        return SimpleNamespace(graph=g)


def test_name_pair_null_draws_other_names_from_one_seeded_generator(monkeypatch):
    from accpp import datasets

    monkeypatch.setattr(datasets, "single_token_names", lambda tok: list(tok.names))
    monkeypatch.setattr(datasets, "name_token", lambda tok, n: tok.names[n])
    ps = [prompt("ABBA", 0, io_id=20, s_id=21), prompt("BABA", 0, io_id=22, s_id=23), prompt("ABBA", 1)]
    tracer = FakeTracer()
    sets = ioi_inputs.name_pair_null(tracer, ps, FakeTokenizer(), 2, seed=5)
    assert len(sets) == 2 and all(s["name mover"] for s in sets)
    # the notebook's inline loop, same draws
    rng = random.Random(5)
    expected = [roles.null_name_pair(p.ids().tolist(), p.io_id, p.s_id, list(FakeTokenizer.names.values()), rng)
                for p in ps[:2]]
    assert tracer.calls == expected
    assert all(a not in (20, 21) and b not in (20, 21) for a, b in tracer.calls[:1])   # never the prompt's names


def graph(nodes, edges):
    g = nx.MultiDiGraph()
    for n in nodes:
        g.add_node(n, kind="head", layer=0, head=0, dest=0, src=0)
    for u, v, side in edges:
        g.add_edge(u, v, side=side)
    return g


def test_acc_comparison_counts_both_acc_forms_and_their_ratios():
    ps = [prompt("ABBA", 0), prompt("BABA", 0), prompt("ABBA", 1)]
    circuits = [SimpleNamespace(graph=graph("abcd", []), n_firings=3), SimpleNamespace(graph=graph("ab", []), n_firings=1),
                SimpleNamespace(graph=graph("a", []), n_firings=9)]
    seen = []

    def fake_acc(tracer, ids, io, s, config=None):
        seen.append(config)
        n = 6 if config is None else 10
        return SimpleNamespace(graph=graph(range(n), []), n_firings=n - 1, meta={"truncated": config is not None},
                               seconds=0.5)

    t = ioi_inputs.acc_comparison(None, ps, circuits, 2, acc=fake_acc)
    assert list(t.order) == ["ABBA", "BABA"] and list(t.accpp_nodes) == [4, 2]
    assert list(t.ratio) == [1.5, 3.0] and list(t.legacy_ratio) == [2.5, 5.0]
    assert list(t.acc_truncated) == [False, False] and list(t.legacy_truncated) == [True, True]
    assert seen[0] is None and seen[1] is not None and seen[1].select_singular is False   # ACCConfig.legacy()


def test_variant_comparison_jaccards():
    ps = [prompt("ABBA", 0)]
    c = SimpleNamespace(graph=graph(["A0.0@5<1", "A1.0@5<2", "M0@3"], [("A0.0@5<1", "A1.0@5<2", "d")]))
    c2 = SimpleNamespace(graph=graph(["A0.0@5<1", "A1.0@5<2"], [("A0.0@5<1", "A1.0@5<2", "s")]))
    t = ioi_inputs.variant_comparison(None, ps, [c], 1, trace=lambda tr, p: c2)
    row = t.iloc[0]
    assert (row.nodes_authors, row.nodes_per_position) == (3, 2)
    assert row.node_jaccard == pytest.approx(2 / 3) and row.edge_jaccard == 0.0   # same edge, other side
    assert row.component_jaccard == jaccard(component_set(c.graph), component_set(c2.graph))
    assert isinstance(t, pd.DataFrame) and list(t.order) == ["ABBA"]
