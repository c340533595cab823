"""protot.robustness.compare, value by value, the orders: model labels, the authors' tables read
from small written files (and the paper's own, at spot values), type means and summaries with their
intervals, bootstrap means and rank correlations, exact permutation p-values, and the agreement of
our order of the edit types with the authors' (one model, the smallest over models), every refusal
with its whole message. Directions, the control separation and the claim's Measurement:
test_robustness_directions_exact.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compendium import paths, stats
from protot import robustness as rb
from protot.robustness import compare as cp
from protot.robustness import metrics as mt
from protot.robustness.rules import CHANGING, PRESERVING
from tests.protot.robustness_standins import _continuous, _pairs, _raises


def test_model_labels_in_full():
    arch = {"p": "protot", "l": "llama", "m": "mamba", "d": "deltanet", "l2": "llama", "x": "gpt2"}.get
    assert cp.model_labels(["l", "d", "p", "m"], arch) == {"LLaMA": "l", "DeltaNet": "d", "ProtoT": "p", "Mamba": "m"}
    assert list(cp.model_labels(["l", "d", "p", "m"], arch)) == ["LLaMA", "DeltaNet", "ProtoT", "Mamba"]
    with _raises("x: architecture 'gpt2' is not one of the authors' (['deltanet', 'llama', 'mamba', 'protot'])"):
        cp.model_labels(["p", "l", "x"], arch)
    with _raises("two LLaMA models: l and l2"):
        cp.model_labels(["p", "l", "l2"], arch)
    with _raises("the comparison needs a ProtoT and a LLaMA model, got ['l', 'm']"):
        cp.model_labels(["l", "m"], arch)
    with _raises("the comparison needs a ProtoT and a LLaMA model, got ['p', 'd']"):
        cp.model_labels(("p", "d"), arch)
    assert cp.ARCH_LABELS == {"protot": "ProtoT", "llama": "LLaMA", "mamba": "Mamba", "deltanet": "DeltaNet"}


def test_package_exports():
    assert rb.js_divergence is mt.js_divergence and rb.measure_robustness is cp.measure_robustness
    assert cp.METRICS == {"JS_mean": "js", "overlap_mean": "overlap", "spearman_mean": "spearman", "top1_same_rate": "top1"}
    assert cp.AUTHOR_MODELS == {"ProtoAttn": "ProtoT", "ProtoT": "ProtoT", "LLaMA": "LLaMA", "Mamba": "Mamba",
                                "Deltanet": "DeltaNet", "DeltaNet": "DeltaNet"}


def _write_tables(folder, extra_summary_row: str = "", extra_flat_row: str = ""):
    (folder / "robustness_summary_table.csv").write_text(
        ",JS_mean,JS_mean,overlap_mean,spearman_mean\n"
        "model,ProtoAttn,Deltanet,LLaMA,Mamba\n"
        "slice,,,,\n"
        "abbreviation,1.5,0.25,0.5,-0.5\n"
        "typo,0.75,2.0,0.125,0.375\n" + extra_summary_row)
    (folder / "intervention_comparison_table.csv").write_text(
        "slice,JS_mean__ProtoT,top1_same_rate__DeltaNet,spearman_mean__Mamba\n"
        "gender,0.5,0.25,-0.75\n"
        "number,1.25,0.5,0.0\n" + extra_flat_row)


def test_authors_table_reads_both_tables_in_full(tmp_path):
    _write_tables(tmp_path)
    t = cp.authors_table(str(tmp_path))
    assert list(t.columns) == ["type", "model", "metric", "value", "meaning"]
    assert t.values.tolist() == [
        ["abbreviation", "ProtoT", "js", 1.5, "preserved"], ["typo", "ProtoT", "js", 0.75, "preserved"],
        ["abbreviation", "DeltaNet", "js", 0.25, "preserved"], ["typo", "DeltaNet", "js", 2.0, "preserved"],
        ["abbreviation", "LLaMA", "overlap", 0.5, "preserved"], ["typo", "LLaMA", "overlap", 0.125, "preserved"],
        ["abbreviation", "Mamba", "spearman", -0.5, "preserved"], ["typo", "Mamba", "spearman", 0.375, "preserved"],
        ["gender", "ProtoT", "js", 0.5, "changed"], ["number", "ProtoT", "js", 1.25, "changed"],
        ["gender", "DeltaNet", "top1", 0.25, "changed"], ["number", "DeltaNet", "top1", 0.5, "changed"],
        ["gender", "Mamba", "spearman", -0.75, "changed"], ["number", "Mamba", "spearman", 0.0, "changed"]]


def test_authors_table_refuses_unknown_types(tmp_path):
    _write_tables(tmp_path, extra_summary_row="rhyme,1,1,1,1\n", extra_flat_row="alliteration,1,1,1\n")
    with _raises(f"the authors' tables in {tmp_path} hold unknown types ['alliteration', 'rhyme']"):
        cp.authors_table(tmp_path)


def test_authors_table_of_the_paper_spot_values():
    t = cp.authors_table(paths.papers_dir() / "protot" / "authors_robustness")
    v = t.set_index(["type", "model", "metric"])
    # from the two CSV files: abbreviation row of the summary, gender / negation rows of the interventions
    assert v.loc[("abbreviation", "DeltaNet", "js"), "value"] == 1.064231
    assert v.loc[("abbreviation", "ProtoT", "spearman"), "value"] == -0.050206
    assert v.loc[("abbreviation", "Mamba", "overlap"), "value"] == 0.8308
    assert v.loc[("gender", "LLaMA", "top1"), "value"] == 0.89 and v.loc[("gender", "LLaMA", "top1"), "meaning"] == "changed"
    assert v.loc[("negation", "Mamba", "top1"), "value"] == 0.992
    assert set(t.loc[t.meaning == "preserved", "metric"]) == {"js", "overlap", "spearman"}


def test_values_type_means_and_their_refusals():
    pairs, scores = _pairs({"b": [0.25, 0.75], "a": [1.0], "c": [0.5, 0.25, 0.75]})
    assert cp._values(pairs, scores, "js", "c").tolist() == [0.5, 0.25, 0.75]
    m = cp.type_means(pairs, scores, "other", ("c", "a"))
    assert m.name == "other" and m.index.tolist() == ["c", "a"] and m.tolist() == [5.0, 10.0]
    with _raises("no pairs of type 'typo'"):
        cp.type_means(pairs, scores, "js", ("a", "typo"))
    with _raises("the scores do not have the pairs' index"):
        cp.type_means(pairs, scores.iloc[::-1], "js", ("a",))
    with _raises("the scores do not have the pairs' index"):
        cp.type_means(pairs, scores.reset_index(drop=True), "js", ("a",))
    # defaults: the js column, the seven meaning-preserving types in order
    full, fs = _pairs({t: [0.1 * i, 0.1 * i + 0.2] for i, t in enumerate(PRESERVING)})
    d = cp.type_means(full, fs)
    assert d.name == "js" and d.index.tolist() == list(PRESERVING)
    assert d.tolist() == pytest.approx([0.1 * i + 0.1 for i in range(7)], abs=1e-15)


def test_type_summary_by_hand():
    pairs, scores = _pairs({"b": [0.25, 0.75], "a": [1.0, 2.0, 6.0]})
    s = cp.type_summary(pairs, scores, "js", types=("a", "b"), n_boot=50, seed=3)
    assert list(s.columns) == ["mean", "ci_lo", "ci_hi", "median", "n"] and s.index.tolist() == ["a", "b"]
    assert s.loc["a", "mean"] == 3.0 and s.loc["a", "median"] == 2.0 and s.loc["a", "n"] == 3
    assert s.loc["b", "mean"] == 0.5 and s.loc["b", "median"] == 0.5 and s.loc["b", "n"] == 2
    assert (s.loc["a", "ci_lo"], s.loc["a", "ci_hi"]) == stats.bootstrap_mean_ci(np.array([1.0, 2.0, 6.0]), n_boot=50, seed=3)
    # defaults: js, every type (preserving then changing), 2000 resamples of seed 0
    full, fs = _pairs({t: [0.25, 1.0, 0.5] for t in reversed(PRESERVING + CHANGING)})
    d = cp.type_summary(full, fs)
    assert d.index.tolist() == list(PRESERVING + CHANGING) and (d["mean"] == 0.5833333333333334).all()
    assert (d.ci_lo.iloc[0], d.ci_hi.iloc[0]) == stats.bootstrap_mean_ci(np.array([0.25, 1.0, 0.5]), n_boot=2000, seed=0)


def test_boot_means_and_rank_rho_by_hand():
    pairs, scores = _pairs({"a": [1.0, 3.0], "b": [5.0, 5.0, 8.0]})
    got = cp._boot_means(pairs, scores, "js", ("a", "b"), 4, 9)
    rng = np.random.default_rng(9)                       # one generator, the types in turn
    a = np.array([1.0, 3.0])[rng.integers(0, 2, (4, 2))].mean(1)
    b = np.array([5.0, 5.0, 8.0])[rng.integers(0, 3, (4, 3))].mean(1)
    assert got.shape == (4, 2) and got.tolist() == np.stack([a, b], 1).tolist()
    assert set(got[:, 0]) <= {1.0, 2.0, 3.0} and set(got[:, 1]) <= {5.0, 6.0, 7.0, 8.0}
    # Spearman of each row with a vector: (1, 2, 3) -> 1; reversed -> -1; constant -> nan;
    # (1, 1, 2) (ties: 1.5, 1.5, 3) -> sqrt(3) / 2; (3, 1, 2) vs (1, 2, 3): centred (1,-1,0),(-1,0,1) -> -1/2
    r = cp._rank_rho(np.array([[1, 2, 3], [3, 2, 1], [4, 4, 4], [1, 1, 2], [3, 1, 2]], dtype=float), np.array([1.0, 2.0, 3.0]))
    assert r[[0, 1, 3, 4]].tolist() == pytest.approx([1.0, -1.0, math.sqrt(3) / 2, -0.5], abs=1e-15) and math.isnan(r[2])
    assert math.isnan(cp._rank_rho(np.array([[1.0, 2.0, 3.0]]), np.array([2.0, 2.0, 2.0]))[0])
    # two items: centred ranks (-1/2, 1/2), so the denominator is sqrt(1/2 x 1/2) = 1/2 (below 1): +-1
    assert cp._rank_rho(np.array([[3.0, 5.0], [5.0, 3.0]]), np.array([0.1, 0.2])).tolist() == [1.0, -1.0]


def test_permutation_p_exact_for_three_and_four_items():
    # the 6 orders of 3 items against (0, 1, 2): rho 1 (identity), 1/2 (two adjacent swaps),
    # -1/2 (two 3-cycles), -1 (reversal)
    assert cp.permutation_p(1.0, 3) == pytest.approx(1 / 6, abs=1e-15)
    assert cp.permutation_p(0.6, 3) == pytest.approx(1 / 6, abs=1e-15)
    assert cp.permutation_p(0.5, 3) == pytest.approx(3 / 6, abs=1e-15)
    assert cp.permutation_p(0.5 + 5e-13, 3) == pytest.approx(3 / 6, abs=1e-15)    # within the 1e-12 tolerance
    assert cp.permutation_p(0.5 + 5e-12, 3) == pytest.approx(1 / 6, abs=1e-15)
    assert cp.permutation_p(-0.5, 3) == pytest.approx(5 / 6, abs=1e-15)
    assert cp.permutation_p(-1.0, 3) == 1.0
    assert cp.permutation_p(1.0, 4) == pytest.approx(1 / 24, abs=1e-15)
    # 4 items: rho = 1 - sum d^2 / 10; rho >= 0.8 <=> sum d^2 <= 2: identity and 3 adjacent swaps
    assert cp.permutation_p(0.8, 4) == pytest.approx(4 / 24, abs=1e-15)
    assert cp.permutation_p(1.0, 8) == pytest.approx(1 / 40320, abs=1e-15)
    for k in (2, 10):
        with _raises(f"the exact permutation p-value is computed for 3..9 items, got {k}"):
            cp.permutation_p(0.5, k)


TYPES3 = ("a", "b", "c")


def _boot_rho(values, ref, n_boot, seed, level=0.95, types=TYPES3):
    """order_agreement's interval by hand: per type in turn, n_boot resamples of its pairs from one
    generator; Spearman of each resample's means with ``ref``; non-finite dropped; percentiles."""
    rng = np.random.default_rng(seed)
    means = np.stack([np.asarray(values[t])[rng.integers(0, len(values[t]), (n_boot, len(values[t])))].mean(1)
                      for t in types], 1)
    rho = cp._rank_rho(means, np.asarray(ref, dtype=float))
    rho = rho[np.isfinite(rho)]
    a = (1 - level) / 2
    return float(np.quantile(rho, a)), float(np.quantile(rho, 1 - a)), len(rho)


