"""Stand-ins shared by the value-level tests of protot.train.split_eval
(test_split_eval_measures_exact.py, test_split_eval_committed_exact.py): a bigram model whose
next-token probabilities are a written table, the table ``HALF``, the mean NLL of a block under such
a table worked out directly, and the whole-message ``pytest.raises``."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch


def _raises(message: str):
    """pytest.raises(ValueError) matching the whole message."""
    return pytest.raises(ValueError, match="^" + re.escape(message) + "$")


class _Bigram(torch.nn.Module):
    """logits_t = log P[x_t]: the next token depends on the current one only. Records each call
    (input shape, use_cache, whether the model was in eval mode)."""

    def __init__(self, P, model_type: str = "llama"):
        super().__init__()
        self.logp = torch.nn.Parameter(torch.tensor(P, dtype=torch.float32).log(), requires_grad=False)
        self.config = SimpleNamespace() if model_type is None else SimpleNamespace(model_type=model_type)
        self.calls = []

    def forward(self, input_ids, use_cache=True):
        self.calls.append((tuple(input_ids.shape), use_cache, self.training))
        return SimpleNamespace(logits=self.logp[input_ids])


# P[i, j] = P(next = j | current = i): 1/2 to stay, 1/4 to each other token. A block's NLL per
# predicted token is ln 2 for a repeat and 2 ln 2 for a change.
HALF = [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]]


def _bigram_nll(P, block) -> float:
    """Mean -log P[x_t, x_t+1] over the block (its first token is context only)."""
    block = np.asarray(block)
    return float(-np.log(np.asarray(P, dtype=float)[block[:-1], block[1:]]).mean())
