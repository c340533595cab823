"""Pure-torch references for gated linear attention with a constant per-channel decay.

The op (README.md, Eq. 1-2), per batch b and head h, with a = log_decay[h] in R^K, a <= 0:

    S_t = diag(exp(a)) S_{t-1} + k_t^T v_t        S_{-1} = initial_state (or 0),  S_t in R^{K x V}
    o_t = q_t S_t                                  (the current token is included)

Three forms that must agree (tests/kernels/test_proto_mixer.py checks it):

* ``naive_decay_linear_attn``: the quadratic masked form (Eq. 3), O(T^2 K) memory; tests only.
* ``recurrent_decay_linear_attn_ref``: the recurrence itself, one token at a time (Eq. 1-2).
* ``chunk_decay_linear_attn_ref``: the chunked form (Eq. 4-6), the torch backend of
  ``decay_linear_attn`` off the GPU. Every exponent it forms is a lag times a <= 0, so nothing
  overflows whatever the decay or the chunk length.

Shapes: q, k (B, T, H, K); v (B, T, H, V); log_decay (H, K); state (B, H, K, V), float32.
All three differentiate through torch autograd (log_decay and initial_state included).
"""
from __future__ import annotations

import torch

__all__ = [
    "naive_decay_linear_attn",
    "recurrent_decay_linear_attn_ref",
    "chunk_decay_linear_attn_ref",
]


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor) -> None:
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k (B, T, H, K) and v (B, T, H, V); got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if log_decay.shape != (q.shape[2], q.shape[3]):
        raise ValueError(f"log_decay must be (H, K) = {(q.shape[2], q.shape[3])}, got {tuple(log_decay.shape)}")


def _state_dtype(q: torch.Tensor) -> torch.dtype:
    # The state is float32 (float64 when the inputs are float64, for references in tests).
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def naive_decay_linear_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quadratic form (README Eq. 3): o_i = sum_{j<=i} (sum_k q_ik k_jk exp((i-j) a_k)) v_j
    + (q_i * exp((i+1) a)) S_{-1}. Builds a (B, H, T, T, K) tensor: small T only."""
    _check(q, k, v, log_decay)
    B, T, H, K = q.shape
    dt = _state_dtype(q)
    qf, kf, vf = q.to(dt), k.to(dt), v.to(dt)
    a = log_decay.to(dt)                                                   # (H, K)
    pos = torch.arange(T, device=q.device, dtype=dt)
    lag = pos[:, None] - pos[None, :]                                      # (T, T) = i - j
    causal = lag >= 0
    # exp((i-j) a) with the lag clamped at 0 first, so the masked (i<j) entries never overflow.
    decay = torch.exp(lag.clamp(min=0)[None, :, :, None] * a[:, None, None, :])   # (H, T, T, K)
    decay = decay * causal[None, :, :, None]
    A = torch.einsum("bihk,bjhk,hijk->bhij", qf, kf, decay)                # (B, H, T, T)
    o = torch.einsum("bhij,bjhv->bihv", A, vf)                             # (B, T, H, V)
    g = (pos[:, None, None] + 1) * a[None]                                 # (T, H, K) = (i+1) a
    if initial_state is not None:
        s0 = initial_state.to(dt)
        o = o + torch.einsum("bthk,bhkv->bthv", qf * torch.exp(g)[None], s0)
    final_state = None
    if output_final_state:
        w = torch.exp((T - 1 - pos)[:, None, None] * a[None])              # (T, H, K) = exp((T-1-j) a)
        final_state = torch.einsum("bthk,bthv->bhkv", kf * w[None], vf)
        if initial_state is not None:
            final_state = final_state + torch.exp(T * a)[None, :, :, None] * initial_state.to(dt)
    return o.to(q.dtype), final_state


def recurrent_decay_linear_attn_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The recurrence (README Eq. 1-2), one token at a time; O(T) Python steps."""
    _check(q, k, v, log_decay)
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = _state_dtype(q)
    beta = torch.exp(log_decay.to(dt))[None, :, :, None]                   # (1, H, K, 1)
    S = q.new_zeros(B, H, K, V, dtype=dt) if initial_state is None else initial_state.to(dt)
    outs = []
    for t in range(T):
        kt, vt, qt = k[:, t].to(dt), v[:, t].to(dt), q[:, t].to(dt)       # (B, H, K), (B, H, V)
        S = beta * S + kt[..., :, None] * vt[..., None, :]                # (B, H, K, V)
        outs.append(torch.einsum("bhk,bhkv->bhv", qt, S))
    o = torch.stack(outs, dim=1) if outs else q.new_zeros(B, 0, H, V, dtype=dt)
    return o.to(q.dtype), (S if output_final_state else None)


