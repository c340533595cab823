"""The claims' measure_* functions of the ACC++ notebooks 01-05, on tiny hand-made inputs.

Each test recomputes the Measurement's values independently (by hand or another route), checks that
the ledger's check can read them (every quantity present, of the right type), and feeds bad input.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import pytest

from compendium import claims, stats
from tests.ledger_helpers import fits_ledger




# ----------------------------------------------------------------------------- 01_ioi
def test_candidates_exact():
    from accpp.ioi import measure_candidates_exact

    exact = pd.DataFrame([dict(query_side=1e-15, key_side=3e-14, query_vs_residual=2e-7, key_vs_residual=5e-7,
                               softmax_vs_model=1e-8, firings=20),
                          dict(query_side=4e-14, key_side=1e-15, query_vs_residual=9e-7, key_vs_residual=1e-7,
                               softmax_vs_model=3e-8, firings=7)])
    m = measure_candidates_exact(exact, config=dict(model="tiny"))
    assert m.values == dict(max_rel_err=4e-14, n_firings=27)
    assert m.evidence == dict(vs_float32_model=9e-7, softmax_vs_model=3e-8)
    assert "tiny" in m.note and "9.0e-07" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="firings"):
        measure_candidates_exact(exact.drop(columns=["firings"]))
    with pytest.raises(ValueError, match="identity columns"):
        measure_candidates_exact(exact.drop(columns=["query_side", "key_side"]))
    with pytest.raises(ValueError, match="empty"):
        measure_candidates_exact(exact.iloc[:0])


def test_signals_rank1():
    from accpp.ioi import measure_signals_rank1

    per = [[1, 2, 1], [1, 3]]
    m = measure_signals_rank1(per, pd.DataFrame(dict(nodes=[4, 5])), accuracy=0.75)
    assert {k: m.values[k] for k in ("rank1_fraction", "ioi_accuracy", "n_signals", "n_circuits")} == dict(
        rank1_fraction=3 / 5, ioi_accuracy=0.75, n_signals=5, n_circuits=2)
    # circuits resampled whole: the interval's resamples are (2+2)/6, (2+1)/5, (1+1)/4
    by_hand = stats.bootstrap_paired_ci(lambda a, n: a.sum(1) / n.sum(1), [2.0, 1.0], [3.0, 2.0])
    assert (m.values["rank1_ci_low"], m.values["rank1_ci_high"]) == by_hand
    assert 0.5 <= by_hand[0] < 3 / 5 < by_hand[1] <= 2 / 3
    assert m.evidence["rank_counts"] == {1: 3, 2: 1, 3: 1} and m.evidence["rank1_per_circuit"] == [0.667, 0.5]
    assert "over 2 IOI prompts" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="no signal edges"):
        measure_signals_rank1([[]], pd.DataFrame(), 1.0)
    with pytest.raises(ValueError, match="per circuit"):
        measure_signals_rank1([1, 2], pd.DataFrame(), 1.0)
    with pytest.raises(ValueError, match="rank below 1"):
        measure_signals_rank1([[1, 0]], pd.DataFrame(), 1.0)


def test_ioi_roles():
    from accpp.ioi import measure_ioi_roles
    from accpp.roles import ROLES

    r0, r1, r2 = ROLES[0], ROLES[1], ROLES[2]
    role_sets = [{r0: ["9.1"], r1: ["7.3"], "other": ["0.1"]}, {r0: ["10.0"], r2: ["1.2"]}]  # union: 3 roles
    role_sets.append({r0: ["9.1"]})
    expected = [0.5, 1.25, 0.0]      # each prompt's size-matched null (expected roles)
    name_pair = [{r0: ["9.1"]}, {r1: []}]  # per prompt 1, 0 (an empty list is no role)
    m = measure_ioi_roles(role_sets, expected, pd.DataFrame(), accuracy=0.5, name_pair_sets=name_pair)
    # paired by prompt: (2 - 0.5, 2 - 1.25, 1 - 0), the interval from resampling those three pairs
    assert {k: m.values[k] for k in ("n_roles", "ioi_accuracy", "n_null_prompts")} == dict(n_roles=3, ioi_accuracy=0.5,
                                                                                          n_null_prompts=3)
    assert m.values["size_matched_role_excess"] == pytest.approx(3.25 / 3, rel=1e-12)
    assert (m.values["size_matched_role_excess_ci_low"], m.values["size_matched_role_excess_ci_high"]) == \
        stats.paired_bootstrap_ci([2, 2, 1], [0.5, 1.25, 0.0])
    assert m.evidence["per_prompt_roles"] == [2, 2, 1] and m.evidence["size_matched_null_per_prompt"] == expected
    assert m.evidence["roles"][r0] == ["9.1", "10.0"]  # merged, sorted by (layer, head)
    assert "other" not in m.evidence["roles"]  # only the known roles count
    # the earlier null is evidence: the first two prompts against their name-pair circuits
    npn = m.evidence["name_pair_null"]
    assert npn["per_prompt"] == [1, 0] and npn["roles_in_union"] == 1 and npn["excess"] == 1.5
    assert npn["excess_ci"] == list(stats.paired_bootstrap_ci([2, 2], [1, 0]))
    assert m.config["n_null"] == 2 and m.config["n_size_matched"] == 3
    fits_ledger(m)
    assert "name_pair_null" not in measure_ioi_roles(role_sets, expected, pd.DataFrame(), 0.5).evidence
    with pytest.raises(ValueError, match="2 size-matched nulls for 3 traced prompts"):
        measure_ioi_roles(role_sets, expected[:2], pd.DataFrame(), 1.0)
    for bad in ([0.5, 1.25, -0.1], [0.5, 1.25, 5.5], [0.5, 1.25, float("nan")]):
        with pytest.raises(ValueError, match="outside 0..5"):
            measure_ioi_roles(role_sets, bad, pd.DataFrame(), 1.0)
    with pytest.raises(ValueError, match="4 name-pair null circuits for 3 traced prompts"):
        measure_ioi_roles(role_sets, expected, pd.DataFrame(), 1.0, name_pair_sets=name_pair * 2)
    with pytest.raises(ValueError, match="no role sets"):
        measure_ioi_roles([], [], pd.DataFrame(), 1.0)
    with pytest.raises(ValueError, match="must be a dict"):
        measure_ioi_roles([["9.1"]], [0.0], pd.DataFrame(), 1.0)


def test_the_claims_of_accpp_01_share_their_sample_sizes():
    """ioi-circuit-roles registers its own protocol (its null), the notebook reads the others' sample sizes."""
    for profile in ("cpu", "paper", "smoke"):
        shared = claims.protocol("accpp/smaller-than-acc", profile)
        for key in ("accpp/candidates-exact", "accpp/signals-rank1", "accpp/ioi-circuit-roles"):
            own = claims.protocol(key, profile)
            assert {k: own[k] for k in shared if k not in ("aggregation", "selection")} == \
                {k: v for k, v in shared.items() if k not in ("aggregation", "selection")}, (key, profile)


