"""accpp.interventions at the value level, second part: the per-prompt summaries of
accpp.intervention_summary (paired_summary, prompt_ratios, score_matching_error),
measure_intervention_selective's fixed settings, Intervener.remove's result fields on stand-ins,
accpp.head_patch on a stand-in module tree, and one removal on a tiny model. Every
output against a number worked out by hand (in the comments), every refusal with its whole message;
the stand-ins are in interventions_standins.py.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from accpp.arch import UnsupportedArchitecture
from accpp.decompose import KIND_EMB
from accpp.intervention_summary import paired_summary, prompt_ratios, score_matching_error
from accpp.interventions import CONTROLS, InterventionResult, Intervener, SignalSpec
from tests.accpp.interventions_standins import _head_space, _hspec, _input_space, _list, _raises

TOL = 1e-12

TOL = 1e-12


# ----------------------------------------------------------------------------- paired_summary and friends
def _table(extra_rows=()):
    """Two prompts; prompt 0 has edges e0 and e1, prompt 1 edge e2. |dLD| of the signal removals 1, 3, 0.5;
    of the score-matched draws (0.2, 0.1), (0.4, 0.5), (0.25, 0.5, 1.0). "random" rows (other numbers) must be
    left out when the control is "random_score"."""
    rows = []

    def add(edge, prompt, subspace, change, before, cos, resid, norm):
        rows.append(dict(edge=edge, prompt=prompt, subspace=subspace, metric_change=change, metric_before=before,
                         head_input_cos=cos, final_resid_cos=resid, removed_norm_ratio=norm))

    add("e0", 0, "signal", -1.0, 2.0, 0.9, 0.999, 0.3)
    add("e1", 0, "signal", -3.0, 4.0, 0.8, 0.998, 0.1)
    add("e2", 1, "signal", 0.5, 2.0, 0.7, 0.997, 0.2)
    for i, (edge, prompt, change, before) in enumerate([("e0", 0, -0.2, 2.0), ("e0", 0, 0.1, 2.0),
                                                         ("e1", 0, 0.4, 4.0), ("e1", 0, -0.5, 4.0),
                                                         ("e2", 1, -0.25, 2.0), ("e2", 1, 0.5, 2.0),
                                                         ("e2", 1, -1.0, 2.0)]):
        add(edge, prompt, "random_score", change, before, 0.99 - 0.01 * i, 0.5, 0.01 * (i + 1))
        add(edge, prompt, "random", 50.0 + i, 1.0, 0.1, 0.1, 9.0)
    rows += list(extra_rows)
    return pd.DataFrame(rows)


def test_paired_summary_every_field_by_hand():
    from compendium.stats import geometric_mean_ci

    out = paired_summary(_table(), seed=3, n_boot=400)
    # per prompt: prompt 0 signal median(1, 3) = 2, draws median(0.1, 0.2, 0.4, 0.5) = 0.3 -> 20/3;
    #             prompt 1 signal 0.5, draws median(0.25, 0.5, 1.0) = 0.5 -> 1
    assert out["prompt_ratios"] == pytest.approx([20 / 3, 1.0], rel=1e-12)
    assert out["gm_ratio"] == pytest.approx(math.sqrt(20 / 3), rel=1e-12)
    assert (out["gm_ratio_ci_low"], out["gm_ratio_ci_high"]) == geometric_mean_ci(out["prompt_ratios"], n_boot=400,
                                                                                   seed=3)
    # pooled: median(1, 3, 0.5) = 1 over median(0.1, 0.2, 0.25, 0.4, 0.5, 0.5, 1.0) = 0.4
    assert out["abs_dld_ratio"] == pytest.approx(2.5, rel=1e-12)
    assert out["median_abs_dld_signal"] == 1.0 and out["median_abs_dld_control"] == 0.4
    # resampling two prompts: (0, 0) gives 20/3, (1, 1) gives 1, a mix gives the pooled 2.5; each extreme has
    # probability 1/4, so the 2.5th and 97.5th percentiles of 400 resamples are the extremes themselves
    assert out["abs_dld_ratio_ci_low"] == 1.0
    assert out["abs_dld_ratio_ci_high"] == pytest.approx(20 / 3, rel=1e-12)
    assert out["n_boot"] == 400
    # per edge: signal - mean of draws = 1 - 0.15, 3 - 0.45, 0.5 - 7/12 = 0.85, 2.55, -1/12; ranks 2, 3, 1:
    # W+ = 5, and P(W+ >= 5) over the 8 equally likely sign patterns of ranks {1, 2, 3} is 2/8
    assert out["wilcoxon_p"] == pytest.approx(0.25, rel=1e-12)
    # the signal above every draw: e0 (1 > 0.2) and e1 (3 > 0.5), not e2 (0.5 < 1)
    assert out["frac_edges_signal_above"] == pytest.approx(2 / 3, rel=1e-12)
    # dLD / LD: signal -0.5, -0.75, 0.25 -> -0.5; draws -0.1, 0.05, 0.1, -0.125, -0.125, 0.25, -0.5 -> -0.1
    assert out["median_rel_dld_signal"] == -0.5
    assert out["median_rel_dld_control"] == pytest.approx(-0.1, rel=1e-12)
    assert out["median_head_input_cos_signal"] == 0.8
    assert out["median_head_input_cos_control"] == pytest.approx(0.96, rel=1e-12)  # 0.99 .. 0.93
    assert out["median_final_resid_cos_signal"] == 0.998
    assert out["median_removed_norm_signal"] == 0.2
    assert out["median_removed_norm_control"] == pytest.approx(0.04, rel=1e-12)  # 0.01 .. 0.07
    assert (out["n_edges"], out["n_prompts"], out["n_draws"]) == (3, 2, 2)
    assert set(out) == {"gm_ratio", "gm_ratio_ci_low", "gm_ratio_ci_high", "prompt_ratios", "abs_dld_ratio",
                        "abs_dld_ratio_ci_low", "abs_dld_ratio_ci_high", "wilcoxon_p", "frac_edges_signal_above",
                        "median_abs_dld_signal", "median_abs_dld_control", "median_rel_dld_signal",
                        "median_rel_dld_control", "median_head_input_cos_signal", "median_head_input_cos_control",
                        "median_final_resid_cos_signal", "median_removed_norm_signal", "median_removed_norm_control",
                        "n_edges", "n_prompts", "n_draws", "n_boot"}
    assert all(type(v) is float for k, v in out.items() if k not in ("prompt_ratios", "n_edges", "n_prompts",
                                                                     "n_draws", "n_boot"))
    assert all(type(out[k]) is int for k in ("n_edges", "n_prompts", "n_draws", "n_boot"))
    # against the unmatched control: its draws (|dLD| 50 .. 56) are far larger than the signal's
    rnd = paired_summary(_table(), control="random", seed=3, n_boot=50)
    assert rnd["median_abs_dld_control"] == 53.0 and rnd["abs_dld_ratio"] == pytest.approx(1 / 53, rel=1e-12)
    assert rnd["frac_edges_signal_above"] == 0.0 and rnd["n_draws"] == 2


def test_paired_summary_edge_cases():
    def frame(signal, draws):
        return pd.DataFrame([dict(edge="e0", prompt=0, subspace=s, metric_change=c, metric_before=1.0,
                                  head_input_cos=1.0, final_resid_cos=1.0, removed_norm_ratio=0.0)
                             for s, c in [("signal", signal)] + [("random_score", d) for d in draws]])

    # a signal equal to its largest draw is not above it
    out = paired_summary(frame(0.5, [0.25, -0.5]), n_boot=20)
    assert out["frac_edges_signal_above"] == 0.0 and out["wilcoxon_p"] == 0.5  # one positive difference: p = 1/2
    # a signal equal to the mean of its draws: no difference, p = 1
    rows = frame(0.25, [0.125, -0.375, 0.25])
    out = paired_summary(rows, n_boot=20)
    assert out["frac_edges_signal_above"] == 0.0 and out["wilcoxon_p"] == 1.0
    assert out["abs_dld_ratio"] == 1.0 and out["abs_dld_ratio_ci_low"] == out["abs_dld_ratio_ci_high"] == 1.0
    assert out["n_boot"] == 20 and out["n_draws"] == 3
    rows = rows.to_dict("records")
    # a prompt with rows of another control only: a resample of it alone has no removals and is left out, so
    # fewer than n_boot resamples count, and every counted one is prompt 0's ratio 0.25 / 0.25
    extra = [dict(r, prompt=1, edge="x", subspace="random") for r in rows[1:]]
    out = paired_summary(pd.DataFrame(rows + extra), n_boot=200)
    assert 100 < out["n_boot"] < 200 and out["n_prompts"] == 2
    assert out["abs_dld_ratio_ci_low"] == out["abs_dld_ratio_ci_high"] == 1.0


def test_paired_summary_refusals():
    t = _table()
    with _raises(ValueError, "paired_summary: missing columns ['final_resid_cos', 'head_input_cos']"):
        paired_summary(t.drop(columns=["head_input_cos", "final_resid_cos"]))
    with _raises(ValueError, "paired_summary: need rows with subspace 'signal' and 'random_matched'"):
        paired_summary(t, control="random_matched")
    with _raises(ValueError, "paired_summary: need rows with subspace 'signal' and 'random_score'"):
        paired_summary(t[t["subspace"] != "signal"])
    with _raises(ValueError, "paired_summary: more than one signal row for an edge"):
        paired_summary(pd.concat([t, t[t["edge"] == "e1"].iloc[:1]]))
    with _raises(ValueError, "paired_summary: edges without 'random_score' draws: ['e1', 'e2']"):
        paired_summary(t[~(t["edge"].isin(["e1", "e2"]) & (t["subspace"] == "random_score"))])
    many = pd.concat([t.assign(edge=t["edge"] + f"_{i}") for i in range(7)])
    with _raises(ValueError, "paired_summary: edges without 'random_score' draws: ['e1_0', 'e1_1', 'e1_2', 'e1_3', "
                             "'e1_4']"):
        paired_summary(many[~(many["edge"].str.startswith("e1") & (many["subspace"] == "random_score"))])


def test_prompt_ratios_table_by_hand():
    t = prompt_ratios(_table())
    assert t.index.tolist() == [0, 1]
    assert list(t.columns) == ["median_abs_dld_signal", "median_abs_dld_control", "n_edges", "n_control", "ratio"]
    assert t["median_abs_dld_signal"].tolist() == [2.0, 0.5]
    assert t["median_abs_dld_control"].tolist() == pytest.approx([0.3, 0.5], rel=1e-12)
    assert t["n_edges"].tolist() == [2, 1] and t["n_control"].tolist() == [4, 3]
    assert str(t["n_edges"].dtype) == "int64" and str(t["n_control"].dtype) == "int64"
    assert t["ratio"].tolist() == pytest.approx([20 / 3, 1.0], rel=1e-12)
    r = prompt_ratios(_table(), control="random")  # |dLD| 50, 51, 52, 53 and 54, 55, 56
    assert r["median_abs_dld_control"].tolist() == [51.5, 55.0] and r["n_control"].tolist() == [4, 3]


def test_prompt_ratios_refusals():
    t = _table()
    with _raises(ValueError, "prompt_ratios: missing columns ['metric_change', 'prompt']"):
        prompt_ratios(t.drop(columns=["prompt", "metric_change"]))
    with _raises(ValueError, "prompt_ratios: need rows with subspace 'signal' and 'random_matched'"):
        prompt_ratios(t, control="random_matched")
    with _raises(ValueError, "prompt_ratios: need rows with subspace 'signal' and 'random_score'"):
        prompt_ratios(t[t["subspace"] != "signal"])
    with _raises(ValueError, "prompt_ratios: prompts [1] lack signal or 'random_score' removals"):
        prompt_ratios(t[~((t["prompt"] == 1) & (t["subspace"] == "signal"))])
    with _raises(ValueError, "prompt_ratios: prompts [0] lack signal or 'random_score' removals"):
        prompt_ratios(t[~((t["prompt"] == 0) & (t["subspace"] == "random_score"))])
    many = pd.concat([t.assign(prompt=t["prompt"] + 10 * i) for i in range(7)])
    many = many[~((many["prompt"] % 10 == 1) & (many["subspace"] == "signal"))]
    with _raises(ValueError, "prompt_ratios: prompts [1, 11, 21, 31, 41] lack signal or 'random_score' removals"):
        prompt_ratios(many)
    zero = t.assign(metric_change=np.where((t["prompt"] == 1) & (t["subspace"] == "random_score"), 0.0,
                                           t["metric_change"]))
    with _raises(ValueError, "prompt_ratios: on prompts [1] the median 'random_score' removal leaves the metric "
                             "unchanged; the ratio is undefined"):
        prompt_ratios(zero)
    many = pd.concat([zero.assign(prompt=zero["prompt"] + 10 * i) for i in range(7)])
    with _raises(ValueError, "prompt_ratios: on prompts [1, 11, 21, 31, 41] the median 'random_score' removal "
                             "leaves the metric unchanged; the ratio is undefined"):
        prompt_ratios(many)


def test_score_matching_error_by_hand():
    rows = [dict(edge="e0", subspace="signal", score_change=-2.0),
            dict(edge="e0", subspace="random_score", score_change=-2.5),
            dict(edge="e1", subspace="signal", score_change=4.0),
            dict(edge="e1", subspace="random_score", score_change=3.0),
            dict(edge="e1", subspace="random_score", score_change=4.25),
            dict(edge="e1", subspace="random", score_change=40.0)]
    # gaps 0.5, 1.0, 0.25 (the "random" row is not read) over the largest |signal| change 4
    assert score_matching_error(pd.DataFrame(rows)) == 0.25
    # against "random": gap 36 / 4
    assert score_matching_error(pd.DataFrame(rows), control="random") == 9.0
    small = [dict(edge="e0", subspace="signal", score_change=-0.5), dict(edge="e0", subspace="random_score",
                                                                           score_change=-0.25)]
    assert score_matching_error(pd.DataFrame(small)) == 0.5  # 0.25 / 0.5
    still = [dict(edge="e0", subspace="signal", score_change=0.0), dict(edge="e0", subspace="random_score",
                                                                         score_change=0.0)]
    assert score_matching_error(pd.DataFrame(still)) == 0.0  # no 0 / 0
    with _raises(ValueError, "score_matching_error: missing columns ['edge', 'score_change']"):
        score_matching_error(pd.DataFrame(rows).drop(columns=["score_change", "edge"]))
    with _raises(ValueError, "score_matching_error: need rows with subspace 'signal' and 'random_matched'"):
        score_matching_error(pd.DataFrame(rows), control="random_matched")
    with _raises(ValueError, "score_matching_error: need rows with subspace 'signal' and 'random_score'"):
        score_matching_error(pd.DataFrame(rows[1:2]))


# ----------------------------------------------------------------------------- measure_intervention_selective
def test_intervention_selective_fixed_texts_config_and_refusals():
    """The parts of the Measurement not read from the paired summaries (those are checked field by field in
    test_accpp_measures.py): the unit, the control's description, the config, a table without score_scale or
    sing columns, and each refusal's whole message."""
    from accpp.intervention_summary import measure_intervention_selective

    t = _table().assign(attn_drop=0.125, score_change=-1.0)
    paired = {c: paired_summary(t, control="random_score", n_boot=20) for c in CONTROLS}
    m = measure_intervention_selective(t, paired, consistency=1e-9, n_random=3)
    assert m.claim == "accpp/intervention-selective"
    assert m.unit == "x (median |dLD| per prompt, signal / score-matched random; geometric mean over prompts)"
    assert m.evidence["control"] == ("random_score (same directions as random, rescaled so that the firing's raw "
                                     "score changes as much as under the signal's removal)")
    assert m.config == {}
    assert math.isnan(m.evidence["median_abs_score_scale"])  # no score_scale column: not measured
    assert m.evidence["score_matching_rel_error"] == 0.0 and m.evidence["median_attn_drop_signal"] == 0.125
    assert m.evidence["prompt_ratios"] == [6.6667, 1.0]  # 20/3 and 1 (see the paired summary's test), 4 decimals
    assert list(m.tables["04_signal_interventions"].columns) == list(t.columns)  # no sing column to drop
    cfg = dict(model="tiny", n_prompts=2)
    m = measure_intervention_selective(t.assign(sing=[[0]] * len(t)), paired, 0.0, 3, config=cfg)
    assert m.config == cfg and m.config is not cfg
    assert list(m.tables["04_signal_interventions"].columns) == list(t.columns)
    assert m.note.startswith("tiny, 2 IOI prompts, 3 signal edges into seed firings, 3 draws per control.")
    who = "measure_intervention_selective"
    with _raises(ValueError, f"{who}: no paired summary against ['random', 'random_score']"):
        measure_intervention_selective(t, {"random_matched": paired["random_matched"]}, 0.0, 3)
    for col in ("subspace", "attn_drop", "score_change"):
        with _raises(ValueError, f"{who}: the intervention table lacks column {col!r}"):
            measure_intervention_selective(t.drop(columns=[col]), paired, 0.0, 3)
    with _raises(ValueError, f"{who}: no signal removals in the table"):
        measure_intervention_selective(t[t["subspace"] != "signal"], paired, 0.0, 3)