def chunk_decay_linear_attn_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = 32,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked form (README Eq. 4-6) in torch: the intra-chunk matrix uses the exact pairwise
    decay exp((i-j) a_k) (a (C, C, K) table, lag clamped at 0), the state is passed between
    chunks in a Python loop of T/C steps. Computes in float32 (float64 for float64 inputs)."""
    _check(q, k, v, log_decay)
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = int(chunk_size)
    dt = _state_dtype(q)
    NT = -(-T // C)
    pad = NT * C - T
    qf, kf, vf = q.to(dt), k.to(dt), v.to(dt)
    if pad:
        # Zero-padded keys/values add nothing to the state; padded outputs are dropped.
        qf, kf, vf = (torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)) for x in (qf, kf, vf))
    qc = qf.view(B, NT, C, H, K)
    kc = kf.view(B, NT, C, H, K)
    vc = vf.view(B, NT, C, H, V)
    a = log_decay.to(dt)                                                   # (H, K)
    pos = torch.arange(C, device=q.device, dtype=dt)
    lag = pos[:, None] - pos[None, :]                                      # (C, C)
    D = torch.exp(lag.clamp(min=0)[:, :, None, None] * a) * (lag >= 0)[:, :, None, None]  # (C, C, H, K)
    # Intra-chunk attention: A[b,n,h,i,j] = sum_k q_ik k_jk exp((i-j) a_k), i >= j   (Eq. 5)
    A = torch.einsum("bnihk,bnjhk,ijhk->bnhij", qc, kc, D)
    o = torch.einsum("bnhij,bnjhv->bnihv", A, vc)                          # (B, NT, C, H, V)
    # Inter-chunk: the state at each chunk's start, then o += (q * exp((i+1) a)) S_prev  (Eq. 4)
    q_decay = torch.exp((pos + 1)[:, None, None] * a)                      # (C, H, K)
    k_decay = torch.exp((C - 1 - pos)[:, None, None] * a)                  # (C, H, K)
    chunk_decay = torch.exp(C * a)[..., None]                              # (H, K, 1)
    S = q.new_zeros(B, H, K, V, dtype=dt) if initial_state is None else initial_state.to(dt)
    inter = []
    for n in range(NT):
        inter.append(torch.einsum("bihk,bhkv->bihv", qc[:, n] * q_decay, S))
        if n == NT - 1 and pad:
            # The last chunk holds L = C - pad tokens: decay over L, not C.
            L = C - pad
            kd = torch.exp((L - 1 - pos).clamp(min=0)[:, None, None] * a)
            S = torch.exp(L * a)[..., None] * S + torch.einsum("bjhk,bjhv->bhkv", kc[:, n] * kd, vc[:, n])
        else:
            S = chunk_decay * S + torch.einsum("bjhk,bjhv->bhkv", kc[:, n] * k_decay, vc[:, n])  # (Eq. 6)
    o = o + torch.stack(inter, dim=1)
    o = o.reshape(B, NT * C, H, V)[:, :T]
    return o.to(q.dtype), (S if output_final_state else None)