def test_smaller_than_acc():
    from accpp.acc import measure_smaller_than_acc

    t = pd.DataFrame(dict(accpp_nodes=[10, 20], acc_nodes=[30, 100], legacy_nodes=[50, 40],
                          acc_truncated=[False, True], legacy_truncated=[False, False]))
    m = measure_smaller_than_acc(t, accuracy=0.9)
    # ratios 3 and 5 aggregate as their geometric mean, with the interval over prompts
    assert m.values["size_ratio"] == pytest.approx(15 ** 0.5) and m.evidence["arithmetic_mean_ratio"] == 4.0
    assert (m.values["size_ratio_ci_low"], m.values["size_ratio_ci_high"]) == stats.geometric_mean_ci([3.0, 5.0])
    assert m.values["ioi_accuracy"] == 0.9 and m.values["n_compared"] == 2
    assert m.evidence["legacy_ratio"] == pytest.approx(10 ** 0.5) and m.evidence["ratios"] == [3.0, 5.0]
    assert m.evidence["any_truncated"] is True and m.evidence["legacy_any_truncated"] is False
    assert m.evidence["direction"] == "within"
    wide = measure_smaller_than_acc(t.assign(acc_nodes=[15, 300]), accuracy=0.9)    # ratios 1.5 and 15
    assert wide.evidence["direction"] == "straddles"
    assert "ratio" not in t  # the caller's table is left alone
    fits_ledger(m)
    with pytest.raises(ValueError, match="acc_nodes"):
        measure_smaller_than_acc(t.drop(columns=["acc_nodes"]), 1.0)
    with pytest.raises(ValueError, match="no compared prompts"):
        measure_smaller_than_acc(t.iloc[:0], 1.0)
    with pytest.raises(ValueError, match="no nodes"):
        measure_smaller_than_acc(t.assign(accpp_nodes=[0, 1]), 1.0)


