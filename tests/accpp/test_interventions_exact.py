"""accpp.interventions at the value level: each helper on tiny hand-made inputs, every output field
against a number or string worked out by hand (in the comments), every refusal with its whole message.

The Intervener's methods that read only the architecture, the decomposition and the solver run on a
bare Intervener whose ``arch`` / ``dec`` / ``solver`` are small stand-ins (no model, no forward pass);
the forward-pass side is covered on tiny models in test_interventions.py.
"""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch

from accpp.arch import UnsupportedArchitecture
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_OFFSET
from accpp.interventions import (CONTROLS, SIDES, SUPPORTED, InterventionResult, Intervener, NotASignalEdge,
                                 SignalSpec, _cos, _rotate, _span, check_supported, compare_subspaces,
                                 paired_summary, prompt_ratios, random_subspace, score_matching_error,
                                 top_seed_edges)
from accpp.signals import Firing, SignalEdge

TOL = 1e-12


def _raises(exc, message: str):
    """pytest.raises on the whole message."""
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def _spec(**kw) -> SignalSpec:
    base = dict(layer=2, head=1, dest=9, src=4, side="d", kind=KIND_HEAD, comp_layer=1, comp_head=3, comp_src=2,
                token=9, sing=(0, 4))
    return SignalSpec(**(base | kw))


# ----------------------------------------------------------------------------- constants
def test_module_constants():
    assert SUPPORTED == ("llama", "gemma2", "gemma3_text")
    assert CONTROLS == ("random", "random_matched", "random_score")
    assert SIDES == {"d": "query", "s": "key"}


def test_check_supported_message():
    for mt in SUPPORTED:
        check_supported(SimpleNamespace(model_type=mt))  # no error
    with _raises(UnsupportedArchitecture,
                 "signal interventions are implemented for the llama-like adapters (llama, gemma2, gemma3_text): "
                 "they hook q_proj/k_proj/v_proj/o_proj (and q_norm/k_norm) of the attention module; "
                 "model_type 'gpt2' is not supported"):
        check_supported(SimpleNamespace(model_type="gpt2"))


# ----------------------------------------------------------------------------- SignalSpec
def test_spec_properties_and_with_sing():
    s = _spec(attribution=0.5, drop=0.25)
    assert s.firing == Firing(2, 1, 9, 4)
    assert s.rank == 2
    assert s.label == (KIND_HEAD, 1, 3, 2)
    assert s.attribution == 0.5 and s.drop == 0.25 and s.span is False
    assert _spec().attribution is None and _spec().drop is None
    t = s.with_sing([np.int64(7), 1.0, 3])
    assert t.sing == (7, 1, 3) and all(type(k) is int for k in t.sing)
    assert t == SignalSpec(2, 1, 9, 4, "d", KIND_HEAD, 1, 3, 2, 9, (7, 1, 3), 0.5, 0.25, False)
    assert s.sing == (0, 4)  # unchanged (frozen)


@pytest.mark.parametrize("kw, text", [
    (dict(), "A1.3<2@9 -> A2.1@9<4 (query, k=[0, 4])"),
    (dict(side="s", token=5, kind=KIND_MLP, comp_layer=0, comp_head=-1, comp_src=-1, sing=(3,)),
     "M0@5 -> A2.1@9<4 (key, k=[3])"),
    (dict(side="s", token=5, kind=KIND_EMB, comp_layer=-1, comp_head=-1, comp_src=-1, span=True),
     "E@5 -> A2.1@9<4 (all keys, k=[0, 4])"),
    (dict(kind=KIND_BIAS, comp_layer=1, comp_head=-1, comp_src=-1, sing=(2, 0, 1)),
     "B1@9 -> A2.1@9<4 (query, k=[2, 0, 1])"),
    (dict(kind=KIND_OFFSET, comp_layer=2, comp_head=1, comp_src=-1),
     "O2.1@9 -> A2.1@9<4 (query, k=[0, 4])"),
    (dict(kind=7, side="x"), "?@9 -> A2.1@9<4 (x, k=[0, 4])"),  # unknown kind and side: shown as such
])
def test_describe_every_kind(kw, text):
    assert _spec(**kw).describe() == text


def test_from_edge_maps_every_field():
    f = Firing(3, 2, 8, 5)
    e = SignalEdge(side="s", kind=KIND_HEAD, layer=1, head=0, token=6, src=4, sing=[np.int64(5), 2],
                   attribution=0.75, drop=0.125, weight=9.0)
    s = SignalSpec.from_edge(f, e)  # default variant "authors": a key-side signal spans the keys
    assert s == SignalSpec(3, 2, 8, 5, "s", KIND_HEAD, 1, 0, 4, 6, (5, 2), 0.75, 0.125, True)
    assert all(type(k) is int for k in s.sing)
    assert SignalSpec.from_edge(f, e, "per-position").span is False
    q = SignalEdge(side="d", kind=KIND_MLP, layer=0, head=-1, token=8, src=-1, sing=[1], attribution=1.0,
                   drop=0.5, weight=0.5)
    assert SignalSpec.from_edge(f, q).span is False  # query side never spans
    with _raises(NotASignalEdge, "expected a SignalEdge, got dict"):
        SignalSpec.from_edge(f, {"side": "d"})
    with _raises(ValueError, "unknown tracer variant 'greedy': 'authors' or 'per-position'"):
        SignalSpec.from_edge(f, e, "greedy")


def test_span_rule():
    assert _span("s", "authors") is True
    assert _span("s", "per-position") is False
    assert _span("d", "authors") is False and _span("d", "per-position") is False
    with _raises(ValueError, "unknown tracer variant 'x': 'authors' or 'per-position'"):
        _span("d", "x")


def _graph() -> nx.MultiDiGraph:
    """A hand-made circuit: firing A2.1@9<4 fed by a head, an MLP, the embedding (first created as a
    seed node, so src = its token), a bias and an offset; the firing itself seeds the logits."""
    g = nx.MultiDiGraph()
    g.add_node("LOGITS@9", kind="logits", layer=3, head=-1, dest=9, src=-1)
    g.add_node("F", kind="head", layer=2, head=1, dest=9, src=4, A=0.6, traced=True)
    g.add_node("H", kind="head", layer=1, head=3, dest=9, src=2, A=0.3, traced=False)
    g.add_node("M", kind="mlp", layer=0, head=-1, dest=9, src=9, traced=False)
    g.add_node("E", kind="emb", layer=0, head=-1, dest=6, src=6, traced=False)
    g.add_node("B", kind="bias", layer=1, head=5, dest=9, src=9, traced=False)
    g.add_node("O", kind="offset", layer=2, head=1, dest=9, src=9, traced=False)
    g.add_node("X", kind="conv", layer=0, head=0, dest=9, src=9)
    g.add_edge("F", "LOGITS@9", side="seed", token=9, sing=[], attribution=2.0, drop=2.0)
    g.add_edge("H", "F", side="d", token=9, sing=[np.int64(4), 0], attribution=0.5, drop=0.2)
    g.add_edge("M", "F", side="s", token=7, sing=[1], attribution=0.9, drop=0.4)
    g.add_edge("M", "F", side="d", token=9, sing=[2, 3], attribution=0.1, drop=0.05)  # parallel to the one above
    g.add_edge("E", "F", side="s", token=6, sing=[5])  # no attribution / drop recorded
    g.add_edge("B", "F", side="d", token=9, sing=[0], attribution=0.3, drop=0.1)
    g.add_edge("O", "F", side="d", token=9, sing=[7], attribution=0.7, drop=0.3)
    g.add_edge("X", "F", side="d", token=9, sing=[0], attribution=0.0, drop=0.0)
    g.add_edge("H", "M", side="d", token=9, sing=[0], attribution=0.0, drop=0.0)  # into an MLP: no firing
    return g


def test_from_graph_every_kind_of_source():
    g = _graph()
    # a head source keeps its layer, head and source
    assert SignalSpec.from_graph(g, "H", "F") == SignalSpec(2, 1, 9, 4, "d", KIND_HEAD, 1, 3, 2, 9, (4, 0), 0.5, 0.2,
                                                              False)
    # an MLP: head and source -1 (the node's src is its token); parallel edges picked by key
    assert SignalSpec.from_graph(g, "M", "F", key=0) == SignalSpec(2, 1, 9, 4, "s", KIND_MLP, 0, -1, -1, 7, (1,),
                                                                     0.9, 0.4, True)
    assert SignalSpec.from_graph(g, "M", "F", 0, "per-position").span is False
    assert SignalSpec.from_graph(g, "M", "F", key=1) == SignalSpec(2, 1, 9, 4, "d", KIND_MLP, 0, -1, -1, 9, (2, 3),
                                                                     0.1, 0.05, False)
    # the embedding: layer, head and source -1 whatever the node says; missing attribution/drop: None
    assert SignalSpec.from_graph(g, "E", "F", variant="per-position") == SignalSpec(
        2, 1, 9, 4, "s", KIND_EMB, -1, -1, -1, 6, (5,), None, None, False)
    # a bias: its layer, head -1
    assert SignalSpec.from_graph(g, "B", "F") == SignalSpec(2, 1, 9, 4, "d", KIND_BIAS, 1, -1, -1, 9, (0,), 0.3, 0.1,
                                                              False)
    # the offset keeps its head
    assert SignalSpec.from_graph(g, "O", "F") == SignalSpec(2, 1, 9, 4, "d", KIND_OFFSET, 2, 1, -1, 9, (7,), 0.7,
                                                              0.3, False)
    assert all(type(k) is int for k in SignalSpec.from_graph(g, "H", "F").sing)


def test_from_graph_refusals():
    g = _graph()
    with _raises(NotASignalEdge, "the circuit has no edge 'F' -> 'H'"):
        SignalSpec.from_graph(g, "F", "H")
    with _raises(NotASignalEdge, "2 parallel edges 'M' -> 'F'; pass key= (one of [0, 1])"):
        SignalSpec.from_graph(g, "M", "F")
    with _raises(NotASignalEdge,
                 "edge 'F' -> 'LOGITS@9' has side 'seed': only signal edges (side 'd' or 's', into a traced head "
                 "firing) can be removed; seed edges into the logits carry no signal subspace"):
        SignalSpec.from_graph(g, "F", "LOGITS@9")
    with _raises(NotASignalEdge, "edge 'H' -> 'M' does not end at an attention firing"):
        SignalSpec.from_graph(g, "H", "M")
    with _raises(NotASignalEdge, "node 'X' has unknown kind 'conv'"):
        SignalSpec.from_graph(g, "X", "F")
    with _raises(ValueError, "unknown tracer variant 'x': 'authors' or 'per-position'"):
        SignalSpec.from_graph(g, "H", "F", variant="x")


