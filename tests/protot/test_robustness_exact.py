"""protot.robustness.metrics and .compare, value by value: JS divergences of hand-chosen
distributions (closed forms in ln 2, ln 3), top-k overlaps, Spearman correlations and top-1
agreement counted by hand, the authors' tables read from small written files, type means and
intervals, exact permutation p-values, orders, directions and the control separation on planted
scores whose every number is known, the claim's Measurement, and every refusal with its whole
message."""
from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from compendium import paths, stats
from protot import robustness as rb
from protot.robustness import compare as cp
from protot.robustness import metrics as mt
from protot.robustness.rules import CHANGING, PRESERVING

LN2, LN3 = math.log(2.0), math.log(3.0)


def _raises(message: str):
    """pytest.raises(ValueError) matching the whole message."""
    return pytest.raises(ValueError, match="^" + re.escape(message) + "$")


# ============================================================================ metrics
def test_js_divergence_closed_forms():
    assert mt.LN2 == LN2
    # disjoint supports: ln 2 (also unnormalised)
    assert mt.js_divergence([1.0, 0.0], [0.0, 1.0]).item() == pytest.approx(LN2, abs=1e-15)
    assert mt.js_divergence([2.0, 0.0], [0.0, 3.0]).item() == pytest.approx(LN2, abs=1e-15)
    # p = (1/2, 1/2), q = (1, 0): m = (3/4, 1/4); KL(p||m) = 1/2 ln(4/3), KL(q||m) = ln(4/3) -> 3/4 ln(4/3)
    assert mt.js_divergence([0.5, 0.5], [1.0, 0.0]).item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    assert mt.js_divergence([3.0, 3.0], [0.25, 0.0]).item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # p = (1/2, 1/2, 0), q = (0, 1/2, 1/2): m = (1/4, 1/2, 1/4); each KL = 1/2 ln 2 -> 1/2 ln 2
    assert mt.js_divergence([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]).item() == pytest.approx(LN2 / 2, abs=1e-15)
    # rows reduce the last axis
    got = mt.js_divergence([[1.0, 0.0], [0.5, 0.5], [0.3, 0.7]], [[0.0, 1.0], [1.0, 0.0], [0.3, 0.7]])
    assert got.dtype == torch.float64 and got.shape == (3,)
    assert got.tolist() == pytest.approx([LN2, 0.75 * math.log(4 / 3), 0.0], abs=1e-15)
    t = mt.js_divergence(torch.tensor([0.5, 0.5], dtype=torch.float32), np.array([1.0, 0.0]))
    assert t.dtype == torch.float64 and t.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # integer counts are read as float64 (p = (1/2, 1/2), q = (1, 0) again), to float64 precision
    i = mt.js_divergence([1, 1], [2, 0])
    assert i.dtype == torch.float64 and i.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-15)
    # a tensor that requires grad is taken as it is (not through numpy)
    g = mt.js_divergence(torch.tensor([0.5, 0.5], requires_grad=True), [1.0, 0.0])
    assert g.requires_grad and g.item() == pytest.approx(0.75 * math.log(4 / 3), abs=1e-7)


def test_js_divergence_refusals():
    for p, q in (([0.5, -0.5], [0.5, 0.5]), ([0.5, 0.5], [1.5, -0.5])):
        with _raises("probabilities must be non-negative"):
            mt.js_divergence(p, q)
    for p, q in (([0.0, 0.0], [0.5, 0.5]), ([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [0.0, 0.0]]),
                 ([[0.5, 0.5], [0.0, 0.0]], [[0.5, 0.5], [1.0, 0.0]])):
        with _raises("a probability vector sums to 0"):
            mt.js_divergence(p, q)


