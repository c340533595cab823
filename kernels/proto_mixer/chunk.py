"""Chunked Triton kernels (forward and backward) for gated linear attention with a constant
per-channel decay; the math and the equation numbers are in README.md.

Layout: q, k (B, T, H, K); v, o (B, T, H, V); log_decay a (H, K), a <= 0; states (B, H, K, V) fp32.
Chunks of BT tokens; inside a chunk, sub-chunks of BC tokens (NC = BT // BC of them).
Local position inside a chunk: i (rows / queries) and j (columns / keys), 0-based; L = tokens
in the chunk (BT, or fewer in the last one).

Every exponent formed here is (a non-negative lag) x a, so every factor is <= 1 (README
"Numerics"): the inter-chunk terms use exp((i+1) a) and exp((L-1-j) a); the intra-chunk matrix
A[i, j] = sum_k q_ik k_jk exp((i-j) a_k) is split into
  * off-diagonal sub-chunk tiles (row sub-chunk r > column sub-chunk c): pivot p = r*BC with
    j < p <= i, exp((i-j) a) = exp((i-p) a) * exp((p-j) a), both factors <= 1, one tl.dot;
  * diagonal tiles (r == c): one column (or row) at a time with the exact exp(max(i-j, 0) a).

Kernels (the b_* names are block values in registers, p_* pointers):
  forward : _chunk_fwd_h (states at chunk starts, final state), _chunk_intra_A, _chunk_fwd_o
  backward: _chunk_bwd_dh, _chunk_bwd_dA, _chunk_bwd_dv, _chunk_bwd_dqk_intra,
            _chunk_bwd_dqk_inter (also the per-chunk gradient of log_decay)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._utils import alloc_output, block_sizes, check_inputs, dot_precision, interpreting, launch_grid
from .naive import DEFAULT_CHUNK_SIZE

__all__ = ["chunk_decay_linear_attn", "ChunkDecayLinearAttnFunction"]

# Warps per program where the default (4) spills registers at BT = 64, BK = 32, BV = 64 on sm_90
# (ptxas -v on the PTX from tests/kernels/compile_for_gpu.py); untuned otherwise.
NUM_WARPS = {"_chunk_bwd_dA": 8, "_chunk_bwd_dqk_inter": 8}


def num_warps(kernel: str, BT: int, dtype: torch.dtype) -> int:
    """Warps per program. The (BT, BT) and (BT, BV) float32 tiles grow with the chunk: chunk 128, and
    float32 inputs at chunk 64, spill registers at 4 warps on sm_90, so those get 8 warps; the
    GPU default is chunk 64 with 16-bit inputs. The interpreter ignores warps."""
    base = NUM_WARPS.get(kernel, 4)
    if BT >= 128 or (BT >= 64 and dtype == torch.float32):
        return max(base, 8)
    return base


# ----------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------
@triton.jit
def _chunk_fwd_h(
    k, v, a, h0, h,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NT,
    USE_H0: tl.constexpr,
    PREC: tl.constexpr,
):
    """h[b, n] = state before chunk n (n = 0..NT-1); h[b, NT] = final state.   (Eq. 6)
    S_next = exp(L a) S + (k * exp((L-1-j) a))^T v."""
    # grid (B*H, NK*NV): batch*head on axis 0 (no 65535 cap), as int64 so offsets cannot wrap
    i_bh, i_kv = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_k, i_v = i_kv // tl.cdiv(V, BV), i_kv % tl.cdiv(V, BV)
    i_b, i_h = i_bh // H, i_bh % H
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    o_i = tl.arange(0, BT)
    m_k, m_v = o_k < K, o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)            # (BK,)

    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    p_s = i_bh * K * V + o_k[:, None] * V + o_v[None, :]                            # (B, H, K, V)
    if USE_H0:
        b_h += tl.load(h0 + p_s, mask=m_kv, other=0.).to(tl.float32)
    for i_t in range(NT):
        p_h = h + ((i_b * (NT + 1) + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        tl.store(p_h, b_h, mask=m_kv)
        o_t = i_t * BT + o_i
        m_t = o_t < T
        L = tl.minimum(T - i_t * BT, BT)
        p_k = k + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
        p_v = v + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        b_k = tl.load(p_k, mask=m_t[:, None] & m_k[None, :], other=0.).to(tl.float32)   # (BT, BK)
        b_v = tl.load(p_v, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)   # (BT, BV)
        lag = tl.maximum(L - 1 - o_i, 0).to(tl.float32)                              # L-1-j >= 0
        b_kd = b_k * tl.exp(lag[:, None] * b_a[None, :])
        b_h = b_h * tl.exp(L.to(tl.float32) * b_a)[:, None] + tl.dot(tl.trans(b_kd), b_v, input_precision=PREC)
    p_h = h + ((i_b * (NT + 1) + NT) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_h, b_h, mask=m_kv)


@triton.jit
def _chunk_intra_A(
    q, k, a, A,
    T, H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, NC: tl.constexpr, DIAG_3D: tl.constexpr,
    PREC: tl.constexpr,
):
    """A[b, t, h, j] = sum_k q_tk k_jk exp((i-j) a_k) for j <= i (0 above the diagonal), where
    i, j are the positions of t and of column j inside the chunk.   (Eq. 5)
    One program per (row sub-chunk, b*h); it writes the whole BC x BT row block."""
    # grid (B*H*NT*NC,): one flat axis 0 (no 65535 cap), decoded in int64
    i_x = tl.program_id(0).to(tl.int64)
    i_bh, i_tc = i_x // (tl.cdiv(T, BT) * NC), (i_x % (tl.cdiv(T, BT) * NC)).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    i_t, i_r = i_tc // NC, i_tc % NC
    o_c = tl.arange(0, BC)
    o_r = i_t * BT + i_r * BC + o_c                          # rows (global time)
    m_r = o_r < T
    for i_c in range(NC):
        o_j = i_t * BT + i_c * BC + o_c                      # columns (global time)
        m_j = o_j < T
        b_A = tl.zeros([BC, BC], dtype=tl.float32)
        if i_c < i_r:
            # pivot p = i_r*BC: exp((i-p) a) * exp((p-j) a), i-p in [0, BC), p-j in [1, NC*BC)
            lag_q = o_c.to(tl.float32)
            lag_k = ((i_r - i_c) * BC - o_c).to(tl.float32)
            for i_k in range(tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
                p_q = q + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
                p_k = k + ((i_b * T + o_j[:, None]) * H + i_h) * K + o_k[None, :]
                b_q = tl.load(p_q, mask=m_r[:, None] & m_k[None, :], other=0.).to(tl.float32)
                b_k = tl.load(p_k, mask=m_j[:, None] & m_k[None, :], other=0.).to(tl.float32)
                b_qg = b_q * tl.exp(lag_q[:, None] * b_a[None, :])
                b_kg = b_k * tl.exp(lag_k[:, None] * b_a[None, :])
                b_A += tl.dot(b_qg, tl.trans(b_kg), input_precision=PREC)
        elif i_c == i_r:
            for i_k in range(tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
                p_q = q + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
                b_q = tl.load(p_q, mask=m_r[:, None] & m_k[None, :], other=0.).to(tl.float32)
                if DIAG_3D:
                    # one (BC, BC, BK) product: few, large operations (the interpreter's fast path)
                    p_k = k + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
                    b_k = tl.load(p_k, mask=m_r[:, None] & m_k[None, :], other=0.).to(tl.float32)
                    lag = tl.maximum(o_c[:, None] - o_c[None, :], 0).to(tl.float32)    # i-j, clamped
                    b_D = tl.exp(lag[:, :, None] * b_a[None, None, :])                 # (BC, BC, BK)
                    b_A += tl.sum(b_q[:, None, :] * b_k[None, :, :] * b_D, 2)
                else:
                    # one column j at a time: (BC, BK) registers (the GPU path)
                    for jj in range(BC):
                        t_j = i_t * BT + i_r * BC + jj
                        p_kj = k + ((i_b * T + t_j) * H + i_h) * K + o_k
                        b_kj = tl.load(p_kj, mask=m_k & ((t_j + 0 * o_k) < T), other=0.).to(tl.float32)
                        lag = tl.maximum(o_c - jj, 0).to(tl.float32)                   # i-j, clamped
                        b_col = tl.sum(b_q * b_kj[None, :] * tl.exp(lag[:, None] * b_a[None, :]), 1)
                        b_A += tl.where(o_c[None, :] == jj, b_col[:, None], 0.)
            b_A = tl.where(o_c[:, None] >= o_c[None, :], b_A, 0.)
        p_A = A + ((i_b * T + o_r[:, None]) * H + i_h) * BT + i_c * BC + o_c[None, :]
        tl.store(p_A, b_A, mask=m_r[:, None])


@triton.jit
def _chunk_fwd_o(
    q, v, a, h, A, o,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NT,
    PREC: tl.constexpr,
):
    """o = (q * exp((i+1) a)) @ S_prev + A @ v.   (Eq. 4)"""
    # grid (B*H*NT, NV): batch*head x chunk on axis 0 (no 65535 cap), decoded in int64
    i_x, i_v = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_bh, i_t = i_x // NT, (i_x % NT).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < T
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    lag_q = (o_i + 1).to(tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
        p_q = q + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
        b_q = tl.load(p_q, mask=m_t[:, None] & m_k[None, :], other=0.).to(tl.float32)
        p_h = h + ((i_b * (NT + 1) + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(p_h, mask=m_k[:, None] & m_v[None, :], other=0.)
        b_o += tl.dot(b_q * tl.exp(lag_q[:, None] * b_a[None, :]), b_h, input_precision=PREC)
    p_A = A + ((i_b * T + o_t[:, None]) * H + i_h) * BT + o_i[None, :]
    m_A = m_t[:, None] & (o_i[:, None] >= o_i[None, :])
    b_A = tl.load(p_A, mask=m_A, other=0.)
    p_v = v + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
    b_v = tl.load(p_v, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
    b_o += tl.dot(b_A, b_v, input_precision=PREC)
    p_o = o + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


# ----------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------
@triton.jit
def _chunk_bwd_dh(
    q, do, a, dht, dh, dh0,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NT,
    USE_DHT: tl.constexpr, USE_DH0: tl.constexpr,
    PREC: tl.constexpr,
):
    """dh[b, n] = gradient w.r.t. the state at the END of chunk n (reverse scan):   (Eq. 9)
    dS_prev = exp(L a) dS + (q * exp((i+1) a))^T do; dh0 = the gradient at the start."""
    # grid (B*H, NK*NV): batch*head on axis 0 (no 65535 cap), as int64 so offsets cannot wrap
    i_bh, i_kv = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_k, i_v = i_kv // tl.cdiv(V, BV), i_kv % tl.cdiv(V, BV)
    i_b, i_h = i_bh // H, i_bh % H
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    o_i = tl.arange(0, BT)
    m_k, m_v = o_k < K, o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
    lag_q = (o_i + 1).to(tl.float32)
    b_dh = tl.zeros([BK, BV], dtype=tl.float32)
    p_s = i_bh * K * V + o_k[:, None] * V + o_v[None, :]
    if USE_DHT:
        b_dh += tl.load(dht + p_s, mask=m_kv, other=0.).to(tl.float32)
    for i_n in range(NT):
        i_t = NT - 1 - i_n
        p_dh = dh + ((i_b * NT + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        tl.store(p_dh, b_dh, mask=m_kv)
        o_t = i_t * BT + o_i
        m_t = o_t < T
        L = tl.minimum(T - i_t * BT, BT)
        p_q = q + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
        p_do = do + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        b_q = tl.load(p_q, mask=m_t[:, None] & m_k[None, :], other=0.).to(tl.float32)
        b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
        b_qg = b_q * tl.exp(lag_q[:, None] * b_a[None, :])
        b_dh = b_dh * tl.exp(L.to(tl.float32) * b_a)[:, None] + tl.dot(tl.trans(b_qg), b_do, input_precision=PREC)
    if USE_DH0:
        tl.store(dh0 + p_s, b_dh, mask=m_kv)


@triton.jit
def _chunk_bwd_dA(
    do, v, dA,
    T, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """dA[i, j] = do_i . v_j for j <= i inside the chunk, 0 elsewhere.   (Eq. 10)"""
    # grid (B*H*NT,): one flat axis 0 (no 65535 cap), decoded in int64
    i_x = tl.program_id(0).to(tl.int64)
    i_bh, i_t = i_x // tl.cdiv(T, BT), (i_x % tl.cdiv(T, BT)).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < T
    b_dA = tl.zeros([BT, BT], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        p_do = do + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        p_v = v + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
        b_v = tl.load(p_v, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
        b_dA += tl.dot(b_do, tl.trans(b_v), input_precision=PREC)
    b_dA = tl.where(o_i[:, None] >= o_i[None, :], b_dA, 0.)
    p_dA = dA + ((i_b * T + o_t[:, None]) * H + i_h) * BT + o_i[None, :]
    tl.store(p_dA, b_dA, mask=m_t[:, None])


@triton.jit
def _chunk_bwd_dv(
    k, do, a, A, dh, dv,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NT,
    PREC: tl.constexpr,
):
    """dv = (k * exp((L-1-j) a)) @ dS_end + A^T @ do.   (Eq. 11)"""
    # grid (B*H*NT, NV): batch*head x chunk on axis 0 (no 65535 cap), decoded in int64
    i_x, i_v = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_bh, i_t = i_x // NT, (i_x % NT).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < T
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    L = tl.minimum(T - i_t * BT, BT)
    lag_k = tl.maximum(L - 1 - o_i, 0).to(tl.float32)
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
        p_k = k + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
        b_k = tl.load(p_k, mask=m_t[:, None] & m_k[None, :], other=0.).to(tl.float32)
        p_dh = dh + ((i_b * NT + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_dh = tl.load(p_dh, mask=m_k[:, None] & m_v[None, :], other=0.)
        b_dv += tl.dot(b_k * tl.exp(lag_k[:, None] * b_a[None, :]), b_dh, input_precision=PREC)
    p_A = A + ((i_b * T + o_t[:, None]) * H + i_h) * BT + o_i[None, :]
    b_A = tl.load(p_A, mask=m_t[:, None] & (o_i[:, None] >= o_i[None, :]), other=0.)
    p_do = do + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
    b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
    b_dv += tl.dot(tl.trans(b_A), b_do, input_precision=PREC)
    p_dv = dv + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
    tl.store(p_dv, b_dv.to(p_dv.dtype.element_ty), mask=m_t[:, None] & m_v[None, :])


@triton.jit
def _chunk_bwd_dqk_intra(
    q, k, a, dA, dq, dk,
    T, H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, NC: tl.constexpr, DIAG_3D: tl.constexpr,
    PREC: tl.constexpr,
):
    """Intra-chunk parts, for the BC rows of sub-chunk r:   (Eq. 12-13)
    dq_i = sum_{j<=i} dA[i, j] k_j exp((i-j) a);  dk_j = sum_{i>=j} dA[i, j] q_i exp((i-j) a)."""
    # grid (B*H*NT*NC, NK): batch*head x sub-chunk on axis 0 (no 65535 cap), decoded in int64
    i_x, i_k = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_bh, i_tc = i_x // (tl.cdiv(T, BT) * NC), (i_x % (tl.cdiv(T, BT) * NC)).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    i_t, i_r = i_tc // NC, i_tc % NC
    o_c = tl.arange(0, BC)
    o_r = i_t * BT + i_r * BC + o_c
    m_r = o_r < T
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
    p_q = q + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
    p_k = k + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
    b_q = tl.load(p_q, mask=m_r[:, None] & m_k[None, :], other=0.).to(tl.float32)   # (BC, BK)
    b_k = tl.load(p_k, mask=m_r[:, None] & m_k[None, :], other=0.).to(tl.float32)

    b_dq = tl.zeros([BC, BK], dtype=tl.float32)
    b_dk = tl.zeros([BC, BK], dtype=tl.float32)
    for i_c in range(NC):
        o_j = i_t * BT + i_c * BC + o_c
        m_j = o_j < T
        if i_c < i_r:
            # earlier sub-chunk c feeds dq of our rows; pivot p = r*BC (p-j in [1, NC*BC))
            p_dA = dA + ((i_b * T + o_r[:, None]) * H + i_h) * BT + i_c * BC + o_c[None, :]
            b_dA = tl.load(p_dA, mask=m_r[:, None], other=0.)                          # (BC rows, BC cols)
            p_kc = k + ((i_b * T + o_j[:, None]) * H + i_h) * K + o_k[None, :]
            b_kc = tl.load(p_kc, mask=m_j[:, None] & m_k[None, :], other=0.).to(tl.float32)
            lag = ((i_r - i_c) * BC - o_c).to(tl.float32)
            b_dq += tl.dot(b_dA, b_kc * tl.exp(lag[:, None] * b_a[None, :]), input_precision=PREC)
        if i_c > i_r:
            # later sub-chunk c feeds dk of our rows; pivot p = (r+1)*BC (p-j in [1, BC])
            p_dA = dA + ((i_b * T + o_j[:, None]) * H + i_h) * BT + i_r * BC + o_c[None, :]
            b_dA = tl.load(p_dA, mask=m_j[:, None], other=0.)                          # (BC rows i, BC cols j)
            p_qc = q + ((i_b * T + o_j[:, None]) * H + i_h) * K + o_k[None, :]
            b_qc = tl.load(p_qc, mask=m_j[:, None] & m_k[None, :], other=0.).to(tl.float32)
            lag = ((i_c - i_r - 1) * BC + o_c).to(tl.float32)
            b_dk += tl.dot(tl.trans(b_dA), b_qc * tl.exp(lag[:, None] * b_a[None, :]), input_precision=PREC)
    # the pivot factors of the off-diagonal parts: exp((i-p) a) for dq, exp((p-j) a) for dk
    b_dq *= tl.exp(o_c.to(tl.float32)[:, None] * b_a[None, :])
    b_dk *= tl.exp((BC - o_c).to(tl.float32)[:, None] * b_a[None, :])
    # diagonal tile, exact pairwise decays
    if DIAG_3D:
        p_dA = dA + ((i_b * T + o_r[:, None]) * H + i_h) * BT + i_r * BC + o_c[None, :]
        b_dA = tl.load(p_dA, mask=m_r[:, None], other=0.)                                 # (BC i, BC j)
        b_dA = tl.where(o_c[:, None] >= o_c[None, :], b_dA, 0.)
        lag = tl.maximum(o_c[:, None] - o_c[None, :], 0).to(tl.float32)                   # i-j, clamped
        b_D = b_dA[:, :, None] * tl.exp(lag[:, :, None] * b_a[None, None, :])            # (BC i, BC j, BK)
        b_dq += tl.sum(b_D * b_k[None, :, :], 1)
        b_dk += tl.sum(b_D * b_q[:, None, :], 0)
    else:
        for jj in range(BC):
            t_j = i_t * BT + i_r * BC + jj
            m_tj = (t_j + 0 * o_c) < T          # (BC,), all equal: a vector, so it can mask vector loads
            m_tjk = (t_j + 0 * o_k) < T         # (BK,)
            # column jj of dA (rows i of our sub-chunk) and key row j -> dq
            b_dAc = tl.load(dA + ((i_b * T + o_r) * H + i_h) * BT + i_r * BC + jj, mask=m_r, other=0.)
            b_kj = tl.load(k + ((i_b * T + t_j) * H + i_h) * K + o_k, mask=m_k & m_tjk, other=0.).to(tl.float32)
            lag_q = tl.maximum(o_c - jj, 0).to(tl.float32)                               # i - j
            b_dq += tl.where((o_c >= jj)[:, None],
                             b_dAc[:, None] * b_kj[None, :] * tl.exp(lag_q[:, None] * b_a[None, :]), 0.)
            # row jj of dA (as query row i = jj, columns j of our sub-chunk) and query row i -> dk
            b_dAr = tl.load(dA + ((i_b * T + t_j) * H + i_h) * BT + i_r * BC + o_c, mask=m_tj, other=0.)
            b_qi = tl.load(q + ((i_b * T + t_j) * H + i_h) * K + o_k, mask=m_k & m_tjk, other=0.).to(tl.float32)
            lag_k = tl.maximum(jj - o_c, 0).to(tl.float32)                               # i - j
            b_dk += tl.where((o_c <= jj)[:, None],
                             b_dAr[:, None] * b_qi[None, :] * tl.exp(lag_k[:, None] * b_a[None, :]), 0.)
    p_dq = dq + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
    p_dk = dk + ((i_b * T + o_r[:, None]) * H + i_h) * K + o_k[None, :]
    tl.store(p_dq, b_dq, mask=m_r[:, None] & m_k[None, :])
    tl.store(p_dk, b_dk, mask=m_r[:, None] & m_k[None, :])


@triton.jit
def _chunk_bwd_dqk_inter(
    q, k, v, do, a, h, dh, dq_intra, dk_intra, dq, dk, da,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NT,
    PREC: tl.constexpr,
):
    """dq = dq_intra + exp((i+1) a) * (do @ S_prev^T); dk = dk_intra + exp((L-1-j) a) * (v @ dS_end^T);
    da[b, n, h] = sum_i (i+1) (q_i dq_i - k_i dk_i) + L * sum_v dS_end * S_end.   (Eq. 12-14)"""
    # grid (B*H*NT, NK): batch*head x chunk on axis 0 (no 65535 cap), decoded in int64
    i_x, i_k = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_bh, i_t = i_x // NT, (i_x % NT).to(tl.int32)
    i_b, i_h = i_bh // H, i_bh % H
    o_i = tl.arange(0, BT)
    o_t = i_t * BT + o_i
    m_t = o_t < T
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    m_tk = m_t[:, None] & m_k[None, :]
    b_a = tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32)
    L = tl.minimum(T - i_t * BT, BT)

    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dhh = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        m_kv = m_k[:, None] & m_v[None, :]
        p_do = do + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        p_v = v + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :]
        b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
        b_v = tl.load(p_v, mask=m_t[:, None] & m_v[None, :], other=0.).to(tl.float32)
        p_h = h + ((i_b * (NT + 1) + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(p_h, mask=m_kv, other=0.)                                           # S_prev
        b_hn = tl.load(p_h + H * K * V, mask=m_kv, other=0.)                              # S_end
        p_dh = dh + ((i_b * NT + i_t) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_dh = tl.load(p_dh, mask=m_kv, other=0.)                                         # dS_end
        b_dq += tl.dot(b_do, tl.trans(b_h), input_precision=PREC)
        b_dk += tl.dot(b_v, tl.trans(b_dh), input_precision=PREC)
        b_dhh += tl.sum(b_dh * b_hn, 1)
    pos = (o_i + 1).to(tl.float32)                                                        # i + 1
    lag_k = tl.maximum(L - 1 - o_i, 0).to(tl.float32)
    p_q = q + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    p_k = k + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    b_q = tl.load(p_q, mask=m_tk, other=0.).to(tl.float32)
    b_k = tl.load(p_k, mask=m_tk, other=0.).to(tl.float32)
    p_dqi = dq_intra + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    p_dki = dk_intra + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    b_dq = b_dq * tl.exp(pos[:, None] * b_a[None, :]) + tl.load(p_dqi, mask=m_tk, other=0.)
    b_dk = b_dk * tl.exp(lag_k[:, None] * b_a[None, :]) + tl.load(p_dki, mask=m_tk, other=0.)
    b_dg = tl.where(m_tk, pos[:, None] * (b_q * b_dq - b_k * b_dk), 0.)
    b_da = tl.sum(b_dg, 0) + L.to(tl.float32) * b_dhh
    p_dq = dq + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    p_dk = dk + ((i_b * T + o_t[:, None]) * H + i_h) * K + o_k[None, :]
    tl.store(p_dq, b_dq.to(p_dq.dtype.element_ty), mask=m_tk)
    tl.store(p_dk, b_dk.to(p_dk.dtype.element_ty), mask=m_tk)
    tl.store(da + ((i_b * NT + i_t) * H + i_h) * K + o_k, b_da, mask=m_k)


# ----------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------
def chunk_fwd(q, k, v, a, initial_state, BT: int, BC: int, diag_3d: bool):
    """Returns o, h (B, NT+1, H, K, V) fp32 (h[:, NT] is the final state) and A (B, T, H, BT)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    BK, BV = block_sizes(K, V)
    prec = dot_precision(q.dtype)
    NT, NC = triton.cdiv(T, BT), BT // BC
    NK, NV = triton.cdiv(K, BK), triton.cdiv(V, BV)
    h = alloc_output((B, NT + 1, H, K, V), torch.float32, q.device)
    A = alloc_output((B, T, H, BT), torch.float32, q.device)
    o = alloc_output((B, T, H, V), q.dtype, q.device)
    h0 = initial_state if initial_state is not None else h  # dummy pointer when unused
    _chunk_fwd_h[launch_grid(B * H, NK * NV)](k, v, a, h0, h, T, H, K, V, BT, BK, BV, NT,
                                   USE_H0=initial_state is not None, PREC=prec,
                                               num_warps=num_warps("_chunk_fwd_h", BT, q.dtype))
    _chunk_intra_A[launch_grid(B * H * NT * NC)](q, k, a, A, T, H, K, BT, BC, BK, NC, diag_3d, PREC=prec,
                                                  num_warps=num_warps("_chunk_intra_A", BT, q.dtype))
    _chunk_fwd_o[launch_grid(B * H * NT, NV)](q, v, a, h, A, o, T, H, K, V, BT, BK, BV, NT, PREC=prec,
                                              num_warps=num_warps("_chunk_fwd_o", BT, q.dtype))
    return o, h, A


