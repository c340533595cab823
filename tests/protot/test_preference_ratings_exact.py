"""protot.preference, value by value, from the judgements on: outcomes, order consistency, position
bias and the human preference on hand-built judgement lists; Bradley-Terry's Newton steps and
log-likelihood by hand; Elo gaps with closed-form two-player ratings; the measurement's values and
evidence; every refusal word for word. The prompts, continuations and judges:
test_preference_judging_exact.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from compendium import stats
from protot import preference as P
from tests.protot.preference_standins import exactly

LOG3 = math.log(3)


def _judgements(rows):
    return pd.DataFrame(rows, columns=["prompt", "a", "b", "logodds"])


# --- outcomes -------------------------------------------------------------------------------------


def test_pair_outcomes_exact():
    j = _judgements([
        (0, "q", "p", -1.5), (0, "p", "q", 2.0),      # p first: +2; p second: +1.5 -> p wins
        (0, "p", "r", -0.5), (0, "r", "p", 0.25),     # p first: -0.5; p second: -0.25 -> r wins
        (0, "q", "r", 1.0), (0, "r", "q", 3.0),       # each order says "A": a tie
        (1, "p", "q", 0.0), (1, "q", "p", -1.0),      # p first: 0 (no winner); p second: +1 -> a tie
        (1, "p", "r", 0.0), (1, "r", "p", 0.0),       # no winner in either order: a tie, not consistent
    ])
    o = P.pair_outcomes(j)
    assert list(o.columns) == ["prompt", "x", "y", "x_first", "x_second", "consistent", "score"]
    assert o.to_dict("records") == [
        {"prompt": 0, "x": "p", "y": "q", "x_first": 2.0, "x_second": 1.5, "consistent": True, "score": 1.0},
        {"prompt": 0, "x": "p", "y": "r", "x_first": -0.5, "x_second": -0.25, "consistent": True, "score": 0.0},
        {"prompt": 0, "x": "q", "y": "r", "x_first": 1.0, "x_second": -3.0, "consistent": False, "score": 0.5},
        {"prompt": 1, "x": "p", "y": "q", "x_first": 0.0, "x_second": 1.0, "consistent": False, "score": 0.5},
        {"prompt": 1, "x": "p", "y": "r", "x_first": 0.0, "x_second": -0.0, "consistent": False, "score": 0.5},
    ]
    assert all(type(v) is bool for v in o.consistent.tolist())
    assert P.order_consistency(o) == pytest.approx(2 / 5, abs=1e-15)
    assert type(P.order_consistency(o)) is float


def test_pair_outcomes_refusals():
    j = _judgements([(0, "p", "q", 1.0), (0, "q", "p", -1.0), (2, "r", "p", 1.0)])
    with pytest.raises(ValueError, match=exactly("prompt 2: (r, p) was judged in one order only")):
        P.pair_outcomes(j)
    twice = _judgements([(0, "p", "q", 1.0), (0, "q", "p", -1.0), (0, "p", "q", 2.0)])
    with pytest.raises(ValueError, match=exactly("a (prompt, a, b) judgement occurs twice")):
        P.pair_outcomes(twice)


def test_position_bias_and_debiasing_by_hand():
    j = _judgements([(0, "p", "q", 1.0), (0, "q", "p", 0.0), (1, "p", "q", -2.0), (1, "q", "p", 3.0)])
    # answers A (> 0) in 2 of 4 (a log-odds of 0 is no answer); mean (1 + 0 - 2 + 3) / 4 = 0.5
    assert P.position_bias(j) == {"share_first": 0.5, "mean_logodds": 0.5}
    assert P.position_bias(j.iloc[[0]]) == {"share_first": 1.0, "mean_logodds": 1.0}
    d = P.debiased(j)
    assert d.logodds.tolist() == [0.5, -0.5, -2.5, 2.5] and d[["prompt", "a", "b"]].equals(j[["prompt", "a", "b"]])
    assert j.logodds.tolist() == [1.0, 0.0, -2.0, 3.0]                # the input is left as it was
    assert P.position_bias(d) == {"share_first": 0.5, "mean_logodds": 0.0}


def _outcomes(rows):
    """Outcome rows (prompt, x, y, score) with ``consistent`` = the score is 0 or 1."""
    return pd.DataFrame([{"prompt": p, "x": x, "y": y, "consistent": s in (0.0, 1.0), "score": s}
                         for p, x, y, s in rows])


def test_human_preference_from_either_side():
    o = _outcomes([(0, "a-model", "human", 0.0), (1, "a-model", "human", 0.5),     # human is y: 1 and 0.5
                   (0, "human", "z-model", 0.0), (1, "human", "z-model", 1.0),     # human is x: 0 and 1
                   (0, "a-model", "z-model", 1.0)])
    assert P.human_preference(o) == pytest.approx((1 + 0.5 + 0 + 1) / 4, abs=1e-15)
    oriented = P._oriented(o, "human")
    assert oriented.to_dict("list") == {"prompt": [0, 1, 0, 1], "other": ["z-model", "z-model", "a-model", "a-model"],
                                        "score": [0.0, 1.0, 1.0, 0.5]}
    assert list(oriented.index) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=exactly("no pair holds the human continuation")):
        P.human_preference(o[(o.x != "human") & (o.y != "human")])


def test_win_matrix_sums_scores_and_ignores_other_items():
    o = _outcomes([(0, "a", "b", 1.0), (1, "a", "b", 0.5), (2, "a", "b", 0.0), (0, "b", "c", 1.0),
                   (1, "b", "c", 1.0), (0, "a", "c", 0.5), (0, "a", "h", 1.0), (0, "h", "c", 0.0)])
    w = P.win_matrix(o, ["c", "a", "b"])
    # rows/columns c, a, b: a-b 1.5:1.5, b-c 2:0, a-c 0.5:0.5; the pairs with h left out
    assert w.tolist() == [[0.0, 0.5, 0.0], [0.5, 0.0, 1.5], [2.0, 1.5, 0.0]]


# --- Bradley-Terry and Elo ------------------------------------------------------------------------


def test_loglik_by_hand():
    w = np.array([[0.0, 3.0], [1.0, 0.0]])
    # theta = (0, 0): every game has probability 1/2: 4 log(1/2)
    assert P._loglik(np.zeros(2), w) == pytest.approx(4 * math.log(0.5), abs=1e-12)
    # theta = (ln 3, 0): p(0 beats 1) = 3/4: 3 log(3/4) + log(1/4)
    assert P._loglik(np.array([LOG3, 0.0]), w) == pytest.approx(3 * math.log(0.75) + math.log(0.25), abs=1e-12)
    both = P._loglik(np.array([[0.0, 0.0], [LOG3, 0.0]]), np.stack([w, w]))
    assert both.shape == (2,) and both == pytest.approx([4 * math.log(0.5), 3 * math.log(0.75) + math.log(0.25)],
                                                        abs=1e-12)
    # the diagonal counts nothing when it is 0: three players, one game 0 beat 2
    w3 = np.zeros((3, 3))
    w3[0, 2] = 1
    assert P._loglik(np.array([0.0, 5.0, -1.0]), w3) == pytest.approx(-math.log(1 + math.exp(-1.0)), abs=1e-12)


def test_newton_steps_by_hand():
    w = np.array([[0.0, 3.0], [1.0, 0.0]])
    # theta_0 is held at 0; from theta = 0: gradient of player 1 = 1 - 4 * 1/2 = -1, curvature
    # 4 * 1/2 * 1/2 = 1, so one step gives theta_1 = -1, centred: (0.5, -0.5)
    assert P.bradley_terry(w, prior_ties=0, max_iter=1) == pytest.approx([0.5, -0.5], abs=1e-15)
    # a second step from theta_1 = -1: s = sigmoid(1); gradient 1 - 4 (1 - s), curvature 4 s (1 - s)
    s = 1 / (1 + math.exp(-1))
    t1 = -1 + (1 - 4 * (1 - s)) / (4 * s * (1 - s))
    assert P.bradley_terry(w, prior_ties=0, max_iter=2) == pytest.approx([-t1 / 2, t1 / 2], abs=1e-15)
    # a tolerance above the first step's size stops after it
    assert P.bradley_terry(w, prior_ties=0, tol=1.5) == pytest.approx([0.5, -0.5], abs=1e-15)
    assert P.bradley_terry(w, prior_ties=0, tol=0.5) == pytest.approx([-t1 / 2, t1 / 2], abs=1e-15)   # the 2nd step: 0.096
    assert P.bradley_terry(w, prior_ties=0) == pytest.approx([LOG3 / 2, -LOG3 / 2], abs=1e-12)
    # the default: one virtual tie per pair, 3.5 : 1.5; its first step: gradient 1.5 - 5 / 2 = -1,
    # curvature 5 / 4, theta_1 = -0.8 (the diagonal gets no virtual games)
    assert P.bradley_terry(w, max_iter=1) == pytest.approx([0.4, -0.4], abs=1e-15)
    assert P.bradley_terry(w) == pytest.approx([math.log(3.5 / 1.5) / 2, -math.log(3.5 / 1.5) / 2], abs=1e-12)
    # the input is not changed
    assert w.tolist() == [[0.0, 3.0], [1.0, 0.0]]


def test_bradley_terry_three_players_by_symmetry():
    # 0 beats 1 and 2 in all of 4 games each; 1 and 2 split 4 games. With one virtual tie per pair,
    # 0's likelihood equation against the (equal) others: 2 * 4.5 = 2 * 5 * s, s = 0.9, a gap ln 9
    w = np.array([[0, 4, 4], [0, 0, 2], [0, 2, 0]], dtype=float)
    theta = P.bradley_terry(w)
    gap = math.log(9)
    assert theta == pytest.approx([2 * gap / 3, -gap / 3, -gap / 3], abs=1e-12)
    # a batch of two fits at once; the single fit of each agrees
    batch = P.bradley_terry(np.stack([w, w[[1, 0, 2]][:, [1, 0, 2]]]))
    assert batch.shape == (2, 3)
    assert batch[1] == pytest.approx([-gap / 3, 2 * gap / 3, -gap / 3], abs=1e-12)
    assert batch[0] == pytest.approx(theta, abs=1e-12)


def test_step_halving_reaches_the_fit_where_plain_newton_steps_oscillate():
    # lopsided scores among five players: from theta = 0, full Newton steps raise the log-likelihood
    # seven times, then overshoot (it falls at the 8th) and never settle (within 200 steps the Hessian
    # turns singular); halved steps reach the solution of the likelihood equations, observed = expected wins
    w = np.array([[0, 972, 0, 0, 0], [0, 0, 0, 3, 0], [4362, 0, 0, 0, 0], [0, 0, 0, 0, 0], [9279, 172, 0, 1593, 0]],
                 dtype=float)
    theta = P.bradley_terry(w, prior_ties=0.5)
    prior = w + 0.25 * (1 - np.eye(5))
    # no iteration lowers the log-likelihood (beyond rounding once converged); with full steps the
    # 8th would, from -33.3 to -42.0
    ll = [P._loglik(P.bradley_terry(w, prior_ties=0.5, max_iter=m), prior) for m in range(1, 16)]
    assert all(b >= a - 1e-9 for a, b in zip(ll, ll[1:])) and ll[-1] > ll[0] + 2000
    p = 1 / (1 + np.exp(-(theta[:, None] - theta[None, :])))
    assert np.abs(prior.sum(1) - ((prior + prior.T) * p).sum(1)).max() < 1e-8
    assert theta.sum() == pytest.approx(0, abs=1e-12) and np.all(np.isfinite(theta))


def test_bradley_terry_refusals():
    shape_msg = "wins must be (K, K) or (B, K, K) with K >= 2, got {}"
    for bad in (np.zeros((1, 1)), np.zeros((2, 3)), np.zeros(3), np.zeros((2, 2, 2, 2)), np.zeros((3, 1, 1)),
                np.zeros((2, 2, 3))):
        with pytest.raises(ValueError, match=exactly(shape_msg.format(bad.shape))):
            P.bradley_terry(bad)
    with pytest.raises(ValueError, match=exactly("scores and prior_ties must be non-negative")):
        P.bradley_terry(np.array([[0, 1], [-1, 0]]))
    with pytest.raises(ValueError, match=exactly("scores and prior_ties must be non-negative")):
        P.bradley_terry(np.array([[0, 1], [1, 0]]), prior_ties=-0.5)
    assert P.bradley_terry(np.zeros((2, 2))) == pytest.approx([0, 0], abs=0)   # nothing but the prior: equal


def test_elo_scale():
    assert P.ELO_PER_LOGIT == pytest.approx(400 / math.log(10), abs=1e-12) and P.ELO_MEAN == 1000.0
    # strengths 1 and 0: mean 0.5, so +-0.5 logits = +-200 / ln 10 points
    assert P.elo([1.0, 0.0]) == pytest.approx([1000 + 200 / math.log(10), 1000 - 200 / math.log(10)], abs=1e-9)
    assert P.elo([LOG3, 0.0, -LOG3]) == pytest.approx([1000 + 400 * math.log10(3), 1000, 1000 - 400 * math.log10(3)],
                                                      abs=1e-9)
    batch = P.elo(np.array([[2.0, 0.0], [5.0, 5.0]]))
    assert batch.shape == (2, 2)
    assert batch == pytest.approx(np.array([[1000 + 400 / math.log(10), 1000 - 400 / math.log(10)], [1000, 1000]]),
                                  abs=1e-9)


# --- Elo gaps -------------------------------------------------------------------------------------


def _two_player_gap(s, n, prior=1.0):
    """Closed-form Elo gap of a player scoring ``s`` of ``n`` games with ``prior`` virtual ties."""
    return 400 * np.log10((s + prior / 2) / (n - s + prior / 2))


def test_elo_gaps_for_two_models_match_the_closed_form():
    # P's score against L on 3 prompts: 1, 1, 0.5 -> 2.5 : 0.5, with a virtual tie 3 : 1
    o = _outcomes([(0, "L", "P", 0.0), (1, "L", "P", 0.0), (2, "L", "P", 0.5),
                   (0, "L", "human", 0.0), (1, "L", "human", 0.0), (2, "L", "human", 0.5)])
    t = P.elo_gaps(o, ["P", "L"], n_boot=300, seed=2)
    assert list(t.columns) == ["model", "elo", "gap", "gap_ci_low", "gap_ci_high"]
    assert t.model.tolist() == ["P", "L"]
    assert t.elo.tolist() == pytest.approx([1000 + 200 * math.log10(3), 1000 - 200 * math.log10(3)], abs=1e-9)
    assert t.gap.dtype == t.gap_ci_low.dtype == t.gap_ci_high.dtype == np.float64
    assert math.isnan(t.gap[0]) and math.isnan(t.gap_ci_low[0]) and math.isnan(t.gap_ci_high[0])   # none for the first
    assert t.gap[1] == pytest.approx(400 * math.log10(3), abs=1e-9)
    p_scores = np.array([1.0, 1.0, 0.5])                              # P's per-prompt scores, resampled
    lo, hi = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 3), p_scores, n_boot=300, seed=2)
    assert (t.gap_ci_low[1], t.gap_ci_high[1]) == pytest.approx((lo, hi), abs=1e-6)
    assert lo < hi
    # a prior of 0.5 virtual ties: 2.75 : 0.75
    t = P.elo_gaps(o, ["P", "L"], prior_ties=0.5, n_boot=50)
    assert t.gap[1] == pytest.approx(400 * math.log10(2.75 / 0.75), abs=1e-9)
    # the defaults: one virtual tie, 2000 resamples, seed 0
    default = P.elo_gaps(o, ["P", "L"])
    lo, hi = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 3), p_scores)
    assert (default.gap_ci_low[1], default.gap_ci_high[1]) == pytest.approx((lo, hi), abs=1e-6)
    assert default.equals(P.elo_gaps(o, ["P", "L"], prior_ties=1.0, n_boot=2000, seed=0))


def test_elo_gaps_resamples_prompts_for_more_prompts():
    scores = [1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 1.0, 1.0, 0.5]
    o = _outcomes([(i, "A", "B", s) for i, s in enumerate(scores)])   # A's score on each prompt
    t = P.elo_gaps(o, ["A", "B"], n_boot=400, seed=9)
    assert t.gap[1] == pytest.approx(_two_player_gap(6.5, 10), abs=1e-9)
    lo, hi = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 10), np.array(scores), n_boot=400, seed=9)
    assert (t.gap_ci_low[1], t.gap_ci_high[1]) == pytest.approx((lo, hi), abs=1e-6)
    other = P.elo_gaps(o, ["A", "B"], n_boot=400, seed=10)
    assert (other.gap_ci_low[1], other.gap_ci_high[1]) != (t.gap_ci_low[1], t.gap_ci_high[1])
    # the defaults: 2000 resamples with seed 0
    default = P.elo_gaps(o, ["A", "B"])
    lo, hi = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 10), np.array(scores), n_boot=2000, seed=0)
    assert (default.gap_ci_low[1], default.gap_ci_high[1]) == pytest.approx((lo, hi), abs=1e-6)
    moved = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 10), np.array(scores), seed=1)
    assert moved != pytest.approx((lo, hi), abs=1e-6)                 # (the seed matters here)


def test_elo_gaps_for_three_models_by_symmetry():
    # a beats b and c on every one of 4 prompts; b and c tie every time: a's gap to each is
    # ln(4.5 / 0.5) = ln 9 logits (see the three-player Bradley-Terry case); every resample alike
    rows = []
    for i in range(4):
        rows += [(i, "a", "b", 1.0), (i, "a", "c", 1.0), (i, "b", "c", 0.5), (i, "b", "human", 0.0)]
    t = P.elo_gaps(_outcomes(rows), ["b", "a", "c"], n_boot=100)
    gap = 400 * math.log10(9)
    assert t.model.tolist() == ["b", "a", "c"]
    assert t.elo.tolist() == pytest.approx([1000 - gap / 3, 1000 + 2 * gap / 3, 1000 - gap / 3], abs=1e-9)
    assert t.gap.tolist()[1:] == pytest.approx([-gap, 0.0], abs=1e-9)
    assert t.gap_ci_low.tolist()[1:] == pytest.approx([-gap, 0.0], abs=1e-9)
    assert t.gap_ci_high.tolist()[1:] == pytest.approx([-gap, 0.0], abs=1e-9)


def test_elo_gaps_refusals():
    o = _outcomes([(0, "a", "b", 1.0), (1, "a", "b", 0.0), (1, "a", "human", 1.0), (2, "b", "human", 1.0)])
    with pytest.raises(ValueError, match=exactly("need two or more distinct models, got ['a']")):
        P.elo_gaps(o, ["a"])
    with pytest.raises(ValueError, match=exactly("need two or more distinct models, got ['a', 'a']")):
        P.elo_gaps(o, ["a", "a"])
    # prompt 2 holds no a-b judgement
    with pytest.raises(ValueError, match=exactly("every prompt needs every pair of models judged; missing pairs: []")):
        P.elo_gaps(o, ["a", "b"])
    with pytest.raises(ValueError, match=exactly("every prompt needs every pair of models judged; "
                                                   "missing pairs: [('a', 'c'), ('b', 'c')]")):
        P.elo_gaps(o[o.prompt < 2], ["a", "b", "c"])
    # pairs with other items need not be complete
    t = P.elo_gaps(o[o.prompt < 2], ["b", "a"], n_boot=20)
    assert t.gap[1] == pytest.approx(0.0, abs=1e-9)


# --- the measurement ------------------------------------------------------------------------------


def _three_prompts():
    # P's scores against L: 1, 1, 0.5; the human's against L: 1, 1, 0.5 and against P: 1, 0.5, 0.5
    return _outcomes([(0, "L", "P", 0.0), (1, "L", "P", 0.0), (2, "L", "P", 0.5),
                      (0, "L", "human", 0.0), (1, "L", "human", 0.0), (2, "L", "human", 0.5),
                      (0, "P", "human", 0.0), (1, "P", "human", 0.5), (2, "P", "human", 0.5)])


def test_measure_values_evidence_and_tables():
    o = _three_prompts()
    extra = pd.DataFrame({"k": [1]})
    m = P.measure(o, {"L": "llama", "P": "protot"}, n_boot=200, seed=3, config={"judge": "j"},
                  tables={"judgements": extra}, evidence={"note": 1})
    assert m.claim == "protot/generation-elo"
    v = m.values
    p_scores = np.array([1.0, 1.0, 0.5])
    lo, hi = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 3), p_scores, n_boot=200, seed=3)
    assert v["elo_gap_llama"] == pytest.approx(400 * math.log10(3), abs=1e-9)    # 3 : 1 with the virtual tie
    assert (v["elo_gap_llama_ci_low"], v["elo_gap_llama_ci_high"]) == pytest.approx((lo, hi), abs=1e-6)
    for arch in ("deltanet", "mamba"):
        assert v[f"elo_gap_{arch}"] is None and v[f"elo_gap_{arch}_ci_low"] is None
        assert v[f"elo_gap_{arch}_ci_high"] is None
    assert v["judge_order_consistency"] == pytest.approx(5 / 9, abs=1e-15)   # 2 + 2 + 1 of 9 pairs
    assert v["human_preference"] == pytest.approx((2.5 + 2) / 6, abs=1e-15)
    assert v["architectures_compared"] == 2 and v["n_prompts"] == 3 and type(v["n_prompts"]) is int
    assert len(v) == 13
    ev = m.evidence
    assert ev["elo"] == {"P": 1095.42, "L": 904.58}                    # 1000 +- 200 log10(3) = +-95.424
    assert ev["elo_protot"] == pytest.approx(1000 + 200 * math.log10(3), abs=1e-9)
    assert ev["human_score_by_model"] == {"L": 0.8333, "P": 0.6667}
    assert ev["consistency_by_pair"] == {"L vs P": 0.6667, "L vs human": 0.6667, "P vs human": 0.3333}
    assert ev["note"] == 1 and len(ev) == 5
    assert list(m.tables) == ["judgements", "generation_elo"] and m.tables["judgements"] is extra
    table = m.tables["generation_elo"]
    assert list(table.columns) == ["model", "architecture", "elo", "gap", "gap_ci_low", "gap_ci_high"]
    assert table.model.tolist() == ["P", "L"] and table.architecture.tolist() == ["protot", "llama"]
    assert m.config == {"judge": "j"}
    bare = P.measure(o, {"P": "protot", "L": "llama"}, n_boot=20)
    assert list(bare.tables) == ["generation_elo"] and bare.config == {} and len(bare.evidence) == 4


def test_measure_passes_its_fit_and_bootstrap_settings_on():
    scores = [1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 1.0, 1.0, 0.5]     # A's score against B on 10 prompts: 6.5
    o = _outcomes([(i, "A", "B", s) for i, s in enumerate(scores)] + [(i, "A", "human", 0.0) for i in range(10)])
    archs = {"B": "llama", "A": "protot"}

    def gap_of(m):
        return m.values["elo_gap_llama"], m.values["elo_gap_llama_ci_low"], m.values["elo_gap_llama_ci_high"]

    def by_hand(prior, **kw):
        ci = stats.bootstrap_paired_ci(lambda s: _two_player_gap(s.sum(1), 10, prior), np.array(scores), **kw)
        return (_two_player_gap(6.5, 10, prior), *ci)

    # 0.5 virtual ties: 6.75 : 3.75
    assert gap_of(P.measure(o, archs, prior_ties=0.5, n_boot=60, seed=5)) == pytest.approx(
        by_hand(0.5, n_boot=60, seed=5), abs=1e-6)
    # the defaults: one virtual tie, 2000 resamples, seed 0
    assert gap_of(P.measure(o, archs)) == pytest.approx(by_hand(1.0, n_boot=2000, seed=0), abs=1e-6)
    # (each setting matters here)
    assert by_hand(0.5, n_boot=60, seed=6) != pytest.approx(by_hand(0.5, n_boot=60, seed=5), abs=1e-6)
    assert by_hand(0.5, n_boot=2000, seed=5) != pytest.approx(by_hand(0.5, n_boot=60, seed=5), abs=1e-6)
    assert by_hand(1.0, n_boot=2000, seed=1) != pytest.approx(by_hand(1.0, n_boot=2000, seed=0), abs=1e-6)


def test_measure_orders_the_architectures_and_names_each_gap():
    rows = []
    for i in range(3):
        rows += [(i, "D", "M", 0.5), (i, "D", "P", 0.0), (i, "D", "L", 0.5), (i, "L", "M", 0.5), (i, "L", "P", 0.0),
                 (i, "M", "P", 0.0), (i, "P", "human", 0.0)]
    # P beats each of D, L, M every time (3 : 0 each); those three tie among themselves: by the
    # three-player symmetry argument extended to four, P's likelihood equation 3 * 3.5 = 3 * 4 s,
    # s = 7 / 8, a gap of ln 7 to each
    m = P.measure(_outcomes(rows), {"M": "mamba", "D": "deltanet", "P": "protot", "L": "llama"}, n_boot=50)
    gap = 400 * math.log10(7)
    for arch in ("llama", "deltanet", "mamba"):
        assert m.values[f"elo_gap_{arch}"] == pytest.approx(gap, abs=1e-9)
        assert m.values[f"elo_gap_{arch}_ci_low"] == pytest.approx(gap, abs=1e-9)
    assert m.tables["generation_elo"].model.tolist() == ["P", "L", "D", "M"]
    assert m.values["architectures_compared"] == 4


def test_measure_refusals():
    o = _three_prompts()
    prefix = "one model per architecture of ('protot', 'llama', 'deltanet', 'mamba'), a ProtoT among them; got "
    for archs in ({"P": "protot", "L": "gpt"}, {"P": "llama", "L": "llama"}, {"P": "llama", "L": "mamba"},
                  {"P": "protot", "L": "protot"}):
        with pytest.raises(ValueError, match=exactly(prefix + repr(archs))):
            P.measure(o, archs)