# ----------------------------------------------------------------------------- 02_greater_than
def _ko():
    named = {"traced year heads": [(3, 1), (4, 0)], "attention to YY": [(2, 2), (3, 1)], "empty": []}
    ko = {"base": 0.4, "methods": {
        "traced year heads": dict(k=2, drop=0.2, p=1 / 3, n_extreme=0, random_drops=[0.0, 0.1]),
        "attention to YY": dict(k=2, drop=0.05, p=2 / 3, n_extreme=1, random_drops=[0.06, 0.02]),
        "empty": dict(k=0, drop=0.0, p=1.0, n_extreme=0, random_drops=[])}}
    return ko, named


def _gt_seeds():
    # positive seed attribution: prompt 0 head 2.0 and mlp (layer 1) 1.0, prompt 1 mlp (layer 5) 3.0;
    # the negative ones are ignored; prompts 2 and 3 have no positive seed
    return pd.DataFrame(dict(prompt=[0, 0, 1, 1, 2], kind=["head", "mlp", "mlp", "mlp", "emb"], layer=[3, 1, 5, 5, 0],
                             attribution=[2.0, 1.0, 3.0, -4.0, -1.0]))


def _pooled_ci_by_hand(num, den):
    """The percentile bootstrap of sum(num) / sum(den) over 4 prompts (2000 resamples, seed 0), a resample
    without denominator counting as 0."""
    idx = np.random.default_rng(0).integers(0, 4, size=(2000, 4))
    sn, sd = np.asarray(num, dtype=float)[idx].sum(1), np.asarray(den, dtype=float)[idx].sum(1)
    ratio = np.where(sd > 0, sn / np.where(sd > 0, sd, 1.0), 0.0)
    return np.quantile(ratio, 0.025), np.quantile(ratio, 0.975)


def test_greater_than_circuit():
    from accpp import greater_than_claim as gtc

    ko, named = _ko()
    circuits = pd.DataFrame(dict(n_year_heads=[0, 2, 1, 0], mlp_layers=[[], [5], [], [1]], nodes=[3, 9, 7, 2]))
    seeds = _gt_seeds()
    m = gtc.measure_greater_than_circuit(circuits, seeds, ko, named, ranks=[1, 1, 2], prob_diff=0.3, late_from=4,
                                         n_random=2, config=dict(model="tiny", n_selection=2, n_test=2))
    v = m.values
    assert {k: v[k] for k in ("frac_year_head", "n_year_heads_selection", "mlp_share", "late_mlp_share", "knockout_p",
                              "prob_diff", "n_random", "n_circuits")} == dict(
        frac_year_head=0.5, n_year_heads_selection=2, mlp_share=4 / 6, late_mlp_share=3 / 4, knockout_p=1 / 3,
        prob_diff=0.3, n_random=2, n_circuits=4)
    # 2 of the 4 circuits have a year head: Clopper-Pearson over the circuits
    assert (v["frac_year_head_ci_low"], v["frac_year_head_ci_high"]) == stats.binomial_ci(2, 4)
    # per prompt (positive seeds): all 3, 3, 0, 0; MLP 1, 3, 0, 0; late MLP 0, 3, 0, 0 -- pooled over resampled prompts
    assert (v["mlp_share_ci_low"], v["mlp_share_ci_high"]) == pytest.approx(
        _pooled_ci_by_hand([1, 3, 0, 0], [3, 3, 0, 0]), rel=1e-12)
    assert (v["late_mlp_share_ci_low"], v["late_mlp_share_ci_high"]) == pytest.approx(
        _pooled_ci_by_hand([0, 3, 0, 0], [1, 3, 0, 0]), rel=1e-12)
    # none of the 2 random sets reaches the traced heads' drop: Clopper-Pearson of 0 of 2
    assert (v["knockout_p_ci_low"], v["knockout_p_ci_high"]) == pytest.approx((0.0, 1 - 0.025 ** 0.5), rel=1e-12)
    assert m.evidence["knockout"]["attention to YY"]["p_ci"] == list(stats.permutation_p_interval(1, 2))
    assert m.evidence["knockout"]["empty"]["p_ci"] == [1.0, 1.0]
    assert m.evidence["year_heads_selection"] == ["A3.1", "A4.0"] and m.evidence["rank1"] == 2 / 3
    assert m.evidence["units_prob_diff_test"] == 0.4
    kt = m.tables["02_greater_than_knockouts"].set_index("method")
    assert kt.loc["attention to YY", "heads"] == "A2.2, A3.1" and kt.loc["attention to YY", "random_drop_mean"] == 0.04
    assert kt.loc["attention to YY", "n_extreme"] == 1
    assert math.isnan(kt.loc["empty", "random_drop_max"])
    assert "mlp_layers" not in m.tables["02_greater_than_circuits"]
    assert "heads chosen on 2, knocked out on 2" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="traced year heads"):
        gtc.measure_greater_than_circuit(circuits, seeds, {"base": 0, "methods": {}}, named, [1], 0.3, 4, 2)
    with pytest.raises(ValueError, match="positive attribution"):
        gtc.measure_greater_than_circuit(circuits, seeds.assign(attribution=-1.0), ko, named, [1], 0.3, 4, 2)
    with pytest.raises(ValueError, match="lacks column"):
        gtc.mlp_seed_shares(seeds.drop(columns=["layer"]), 4)
    with pytest.raises(ValueError, match="lacks column 'prompt'"):
        gtc.measure_greater_than_circuit(circuits, seeds.drop(columns=["prompt"]), ko, named, [1], 0.3, 4, 2)
    with pytest.raises(ValueError, match=r"prompt indices must lie in 0..3"):
        gtc.mlp_share_intervals(seeds.assign(prompt=[0, 0, 1, 1, 4]), 4, n_prompts=4)
    with pytest.raises(ValueError, match="n_year_heads"):
        gtc.measure_greater_than_circuit(circuits.iloc[:0], seeds, ko, named, [1], 0.3, 4, 2)


