"""ACC++ tracer benchmark: seconds and peak memory for full IOI circuits on CPU.

    python benchmarks/bench_accpp.py                      # both offline models, 5 prompts each
    python benchmarks/bench_accpp.py --models smollm2-135m --prompts 10 --threads 2

Each model runs in its own subprocess (clean peak-memory numbers). Reported per model:
model loading (cached HF folder) seconds; per-head SVD seconds cold (cache file removed) and warm
(read back); per-prompt trace seconds (median, max; caches warm, the first prompt's run is a
warm-up and not counted); process peak RSS after loading and after tracing.
Anchor (the authors' TransformerLens tracer, same 2 cores): ~9-13 s and 2.9 GB per IOI prompt
on SmolLM2-135M. Goals, caches warm: SmolLM2-135M <= 6 s and <= 1.5 GB; Gemma-3-270M <= 20 s
and <= 4 GB. Results go to <output>/benchmarks/accpp.json.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

GOALS = {"smollm2-135m": (6.0, 1.5), "gemma-3-270m": (20.0, 4.0)}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def run_one(name: str, n_prompts: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from accpp import datasets, ioi
    from accpp.decompose import fingerprint
    from accpp.models import load_model
    from accpp.trace import Tracer
    from compendium import paths

    t0 = time.perf_counter()
    model, tok = load_model(name)
    load_s = time.perf_counter() - t0
    peak_load = _peak_gb()
    tracer = Tracer(model, tok, name=name)
    for f in (paths.cache_dir() / "svd").glob(f"{name}-{fingerprint(tracer.arch)}.pt"):
        f.unlink()
    t0 = time.perf_counter()
    tracer.svd
    svd_cold = time.perf_counter() - t0
    tracer._svd = None
    t0 = time.perf_counter()
    tracer.svd
    svd_warm = time.perf_counter() - t0
    prompts = datasets.ioi_mixed(tok, n=n_prompts + 1, seed=0)
    secs, sizes = [], []
    for i, p in enumerate(prompts):
        c = ioi.trace_ioi(tracer, p)
        if i:
            secs.append(c.seconds)
            sizes.append((c.n_firings, c.graph.number_of_nodes(), c.graph.number_of_edges()))
    return dict(model=name, threads=threads, prompts=n_prompts, load_s=load_s, svd_cold_s=svd_cold,
                svd_warm_s=svd_warm, trace_s_median=statistics.median(secs), trace_s_max=max(secs),
                trace_s_all=secs, sizes=sizes, peak_rss_gb_after_load=peak_load, peak_rss_gb=_peak_gb(),
                goal_s=GOALS.get(name, (None, None))[0], goal_gb=GOALS.get(name, (None, None))[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.prompts, args.threads)))
        return 0
    from compendium import paths

    results = []
    for name in args.models:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--prompts", str(args.prompts),
                              "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{name}: load {r['load_s']:.1f} s | SVD cold {r['svd_cold_s']:.1f} s, warm {r['svd_warm_s']:.2f} s | "
              f"trace median {r['trace_s_median']:.2f} s (max {r['trace_s_max']:.2f}) per prompt | "
              f"peak RSS {r['peak_rss_gb']:.2f} GB (after load {r['peak_rss_gb_after_load']:.2f}) | "
              f"goal <= {r['goal_s']} s, <= {r['goal_gb']} GB", flush=True)
    path = paths.output_dir() / "benchmarks" / "accpp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
