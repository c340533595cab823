"""protot.labels, protot.ablation and protot.women on tiny random ProtoT models and planted gates:
the label-based selection of a prototype (a planted female prototype found, a label that needs its
words among the top tokens), strata and coordination contexts, the perplexity-change interval,
alive controls, the specificity and control margins, and the whole women measurement."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from protot import ablation, usage
from protot import concepts as C
from tests.protot.concepts_standins import T, _ids, _model, _plant_class, _stats_with


# -- a prototype found by its label -----------------------------------------------------------------------------
def _pair_stream(tokenizer, n, seed):
    """Random tokens with every word of the female pairs sprinkled in (together ~1 in 4 positions)."""
    from protot import ablation as A

    rng = np.random.default_rng(seed)
    s = rng.integers(1, 400, size=n)
    words = [C.token_id(tokenizer, w) for p in A.FEMALE_PAIRS for w in p]
    hits = rng.random(n) < 0.25
    s[hits] = rng.choice(words, size=int(hits.sum()))
    return s.astype(np.uint16)


@pytest.mark.parametrize("planted", ["female", "none"])
def test_label_selection_finds_a_planted_female_prototype(tokenizer, planted):
    """"female": prototype 3 of layer 0 takes the female words: selected and labelled. "none": a
    random model: no label earns the name."""
    from protot import ablation as A, labels

    m = _model(tokenizer.vocab_size, conv_layers=0, seed=1)
    female = [a for a, _ in A.FEMALE_PAIRS]
    if planted != "none":
        _plant_class(m, 3, [C.token_id(tokenizer, w) for w in female])
    stream = _pair_stream(tokenizer, 6000, 0)
    stats = C.collect_gates(m, C.sample_blocks(stream, 24, 32, seed=0))
    gates = labels.word_gates(m, tokenizer, stream, [w for p in A.FEMALE_PAIRS for w in p], windows=16, context=16)
    assert all(g["count"] == 16 for g in gates.values())
    scores = labels.label_scores(gates, A.FEMALE_PAIRS, usage.alive_mask(stats))
    assert len(scores) == 2 * 2 * 8 and scores.score.is_monotonic_decreasing
    sel = labels.select_by_label(scores, stats, gates, female, min_count=2)
    if planted == "female":
        assert (sel.layer, sel.prototype) == (0, 3) and sel.labelled, scores.head()
        assert sel.score > np.log(10) and sel.top_share == 1.0
    else:
        assert not sel.labelled, (sel.name, sel.score, sel.top_share)
    # the score recomputed by hand for the selected prototype and gate
    direct = np.mean([np.log(max(gates[a][sel.gate][sel.layer, sel.prototype], 1e-12)
                             / max(gates[b][sel.gate][sel.layer, sel.prototype], 1e-12)) for a, b in A.FEMALE_PAIRS])
    assert sel.score == pytest.approx(direct, rel=1e-12)
    # a dead prototype is never selected, however high its score
    alive = usage.alive_mask(stats).copy()
    alive[sel.layer, sel.prototype] = False
    other = labels.select_by_label(labels.label_scores(gates, A.FEMALE_PAIRS, alive), stats, gates, female, min_count=2)
    assert (other.layer, other.prototype) != (sel.layer, sel.prototype)


def test_a_label_needs_the_words_among_its_top_tokens():
    """A prototype that prefers female words to their matched words (score ln 6) but takes 40 other
    token types far more: the score alone would pass, the label (female words among its top-10
    tokens) does not; with the female words at the top, it does."""
    from protot import ablation as A, labels

    rng = np.random.default_rng(0)
    ids = rng.integers(1, 400, size=(20, 64))
    L, R = 1, 8
    g = np.full((L, 20, 64, R), 1.0 / R)
    g[0][ids <= 40] = 0.1 / (R - 1)
    g[0][ids <= 40, 3] = 0.9                             # P3 takes ids 1..40
    stats = _stats_with(g, ids, 400)
    gates = {}
    for a, b in A.FEMALE_PAIRS:
        for w, v in ((a, 0.3), (b, 0.05)):
            x = np.full((L, R), 1.0 / R)
            x[0, 3] = v
            gates[w] = {"write": x, "read": x, "count": 16}
    female = [a for a, _ in A.FEMALE_PAIRS]
    scores = labels.label_scores(gates, A.FEMALE_PAIRS)
    sel = labels.select_by_label(scores, stats, gates, female, min_count=2)
    assert (sel.layer, sel.prototype) == (0, 3) and sel.score == pytest.approx(np.log(6))
    assert sel.top_share == 0.0 and not sel.labelled
    for w in female:
        gates[w]["write"][0, 3] = 0.95                   # now above every other token type
    sel = labels.select_by_label(labels.label_scores(gates, A.FEMALE_PAIRS), stats, gates, female, min_count=2)
    assert sel.top_share == 1.0 and sel.labelled


# -- strata, coordination contexts, perplexity interval, controls ----------------------------------------------
def test_stratify_hand_written_contexts(tokenizer):
    from protot import ablation as A

    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)   # noqa: E731
    texts = {"coordination": ["The study followed both men and", "Doctors asked whether girls or",
                              "Prices depend on supply and"],
             "topical": ["The mother said that many of the", "She wrote a letter to other", "His team and the"],
             "rest": ["The committee voted to support the", "Salt and pepper were sold at the", "In 1990, a law or"
                      " rule for"]}
    rows = [(enc(t), want) for want, ts in texts.items() for t in ts]
    T = max(len(r) for r, _ in rows)
    pad = C.token_id(tokenizer, " the")
    ctx = np.array([[pad] * (T - len(r)) + r for r, _ in rows])     # left-padded with a neutral word
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    gender = A.word_ids(tokenizer, [a for a, _ in A.FEMALE_PAIRS] + list(A.MALE_WORDS), capitalised=True)
    assert {C.token_id(tokenizer, w) for w in (" She", "She", " His")} <= set(gender)
    got = A.stratify(ctx, coord, gender)
    assert list(got) == [want for _, want in rows]
    lower_only = A.word_ids(tokenizer, [a for a, _ in A.FEMALE_PAIRS] + list(A.MALE_WORDS))
    assert list(A.stratify(ctx, coord, lower_only))[4:6] == ["rest", "rest"]     # "She ...", "His ..." need the capitals
    with pytest.raises(ValueError, match=r"\(n, T\)"):
        A.stratify(ctx[0], coord, gender)


def test_coordination_contexts(tokenizer):
    from protot import ablation as A

    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)   # noqa: E731
    s = np.array(enc("We need supply and demand, cats or dogs, and 42 more, men and women."), dtype=np.uint16)
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    ctx, nxt = A.coordination_contexts(s, tokenizer, 3, 10, coordinator_ids=coord,
                                       exclude_ids=[C.token_id(tokenizer, " women")])
    assert [tokenizer.decode([int(t)]) for t in nxt] == [" demand", " dogs"]      # not " 42", not " women"
    assert all(int(c[-1]) in coord for c in ctx) and ctx.shape == (2, 3)
    assert tokenizer.decode(ctx[0].tolist()).endswith("supply and")


def test_ppl_change_interval_matches_direct_perplexity(tokenizer, women):
    from protot import ablation as A

    m = _model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():
        for mixer in m.mixers():
            mixer.alpha.fill_(1.0)
    blocks = _ids(10, women, seed=4)
    nll0 = A.block_nll(m, blocks, batch_size=3)
    with torch.no_grad():
        logits = m(blocks).logits[:, :-1].double()
        direct = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), blocks[:, 1:].reshape(-1),
                                                   reduction="sum")
    assert nll0.sum() == pytest.approx(float(direct), rel=1e-10)
    with ablation.edited(m, ablation.Edit("mask", 1, 2)):
        nll1 = A.block_nll(m, blocks)
    ch, lo, hi = A.ppl_change_interval(nll0, nll1, T - 1, n_boot=500)
    ppl0, ppl1 = np.exp(nll0.sum() / (10 * (T - 1))), np.exp(nll1.sum() / (10 * (T - 1)))
    assert ch == pytest.approx(100 * (ppl1 / ppl0 - 1), rel=1e-9) and ch != 0
    assert lo <= ch <= hi and lo < hi
    assert A.ppl_change_interval(nll0, nll0, T - 1, n_boot=50) == (0.0, 0.0, 0.0)


def test_alive_controls_exclude_dead_prototypes():
    from protot import ablation as A

    alive = np.ones((3, 8), bool)
    alive[1, [0, 2, 5, 6]] = False
    assert A.alive_controls(alive, 1, 3, None) == [1, 4, 7]
    assert A.alive_controls(alive, 1, 1, None) == [3, 4, 7]
    got = A.alive_controls(alive, 2, 0, 4, seed=1)
    assert len(got) == 4 and 0 not in got and got == sorted(got) and got == A.alive_controls(alive, 2, 0, 4, seed=1)
    assert A.alive_controls(np.zeros((1, 4), bool), 0, 1, 8) == []


def test_edit_margins_by_hand():
    """Specificity: the women contexts and each checked set resampled on their own; controls: on the
    women contexts' draw, shared by the edit and every control; unchecked sets play no part."""
    from protot import ablation as A

    rng = np.random.default_rng(0)
    p0 = rng.uniform(0.05, 0.2, 12)
    p1 = p0 * rng.uniform(0.5, 0.9, 12)                               # the edit: a drop of ~30%
    q0, r0, g0 = rng.uniform(0.05, 0.2, 9), rng.uniform(0.05, 0.2, 7), rng.uniform(0.05, 0.2, 5)
    q1, r1, g1 = q0 * rng.uniform(0.8, 1.1, 9), r0 * rng.uniform(0.85, 1.0, 7), g0 * 0.01
    c1, c2 = p0 * rng.uniform(0.9, 1.05, 12), p0 * rng.uniform(0.7, 1.0, 12)
    judged = {"probs": {"intact": p0, "edited": p1, "others": {"a": (q0, q1), "b": (r0, r1), "g": (g0, g1)},
                        "controls": {3: c1, 5: c2}}}
    m = A.edit_margins(judged, ["a", "b"], n_boot=300, seed=5)

    def drop(x0, x1):
        return 100 * (1 - x1.mean(-1) / x0.mean(-1))

    assert m["specificity_margin"] == pytest.approx(drop(p0, p1) - max(drop(q0, q1), drop(r0, r1)), rel=1e-12)
    assert m["control_margin"] == pytest.approx(drop(p0, p1) - max(drop(p0, c1), drop(p0, c2)), rel=1e-12)
    g = np.random.default_rng(5)
    i, ia, ib = (g.integers(0, n, size=(300, n)) for n in (12, 9, 7))
    spec = drop(p0[i], p1[i]) - np.maximum(drop(q0[ia], q1[ia]), drop(r0[ib], r1[ib]))
    want = np.quantile(spec, [0.025, 0.975])
    assert (m["specificity_margin_ci_low"], m["specificity_margin_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    i = np.random.default_rng(5).integers(0, 12, size=(300, 12))
    ctrl = drop(p0[i], p1[i]) - np.maximum(drop(p0[i], c1[i]), drop(p0[i], c2[i]))
    want = np.quantile(ctrl, [0.025, 0.975])
    assert (m["control_margin_ci_low"], m["control_margin_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    none = A.edit_margins({"probs": {**judged["probs"], "controls": {}}}, ["a"], n_boot=50)
    assert np.isnan([none["control_margin"], none["control_margin_ci_low"], none["control_margin_ci_high"]]).all()
    with pytest.raises(ValueError, match=r"checked context sets among \['a', 'b', 'g'\], got \['x'\]"):
        A.edit_margins(judged, ["x"])
    with pytest.raises(ValueError, match="checked context sets"):
        A.edit_margins(judged, [])


def test_measure_women_on_a_planted_model(tokenizer, women):
    """The whole women measurement on a tiny model with a planted female prototype (layer 0, P3) and
    two dead prototypes in the same layer: the label finds P3, the dead ones are never controls (of
    p(women) or of perplexity), every registered quantity is there, and the numbers agree with
    direct recomputation."""
    from compendium import claims
    from protot import ablation as A
    from protot import women as W

    m = _model(tokenizer.vocab_size, conv_layers=0, seed=2, shared_keys=True)
    female_ids = [C.token_id(tokenizer, w) for w, _ in A.FEMALE_PAIRS]
    mixer = m.layers[0].mixer
    with torch.no_grad():
        for mx in m.mixers():
            mx.alpha.fill_(1.0)
        E = m.get_input_embeddings().weight
        E[:, :2] = 0.0
        E[:, 1] = 0.5                                  # a direction every token shares
        for t in female_ids:
            E[t] = 0.0
            E[t, 0] = 1.0
        mixer.key_proj.weight.copy_(torch.eye(mixer.key_proj.weight.shape[0]))
        mixer.prototypes[:, :2] = 0.0
        mixer.prototypes[3] = 0.0
        mixer.prototypes[3, 0] = 12.0
        mixer.prototypes[[5, 6], 1] = -200.0           # dead: a large negative logit for every token
    extra = [C.token_id(tokenizer, w) for w in (" and", " or", " people", " children")]

    def stream(seed):
        s = _pair_stream(tokenizer, 8000, seed).astype(np.int64)
        hits = np.random.default_rng(seed + 10).random(len(s)) < 0.08
        s[hits] = np.random.default_rng(seed + 20).choice(extra, size=int(hits.sum()))
        return s.astype(np.uint16)

    train, val = stream(1), stream(2)
    kw = dict(label_blocks=24, label_context=32, word_windows=16, word_context=16, min_count=2, select_windows=12,
              select_context=16, context=16, max_contexts=40, other_contexts=8, coordination_n=8, gender_contexts=8,
              n_controls=None, reinit_seeds=(0,), ppl_blocks=6, ppl_context=16, effect_context=16, short=4,
              n_boot=200, seed=0)
    before = {n: p.detach().clone() for n, p in m.state_dict().items()}
    a, p, s = W.measure_women(m, tokenizer, train, val, **kw)
    assert a.evidence["prototype"] == "L0 P3" and a.values["labelled_female"] is True
    dead = a.tables["dead_prototypes"]
    assert {(0, 5), (0, 6)} <= set(zip(dead.layer, dead.prototype)) and (0, 3) not in set(zip(dead.layer, dead.prototype))
    ctrl = a.tables["women_controls"]
    alive_l0 = {j for j in range(8) if (0, j) not in set(zip(dead.layer, dead.prototype))}
    assert set(ctrl.prototype) == alive_l0 - {3} and not {5, 6} & set(ctrl.prototype) and (ctrl.layer == 0).all()
    ppl = p.tables["women_ppl"]
    ppl_ctrl = ppl[ppl.edit.str.startswith("control")]
    assert set(ppl_ctrl.prototype) == set(ctrl.prototype) and (ppl_ctrl.layer == 0).all()
    assert p.values["ppl_blocks"] == 6 and p.values["ppl_ci_low_pct"] <= p.values["ppl_change_pct"] <= p.values["ppl_ci_high_pct"]
    blocks = C.sample_blocks(val, 6, 16, seed=0)                 # the perplexity change, recomputed directly
    with torch.no_grad():
        def ppl_of():
            logits = m(blocks).logits[:, :-1].double()
            return float(torch.exp(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                     blocks[:, 1:].reshape(-1))))
        ppl0 = ppl_of()
        with ablation.edited(m, ablation.Edit("mask", 0, 3)):
            ppl1 = ppl_of()
    assert p.values["ppl_change_pct"] == pytest.approx(100 * (ppl1 / ppl0 - 1), rel=1e-9)
    assert p.evidence["ppl_intact"] == pytest.approx(ppl0, rel=1e-9)
    # the drop and its strata, recomputed directly
    ctx = C.windows_at(val, women, 16, where="before", max_windows=40, seed=0)
    q0 = ablation.target_probs(m, ctx, women)
    with ablation.edited(m, ablation.Edit("mask", 0, 3)):
        q1 = ablation.target_probs(m, ctx, women)
    assert a.values["drop_pct"] == pytest.approx(ablation.drop_pct(q0, q1), abs=1e-9)
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    is_coord = np.isin(ctx[:, -1].numpy(), coord)
    assert a.values["coordination_contexts"] == int(is_coord.sum()) > 0
    assert a.values["coordination_drop_pct"] == pytest.approx(ablation.drop_pct(q0[is_coord], q1[is_coord]), abs=1e-9)
    assert sum(a.values[f"{st}_contexts"] for st in A.STRATA) == len(ctx)
    assert a.values["control_margin"] == pytest.approx(a.values["drop_pct"] - ctrl.drop_pct.max())
    spec = a.tables["women_specificity"].set_index("word")
    checked = [" people", " children", "gender-free coordination"]
    assert a.values["specificity_margin"] == pytest.approx(a.values["drop_pct"] - spec.loc[checked, "drop_pct"].max())
    for name in ("specificity_margin", "control_margin"):          # the margins' intervals (edit_margins)
        assert a.values[f"{name}_ci_low"] <= a.values[name] <= a.values[f"{name}_ci_high"]
    assert a.values["n_contexts"] == len(ctx) == s.values["n_contexts"]
    assert (p.values["target_vs_controls"], p.values["target_vs_controls_ci_low"], p.values["target_vs_controls_ci_high"]) == \
        (a.values["control_margin"], a.values["control_margin_ci_low"], a.values["control_margin_ci_high"])
    assert list(spec.loc[list(A.GENDER_CHECK_WORDS), "split"]) == ["train"] * 3
    # the causal scan scanned everything; its winner is the largest training drop
    scan = s.tables["women_selection_scan"]
    assert len(scan) == 2 * 8 and scan.drop_pct.is_monotonic_decreasing
    assert s.evidence["prototype"] == f"L{scan.layer[0]} P{scan.prototype[0]}"
    assert s.evidence["class"] in ("female", "coordination", "other")
    for meas in (a, p, s):                      # every registered quantity, of the right type
        claim = claims.get_claim(meas.claim)
        assert set(claim.quantities) <= set(meas.values), meas.claim
        assert claims.evaluate(claim, meas.values, "cpu")[0] in claims.VERDICTS
    unlabelled = {**a.values, "labelled_female": False, "context_effect_nats": 1.0}
    status, _, _, reason = claims.evaluate(claims.get_claim(a.claim), unlabelled, "cpu")
    assert status == claims.INCONCLUSIVE and "labelled-female" in reason
    for n, t in m.state_dict().items():
        assert torch.equal(t, before[n]), n


def test_women_settings_come_from_the_registered_protocol():
    from compendium import claims
    from protot import women as A

    cpu = A.women_settings(claims.protocol("protot/women-prototype-ablation", "cpu"), seed=3)
    assert cpu["reinit_seeds"] == (3,) and cpu["n_controls"] == 8 and "model" not in cpu and "word" not in cpu
    paper = A.women_settings(claims.protocol("protot/women-prototype-ablation", "paper"), seed=3)
    assert paper["reinit_seeds"] == (3, 4, 5, 6, 7) and paper["n_controls"] is None      # "all"
    smoke = A.women_settings(claims.protocol("protot/women-prototype-ablation", "smoke"), seed=0)
    assert smoke["select_windows"] < cpu["select_windows"] and smoke["context"] == cpu["context"]
    with pytest.raises(ValueError, match="unknown setting 'windows'"):
        A.women_settings({"windows": 3}, seed=0)
    with pytest.raises(ValueError, match="n_reinit must be a positive whole number"):
        A.women_settings({"n_reinit": 0}, seed=0)