def test_mlp_share_intervals_resample_prompts_not_seed_rows():
    from accpp.greater_than_claim import mlp_share_intervals

    # prompt 0: one MLP seed of 1 and one head seed of 1; prompt 1: one MLP seed of 10 (layer 5)
    seeds = pd.DataFrame(dict(prompt=[0, 0, 1], kind=["mlp", "head", "mlp"], layer=[1, 2, 5],
                              attribution=[1.0, 1.0, 10.0]))
    out = mlp_share_intervals(seeds, late_from=4, n_prompts=2, level=0.4)
    # resamples: both prompt 0 (1/4: share 1/2), one of each (1/2: 11/12), both prompt 1 (1/4: 1); the 30%
    # and 70% quantiles fall in the middle group. Resampling seed rows, or averaging per-prompt shares
    # ((1/2 + 1) / 2 = 3/4), would not give 11/12.
    assert (out["mlp_share_ci_low"], out["mlp_share_ci_high"]) == pytest.approx((11 / 12, 11 / 12), rel=1e-12)
    assert (out["late_mlp_share_ci_low"], out["late_mlp_share_ci_high"]) == pytest.approx((10 / 11, 10 / 11), rel=1e-12)
    # a third prompt without seeds is a unit too: it changes the resamples
    assert mlp_share_intervals(seeds, 4, n_prompts=3, level=0.4) != out


def test_mlp_seed_shares_without_mlps():
    from accpp.greater_than_claim import mlp_seed_shares

    share, late = mlp_seed_shares(pd.DataFrame(dict(kind=["head"], layer=[0], attribution=[1.0])), 1)
    assert share == 0.0 and math.isnan(late)


def test_seed_table_numbers_the_prompts():
    import networkx as nx

    from accpp.greater_than_claim import seed_table
    from accpp.graph import Circuit

    def circuit(seeds):
        g = nx.MultiDiGraph()
        g.add_node("LOGITS@5", kind="logits", layer=3, head=-1, dest=5, src=-1)
        for i, (kind, layer, a) in enumerate(seeds):
            g.add_node(f"n{i}", kind=kind, layer=layer, head=0, dest=5, src=1)
            g.add_edge(f"n{i}", "LOGITS@5", side="seed", attribution=a)
        g.add_edge("n0", "n0", side="d", attribution=9.0)   # not a seed edge
        return Circuit(g, [], 0.0, 0.0, 0)

    t = seed_table([circuit([("mlp", 2, 1.5), ("head", 1, -0.5)]), circuit([("emb", 0, 2.0)])])
    assert t.to_dict("records") == [dict(prompt=0, kind="mlp", layer=2, attribution=1.5),
                                    dict(prompt=0, kind="head", layer=1, attribution=-0.5),
                                    dict(prompt=1, kind="emb", layer=0, attribution=2.0)]
    assert list(seed_table([]).columns) == ["prompt", "kind", "layer", "attribution"]