def test_top_seed_edges_orders_by_attribution():
    g = _graph()
    g.remove_node("X")
    # signal edges into the seed firing F by attribution: M(key 0) 0.9, O 0.7, H 0.5, B 0.3, M(key 1) 0.1;
    # E has no attribution recorded, so it is given one here (0.7, a tie with O broken by the node name)
    g.edges["E", "F", 0]["attribution"] = 0.7
    top = top_seed_edges(g, 3)
    assert [s.describe() for s in top] == ["M0@7 -> A2.1@9<4 (all keys, k=[1])", "E@6 -> A2.1@9<4 (all keys, k=[5])",
                                           "O2.1@9 -> A2.1@9<4 (query, k=[7])"]
    assert [s.kind for s in top_seed_edges(g, 10)] == [KIND_MLP, KIND_EMB, KIND_OFFSET, KIND_HEAD, KIND_BIAS,
                                                       KIND_MLP]
    assert top_seed_edges(g, 1, "per-position")[0].span is False
    # a seed head firing not traced, or a seed that is not a head, contributes no edges
    g.nodes["F"]["traced"] = False
    assert top_seed_edges(g, 5) == []


# ----------------------------------------------------------------------------- random_subspace
def test_random_subspace_edges_of_the_range():
    # rank 8 of 16: the only disjoint subspace is the other 8 directions
    assert random_subspace(range(8), 16, 0) == tuple(range(8, 16))
    assert random_subspace((1,), 2, 5) == (0,)
    assert random_subspace((0, 1), 4, 3) == (2, 3)
    assert random_subspace((3, 3), 4, 0) in {(0,), (1,), (2,)}  # duplicates count once: rank 1
    assert random_subspace((np.int64(15),), 16, 0) != (15,)
    assert random_subspace((2,), 3, 0) in {(0,), (1,)}
    with _raises(ValueError, "empty signal subspace"):
        random_subspace((), 16, 0)
    with _raises(ValueError, "singular indices [-1, 2] outside 0..15"):
        random_subspace((2, -1), 16, 0)
    with _raises(ValueError, "singular indices [16] outside 0..15"):
        random_subspace((16,), 16, 0)
    with _raises(ValueError, "a rank-9 signal leaves only 7 other directions of 16: no disjoint random subspace "
                             "of the same size"):
        random_subspace(range(9), 16, 0)


def test_random_subspace_is_a_seeded_uniform_draw():
    # the draw: a seeded permutation of the pool (the indices not in sing, increasing), its first |sing|
    pool = [0, 1, 2, 4, 5, 6]
    for seed in (0, 1, 7):
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed)).tolist()
        assert random_subspace((3,), 7, seed) == (pool[perm[0]],)
        assert random_subspace((3, 6.0), 8, seed) == tuple(sorted([0, 1, 2, 4, 5, 7][i] for i in perm[:2]))
    draws = {random_subspace((3,), 7, seed) for seed in range(40)}
    assert draws == {(k,) for k in pool}  # every other direction can be drawn, never 3


# ----------------------------------------------------------------------------- small helpers
def test_rotate_half_on_the_first_dims():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    cos = torch.tensor([[0.5, 0.25, 0.5, 0.25]])
    sin = torch.tensor([[2.0, 3.0, 2.0, 3.0]])
    # rd = 4, half 2: rh = (-x2, -x3, x0, x1) = (-3, -4, 1, 2); out = x * cos + rh * sin, then x4 unchanged
    want = [1 * 0.5 - 3 * 2, 2 * 0.25 - 4 * 3, 3 * 0.5 + 1 * 2, 4 * 0.25 + 2 * 3, 5.0]
    assert _rotate(x, cos, sin).tolist() == [want]
    # no rotary dims: x unchanged
    assert _rotate(x, torch.zeros(1, 0), torch.zeros(1, 0)).tolist() == x.tolist()


def test_cos():
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    assert _cos(t(3.0, 0.0), t(1.0, 1.0)) == pytest.approx(1 / math.sqrt(2), abs=TOL)
    assert _cos(t(1.0, 2.0), t(-2.0, -4.0)) == pytest.approx(-1.0, abs=TOL)
    # matrices: one vector over all positions, (1, 0, 0, 1) . (1, 1, 0, 0) / (sqrt 2 sqrt 2) = 1/2
    assert _cos(t([1.0, 0.0], [0.0, 1.0]), t([1.0, 1.0], [0.0, 0.0])) == pytest.approx(0.5, abs=TOL)
    assert _cos(t(0.0, 0.0, 0.0), t(1.0, 1.0, 1.0)) == 0.0  # a zero vector: 0, not nan
    assert _cos(t(0.1, 0.0), t(0.01, 0.01)) == pytest.approx(1 / math.sqrt(2), abs=TOL)  # short vectors too


def test_intervention_result_changes_and_row():
    spec = _spec(attribution=0.5, drop=0.25)
    r = InterventionResult(spec=spec, subspace="random", sing_removed=(5, 6), seed=3, metric_before=2.0,
                           metric_after=1.25, attn_before=0.75, attn_after=0.5, final_resid_cos=0.999,
                           head_input_cos=0.98, removed_norm_ratio=0.125, delta_norm_ratio=0.0625, score_before=4.0,
                           score_after=2.5, extra=dict(norm_scale=1.0, score_scale=2.0))
    assert r.metric_change == -0.75 and r.attn_change == -0.25 and r.score_change == -1.5
    assert r.row() == dict(signal="A1.3<2@9 -> A2.1@9<4 (query, k=[0, 4])", side="d", rank=2, subspace="random",
                           seed=3, sing=[5, 6], metric_before=2.0, metric_after=1.25, metric_change=-0.75,
                           attn_before=0.75, attn_after=0.5, attn_change=-0.25, final_resid_cos=0.999,
                           head_input_cos=0.98, removed_norm_ratio=0.125, delta_norm_ratio=0.0625, score_before=4.0,
                           score_after=2.5, score_change=-1.5, attribution=0.5, traced_drop=0.25, norm_scale=1.0,
                           score_scale=2.0)
    plain = InterventionResult(spec, "signal", (0, 4), None, 1.0, 1.0, 0.5, 0.5, 1.0, 1.0, 0.0, 0.0)
    assert math.isnan(plain.score_before) and math.isnan(plain.score_after) and plain.extra == {}
    assert list(plain.row()) == ["signal", "side", "rank", "subspace", "seed", "sing", "metric_before",
                                 "metric_after", "metric_change", "attn_before", "attn_after", "attn_change",
                                 "final_resid_cos", "head_input_cos", "removed_norm_ratio", "delta_norm_ratio",
                                 "score_before", "score_after", "score_change", "attribution", "traced_drop"]


# ----------------------------------------------------------------------------- Intervener, no model
def _bare(**attrs) -> Intervener:
    """An Intervener without a model: only the attributes the method under test reads."""
    iv = object.__new__(Intervener)
    iv.__dict__.update(attrs)
    return iv


def _validating(T: int = 10) -> Intervener:
    """3 layers x 4 heads, d_head 4; layer 2 has a sliding window of 3 (query d sees d-2..d)."""
    layers = [SimpleNamespace(sliding_window=None), SimpleNamespace(sliding_window=None),
              SimpleNamespace(sliding_window=3)]
    return _bare(arch=SimpleNamespace(n_layers=3, n_heads=4, d_head=4, layers=layers), T=T)


def _vspec(**kw) -> SignalSpec:
    base = dict(layer=1, head=2, dest=9, src=4, side="d", kind=KIND_MLP, comp_layer=0, comp_head=-1, comp_src=-1,
                token=9, sing=(0, 3))
    return SignalSpec(**(base | kw))


def test_validate_accepts_the_edges_of_every_range():
    iv = _validating()
    for kw in [dict(), dict(layer=0, head=0), dict(layer=2, head=3, src=7), dict(src=0), dict(src=9),
               dict(dest=0, src=0, token=0), dict(side="s", token=0), dict(side="s", token=9),
               dict(layer=2, src=8, side="s", token=7), dict(sing=(3,)), dict(sing=(0,)), dict(sing=(2, 1, 0, 3)),
               *[dict(kind=k) for k in (KIND_EMB, KIND_HEAD, KIND_MLP, KIND_BIAS, KIND_OFFSET)]]:
        assert iv.validate(_vspec(**kw)) is None, kw


@pytest.mark.parametrize("kw, exc, message", [
    (dict(side="q"), ValueError, "unknown side 'q': 'd' (query side) or 's' (key side)"),
    (dict(layer=3), ValueError, "no head 3.2 in a 3-layer, 4-head model"),
    (dict(layer=-1), ValueError, "no head -1.2 in a 3-layer, 4-head model"),
    (dict(head=4), ValueError, "no head 1.4 in a 3-layer, 4-head model"),
    (dict(head=-1), ValueError, "no head 1.-1 in a 3-layer, 4-head model"),
    (dict(dest=10, token=10), ValueError, "firing 10<4 is not a visible pair in a 10-token prompt"),
    (dict(dest=-1, token=-1), ValueError, "firing -1<4 is not a visible pair in a 10-token prompt"),
    (dict(dest=3, token=3), ValueError, "firing 3<4 is not a visible pair in a 10-token prompt"),  # src after dest
    (dict(layer=2, src=6), ValueError, "firing 9<6 is not a visible pair in a 10-token prompt"),  # outside window
    (dict(token=8), NotASignalEdge, "a query-side signal sits at the destination token 9, not 8"),
    (dict(side="s", token=10), NotASignalEdge, "key token 10 is not visible from destination 9"),
    (dict(layer=2, src=8, side="s", token=6), NotASignalEdge, "key token 6 is not visible from destination 9"),
    (dict(sing=()), ValueError, "singular indices must be distinct, non-empty, in 0..3; got []"),
    (dict(sing=(1, 1)), ValueError, "singular indices must be distinct, non-empty, in 0..3; got [1, 1]"),
    (dict(sing=(0, 4)), ValueError, "singular indices must be distinct, non-empty, in 0..3; got [0, 4]"),
    (dict(sing=(-1,)), ValueError, "singular indices must be distinct, non-empty, in 0..3; got [-1]"),
    (dict(kind=5), NotASignalEdge, "unknown component kind 5"),
    (dict(kind=-1), NotASignalEdge, "unknown component kind -1"),
])
def test_validate_refusals(kw, exc, message):
    with _raises(exc, message):
        _validating().validate(_vspec(**kw))


