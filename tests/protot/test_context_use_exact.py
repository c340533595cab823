"""protot.context_use, value by value: tiny table models whose log-probabilities are known by hand.

Every next-token probability of the table ``P`` is 1/2, 1/4 or 1/8, so each token loss is k ln 2
with k = -log2 P (the table ``K``). The ``bigram`` model predicts from the token at the position
alone; the ``first`` model predicts from the first token of the row at every position (it uses
all its left context, as far back as it goes). Expected numbers are written in units of ln 2 with
their arithmetic beside them; refusals are matched on their whole message. Where an interval must
show which resamples it was drawn from, the same models read a table of random log-probabilities
``RT`` instead (losses that seldom tie), and the expected losses are looked up in that table.
"""
from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from protot import concepts
from protot import context_use as cu

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (imported once here, not inside the plot test)

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


# -- constants ----------------------------------------------------------------------------------------------
def test_the_default_sizes_are_those_the_report_text_names():
    # render_reports' text says: positions 128-255 (split 128 of a 256-token block), the last 8 tokens
    assert (cu.SHORT, cu.SPLIT, cu.CONTEXT) == (8, 128, 256)
    assert cu.REPORT_FILE == "CONTEXT_USE.json"


# -- token_nll ----------------------------------------------------------------------------------------------
def test_token_nll_is_the_table_loss_of_each_next_token():
    ids = _t([[0, 0, 1, 3, 3],      # 0->0: 1, 0->1: 2, 1->3: 3, 3->3: 1
              [2, 2, 0, 3, 1],      # 2->2: 1, 2->0: 3, 0->3: 3, 3->1: 3
              [3, 0, 0, 1, 1]])     # 3->0: 2, 0->0: 1, 0->1: 2, 1->1: 1
    want = np.array([[1, 2, 3, 1], [1, 3, 3, 3], [2, 1, 2, 1]]) * LN2
    for bs in (1, 2, 16):
        m = _Table()
        nll = cu.token_nll(m, ids, batch_size=bs)
        assert nll.dtype == np.float64 and nll.shape == (3, 4)
        np.testing.assert_allclose(nll, want, rtol=1e-12, atol=1e-12)
        assert [c[0] for c in m.calls] == {1: [(1, 5)] * 3, 2: [(2, 5), (1, 5)], 16: [(3, 5)]}[bs]
        assert all(c[1] == {"use_cache": False} for c in m.calls)


def test_token_nll_float32_logits_are_scored_in_float64():
    m = _Table(dtype=torch.float32)
    nll = cu.token_nll(m, _t([[0, 3, 2]]))          # 0->3: 3, 3->2: 3
    assert nll.dtype == np.float64
    np.testing.assert_allclose(nll, [[3 * LN2, 3 * LN2]], rtol=1e-6, atol=0)


def test_token_nll_batches_of_16_by_default_and_the_smallest_shapes():
    m = _Table()
    ids = _t([[0, 1, 2]] * 17)                         # 0->1: 2, 1->2: 2
    nll = cu.token_nll(m, ids)
    assert [c[0] for c in m.calls] == [(16, 3), (1, 3)]
    np.testing.assert_allclose(nll, np.full((17, 2), 2 * LN2), rtol=1e-12, atol=0)
    # one row, two tokens: the smallest input it takes
    np.testing.assert_allclose(cu.token_nll(_Table(), _t([[3, 0]])), [[2 * LN2]], rtol=1e-12, atol=0)


def test_token_nll_refuses_what_is_not_n_by_t():
    m = _Table()
    with _raises("ids must be a non-empty (N, T >= 2) tensor, got shape (5,)"):
        cu.token_nll(m, torch.zeros(5, dtype=torch.long))
    with _raises("ids must be a non-empty (N, T >= 2) tensor, got shape (3, 1)"):
        cu.token_nll(m, torch.zeros(3, 1, dtype=torch.long))
    with _raises("ids must be a non-empty (N, T >= 2) tensor, got shape (0, 4)"):
        cu.token_nll(m, torch.zeros(0, 4, dtype=torch.long))
    assert m.calls == []


@pytest.mark.parametrize("fn", ["token_nll", "target_logprobs"])
def test_the_model_runs_in_eval_mode_and_gets_its_mode_back(fn):
    call = (lambda m: cu.token_nll(m, _t([[0, 1, 2]]))) if fn == "token_nll" else \
        (lambda m: cu.target_logprobs(m, _t([[0, 1, 2]]), 1))
    for training in (True, False):
        m = _Table()
        m.train(training)
        call(m)
        assert [c[2] for c in m.calls] == [False] and m.training is training
    m = _Table("boom")
    m.train(True)
    with pytest.raises(RuntimeError, match="^boom$"):
        call(m)
    assert m.training is True                          # restored after a failure too


def test_a_model_without_parameters_runs_on_the_cpu():
    assert cu._device(_Table(params=False)) == torch.device("cpu")
    assert cu._device(_Table()) == torch.device("cpu")
    np.testing.assert_allclose(cu.token_nll(_Table(params=False), _t([[1, 3]])), [[3 * LN2]], rtol=1e-12, atol=0)
    np.testing.assert_allclose(cu.target_logprobs(_Table(params=False), _t([[1, 3]]), 3), [-LN2], rtol=1e-12, atol=0)


# -- target_logprobs ----------------------------------------------------------------------------------------
def test_target_logprobs_is_log_p_of_the_target_after_the_last_token():
    ctx = _t([[0, 1, 2], [3, 3, 0], [1, 2, 3]])
    # target 3 after the last tokens 2, 0, 3: P = 1/4, 1/8, 1/2
    want = np.array([-2, -3, -1]) * LN2
    for bs in (2, 16):
        m = _Table()
        lp = cu.target_logprobs(m, ctx, 3, batch_size=bs)
        assert lp.dtype == np.float64
        np.testing.assert_allclose(lp, want, rtol=1e-12, atol=0)
        assert [c[0] for c in m.calls] == {2: [(2, 3), (1, 3)], 16: [(3, 3)]}[bs]
        assert all(c[1] == {"use_cache": False, "logits_to_keep": 1} for c in m.calls)
    m = _Table()
    cu.target_logprobs(m, _t([[0, 1]] * 17), 0)
    assert [c[0] for c in m.calls] == [(16, 2), (1, 2)]
    # the first model: log p(0) = log P[first token, 0] = log 1/2, 1/8, 1/4 for first tokens 0, 1, 3
    np.testing.assert_allclose(cu.target_logprobs(_Table("first"), _t([[0, 3], [1, 0], [3, 3]]), 0),
                               np.array([-1, -3, -2]) * LN2, rtol=1e-12, atol=0)


def test_target_logprobs_of_no_rows_is_empty():
    m = _Table()
    lp = cu.target_logprobs(m, torch.zeros(0, 3, dtype=torch.long), 1)
    assert lp.shape == (0,) and lp.dtype == np.float64 and m.calls == []