# ----------------------------------------------------------------------------- 03_multilingual_ioi
def _spec_table():
    rows = []
    for level, base in (("components", 0.1), ("signals", 0.4)):
        for kind, shift in (("plain", 0.0), ("chance-corrected", 0.05)):
            rows.append(dict(level=level, jaccard=kind, specificity=base + shift, specificity_ci_low=base - 0.1,
                             specificity_ci_high=base + 0.2, cross=0.5, null=0.6, ratio=0.8))
    return pd.DataFrame(rows).set_index(["level", "jaccard"])


def test_component_reuse():
    from accpp.multilingual import measure_component_reuse

    pairs = pd.DataFrame(dict(pair=["en-es"] * 3, prompt=[0, 1, 2], components=[0.8, 0.5, 0.6],
                              edges=[0.4, 0.4, 0.4], signals=[0.3, 0.6, 0.2]))
    gap = {False: dict(gap=0.3, ci_low=0.1, ci_high=0.5), True: dict(gap=0.25, ci_low=0.05, ci_high=0.45)}
    m = measure_component_reuse(dict(components=0.7, edges=0.5, signals=0.2), pairs, dict(components=0.6),
                                _spec_table(), gap, dict(en=0.9, es=0.7, fr=0.8), n_parallel=3,
                                config=dict(model="tiny"))
    assert m.values["reuse_gap"] == pytest.approx(0.5, abs=1e-15)
    assert m.values["frac_pairs_component_gt_signal"] == 2 / 3
    assert m.values["min_language_accuracy"] == 0.7 and m.values["specificity_gap"] == 0.25
    assert (m.values["specificity_gap_ci_low"], m.values["specificity_gap_ci_high"]) == (0.05, 0.45)
    assert m.unit.startswith("signal minus component specificity")
    assert m.evidence["specificity"]["signals_corrected"]["specificity"] == pytest.approx(0.45)
    assert m.evidence["signal_minus_component_specificity"]["plain"]["gap"] == 0.3
    assert "components +0.15, signals +0.45" in m.note and "+0.25 (95% CI +0.05 to +0.45)" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="'signals'"):
        measure_component_reuse(dict(components=0.7), pairs, {}, _spec_table(), gap, dict(en=1.0), 3)
    with pytest.raises(ValueError, match="no per-language accuracy"):
        measure_component_reuse(dict(components=0.7, signals=0.2), pairs, {}, _spec_table(), gap, {}, 3)
    with pytest.raises(ValueError, match="chance-corrected"):
        measure_component_reuse(dict(components=0.7, signals=0.2), pairs, {}, _spec_table(), {True: gap[True]},
                                dict(en=1.0), 3)
    with pytest.raises(ValueError, match="lacks the row signals"):
        measure_component_reuse(dict(components=0.7, signals=0.2), pairs, {}, _spec_table().drop(index="signals"),
                                gap, dict(en=1.0), 3)


def test_es_pt_closest():
    from accpp.multilingual import measure_es_pt_closest

    langs = ["en", "es", "fr", "pt"]
    d = np.array([[0, .5, .4, .6], [.5, 0, .3, .1], [.4, .3, 0, .35], [.6, .1, .35, 0]])
    D = pd.DataFrame(d, index=langs, columns=langs)
    S = pd.DataFrame(d[::-1, ::-1], index=langs, columns=langs)  # reversed: closest en-es ... computed below
    boot = dict(frac_closest=0.875, margin=-0.2, margin_ci_low=-0.3, margin_ci_high=0.05)
    m = measure_es_pt_closest(D, S, True, boot, dict(en=1.0, pt=0.6), n_parallel=4)
    assert m.values == dict(es_pt_margin=-0.2, es_pt_margin_ci_low=-0.3, es_pt_margin_ci_high=0.05, es_pt_closest=True,
                            min_language_accuracy=0.6, n_parallel_prompts=4)
    assert m.evidence["closest_pair_stable"] is True and "-0.200 (95% CI -0.300 to +0.050)" in m.note
    assert m.evidence["closest"] == "es-pt" and m.evidence["distance"] == 0.1
    assert m.evidence["margin"] == pytest.approx(0.3 - 0.1)  # next closest: es-fr
    s_min = min((S.loc[a, b], a, b) for i, a in enumerate(langs) for b in langs[i + 1:])
    assert m.evidence["closest_by_signals"] == "-".join(sorted(s_min[1:]))
    assert "88% of bootstrap" in m.note
    fits_ledger(m)
    m2 = measure_es_pt_closest(D.rename(index={"pt": "it"}, columns={"pt": "it"}), S, False, boot, dict(en=1.0), 4)
    assert m2.values["es_pt_closest"] is False and m2.evidence["closest"] == "es-it"
    with pytest.raises(ValueError, match="square"):
        measure_es_pt_closest(D.iloc[:, :3], S, True, boot, dict(en=1.0), 4)
    with pytest.raises(ValueError, match="no per-language accuracy"):
        measure_es_pt_closest(D, S, True, boot, {}, 4)
    with pytest.raises(ValueError, match="boot lacks 'margin_ci_low'"):
        measure_es_pt_closest(D, S, True, dict(frac_closest=0.5, margin=0.1), dict(en=1.0), 4)


