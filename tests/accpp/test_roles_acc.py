"""IOI role rule, and the ACC baseline on a tiny model."""
from __future__ import annotations

import networkx as nx

import random
import statistics

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
    for *_, d in a.graph.edges(data=True):
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
        for side, _tok, contrib, lab, K in full:
            assert float(contrib.sum()) == pytest.approx(comp, rel=1e-9), side
            assert lab.shape[0] == contrib.shape[0] and len(K) == tracer.arch.d_head
        sel = _firing_contributors(solver, tracer.arch, ACCConfig(), L, a, d, s)
        K = sorted(select_singular(c_k).tolist())
        for _side, _tok, contrib, _lab, K_ in sel:
            assert K_ == K and len(K) < tracer.arch.d_head
            assert float(contrib.sum()) == pytest.approx(float(c_k[K].sum()), rel=1e-9)
            assert float(c_k[K].sum()) >= comp * (1 - 1e-12)
    legacy = _firing_contributors(solver, tracer.arch, ACCConfig.legacy(), L, a, d, s)
    for side, tok, contrib, _lab, _K in legacy:
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


# ---------------------------------------------------------------- the size-matched null

NULL_POS = {"IO": 1, "S1": 2, "S1+1": 3, "S2": 5, "END": 6}
# roles at NULL_POS: name mover (6, 1), S-inhibition (6, 5), induction (5, 3), duplicate-token (5, 2),
# previous-token (3, 2)
NULL_POOL = {0: [(0, 6, 1), (1, 5, 2), (0, 4, 4), (1, 4, 0)],   # a name mover and a duplicate-token firing of 4
             1: [(0, 6, 1), (1, 6, 5), (2, 3, 2)]}              # name mover, S-inhibition, previous-token of 3


def test_firing_pool_keeps_the_firings_that_pass_the_tracers_attention_rule():
    from accpp.roles import firing_pool

    attn = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    # tau(d) = min(1, 2.5 / (d + 1)): 1, 1, 0.8333, 0.625
    attn[0, 0, 0, 0], attn[0, 0, 1, :2] = 1.0, torch.tensor([0.5, 0.5])
    attn[0, 0, 2, :3] = torch.tensor([0.1, 0.05, 0.85])
    attn[0, 0, 3] = torch.tensor([0.0, 0.625, 0.3, 0.075])        # exactly at tau: kept
    attn[0, 1, 0, 0], attn[0, 1, 1, :2] = 1.0, torch.tensor([0.0, 1.0])
    attn[0, 1, 2, :3] = torch.tensor([0.2, 0.2, 0.6])
    attn[0, 1, 3] = torch.tensor([0.624, 0.3, 0.05, 0.026])       # just below tau: left out
    assert firing_pool(attn) == {0: [(0, 0, 0), (0, 2, 2), (0, 3, 1), (1, 0, 0), (1, 1, 1)]}
    # a sliding window of 2: d sees d - 1 and d only, so tau is 1 from d = 1 on
    assert firing_pool(attn, [2]) == {0: [(0, 0, 0), (1, 0, 0), (1, 1, 1)]}
    # a source after the destination is never a firing, whatever the tensor holds there
    attn[0, 0, 1, 3] = 1.0
    assert firing_pool(attn)[0] == [(0, 0, 0), (0, 2, 2), (0, 3, 1), (1, 0, 0), (1, 1, 1)]
    with pytest.raises(ValueError, match=r"\(L, H, T, T\)"):
        firing_pool(attn[0])
    with pytest.raises(ValueError, match="2 windows for 1 layers"):
        firing_pool(attn, [None, None])


def test_size_matched_roles_by_hand():
    from accpp.roles import size_matched_roles

    p = size_matched_roles(NULL_POOL, {0: 2, 1: 1}, NULL_POS)
    # name mover absent: C(3, 2) / C(4, 2) in layer 0 times C(2, 1) / C(3, 1) in layer 1 = 1/2 * 2/3
    assert p["name mover"] == pytest.approx(2 / 3, rel=1e-12)
    assert p["duplicate-token"] == pytest.approx(1 / 2, rel=1e-12)   # 1 - C(3, 2) / C(4, 2)
    assert p["S-inhibition"] == pytest.approx(1 / 3, rel=1e-12) and p["previous-token"] == pytest.approx(1 / 3, rel=1e-12)
    assert p["induction"] == 0.0
    assert sum(p.values()) == pytest.approx(11 / 6, rel=1e-12)
    # one firing more in layer 0 (a null drawn at the wrong size) changes it: name mover 1 - 1/4 * 2/3
    assert size_matched_roles(NULL_POOL, {0: 3, 1: 1}, NULL_POS)["name mover"] == pytest.approx(5 / 6, rel=1e-12)
    # a size above the pool takes all of it; a layer of size 0 draws nothing
    assert size_matched_roles(NULL_POOL, {0: 10}, NULL_POS) == {
        "name mover": 1.0, "S-inhibition": 0.0, "induction": 0.0, "duplicate-token": 1.0, "previous-token": 0.0}
    assert sum(size_matched_roles(NULL_POOL, {0: 0, 1: 0}, NULL_POS).values()) == 0.0
    with pytest.raises(ValueError, match="without a pool"):
        size_matched_roles(NULL_POOL, {2: 1}, NULL_POS)
    with pytest.raises(ValueError, match="negative"):
        size_matched_roles(NULL_POOL, {0: -1}, NULL_POS)


