"""protot.robustness.compare, value by value, directions and the claim: the direction of each
edit type's difference between two models against the authors' (with its tie threshold), the
separation of meaning-changing from meaning-preserving edits, the defaults of every interval (2000
resamples of seed 0), and the claim's Measurement on planted scores whose every number is known,
every refusal with its whole message."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from compendium import stats
from protot.robustness import compare as cp
from protot.robustness.rules import CHANGING, PRESERVING
from tests.protot.robustness_standins import _continuous, _pairs, _raises


def _dir_inputs():
    # type a: a - b = 0.4 on both pairs -> interval [0.4, 0.4] above 0
    # type b: -0.2 on both -> below; type c: -0.1 and +0.1 -> the interval straddles 0: undecided
    # type d: 0 on both -> [0, 0]: neither above nor below
    pairs, sa = _pairs({"a": [0.5, 0.6], "b": [0.1, 0.2], "c": [0.1, 0.3], "d": [0.2, 0.2]})
    _, sb = _pairs({"a": [0.1, 0.2], "b": [0.3, 0.4], "c": [0.2, 0.2], "d": [0.2, 0.2]})
    return pairs, sa, sb


def test_direction_comparison_by_hand():
    pairs, sa, sb = _dir_inputs()
    ta = {"a": 2.0, "b": 3.0, "c": 2.0, "d": 1.0}
    tb = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0099}       # d: |1 - 1.0099| = 0.0099 < 0.01 x 1.00495: a tie
    d = cp.direction_comparison(pairs, sa, sb, ta, tb, types=("a", "b", "c", "d"), n_boot=100, seed=2)
    assert d.index.name == "type" and d.index.tolist() == ["a", "b", "c", "d"]
    assert list(d.columns) == ["ours_diff", "ci_lo", "ci_hi", "ours", "theirs_diff", "theirs", "agree"]
    assert d.ours.tolist() == ["above", "below", "undecided", "undecided"]
    assert d.theirs.tolist() == ["above", "above", "above", "tie"]
    assert d.agree.tolist() == [True, False, None, None]
    assert d.ours_diff.tolist() == pytest.approx([0.4, -0.2, 0.0, 0.0], abs=1e-15)
    assert d.theirs_diff.tolist() == pytest.approx([1.0, 2.0, 1.0, -0.0099], abs=1e-15)
    assert (d.loc["a", "ci_lo"], d.loc["a", "ci_hi"]) == pytest.approx((0.4, 0.4), abs=1e-15)
    lo, hi = stats.paired_bootstrap_ci([0.1, 0.3], [0.2, 0.2], n_boot=100, seed=2)
    assert (d.loc["c", "ci_lo"], d.loc["c", "ci_hi"]) == (lo, hi) and lo < 0 < hi
    assert (d.loc["d", "ci_lo"], d.loc["d", "ci_hi"]) == (0.0, 0.0)
    # theirs below where a < b
    e = cp.direction_comparison(pairs, sa, sb, {"a": 1.0, "b": 1.0}, {"a": 2.0, "b": 2.0}, types=("a", "b"), n_boot=20)
    assert e.theirs.tolist() == ["below", "below"] and e.agree.tolist() == [False, True]


def test_direction_comparison_tie_threshold():
    pairs, sa, sb = _dir_inputs()
    # |3 - 1| = 2 against tie_rel x (3 + 1) / 2 = 2 tie_rel: a tie only when 2 < 2 tie_rel
    for rel, want, agree in ((1.0, "above", True), (1.01, "tie", None), (0.5, "above", True)):
        d = cp.direction_comparison(pairs, sa, sb, {"a": 3.0}, {"a": 1.0}, types=("a",), tie_rel=rel, n_boot=20)
        assert d.theirs.tolist() == [want] and d.ours.tolist() == ["above"] and d.agree.tolist() == [agree], rel
    # the default 1%: 2 vs 1 is no tie, 1 vs 1.0099 is
    d = cp.direction_comparison(pairs, sa, sb, {"a": 2.0, "b": 1.0}, {"a": 1.0, "b": 1.0099}, types=("a", "b"), n_boot=20)
    assert d.theirs.tolist() == ["above", "tie"]


def test_direction_comparison_defaults():
    values = {t: [0.1 * i, 0.1 * i + 0.3] for i, t in enumerate(PRESERVING)}
    pairs, sa = _pairs(values)
    _, sb = _pairs({t: [x - 0.05 for x in xs] for t, xs in values.items()})
    sb["js"] = sb["js"].to_numpy() + np.tile([-0.01, 0.01], 7)                  # a - b: 0.06, 0.04 per type
    ta = {t: 2.0 for t in PRESERVING}
    tb = {t: 1.0 for t in PRESERVING}
    d = cp.direction_comparison(pairs, sa, sb, ta, tb)
    assert d.index.tolist() == list(PRESERVING) and (d.ours == "above").all() and d.agree.tolist() == [True] * 7
    lo, hi = stats.paired_bootstrap_ci(sa["js"][:2], sb["js"][:2], n_boot=2000, seed=0)
    assert (d.ci_lo.iloc[0], d.ci_hi.iloc[0]) == (lo, hi)
    o = cp.direction_comparison(pairs, sa, sb, ta, tb, col="other", n_boot=2000, seed=0)
    assert o.ours_diff.iloc[0] == pytest.approx(10 * 0.05, abs=1e-12)


def test_direction_comparison_passes_its_resamples_on():
    pairs, sa = _continuous(("a", "b"), seed=4)
    _, sb = _continuous(("a", "b"), seed=5)
    d = cp.direction_comparison(pairs, sa, sb, {"a": 1.0, "b": 1.0}, {"a": 2.0, "b": 2.0}, types=("a", "b"), n_boot=70, seed=6)
    for t in ("a", "b"):
        sel = pairs.edit_type == t
        lo, hi = stats.paired_bootstrap_ci(sa.js[sel], sb.js[sel], n_boot=70, seed=6)
        assert (d.loc[t, "ci_lo"], d.loc[t, "ci_hi"]) == (lo, hi)
        assert (lo, hi) != stats.paired_bootstrap_ci(sa.js[sel], sb.js[sel], n_boot=2000, seed=6)
        assert (lo, hi) != stats.paired_bootstrap_ci(sa.js[sel], sb.js[sel], n_boot=70, seed=0)


SEP = {"gender": [0.5, 0.7], "negation": [0.4], "synonym": [0.0], "typo": [0.1, 0.3]}


def _sep_boot(values, types, n_boot, seed, n_chg, level=0.95):
    rng = np.random.default_rng(seed)
    b = np.stack([np.asarray(values[t])[rng.integers(0, len(values[t]), (n_boot, len(values[t])))].mean(1)
                  for t in types], 1)
    d = b[:, :n_chg].mean(1) - b[:, n_chg:].mean(1)
    a = (1 - level) / 2
    return float(np.quantile(d, a)), float(np.quantile(d, 1 - a))


def test_control_separation_by_hand():
    pairs, scores = _pairs(SEP)
    s = cp.control_separation(pairs, scores, n_boot=300, seed=4)
    # changing: gender 0.6, negation 0.4 -> 0.5; preserving: synonym 0, typo 0.2 -> 0.1; diff 0.4
    assert list(s) == ["diff", "ci_lo", "ci_hi", "separates"]
    assert s["diff"] == pytest.approx(0.4, abs=1e-15) and s["separates"] is True
    # the types in CHANGING then PRESERVING order: gender, negation, synonym, typo
    lo, hi = _sep_boot(SEP, ["gender", "negation", "synonym", "typo"], 300, 4, 2)
    assert (s["ci_lo"], s["ci_hi"]) == pytest.approx((lo, hi), abs=1e-15)
    s50 = cp.control_separation(pairs, scores, col="other", n_boot=300, seed=4, level=0.5)
    lo50, hi50 = _sep_boot({t: [10 * x for x in xs] for t, xs in SEP.items()}, ["gender", "negation", "synonym", "typo"],
                           300, 4, 2, 0.5)
    assert s50["diff"] == pytest.approx(4.0, abs=1e-14) and (s50["ci_lo"], s50["ci_hi"]) == pytest.approx((lo50, hi50), abs=1e-14)
    d = cp.control_separation(pairs, scores)
    assert (d["ci_lo"], d["ci_hi"]) == pytest.approx(_sep_boot(SEP, ["gender", "negation", "synonym", "typo"], 2000, 0, 2), abs=1e-15)


def test_control_separation_needs_an_interval_above_zero():
    # equal constants: diff 0 and the interval [0, 0]: not above 0
    pairs, scores = _pairs({"number": [0.2, 0.2], "abbreviation": [0.2]})
    s = cp.control_separation(pairs, scores, n_boot=50)
    assert (s["diff"], s["ci_lo"], s["ci_hi"], s["separates"]) == (0.0, 0.0, 0.0, False)
    pairs, scores = _pairs({"number": [0.1], "abbreviation": [0.3]})
    s = cp.control_separation(pairs, scores, n_boot=50)
    assert s["diff"] == pytest.approx(-0.2, abs=1e-15) and s["separates"] is False


def test_control_separation_level():
    pairs, scores = _continuous(("gender", "number", "typo", "synonym"), n=9, seed=3)
    s = cp.control_separation(pairs, scores, n_boot=300, seed=1, level=0.5)
    # types in the order gender, number (changing), synonym, typo (preserving); the quartiles
    vals = {t: scores.js[pairs.edit_type == t].to_numpy() for t in ("gender", "number", "synonym", "typo")}
    assert (s["ci_lo"], s["ci_hi"]) == pytest.approx(_sep_boot(vals, ["gender", "number", "synonym", "typo"], 300, 1, 2, 0.5),
                                                      abs=1e-15)
    assert (s["ci_lo"], s["ci_hi"]) != pytest.approx(_sep_boot(vals, ["gender", "number", "synonym", "typo"], 300, 1, 2, 2 / 3),
                                                      abs=1e-6)


def test_control_separation_refusals():
    have = {"only changing": ({"gender": [0.1], "number": [0.2]}, "['gender', 'number']"),
            "only preserving": ({"typo": [0.1]}, "['typo']")}
    for values, listed in have.values():
        pairs, scores = _pairs(values)
        with _raises("control separation needs meaning-changing ('gender', 'negation', 'number') and "
                     "meaning-preserving ('abbreviation', 'contraction', 'morphology', 'punctuation', 'spelling', "
                     f"'synonym', 'typo') pairs; have {listed}"):
            cp.control_separation(pairs, scores)


def test_defaults_draw_2000_resamples_of_seed_0():
    """type_summary, control_separation, min_order_agreement and direction_comparison with their
    defaults against the same calls with 2000 resamples of seed 0 written out, and those against
    another seed and another number of resamples (the data tell them apart)."""
    pairs, scores = _continuous(PRESERVING + CHANGING)
    _, other = _continuous(PRESERVING + CHANGING, seed=1)
    paper = {"P": {t: float(i) for i, t in enumerate(PRESERVING)}}
    calls = {
        "type_summary": lambda **kw: cp.type_summary(pairs, scores, **kw)[["ci_lo", "ci_hi"]].to_numpy().tolist(),
        "control_separation": lambda **kw: cp.control_separation(pairs, scores, **kw),
        "direction_comparison": lambda **kw: cp.direction_comparison(pairs, scores, other, paper["P"], paper["P"], **kw)[
            ["ci_lo", "ci_hi"]].to_numpy().tolist(),
    }
    for name, call in calls.items():
        d = call()
        assert d == call(n_boot=2000, seed=0), name
        assert d != call(n_boot=2000, seed=1) and d != call(n_boot=2001, seed=0), name


# -- the claim's Measurement on planted scores whose every number is known
PAPER = {"ProtoT": {**{t: 7.0 - i for i, t in enumerate(PRESERVING)}, **{t: 9.0 for t in CHANGING}},
         "LLaMA": {**{t: 1.0 + i for i, t in enumerate(PRESERVING)}, **{t: 9.0 for t in CHANGING}}}


def _planted(pairs_per_type=2, extra_typo=1):
    """Every pair of a type scores 0.01 x the paper's value (so every resample keeps the order);
    meaning-changing types 1.0."""
    counts = {t: pairs_per_type + (extra_typo if t == "typo" else 0) for t in PRESERVING + CHANGING}
    pairs, _ = _pairs({t: [0.0] * n for t, n in counts.items()})
    scores = {}
    for m in ("ProtoT", "LLaMA"):
        js = [0.01 * PAPER[m][t] if t in PRESERVING else 1.0 for t in pairs.edit_type]
        scores[m] = pd.DataFrame({"js": js}, index=pairs.index)
    return pairs, scores


def test_measure_robustness_on_planted_scores_in_full():
    pairs, scores = _planted()
    m = cp.measure_robustness(pairs, scores, PAPER, n_boot=40, seed=3, config={"k": 10}, evidence={"note": "planted"})
    assert m.claim == "protot/robustness-jsd" and m.unit == "JS (nats), orders"
    v = m.values
    assert v == {"min_order_rho": pytest.approx(1.0, abs=1e-15), "min_order_rho_ci_low": pytest.approx(1.0, abs=1e-15),
                 "min_order_rho_ci_high": pytest.approx(1.0, abs=1e-15),
                 "max_order_perm_p": pytest.approx(1 / 5040, abs=1e-15),
                 "direction_matches": 6, "direction_mismatches": 0, "control_separates": True, "min_pairs_per_type": 2}
    assert list(v) == ["min_order_rho", "min_order_rho_ci_low", "min_order_rho_ci_high", "max_order_perm_p",
                       "direction_matches", "direction_mismatches", "control_separates", "min_pairs_per_type"]
    assert m.config == {"k": 10, "n_boot": 40, "seed": 3, "tie_rel": 0.01}
    ev = m.evidence
    assert list(ev) == ["models", "order", "control_separation", "directions_undecided_or_tied", "note"]
    assert ev["models"] == ["LLaMA", "ProtoT"] and ev["note"] == "planted" and ev["directions_undecided_or_tied"] == 1
    assert ev["order"]["ProtoT"]["ours"] == pytest.approx({t: 0.01 * PAPER["ProtoT"][t] for t in PRESERVING}, abs=1e-15)
    assert ev["order"]["LLaMA"]["perm_p"] == pytest.approx(1 / 5040, abs=1e-15)
    # control: changing 1.0; preserving means 0.01 x (7 + ... + 1) / 7 = 0.04 -> 0.96 for both
    for n in ("ProtoT", "LLaMA"):
        sep = ev["control_separation"][n]
        assert sep["diff"] == pytest.approx(0.96, abs=1e-15) and sep["separates"] is True
        assert (sep["ci_lo"], sep["ci_hi"]) == pytest.approx((0.96, 0.96), abs=1e-15)
    dirs = m.tables["robustness_direction"]
    assert list(m.tables) == ["robustness_js", "robustness_order", "robustness_direction"]
    assert dirs.type.tolist() == list(PRESERVING)
    assert dirs.ours.tolist() == ["above"] * 3 + ["undecided"] + ["below"] * 3
    assert dirs.theirs.tolist() == ["above"] * 3 + ["tie"] + ["below"] * 3
    order = m.tables["robustness_order"]
    assert order.columns.tolist() == ["model", "type", "ours", "theirs"] and len(order) == 14
    assert order.model.tolist() == ["ProtoT"] * 7 + ["LLaMA"] * 7 and order.type.tolist() == list(PRESERVING) * 2
    assert order.theirs.tolist() == [PAPER["ProtoT"][t] for t in PRESERVING] + [PAPER["LLaMA"][t] for t in PRESERVING]
    js = m.tables["robustness_js"]
    assert js.index.tolist() == list(range(20))                        # one index over the two models
    assert js.columns.tolist() == ["type", "mean", "ci_lo", "ci_hi", "median", "n", "model"] and len(js) == 20
    assert js.type.tolist() == list(PRESERVING + CHANGING) * 2 and js.model.tolist() == ["ProtoT"] * 10 + ["LLaMA"] * 10
    assert js.n.tolist() == [2, 2, 2, 2, 2, 2, 3, 2, 2, 2] * 2
    assert js["mean"].iloc[0] == pytest.approx(0.07, abs=1e-15) and js["mean"].iloc[10] == pytest.approx(0.01, abs=1e-15)
    # no tie allowed: punctuation's paper difference 0 is then "below" (0 > 0 is false); ours stays undecided
    z = cp.measure_robustness(pairs, scores, PAPER, n_boot=40, seed=3, tie_rel=0.0)
    assert z.values["direction_matches"] == 6 and z.config == {"n_boot": 40, "seed": 3, "tie_rel": 0.0}
    assert z.tables["robustness_direction"].theirs.tolist()[3] == "below" and z.evidence["directions_undecided_or_tied"] == 1


def _spread():
    rng = np.random.default_rng(0)
    pairs, scores = _planted(pairs_per_type=6, extra_typo=0)
    for s in scores.values():
        s["js"] = s["js"] * rng.uniform(0.2, 1.8, len(s))              # spread within each type
    return pairs, scores


@pytest.mark.parametrize("kw,call", [({"n_boot": 60, "seed": 5}, {"n_boot": 60, "seed": 5}),
                                     ({}, {"n_boot": 2000, "seed": 0})], ids=["given", "defaults"])
def test_measure_robustness_passes_its_resamples_on(kw, call):
    pairs, scores = _spread()
    m = cp.measure_robustness(pairs, scores, PAPER, **kw)
    rho, lo, hi = cp.min_order_agreement(pairs, scores, PAPER, **call)
    assert (m.values["min_order_rho"], m.values["min_order_rho_ci_low"], m.values["min_order_rho_ci_high"]) == (rho, lo, hi)
    o = {n: cp.order_agreement(pairs, scores[n], PAPER[n], **call) for n in scores}
    assert m.values["max_order_perm_p"] == max(x["perm_p"] for x in o.values())
    assert m.evidence["order"] == o
    for n in scores:
        assert m.evidence["control_separation"][n] == cp.control_separation(pairs, scores[n], **call)
    d = cp.direction_comparison(pairs, scores["ProtoT"], scores["LLaMA"], PAPER["ProtoT"], PAPER["LLaMA"], **call)
    pd.testing.assert_frame_equal(m.tables["robustness_direction"], d.reset_index())
    assert m.values["direction_matches"] == int((d.agree == True).sum())  # noqa: E712
    summ = cp.type_summary(pairs, scores["LLaMA"], **call)
    assert m.tables["robustness_js"].iloc[10:, 1:6].reset_index(drop=True).equals(summ.reset_index(drop=True))
    assert m.values["min_pairs_per_type"] == 6


def test_measure_robustness_with_other_names_and_refusals():
    pairs, scores = _planted()
    renamed = {"P": scores["ProtoT"], "L": scores["LLaMA"]}
    paper = {"P": PAPER["ProtoT"], "L": PAPER["LLaMA"]}
    m = cp.measure_robustness(pairs, renamed, paper, protot="P", llama="L", n_boot=20)
    assert m.values["direction_matches"] == 6 and m.evidence["models"] == ["L", "P"]
    with _raises("the check compares 'ProtoT' with 'LLaMA'; scores hold ['L', 'P']"):
        cp.measure_robustness(pairs, renamed, paper)
    with _raises("the check compares 'ProtoT' with 'LLaMA'; scores hold ['ProtoT']"):
        cp.measure_robustness(pairs, {"ProtoT": scores["ProtoT"]}, PAPER)
    with _raises("the check compares 'ProtoT' with 'LLaMA'; scores hold ['LLaMA']"):
        cp.measure_robustness(pairs, {"LLaMA": scores["LLaMA"]}, PAPER)
    with _raises("no paper values for model 'Other'; have ['LLaMA', 'ProtoT']"):
        cp.measure_robustness(pairs, {**scores, "Other": scores["LLaMA"]}, PAPER)
    keep = ~pairs.edit_type.isin(["number", "abbreviation"])
    with _raises("the pairs lack the types ['abbreviation', 'number']"):
        cp.measure_robustness(pairs[keep], {k: s[keep] for k, s in scores.items()}, PAPER)
    # the smallest count over the types counts: one type with a single pair
    one = pairs.index[pairs.edit_type == "gender"][0]
    small = cp.measure_robustness(pairs.drop(one), {k: s.drop(one) for k, s in scores.items()}, PAPER, n_boot=20)
    assert small.values["min_pairs_per_type"] == 1
