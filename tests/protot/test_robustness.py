"""protot.robustness: the written rules (each produces its intended edit on hand-written sentences
and refuses sentences it cannot edit), sentences and pairs, the four metrics by hand, scoring on
tiny random models, and the comparison with the authors' tables on planted orders and on nulls
(shuffled type labels, type-blind edits) that must fail the order check."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from compendium import claims, paths
from protot import robustness as rb
from protot.models import build_model
from protot.train import tokenizer as tk

AUTHORS = paths.papers_dir() / "protot" / "authors_robustness"
CLAIM = "protot/robustness-jsd"


# -- rules: the intended edit on hand-written sentences --------------------------------------------------
# (type, sentence, the set of acceptable edited sentences)
CASES = [
    ("abbreviation", "She moved to the United States in the spring.", {"She moved to the U.S. in the spring."}),
    ("abbreviation", "Prices rose by 10 percent last year.", {"Prices rose by 10% last year."}),
    ("abbreviation", "We met Doctor Smith at noon.", {"We met Dr. Smith at noon."}),
    ("contraction", "They do not know the answer.", {"They don't know the answer."}),
    ("contraction", "I'm sure the plan works.", {"I am sure the plan works."}),
    ("morphology", "They learned the rules quickly.", {"They learnt the rules quickly."}),
    ("morphology", "The second design is more simple overall.", {"The second design is simpler overall."}),
    ("morphology", "The geographic spread was wide.", {"The geographical spread was wide."}),
    ("punctuation", "However the result was clear.", {"However, the result was clear."}),
    ("punctuation", "We bought apples, pears and plums today.",
     {"We bought apples, pears, and plums today.", "We bought apples pears and plums today."}),
    ("spelling", "The color of the sky changes.", {"The colour of the sky changes."}),
    ("spelling", "They organize the files weekly.", {"They organise the files weekly."}),
    ("synonym", "The students often read at night.",
     {"The pupils often read at night.", "The students frequently read at night."}),
    ("gender", "The king spoke first.", {"The queen spoke first."}),
    ("gender", "He finished it early.", {"She finished it early."}),
    ("negation", "The water is warm today.", {"The water is not warm today."}),
    ("negation", "The water was not warm today.", {"The water was warm today."}),
    ("negation", "You cannot see it from here.", {"You can see it from here."}),
    ("number", "This method is simple to use.", {"These methods are simple to use."}),
    ("number", "These tables are wide enough.", {"This table is wide enough."}),
    ("number", "This study is recent work.", {"These studies are recent work."}),
    ("number", "Those boxes were heavy today.", {"That box was heavy today."}),
    ("number", "These cities are large now.", {"This city is large now."}),
    ("number", "We studied these cases, one by one.", {"We studied this case, one by one."}),
]
PLAIN = "Birds fly south every winter."     # no site of any word rule


@pytest.mark.parametrize("edit_type,sentence,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_makes_the_intended_edit(edit_type, sentence, expected):
    got = {rb.apply_edit(sentence, edit_type, seed).text for seed in range(12)}
    assert got == expected, f"{edit_type} on {sentence!r}: {got}"


@pytest.mark.parametrize("edit_type", [t for t in rb.EDIT_TYPES if t not in ("typo", "punctuation")])
def test_rules_refuse_sentences_without_a_site(edit_type):
    assert rb.apply_edit(PLAIN, edit_type, 0) is None
    assert rb.sites(PLAIN, edit_type) == []


@pytest.mark.parametrize("edit_type,sentence", [
    ("abbreviation", "The meeting took place in the United States."),   # "U.S." would swallow the final period
    ("contraction", "It's been a long day."),                          # 's = has: not expanded
    ("number", "This is the end of it."),                              # "is" is not a noun
    ("number", "This analysis is long."),                              # irregular / uncountable nouns refused
    ("negation", "I ate apples in May today."),                        # no auxiliary
    ("gender", "Her answer was right."),                               # her -> him/his is ambiguous
    ("punctuation", "Birds fly south."),
])
def test_rules_refuse_what_they_cannot_edit(edit_type, sentence):
    assert rb.apply_edit(sentence, edit_type, 0) is None, rb.apply_edit(sentence, edit_type, 0)


def test_typo_changes_one_word_by_one_operation_keeping_its_first_letter():
    for seed in range(40):
        e = rb.apply_edit(PLAIN, "typo", seed)
        w, v = e.before, e.after
        assert e.text == PLAIN[:e.start] + v + PLAIN[e.end:] and PLAIN[e.start:e.end] == w
        assert len(w) >= 4 and v[0] == w[0] and v != w
        op = e.rule.split(": ")[1]
        if op == "swap":
            d = [i for i in range(len(w)) if w[i] != v[i]]
            assert len(v) == len(w) and len(d) == 2 and d[1] == d[0] + 1 and w[d[0]] == v[d[1]] and w[d[1]] == v[d[0]]
        elif op == "drop":
            assert len(v) == len(w) - 1 and any(w[:i] + w[i + 1:] == v for i in range(1, len(w)))
        else:
            assert op == "duplicate" and len(v) == len(w) + 1 and any(w[:i + 1] + w[i:] == v for i in range(1, len(w)))


def test_edits_keep_the_final_mark_and_record_the_replacement():
    sentence = "For example, the students often organize the color plans in the United States today."
    for t in rb.EDIT_TYPES:
        for seed in range(8):
            e = rb.apply_edit(sentence, t, seed)
            if e is None:
                continue
            assert e.text.endswith(".") and not e.text.endswith("..") and e.end <= rb.final_mark(sentence)
            assert sentence[e.start:e.end] == e.before and e.text == sentence[:e.start] + e.after + sentence[e.end:]


def test_seeded_and_clear_errors():
    s = CASES[12][1]
    assert [rb.apply_edit(s, "synonym", k).text for k in range(6)] == [rb.apply_edit(s, "synonym", k).text for k in range(6)]
    with pytest.raises(ValueError, match="unknown edit type 'typos'.*abbreviation"):
        rb.apply_edit(s, "typos", 0)
    with pytest.raises(ValueError, match="must end with"):
        rb.apply_edit("no final mark here", "typo", 0)
    with pytest.raises(TypeError, match="Generator or an int"):
        rb.apply_edit(s, "typo", "seed")


def test_rule_table_covers_every_type():
    t = rb.rule_table()
    assert set(t["type"]) == set(rb.EDIT_TYPES)
    assert set(t.loc[t.meaning == "changed", "type"]) == set(rb.CHANGING)
    for row in t.itertuples():   # each example is a substring edit of the type's own rules where they are regexes
        assert row.before != row.after


def test_sentences_and_pairs():
    docs = ["First sentence has exactly six words. Too short. This one asks a question of the reader?\n"
            "A new paragraph starts here with some words.\nlower case start is dropped here now.\n"
            "No final mark here so it is dropped\nThe abbreviation split ends at Mr.",
            "First sentence has exactly six words."]
    s = rb.make_sentences(docs, min_words=6, max_words=40, seed=0)
    assert sorted(s) == sorted(["First sentence has exactly six words.", "This one asks a question of the reader?",
                                "A new paragraph starts here with some words."])
    assert rb.make_sentences(docs, seed=1) != s or len(s) < 2
    with pytest.raises(ValueError, match="min_words"):
        rb.make_sentences(docs, min_words=5, max_words=4)
    sents = [c[1] for c in CASES] + [PLAIN]
    pairs = rb.make_pairs(sents, 3, seed=0)
    assert set(pairs.edit_type) == set(rb.EDIT_TYPES)
    assert (pairs.groupby("edit_type").size() <= 3).all()
    assert not pairs.duplicated(["edit_type", "sentence_id"]).any()     # a sentence at most once per type
    assert (pairs.original != pairs.edited).all()
    assert all(o[-1] == e[-1] for o, e in zip(pairs.original, pairs.edited))
    # the draw for one type does not depend on the other types requested
    one = rb.make_pairs(sents, 3, types=["typo"], seed=0)
    pd.testing.assert_frame_equal(one.reset_index(drop=True),
                                  pairs[pairs.edit_type == "typo"].reset_index(drop=True))


# -- metrics by hand ------------------------------------------------------------------------------------
def test_js_by_hand_and_bounds():
    assert rb.js_divergence([1.0, 0.0], [0.0, 1.0]).item() == pytest.approx(math.log(2), abs=1e-12)
    # p = (1/2, 1/2), q = (1, 0): m = (3/4, 1/4)
    want = 0.5 * (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)) + 0.5 * math.log(1 / 0.75)
    assert rb.js_divergence([0.5, 0.5], [1.0, 0.0]).item() == pytest.approx(want, abs=1e-12)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 50, generator=g) * 4, torch.randn(200, 50, generator=g) * 4
    js = rb.js_from_logits(a, b)
    assert (js >= 0).all() and (js <= math.log(2)).all()
    assert torch.allclose(js, rb.js_from_logits(b, a), atol=1e-12)
    assert torch.allclose(js, rb.js_divergence(a.softmax(-1), b.softmax(-1)), atol=1e-10)
    with pytest.raises(ValueError, match="non-negative"):
        rb.js_divergence([0.5, -0.5], [0.5, 0.5])


def test_overlap_spearman_top1_by_hand():
    p = torch.tensor([0.30, 0.25, 0.20, 0.10, 0.08, 0.07])
    q = torch.tensor([0.05, 0.30, 0.25, 0.10, 0.08, 0.22])
    assert rb.topk_overlap(p, q, k=3).item() == pytest.approx(2 / 3)          # {0,1,2} vs {1,2,5}
    assert rb.top1_agreement(p, q).item() == 0.0
    # union {0,1,2,5}: p ranks 4,3,2,1 ; q values .05,.30,.25,.22 -> ranks 1,4,3,2
    rp, rq = np.array([4, 3, 2, 1.0]), np.array([1, 4, 3, 2.0])
    want = np.corrcoef(rp, rq)[0, 1]
    assert rb.spearman_topk_union(p, q, k=3).item() == pytest.approx(want, abs=1e-12)
    # disjoint top-2 sets in reversed order: -1
    assert rb.spearman_topk_union([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], k=2).item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="k must lie"):
        rb.topk_overlap(p, q, k=7)


def test_identical_distributions():
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(1))
    m = rb.pair_metrics(logits, logits.clone(), k=10)
    assert np.allclose(m["js"], 0, atol=1e-12)
    assert (m["overlap"] == 1).all() and np.allclose(m["spearman"], 1) and (m["top1"] == 1).all()
    other = rb.pair_metrics(logits, logits.flip(-1), k=10)
    assert (other["js"] > 0.01).all() and (other["overlap"] < 1).all()


# -- scoring on tiny random models ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return tk.load_hf_tokenizer()


@pytest.mark.parametrize("arch,overrides", [("protot", {"variant": "compendium-v1"}), ("llama", {})], ids=["protot", "llama"])
def test_score_pairs(arch, overrides, tokenizer):
    torch.manual_seed(0)
    model = build_model(arch, "tiny", len(tokenizer), **overrides).eval()
    pairs = rb.make_pairs([c[1] for c in CASES], 2, types=["typo", "synonym", "negation"], seed=0)
    pairs = pd.concat([pairs, pairs.head(2).assign(edited=lambda d: d.original)], ignore_index=True)
    a = rb.score_pairs(model, tokenizer, pairs, batch_size=8, bos=tk.eos_id())
    b = rb.score_pairs(model, tokenizer, pairs, batch_size=1, chunk=2, bos=tk.eos_id())
    pd.testing.assert_frame_equal(a, b, atol=1e-6, rtol=1e-4)       # batching and chunking do not matter
    same = pairs.original == pairs.edited
    assert (a.js[same] < 1e-9).all() and (a.overlap[same] == 1).all() and (a.top1[same] == 1).all()
    assert np.allclose(a.spearman[same], 1)
    assert (a.js[~same] > 0).all() and (a.js <= math.log(2)).all()
    assert (a.tokens_after[~same] >= 1).all() and (a.tokens_after[same] == a.tokens_orig[same]).all()
    # the compared position is the last token: a direct forward of one pair gives the same JS
    row = pairs.iloc[0]
    o, e = rb.encode(tokenizer, [row.original, row.edited], tk.eos_id())
    with torch.no_grad():
        lo, le = model(torch.tensor([o])).logits[0, -1], model(torch.tensor([e])).logits[0, -1]
    assert rb.js_from_logits(lo, le).item() == pytest.approx(a.js.iloc[0], abs=1e-6)
    with pytest.raises(ValueError, match="column 'edited'"):
        rb.score_pairs(model, tokenizer, pairs[["original"]])


# -- comparison with the authors' tables -----------------------------------------------------------------
def _paper_js() -> dict:
    pv = claims.get_claim(CLAIM).paper_value
    return {m: {**pv["js_preserving"][m], **pv["js_changing"][m]} for m in pv["js_preserving"]}


def _synthetic(means: dict, n: int = 200, seed: int = 0, noise: float = 0.3) -> tuple[pd.DataFrame, dict]:
    """Pairs of every type and per-model JS drawn around ``means`` (model -> {type: mean})."""
    rng = np.random.default_rng(seed)
    types = np.repeat(rb.EDIT_TYPES, n)
    pairs = pd.DataFrame({"edit_type": types}, index=pd.RangeIndex(5, 5 + len(types)))
    scores = {}
    for model, mu in means.items():
        base = np.array([mu[t] for t in types])
        scores[model] = pd.DataFrame({"js": base * rng.lognormal(0.0, noise, len(types))}, index=pairs.index)
    return pairs, scores


def _planted(scale_changing: float = 3.0) -> dict:
    """Our models follow the authors' type order, with the meaning-changing types well above."""
    paper = _paper_js()
    out = {}
    for m in ("ProtoT", "LLaMA"):
        mu = {t: 0.05 * paper[m][t] for t in rb.PRESERVING}
        top = max(mu.values())
        mu.update({t: scale_changing * top for t in rb.CHANGING})
        out[m] = mu
    return out


