"""The "Try it" of notebooks/protot/01_mixer_derivation at its smallest size: the mixer through the
chunked form with another chunk size, as the notebook's cell runs it (``channel_mix``, ``bench.best_time``).

What the notebook promises: the chunk size changes the time, not the output. Any chunk size (1, one
that does not divide T, T itself) gives the recurrent form's output to 1e-10. (The time is what the
reader sees change; it is measured by the notebook and by the benchmarks, not asserted in a test.)"""
from __future__ import annotations

import pytest
import torch

from protot.mixer import channel_mix

T, R, V = 512, 6, 10
DEFAULT_CHUNK = 16
F64 = torch.float64


@pytest.fixture(scope="module")
def inputs():
    """Write and read gates, values and decays as the notebook draws them (decays from 1e-6 to 1 - 1e-6)."""
    gen = torch.Generator().manual_seed(0)
    w, r = (torch.softmax(2 * torch.randn(1, T, R, generator=gen, dtype=F64), -1) for _ in range(2))
    v = torch.randn(1, T, V, generator=gen, dtype=F64)
    g = torch.tensor([1e-6, 0.2, 0.7, 0.95, 0.999, 1 - 1e-6], dtype=F64).log()
    return w, r, v, g


@pytest.mark.parametrize("chunk", [1, 7, DEFAULT_CHUNK, T])
def test_the_chunk_size_does_not_change_the_output(inputs, chunk):
    w, r, v, g = inputs
    ref = channel_mix(w, r, v, g, form="recurrent")
    got = channel_mix(w, r, v, g, form="chunk", chunk_size=chunk)
    assert ref.abs().max() > 0.1                       # not the agreement of zeros
    assert (got - ref).abs().max().item() <= 1e-10