# -- loss_by_position ---------------------------------------------------------------------------------------
def test_loss_by_position_exact_means_and_two_block_intervals():
    nll = np.array([[1.0, 2.0, 3.0],
                    [3.0, 2.0, 5.0]])
    d = cu.loss_by_position(nll)
    assert list(d.columns) == ["position", "loss", "ci_lo", "ci_hi"]
    assert d.position.tolist() == [1, 2, 3]
    np.testing.assert_allclose(d.loss, [2.0, 2.0, 4.0], rtol=0, atol=1e-12)        # (1+3)/2, (2+2)/2, (3+5)/2
    # two blocks: a resample is block 0 twice (1/4 of draws), block 1 twice (1/4) or one of each;
    # 1/4 > 2.5%, so the interval runs from the smaller block's loss to the larger one's
    np.testing.assert_allclose(d.ci_lo, [1.0, 2.0, 3.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi, [3.0, 2.0, 5.0], rtol=0, atol=1e-12)
    # one block: every resample is that block
    one = cu.loss_by_position(nll[:1], n_boot=7, seed=4)
    assert one.loss.tolist() == one.ci_lo.tolist() == one.ci_hi.tolist() == [1.0, 2.0, 3.0]


def _spread(n: int = 9, seed: int = 11) -> np.ndarray:
    """(n, 3) block losses: column 1 is column 0 + 1, column 2 is column 0 * 2."""
    c = np.random.default_rng(seed).normal(size=n)
    return np.stack([c, c + 1.0, 2.0 * c], axis=1)


def test_loss_by_position_draws_the_same_blocks_for_every_position():
    d = cu.loss_by_position(_spread(), n_boot=400, seed=5)
    # one set of resampled blocks for all positions: the resampled means of column 1 are those of
    # column 0 plus 1, of column 2 twice those of column 0, so are their quantiles
    np.testing.assert_allclose(d.ci_lo[1], d.ci_lo[0] + 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi[1], d.ci_hi[0] + 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_lo[2], 2.0 * d.ci_lo[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi[2], 2.0 * d.ci_hi[0], rtol=0, atol=1e-12)
    assert d.ci_lo[0] < d.loss[0] < d.ci_hi[0]


def test_loss_by_position_resamples_blocks_seeded_1000_times_by_default():
    x = _spread()
    draw = np.random.default_rng(0).integers(0, 9, size=(1000, 9))
    means = x[draw].mean(1)                             # (1000, 3): the mean of each resample
    d = cu.loss_by_position(x)
    np.testing.assert_allclose(d.ci_lo, np.quantile(means, 0.025, axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi, np.quantile(means, 0.975, axis=0), rtol=0, atol=1e-12)
    pd.testing.assert_frame_equal(d, cu.loss_by_position(x, n_boot=1000, seed=0))
    assert not cu.loss_by_position(x, seed=1).equals(d) and not cu.loss_by_position(x, n_boot=999).equals(d)


def test_loss_by_position_and_binned_loss_average_in_float64():
    x = np.array([[0.1], [0.2], [0.7]], dtype=np.float32)
    want = (float(x[0, 0]) + float(x[1, 0]) + float(x[2, 0])) / 3          # the float32 values, summed in float64
    for d in (cu.loss_by_position(x, n_boot=10), cu.binned_loss(x, n_boot=10)):
        assert d.loss.dtype == np.float64 and d.ci_lo.dtype == np.float64
        assert d.loss[0] == pytest.approx(want, rel=1e-15, abs=0)
        assert d.loss[0] != float(x.mean(0, dtype=np.float32)[0])             # not the float32 mean


def test_loss_by_position_refuses_what_is_not_n_by_t():
    with _raises("nll must be a non-empty (N, T-1) array, got shape (3,)"):
        cu.loss_by_position(np.zeros(3))
    with _raises("nll must be a non-empty (N, T-1) array, got shape (0, 3)"):
        cu.loss_by_position(np.zeros((0, 3)))


# -- binned_loss --------------------------------------------------------------------------------------------
def test_binned_loss_exact_bins_means_and_centres():
    nll = np.array([[1.0, 2.0, 4.0, 6.0, 8.0],
                    [3.0, 4.0, 0.0, 2.0, 4.0]])
    d = cu.binned_loss(nll)
    assert list(d.columns) == ["first", "last", "position", "loss", "ci_lo", "ci_hi"]
    assert d[["first", "last"]].values.tolist() == [[1, 1], [2, 3], [4, 5]]          # 4-7 cut at T-1 = 5
    np.testing.assert_allclose(d.position, [1.0, math.sqrt(6.0), math.sqrt(20.0)], rtol=1e-15)   # sqrt(first*last)
    # per block: bin 1 = [1, 3]; bin 2-3 = [(2+4)/2, (4+0)/2] = [3, 2]; bin 4-5 = [(6+8)/2, (2+4)/2] = [7, 3]
    np.testing.assert_allclose(d.loss, [2.0, 2.5, 5.0], rtol=0, atol=1e-12)
    # two blocks: the interval runs from the smaller block mean to the larger one (see loss_by_position)
    np.testing.assert_allclose(d.ci_lo, [1.0, 2.0, 3.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi, [3.0, 3.0, 7.0], rtol=0, atol=1e-12)
    assert [str(t) for t in d.dtypes] == ["int64", "int64"] + ["float64"] * 4


@pytest.mark.parametrize("t1, bins", [(1, [[1, 1]]), (2, [[1, 1], [2, 2]]), (3, [[1, 1], [2, 3]]),
                                      (4, [[1, 1], [2, 3], [4, 4]]), (8, [[1, 1], [2, 3], [4, 7], [8, 8]])])
def test_binned_loss_doubling_bins(t1, bins):
    nll = np.arange(1.0, t1 + 1.0)[None, :]            # the loss of position p is p
    d = cu.binned_loss(nll, n_boot=3)
    assert d[["first", "last"]].values.tolist() == bins
    # the mean of the positions a .. b is (a + b) / 2
    np.testing.assert_allclose(d.loss, [(a + b) / 2 for a, b in bins], rtol=0, atol=1e-12)


def test_binned_loss_draws_the_same_blocks_for_every_bin_seeded_1000_times_by_default():
    x = _spread()                                      # bins: position 1 (column 0), positions 2-3 (columns 1, 2)
    d = cu.binned_loss(x)
    per_bin = np.stack([x[:, 0], x[:, 1:3].mean(1)], axis=1)
    means = per_bin[np.random.default_rng(0).integers(0, 9, size=(1000, 9))].mean(1)
    np.testing.assert_allclose(d.ci_lo, np.quantile(means, 0.025, axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(d.ci_hi, np.quantile(means, 0.975, axis=0), rtol=0, atol=1e-12)
    pd.testing.assert_frame_equal(d, cu.binned_loss(x, n_boot=1000, seed=0))
    assert not cu.binned_loss(x, seed=1).equals(d) and not cu.binned_loss(x, n_boot=999).equals(d)
    e = cu.binned_loss(x, n_boot=300, seed=2)
    means = per_bin[np.random.default_rng(2).integers(0, 9, size=(300, 9))].mean(1)
    np.testing.assert_allclose(e.ci_hi, np.quantile(means, 0.975, axis=0), rtol=0, atol=1e-12)


def test_binned_loss_refuses_what_is_not_n_by_t():
    with _raises("nll must be a non-empty (N, T-1) array, got shape (4,)"):
        cu.binned_loss(np.zeros(4))
    with _raises("nll must be a non-empty (N, T-1) array, got shape (0, 2)"):
        cu.binned_loss(np.zeros((0, 2)))


# -- replace_prefix -----------------------------------------------------------------------------------------
def test_replace_prefix_whole_messages_and_edges():
    b = _t([R0, R1])
    # two blocks donate to each other; split 1 and split T-1 are the extreme splits
    assert cu.replace_prefix(b, 1).tolist() == [[1] + R0[1:], [0] + R1[1:]]
    assert cu.replace_prefix(b, 5).tolist() == [R1[:5] + R0[5:], R0[:5] + R1[5:]]
    with _raises("replacing the prefix needs at least 2 blocks (one donates to the other)"):
        cu.replace_prefix(b[:1], 2)
    with _raises("split must be in (0, 6), got 6"):
        cu.replace_prefix(b, 6)
    with _raises("split must be in (0, 6), got 0"):
        cu.replace_prefix(b, 0)


# -- replaced_prefix_cost: the tokens at positions split .. T-1, by hand -------------------------------------
def test_replaced_prefix_cost_by_hand_scores_the_token_at_split_and_after():
    """Blocks R0, R1, R2 (T = 6), split 3: tokens at positions 3, 4, 5 are scored. Under the bigram
    model only the token at position 3 depends on the prefix (through the token at position 2), so
    the cost is that token's loss change / 3: scoring from split + 1 on would give exactly 0."""
    blocks = _t([R0, R1, R2])
    m = _Table()
    df, cost, ci, nll = cu.replaced_prefix_cost(m, blocks, 3, n_boot=300, seed=4)
    # true losses of the tokens at positions 3, 4, 5 (units of ln 2):
    #   R0: 2->3: 2, 3->3: 1, 3->0: 2 = 5 -> 5/3;  R1: 0->2: 3, 2->2: 1, 2->1: 3 = 7 -> 7/3
    #   R2: 1->3: 3, 3->1: 3, 1->3: 3 = 9 -> 3
    # replaced prefixes (block i takes positions 0-2 of block i+1 mod 3):
    #   R0' = 1 3 0 | 3 3 0: 0->3: 3, then 1, 2 = 6 -> 2;   R1' = 2 0 1 | 2 2 1: 1->2: 2, then 1, 3 = 6 -> 2
    #   R2' = 0 1 2 | 3 1 3: 2->3: 2, then 3, 3 = 8 -> 8/3
    assert list(df.columns) == ["block", "loss_true", "loss_replaced", "cost"]
    assert df.block.tolist() == [0, 1, 2]
    np.testing.assert_allclose(df.loss_true, np.array([5 / 3, 7 / 3, 3]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.loss_replaced, np.array([2, 2, 8 / 3]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.cost, np.array([1 / 3, -1 / 3, -1 / 3]) * LN2, rtol=1e-12, atol=1e-15)
    assert cost == pytest.approx(-LN2 / 9, rel=1e-12)                     # (1/3 - 1/3 - 1/3) / 3
    assert ci == cu.bootstrap_mean_ci(df.cost, n_boot=300, seed=4)
    # the fourth value is the true blocks' token losses, every position:
    #   R0: 0->1 2, 1->2 2, 2->3 2, 3->3 1, 3->0 2;  R1: 1->3 3, 3->0 2, 0->2 3, 2->2 1, 2->1 3
    #   R2: 2->0 3, 0->1 2, 1->3 3, 3->1 3, 1->3 3
    np.testing.assert_allclose(nll, np.array([[2, 2, 2, 1, 2], [3, 2, 3, 1, 3], [3, 2, 3, 3, 3]]) * LN2,
                               rtol=1e-12, atol=0)
    assert [c[0] for c in m.calls] == [(3, 6), (3, 6)]


def test_replaced_prefix_cost_first_model_split_one():
    """The first model: every token of a block is predicted from the block's first token, so with
    split 1 every scored token (positions 1 .. T-1) changes with the donor's first token."""
    blocks = _t([[0, 0, 3], [2, 1, 1]])
    df, cost, _, _ = cu.replaced_prefix_cost(_Table("first"), blocks, 1, batch_size=1, n_boot=20)
    # block 0, first token 0: 0->0 1, 0->3 3 = 4 -> 2; replaced by first token 2: 2->0 3, 2->3 2 = 5 -> 5/2
    # block 1, first token 2: 2->1 3, 2->1 3 = 6 -> 3; replaced by first token 0: 0->1 2, 0->1 2 = 4 -> 2
    np.testing.assert_allclose(df.loss_true, np.array([2, 3]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.loss_replaced, np.array([5 / 2, 2]) * LN2, rtol=1e-12, atol=0)
    assert cost == pytest.approx(-LN2 / 4, rel=1e-12)                     # (1/2 - 1) / 2


def _first_loss(ids) -> np.ndarray:
    """Token losses (nats) of the first model reading RT: every token after the row's first token."""
    x = np.asarray(ids)
    return RT_LOSS[x[:, :1], x[:, 1:]]


def test_replaced_prefix_cost_defaults_split_128_and_a_seeded_2000_draw_interval():
    rng = np.random.default_rng(3)
    blocks = torch.from_numpy(rng.integers(0, V, size=(20, 131)))
    m = _Table("first", table=RT)
    df, cost, ci, nll = cu.replaced_prefix_cost(m, blocks)
    # the losses of the tokens at positions 128, 129, 130: columns 127 .. 129 of the token losses
    np.testing.assert_allclose(df.loss_true, _first_loss(blocks)[:, 127:].mean(1), rtol=1e-12, atol=0)
    repl = cu.replace_prefix(blocks, 128)
    np.testing.assert_allclose(df.loss_replaced, _first_loss(repl)[:, 127:].mean(1), rtol=1e-12, atol=0)
    assert ci == cu.bootstrap_mean_ci(df.cost, n_boot=2000, seed=0)
    assert ci != cu.bootstrap_mean_ci(df.cost, n_boot=2000, seed=1)
    assert [c[0] for c in m.calls] == [(16, 131), (4, 131)] * 2         # batches of 16
    m = _Table("first", table=RT)
    _, _, ci, _ = cu.replaced_prefix_cost(m, blocks, batch_size=7, n_boot=300, seed=4)
    assert [c[0] for c in m.calls] == [(7, 131), (7, 131), (6, 131)] * 2
    assert ci == cu.bootstrap_mean_ci(df.cost, n_boot=300, seed=4)


# -- context_effect -----------------------------------------------------------------------------------------
def test_context_effect_by_hand_with_the_first_model():
    """log p(0) with the whole row: the row's first token; with the last 2 tokens: the first of those."""
    ctx = _t([[0, 1, 2, 3, 3],      # full: P[0,0] = 1/2 -> -1; last 2 = 3 3: P[3,0] = 1/4 -> -2; effect +1
              [0, 0, 3, 2, 1],      # full: -1; last 2 = 2 1: P[2,0] = 1/8 -> -3; effect +2
              [3, 2, 1, 0, 2]])     # full: P[3,0] = 1/4 -> -2; last 2 = 0 2: -1; effect -1
    m = _Table("first")
    df, eff, ci = cu.context_effect(m, ctx, 0, 2, batch_size=2, n_boot=300, seed=6)
    assert list(df.columns) == ["logp_full", "logp_short", "effect"]
    np.testing.assert_allclose(df.logp_full, np.array([-1, -1, -2]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.logp_short, np.array([-2, -3, -1]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.effect, np.array([1, 2, -1]) * LN2, rtol=1e-12, atol=0)
    assert eff == pytest.approx(2 / 3 * LN2, rel=1e-12)                   # (1 + 2 - 1) / 3
    assert ci == cu.bootstrap_mean_ci(df.effect, n_boot=300, seed=6)
    assert [c[0] for c in m.calls] == [(2, 5), (1, 5), (2, 2), (1, 2)]


def test_context_effect_defaults_the_last_8_tokens_and_a_seeded_2000_draw_interval():
    rng = np.random.default_rng(8)
    ctx = torch.from_numpy(rng.integers(0, V, size=(20, 11)))
    m = _Table("first", table=RT)
    df, eff, ci = cu.context_effect(m, ctx, 2)
    # short rows are positions 3 .. 10: their first token is at position 3
    np.testing.assert_allclose(df.logp_full, -RT_LOSS[ctx[:, 0].numpy(), 2], rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.logp_short, -RT_LOSS[ctx[:, 3].numpy(), 2], rtol=1e-12, atol=0)
    assert ci == cu.bootstrap_mean_ci(df.effect, n_boot=2000, seed=0)
    assert [c[0] for c in m.calls] == [(16, 11), (4, 11), (16, 8), (4, 8)]
    # the extreme lengths of the short context: 1 token, and all but one
    one = cu.context_effect(_Table("first"), ctx[:2], 2, 1, n_boot=5)[0]
    np.testing.assert_allclose(one.logp_short, -K[ctx[:2, 10].numpy(), 2] * LN2, rtol=1e-12, atol=0)
    most = cu.context_effect(_Table("first"), ctx[:1], 2, 10, n_boot=5)[0]           # a single row is enough
    np.testing.assert_allclose(most.logp_short, -K[ctx[:1, 1].numpy(), 2] * LN2, rtol=1e-12, atol=0)


def test_context_effect_refusals():
    m = _Table()
    with _raises("contexts must be a non-empty (n, T) tensor, got shape (5,)"):
        cu.context_effect(m, torch.zeros(5, dtype=torch.long), 0)
    with _raises("contexts must be a non-empty (n, T) tensor, got shape (0, 5)"):
        cu.context_effect(m, torch.zeros(0, 5, dtype=torch.long), 0)
    with _raises("short must be in (0, 5), got 5"):
        cu.context_effect(m, torch.zeros(2, 5, dtype=torch.long), 0, 5)
    with _raises("short must be in (0, 5), got 0"):
        cu.context_effect(m, torch.zeros(2, 5, dtype=torch.long), 0, 0)
    with _raises("short must be in (0, 5), got 8"):
        cu.context_effect(m, torch.zeros(2, 5, dtype=torch.long), 0)      # the default 8
    assert m.calls == []


# -- target_context_effect ----------------------------------------------------------------------------------
TOK = SimpleNamespace(encode=lambda w, add_special_tokens=False: [0] if w == " women" else [1, 2],
                      decode=lambda ids: "?")
#                0  1  2  3  4  5  6  7  8  9 10
SMALL_STREAM = np.array([1, 2, 3, 1, 0, 2, 3, 3, 0, 1, 0], dtype=np.uint16)


def test_target_context_effect_by_hand():
    # " women" is token 0, at positions 4, 8, 10; 4 tokens before: 1 2 3 1 | 0 2 3 3 | 3 3 0 1
    # first model, log p(0): full rows start 1, 0, 3 -> -3, -1, -2; last 2 tokens start 3, 3, 0 -> -2, -2, -1
    m = _Table("first")
    df, eff, ci = cu.target_context_effect(m, SMALL_STREAM, TOK, context=4, short=2, batch_size=2, n_boot=50, seed=1)
    np.testing.assert_allclose(df.logp_full, np.array([-3, -1, -2]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.logp_short, np.array([-2, -2, -1]) * LN2, rtol=1e-12, atol=0)
    assert eff == pytest.approx(-LN2 / 3, rel=1e-12)                      # (-1 + 1 - 1) / 3
    assert ci == cu.bootstrap_mean_ci(df.effect, n_boot=50, seed=1)
    assert [c[0] for c in m.calls] == [(2, 4), (1, 4), (2, 2), (1, 2)]
    # at most 2 of the 3 occurrences, chosen with the seed
    two, _, _ = cu.target_context_effect(_Table("first"), SMALL_STREAM, TOK, context=4, short=2, max_contexts=2,
                                        n_boot=50, seed=1)
    rows = concepts.windows_at(SMALL_STREAM, 0, 4, max_windows=2, seed=1)
    np.testing.assert_allclose(two.logp_full, -K[rows[:, 0].numpy(), 0] * LN2, rtol=1e-12, atol=0)


def test_target_context_effect_needs_two_occurrences():
    # with 5 tokens before it only the occurrence at 8 and 10 qualify; with 9 only the one at 10
    df, _, _ = cu.target_context_effect(_Table("first"), SMALL_STREAM, TOK, context=5, short=2, n_boot=5)
    assert len(df) == 2
    with _raises("' women' occurs 1 times with 9 tokens before it in the stream; need at least 2"):
        cu.target_context_effect(_Table(), SMALL_STREAM, TOK, context=9, short=2)
    with _raises("'<w>' occurs 0 times with 9 tokens before it in the stream; need at least 2"):
        # token 2 is at positions 1 and 5: never 9 tokens in
        cu.target_context_effect(_Table(), SMALL_STREAM, SimpleNamespace(encode=lambda w, add_special_tokens=False: [2]),
                                 "<w>", context=9, short=2)


def _long_stream(n: int = 16640, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, size=n).astype(np.uint16)


def test_target_context_effect_defaults():
    """" women", 128 tokens before it, the last 8, at most 256 occurrences (seed 0), 2000 draws."""
    stream = _long_stream(1400)
    m = _Table("first")
    df, eff, ci = cu.target_context_effect(m, stream, TOK)
    rows = concepts.windows_at(stream, 0, 128, max_windows=256, seed=0)
    assert len(df) == 256 and rows.shape == (256, 128)
    np.testing.assert_allclose(df.logp_full, -K[rows[:, 0].numpy(), 0] * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.logp_short, -K[rows[:, 120].numpy(), 0] * LN2, rtol=1e-12, atol=0)
    assert ci == cu.bootstrap_mean_ci(df.effect, n_boot=2000, seed=0)
    assert [c[0] for c in m.calls] == [(16, 128)] * 16 + [(16, 8)] * 16
    # the seed picks the occurrences too
    other, _, _ = cu.target_context_effect(_Table("first"), stream, TOK, seed=5, n_boot=5)
    rows = concepts.windows_at(stream, 0, 128, max_windows=256, seed=5)
    np.testing.assert_allclose(other.logp_full, -K[rows[:, 0].numpy(), 0] * LN2, rtol=1e-12, atol=0)
    # no cap
    every, _, _ = cu.target_context_effect(_Table("first"), stream, TOK, max_contexts=None, n_boot=5)
    assert len(every) == len(concepts.windows_at(stream, 0, 128)) > 256


# -- context_use --------------------------------------------------------------------------------------------
STREAM3 = np.array(R0 + R1 + R2, dtype=np.uint16)     # exactly three blocks of 6


def test_context_use_by_hand_on_three_blocks():
    tok = SimpleNamespace(encode=lambda w, add_special_tokens=False: [0] if w == "<t>" else [1, 2])
    m = _Table()
    r = cu.context_use(m, STREAM3, name="bg", tokenizer=tok, target="<t>", blocks=5, context=6, split=3, short=2,
                       target_context=4, max_target_contexts=10, batch_size=2, n_boot=1500, seed=7)
    # the three blocks are R0, R1, R2 (all there are): see the replaced-prefix test for the numbers
    assert (r.model, r.blocks, r.context, r.split, r.short, r.target_context, r.target) == \
        ("bg", 3, 6, 3, 2, 4, "<t>")
    assert r.replaced_cost == pytest.approx(-LN2 / 9, rel=1e-12)
    assert r.loss_true == pytest.approx(7 / 3 * LN2, rel=1e-12)         # (5/3 + 7/3 + 3) / 3
    assert r.replaced_ci == cu.bootstrap_mean_ci(r.per_block.cost, n_boot=1500, seed=7)
    np.testing.assert_allclose(r.per_block.cost, np.array([1 / 3, -1 / 3, -1 / 3]) * LN2, rtol=1e-12, atol=1e-15)
    # loss by position: the column means of the true blocks' token losses (see the replaced-prefix test)
    nll = np.array([[2, 2, 2, 1, 2], [3, 2, 3, 1, 3], [3, 2, 3, 3, 3]]) * LN2
    np.testing.assert_allclose(r.by_position.loss, np.array([8 / 3, 2, 8 / 3, 5 / 3, 8 / 3]) * LN2, rtol=1e-12)
    pd.testing.assert_frame_equal(r.by_position, cu.loss_by_position(nll, n_boot=1000, seed=7), rtol=1e-12)
    pd.testing.assert_frame_equal(r.by_bin, cu.binned_loss(nll, n_boot=1000, seed=7), rtol=1e-12)
    # "<t>" is token 0, at stream positions 0, 5, 8, 13; 4 tokens before: 1 2 3 3 | 3 0 1 3 | 2 2 1 2
    # bigram model, log p(0) after the last tokens 3, 3, 2: -2, -2, -3, the same with the last 2 tokens
    assert r.target_contexts == 3
    np.testing.assert_allclose(r.per_target.logp_full, np.array([-2, -2, -3]) * LN2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(r.per_target.logp_short, np.array([-2, -2, -3]) * LN2, rtol=1e-12, atol=0)
    assert r.logp_full == pytest.approx(-7 / 3 * LN2, rel=1e-12) and r.logp_short == pytest.approx(-7 / 3 * LN2, rel=1e-12)
    assert r.context_effect == 0.0 and r.context_effect_ci == (0.0, 0.0)
    # batches of 2: 3 blocks true and replaced, 3 windows full and short
    assert [c[0] for c in m.calls] == [(2, 6), (1, 6), (2, 6), (1, 6), (2, 4), (1, 4), (2, 2), (1, 2)]


def test_context_use_passes_its_settings_on():
    tok = SimpleNamespace(encode=lambda w, add_special_tokens=False: [0] if w == "<t>" else [1, 2])
    stream = _long_stream(400, seed=6)                 # 50 blocks of 8; 12 of them drawn with seed 9
    r = cu.context_use(_Table("first", table=RT), stream, tokenizer=tok, target="<t>", blocks=12, context=8,
                       split=5, short=1, target_context=3, max_target_contexts=30, n_boot=40, seed=9)
    ids = concepts.sample_blocks(stream, 12, 8, seed=9)
    nll = _first_loss(ids)
    np.testing.assert_allclose(r.per_block.loss_true, nll[:, 4:].mean(1), rtol=1e-12, atol=0)
    assert r.replaced_ci == cu.bootstrap_mean_ci(r.per_block.cost, n_boot=40, seed=9)
    pd.testing.assert_frame_equal(r.by_position, cu.loss_by_position(nll, n_boot=40, seed=9), rtol=1e-12)
    pd.testing.assert_frame_equal(r.by_bin, cu.binned_loss(nll, n_boot=40, seed=9), rtol=1e-12)
    # the windows of 3 tokens before a 0, 30 of them chosen with seed 9; the last token alone for short
    rows = concepts.windows_at(stream, 0, 3, max_windows=30, seed=9)
    assert r.target_contexts == 30 and r.model == "model"
    np.testing.assert_allclose(r.per_target.logp_full, -RT_LOSS[rows[:, 0].numpy(), 0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(r.per_target.logp_short, -RT_LOSS[rows[:, 2].numpy(), 0], rtol=1e-12, atol=0)
    assert r.context_effect_ci == cu.bootstrap_mean_ci(r.per_target.effect, n_boot=40, seed=9)


def test_context_use_defaults():
    stream = _long_stream()                            # 16640 tokens: 65 blocks of 256
    m = _Table(table=RT)
    r = cu.context_use(m, stream, tokenizer=TOK)
    ids = concepts.sample_blocks(stream, 64, 256, seed=0).numpy()
    assert (r.model, r.blocks, r.context, r.split, r.short, r.target_context, r.target) == \
        ("model", 64, 256, 128, 8, 128, " women")
    nll = RT_LOSS[ids[:, :-1], ids[:, 1:]]             # bigram losses read from RT
    np.testing.assert_allclose(r.per_block.loss_true, nll[:, 127:].mean(1), rtol=1e-12, atol=0)
    assert r.replaced_ci == cu.bootstrap_mean_ci(r.per_block.cost, n_boot=2000, seed=0)
    # loss by position and by bin: 1000 resamples of the 64 blocks drawn with seed 0 (checked at
    # position 200 and for the bin of positions 128-255)
    draw = np.random.default_rng(0).integers(0, 64, size=(1000, 64))
    for got, per_block in ((r.by_position.iloc[199], nll[:, 199]), (r.by_bin.iloc[-1], nll[:, 127:].mean(1))):
        means = per_block[draw].mean(1)
        assert (got.loss, got.ci_lo, got.ci_hi) == pytest.approx(
            (per_block.mean(), np.quantile(means, 0.025), np.quantile(means, 0.975)), rel=1e-12)
    assert (r.by_bin["first"].iloc[-1], r.by_bin["last"].iloc[-1]) == (128, 255)
    rows = concepts.windows_at(stream, 0, 128, max_windows=256, seed=0)
    assert r.target_contexts == 256
    np.testing.assert_allclose(r.per_target.logp_full, -RT_LOSS[rows[:, -1].numpy(), 0], rtol=1e-12, atol=0)
    assert r.context_effect_ci == cu.bootstrap_mean_ci(r.per_target.effect, n_boot=2000, seed=0)
    assert m.calls[0][0] == (16, 256) and m.calls[-1][0] == (16, 8)


def test_context_use_without_a_target_and_its_refusal():
    r = cu.context_use(_Table(), STREAM3, target=None, blocks=3, context=6, split=3, n_boot=30)
    assert r.target is None and r.target_contexts == 0
    assert math.isnan(r.context_effect) and all(math.isnan(x) for x in r.context_effect_ci)
    assert len(r.context_effect_ci) == 2 and math.isnan(r.logp_full) and math.isnan(r.logp_short)
    assert isinstance(r.per_target, pd.DataFrame) and r.per_target.empty
    assert r.replaced_cost == pytest.approx(-LN2 / 9, rel=1e-12)
    with _raises("a target word needs the tokenizer"):
        cu.context_use(_Table(), STREAM3, blocks=3, context=6, split=3)


# -- ContextUse: values, summary, summary_table -------------------------------------------------------------
def _made(model="m", target=" women", cost=-0.125, **kw) -> cu.ContextUse:
    base = dict(model=model, blocks=3, context=6, split=3, replaced_cost=np.float64(cost), replaced_ci=(-0.5, 0.25),
                loss_true=1.5, target=target, target_contexts=4, context_effect=0.75, context_effect_ci=(0.5, 1.0),
                logp_full=-1.0, logp_short=-1.75, short=2, target_context=5,
                by_position=pd.DataFrame(), by_bin=pd.DataFrame({"first": [1, 2], "last": [1, 3],
                                                                 "position": [1.0, 6 ** 0.5], "loss": [2.0, 1.5],
                                                                 "ci_lo": [1.5, 1.25], "ci_hi": [2.5, 2.0]}),
                per_block=pd.DataFrame())
    return cu.ContextUse(**{**base, **kw})


def test_values_names_every_number_with_its_prefix():
    r = _made(blocks=np.int64(3))
    want = {"replaced_prefix_cost_nats": -0.125, "replaced_prefix_ci_low": -0.5, "replaced_prefix_ci_high": 0.25,
            "context_effect_nats": 0.75, "context_effect_ci_low": 0.5, "context_effect_ci_high": 1.0,
            "context_effect_contexts": 4, "context_use_blocks": 3}
    v = r.values()
    assert v == want and list(v) == list(want)
    assert type(v["replaced_prefix_cost_nats"]) is float               # numpy floats become floats
    assert type(v["context_effect_contexts"]) is int
    assert cu.ContextUse(**{**r.__dict__}).values("x.") == {"x." + k: x for k, x in want.items()}
    assert r.per_target.empty and isinstance(r.per_target, pd.DataFrame)


def test_summary_whole_text():
    assert _made().summary() == (
        "m: replacing tokens 0-2 by another block's changes the loss on tokens 3-5 by -0.1250 nats "
        "(95% CI -0.5000..+0.2500, 3 blocks); log p(' women') with 5 vs the last 2 tokens: +0.7500 nats "
        "(95% CI +0.5000..+1.0000, 4 occurrences)")
    assert _made(target=None).summary() == (
        "m: replacing tokens 0-2 by another block's changes the loss on tokens 3-5 by -0.1250 nats "
        "(95% CI -0.5000..+0.2500, 3 blocks)")


def test_summary_table_one_row_per_report():
    t = cu.summary_table([_made("a"), _made("b", cost=0.5, loss_true=2.0, logp_full=-3.0)])
    assert list(t.columns) == ["model", "loss (tokens split..T-1)", "replaced_prefix_cost_nats",
                               "replaced_prefix_ci_low", "replaced_prefix_ci_high", "context_effect_nats",
                               "context_effect_ci_low", "context_effect_ci_high", "context_effect_contexts",
                               "context_use_blocks", "logp_full", "logp_short"]
    assert t.values.tolist() == [["a", 1.5, -0.125, -0.5, 0.25, 0.75, 0.5, 1.0, 4, 3, -1.0, -1.75],
                                 ["b", 2.0, 0.5, -0.5, 0.25, 0.75, 0.5, 1.0, 4, 3, -3.0, -1.75]]


# -- the plot -----------------------------------------------------------------------------------------------
def test_plot_draws_each_number():
    from matplotlib.colors import to_rgba

    a = _made("a", cost=0.0126)
    b = _made("b", cost=-0.5, context_effect=-0.25, context_effect_ci=(-0.5, 0.125),
              by_bin=pd.DataFrame({"first": [1], "last": [1], "position": [1.0], "loss": [3.0], "ci_lo": [2.0],
                                   "ci_hi": [3.5]}))
    with matplotlib.rc_context({"font.size": 7}):        # the sizes are the plot's own, not the style's
        fig = cu.plot_context_use([a, b])
    assert tuple(fig.get_size_inches()) == pytest.approx((11.0, 3.8), rel=1e-12)
    ax0, ax1 = fig.axes
    assert list(ax0.get_gridspec().get_width_ratios()) == [2, 1]
    # left: one errorbar per report, the doubling bins' losses with their intervals
    c0, c1 = ax0.containers
    line, caps, (bars,) = c0.lines
    assert line.get_xdata().tolist() == [1.0, 6 ** 0.5] and line.get_ydata().tolist() == [2.0, 1.5]
    assert to_rgba(line.get_color()) == to_rgba("C0") and to_rgba(c1.lines[0].get_color()) == to_rgba("C1")
    assert (line.get_linewidth(), line.get_marker(), line.get_markersize()) == (1.2, "o", 4)
    assert [s.tolist() for s in bars.get_segments()] == [[[1.0, 1.5], [1.0, 2.5]], [[6 ** 0.5, 1.25], [6 ** 0.5, 2.0]]]
    assert len(caps) == 2 and all(c.get_markersize() == 6 for c in caps)   # capsize 3: caps 2 * 3 points wide
    assert [t.get_text() for t in ax0.get_legend().get_texts()] == [
        "a: prefix replaced +0.013 nats [-0.500, +0.250]", "b: prefix replaced -0.500 nats [-0.500, +0.250]"]
    assert ax0.get_legend().get_texts()[0].get_fontsize() == 8
    vline = ax0.lines[-1]
    assert vline.get_xdata() == [3, 3] and to_rgba(vline.get_color()) == to_rgba("0.5")
    assert (vline.get_linestyle(), vline.get_linewidth()) == (":", 1)
    assert ax0.get_xscale() == "log"
    assert ax0.get_xlabel() == "position of the predicted token (doubling bins)"
    assert ax0.get_ylabel() == "next-token loss (nats)"
    assert ax0.get_title() == "Loss by position (3 blocks, 95% CI)" and ax0.title.get_fontsize() == 10
    # right: the context effects as bars with their intervals
    assert [p.get_height() for p in ax1.patches] == [0.75, -0.25]
    assert [to_rgba(p.get_facecolor()) for p in ax1.patches] == [to_rgba("C0"), to_rgba("C1")]
    (err,) = ax1.containers[1:]
    eline, ecaps, (ebars,) = err.lines
    assert eline is None                                                # intervals only, no line
    assert [s.tolist() for s in ebars.get_segments()] == [[[0.0, 0.5], [0.0, 1.0]], [[1.0, -0.5], [1.0, 0.125]]]
    assert to_rgba(ebars.get_colors()[0]) == to_rgba("k") and len(ecaps) == 2 and all(c.get_markersize() == 8 for c in ecaps)
    hline = ax1.lines[-1]
    assert hline.get_ydata() == [0, 0] and to_rgba(hline.get_color()) == to_rgba("0.5") and hline.get_linewidth() == 0.8
    assert [t.get_text() for t in ax1.get_xticklabels()] == ["a", "b"] and list(ax1.get_xticks()) == [0, 1]
    assert ax1.get_ylabel() == "log p(' women'): 5 - last 2 tokens (nats)"
    assert ax1.get_title() == "Context effect on the target word" and ax1.title.get_fontsize() == 10
    plt.close(fig)
    # given axes and colours: drawn there
    fig2, axes = plt.subplots(1, 2)
    assert cu.plot_context_use([a, b], axes=axes, colors=["red", "blue", "green"]) is fig2
    assert to_rgba(axes[0].containers[0].lines[0].get_color()) == to_rgba("red")
    assert [to_rgba(p.get_facecolor()) for p in axes[1].patches] == [to_rgba("red"), to_rgba("blue")]
    plt.close(fig2)


# -- committed-model reports --------------------------------------------------------------------------------
BIN = pd.DataFrame({"first": [1, 2], "last": [1, 3], "position": [1.0, 6 ** 0.5], "loss": [2.0, 1.2345678],
                    "ci_lo": [1.5, 1.25], "ci_hi": [2.5, 2.0]})
MAN = {"weights_sha256": "ab" * 32, "steps": 10, "planned_steps": 20, "tokens_seen": 500000, "status": "in-progress"}


def test_model_report_record(monkeypatch):
    from protot.train import pretrained

    got = {}
    model, tok = _Table(), object()
    monkeypatch.setattr(pretrained, "load", lambda n: pretrained.Pretrained(n, model, tok, dict(MAN)))

    def fake_context_use(m, stream, **kw):
        got.update(model=m, stream=stream, **kw)
        return _made(kw["name"], cost=-0.5, by_bin=BIN)

    monkeypatch.setattr(cu, "context_use", fake_context_use)
    r, rec = cu.model_report("b-m", STREAM3)
    assert got.pop("stream") is STREAM3
    assert got == {"model": model, "name": "b-m", "tokenizer": tok, "blocks": 64, "seed": 0}
    assert r.model == "b-m"
    assert rec == {"model": "b-m", "weights_sha256": "ab" * 32, "steps": 10, "planned_steps": 20,
                   "tokens_seen": 500000, "status": "in-progress", "split": "validation", "seed": 0, "context": 6,
                   "replaced_prefix": [0, 2], "short_context": 2, "target": " women",
                   "loss_positions_split_to_end": 1.5, "replaced_prefix_cost_nats": -0.5,
                   "replaced_prefix_ci_low": -0.5, "replaced_prefix_ci_high": 0.25, "context_effect_nats": 0.75,
                   "context_effect_ci_low": 0.5, "context_effect_ci_high": 1.0, "context_effect_contexts": 4,
                   "context_use_blocks": 3,
                   "loss_by_bin": [{"first": 1, "last": 1, "position": 1.0, "loss": 2.0, "ci_lo": 1.5, "ci_hi": 2.5},
                                   {"first": 2, "last": 3, "position": 2.44949, "loss": 1.23457, "ci_lo": 1.25,
                                    "ci_hi": 2.0}]}                # to 5 places: sqrt(6) = 2.449489..., 1.2345678
    # a bare manifest: the missing fields are None and the status is final
    monkeypatch.setattr(pretrained, "load", lambda n: pretrained.Pretrained(n, model, tok, {"weights_sha256": "0" * 64}))
    _, rec = cu.model_report("a-m", STREAM3, blocks=3, seed=4)
    assert got["blocks"] == 3 and got["seed"] == 4 and rec["seed"] == 4
    assert (rec["steps"], rec["planned_steps"], rec["tokens_seen"], rec["status"]) == (None, None, None, "final")


RECORDS = [
    {"model": "a-m", "status": "final", "steps": 100, "planned_steps": 100, "tokens_seen": 1235001,
     "loss_positions_split_to_end": 3.14159, "replaced_prefix_cost_nats": 0.0126, "replaced_prefix_ci_low": -0.0031,
     "replaced_prefix_ci_high": 0.0282, "context_effect_nats": -0.5, "context_effect_ci_low": -0.75,
     "context_effect_ci_high": -0.25, "context_effect_contexts": 12},
    {"model": "b-m", "status": "in-progress", "steps": 10, "planned_steps": 20, "tokens_seen": 500000,
     "loss_positions_split_to_end": 2.0, "replaced_prefix_cost_nats": -0.1, "replaced_prefix_ci_low": -0.2,
     "replaced_prefix_ci_high": 0.0, "context_effect_nats": 1.0, "context_effect_ci_low": 0.5,
     "context_effect_ci_high": 1.5, "context_effect_contexts": 3},
]
HEADER = (
    "# How much the committed models use their context\n"
    "\n"
    "Generated by `python -m protot.context_use` from each model's `CONTEXT_USE.json`; do not edit. "
    "Validation split; the replaced-half cost is the loss change on positions 128-255 when positions "
    "0-127 are another block's (paired over blocks); the context effect is log p(\" women\") with 128 "
    "tokens of context minus with the last 8 (paired over occurrences); 95% bootstrap intervals. "
    "These are the power preconditions of the concept, ablation and robustness claims.\n"
    "\n"
    "| model | status | tokens seen | loss, positions 128-255 | replaced-half cost (nats) | context effect on \" women\" (nats) |\n"
    "|---|---|---|---|---|---|\n")


def test_render_reports_whole_text():
    # 1235001 / 1e6 = 1.235001 -> 1.24 M; 0.0126 -> +0.013; 500000 / 1e6 = 0.50 M; an unfinished model shows its steps
    assert cu.render_reports(RECORDS) == HEADER + (
        "| `a-m` | final | 1.24 M | 3.142 | +0.013 [-0.003, +0.028] | -0.500 [-0.750, -0.250] (n=12) |\n"
        "| `b-m` | in-progress (step 10 of 20) | 0.50 M | 2.000 | -0.100 [-0.200, +0.000] | "
        "+1.000 [+0.500, +1.500] (n=3) |\n")
    assert cu.render_reports([]) == HEADER


def _committed(monkeypatch, tmp_path, names=("a-m", "b-m")):
    """Committed-model stand-ins: pretrained's folder, list and manifests, the validation stream and
    model_report (a made report and its record per name)."""
    from protot.train import packing, pretrained

    root = tmp_path / "models"
    for n in names:
        (root / n).mkdir(parents=True)
    man = {n: {"weights_sha256": f"{i:064x}"} for i, n in enumerate(names)}
    calls = []
    monkeypatch.setattr(pretrained, "models_dir", lambda: root)
    monkeypatch.setattr(pretrained, "available", lambda: list(names))
    monkeypatch.setattr(pretrained, "manifest", lambda n: man[n])
    monkeypatch.setattr(packing, "token_stream", lambda split: {"validation": STREAM3}[split])

    def fake_report(name, stream, *, blocks, seed):
        calls.append((name, stream is STREAM3, blocks, seed))
        rec = {**RECORDS[names.index(name) % 2], "model": name, "weights_sha256": man[name]["weights_sha256"]}
        return _made(name), rec

    monkeypatch.setattr(cu, "model_report", fake_report)
    return root, man, calls


def test_write_reports_writes_every_file(monkeypatch, tmp_path, capsys):
    from PIL import Image

    import matplotlib

    root, man, calls = _committed(monkeypatch, tmp_path)
    # the house style (compendium.plotting) crops saved figures to their contents, which depends on the fonts;
    # uncropped, the size is the figure's own (set here, whatever ran before in this process)
    monkeypatch.setitem(matplotlib.rcParams, "savefig.bbox", "standard")
    records = cu.write_reports()
    assert calls == [("a-m", True, 64, 0), ("b-m", True, 64, 0)]
    assert [r["model"] for r in records] == ["a-m", "b-m"]
    for rec in records:
        assert (root / rec["model"] / "CONTEXT_USE.json").read_text() == json.dumps(rec, indent=2) + "\n"
    assert (root / "CONTEXT_USE.md").read_text() == cu.render_reports(records)
    assert capsys.readouterr().out == _made("a-m").summary() + "\n" + _made("b-m").summary() + "\n"
    with Image.open(root / "context_use.png") as im:
        assert im.size == (1210, 418)                  # 11 x 3.8 inches at 110 dpi
    assert sorted(p.name for p in root.iterdir()) == ["CONTEXT_USE.md", "a-m", "b-m", "context_use.png"]


def test_write_reports_of_some_models_keeps_the_others_records(monkeypatch, tmp_path, capsys):
    root, man, calls = _committed(monkeypatch, tmp_path, ("a-m", "b-m", "c-m"))
    earlier = {**RECORDS[1], "model": "a-m", "weights_sha256": man["a-m"]["weights_sha256"]}
    (root / "a-m" / "CONTEXT_USE.json").write_text(json.dumps(earlier))            # a report from an earlier run
    cu.write_reports(["c-m"], blocks=5, seed=2)
    assert calls == [("c-m", True, 5, 2)]
    # the summary covers the models that have a report, in the committed order; b-m has none
    md = (root / "CONTEXT_USE.md").read_text()
    assert md.count("| `") == 2 and md.index("`a-m`") < md.index("`c-m`") and "`b-m`" not in md
    (root / "context_use.png").unlink()
    assert cu.write_reports([]) == [earlier, json.loads((root / "c-m" / "CONTEXT_USE.json").read_text())]
    assert calls == [("c-m", True, 5, 2)]                                  # no model run: no figure
    assert not (root / "context_use.png").exists()
    assert not (root / "b-m" / "CONTEXT_USE.json").exists()


def test_write_reports_refusals(monkeypatch, tmp_path):
    root, man, calls = _committed(monkeypatch, tmp_path)
    with _raises("no committed model named ['x', 'y'] (committed: ['a-m', 'b-m'])"):
        cu.write_reports(["a-m", "x", "y"])
    assert calls == []
    cu.write_reports(["a-m"])
    man["a-m"]["weights_sha256"] = "f" * 64
    path = root / "a-m" / "CONTEXT_USE.json"
    with _raises(f"{path} was made from other weights than models/a-m's: re-run `python -m protot.context_use a-m`"):
        cu.write_reports(["b-m"])


def test_main_reads_its_arguments(monkeypatch, capsys):
    got, threads = [], []
    monkeypatch.setattr(cu, "write_reports", lambda names, **kw: got.append((names, kw)))
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    assert cu.main([]) == 0
    assert cu.main(["a-m", "b-m", "--blocks", "5", "--seed", "2", "--threads", "3"]) == 0
    assert got == [(None, {"blocks": 64, "seed": 0}), (["a-m", "b-m"], {"blocks": 5, "seed": 2})]
    assert threads == [1, 3]
    with pytest.raises(SystemExit) as e:
        cu.main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m protot.context_use [-h] [--blocks BLOCKS] [--seed SEED] "
                          "[--threads THREADS] [names ...] Write the context-use report of committed models "
                          "(models/<name>/CONTEXT_USE.json, models/CONTEXT_USE.md, models/context_use.png). "
                          "positional arguments: names committed model names (default: all)")