# ----------------------------------------------------------------------------- 04_signal_interventions
def _interventions():
    """Two prompts x one edge each: a signal row and two draws of each control per edge."""
    rows = []
    for prompt, (sig_ld, drop) in enumerate([(-1.0, 0.3), (-0.4, 0.1)]):
        edge = f"p{prompt}:0"
        rows.append(dict(edge=edge, prompt=prompt, subspace="signal", metric_change=sig_ld, metric_before=2.0,
                         head_input_cos=0.99, final_resid_cos=0.999, removed_norm_ratio=0.5, attn_drop=drop, sing=[1],
                         score_change=-0.5 * (prompt + 1), score_scale=1.0))
        for r, ld in enumerate([-0.1, 0.05]):
            for control, scale in (("random", 0.5), ("random_matched", 1.0), ("random_score", 2.0)):
                rows.append(dict(edge=edge, prompt=prompt, subspace=control, metric_change=ld * scale, metric_before=2.0,
                                 head_input_cos=0.98, final_resid_cos=0.999, removed_norm_ratio=0.2 * scale,
                                 attn_drop=0.0, sing=[r], score_scale=-3.0 if r else 4.0,
                                 score_change=-0.5 * (prompt + 1) * (1.01 if control == "random_score" and r else
                                                                     1.0 if control == "random_score" else 0.3)))
    return pd.DataFrame(rows)


def test_intervention_selective():
    from accpp.intervention_summary import measure_intervention_selective, paired_summary

    df = _interventions()
    paired = {c: paired_summary(df, control=c, seed=0, n_boot=50) for c in ("random", "random_matched", "random_score")}
    m = measure_intervention_selective(df, paired, consistency=2e-7, n_random=2, config=dict(model="tiny"))
    # by hand: signal |dLD| 1.0 and 0.4 on the two prompts; score-matched draws 0.2, 0.1 on each (median 0.15);
    # the check's ratio is the geometric mean over prompts of 1.0 / 0.15 and 0.4 / 0.15
    assert m.values["abs_dld_ratio"] == pytest.approx((1.0 / 0.15 * 0.4 / 0.15) ** 0.5, rel=1e-12)
    lo, hi = stats.geometric_mean_ci([1.0 / 0.15, 0.4 / 0.15], n_boot=50, seed=0)
    assert (m.values["abs_dld_ratio_ci_low"], m.values["abs_dld_ratio_ci_high"]) == pytest.approx((lo, hi), rel=1e-12)
    assert m.values["n_edges"] == 2 and m.values["n_random"] == 2 and m.values["n_prompts"] == 2
    assert m.evidence["prompt_ratios"] == pytest.approx([1.0 / 0.15, 0.4 / 0.15], abs=1e-4)
    # norm-matched draws 0.1, 0.05 (median 0.075): evidence, as is the unmatched control
    assert m.evidence["abs_dld_ratio_vs_norm_matched"] == pytest.approx((1.0 / 0.075 * 0.4 / 0.075) ** 0.5)
    assert m.evidence["pooled_abs_dld_ratio_vs_norm_matched"] == pytest.approx(0.7 / 0.075)
    assert m.evidence["abs_dld_ratio_vs_random"] == pytest.approx((1.0 / 0.0375 * 0.4 / 0.0375) ** 0.5)
    assert m.evidence["pooled_abs_dld_ratio"] == pytest.approx(0.7 / 0.15)
    assert m.evidence["median_attn_drop_signal"] == pytest.approx(0.2)
    assert m.evidence["median_removed_norm_random"] == pytest.approx(0.1)
    assert m.evidence["score_matching_rel_error"] == pytest.approx(0.01 * 1.0 / 1.0)  # worst draw: 1% of |-1.0|
    assert m.evidence["median_abs_score_scale"] == pytest.approx(3.5)
    assert m.evidence["tracer_consistency_max_abs"] == 2e-7
    assert "sing" not in m.tables["04_signal_interventions"]
    assert f"brief: about {float(claims.get_claim(m.claim).paper_value)}" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="random_score"):
        measure_intervention_selective(df, {c: paired[c] for c in ("random", "random_matched")}, 0.0, 2)
    with pytest.raises(ValueError, match="attn_drop"):
        measure_intervention_selective(df.drop(columns=["attn_drop"]), paired, 0.0, 2)
    with pytest.raises(ValueError, match="score_change"):
        measure_intervention_selective(df.drop(columns=["score_change"]), paired, 0.0, 2)
    with pytest.raises(ValueError, match="no signal removals"):
        measure_intervention_selective(df[df["subspace"] != "signal"], paired, 0.0, 2)