# ----------------------------------------------------------------------------- Intervener.remove, no model
def _removal():
    """The head-space stand-in of _head_space (layer 1, head 3, firing A1.3@3<1, scale 0.5) with layer 1's input
    space: no RoPE, no q/k-norm, W_Q[3] and W_K[1] as in _input_space, so the minimum-norm dx~ is
        query side: (delta0 / 2, delta1, delta0 / 2)        key side: (delta1, delta0 / 2, 0).
    Residual entering layer 1 and its norm scale: rows (2, 0, 0), (0, 2, 0), (0, 0, 2), (2, 2, 0) and sigma
    1, 2, 1, 2, so x~ = (2, 0, 0), (0, 1, 0), (0, 0, 2), (1, 1, 0). The forward pass is a stand-in too (apply):
    every entry of the clean and patched attention weights and scores is distinct, so reading a wrong one
    shows."""
    iv = _head_space()
    f64 = dict(dtype=torch.float64)
    Wq, Wk = _input_space().arch.layers[1].wq_eff(3), _input_space().arch.layers[1].wk_eff(1)
    lw = iv.arch.layers[1]
    lw.q_norm = lw.k_norm = None
    lw.wq_eff = lambda h: Wq if h == 3 else torch.full((3, 2), 5.0, **f64)
    lw.wk_eff = lambda kv: Wk if kv == 1 else torch.full((3, 2), 5.0, **f64)
    resid = torch.zeros(3, 4, 3, **f64)
    resid[1] = torch.tensor([[2.0, 0, 0], [0, 2, 0], [0, 0, 2], [2, 2, 0]])
    sigma = torch.full((2, 4), 7.0, **f64)
    sigma[1] = torch.tensor([1.0, 2.0, 1.0, 2.0])
    iv.dec = SimpleNamespace(rot=[None, None], acts=SimpleNamespace(resid=resid), sigma=sigma)
    attn = torch.arange(2 * 4 * 4 * 4, **f64).reshape(2, 4, 4, 4) / 1000  # attn[1, 3, 3, 1] = 125 / 1000
    iv.clean = SimpleNamespace(metric=2.0, attn=attn, final_resid=torch.tensor([1.0, 0.0, 0.0], **f64))
    scores = torch.arange(16, **f64).reshape(4, 4)  # clean score at (3, 1): 13, at (3, 2): 14
    out = SimpleNamespace(metric=1.25, attn=attn * 2, final_resid=torch.tensor([1.0, 1.0, 0.0], **f64))
    patch = SimpleNamespace(clean_scores=scores, scores=0.5 - scores)  # patched (3, 1): -12.5, (3, 2): -13.5
    iv.applied = []
    iv.apply = lambda spec, delta: (iv.applied.append((spec, delta)), (out, patch))[1]
    return iv


