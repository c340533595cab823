"""Training and decoding throughput of the model family against context length.

Used by notebooks/protot/04_throughput.py. A measurement is the median over ``repeats`` full
training steps (forward, backward, AdamW update) after ``warmup`` steps, with a fixed number of
tokens per step (batch = tokens_per_step // context), so that tokens/s at every context length is
comparable: a linear-cost model keeps its tokens/s as context grows; quadratic attention loses it.
"""
from __future__ import annotations

import contextlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from protot.bench import decode_time_per_token, median_time
from protot.models import build_model, count_parameters

ARCHS = ("protot", "llama", "deltanet", "mamba")


@dataclass(frozen=True)
class TrainPoint:
    arch: str
    context: int
    batch: int
    seconds_per_step: float
    tokens_per_s: float
    non_embedding_params: int


def train_throughput(arch: str, context: int, *, size: str = "small", vocab_size: int = 4096,
                     tokens_per_step: int | None = None, device: str = "cpu", warmup: int = 1,
                     repeats: int = 2, seed: int = 0, **overrides) -> TrainPoint:
    """Tokens/s of full training steps of ``arch`` at ``context`` tokens (bf16 autocast on CUDA)."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    tokens = tokens_per_step or context
    batch = max(1, tokens // context)
    torch.manual_seed(seed)
    model = build_model(arch, size, vocab_size, max_position_embeddings=context, **overrides).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, context), generator=gen).to(device)
    amp = (torch.autocast("cuda", dtype=torch.bfloat16) if str(device).startswith("cuda")
           else contextlib.nullcontext())

    def step():
        with amp:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()

    seconds = median_time(step, repeats=repeats, warmup=warmup)
    return TrainPoint(arch, context, batch, seconds, batch * context / seconds,
                      count_parameters(model)["non_embedding"])


def decode_sweep(arch: str, contexts, *, size: str = "small", vocab_size: int = 4096,
                 n_tokens: int = 16, seed: int = 0, device: str = "cpu", **overrides) -> list[dict]:
    """Seconds per generated token after each context length (batch 1, on ``device``)."""
    torch.manual_seed(seed)
    model = build_model(arch, size, vocab_size, max_position_embeddings=max(contexts) + n_tokens + 8,
                        **overrides).to(device)
    return [{"arch": arch, "context": c,
             "seconds_per_token": decode_time_per_token(model, c, vocab_size, n_tokens=n_tokens, seed=seed)}
            for c in contexts]


def crossover(contexts, tokens_per_s_a, tokens_per_s_b) -> float | None:
    """First context (log-linear interpolation) at which model a's tokens/s reaches model b's.

    Returns the first measured context if a is already ahead there, None if a never catches up.
    """
    pairs = list(zip(contexts, tokens_per_s_a, tokens_per_s_b))
    if not pairs:
        raise ValueError("no points")
    if pairs[0][1] >= pairs[0][2]:
        return float(pairs[0][0])
    for (c0, a0, b0), (c1, a1, b1) in zip(pairs, pairs[1:]):
        d0, d1 = math.log(a0 / b0), math.log(a1 / b1)
        if d1 >= 0 > d0:
            frac = d0 / (d0 - d1)
            return float(math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0))))
    return None


def load_gpu_results(path: str | Path) -> dict | None:
    """The committed GPU benchmark (benchmarks/gpu_bench.py's JSON), or None when absent or a dry run."""
    path = Path(path)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("meta", {}).get("dry_run") or data.get("dry_run"):
        return None
    return data


def as_rows(points) -> list[dict]:
    return [asdict(p) for p in points]