def test_order_agreement_by_hand():
    values = {"a": [0.2, 0.4], "b": [0.1, 0.1], "c": [0.1, 0.3]}          # means 0.3, 0.1, 0.2
    pairs, scores = _pairs(values)
    theirs = {"a": 3.0, "b": 1.0, "c": 2.0, "unused": 9.0}
    o = cp.order_agreement(pairs, scores, theirs, types=TYPES3, n_boot=200, seed=1)
    assert list(o) == ["rho", "tau", "rho_ci_lo", "rho_ci_hi", "perm_p", "ours", "theirs"]
    assert o["rho"] == pytest.approx(1.0, abs=1e-15) and o["tau"] == pytest.approx(1.0, abs=1e-15)
    assert o["perm_p"] == pytest.approx(1 / 6, abs=1e-15)
    assert o["ours"] == pytest.approx({"a": 0.3, "b": 0.1, "c": 0.2}, abs=1e-15) and o["theirs"] == {"a": 3.0, "b": 1.0, "c": 2.0}
    lo, hi, _ = _boot_rho(values, [3.0, 1.0, 2.0], 200, 1)
    assert (o["rho_ci_lo"], o["rho_ci_hi"]) == pytest.approx((lo, hi), abs=1e-15)
    # the other column, a 50% level: the quartiles
    o50 = cp.order_agreement(pairs, scores, theirs, col="other", types=TYPES3, n_boot=200, seed=1, level=0.5)
    assert (o50["rho_ci_lo"], o50["rho_ci_hi"]) == pytest.approx(_boot_rho(values, [3.0, 1.0, 2.0], 200, 1, 0.5)[:2], abs=1e-15)
    assert o50["ours"] == pytest.approx({"a": 3.0, "b": 1.0, "c": 2.0}, abs=1e-14)
    # their order reversed: rho -1, tau -1, p = 1
    r = cp.order_agreement(pairs, scores, {"a": 1.0, "b": 3.0, "c": 2.0}, types=TYPES3, n_boot=50)
    assert r["rho"] == pytest.approx(-1.0, abs=1e-15) and r["tau"] == pytest.approx(-1.0, abs=1e-15) and r["perm_p"] == 1.0
    with _raises("the authors' values lack the types ['b', 'c']"):
        cp.order_agreement(pairs, scores, {"a": 1.0}, types=TYPES3)


