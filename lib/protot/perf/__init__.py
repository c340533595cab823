"""protot.perf: the performance modules, apart from the model maths and the studies.

    protot.perf.bench       timing and memory helpers of the derivation notebook (protot/01) and
                            benchmarks/bench_mixer.py; the claims linear-cost and decode-constant-time
    protot.perf.throughput  training-step and decoding throughput against context length (protot/04)
    protot.perf.flops       the FLOP convention of benchmarks/bench_train.py (6 N + the mixer or
                            attention term)
"""
