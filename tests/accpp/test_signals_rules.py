"""accpp.signals by hand, on rows small enough to compute every number: the greedy removal stops
at the first A_ds strictly below tau (a tie goes on), and the IG direction is the 64-interval
trapezoid rule of dA_s/dS along the straight path (gradients from autograd, not the closed form)."""
from __future__ import annotations

import math

import torch

from accpp import signals


def test_greedy_path_goes_on_at_a_tie_and_stops_strictly_below_tau():
    # two key positions, s_idx 0: A = sigmoid(S0 - S1). Removing candidate 0 leaves S = [0, 0],
    # A = 0.5 exactly (= tau): not below, so candidate 1 is removed too.
    S = torch.tensor([2.0, 0.0], dtype=torch.float64)
    contrib = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.5, 0.0]], dtype=torch.float64)
    attr = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    idx, A = signals.greedy_path(S, attr, lambda i: contrib[i], 0, tau=0.5, first_chunk=1)
    assert idx.tolist() == [0, 1]
    assert A[0].item() == 0.5 and abs(A[1].item() - 1.0 / (1.0 + math.e)) < 1e-15   # softmax rounding
    idx, A = signals.greedy_path(S, attr, lambda i: contrib[i], 0, tau=0.6, first_chunk=1)
    assert idx.tolist() == [0] and A.tolist() == [0.5]          # 0.5 < 0.6: stops at once


def test_ig_direction_is_the_64_interval_trapezoid_rule():
    assert signals.IG_STEPS == 64
    S = torch.tensor([1.3, -0.4, 2.2, 0.1, -1.7], dtype=torch.float64)
    s_idx, steps = 2, 64
    grads = []
    for i in range(steps + 1):
        z = (i / steps * S).clone().requires_grad_(True)
        torch.softmax(z, -1)[s_idx].backward()
        grads.append(z.grad)
    g = torch.stack(grads)
    want = (g[1:-1].sum(0) + 0.5 * (g[0] + g[-1])) / steps
    torch.testing.assert_close(signals.ig_direction(S, s_idx), want, rtol=1e-13, atol=1e-15)
    # the number of intervals matters at this tolerance: 16 gives another direction
    assert (signals.ig_direction(S, s_idx, steps=16) - want).abs().max() > 1e-6