def test_authors_table_matches_the_ledger():
    t = rb.authors_table(AUTHORS)
    assert len(t) == 7 * 4 * 3 + 3 * 4 * 4
    paper = claims.get_claim(CLAIM).paper_value
    js = t[t.metric == "js"].set_index(["model", "type"])["value"]
    for block in ("js_preserving", "js_changing"):
        for model, vals in paper[block].items():
            for typ, v in vals.items():
                assert js[(model, typ)] == pytest.approx(v, rel=1e-5), (model, typ)
    assert t.loc[(t.metric == "js") & (t.meaning == "preserved"), "value"].max() > math.log(2)   # not the bounded JS


def test_permutation_p_exact():
    assert rb.compare.permutation_p(1.0, 7) == pytest.approx(1 / 5040)
    assert rb.compare.permutation_p(-1.0, 7) == 1.0
    assert rb.compare.permutation_p(1.0, 3) == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="3..9"):
        rb.compare.permutation_p(0.5, 12)


def test_planted_order_holds():
    paper = _paper_js()
    pairs, scores = _synthetic(_planted(), noise=0.1)
    o = rb.order_agreement(pairs, scores["ProtoT"], paper["ProtoT"], n_boot=500)
    assert o["rho"] == pytest.approx(1.0) and o["tau"] == pytest.approx(1.0) and o["perm_p"] == pytest.approx(1 / 5040)
    assert o["rho_ci_lo"] > 0.7
    m = rb.measure_robustness(pairs, scores, paper, n_boot=500)
    v = m.values
    assert v["direction_matches"] == 6 and v["direction_mismatches"] == 0 and v["control_separates"] is True
    assert v["min_pairs_per_type"] == 200
    d = m.tables["robustness_direction"].set_index("type")
    assert d.loc["morphology", "theirs"] == "tie" and pd.isna(d.loc["morphology", "agree"])
    assert claims.evaluate(claims.get_claim(CLAIM), v, "cpu")[0] == claims.HOLDS