def _same(result: InterventionResult, **want):
    for k, v in want.items():
        got = getattr(result, k)
        if isinstance(v, float):
            assert got == pytest.approx(v, rel=1e-12, abs=1e-12), k
        else:
            assert got == v, k


def test_remove_fields_signal_query_side():
    iv = _removal()
    spec = _hspec()  # MLP 0 at the destination, query side, K = {0}: delta = (5, -10) (head_delta's test)
    r = iv.remove(spec)
    # dx~ = (2.5, -10, 2.5); x~_3 = (1, 1, 0): |dx~| / |x~| = sqrt(112.5 / 2) = 7.5;
    # x~ - dx~ = (-1.5, 11, -2.5): cos = (-1.5 + 11) / sqrt(2 * 129.5)
    # |delta| / |qf_3| = sqrt(125 / 128); the score change -0.5 * (5, -10) . kf_1 = -0.5 * (5 * -2 - 10 * 2) = 15
    _same(r, spec=spec, subspace="signal", sing_removed=(0,), seed=None, metric_before=2.0, metric_after=1.25,
          attn_before=0.125, attn_after=0.25, final_resid_cos=1 / math.sqrt(2), removed_norm_ratio=7.5,
          head_input_cos=9.5 / math.sqrt(259), delta_norm_ratio=math.sqrt(125 / 128), score_before=13.0,
          score_after=-12.5)
    assert r.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=15.0)
    assert len(iv.applied) == 1 and iv.applied[0][0] == spec and _list(iv.applied[0][1]) == [5.0, -10.0]
    assert all(type(getattr(r, k)) is float for k in ("attn_before", "attn_after", "final_resid_cos", "head_input_cos",
                                                       "removed_norm_ratio", "delta_norm_ratio", "score_before",
                                                       "score_after"))


