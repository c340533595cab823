"""Gated linear attention with a constant per-channel decay: the token mixer of the Prototype
Transformer (ProtoT, arXiv 2602.11852) written as one op (README.md has the math). This package is
the op's only home: its torch forms, its Triton kernels and the one dispatch between them.

    o, S_T = op(q, k, v, log_decay, initial_state=None, output_final_state=False)
    S_t = diag(exp(log_decay)) S_{t-1} + k_t^T v_t;   o_t = q_t S_t

q, k (B, T, H, K); v (B, T, H, V); log_decay (H, K) <= 0; states (B, H, K, V).

Torch forms (no triton needed; naive.py):
    naive_decay_linear_attn          quadratic masked form (the reference)
    recurrent_decay_linear_attn_ref  token-by-token recurrence
    chunk_decay_linear_attn_ref      chunked form (the torch path of decay_linear_attn)
Triton kernels (triton is imported on first call, not at package import):
    chunk_decay_linear_attn          chunked forward + backward (torch.autograd.Function)
    fused_recurrent_decay_linear_attn  token-by-token forward, for decoding with a state
Dispatch:
    decay_linear_attn(..., form="chunk" | "recurrent" | "quadratic",
                      backend="auto" | "triton" | "torch", chunk_size=DEFAULT_CHUNK_SIZE)
"""
from __future__ import annotations

import torch

from ._utils import check_interpreter_stack, interpreting
from .naive import (
    DEFAULT_CHUNK_SIZE, chunk_decay_linear_attn_ref, naive_decay_linear_attn, recurrent_decay_linear_attn_ref,
)

__all__ = [
    "naive_decay_linear_attn",
    "recurrent_decay_linear_attn_ref",
    "chunk_decay_linear_attn_ref",
    "chunk_decay_linear_attn",
    "fused_recurrent_decay_linear_attn",
    "decay_linear_attn",
    "resolve_backend",
    "BACKENDS",
    "FORMS",
    "DEFAULT_CHUNK_SIZE",
]

BACKENDS = ("auto", "triton", "torch")
FORMS = ("chunk", "quadratic", "recurrent")

_TORCH_FORMS = {
    "chunk": chunk_decay_linear_attn_ref,
    "quadratic": naive_decay_linear_attn,
    "recurrent": recurrent_decay_linear_attn_ref,
}


def chunk_decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False,
                            chunk_size=DEFAULT_CHUNK_SIZE, **kw):
    """Chunked Triton kernels (forward and backward); see kernels/proto_mixer/chunk.py."""
    check_interpreter_stack()
    from .chunk import chunk_decay_linear_attn as _f

    return _f(q, k, v, log_decay, initial_state, output_final_state, chunk_size, **kw)


def fused_recurrent_decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """Token-by-token Triton kernel for decoding; see kernels/proto_mixer/fused_recurrent.py."""
    check_interpreter_stack()
    from .fused_recurrent import fused_recurrent_decay_linear_attn as _f

    return _f(q, k, v, log_decay, initial_state, output_final_state)


def resolve_backend(backend: str, device: torch.device, form: str = "chunk") -> str:
    """The one backend rule: "auto" -> "triton" for CUDA tensors, "torch" elsewhere; the quadratic
    form (a reference) exists in torch only. An explicit choice is kept, or refused with the reason:
    "triton" needs CUDA tensors (or TRITON_INTERPRET=1, the CPU interpreter) and a chunk or
    recurrent form. No fallback: a CUDA run with a broken Triton fails instead of silently slowing down."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    device = torch.device(device)
    if backend == "auto":
        return "triton" if device.type == "cuda" and form != "quadratic" else "torch"
    if backend == "triton":
        if form == "quadratic":
            raise ValueError("backend='triton' has no quadratic form (a torch reference): use backend='torch'")
        if device.type != "cuda" and not interpreting():
            raise RuntimeError("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before the "
                               f"kernels are first used), got tensors on {device.type!r}")
    return backend


def decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False,
                      form: str = "chunk", backend: str = "auto", chunk_size: int = DEFAULT_CHUNK_SIZE):
    """The op, dispatched (``resolve_backend``).

    torch: ``form`` picks the torch form; ``chunk_size`` is the chunk of the chunked form.
    triton: ``form="recurrent"`` takes the fused recurrent kernel; ``form="chunk"`` takes the chunked
    kernels with ``chunk_size`` (16, 32, 64 or 128), except inputs of at most 16 tokens that need no
    gradient (decoding), which take the fused recurrent kernel (the same numbers, one pass).
    Returns (o (B, T, H, V), final state (B, H, K, V) or None)."""
    which = resolve_backend(backend, q.device, form)
    if which == "torch":
        fn = _TORCH_FORMS[form]
        if form == "chunk":
            return fn(q, k, v, log_decay, initial_state, output_final_state, chunk_size=chunk_size)
        return fn(q, k, v, log_decay, initial_state, output_final_state)
    needs_grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, log_decay, initial_state))
    if form == "recurrent" or (q.shape[1] <= 16 and not needs_grad):
        return fused_recurrent_decay_linear_attn(q, k, v, log_decay, initial_state, output_final_state)
    return chunk_decay_linear_attn(q, k, v, log_decay, initial_state, output_final_state, chunk_size)
