"""The authors' mixer through the Triton kernels (interpreter on the CPU) against the golden numbers
of their code (tests/protot/golden): y within 1e-5 in float32 (the kernels accumulate in float32)."""
from __future__ import annotations

import pytest
import torch

from protot.golden import cases, load_case

EXACT_CASES = [c for c in cases() if not c.startswith("case08")]


@pytest.mark.parametrize("case", EXACT_CASES)
def test_triton_chunk_matches_golden(case):
    mixer, a, _, _ = load_case(case)
    mixer = mixer.float()
    mixer.config.mixer_form, mixer.config.mixer_backend, mixer.config.chunk_size = "chunk", "triton", 16
    with torch.no_grad():
        y, _ = mixer(torch.from_numpy(a["x"]).float())
    assert torch.isfinite(y).all()
    assert (y.double() - torch.from_numpy(a["y"])).abs().max().item() < 1e-5


@pytest.mark.parametrize("case", EXACT_CASES[:2])
def test_triton_recurrent_decoding_matches_golden(case):
    mixer, a, _, _ = load_case(case)
    mixer = mixer.float()
    mixer.config.mixer_backend = "triton"
    x = torch.from_numpy(a["x"]).float()
    cache: dict = {}
    with torch.no_grad():
        y = torch.cat([mixer(x[:, t:t + 1], layer_cache=cache)[0] for t in range(x.shape[1])], 1)
    assert (y.double() - torch.from_numpy(a["y"])).abs().max().item() < 1e-5