def test_remove_fields_random_and_matched_controls():
    iv = _removal()
    spec = _hspec()
    # d_head 2, K = {0}: the only other direction is 1; delta = (0, 7), dx~ = (0, 7, 0); score change
    # -0.5 * (0, 7) . (-2, 2) = -7
    raw = iv.remove(spec, "random", seed=4)
    _same(raw, subspace="random", sing_removed=(1,), seed=4, removed_norm_ratio=7 / math.sqrt(2),
          head_input_cos=(1 - 6) / math.sqrt(2 * (1 + 36)), delta_norm_ratio=7 / math.sqrt(128))
    assert raw.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=-7.0)
    # matched in removed norm: scale |dx~_signal| / |dx~| = sqrt(112.5) / 7; dx~ = (0, sqrt(112.5), 0)
    m = iv.remove(spec, "random_matched", seed=4)
    s = math.sqrt(112.5) / 7
    _same(m, subspace="random_matched", sing_removed=(1,), seed=4, removed_norm_ratio=7.5,
          head_input_cos=(1 + 1 - math.sqrt(112.5)) / math.sqrt(2 * (1 + (1 - math.sqrt(112.5)) ** 2)),
          delta_norm_ratio=math.sqrt(112.5 / 128))
    assert m.extra["norm_scale"] == pytest.approx(s, rel=1e-12) and m.extra["score_scale"] == 1.0
    assert m.extra["predicted_score_change"] == pytest.approx(-7 * s, rel=1e-12)
    assert _list(iv.applied[-1][1]) == pytest.approx([0.0, 7 * s], rel=1e-12)
    # matched in removed score: scale 15 / -7; delta = (0, -15), dx~ = (0, -15, 0), predicted change 15
    sc = iv.remove(spec, "random_score", seed=4)
    _same(sc, subspace="random_score", sing_removed=(1,), seed=4, removed_norm_ratio=15 / math.sqrt(2),
          head_input_cos=17 / math.sqrt(2 * 257), delta_norm_ratio=15 / math.sqrt(128))
    assert sc.extra["norm_scale"] == 1.0
    assert sc.extra["score_scale"] == pytest.approx(-15 / 7, rel=1e-12)
    assert sc.extra["predicted_score_change"] == pytest.approx(15.0, rel=1e-12)
    assert _list(iv.applied[-1][1]) == pytest.approx([0.0, -15.0], rel=1e-12)
    # explicit indices: K = {0, 1}, delta = (5, -3), dx~ = (2.5, -3, 2.5); x~ - dx~ = (-1.5, 4, -2.5)
    c = iv.remove(spec, "custom", sing=[1, np.int64(0)])
    _same(c, subspace="custom", sing_removed=(1, 0), seed=None, removed_norm_ratio=math.sqrt(21.5 / 2),
          head_input_cos=2.5 / math.sqrt(2 * 24.5), delta_norm_ratio=math.sqrt(34 / 128))
    assert all(type(k) is int for k in c.sing_removed)
    assert c.extra == dict(norm_scale=1.0, score_scale=1.0, predicted_score_change=-0.5 * (5 * -2 - 3 * 2))


