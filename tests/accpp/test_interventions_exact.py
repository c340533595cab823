"""accpp.interventions and accpp.head_patch at the value level: each helper on tiny hand-made inputs, every output field
against a number or string worked out by hand (in the comments), every refusal with its whole message.

The Intervener's methods that read only the architecture, the decomposition and the solver run on a
bare Intervener whose ``arch`` / ``dec`` / ``solver`` are small stand-ins (no model, no forward pass);
the forward-pass side is covered on tiny models in test_interventions.py.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import torch

from accpp.arch import UnsupportedArchitecture
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_OFFSET
from accpp.head_patch import SIDES, SUPPORTED, _rotate, check_supported
from accpp.interventions import (CONTROLS, InterventionResult, Intervener, NotASignalEdge, SignalSpec, _cos, _span,
                                 compare_subspaces, random_subspace, top_seed_edges)
from accpp.signals import Firing, SignalEdge
from tests.accpp.interventions_standins import (COEFFS, MLP0, _bare, _head_space, _hspec, _input_space, _list,
                                                _raises, _spec)

TOL = 1e-12

TOL = 1e-12






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


