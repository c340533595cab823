"""IOI role rule, and the ACC baseline on a tiny model."""
from __future__ import annotations

import networkx as nx

import random

import pytest
import torch

from accpp.roles import ROLES, circuit_roles, firing_role, merge_roles, null_name_pair, role_count, roles_table

POS = {"IO": 2, "S1": 4, "S2": 10, "S1+1": 5, "END": 14}


def test_firing_roles():
    assert firing_role(14, 2, POS) == "name mover"
    assert firing_role(14, 2, POS, is_seed=False) is None  # a name mover must write the answer
    assert firing_role(14, 10, POS) == "S-inhibition"
    assert firing_role(10, 5, POS) == "induction"
    assert firing_role(10, 4, POS) == "duplicate-token"
    assert firing_role(5, 4, POS) == "previous-token"  # S1+1 <- S1
    assert firing_role(7, 6, POS) is None  # any other t <- t-1 is not the IOI previous-token role
    assert firing_role(14, 0, POS) is None


def _graph(firings, seeds=()):
    g = nx.MultiDiGraph()
    g.add_node("LOGITS@14", kind="logits", layer=12, head=-1, dest=14, src=-1)
    for i, (l, h, d, s) in enumerate(firings):
        g.add_node(f"n{i}", kind="head", layer=l, head=h, dest=d, src=s)
    for i in seeds:
        g.add_edge(f"n{i}", "LOGITS@14", side="seed")
    g.add_node("m", kind="mlp", layer=1, head=-1, dest=3, src=-1)
    return g


def test_circuit_roles_and_table():
    firings = [(9, 9, 14, 2), (7, 3, 14, 10), (5, 5, 10, 5), (0, 1, 10, 4), (2, 2, 5, 4), (3, 3, 12, 0), (4, 4, 8, 7)]
    r = circuit_roles(_graph(firings, seeds=[0]), POS)
    assert all(r[k] for k in ROLES) and r["other"] == ["3.3", "4.4"]
    assert role_count(_graph(firings, seeds=[0]), POS) == 5
    no_seed = circuit_roles(_graph(firings, seeds=[]), POS)
    assert "name mover" not in no_seed and "9.9" in no_seed["other"]
    assert role_count(_graph(firings, seeds=[]), POS) == 4
    merged = merge_roles([r, {"name mover": ["10.0", "9.9"]}])
    assert merged["name mover"] == ["9.9", "10.0"]
    assert all(row["present"] for row in roles_table(merged, "m"))
    with pytest.raises(ValueError, match="S1\\+1"):
        circuit_roles(_graph(firings), {k: v for k, v in POS.items() if k != "S1+1"})


def test_null_name_pair():
    rng = random.Random(0)
    pairs = {null_name_pair([1, 2, 3, 4], 2, 3, range(1, 12), rng) for _ in range(50)}
    assert all(a != b and a not in (1, 2, 3, 4) and b not in (1, 2, 3, 4) for a, b in pairs)
    assert len(pairs) > 10
    assert null_name_pair([1, 2], 1, 2, range(10), random.Random(3)) == null_name_pair([1, 2], 1, 2, range(10),
                                                                                          random.Random(3))
    with pytest.raises(ValueError, match="two names outside the prompt"):
        null_name_pair([1, 2, 3], 1, 2, [1, 2, 3, 4], rng)


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


# ---------------------------------------------------------------- ACC: the authors' definition

def test_top_share_authors_cut_keeps_ties_and_legacy_prefix():
    from accpp.acc import top_share

    c = torch.tensor([1.0, 3.0, 2.0, 2.0, -1.0])  # total 7, 0.7 * 7 = 4.9
    # sorted 3, 2, 2, 1, -1; cumulative 3, 5 > 4.9 -> cut value 2 -> keep every contributor >= 2
    assert sorted(top_share(c, 7.0).tolist()) == [1, 2, 3]
    assert sorted(top_share(c, 7.0, ties=False).tolist()) in ([1, 2], [1, 3])  # shortest prefix reaching 4.9
    assert top_share(c, 0.0).numel() == 0 and top_share(c, -1.0).numel() == 0