def test_size_matched_roles_matches_every_draw_enumerated():
    """The exact expectation equals the mean over every possible draw (per layer, all subsets of the size)."""
    import itertools
    import math as m

    from accpp.roles import firing_set_roles, size_matched_roles

    rng = random.Random(4)
    pool = {layer: sorted({(rng.randrange(3), rng.randrange(1, 7), rng.randrange(0, 7)) for _ in range(7)})
            for layer in range(3)}
    pool = {layer: [f for f in fs if f[2] <= f[1]] for layer, fs in pool.items()}
    sizes = {0: 2, 1: 1, 2: 3}
    per_layer = [[[(layer, *f) for f in c] for c in itertools.combinations(pool[layer], min(k, len(pool[layer])))]
                 for layer, k in sizes.items()]
    draws = [sum(parts, []) for parts in itertools.product(*per_layer)]
    assert len(draws) == m.prod(m.comb(len(pool[layer]), min(k, len(pool[layer]))) for layer, k in sizes.items())
    mean = sum(len(firing_set_roles(d, NULL_POS)) for d in draws) / len(draws)
    assert sum(size_matched_roles(pool, sizes, NULL_POS).values()) == pytest.approx(mean, rel=1e-12)


def test_draw_size_matched_draws_the_circuits_size_per_layer():
    from accpp.roles import draw_size_matched, firing_set_roles, size_matched_roles

    sizes = {0: 2, 1: 1}
    draws = [draw_size_matched(NULL_POOL, sizes, random.Random(s)) for s in range(4000)]
    for d in draws[:50]:
        assert sorted(layer for layer, *_ in d) == [0, 0, 1] and len(set(d)) == 3
        assert all(tuple(f[1:]) in NULL_POOL[f[0]] for f in d)
    assert draw_size_matched(NULL_POOL, sizes, random.Random(7)) == draw_size_matched(NULL_POOL, sizes, random.Random(7))
    assert len(draw_size_matched(NULL_POOL, {0: 9}, random.Random(0))) == 4   # all of a smaller pool
    # the Monte-Carlo mean agrees with the exact value within 6 of its standard errors
    counts = [len(firing_set_roles(d, NULL_POS)) for d in draws]
    mean = sum(counts) / len(counts)
    assert abs(mean - 11 / 6) < 6 * statistics.stdev(counts) / len(counts) ** 0.5
    assert sum(size_matched_roles(NULL_POOL, sizes, NULL_POS).values()) == pytest.approx(11 / 6, rel=1e-12)


def test_firings_per_layer_counts_every_head_node():
    from accpp.roles import firings_per_layer

    firings = [(9, 9, 14, 2), (7, 3, 14, 10), (7, 5, 10, 5), (0, 1, 10, 4), (7, 3, 12, 0)]
    assert firings_per_layer(_graph(firings, seeds=[0])) == {0: 1, 7: 3, 9: 1}   # the MLP and logits nodes not


def test_size_matched_null_of_a_traced_prompt(exact):
    """On a tiny model: the null matches the circuit's firings per layer, its pool is the tracer's rule
    read from the prompt's attention, and every firing the tracer expanded lies in that pool."""
    from types import SimpleNamespace

    from accpp.ioi import size_matched_null
    from accpp.roles import firings_per_layer, size_matched_roles
    from accpp.signals import tau_for
    from accpp.testing import random_prompt, tiny_model
    from accpp.trace import Tracer

    tracer = Tracer(tiny_model("llama", seed=3))
    ids = random_prompt(12, seed=5)
    c = tracer.trace(ids, 7, 11)
    prompt = SimpleNamespace(ids=lambda: ids, pos={"IO": 2, "S1": 4, "S1+1": 5, "S2": 9, "END": 11})
    out = size_matched_null(tracer, prompt, c)
    attn = tracer.decompose(ids).acts.attn
    L, H, T, _ = attn.shape
    assert out["sizes"] == firings_per_layer(c.graph) and sum(out["sizes"].values()) > 0
    assert out["pool"] == {layer: sum(float(attn[layer, h, d, s]) >= tau_for(d + 1)
                                      for h in range(H) for d in range(T) for s in range(d + 1)) for layer in range(L)}
    from accpp.roles import firing_pool
    pool = firing_pool(attn)
    for _, n in c.graph.nodes(data=True):
        if n["kind"] == "head" and n.get("traced"):
            assert (n["head"], n["dest"], n["src"]) in pool[n["layer"]]
    assert out["per_role"] == size_matched_roles(pool, out["sizes"], prompt.pos)
    assert out["expected"] == pytest.approx(sum(out["per_role"].values()), rel=1e-12)
