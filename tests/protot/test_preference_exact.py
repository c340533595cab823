"""protot.preference, value by value: outcomes, order consistency, position bias and the human
preference on hand-built judgement lists; Bradley-Terry's Newton steps and log-likelihood by hand;
Elo gaps with closed-form two-player ratings; the measurement's values and evidence; fake judges and a
tiny random language model for the judge's plumbing; every refusal word for word."""
from __future__ import annotations

import math
import re
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from compendium import stats
from protot import preference as P

LOG3 = math.log(3)


def _judgements(rows):
    return pd.DataFrame(rows, columns=["prompt", "a", "b", "logodds"])


def exactly(message):
    """A pattern matching the whole of ``message`` and nothing more."""
    return "^" + re.escape(message) + "$"


# --- prompts --------------------------------------------------------------------------------------


def test_select_prompts_exact_windows():
    # 43 tokens in windows of 3 + 2 = 5: 8 windows (the last 3 tokens dropped); eos 0 sits in
    # windows 0 (token 0) and 6 (token 30)
    stream = np.arange(43) % 30
    ps = P.select_prompts(stream, 6, 3, 2, eos=0, seed=1)
    assert [p.start for p in ps] == [5, 10, 15, 20, 25, 35] and [p.index for p in ps] == [0, 1, 2, 3, 4, 5]
    assert ps[0] == P.Prompt(0, 5, (5, 6, 7), (8, 9))
    assert ps[5] == P.Prompt(5, 35, (5, 6, 7), (8, 9))                 # tokens 35-39 are 5..9 again
    assert all(type(t) is int for p in ps for t in p.prefix_ids + p.human_ids) and type(ps[0].start) is int
    one = P.select_prompts(stream, 1, 1, 1, eos=0, seed=3)             # windows of 2: one of the 19 without eos
    assert len(one) == 1 and len(one[0].prefix_ids) == 1 and len(one[0].human_ids) == 1
    # the draw: default_rng(seed).choice of the eligible windows without replacement, then sorted
    eligible = [1, 2, 3, 4, 5, 7]
    for seed in (0, 4):
        want = sorted(np.random.default_rng(seed).choice(eligible, size=3, replace=False))
        assert [p.start for p in P.select_prompts(stream, 3, 3, 2, eos=0, seed=seed)] == [5 * w for w in want]
    assert P.select_prompts(stream, 3, 3, 2, eos=0) == P.select_prompts(stream, 3, 3, 2, eos=0, seed=0)
    assert P.select_prompts(stream, 3, 3, 2, eos=0) != P.select_prompts(stream, 3, 3, 2, eos=0, seed=1)


def test_select_prompts_refusals():
    stream = np.arange(43) % 30
    for args in ((0, 3, 2), (6, 0, 2), (6, 3, 0), (-1, 3, 2)):
        with pytest.raises(ValueError, match=exactly("n, prefix_tokens and continuation_tokens must be positive, "
                                                       f"got {args[0]}, {args[1]}, {args[2]}")):
            P.select_prompts(stream, *args, eos=0)
    with pytest.raises(ValueError, match=exactly("only 6 windows of 5 tokens lie inside one document; 7 asked for")):
        P.select_prompts(stream, 7, 3, 2, eos=0)


class FakeModel:
    def __init__(self, training):
        self.training = training

    def eval(self):
        self.training = False
        return self

    def train(self, mode=True):
        self.training = mode
        return self