def test_min_order_agreement_by_hand():
    """The smallest Spearman over the models and its interval: pairs resampled within each type, the same
    draw for every model, the smallest correlation of each resample; with one model, order_agreement's."""
    paper = _paper_js()
    planted = _planted()
    planted["LLaMA"] = {**planted["LLaMA"], "typo": planted["LLaMA"]["spelling"]}     # LLaMA's order less clear
    pairs, scores = _synthetic(planted, n=30, noise=0.8)
    rho, lo, hi = rb.min_order_agreement(pairs, scores, paper, n_boot=300, seed=4)
    o = {m: rb.order_agreement(pairs, scores[m], paper[m], n_boot=300, seed=4) for m in scores}
    assert rho == min(x["rho"] for x in o.values())
    rng = np.random.default_rng(4)
    boot = {m: np.empty((300, 7)) for m in scores}
    for j, typ in enumerate(rb.PRESERVING):                      # one draw per type, shared by the models
        x = {m: scores[m].loc[pairs.edit_type == typ, "js"].to_numpy() for m in scores}
        idx = rng.integers(0, len(x["ProtoT"]), size=(300, len(x["ProtoT"])))
        for m in scores:
            boot[m][:, j] = x[m][idx].mean(1)

    def spearman_rows(a, b):
        ra = a.argsort(1).argsort(1) - 3.0                       # ranks (no ties) minus their mean
        rb_ = b.argsort().argsort() - 3.0
        return (ra * rb_).sum(1) / 28.0                          # sum of squared centred ranks of 7 items
    smallest = np.minimum(*(spearman_rows(boot[m], np.array([paper[m][t] for t in rb.PRESERVING])) for m in scores))
    assert (lo, hi) == pytest.approx(tuple(np.quantile(smallest, [0.025, 0.975])), rel=1e-12)
    assert lo <= min(x["rho_ci_lo"] for x in o.values())         # the minimum of two spreads reaches no higher
    one = rb.min_order_agreement(pairs, {"ProtoT": scores["ProtoT"]}, paper, n_boot=300, seed=4)
    assert one == pytest.approx((o["ProtoT"]["rho"], o["ProtoT"]["rho_ci_lo"], o["ProtoT"]["rho_ci_hi"]), rel=1e-12)
    v = rb.measure_robustness(pairs, scores, paper, n_boot=300, seed=4).values
    assert (v["min_order_rho"], v["min_order_rho_ci_low"], v["min_order_rho_ci_high"]) == (rho, lo, hi)
    with pytest.raises(ValueError, match="at least one model"):
        rb.min_order_agreement(pairs, {}, paper)


