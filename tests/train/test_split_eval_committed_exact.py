"""protot.train.split_eval, value by value, the committed models: their status and the seeded ids,
the committed-model comparison on stand-in streams and models (the bigram tables of
split_eval_standins.py, whose block NLLs are computed by hand), and the ranking claim's values,
evidence, tables and note, with every refusal in its whole message."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from compendium import stats
from protot.train import packing
from protot.train import split_eval as se
from protot.train import tokenizer as tk
from tests.train.split_eval_standins import HALF, _Bigram, _bigram_nll, _raises


# --------------------------------------------------------------------------- committed models
def test_status_of_and_seeded_ids():
    assert se.status_of(None) == "not committed" == se.NOT_COMMITTED
    assert se.status_of({"status": "final"}) == "final" and se.status_of({"arch": "llama"}) == "unknown"
    assert se.RANKED == ("protot", "llama", "mamba", "deltanet")
    rng = np.random.default_rng(1)
    assert se._seeded_ids(5, None, rng).tolist() == [0, 1, 2, 3, 4]
    assert se._seeded_ids(5, 5, rng).tolist() == [0, 1, 2, 3, 4] and se._seeded_ids(5, 7, rng).tolist() == [0, 1, 2, 3, 4]
    assert rng.integers(0, 1 << 30) == np.random.default_rng(1).integers(0, 1 << 30)   # none of these drew
    got = se._seeded_ids(10, 4, np.random.default_rng(2))
    assert got.tolist() == sorted(np.random.default_rng(2).choice(10, size=4, replace=False).tolist())
    assert len(set(got.tolist())) == 4


P_PROTOT = HALF


P_LLAMA = [[0.25, 0.5, 0.25], [0.25, 0.25, 0.5], [0.5, 0.25, 0.25]]     # favours the next token cyclically


def _stand_ins(monkeypatch, context: int, n_docs: int, wiki_blocks: int, sources):
    """Validation stream: n_docs documents of context - 1 tokens (1s and 2s) + end-of-text, so block i
    is document i; WikiText-2: wiki_blocks blocks of seeded tokens. Committed: protot-x (a ProtoT,
    final) and llama-x (in-progress); usage recorded instead of run."""
    from compendium import data
    from protot.train import pretrained

    eos = tk.eos_id()
    assert eos == 0
    rng = np.random.default_rng(7)
    docs = [np.r_[rng.integers(1, 3, context - 1), eos] for _ in range(n_docs)]
    val = np.concatenate(docs).astype(np.uint16)
    wiki = rng.integers(0, 3, wiki_blocks * context + 3).astype(np.uint16)
    streams = {"validation": val, "wikitext2-test": wiki}
    read = []
    monkeypatch.setattr(packing, "token_stream", lambda split, lang="en": read.append(split) or streams[split])
    monkeypatch.setattr(data, "load_corpus", lambda split, lang: {"source": list(sources)})
    models = {"protot-x": _Bigram(P_PROTOT, "protot"), "llama-x": _Bigram(P_LLAMA, None)}   # llama-x: no model_type
    mans = {"protot-x": {"arch": "protot", "status": "final"}, "llama-x": {"arch": "llama", "status": "in-progress"}}
    loaded, used = [], []
    monkeypatch.setattr(pretrained, "available", lambda: ["llama-x", "protot-x", "spare-x"])
    monkeypatch.setattr(pretrained, "manifest", lambda n: mans[n])
    monkeypatch.setattr(pretrained, "load", lambda n, device="cpu": loaded.append((n, device)) or SimpleNamespace(model=models[n]))

    def fake_usage(model, blocks):
        used.append((model, blocks))
        return pd.DataFrame({"layer": [0], "effective": [1.5]})

    monkeypatch.setattr(se, "usage", fake_usage)
    boots = []
    for fn in ("per_source", "gaps", "first_half_costs"):
        def spy(*a, _real=getattr(se, fn), _name=fn, **kw):  # noqa: B008  (bound per function, on purpose)
            boots.append((_name, kw))
            return _real(*a, **kw)
        monkeypatch.setattr(se, fn, spy)
    return val, wiki, models, loaded, used, read, boots


def test_compare_committed_with_its_defaults(monkeypatch):
    """context 256, every block, seed 0, 2000 resamples, every WikiText-2 block, 256 context blocks, 64
    usage blocks: 300 documents of one block each (200 textbooks, 60 brown, 40 news)."""
    sources = ["openstax"] * 200 + ["brown"] * 60 + ["abc"] * 40
    val, wiki, models, loaded, used, read, _ = _stand_ins(monkeypatch, 256, 300, 5, sources)
    import time

    start = time.perf_counter()
    c = se.compare_committed(["protot-x", "mamba-x", "llama-x"])
    wall = time.perf_counter() - start
    assert read == ["validation", "wikitext2-test"]                  # each stream read once
    assert loaded == [("protot-x", "cpu"), ("llama-x", "cpu")]
    assert c.manifests == {"protot-x": {"arch": "protot", "status": "final"}, "mamba-x": None,
                           "llama-x": {"arch": "llama", "status": "in-progress"}}
    groups = np.array(["textbooks"] * 200 + ["brown"] * 60 + ["news and speeches"] * 40)
    assert c.ids.tolist() == list(range(300)) and c.groups.tolist() == groups.tolist()
    blocks = val.reshape(300, 256).astype(int)
    want = {n: np.array([_bigram_nll(P, b) for b in blocks]) for n, P in (("protot-x", P_PROTOT), ("llama-x", P_LLAMA))}
    assert list(c.nll) == ["protot-x", "llama-x"]
    for n in want:
        np.testing.assert_allclose(c.nll[n], want[n], rtol=0, atol=1e-6)
    # seconds per block: the time of block_nll over the 300 blocks, a part of the whole call, / 300
    assert set(c.seconds_per_block) == {"protot-x", "llama-x"}
    assert all(0 < s * 300 < wall for s in c.seconds_per_block.values())
    assert sum(c.seconds_per_block.values()) * 300 < wall
    t = c.tables
    labels = [("protot-x", "protot", "final"), ("llama-x", "llama", "in-progress")]
    for k in ("per_source", "gaps", "wikitext2", "wikitext2_gaps", "context_use", "usage"):
        assert t[k].index.tolist() == list(range(len(t[k]))), k           # one index over the models
    ps = t["per_source"]
    assert ps[["model", "arch", "status"]].drop_duplicates().values.tolist() == [list(x) for x in labels]
    assert ps.source.tolist() == ["all", "brown", "news and speeches", "textbooks"] * 2
    ref = se.per_source(c.nll["protot-x"], groups, n_boot=2000, seed=0)
    pd.testing.assert_frame_equal(ps.iloc[:4].drop(columns=["model", "arch", "status"]).reset_index(drop=True), ref)
    # WikiText-2: 5 whole blocks of 256, one row per model
    wb = wiki[:5 * 256].reshape(5, 256).astype(int)
    w = t["wikitext2"]
    assert w.source.tolist() == ["wikitext2"] * 2 and w.blocks.tolist() == [5, 5] and w.model.tolist() == ["protot-x", "llama-x"]
    assert w.nll.tolist() == pytest.approx([np.mean([_bigram_nll(P, b) for b in wb]) for P in (P_PROTOT, P_LLAMA)], abs=1e-6)
    lo, hi = stats.bootstrap_mean_ci(np.array([_bigram_nll(P_LLAMA, b) for b in wb]), n_boot=2000, seed=0)
    assert (w.ppl_low.iloc[1], w.ppl_high.iloc[1]) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-6)
    # context use on 256 seeded validation blocks, usage on 64: the generator of seed 0 draws them in turn
    rng = np.random.default_rng(0)
    ctx = np.sort(rng.choice(300, size=256, replace=False))
    use = np.sort(rng.choice(300, size=64, replace=False))
    cu = t["context_use"]
    assert (cu.blocks == 256).all() and cu.model.tolist() == ["protot-x"] * 3 + ["llama-x"] * 3
    bigram_ctx = se.first_half_costs(models["protot-x"], packing.gather(val, ctx, 256), seed=0, n_boot=2000)
    pd.testing.assert_frame_equal(cu.iloc[:3].drop(columns=["model", "arch", "status"]).reset_index(drop=True), bigram_ctx)
    assert len(used) == 1 and used[0][0] is models["protot-x"]
    assert torch.equal(used[0][1], packing.gather(val, use, 256))
    assert t["usage"].to_dict("list") == {"layer": [0], "effective": [1.5], "model": ["protot-x"], "arch": ["protot"],
                                          "status": ["final"]}
    # gaps: the first name minus each later one, whatever its status
    gp = t["gaps"]
    assert gp.source.tolist() == ["all", "brown", "news and speeches", "textbooks"]
    assert (gp.model == "protot-x").all() and (gp.against == "llama-x").all() and (gp.against_status == "in-progress").all()
    pd.testing.assert_frame_equal(gp.drop(columns=["model", "against", "against_status"]),
                                  se.gaps(want["protot-x"], want["llama-x"], groups, n_boot=2000, seed=0), atol=1e-6)
    wg = t["wikitext2_gaps"]
    assert wg.source.tolist() == ["wikitext2"] and wg.blocks.tolist() == [5]
    assert wg[["model", "against", "against_status"]].values.tolist() == [["protot-x", "llama-x", "in-progress"]]


def test_compare_committed_with_chosen_sizes(monkeypatch):
    sources = ["openstax"] * 6 + ["state_union"] * 4 + ["brown"] * 2
    val, wiki, models, loaded, used, _, boots = _stand_ins(monkeypatch, 8, 12, 9, sources)
    c = se.compare_committed(["llama-x", "protot-x"], context=8, blocks=6, seed=3, n_boot=40, wiki_blocks=4,
                             context_blocks=5, usage_blocks=3, device="meta")
    assert loaded == [("llama-x", "meta"), ("protot-x", "meta")]
    # every interval of every table: 40 resamples of seed 3 (per source and WikiText-2 for each model,
    # context use for each, gaps on both)
    assert sorted(n for n, _ in boots) == ["first_half_costs"] * 2 + ["gaps"] * 2 + ["per_source"] * 4
    assert all(kw == {"n_boot": 40, "seed": 3} for _, kw in boots)
    groups = np.array(["textbooks"] * 6 + ["news and speeches"] * 4 + ["brown"] * 2)
    ids = se.stratified_blocks(groups, 6, seed=3)
    assert c.ids.tolist() == ids.tolist() and c.groups.tolist() == groups[ids].tolist()
    # 6 of 12: brown 1, news 2, textbooks 3
    assert sorted(c.groups.tolist()) == ["brown"] + ["news and speeches"] * 2 + ["textbooks"] * 3
    blocks = val.reshape(12, 8).astype(int)
    np.testing.assert_allclose(c.nll["llama-x"], [_bigram_nll(P_LLAMA, blocks[i]) for i in ids], atol=1e-6)
    rng = np.random.default_rng(3)
    wiki_ids = np.sort(rng.choice(9, size=4, replace=False))
    ctx = np.sort(rng.choice(12, size=5, replace=False))
    use = np.sort(rng.choice(12, size=3, replace=False))
    wb = wiki[:72].reshape(9, 8).astype(int)
    w = c.tables["wikitext2"].set_index("model")
    assert w.loc["protot-x", "nll"] == pytest.approx(np.mean([_bigram_nll(P_PROTOT, wb[i]) for i in wiki_ids]), abs=1e-6)
    assert (w.blocks == 4).all()
    assert (c.tables["context_use"].blocks == 5).all()
    pd.testing.assert_frame_equal(
        c.tables["context_use"].iloc[3:].drop(columns=["model", "arch", "status"]).reset_index(drop=True),
        se.first_half_costs(models["protot-x"], packing.gather(val, ctx, 8), seed=3, n_boot=40))
    assert torch.equal(used[0][1], packing.gather(val, use, 8))
    # the per-source table of the seeded sample, 40 resamples of seed 3
    pd.testing.assert_frame_equal(
        c.tables["per_source"].iloc[:4].drop(columns=["model", "arch", "status"]).reset_index(drop=True),
        se.per_source(c.nll["llama-x"], groups[ids], n_boot=40, seed=3))
    g = c.tables["gaps"]
    assert (g.model == "llama-x").all() and (g.against == "protot-x").all() and (g.against_status == "final").all()
    wg = c.tables["wikitext2_gaps"]
    lo, hi = stats.paired_bootstrap_ci(
        [_bigram_nll(P_LLAMA, wb[i]) for i in wiki_ids], [_bigram_nll(P_PROTOT, wb[i]) for i in wiki_ids], n_boot=40, seed=3)
    assert (wg.gap_low.iloc[0], wg.gap_high.iloc[0]) == pytest.approx((lo, hi), abs=1e-6)


def test_compare_committed_without_a_committed_first_name_has_no_gaps(monkeypatch):
    sources = ["openstax"] * 4
    _stand_ins(monkeypatch, 8, 4, 2, sources)
    c = se.compare_committed(["mamba-x", "protot-x", "llama-x"], context=8, n_boot=20, context_blocks=2, usage_blocks=2)
    assert list(c.nll) == ["protot-x", "llama-x"]
    assert c.tables["gaps"].empty and c.tables["wikitext2_gaps"].empty and len(c.tables["per_source"]) == 4
    none = se.compare_committed([], context=8, n_boot=20)
    assert none.nll == {} and none.manifests == {} and none.seconds_per_block == {}
    assert list(none.tables) == ["per_source", "gaps", "wikitext2", "wikitext2_gaps", "context_use", "usage"]
    assert all(isinstance(v, pd.DataFrame) and v.empty for v in none.tables.values())


# --------------------------------------------------------------------------- claim protot/ppl-ranking
def _man(arch, status="final", **changes):
    m = {"arch": arch, "status": status, "steps": 10, "planned_steps": 10, "tokens_seen": 1000,
         "eval": {"validation": {"ppl": 9.0}}, "data": {"data_key": "k"}, "tokenizer": {"sha256": "t"},
         "parameters": {"non_embedding": 100}, "train_config": {"arch": arch, "lr": 1e-3}}
    m.update(changes)
    return m


def _all_four():
    return {f"{a}-x": _man(a) for a in se.RANKED}


GROUPS4 = np.array(["brown", "textbooks", "brown", "brown"])


NLL4 = {"protot-x": np.array([2.0, 3.0, 4.0, 5.0]),       # mean 3.5
        "llama-x": np.array([1.9, 2.9, 3.9, 4.9]),        # gap +0.1 on every block
        "mamba-x": np.array([2.5, 2.5, 4.5, 4.5]),        # gaps -0.5, +0.5, -0.5, +0.5: mean 0
        "deltanet-x": np.array([2.0, 3.0, 4.0, 5.0])}     # gap 0


def test_measure_ranking_values_evidence_tables_and_note_by_hand():
    m = se.measure_ranking(NLL4, _all_four(), list(GROUPS4), 100.0, n_boot=60, seed=2, tables={"extra": 1},
                           evidence={"source": "test"}, config={"context": 4}, note="by hand")
    v = m.values
    assert m.claim == "protot/ppl-ranking" and m.config == {"context": 4}
    assert v["nll_gap_llama"] == pytest.approx(0.1, abs=1e-12)
    assert v["nll_gap_llama_ci_low"] == pytest.approx(0.1, abs=1e-12) and v["nll_gap_llama_ci_high"] == pytest.approx(0.1, abs=1e-12)
    assert v["nll_gap_mamba"] == 0.0 and v["nll_gap_deltanet"] == 0.0
    lo, hi = stats.paired_bootstrap_ci(NLL4["protot-x"], NLL4["mamba-x"], n_boot=60, seed=2)
    assert (v["nll_gap_mamba_ci_low"], v["nll_gap_mamba_ci_high"]) == (lo, hi)
    assert v["nll_gap_deltanet_ci_low"] == v["nll_gap_deltanet_ci_high"] == 0.0
    # the worst perplexity: mamba and protot both have mean 3.5, llama 3.4 -> exp(3.5) / 100
    assert v["worst_ppl_over_unigram"] == pytest.approx(math.exp(3.5) / 100.0, rel=1e-12)
    assert v["models_final"] is True and v["blocks"] == 4
    assert list(v) == ["nll_gap_llama", "nll_gap_llama_ci_low", "nll_gap_llama_ci_high", "nll_gap_mamba",
                       "nll_gap_mamba_ci_low", "nll_gap_mamba_ci_high", "nll_gap_deltanet", "nll_gap_deltanet_ci_low",
                       "nll_gap_deltanet_ci_high", "models_final", "worst_ppl_over_unigram", "blocks"]
    ev = m.evidence
    assert ev["models"] == {n: "final" for n in NLL4} and ev["not final or not at equal budget"] == []
    assert ev["ppl over the blocks"] == pytest.approx({"protot-x": math.exp(3.5), "llama-x": math.exp(3.4),
                                                       "mamba-x": math.exp(3.5), "deltanet-x": math.exp(3.5)}, rel=1e-12)
    assert ev["unigram_ppl"] == 100.0 and ev["source"] == "test"
    assert ev["ppl ratio ProtoT / other"] == pytest.approx({"llama": math.exp(0.1), "mamba": 1.0, "deltanet": 1.0}, rel=1e-12)
    assert ev["blocks per source"] == {"brown": 3, "textbooks": 1}
    assert list(m.tables) == ["extra", "ranking_gaps"] and m.tables["extra"] == 1
    rg = m.tables["ranking_gaps"]
    assert rg.index.tolist() == list(range(9))                         # one index over the three gaps
    assert rg.against.tolist() == ["llama-x"] * 3 + ["mamba-x"] * 3 + ["deltanet-x"] * 3 and (rg.model == "protot-x").all()
    assert rg.source.tolist() == ["all", "brown", "textbooks"] * 3
    # mamba on brown: (-0.5 - 0.5 + 0.5) / 3 = -1/6; on textbooks +0.5
    assert rg.gap_nats.iloc[4] == pytest.approx(-1 / 6, abs=1e-12) and rg.gap_nats.iloc[5] == pytest.approx(0.5, abs=1e-12)
    assert m.note == ("mean NLL gap per token, ProtoT minus each model (nats; 95% paired bootstrap interval over 4 "
                      f"validation blocks): llama +0.1000 [+0.1000, +0.1000]; mamba +0.0000 [{lo:+.4f}, {hi:+.4f}]; "
                      "deltanet +0.0000 [+0.0000, +0.0000]; by hand")
    # defaults: 2000 resamples of seed 0, no extra tables, evidence, config or note
    d = se.measure_ranking(NLL4, _all_four(), GROUPS4, 100.0)
    lo, hi = stats.paired_bootstrap_ci(NLL4["protot-x"], NLL4["mamba-x"], n_boot=2000, seed=0)
    assert (d.values["nll_gap_mamba_ci_low"], d.values["nll_gap_mamba_ci_high"]) == (lo, hi)
    assert d.config == {} and list(d.tables) == ["ranking_gaps"] and d.note.endswith(f"[{lo:+.4f}, {hi:+.4f}]; "
                                                                                       "deltanet +0.0000 [+0.0000, +0.0000]")
    assert set(d.evidence) == {"models", "not final or not at equal budget", "ppl over the blocks", "unigram_ppl",
                               "ppl ratio ProtoT / other", "blocks per source"}


def test_measure_ranking_draws_2000_resamples_of_seed_0_by_default():
    blocks = np.arange(1.0, 31.0)
    nll = {"protot-x": 3 + np.sqrt(blocks) / 5, "llama-x": 3 + np.cbrt(blocks) / 4,
           "mamba-x": 3 + np.log(blocks) / 3, "deltanet-x": 3 + np.sin(blocks) / 2}     # 30 spread blocks
    groups = ["brown"] * 30
    v = se.measure_ranking(nll, _all_four(), groups, 100.0).values
    for a in ("llama", "mamba", "deltanet"):
        lo, hi = stats.paired_bootstrap_ci(nll["protot-x"], nll[f"{a}-x"], n_boot=2000, seed=0)
        assert (v[f"nll_gap_{a}_ci_low"], v[f"nll_gap_{a}_ci_high"]) == (lo, hi), a
        assert (lo, hi) != stats.paired_bootstrap_ci(nll["protot-x"], nll[f"{a}-x"], n_boot=2000, seed=1)
        assert (lo, hi) != stats.paired_bootstrap_ci(nll["protot-x"], nll[f"{a}-x"], n_boot=2001, seed=0)
    g = se.measure_ranking(nll, _all_four(), groups, 100.0, n_boot=50, seed=7).values
    lo, hi = stats.paired_bootstrap_ci(nll["protot-x"], nll["mamba-x"], n_boot=50, seed=7)
    assert (g["nll_gap_mamba_ci_low"], g["nll_gap_mamba_ci_high"]) == (lo, hi)
    assert g["nll_gap_mamba"] == pytest.approx(float(np.mean(nll["protot-x"] - nll["mamba-x"])), abs=1e-15)


def test_measure_ranking_without_finals_names_what_is_missing():
    manifests = {"protot-x": _man("protot"), "llama-x": _man("llama", "in-progress"), "mamba-x": None,
                 "deltanet-x": _man("deltanet", "in-progress"), "deltanet-old": None}
    nll = {n: NLL4[n] for n in ("protot-x", "llama-x", "deltanet-x")}
    m = se.measure_ranking(nll, manifests, GROUPS4, 50.0, n_boot=20)
    v = m.values
    for a in ("llama", "mamba", "deltanet"):
        assert v[f"nll_gap_{a}"] is None and v[f"nll_gap_{a}_ci_low"] is None and v[f"nll_gap_{a}_ci_high"] is None
    # one final model: no budget comparison
    assert m.evidence["not final or not at equal budget"] == ["llama: no final model (llama-x is in-progress)",
                                                              "mamba: no final model committed",
                                                              "deltanet: no final model (deltanet-x is in-progress)"]
    assert v["models_final"] is False and "ranking_gaps" not in m.tables and m.evidence["ppl ratio ProtoT / other"] == {}
    assert m.evidence["models"] == {"protot-x": "final", "llama-x": "in-progress", "mamba-x": "not committed",
                                    "deltanet-x": "in-progress", "deltanet-old": "not committed"}
    assert v["worst_ppl_over_unigram"] == pytest.approx(math.exp(3.5) / 50.0, rel=1e-12)
    assert m.note == ("mean NLL gap per token, ProtoT minus each model (nats; 95% paired bootstrap interval over 4 "
                      "validation blocks): llama not measured; mamba not measured; deltanet not measured")


def test_measure_ranking_two_finals_at_unequal_budgets():
    manifests = {"protot-x": _man("protot"), "llama-x": _man("llama", tokens_seen=900)}
    nll = {n: NLL4[n] for n in manifests}
    m = se.measure_ranking(nll, manifests, GROUPS4, 50.0, n_boot=20)
    assert m.values["nll_gap_llama"] == pytest.approx(0.1, abs=1e-12) and m.values["nll_gap_mamba"] is None
    assert m.evidence["not final or not at equal budget"] == [
        "mamba: no final model committed", "deltanet: no final model committed",
        "tokens seen differ: {'protot-x': 1000, 'llama-x': 900}"]
    assert m.values["models_final"] is False
    # a final ProtoT missing: nothing is measured, though llama is final
    m2 = se.measure_ranking({"llama-x": NLL4["llama-x"]}, {"llama-x": _man("llama")}, GROUPS4, 50.0, n_boot=20)
    assert m2.values["nll_gap_llama"] is None
    assert m2.evidence["not final or not at equal budget"][0] == "protot: no final model committed"


def test_measure_ranking_refusals_in_full():
    four = _all_four()
    with _raises("measure_ranking: no committed model was measured"):
        se.measure_ranking({}, four, GROUPS4, 100.0)
    with _raises("measure_ranking: losses of ['gpt-x'], which the manifests do not list as committed"):
        se.measure_ranking({**NLL4, "gpt-x": NLL4["llama-x"]}, four, GROUPS4, 100.0)
    with _raises("measure_ranking: losses of ['mamba-x'], which the manifests do not list as committed"):
        se.measure_ranking(NLL4, {**four, "mamba-x": None}, GROUPS4, 100.0)
    with _raises("measure_ranking: block losses must cover the 4 blocks, got {'llama-x': 3}"):
        se.measure_ranking({**NLL4, "llama-x": NLL4["llama-x"][:3]}, four, GROUPS4, 100.0)
    for bad in (0.0, -1.0):
        with _raises(f"measure_ranking: the unigram perplexity must be positive, got {bad}"):
            se.measure_ranking(NLL4, four, GROUPS4, bad)
    # any positive perplexity is taken, below 1 too: exp(3.5) / 0.5
    assert se.measure_ranking(NLL4, four, GROUPS4, 0.5, n_boot=20).values["worst_ppl_over_unigram"] == pytest.approx(
        2 * math.exp(3.5), rel=1e-12)
    with _raises("measure_ranking: one committed model per architecture, got {'protot-x': 'protot', 'llama-x': "
                 "'llama', 'mamba-x': 'llama', 'deltanet-x': 'deltanet'}"):
        se.measure_ranking(NLL4, {**four, "mamba-x": _man("llama")}, GROUPS4, 100.0)
    with _raises("measure_ranking: final model(s) ['mamba-x'] were not measured"):
        se.measure_ranking({n: v for n, v in NLL4.items() if n != "mamba-x"}, four, GROUPS4, 100.0)
    # an unfinished model need not be measured
    m = se.measure_ranking({n: v for n, v in NLL4.items() if n != "mamba-x"},
                           {**four, "mamba-x": _man("mamba", "in-progress")}, GROUPS4, 100.0, n_boot=20)
    assert m.values["nll_gap_mamba"] is None and m.values["nll_gap_deltanet"] == 0.0
