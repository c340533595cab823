"""Stand-ins shared by the value-level tests of protot.context_use (test_context_use_losses_exact.py,
test_context_use_effects_exact.py, test_context_use_reports_exact.py): tiny table models whose
log-probabilities are known by hand.

Every next-token probability of the table ``P`` is 1/2, 1/4 or 1/8, so each token loss is k ln 2
with k = -log2 P (the table ``K``). The ``bigram`` model predicts from the token at the position
alone; the ``first`` model predicts from the first token of the row at every position (it uses
all its left context, as far back as it goes). Expected numbers are written in units of ln 2 with
their arithmetic beside them; refusals are matched on their whole message. Where an interval must
show which resamples it was drawn from, the same models read a table of random log-probabilities
``RT`` instead (losses that seldom tie), and the expected losses are looked up in that table.
"""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

LN2 = math.log(2.0)
# P[a, b]: probability that token b follows token a (each row sums to exactly 1)
P = torch.tensor([[1 / 2, 1 / 4, 1 / 8, 1 / 8],
                  [1 / 8, 1 / 2, 1 / 4, 1 / 8],
                  [1 / 8, 1 / 8, 1 / 2, 1 / 4],
                  [1 / 4, 1 / 8, 1 / 8, 1 / 2]], dtype=torch.float64)
K = np.array([[1, 2, 3, 3],                 # -log2 P: the loss of b after a, in units of ln 2
              [3, 1, 2, 3],
              [3, 3, 1, 2],
              [2, 3, 3, 1]], dtype=np.float64)
V = 4
# a table of random next-token log-probabilities (each row a log-softmax)
RT = torch.log_softmax(torch.from_numpy(np.random.default_rng(17).normal(size=(V, V))), -1)
RT_LOSS = -RT.numpy()                       # the loss of b after a: RT_LOSS[a, b] nats


class _Table(torch.nn.Module):
    """Logits log P[row] at every position: ``row`` is the token at the position (``bigram``) or
    the first token of the row (``first``). Records (batch shape, keyword arguments, training)
    of every call and honours ``logits_to_keep``; ``boom`` raises inside the forward. ``table``:
    the log-probabilities read (log P unless given, e.g. RT)."""

    def __init__(self, mode: str = "bigram", dtype=torch.float64, params: bool = True, table=None):
        super().__init__()
        self.mode, self.dtype = mode, dtype
        self.table = torch.log(P) if table is None else table
        if params:
            self.w = torch.nn.Parameter(torch.zeros(1))
        self.calls = []

    def forward(self, ids, **kw):
        self.calls.append((tuple(ids.shape), dict(kw), self.training))
        if self.mode == "boom":
            raise RuntimeError("boom")
        rows = ids if self.mode == "bigram" else ids[:, :1].expand_as(ids)
        logits = self.table[rows].to(self.dtype)
        if kw.get("logits_to_keep", 0):
            logits = logits[:, -kw["logits_to_keep"]:]
        return SimpleNamespace(logits=logits)


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


def _raises(message: str):
    return pytest.raises(ValueError, match="^" + re.escape(message) + "$")


# the three blocks of the replaced-prefix example (T = 6, split = 3)
R0, R1, R2 = [0, 1, 2, 3, 3, 0], [1, 3, 0, 2, 2, 1], [2, 0, 1, 3, 1, 3]
STREAM3 = np.array(R0 + R1 + R2, dtype=np.uint16)     # exactly three blocks of 6