def test_remove_fields_key_side():
    iv = _removal()
    # one key position (token 2, K = {1}): delta = (-6, 2), dx~ = (2, -3, 0), x~_2 = (0, 0, 2);
    # matched entry (3, 2): clean 14, patched -13.5; |delta| / |kf_2| = sqrt(40 / 25)
    k = _hspec(side="s", token=2, sing=(1,))
    r = iv.remove(k)
    _same(r, removed_norm_ratio=math.sqrt(13 / 4), head_input_cos=4 / math.sqrt(4 * 17),
          delta_norm_ratio=math.sqrt(40 / 25), score_before=14.0, score_after=-13.5, attn_before=0.125,
          attn_after=0.25)
    assert r.extra["predicted_score_change"] == 32.0
    # spanning (every key position 0..3, K = {1}): delta rows (0, 0), (3, -1), (-6, 2), (-3, 1); dx~ rows
    # (0, 0, 0), (-1, 1.5, 0), (2, -3, 0), (1, -1.5, 0); over all positions |x~|^2 = 11, |dx~|^2 = 19.5,
    # x~ . (x~ - dx~) = 10, |x~ - dx~|^2 = 28.5; |delta|^2 = 60 over |kf_0..3|^2 = 51; the firing's entry (3, 1)
    span = _hspec(side="s", token=1, span=True, sing=(1,))
    r = iv.remove(span)
    _same(r, removed_norm_ratio=math.sqrt(19.5 / 11), head_input_cos=10 / math.sqrt(11 * 28.5),
          delta_norm_ratio=math.sqrt(60 / 51), score_before=13.0, score_after=-12.5)
    assert r.extra["predicted_score_change"] == -16.0
    assert _list(iv.applied[-1][1]) == [[0, 0], [3, -1], [-6, 2], [-3, 1]]