def test_reversed_order_and_directions_do_not_hold():
    paper = _paper_js()
    planted = _planted()
    rev = {m: {**{t: 0.001 / paper[m][t] for t in rb.PRESERVING},     # every order and direction reversed
               **{t: planted[m][t] for t in rb.CHANGING}} for m in planted}
    pairs, scores = _synthetic(rev, noise=0.1)
    v = rb.measure_robustness(pairs, scores, paper, n_boot=500).values
    assert v["min_order_rho_ci_low"] < 0 and v["max_order_perm_p"] > 0.5
    assert v["direction_mismatches"] == 6 and v["direction_matches"] == 0
    assert claims.evaluate(claims.get_claim(CLAIM), v, "cpu")[0] == claims.DOES_NOT_HOLD


def test_null_shuffled_type_labels_fail_the_order_check():
    """The planted model, its meaning-preserving type labels shuffled among its pairs: the order
    check must fail (the control stays separated, so the verdict is 'does not hold')."""
    paper = _paper_js()
    passed = 0
    for seed in range(10):
        pairs, scores = _synthetic(_planted(), seed=seed)
        keep = pairs.edit_type.isin(rb.PRESERVING)
        shuffled = pairs.copy()
        shuffled.loc[keep, "edit_type"] = np.random.default_rng(100 + seed).permutation(pairs.edit_type[keep].to_numpy())
        v = rb.measure_robustness(shuffled, scores, paper, n_boot=300, seed=seed).values
        assert v["control_separates"] is True
        status = claims.evaluate(claims.get_claim(CLAIM), v, "cpu")[0]
        passed += v["min_order_rho_ci_low"] > 0 and v["max_order_perm_p"] <= 0.05
        assert status != claims.HOLDS
    assert passed == 0