def test_js_from_logits_closed_form_and_bounds():
    # logits (0, ln 3) -> (1/4, 3/4); (ln 3, 0) -> (3/4, 1/4); m = (1/2, 1/2);
    # KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 3/4 ln 3 - ln 2 each -> JS = 3/4 ln 3 - ln 2
    want = 0.75 * LN3 - LN2
    assert mt.js_from_logits([0.0, LN3], [LN3, 0.0]).item() == pytest.approx(want, abs=1e-15)
    assert mt.js_from_logits([5.0, 5.0 + LN3], [LN3 - 2.0, -2.0]).item() == pytest.approx(want, abs=1e-14)
    # rows: the softmax runs along the last axis
    rows = mt.js_from_logits([[0.0, LN3], [LN3, 0.0], [1.0, 1.0]], [[LN3, 0.0], [LN3, 0.0], [2.0, 2.0]])
    assert rows.tolist() == pytest.approx([want, 0.0, 0.0], abs=1e-15)
    # clamped into [0, ln 2]: nearly equal logits round below 0, large disjoint ones above ln 2
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 8, generator=g).double()
    near = mt.js_from_logits(x, x + 1e-12 * torch.randn(4000, 8, generator=g).double())
    assert (near >= 0).all() and near.max() < 1e-15
    far = mt.js_from_logits(torch.randn(4000, 6, generator=g).double() * 60, torch.randn(4000, 6, generator=g).double() * 60)
    assert (far <= LN2).all() and (far == LN2).any()


def test_topk_overlap_by_hand():
    p, q = [0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]
    # top-1 {0} vs {3}; top-2 {0,1} vs {2,3}; top-3 {0,1,2} vs {1,2,3}: 2 shared; top-4 all
    assert [mt.topk_overlap(p, q, k).item() for k in (1, 2, 3, 4)] == pytest.approx([0.0, 0.0, 2 / 3, 1.0], abs=1e-15)
    # k = 10 by default: ranks 12 > 11 > ... > 1 and the same rolled by two: top-10 {0..9} vs {2..11} -> 8 / 10
    a = np.arange(12, 0, -1, dtype=float)
    assert mt.topk_overlap(a, np.roll(a, 2)).item() == pytest.approx(0.8, abs=1e-15)
    # rows, and logits work as well as probabilities
    # row 0: top-2 {1, 2} vs {0, 2} -> 1/2; row 1: {0, 1} vs {1, 0} -> 1
    got = mt.topk_overlap([[0.0, 5.0, 1.0], [3.0, 2.0, 1.0]], [[5.0, 0.0, 1.0], [2.0, 3.0, 1.0]], k=2)
    assert got.dtype == torch.float64 and got.tolist() == [0.5, 1.0]
    for k in (0, 5):
        with _raises(f"k must lie in 1..4 (the vocabulary), got {k}"):
            mt.topk_overlap(p, q, k)
    with _raises("k must lie in 1..4 (the vocabulary), got 10"):      # the default k
        mt.topk_overlap(p, q)


def test_top1_agreement_by_hand():
    got = mt.top1_agreement([[0.1, 0.9], [0.6, 0.4], [2.0, 1.0]], [[0.2, 0.8], [0.4, 0.6], [5.0, -1.0]])
    assert got.dtype == torch.float64 and got.tolist() == [1.0, 0.0, 1.0]


def test_spearman_by_hand():
    # ranks (1, 2, 3) vs (1, 3, 2): 1 - 6 x 2 / (3 x 8) = 1/2
    assert mt.spearman([10, 20, 30], [5, 9, 7]) == pytest.approx(0.5, abs=1e-15)
    # ties take average ranks: (1.5, 1.5, 3) vs (1, 2, 3): centred (-.5, -.5, 1), (-1, 0, 1):
    # 1.5 / sqrt(1.5 x 2) = sqrt(3) / 2
    assert mt.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2, abs=1e-15)
    assert mt.spearman([1, 2], [4, 3]) == pytest.approx(-1.0, abs=1e-15)          # two items suffice
    # ranks (1.5, 1.5, 3.5, 3.5) (their standard deviation is 1) vs (1, 2, 3, 4): centred (-1,-1,1,1) and
    # (-1.5,-.5,.5,1.5): 4 / (2 sqrt 5) = 2 / sqrt 5, either way round
    assert mt.spearman([1, 1, 2, 2], [1, 2, 3, 4]) == pytest.approx(2 / math.sqrt(5), abs=1e-15)
    assert mt.spearman([1, 2, 3, 4], [5, 5, 7, 7]) == pytest.approx(2 / math.sqrt(5), abs=1e-15)
    with warnings.catch_warnings():                      # nan, and quietly (no division by zero)
        warnings.simplefilter("error")
        for x, y in (([1.0], [2.0]), ([], []), ([3, 3, 3], [1, 2, 3]), ([1, 2, 3], [4, 4, 4])):
            assert math.isnan(mt.spearman(x, y))
    with _raises("spearman needs two samples of the same length, got 3 and 2"):
        mt.spearman([1, 2, 3], [1, 2])