def chunk_bwd(q, k, v, a, h, A, do, dht, need_dh0: bool, BT: int, BC: int, diag_3d: bool):
    B, T, H, K = q.shape
    V = v.shape[-1]
    BK, BV = block_sizes(K, V)
    prec = dot_precision(q.dtype)
    NT, NC = triton.cdiv(T, BT), BT // BC
    NK, NV = triton.cdiv(K, BK), triton.cdiv(V, BV)
    dh = alloc_output((B, NT, H, K, V), torch.float32, q.device)
    dh0 = alloc_output((B, H, K, V), torch.float32, q.device) if need_dh0 else None
    _chunk_bwd_dh[launch_grid(B * H, NK * NV)](
        q, do, a, dht if dht is not None else dh, dh, dh0 if dh0 is not None else dh,
        T, H, K, V, BT, BK, BV, NT, USE_DHT=dht is not None, USE_DH0=need_dh0, PREC=prec,
        num_warps=num_warps("_chunk_bwd_dh", BT, q.dtype))
    dA = alloc_output((B, T, H, BT), torch.float32, q.device)
    _chunk_bwd_dA[launch_grid(B * H * NT)](do, v, dA, T, H, V, BT, BV, PREC=prec,
                                           num_warps=num_warps("_chunk_bwd_dA", BT, q.dtype))
    dv = alloc_output((B, T, H, V), v.dtype, q.device)
    _chunk_bwd_dv[launch_grid(B * H * NT, NV)](k, do, a, A, dh, dv, T, H, K, V, BT, BK, BV, NT, PREC=prec,
                                               num_warps=num_warps("_chunk_bwd_dv", BT, q.dtype))
    dq_intra = alloc_output((B, T, H, K), torch.float32, q.device)
    dk_intra = alloc_output((B, T, H, K), torch.float32, q.device)
    _chunk_bwd_dqk_intra[launch_grid(B * H * NT * NC, NK)](q, k, a, dA, dq_intra, dk_intra, T, H, K, BT, BC, BK, NC,
                                                           diag_3d, PREC=prec,
                                                           num_warps=num_warps("_chunk_bwd_dqk_intra", BT, q.dtype))
    dq = alloc_output((B, T, H, K), q.dtype, q.device)
    dk = alloc_output((B, T, H, K), k.dtype, q.device)
    da = alloc_output((B, NT, H, K), torch.float32, q.device)
    _chunk_bwd_dqk_inter[launch_grid(B * H * NT, NK)](q, k, v, do, a, h, dh, dq_intra, dk_intra, dq, dk, da,
                                                      T, H, K, V, BT, BK, BV, NT, PREC=prec,
                                                      num_warps=num_warps("_chunk_bwd_dqk_inter", BT, q.dtype))
    return dq, dk, dv, da.sum((0, 1)), dh0


class ChunkDecayLinearAttnFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_decay, initial_state, output_final_state, chunk_size, sub_chunk_size, diag_3d):
        a = log_decay.float().contiguous()
        o, h, A = chunk_fwd(q, k, v, a, initial_state, chunk_size, sub_chunk_size, diag_3d)
        ctx.save_for_backward(q, k, v, a, h, A)
        ctx.blocks = (chunk_size, sub_chunk_size, diag_3d)
        ctx.log_decay_dtype = log_decay.dtype
        # a copy, so a cached final state does not keep all chunk states alive
        final_state = h[:, -1].clone() if output_final_state else None
        return o, final_state

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, a, h, A = ctx.saved_tensors
        do = do.contiguous()
        dht = dht.contiguous().float() if dht is not None else None
        dq, dk, dv, da, dh0 = chunk_bwd(q, k, v, a, h, A, do, dht, ctx.needs_input_grad[4], *ctx.blocks)
        return dq, dk, dv, da.to(ctx.log_decay_dtype), dh0, None, None, None, None


def chunk_decay_linear_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    *,
    sub_chunk_size: int | None = None,
    diag_3d: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunked Triton forward and backward.

    q, k (B, T, H, K); v (B, T, H, V); log_decay (H, K) <= 0; initial_state (B, H, K, V) (used in
    float32). Returns o (B, T, H, V) in q's dtype and the final state (B, H, K, V) float32 when
    output_final_state, else None. Differentiable in q, k, v, log_decay and initial_state.

    chunk_size BT (16..128) is the state-passing chunk; sub_chunk_size BC (16 <= BC <= BT, dividing
    BT) is the tile of the intra-chunk matrix, diag_3d computes diagonal tiles as one (BC, BC, BK)
    product instead of a loop over columns. Defaults: BC=16 and the loop on a GPU (bounded
    registers); BC=BT and diag_3d under the Triton interpreter (few, large operations)."""
    q, k, v, log_decay, initial_state = check_inputs(q, k, v, log_decay, initial_state)
    if chunk_size not in (16, 32, 64, 128):
        raise ValueError(f"chunk_size of the Triton chunked kernels must be 16, 32, 64 or 128, got {chunk_size}")
    if sub_chunk_size is None:
        sub_chunk_size = chunk_size if interpreting() else 16
    if sub_chunk_size < 16 or chunk_size % sub_chunk_size:
        raise ValueError(f"sub_chunk_size must be >= 16 and divide chunk_size, got {sub_chunk_size}")
    if diag_3d is None:
        diag_3d = interpreting()
    return ChunkDecayLinearAttnFunction.apply(
        q, k, v, log_decay, initial_state, output_final_state, chunk_size, sub_chunk_size, bool(diag_3d))