def test_remove_refusals():
    iv = _removal()
    spec = _hspec()
    for control in CONTROLS:
        with _raises(ValueError, f"subspace={control!r} needs a seed"):
            iv.remove(spec, control)
    with _raises(ValueError, "subspace='custom' needs sing="):
        iv.remove(spec, "custom")
    with _raises(ValueError, "unknown subspace 'orthogonal': 'signal', 'random', 'random_matched', 'random_score' "
                             "or 'custom'"):
        iv.remove(spec, "orthogonal", seed=1)
    with _raises(ValueError, "unknown side 'x': 'd' (query side) or 's' (key side)"):  # validated first
        iv.remove(_hspec(side="x"), "orthogonal")
    # the embedding's coefficients at token 3 are (1, 0): nothing on the random direction 1
    emb = _hspec(kind=KIND_EMB, comp_layer=-1)
    with _raises(ValueError, "E@3 -> A1.3@3<1 (query, k=[0]): the component has no part on the random directions "
                             "[1]; cannot match the signal's removed norm"):
        iv.remove(emb, "random_matched", seed=0)
    with _raises(ValueError, "E@3 -> A1.3@3<1 (query, k=[0]): removing the component's part on the random "
                             "directions [1] leaves the score at (3, 1) unchanged; cannot match the signal's change "
                             "of the score"):
        iv.remove(emb, "random_score", seed=0)
    assert iv.applied == []  # nothing reached the model


def _pooled_bootstrap(df, control: str, seed: int, n_boot: int) -> list[float]:
    """The pooled ratio's resamples from their definition: the prompts (sorted) drawn with replacement by
    numpy's default_rng(seed).choice, each bringing all its signal and control |dLD|; a resample without
    both kinds of removals counts for nothing."""
    prompts = sorted(df["prompt"].unique())
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        pick = rng.choice(prompts, size=len(prompts), replace=True)
        s = [abs(v) for q in pick for v in df[(df["prompt"] == q) & (df["subspace"] == "signal")]["metric_change"]]
        c = [abs(v) for q in pick for v in df[(df["prompt"] == q) & (df["subspace"] == control)]["metric_change"]]
        if s and c:
            out.append(float(np.median(s) / np.median(c)))
    return out


