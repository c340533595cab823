"""Training and decoding throughput of the model family against context length.

Used by notebooks/protot/04_throughput.py. A measurement is the median over ``repeats`` full
training steps (forward, backward, AdamW update; the loss fused with the output projection as
protot.train computes it, ``return_logits=False``) after ``warmup`` steps, with a fixed number of
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

from protot.perf.bench import decode_time_per_token, median_time
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
            loss = model(input_ids=ids, labels=ids, return_logits=False).loss   # the trainer's fused loss
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


# --- the claims of notebook protot/04_throughput ---

def _wide(train):
    missing = [c for c in ("arch", "context", "tokens_per_s") if c not in train]
    if missing:
        raise ValueError(f"the training-throughput table lacks column(s) {missing}")
    if len(train) == 0:
        raise ValueError("the training-throughput table is empty")
    return train.pivot(index="context", columns="arch", values="tokens_per_s").sort_index()


def decode_growth(decode) -> dict[str, float]:
    """{arch: seconds per token at the longest decoded context / at the shortest} (rounded to 3 places)."""
    missing = [c for c in ("arch", "context", "seconds_per_token") if c not in decode]
    if missing:
        raise ValueError(f"the decoding table lacks column(s) {missing}")
    dec = decode.pivot(index="context", columns="arch", values="seconds_per_token")
    return (dec.iloc[-1] / dec.iloc[0]).round(3).to_dict()


def ratio_at_or_below(ratio, context: int) -> tuple[int, float]:
    """(context used, ratio there) at the longest context <= ``context`` of a ratio series indexed by context."""
    r = ratio[ratio.index <= context]
    if len(r) == 0:
        raise ValueError(f"no ratio measured at or below {context} tokens (contexts {list(ratio.index)})")
    return int(r.index[-1]), float(r.iloc[-1])


def measure_throughput_crossover(train, decode, source: str, config: dict | None = None):
    """Claim protot/throughput-crossover: ProtoT / LLaMA training tokens/s at the longest context both
    reached and at 8k tokens (or the longest context below it), with the interpolated crossover context.

    ``train``: rows (arch, context, tokens_per_s), ``decode``: rows (arch, context, seconds_per_token);
    ``source``: where the training numbers come from (prose for the note).
    """
    from compendium.claims import Measurement

    wide = _wide(train)
    if not {"protot", "llama"} <= set(wide.columns):
        raise ValueError(f"measure_throughput_crossover: needs protot and llama throughputs, got {list(wide.columns)}")
    both = wide[["protot", "llama"]].dropna()
    if len(both) == 0:
        raise ValueError("measure_throughput_crossover: no context where both protot and llama were measured")
    cross = crossover(both.index.tolist(), both["protot"].tolist(), both["llama"].tolist())
    ratio = (wide["protot"] / wide["llama"]).dropna()
    longest_both = int(both.index.max())
    ratio_longest = float(ratio.loc[longest_both])
    ratio_8k_context, ratio_8k = ratio_at_or_below(ratio, 8 * 1024)
    direction = ("ahead already at 8k" if ratio_8k >= 1 else
                 "not ahead by the longest context" if ratio_longest < 1 else "crosses between 8k and the longest context")
    return Measurement(
        "protot/throughput-crossover",
        values={"protot_llama_ratio_longest": ratio_longest, "protot_llama_ratio_8k": ratio_8k,
                "longest_context_both": longest_both},
        evidence={"crossover_context": None if cross is None else round(cross), "direction": direction,
                  "protot_llama_ratio_8k measured at": ratio_8k_context,
                  "longest context reached": {a: int(wide[a].dropna().index.max()) for a in wide.columns},
                  "protot_over_llama_by_context": ratio.round(3).to_dict(), "decode_time_growth": decode_growth(decode)},
        tables={"throughput_training": train, "throughput_decoding": decode}, config=dict(config or {}),
        unit="ProtoT / LLaMA training tokens/s",
        note=(f"ProtoT passes LLaMA at {'%.0f tokens' % cross if cross else 'no context up to %d' % longest_both} "
              f"({source}); ProtoT/LLaMA tokens/s at {longest_both}: {ratio_longest:.2f}"))


def measure_deltanet_fastest(train, decode, step_budget_s: float, config: dict | None = None):
    """Claim protot/throughput-deltanet-fastest: DeltaNet has the highest training tokens/s at the longest
    context every architecture reached (``longest_context_all``, 0 when none: the precondition's quantity)."""
    from compendium.claims import Measurement

    wide = _wide(train)
    longest = wide.dropna(how="all").index.max()
    at_longest = wide.loc[longest].dropna().sort_values(ascending=False)
    longest_all = int(wide.dropna().index.max()) if len(wide.dropna()) else 0
    fastest = at_longest.index[0]
    return Measurement(
        "protot/throughput-deltanet-fastest",
        values={"deltanet_fastest": bool(wide.loc[longest_all].idxmax() == "deltanet") if longest_all else False,
                "longest_context_all": longest_all},
        evidence={"fastest_at_longest_reached": f"{fastest} at {int(longest)}",
                  "longest context reached": {a: int(wide[a].dropna().index.max()) for a in wide.columns},
                  "tokens_per_s_at_longest_reached": at_longest.round(1).to_dict()},
        tables={"throughput_training": train, "throughput_decoding": decode}, config=dict(config or {}),
        note=(f"fastest at {int(longest)} tokens: {fastest} ({at_longest.iloc[0]:.0f} tokens/s); models past the step "
              f"budget ({step_budget_s} s) were not run at longer contexts"))
