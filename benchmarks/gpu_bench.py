"""GPU benchmark of the ProtoT mixer kernel and of whole-model training / decoding throughput.

Writes one JSON file (``--out``, default benchmarks/results/gpu_bench.json) with:

* ``copy_bandwidth``: the GPU's measured device-to-device copy bandwidth (the ceiling that
  "achieved bandwidth" is compared against);
* ``op``: the mixer op, forward and forward+backward, at T = 1k .. 64k (batch B = tokens // T):
  the Triton chunked kernel (kernels/proto_mixer), the torch chunked path, causal SDPA
  (FlashAttention) at the LLaMA baseline's head shape, flash-linear-attention's chunk_simple_gla
  at the ProtoT shapes and its DeltaNet chunk kernel (chunk_delta_rule) at DeltaNet's head shape;
  time, tokens/s, minimal bytes moved, achieved GB/s and its fraction of the copy ceiling;
* ``model_train``: training throughput (forward + backward + AdamW step, bfloat16 autocast) of
  ProtoT, LLaMA, DeltaNet and Mamba from ``protot.models.build_model`` at one size (equal
  non-embedding parameter counts), context 256 .. 32k, a fixed number of tokens per step;
* ``decode``: time per generated token after a prefill of 1k .. 32k tokens, for the op's fused
  recurrent kernel and for the ProtoT and LLaMA models with their caches;
* ``goals``: the three performance goals: kernel within 1.5x of chunk_simple_gla at the same
  shapes; ProtoT training throughput passes LLaMA's at 8k context or earlier; ProtoT decoding time
  per token flat in context (max / min <= 1.25 over the contexts measured).

Every measurement is wrapped: an implementation that is missing (no fla, no mamba-ssm) or fails
(out of memory) is recorded with its error instead of stopping the run. The lib baselines
DeltaNet and Mamba are the project's pure-torch implementations ("impl" says so in the JSON).

Usage (on a GPU machine):   python benchmarks/gpu_bench.py [--out PATH] [--quick]
CPU check of the script:     python benchmarks/gpu_bench.py --dry-run
(--dry-run: tiny shapes on the CPU, torch paths only; output goes to a temporary file unless
--out is given, and is marked dry_run so it is never mistaken for GPU numbers.)
The script puts lib/ and the repository root on sys.path itself (no install, no PYTHONPATH), and
writes the JSON after every section, so a run stopped by a time limit keeps what it measured
(``meta.finished`` is null then). Models return the project's output class, whose ``cache`` field
does not depend on the transformers version (protot.models.common.CausalLMOutputWithCache).
benchmarks/gpu_session.sh runs it with training and the kernel tests in one GPU session.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
# Run as a script from anywhere: lib/ (protot, compendium) and the repository root (kernels) go on
# the path first, without an installed package or PYTHONPATH.
for _p in (REPO, REPO / "lib"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu_bench.json"
KERNEL_SLOWDOWN_GOAL = 1.5       # Triton kernel time / chunk_simple_gla time, at most
CROSSOVER_GOAL = 8192            # ProtoT passes LLaMA (training tokens/s) at this context or earlier
DECODE_FLATNESS_GOAL = 1.25      # max / min decode time per token over the contexts measured


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(fn, device: torch.device, warmup: int, rep: int) -> dict:
    """Median / min wall time of fn() in milliseconds (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(rep):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"ms": statistics.median(times), "ms_min": min(times), "reps": rep}


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def guarded(record: dict, fn):
    """Runs fn() -> dict into record; on failure stores the error (OOM included) instead."""
    try:
        record.update(fn())
        record["ok"] = True
    except Exception as err:  # noqa: BLE001 -- recorded, the run goes on
        record["ok"] = False
        record["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
        if os.environ.get("GPU_BENCH_TRACEBACK"):
            traceback.print_exc()
    return record


def copy_bandwidth(device: torch.device, nbytes: int, warmup: int, rep: int) -> dict:
    """Device copy y.copy_(x): bytes read + bytes written per second."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x), device, warmup, rep)
    gbps = 2 * x.numel() * 4 / (t["ms"] * 1e-3) / 1e9
    x = y = None  # the buffers freed (a del would unbind the names the lambda above reads)
    free_memory(device)
    return {"bytes": nbytes, **t, "GBps": gbps}


# ---------------------------------------------------------------------------------------------
# the op: implementations
# ---------------------------------------------------------------------------------------------
def make_protot_inputs(B, T, H, K, V, dtype, device, grad):
    """ProtoT-like: k a softmax write gate, q a positive read gate / normaliser, decays from
    half-life 1 to 8192 tokens."""
    q = torch.rand(B, T, H, K, device=device, dtype=dtype)
    k = torch.softmax(torch.randn(B, T, H, K, device=device), -1).to(dtype)
    v = torch.randn(B, T, H, V, device=device, dtype=dtype)
    half_life = torch.logspace(0, math.log10(8192), K, device=device)
    log_decay = (math.log(0.5) / half_life).expand(H, K).contiguous()
    xs = [q, k, v, log_decay]
    if grad:
        for x in xs:
            x.requires_grad_(True)
    return xs


def op_protot(backend):
    def build(B, T, shape, dtype, device, grad):
        from kernels.proto_mixer import decay_linear_attn

        H, K, V = shape["H"], shape["K"], shape["V"]
        q, k, v, a = make_protot_inputs(B, T, H, K, V, dtype, device, grad)
        return (lambda: decay_linear_attn(q, k, v, a, backend=backend)[0]), [q, k, v, a]
    return build


def op_sdpa(B, T, shape, dtype, device, grad):
    H, D = shape["H"], shape["D"]
    q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=grad) for _ in range(3))
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), [q, k, v]


def op_fla_simple_gla(B, T, shape, dtype, device, grad):
    from fla.ops.simple_gla import chunk_simple_gla

    H, K, V = shape["H"], shape["K"], shape["V"]
    q, k, v, _ = make_protot_inputs(B, T, H, K, V, dtype, device, grad)
    params = inspect.signature(chunk_simple_gla).parameters
    if "g_gamma" in params:   # a constant per-head decay: the closest fla op to ours
        g_gamma = torch.full((H,), math.log(0.99), device=device)
        return (lambda: chunk_simple_gla(q, k, v, g_gamma=g_gamma, scale=1.0)[0]), [q, k, v]
    g = torch.full((B, T, H), math.log(0.99), device=device)
    return (lambda: chunk_simple_gla(q, k, v, g=g, scale=1.0)[0]), [q, k, v]


def op_fla_delta_rule(B, T, shape, dtype, device, grad):
    from fla.ops.delta_rule import chunk_delta_rule

    H, D = shape["H"], shape["D"]
    q = F.normalize(torch.randn(B, T, H, D, device=device), dim=-1).to(dtype).requires_grad_(grad)
    k = F.normalize(torch.randn(B, T, H, D, device=device), dim=-1).to(dtype).requires_grad_(grad)
    v = torch.randn(B, T, H, D, device=device, dtype=dtype, requires_grad=grad)
    beta = torch.rand(B, T, H, device=device, dtype=dtype).sigmoid().requires_grad_(grad)
    return (lambda: chunk_delta_rule(q, k, v, beta)[0]), [q, k, v, beta]


def op_bytes(impl: str, B: int, T: int, shape: dict, elem: int, mode: str) -> int:
    """Minimal HBM traffic: inputs read and outputs written once (forward); the backward also
    reads the inputs and do, and writes one gradient per input."""
    if impl in ("sdpa", "fla_delta_rule"):
        H, K, V = shape["H"], shape["D"], shape["D"]
    else:
        H, K, V = shape["H"], shape["K"], shape["V"]
    fwd = (2 * K + V) + V                       # read q, k, v; write o
    bwd = (2 * K + V) + V + (2 * K + V)         # read q, k, v, do; write dq, dk, dv
    per_token = fwd + (bwd if mode == "fwd_bwd" else 0)
    return B * T * H * per_token * elem


def run_op_section(args, device, dtype, ceiling_gbps):
    shapes = {
        # the ProtoT mixer at the paper's large setting: R = 32 prototypes, d_v = hidden / 2 = 256
        "protot": {"H": 1, "K": args.num_prototypes, "V": args.value_dim},
        # the LLaMA / DeltaNet baselines of the same hidden size: 8 heads of 64
        "heads": {"H": args.heads, "D": args.hidden // args.heads},
    }
    impls = {
        "protot_triton": (op_protot("triton"), "protot"),
        "protot_torch": (op_protot("torch"), "protot"),
        "sdpa": (op_sdpa, "heads"),
        "fla_simple_gla": (op_fla_simple_gla, "protot"),
        "fla_delta_rule": (op_fla_delta_rule, "heads"),
    }
    if args.dry_run:
        impls = {k: v for k, v in impls.items() if k in ("protot_torch", "sdpa")}
    rows = []
    for T in args.lengths:
        B = max(1, args.tokens // T)
        for name, (build, shape_key) in impls.items():
            shape = shapes[shape_key]
            if name == "protot_torch" and T > args.torch_max_len:
                continue
            for mode in ("fwd", "fwd_bwd"):
                rec = {"impl": name, "mode": mode, "T": T, "B": B, "shape": shape, "dtype": str(dtype)}

                def measure(name=name, build=build, shape=shape, mode=mode, B=B, T=T):
                    fn, inputs = build(B, T, shape, dtype, device, mode == "fwd_bwd")
                    if mode == "fwd":
                        with torch.no_grad():
                            t = bench(fn, device, args.warmup, args.rep)
                    else:
                        do = torch.randn_like(fn())

                        def step():
                            for x in inputs:
                                x.grad = None
                            fn().backward(do)
                        t = bench(step, device, args.warmup, args.rep)
                    nbytes = op_bytes(name, B, T, shape, torch.finfo(dtype).bits // 8, mode)
                    gbps = nbytes / (t["ms"] * 1e-3) / 1e9
                    return {**t, "tokens_per_s": B * T / (t["ms"] * 1e-3), "bytes": nbytes, "GBps": gbps,
                            "fraction_of_copy_bw": gbps / ceiling_gbps if ceiling_gbps else None}

                guarded(rec, measure)
                free_memory(device)
                rows.append(rec)
                print(f"op {name:15s} {mode:7s} T={T:6d} B={B:4d} "
                      + (f"{rec['ms']:9.3f} ms {rec['tokens_per_s'] / 1e6:8.2f} Mtok/s "
                         f"{rec['GBps']:7.1f} GB/s" if rec["ok"] else rec["error"]), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# whole models
# ---------------------------------------------------------------------------------------------
MODEL_IMPL = {"protot": "lib ProtoT, mixer through kernels.proto_mixer (Triton on CUDA)",
              "llama": "lib LLaMA, torch SDPA (FlashAttention on CUDA)",
              "deltanet": "lib DeltaNet, pure-torch chunked delta rule",
              "mamba": "lib Mamba, pure-torch selective scan"}


def build(arch, args, ctx, device):
    from protot.models import build_model

    model = build_model(arch, args.model_size, args.vocab_size, max_position_embeddings=ctx)
    return model.to(device)


def run_model_train_section(args, device):
    from protot.models import count_parameters

    rows = []
    amp = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device.type == "cuda"
           else contextlib.nullcontext())
    for arch in args.archs:
        over_budget = False
        for ctx in args.contexts:
            B = max(1, args.train_tokens // ctx)
            rec = {"arch": arch, "impl": MODEL_IMPL[arch], "size": args.model_size, "context": ctx, "B": B}
            if over_budget:   # a shorter context already took longer than the budget per step
                rec.update(ok=False, error=f"skipped: a step at a shorter context took > {args.step_budget_s} s")
                rows.append(rec)
                print(f"train {arch:8s} ctx={ctx:6d} {rec['error']}", flush=True)
                continue

            def measure(arch=arch, ctx=ctx, B=B):
                model = build(arch, args, ctx, device)
                model.train()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
                ids = torch.randint(0, args.vocab_size, (B, ctx), device=device)

                def step():
                    with amp:
                        loss = model(input_ids=ids, labels=ids).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                sync(device)
                t0 = time.perf_counter()
                step()                                   # first step: compilation, autotuning
                sync(device)
                first_s = time.perf_counter() - t0
                if first_s > args.step_budget_s:         # e.g. a pure-torch scan at long context
                    t = {"ms": first_s * 1e3, "ms_min": first_s * 1e3, "reps": 1,
                         "note": "one step only (it took longer than --step-budget-s)"}
                else:
                    t = bench(step, device, max(0, args.warmup_model - 1), args.rep_model)
                n = count_parameters(model)
                out = {**t, "tokens_per_s": B * ctx / (t["ms"] * 1e-3), "params": n, "first_step_s": first_s}
                if device.type == "cuda":
                    out["peak_mem_GiB"] = torch.cuda.max_memory_allocated(device) / 2**30
                    torch.cuda.reset_peak_memory_stats(device)
                model = opt = None  # freed (a del would unbind the names step() reads)
                return out

            guarded(rec, measure)
            free_memory(device)
            rows.append(rec)
            over_budget = rec.get("first_step_s", 0.0) > args.step_budget_s
            print(f"train {arch:8s} ctx={ctx:6d} B={B:4d} "
                  + (f"{rec['tokens_per_s'] / 1e3:9.1f} ktok/s" if rec["ok"] else rec["error"]), flush=True)
    return rows


def run_decode_section(args, device, dtype):
    """Time per decoded token after a prefill of ctx tokens: the op's fused recurrent kernel with
    a state (Triton on CUDA; the torch recurrent reference in a dry run), and the models with
    their caches (ProtoT: a fixed-size state; LLaMA: a growing KV cache)."""
    rows = []
    H, K, V = 1, args.num_prototypes, args.value_dim
    for ctx in args.decode_contexts:
        rec = {"what": "op_fused_recurrent" if device.type == "cuda" else "op_recurrent_torch", "context": ctx}

        def measure_op(ctx=ctx):
            from kernels.proto_mixer import (chunk_decay_linear_attn_ref, decay_linear_attn,
                                             recurrent_decay_linear_attn_ref)

            q, k, v, a = make_protot_inputs(1, ctx + args.decode_steps, H, K, V, dtype, device, False)
            with torch.no_grad():
                if device.type == "cuda":
                    _, state = decay_linear_attn(q[:, :ctx], k[:, :ctx], v[:, :ctx], a, None, True, backend="triton")
                else:
                    _, state = chunk_decay_linear_attn_ref(q[:, :ctx], k[:, :ctx], v[:, :ctx], a, None, True)
                holder = {"S": state, "t": ctx}

                def one_token():
                    t = holder["t"]
                    sl = slice(t, t + 1)
                    if device.type == "cuda":
                        _, holder["S"] = decay_linear_attn(q[:, sl], k[:, sl], v[:, sl], a, holder["S"], True,
                                                           backend="triton")
                    else:
                        _, holder["S"] = recurrent_decay_linear_attn_ref(q[:, sl], k[:, sl], v[:, sl], a,
                                                                         holder["S"], True)
                    holder["t"] = ctx + (t + 1 - ctx) % args.decode_steps
                t = bench(one_token, device, 3, args.decode_steps)
            return {**t, "ms_per_token": t["ms"]}

        guarded(rec, measure_op)
        rows.append(rec)
        for arch in ("protot", "llama"):
            rec = {"what": f"model_{arch}", "impl": MODEL_IMPL[arch], "context": ctx}

            def measure_model(arch=arch, ctx=ctx):
                model = build(arch, args, ctx + args.decode_steps + 8, device).eval()
                amp = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device.type == "cuda"
                       else contextlib.nullcontext())
                ids = torch.randint(0, args.vocab_size, (1, ctx), device=device)
                with torch.no_grad(), amp:
                    cache = model(input_ids=ids, use_cache=True).cache
                    nxt = ids[:, -1:]
                    # decode_steps tokens after the prefill; each call appends one token
                    sync(device)
                    times = []
                    for _ in range(args.decode_steps):
                        t0 = time.perf_counter()
                        out = model(input_ids=nxt, cache=cache, use_cache=True)
                        sync(device)
                        times.append((time.perf_counter() - t0) * 1e3)
                        nxt = out.logits[:, -1:].argmax(-1)
                        cache = out.cache
                warm = times[2:] or times
                del model, cache
                return {"ms_per_token": statistics.median(warm), "ms_min": min(warm), "steps": len(times)}

            guarded(rec, measure_model)
            free_memory(device)
            rows.append(rec)
        print(f"decode ctx={ctx:6d} " + " ".join(
            f"{r['what']}={r['ms_per_token']:.3f}ms" if r.get("ok") else f"{r['what']}=ERR"
            for r in rows if r["context"] == ctx), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# goals and metadata
# ---------------------------------------------------------------------------------------------
def check_goals(op_rows, train_rows, decode_rows) -> dict:
    goals = {}
    ratios = []
    for mode in ("fwd", "fwd_bwd"):
        for r in op_rows:
            if r["impl"] != "protot_triton" or r["mode"] != mode or not r.get("ok"):
                continue
            ref = [s for s in op_rows if s["impl"] == "fla_simple_gla" and s["mode"] == mode
                   and s["T"] == r["T"] and s.get("ok")]
            if ref:
                ratios.append({"mode": mode, "T": r["T"], "ratio": r["ms"] / ref[0]["ms"]})
    goals["kernel_vs_chunk_simple_gla"] = {
        "goal": f"time(protot_triton) / time(chunk_simple_gla) <= {KERNEL_SLOWDOWN_GOAL} at every T",
        "ratios": ratios,
        "met": (all(x["ratio"] <= KERNEL_SLOWDOWN_GOAL for x in ratios) if ratios else None),
    }
    by = {(r["arch"], r["context"]): r["tokens_per_s"] for r in train_rows if r.get("ok")}
    ctxs = sorted({c for (_, c) in by})
    crossover = next((c for c in ctxs if ("protot", c) in by and ("llama", c) in by
                      and by[("protot", c)] >= by[("llama", c)]), None)
    goals["protot_passes_llama_training"] = {
        "goal": f"ProtoT training tokens/s >= LLaMA's at context <= {CROSSOVER_GOAL}",
        "first_context_where_protot_is_faster": crossover,
        "met": (crossover is not None and crossover <= CROSSOVER_GOAL) if by else None,
    }
    dec = [r["ms_per_token"] for r in decode_rows if r["what"] == "model_protot" and r.get("ok")]
    flat = max(dec) / min(dec) if len(dec) >= 2 else None
    goals["protot_decode_flat"] = {
        "goal": f"max / min ProtoT decode ms per token over contexts <= {DECODE_FLATNESS_GOAL}",
        "max_over_min": flat,
        "met": (flat <= DECODE_FLATNESS_GOAL) if flat is not None else None,
    }
    return goals


def versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("triton", "flash-linear-attention", "mamba-ssm", "transformers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def git_revision() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help=f"JSON output (default {DEFAULT_OUT})")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU, torch paths only")
    p.add_argument("--quick", action="store_true", help="fewer lengths / contexts / repetitions")
    p.add_argument("--sections", default="op,train,decode", help="comma list of op, train, decode")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    p.add_argument("--tokens", type=int, default=65536, help="tokens per op call (B = tokens // T)")
    p.add_argument("--torch-max-len", type=int, default=16384, help="longest T for the torch chunked path")
    p.add_argument("--num-prototypes", type=int, default=32)
    p.add_argument("--value-dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--archs", nargs="+", default=["protot", "llama", "deltanet", "mamba"])
    p.add_argument("--model-size", default="large", help="protot.models size (equal non-embedding params)")
    p.add_argument("--vocab-size", type=int, default=32768)
    p.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--train-tokens", type=int, default=32768, help="tokens per training step (B = tokens // ctx)")
    p.add_argument("--warmup-model", type=int, default=2)
    p.add_argument("--rep-model", type=int, default=5)
    p.add_argument("--step-budget-s", type=float, default=20.0,
                   help="a training step slower than this is timed once, and longer contexts of that arch are skipped")
    p.add_argument("--decode-contexts", type=int, nargs="+", default=[1024, 4096, 16384, 32768])
    p.add_argument("--decode-steps", type=int, default=32)
    args = p.parse_args(argv)
    if args.quick:
        args.lengths = [1024, 8192, 65536]
        args.contexts = [256, 2048, 8192, 32768]
        args.decode_contexts = [1024, 32768]
        args.rep, args.rep_model = 10, 3
    if args.dry_run:
        args.dtype = "float32"
        args.lengths, args.tokens, args.torch_max_len = [64, 128], 128, 10**9
        args.num_prototypes, args.value_dim, args.hidden, args.heads = 8, 16, 32, 2
        args.model_size, args.vocab_size = "tiny", 128
        args.contexts, args.train_tokens = [32, 64], 64
        args.decode_contexts, args.decode_steps = [16, 48], 4
        args.warmup, args.rep, args.warmup_model, args.rep_model = 1, 2, 1, 1
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    sections = set(args.sections.split(","))
    if args.dry_run:
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            sys.exit("gpu_bench.py needs a CUDA GPU (use --dry-run to check the script on the CPU)")
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
    dtype = getattr(torch, args.dtype)
    out_path = args.out or (Path(tempfile.gettempdir()) / "gpu_bench.dryrun.json" if args.dry_run else DEFAULT_OUT)
    torch.manual_seed(0)

    meta = {
        "script": "benchmarks/gpu_bench.py", "dry_run": args.dry_run, "git_revision": git_revision(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": versions(), "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(meta, indent=1), flush=True)
    ceiling = copy_bandwidth(device, (2**30 if device.type == "cuda" else 2**24), args.warmup, args.rep)
    print(f"copy bandwidth ceiling: {ceiling['GBps']:.1f} GB/s", flush=True)
    result = {"meta": meta, "copy_bandwidth": ceiling, "op": [], "model_train": [], "decode": [], "goals": {}}
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def save(finished: bool):
        """Written after every section, so a run stopped by a time limit keeps what it measured."""
        goals = check_goals(result["op"], result["model_train"], result["decode"])
        if args.dry_run:
            for g in goals.values():
                g["met"], g["note"] = None, "dry run on the CPU at tiny shapes: not evaluated"
        result["goals"] = goals
        result["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if finished else None
        tmp = out_path.with_suffix(out_path.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(out_path)

    if "op" in sections:
        result["op"] = run_op_section(args, device, dtype, ceiling["GBps"])
        save(False)
    if "train" in sections:
        result["model_train"] = run_model_train_section(args, device)
        save(False)
    if "decode" in sections:
        result["decode"] = run_decode_section(args, device, dtype)
    save(True)
    print(json.dumps(result["goals"], indent=1))
    print(f"wrote {out_path}")
    return result


if __name__ == "__main__":
    main()