def _five_prompts():
    """Five prompts of two edges each: e<p> with signal |dLD| 1 + 0.37 p and draws 0.2 + 0.05 p, 0.3 + 0.11 p;
    f<p> with 0.5 + 0.29 p^2 and draws 0.1 + 0.07 p^2, 0.25 + 0.03 p."""
    rows = []
    for p in range(5):
        base = dict(prompt=p, metric_before=1.0, head_input_cos=0.9, final_resid_cos=1.0, removed_norm_ratio=0.1)
        for edge, sig, draws in ((f"e{p}", 1 + 0.37 * p, (-(0.2 + 0.05 * p), 0.3 + 0.11 * p)),
                                 (f"f{p}", 0.5 + 0.29 * p * p, (-(0.1 + 0.07 * p * p), 0.25 + 0.03 * p))):
            rows.append(base | dict(edge=edge, subspace="signal", metric_change=-sig))
            rows += [base | dict(edge=edge, subspace="random_score", metric_change=c) for c in draws]
    return pd.DataFrame(rows)


def test_paired_summary_intervals_follow_their_seed():
    from compendium.stats import geometric_mean_ci

    df = _five_prompts()
    out = paired_summary(df, seed=3, n_boot=20)
    ratios = prompt_ratios(df)["ratio"].tolist()
    assert out["prompt_ratios"] == ratios
    gm = geometric_mean_ci(ratios, n_boot=20, seed=3)
    assert (out["gm_ratio_ci_low"], out["gm_ratio_ci_high"]) == pytest.approx(gm, rel=1e-12)
    assert gm != geometric_mean_ci(ratios, n_boot=20, seed=0)  # the seed matters here
    boot = _pooled_bootstrap(df, "random_score", seed=3, n_boot=20)
    assert len(boot) == 20 == out["n_boot"]
    assert out["abs_dld_ratio_ci_low"] == pytest.approx(float(np.percentile(boot, 2.5)), rel=1e-12)
    assert out["abs_dld_ratio_ci_high"] == pytest.approx(float(np.percentile(boot, 97.5)), rel=1e-12)
    assert np.percentile(boot, 2.5) != np.percentile(boot, 3.5)  # the levels matter here
    assert np.percentile(boot, 97.5) != np.percentile(boot, 96.5)
    assert paired_summary(df, seed=3, n_boot=20) == out
    # the defaults: seed 0, 2000 resamples
    assert paired_summary(df, n_boot=20) == paired_summary(df, seed=0, n_boot=20) != paired_summary(df, seed=1,
                                                                                                     n_boot=20)
    assert paired_summary(df)["n_boot"] == 2000


def test_paired_summary_without_a_usable_resample():
    """Prompt 0 has removals, prompts 1..5 only rows of another control: with one resample that draws none of
    prompt 0 the pooled interval is undefined (nan) and counts no resample."""
    df = _five_prompts()
    df = pd.concat([df[df["prompt"] == 0]] + [df[df["prompt"] == 0].assign(prompt=p, edge=df["edge"] + f"x{p}",
                                                                            subspace="random") for p in range(1, 6)])
    seed = next(s for s in range(100) if not _pooled_bootstrap(df, "random_score", s, 1))
    out = paired_summary(df, seed=seed, n_boot=1)
    assert out["n_boot"] == 0 and out["n_prompts"] == 6
    assert math.isnan(out["abs_dld_ratio_ci_low"]) and math.isnan(out["abs_dld_ratio_ci_high"])
    # prompt 0: median(1, 0.5) / median(0.2, 0.3, 0.1, 0.25) = 0.75 / 0.225
    assert out["abs_dld_ratio"] == pytest.approx(0.75 / 0.225, rel=1e-12)


