"""Benchmark of the prototype mixer's torch forms and of decoding, ratios measured in one run.

    python benchmarks/bench_mixer.py [--T 4096] [--threads 1] [--skip-decode] [--json out.json]

1. Mixer forward + backward at T (default 4096) at the shape of one ProtoT layer (R = 32 prototypes,
   value width 128, batch 1, float32): the chunked torch form against the quadratic masked form.
   Target: chunked at least 5x faster.
2. Decoding (small setting: 6 layers, hidden 256, 32k vocabulary, batch 1, random weights): time per
   generated token at 8192 context over that at 256 context. Target for ProtoT: <= 1.3; LLaMA's
   ratio is printed beside it.
Times: best of repeats (the mixer) and best round median with the contexts interleaved (decoding),
see protot.perf.bench; run on an otherwise idle machine for absolute numbers, the ratios are what counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from protot.perf import bench
from protot.models import build_model


def bench_mixer(T: int, repeats: int) -> dict:
    chunk = bench.time_form("chunk", T, backward=True, repeats=repeats)
    # O(T^2 K) time, ~7 GB of saved activations at T = 4096: one cold run is plenty (it can only
    # overstate the quadratic time by the warm-up cost, small against ~30 s)
    quad = bench.time_form("quadratic", T, backward=True, repeats=1, warmup=0)
    return {"T": T, "chunk_fwd_bwd_s": chunk, "quadratic_fwd_bwd_s": quad, "speedup": quad / chunk}


def bench_decode(short: int, long: int, rounds: int) -> dict:
    out = {}
    for arch in ("protot", "llama"):
        torch.manual_seed(0)
        model = build_model(arch, "small", 32000).eval()
        t = bench.decode_times(model, [short, long], 32000, rounds=rounds)
        out[arch] = {"short_s": t[short], "long_s": t[long], "ratio": t[long] / t[short]}
    return {"short": short, "long": long, **out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared box)")
    p.add_argument("--short", type=int, default=256)
    p.add_argument("--long", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    res = {"threads": args.threads, "torch": torch.__version__}
    res["mixer"] = m = bench_mixer(args.T, args.repeats)
    print(f"mixer fwd+bwd at T={m['T']} (R=32, V=128, B=1, fp32): chunked {m['chunk_fwd_bwd_s'] * 1e3:.1f} ms, "
          f"quadratic {m['quadratic_fwd_bwd_s'] * 1e3:.1f} ms -> chunked is {m['speedup']:.1f}x faster (target >= 5)")
    ok = m["speedup"] >= 5
    if not args.skip_decode:
        res["decode"] = d = bench_decode(args.short, args.long, args.rounds)
        print(f"decode time/token, small setting: ProtoT {d['protot']['short_s'] * 1e3:.1f} ms at {d['short']}, "
              f"{d['protot']['long_s'] * 1e3:.1f} ms at {d['long']} -> ratio {d['protot']['ratio']:.2f} (target <= 1.3)")
        print(f"                                  LLaMA  {d['llama']['short_s'] * 1e3:.1f} ms at {d['short']}, "
              f"{d['llama']['long_s'] * 1e3:.1f} ms at {d['long']} -> ratio {d['llama']['ratio']:.2f}")
        ok = ok and d["protot"]["ratio"] <= 1.3
    res["ok"] = ok
    print(f"{'PASS' if ok else 'FAIL'} ({time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