def test_validate_with_a_short_prompt():
    iv = _validating(T=5)
    with _raises(ValueError, "firing 5<4 is not a visible pair in a 5-token prompt"):
        iv.validate(_vspec(dest=5, token=5))
    iv.validate(_vspec(dest=4, token=4))


def test_rows_and_score_entry():
    iv = _validating()
    q = _vspec()
    assert iv.rows(q) == [9] and iv.score_entry(q) == (9, 4)
    k = _vspec(side="s", token=6)  # one key position other than the source: the entry (d, j)
    assert iv.rows(k) == [6] and iv.score_entry(k) == (9, 6)
    span = _vspec(side="s", token=4, span=True)  # every visible key position; the firing's own entry
    assert iv.rows(span) == list(range(10)) and iv.score_entry(span) == (9, 4)
    win = _vspec(layer=2, src=8, side="s", token=8, span=True)  # layer 2's window of 3
    assert iv.rows(win) == [7, 8, 9] and iv.score_entry(win) == (9, 8)


# A head-space stand-in: layer 1, head 3 (its kv head is 1) of a 2-layer, 4-head model with d_head 2, on a
# 4-token prompt; firing A1.3@3<1. Ut[1, 3] and Vt[1, 3] are triangular (not symmetric: x B != x B^T):
#   x Ut = (x0, 2 x0 + x1)        x Vt = (x0 + 3 x1, x1)
# token_coeffs rows: [emb, head A0.1<0, MLP 0] (no MLP row at key token 0).
EMB, HEAD01, MLP0 = [KIND_EMB, -1, -1, -1], [KIND_HEAD, 0, 1, 0], [KIND_MLP, 0, -1, -1]
COEFFS = {
    (3, "q"): ([[1, 0], [2, 1], [5, 7]], [EMB, HEAD01, MLP0]),    # sum (8, 8):  qf_3 = (8, -8)
    (0, "k"): ([[2, 0], [1, 1]], [EMB, HEAD01]),                  # sum (3, 1):  kf_0 = (0, 1)
    (1, "k"): ([[1, 1], [0, 2], [3, -1]], [EMB, HEAD01, MLP0]),   # sum (4, 2):  kf_1 = (-2, 2)
    (2, "k"): ([[0, 1], [1, 0], [4, 2]], [EMB, HEAD01, MLP0]),    # sum (5, 3):  kf_2 = (-4, 3)
    (3, "k"): ([[1, 0], [0, 0], [-2, 1]], [EMB, HEAD01, MLP0]),   # sum (-1, 1): kf_3 = (-4, 1)
}


def _head_space() -> Intervener:
    f64 = dict(dtype=torch.float64)
    Ut = torch.eye(2, **f64).repeat(2, 4, 1, 1) * 7  # every other head: 7 I (a wrong head would show)
    Vt = Ut.clone()
    Ut[1, 3] = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    Vt[1, 3] = torch.tensor([[1.0, 0.0], [3.0, 1.0]])

    def token_coeffs(L, a, t, side):
        assert (L, a) == (1, 3)
        C, labels = COEFFS[(t, side)]
        return torch.tensor(C, **f64), torch.tensor(labels)

    layers = [SimpleNamespace(sliding_window=None, scale=9.0),
              SimpleNamespace(sliding_window=None, scale=0.5, kv_of=lambda h: h // 2)]
    return _bare(arch=SimpleNamespace(n_layers=2, n_heads=4, d_head=2, layers=layers), T=4,
                 solver=SimpleNamespace(svd=SimpleNamespace(Ut=Ut, Vt=Vt), token_coeffs=token_coeffs))


def _hspec(**kw) -> SignalSpec:
    base = dict(layer=1, head=3, dest=3, src=1, side="d", kind=KIND_MLP, comp_layer=0, comp_head=-1, comp_src=-1,
                token=3, sing=(0,))
    return SignalSpec(**(base | kw))


def _list(t: torch.Tensor):
    return t.tolist()


def test_coef_at_picks_the_components_row():
    iv = _head_space()
    assert _list(iv._coef_at(_hspec(), 3)) == [5.0, 7.0]
    assert _list(iv._coef_at(_hspec(kind=KIND_EMB, comp_layer=-1), 3)) == [1.0, 0.0]
    assert _list(iv._coef_at(_hspec(kind=KIND_HEAD, comp_layer=0, comp_head=1, comp_src=0), 3)) == [2.0, 1.0]
    assert _list(iv._coef_at(_hspec(side="s", token=2), 2)) == [4.0, 2.0]  # key side reads the "k" rows
    assert iv._coef_at(_hspec(side="s", token=0), 0) is None  # no MLP at key token 0
    assert iv._coef_at(_hspec(comp_layer=1), 3) is None  # no such MLP
    assert iv._coef_at(_hspec(kind=KIND_HEAD, comp_layer=0, comp_head=1, comp_src=1), 3) is None  # other source
    COEFFS[(9, "q")] = ([[1, 0], [2, 2]], [MLP0, MLP0])  # a label found twice: no single row
    try:
        assert iv._coef_at(_hspec(), 9) is None
    finally:
        del COEFFS[(9, "q")]


def test_coefficients_one_row_or_every_key_position():
    iv = _head_space()
    assert _list(iv.coefficients(_hspec())) == [5.0, 7.0]
    assert _list(iv.coefficients(_hspec(side="s", token=2))) == [4.0, 2.0]
    # spanning: one row per visible key position 0..3, zeros where the MLP is absent (token 0)
    assert _list(iv.coefficients(_hspec(side="s", token=1, span=True))) == [[0, 0], [3, -1], [4, 2], [-2, 1]]
    with _raises(NotASignalEdge, "M1@3 -> A1.3@3<1 (query, k=[0]): no component mlp (layer 1, head -1, source -1) "
                                 "in the residual entering layer 1 at token 3"):
        iv.coefficients(_hspec(comp_layer=1))
    with _raises(NotASignalEdge, "A0.1<2@1 -> A1.3@3<1 (all keys, k=[0]): no component head (layer 0, head 1, "
                                 "source 2) in the residual entering layer 1 at token 1 or any other visible key "
                                 "position"):
        iv.coefficients(_hspec(side="s", token=1, span=True, kind=KIND_HEAD, comp_layer=0, comp_head=1, comp_src=2))
    with _raises(ValueError, "unknown side 'x': 'd' (query side) or 's' (key side)"):  # validated first
        iv.coefficients(_hspec(side="x"))


def test_head_delta_solves_delta_B_equals_the_masked_coefficients():
    iv = _head_space()
    q = _hspec()  # alpha_c = (5, 7)
    # K = {0}: masked (5, 0); delta Ut = (d0, 2 d0 + d1) = (5, 0) -> delta = (5, -10)
    assert _list(iv.head_delta(q)) == [5.0, -10.0]
    # K = {1}: masked (0, 7) -> (0, 7); K = {0, 1}: (5, 7) -> (5, -3)
    assert _list(iv.head_delta(q, [1])) == [0.0, 7.0]
    assert _list(iv.head_delta(q, (1, 0))) == [5.0, -3.0]
    assert _list(iv.head_delta(q, ())) == [0.0, 0.0]  # no index: nothing removed
    # key side at token 2, beta_c = (4, 2), K = {1}: masked (0, 2); delta Vt = (d0 + 3 d1, d1) -> (-6, 2)
    assert _list(iv.head_delta(_hspec(side="s", token=2, sing=(1,)))) == [-6.0, 2.0]
    # spanning key side, K = {1}: rows (0, 0), (0, -1), (0, 2), (0, 1) -> (0, 0), (3, -1), (-6, 2), (-3, 1)
    assert _list(iv.head_delta(_hspec(side="s", token=1, span=True, sing=(1,)))) == [[0, 0], [3, -1], [-6, 2],
                                                                                      [-3, 1]]
    with _raises(ValueError, "singular indices [0, 2] outside 0..1"):
        iv.head_delta(q, (0, 2))
    with _raises(ValueError, "singular indices [-1] outside 0..1"):
        iv.head_delta(q, (-1,))


def test_clean_vectors_from_the_decomposition():
    iv = _head_space()
    # qf_3: x Ut = (8, 8) -> (8, -8); kf_t: x Vt = sums of the k rows (see COEFFS)
    assert _list(iv._clean_vec(1, 3, 3, "q")) == [8.0, -8.0]
    assert _list(iv._clean_vec(1, 3, 1, "k")) == [-2.0, 2.0]
    assert _list(iv._clean_vec(1, 3, 2, "k")) == [-4.0, 3.0]
    assert _list(iv._clean_head_vector(_hspec())) == [8.0, -8.0]
    assert _list(iv._clean_head_vector(_hspec(side="s", token=2))) == [-4.0, 3.0]
    assert _list(iv._clean_head_vector(_hspec(side="s", token=1, span=True))) == [[0, 1], [-2, 2], [-4, 3], [-4, 1]]


def test_score_change_is_linear_in_delta():
    iv = _head_space()  # scale 0.5
    # query side: -scale * delta . kf_src = -0.5 * (5, -10) . (-2, 2) = -0.5 * (-30) = 15
    assert iv.score_change(_hspec(), torch.tensor([5.0, -10.0], dtype=torch.float64)) == 15.0
    # key side at token 2 (entry (3, 2)): -scale * qf_3 . delta = -0.5 * (8, -8) . (-6, 2) = -0.5 * (-64) = 32
    assert iv.score_change(_hspec(side="s", token=2, sing=(1,)), torch.tensor([-6.0, 2.0],
                                                                              dtype=torch.float64)) == 32.0
    # spanning key side: the row at the source (index 1 of rows 0..3): -0.5 * (8, -8) . (3, -1) = -16
    delta = torch.tensor([[0, 0], [3, -1], [-6, 2], [-3, 1]], dtype=torch.float64)
    assert iv.score_change(_hspec(side="s", token=1, span=True, sing=(1,)), delta) == -16.0
    # a spanning removal that does not reach the source's key (here: a window of 2 at the destination) leaves it
    iv.arch.layers[1].sliding_window = 2
    assert iv.score_change(_hspec(side="s", token=1, span=True, sing=(1,)), delta[2:]) == 0.0


def _input_space() -> Intervener:
    """d_model 3, d_head 2, 4 heads (kv head of h: h // 2), 4 tokens. Layer 0: no RoPE, no q/k-norm;
    layer 1: rotation matrices R_t and q/k-norm gains (one q gain exactly 0). Head 3's matrices:
        W_Q[3] = [[1, 0], [0, 1], [1, 0]]   x W_Q = (x0 + x2, x1)  (min-norm: x0 = x2)
        W_K[1] = [[0, 1], [2, 0], [0, 0]]   x W_K = (2 x1, x0)     (min-norm: x2 = 0)
    any other head's matrix is 5 * ones (a wrong head would show)."""
    f64 = dict(dtype=torch.float64)
    Wq = {3: torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], **f64)}
    Wk = {1: torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]], **f64)}
    other = torch.full((3, 2), 5.0, **f64)

    def layer(q_gain, k_gain):
        norm = lambda g: None if g is None else SimpleNamespace(gain=torch.tensor(g, **f64))  # noqa: E731
        return SimpleNamespace(sliding_window=None, kv_of=lambda h: h // 2, q_norm=norm(q_gain), k_norm=norm(k_gain),
                               wq_eff=lambda h: Wq.get(h, other), wk_eff=lambda kv: Wk.get(kv, other))

    rot = torch.eye(2, **f64).repeat(4, 1, 1) * 3  # R_t = 3 I except
    rot[2] = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # v R_2 = (v0, v0 + v1)
    rot[3] = torch.tensor([[1.0, 0.0], [2.0, 1.0]])  # v R_3 = (v0 + 2 v1, v1)
    rho_q = torch.full((4, 4), 9.0, **f64)
    rho_q[3, 3] = 2.0  # token 3, head 3
    rho_k = torch.full((4, 2), 9.0, **f64)
    rho_k[2, 1] = 4.0  # token 2, kv head 1
    tables = {1: (rho_q, rho_k)}
    dec = SimpleNamespace(rot=[None, rot], rho_q=lambda L: tables[L][0], rho_k=lambda L: tables[L][1])
    arch = SimpleNamespace(n_layers=2, n_heads=4, d_head=2, layers=[layer(None, None), layer([2.0, 0.0], [0.5, 4.0])])
    return _bare(arch=arch, dec=dec, T=4)


