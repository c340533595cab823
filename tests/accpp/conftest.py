"""Shared fixtures for the ACC++ tests: tiny float64 models of every supported family."""
from __future__ import annotations

import pytest
import torch

from accpp.testing import FAMILIES, float64_exact, random_prompt, tiny_model


@pytest.fixture(autouse=True, scope="module")
def _two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(min(old, 2))
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def exact():
    """HF RMSNorm and eager softmax in float64 for the duration of a test module."""
    with float64_exact():
        yield


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, exact):
    """(family, model, arch, decomposition, solver) for an 11-token random prompt."""
    from accpp.arch import from_model
    from accpp.decompose import Decomposition, collect, head_svds
    from accpp.signals import FiringSolver

    model = tiny_model(request.param)
    arch = from_model(model)
    dec = Decomposition(arch, collect(model, arch, random_prompt(11)))
    return request.param, model, arch, dec, FiringSolver(dec, head_svds(arch))


def pytest_addoption(parser):
    """``--regen-golden``: rewrite tests/accpp/golden/*.json from the current tracer (on request
    only: ``pytest tests/accpp/test_golden.py --regen-golden``)."""
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="regenerate the ACC++ golden circuits instead of comparing with them")