def test_null_type_blind_edits_rarely_pass_the_order_check():
    """Edits whose effect does not depend on the type (the same JS distribution for all seven
    types): the order check (bootstrap lower end > 0 and permutation p <= 0.05, for both models)
    passes at most at the 5% level of the permutation test; 2 of 40 seeds is that level."""
    paper = _paper_js()
    blind = {m: {**{t: 0.02 for t in rb.PRESERVING}, **{t: 0.2 for t in rb.CHANGING}} for m in ("ProtoT", "LLaMA")}
    passes = 0
    for seed in range(40):
        pairs, scores = _synthetic(blind, seed=seed)
        o = rb.order_agreement(pairs, scores["ProtoT"], paper["ProtoT"], n_boot=200, seed=seed)
        passes += o["rho_ci_lo"] > 0 and o["perm_p"] <= 0.05
    assert passes <= 2


def test_control_separation_and_preconditions():
    paper = _paper_js()
    pairs, scores = _synthetic(_planted(scale_changing=0.2))      # meaning changes move less than the edits
    sep = rb.control_separation(pairs, scores["ProtoT"], n_boot=500)
    assert not sep["separates"] and sep["ci_hi"] < 0
    # a slightly larger mean under meaning changes whose interval still includes 0 does not separate
    flat = {m: {**{t: 0.02 for t in rb.PRESERVING}, **{t: 0.0202 for t in rb.CHANGING}} for m in ("ProtoT", "LLaMA")}
    pairs_f, scores_f = _synthetic(flat, n=50, seed=3)
    sep = rb.control_separation(pairs_f, scores_f["ProtoT"], n_boot=500)
    assert sep["ci_lo"] < 0 < sep["ci_hi"] and not sep["separates"]
    pairs_s, scores_s = _synthetic(_planted(), n=50)
    sep = rb.control_separation(pairs_s, scores_s["ProtoT"], n_boot=500)
    assert sep["separates"] and sep["ci_lo"] > 0
    v = rb.measure_robustness(pairs, scores, paper, n_boot=300).values
    status, _, _, reason = claims.evaluate(claims.get_claim(CLAIM), v, "cpu")
    assert status == claims.INCONCLUSIVE and "control-separates" in reason
    pairs, scores = _synthetic(_planted(), n=80)
    v = rb.measure_robustness(pairs, scores, paper, n_boot=300).values
    status, _, _, reason = claims.evaluate(claims.get_claim(CLAIM), v, "cpu")
    assert v["min_pairs_per_type"] == 80 and status == claims.INCONCLUSIVE and "min-units" in reason