def test_continuations_ask_for_seeded_samples_and_drop_the_final_eos(monkeypatch):
    import protot.generate

    calls = []
    answers = iter([[4, 5, 9], [6, 9, 7], [], [9]])

    def fake(model, prompt_ids, **kw):
        calls.append((model.training, prompt_ids, kw.pop("generator").initial_seed(), kw))
        return next(answers)

    monkeypatch.setattr(protot.generate, "continue_ids", fake)
    ps = [P.Prompt(0, 0, (1, 2), (3,)), P.Prompt(3, 9, (4,), (5,)), P.Prompt(5, 0, (7,), ()), P.Prompt(6, 0, (8,), ())]
    model = FakeModel(training=True)
    out = P.continuations(model, ps, max_new_tokens=3, temperature=0.7, top_k=5, seed=10, eos=9)
    # a final eos is dropped; one inside is kept (it cannot occur: sampling stops after eos)
    assert out == [[4, 5], [6, 9, 7], [], []]
    kw = {"max_new_tokens": 3, "greedy": False, "temperature": 0.7, "top_k": 5, "stop_id": 9}
    assert calls == [(False, [1, 2], 10, kw), (False, [4], 13, kw), (False, [7], 15, kw), (False, [8], 16, kw)]
    assert model.training is True                                      # its mode comes back
    answers = iter([[4, 9]])
    still = FakeModel(training=False)
    assert P.continuations(still, ps[:1], max_new_tokens=2, temperature=1.0, top_k=None, seed=0) == [[4, 9]]
    assert calls[-1][3]["stop_id"] is None and calls[-1][3]["top_k"] is None and still.training is False


def test_continuations_restore_the_mode_after_an_error(monkeypatch):
    import protot.generate

    def boom(model, prompt_ids, **kw):
        raise RuntimeError("sampling failed")

    monkeypatch.setattr(protot.generate, "continue_ids", boom)
    model = FakeModel(training=True)
    with pytest.raises(RuntimeError, match="^sampling failed$"):
        P.continuations(model, [P.Prompt(0, 0, (1,), (2,))], max_new_tokens=1, temperature=1.0, top_k=None, seed=0)
    assert model.training is True


class LetterTok:
    def decode(self, ids):
        assert isinstance(ids, list)
        return "".join(chr(97 + i) for i in ids)


def test_items_of_exact_and_refusals():
    ps = [P.Prompt(0, 0, (0, 1), (2,)), P.Prompt(1, 3, (3,), (4, 5))]
    prefixes, items = P.items_of(LetterTok(), ps, {"m": [[6], [7, 8]], "n": [[], [0]]})
    assert prefixes == ["ab", "d"]
    assert list(items) == ["human", "m", "n"] and items == {"human": ["c", "ef"], "m": ["g", "hi"], "n": ["", "a"]}
    with pytest.raises(ValueError, match=exactly("'human' names the human continuation, not a model")):
        P.items_of(LetterTok(), ps, {"human": [[1], [2]]})
    with pytest.raises(ValueError, match=exactly("'n' has 3 continuations for 2 prompts")):
        P.items_of(LetterTok(), ps, {"m": [[6], [7]], "n": [[1], [2], [3]]})
    assert P.HUMAN == "human" and P.ARCHITECTURES == ("protot", "llama", "deltanet", "mamba")


# --- judging --------------------------------------------------------------------------------------


class Recorder:
    """Answers pair k of prompt p with 10 p + k, and records what it was asked."""

    def __init__(self):
        self.asked = []

    def logodds(self, prefix, pairs):
        self.asked.append((prefix, pairs))
        return np.arange(len(pairs)) + 10.0 * len(self.asked) - 10


def test_judge_all_rows_in_order():
    judge = Recorder()
    items = {"h": ["h0", "h1"], "p": ["p0", "p1"], "l": ["l0", "l1"]}
    j = P.judge_all(judge, ["pre0", "pre1"], items)
    order = [("h", "p"), ("h", "l"), ("p", "l"), ("p", "h"), ("l", "h"), ("l", "p")]
    assert judge.asked == [(f"pre{i}", [(f"{a}{i}", f"{b}{i}") for a, b in order]) for i in (0, 1)]
    assert list(j.columns) == ["prompt", "a", "b", "logodds"]
    assert j.to_dict("records") == [{"prompt": i, "a": a, "b": b, "logodds": 10.0 * i + k}
                                    for i in (0, 1) for k, (a, b) in enumerate(order)]
    assert all(type(v) is float for v in j.logodds.tolist())


