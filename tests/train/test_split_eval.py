"""protot.train.split_eval: source of each validation block, stratified samples, per-source
perplexity and paired gaps (hand-computed), first-half costs on models whose use of context is
known, and prototype usage on planted gates."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from protot.models import build_model
from protot.train import split_eval as se
from protot.train import tokenizer as tk


def test_block_sources_follow_the_documents():
    eos = tk.eos_id()
    # documents of 5, 9 and 3 tokens (+ eos each): 20 tokens, blocks of 4
    lengths, sources = [5, 9, 3], ["openstax", "brown", "abc"]
    stream = np.concatenate([np.r_[np.full(n, 7), eos] for n in lengths]).astype(np.uint16)
    got = se.block_sources(4, stream=stream, sources=sources)
    # tokens 0-5 doc 0, 6-15 doc 1, 16-19 doc 2; block 1 (4-7): doc 0 holds 2, doc 1 holds 2 -> the first
    assert got.tolist() == ["textbooks", "textbooks", "brown", "brown", "news and speeches"]
    with pytest.raises(ValueError, match="end-of-text"):
        se.block_sources(4, stream=stream, sources=sources[:2])
    with pytest.raises(ValueError, match="no source group"):
        se.source_group("gutenberg")


def test_stratified_blocks_keep_each_groups_share():
    groups = np.array(["a"] * 800 + ["b"] * 150 + ["c"] * 50)
    ids = se.stratified_blocks(groups, 100, seed=3)
    counts = {g: int((groups[ids] == g).sum()) for g in "abc"}
    assert counts == {"a": 80, "b": 15, "c": 5} and len(set(ids)) == len(ids)
    assert np.array_equal(ids, se.stratified_blocks(groups, 100, seed=3))
    assert not np.array_equal(ids, se.stratified_blocks(groups, 100, seed=4))
    assert np.array_equal(se.stratified_blocks(groups, 5000), np.arange(1000))


def test_per_source_and_paired_gaps_by_hand():
    groups = np.array(["x", "x", "y", "y", "y"])
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    table = se.per_source(a, groups).set_index("source")
    assert table.loc["all", "nll"] == 3.0 and table.loc["x", "nll"] == 1.5 and table.loc["y", "blocks"] == 3
    assert math.isclose(table.loc["y", "ppl"], math.exp(4.0))
    assert table.loc["x", "ppl_low"] <= table.loc["x", "ppl"] <= table.loc["x", "ppl_high"]
    b = a - 0.25
    g = se.gaps(a, b, groups).set_index("source")
    assert np.allclose(g.gap_nats, 0.25) and np.allclose(g.gap_low, 0.25) and np.allclose(g.gap_high, 0.25)
    assert math.isclose(g.loc["all", "ppl_ratio"], math.exp(0.25))
    noisy = b + np.array([0.3, -0.3, 0.2, -0.1, -0.1])
    g2 = se.gaps(a, noisy, groups).set_index("source")
    assert g2.loc["all", "gap_low"] < g2.loc["all", "gap_nats"] < g2.loc["all", "gap_high"]
    with pytest.raises(ValueError, match="one length"):
        se.gaps(a, b[:4], groups)


class _Toy(torch.nn.Module):
    """logits_t = bigram(x_t) + weight * onehot(x_0): context used only through the first token."""

    def __init__(self, vocab: int, weight: float):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.bigram = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g))
        self.weight = weight

    def forward(self, input_ids, use_cache=False):
        logits = self.bigram[input_ids] + self.weight * torch.nn.functional.one_hot(
            input_ids[:, :1], self.bigram.shape[0]).float()
        return type("Out", (), {"logits": logits})()


def test_first_half_costs_see_exactly_the_context_a_model_uses():
    g = torch.Generator().manual_seed(1)
    blocks = torch.randint(0, 11, (24, 16), generator=g)
    none = se.first_half_costs(_Toy(11, 0.0), blocks).set_index("first_half")
    assert np.allclose(none.cost_nats, 0.0, atol=1e-6)                 # a bigram model ignores the first half
    uses = se.first_half_costs(_Toy(11, 4.0), blocks).set_index("first_half")
    # the first token changes when replaced (another block's) and when removed (the second half's own
    # first token); shuffling moves it too, except where the permutation keeps it in place
    assert uses.loc["replaced", "cost_nats"] != 0 and uses.loc["removed", "cost_nats"] != 0
    assert set(uses.index) == {"replaced", "shuffled", "removed"} and (uses.blocks == 24).all()
    for _, r in uses.iterrows():
        assert r.cost_low <= r.cost_nats <= r.cost_high
    with pytest.raises(ValueError, match="blocks must be"):
        se.first_half_costs(_Toy(11, 0.0), blocks[:1])


@pytest.mark.parametrize("variant", ["authors", "compendium-v1"])
def test_usage_on_planted_gates(variant):
    torch.manual_seed(0)
    m = build_model("protot", "tiny", 50, variant=variant).eval()
    blocks = torch.randint(0, 50, (4, 24))
    with torch.no_grad():
        for mx in m.mixers():
            mx.prototypes.zero_()                                       # every logit 0: uniform gates
    u = se.usage(m, blocks)
    R = m.config.num_prototypes
    assert np.allclose(u.effective, R) and (u.dead == 0).all() and np.allclose(u.max_share, 1 / R)
    for mx in m.mixers():
        mx.mask_write = set(range(1, R))                                # all the write mass on prototype 0
    u = se.usage(m, blocks)
    assert np.allclose(u.effective, 1.0) and (u.dead == R - 1).all() and np.allclose(u.max_share, 1.0)
    with pytest.raises(ValueError, match="ProtoT"):
        se.usage(build_model("llama", "tiny", 50), blocks)
