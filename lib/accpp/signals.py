"""Candidate rank-1 signals of one attention firing, Integrated Gradients, greedy removal.

For the firing (layer L, head a, destination d, source s), with Omega_a = U diag(sigma) V^T
(folded weights, see :mod:`accpp.decompose`) the score row over visible keys j is

    S_j = scale * sum_k sigma_k * alpha_k * beta_{j,k}
    alpha_k   = rot_d(q_d) . Ut_k  = x~_d M_d u_k        (query side, sum over components at d)
    beta_{j,k} = rot_j(k_j) . Vt_k = v_k^T M_j^T x~_j     (key side, sum over components at j)

Query-side candidate (component c at d, index k): row scale*sigma_k*alpha_{c,k}*beta_{:,k}.
Key-side candidate (component c at j, index k): scale*sigma_k*alpha_k*beta_{c,j,k} in column j.
Each family sums exactly to S (notes step 4). Attribution: IG on A_ds along S(t) = t*S
(t: 0 -> 1, uniform attention at t=0), 64 trapezoid steps (step 5). Greedy removal in
decreasing attribution until A_ds < tau = min(1, 2.5/n) (step 6).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from accpp.decompose import KIND_OFFSET, Decomposition, HeadSVD, _head_labels, visible
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_MLP

__all__ = ["tau_for", "Firing", "SignalEdge", "FiringResult", "FiringSolver", "ig_direction", "greedy"]

IG_STEPS = 64


def tau_for(n_visible: int) -> float:
    """Threshold on A_ds: min(1, 2.5 / number of visible tokens)."""
    return min(1.0, 2.5 / n_visible)


def _cap(S: torch.Tensor, cap: float | None) -> torch.Tensor:
    return S if cap is None else cap * torch.tanh(S / cap)


def attn_prob(S: torch.Tensor, s_idx: int, cap: float | None = None) -> torch.Tensor:
    """A_ds from score rows S (..., n)."""
    return torch.softmax(_cap(S, cap), -1)[..., s_idx]


def ig_direction(S: torch.Tensor, s_idx: int, cap: float | None = None, steps: int = IG_STEPS) -> torch.Tensor:
    """G = int_0^1 dA_s/dS (t S) dt (trapezoid, ``steps`` intervals). Attribution of a
    contribution row C is C . G; completeness: S . G ~= A_s(S) - 1/n."""
    t = torch.linspace(0, 1, steps + 1, dtype=S.dtype)[:, None]  # (steps+1, 1)
    z = t * S  # (steps+1, n)
    p = torch.softmax(_cap(z, cap), -1)
    g = -p[:, s_idx: s_idx + 1] * p  # dp_s/dS_j = p_s (delta_sj - p_j)
    g[:, s_idx] += p[:, s_idx]
    if cap is not None:
        g = g * (1 - torch.tanh(z / cap) ** 2)
    w = torch.full((steps + 1, 1), 1.0 / steps, dtype=S.dtype)
    w[0] = w[-1] = 0.5 / steps
    return (w * g).sum(0)


def greedy(S: torch.Tensor, attr: torch.Tensor, rows, s_idx: int, tau: float, cap: float | None = None,
           first_chunk: int = 256):
    """Remove candidates in decreasing attribution, recomputing the softmax exactly, until A_ds < tau.

    ``rows(idx) -> (m, n)`` gives the contributions of the candidates ``idx``. Returns the indices
    removed (in removal order) and A_ds after the removal.
    """
    N = attr.numel()
    cur, done, m = S.clone(), 0, first_chunk
    while True:
        k = min(N, done + m)
        _, idx = torch.topk(attr, k)
        chunk = idx[done:k]
        traj = cur - torch.cumsum(rows(chunk), 0)  # (m, n)
        A = attn_prob(traj, s_idx, cap)
        below = torch.nonzero(A < tau)
        if below.numel():
            stop = int(below[0, 0])
            return idx[: done + stop + 1], float(A[stop])
        if k == N:
            return idx, float(A[-1])
        cur, done, m = traj[-1], k, m * 4


@dataclass
class Firing:
    layer: int
    head: int
    dest: int
    src: int


@dataclass
class SignalEdge:
    """Signal from one upstream component into one side of a firing."""

    side: str  # "d" (query side) or "s" (key side)
    kind: int  # component kind (emb/head/mlp/bias/offset)
    layer: int  # component's layer (-1 for emb; the firing's layer for offset)
    head: int  # upstream head (-1 unless kind is head; the firing's head for offset)
    token: int  # token the component sits at (d for query side, a key j for key side)
    src: int  # upstream head's source token (-1 unless kind is head)
    sing: list[int]  # singular indices kept (the signal subspace)
    attribution: float  # sum of IG attributions of the removed candidates
    drop: float  # A_ds minus A_ds with only this component's candidates removed

    @property
    def rank(self) -> int:
        return len(self.sing)


@dataclass
class FiringResult:
    firing: Firing
    A: float
    tau: float
    n: int
    A_after: dict = field(default_factory=dict)  # side -> A_ds after greedy
    edges: list[SignalEdge] = field(default_factory=list)


class FiringSolver:
    """Decomposes firings of one prompt; caches the head-space projections per (layer, head)."""

    max_cache_elems = 12_000_000  # float64 elements kept in the key-side cache (~100 MB)

    def __init__(self, dec: Decomposition, svd: HeadSVD):
        self.dec, self.svd = dec, svd
        self._proj: dict = {}
        self._key_elems = 0
        self._keys: dict = {}  # (L, a, j) -> key-side coefficients (shared by all firings of head (L, a))

    def key_coeffs(self, L: int, a: int, j: int):
        if (L, a, j) not in self._keys:
            if self._key_elems > self.max_cache_elems:  # bound memory (Gemma: 256-dim heads)
                self._keys.clear()
                self._key_elems = 0
            self._keys[(L, a, j)] = self.token_coeffs(L, a, j, "k")
            self._key_elems += self._keys[(L, a, j)][0].numel()
        return self._keys[(L, a, j)]

    # -- head-space projections of every component --------------------------------------------
    def _projections(self, L: int, side: str, idx: int):
        """Components of the residual entering L, projected by W^eff (d, dh) of the q head
        (side 'q') or kv head (side 'k') ``idx``: dict of tensors (no per-token scaling yet)."""
        key = (L, side, idx)
        if key not in self._proj:
            lw, dec = self.dec.arch.layers[L], self.dec
            W = lw.wq_eff(idx) if side == "q" else lw.wk_eff(idx)
            b = lw.bq_eff(idx) if side == "q" else lw.bk_eff(idx)
            self._proj[key] = dict(
                heads=dec.vo[:L] @ W,  # (L, H, T, dh)
                emb=dec.emb @ W,  # (T, dh)
                mlp=dec.mlp[:L] @ W,  # (L, T, dh)
                bias=(dec.bias[:L] @ W) if dec.has_bias else None,  # (L, dh)
                offset=b,  # (dh,) or None
            )
        return self._proj[key]

    def token_coeffs(self, L: int, a: int, t: int, side: str):
        """Coefficients of every component at token t on the singular directions of head (L, a).

        Returns (C (N, dh), labels (N, 4) [kind, layer, head, src]) with C.sum(0) = alpha (side 'q')
        or beta_t (side 'k').
        """
        dec, lw = self.dec, self.dec.arch.layers[L]
        kv = lw.kv_of(a)
        P = self._projections(L, side, a if side == "q" else kv)
        rho = dec.rho_q(L)[t, a] if side == "q" else dec.rho_k(L)[t, kv]
        inv = 1.0 / (dec.sigma[L, t] * rho)
        # per-token map then singular basis: M = diag(g_qk) R_t Ut  (dh, dh)
        M = self.svd.Ut[L, a] if side == "q" else self.svd.Vt[L, a]
        if dec.rot[L] is not None:
            M = dec.rot[L][t] @ M
        qk_norm = lw.q_norm if side == "q" else lw.k_norm
        if qk_norm is not None:
            M = qk_norm.gain[:, None] * M
        w = dec.head_weights(L, t)[:, :, : t + 1] * inv  # (L, H, t+1)
        dh = M.shape[1]
        heads = (P["heads"][:, :, : t + 1] @ M) * w[..., None]  # (L, H, t+1, dh)
        parts = [(P["emb"][t] @ M)[None] * inv, heads.reshape(-1, dh), (P["mlp"][:, t] @ M) * inv]
        H = lw.n_heads
        labels = [torch.tensor([[KIND_EMB, -1, -1, -1]]), _head_labels(L, H, t + 1),
                  torch.stack([torch.full((L,), KIND_MLP), torch.arange(L), torch.full((L,), -1),
                               torch.full((L,), -1)], 1)]
        if P["bias"] is not None:
            parts.append((P["bias"] @ M) * inv)
            labels.append(torch.stack([torch.full((L,), KIND_BIAS), torch.arange(L), torch.full((L,), -1),
                                       torch.full((L,), -1)], 1))
        if P["offset"] is not None:
            parts.append((P["offset"] @ M)[None] / rho)
            labels.append(torch.tensor([[KIND_OFFSET, L, a, -1]]))
        C = torch.cat(parts)  # (N, dh) coefficients on the singular directions
        return C, torch.cat(labels)

    def scores(self, L: int, a: int, d: int):
        """Score row over visible keys and the factors: (S (n,), J (n,), alpha, beta (n, dh))."""
        lw = self.dec.arch.layers[L]
        J = visible(self.dec.T, d, lw.sliding_window)
        Cq, _ = self.token_coeffs(L, a, d, "q")
        alpha = Cq.sum(0)
        beta = torch.stack([self.key_coeffs(L, a, int(j))[0].sum(0) for j in J])
        S = lw.scale * (beta * (self.svd.S[L, a] * alpha)).sum(-1)
        return S, J, alpha, beta

    # -- one firing -------------------------------------------------------------------------
    def solve(self, f: Firing) -> FiringResult:
        L, a, d, s = f.layer, f.head, f.dest, f.src
        lw = self.dec.arch.layers[L]
        cap = lw.softcap
        J = visible(self.dec.T, d, lw.sliding_window)
        n = len(J)
        s_idx = int(s - J[0])
        sig = self.svd.S[L, a]
        Cq, lab_q = self.token_coeffs(L, a, d, "q")  # (Nq, dh)
        alpha = Cq.sum(0)
        keys = [self.key_coeffs(L, a, int(j)) for j in J]
        beta = torch.stack([c.sum(0) for c, _ in keys])  # (n, dh)
        S = lw.scale * (beta * (sig * alpha)).sum(-1)
        A = float(attn_prob(S, s_idx, cap))
        tau = tau_for(n)
        res = FiringResult(f, A, tau, n)
        G = ig_direction(S, s_idx, cap)
        dh = sig.numel()

        # query side: candidate (c, k) -> row  scale*sig_k*Cq[c,k]*beta[:,k]
        bG = G @ beta  # (dh,)
        attr_q = (lw.scale * sig * bG * Cq).reshape(-1)
        rows_q = lambda idx: (lw.scale * sig[idx % dh] * Cq.reshape(-1)[idx])[:, None] * beta[:, idx % dh].T  # noqa: E731
        removed, A_q = greedy(S, attr_q, rows_q, s_idx, tau, cap)
        res.A_after["d"] = A_q
        res.edges += self._edges("d", removed, attr_q, rows_q, lab_q, dh, S, s_idx, cap, A, L, a, [d] * 1, None)

        # key side: candidate (j, c, k) -> scalar scale*sig_k*alpha_k*Ck_j[c,k] in column j
        Ck = torch.cat([c for c, _ in keys])  # (sum N_j, dh)
        lab_k = torch.cat([lab for _, lab in keys])
        col = torch.cat([torch.full((c.shape[0],), i) for i, (c, _) in enumerate(keys)])
        vals = (lw.scale * sig * alpha * Ck).reshape(-1)
        col_flat = col.repeat_interleave(dh)
        attr_k = vals * G[col_flat]

        def rows_k(idx):
            out = torch.zeros(idx.numel(), n, dtype=vals.dtype)
            out[torch.arange(idx.numel()), col_flat[idx]] = vals[idx]
            return out

        removed, A_k = greedy(S, attr_k, rows_k, s_idx, tau, cap)
        res.A_after["s"] = A_k
        res.edges += self._edges("s", removed, attr_k, rows_k, lab_k, dh, S, s_idx, cap, A, L, a, None,
                                 (J[col]).tolist())
        return res

    def _edges(self, side, removed, attr, rows, labels, dh, S, s_idx, cap, A, L, a, qtok, ktok):
        """Group the removed candidates by component: one edge per component (vectorised)."""
        comp = removed // dh
        order = torch.argsort(comp, stable=True)
        removed, comp = removed[order], comp[order]
        uniq, counts = torch.unique_consecutive(comp, return_counts=True)
        group = torch.repeat_interleave(torch.arange(uniq.numel()), counts)
        contrib = torch.zeros(uniq.numel(), S.numel(), dtype=S.dtype).index_add_(0, group, rows(removed))
        drops = A - attn_prob(S[None] - contrib, s_idx, cap)  # (n_comp,)
        attr_sum = torch.zeros(uniq.numel(), dtype=S.dtype).index_add_(0, group, attr[removed])
        sing = torch.split(removed % dh, counts.tolist())
        lab = labels[uniq].tolist()
        out = []
        for i, c in enumerate(uniq.tolist()):
            kind, lay, head, src = lab[i]
            token = qtok[0] if side == "d" else ktok[c]
            out.append(SignalEdge(side, kind, lay, head, int(token), src, sorted(sing[i].tolist()),
                                  float(attr_sum[i]), float(drops[i])))
        return out


def firing_exactness(solver: FiringSolver, f: Firing) -> dict:
    """Max relative error of the query- and key-side candidates summing to the score row, and the
    max abs difference between the rebuilt softmax and the model's attention weights."""
    dec, lw = solver.dec, solver.dec.arch.layers[f.layer]
    S, J, alpha, beta = solver.scores(f.layer, f.head, f.dest)
    sig = solver.svd.S[f.layer, f.head]
    Cq, _ = solver.token_coeffs(f.layer, f.head, f.dest, "q")
    q_sum = lw.scale * ((sig * Cq).sum(0) * beta).sum(-1)  # sum over candidates (c, k) of their rows
    k_sum = torch.stack([(lw.scale * sig * alpha * solver.key_coeffs(f.layer, f.head, int(j))[0]).sum() for j in J])
    # independent reference: the full residual (not its components) folded the same way
    x = dec.acts.resid[f.layer]
    ref = _reference_scores(solver, f.layer, f.head, f.dest, J, x)
    denom = ref.abs().max()
    p = torch.softmax(_cap(S, lw.softcap), -1)
    sden = S.abs().max()
    return dict(
        # the identity itself: candidates vs the score row of the decomposition (exact in float64)
        query_side=float((q_sum - S).abs().max() / sden), key_side=float((k_sum - S).abs().max() / sden),
        # vs the score row computed straight from the model's residual (float32 models: ~1e-7)
        query_vs_residual=float((q_sum - ref).abs().max() / denom),
        key_vs_residual=float((k_sum - ref).abs().max() / denom),
        softmax_vs_model=float((p - dec.acts.attn[f.layer, f.head, f.dest, J]).abs().max()))


def _reference_scores(solver: FiringSolver, L: int, a: int, d: int, J: torch.Tensor, x: torch.Tensor):
    """Scores straight from the layer input x (T, d): norm, projections, q/k norm, rotary, dot."""
    lw, dec = solver.dec.arch.layers[L], solver.dec
    xn = lw.ln_in(x)
    q = xn @ lw.W_Q[a] + (lw.b_Q[a] if lw.b_Q is not None else 0)
    k = xn @ lw.W_K[lw.kv_of(a)] + (lw.b_K[lw.kv_of(a)] if lw.b_K is not None else 0)
    if lw.q_norm is not None:
        q, k = lw.q_norm(q), lw.k_norm(k)
    if dec.rot[L] is not None:
        q = torch.einsum("te,tef->tf", q, dec.rot[L])
        k = torch.einsum("te,tef->tf", k, dec.rot[L])
    return lw.scale * (k[J] @ q[d])
