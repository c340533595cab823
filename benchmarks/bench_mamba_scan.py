"""Mamba's selective scan on the CPU: the token-by-token reference against the chunked scan (one run).

Two measurements, each timing both forms interleaved round by round (reference, chunked, reference,
chunked, ...) so that load from other processes hits both alike; figures are medians over the
timed rounds, as wall-clock time and as this process's CPU time (user + system: while other
processes compete for the cores, the wall-clock time also counts the waiting):

1. one training step of the authors-small Mamba (``protot.models.build_model("mamba", "small",
   12288)`` with the authors' recipe overrides: dropout 0.1, untied head; batch 32 x 256), as
   protot.train runs it: forward with the fused loss, backward, gradient-norm clipping, the
   recipe's AdamW. Both models start from the same weights and see the same batch, and the first
   step's losses and gradient norms are printed side by side (the same maths: they agree to
   float32 rounding).
2. the scan alone, forward + backward, at the model's shape (B = 32, T = 256, E = 512, N = 16) on
   random inputs with dt drawn log-uniformly from the model's initial range [1e-3, 1e-1] and A
   from the S4D-real initialisation (A[e, n] = -(n + 1)).

The peak resident memory (peak RSS) of two training steps of each form is measured in a fresh
child process per form (a process's peak RSS never goes down, so one process cannot measure both).

    python benchmarks/bench_mamba_scan.py [--rounds 3] [--warmup 1] [--threads 1] [--chunk-sizes 16]
                                          [--out benchmarks/results/bench_mamba_scan_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from compendium import atomic, provenance
from protot.models import build_model
from protot.models.selective_scan import CHUNK_SIZE, selective_scan_chunked, selective_scan_reference
from protot.train.config import PROFILES, recipe_model_overrides
from protot.train.trainer import make_optimizer

VOCAB = 12288
RECIPE = "authors-small"


def timed(fn):
    """Run ``fn``; return (wall seconds, CPU seconds of this process, fn's result)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def train_step(scan: str, chunk_size: int):
    """A closure running one training step of the authors-small Mamba; returns (loss, grad norm)."""
    cfg = PROFILES[RECIPE]
    torch.manual_seed(0)
    model = build_model("mamba", cfg.size, VOCAB, max_position_embeddings=cfg.context,
                        **recipe_model_overrides(cfg.recipe, "mamba"), scan=scan, chunk_size=chunk_size)
    model.train()
    opt = make_optimizer(cfg, model)
    ids = torch.randint(0, VOCAB, (cfg.batch_size, cfg.context), generator=torch.Generator().manual_seed(0))
    state = {"step": 0}

    def run():
        torch.manual_seed(state["step"])                       # the same dropout masks for both forms
        state["step"] += 1
        out = model(input_ids=ids, labels=ids, return_logits=False)
        out.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss.item(), norm.item()

    return run


def scan_inputs(B=32, T=256, E=512, N=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo, hi = torch.log(torch.tensor(1e-3)), torch.log(torch.tensor(1e-1))
    x = torch.randn(B, T, E, generator=g)
    dt = torch.exp(lo + (hi - lo) * torch.rand(B, T, E, generator=g))
    A = -torch.arange(1, N + 1, dtype=torch.float32).expand(E, N).contiguous()
    Bm, Cm = torch.randn(B, T, N, generator=g), torch.randn(B, T, N, generator=g)
    D = torch.ones(E)
    return [t.requires_grad_() for t in (x, dt, A, Bm, Cm, D)]


def scan_step(fn):
    inputs = scan_inputs()
    g = torch.Generator().manual_seed(1)

    def run():
        y, h = fn(*inputs)
        gy = torch.randn(y.shape, generator=g)
        (y * gy).sum().add(h.sum()).backward()
        for t in inputs:
            t.grad = None

    return run


def interleave(timers: dict, rounds: int, warmup: int, label: str) -> dict:
    """Time every closure of ``timers`` round by round; return per-name lists of (wall, cpu)."""
    times = {k: [] for k in timers}
    firsts = {}
    for i in range(warmup + rounds):
        for k, fn in timers.items():
            w, c, out = timed(fn)
            if i == 0:
                firsts[k] = out
            if i >= warmup:
                times[k].append((w, c))
            print(f"  {label} round {i + 1 - warmup:2d}{' (warm-up)' if i < warmup else ''}: {k:12s} "
                  f"wall {w:7.2f} s, cpu {c:7.2f} s", flush=True)
    return times, firsts


def summarise(times: dict, ref: str) -> dict:
    out = {}
    for k, v in times.items():
        out[k] = {"median_wall_s": statistics.median(w for w, _ in v), "median_cpu_s": statistics.median(c for _, c in v),
                  "wall_s": [w for w, _ in v], "cpu_s": [c for _, c in v]}
    for k in times:
        if k != ref:
            out[k]["speedup_wall"] = out[ref]["median_wall_s"] / out[k]["median_wall_s"]
            out[k]["speedup_cpu"] = out[ref]["median_cpu_s"] / out[k]["median_cpu_s"]
    return out


def peak_rss_mib() -> float:
    """This process's peak resident memory (MiB): VmHWM, which starts afresh at exec (getrusage's
    ru_maxrss does not: a child can inherit its parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_child(scan: str, chunk_size: int, threads: int) -> float:
    """Peak RSS (MiB) of a fresh process running two training steps of ``scan``."""
    res = subprocess.run([sys.executable, __file__, "--memory-child", scan, "--chunk-sizes", str(chunk_size),
                          "--threads", str(threads)], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=[CHUNK_SIZE], help="chunked scans to time")
    p.add_argument("--skip-train", action="store_true", help="time the scan alone only")
    p.add_argument("--memory-child", choices=("reference", "chunked"), help=argparse.SUPPRESS)
    p.add_argument("--out", default="benchmarks/results/bench_mamba_scan_cpu.json")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.memory_child:
        step = train_step(a.memory_child, a.chunk_sizes[0])
        step()
        step()
        print(json.dumps({"peak_rss_mib": peak_rss_mib()}))
        return

    result = {"benchmark": "cpu selective scan: token-by-token reference vs chunked", "recipe": RECIPE,
              "vocab": VOCAB, "threads": torch.get_num_threads(), "rounds": a.rounds, "warmup": a.warmup}
    print("scan alone, forward + backward, B=32 T=256 E=512 N=16 float32:", flush=True)
    timers = {"reference": scan_step(selective_scan_reference)}
    for cs in a.chunk_sizes:
        timers[f"chunked-{cs}"] = scan_step(lambda *t, cs=cs: selective_scan_chunked(*t, chunk_size=cs))
    times, _ = interleave(timers, a.rounds, a.warmup, "scan")
    result["scan_alone"] = summarise(times, "reference")

    if not a.skip_train:
        print("training step of the authors-small Mamba (32 x 256 tokens):", flush=True)
        timers = {"reference": train_step("reference", CHUNK_SIZE)}
        for cs in a.chunk_sizes:
            timers[f"chunked-{cs}"] = train_step("chunked", cs)
        times, firsts = interleave(timers, a.rounds, a.warmup, "step")
        result["train_step"] = summarise(times, "reference")
        result["first_step_loss_and_grad_norm"] = firsts
        result["peak_rss_mib_two_steps"] = {"reference": peak_rss_child("reference", CHUNK_SIZE, a.threads)}
        for cs in a.chunk_sizes:
            result["peak_rss_mib_two_steps"][f"chunked-{cs}"] = peak_rss_child("chunked", cs, a.threads)

    for part in ("scan_alone", "train_step"):
        if part not in result:
            continue
        print(f"{part}: medians over {a.rounds} rounds")
        for k, s in result[part].items():
            extra = f", speed-up wall {s['speedup_wall']:.2f}x, cpu {s['speedup_cpu']:.2f}x" if "speedup_wall" in s else ""
            print(f"  {k:12s} wall {s['median_wall_s']:7.2f} s, cpu {s['median_cpu_s']:7.2f} s{extra}")
    if "first_step_loss_and_grad_norm" in result:
        for k, (loss, norm) in result["first_step_loss_and_grad_norm"].items():
            print(f"  first step {k:12s} loss {loss:.7f}, grad norm {norm:.7f}")
        print("peak RSS of two training steps (MiB): "
              + ", ".join(f"{k} {v:.0f}" for k, v in result["peak_rss_mib_two_steps"].items()))
    result["provenance"] = provenance.describe()
    atomic.write_json(Path(a.out), result)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