def test_spearman_topk_union_by_hand():
    p = [0.30, 0.25, 0.20, 0.10, 0.08, 0.07]
    q = [0.05, 0.30, 0.25, 0.10, 0.08, 0.22]
    # top-2: {0, 1} and {1, 2}: union {0, 1, 2}; p ranks (3, 2, 1), q (0.05, 0.30, 0.25) ranks (1, 3, 2):
    # centred (1, 0, -1) and (-1, 1, 0): -1 / 2
    assert mt.spearman_topk_union(p, q, k=2).item() == pytest.approx(-0.5, abs=1e-15)
    # rows and leading axes are kept: (2, 1, 6) -> (2, 1)
    two = mt.spearman_topk_union(np.array([[p], [p]]), np.array([[q], [p]]), k=2)
    assert two.shape == (2, 1) and two.dtype == torch.float64
    assert two.flatten().tolist() == pytest.approx([-0.5, 1.0], abs=1e-15)
    # k = 10 by default: 12 tokens, p descending, q the same rolled by 2; the union is every token
    a = np.arange(12, 0, -1, dtype=float)
    want = mt.spearman(a, np.roll(a, 2))
    # ranks of p: 12, 11, ..., 1; of q: (2, 1, 12, 11, ..., 3): d = (10, 10, -2 x 10): sum d^2 = 240;
    # rho = 1 - 6 x 240 / (12 x 143) = 1 - 1440 / 1716 = 276 / 1716
    assert want == pytest.approx(276 / 1716, abs=1e-15)
    assert mt.spearman_topk_union(a, np.roll(a, 2)).item() == pytest.approx(276 / 1716, abs=1e-15)
    with _raises("k must lie in 1..6 (the vocabulary), got 10"):
        mt.spearman_topk_union(p, q)


def test_pair_metrics_by_hand():
    # row 0: p = (1/2, 1/3, 1/6), q = (1/3, 1/2, 1/6): m = (5/12, 5/12, 1/6);
    #   JS = 1/2 ln(6/5) + 1/3 ln(4/5); top-2 {0, 1} both: overlap 1; over {0, 1}: spearman -1; top-1 differs
    # row 1: p = q: JS 0, overlap 1, spearman 1, top-1 agrees
    p = np.log([[1 / 2, 1 / 3, 1 / 6], [1 / 2, 1 / 3, 1 / 6]]) + 7.0
    q = np.log([[1 / 3, 1 / 2, 1 / 6], [1 / 2, 1 / 3, 1 / 6]])
    m = mt.pair_metrics(p, q, k=2)
    assert list(m) == ["js", "overlap", "spearman", "top1"] and all(isinstance(v, np.ndarray) for v in m.values())
    assert m["js"].tolist() == pytest.approx([0.5 * math.log(6 / 5) + math.log(4 / 5) / 3, 0.0], abs=1e-15)
    assert m["overlap"].tolist() == [1.0, 1.0] and m["top1"].tolist() == [0.0, 1.0]
    assert m["spearman"].tolist() == pytest.approx([-1.0, 1.0], abs=1e-15)
    # leading axes (1, 2, 3): every metric along the last one
    m3 = mt.pair_metrics(p[None], q[None], k=2)
    assert m3["js"].shape == (1, 2) and m3["js"][0].tolist() == pytest.approx(m["js"].tolist(), abs=1e-15)
    assert m3["overlap"].tolist() == [[1.0, 1.0]] and m3["top1"].tolist() == [[0.0, 1.0]]
    assert m3["spearman"][0].tolist() == pytest.approx([-1.0, 1.0], abs=1e-15)
    # top-1: row 0 top-1 sets {0} vs {1}
    assert mt.pair_metrics(p, q, k=1)["overlap"].tolist() == [0.0, 1.0]
    with _raises("k must lie in 1..3 (the vocabulary), got 10"):
        mt.pair_metrics(p, q)
    # k = 10 by default on 12 tokens
    a = np.arange(12, 0, -1, dtype=float)
    d = mt.pair_metrics(a[None], np.roll(a, 2)[None])
    assert d["overlap"].tolist() == pytest.approx([0.8], abs=1e-15) and d["spearman"].tolist() == pytest.approx([276 / 1716], abs=1e-15)