def test_judge_all_progress_bar(capsys, monkeypatch):
    from tqdm.auto import tqdm

    # a plain lock and no monitor thread for the bar: nothing shared with other processes (the
    # mutation tests run this in forked processes, where tqdm's default process-shared lock can be
    # left held by another)
    monkeypatch.setattr(tqdm, "_lock", threading.RLock(), raising=False)
    monkeypatch.setattr(tqdm, "monitor_interval", 0)
    items = {"h": ["h0", "h1"], "p": ["p0", "p1"]}
    quiet = P.judge_all(Recorder(), ["a", "b"], items)
    assert capsys.readouterr().err == ""
    loud = P.judge_all(Recorder(), ["a", "b"], items, progress=True)
    assert loud.equals(quiet)
    err = capsys.readouterr().err
    assert err.startswith("\rjudging:") and "2/2" in err and re.search(r"(prompt/s|s/prompt)", err)


def test_judge_all_refusals():
    with pytest.raises(ValueError, match=exactly("need two or more distinct items, got ['h']")):
        P.judge_all(Recorder(), ["a"], {"h": ["x"]})
    with pytest.raises(ValueError, match=exactly("need two or more distinct items, got []")):
        P.judge_all(Recorder(), ["a"], {})
    with pytest.raises(ValueError, match=exactly("'p' has 1 texts for 2 prompts")):
        P.judge_all(Recorder(), ["a", "b"], {"h": ["x", "y"], "p": ["z"]})
    two = P.judge_all(Recorder(), ["a"], {"h": ["x"], "p": ["z"]})               # two items suffice
    assert list(zip(two.a, two.b)) == [("h", "p"), ("p", "h")]


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


# --- the language-model judge ---------------------------------------------------------------------


class ChatTok:
    """Characters as token ids; a chat template "<u>message</u>" with "<a>" opening the answer."""

    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return [ord(c) for c in text]

    def apply_chat_template(self, msgs, tokenize=True, add_generation_prompt=False):
        assert [m["role"] for m in msgs] == ["user"]
        text = "<u>" + msgs[0]["content"] + "</u>" + ("<a>" if add_generation_prompt else "")
        return self.encode(text) if tokenize else text


TEMPLATE = "{prefix}|{a}|{b}?"


def test_the_judges_template_and_labels_refusals():
    for template, key in (("{a} {b}", "{prefix}"), ("{prefix} {b}", "{a}"), ("{prefix} {a}", "{b}")):
        with pytest.raises(ValueError, match=exactly(f"the judge's template must hold {key}")):
            P.LMJudge(None, ChatTok(), template)
    # the first occurrence of each placeholder counts
    for template in ("{prefix} {b} {a}", "{a} {prefix} {b}", "{b} {a} {prefix}", "{prefix} {b} {a} {b}",
                     "{a} {prefix} {a} {b}"):
        with pytest.raises(ValueError, match=exactly("the judge's template must place {prefix}, {a} and {b} "
                                                       "in that order")):
            P.LMJudge(None, ChatTok(), template)
    with pytest.raises(ValueError, match=exactly("each label must be one token of the judge's tokenizer, "
                                                   "got [[65, 49], [66]]")):
        P.LMJudge(None, ChatTok(), TEMPLATE, labels=("A1", "B"))
    with pytest.raises(ValueError, match=exactly("each label must be one token of the judge's tokenizer, "
                                                   "got [[65], []]")):
        P.LMJudge(None, ChatTok(), TEMPLATE, labels=("A", ""))
    for template in ("{prefix}{a}{b}", "{prefix} {a} {b} {a}", "{prefix} {a} {b} {prefix}", "{prefix} {a} {b} {b}"):
        assert P.LMJudge(None, ChatTok(), template).template == template
    judge = P.LMJudge("M", ChatTok(), TEMPLATE)
    assert (judge.model, judge.template, judge.label_ids, judge.labels) == ("M", TEMPLATE, (65, 66), ("A", "B"))
    judge = P.LMJudge("M", ChatTok(), TEMPLATE, labels=["y", "n"])
    assert judge.label_ids == (121, 110) and judge.labels == ("y", "n")