# ----------------------------------------------------------------------------- 05_ioi_template_clusters
def _alignment(ari_template: float, ari_order: float):
    rows = [dict(level=lvl, labelling=lab, ari=ari, p_ari=0.01 + i / 10, gap=0.1 * (i + 1), p_gap=0.02, nmi=np.nan)
            for lvl in ("components", "signals")
            for i, (lab, ari) in enumerate((("template", ari_template), ("order", ari_order),
                                            ("template x order", 0.1)))]
    return pd.DataFrame(rows).set_index(["level", "labelling"])


def _permanova():
    # p = (1 + n_extreme) / (99 + 1)
    terms = ["template", "order", "template x order", "size", "residual"]
    return pd.DataFrame(dict(F=[5.0, 1.5, 0.9, 2.0, np.nan], p=[0.01, 0.2, 0.6, 0.05, np.nan],
                             R2=[0.3, 0.02, 0.01, 0.05, 0.62], n_extreme=[0, 19, 59, 4, np.nan]),
                        index=pd.Index(terms, name="term"))


def test_template_clusters():
    from accpp.clustering import measure_template_clusters

    perm = {"components": _permanova(), "signals": _permanova()}
    m = measure_template_clusters(_alignment(0.4, 0.2), perm, pd.DataFrame(), n_perm=99, n_traced=30, n_planned=40,
                                  config=dict(model="tiny"))
    assert m.evidence["best"] == "template"
    assert (m.values["ari_best"], m.values["p_ari_best"], m.values["gap_best"]) == (0.4, 0.01, 0.1)
    assert m.values["traced_fraction"] == 0.75 and m.values["n_perm"] == 99
    assert (m.values["permanova_template_R2"], m.values["permanova_order_p"], m.values["permanova_size_p"]) == \
        (0.3, 0.2, 0.05)
    # the template p's Monte-Carlo interval: Clopper-Pearson of 0 of 99 permutations (not of 1 of 100)
    assert (m.values["permanova_template_p_ci_low"], m.values["permanova_template_p_ci_high"]) == \
        pytest.approx((0.0, 1 - 0.025 ** (1 / 99)), rel=1e-12)
    assert "nmi" not in m.evidence["alignment"]["components/order"]  # NaN left out
    assert m.unit == "p-value of PERMANOVA's template term (component Jaccard distances)" == claims.get_claim(m.claim).unit
    fits_ledger(m)
    m2 = measure_template_clusters(_alignment(0.1, 0.3), perm, pd.DataFrame(), 99, 30, 40)
    assert m2.evidence["best"] == "order" and m2.values["ari_best"] == 0.3 and m2.values["p_ari_best"] == 0.11
    with pytest.raises(ValueError, match="component level's template and order"):
        measure_template_clusters(_alignment(0.4, 0.2).drop(index="order", level="labelling"), perm,
                                  pd.DataFrame(), 99, 30, 40)
    with pytest.raises(ValueError, match="lacks term"):
        measure_template_clusters(_alignment(0.4, 0.2), {"components": _permanova().drop(index="size")},
                                  pd.DataFrame(), 99, 30, 40)
    with pytest.raises(ValueError, match="traced of"):
        measure_template_clusters(_alignment(0.4, 0.2), perm, pd.DataFrame(), 99, 0, 40)
    with pytest.raises(ValueError, match="another number of permutations"):
        measure_template_clusters(_alignment(0.4, 0.2), perm, pd.DataFrame(), 199, 30, 40)
    with pytest.raises(ValueError, match=r"no permutation count \(n_extreme\)"):
        measure_template_clusters(_alignment(0.4, 0.2), {"components": _permanova().drop(columns=["n_extreme"])},
                                  pd.DataFrame(), 99, 30, 40)


