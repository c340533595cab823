"""The tracer's input contract (each refusal names the problem, before any work), the recorded reason
of every empty or small circuit, and the two seeding rules ("linear", "prob")."""
from __future__ import annotations

import pytest
import torch

from accpp import trace as trace_mod
from accpp.graph import STATUSES
from accpp.seeding import TokenSet, answer_ids, prob_seeds
from accpp.testing import random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer


@pytest.fixture(scope="module")
def llama(exact):
    return tiny_model("llama", seed=3)


@pytest.fixture(scope="module")
def ids():
    return random_prompt(12, seed=5)


@pytest.fixture(scope="module")
def best_worst(llama, ids):
    """(argmax, argmin) of the model's last-position logits: a positive and a negative metric."""
    with torch.no_grad():
        logits = llama(ids[None]).logits[0, -1]
    return int(logits.argmax()), int(logits.argmin())


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the forward pass starts (refusals must come before any work)."""
    def boom(*a, **k):
        raise AssertionError("the forward pass ran before the input was refused")
    monkeypatch.setattr(trace_mod, "collect", boom)


# ---------------------------------------------------------------- the input contract

@pytest.mark.parametrize("correct, wrong, error, match", [
    ([3, 7], 11, ValueError, r"correct is 2 token ids \[3, 7\].*ONE answer token.*TokenSet\(\[3, 7\]\)"),
    (7, torch.tensor([11, 12]), ValueError, r"wrong is 2 token ids \[11, 12\]"),
    (61, 11, ValueError, r"correct token id\(s\) \[61\] outside the model's vocabulary \(ids 0\.\.60"),
    (7, -1, ValueError, r"wrong token id\(s\) \[-1\] outside the model's vocabulary"),
    (TokenSet([3, 70]), 11, ValueError, r"correct token id\(s\) \[70\] outside"),
    (" Mary", 11, TypeError, r"correct is the string ' Mary'"),
    (7.0, 11, TypeError, r"correct must be a token id \(an int\), got float"),
    (True, 11, TypeError, r"correct must be a token id \(an int\), got bool"),
    ([], 11, ValueError, r"correct: an empty list of token ids"),
    (7, 7, ValueError, r"token id\(s\) \[7\] are both the correct and the wrong answer"),
    (TokenSet([3, 7]), TokenSet([7, 9]), ValueError, r"\[7\] are both"),
    (7, None, ValueError, r"`wrong` is required"),
])
def test_answers_are_refused_by_name_before_any_work(llama, ids, no_work, correct, wrong, error, match):
    with pytest.raises(error, match=match):
        Tracer(llama).trace(ids, correct, wrong)


def test_a_list_of_one_id_is_that_id(llama, ids):
    tracer = Tracer(llama)
    a, b = tracer.trace(ids, [7], torch.tensor([11])), tracer.trace(ids, 7, 11)
    assert a.meta["correct"] == 7 and a.meta["wrong"] == 11 and a.logit_diff == b.logit_diff
    assert set(a.graph.edges) == set(b.graph.edges)


def test_token_sets_refuse_empty_and_repeated_ids():
    with pytest.raises(ValueError, match="empty set"):
        TokenSet([])
    with pytest.raises(ValueError, match=r"token id\(s\) \[3\] given more than once"):
        TokenSet([3, 7, 3])
    with pytest.raises(TypeError, match="tokenize it first"):
        TokenSet("Mary")
    assert answer_ids(TokenSet([3, 7]), "correct", 61) == [3, 7]


def test_multi_token_answer_message_shows_the_pieces():
    class Tok:
        def decode(self, ids):
            return {5: " Mar", 6: "ia"}[ids[0]]

    with pytest.raises(ValueError, match=r"correct is 2 token ids \[5, 6\] \(' Mar', 'ia'\)"):
        answer_ids([5, 6], "correct", 61, Tok())


@pytest.mark.parametrize("family", ["llama", "gpt2"])  # RoPE, learned positions (64 each)
def test_prompts_beyond_the_models_positions_are_refused_before_any_work(family, exact, no_work):
    model = tiny_model(family, seed=3)
    tracer = Tracer(model)
    with pytest.raises(ValueError, match=r"a 65-token prompt is longer than the 64 positions the model"):
        tracer.trace(random_prompt(65, seed=1), 7, 11)
    with pytest.raises(ValueError, match="longer than the 64 positions"):
        tracer.decompose(random_prompt(65, seed=1))


def test_out_of_vocabulary_prompt_ids_are_named(llama, no_work):
    with pytest.raises(ValueError, match=r"0\.\.60.*outside: \[61, 99\]"):
        Tracer(llama).trace(torch.tensor([1, 61, 2, 99]), 7, 11)


def test_seeding_options_are_checked(llama, ids, no_work):
    with pytest.raises(ValueError, match="unknown seeding 'probability'.*'linear'.*'prob'"):
        TraceConfig(seeding="probability")
    with pytest.raises(ValueError, match="prob_tau"):
        TraceConfig(seeding="prob", prob_tau=0.0)
    with pytest.raises(ValueError, match="prob_ig_steps"):
        TraceConfig(seeding="prob", prob_ig_steps=0)
    assert TraceConfig().seeding == "linear"  # the paper's rule stays the default
    with pytest.raises(ValueError, match="seeding='prob'.*takes no counterfactual.*wrong=None"):
        Tracer(llama, config=TraceConfig(seeding="prob")).trace(ids, 7, 11)


# ---------------------------------------------------------------- why a circuit is empty or small

def test_a_traced_circuit_says_so(llama, ids, best_worst):
    c = Tracer(llama).trace(ids, *best_worst)
    assert c.status == "traced" and c.reason == "" and c.n_firings > 0 and c.logit_diff > 0


@pytest.mark.parametrize("variant", ["authors", "per-position"])
def test_negative_logit_difference(llama, ids, best_worst, variant):
    best, worst = best_worst
    c = Tracer(llama, config=TraceConfig(variant=variant)).trace(ids, worst, best)
    assert c.logit_diff < 0 and c.status == "negative_logit_diff"
    assert "does not prefer the answer" in c.reason and c.graph.number_of_nodes() == 1 and c.n_firings == 0


def _scaled(what: tuple[str, ...], by: float):
    """The tiny Llama with the named attention projections of every layer scaled by ``by``."""
    model = tiny_model("llama", seed=3)
    with torch.no_grad():
        for layer in model.model.layers:
            for name in what:
                getattr(layer.self_attn, name).weight.mul_(by)
    return model


@pytest.mark.parametrize("variant", ["authors", "per-position"])
def test_no_head_seed(exact, ids, variant):
    model = _scaled(("o_proj",), 1e-4)  # heads write next to nothing: no head reaches the seed cutoff
    with torch.no_grad():
        logits = model(ids[None]).logits[0, -1]
    c = Tracer(model, config=TraceConfig(variant=variant)).trace(ids, int(logits.argmax()), int(logits.argmin()))
    assert c.status == "no_head_seed" and c.logit_diff > 0 and c.meta["n_head_seeds"] == 0 < c.meta["n_seeds"]
    assert "none of the" in c.reason and "is an attention head" in c.reason and c.n_firings == 0
    kinds = {d["kind"] for _, d in c.graph.nodes(data=True)}
    # the authors' tracer builds nothing; per-position keeps the (non-head) seeds as leaves
    if variant == "authors":
        assert kinds == {"logits"}
    else:
        assert "head" not in kinds and len(kinds) > 1


def test_tau_cut(exact, ids):
    model = _scaled(("q_proj", "k_proj"), 0.0)  # every score 0: uniform attention 1/n < tau = 2.5/n
    with torch.no_grad():
        logits = model(ids[None]).logits[0, -1]
    c = Tracer(model).trace(ids, int(logits.argmax()), int(logits.argmin()))
    assert c.meta["n_head_seeds"] > 0 and c.n_firings == 0 and c.status == "tau_cut"
    assert c.reason.count("< tau 0.208") == c.meta["n_head_seeds"] - c.reason.count("layer 0")  # 2.5 / 12 visible
    assert "A_ds 0.083" in c.reason  # 1 / 12


def test_truncated(llama, ids, best_worst):
    c = Tracer(llama, config=TraceConfig(max_firings=0)).trace(ids, *best_worst)
    assert c.status == "truncated" and c.meta["truncated"]


def test_every_status_is_documented_and_summaries_label_empty_circuits(llama, ids, best_worst):
    from accpp import ioi

    best, worst = best_worst
    tracer = Tracer(llama)
    good, bad = tracer.trace(ids, best, worst), tracer.trace(ids, worst, best)
    for c in (good, bad):
        c.meta["pos"] = {"IO": 1, "S1": 2, "S2": 5, "S1+1": 3, "END": 11}
        assert c.status in STATUSES
    rows = [ioi.circuit_row(c) for c in (good, bad)]
    assert rows[0]["status"] == "traced" and 0 <= rows[0]["rank1"] <= 1 and rows[0]["roles"] is not None
    assert rows[1]["status"] == "negative_logit_diff" and rows[1]["rank1"] is None and rows[1]["roles"] is None
    assert ioi.status_counts([bad, good, bad]) == {"traced": 1, "negative_logit_diff": 2}
    # a circuit saved before statuses were recorded: "unknown", summarised by what it holds
    good.meta.pop("status")
    assert good.status == "unknown" and ioi.circuit_row(good)["roles"] == rows[0]["roles"]


# ---------------------------------------------------------------- "prob" seeding

@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
def test_prob_attributions_sum_to_the_completeness(family, exact, ids):
    """IG completeness: the components' attributions sum to J(clean) - J(bias only), to the
    trapezoid rule's error, which shrinks ~4x per doubling of the intervals."""
    from accpp.arch import from_model
    from accpp.decompose import Decomposition, collect

    model = tiny_model(family, seed=3)
    arch = from_model(model)
    dec = Decomposition(arch, collect(model, arch, ids))
    L, pos = arch.n_layers, dec.T - 1
    vecs, _ = dec.components(L, pos)
    answer = int(dec.acts.logits.argmax())
    gaps = []
    for steps in (16, 64, 256):
        ps = prob_seeds(arch, vecs, dec.acts.resid[L, pos], [answer], ig_steps=steps)
        gaps.append(abs(float(ps.attribution.sum()) - ps.completeness))
    logp = float(torch.log_softmax(dec.acts.logits, -1)[answer])
    assert ps.log_prob == pytest.approx(logp, abs=1e-9)  # the lens rebuilds the model's logits
    assert ps.completeness > 0 and gaps[2] < gaps[1] / 8 < gaps[0] / 64  # O(steps^-2)
    assert gaps[1] < 1e-2 * ps.completeness


