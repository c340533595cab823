"""Pure-torch forms of gated linear attention with a constant per-channel decay.

The op (README.md, Eq. 1-2), per batch b and head h, with a = log_decay[h] in R^K, a <= 0:

    S_t = diag(exp(a)) S_{t-1} + k_t^T v_t        S_{-1} = initial_state (or 0),  S_t in R^{K x V}
    o_t = q_t S_t                                  (the current token is included)

Three forms that must agree (tests/kernels/test_proto_mixer_forms.py checks it, in float64 to ~1e-12):

* ``naive_decay_linear_attn``: the quadratic masked form (Eq. 3), the reference. O(T^2 K) work,
  O(B H T^2) memory (one channel at a time).
* ``recurrent_decay_linear_attn_ref``: the recurrence itself, one token at a time (Eq. 1-2):
  O(K V) per token, what decoding with a cached state does.
* ``chunk_decay_linear_attn_ref``: the chunked form (Eq. 4-6), the torch backend of
  ``decay_linear_attn`` (the CPU path). Every exponent it forms is a lag times a <= 0, so nothing
  overflows whatever the decay or the chunk length.

Shapes: q, k (B, T, H, K); v (B, T, H, V); log_decay (H, K); state (B, H, K, V).
Dtypes: the forms compute in float64 when the promoted input dtype is float64 and in float32
otherwise (16-bit inputs are upcast: decay factors and states in half precision lose the slow
channels). The output comes back in the promoted dtype of q, k, v; the final state stays in the
compute dtype. All three differentiate through torch autograd (log_decay and initial_state included).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "naive_decay_linear_attn",
    "recurrent_decay_linear_attn_ref",
    "chunk_decay_linear_attn_ref",
    "DEFAULT_CHUNK_SIZE",
]

#: The one default chunk length of the op, torch and Triton alike (ProtoTConfig.chunk_size has the
#: same default). 32 is the fastest torch chunk on the CPU at contexts 256-2048
#: (benchmarks/bench_train.py); the Triton kernels take 16, 32, 64 or 128.
DEFAULT_CHUNK_SIZE = 32


def _check(q, k, v, log_decay, initial_state) -> None:
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be (B, T, H, K); got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, K = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be (B, T, H, V) = ({B}, {T}, {H}, V); got {tuple(v.shape)}")
    if log_decay.shape != (H, K):
        raise ValueError(f"log_decay must be (H, K) = ({H}, {K}); got {tuple(log_decay.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, K, v.shape[-1]):
        raise ValueError(f"initial_state must be (B, H, K, V) = ({B}, {H}, {K}, {v.shape[-1]}); "
                         f"got {tuple(initial_state.shape)}")


def _prepare(q, k, v, log_decay, initial_state):
    """Checks shapes; returns the inputs cast to the compute dtype, and the output dtype."""
    _check(q, k, v, log_decay, initial_state)
    out_dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    dt = torch.float64 if out_dtype == torch.float64 else torch.float32
    s0 = None if initial_state is None else initial_state.to(dt)
    return q.to(dt), k.to(dt), v.to(dt), log_decay.to(dt), s0, out_dtype


def naive_decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """Quadratic (masked) form, README Eq. 3:
    o_i = sum_{j<=i} (sum_k q_ik k_jk exp((i-j) a_k)) v_j + (q_i * exp((i+1) a)) S_{-1}."""
    q, k, v, a, s0, out_dtype = _prepare(q, k, v, log_decay, initial_state)
    B, T, H, K = q.shape
    t = torch.arange(T, device=q.device, dtype=q.dtype)
    lag = t[:, None] - t[None, :]                                       # (T, T): i - j
    # the lag is clamped at 0 before the exponent, so the masked (i < j) entries never overflow
    lag_c, causal = lag.clamp(min=0), (lag >= 0).to(q.dtype)            # (T, T)
    qh, kh = q.permute(0, 2, 3, 1), k.permute(0, 2, 3, 1)               # (B, H, K, T)
    A = q.new_zeros(B, H, T, T)
    for c in range(K):   # one channel at a time: memory O(T^2), not O(T^2 K)
        D_c = torch.exp(a[:, c, None, None] * lag_c) * causal           # (H, T, T): exp((i-j) a_c), j <= i
        A = A + qh[:, :, c, :, None] * kh[:, :, c, None, :] * D_c       # (B, H, T, T)
    o = torch.einsum("bhij,bjhv->bihv", A, v)                           # (B, T, H, V)
    if s0 is not None:
        q_dec = q * torch.exp(a * (t + 1)[:, None, None])               # (B, T, H, K): q_i exp((i+1) a)
        o = o + torch.einsum("bthk,bhkv->bthv", q_dec, s0)
    final = None
    if output_final_state:
        k_dec = k * torch.exp(a * (T - 1 - t)[:, None, None])           # (B, T, H, K): k_j exp((T-1-j) a)
        final = torch.einsum("bthk,bthv->bhkv", k_dec, v)               # (B, H, K, V)
        if s0 is not None:
            final = final + torch.exp(a * T)[None, :, :, None] * s0
    return o.to(out_dtype), final


def recurrent_decay_linear_attn_ref(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """The recurrence, README Eq. 1-2: one state update per token, O(K V) per token."""
    q, k, v, a, s0, out_dtype = _prepare(q, k, v, log_decay, initial_state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    beta = torch.exp(a)[None, :, :, None]                               # (1, H, K, 1)
    S = q.new_zeros(B, H, K, V) if s0 is None else s0
    outs = []
    # unbind, not [:, t]: backward then stacks the step gradients once (O(T), not O(T^2))
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1)):
        S = beta * S + k_t[..., None] * v_t[..., None, :]               # (B, H, K, V)   (Eq. 1)
        outs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))              # (B, H, V)      (Eq. 2)
    o = torch.stack(outs, dim=1) if T > 0 else q.new_zeros(B, 0, H, V)  # (B, T, H, V)
    return o.to(out_dtype), (S if output_final_state else None)


def chunk_decay_linear_attn_ref(q, k, v, log_decay, initial_state=None, output_final_state=False,
                                chunk_size: int = DEFAULT_CHUNK_SIZE):
    """Chunked form, README Eq. 4-6: exact intra-chunk masked products + a scan over chunk states.

    For chunk n with local positions i, j = 0..L_n-1 (L_n = chunk length; the last may be short):
        o_i   = sum_{j<=i} (q_i * exp((i-j) a)) . k_j v_j   +   (q_i * exp((i+1) a)) S_[n]
        S_[n+1] = exp(L_n a) S_[n] + sum_j (k_j * exp((L_n-1-j) a))^T v_j
    The intra-chunk decay is a (C, C, K) table of exp(max(i-j, 0) a) (never exp(g_i) exp(-g_j),
    which overflows for short half-lives); the state is passed between chunks in a loop of T/C steps.
    """
    q, k, v, a, s0, out_dtype = _prepare(q, k, v, log_decay, initial_state)
    C = int(chunk_size)
    if C < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = max(1, math.ceil(T / C))
    pad = N * C - T
    if pad:   # zero keys and values add nothing to the state; padded outputs are dropped
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    qc, kc, vc = q.view(B, N, C, H, K), k.view(B, N, C, H, K), v.view(B, N, C, H, V)
    i = torch.arange(C, device=q.device, dtype=q.dtype)
    lag = i[:, None] - i[None, :]                                       # (C, C): i - j
    D = torch.exp(a[:, None, None, :] * lag.clamp(min=0)[..., None]) * (lag >= 0)[..., None]  # (H, C, C, K)
    # intra-chunk (Eq. 5): A[b,n,h,i,j] = sum_k q_ik k_jk exp((i-j) a_k), elementwise: O(T C K)
    qp, kp = qc.permute(0, 1, 3, 2, 4), kc.permute(0, 1, 3, 2, 4)       # (B, N, H, C, K)
    A = (qp[:, :, :, :, None, :] * kp[:, :, :, None, :, :] * D).sum(-1)  # (B, N, H, C, C)
    o = torch.einsum("bnhij,bnjhv->bnihv", A, vc)                       # (B, N, C, H, V)
    # per-chunk local states U_n = sum_j (k_j * exp((L_n-1-j) a))^T v_j
    lens = torch.full((N,), C, device=q.device, dtype=q.dtype)
    lens[-1] = C - pad
    e = lens[:, None] - 1 - i[None, :]                                  # (N, C): L_n-1-j, < 0 on padding
    k_dec = torch.exp(a * e.clamp(min=0)[:, :, None, None]) * (e >= 0)[:, :, None, None]  # (N, C, H, K)
    U = torch.einsum("bnjhk,bnjhv->bnhkv", kc * k_dec, vc)              # (B, N, H, K, V)
    chunk_decay = torch.exp(a * lens[:, None, None])[..., None]         # (N, H, K, 1): exp(L_n a)
    # inter-chunk scan (Eq. 6), sequential over the N = T / C chunks
    S = q.new_zeros(B, H, K, V) if s0 is None else s0
    before = []
    for decay_n, U_n in zip(chunk_decay.unbind(0), U.unbind(1)):
        before.append(S)
        S = decay_n * S + U_n                                           # (B, H, K, V)
    S_before = torch.stack(before, dim=1)                               # (B, N, H, K, V): S_[n]
    q_dec = qc * torch.exp(a * (i + 1)[:, None, None])                  # (B, N, C, H, K): q_i exp((i+1) a)
    o = o + torch.einsum("bnihk,bnhkv->bnihv", q_dec, S_before)         # (Eq. 4)
    o = o.reshape(B, N * C, H, V)[:, :T]
    return o.to(out_dtype), (S if output_final_state else None)