def test_input_delta_at_without_rope_or_qk_norm():
    iv = _input_space()
    delta = torch.tensor([3.0, 4.0], dtype=torch.float64)
    # query side: x0 + x2 = 3, x1 = 4, minimum norm -> (1.5, 4, 1.5)
    q = _hspec(layer=0, dest=3, token=3)
    assert _list(iv._input_delta_at(q, 3, delta)) == pytest.approx([1.5, 4.0, 1.5], abs=TOL)
    # key side (kv head 1): 2 x1 = 3, x0 = 4, x2 = 0 -> (4, 1.5, 0)
    k = _hspec(layer=0, side="s", token=2)
    assert _list(iv._input_delta_at(k, 2, delta)) == pytest.approx([4.0, 1.5, 0.0], abs=TOL)


def test_input_delta_at_undoes_rope_and_qk_norm():
    iv = _input_space()
    delta = torch.tensor([3.0, 4.0], dtype=torch.float64)
    # query side at token 3: v R_3 = (v0 + 2 v1, v1) = (3, 4) -> v = (-5, 4); / gain (2, 0) with 0 where the gain
    # is 0 -> (-2.5, 0); * rho_q[3, 3] = 2 -> (-5, 0); x0 + x2 = -5, x1 = 0 -> (-2.5, 0, -2.5)
    q = _hspec(layer=1, dest=3, token=3)
    assert _list(iv._input_delta_at(q, 3, delta)) == pytest.approx([-2.5, 0.0, -2.5], abs=TOL)
    # key side at token 2 (kv head 1): v R_2 = (v0, v0 + v1) = (3, 4) -> v = (3, 1); / gain (0.5, 4) -> (6, 0.25);
    # * rho_k[2, 1] = 4 -> (24, 1); 2 x1 = 24, x0 = 1 -> (1, 12, 0)
    k = _hspec(layer=1, side="s", token=2)
    assert _list(iv._input_delta_at(k, 2, delta)) == pytest.approx([1.0, 12.0, 0.0], abs=TOL)


def test_input_delta_one_row_or_every_key_position():
    iv = _input_space()
    k = _hspec(layer=0, side="s", dest=2, src=1, token=1, sing=(0,))
    # one position: (2 x1, x0) = (1, 0) -> (0, 0.5, 0)
    assert _list(iv.input_delta(k, torch.tensor([1.0, 0.0], dtype=torch.float64))) == pytest.approx(
        [0.0, 0.5, 0.0], abs=TOL)
    # spanning: rows 0, 1, 2 (visible from 2), each solved for its own row of delta
    rows = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    got = iv.input_delta(SignalSpec(**(k.__dict__ | dict(span=True))), rows)
    assert got.shape == (3, 3)
    assert _list(got.reshape(-1)) == pytest.approx([4.0, 1.5, 0.0, 0.0, 0.5, 0.0, 2.0, 0.0, 0.0], abs=TOL)


def test_input_delta_at_is_the_same_minimum_norm_solution_every_time():
    """LAPACK's gelsy (torch.linalg.lstsq's default CPU driver) reads its pivot array uninitialised in torch
    (pytorch/pytorch#71222, #92537): on a matrix with exactly zero or repeated rows, such as W_K[1] here
    (its third row is 0) or W_Q[3] (rows 0 and 2 equal), it returns now and then rank 0 and dx~ = 0.
    The minimum-norm solution must not depend on the allocator's state."""
    iv = _input_space()
    delta = torch.tensor([3.0, 4.0], dtype=torch.float64)
    q, k = _hspec(layer=0, dest=3, token=3), _hspec(layer=0, side="s", token=2)
    for _ in range(200):
        assert _list(iv._input_delta_at(k, 2, delta)) == pytest.approx([4.0, 1.5, 0.0], abs=TOL)
        assert _list(iv._input_delta_at(q, 3, delta)) == pytest.approx([1.5, 4.0, 1.5], abs=TOL)


# ----------------------------------------------------------------------------- compare_subspaces, remove_signal
class _Recorder:
    def __init__(self):
        self.calls = []

    def remove(self, spec, subspace="signal", seed=None, sing=None):
        self.calls.append((spec, subspace, seed))
        return len(self.calls)


def test_compare_subspaces_order_and_seeds():
    rec, spec = _Recorder(), _spec()
    assert compare_subspaces(rec, spec, 2, seed=5, controls=("random_score", "random")) == [1, 2, 3, 4, 5]
    assert rec.calls == [(spec, "signal", None), (spec, "random_score", 5), (spec, "random_score", 6),
                         (spec, "random", 5), (spec, "random", 6)]
    rec = _Recorder()
    compare_subspaces(rec, spec, 3)  # defaults: seed 0, the unmatched control only
    assert rec.calls == [(spec, "signal", None), (spec, "random", 0), (spec, "random", 1), (spec, "random", 2)]
    rec = _Recorder()
    with _raises(ValueError, "unknown control 'shuffled': one of 'random', 'random_matched', 'random_score'"):
        compare_subspaces(rec, spec, 1, controls=("random", "shuffled"))
    assert rec.calls == []  # refused before any removal


def test_remove_signal_is_one_intervener_and_one_removal(monkeypatch):
    import accpp.interventions as ivm

    seen = {}

    class Fake:
        def __init__(self, *args, **kw):
            seen["init"] = (args, kw)

        def remove(self, *args, **kw):
            seen["remove"] = (args, kw)
            return "result"

    monkeypatch.setattr(ivm, "Intervener", Fake)
    spec = _spec()
    assert ivm.remove_signal("tracer", "ids", spec, 7, 11, "random", seed=3, position=-2) == "result"
    assert seen == {"init": (("tracer", "ids", 7, 11, -2), {}), "remove": ((spec, "random", 3), {})}
    ivm.remove_signal("tracer", "ids", spec, 7, 11)
    assert seen == {"init": (("tracer", "ids", 7, 11, -1), {}), "remove": ((spec, "signal", None), {})}


# ----------------------------------------------------------------------------- paired_summary and friends
def _table(extra_rows=()):
    """Two prompts; prompt 0 has edges e0 and e1, prompt 1 edge e2. |dLD| of the signal removals 1, 3, 0.5;
    of the score-matched draws (0.2, 0.1), (0.4, 0.5), (0.25, 0.5, 1.0). "random" rows (other numbers) must be
    left out when the control is "random_score"."""
    rows = []

    def add(edge, prompt, subspace, change, before, cos, resid, norm):
        rows.append(dict(edge=edge, prompt=prompt, subspace=subspace, metric_change=change, metric_before=before,
                         head_input_cos=cos, final_resid_cos=resid, removed_norm_ratio=norm))

    add("e0", 0, "signal", -1.0, 2.0, 0.9, 0.999, 0.3)
    add("e1", 0, "signal", -3.0, 4.0, 0.8, 0.998, 0.1)
    add("e2", 1, "signal", 0.5, 2.0, 0.7, 0.997, 0.2)
    for i, (edge, prompt, change, before) in enumerate([("e0", 0, -0.2, 2.0), ("e0", 0, 0.1, 2.0),
                                                         ("e1", 0, 0.4, 4.0), ("e1", 0, -0.5, 4.0),
                                                         ("e2", 1, -0.25, 2.0), ("e2", 1, 0.5, 2.0),
                                                         ("e2", 1, -1.0, 2.0)]):
        add(edge, prompt, "random_score", change, before, 0.99 - 0.01 * i, 0.5, 0.01 * (i + 1))
        add(edge, prompt, "random", 50.0 + i, 1.0, 0.1, 0.1, 9.0)
    rows += list(extra_rows)
    return pd.DataFrame(rows)


