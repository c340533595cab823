"""protot.robustness.benchmark_compare, value by value: copy-weighted slice means, resamples of
distinct pairs that copies never narrow, orders and directions against the authors' values on
planted scores whose every number is known, the tag-flip separation, the comparison with the
authors' tables, the labels of models that join once committed, and the claim's Measurement."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from compendium import claims
from protot.robustness import benchmark_compare as bc
from protot.robustness import compare as cp
from protot.robustness.rules import CHANGING, PRESERVING

CLAIM = "protot/robustness-jsd"
SLICES = PRESERVING + CHANGING


def _bench(values: dict[str, list[float]], copies: dict[str, list[int]] | None = None, start: int = 7):
    """Distinct pairs of the given slices with a score column js (and overlap = 1 - js, spearman =
    1 - 2 js, top1 = js < 0.5)."""
    sl = [s for s, xs in values.items() for _ in xs]
    cps = [c for s, xs in values.items() for c in ((copies or {}).get(s) or [1] * len(xs))]
    idx = pd.RangeIndex(start, start + len(sl))
    js = [x for xs in values.values() for x in xs]
    return (pd.DataFrame({"slice": sl, "copies": cps}, index=idx),
            pd.DataFrame({"js": js, "overlap": [1 - x for x in js], "spearman": [1 - 2 * x for x in js],
                          "top1": [float(x < 0.5) for x in js]}, index=idx))


def test_slice_means_weigh_each_pair_by_its_copies():
    pairs, sc = _bench({"a": [1.0, 5.0], "b": [2.0]}, {"a": [3, 1]})
    assert bc.slice_means(pairs, sc, "js", ["a", "b"]).to_dict() == {"a": 2.0, "b": 2.0}
    with pytest.raises(ValueError, match="^no pairs of slice 'c'$"):
        bc.slice_means(pairs, sc, "js", ["a", "c"])
    with pytest.raises(ValueError, match=r"^the scores have no column 'tokens'; have \['js', 'overlap', 'spearman', 'top1'\]$"):
        bc.slice_means(pairs, sc, "tokens", ["a"])
    with pytest.raises(ValueError, match="^the scores do not have the pairs' index$"):
        bc.slice_means(pairs, sc.reset_index(drop=True), "js", ["a"])


def test_boot_means_by_hand():
    pairs, sc = _bench({"a": [1.0, 5.0]}, {"a": [3, 1]})
    drawn = {"a": np.array([[0, 0], [1, 1], [0, 1]])}           # positions of pairs
    assert bc.boot_means(pairs, sc, "js", ["a"], drawn)[:, 0].tolist() == [1.0, 5.0, 2.0]
    with pytest.raises(ValueError, match=r"^no draws for the slices \['b'\]$"):
        bc.boot_means(pairs, sc, "js", ["b"], drawn)


def test_draws_stay_within_each_slice_and_are_seeded():
    pairs, _ = _bench({"a": [0.1] * 3, "b": [0.2] * 5})
    d = bc.draws(pairs, ["a", "b"], n_boot=50, seed=3)
    assert d["a"].shape == (50, 3) and d["b"].shape == (50, 5)
    assert set(np.unique(d["a"])) <= {0, 1, 2} and set(np.unique(d["b"])) <= {3, 4, 5, 6, 7}
    rng = np.random.default_rng(3)
    assert (d["a"] == rng.integers(0, 3, (50, 3))).all() and (d["b"] == 3 + rng.integers(0, 5, (50, 5))).all()
    assert not (bc.draws(pairs, ["a", "b"], n_boot=50, seed=4)["b"] == d["b"]).all()
    with pytest.raises(ValueError, match="^n_boot must be at least 1, got 0$"):
        bc.draws(pairs, ["a"], n_boot=0)


def test_copies_never_narrow_an_interval():
    x = list(np.linspace(0.0, 0.9, 10))
    once, sc1 = _bench({"a": x})
    fifty, sc50 = _bench({"a": x}, {"a": [50] * 10})
    s1 = bc.slice_summary(once, sc1, "js", ["a"], bc.draws(once, ["a"], 400, 0))
    s50 = bc.slice_summary(fifty, sc50, "js", ["a"], bc.draws(fifty, ["a"], 400, 0))
    pd.testing.assert_frame_equal(s1[["mean", "ci_lo", "ci_hi"]], s50[["mean", "ci_lo", "ci_hi"]], rtol=1e-12, atol=0)
    assert (s1.records.iloc[0], s50.records.iloc[0], s50.distinct.iloc[0]) == (10, 500, 10)
    # resampling the 500 records as if each were a pair of its own would narrow it about sqrt(50)-fold
    records, scr = _bench({"a": [v for v in x for _ in range(50)]})
    sr = bc.slice_summary(records, scr, "js", ["a"], bc.draws(records, ["a"], 400, 0))
    assert sr["mean"].iloc[0] == pytest.approx(s50["mean"].iloc[0])
    assert (sr.ci_hi - sr.ci_lo).iloc[0] < 0.25 * (s50.ci_hi - s50.ci_lo).iloc[0]


def test_a_slice_of_one_pair_has_no_spread():
    pairs, sc = _bench({"a": [0.3]}, {"a": [500]})
    s = bc.slice_summary(pairs, sc, "js", ["a"], bc.draws(pairs, ["a"], 100, 0))
    assert s.loc["a"].to_dict() == {"mean": 0.3, "ci_lo": 0.3, "ci_hi": 0.3, "records": 500, "distinct": 1}


def _planted(theirs: dict, sign: float = 1.0, n: int = 4, noise: float = 0.0, seed: int = 0):
    """Pairs of every slice, n distinct each (copies 1, 2, ...), scores sign x the authors' values."""
    rng = np.random.default_rng(seed)
    vals = {s: list(sign * theirs[s] + 1.0 + noise * rng.uniform(-1, 1, n)) for s in SLICES}
    return _bench(vals, {s: list(range(1, n + 1)) for s in SLICES})