def test_prob_seeds_remove_the_target_share(llama, ids, best_worst):
    best, _ = best_worst
    c = Tracer(llama, config=TraceConfig(seeding="prob")).trace(ids, best)
    m = c.meta
    assert c.status == "traced" and m["seeding"] == "prob" and m["wrong"] is None
    assert m["seed_target_reached"] and m["seed_drop"] >= 0.8 * m["completeness"] == pytest.approx(m["seed_target"])
    assert c.logit_diff == m["completeness"]
    seeds = [d for *_, d in c.graph.edges(data=True) if d["side"] == "seed"]
    assert len(seeds) == m["n_seeds"] and all(d["weight"] > 0 for d in seeds)
    # the fewest: dropping the last seed leaves the removal below the target
    half = Tracer(llama, config=TraceConfig(seeding="prob", prob_tau=0.5)).trace(ids, best)
    assert half.meta["n_seeds"] <= m["n_seeds"] and half.meta["seed_drop"] >= 0.5 * half.meta["completeness"]


def test_prob_token_set_support_and_nonpositive_completeness(llama, ids, best_worst):
    best, worst = best_worst
    tracer = Tracer(llama, config=TraceConfig(seeding="prob"))
    s = tracer.trace(ids, TokenSet([best, worst]))
    assert s.meta["correct"] == [best, worst] and sum(s.meta["support_weights"]) == pytest.approx(1.0, abs=1e-12)
    low = tracer.trace(ids, worst)  # the least likely token: no more likely than under the bias-only logits
    assert low.meta["completeness"] <= 0 and low.status == "nonpositive_completeness" and low.n_firings == 0
    assert "bias-only" in low.reason
