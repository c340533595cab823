"""The step-by-step ACC++ of accpp.teaching against the tracer, and its own pieces against hand-made cases.

The teaching code recomputes every step from the Hugging Face model's weights, independently of
accpp.decompose / accpp.signals / accpp.trace; on a tiny float64 Llama (with HF's norms and softmax
kept in float64, ``float64_exact``) both must agree to rounding. Tolerance 1e-10: the identities are
exact in real arithmetic and hold to ~1e-14 in float64.
"""
from __future__ import annotations

import pytest
import torch

from accpp import teaching as tch
from accpp.arch import from_model
from accpp.decompose import Decomposition, collect, head_svds
from accpp.signals import Firing, FiringSolver, ig_direction
from accpp.testing import float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer, seeds

TOL = 1e-10
KINDS = {0: "emb", 1: "head", 2: "mlp"}


@pytest.fixture(scope="module")
def llama():
    with float64_exact():
        model = tiny_model("llama")
        ids = random_prompt(11)
        fw = tch.run_forward(model, ids)
        arch = from_model(model)
        dec = Decomposition(arch, collect(model, arch, ids))
        yield model, ids, fw, dec, FiringSolver(dec, head_svds(arch), variant="authors")


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _firings(fw):
    """Every firing of layers 1-2 at two destinations that reaches tau (the ones the tracer expands; ~20,
    several needing more than one candidate removed, one with a key-side signal from a head whose source
    is s itself), plus a layer-0 firing and two weak ones (A_ds < tau)."""
    out = [(L, a, d, s) for L in (1, 2) for a in range(fw.attn.shape[1]) for d in (6, 10) for s in range(d + 1)
           if float(fw.attn[L, a, d, s]) >= tch.tau(d + 1)]
    weak = [(L, 1, 8, int(fw.attn[L, 1, 8, :9].argmin())) for L in (1, 2)]
    return out + [(0, 2, 5, int(fw.attn[0, 2, 5, :6].argmax()))] + weak


def test_forward_matches_the_tracers_pass(llama):
    _, _, fw, dec, _ = llama
    for name, mine, lib in (("resid", fw.resid, dec.acts.resid), ("attn", fw.attn, dec.acts.attn),
                            ("mlp", fw.mlp, dec.mlp), ("vo", fw.vo, dec.vo)):
        assert float((mine - lib).abs().max()) < TOL, name


def test_components_sum_to_the_residual(llama):
    _, _, fw, _, _ = llama
    for L in range(fw.n_layers + 1):
        for t in range(fw.ids.numel()):
            vecs, labels = tch.components(fw, L, t)
            assert vecs.shape[0] == labels.shape[0] == 1 + L * fw.attn.shape[1] * (t + 1) + L
            assert _rel(vecs.sum(0), fw.resid[L, t]) < TOL
            assert _rel(tch.rebuilt_residual(fw, L, t + 1)[t], fw.resid[L, t]) < TOL


def test_svd_and_rotation_fold(llama):
    model, _, fw, dec, solver = llama
    R = tch.rotation_matrices(fw)
    for L in range(fw.n_layers):
        assert float((R - dec.rot[L]).abs().max()) < TOL
        hf = tch.head_forms(model, L, 1)
        dh = hf.sig.numel()
        assert _rel(hf.U * hf.sig @ hf.V.T, hf.Omega) < TOL
        assert float(torch.linalg.svdvals(hf.Omega)[dh:].max() / hf.sig[0]) < TOL  # rank d_head
        assert _rel(hf.sig, solver.svd.S[L, 1]) < TOL
        x = torch.randn(hf.W_Q.shape[0], dtype=torch.float64)
        for t in (0, 5):
            assert _rel(x @ tch.fold_rotation(hf.W_Q, R[t]) @ hf.W_Q, x @ hf.W_Q @ R[t]) < TOL


def test_each_step_equals_the_tracer(llama):
    model, _, fw, _, solver = llama
    R = tch.rotation_matrices(fw)
    removed = []
    for L, a, d, s in _firings(fw):
        st = tch.explain_firing(model, fw, L, a, d, s, R)
        removed += [len(st.sides[side]["removed"]) for side in "ds"]
        assert _rel(st.S, solver.scores(L, a, d)[0]) < TOL
        assert float((torch.softmax(st.S, -1) - fw.attn[L, a, d, : d + 1]).abs().max()) < TOL
        assert st.tau == min(1.0, 2.5 / (d + 1))
        f = Firing(L, a, d, s)
        G = ig_direction(st.S, s)
        assert float((st.G - G).abs().max()) < TOL
        for side, lib in (("d", solver.query_candidates(f)), ("s", solver.key_candidates(f))):
            mine = st.sides[side]
            assert _rel(mine["rows"].sum(0), st.S) < TOL, (side, L, a, d, s)  # the family sums to the score row
            assert float((mine["rows"] - lib.rows(torch.arange(lib.size))).abs().max()) < TOL * float(st.S.abs().max())
            assert float((mine["attribution"] - lib.attribution(G)).abs().max()) < TOL
            assert abs(float(mine["attribution"].sum() - st.S @ st.G)) < TOL  # completeness of the family
        res = solver.solve(f)
        lib_edges = {(e.side, KINDS[e.kind], e.layer, e.head, e.token, e.src): e for e in res.edges}
        my_edges = {(e["side"], e["kind"], e["layer"], e["head"], e["token"], e["src"]): e for e in st.edges}
        assert lib_edges.keys() == my_edges.keys(), (L, a, d, s)
        for k, e in lib_edges.items():
            m = my_edges[k]
            assert m["sing"] == e.sing
            for field in ("weight", "drop", "attribution"):
                assert abs(m[field] - getattr(e, field)) < TOL, (k, field)
    assert max(removed) >= 4  # the greedy ran several steps somewhere


