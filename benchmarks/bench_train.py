"""CPU training speed: model FLOP/s against a matmul's FLOP/s, and ProtoT vs LLaMA (one run, ratios).

Measures full training steps as the trainer runs them (forward, backward, gradient clipping, the
trainer's AdamW) of ``protot.models.build_model(arch, size, 12288)`` (our BPE's vocabulary) at a
fixed number of tokens per step at every context (batch = tokens_per_step // context), with the
loss computed two ways: ``plain`` (logits, then cross-entropy: what every step did before) and
``fused`` (``return_logits=False``: the loss fused with the output projection in row chunks, what
protot.train uses now). Both models as the authors' recipe trains them (protot.train.config
"authors-small"): ProtoT the authors' variant (the default), LLaMA with the authors' backbone (dropout
0.1, untied head; non-embedding parameters matched to ProtoT's), the recipe's optimiser; dropout is
active (training mode). ``--set variant=compendium-v1`` (with its other fields) measures the earlier
variant.

In the same run, between the steps, a 2048 x 2048 float32 matmul is timed; the utilisation of a
step is (training FLOPs per token x tokens/s) / (matmul FLOP/s), FLOPs by the convention of
``protot.perf.flops`` (6 N + the mixer or attention term). Every timed item is interleaved round by
round (A B C ... A B C ...) so that load from other processes hits all alike; figures are medians
over the timed rounds. Goals: utilisation >= 0.65 for the fused step at context 256 (the cpu-small
training runs); ProtoT no slower than LLaMA at context 2048.

    python benchmarks/bench_train.py [--size small] [--contexts 256 2048] [--tokens 4096]
                                     [--steps 5] [--threads 1] [--losses plain fused]
                                     [--out benchmarks/results/bench_train_cpu.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from compendium import atomic, provenance
from protot.perf.flops import training_flops_per_token
from protot.models import build_model, count_parameters
from protot.train.config import PROFILES, recipe_model_overrides
from protot.train.trainer import make_optimizer

VOCAB = 12288
RECIPE = "authors-small"
GOAL_UTILISATION = 0.65


def matmul_timer(n: int = 2048):
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b

    def run():
        t = time.perf_counter()
        a @ b
        return time.perf_counter() - t

    return run, 2.0 * n**3


def step_timer(arch: str, size: str, context: int, batch: int, loss: str, overrides: dict):
    torch.manual_seed(0)
    cfg = PROFILES[RECIPE]
    kw = {**recipe_model_overrides(cfg.recipe, arch), **overrides}
    model = build_model(arch, size, VOCAB, max_position_embeddings=context, **kw)
    model.train()
    opt = make_optimizer(cfg, model)
    x = torch.randint(0, VOCAB, (batch, context), generator=torch.Generator().manual_seed(0))
    return_logits = loss == "plain"

    def run():
        t = time.perf_counter()
        out = model(input_ids=x, labels=x, return_logits=return_logits)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    return model, run


def bench(size: str, contexts: list[int], tokens: int, steps: int, warmup: int, losses: list[str],
          overrides: dict) -> list[dict]:
    rows = []
    mm, mm_flops = matmul_timer()
    for T in contexts:
        batch = max(1, tokens // T)
        timers, info = {"matmul": mm}, {}
        for arch in ("protot", "llama"):
            for loss in losses:
                model, fn = step_timer(arch, size, T, batch, loss, overrides)
                timers[(arch, loss)] = fn
                info[(arch, loss)] = {"params": count_parameters(model),
                                      "flops_per_token": training_flops_per_token(model, T)}
        times = {k: [] for k in timers}
        for i in range(warmup + steps):
            for k, fn in timers.items():
                dt = fn()
                if i >= warmup:
                    times[k].append(dt)
        mm_rate = mm_flops / statistics.median(times["matmul"])
        row = {"context": T, "batch": batch, "tokens_per_step": batch * T,
               "matmul_2048_fp32": {"gflop_per_s": mm_rate / 1e9, "times_s": times["matmul"]}, "steps": []}
        for (arch, loss), inf in info.items():
            med = statistics.median(times[(arch, loss)])
            tps = batch * T / med
            row["steps"].append({"arch": arch, "loss": loss, "median_s": med, "tokens_per_s": tps,
                                 "times_s": times[(arch, loss)], "params": inf["params"],
                                 "flops_per_token": inf["flops_per_token"],
                                 "model_gflop_per_s": tps * inf["flops_per_token"] / 1e9,
                                 "utilisation": tps * inf["flops_per_token"] / mm_rate})
        by = {(s["arch"], s["loss"]): s for s in row["steps"]}
        best = losses[-1]
        row["ratio_protot_over_llama"] = by[("protot", best)]["tokens_per_s"] / by[("llama", best)]["tokens_per_s"]
        if "plain" in losses and "fused" in losses:
            row["speedup_fused_over_plain"] = {a: by[(a, "plain")]["median_s"] / by[(a, "fused")]["median_s"]
                                               for a in ("protot", "llama")}
        rows.append(row)
        print(f"context {T:5d} x batch {batch:3d}; matmul 2048^2 fp32: {mm_rate / 1e9:6.1f} GFLOP/s", flush=True)
        for s in row["steps"]:
            print(f"  {s['arch']:6s} {s['loss']:5s} loss: {s['tokens_per_s']:7.0f} tok/s, "
                  f"{s['flops_per_token'] / 1e6:5.1f} MFLOP/token, {s['model_gflop_per_s']:5.1f} GFLOP/s, "
                  f"utilisation {s['utilisation']:.2f}", flush=True)
        extra = ""
        if "speedup_fused_over_plain" in row:
            extra = ", fused/plain speed-up " + ", ".join(f"{a} {v:.2f}x" for a, v in row["speedup_fused_over_plain"].items())
        print(f"  ratio ProtoT/LLaMA ({best}) {row['ratio_protot_over_llama']:.2f}{extra}", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="small", choices=("tiny", "small", "large"))
    p.add_argument("--contexts", type=int, nargs="+", default=[256, 2048])
    p.add_argument("--tokens", type=int, default=4096, help="tokens per step at every context")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--losses", nargs="+", default=["plain", "fused"], choices=("plain", "fused"))
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="model override (both archs)")
    p.add_argument("--out", default="benchmarks/results/bench_train_cpu.json")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    overrides = {}
    for item in a.set:
        k, _, v = item.partition("=")
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    rows = bench(a.size, a.contexts, a.tokens, a.steps, a.warmup, a.losses, overrides)
    fused_256 = [s for r in rows if r["context"] == 256 for s in r["steps"] if s["loss"] == "fused"]
    result = {"benchmark": "cpu training speed: utilisation vs a matmul, ProtoT vs LLaMA", "size": a.size,
              "vocab": VOCAB, "threads": torch.get_num_threads(), "recipe": RECIPE, "protot_variant": overrides.get("variant", "authors"),
              "overrides": overrides, "flop_convention": "protot.perf.flops (6 N + mixer/attention term)",
              "rows": rows,
              "goals": {"utilisation_fused_context_256": f">= {GOAL_UTILISATION}",
                        "protot_vs_llama_context_2048": "ratio >= 1"},
              "goal_met": {"utilisation_fused_context_256": {s["arch"]: s["utilisation"] >= GOAL_UTILISATION
                                                             for s in fused_256},
                           "protot_vs_llama": {str(r["context"]): r["ratio_protot_over_llama"] >= 1.0 for r in rows}},
              "provenance": provenance.describe()}
    atomic.write_json(Path(a.out), result)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