def test_the_judges_rendering_and_shared_part():
    judge = P.LMJudge(None, ChatTok(), TEMPLATE)
    assert judge.render("P", "x", "y") == "<u>P|x|y?</u><a>"
    assert judge._split("P", "x", "yy") == ("<u>P|", "x|yy?</u><a>")

    class Counting(ChatTok):                                            # writes the message's length first
        def apply_chat_template(self, msgs, tokenize=True, add_generation_prompt=False):
            return f"{len(msgs[0]['content'])}:" + super().apply_chat_template(msgs, tokenize, add_generation_prompt)

    with pytest.raises(ValueError, match=exactly("the rendered template does not start with its shared part")):
        P.LMJudge(None, Counting(), TEMPLATE)._split("P", "xx", "y")


@pytest.fixture(scope="module")
def tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).double().eval()


def _direct(model, text, labels=(65, 66)):
    with torch.no_grad():
        logits = model(torch.tensor([[ord(c) for c in text]])).logits[0, -1]
    lp = torch.log_softmax(logits, -1)
    return float(lp[labels[0]] - lp[labels[1]])


def test_the_judges_logodds_read_the_answer_token(tiny_lm):
    judge = P.LMJudge(tiny_lm, ChatTok(), TEMPLATE)
    pairs = [("a long first text", "b"), ("x", "yy"), ("", "zzzz"), ("mid", "dle text")]
    seen = []
    hook = tiny_lm.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(
        (args[0] if args else kwargs["input_ids"]).shape[1]), with_kwargs=True)
    try:
        cached = judge.logodds("the prefix", pairs)
        fed_cached, seen[:] = list(seen), []
        plain = judge.logodds("the prefix", pairs, cache=False)
        fed_plain = list(seen)
    finally:
        hook.remove()
    want = [_direct(tiny_lm, judge.render("the prefix", a, b)) for a, b in pairs]
    assert plain.dtype == np.float64 and plain.shape == (4,)
    assert plain == pytest.approx(want, abs=1e-9) and cached == pytest.approx(want, abs=1e-9)
    assert len(set(np.round(want, 6))) == 4                            # four different answers
    head = len("<u>the prefix|")
    rests = [len(judge.render("the prefix", a, b)) - head for a, b in pairs]
    assert fed_cached == [head] + rests                                # the shared part once, then each rest
    assert fed_plain == [head + r for r in rests]
    # other labels: log p(y) - log p(n)
    yn = P.LMJudge(tiny_lm, ChatTok(), TEMPLATE, labels=("y", "n"))
    assert yn.logodds("p", pairs[:2]) == pytest.approx([_direct(tiny_lm, yn.render("p", a, b), (121, 110))
                                                        for a, b in pairs[:2]], abs=1e-9)
    empty = judge.logodds("the prefix", [])
    assert empty.dtype == np.float64 and empty.shape == (0,)
    assert judge.logodds("the prefix", [], cache=False).shape == (0,)


def test_the_judges_cache_starts_afresh_for_each_prompt(tiny_lm):
    judge = P.LMJudge(tiny_lm, ChatTok(), TEMPLATE)
    first = judge.logodds("one", [("aa", "b")])
    assert judge.logodds("another prefix", [("c", "dd"), ("aa", "b")])[1] == pytest.approx(
        _direct(tiny_lm, judge.render("another prefix", "aa", "b")), abs=1e-9)
    assert judge.logodds("one", [("aa", "b")]) == pytest.approx(first, abs=0)
