"""protot.preference: Bradley-Terry on hand-computed cases, planted judges that the measurement must
recover, and judges it must reject (random, position-biased, preferring gibberish)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from compendium import claims
from ledger_helpers import fits_ledger
from protot import preference as P

# --- Bradley-Terry -------------------------------------------------------------------------------


def test_two_players_hand_computed():
    # 3 wins to 1: the MLE of theta_0 - theta_1 is ln(3 / 1), 400 log10(3) = 190.85 Elo
    theta = P.bradley_terry(np.array([[0, 3], [1, 0]]), prior_ties=0)
    assert theta == pytest.approx([math.log(3) / 2, -math.log(3) / 2], abs=1e-12)
    assert P.elo(theta) == pytest.approx([1000 + 95.42425094393249, 1000 - 95.42425094393249], abs=1e-9)
    # one virtual tie per pair adds half a win to each side: ln(3.5 / 1.5)
    theta = P.bradley_terry(np.array([[0, 3], [1, 0]]), prior_ties=1)
    assert theta[0] - theta[1] == pytest.approx(math.log(3.5 / 1.5), abs=1e-12)


def test_a_chain_of_three_hand_computed():
    # only 0-1 (3:1) and 1-2 (3:1) played: each link is fitted on its own, so 0 - 2 = 2 ln 3
    w = np.array([[0, 3, 0], [1, 0, 3], [0, 1, 0]])
    theta = P.bradley_terry(w, prior_ties=0)
    assert theta[0] - theta[1] == pytest.approx(math.log(3), abs=1e-10)
    assert theta[1] - theta[2] == pytest.approx(math.log(3), abs=1e-10)
    assert P.elo(theta)[0] - P.elo(theta)[2] == pytest.approx(800 * math.log10(3), abs=1e-7)


def test_a_cycle_rates_everyone_equal():
    w = np.array([[0, 2, 1], [1, 0, 2], [2, 1, 0]])
    assert P.bradley_terry(w, prior_ties=0) == pytest.approx([0, 0, 0], abs=1e-12)


def test_the_fit_solves_the_likelihood_equations_and_batches():
    rng = np.random.default_rng(0)
    w = rng.integers(0, 9, size=(5, 4, 4)).astype(float) * (1 - np.eye(4))
    thetas = P.bradley_terry(w, prior_ties=1)
    for wb, theta in zip(w, thetas):
        prior = wb + 0.5 * (1 - np.eye(4))
        p = 1 / (1 + np.exp(-(theta[:, None] - theta[None, :])))
        expected = ((prior + prior.T) * p).sum(1)
        assert prior.sum(1) == pytest.approx(expected, abs=1e-9)      # observed wins = expected wins
        assert theta == pytest.approx(P.bradley_terry(wb, prior_ties=1), abs=1e-12)
        assert theta.sum() == pytest.approx(0, abs=1e-12)


def test_a_clean_sweep_stays_finite_with_the_prior():
    theta = P.bradley_terry(np.array([[0, 200], [0, 0]]), prior_ties=1)
    assert theta[0] - theta[1] == pytest.approx(math.log(200.5 / 0.5), abs=1e-9)


# --- judges on synthetic continuations ------------------------------------------------------------
N = 40
PREFIXES = [f"prompt {i}" for i in range(N)]
QUALITY = {"human": 3.0, "fine": 2.0, "fair": 1.0, "zzz": 0.0}      # what a planted judge rewards


def _texts(kind):
    return [f"{kind} text {i}" for i in range(N)]


def _quality(text):
    return next(q for k, q in QUALITY.items() if text.startswith(k))


class Planted:
    """Prefers the higher quality (read from the text), in either order; noise kept below the gaps."""

    def __init__(self, seed=0, position_bias=0.0):
        self.rng, self.bias = np.random.default_rng(seed), position_bias

    def logodds(self, prefix, pairs):
        return np.array([_quality(a) - _quality(b) + self.bias + self.rng.normal(0, 0.1) for a, b in pairs])


class Random:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def logodds(self, prefix, pairs):
        return self.rng.normal(0, 1, len(pairs))


class AlwaysA:
    def logodds(self, prefix, pairs):
        return np.full(len(pairs), 2.0)


class Gibberish:
    """Prefers the worse text every time (the z's most)."""

    def logodds(self, prefix, pairs):
        return np.array([_quality(b) - _quality(a) for a, b in pairs])


ITEMS = {"human": _texts("human"), "protot-x": _texts("fine"), "llama-x": _texts("fair")}
ARCHS = {"protot-x": "protot", "llama-x": "llama"}


def _outcomes(judge, items=ITEMS):
    return P.pair_outcomes(P.judge_all(judge, PREFIXES, items))


def _verdict(m):
    status, conds, pre, reason = claims.evaluate(claims.get_claim(m.claim), m.values, "cpu", m.evidence)
    return status, {o.id: o.passed for o in pre}, conds


def test_judge_all_asks_every_pair_in_both_orders():
    j = P.judge_all(Planted(), PREFIXES[:2], {k: v[:2] for k, v in ITEMS.items()})
    assert len(j) == 2 * 3 * 2
    assert set(zip(j.a, j.b)) == {(a, b) for a in ITEMS for b in ITEMS if a != b}
    with pytest.raises(ValueError, match="has 40 texts for 2 prompts"):
        P.judge_all(Planted(), PREFIXES[:2], ITEMS)


def test_outcomes_need_both_orders_to_agree():
    j = pd.DataFrame({"prompt": [0] * 6, "a": ["p", "q", "p", "r", "q", "r"], "b": ["q", "p", "r", "p", "r", "q"],
                      "logodds": [1.0, -2.0, 1.0, 3.0, 0.0, -1.0]})
    o = P.pair_outcomes(j).set_index(["x", "y"])
    assert o.loc[("p", "q")].score == 1.0 and o.loc[("p", "q")].consistent    # p first: +1; p second: +2
    assert o.loc[("p", "r")].score == 0.5 and not o.loc[("p", "r")].consistent  # both orders say "A"
    assert o.loc[("q", "r")].score == 0.5 and not o.loc[("q", "r")].consistent  # a log-odds of 0 names none
    with pytest.raises(ValueError, match="in one order only"):
        P.pair_outcomes(j.iloc[:5])


def test_a_planted_judge_is_recovered():
    o = _outcomes(Planted())
    m = P.measure(o, ARCHS, n_boot=500, seed=0)
    fits_ledger(m)
    v = m.values
    assert v["judge_order_consistency"] == 1.0 and v["human_preference"] == 1.0
    assert v["elo_gap_llama_ci_low"] > 0 and v["elo_gap_llama"] == pytest.approx(
        400 * math.log10((N + 0.5) / 0.5), abs=1e-6)                          # a sweep, with one virtual tie
    assert v["elo_gap_deltanet"] is None and v["elo_gap_mamba_ci_high"] is None
    assert v["architectures_compared"] == 2 and v["n_prompts"] == N
    status, pre, conds = _verdict(m)
    assert status == "inconclusive" and pre["models-compared"] is False and pre["judge-order-consistent"]
    assert pre["judge-prefers-human"]


def test_a_planted_order_of_four_is_recovered():
    items = {"human": _texts("human"), "P": _texts("fine"), "L": _texts("fair"), "D": _texts("zzz"),
             "M": [f"fine text {i}" if i % 2 else f"fair text {i}" for i in range(N)]}
    archs = {"P": "protot", "L": "llama", "D": "deltanet", "M": "mamba"}
    m = P.measure(_outcomes(Planted(), items), archs, n_boot=500, seed=0)
    v = m.values
    assert v["elo_gap_llama_ci_low"] > 0 and v["elo_gap_deltanet_ci_low"] > v["elo_gap_llama_ci_high"]
    # Mamba wins half its games against ProtoT's level and half at LLaMA's: between the two
    assert 0 < v["elo_gap_mamba"] < v["elo_gap_llama"]
    assert v["architectures_compared"] == 4
    table = m.tables["generation_elo"]
    assert list(table.architecture) == ["protot", "llama", "deltanet", "mamba"]
    assert table.elo.mean() == pytest.approx(1000, abs=1e-9)


def test_the_claim_holds_for_a_planted_order_on_enough_prompts_and_not_when_mislabelled():
    n = 200                                                          # the claim's min_units
    prefixes = [f"prompt {i}" for i in range(n)]
    items = {kind: [f"{text} text {i}" for i in range(n)]
             for kind, text in (("human", "human"), ("P", "fine"), ("M", "fine"), ("L", "fair"), ("D", "zzz"))}
    o = P.pair_outcomes(P.judge_all(Planted(seed=3), prefixes, items))
    archs = {"P": "protot", "L": "llama", "D": "deltanet", "M": "mamba"}
    m = P.measure(o, archs, n_boot=1000, seed=0)
    lo, hi = m.values["elo_gap_mamba_ci_low"], m.values["elo_gap_mamba_ci_high"]
    assert -50 < lo < 0 < hi < 50                                    # ProtoT and Mamba write alike
    assert _verdict(m)[0] == "holds"
    assert _verdict(P.measure(o, {"P": "llama", "L": "protot", "D": "deltanet", "M": "mamba"}, n_boot=1000))[0] \
        == "does not hold"
    fewer = P.measure(o[o.prompt < 199], archs, n_boot=200)
    assert _verdict(fewer)[0] == "inconclusive" and _verdict(fewer)[1]["min-units"] is False


def test_mislabelled_models_do_not_give_the_planted_order():
    swapped = P.measure(_outcomes(Planted()), {"protot-x": "llama", "llama-x": "protot"}, n_boot=500)
    assert swapped.values["elo_gap_llama_ci_high"] < 0
    rng = np.random.default_rng(1)                                   # names shuffled per prompt
    flip = rng.random(N) < 0.5
    a, b = np.array(ITEMS["protot-x"]), np.array(ITEMS["llama-x"])
    shuffled = {"human": ITEMS["human"], "protot-x": list(np.where(flip, b, a)), "llama-x": list(np.where(flip, a, b))}
    v = P.measure(_outcomes(Planted(), shuffled), ARCHS, n_boot=500).values
    assert v["elo_gap_llama_ci_low"] < 0 < v["elo_gap_llama_ci_high"]


@pytest.mark.parametrize("judge, most", [(Random(), 0.6), (AlwaysA(), 0.0), (Planted(position_bias=5.0), 0.0)])
def test_a_judge_that_ignores_the_texts_fails_order_consistency(judge, most):
    m = P.measure(_outcomes(judge), ARCHS, n_boot=200)
    assert m.values["judge_order_consistency"] <= most
    assert _verdict(m)[1]["judge-order-consistent"] is False


def test_a_judge_preferring_gibberish_fails_the_human_precondition():
    items = {"human": _texts("human"), "protot-x": _texts("zzz"), "llama-x": _texts("fair")}
    m = P.measure(_outcomes(Gibberish(), items), ARCHS, n_boot=200)
    assert m.values["judge_order_consistency"] == 1.0                 # consistent, and wrong
    assert m.values["human_preference"] == 0.0
    assert _verdict(m)[1]["judge-prefers-human"] is False
    assert _verdict(P.measure(_outcomes(Planted(), items), ARCHS, n_boot=200))[1]["judge-prefers-human"]


def test_measure_refuses_what_it_cannot_rate():
    o = _outcomes(Planted())
    with pytest.raises(ValueError, match="a ProtoT among them"):
        P.measure(o, {"protot-x": "llama", "llama-x": "llama"})
    with pytest.raises(ValueError, match="a ProtoT among them"):
        P.measure(o, {"protot-x": "gpt", "llama-x": "llama"})
    with pytest.raises(ValueError, match="every pair of models judged"):
        P.elo_gaps(o[~((o.prompt == 3) & (o.x == "llama-x"))], ["protot-x", "llama-x"])


# --- prompts -------------------------------------------------------------------------------------


def test_prompts_lie_inside_one_document_and_are_seeded():
    eos = 9
    stream = np.arange(100) % 9
    stream[[13, 47]] = eos                                            # windows of 10: 1 and 4 hold eos
    ps = P.select_prompts(stream, 8, 6, 4, eos=eos, seed=0)
    assert [p.start for p in ps] == [0, 20, 30, 50, 60, 70, 80, 90] and [p.index for p in ps] == list(range(8))
    assert all(eos not in p.prefix_ids + p.human_ids for p in ps)
    assert ps[2].prefix_ids == tuple(stream[30:36]) and ps[2].human_ids == tuple(stream[36:40])
    assert P.select_prompts(stream, 3, 6, 4, eos=eos, seed=5) == P.select_prompts(stream, 3, 6, 4, eos=eos, seed=5)
    assert P.select_prompts(stream, 3, 6, 4, eos=eos, seed=5) != P.select_prompts(stream, 3, 6, 4, eos=eos, seed=6)
    with pytest.raises(ValueError, match="only 8 windows"):
        P.select_prompts(stream, 9, 6, 4, eos=eos)


def test_continuations_are_seeded_per_prompt():
    import torch
    from protot.models import LlamaBaselineConfig, LlamaBaselineForCausalLM

    torch.manual_seed(0)
    model = LlamaBaselineForCausalLM(LlamaBaselineConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                                                         num_attention_heads=2, intermediate_size=64))
    ps = P.select_prompts(np.arange(200) % 40, 3, 5, 4, eos=49, seed=0)
    kw = dict(max_new_tokens=6, temperature=1.0, top_k=20, seed=7)
    a = P.continuations(model, ps, **kw)
    assert a == P.continuations(model, ps, **kw) and all(len(x) == 6 for x in a)
    assert P.continuations(model, ps[1:], **kw) == a[1:]             # a prompt's draw does not depend on the others
    assert P.continuations(model, ps, **{**kw, "seed": 8}) != a
    same = [P.Prompt(i, 0, ps[0].prefix_ids, ps[0].human_ids) for i in range(2)]   # one prefix, two prompts
    x, y = P.continuations(model, same, **kw)
    assert x == a[0] and y != x                                      # the i-th prompt draws with seed + i