def test_order_agreement_drops_resamples_without_an_order():
    # every type's pairs are (0.1, 0.3): some resamples give all three the same mean (no ranking: nan)
    values = {t: [0.1, 0.3] for t in TYPES3}
    pairs, scores = _pairs(values)
    o = cp.order_agreement(pairs, scores, {"a": 3.0, "b": 1.0, "c": 2.0}, types=TYPES3, n_boot=400, seed=2)
    lo, hi, kept = _boot_rho(values, [3.0, 1.0, 2.0], 400, 2)
    assert kept < 400 and np.isfinite([o["rho_ci_lo"], o["rho_ci_hi"]]).all()
    assert (o["rho_ci_lo"], o["rho_ci_hi"]) == pytest.approx((lo, hi), abs=1e-15)
    assert math.isnan(o["rho"])                                                  # the means tie too


def test_order_agreement_defaults_use_the_preserving_types_and_js():
    values = {t: [0.1 * i, 0.1 * i + 0.23, 0.1 * i + 0.61] for i, t in enumerate(PRESERVING)}   # overlapping
    pairs, scores = _pairs(values)
    theirs = {t: float(i) for i, t in enumerate(PRESERVING)}
    o = cp.order_agreement(pairs, scores, theirs)
    assert o["rho"] == pytest.approx(1.0, abs=1e-15) and o["perm_p"] == pytest.approx(1 / 5040, abs=1e-15)
    assert list(o["ours"]) == list(PRESERVING)
    # 2000 resamples of seed 0: the interval of order_agreement with those given
    lo, hi, _ = _boot_rho(values, list(range(7)), 2000, 0, types=PRESERVING)
    assert (o["rho_ci_lo"], o["rho_ci_hi"]) == pytest.approx((lo, hi), abs=1e-15)
    f = cp.order_agreement(pairs, scores, theirs, n_boot=1999, seed=1)
    assert (o["rho_ci_lo"], o["rho_ci_hi"]) != (f["rho_ci_lo"], f["rho_ci_hi"])