def _paper() -> dict:
    pv = claims.get_claim(CLAIM).paper_value
    return {m: {**pv["js_preserving"][m], **pv["js_changing"][m]} for m in pv["js_preserving"]}


def test_orders_exact_and_reversed():
    paper = _paper()
    pairs, same = _planted(paper["ProtoT"])
    _, rev = _planted(paper["LLaMA"], sign=-1.0)
    drawn = bc.draws(pairs, SLICES, 200, 0)
    tab, (rho, lo, hi) = bc.orders(pairs, {"ProtoT": same, "LLaMA": rev}, paper, drawn)
    assert tab.set_index("model")["rho"].to_dict() == {"ProtoT": 1.0, "LLaMA": -1.0}
    assert tab.set_index("model")["perm_p"].to_dict() == {"ProtoT": 1 / 5040, "LLaMA": 1.0}
    assert tab.set_index("model")["tau"].to_dict() == {"ProtoT": pytest.approx(1.0), "LLaMA": pytest.approx(-1.0)}
    assert (rho, lo, hi) == (-1.0, -1.0, -1.0)                     # no spread within a slice: every resample the same
    assert tab[["rho_ci_lo", "rho_ci_hi"]].to_numpy().tolist() == [[1.0, 1.0], [-1.0, -1.0]]
    with pytest.raises(ValueError, match=r"^no authors' values for model 'X'; have \['DeltaNet', 'LLaMA', 'Mamba', 'ProtoT'\]$"):
        bc.orders(pairs, {"X": same}, paper, drawn)
    with pytest.raises(ValueError, match=re.escape("the authors' values of ProtoT lack the slices ['typo']")):
        bc.orders(pairs, {"ProtoT": same}, {"ProtoT": {k: v for k, v in paper["ProtoT"].items() if k != "typo"}}, drawn)
    with pytest.raises(ValueError, match="^orders needs at least one model's scores$"):
        bc.orders(pairs, {}, paper, drawn)


