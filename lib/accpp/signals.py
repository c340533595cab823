"""Candidate rank-1 signals of one attention firing, Integrated Gradients, greedy removal.

Method: docs/accpp_method.md (steps 4-6 and "Two variants"). For the firing (layer L, head a,
destination d, source s), with Omega_a = U diag(sigma) V^T (folded weights, see
:mod:`accpp.decompose`), the score row over the visible keys j is

    S_j = scale * sum_k sigma_k * alpha_k * beta_{j,k}
    alpha_k    = rot_d(q_d) . Ut_k  = x~_d M_d u_k        (query side: sum over components c at d)
    beta_{j,k} = rot_j(k_j) . Vt_k  = v_k^T M_j^T x~_j     (key side: sum over components c at j)

Query side (both variants): candidate (component c at d, index k) is the row
scale*sigma_k*alpha_{c,k}*beta_{:,k}, the key side held at its full value.

Key side, ``variant="authors"`` (the authors' tracer): the query is held whole and the key vector
at EVERY visible position is decomposed. Candidate (component label c, index k) spans all key
positions: its entry in column j is scale*sigma_k*alpha_k*beta_{c,j,k}, where c is an upstream
head's output from one source j' (present at every j >= j'), or the embedding / an MLP / an
attention-output bias / the bias offset (present at every j, lumped into one component). Its
edge goes to the component placed at the firing's source s; key-side edges from heads whose
source j' > s are dropped (they still count in the greedy removal).

Key side, ``variant="per-position"`` (our refinement): candidate (key position j, component c
at j, index k) is the scalar scale*sigma_k*alpha_k*beta_{c,j,k} in column j only, so each signal
sits at its exact key position.

Every family sums exactly to S (a test, both variants). Attribution: IG on A_ds along
S(t) = t*S (t: 0 -> 1, uniform attention at t=0), 64 trapezoid steps. Greedy removal in
decreasing attribution until A_ds < tau = min(1, 2.5/n).

Edge weights: ``weight`` is the variant's edge weight (authors: the sum of the drops in A_ds over
the greedy steps that removed this edge's candidates; per-position: ``drop``). ``drop`` is, in
both variants, A_ds minus A_ds with only this edge's candidates removed (what an intervention that
removes exactly this signal reproduces). Singular indices: greedy order (authors), sorted
(per-position).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_OFFSET, Decomposition, HeadSVD
from accpp.decompose import head_labels, visible

__all__ = ["VARIANTS", "check_variant", "tau_for", "softcap", "attn_prob", "ig_direction", "greedy", "greedy_path",
           "Firing", "SignalEdge", "FiringResult", "Candidates", "FiringSolver", "firing_exactness", "IG_STEPS"]

IG_STEPS = 64
VARIANTS = ("authors", "per-position")


def check_variant(variant: str) -> str:
    """Return ``variant`` if known, else raise ValueError naming the choices."""
    if variant not in VARIANTS:
        raise ValueError(
            f"unknown tracer variant {variant!r}: 'authors' (key-side candidates span all key positions, "
            "as the authors' tracer) or 'per-position' (each key-side signal at its exact key position)")
    return variant


TAU_FACTOR = 2.5  # the paper's tau(d) = min(1, 2.5 / number of visible tokens)


def tau_for(n_visible: int, factor: float = TAU_FACTOR) -> float:
    """Threshold on A_ds: min(1, factor / number of visible tokens) (the paper's factor: 2.5)."""
    return min(1.0, factor / n_visible)


def softcap(S: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Gemma-2 attention soft-capping cap * tanh(S / cap) (identity when ``cap`` is None)."""
    return S if cap is None else cap * torch.tanh(S / cap)


def attn_prob(S: torch.Tensor, s_idx: int, cap: float | None = None) -> torch.Tensor:
    """A_ds from score rows S (..., n)."""
    return torch.softmax(softcap(S, cap), -1)[..., s_idx]


def ig_direction(S: torch.Tensor, s_idx: int, cap: float | None = None, steps: int = IG_STEPS) -> torch.Tensor:
    """G = int_0^1 dA_s/dS (t S) dt (trapezoid, ``steps`` intervals). Attribution of a
    contribution row C is C . G; completeness: S . G ~= A_s(S) - 1/n."""
    t = torch.linspace(0, 1, steps + 1, dtype=S.dtype)[:, None]  # (steps+1, 1)
    z = t * S  # (steps+1, n)
    p = torch.softmax(softcap(z, cap), -1)
    g = -p[:, s_idx: s_idx + 1] * p  # dp_s/dS_j = p_s (delta_sj - p_j)
    g[:, s_idx] += p[:, s_idx]
    if cap is not None:
        g = g * (1 - torch.tanh(z / cap) ** 2)
    w = torch.full((steps + 1, 1), 1.0 / steps, dtype=S.dtype)
    w[0] = w[-1] = 0.5 / steps
    return (w * g).sum(0)


def greedy_path(S: torch.Tensor, attr: torch.Tensor, rows, s_idx: int, tau: float, cap: float | None = None,
                first_chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Remove candidates in decreasing attribution, recomputing the softmax exactly, until A_ds < tau.

    ``rows(idx) -> (m, n)`` gives the contributions of the candidates ``idx``. Returns the indices
    removed (in removal order) and A_ds after each removal (same length; the last one is < tau
    unless every candidate was removed).
    """
    N = attr.numel()
    cur, done, m = S.clone(), 0, first_chunk
    A_all = []
    while True:
        k = min(N, done + m)
        _, idx = torch.topk(attr, k)
        chunk = idx[done:k]
        traj = cur - torch.cumsum(rows(chunk), 0)  # (m, n)
        A = attn_prob(traj, s_idx, cap)
        below = torch.nonzero(A < tau)
        if below.numel():
            stop = int(below[0, 0])
            A_all.append(A[: stop + 1])
            return idx[: done + stop + 1], torch.cat(A_all)
        A_all.append(A)
        if k == N:
            return idx, torch.cat(A_all)
        cur, done, m = traj[-1], k, m * 4


def greedy(S: torch.Tensor, attr: torch.Tensor, rows, s_idx: int, tau: float, cap: float | None = None,
           first_chunk: int = 64):
    """:func:`greedy_path`, returning the removed indices and the final A_ds only."""
    idx, A_steps = greedy_path(S, attr, rows, s_idx, tau, cap, first_chunk)
    return idx, float(A_steps[-1]) if A_steps.numel() else float(attn_prob(S, s_idx, cap))


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
    token: int  # token the component sits at: d (query side); the key j (per-position) or s (authors)
    src: int  # upstream head's source token (-1 unless kind is head)
    sing: list[int]  # singular indices kept (the signal subspace); greedy order (authors) or sorted
    attribution: float  # sum of IG attributions of the removed candidates
    drop: float  # A_ds minus A_ds with only this edge's candidates removed
    weight: float  # the variant's edge weight (authors: summed greedy step drops; per-position: drop)

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


@dataclass
class Candidates:
    """The rank-1 candidates of one side of a firing: candidate i is (component i // dh, singular
    index i % dh). Components are the rows of ``labels`` ([kind, layer, head, src]); ``tokens``
    gives the token each is placed at, ``keep`` whether it becomes an edge when selected."""

    side: str
    dh: int
    labels: torch.Tensor  # (n_comp, 4)
    tokens: torch.Tensor  # (n_comp,)
    keep: torch.Tensor  # (n_comp,) bool
    attribution: Callable[[torch.Tensor], torch.Tensor]  # G (n,) -> (n_comp * dh,)
    rows: Callable[[torch.Tensor], torch.Tensor]  # idx (m,) -> (m, n) contributions to the score row

    @property
    def size(self) -> int:
        return self.labels.shape[0] * self.dh


class FiringSolver:
    """Decomposes firings of one prompt; caches the head-space projections per (layer, head).

    ``variant``: "authors" (default, the authors' tracer) or "per-position" (key side per key
    position); see the module docstring."""

    max_cache_elems = 12_000_000  # float64 elements kept in the key-side cache (~100 MB)
    max_proj_elems = 24_000_000  # float64 elements kept in the projection cache (~190 MB)

    def __init__(self, dec: Decomposition, svd: HeadSVD, variant: str = "authors", tau_factor: float = TAU_FACTOR):
        self.dec, self.svd = dec, svd
        self.variant = check_variant(variant)
        self.tau_factor = tau_factor  # tau = min(1, tau_factor / n) (:func:`tau_for`)
        self._proj: dict = {}
        self._proj_elems = 0
        self._key_elems = 0
        self._keys: dict = {}  # (L, a, j) -> key-side coefficients (shared by all firings of head (L, a))
        self._row_key, self._row_val = None, None
        self._auth_key, self._auth_val = None, None

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
            if self._proj_elems > self.max_proj_elems:  # bound memory on long prompts
                self._proj.clear()
                self._proj_elems = 0
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
            self._proj_elems += sum(t.numel() for t in self._proj[key].values() if t is not None)
        return self._proj[key]

    def token_coeffs(self, L: int, a: int, t: int, side: str):
        """Coefficients of every component at token t on the singular directions of head (L, a).

        Returns (C (N, dh), labels (N, 4) [kind, layer, head, src]) with C.sum(0) = alpha (side 'q')
        or beta_t (side 'k'). Row layout: embedding, heads (layer, head, source <= t), MLPs, biases
        (if any), offset (if any).
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
        labels = [torch.tensor([[KIND_EMB, -1, -1, -1]]), head_labels(L, H, t + 1),
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

    def _row(self, L: int, a: int, d: int):
        """(S, J, alpha, beta, Cq, lab_q) of the firing row (L, a, d), kept for the last row asked."""
        if self._row_key != (L, a, d):
            lw = self.dec.arch.layers[L]
            J = visible(self.dec.T, d, lw.sliding_window)
            Cq, lab_q = self.token_coeffs(L, a, d, "q")
            alpha = Cq.sum(0)
            if self.variant == "authors":  # no per-position coefficients needed
                beta = self._authors_beta(L, a, d)
            else:
                beta = torch.stack([self.key_coeffs(L, a, int(j))[0].sum(0) for j in J])
            S = lw.scale * (beta * (self.svd.S[L, a] * alpha)).sum(-1)
            self._row_val, self._row_key = (S, J, alpha, beta, Cq, lab_q), (L, a, d)
        return self._row_val

    # -- candidates ----------------------------------------------------------------------------
    def query_candidates(self, f: Firing) -> Candidates:
        """Query side (both variants): component c at d, index k -> scale*sig_k*alpha_{c,k}*beta_{:,k}."""
        L, a, d = f.layer, f.head, f.dest
        lw = self.dec.arch.layers[L]
        sig = self.svd.S[L, a]
        S, J, alpha, beta, Cq, lab_q = self._row(L, a, d)  # Cq: (Nq, dh)
        dh = sig.numel()
        coef = (lw.scale * sig * Cq).reshape(-1)  # (Nq*dh,)
        return Candidates(
            "d", dh, lab_q, torch.full((lab_q.shape[0],), d), torch.ones(lab_q.shape[0], dtype=torch.bool),
            attribution=lambda G: coef * (G @ beta).repeat(lab_q.shape[0]),
            rows=lambda idx: coef[idx][:, None] * beta[:, idx % dh].T)

    def key_candidates(self, f: Firing, variant: str | None = None) -> Candidates:
        """Key side of ``variant`` (default: the solver's)."""
        variant = check_variant(variant or self.variant)
        L, a, d = f.layer, f.head, f.dest
        lw = self.dec.arch.layers[L]
        sig = self.svd.S[L, a]
        dh = sig.numel()
        S, J, alpha, beta, _, _ = self._row(L, a, d)
        n = J.numel()
        if variant == "per-position":
            keys = [self.key_coeffs(L, a, int(j)) for j in J]
            kcoef = lw.scale * sig * alpha  # (dh,) per-index factor of every key-side candidate
            Ck = torch.cat([c for c, _ in keys])  # (sum_j N_j, dh): rows of position j after those of j-1
            lab_k = torch.cat([lab for _, lab in keys])
            col = torch.cat([torch.full((c.shape[0],), i) for i, (c, _) in enumerate(keys)])  # (sum N_j,)
            vals = (kcoef * Ck).reshape(-1)
            col_flat = col.repeat_interleave(dh)

            def rows_pp(idx):
                out = torch.zeros(idx.numel(), n, dtype=vals.dtype)
                out[torch.arange(idx.numel()), col_flat[idx]] = vals[idx]
                return out

            return Candidates("s", dh, lab_k, J[col], torch.ones(lab_k.shape[0], dtype=torch.bool),
                              attribution=lambda G: vals * G[col_flat], rows=rows_pp)

        return self._authors_key_candidates(f)

    def _authors_key_side(self, L: int, a: int, d: int):
        """Pre-rotation key vectors of head (L, a) for the firing row at d (kept for the last row).

        Key coefficients in this space: beta_{c,j} = rot_j(z_{c,j}) Vt with, for an upstream head
        c = (l', h', j'), z_{c,j} = om[l',h',j,j'] * Xh[l',h',j'] (om: attention weight x post-norm
        scale x 1/(sigma_j rho_j)) and, for the other components, z_{c,j} = Zt[c, j]. Everything is
        linear before the rotation, so sums over components or weighted sums over j are taken
        first and rotated once (no per-(component, position) coefficients are formed).
        """
        if self._auth_key == (L, a, d):
            return self._auth_val
        dec, lw = self.dec, self.dec.arch.layers[L]
        kv = lw.kv_of(a)
        J = visible(dec.T, d, lw.sliding_window)
        P = self._projections(L, "k", kv)
        rho = dec.rho_k(L)[J, kv]  # (n,)
        inv = 1.0 / (dec.sigma[L, J] * rho)  # (n,)
        g = lw.k_norm.gain if lw.k_norm is not None else None
        nd = d + 1  # upstream sources j' = 0..d
        Xh = P["heads"][:, :, :nd]  # (L, H, nd, dh)
        om = dec.acts.attn[:L, :, J, :nd] * (dec.pscale[:L, J] * inv)[:, None, :, None]  # (L, H, n, nd)
        tail = [P["emb"][J][None] * inv[None, :, None], P["mlp"][:, J] * inv[None, :, None]]  # (1|L, n, dh)
        if P["bias"] is not None:
            tail.append(P["bias"][:, None, :] * inv[None, :, None])
        if P["offset"] is not None:
            tail.append((P["offset"][None, :] / rho[:, None])[None])
        Zt = torch.cat(tail)  # (n_tail, n, dh): emb, MLPs, biases?, offset?
        if g is not None:
            Xh, Zt = Xh * g, Zt * g
        self._auth_val = (J, Xh, om, Zt)
        self._auth_key = (L, a, d)
        return self._auth_val

    def _authors_beta(self, L: int, a: int, d: int) -> torch.Tensor:
        """beta_j (n, dh) as the sum of the authors' key-side components (equal to the key coefficients)."""
        J, Xh, om, Zt = self._authors_key_side(L, a, d)
        z = torch.einsum("lhjt,lhte->je", om, Xh) + Zt.sum(0)  # (n, dh)
        return self.dec.rotate(L, z, J) @ self.svd.Vt[L, a]

    def _authors_key_candidates(self, f: Firing) -> Candidates:
        """The authors' key side: one candidate per (component label, k) spanning all key positions.
        Layout: [emb, heads (l, h, j' <= d), MLPs, biases?, offset?] (as ``token_coeffs`` at d)."""
        L, a, d, s = f.layer, f.head, f.dest, f.src
        dec, lw = self.dec, self.dec.arch.layers[L]
        B = self.svd.Vt[L, a]  # (dh, dh) columns: the singular basis
        dh = B.shape[1]
        _, _, alpha, _, _, _ = self._row(L, a, d)
        kcoef = lw.scale * self.svd.S[L, a] * alpha  # (dh,) per-index factor of every key-side candidate
        J, Xh, om, Zt = self._authors_key_side(L, a, d)
        Lh, H, nd, _ = Xh.shape
        LH, n, n_tail = Lh * H, J.numel(), Zt.shape[0]
        n_head = LH * nd
        labels = torch.cat([torch.tensor([[KIND_EMB, -1, -1, -1]]), head_labels(L, H, nd),
                            torch.stack([torch.full((L,), KIND_MLP), torch.arange(L), torch.full((L,), -1),
                                         torch.full((L,), -1)], 1)]
                           + ([torch.stack([torch.full((L,), KIND_BIAS), torch.arange(L), torch.full((L,), -1),
                                            torch.full((L,), -1)], 1)] if dec.has_bias else [])
                           + ([torch.tensor([[KIND_OFFSET, L, a, -1]])] if n_tail > 1 + L * (1 + dec.has_bias) else []))
        assert labels.shape[0] == 1 + n_head + n_tail - 1
        rf = dec.rotation_factors(L, J)  # (cos_x, sin_x) (n, dh) or None
        Xf, omf = Xh.reshape(LH, nd, dh), om.reshape(LH, n, nd)

        def attribution(G):
            # heads: sum_j G_j om_j rot_j(X) = X * (sum_j gam_j cos_x_j) + rh(X) * (sum_j gam_j sin_x_j)
            gam = (om * G[None, None, :, None]).transpose(2, 3)  # (L, H, nd, n)
            if rf is None:
                y = Xh * gam.sum(-1, keepdim=True)
            else:
                y = Xh * (gam @ rf[0]) + dec.rotate_half_x(L, Xh) * (gam @ rf[1])
            a_heads = (y @ B).reshape(n_head, dh)
            a_tail = ((dec.rotate(L, Zt, J) * G[None, :, None]).sum(1)) @ B  # (n_tail, dh)
            return (kcoef * torch.cat([a_tail[:1], a_heads, a_tail[1:]])).reshape(-1)

        def rows(idx):
            comp, k = idx // dh, idx % dh
            out = torch.empty(idx.numel(), n, dtype=Xh.dtype)
            is_head = (comp >= 1) & (comp <= n_head)
            h_i, t_i = torch.nonzero(is_head)[:, 0], torch.nonzero(~is_head)[:, 0]
            if h_i.numel():
                c = comp[h_i] - 1
                lh, src = c.div(nd, rounding_mode="floor"), c % nd
                v = dec.rotate(L, Xf[lh, src][:, None, :].expand(-1, n, -1), J)  # (m, n, dh)
                out[h_i] = torch.einsum("mjd,dm->mj", v, B[:, k[h_i]]) * omf[lh, :, src]
            if t_i.numel():
                c = comp[t_i]
                ti = torch.where(c == 0, 0, c - n_head)
                v = dec.rotate(L, Zt[ti], J)  # (m, n, dh)
                out[t_i] = torch.einsum("mjd,dm->mj", v, B[:, k[t_i]])
            return out * kcoef[k][:, None]

        keep = ~((labels[:, 0] == KIND_HEAD) & (labels[:, 3] > s))  # the authors drop heads with j' > s
        return Candidates("s", dh, labels, torch.full((labels.shape[0],), s), keep, attribution=attribution,
                          rows=rows)

    # -- one firing -------------------------------------------------------------------------
    def solve(self, f: Firing) -> FiringResult:
        L, a, d, s = f.layer, f.head, f.dest, f.src
        lw = self.dec.arch.layers[L]
        cap = lw.softcap
        S, J, _, _, _, _ = self._row(L, a, d)
        n = len(J)
        s_idx = int(s - J[0])
        A = float(attn_prob(S, s_idx, cap))
        tau = tau_for(n, getattr(self, "tau_factor", TAU_FACTOR))
        res = FiringResult(f, A, tau, n)
        G = ig_direction(S, s_idx, cap)
        for cands in (self.query_candidates(f), self.key_candidates(f)):
            attr = cands.attribution(G)
            removed, A_steps = greedy_path(S, attr, cands.rows, s_idx, tau, cap)
            res.A_after[cands.side] = float(A_steps[-1]) if A_steps.numel() else A
            res.edges += self._edges(cands, removed, A_steps, attr, S, s_idx, cap, A)
        return res

    def _edges(self, cands: Candidates, removed, A_steps, attr, S, s_idx, cap, A) -> list[SignalEdge]:
        """Group the removed candidates by component: one edge per kept component (vectorised)."""
        if removed.numel() == 0:
            return []
        dh = cands.dh
        step_drop = torch.cat([torch.tensor([A], dtype=A_steps.dtype), A_steps[:-1]]) - A_steps  # (m,)
        comp = removed // dh
        order = torch.argsort(comp, stable=True)  # groups, each in removal order
        removed, comp, step_drop = removed[order], comp[order], step_drop[order]
        uniq, counts = torch.unique_consecutive(comp, return_counts=True)
        group = torch.repeat_interleave(torch.arange(uniq.numel()), counts)
        contrib = torch.zeros(uniq.numel(), S.numel(), dtype=S.dtype).index_add_(0, group, cands.rows(removed))
        drops = A - attn_prob(S[None] - contrib, s_idx, cap)  # (n_comp,)
        attr_sum = torch.zeros(uniq.numel(), dtype=S.dtype).index_add_(0, group, attr[removed])
        greedy_w = torch.zeros(uniq.numel(), dtype=S.dtype).index_add_(0, group, step_drop)
        sing = torch.split(removed % dh, counts.tolist())
        lab = cands.labels[uniq].tolist()
        tok = cands.tokens[uniq].tolist()
        keep = cands.keep[uniq].tolist()
        authors = self.variant == "authors"
        out = []
        for i in range(uniq.numel()):
            if not keep[i]:
                continue
            kind, lay, head, src = lab[i]
            ks = sing[i].tolist()
            drop = float(drops[i])
            out.append(SignalEdge(cands.side, kind, lay, head, int(tok[i]), src, ks if authors else sorted(ks),
                                  float(attr_sum[i]), drop, float(greedy_w[i]) if authors else drop))
        return out


def firing_exactness(solver: FiringSolver, f: Firing) -> dict:
    """Max relative error of the query- and key-side candidates (both variants) summing to the score
    row, and the max abs difference between the rebuilt softmax and the model's attention weights."""
    dec, lw = solver.dec, solver.dec.arch.layers[f.layer]
    S, J, alpha, beta = solver.scores(f.layer, f.head, f.dest)
    sig = solver.svd.S[f.layer, f.head]
    Cq, _ = solver.token_coeffs(f.layer, f.head, f.dest, "q")
    q_sum = lw.scale * ((sig * Cq).sum(0) * beta).sum(-1)  # sum over candidates (c, k) of their rows
    k_sum = torch.stack([(lw.scale * sig * alpha * solver.key_coeffs(f.layer, f.head, int(j))[0]).sum() for j in J])
    auth = solver.key_candidates(f, "authors")
    k_auth = sum(auth.rows(torch.arange(i, min(i + 4096, auth.size))).sum(0) for i in range(0, auth.size, 4096))
    # independent reference: the full residual (not its components) folded the same way
    x = dec.acts.resid[f.layer]
    ref = _reference_scores(solver, f.layer, f.head, f.dest, J, x)
    denom = ref.abs().max()
    p = torch.softmax(softcap(S, lw.softcap), -1)
    sden = S.abs().max()
    return dict(
        # the identity itself: candidates vs the score row of the decomposition (exact in float64)
        query_side=float((q_sum - S).abs().max() / sden), key_side=float((k_sum - S).abs().max() / sden),
        key_side_authors=float((k_auth - S).abs().max() / sden),
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