def test_min_order_agreement_defaults(monkeypatch):
    """Its interval: bootstrap_groups_ci with 2000 resamples of seed 0 at the 95% level (Spearman
    correlations of seven types take few values, so the ends alone would not show the draw)."""
    pairs, scores = _continuous(PRESERVING)
    paper = {"P": {t: float(i) for i, t in enumerate(PRESERVING)}}
    asked, real = [], cp.bootstrap_groups_ci
    monkeypatch.setattr(cp, "bootstrap_groups_ci", lambda f, *g, **kw: asked.append(kw) or real(f, *g, **kw))
    got = cp.min_order_agreement(pairs, {"P": scores}, paper)
    assert asked == [{"n_boot": 2000, "seed": 0, "level": 0.95}]
    assert got == cp.min_order_agreement(pairs, {"P": scores}, paper, col="js", types=PRESERVING, n_boot=2000, seed=0,
                                         level=0.95)


def test_min_order_agreement_refuses_no_models():
    pairs, scores = _pairs({"a": [0.1]})
    with _raises("min_order_agreement needs at least one model's scores"):
        cp.min_order_agreement(pairs, {}, {})


def test_min_order_agreement_with_exact_orders():
    # model P agrees with its reference (rho 1), model L reverses it (rho -1); the pairs of a type all
    # equal, so every resample keeps the order: (-1, -1, -1)
    p_pairs, p_scores = _pairs({"a": [0.3, 0.3], "b": [0.1, 0.1], "c": [0.2, 0.2]})
    _, l_scores = _pairs({"a": [0.1, 0.1], "b": [0.3, 0.3], "c": [0.2, 0.2]})
    theirs = {"P": {"a": 3.0, "b": 1.0, "c": 2.0}, "L": {"a": 3.0, "b": 1.0, "c": 2.0}}
    got = cp.min_order_agreement(p_pairs, {"P": p_scores, "L": l_scores}, theirs, types=TYPES3, n_boot=20)
    assert got == pytest.approx((-1.0, -1.0, -1.0), abs=1e-15)
    assert cp.min_order_agreement(p_pairs, {"P": p_scores}, theirs, types=TYPES3, n_boot=20) == pytest.approx((1.0, 1.0, 1.0), abs=1e-15)
    # another column: "other" = 10 x js keeps the orders; level 0.5 with spread pairs
    values = {"a": [0.31, 0.52, 0.13], "b": [0.101, 0.157, 0.29], "c": [0.113, 0.3, 0.247]}
    pairs, scores = _pairs(values)
    rho, lo, hi = cp.min_order_agreement(pairs, {"P": scores}, {"P": theirs["P"]}, col="other", types=TYPES3,
                                         n_boot=300, seed=5, level=0.5)
    want_lo, want_hi, kept = _boot_rho(values, [3.0, 1.0, 2.0], 300, 5, 0.5)
    assert kept == 300 and (lo, hi) == pytest.approx((want_lo, want_hi), abs=1e-15)
    assert rho == pytest.approx(1.0, abs=1e-15)
    # the column is the one asked for: "other" = -js reverses every order
    rev = scores.assign(other=-scores.js)
    assert cp.min_order_agreement(pairs, {"P": rev}, {"P": theirs["P"]}, col="other", types=TYPES3, n_boot=300,
                                  seed=5, level=0.5) == pytest.approx((-1.0, -want_hi, -want_lo), abs=1e-15)
