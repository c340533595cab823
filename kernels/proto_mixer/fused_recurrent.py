"""Fused recurrent Triton kernel (README Eq. 1-2), for decoding with a cached state.

One program per (value block, b*h) holds its (K, BV) slice of the state in registers and walks
the T tokens: S = exp(a) * S + k_t^T v_t; o_t = q_t S. Each token costs O(K V) work and reads
only q_t, k_t, v_t, so decoding with a state costs the same per token at any context length.
The backward pass recomputes the chunked forward states and reuses the chunked backward kernels
(chunk.py), which compute the same gradients.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._utils import alloc_output, check_inputs, interpreting, launch_grid

__all__ = ["fused_recurrent_decay_linear_attn"]


@triton.jit
def _fused_recurrent_fwd(
    q, k, v, a, h0, o, ht,
    T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    USE_H0: tl.constexpr, STORE_HT: tl.constexpr,
):
    # grid (B*H, NV): batch*head on axis 0 (no 65535 cap), as int64 so offsets cannot wrap
    i_bh, i_v = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    b_beta = tl.exp(tl.load(a + i_h * K + o_k, mask=m_k, other=0.).to(tl.float32))   # (BK,) = exp(a)
    p_s = i_bh * K * V + o_k[:, None] * V + o_v[None, :]                             # (B, H, K, V)
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_H0:
        b_h += tl.load(h0 + p_s, mask=m_kv, other=0.).to(tl.float32)
    p_q = q + (i_b * T * H + i_h) * K + o_k
    p_k = k + (i_b * T * H + i_h) * K + o_k
    p_v = v + (i_b * T * H + i_h) * V + o_v
    p_o = o + (i_b * T * H + i_h) * V + o_v
    for _ in range(T):
        b_q = tl.load(p_q, mask=m_k, other=0.).to(tl.float32)
        b_k = tl.load(p_k, mask=m_k, other=0.).to(tl.float32)
        b_v = tl.load(p_v, mask=m_v, other=0.).to(tl.float32)
        b_h = b_h * b_beta[:, None] + b_k[:, None] * b_v[None, :]                   # (Eq. 1)
        b_o = tl.sum(b_h * b_q[:, None], 0)                                          # (Eq. 2)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)
        p_q += H * K
        p_k += H * K
        p_v += H * V
        p_o += H * V
    if STORE_HT:
        tl.store(ht + p_s, b_h, mask=m_kv)


def fused_recurrent_fwd(q, k, v, a, initial_state, output_final_state: bool):
    B, T, H, K = q.shape
    V = v.shape[-1]
    BK = max(16, triton.next_power_of_2(K))
    if BK > 256:
        raise ValueError(f"fused_recurrent supports K <= 256 (one block holds all keys), got K={K}")
    BV = min(max(16, triton.next_power_of_2(V)), 256 if interpreting() else 32)
    o = alloc_output((B, T, H, V), q.dtype, q.device)
    ht = alloc_output((B, H, K, V), torch.float32, q.device) if output_final_state else None
    _fused_recurrent_fwd[launch_grid(B * H, triton.cdiv(V, BV))](
        q, k, v, a, initial_state if initial_state is not None else o, o, ht if ht is not None else o,
        T, H, K, V, BK, BV, USE_H0=initial_state is not None, STORE_HT=output_final_state)
    return o, ht


class FusedRecurrentDecayLinearAttnFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_decay, initial_state, output_final_state):
        a = log_decay.float().contiguous()
        o, ht = fused_recurrent_fwd(q, k, v, a, initial_state, output_final_state)
        ctx.save_for_backward(q, k, v, a, initial_state)
        ctx.log_decay_dtype = log_decay.dtype
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        from .chunk import chunk_bwd, chunk_fwd

        q, k, v, a, initial_state = ctx.saved_tensors
        BT = 64
        BC, diag_3d = (BT, True) if interpreting() else (16, False)
        _, h, A = chunk_fwd(q, k, v, a, initial_state, BT, BC, diag_3d)
        dht = dht.contiguous().float() if dht is not None else None
        dq, dk, dv, da, dh0 = chunk_bwd(q, k, v, a, h, A, do.contiguous(), dht,
                                        ctx.needs_input_grad[4], BT, BC, diag_3d)
        return dq, dk, dv, da.to(ctx.log_decay_dtype), dh0, None


def fused_recurrent_decay_linear_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token-by-token Triton kernel, meant for decoding (T small, a cached state).
    Same contract as chunk_decay_linear_attn; K <= 256. Differentiable (backward through the
    chunked kernels)."""
    q, k, v, log_decay, initial_state = check_inputs(q, k, v, log_decay, initial_state)
    return FusedRecurrentDecayLinearAttnFunction.apply(q, k, v, log_decay, initial_state, output_final_state)
