"""ACC++ tracer benchmark: seconds and peak memory for full IOI circuits on CPU.

    python benchmarks/bench_accpp.py                      # both offline models, 5 prompts each, 1 thread
    python benchmarks/bench_accpp.py --models smollm2-135m --prompts 10 --threads 2
    python benchmarks/bench_accpp.py --compare-variants   # authors vs per-position on 4 SmolLM2 prompts
    python benchmarks/bench_accpp.py --memory             # peak memory vs prompt length (SmolLM2)
    python benchmarks/bench_accpp.py --speedups           # old vs new code per piece, projected paper profile

Each model (and, with --memory, each length) runs in its own subprocess (clean peak-memory
numbers). Reported per model: the torch thread count, model loading (cached HF folder) seconds;
per-head SVD seconds cold (cache file removed) and warm (read back); per-prompt trace seconds
(median, max, wall-clock and process CPU time: on a shared machine the CPU time is the cost, the
wall-clock time includes waiting for a core; caches warm, the first prompt's run is a warm-up and
not counted); process peak RSS
after loading and after tracing. The tracer runs at ``TraceConfig.threads`` (default 1).
Anchor (the authors' TransformerLens tracer, 2 cores): ~9-13 s and 2.9 GB per IOI prompt on
SmolLM2-135M. Goals at 1 thread, caches warm: SmolLM2-135M <= 3 s and <= 1.5 GB; Gemma-3-270M
<= 20 s and <= 4 GB. Results go to <output>/benchmarks/accpp*.json.

--compare-variants: node and edge Jaccard between ``variant="authors"`` and ``"per-position"``
per prompt, with each variant's trace seconds and peak RSS during that trace (sampled).
--speedups: per-prompt CPU seconds of the code before and after the speed-ups of issue 35, side by side
(trace, ACC baseline, one signal removal, evaluation, one PERMANOVA and one label-alignment permutation)
and the projected paper profile: benchmarks/accpp_speedups.py.
--memory: peak RSS of one trace per prompt length (a repeated IOI story cut to T tokens) next to
``accpp.trace.estimate_trace_gb`` (which the tracer uses to refuse prompts that would not fit).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import threading
import time

GOALS = {"smollm2-135m": (3.0, 1.5), "gemma-3-270m": (20.0, 4.0)}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def _rss_gb() -> float:
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 1024**3


class PeakRSS:
    """Peak resident memory (GB) of this process inside the block, sampled every ``every`` s."""

    def __init__(self, every: float = 0.002):
        self.every, self.peak = every, 0.0

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_gb())
            time.sleep(self.every)

    def __enter__(self):
        self._stop = threading.Event()
        self.peak = _rss_gb()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss_gb())
        return False


def run_one(name: str, n_prompts: int, threads: int, variant: str) -> dict:
    import torch

    torch.set_num_threads(threads)
    from accpp import datasets, ioi
    from accpp.decompose import fingerprint
    from accpp.models import load_model
    from accpp.trace import TraceConfig, Tracer
    from compendium import paths

    t0 = time.perf_counter()
    model, tok = load_model(name)
    load_s = time.perf_counter() - t0
    peak_load = _peak_gb()
    tracer = Tracer(model, tok, name=name, config=TraceConfig(variant=variant, threads=threads))
    for f in (paths.cache_dir() / "svd").glob(f"{name}-{fingerprint(tracer.arch)}.pt"):
        f.unlink()
    t0 = time.perf_counter()
    _ = tracer.svd  # computed (or loaded) and cached by the property
    svd_cold = time.perf_counter() - t0
    tracer._svd = None
    t0 = time.perf_counter()
    _ = tracer.svd  # computed (or loaded) and cached by the property
    svd_warm = time.perf_counter() - t0
    prompts = datasets.ioi_mixed(tok, n=n_prompts + 1, seed=0)
    secs, cpu, sizes = [], [], []
    for i, p in enumerate(prompts):
        c0 = time.process_time()
        c = ioi.trace_ioi(tracer, p)
        if i:
            cpu.append(time.process_time() - c0)
            secs.append(c.seconds)
            sizes.append((c.n_firings, c.graph.number_of_nodes(), c.graph.number_of_edges()))
    return dict(model=name, variant=variant, threads=threads, threads_in_trace=c.meta["threads"],
                prompts=n_prompts, load_s=load_s, svd_cold_s=svd_cold, svd_warm_s=svd_warm,
                trace_s_median=statistics.median(secs), trace_s_max=max(secs), trace_s_all=secs,
                trace_cpu_s_median=statistics.median(cpu), trace_cpu_s_max=max(cpu), sizes=sizes,
                peak_rss_gb_after_load=peak_load, peak_rss_gb=_peak_gb(), load_avg=_load_avg(),
                goal_s=GOALS.get(name, (None, None))[0], goal_gb=GOALS.get(name, (None, None))[1])


def compare_variants(name: str, n_prompts: int, threads: int) -> dict:
    """Node/edge Jaccard between the two variants on the first ``n_prompts`` mixed IOI prompts."""
    import torch

    torch.set_num_threads(threads)
    from accpp import datasets, ioi
    from accpp.graph import edge_jaccard, node_jaccard
    from accpp.models import load_model
    from accpp.trace import TraceConfig, Tracer

    model, tok = load_model(name)
    tracers = {v: Tracer(model, tok, name=name, config=TraceConfig(variant=v, threads=threads))
               for v in ("authors", "per-position")}
    svd = tracers["authors"].svd
    tracers["per-position"]._svd = svd
    warm = datasets.ioi_mixed(tok, n=1, seed=1)[0]
    for t in tracers.values():
        ioi.trace_ioi(t, warm)  # warm-up (allocator, caches) not counted
    rows = []
    for p in datasets.ioi_mixed(tok, n=n_prompts, seed=0):
        out = {}
        for v, t in tracers.items():
            c0 = time.process_time()
            with PeakRSS() as mem:
                c = ioi.trace_ioi(t, p)
            out[v] = (c, mem.peak, time.process_time() - c0)
        (a, ma, ca), (b, mb, cb) = out["authors"], out["per-position"]
        rows.append(dict(text=p.text, T=len(p.input_ids),
                         node_jaccard=node_jaccard(a.graph, b.graph), edge_jaccard=edge_jaccard(a.graph, b.graph),
                         authors=dict(seconds=a.seconds, cpu_s=ca, peak_rss_gb=ma, firings=a.n_firings,
                                      nodes=a.graph.number_of_nodes(), edges=a.graph.number_of_edges()),
                         per_position=dict(seconds=b.seconds, cpu_s=cb, peak_rss_gb=mb, firings=b.n_firings,
                                           nodes=b.graph.number_of_nodes(), edges=b.graph.number_of_edges())))
    return dict(model=name, threads=threads, rows=rows, load_avg=_load_avg())


def memory_one(name: str, T: int, threads: int, variant: str) -> dict:
    import torch

    torch.set_num_threads(threads)
    from accpp.models import load_model
    from accpp.trace import TraceConfig, Tracer, estimate_trace_gb

    model, tok = load_model(name)
    tracer = Tracer(model, tok, name=name, config=TraceConfig(variant=variant, threads=threads, max_memory_gb=1e9))
    _ = tracer.svd  # computed (or loaded) and cached by the property
    ioi = tok(" When Mary and John went to the store, John gave a drink to").input_ids
    filler = tok("The weather was mild and the park was full of people walking their dogs. " * (1 + T // 10)).input_ids
    if T <= len(ioi):
        raise ValueError(f"T={T} is shorter than the IOI sentence ({len(ioi)} tokens)")
    ids = torch.tensor(filler[: T - len(ioi)] + ioi)  # filler text, then an IOI sentence ending at T
    mary, john = tok(" Mary").input_ids[0], tok(" John").input_ids[0]
    base = _rss_gb()
    with PeakRSS() as mem:
        c = tracer.trace(ids, mary, john)
    return dict(model=name, variant=variant, T=T, seconds=c.seconds, firings=c.n_firings, rss_before_gb=base,
                peak_rss_gb=mem.peak, extra_gb=mem.peak - base, estimate_gb=estimate_trace_gb(tracer.arch, T, variant))


def _load_avg() -> float:
    import os

    return os.getloadavg()[0]


def _sub(args: list[str], timeout: float | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True,
                         timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variant", default="authors", choices=["authors", "per-position"])
    ap.add_argument("--compare-variants", action="store_true")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-compare", help=argparse.SUPPRESS)
    ap.add_argument("--one-memory", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--speedups", action="store_true")
    ap.add_argument("--one-speedups", help=argparse.SUPPRESS)
    ap.add_argument("--one-stats", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one_speedups or args.one_stats:
        import accpp_speedups as sp  # benchmarks/accpp_speedups.py

        r = sp.measure_model(args.one_speedups) if args.one_speedups else sp.measure_stats(args.one_stats)
        print(json.dumps(r))
        return 0
    if args.one:
        print(json.dumps(run_one(args.one, args.prompts, args.threads, args.variant)))
        return 0
    if args.one_compare:
        print(json.dumps(compare_variants(args.one_compare, args.prompts, args.threads)))
        return 0
    if args.one_memory:
        print(json.dumps(memory_one(args.models[0], args.one_memory, args.threads, args.variant)))
        return 0
    from compendium import paths
    from compendium.atomic import write_json

    common = ["--threads", str(args.threads), "--variant", args.variant]
    if args.speedups:
        import accpp_speedups as sp

        counts = sp.paper_counts()
        print(f"old vs new code (issue 35), one process per model, 1 torch thread, load average {_load_avg():.1f}",
              flush=True)
        models = [_sub(["--one-speedups", name]) for name in args.models]
        stats = _sub(["--one-stats", str(counts["accpp/05_ioi_template_clusters"]["n"])])
        for line in sp.report(models, stats, counts):
            print(line, flush=True)
        out = dict(models=models, stats=stats, counts=counts, projection=sp.project({m["model"]: m for m in models},
                                                                                   stats, counts))
        print(f"wrote {write_json(paths.output_dir() / 'benchmarks' / 'accpp_speedups.json', out)}")
        return 0
    if args.compare_variants:
        name = args.models[0] if args.models != ap.get_default("models") else "smollm2-135m"
        n = args.prompts if args.prompts != ap.get_default("prompts") else 4
        r = _sub(["--one-compare", name, "--prompts", str(n), *common])
        print(f"{name}: authors vs per-position, {args.threads} torch thread(s), load average {r['load_avg']:.1f}")
        for row in r["rows"]:
            a, b = row["authors"], row["per_position"]
            print(f"  T={row['T']:3d} node J {row['node_jaccard']:.3f} edge J {row['edge_jaccard']:.3f}", flush=True)
            for label, m in (("authors", a), ("per-position", b)):
                print(f"    {label}: {m['seconds']:.2f} s (CPU {m['cpu_s']:.2f} s), peak RSS {m['peak_rss_gb']:.2f} GB, "
                      f"{m['firings']} firings, {m['nodes']} nodes, {m['edges']} edges", flush=True)
            print(f"    {row['text']}", flush=True)
        print(f"wrote {write_json(paths.output_dir() / 'benchmarks' / 'accpp_variants.json', r)}")
        return 0
    if args.memory:
        name = args.models[0] if args.models != ap.get_default("models") else "smollm2-135m"
        rows = []
        for T in args.lengths:
            r = _sub(["--one-memory", str(T), "--models", name, *common])
            rows.append(r)
            print(f"{name} {args.variant} T={T}: {r['seconds']:.1f} s, {r['firings']} firings, peak RSS "
                  f"{r['peak_rss_gb']:.2f} GB ({r['extra_gb']:.2f} GB above the loaded model), estimate "
                  f"{r['estimate_gb']:.2f} GB", flush=True)
        print(f"wrote {write_json(paths.output_dir() / 'benchmarks' / 'accpp_memory.json', rows)}")
        return 0
    results = []
    for name in args.models:
        r = _sub(["--one", name, "--prompts", str(args.prompts), *common])
        results.append(r)
        print(f"{name} ({r['variant']}): {r['threads']} torch thread(s) (in trace: {r['threads_in_trace']}), load "
              f"average {r['load_avg']:.1f} | load {r['load_s']:.1f} s | SVD cold {r['svd_cold_s']:.1f} s, warm "
              f"{r['svd_warm_s']:.2f} s | trace median {r['trace_s_median']:.2f} s (max {r['trace_s_max']:.2f}; CPU "
              f"{r['trace_cpu_s_median']:.2f} s, max {r['trace_cpu_s_max']:.2f}) per prompt | peak RSS "
              f"{r['peak_rss_gb']:.2f} GB (after load {r['peak_rss_gb_after_load']:.2f}) | goal "
              f"<= {r['goal_s']} s, <= {r['goal_gb']} GB", flush=True)
    print(f"wrote {write_json(paths.output_dir() / 'benchmarks' / 'accpp.json', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