def test_select_singular_is_the_shortest_prefix_reaching_the_total():
    from accpp.acc import select_singular

    c = torch.tensor([3.0, -1.0, 2.0, 0.5])  # total 4.5; sorted 3, 2 -> 5 >= 4.5
    assert sorted(select_singular(c).tolist()) == [0, 2]
    assert sorted(select_singular(torch.tensor([1.0, 1.0, 1.0])).tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="nothing to select"):
        select_singular(torch.tensor([-1.0, 0.5]))


@pytest.fixture(scope="module")
def acc_setup(exact):
    from accpp.signals import FiringSolver
    from accpp.testing import random_prompt, tiny_model
    from accpp.trace import TraceConfig, Tracer

    tracer = Tracer(tiny_model("llama", seed=3), config=TraceConfig())
    ids = random_prompt(12, seed=5)
    dec = tracer.decompose(ids)
    return tracer, ids, dec, FiringSolver(dec, tracer.svd)


@pytest.mark.parametrize("firing", [(2, 1, 10, 3), (1, 0, 11, 7), (2, 3, 6, 6)])
def test_acc_contributions_sum_to_the_comparative_score(acc_setup, firing):
    """Both sides' contributors sum to the score that ACC splits: S_ds - mean_{s' != s} S_ds' on the
    kept directions (comparative), S_ds itself (legacy)."""
    from accpp.acc import ACCConfig, _firing_contributors, select_singular

    tracer, ids, dec, solver = acc_setup
    L, a, d, s = firing
    S, J, alpha, beta = solver.scores(L, a, d)
    i = int(s - J[0])
    comp = float(S[i] - (S.sum() - S[i]) / (len(J) - 1))
    lw = tracer.arch.layers[L]
    c_k = lw.scale * solver.svd.S[L, a] * alpha * (beta[i] - (beta.sum(0) - beta[i]) / (len(J) - 1))
    assert float(c_k.sum()) == pytest.approx(comp, rel=1e-10)
    full = _firing_contributors(solver, tracer.arch, ACCConfig(select_singular=False), L, a, d, s)
    if comp <= 0:
        assert full == []
    else:
        for side, tok, contrib, lab, K in full:
            assert float(contrib.sum()) == pytest.approx(comp, rel=1e-9), side
            assert lab.shape[0] == contrib.shape[0] and len(K) == tracer.arch.d_head
        sel = _firing_contributors(solver, tracer.arch, ACCConfig(), L, a, d, s)
        K = sorted(select_singular(c_k).tolist())
        for side, tok, contrib, lab, K_ in sel:
            assert K_ == K and len(K) < tracer.arch.d_head
            assert float(contrib.sum()) == pytest.approx(float(c_k[K].sum()), rel=1e-9)
            assert float(c_k[K].sum()) >= comp * (1 - 1e-12)
    legacy = _firing_contributors(solver, tracer.arch, ACCConfig.legacy(), L, a, d, s)
    for side, tok, contrib, lab, K in legacy:
        assert float(contrib.sum()) == pytest.approx(float(S[i]), rel=1e-9)
        assert tok == (d if side == "d" else s)


def test_acc_trace_records_config_and_truncation(acc_setup):
    from accpp.acc import ACCConfig, acc_trace

    tracer, ids, dec, solver = acc_setup
    for cfg in (ACCConfig(), ACCConfig.legacy()):
        c = acc_trace(tracer, ids, 7, 11, config=cfg)
        assert c.meta["config"]["comparative"] == cfg.comparative and c.meta["truncated"] is False
        assert all(d["side"] in ("d", "s", "seed") for *_, d in c.graph.edges(data=True))
        for u, v, d in c.graph.edges(data=True):
            if d["side"] == "s":  # key-side heads from sources after s are never added
                nu, nv = c.graph.nodes[u], c.graph.nodes[v]
                assert nu["kind"] != "head" or nu["src"] <= nv["src"]
    full = acc_trace(tracer, ids, 7, 11, config=ACCConfig.legacy())
    if full.n_firings >= 2:
        cut = acc_trace(tracer, ids, 7, 11, config=ACCConfig.legacy(max_firings=1))
        assert cut.meta["truncated"] is True and cut.n_firings == 1
    with pytest.raises(ValueError, match="max_firings"):
        ACCConfig(max_firings=0)