class _Tagged(dict):
    """A paired summary whose every field holds its own number (distinct across fields and controls)."""

    def __init__(self, tag: int):
        super().__init__()
        self.tag = tag

    def __missing__(self, key):
        if key == "prompt_ratios":
            return [self.tag + 0.5, self.tag + 0.25]
        if key == "n_prompts":
            return 2
        return self.tag + (zlib.crc32(key.encode()) % 100_000) / 1e6


def test_intervention_selective_reads_each_number_from_its_own_control_and_field():
    from accpp.intervention_summary import measure_intervention_selective

    main, norm, rnd = _Tagged(10), _Tagged(20), _Tagged(30)
    m = measure_intervention_selective(_interventions(), {"random_score": main, "random_matched": norm, "random": rnd},
                                       consistency=0.0, n_random=3)
    assert m.values == dict(abs_dld_ratio=main["gm_ratio"], abs_dld_ratio_ci_low=main["gm_ratio_ci_low"],
                            abs_dld_ratio_ci_high=main["gm_ratio_ci_high"], n_prompts=2, n_edges=2, n_random=3)
    expected = {
        "pooled_abs_dld_ratio": main["abs_dld_ratio"], "pooled_abs_dld_ratio_ci_low": main["abs_dld_ratio_ci_low"],
        "pooled_abs_dld_ratio_ci_high": main["abs_dld_ratio_ci_high"], "wilcoxon_p": main["wilcoxon_p"],
        "frac_edges_signal_above": main["frac_edges_signal_above"],
        "median_abs_dld_signal": main["median_abs_dld_signal"],
        "median_abs_dld_score_matched": main["median_abs_dld_control"],
        "median_rel_dld_signal": main["median_rel_dld_signal"],
        "median_rel_dld_score_matched": main["median_rel_dld_control"],
        "median_removed_norm_score_matched": main["median_removed_norm_control"],
        "abs_dld_ratio_vs_norm_matched": norm["gm_ratio"],
        "abs_dld_ratio_vs_norm_matched_ci_low": norm["gm_ratio_ci_low"],
        "abs_dld_ratio_vs_norm_matched_ci_high": norm["gm_ratio_ci_high"],
        "pooled_abs_dld_ratio_vs_norm_matched": norm["abs_dld_ratio"],
        "wilcoxon_p_vs_norm_matched": norm["wilcoxon_p"],
        "median_abs_dld_norm_matched": norm["median_abs_dld_control"],
        "median_rel_dld_norm_matched": norm["median_rel_dld_control"],
        "median_head_input_cos_signal": main["median_head_input_cos_signal"],
        "median_head_input_cos_norm_matched": norm["median_head_input_cos_control"],
        "median_head_input_cos_score_matched": main["median_head_input_cos_control"],
        "median_final_resid_cos_signal": main["median_final_resid_cos_signal"],
        "median_removed_norm_signal": main["median_removed_norm_signal"],
        "median_removed_norm_random": rnd["median_removed_norm_control"],
        "abs_dld_ratio_vs_random": rnd["gm_ratio"], "abs_dld_ratio_vs_random_ci_low": rnd["gm_ratio_ci_low"],
        "abs_dld_ratio_vs_random_ci_high": rnd["gm_ratio_ci_high"], "wilcoxon_p_vs_random": rnd["wilcoxon_p"],
        "prompt_ratios": [10.5, 10.25], "tracer_consistency_max_abs": 0.0,
    }
    assert {k: m.evidence[k] for k in expected} == expected
    assert len(set(v for k, v in expected.items() if k != "prompt_ratios")) == len(expected) - 1  # all distinct
    assert f"geometric mean {main['gm_ratio']:.2f} (95% interval {main['gm_ratio_ci_low']:.2f}-" in m.note
    assert f"signal / norm-matched random: {norm['gm_ratio']:.2f} ({norm['gm_ratio_ci_low']:.2f}-" in m.note
    assert m.note.startswith("the model, 2 IOI prompts, 2 signal edges into seed firings, 3 draws per control.")
