"""Method invariants on tiny random float64 models of every supported family (no download).

Tolerances: the identities below hold exactly in real arithmetic; in float64 they hold to
~1e-13 relative. We assert 1e-9 (relative), well above rounding, far below any real error.
HF's RMSNorm and eager softmax upcast only to float32, so these tests run under
``accpp.testing.float64_exact`` (same math in float64), see the ``exact`` fixture.
"""
from __future__ import annotations

import pytest
import torch

from accpp.decompose import visible
from accpp.signals import Firing, attn_prob, ig_direction, tau_for

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


def test_candidates_sum_to_score_row(tiny):
    """Query-side candidates (component at d, k) and key-side candidates (component at j, k)
    each sum to the score row (notes step 4)."""
    fam, model, arch, dec, solver = tiny
    for f in _firings(arch, dec):
        lw = arch.layers[f.layer]
        S, J, alpha, beta = solver.scores(f.layer, f.head, f.dest)
        sig = solver.svd.S[f.layer, f.head]
        Cq, lab_q = solver.token_coeffs(f.layer, f.head, f.dest, "q")
        rows_q = lw.scale * (sig * Cq)[:, :, None] * beta.T[None]  # (Nq, dh, n)
        assert _rel(rows_q.sum((0, 1)), S) < RTOL
        key_sum = torch.stack([(lw.scale * sig * alpha * solver.token_coeffs(f.layer, f.head, int(j), "k")[0]).sum()
                               for j in J])
        assert _rel(key_sum, S) < RTOL
        assert lab_q.shape[0] == Cq.shape[0]


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


def test_greedy_ends_below_tau(tiny):
    fam, model, arch, dec, solver = tiny
    for f in _firings(arch, dec):
        res = solver.solve(f)
        assert res.tau == pytest.approx(tau_for(len(visible(dec.T, f.dest, arch.layers[f.layer].sliding_window))))
        assert res.A_after["d"] < res.tau and res.A_after["s"] < res.tau
        for e in res.edges:
            assert e.side in ("d", "s") and e.rank == len(e.sing) >= 1
            assert all(0 <= k < arch.d_head for k in e.sing)
            assert e.token == f.dest if e.side == "d" else e.token <= f.dest


def test_candidates_match_independent_reference(tiny):
    """Candidates (built from components) vs scores computed straight from the layer input."""
    from accpp.signals import firing_exactness

    fam, model, arch, dec, solver = tiny
    for f in _firings(arch, dec):
        err = firing_exactness(solver, f)
        assert err["query_side"] < RTOL and err["key_side"] < RTOL, (fam, f, err)
        assert err["query_vs_residual"] < RTOL and err["key_vs_residual"] < RTOL, (fam, f, err)
        assert err["softmax_vs_model"] < 1e-12