def test_paired_summary_every_field_by_hand():
    from compendium.stats import geometric_mean_ci

    out = paired_summary(_table(), seed=3, n_boot=400)
    # per prompt: prompt 0 signal median(1, 3) = 2, draws median(0.1, 0.2, 0.4, 0.5) = 0.3 -> 20/3;
    #             prompt 1 signal 0.5, draws median(0.25, 0.5, 1.0) = 0.5 -> 1
    assert out["prompt_ratios"] == pytest.approx([20 / 3, 1.0], rel=1e-12)
    assert out["gm_ratio"] == pytest.approx(math.sqrt(20 / 3), rel=1e-12)
    assert (out["gm_ratio_ci_low"], out["gm_ratio_ci_high"]) == geometric_mean_ci(out["prompt_ratios"], n_boot=400,
                                                                                   seed=3)
    # pooled: median(1, 3, 0.5) = 1 over median(0.1, 0.2, 0.25, 0.4, 0.5, 0.5, 1.0) = 0.4
    assert out["abs_dld_ratio"] == pytest.approx(2.5, rel=1e-12)
    assert out["median_abs_dld_signal"] == 1.0 and out["median_abs_dld_control"] == 0.4
    # resampling two prompts: (0, 0) gives 20/3, (1, 1) gives 1, a mix gives the pooled 2.5; each extreme has
    # probability 1/4, so the 2.5th and 97.5th percentiles of 400 resamples are the extremes themselves
    assert out["abs_dld_ratio_ci_low"] == 1.0
    assert out["abs_dld_ratio_ci_high"] == pytest.approx(20 / 3, rel=1e-12)
    assert out["n_boot"] == 400
    # per edge: signal - mean of draws = 1 - 0.15, 3 - 0.45, 0.5 - 7/12 = 0.85, 2.55, -1/12; ranks 2, 3, 1:
    # W+ = 5, and P(W+ >= 5) over the 8 equally likely sign patterns of ranks {1, 2, 3} is 2/8
    assert out["wilcoxon_p"] == pytest.approx(0.25, rel=1e-12)
    # the signal above every draw: e0 (1 > 0.2) and e1 (3 > 0.5), not e2 (0.5 < 1)
    assert out["frac_edges_signal_above"] == pytest.approx(2 / 3, rel=1e-12)
    # dLD / LD: signal -0.5, -0.75, 0.25 -> -0.5; draws -0.1, 0.05, 0.1, -0.125, -0.125, 0.25, -0.5 -> -0.1
    assert out["median_rel_dld_signal"] == -0.5
    assert out["median_rel_dld_control"] == pytest.approx(-0.1, rel=1e-12)
    assert out["median_head_input_cos_signal"] == 0.8
    assert out["median_head_input_cos_control"] == pytest.approx(0.96, rel=1e-12)  # 0.99 .. 0.93
    assert out["median_final_resid_cos_signal"] == 0.998
    assert out["median_removed_norm_signal"] == 0.2
    assert out["median_removed_norm_control"] == pytest.approx(0.04, rel=1e-12)  # 0.01 .. 0.07
    assert (out["n_edges"], out["n_prompts"], out["n_draws"]) == (3, 2, 2)
    assert set(out) == {"gm_ratio", "gm_ratio_ci_low", "gm_ratio_ci_high", "prompt_ratios", "abs_dld_ratio",
                        "abs_dld_ratio_ci_low", "abs_dld_ratio_ci_high", "wilcoxon_p", "frac_edges_signal_above",
                        "median_abs_dld_signal", "median_abs_dld_control", "median_rel_dld_signal",
                        "median_rel_dld_control", "median_head_input_cos_signal", "median_head_input_cos_control",
                        "median_final_resid_cos_signal", "median_removed_norm_signal", "median_removed_norm_control",
                        "n_edges", "n_prompts", "n_draws", "n_boot"}
    assert all(type(v) is float for k, v in out.items() if k not in ("prompt_ratios", "n_edges", "n_prompts",
                                                                     "n_draws", "n_boot"))
    assert all(type(out[k]) is int for k in ("n_edges", "n_prompts", "n_draws", "n_boot"))
    # against the unmatched control: its draws (|dLD| 50 .. 56) are far larger than the signal's
    rnd = paired_summary(_table(), control="random", seed=3, n_boot=50)
    assert rnd["median_abs_dld_control"] == 53.0 and rnd["abs_dld_ratio"] == pytest.approx(1 / 53, rel=1e-12)
    assert rnd["frac_edges_signal_above"] == 0.0 and rnd["n_draws"] == 2


def test_paired_summary_edge_cases():
    def frame(signal, draws):
        return pd.DataFrame([dict(edge="e0", prompt=0, subspace=s, metric_change=c, metric_before=1.0,
                                  head_input_cos=1.0, final_resid_cos=1.0, removed_norm_ratio=0.0)
                             for s, c in [("signal", signal)] + [("random_score", d) for d in draws]])

    # a signal equal to its largest draw is not above it
    out = paired_summary(frame(0.5, [0.25, -0.5]), n_boot=20)
    assert out["frac_edges_signal_above"] == 0.0 and out["wilcoxon_p"] == 0.5  # one positive difference: p = 1/2
    # a signal equal to the mean of its draws: no difference, p = 1
    rows = frame(0.25, [0.125, -0.375, 0.25])
    out = paired_summary(rows, n_boot=20)
    assert out["frac_edges_signal_above"] == 0.0 and out["wilcoxon_p"] == 1.0
    assert out["abs_dld_ratio"] == 1.0 and out["abs_dld_ratio_ci_low"] == out["abs_dld_ratio_ci_high"] == 1.0
    assert out["n_boot"] == 20 and out["n_draws"] == 3
    rows = rows.to_dict("records")
    # a prompt with rows of another control only: a resample of it alone has no removals and is left out, so
    # fewer than n_boot resamples count, and every counted one is prompt 0's ratio 0.25 / 0.25
    extra = [dict(r, prompt=1, edge="x", subspace="random") for r in rows[1:]]
    out = paired_summary(pd.DataFrame(rows + extra), n_boot=200)
    assert 100 < out["n_boot"] < 200 and out["n_prompts"] == 2
    assert out["abs_dld_ratio_ci_low"] == out["abs_dld_ratio_ci_high"] == 1.0


def test_paired_summary_refusals():
    t = _table()
    with _raises(ValueError, "paired_summary: missing columns ['final_resid_cos', 'head_input_cos']"):
        paired_summary(t.drop(columns=["head_input_cos", "final_resid_cos"]))
    with _raises(ValueError, "paired_summary: need rows with subspace 'signal' and 'random_matched'"):
        paired_summary(t, control="random_matched")
    with _raises(ValueError, "paired_summary: need rows with subspace 'signal' and 'random_score'"):
        paired_summary(t[t["subspace"] != "signal"])
    with _raises(ValueError, "paired_summary: more than one signal row for an edge"):
        paired_summary(pd.concat([t, t[t["edge"] == "e1"].iloc[:1]]))
    with _raises(ValueError, "paired_summary: edges without 'random_score' draws: ['e1', 'e2']"):
        paired_summary(t[~(t["edge"].isin(["e1", "e2"]) & (t["subspace"] == "random_score"))])
    many = pd.concat([t.assign(edge=t["edge"] + f"_{i}") for i in range(7)])
    with _raises(ValueError, "paired_summary: edges without 'random_score' draws: ['e1_0', 'e1_1', 'e1_2', 'e1_3', "
                             "'e1_4']"):
        paired_summary(many[~(many["edge"].str.startswith("e1") & (many["subspace"] == "random_score"))])


def test_prompt_ratios_table_by_hand():
    t = prompt_ratios(_table())
    assert t.index.tolist() == [0, 1]
    assert list(t.columns) == ["median_abs_dld_signal", "median_abs_dld_control", "n_edges", "n_control", "ratio"]
    assert t["median_abs_dld_signal"].tolist() == [2.0, 0.5]
    assert t["median_abs_dld_control"].tolist() == pytest.approx([0.3, 0.5], rel=1e-12)
    assert t["n_edges"].tolist() == [2, 1] and t["n_control"].tolist() == [4, 3]
    assert str(t["n_edges"].dtype) == "int64" and str(t["n_control"].dtype) == "int64"
    assert t["ratio"].tolist() == pytest.approx([20 / 3, 1.0], rel=1e-12)
    r = prompt_ratios(_table(), control="random")  # |dLD| 50, 51, 52, 53 and 54, 55, 56
    assert r["median_abs_dld_control"].tolist() == [51.5, 55.0] and r["n_control"].tolist() == [4, 3]


def test_prompt_ratios_refusals():
    t = _table()
    with _raises(ValueError, "prompt_ratios: missing columns ['metric_change', 'prompt']"):
        prompt_ratios(t.drop(columns=["prompt", "metric_change"]))
    with _raises(ValueError, "prompt_ratios: need rows with subspace 'signal' and 'random_matched'"):
        prompt_ratios(t, control="random_matched")
    with _raises(ValueError, "prompt_ratios: need rows with subspace 'signal' and 'random_score'"):
        prompt_ratios(t[t["subspace"] != "signal"])
    with _raises(ValueError, "prompt_ratios: prompts [1] lack signal or 'random_score' removals"):
        prompt_ratios(t[~((t["prompt"] == 1) & (t["subspace"] == "signal"))])
    with _raises(ValueError, "prompt_ratios: prompts [0] lack signal or 'random_score' removals"):
        prompt_ratios(t[~((t["prompt"] == 0) & (t["subspace"] == "random_score"))])
    many = pd.concat([t.assign(prompt=t["prompt"] + 10 * i) for i in range(7)])
    many = many[~((many["prompt"] % 10 == 1) & (many["subspace"] == "signal"))]
    with _raises(ValueError, "prompt_ratios: prompts [1, 11, 21, 31, 41] lack signal or 'random_score' removals"):
        prompt_ratios(many)
    zero = t.assign(metric_change=np.where((t["prompt"] == 1) & (t["subspace"] == "random_score"), 0.0,
                                           t["metric_change"]))
    with _raises(ValueError, "prompt_ratios: on prompts [1] the median 'random_score' removal leaves the metric "
                             "unchanged; the ratio is undefined"):
        prompt_ratios(zero)
    many = pd.concat([zero.assign(prompt=zero["prompt"] + 10 * i) for i in range(7)])
    with _raises(ValueError, "prompt_ratios: on prompts [1, 11, 21, 31, 41] the median 'random_score' removal "
                             "leaves the metric unchanged; the ratio is undefined"):
        prompt_ratios(many)