def test_whole_circuit_equals_the_tracers(llama):
    model, ids, fw, _, _ = llama
    pos = ids.numel() - 1
    correct, wrong = int(fw.logits.argmax()), int(fw.logits.argmin())
    with float64_exact():
        nodes, edges = tch.trace_circuit(model, fw, pos, correct, wrong)
        g = Tracer(model, None, None, TraceConfig(variant="authors")).trace(ids, correct, wrong).graph
    assert sum(a.get("traced", False) for a in nodes.values()) >= 2  # the recursion went past the seeds
    assert set(nodes) == set(g.nodes)
    assert {n for n, a in nodes.items() if a.get("traced")} == {n for n, a in g.nodes(data=True) if a.get("traced")}

    def key(u, v, a):
        return (u, v, a["side"], tuple(a.get("sing", ())))

    mine = sorted((key(u, v, a), a["weight"]) for u, v, a in edges)
    lib = sorted((key(u, v, a), a["weight"]) for u, v, a in g.edges(data=True))
    assert [k for k, _ in mine] == [k for k, _ in lib]
    assert max(abs(x - y) for (_, x), (_, y) in zip(mine, lib)) < TOL


def test_seed_projections_sum_to_the_logit_difference(llama):
    model, ids, fw, _, _ = llama
    proj, labels = tch.seed_projections(model, fw, ids.numel() - 1, 3, 7)
    assert abs(float(proj.sum()) - float(fw.logits[3] - fw.logits[7])) < TOL
    assert labels.shape == (proj.numel(), 4)


def test_seed_cutoff_by_hand_and_against_the_tracer():
    assert tch.seed_cutoff(torch.tensor([1.0, 3.0, -1.0, 2.0])) == 1.0  # cumsum 3, 5, 6 > total 5 at value 1
    assert tch.seed_cutoff(torch.tensor([10.0, -1.0])) == 4.5  # first value already exceeds 9: capped at 9/2
    assert tch.seed_cutoff(torch.tensor([1.0, -2.0])) is None
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        proj = torch.randn(40, generator=g, dtype=torch.float64) + 0.2
        cut = tch.seed_cutoff(proj)
        mine = [] if cut is None else sorted(i for i in range(40) if float(proj[i]) >= cut)
        assert mine == sorted(seeds(proj).tolist())


def test_ig_and_greedy_by_hand():
    S = torch.tensor([2.0, 0.5, -1.0], dtype=torch.float64)
    A = float(torch.softmax(S, -1)[0])
    gaps = [abs(float(S @ tch.ig_gradient(S, 0, k)) - (A - 1 / 3)) for k in (32, 64, 128)]
    assert 3.5 < gaps[0] / gaps[1] < 4.5 and 3.5 < gaps[1] / gaps[2] < 4.5  # trapezoid rule: O(steps^-2)
    assert gaps[2] < 1e-4
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.5, 0.0, 0.0]], dtype=torch.float64)
    attr = torch.tensor([0.3, 0.1, 0.2], dtype=torch.float64)
    removed, A_after = tch.greedy_removal(S, rows, attr, 0, 0.6)
    # order 0, 2, 1: after removing row 0, A = softmax([1, .5, -1])[0] = 0.57 < 0.6: stop
    assert removed == [0] and A_after[0] == pytest.approx(float(torch.softmax(S - rows[0], -1)[0]), abs=1e-15)
    a1 = float(torch.softmax(S - rows[0], -1)[0])
    assert tch.greedy_removal(S, rows, attr, 0, a1 + 1e-9)[0] == [0]  # stops at the first A_ds < threshold
    assert tch.greedy_removal(S, rows, attr, 0, a1)[0] == [0, 2]  # A_ds == threshold is not below it
    removed, A_after = tch.greedy_removal(S, rows, attr, 0, 0.2)
    assert removed == [0, 2, 1] and A_after[-1] >= 0.2  # every candidate removed, A_ds still above 0.2
    assert tch.tau(2) == 1.0 and tch.tau(10) == 0.25


def test_bad_input_is_refused(llama):
    model, _, fw, _, _ = llama
    with pytest.raises(ValueError, match="head 9 does not exist"):
        tch.head_forms(model, 0, 9)
    with pytest.raises(ValueError, match="causal"):
        tch.explain_firing(model, fw, 1, 0, 3, 5)
    with float64_exact():
        gpt2 = tiny_model("gpt2")
    with pytest.raises(ValueError, match="Llama-family"):
        tch.run_forward(gpt2, random_prompt(5))
