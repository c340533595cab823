"""Model FLOPs of a training step, for CPU/GPU utilisation figures (benchmarks/bench_train.py).

Convention (stated, so the ratio can be checked by hand):
    training FLOPs per token = 6 N + 3 * (mixer term per token, forward)
N = every parameter (a tied input/output embedding counted once: it is the output projection's
matrix; the input lookup is free); 6 N is forward (2 N) + backward (4 N) of every weight used as a
matrix once per token. The sequence-mixing work that is not a weight product is added per layer:
    LLaMA attention (causal): scores q k^T and the weighted sum of values over (T + 1) / 2 keys on
        average: forward 2 * 2 * d * (T + 1) / 2 = 2 d (T + 1) per layer;
    ProtoT mixer (the chunked form the CPU runs, chunk C, R channels, value width d_v, one head):
        intra-chunk scores and values over the whole C x C block it computes (2 C R + 2 C d_v),
        plus the state read q S and the state update k^T v (2 R d_v each): 2 C (R + d_v) + 4 R d_v.
Elementwise work (norms, gates' softmax, the loss's exp) is not counted: it is the overhead the
utilisation figure exposes.
"""
from __future__ import annotations

import torch


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding once)."""
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def mixer_flops_per_token(config, context: int) -> float:
    """Forward FLOPs per token of all layers' sequence mixing beyond the weight products."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    L, d = config.num_hidden_layers, config.hidden_size
    kind = config.model_type
    if kind == "protot_llama":
        return L * 2.0 * d * (context + 1)
    if kind == "protot":
        C, R, Dv = min(config.chunk_size, context), config.num_prototypes, config.value_width
        return L * (2.0 * C * (R + Dv) + 4.0 * R * Dv)
    raise ValueError(f"no mixer FLOP count for model_type {kind!r} (protot and protot_llama only)")


def training_flops_per_token(model: torch.nn.Module, context: int) -> float:
    """6 N + 3 x mixer term (module docstring)."""
    return 6.0 * parameter_count(model) + 3.0 * mixer_flops_per_token(model.config, context)
