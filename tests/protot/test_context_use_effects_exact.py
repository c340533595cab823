"""protot.context_use, value by value, what the context is worth: replace_prefix, the
replaced-prefix cost (the tokens at positions split .. T-1), the context effect of a short context,
the target word's context effect in a stream, and context_use with its settings and defaults, on the
table models of context_use_standins.py (expected numbers in units of ln 2, or looked up in the
random table ``RT`` where an interval must show its resamples), every refusal with its whole message."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from protot import concepts
from protot import context_use as cu
from tests.protot.context_use_standins import (K, LN2, R0, R1, R2, RT, RT_LOSS, STREAM3, V, _raises, _t,
                                               _Table)


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
