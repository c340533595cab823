"""Method invariants on tiny random float64 models of every supported family (no download).

Tolerances: the identities below hold exactly in real arithmetic; in float64 they hold to
~1e-13 relative. We assert 1e-9 (relative), well above rounding, far below any real error.
HF's RMSNorm and eager softmax upcast only to float32, so these tests run under
``accpp.testing.float64_exact`` (same math in float64), see the ``exact`` fixture.
"""
from __future__ import annotations

import pytest
import torch

from accpp.decompose import KIND_HEAD, visible
from accpp.signals import VARIANTS, Firing, attn_prob, ig_direction, tau_for

RTOL = 1e-9


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _firings(arch, dec, k=6, seed=0):
    """A few (L, a, d, s) spread over layers, heads and positions (d >= 2)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(k):
        L = i % arch.n_layers
        a = int(torch.randint(arch.n_heads, (1,), generator=g))
        d = int(torch.randint(2, dec.T, (1,), generator=g))
        J = visible(dec.T, d, arch.layers[L].sliding_window)
        s = int(J[int(torch.argmax(dec.acts.attn[L, a, d, J]))])
        out.append(Firing(L, a, d, s))
    return out


def test_components_sum_to_residual(tiny):
    fam, model, arch, dec, solver = tiny
    for L in range(arch.n_layers + 1):
        for t in range(dec.T):
            vecs, labels = dec.components(L, t)
            assert vecs.shape[0] == labels.shape[0]
            assert _rel(vecs.sum(0), dec.acts.resid[L, t]) < RTOL, (fam, L, t)


def test_rebuilt_softmax_equals_model_attention(tiny):
    fam, model, arch, dec, solver = tiny
    for L in range(arch.n_layers):
        for a in range(arch.n_heads):
            for d in range(dec.T):
                S, J, _, _ = solver.scores(L, a, d)
                p = torch.softmax(S if arch.layers[L].softcap is None else
                                  arch.layers[L].softcap * torch.tanh(S / arch.layers[L].softcap), -1)
                assert torch.allclose(p, dec.acts.attn[L, a, d, J], atol=1e-12, rtol=0), (fam, L, a, d)
                # masked keys (causal / sliding window) carry no weight
                assert float(dec.acts.attn[L, a, d].sum() - dec.acts.attn[L, a, d, J].sum()) < 1e-12


def _solver(tiny, variant):
    from accpp.signals import FiringSolver

    fam, model, arch, dec, solver = tiny
    return solver if variant == solver.variant else FiringSolver(dec, solver.svd, variant=variant)


def _all_rows(cands):
    return cands.rows(torch.arange(cands.size)).view(-1, cands.dh, cands.rows(torch.tensor([0])).shape[1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_candidates_sum_to_score_row(tiny, variant):
    """Query-side candidates (component at d, k) and the variant's key-side candidates (authors:
    component label spanning all key positions, k; per-position: component at j, k) each sum to
    the score row (docs/accpp_method.md, step 4), as does the variant's own score row."""
    fam, model, arch, dec, _ = tiny
    solver = _solver(tiny, variant)
    for f in _firings(arch, dec):
        S, J, alpha, beta = solver.scores(f.layer, f.head, f.dest)
        S_row = solver._row(f.layer, f.head, f.dest)[0]  # what solve() uses
        assert _rel(S_row, S) < RTOL
        q, k = solver.query_candidates(f), solver.key_candidates(f)
        assert _rel(_all_rows(q).sum((0, 1)), S) < RTOL, (fam, variant, f)
        assert _rel(_all_rows(k).sum((0, 1)), S) < RTOL, (fam, variant, f)
        assert q.labels.shape[0] * q.dh == q.size and k.labels.shape[0] * k.dh == k.size


def test_authors_key_candidates_are_per_position_candidates_summed(tiny):
    """An authors key-side candidate (label c, k) is, column by column, the per-position
    candidate (j, c, k); its IG attribution is its row . G."""
    fam, model, arch, dec, _ = tiny
    auth, pp = _solver(tiny, "authors"), _solver(tiny, "per-position")
    for f in _firings(arch, dec, k=4):
        ca, cp = auth.key_candidates(f), pp.key_candidates(f)
        Ra, Rp = _all_rows(ca), _all_rows(cp)
        index = {tuple(lab): i for i, lab in enumerate(ca.labels.tolist())}
        summed = torch.zeros_like(Ra)
        for i, lab in enumerate(cp.labels.tolist()):
            summed[index[tuple(lab)]] += Rp[i]
        assert _rel(summed, Ra) < RTOL, (fam, f)
        G = torch.randn(Ra.shape[-1], generator=torch.Generator().manual_seed(1), dtype=Ra.dtype)
        assert _rel(ca.attribution(G), Ra.reshape(-1, Ra.shape[-1]) @ G) < RTOL
        assert _rel(cp.attribution(G), Rp.reshape(-1, Rp.shape[-1]) @ G) < RTOL
        # key-side edges: authors place every component at s and keep heads with source <= s only
        assert bool((ca.tokens == f.src).all())
        heads = ca.labels[:, 0] == KIND_HEAD
        assert torch.equal(ca.keep, ~(heads & (ca.labels[:, 3] > f.src)))