def test_measure_robustness_errors():
    paper = _paper_js()
    pairs, scores = _synthetic(_planted(), n=20)
    with pytest.raises(ValueError, match="'LLaMA'"):
        rb.measure_robustness(pairs, {"ProtoT": scores["ProtoT"]}, paper)
    with pytest.raises(ValueError, match="no paper values for model 'Other'"):
        rb.measure_robustness(pairs, {**scores, "Other": scores["LLaMA"]}, paper)
    with pytest.raises(ValueError, match="lack the types"):
        rb.measure_robustness(pairs[pairs.edit_type != "number"], {k: s[pairs.edit_type != "number"] for k, s in scores.items()}, paper)
    with pytest.raises(ValueError, match="index"):
        rb.order_agreement(pairs, scores["ProtoT"].iloc[1:], paper["ProtoT"])


def test_model_labels_name_the_protocols_models_as_the_authors_tables_do():
    arch = {"p": "protot", "l": "llama", "m": "mamba", "d": "deltanet", "l2": "llama", "x": "gpt2"}.get
    assert rb.model_labels(["p", "l"], arch) == {"ProtoT": "p", "LLaMA": "l"}
    assert rb.model_labels(["d", "p", "m", "l"], arch) == {"DeltaNet": "d", "ProtoT": "p", "Mamba": "m", "LLaMA": "l"}
    assert set(rb.ARCH_LABELS.values()) == set(rb.compare.AUTHOR_MODELS.values())   # every model of their tables
    with pytest.raises(ValueError, match="two LLaMA models"):
        rb.model_labels(["p", "l", "l2"], arch)
    with pytest.raises(ValueError, match="'gpt2'"):
        rb.model_labels(["p", "l", "x"], arch)
    with pytest.raises(ValueError, match="needs a ProtoT and a LLaMA"):
        rb.model_labels(["l", "m"], arch)


def test_the_registered_models_are_committed_and_labelled():
    from protot.train import pretrained

    for profile in ("cpu", "paper"):
        names = claims.protocol(CLAIM, profile)["models"]
        assert set(names) <= set(pretrained.available()), names
        labels = rb.model_labels(names, lambda n: pretrained.manifest(n)["arch"])
        assert set(labels) <= set(claims.get_claim(CLAIM).paper_value["js_preserving"])
