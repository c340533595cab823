"""Timing and memory helpers shared by notebooks/protot/01_mixer_derivation.py and
benchmarks/bench_mixer.py. Times are the best of repeated runs in one process, so that ratios taken
from one run stay comparable on a shared, loaded machine; decoding is timed in interleaved rounds
(every context once per round), and the claim's ratio of long to short context is taken per round
and aggregated over rounds (the rounds are the units of its interval).

Memory is measured as the bytes of the tensors autograd saves for the backward pass (unique
storages, via ``torch.autograd.graph.saved_tensors_hooks``): the activation memory of training,
deterministic and independent of the allocator, unlike a process RSS.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch

from kernels.proto_mixer import decay_linear_attn


def _wall_times(fn, repeats: int, warmup: int) -> list[float]:
    """Wall times of ``repeats`` calls of ``fn()`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best_time(fn, repeats: int = 3, warmup: int = 1) -> float:
    """Best (minimum) wall time of ``fn()`` in seconds over ``repeats`` runs, the timeit
    convention: other processes only ever add time, so the minimum is the least noisy estimate."""
    return min(_wall_times(fn, repeats, warmup))


def median_time(fn, repeats: int = 3, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup`` runs."""
    return statistics.median(_wall_times(fn, repeats, warmup))


def saved_activation_bytes(fn) -> int:
    """Bytes of unique storages autograd saves while running ``fn()`` (no backward is run)."""
    seen, total = set(), 0

    def pack(t):
        nonlocal total
        try:
            key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        except Exception:
            key = (id(t), t.numel() * t.element_size())
        if key not in seen:
            seen.add(key)
            total += key[1]
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def op_inputs(T: int, B: int = 1, H: int = 1, K: int = 32, V: int = 128, dtype=torch.float32,
              requires_grad: bool = False, seed: int = 0):
    """Random inputs of the generic op shaped like one ProtoT layer (K = R prototypes, V = d_v)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.rand(B, T, H, K, generator=gen).to(dtype)
    k = torch.softmax(torch.randn(B, T, H, K, generator=gen), -1).to(dtype)
    v = torch.randn(B, T, H, V, generator=gen).to(dtype)
    half_lives = torch.logspace(0, math.log10(256), K)                 # 1 .. 256 tokens
    g = (math.log(0.5) / half_lives).expand(H, K).contiguous().to(dtype)
    xs = [q, k, v, g]
    if requires_grad:
        xs = [x.requires_grad_() for x in xs]
    return xs


def _op_call(form: str, T: int, backward: bool, chunk_size: int, **shape):
    """A no-argument function running the op once in ``form`` at length T (inputs made once, here)."""
    xs = op_inputs(T, requires_grad=backward, **shape)

    def run():
        if backward:
            o, _ = decay_linear_attn(*xs, form=form, backend="torch", chunk_size=chunk_size)
            o.sum().backward()
        else:
            with torch.no_grad():
                decay_linear_attn(*xs, form=form, backend="torch", chunk_size=chunk_size)

    return run


def time_form(form: str, T: int, backward: bool = False, repeats: int = 3, chunk_size: int = 64, warmup: int = 1,
              **shape) -> float:
    """Best-of-``repeats`` seconds of the op in ``form`` at length T (forward, or forward + backward)."""
    return best_time(_op_call(form, T, backward, chunk_size, **shape), repeats=repeats, warmup=warmup)


def time_forms(lengths: dict[str, list[int]], rounds: int = 5, backward: bool = False, chunk_size: int = 64,
               clock: str = "wall", **shape) -> dict[tuple[str, int], float]:
    """Best seconds of every (form, T) pair, measured in interleaved rounds.

    Each round times every pair once (after one untimed warm-up round), so a burst of load from another
    process slows one measurement of several pairs rather than every measurement of one length, which would
    tilt a fitted slope; the minimum over rounds is kept per pair.

    ``clock="wall"`` times with :func:`time.perf_counter`; ``clock="thread"`` counts the CPU time of the
    calling thread (:func:`time.thread_time`), which leaves out the time the thread spent descheduled
    while other processes ran. It is only a measure of the work when torch computes on this one thread,
    so it requires ``torch.get_num_threads() == 1``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if clock not in ("wall", "thread"):
        raise ValueError(f"clock must be 'wall' or 'thread', got {clock!r}")
    if clock == "thread" and torch.get_num_threads() != 1:
        raise ValueError(f"clock='thread' needs torch.set_num_threads(1) (torch uses {torch.get_num_threads()} "
                         "threads, whose work the calling thread's CPU time would not count)")
    timer = time.perf_counter if clock == "wall" else time.thread_time
    runs = {(form, T): _op_call(form, T, backward, chunk_size, **shape) for form, Ts in lengths.items() for T in Ts}
    best = {key: math.inf for key in runs}
    for r in range(rounds + 1):
        for key, run in runs.items():
            t0 = timer()
            run()
            if r:  # round 0 warms up
                best[key] = min(best[key], timer() - t0)
    return best


def memory_form(form: str, T: int, chunk_size: int = 64, **shape) -> int:
    """Activation bytes saved for backward by the op in ``form`` at length T."""
    xs = op_inputs(T, requires_grad=True, **shape)
    return saved_activation_bytes(lambda: decay_linear_attn(*xs, form=form, backend="torch", chunk_size=chunk_size))


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    lx = torch.tensor([math.log(x) for x in xs], dtype=torch.float64)
    ly = torch.tensor([math.log(y) for y in ys], dtype=torch.float64)
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())


@torch.no_grad()
def prefilled_cache(model, context: int, vocab_size: int, seed: int = 0, synthetic_kv: bool = True):
    """A cache holding ``context`` tokens. ProtoT / DeltaNet / Mamba: a real prefill (the recurrent
    state has a fixed size). LLaMA with ``synthetic_kv``: random keys/values of the right shape
    (decode cost depends only on the cache length; avoids an O(T^2) prefill on the CPU).
    The cache lives on the model's device."""
    from protot.models.common import RecurrentCache
    from protot.models.llama import Attention
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    if synthetic_kv and isinstance(model.layers[0].mixer, Attention):
        cache = RecurrentCache(len(model.layers))
        for layer_cache, block in zip(cache.layers, model.layers):
            a = block.mixer
            shape = (1, a.H, context, a.hd)
            layer_cache["k"] = torch.randn(shape, generator=gen).to(device, model.dtype)
            layer_cache["v"] = torch.randn(shape, generator=gen).to(device, model.dtype)
        cache.seen_tokens = context
        return cache
    ids = torch.randint(0, vocab_size, (1, context), generator=gen).to(device)
    return model(ids, use_cache=True).cache


@torch.no_grad()
def decode_round_times(model, contexts, vocab_size: int, rounds: int = 5, tokens_per_round: int = 8,
                       seed: int = 0) -> dict[int, list[float]]:
    """{context: [seconds per generated token in each round]} (batch 1) after ``context`` cached tokens.

    All caches are prefilled first; then, after one untimed warm-up round, ``rounds`` rounds each
    decode ``tokens_per_round`` tokens from every context in turn (interleaved, so that load from
    other processes hits all contexts of a round alike); a round's time per token is the median of
    its ``tokens_per_round`` tokens. Runs on the model's device (on a GPU each token is synchronised
    before its time is taken).
    """
    if rounds < 1:
        raise ValueError(f"decode_round_times needs at least one timed round, got {rounds}")
    model.eval()
    device = next(model.parameters()).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    caches = {L: prefilled_cache(model, L, vocab_size, seed=seed) for L in contexts}
    toks = {L: torch.zeros(1, 1, dtype=torch.long, device=device) for L in contexts}
    out: dict[int, list[float]] = {L: [] for L in contexts}
    for rnd in range(rounds + 1):                                       # round 0 warms up
        for L in contexts:
            times = []
            for _ in range(tokens_per_round):
                sync()
                t0 = time.perf_counter()
                logits = model(toks[L], cache=caches[L], use_cache=True).logits
                sync()
                times.append(time.perf_counter() - t0)
                toks[L] = logits[:, -1:].argmax(-1)
            if rnd > 0:
                out[L].append(statistics.median(times))
    return out


def decode_times(model, contexts, vocab_size: int, rounds: int = 5, tokens_per_round: int = 8,
                 seed: int = 0) -> dict:
    """{context: seconds per generated token}: the best round of :func:`decode_round_times` (on a
    shared machine the least disturbed estimate of the per-token cost)."""
    per_round = decode_round_times(model, contexts, vocab_size, rounds=rounds, tokens_per_round=tokens_per_round,
                                   seed=seed)
    return {L: min(v) for L, v in per_round.items()}


def decode_time_per_token(model, context: int, vocab_size: int, n_tokens: int = 32, seed: int = 0) -> float:
    """Seconds per generated token after ``context`` cached tokens (see ``decode_times``)."""
    return decode_times(model, [context], vocab_size, rounds=max(1, n_tokens // 8), seed=seed)[context]


# --- the claims of notebook protot/01_mixer_derivation that these timings and counts measure ---

def cost_slopes(cost, fit_from: dict[str, int]) -> dict[str, dict[str, float]]:
    """{form: {"time", "memory"}}: log-log slopes of ``seconds`` and ``saved_bytes`` against ``T``, per form,
    over the lengths T >= ``fit_from[form]`` (a form missing from ``fit_from`` is fitted over every length)."""
    missing = [c for c in ("form", "T", "seconds", "saved_bytes") if c not in cost]
    if missing:
        raise ValueError(f"cost_slopes: the cost table lacks column(s) {missing}")
    out = {}
    for form, d in cost.groupby("form"):
        d = d[d["T"] >= fit_from.get(form, 0)]
        if len(d) < 2:
            raise ValueError(f"cost_slopes: fewer than two lengths to fit for form {form!r} (from T={fit_from.get(form, 0)})")
        out[form] = {"time": loglog_slope(d["T"], d["seconds"]), "memory": loglog_slope(d["T"], d["saved_bytes"])}
    return out


def measure_linear_cost(cost, fit_from: dict[str, int], config: dict | None = None):
    """Claim protot/mixer-linear-cost: the chunked form's activation-memory slope against T (the check);
    the quadratic form's memory slope is the precondition's quantity, the time slopes are evidence."""
    from compendium.claims import Measurement

    slopes = cost_slopes(cost, fit_from)
    missing = [f for f in ("chunk", "quadratic", "recurrent") if f not in slopes]
    if missing:
        raise ValueError(f"measure_linear_cost: no lengths measured for form(s) {missing}")
    return Measurement(
        "protot/mixer-linear-cost",
        values={"chunk_memory_slope": slopes["chunk"]["memory"], "quadratic_memory_slope": slopes["quadratic"]["memory"]},
        evidence={"chunk_time_slope": slopes["chunk"]["time"], "quadratic_time_slope": slopes["quadratic"]["time"],
                  "recurrent_time_slope": slopes["recurrent"]["time"],
                  "recurrent_memory_slope": slopes["recurrent"]["memory"]},
        tables={"mixer_cost_vs_length": cost}, config=dict(config or {}),
        note=(f"chunked form: memory slope {slopes['chunk']['memory']:.2f}, forward-time slope "
              f"{slopes['chunk']['time']:.2f} (fitted from T = {fit_from.get('chunk', 0)}); quadratic form: memory "
              f"{slopes['quadratic']['memory']:.2f}, time {slopes['quadratic']['time']:.2f}"))


def round_ratios(decode) -> dict[str, np.ndarray]:
    """{arch: per-round ratios}: in each timed round, the time per token at the longest context over
    that at the shortest (the two timed in the same round), from rows (arch, context, round,
    sec_per_token), one per arch, context and round; rounds in increasing order."""
    missing = [c for c in ("arch", "context", "round", "sec_per_token") if c not in decode]
    if missing:
        raise ValueError(f"round_ratios: the decode table lacks column(s) {missing}")
    if decode.duplicated(["arch", "context", "round"]).any():
        raise ValueError("round_ratios: more than one time for an (arch, context, round)")
    out = {}
    for arch, d in decode.groupby("arch"):
        per = d.pivot(index="round", columns="context", values="sec_per_token").sort_index()
        if per.shape[1] < 2 or per.isna().any().any():
            raise ValueError(f"round_ratios: {arch} must be timed at two or more contexts in every round")
        out[arch] = (per[per.columns.max()] / per[per.columns.min()]).to_numpy(dtype=np.float64)
    return out


def measure_decode_constant(decode, config: dict | None = None, n_boot: int = 2000, seed: int = 0):
    """Claim protot/decode-constant-time: ProtoT's time per token at the longest context over the shortest,
    a ratio per timed round (:func:`round_ratios`) aggregated as their geometric mean, with its percentile
    bootstrap interval over rounds (:func:`compendium.stats.geometric_mean_ci`; the check); LLaMA's geometric
    mean over the same rounds is the precondition's quantity (the sweep can tell O(1) from O(T)); n_rounds
    (the rounds both were timed in) is min_units' quantity."""
    from compendium import stats
    from compendium.claims import Measurement

    ratios = round_ratios(decode)
    missing = [a for a in ("protot", "llama") if a not in ratios]
    if missing:
        raise ValueError(f"measure_decode_constant: no decode times for {missing}")
    gm = {a: stats.geometric_mean(r) for a, r in ratios.items()}
    lo, hi = stats.geometric_mean_ci(ratios["protot"], n_boot=n_boot, seed=seed)
    llama_lo, llama_hi = stats.geometric_mean_ci(ratios["llama"], n_boot=n_boot, seed=seed)
    per = decode.pivot_table(index="context", columns="arch", values="sec_per_token", aggfunc="median")
    short, long = int(per.index.min()), int(per.index.max())
    n_rounds = min(len(ratios["protot"]), len(ratios["llama"]))
    return Measurement(
        "protot/decode-constant-time",
        values={"protot_time_ratio": gm["protot"], "protot_time_ratio_ci_low": lo, "protot_time_ratio_ci_high": hi,
                "llama_time_ratio": gm["llama"], "n_rounds": n_rounds},
        evidence={"median_ms_per_token": (per * 1e3).round(4).to_dict(),
                  "round_ratios": {a: [round(float(x), 6) for x in r] for a, r in ratios.items()},
                  "llama_time_ratio_ci": [llama_lo, llama_hi]},
        tables={"decode_time_vs_context": decode}, config=dict(config or {}, n_boot=n_boot, seed=seed),
        note=(f"time per token at {long} over {short} tokens of context, per round, geometric mean over {n_rounds} "
              f"rounds: ProtoT {gm['protot']:.3f}x (95% CI {lo:.3f}..{hi:.3f}), LLaMA {gm['llama']:.3f}x "
              f"({llama_lo:.3f}..{llama_hi:.3f})"))