def test_score_matching_error_by_hand():
    rows = [dict(edge="e0", subspace="signal", score_change=-2.0),
            dict(edge="e0", subspace="random_score", score_change=-2.5),
            dict(edge="e1", subspace="signal", score_change=4.0),
            dict(edge="e1", subspace="random_score", score_change=3.0),
            dict(edge="e1", subspace="random_score", score_change=4.25),
            dict(edge="e1", subspace="random", score_change=40.0)]
    # gaps 0.5, 1.0, 0.25 (the "random" row is not read) over the largest |signal| change 4
    assert score_matching_error(pd.DataFrame(rows)) == 0.25
    # against "random": gap 36 / 4
    assert score_matching_error(pd.DataFrame(rows), control="random") == 9.0
    small = [dict(edge="e0", subspace="signal", score_change=-0.5), dict(edge="e0", subspace="random_score",
                                                                           score_change=-0.25)]
    assert score_matching_error(pd.DataFrame(small)) == 0.5  # 0.25 / 0.5
    still = [dict(edge="e0", subspace="signal", score_change=0.0), dict(edge="e0", subspace="random_score",
                                                                         score_change=0.0)]
    assert score_matching_error(pd.DataFrame(still)) == 0.0  # no 0 / 0
    with _raises(ValueError, "score_matching_error: missing columns ['edge', 'score_change']"):
        score_matching_error(pd.DataFrame(rows).drop(columns=["score_change", "edge"]))
    with _raises(ValueError, "score_matching_error: need rows with subspace 'signal' and 'random_matched'"):
        score_matching_error(pd.DataFrame(rows), control="random_matched")
    with _raises(ValueError, "score_matching_error: need rows with subspace 'signal' and 'random_score'"):
        score_matching_error(pd.DataFrame(rows[1:2]))


# ----------------------------------------------------------------------------- measure_intervention_selective
def test_intervention_selective_fixed_texts_config_and_refusals():
    """The parts of the Measurement not read from the paired summaries (those are checked field by field in
    test_accpp_measures.py): the unit, the control's description, the config, a table without score_scale or
    sing columns, and each refusal's whole message."""
    from accpp.interventions import measure_intervention_selective

    t = _table().assign(attn_drop=0.125, score_change=-1.0)
    paired = {c: paired_summary(t, control="random_score", n_boot=20) for c in CONTROLS}
    m = measure_intervention_selective(t, paired, consistency=1e-9, n_random=3)
    assert m.claim == "accpp/intervention-selective"
    assert m.unit == "x (median |dLD| per prompt, signal / score-matched random; geometric mean over prompts)"
    assert m.evidence["control"] == ("random_score (same directions as random, rescaled so that the firing's raw "
                                     "score changes as much as under the signal's removal)")
    assert m.config == {}
    assert math.isnan(m.evidence["median_abs_score_scale"])  # no score_scale column: not measured
    assert m.evidence["score_matching_rel_error"] == 0.0 and m.evidence["median_attn_drop_signal"] == 0.125
    assert m.evidence["prompt_ratios"] == [6.6667, 1.0]  # 20/3 and 1 (see the paired summary's test), 4 decimals
    assert list(m.tables["04_signal_interventions"].columns) == list(t.columns)  # no sing column to drop
    cfg = dict(model="tiny", n_prompts=2)
    m = measure_intervention_selective(t.assign(sing=[[0]] * len(t)), paired, 0.0, 3, config=cfg)
    assert m.config == cfg and m.config is not cfg
    assert list(m.tables["04_signal_interventions"].columns) == list(t.columns)
    assert m.note.startswith("tiny, 2 IOI prompts, 3 signal edges into seed firings, 3 draws per control.")
    who = "measure_intervention_selective"
    with _raises(ValueError, f"{who}: no paired summary against ['random', 'random_score']"):
        measure_intervention_selective(t, {"random_matched": paired["random_matched"]}, 0.0, 3)
    for col in ("subspace", "attn_drop", "score_change"):
        with _raises(ValueError, f"{who}: the intervention table lacks column {col!r}"):
            measure_intervention_selective(t.drop(columns=[col]), paired, 0.0, 3)
    with _raises(ValueError, f"{who}: no signal removals in the table"):
        measure_intervention_selective(t[t["subspace"] != "signal"], paired, 0.0, 3)


# ----------------------------------------------------------------------------- Intervener.remove, no model
def _removal():
    """The head-space stand-in of _head_space (layer 1, head 3, firing A1.3@3<1, scale 0.5) with layer 1's input
    space: no RoPE, no q/k-norm, W_Q[3] and W_K[1] as in _input_space, so the minimum-norm dx~ is
        query side: (delta0 / 2, delta1, delta0 / 2)        key side: (delta1, delta0 / 2, 0).
    Residual entering layer 1 and its norm scale: rows (2, 0, 0), (0, 2, 0), (0, 0, 2), (2, 2, 0) and sigma
    1, 2, 1, 2, so x~ = (2, 0, 0), (0, 1, 0), (0, 0, 2), (1, 1, 0). The forward pass is a stand-in too (apply):
    every entry of the clean and patched attention weights and scores is distinct, so reading a wrong one
    shows."""
    iv = _head_space()
    f64 = dict(dtype=torch.float64)
    Wq, Wk = _input_space().arch.layers[1].wq_eff(3), _input_space().arch.layers[1].wk_eff(1)
    lw = iv.arch.layers[1]
    lw.q_norm = lw.k_norm = None
    lw.wq_eff = lambda h: Wq if h == 3 else torch.full((3, 2), 5.0, **f64)
    lw.wk_eff = lambda kv: Wk if kv == 1 else torch.full((3, 2), 5.0, **f64)
    resid = torch.zeros(3, 4, 3, **f64)
    resid[1] = torch.tensor([[2.0, 0, 0], [0, 2, 0], [0, 0, 2], [2, 2, 0]])
    sigma = torch.full((2, 4), 7.0, **f64)
    sigma[1] = torch.tensor([1.0, 2.0, 1.0, 2.0])
    iv.dec = SimpleNamespace(rot=[None, None], acts=SimpleNamespace(resid=resid), sigma=sigma)
    attn = torch.arange(2 * 4 * 4 * 4, **f64).reshape(2, 4, 4, 4) / 1000  # attn[1, 3, 3, 1] = 125 / 1000
    iv.clean = SimpleNamespace(metric=2.0, attn=attn, final_resid=torch.tensor([1.0, 0.0, 0.0], **f64))
    scores = torch.arange(16, **f64).reshape(4, 4)  # clean score at (3, 1): 13, at (3, 2): 14
    out = SimpleNamespace(metric=1.25, attn=attn * 2, final_resid=torch.tensor([1.0, 1.0, 0.0], **f64))
    patch = SimpleNamespace(clean_scores=scores, scores=0.5 - scores)  # patched (3, 1): -12.5, (3, 2): -13.5
    iv.applied = []
    iv.apply = lambda spec, delta: (iv.applied.append((spec, delta)), (out, patch))[1]
    return iv


def _same(result: InterventionResult, **want):
    for k, v in want.items():
        got = getattr(result, k)
        if isinstance(v, float):
            assert got == pytest.approx(v, rel=1e-12, abs=1e-12), k
        else:
            assert got == v, k


def test_remove_fields_signal_query_side():
    iv = _removal()
    spec = _hspec()  # MLP 0 at the destination, query side, K = {0}: delta = (5, -10) (head_delta's test)
    r = iv.remove(spec)
    # dx~ = (2.5, -10, 2.5); x~_3 = (1, 1, 0): |dx~| / |x~| = sqrt(112.5 / 2) = 7.5;
    # x~ - dx~ = (-1.5, 11, -2.5): cos = (-1.5 + 11) / sqrt(2 * 129.5)
    # |delta| / |qf_3| = sqrt(125 / 128); the score change -0.5 * (5, -10) . kf_1 = -0.5 * (5 * -2 - 10 * 2) = 15
    _same(r, spec=spec, subspace="signal", sing_removed=(0,), seed=None, metric_before=2.0, metric_after=1.25,
          attn_before=0.125, attn_after=0.25, final_resid_cos=1 / math.sqrt(2), removed_norm_ratio=7.5,
          head_input_cos=9.5 / math.sqrt(259), delta_norm_ratio=math.sqrt(125 / 128), score_before=13.0,
          score_after=-12.5)
    assert r.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=15.0)
    assert len(iv.applied) == 1 and iv.applied[0][0] == spec and _list(iv.applied[0][1]) == [5.0, -10.0]
    assert all(type(getattr(r, k)) is float for k in ("attn_before", "attn_after", "final_resid_cos", "head_input_cos",
                                                       "removed_norm_ratio", "delta_norm_ratio", "score_before",
                                                       "score_after"))