def test_svd_reconstructs_bilinear_form(tiny):
    fam, model, arch, dec, solver = tiny
    svd = solver.svd
    for L, lw in enumerate(arch.layers):
        for h in range(lw.n_heads):
            wq, wk = lw.wq_eff(h), lw.wk_eff(lw.kv_of(h))
            U, V = wq @ svd.Ut[L, h], wk @ svd.Vt[L, h]
            omega = wq @ wk.T
            assert _rel(U @ torch.diag(svd.S[L, h]) @ V.T, omega) < RTOL
            eye = torch.eye(U.shape[1], dtype=U.dtype)
            assert torch.allclose(U.T @ U, eye, atol=1e-8) and torch.allclose(V.T @ V, eye, atol=1e-8)
            assert bool((svd.S[L, h][:-1] >= svd.S[L, h][1:]).all())


def test_ig_completeness(tiny):
    """sum of attributions = A_ds - 1/n (64-step trapezoid; converges to exact as steps grow)."""
    fam, model, arch, dec, solver = tiny
    for f in _firings(arch, dec):
        S, J, _, _ = solver.scores(f.layer, f.head, f.dest)
        s_idx = int(f.src - J[0])
        cap = arch.layers[f.layer].softcap
        target = float(attn_prob(S, s_idx, cap)) - 1.0 / len(J)
        for steps, tol in ((64, 2e-3), (2048, 2e-6)):
            G = ig_direction(S, s_idx, cap, steps)
            assert abs(float(S @ G) - target) < tol * max(1.0, abs(target)), (fam, f, steps)


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_ends_below_tau(tiny, variant):
    fam, model, arch, dec, _ = tiny
    solver = _solver(tiny, variant)
    for f in _firings(arch, dec):
        res = solver.solve(f)
        assert res.tau == pytest.approx(tau_for(len(visible(dec.T, f.dest, arch.layers[f.layer].sliding_window))))
        assert res.A_after["d"] < res.tau and res.A_after["s"] < res.tau
        for e in res.edges:
            assert e.side in ("d", "s") and e.rank == len(e.sing) == len(set(e.sing)) >= 1
            assert all(0 <= k < arch.d_head for k in e.sing)
            if e.side == "d":
                assert e.token == f.dest
            elif variant == "authors":
                assert e.token == f.src and (e.kind != KIND_HEAD or e.src <= f.src)
            else:
                assert e.token <= f.dest
            if variant == "per-position":
                assert e.sing == sorted(e.sing) and e.weight == e.drop


def test_authors_edge_weights_and_sv_order(tiny):
    """Authors: an edge's weight is the sum of the greedy steps' drops in A_ds that removed its
    candidates (so the query-side weights add up to A_ds - A_after, nothing being dropped there),
    and its singular indices are in greedy order (decreasing attribution). The query side has the
    same candidates in both variants, so the same edges and index sets."""
    fam, model, arch, dec, _ = tiny
    auth, pp = _solver(tiny, "authors"), _solver(tiny, "per-position")
    n_checked = 0
    for f in _firings(arch, dec):
        res = auth.solve(f)
        d_edges = [e for e in res.edges if e.side == "d"]
        assert sum(e.weight for e in d_edges) == pytest.approx(res.A - res.A_after["d"], abs=1e-12)
        s_total = sum(e.weight for e in res.edges if e.side == "s")
        assert s_total <= res.A - res.A_after["s"] + 1e-12  # heads with source > s are not edges
        q = auth.query_candidates(f)
        S = auth._row(f.layer, f.head, f.dest)[0]
        attr = q.attribution(ig_direction(S, int(f.src - visible(dec.T, f.dest, arch.layers[f.layer].sliding_window)[0]),
                                          arch.layers[f.layer].softcap))
        index = {tuple(lab): i for i, lab in enumerate(q.labels.tolist())}
        for e in d_edges:
            c = index[(e.kind, e.layer, e.head, e.src if e.kind == KIND_HEAD else -1)]
            a = attr[torch.tensor(e.sing) + c * q.dh]
            assert bool((a[:-1] >= a[1:]).all()), (fam, f, e)
            n_checked += 1
        other = {(e.kind, e.layer, e.head, e.src, frozenset(e.sing)) for e in pp.solve(f).edges if e.side == "d"}
        assert {(e.kind, e.layer, e.head, e.src, frozenset(e.sing)) for e in d_edges} == other
    assert n_checked > 0


def test_candidates_match_independent_reference(tiny):
    """Candidates (built from components) vs scores computed straight from the layer input."""
    from accpp.signals import firing_exactness

    fam, model, arch, dec, solver = tiny
    for f in _firings(arch, dec):
        err = firing_exactness(solver, f)
        assert err["query_side"] < RTOL and err["key_side"] < RTOL and err["key_side_authors"] < RTOL, (fam, f, err)
        assert err["query_vs_residual"] < RTOL and err["key_vs_residual"] < RTOL, (fam, f, err)
        assert err["softmax_vs_model"] < 1e-12
