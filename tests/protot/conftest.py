"""tests/protot: run each test on one torch thread (restored afterwards). The tests are small;
on a shared 2-core machine two threads mostly wait for each other."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
