"""protot.robustness.metrics, value by value: JS divergences of hand-chosen distributions (closed
forms in ln 2, ln 3), top-k overlaps, Spearman correlations and top-1 agreement counted by hand, and
every refusal with its whole message. The comparison with the authors' tables:
test_robustness_orders_exact.py and test_robustness_directions_exact.py."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from protot.robustness import metrics as mt
from tests.protot.robustness_standins import _raises

LN2, LN3 = math.log(2.0), math.log(3.0)


def test_js_divergence_closed_forms():
    assert mt.LN2 == LN2
    # disjoint supports: ln 2 (also unnormalised)
    assert mt.js_divergence([1.0, 0.0], [0.0, 1.0]).item() == pytest.approx(LN2, abs=1e-15)
    assert mt.js_divergence([2.0, 0.0], [0.0, 3.0]).item() == pytest.approx(LN2, abs=1e-15)
    # p = (1/2, 1/2), q = (1, 0): m = (3/4, 1/4); KL(p||m) = 1/2 ln(4/3), KL(q||m) = ln(4/3) -> 3/4 ln(4/3)
    assert mt.js_divergence([0.5, 0.5], [1.0, 0.0]).item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    assert mt.js_divergence([3.0, 3.0], [0.25, 0.0]).item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # p = (1/2, 1/2, 0), q = (0, 1/2, 1/2): m = (1/4, 1/2, 1/4); each KL = 1/2 ln 2 -> 1/2 ln 2
    assert mt.js_divergence([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]).item() == pytest.approx(LN2 / 2, abs=1e-15)
    # rows reduce the last axis
    got = mt.js_divergence([[1.0, 0.0], [0.5, 0.5], [0.3, 0.7]], [[0.0, 1.0], [1.0, 0.0], [0.3, 0.7]])
    assert got.dtype == torch.float64 and got.shape == (3,)
    assert got.tolist() == pytest.approx([LN2, 0.75 * math.log(4 / 3), 0.0], abs=1e-15)
    t = mt.js_divergence(torch.tensor([0.5, 0.5], dtype=torch.float32), np.array([1.0, 0.0]))
    assert t.dtype == torch.float64 and t.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # integer counts are read as float64 (p = (1/2, 1/2), q = (1, 0) again), to float64 precision
    i = mt.js_divergence([1, 1], [2, 0])
    assert i.dtype == torch.float64 and i.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # a tensor that requires grad is taken as it is (not through numpy)
    g = mt.js_divergence(torch.tensor([0.5, 0.5], requires_grad=True), [1.0, 0.0])
    assert g.requires_grad and g.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-7)


def test_js_divergence_refusals():
    for p, q in (([0.5, -0.5], [0.5, 0.5]), ([0.5, 0.5], [1.5, -0.5])):
        with _raises("probabilities must be non-negative"):
            mt.js_divergence(p, q)
    for p, q in (([0.0, 0.0], [0.5, 0.5]), ([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [0.0, 0.0]]),
                 ([[0.5, 0.5], [0.0, 0.0]], [[0.5, 0.5], [1.0, 0.0]])):
        with _raises("a probability vector sums to 0"):
            mt.js_divergence(p, q)


def test_js_from_logits_closed_form_and_bounds():
    # logits (0, ln 3) -> (1/4, 3/4); (ln 3, 0) -> (3/4, 1/4); m = (1/2, 1/2);
    # KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 3/4 ln 3 - ln 2 each -> JS = 3/4 ln 3 - ln 2
    want = 0.75 * LN3 - LN2
    assert mt.js_from_logits([0.0, LN3], [LN3, 0.0]).item() == pytest.approx(want, abs=1e-15)
    assert mt.js_from_logits([5.0, 5.0 + LN3], [LN3 - 2.0, -2.0]).item() == pytest.approx(want, abs=1e-14)
    # rows: the softmax runs along the last axis
    rows = mt.js_from_logits([[0.0, LN3], [LN3, 0.0], [1.0, 1.0]], [[LN3, 0.0], [LN3, 0.0], [2.0, 2.0]])
    assert rows.tolist() == pytest.approx([want, 0.0, 0.0], abs=1e-15)
    # clamped into [0, ln 2]: nearly equal logits round below 0, large disjoint ones above ln 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 8, generator=g).double()
    near = mt.js_from_logits(x, x + 1e-12 * torch.randn(4000, 8, generator=g).double())
    assert (near >= 0).all() and near.max() < 1e-15
    far = mt.js_from_logits(torch.randn(4000, 6, generator=g).double() * 60, torch.randn(4000, 6, generator=g).double() * 60)
    assert (far <= LN2).all() and (far == LN2).any()


def test_topk_overlap_by_hand():
    p, q = [0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]
    # top-1 {0} vs {3}; top-2 {0,1} vs {2,3}; top-3 {0,1,2} vs {1,2,3}: 2 shared; top-4 all
    assert [mt.topk_overlap(p, q, k).item() for k in (1, 2, 3, 4)] == pytest.approx([0.0, 0.0, 2 / 3, 1.0], abs=1e-15)
    # k = 10 by default: ranks 12 > 11 > ... > 1 and the same rolled by two: top-10 {0..9} vs {2..11} -> 8 / 10
    a = np.arange(12, 0, -1, dtype=float)
    assert mt.topk_overlap(a, np.roll(a, 2)).item() == pytest.approx(0.8, abs=1e-15)
    # rows, and logits work as well as probabilities
    # row 0: top-2 {1, 2} vs {0, 2} -> 1/2; row 1: {0, 1} vs {1, 0} -> 1
    got = mt.topk_overlap([[0.0, 5.0, 1.0], [3.0, 2.0, 1.0]], [[5.0, 0.0, 1.0], [2.0, 3.0, 1.0]], k=2)
    assert got.dtype == torch.float64 and got.tolist() == [0.5, 1.0]
    for k in (0, 5):
        with _raises(f"k must lie in 1..4 (the vocabulary), got {k}"):
            mt.topk_overlap(p, q, k)
    with _raises("k must lie in 1..4 (the vocabulary), got 10"):      # the default k
        mt.topk_overlap(p, q)


def test_top1_agreement_by_hand():
    got = mt.top1_agreement([[0.1, 0.9], [0.6, 0.4], [2.0, 1.0]], [[0.2, 0.8], [0.4, 0.6], [5.0, -1.0]])
    assert got.dtype == torch.float64 and got.tolist() == [1.0, 0.0, 1.0]


def test_spearman_by_hand():
    # ranks (1, 2, 3) vs (1, 3, 2): 1 - 6 x 2 / (3 x 8) = 1/2
    assert mt.spearman([10, 20, 30], [5, 9, 7]) == pytest.approx(0.5, abs=1e-15)
    # ties take average ranks: (1.5, 1.5, 3) vs (1, 2, 3): centred (-.5, -.5, 1), (-1, 0, 1):
    # 1.5 / sqrt(1.5 x 2) = sqrt(3) / 2
    assert mt.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2, abs=1e-15)
    assert mt.spearman([1, 2], [4, 3]) == pytest.approx(-1.0, abs=1e-15)          # two items suffice
    # ranks (1.5, 1.5, 3.5, 3.5) (their standard deviation is 1) vs (1, 2, 3, 4): centred (-1,-1,1,1) and
    # (-1.5,-.5,.5,1.5): 4 / (2 sqrt 5) = 2 / sqrt 5, either way round
    assert mt.spearman([1, 1, 2, 2], [1, 2, 3, 4]) == pytest.approx(2 / math.sqrt(5), abs=1e-15)
    assert mt.spearman([1, 2, 3, 4], [5, 5, 7, 7]) == pytest.approx(2 / math.sqrt(5), abs=1e-15)
    with warnings.catch_warnings():                      # nan, and quietly (no division by zero)
        warnings.simplefilter("error")
        for x, y in (([1.0], [2.0]), ([], []), ([3, 3, 3], [1, 2, 3]), ([1, 2, 3], [4, 4, 4])):
            assert math.isnan(mt.spearman(x, y))
    with _raises("spearman needs two samples of the same length, got 3 and 2"):
        mt.spearman([1, 2, 3], [1, 2])


def test_spearman_topk_union_by_hand():
    p = [0.30, 0.25, 0.20, 0.10, 0.08, 0.07]
    q = [0.05, 0.30, 0.25, 0.10, 0.08, 0.22]
    # top-2: {0, 1} and {1, 2}: union {0, 1, 2}; p ranks (3, 2, 1), q (0.05, 0.30, 0.25) ranks (1, 3, 2):
    # centred (1, 0, -1) and (-1, 1, 0): -1 / 2
    assert mt.spearman_topk_union(p, q, k=2).item() == pytest.approx(-0.5, abs=1e-15)
    # rows and leading axes are kept: (2, 1, 6) -> (2, 1)
    two = mt.spearman_topk_union(np.array([[p], [p]]), np.array([[q], [p]]), k=2)
    assert two.shape == (2, 1) and two.dtype == torch.float64
    assert two.flatten().tolist() == pytest.approx([-0.5, 1.0], abs=1e-15)
    # k = 10 by default: 12 tokens, p descending, q the same rolled by 2; the union is every token
    a = np.arange(12, 0, -1, dtype=float)
    want = mt.spearman(a, np.roll(a, 2))
    # ranks of p: 12, 11, ..., 1; of q: (2, 1, 12, 11, ..., 3): d = (10, 10, -2 x 10): sum d^2 = 240;
    # rho = 1 - 6 x 240 / (12 x 143) = 1 - 1440 / 1716 = 276 / 1716
    assert want == pytest.approx(276 / 1716, abs=1e-15)
    assert mt.spearman_topk_union(a, np.roll(a, 2)).item() == pytest.approx(276 / 1716, abs=1e-15)
    with _raises("k must lie in 1..6 (the vocabulary), got 10"):
        mt.spearman_topk_union(p, q)


def test_pair_metrics_by_hand():
    # row 0: p = (1/2, 1/3, 1/6), q = (1/3, 1/2, 1/6): m = (5/12, 5/12, 1/6);
    #   JS = 1/2 ln(6/5) + 1/3 ln(4/5); top-2 {0, 1} both: overlap 1; over {0, 1}: spearman -1; top-1 differs
    # row 1: p = q: JS 0, overlap 1, spearman 1, top-1 agrees
    p = np.log([[1 / 2, 1 / 3, 1 / 6], [1 / 2, 1 / 3, 1 / 6]]) + 7.0
    q = np.log([[1 / 3, 1 / 2, 1 / 6], [1 / 2, 1 / 3, 1 / 6]])
    m = mt.pair_metrics(p, q, k=2)
    assert list(m) == ["js", "overlap", "spearman", "top1"] and all(isinstance(v, np.ndarray) for v in m.values())
    assert m["js"].tolist() == pytest.approx([0.5 * math.log(6 / 5) + math.log(4 / 5) / 3, 0.0], abs=1e-15)
    assert m["overlap"].tolist() == [1.0, 1.0] and m["top1"].tolist() == [0.0, 1.0]
    assert m["spearman"].tolist() == pytest.approx([-1.0, 1.0], abs=1e-15)
    # leading axes (1, 2, 3): every metric along the last one
    m3 = mt.pair_metrics(p[None], q[None], k=2)
    assert m3["js"].shape == (1, 2) and m3["js"][0].tolist() == pytest.approx(m["js"].tolist(), abs=1e-15)
    assert m3["overlap"].tolist() == [[1.0, 1.0]] and m3["top1"].tolist() == [[0.0, 1.0]]
    assert m3["spearman"][0].tolist() == pytest.approx([-1.0, 1.0], abs=1e-15)
    # top-1: row 0 top-1 sets {0} vs {1}
    assert mt.pair_metrics(p, q, k=1)["overlap"].tolist() == [0.0, 1.0]
    with _raises("k must lie in 1..3 (the vocabulary), got 10"):
        mt.pair_metrics(p, q)
    # k = 10 by default on 12 tokens
    a = np.arange(12, 0, -1, dtype=float)
    d = mt.pair_metrics(a[None], np.roll(a, 2)[None])
    assert d["overlap"].tolist() == pytest.approx([0.8], abs=1e-15) and d["spearman"].tolist() == pytest.approx([276 / 1716], abs=1e-15)
