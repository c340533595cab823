"""protot.train.split_eval: source of each validation block, stratified samples, per-source
perplexity and paired gaps (hand-computed), first-half costs on models whose use of context is
known, prototype usage on planted gates; claim protot/ppl-ranking judged on planted block losses (a
clear winner either way, the null of identical models, a model missing or unfinished), and the
committed-model comparison on small stand-in models."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from protot.models import build_model
from protot.train import split_eval as se
from protot.train import tokenizer as tk
from tests.ledger_helpers import fits_ledger


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


# ----------------------------------------------------------------------------- claim protot/ppl-ranking
RANKING = "protot/ppl-ranking"


def _manifest(arch, status="final", **changes):
    """A MANIFEST of a committed model trained at the shared budget (evaluate.equal_budget accepts any four)."""
    m = {"arch": arch, "status": status, "steps": 1465, "planned_steps": 1465, "tokens_seen": 12_001_280,
         "eval": {"validation": {"ppl": 90.0}}, "data": {"data_key": "k"}, "tokenizer": {"sha256": "t"},
         "parameters": {"non_embedding": 3_945_000}, "train_config": {"arch": arch, "context": 256, "lr": 6e-4, "seed": 1}}
    if status != "final":                                   # a snapshot: unfinished, not evaluated
        m.update(steps=1160, eval={})
    m.update(changes)
    return m


def _four(**status):
    return {f"{a}-x": _manifest(a, status.get(a, "final")) for a in se.RANKED}


def _planted(n=600, protot=0.10, mamba=0.03, deltanet=0.09, seed=0):
    """Block NLLs with known gaps: llama is the base, every other model the base plus its offset plus
    a little zero-mean noise; ProtoT's gaps are then protot - 0 (llama), protot - mamba, protot - deltanet."""
    rng = np.random.default_rng(seed)
    base = rng.normal(4.5, 0.5, n)

    def noisy(offset):
        e = rng.normal(0, 0.02, n)
        return base + offset + e - e.mean()

    nll = {"protot-x": noisy(protot), "llama-x": base.copy(), "mamba-x": noisy(mamba), "deltanet-x": noisy(deltanet)}
    return nll, np.array(["textbooks", "brown"] * (n // 2))


def _judge(m, profile="cpu"):
    from compendium import claims

    fits_ledger(m)
    return claims.evaluate(claims.get_claim(RANKING), m.values, profile, m.evidence)


def test_ranking_gaps_and_intervals_from_planted_losses():
    nll, groups = _planted()
    m = se.measure_ranking(nll, _four(), groups, unigram=1000.0, n_boot=500)
    v = m.values
    assert m.claim == RANKING and v["models_final"] is True and v["blocks"] == 600
    assert v["nll_gap_llama"] == pytest.approx(0.10) and v["nll_gap_mamba"] == pytest.approx(0.07)
    assert v["nll_gap_deltanet"] == pytest.approx(0.01)
    for a in ("llama", "mamba", "deltanet"):
        assert v[f"nll_gap_{a}_ci_low"] < v[f"nll_gap_{a}"] < v[f"nll_gap_{a}_ci_high"]
    worst = max(math.exp(x.mean()) for x in nll.values())
    assert v["worst_ppl_over_unigram"] == pytest.approx(worst / 1000.0)
    assert m.evidence["ppl ratio ProtoT / other"]["llama"] == pytest.approx(math.exp(0.10))
    assert m.evidence["blocks per source"] == {"brown": 300, "textbooks": 300}
    gaps = m.tables["ranking_gaps"]
    assert set(gaps.against) == {"llama-x", "mamba-x", "deltanet-x"} and set(gaps.source) == {"all", "brown", "textbooks"}
    assert m.note.startswith("mean NLL gap per token, ProtoT minus each model") and "llama +0.1000" in m.note


def test_ranking_holds_and_does_not_hold_as_planted():
    nll, groups = _planted()
    assert _judge(se.measure_ranking(nll, _four(), groups, 1000.0, n_boot=500))[0] == "holds"
    assert _judge(se.measure_ranking(nll, _four(), groups, 1000.0, n_boot=500), "paper")[0] == "holds"
    # ProtoT better than LLaMA and Mamba: the whole interval of each gap below 0
    better, _ = _planted(protot=-0.10, mamba=0.0, deltanet=-0.11)
    verdict, conds, _, _ = _judge(se.measure_ranking(better, _four(), groups, 1000.0, n_boot=500))
    assert verdict == "does not hold" and conds[0].failed and conds[1].failed and conds[2].passed
    # DeltaNet far better than ProtoT: its gap (0.3 nats) wholly outside +-0.0953
    far, _ = _planted(deltanet=-0.20)
    verdict, conds, _, _ = _judge(se.measure_ranking(far, _four(), groups, 1000.0, n_boot=500))
    assert verdict == "does not hold" and conds[0].passed and conds[2].failed


def test_ranking_null_identical_models_do_not_trail():
    """The null: ProtoT no different from the others. Identical models: every gap exactly 0, its interval
    [0, 0], wholly on the wrong side of "> 0" -> does not hold; a gap of 0 with noise -> the interval
    straddles 0 -> inconclusive. Neither holds."""
    nll, groups = _planted(protot=0.0, mamba=0.0, deltanet=0.0)
    same = {n: nll["llama-x"].copy() for n in nll}
    m = se.measure_ranking(same, _four(), groups, 1000.0, n_boot=500)
    assert m.values["nll_gap_llama"] == 0 and m.values["nll_gap_llama_ci_low"] == m.values["nll_gap_llama_ci_high"] == 0
    verdict, conds, _, _ = _judge(m)
    assert verdict == "does not hold" and conds[0].failed and conds[1].failed and conds[2].passed
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 0.1, len(groups))
    noisy = {**same, "protot-x": same["llama-x"] + noise - noise.mean()}
    verdict, conds, _, reason = _judge(se.measure_ranking(noisy, _four(), groups, 1000.0, n_boot=500))
    assert verdict == "inconclusive" and conds[0].undecided and "straddles 0" in reason


def test_ranking_a_missing_or_unfinished_model_is_not_measured_and_inconclusive():
    from compendium import claims

    nll, groups = _planted()
    manifests = {**_four(deltanet="in-progress"), "mamba-x": None}      # mamba not committed, deltanet a snapshot
    del nll["mamba-x"]
    m = se.measure_ranking(nll, manifests, groups, 1000.0, n_boot=500)
    v = m.values
    assert v["nll_gap_llama"] == pytest.approx(0.10) and v["models_final"] is False
    for a in ("mamba", "deltanet"):                                        # not measured, interval ends too
        assert v[f"nll_gap_{a}"] is None and v[f"nll_gap_{a}_ci_low"] is None and v[f"nll_gap_{a}_ci_high"] is None
    assert m.evidence["models"] == {"protot-x": "final", "llama-x": "final", "mamba-x": "not committed",
                                    "deltanet-x": "in-progress"}
    assert m.evidence["not final or not at equal budget"][:2] == ["mamba: no final model committed",
                                                                  "deltanet: no final model (deltanet-x is in-progress)"]
    verdict, _, pre, reason = _judge(m)
    assert verdict == "inconclusive" and "models-final" in reason and "nll_gap_mamba, nll_gap_deltanet" in reason
    assert [o.id for o in pre if not o.passed] == ["models-final"]
    assert "mamba not measured" in m.note
    # the judge takes a gap as not measured only where a failed precondition makes the verdict inconclusive
    with pytest.raises(claims.UnjudgeableResult, match="not measured"):
        claims.evaluate(claims.get_claim(RANKING), {**v, "models_final": True}, "cpu", m.evidence)
    # no final ProtoT: no gap at all
    nll, _ = _planted()
    none = se.measure_ranking(nll, _four(protot="in-progress"), groups, 1000.0, n_boot=500).values
    assert none["nll_gap_llama"] is None and none["models_final"] is False


def test_ranking_preconditions_equal_budget_learned_and_blocks():
    nll, groups = _planted()
    unequal = {**_four(), "mamba-x": _manifest("mamba", tokens_seen=9_000_000)}
    m = se.measure_ranking(nll, unequal, groups, 1000.0, n_boot=500)
    assert m.values["models_final"] is False and m.values["nll_gap_mamba"] is not None     # measured, not judged
    assert any("tokens seen differ" in w for w in m.evidence["not final or not at equal budget"])
    assert _judge(m)[0] == "inconclusive"
    weak = se.measure_ranking(nll, _four(), groups, unigram=200.0, n_boot=500)              # ppl ~ 100-110 > 200 / 3
    verdict, _, pre, _ = _judge(weak)
    assert verdict == "inconclusive" and [o.id for o in pre if not o.passed] == ["models-learned"]
    few, few_groups = _planted(n=200)                                                       # under min_units (512)
    verdict, _, pre, _ = _judge(se.measure_ranking(few, _four(), few_groups, 1000.0, n_boot=500))
    assert verdict == "inconclusive" and [o.id for o in pre if not o.passed] == ["min-units"]


def test_ranking_refuses_inputs_it_cannot_pair():
    nll, groups = _planted()
    with pytest.raises(ValueError, match="not list as committed"):
        se.measure_ranking({**nll, "gpt-x": nll["llama-x"]}, _four(), groups, 1000.0)
    with pytest.raises(ValueError, match="cover the 600 blocks"):
        se.measure_ranking({**nll, "llama-x": nll["llama-x"][:10]}, _four(), groups, 1000.0)
    with pytest.raises(ValueError, match="one committed model per architecture"):
        se.measure_ranking(nll, {**_four(), "mamba-x": _manifest("llama")}, groups, 1000.0)
    with pytest.raises(ValueError, match="were not measured"):
        se.measure_ranking({k: v for k, v in nll.items() if k != "mamba-x"}, _four(), groups, 1000.0)
    with pytest.raises(ValueError, match="unigram"):
        se.measure_ranking(nll, _four(), groups, 0.0)
    with pytest.raises(ValueError, match="no committed model"):
        se.measure_ranking({}, _four(), groups, 1000.0)


def test_compare_committed_skips_what_is_not_committed(monkeypatch):
    """On the real validation and WikiText-2 streams, with two small random models standing in for
    committed ones: every table names the models measured, a name not committed is kept and skipped."""
    from protot.train import pretrained

    torch.manual_seed(0)
    models = {"protot-x": build_model("protot", "tiny", 12288), "llama-x": build_model("llama", "tiny", 12288)}
    mans = {"protot-x": _manifest("protot"), "llama-x": _manifest("llama", status="in-progress")}
    monkeypatch.setattr(pretrained, "available", lambda: sorted(models))
    monkeypatch.setattr(pretrained, "manifest", lambda n: mans[n])
    monkeypatch.setattr(pretrained, "load", lambda n, device="cpu": pretrained.Pretrained(n, models[n].eval(), None, mans[n]))
    c = se.compare_committed(["protot-x", "mamba-x", "llama-x"], context=32, blocks=6, n_boot=50, wiki_blocks=3,
                             context_blocks=3, usage_blocks=2)
    assert c.manifests["mamba-x"] is None and list(c.nll) == ["protot-x", "llama-x"]
    assert len(c.ids) == len(c.groups) >= 6 and all(len(v) == len(c.ids) for v in c.nll.values())
    assert np.all(np.diff(c.ids) > 0) and set(c.seconds_per_block) == {"protot-x", "llama-x"}
    t = c.tables
    assert set(t["per_source"].model) == {"protot-x", "llama-x"} and "all" in set(t["per_source"].source)
    assert set(t["per_source"].status) == {"final", "in-progress"}
    assert (t["wikitext2"].source == "wikitext2").all() and len(t["wikitext2"]) == 2
    assert t["wikitext2_gaps"][["model", "against", "against_status"]].values.tolist() == [["protot-x", "llama-x", "in-progress"]]
    g = t["gaps"].set_index("source")                              # every model committed, whatever its status
    assert (g.against == "llama-x").all() and g.loc["all", "gap_nats"] == pytest.approx(
        float(np.mean(c.nll["protot-x"] - c.nll["llama-x"])), abs=1e-6)
    assert set(t["context_use"].first_half) == {"replaced", "shuffled", "removed"} and (t["context_use"].blocks == 3).all()
    assert set(t["usage"].model) == {"protot-x"}                      # prototype usage: the ProtoT only
    m = se.measure_ranking(c.nll, c.manifests, c.groups, 1000.0, n_boot=50)
    assert m.values["models_final"] is False and m.values["nll_gap_llama"] is None      # llama-x is a snapshot