# ----------------------------------------------------------------------------- head_patch, no model
def _patch(side="d", delta=None, q_norm=None, k_norm=None, rotary_dims=2):
    """head_patch on layer 0, head 1 (kv head 0) of a stand-in module tree: 2 query heads, 1 kv head, d_head 2."""
    from torch import nn

    from accpp.head_patch import head_patch

    attn = nn.Module()
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        setattr(attn, name, nn.Identity())
    block = nn.Module()
    block.attn = attn
    model = nn.Module()
    model.layers = nn.ModuleList([block])
    lw = SimpleNamespace(kv_of=lambda h: h // 2, q_norm=q_norm, k_norm=k_norm, rotary_dims=rotary_dims)
    arch = SimpleNamespace(model_type="llama", layers=[lw], layers_path="layers", attn_name="attn", d_head=2)
    return head_patch(model, arch, 0, 1, side, 1, delta)


def test_head_patch_construction_and_hooks():
    from accpp.head_patch import head_patch

    p = _patch(delta=torch.tensor([1.0, 2.0]))  # float32 in, float64 kept
    assert p.delta.dtype == torch.float64 and p.delta.tolist() == [1.0, 2.0]
    assert (p.L, p.a, p.kv, p.side, p.row) == (0, 1, 0, "d", 1)
    assert p.pattern is None and p.scores is None and p.clean_scores is None and p._handles == []
    assert _patch().delta is None
    with _raises(ValueError, "unknown side 'q': 'd' (query side) or 's' (key side)"):
        _patch(side="q")
    with _raises(UnsupportedArchitecture, "signal interventions are implemented for the llama-like adapters (llama, "
                                          "gemma2, gemma3_text): they hook q_proj/k_proj/v_proj/o_proj (and "
                                          "q_norm/k_norm) of the attention module; model_type 'gpt2' is not "
                                          "supported"):
        head_patch(None, SimpleNamespace(model_type="gpt2"), 0, 0, "d", 0, None)
    attn = p.attn
    with p:
        assert len(p._handles) == 5
        assert [len(m._forward_hooks) for m in (attn.q_proj, attn.k_proj, attn.v_proj)] == [1, 1, 1]
        assert len(attn._forward_pre_hooks) == 1 and len(attn.o_proj._forward_pre_hooks) == 1
    assert p._handles == []
    assert [len(m._forward_hooks) for m in (attn.q_proj, attn.k_proj, attn.v_proj)] == [0, 0, 0]
    assert len(attn._forward_pre_hooks) == 0 and len(attn.o_proj._forward_pre_hooks) == 0
    with pytest.raises(RuntimeError, match="^inside$"):  # an error in the pass is not swallowed
        with p:
            raise RuntimeError("inside")
    assert p._handles == []


def test_head_patch_reads_rope_from_keyword_or_second_argument():
    p = _patch()
    pe = ("cos", "sin")
    p._grab_rope(None, ("x",), {"position_embeddings": pe})
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x", pe), {})
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x", "other", "third"), {"position_embeddings": pe})  # the keyword first
    assert p._seen["rope"] is pe
    p._grab_rope(None, ("x",), {})
    assert p._seen["rope"] is None
    p._grab_rope(None, ("x",), {"position_embeddings": None})
    assert p._seen["rope"] is None


def test_head_patch_head_tensors():
    p = _patch()
    f32 = dict(dtype=torch.float32)
    # projections (1, T, n * dh): head 1 of q is columns 2..3; kv head 0 of k and v columns 0..1
    p._seen = dict(q=torch.tensor([[[1, 2, 3, 4], [5, 6, 7, 8]]], **f32), k=torch.tensor([[[1, 0], [0, 1]]], **f32),
                   v=torch.tensor([[[2, 3], [4, 5]]], **f32))
    q, k, v = p._head_tensors()  # no rotary embedding passed: unrotated
    assert [q.tolist(), k.tolist(), v.tolist()] == [[[3, 4], [7, 8]], [[1, 0], [0, 1]], [[2, 3], [4, 5]]]
    assert q.dtype == k.dtype == v.dtype == torch.float64
    # RoPE: token 0 cos 1 sin 0 (unchanged), token 1 cos 0 sin 1: (x0, x1) -> (-x1, x0)
    p._seen["rope"] = (torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]), torch.tensor([[[0.0, 0.0], [1.0, 1.0]]]))
    q, k, v = p._head_tensors()
    assert [q.tolist(), k.tolist(), v.tolist()] == [[[3, 4], [-8, 7]], [[1, 0], [-1, 0]], [[2, 3], [4, 5]]]
    # a layer without rotary dims ignores the embeddings it is passed
    p.lw.rotary_dims = 0
    assert p._head_tensors()[0].tolist() == [[3, 4], [7, 8]]
    # q/k-norm outputs are (1, n, T, dh): head 1 of q, kv head 0 of k
    n = _patch(q_norm=object(), k_norm=object(), rotary_dims=0)
    n._seen = dict(q=torch.arange(8.0).reshape(1, 2, 2, 2), k=torch.arange(4.0).reshape(1, 1, 2, 2) + 10,
                   v=p._seen["v"])
    q, k, _ = n._head_tensors()
    assert q.tolist() == [[4, 5], [6, 7]] and k.tolist() == [[10, 11], [12, 13]]
    p._seen["q"] = torch.zeros(2, 2, 4)
    with _raises(ValueError, "interventions run one prompt at a time (batch size 1)"):
        p._head_tensors()


# ----------------------------------------------------------------------------- one tiny model
def test_a_removal_at_layer_0_acts_with_and_without_replay(exact):
    """replay=False recomputes every layer, replay=True replays the clean outputs of the layers below the
    intervened one: the same numbers, here for a removal in layer 0 itself (the whole embedding at head 0.1's
    query), which must reach the model either way."""
    from accpp.testing import random_prompt, tiny_model
    from accpp.trace import TraceConfig, Tracer

    tracer = Tracer(tiny_model("llama"), config=TraceConfig(expand_layer0=True))
    ids = random_prompt(8)
    replayed, recomputed = Intervener(tracer, ids, 7, 11), Intervener(tracer, ids, 7, 11, replay=False)
    src = int(replayed.clean.attn[0, 1, 7, :8].argmax())
    spec = SignalSpec(0, 1, 7, src, "d", KIND_EMB, -1, -1, -1, 7, tuple(range(tracer.arch.d_head)))
    a, b = replayed.remove(spec), recomputed.remove(spec)
    assert abs(a.attn_after - a.attn_before) > 1e-6
    assert b.attn_before == a.attn_before and b.attn_after == pytest.approx(a.attn_after, abs=1e-12)
    assert b.metric_after == pytest.approx(a.metric_after, abs=1e-12)