def test_remove_fields_random_and_matched_controls():
    iv = _removal()
    spec = _hspec()
    # d_head 2, K = {0}: the only other direction is 1; delta = (0, 7), dx~ = (0, 7, 0); score change
    # -0.5 * (0, 7) . (-2, 2) = -7
    raw = iv.remove(spec, "random", seed=4)
    _same(raw, subspace="random", sing_removed=(1,), seed=4, removed_norm_ratio=7 / math.sqrt(2),
          head_input_cos=(1 - 6) / math.sqrt(2 * (1 + 36)), delta_norm_ratio=7 / math.sqrt(128))
    assert raw.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=-7.0)
    # matched in removed norm: scale |dx~_signal| / |dx~| = sqrt(112.5) / 7; dx~ = (0, sqrt(112.5), 0)
    m = iv.remove(spec, "random_matched", seed=4)
    s = math.sqrt(112.5) / 7
    _same(m, subspace="random_matched", sing_removed=(1,), seed=4, removed_norm_ratio=7.5,
          head_input_cos=(1 + 1 - math.sqrt(112.5)) / math.sqrt(2 * (1 + (1 - math.sqrt(112.5)) ** 2)),
          delta_norm_ratio=math.sqrt(112.5 / 128))
    assert m.extra["norm_scale"] == pytest.approx(s, rel=1e-12) and m.extra["score_scale"] == 1.0
    assert m.extra["predicted_score_change"] == pytest.approx(-7 * s, rel=1e-12)
    assert _list(iv.applied[-1][1]) == pytest.approx([0.0, 7 * s], rel=1e-12)
    # matched in removed score: scale 15 / -7; delta = (0, -15), dx~ = (0, -15, 0), predicted change 15
    sc = iv.remove(spec, "random_score", seed=4)
    _same(sc, subspace="random_score", sing_removed=(1,), seed=4, removed_norm_ratio=15 / math.sqrt(2),
          head_input_cos=17 / math.sqrt(2 * 257), delta_norm_ratio=15 / math.sqrt(128))
    assert sc.extra["norm_scale"] == 1.0
    assert sc.extra["score_scale"] == pytest.approx(-15 / 7, rel=1e-12)
    assert sc.extra["predicted_score_change"] == pytest.approx(15.0, rel=1e-12)
    assert _list(iv.applied[-1][1]) == pytest.approx([0.0, -15.0], rel=1e-12)
    # explicit indices: K = {0, 1}, delta = (5, -3), dx~ = (2.5, -3, 2.5); x~ - dx~ = (-1.5, 4, -2.5)
    c = iv.remove(spec, "custom", sing=[1, np.int64(0)])
    _same(c, subspace="custom", sing_removed=(1, 0), seed=None, removed_norm_ratio=math.sqrt(21.5 / 2),
          head_input_cos=2.5 / math.sqrt(2 * 24.5), delta_norm_ratio=math.sqrt(34 / 128))
    assert all(type(k) is int for k in c.sing_removed)
    assert c.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=-0.5 * (5 * -2 - 3 * 2))


def test_remove_fields_key_side():
    iv = _removal()
    # one key position (token 2, K = {1}): delta = (-6, 2), dx~ = (2, -3, 0), x~_2 = (0, 0, 2);
    # matched entry (3, 2): clean 14, patched -13.5; |delta| / |kf_2| = sqrt(40 / 25)
    k = _hspec(side="s", token=2, sing=(1,))
    r = iv.remove(k)
    _same(r, removed_norm_ratio=math.sqrt(13 / 4), head_input_cos=4 / math.sqrt(4 * 17),
          delta_norm_ratio=math.sqrt(40 / 25), score_before=14.0, score_after=-13.5, attn_before=0.125,
          attn_after=0.25)
    assert r.extra["predicted_score_change"] == 32.0
    # spanning (every key position 0..3, K = {1}): delta rows (0, 0), (3, -1), (-6, 2), (-3, 1); dx~ rows
    # (0, 0, 0), (-1, 1.5, 0), (2, -3, 0), (1, -1.5, 0); over all positions |x~|^2 = 11, |dx~|^2 = 19.5,
    # x~ . (x~ - dx~) = 10, |x~ - dx~|^2 = 28.5; |delta|^2 = 60 over |kf_0..3|^2 = 51; the firing's entry (3, 1)
    span = _hspec(side="s", token=1, span=True, sing=(1,))
    r = iv.remove(span)
    _same(r, removed_norm_ratio=math.sqrt(19.5 / 11), head_input_cos=10 / math.sqrt(11 * 28.5),
          delta_norm_ratio=math.sqrt(60 / 51), score_before=13.0, score_after=-12.5)
    assert r.extra["predicted_score_change"] == -16.0
    assert _list(iv.applied[-1][1]) == [[0, 0], [3, -1], [-6, 2], [-3, 1]]


def test_remove_refusals():
    iv = _removal()
    spec = _hspec()
    for control in CONTROLS:
        with _raises(ValueError, f"subspace={control!r} needs a seed"):
            iv.remove(spec, control)
    with _raises(ValueError, "subspace='custom' needs sing="):
        iv.remove(spec, "custom")
    with _raises(ValueError, "unknown subspace 'orthogonal': 'signal', 'random', 'random_matched', 'random_score' "
                             "or 'custom'"):
        iv.remove(spec, "orthogonal", seed=1)
    with _raises(ValueError, "unknown side 'x': 'd' (query side) or 's' (key side)"):  # validated first
        iv.remove(_hspec(side="x"), "orthogonal")
    # the embedding's coefficients at token 3 are (1, 0): nothing on the random direction 1
    emb = _hspec(kind=KIND_EMB, comp_layer=-1)
    with _raises(ValueError, "E@3 -> A1.3@3<1 (query, k=[0]): the component has no part on the random directions "
                             "[1]; cannot match the signal's removed norm"):
        iv.remove(emb, "random_matched", seed=0)
    with _raises(ValueError, "E@3 -> A1.3@3<1 (query, k=[0]): removing the component's part on the random "
                             "directions [1] leaves the score at (3, 1) unchanged; cannot match the signal's change "
                             "of the score"):
        iv.remove(emb, "random_score", seed=0)
    assert iv.applied == []  # nothing reached the model


def _pooled_bootstrap(df, control: str, seed: int, n_boot: int) -> list[float]:
    """The pooled ratio's resamples from their definition: the prompts (sorted) drawn with replacement by
    numpy's default_rng(seed).choice, each bringing all its signal and control |dLD|; a resample without
    both kinds of removals counts for nothing."""
    prompts = sorted(df["prompt"].unique())
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        pick = rng.choice(prompts, size=len(prompts), replace=True)
        s = [abs(v) for q in pick for v in df[(df["prompt"] == q) & (df["subspace"] == "signal")]["metric_change"]]
        c = [abs(v) for q in pick for v in df[(df["prompt"] == q) & (df["subspace"] == control)]["metric_change"]]
        if s and c:
            out.append(float(np.median(s) / np.median(c)))
    return out


def _five_prompts():
    """Five prompts of two edges each: e<p> with signal |dLD| 1 + 0.37 p and draws 0.2 + 0.05 p, 0.3 + 0.11 p;
    f<p> with 0.5 + 0.29 p^2 and draws 0.1 + 0.07 p^2, 0.25 + 0.03 p."""
    rows = []
    for p in range(5):
        base = dict(prompt=p, metric_before=1.0, head_input_cos=0.9, final_resid_cos=1.0, removed_norm_ratio=0.1)
        for edge, sig, draws in ((f"e{p}", 1 + 0.37 * p, (-(0.2 + 0.05 * p), 0.3 + 0.11 * p)),
                                 (f"f{p}", 0.5 + 0.29 * p * p, (-(0.1 + 0.07 * p * p), 0.25 + 0.03 * p))):
            rows.append(base | dict(edge=edge, subspace="signal", metric_change=-sig))
            rows += [base | dict(edge=edge, subspace="random_score", metric_change=c) for c in draws]
    return pd.DataFrame(rows)


def test_paired_summary_intervals_follow_their_seed():
    from compendium.stats import geometric_mean_ci

    df = _five_prompts()
    out = paired_summary(df, seed=3, n_boot=20)
    ratios = prompt_ratios(df)["ratio"].tolist()
    assert out["prompt_ratios"] == ratios
    gm = geometric_mean_ci(ratios, n_boot=20, seed=3)
    assert (out["gm_ratio_ci_low"], out["gm_ratio_ci_high"]) == pytest.approx(gm, rel=1e-12)
    assert gm != geometric_mean_ci(ratios, n_boot=20, seed=0)  # the seed matters here
    boot = _pooled_bootstrap(df, "random_score", seed=3, n_boot=20)
    assert len(boot) == 20 == out["n_boot"]
    assert out["abs_dld_ratio_ci_low"] == pytest.approx(float(np.percentile(boot, 2.5)), rel=1e-12)
    assert out["abs_dld_ratio_ci_high"] == pytest.approx(float(np.percentile(boot, 97.5)), rel=1e-12)
    assert np.percentile(boot, 2.5) != np.percentile(boot, 3.5)  # the levels matter here
    assert np.percentile(boot, 97.5) != np.percentile(boot, 96.5)
    assert paired_summary(df, seed=3, n_boot=20) == out
    # the defaults: seed 0, 2000 resamples
    assert paired_summary(df, n_boot=20) == paired_summary(df, seed=0, n_boot=20) != paired_summary(df, seed=1,
                                                                                                     n_boot=20)
    assert paired_summary(df)["n_boot"] == 2000


def test_paired_summary_without_a_usable_resample():
    """Prompt 0 has removals, prompts 1..5 only rows of another control: with one resample that draws none of
    prompt 0 the pooled interval is undefined (nan) and counts no resample."""
    df = _five_prompts()
    df = pd.concat([df[df["prompt"] == 0]] + [df[df["prompt"] == 0].assign(prompt=p, edge=df["edge"] + f"x{p}",
                                                                            subspace="random") for p in range(1, 6)])
    seed = next(s for s in range(100) if not _pooled_bootstrap(df, "random_score", s, 1))
    out = paired_summary(df, seed=seed, n_boot=1)
    assert out["n_boot"] == 0 and out["n_prompts"] == 6
    assert math.isnan(out["abs_dld_ratio_ci_low"]) and math.isnan(out["abs_dld_ratio_ci_high"])
    # prompt 0: median(1, 0.5) / median(0.2, 0.3, 0.1, 0.25) = 0.75 / 0.225
    assert out["abs_dld_ratio"] == pytest.approx(0.75 / 0.225, rel=1e-12)