def test_the_smallest_order_is_taken_in_each_resample():
    paper = _paper()
    pairs, a = _planted(paper["ProtoT"], noise=0.4, seed=1)
    _, b = _planted(paper["ProtoT"], noise=0.4, seed=2)
    drawn = bc.draws(pairs, SLICES, 300, 5)
    tab, (rho, lo, hi) = bc.orders(pairs, {"A": a, "B": b}, {"A": paper["ProtoT"], "B": paper["ProtoT"]}, drawn)
    ref = np.array([paper["ProtoT"][s] for s in PRESERVING])
    per = [cp._rank_rho(bc.boot_means(pairs, s, "js", PRESERVING, drawn), ref) for s in (a, b)]
    q = np.quantile(np.minimum(*per), [0.025, 0.975])
    assert rho == tab["rho"].min() and (lo, hi) == (float(q[0]), float(q[1]))
    assert lo < hi                                                    # the noise gives the resamples a spread


def test_directions_by_hand():
    pairs, a = _bench({"x": [0.5, 0.6], "y": [0.1, 0.2], "z": [0.1, 0.3], "w": [0.2, 0.2]})
    _, b = _bench({"x": [0.1, 0.2], "y": [0.3, 0.4], "z": [0.2, 0.2], "w": [0.2, 0.2]})
    ta = {"x": 2.0, "y": 3.0, "z": 2.0, "w": 1.0}
    tb = {"x": 1.0, "y": 1.0, "z": 1.0, "w": 1.0099}               # w: within 1% of the mean: a tie
    d = bc.directions(pairs, a, b, ta, tb, bc.draws(pairs, list(ta), 500, 0), slices=list(ta))
    assert d["ours"].to_dict() == {"x": "above", "y": "below", "z": "undecided", "w": "undecided"}
    assert d["theirs"].to_dict() == {"x": "above", "y": "above", "z": "above", "w": "tie"}
    assert d["agree"].tolist() == [True, False, None, None]
    assert d["ours_diff"].to_numpy() == pytest.approx([0.4, -0.2, 0.0, 0.0])
    assert d.loc["x", ["ci_lo", "ci_hi"]].to_numpy() == pytest.approx([0.4, 0.4])
    assert d.loc["z", "ci_lo"] == pytest.approx(-0.1) and d.loc["z", "ci_hi"] == pytest.approx(0.1)


def test_separation_by_hand():
    pairs, sc = _bench({**{s: [0.5, 0.5] for s in CHANGING}, **{s: [0.1, 0.1] for s in PRESERVING}})
    got = bc.separation(pairs, sc, bc.draws(pairs, SLICES, 100, 0))
    assert got == {"diff": pytest.approx(0.4), "ci_lo": pytest.approx(0.4), "ci_hi": pytest.approx(0.4), "separates": True}
    pairs, sc = _bench({**{s: [0.1, 0.1] for s in CHANGING}, **{s: [0.5, 0.5] for s in PRESERVING}})
    assert bc.separation(pairs, sc, bc.draws(pairs, SLICES, 100, 0))["separates"] is False


def test_table_agreement_by_hand():
    pairs, sc = _bench({s: [0.1 * (i + 1)] for i, s in enumerate(SLICES)})
    rows = [(s, "DeltaNet", "js", float(i), "preserved") for i, s in enumerate(PRESERVING)]
    rows += [(s, "DeltaNet", "overlap", float(-i), "changed") for i, s in enumerate(CHANGING)]
    rows += [(s, "LLaMA", "js", 1.0, "preserved") for s in PRESERVING]
    authors = pd.DataFrame(rows, columns=["type", "model", "metric", "value", "meaning"])
    got = bc.table_agreement(pairs, {"DeltaNet (new)": sc}, authors, bc.authors_column)
    # js: ours rise with the slice's position, theirs too; overlap = 1 - js falls, theirs falls
    assert got.to_dict("records") == [
        {"model": "DeltaNet (new)", "metric": "js", "meaning": "preserved", "slices": 7, "rho": 1.0},
        {"model": "DeltaNet (new)", "metric": "overlap", "meaning": "changed", "slices": 3, "rho": 1.0}]


