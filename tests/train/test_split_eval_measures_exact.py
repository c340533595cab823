"""protot.train.split_eval, value by value, the measures of one model: the sources of the blocks,
the seeded stratified samples, block NLLs of stand-in models whose next-token log-probabilities are
written down (the bigram table of split_eval_standins.py, a model that looks only at the first token
of its row), so every NLL, perplexity, gap and first-half cost below is computed by hand; prototype
usage on planted gates; every refusal with its whole message. The committed-model comparison and
the ranking claim: test_split_eval_committed_exact.py."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from compendium import stats
from protot.concepts import GateStats
from protot.train import packing
from protot.train import split_eval as se
from protot.train import tokenizer as tk
from tests.train.split_eval_standins import HALF, _Bigram, _raises

LN2, LN3 = math.log(2.0), math.log(3.0)


# --------------------------------------------------------------------------- a stand-in model
class _FirstToken(torch.nn.Module):
    """Two tokens; every position predicts the row's first token x_0 with probability 3/4: the NLL of
    a target equal to x_0 is A = ln(4/3), of the other token C = ln 4 (C - A = ln 3)."""

    def __init__(self):
        super().__init__()
        self.logq = torch.nn.Parameter(torch.tensor([[0.75, 0.25], [0.25, 0.75]]).log(), requires_grad=False)
        self.calls = []

    def forward(self, input_ids, use_cache=True):
        self.calls.append((tuple(input_ids.shape), use_cache, self.training))
        first = self.logq[input_ids[:, 0]]                                  # (B, 2)
        return SimpleNamespace(logits=first[:, None, :].expand(-1, input_ids.shape[1], -1))


A, C = math.log(4 / 3), math.log(4.0)


# --------------------------------------------------------------------------- sources of blocks
def test_source_group_names_every_corpus_source_and_refuses_others():
    assert [se.source_group(s) for s in ("openstax", "wikipedia-vital-l4-summary", "brown", "abc", "state_union",
                                         "inaugural")] == ["textbooks", "wikipedia", "brown", "news and speeches",
                                                           "news and speeches", "news and speeches"]
    with _raises("no source group for corpus source 'gutenberg'; known: abc, brown, inaugural, openstax, "
                 "state_union, wikipedia-vital-l4-summary"):
        se.source_group("gutenberg")


def test_doc_of_tokens_gives_each_end_of_text_to_its_document():
    eos = 9
    # documents [5, 5, eos], [6, eos], then two tokens after the last end-of-text
    stream = np.array([5, 5, eos, 6, eos, 7, 7])
    assert se._doc_of_tokens(stream, eos, 2).tolist() == [0, 0, 0, 1, 1, 2, 2]
    with _raises("the stream holds 2 end-of-text tokens for 3 documents: it was not built from these documents"):
        se._doc_of_tokens(stream, eos, 3)


def test_block_sources_by_majority_ties_to_the_earlier_document_and_clamps_the_tail():
    eos = tk.eos_id()
    t = eos + 1
    # tokens 0-2 document 0 (its end-of-text at 2), 3-4 document 1, 5-7 after the last end-of-text
    stream = np.array([t, t, eos, t, eos, t, t, t])
    got = se.block_sources(2, stream=stream, sources=["openstax", "brown"])
    # blocks: (0,1) doc 0 | (2,3) doc 0 and doc 1 tie -> doc 0 | (4,5) doc 1 and the tail (as doc 1) | (6,7) tail
    assert got.tolist() == ["textbooks", "textbooks", "brown", "brown"]
    # context 3: two whole blocks, (0,1,2) doc 0, (3,4,5) doc 1 twice + tail -> brown; the last 2 tokens dropped
    assert se.block_sources(3, stream=stream, sources=["inaugural", "wikipedia-vital-l4-summary"]).tolist() == [
        "news and speeches", "wikipedia"]
    with _raises("no source group for corpus source 'gutenberg'; known: abc, brown, inaugural, openstax, "
                 "state_union, wikipedia-vital-l4-summary"):
        se.block_sources(2, stream=stream, sources=["openstax", "gutenberg"])


def test_block_sources_reads_the_validation_split_by_default(monkeypatch):
    from compendium import data

    eos = tk.eos_id()
    asked = []
    stream = np.array([eos + 1, eos, eos + 1, eos])
    monkeypatch.setattr(packing, "token_stream", lambda split, lang: asked.append(("stream", split, lang)) or stream)
    monkeypatch.setattr(data, "load_corpus", lambda split, lang: asked.append(("corpus", split, lang))
                        or {"source": ["abc", "brown"]})
    assert se.block_sources(2).tolist() == ["news and speeches", "brown"]
    assert asked == [("stream", "validation", "en"), ("corpus", "validation", "en")]
    asked.clear()
    assert se.block_sources(2, "de").tolist() == ["news and speeches", "brown"]
    assert asked == [("stream", "validation", "de"), ("corpus", "validation", "de")]


# --------------------------------------------------------------------------- stratified samples
def test_stratified_blocks_every_block_at_or_above_the_split_size():
    groups = np.array(["b", "a", "b"])
    assert se.stratified_blocks(groups, 3).tolist() == [0, 1, 2]
    assert se.stratified_blocks(groups, 4, seed=9).tolist() == [0, 1, 2]
    assert se.stratified_blocks(np.array([]), 0).tolist() == []                 # an empty split: 0 >= 0
    for n in (0, -2):
        with _raises(f"n must be >= 1, got {n}"):
            se.stratified_blocks(groups, n)


def test_stratified_blocks_draw_per_group_in_sorted_order():
    groups = np.array(["b", "a"] * 3 + ["a"] * 4 + ["c"])        # a: 7 blocks, b: 3, c: 1 (11 in all)
    # n = 5: a round(5 * 7 / 11 = 3.18) = 3, b round(1.36) = 1, c max(1, round(0.45) = 0) = 1
    got = se.stratified_blocks(groups, 5, seed=2)
    assert [int((groups[got] == g).sum()) for g in "abc"] == [3, 1, 1] and got.tolist() == sorted(got.tolist())
    # the draw: one generator, the groups in sorted order, each without replacement
    rng = np.random.default_rng(2)
    want = np.concatenate([rng.choice(np.flatnonzero(groups == "a"), size=3, replace=False),
                           rng.choice(np.flatnonzero(groups == "b"), size=1, replace=False),
                           rng.choice(np.flatnonzero(groups == "c"), size=1, replace=False)])
    assert got.tolist() == sorted(want.tolist())
    assert se.stratified_blocks(groups, 5).tolist() == se.stratified_blocks(groups, 5, seed=0).tolist()
    # n = 1: still one block of each group
    one = se.stratified_blocks(groups, 1, seed=2)
    assert sorted(groups[one].tolist()) == ["a", "b", "c"]
    # n = 10 of 11: a round(6.36) = 6, b round(2.73) = 3, c round(0.91) = 1
    ten = se.stratified_blocks(groups, 10, seed=2)
    assert [int((groups[ten] == g).sum()) for g in "abc"] == [6, 3, 1] and len(set(ten.tolist())) == 10


# --------------------------------------------------------------------------- block NLL
# four blocks of 4 tokens; NLL per block in units of ln 2: (repeats + 2 x changes) / 3
STREAM = np.array([0, 0, 0, 0,      # 3 repeats -> 1
                   0, 1, 2, 0,      # 3 changes -> 2
                   1, 1, 2, 2,      # 2 repeats, 1 change -> 4/3
                   2, 0, 0, 1,      # 1 repeat, 2 changes -> 5/3
                   1, 2], dtype=np.uint16)


def test_block_nll_by_hand():
    m = _Bigram(HALF).train()
    got = se.block_nll(m, STREAM, [3, 0, 2], 4, batch_size=2)
    np.testing.assert_allclose(got, np.array([5 / 3, 1.0, 4 / 3]) * LN2, rtol=0, atol=1e-6)
    assert m.calls == [((2, 4), False, False), ((1, 4), False, False)]          # in eval mode, no cache
    assert m.training                                                          # its mode given back
    m.eval()
    whole = se.block_nll(m, STREAM, np.arange(4), 4)
    np.testing.assert_allclose(whole, np.array([1.0, 2.0, 4 / 3, 5 / 3]) * LN2, rtol=0, atol=1e-6)
    assert not m.training and m.calls[2:] == [((4, 4), False, False)]          # one batch of 16 at most
    # context 2: block 3 is tokens 6, 7 = (2, 0): one change -> 2 ln 2; block 8 = (1, 2) -> 2 ln 2
    np.testing.assert_allclose(se.block_nll(m, STREAM, [0, 3, 8], 2), np.array([1.0, 2.0, 2.0]) * LN2, atol=1e-6)
    empty = se.block_nll(m, STREAM, [], 4)
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_block_nll_batches_of_sixteen_by_default():
    stream = np.tile(np.array([0, 1], dtype=np.uint16), 20)                    # 20 blocks of (0, 1): NLL 2 ln 2
    m = _Bigram(HALF)
    got = se.block_nll(m, stream, np.arange(20), 2)
    np.testing.assert_allclose(got, np.full(20, 2 * LN2), atol=1e-6)
    assert [c[0] for c in m.calls] == [(16, 2), (4, 2)]


# --------------------------------------------------------------------------- per source and gaps
def test_per_source_by_hand():
    groups = np.array(["y", "x", "y", "x", "y"])
    nll = [1.0, 2.0, 3.0, 4.0, 5.0]
    t = se.per_source(nll, groups, n_boot=300, seed=4)
    assert list(t.columns) == ["source", "blocks", "nll", "ppl", "ppl_low", "ppl_high"]
    assert t.source.tolist() == ["all", "x", "y"] and t.blocks.tolist() == [5, 2, 3]
    # means: all 15 / 5 = 3, x (2 + 4) / 2 = 3, y (1 + 3 + 5) / 3 = 3
    assert t.nll.tolist() == [3.0, 3.0, 3.0] and np.allclose(t.ppl, math.exp(3.0), rtol=1e-12)
    for row, x in zip(t.itertuples(), ([1, 2, 3, 4, 5], [2, 4], [1, 3, 5])):
        lo, hi = stats.bootstrap_mean_ci(np.array(x, dtype=float), n_boot=300, seed=4)
        assert (row.ppl_low, row.ppl_high) == (math.exp(lo), math.exp(hi))
    # defaults: 2000 resamples of seed 0 (20 spread losses, so that other draws give other ends)
    many = np.arange(20) ** 2 / 100.0
    d = se.per_source(many, ["x"] * 20).set_index("source")
    lo, hi = stats.bootstrap_mean_ci(many, n_boot=2000, seed=0)
    assert (d.loc["x", "ppl_low"], d.loc["x", "ppl_high"]) == (math.exp(lo), math.exp(hi))
    assert (lo, hi) != stats.bootstrap_mean_ci(many, n_boot=2000, seed=1)
    assert (lo, hi) != stats.bootstrap_mean_ci(many, n_boot=2001, seed=0)
    # a group of equal losses: its interval is the point
    c = se.per_source([0.5, 0.5, 2.0], ["p", "p", "q"]).set_index("source")
    assert c.loc["p", "ppl_low"] == c.loc["p", "ppl"] == c.loc["p", "ppl_high"] == math.exp(0.5)
    assert c.loc["all", "nll"] == 1.0 and c.loc["q", "blocks"] == 1
    with _raises("4 block losses for 5 groups"):
        se.per_source(nll[:4], groups)


def test_per_source_averages_float32_losses_in_float64():
    # block_nll gives float32 losses; 1 + 2^-24 rounds to 1 in float32, not in float64:
    # the mean of (1, 2^-24, 2^-24, 2^-24) is (1 + 3 x 2^-24) / 4, not 1/4
    x = np.array([1.0, 2.0 ** -24, 2.0 ** -24, 2.0 ** -24], dtype=np.float32)
    t = se.per_source(x, ["x"] * 4, n_boot=10).set_index("source")
    assert t.loc["all", "nll"] == (1 + 3 * 2.0 ** -24) / 4 != 0.25


def test_gaps_by_hand():
    groups = np.array(["y", "x", "y", "x"])
    a = np.array([3.0, 2.0, 5.0, 4.0])
    b = np.array([2.5, 2.0, 4.0, 3.5])                 # a - b = 0.5, 0, 1, 0.5
    g = se.gaps(a, b, groups, n_boot=300, seed=4)
    assert list(g.columns) == ["source", "blocks", "gap_nats", "gap_low", "gap_high", "ppl_ratio", "ppl_ratio_low",
                               "ppl_ratio_high"]
    assert g.source.tolist() == ["all", "x", "y"] and g.blocks.tolist() == [4, 2, 2]
    # all: 2 / 4 = 0.5; x: (0 + 0.5) / 2 = 0.25; y: (0.5 + 1) / 2 = 0.75
    assert g.gap_nats.tolist() == [0.5, 0.25, 0.75]
    assert np.allclose(g.ppl_ratio, np.exp([0.5, 0.25, 0.75]), rtol=1e-12)
    for row, (x, y) in zip(g.itertuples(), ((a, b), (a[[1, 3]], b[[1, 3]]), (a[[0, 2]], b[[0, 2]]))):
        lo, hi = stats.paired_bootstrap_ci(x, y, n_boot=300, seed=4)
        assert (row.gap_low, row.gap_high, row.ppl_ratio_low, row.ppl_ratio_high) == (lo, hi, math.exp(lo), math.exp(hi))
    x, y = np.sqrt(np.arange(1.0, 21.0)), 1.3 * np.cbrt(np.arange(1.0, 21.0))
    d = se.gaps(x, y, ["x"] * 20).set_index("source")                         # defaults: 2000 resamples, seed 0
    lo, hi = stats.paired_bootstrap_ci(x, y, n_boot=2000, seed=0)
    assert (d.loc["all", "gap_low"], d.loc["all", "gap_high"]) == (lo, hi)
    assert (lo, hi) != stats.paired_bootstrap_ci(x, y, n_boot=2000, seed=1)
    assert (lo, hi) != stats.paired_bootstrap_ci(x, y, n_boot=2001, seed=0)
    with _raises("paired block losses must have one length: 4, 3, 4 groups"):
        se.gaps(a, b[:3], groups)
    with _raises("paired block losses must have one length: 3, 4, 4 groups"):
        se.gaps(a[:3], b, groups)
    with _raises("paired block losses must have one length: 4, 4, 3 groups"):
        se.gaps(a, b, groups[:3])


# --------------------------------------------------------------------------- first-half costs
def _first_token_nll(first: int, targets) -> float:
    return float(np.mean([A if t == first else C for t in targets]))


def test_first_half_costs_by_hand():
    # T = 6: h = 3, the predictions of tokens 4 and 5 are scored
    blocks = torch.tensor([[0, 0, 0, 1, 0, 0],      # true: first 0, targets 0 0 -> A
                           [1, 1, 1, 1, 1, 0],      # true: first 1, targets 1 0 -> (A + C) / 2
                           [1, 1, 1, 0, 1, 1]])     # true: first 1, targets 1 1 -> A
    m = _FirstToken().train()
    t = se.first_half_costs(m, blocks, n_boot=200, seed=5, batch_size=2)
    assert list(t.columns) == ["first_half", "cost_nats", "cost_low", "cost_high", "blocks", "loss_true"]
    assert t.first_half.tolist() == ["replaced", "shuffled", "removed"] and (t.blocks == 3).all()
    true = np.array([A, (A + C) / 2, A])
    assert np.allclose(t.loss_true, true.mean(), rtol=0, atol=1e-6)
    # replaced: row i's first token becomes row i+1's (cyclically): 1, 1, 0 -> C, (A + C) / 2, C
    # shuffled: each first half is constant, a permutation changes nothing -> cost 0
    # removed: the first token becomes x_3: 1, 1, 0 -> C, (A + C) / 2, C (the same as replaced here)
    costs = {"replaced": np.array([C - A, 0.0, C - A]), "shuffled": np.zeros(3), "removed": np.array([C - A, 0.0, C - A])}
    for row in t.itertuples():
        d = costs[row.first_half]
        assert row.cost_nats == pytest.approx(d.mean(), abs=1e-6)                # 2 ln 3 / 3 or 0
        lo, hi = stats.bootstrap_mean_ci(d, n_boot=200, seed=5)
        assert row.cost_low == pytest.approx(lo, abs=1e-6) and row.cost_high == pytest.approx(hi, abs=1e-6)
    assert t.cost_nats[0] == pytest.approx(2 * LN3 / 3, abs=1e-6)
    # calls: full blocks, replaced, shuffled in batches of 2 (2 + 1 rows), removed as (B, T - h)
    assert [c[0] for c in m.calls] == [(2, 6), (1, 6)] * 3 + [(2, 3), (1, 3)]
    assert all(c[1] is False and c[2] is False for c in m.calls) and m.training


def test_first_half_costs_distinguish_replaced_shuffled_and_removed():
    blocks = torch.tensor([[0, 1, 1, 1, 0, 1, 0, 0],
                           [1, 0, 0, 1, 0, 1, 1, 1],
                           [0, 0, 1, 0, 1, 1, 0, 0],
                           [1, 1, 0, 0, 0, 0, 0, 1]])    # T = 8: h = 4, tokens 5, 6, 7 scored
    m = _FirstToken().eval()
    t = se.first_half_costs(m, blocks, seed=3, n_boot=100).set_index("first_half")
    true = np.array([_first_token_nll(int(r[0]), r[5:].tolist()) for r in blocks])
    g = torch.Generator().manual_seed(3)
    shuffled_first = [int(r[:4][torch.randperm(4, generator=g)][0]) for r in blocks]
    want_first = {"replaced": [1, 0, 1, 0],                       # the next row's first token
                  "shuffled": shuffled_first,
                  "removed": [int(r[4]) for r in blocks]}           # x_h: 0, 0, 1, 0
    for name, firsts in want_first.items():
        nll = np.array([_first_token_nll(f, r[5:].tolist()) for f, r in zip(firsts, blocks)])
        assert t.loc[name, "cost_nats"] == pytest.approx(float((nll - true).mean()), abs=1e-6), name
        lo, hi = stats.paired_bootstrap_ci(nll, true, n_boot=100, seed=3)
        assert (t.loc[name, "cost_low"], t.loc[name, "cost_high"]) == pytest.approx((lo, hi), abs=1e-6)
    # by hand (targets 1 0 0, 1 1 1, 1 0 0, 0 0 1): true (2A+C)/3, A, (2A+C)/3, (A+2C)/3, mean (2A+C)/3;
    # replaced, first tokens 1 0 1 0: costs (C-A)/3, C-A, (C-A)/3, (A-C)/3 -> mean (C-A)/3 = ln 3 / 3;
    # removed, first tokens 0 0 1 0: costs 0, C-A, (C-A)/3, (A-C)/3 -> mean (C-A)/4 = ln 3 / 4
    assert t.loc["replaced", "cost_nats"] == pytest.approx(LN3 / 3, abs=1e-6)
    assert t.loc["removed", "cost_nats"] == pytest.approx(LN3 / 4, abs=1e-6)
    assert t.loc["removed", "loss_true"] == pytest.approx((2 * A + C) / 3, abs=1e-6)
    # the seed draws the shuffles: a permutation that differs in some row's first token
    assert not m.training and t.loc["shuffled", "blocks"] == 4


def test_first_half_costs_defaults(monkeypatch):
    """Seed 0 (the shuffles and the resamples), 2000 resamples, batches of 16: 20 seeded rows of 16
    (h = 8: the predictions of tokens 9 .. 15 scored)."""
    blocks = torch.randint(0, 2, (20, 16), generator=torch.Generator().manual_seed(11))
    m = _FirstToken()
    asked, real = [], stats.paired_bootstrap_ci
    monkeypatch.setattr(se.stats, "paired_bootstrap_ci", lambda x, y, **kw: asked.append(kw) or real(x, y, **kw))
    t = se.first_half_costs(m, blocks).set_index("first_half")
    assert asked == [{"n_boot": 2000, "seed": 0}] * 3
    assert [c[0] for c in m.calls] == [(16, 16), (4, 16)] * 3 + [(16, 8), (4, 8)]
    true = np.array([_first_token_nll(int(r[0]), r[9:].tolist()) for r in blocks])
    g = torch.Generator().manual_seed(0)
    firsts = {"replaced": [int(r[0]) for r in blocks.roll(-1, 0)],
              "shuffled": [int(r[:8][torch.randperm(8, generator=g)][0]) for r in blocks],
              "removed": [int(r[8]) for r in blocks]}
    other_draws = []
    for name, f in firsts.items():
        nll = np.array([_first_token_nll(x, r[9:].tolist()) for x, r in zip(f, blocks)])
        assert t.loc[name, "cost_nats"] == pytest.approx(float((nll - true).mean()), abs=1e-6), name
        lo, hi = real(nll, true, n_boot=2000, seed=0)
        assert (t.loc[name, "cost_low"], t.loc[name, "cost_high"]) == pytest.approx((lo, hi), abs=1e-6), name
        other_draws.append((lo, hi) != real(nll, true, n_boot=2000, seed=1))
    assert any(other_draws)                                            # the data tell the seeds apart


def test_first_half_costs_refuse_small_or_badly_shaped_blocks():
    m = _FirstToken()
    for shape in ((1, 6), (2, 3), (6,), (2, 2, 4)):
        with _raises(f"blocks must be (B >= 2, T >= 4) token ids, got {shape}"):
            se.first_half_costs(m, torch.zeros(shape, dtype=torch.long))
    t = se.first_half_costs(m, torch.zeros((2, 4), dtype=torch.long), n_boot=10)   # the smallest accepted
    assert np.allclose(t.cost_nats, 0.0) and np.allclose(t.loss_true, A)


# --------------------------------------------------------------------------- prototype usage
class _ProtoConfigModel:
    def __init__(self, R: int, model_type="protot"):
        self.config = SimpleNamespace(model_type=model_type, num_prototypes=R)


def _planted_gates(monkeypatch, asked):
    """collect_gates stand-in: two layers, R = 4, two positions each. Write gates: layer 0 positions
    (0.5, 0.5, 0, 0) and (0.5, 0.3, 0.2, 0) -> shares (0.5, 0.4, 0.1, 0); layer 1 even (1/4 each).
    Read gates: all the mass on prototype 3 (must not be reported)."""
    import protot.concepts as concepts

    write = np.array([[[[0.5, 0.5, 0, 0], [0.5, 0.3, 0.2, 0]]], [[[0.25] * 4, [0.25] * 4]]], dtype=np.float32)
    read = np.zeros_like(write)
    read[..., 3] = 1.0

    def fake(model, blocks, batch_size=8):
        asked.append((model, blocks, batch_size))
        return GateStats(ids=np.zeros((1, 2), dtype=np.int64), write=write, read=read,
                         half_life=np.ones((2, 4)), vocab_size=5)

    monkeypatch.setattr(concepts, "collect_gates", fake)


def test_usage_on_planted_write_gates(monkeypatch):
    asked = []
    _planted_gates(monkeypatch, asked)
    m, blocks = _ProtoConfigModel(4), torch.zeros((1, 2), dtype=torch.long)
    u = se.usage(m, blocks, dead_share=0.15, batch_size=3)
    assert list(u.columns) == ["layer", "prototypes", "effective", "max_share", "dead", "dead_share_floor"]
    assert u.layer.tolist() == [0, 1] and u.prototypes.tolist() == [4, 4]
    # layer 0: exp(-(0.5 ln 0.5 + 0.4 ln 0.4 + 0.1 ln 0.1)); layer 1: 4
    h0 = -(0.5 * math.log(0.5) + 0.4 * math.log(0.4) + 0.1 * math.log(0.1))
    assert u.effective.tolist() == pytest.approx([math.exp(h0), 4.0], abs=1e-6)
    assert u.max_share.tolist() == pytest.approx([0.5, 0.25], abs=1e-7)
    assert u.dead.tolist() == [2, 0]                                 # 0.1 and 0 below 0.15
    assert u.dead_share_floor.tolist() == [0.15, 0.15]
    assert asked == [(m, blocks, 3)]
    # defaults: batches of 8, a floor of 1e-3 (only the empty prototype is dead)
    d = se.usage(m, blocks)
    assert d.dead.tolist() == [1, 0] and d.dead_share_floor.tolist() == [1e-3, 1e-3] and asked[-1][2] == 8
    # a floor of 0.11: 0.1 is below it
    assert se.usage(m, blocks, dead_share=0.11).dead.tolist() == [2, 0]
    assert se.usage(m, blocks, dead_share=0.09).dead.tolist() == [1, 0]


def test_usage_refusals(monkeypatch):
    asked = []
    _planted_gates(monkeypatch, asked)
    blocks = torch.zeros((1, 2), dtype=torch.long)
    with _raises("usage needs a ProtoT model, got _ProtoConfigModel"):
        se.usage(_ProtoConfigModel(4, model_type="llama"), blocks)
    bare = SimpleNamespace(config=SimpleNamespace())
    with _raises("usage needs a ProtoT model, got SimpleNamespace"):
        se.usage(bare, blocks)
    for share in (0.0, -0.1, 0.25, 0.3):                             # R = 4: (0, 0.25)
        with _raises(f"dead_share must lie in (0, 1/R) = (0, 0.25), got {share}"):
            se.usage(_ProtoConfigModel(4), blocks, dead_share=share)
    with _raises("dead_share must lie in (0, 1/R) = (0, 0.3333), got 0.5"):
        se.usage(_ProtoConfigModel(3), blocks, dead_share=0.5)
    assert asked == []                                                # refused before any gate is read
