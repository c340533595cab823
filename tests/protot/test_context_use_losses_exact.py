"""protot.context_use, value by value, the token losses and their averages: token_nll,
target_logprobs, loss_by_position and binned_loss on the table models of context_use_standins.py,
whose every loss is k ln 2 (expected numbers in units of ln 2, their arithmetic beside them), the
seeded intervals drawn from the same blocks for every position, and every refusal with its whole
message. The prefix and context effects: test_context_use_effects_exact.py; the summaries, figure
and reports: test_context_use_reports_exact.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from protot import context_use as cu
from tests.protot.context_use_standins import LN2, _raises, _t, _Table


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
