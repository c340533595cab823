"""The four per-pair metrics, comparing two next-token distributions p (original) and q (edited).

- :func:`js_divergence` / :func:`js_from_logits`: the Jensen-Shannon divergence of the two
  distributions in **nats**, JS(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2; it lies
  in [0, ln 2]. (The authors' JS values exceed ln 2, so theirs is not this bounded divergence;
  we compare orders with theirs, never raw values.)
- :func:`topk_overlap`: |top-k(p) ∩ top-k(q)| / k (their granularity fits k = 10).
- :func:`spearman_topk_union`: the Spearman rank correlation of p and q over the tokens of
  top-k(p) ∪ top-k(q). Their scripts are not published; we chose this token set because it is the
  only one among those we considered (the full vocabulary, top-k(p), the union) under which a mean
  correlation can be as negative as their -0.44 with an overlap of 0.21: tokens in one top-k only
  rank high under one distribution and low under the other.
- :func:`top1_agreement`: whether the two arg-max tokens are the same.

All take arrays of shape (..., V) and reduce the last axis.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

LN2 = math.log(2.0)


def _t(x) -> torch.Tensor:
    return x.double() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x), dtype=torch.float64)


def _js_logs(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    lm = torch.logaddexp(lp, lq) - LN2
    p, q = lp.exp(), lq.exp()
    kl_pm = torch.where(p > 0, p * (lp - lm), torch.zeros_like(p)).sum(-1)
    kl_qm = torch.where(q > 0, q * (lq - lm), torch.zeros_like(q)).sum(-1)
    return (0.5 * (kl_pm + kl_qm)).clamp(0.0, LN2)


def js_divergence(p, q) -> torch.Tensor:
    """JS divergence (nats, in [0, ln 2]) of probability vectors ``p`` and ``q`` along the last axis
    (normalised to sum 1; zeros allowed; negative entries are an error)."""
    p, q = _t(p), _t(q)
    if (p < 0).any() or (q < 0).any():
        raise ValueError("probabilities must be non-negative")
    if (p.sum(-1) <= 0).any() or (q.sum(-1) <= 0).any():
        raise ValueError("a probability vector sums to 0")
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    return _js_logs(torch.log(p), torch.log(q))


def js_from_logits(logits_p, logits_q) -> torch.Tensor:
    """JS divergence (nats) of softmax(logits_p) and softmax(logits_q) along the last axis (float64)."""
    return _js_logs(torch.log_softmax(_t(logits_p), -1), torch.log_softmax(_t(logits_q), -1))


def _topk(x: torch.Tensor, k: int) -> torch.Tensor:
    if not 1 <= k <= x.shape[-1]:
        raise ValueError(f"k must lie in 1..{x.shape[-1]} (the vocabulary), got {k}")
    return torch.topk(x, k, dim=-1).indices


def topk_overlap(p, q, k: int = 10) -> torch.Tensor:
    """|top-k(p) ∩ top-k(q)| / k along the last axis (p, q: probabilities or logits)."""
    p, q = _t(p), _t(q)
    tp, tq = _topk(p, k), _topk(q, k)
    return (tp.unsqueeze(-1) == tq.unsqueeze(-2)).any(-1).double().sum(-1) / k


def top1_agreement(p, q) -> torch.Tensor:
    """1.0 where the arg-max of p equals the arg-max of q, else 0.0 (last axis)."""
    return (_t(p).argmax(-1) == _t(q).argmax(-1)).double()


def spearman(x, y) -> float:
    """Spearman rank correlation of two samples (average ranks for ties); nan if one is constant."""
    rx = pd.Series(np.asarray(x, dtype=float)).rank().to_numpy()
    ry = pd.Series(np.asarray(y, dtype=float)).rank().to_numpy()
    if len(rx) != len(ry):
        raise ValueError(f"spearman needs two samples of the same length, got {len(rx)} and {len(ry)}")
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_topk_union(p, q, k: int = 10) -> torch.Tensor:
    """Spearman correlation of p and q over top-k(p) ∪ top-k(q), per row (last axis)."""
    p, q = _t(p), _t(q)
    lead = p.shape[:-1]
    p2, q2 = p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])
    tp, tq = _topk(p2, k), _topk(q2, k)
    out = torch.empty(p2.shape[0], dtype=torch.float64)
    for i in range(p2.shape[0]):
        idx = torch.unique(torch.cat([tp[i], tq[i]]))
        out[i] = spearman(p2[i, idx].numpy(), q2[i, idx].numpy())
    return out.reshape(lead)


def pair_metrics(logits_p, logits_q, k: int = 10) -> dict[str, np.ndarray]:
    """The four metrics of each row of two logit arrays (N, V): js (nats), overlap (top-k),
    spearman (over the union of the top-k sets) and top1 (1.0 when the arg-max agrees)."""
    lp, lq = torch.log_softmax(_t(logits_p), -1), torch.log_softmax(_t(logits_q), -1)
    return {"js": _js_logs(lp, lq).numpy(), "overlap": topk_overlap(lp, lq, k).numpy(),
            "spearman": spearman_topk_union(lp, lq, k).numpy(), "top1": top1_agreement(lp, lq).numpy()}