def test_benchmark_labels():
    arch = {"p": "protot", "l": "llama", "d": "deltanet", "d2": "deltanet", "g": "gpt2"}.get
    assert bc.benchmark_labels(["p", "l", "d"], ["d2"], ["p", "l", "d", "d2"], arch) == (
        {"ProtoT": "p", "LLaMA": "l", "DeltaNet": "d", "DeltaNet (d2)": "d2"}, [])
    assert bc.benchmark_labels(["p", "l", "d"], ["d2"], ["p", "l", "d"], arch) == (
        {"ProtoT": "p", "LLaMA": "l", "DeltaNet": "d"}, ["d2"])
    with pytest.raises(ValueError, match=r"^g: architecture 'gpt2' is not one of the authors' "):
        bc.benchmark_labels(["p", "l"], ["g"], ["p", "l", "g"], arch)
    assert bc.authors_column("DeltaNet (deltanet-fla-authors-small)") == "DeltaNet" and bc.authors_column("LLaMA") == "LLaMA"


def _rule(separates: bool):
    return claims.Measurement(claim=CLAIM, values={"control_separates": separates, "min_order_rho": 0.5},
                              evidence={"order": {"ProtoT": {"rho": 0.5}}, "control_separation": {"ProtoT": {"diff": 0.1}}},
                              tables={"robustness_js": pd.DataFrame({"x": [1]})})


def test_measure_benchmark_on_planted_scores():
    paper = _paper()
    pairs, protot = _planted(paper["ProtoT"])
    _, llama = _planted(paper["LLaMA"])
    tokens = {"tokens_after": [0 if s == "punctuation" and i % 2 else 3 for i, s in enumerate(pairs.slice)]}
    protot = protot.assign(**tokens)
    m = bc.measure_benchmark(pairs, {"ProtoT": protot, "LLaMA": llama, "DeltaNet (d2)": _planted(paper["DeltaNet"])[1]},
                             paper, _rule(False), n_boot=100, authors=cp.authors_table(
                                 claims.paths.papers_dir() / "protot" / "authors_robustness"))
    v = m.values
    assert (v["min_order_rho"], v["min_order_rho_ci_low"], v["min_order_rho_ci_high"]) == (1.0, 1.0, 1.0)
    assert v["max_order_perm_p"] == 1 / 5040
    # ProtoT - LLaMA: our difference is the authors' exactly, so every decided slice agrees (morphology is their tie)
    assert (v["direction_matches"], v["direction_mismatches"]) == (6, 0)
    assert v["control_separates"] is False and v["min_pairs_per_type"] == 4
    ev = m.evidence
    assert ev["records_per_slice"] == {s: 10 for s in SLICES} and ev["distinct_pairs_per_slice"] == {s: 4 for s in SLICES}
    assert ev["records_whose_edit_reaches_the_last_token"]["punctuation"] == 2 + 4        # copies 2 and 4
    assert ev["rule_pairs"]["values"]["min_order_rho"] == 0.5
    assert [d["agree"] for d in ev["tag_flip_directions"]] == [True, True, True]
    assert set(m.tables) == {"benchmark_slices", "benchmark_orders", "benchmark_directions", "benchmark_tables",
                             "rule_robustness_js"}
    assert m.config == {"n_boot": 100, "seed": 0, "tie_rel": 0.01}
    assert bc.measure_benchmark(pairs, {"ProtoT": protot, "LLaMA": llama}, paper, _rule(True),
                                n_boot=100).values["control_separates"] is True


def test_measure_benchmark_refusals():
    paper = _paper()
    pairs, sc = _planted(paper["ProtoT"])
    with pytest.raises(ValueError, match=r"^the check compares 'ProtoT' with 'LLaMA'; scores hold \['ProtoT'\]$"):
        bc.measure_benchmark(pairs, {"ProtoT": sc}, paper, _rule(True))
    with pytest.raises(ValueError, match=r"^no paper values for model 'GPT \(g\)' \(the authors' 'GPT'\)"):
        bc.measure_benchmark(pairs, {"ProtoT": sc, "LLaMA": sc, "GPT (g)": sc}, paper, _rule(True))
    keep = pairs.slice != "number"
    with pytest.raises(ValueError, match=r"^the pairs lack the slices \['number'\]$"):
        bc.measure_benchmark(pairs[keep], {"ProtoT": sc[keep], "LLaMA": sc[keep]}, paper, _rule(True))