# --- the language-model judge (offline SmolLM2-135M-Instruct) -----------------------------------


@pytest.fixture(scope="module")
def smol_judge():
    from accpp import models

    model, tok = models.load_model("smollm2-135m")
    template = claims.protocol("protot/generation-elo", "cpu")["judge_template"]
    return P.LMJudge(model, tok, template)


@pytest.mark.models
def test_the_judges_cache_changes_nothing(smol_judge):
    prefix = "The river flooded the valley after three days of rain, and the villagers"
    pairs = [(" moved their cattle to higher ground.", " blue seven the the of"),
             (" blue seven the the of", " moved their cattle to higher ground.")]
    cached = smol_judge.logodds(prefix, pairs)
    assert cached == pytest.approx(smol_judge.logodds(prefix, pairs, cache=False), abs=1e-9)
    assert cached == pytest.approx(smol_judge.logodds(prefix, pairs), abs=0)  # the cache is rebuilt per prompt
    assert smol_judge.label_ids[0] != smol_judge.label_ids[1]


def test_the_judges_template_is_checked():
    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    with pytest.raises(ValueError, match=r"must hold \{b\}"):
        P.LMJudge(None, Tok(), "{prefix} {a}")
    with pytest.raises(ValueError, match="in that order"):
        P.LMJudge(None, Tok(), "{prefix} {b} {a}")
    with pytest.raises(ValueError, match="one token"):
        P.LMJudge(None, Tok(), "{prefix} {a} {b}", labels=("A1", "B"))