# ============================================================================ compare
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


def _pairs(values: dict[str, list[float]], start: int = 3):
    """Pairs of the given types (in order) and one score column per name: {type: [js, ...]}."""
    types = [t for t, xs in values.items() for _ in xs]
    idx = pd.RangeIndex(start, start + len(types))
    pairs = pd.DataFrame({"edit_type": types}, index=idx)
    js = [x for xs in values.values() for x in xs]
    return pairs, pd.DataFrame({"js": js, "other": [10 * x for x in js]}, index=idx)


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


def _continuous(types, n=12, seed=0):
    """Pairs of ``types`` with spread, seeded scores (type i around 0.1 x (i + 1)): bootstrap ends that
    move with the seed and the number of resamples."""
    rng = np.random.default_rng(seed)
    return _pairs({t: list(0.1 * (i + 1) + rng.uniform(-0.15, 0.15, n)) for i, t in enumerate(types)})


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


def test_control_separation_level():
    pairs, scores = _continuous(("gender", "number", "typo", "synonym"), n=9, seed=3)
    s = cp.control_separation(pairs, scores, n_boot=300, seed=1, level=0.5)
    # types in the order gender, number (changing), synonym, typo (preserving); the quartiles
    vals = {t: scores.js[pairs.edit_type == t].to_numpy() for t in ("gender", "number", "synonym", "typo")}
    assert (s["ci_lo"], s["ci_hi"]) == pytest.approx(_sep_boot(vals, ["gender", "number", "synonym", "typo"], 300, 1, 2, 0.5),
                                                      abs=1e-15)
    assert (s["ci_lo"], s["ci_hi"]) != pytest.approx(_sep_boot(vals, ["gender", "number", "synonym", "typo"], 300, 1, 2, 2 / 3),
                                                      abs=1e-6)


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


def test_control_separation_refusals():
    have = {"only changing": ({"gender": [0.1], "number": [0.2]}, "['gender', 'number']"),
            "only preserving": ({"typo": [0.1]}, "['typo']")}
    for values, listed in have.values():
        pairs, scores = _pairs(values)
        with _raises("control separation needs meaning-changing ('gender', 'negation', 'number') and "
                     "meaning-preserving ('abbreviation', 'contraction', 'morphology', 'punctuation', 'spelling', "
                     f"'synonym', 'typo') pairs; have {listed}"):
            cp.control_separation(pairs, scores)


# -- the claim's Measurement on planted scores whose every number is known
PAPER = {"ProtoT": {**{t: 7.0 - i for i, t in enumerate(PRESERVING)}, **{t: 9.0 for t in CHANGING}},
         "LLaMA": {**{t: 1.0 + i for i, t in enumerate(PRESERVING)}, **{t: 9.0 for t in CHANGING}}}
# ProtoT - LLaMA in the paper per preserving type: 6, 4, 2, 0, -2, -4, -6 (punctuation: a tie)


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


def test_package_exports():
    assert rb.js_divergence is mt.js_divergence and rb.measure_robustness is cp.measure_robustness
    assert cp.METRICS == {"JS_mean": "js", "overlap_mean": "overlap", "spearman_mean": "spearman", "top1_same_rate": "top1"}
    assert cp.AUTHOR_MODELS == {"ProtoAttn": "ProtoT", "ProtoT": "ProtoT", "LLaMA": "LLaMA", "Mamba": "Mamba",
                                "Deltanet": "DeltaNet", "DeltaNet": "DeltaNet"}