def test_intervener_init_reads_the_tracer(monkeypatch):
    """The constructor without a model: the tracer's decomposition, the solver built on it with the tracer's
    variant ("authors" when its config names none), the position modulo the prompt length, one clean run."""
    import accpp.interventions as ivm

    made = []
    monkeypatch.setattr(ivm, "FiringSolver", lambda dec, svd, variant: made.append((dec, svd, variant)) or "solver")
    monkeypatch.setattr(ivm.Intervener, "run", lambda self: ("clean", self.replay))
    dec = SimpleNamespace(T=6)
    decomposed = []

    def tracer(config):
        return SimpleNamespace(arch=SimpleNamespace(model_type="llama"), model="model", svd="svd", config=config,
                               decompose=lambda ids: decomposed.append(ids.tolist()) or dec)

    iv = Intervener(tracer(SimpleNamespace()), [[3, 1, 4, 1, 5, 9]], np.int64(7), 11.0, position=-2)
    assert (iv.model, iv.arch.model_type, iv.tracer.svd) == ("model", "llama", "svd")
    assert iv.ids.tolist() == [3, 1, 4, 1, 5, 9] and decomposed == [[3, 1, 4, 1, 5, 9]]
    assert (iv.correct, iv.wrong) == (7, 11) and type(iv.correct) is int and type(iv.wrong) is int
    assert iv.dec is dec and iv.T == 6 and iv.position == 4 and iv.variant == "authors"
    assert iv.solver == "solver" and made == [(dec, "svd", "authors")]
    assert iv.replay is True and iv.clean == ("clean", True)
    iv = Intervener(tracer(SimpleNamespace(variant="per-position")), [3, 1, 4], 1, 2, position=1, replay=False)
    assert iv.variant == "per-position" and made[-1][2] == "per-position"
    assert iv.position == 1 and iv.replay is False and iv.clean == ("clean", False)
    with _raises(UnsupportedArchitecture, "signal interventions are implemented for the llama-like adapters (llama, "
                                          "gemma2, gemma3_text): they hook q_proj/k_proj/v_proj/o_proj (and "
                                          "q_norm/k_norm) of the attention module; model_type 'gpt2' is not "
                                          "supported"):
        Intervener(SimpleNamespace(arch=SimpleNamespace(model_type="gpt2")), [1], 1, 2)


def test_top_seed_edges_breaks_ties_by_source_then_firing_then_key():
    g = nx.MultiDiGraph()
    g.add_node("L", kind="logits", layer=3, head=-1, dest=9, src=-1)
    g.add_node("F", kind="head", layer=2, head=1, dest=9, src=4, traced=True)
    g.add_node("G", kind="head", layer=2, head=0, dest=9, src=3, traced=True)
    g.add_node("A", kind="head", layer=0, head=2, dest=9, src=1)
    g.add_node("M", kind="mlp", layer=1, head=-1, dest=9, src=9)
    g.add_node("Z", kind="mlp", layer=0, head=-1, dest=9, src=9)
    for seed in ("F", "G"):
        g.add_edge(seed, "L", side="seed", token=9, sing=[], attribution=1.0, drop=1.0)
    g.add_edge("Z", "F", side="d", token=9, sing=[0], attribution=0.7, drop=0.0)
    g.add_edge("A", "G", side="d", token=9, sing=[1], attribution=0.7, drop=0.0)
    g.add_edge("M", "F", side="d", token=9, sing=[2], attribution=0.1, drop=0.0)   # key 0
    g.add_edge("M", "F", side="d", token=9, sing=[3], attribution=0.5, drop=0.0)   # key 1
    g.add_edge("M", "G", side="d", token=9, sing=[4], attribution=0.5, drop=0.0)   # key 0
    # 0.7: A before Z (source names); 0.5: M -> F (key 1) before M -> G (key 0) (firing names first)
    assert [s.describe() for s in top_seed_edges(g, 5)] == [
        "A0.2<1@9 -> A2.0@9<3 (query, k=[1])", "M0@9 -> A2.1@9<4 (query, k=[0])", "M1@9 -> A2.1@9<4 (query, k=[3])",
        "M1@9 -> A2.0@9<3 (query, k=[4])", "M1@9 -> A2.1@9<4 (query, k=[2])"]



# ----------------------------------------------------------------------------- head_patch, no model
def _patch(side="d", delta=None, q_norm=None, k_norm=None, rotary_dims=2) -> "head_patch":
    """head_patch on layer 0, head 1 (kv head 0) of a stand-in module tree: 2 query heads, 1 kv head, d_head 2."""
    from torch import nn

    from accpp.interventions import head_patch

    attn = nn.Module()
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        setattr(attn, name, nn.Identity())
    block = nn.Module()
    block.attn = attn
    model = nn.Module()
    model.layers = nn.ModuleList([block])
    lw = SimpleNamespace(kv_of=lambda h: h // 2, q_norm=q_norm, k_norm=k_norm, rotary_dims=rotary_dims)
    arch = SimpleNamespace(model_type="llama", layers=[lw], layers_path="layers", attn_name="attn", d_head=2)
    return head_patch(model, arch, 0, 1, side, 1, delta)


def test_head_patch_construction_and_hooks():
    from accpp.interventions import head_patch

    p = _patch(delta=torch.tensor([1.0, 2.0]))  # float32 in, float64 kept
    assert p.delta.dtype == torch.float64 and p.delta.tolist() == [1.0, 2.0]
    assert (p.L, p.a, p.kv, p.side, p.row) == (0, 1, 0, "d", 1)
    assert p.pattern is None and p.scores is None and p.clean_scores is None and p._handles == []
    assert _patch().delta is None
    with _raises(ValueError, "unknown side 'q': 'd' (query side) or 's' (key side)"):
        _patch(side="q")
    with _raises(UnsupportedArchitecture, "signal interventions are implemented for the llama-like adapters (llama, "
                                          "gemma2, gemma3_text): they hook q_proj/k_proj/v_proj/o_proj (and "
                                          "q_norm/k_norm) of the attention module; model_type 'gpt2' is not "
                                          "supported"):
        head_patch(None, SimpleNamespace(model_type="gpt2"), 0, 0, "d", 0, None)
    attn = p.attn
    with p:
        assert len(p._handles) == 5
        assert [len(m._forward_hooks) for m in (attn.q_proj, attn.k_proj, attn.v_proj)] == [1, 1, 1]
        assert len(attn._forward_pre_hooks) == 1 and len(attn.o_proj._forward_pre_hooks) == 1
    assert p._handles == []
    assert [len(m._forward_hooks) for m in (attn.q_proj, attn.k_proj, attn.v_proj)] == [0, 0, 0]
    assert len(attn._forward_pre_hooks) == 0 and len(attn.o_proj._forward_pre_hooks) == 0
    with pytest.raises(RuntimeError, match="^inside$"):  # an error in the pass is not swallowed
        with p:
            raise RuntimeError("inside")
    assert p._handles == []


def test_head_patch_reads_rope_from_keyword_or_second_argument():
    p = _patch()
    pe = ("cos", "sin")
    p._grab_rope(None, ("x",), {"position_embeddings": pe})
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x", pe), {})
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x", "other", "third"), {"position_embeddings": pe})  # the keyword first
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x",), {})
    assert p._seen["rope"] is None
    p._grab_rope(None, ("x",), {"position_embeddings": None})
    assert p._seen["rope"] is None


def test_head_patch_head_tensors():
    p = _patch()
    f32 = dict(dtype=torch.float32)
    # projections (1, T, n * dh): head 1 of q is columns 2..3; kv head 0 of k and v columns 0..1
    p._seen = dict(q=torch.tensor([[[1, 2, 3, 4], [5, 6, 7, 8]]], **f32), k=torch.tensor([[[1, 0], [0, 1]]], **f32),
                   v=torch.tensor([[[2, 3], [4, 5]]], **f32))
    q, k, v = p._head_tensors()  # no rotary embedding passed: unrotated
    assert [q.tolist(), k.tolist(), v.tolist()] == [[[3, 4], [7, 8]], [[1, 0], [0, 1]], [[2, 3], [4, 5]]]
    assert q.dtype == k.dtype == v.dtype == torch.float64
    # RoPE: token 0 cos 1 sin 0 (unchanged), token 1 cos 0 sin 1: (x0, x1) -> (-x1, x0)
    p._seen["rope"] = (torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]), torch.tensor([[[0.0, 0.0], [1.0, 1.0]]]))
    q, k, v = p._head_tensors()
    assert [q.tolist(), k.tolist(), v.tolist()] == [[[3, 4], [-8, 7]], [[1, 0], [-1, 0]], [[2, 3], [4, 5]]]
    # a layer without rotary dims ignores the embeddings it is passed
    p.lw.rotary_dims = 0
    assert p._head_tensors()[0].tolist() == [[3, 4], [7, 8]]
    # q/k-norm outputs are (1, n, T, dh): head 1 of q, kv head 0 of k
    n = _patch(q_norm=object(), k_norm=object(), rotary_dims=0)
    n._seen = dict(q=torch.arange(8.0).reshape(1, 2, 2, 2), k=torch.arange(4.0).reshape(1, 1, 2, 2) + 10,
                   v=p._seen["v"])
    q, k, _ = n._head_tensors()
    assert q.tolist() == [[4, 5], [6, 7]] and k.tolist() == [[10, 11], [12, 13]]
    p._seen["q"] = torch.zeros(2, 2, 4)
    with _raises(ValueError, "interventions run one prompt at a time (batch size 1)"):
        p._head_tensors()


# ----------------------------------------------------------------------------- one tiny model
def test_a_removal_at_layer_0_acts_with_and_without_replay(exact):
    """replay=False recomputes every layer, replay=True replays the clean outputs of the layers below the
    intervened one: the same numbers, here for a removal in layer 0 itself (the whole embedding at head 0.1's
    query), which must reach the model either way."""
    from accpp.testing import random_prompt, tiny_model
    from accpp.trace import TraceConfig, Tracer

    tracer = Tracer(tiny_model("llama"), config=TraceConfig(expand_layer0=True))
    ids = random_prompt(8)
    replayed, recomputed = Intervener(tracer, ids, 7, 11), Intervener(tracer, ids, 7, 11, replay=False)
    src = int(replayed.clean.attn[0, 1, 7, :8].argmax())
    spec = SignalSpec(0, 1, 7, src, "d", KIND_EMB, -1, -1, -1, 7, tuple(range(tracer.arch.d_head)))
    a, b = replayed.remove(spec), recomputed.remove(spec)
    assert abs(a.attn_after - a.attn_before) > 1e-6
    assert b.attn_before == a.attn_before and b.attn_after == pytest.approx(a.attn_after, abs=1e-12)
    assert b.metric_after == pytest.approx(a.metric_after, abs=1e-12)
