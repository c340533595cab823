"""A checkpoint restores the random generators: after loading, torch's and Python's generators
continue exactly where they stood when the checkpoint was saved, whatever was drawn in between
(training with dropout, or any other draw, depends on it)."""
import random

import pytest
import torch

from protot.train import checkpoint


@pytest.fixture(autouse=True)
def _generators_as_they_were():
    """This test moves the global generators; the tests after it find them as they were."""
    saved = torch.get_rng_state(), random.getstate()
    yield
    torch.set_rng_state(saved[0])
    random.setstate(saved[1])


def test_load_restores_torch_and_python_generators(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(123)
    random.seed(123)
    torch.rand(5)                                           # move the generators off their seeds
    random.random()
    path = checkpoint.save(tmp_path, 4, model, optimizer, {"identity": {"run": "x"}})
    want_torch, want_python = torch.rand(4), [random.random() for _ in range(3)]
    torch.manual_seed(999)                                  # a different state, as in a new process
    random.seed(999)
    assert not torch.equal(torch.rand(4), want_torch)
    checkpoint.load(path, model, optimizer, {"identity": {"run": "x"}})
    assert torch.equal(torch.rand(4), want_torch)
    assert [random.random() for _ in range(3)] == want_python
