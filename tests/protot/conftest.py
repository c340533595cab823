"""tests/protot: run each test on one torch thread (restored afterwards). The tests are small;
on a shared 2-core machine two threads mostly wait for each other. Also the tokenizer and the id
of the probe word " women", shared by the concept tests (test_concepts_*.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tokenizer():
    from protot.train import tokenizer as tk

    return tk.load_hf_tokenizer()


@pytest.fixture(scope="module")
def women(tokenizer):
    from protot import concepts as C

    return C.token_id(tokenizer, " women")
