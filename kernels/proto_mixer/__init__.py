"""Gated linear attention with a constant per-channel decay: the token mixer of the Prototype
Transformer (ProtoT, arXiv 2602.11852) written as one op (README.md has the math).

    o, S_T = op(q, k, v, log_decay, initial_state=None, output_final_state=False)
    S_t = diag(exp(log_decay)) S_{t-1} + k_t^T v_t;   o_t = q_t S_t

q, k (B, T, H, K); v (B, T, H, V); log_decay (H, K) <= 0; states (B, H, K, V) float32.

Torch references (no triton needed):
    naive_decay_linear_attn          quadratic masked form (small T; tests)
    recurrent_decay_linear_attn_ref  token-by-token recurrence
    chunk_decay_linear_attn_ref      chunked torch form (the CPU path of decay_linear_attn)
Triton kernels (triton is imported on first call, not at package import):
    chunk_decay_linear_attn          chunked forward + backward (torch.autograd.Function)
    fused_recurrent_decay_linear_attn  token-by-token forward, for decoding with a state
Dispatch:
    decay_linear_attn(..., backend="auto" | "triton" | "torch")
"""
from __future__ import annotations

import torch

from .naive import chunk_decay_linear_attn_ref, naive_decay_linear_attn, recurrent_decay_linear_attn_ref

__all__ = [
    "naive_decay_linear_attn",
    "recurrent_decay_linear_attn_ref",
    "chunk_decay_linear_attn_ref",
    "chunk_decay_linear_attn",
    "fused_recurrent_decay_linear_attn",
    "decay_linear_attn",
    "BACKENDS",
]

BACKENDS = ("auto", "triton", "torch")


def chunk_decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False, chunk_size=64, **kw):
    """Chunked Triton kernels (forward and backward); see kernels/proto_mixer/chunk.py."""
    from .chunk import chunk_decay_linear_attn as _f

    return _f(q, k, v, log_decay, initial_state, output_final_state, chunk_size, **kw)


def fused_recurrent_decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """Token-by-token Triton kernel for decoding; see kernels/proto_mixer/fused_recurrent.py."""
    from .fused_recurrent import fused_recurrent_decay_linear_attn as _f

    return _f(q, k, v, log_decay, initial_state, output_final_state)


def resolve_backend(backend: str, device: torch.device) -> str:
    """"auto" -> "triton" on CUDA, "torch" elsewhere; explicit choices are kept as given."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return backend


def decay_linear_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Dispatch: the Triton kernels on CUDA, the torch chunked form elsewhere ("auto"), or the
    backend named explicitly. With backend="triton", short inputs without grad (T <= 16, e.g.
    one decoded token) take the fused recurrent kernel, the rest the chunked kernels.
    backend="triton" off CUDA needs TRITON_INTERPRET=1 set before triton is imported."""
    which = resolve_backend(backend, q.device)
    if which == "torch":
        return chunk_decay_linear_attn_ref(q, k, v, log_decay, initial_state, output_final_state)
    needs_grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, log_decay, initial_state))
    if q.shape[1] <= 16 and not needs_grad:
        return fused_recurrent_decay_linear_attn(q, k, v, log_decay, initial_state, output_final_state)
    return chunk_decay_linear_attn(q, k, v, log_decay, initial_state, output_final_state)
