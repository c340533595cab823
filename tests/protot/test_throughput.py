import math

import pytest

from protot.perf import throughput


def test_crossover_interpolates_in_log_space():
    # a's tokens/s is constant, b's halves with each doubling of context: they meet at 2048
    ctx = [512, 1024, 2048, 4096]
    a = [100.0] * 4
    b = [400.0, 200.0, 100.0, 50.0]
    assert throughput.crossover(ctx, a, b) == pytest.approx(2048.0)
    b2 = [400.0, 300.0, 200.0, 50.0]   # log(a/b) goes from -log 2 to +log 2: halfway in log context
    assert throughput.crossover(ctx, a, b2) == pytest.approx(math.exp((math.log(2048) + math.log(4096)) / 2), rel=1e-6)
    assert throughput.crossover(ctx, [1.0] * 4, [2.0] * 4) is None
    assert throughput.crossover(ctx, [3.0] * 4, [2.0] * 4) == 512.0


def test_train_throughput_measures_a_real_step():
    p = throughput.train_throughput("protot", 64, size="tiny", vocab_size=128, tokens_per_step=128, repeats=1)
    assert p.batch == 2 and p.context == 64
    assert p.tokens_per_s == pytest.approx(128 / p.seconds_per_step)
    with pytest.raises(ValueError, match="unknown arch"):
        throughput.train_throughput("gpt", 64, size="tiny", vocab_size=128)