def test_items_and_position_bias():
    class Tok:
        def decode(self, ids):
            return "".join(chr(97 + i) for i in ids)

    ps = [P.Prompt(0, 0, (0, 1), (2,)), P.Prompt(1, 3, (3,), (4, 5))]
    prefixes, items = P.items_of(Tok(), ps, {"m": [[6], [7, 8]]})
    assert prefixes == ["ab", "d"] and items == {"human": ["c", "ef"], "m": ["g", "hi"]}
    with pytest.raises(ValueError, match="1 continuations for 2 prompts"):
        P.items_of(Tok(), ps, {"m": [[6]]})
    j = P.judge_all(AlwaysA(), PREFIXES, ITEMS)
    assert P.position_bias(j) == {"share_first": 1.0, "mean_logodds": 2.0}
    assert P.position_bias(P.judge_all(Planted(), PREFIXES, ITEMS))["share_first"] == 0.5
    biased = P.judge_all(Planted(position_bias=5.0), PREFIXES, ITEMS)     # content shows only after calibration
    assert P.order_consistency(P.pair_outcomes(biased)) == 0.0
    assert P.order_consistency(P.pair_outcomes(P.debiased(biased))) == 1.0
    assert P.position_bias(P.debiased(biased))["mean_logodds"] == pytest.approx(0, abs=1e-12)
