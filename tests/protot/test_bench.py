"""The timing and slope helpers behind the mixer-cost notebook and benchmarks."""
import math

import pytest

from protot.perf import bench


def test_loglog_slope_recovers_power_laws():
    xs = [256, 512, 1024, 4096]
    for power in (1.0, 2.0, 0.5):
        assert bench.loglog_slope(xs, [3.0 * x**power for x in xs]) == pytest.approx(power, abs=1e-12)


def test_time_forms_interleaves_rounds_and_keeps_the_minimum(monkeypatch):
    calls = []
    clock = {"now": 0.0}
    # durations per (round, pair): round 0 is the warm-up and must be ignored even though it is fastest;
    # ("chunk", 8) is slow in round 2 (a burst of load) and its minimum comes from round 1 or 3.
    durations = {
        0: {("chunk", 4): 0.1, ("chunk", 8): 0.1, ("quadratic", 4): 0.1},
        1: {("chunk", 4): 2.0, ("chunk", 8): 4.0, ("quadratic", 4): 9.0},
        2: {("chunk", 4): 1.0, ("chunk", 8): 50.0, ("quadratic", 4): 8.0},
        3: {("chunk", 4): 3.0, ("chunk", 8): 5.0, ("quadratic", 4): 7.0},
    }

    def fake_op_call(form, T, backward, chunk_size, **shape):
        def run():
            calls.append((form, T))
            clock["now"] += durations[(len(calls) - 1) // 3][(form, T)]
        return run

    monkeypatch.setattr(bench, "_op_call", fake_op_call)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock["now"])
    best = bench.time_forms({"chunk": [4, 8], "quadratic": [4]}, rounds=3)
    # one warm-up round + 3 timed rounds, each visiting every pair once, in the same order
    assert calls == [("chunk", 4), ("chunk", 8), ("quadratic", 4)] * 4
    assert best == {("chunk", 4): 1.0, ("chunk", 8): 4.0, ("quadratic", 4): 7.0}


def test_time_forms_measures_real_ops():
    best = bench.time_forms({"chunk": [64, 128], "recurrent": [64]}, rounds=1, K=4, V=8)
    assert len(best) == 3 and all(0 < v < 60 and math.isfinite(v) for v in best.values())


def test_time_forms_rejects_zero_rounds():
    with pytest.raises(ValueError, match="rounds"):
        bench.time_forms({"chunk": [64]}, rounds=0)


def test_time_forms_thread_clock_needs_one_thread(monkeypatch):
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 2)
    with pytest.raises(ValueError, match="set_num_threads"):
        bench.time_forms({"chunk": [64]}, rounds=1, clock="thread")
    with pytest.raises(ValueError, match="clock"):
        bench.time_forms({"chunk": [64]}, rounds=1, clock="cpu")


def test_time_forms_thread_clock_counts_this_threads_work(monkeypatch):
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 1)
    clock = {"now": 0.0}

    def fake_op_call(form, T, backward, chunk_size, **shape):
        def run():
            clock["now"] += T / 1000
        return run

    monkeypatch.setattr(bench, "_op_call", fake_op_call)
    monkeypatch.setattr(bench.time, "thread_time", lambda: clock["now"])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: 0.0)  # the wall clock must not be read
    best = bench.time_forms({"chunk": [1000, 4000]}, rounds=2, clock="thread")
    assert best == {("chunk", 1000): 1.0, ("chunk", 4000): 4.0}
