"""protot.robustness: the edit generators (local, seeded, None when inapplicable, last word kept),
the divergences (hand-computed values, bounds, symmetry), pairs, statistics, and score_pairs on
tiny random ProtoT / LLaMA models (identical pairs give 0; batching does not change the result;
restoring the routing restores the final read gates)."""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

from protot import robustness as rb
from protot.models import build_model
from protot.train import tokenizer as tk

# A text with sites for every edit type (before its last word).
RICH = ('For example, the United States and the U.K. organize their color programs in the center of town. '
        'However the students often begin early, "very early" in fact, and they bought 10 percent more. '
        'Dr. Smith said the children were happy; the results were important, large and rapid overall')
PLAIN = "the cat sat on a mat in the sun and ate its own fish that day"   # no abbreviation / spelling / synonym site


def _diff_span(a: str, b: str) -> tuple[int, int, int]:
    """(common prefix length, length of a's changed middle, length of b's changed middle)."""
    p = len(os.path.commonprefix([a, b]))
    s = len(os.path.commonprefix([a[p:][::-1], b[p:][::-1]]))
    return p, len(a) - p - s, len(b) - p - s


# -- edit generators ----------------------------------------------------------------------------------
@pytest.mark.parametrize("edit_type", rb.ALL_TYPES)
def test_each_type_changes_the_text_locally(edit_type):
    gen = rb.generator(edit_type)
    max_words = {"typos": 0, "synonym": 1, "random-word": 0, "spelling": 1, "abbreviation": 2, "punctuation": 0}[edit_type]
    for seed in range(25):
        new = gen(RICH, np.random.default_rng(seed))
        assert new is not None and new != RICH, f"{edit_type} did not edit (seed {seed})"
        _, da, db = _diff_span(RICH, new)
        assert max(da, db) <= 40, f"{edit_type}: the edit is not local ({da}, {db} chars changed): {new!r}"
        assert abs(len(new.split()) - len(RICH.split())) <= max_words, f"{edit_type}: word count changed: {new!r}"
        assert new.split()[-1] == RICH.split()[-1], f"{edit_type} touched the last word"


def test_edit_records_what_it_replaced():
    for t in rb.ALL_TYPES:
        e = rb.apply_edit(RICH, t, 3)
        assert e.edit_type == t and RICH[e.start:e.end] == e.before
        assert e.text == RICH[:e.start] + e.after + RICH[e.end:]
        assert e.end <= rb.protected_start(RICH)


def test_seeded_determinism_and_variety():
    for t in rb.ALL_TYPES:
        a = [rb.apply_edit(RICH, t, np.random.default_rng(s)).text for s in range(12)]
        b = [rb.apply_edit(RICH, t, np.random.default_rng(s)).text for s in range(12)]
        assert a == b, f"{t} is not deterministic for a seed"
        assert len(set(a)) >= 3, f"{t}: 12 seeds gave only {len(set(a))} distinct edits"
    assert rb.typos(RICH, 7) == rb.typos(RICH, np.random.default_rng(7))   # an int seed is a Generator seed


@pytest.mark.parametrize("edit_type", ["abbreviation", "spelling", "synonym"])
def test_none_when_inapplicable(edit_type):
    assert rb.generator(edit_type)(PLAIN, np.random.default_rng(0)) is None


def test_none_for_punctuation_and_typos_without_sites():
    assert rb.punctuation("the cat sat on a mat in the sun", np.random.default_rng(0)) is None
    assert rb.typos("a cat sat on the mat", np.random.default_rng(0)) is None     # no word of 4+ letters
    assert rb.random_word("a cat sat on the mat", np.random.default_rng(0)) is None


def test_the_last_word_is_protected():
    for seed in range(10):
        assert rb.spelling("the sky has a nice color", seed) is None          # the only site is the last word
        assert rb.typos("a cat sat on the wall", seed) is None
        assert rb.synonym("we saw it often", seed) is None


def test_specific_rules():
    s = "The color of the sky is blue today"
    assert rb.spelling(s, 0) == "The colour of the sky is blue today"
    assert rb.spelling("They organize the data well", 0) == "They organise the data well"
    assert rb.spelling("They organised the data well", 0) == "They organized the data well"
    assert rb.spelling("The size of the prize is big", 0) is None               # not -ize words
    assert rb.abbreviation("The United States is large and old", 0) == "The U.S. is large and old"
    assert rb.abbreviation("He lives in the United States. He is old", 0) == "He lives in the U.S. He is old"
    assert rb.abbreviation("It rose 10 percent last year", 0) == "It rose 10% last year"
    assert rb.synonym("Often the results are clear", 0) == "Frequently the results are clear"   # case kept
    assert rb.punctuation("He left; she stayed home", 0) == "He left. She stayed home"


def test_typos_keep_the_first_letter_and_change_one_word_by_one_letter():
    text = "Wonderful mountains surround the little village today"
    for seed in range(40):
        e = rb.apply_edit(text, "typos", seed)
        assert e.before[0] == e.after[0] and e.before != e.after
        assert abs(len(e.after) - len(e.before)) <= 1 and sorted(e.after) != [] and e.rule.startswith("typo: ")
        if e.rule == "typo: swap":
            assert sorted(e.after) == sorted(e.before)


def test_bad_edit_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown edit type 'typo'.*abbreviation"):
        rb.generator("typo")
    with pytest.raises(ValueError, match="unknown edit type"):
        rb.apply_edit(RICH, "Synonym", 0)
    with pytest.raises(ValueError, match="unknown edit type"):
        rb.make_pairs([RICH], 1, types=["spellings"])


# -- contexts and pairs -------------------------------------------------------------------------------
def test_contexts_and_pairs():
    docs = [RICH + "\n" + RICH.replace("Dr. Smith", "Mr. Jones"), "short\n" + PLAIN * 20]
    ctx = rb.make_contexts(docs, min_chars=100, max_chars=250, seed=1)
    assert ctx and all(100 <= len(c) <= 250 for c in ctx)
    for c in ctx:
        full = next(d for d in docs if c in d)
        i = full.index(c) + len(c)
        assert full[i] == " " and full[i + 1].isalnum(), "a context ends just before a word"
    pairs = rb.make_pairs(ctx, 5, types=rb.ALL_TYPES, seed=0)
    assert (pairs.groupby("edit_type").context_id.nunique() == pairs.groupby("edit_type").size()).all()
    assert (pairs.original != pairs.edited).all()
    assert all(o.split()[-1] == e.split()[-1] for o, e in zip(pairs.original, pairs.edited))
    pd.testing.assert_frame_equal(pairs, rb.make_pairs(ctx, 5, types=rb.ALL_TYPES, seed=0))
    only = rb.make_pairs(ctx, 5, types=["typos"], seed=0)        # one type's draw does not depend on the others
    pd.testing.assert_frame_equal(only.reset_index(drop=True),
                                  pairs[pairs.edit_type == "typos"].reset_index(drop=True))


# -- divergences --------------------------------------------------------------------------------------
def test_jsd_hand_computed_and_bounds():
    p, q = [0.5, 0.5], [1.0, 0.0]
    want = 0.5 * (0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)) + 0.5 * math.log2(1 / 0.75)
    assert abs(want - 0.3112781) < 1e-6
    assert rb.jsd(p, q).item() == pytest.approx(want, abs=1e-12)
    assert rb.jsd(p, q, base=math.e).item() == pytest.approx(want * math.log(2), abs=1e-12)
    assert rb.jsd([1, 0], [0, 1]).item() == pytest.approx(1.0)                 # disjoint: 1 bit
    assert rb.jsd([1, 0], [0, 1], base=math.e).item() == pytest.approx(math.log(2))
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(50, 30, generator=g), torch.rand(50, 30, generator=g)
    d = rb.jsd(a, b)
    assert torch.allclose(d, rb.jsd(b, a)) and (d >= 0).all() and (d <= 1).all()
    assert torch.allclose(rb.jsd(a, a), torch.zeros(50, dtype=torch.float64), atol=1e-15)
    la, lb = torch.randn(4, 100, generator=g) * 3, torch.randn(4, 100, generator=g) * 3
    assert torch.allclose(rb.jsd_from_logits(la, lb), rb.jsd(la.softmax(-1), lb.softmax(-1)), atol=1e-10)
    assert torch.allclose(rb.jsd_from_logits(la, la + 5.0), torch.zeros(4, dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError, match="non-negative"):
        rb.jsd([0.5, -0.5], [0.5, 0.5])


def test_total_variation():
    assert rb.total_variation([0.5, 0.5, 0.0], [0.2, 0.3, 0.5]).item() == pytest.approx(0.5)
    assert rb.total_variation([1, 0], [0, 1]).item() == pytest.approx(1.0)


def test_statistics():
    x = np.arange(100.0)
    lo, hi = rb.bootstrap_ci(x, seed=0)
    assert lo < x.mean() < hi and hi - lo < 20
    lo, hi = rb.paired_bootstrap_ci(x + 1.0, x)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        rb.paired_bootstrap_ci(x, x[:5])
    assert rb.spearman(x, x ** 3) == pytest.approx(1.0) and rb.spearman(x, -x) == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    z = rng.normal(size=400)
    a, b = z + 0.1 * rng.normal(size=400), z + 0.1 * rng.normal(size=400)
    assert rb.spearman(a, b) > 0.9 and abs(rb.partial_spearman(a, b, z)) < 0.2   # all through z


# -- scoring tiny random models -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return tk.load_hf_tokenizer()


@pytest.fixture(scope="module")
def small_pairs():
    ctx = [RICH[:150].rsplit(" ", 1)[0], RICH[60:230].rsplit(" ", 1)[0], RICH[100:].rsplit(" ", 1)[0]]
    pairs = rb.make_pairs(ctx, 2, types=["typos", "punctuation", "synonym"], seed=0)
    same = pairs.head(2).assign(edited=lambda d: d.original)               # identical pairs
    return pd.concat([pairs, same], ignore_index=True)


V1 = {"variant": "compendium-v1"}   # the variant of the committed models the robustness tools read


@pytest.mark.parametrize("arch,overrides", [("protot", V1), ("protot", {**V1, "shared_keys": True}), ("llama", {})],
                         ids=["protot", "protot-shared-keys", "llama"])
def test_score_pairs(arch, overrides, tokenizer, small_pairs):
    torch.manual_seed(0)
    model = build_model(arch, "tiny", len(tokenizer), **overrides).eval()
    kw = dict(bos=tk.eos_id(), progress=False, restore_routing=arch == "protot")
    a = rb.score_pairs(model, tokenizer, small_pairs, batch_size=8, **kw)
    b = rb.score_pairs(model, tokenizer, small_pairs, batch_size=1, chunk=3, **kw)
    pd.testing.assert_frame_equal(a, b, atol=1e-6, rtol=1e-4)           # batching / chunking do not matter
    same = small_pairs.original == small_pairs.edited
    assert np.isfinite(a.jsd).all() and (a.jsd >= 0).all() and (a.jsd <= 1).all()
    assert (a.jsd[same] < 1e-9).all() and (a.jsd_after_edit[same] < 1e-9).all()
    assert (a.jsd[~same] > 0).all() and (a.tokens_after[~same] >= 1).all()
    assert (a.tokens_after[same] == a.tokens_orig[same]).all()
    if arch == "protot":
        # identical texts may sit in differently composed batches: float32 gates agree to rounding
        assert (a.route_tv[same] < 1e-6).all() and (a.route_tv[~same] > 1e-5).all()
        L = model.config.num_hidden_layers
        assert [c for c in a if c.startswith("route_tv_L")] == [f"route_tv_L{l}" for l in range(L)]
        assert np.allclose(a[[f"route_tv_L{l}" for l in range(L)]].mean(axis=1), a.route_tv)
        assert (a.jsd_restored[same] < 1e-9).all() and np.isfinite(a.jsd_restored).all()
    else:
        assert "route_tv" not in a
        with pytest.raises(ValueError, match="ProtoT"):
            rb.score_pairs(model, tokenizer, small_pairs, restore_routing=True, progress=False)


@pytest.mark.parametrize("shared_keys", [False, True])
def test_read_override_changes_only_the_read_gate(tokenizer, shared_keys):
    """Restoring routing overrides the final position's read gate from a given projection: with the
    token's own projection nothing changes; with another one the read gate follows it while the
    write gate (shared keys: the same projection) keeps the token's own."""
    torch.manual_seed(2)
    model = build_model("protot", "tiny", len(tokenizer), shared_keys=shared_keys, **V1).eval()
    seqs = [list(range(5, 17)), list(range(40, 52))]
    run = lambda **kw: rb._final(model, seqs, 8, "cpu", True, progress=False, **kw)
    with torch.no_grad():
        own = run()
        same = run(read_override=own["proj"])
        swapped = run(read_override=own["proj"].flip(0))
    assert torch.allclose(same["logits"], own["logits"], atol=1e-6)
    assert torch.allclose(swapped["read"], own["read"].flip(0), atol=1e-6)    # read gates follow the override
    assert not torch.allclose(swapped["logits"], own["logits"], atol=1e-4)


def test_after_edit_position_matches_a_direct_forward(tokenizer, small_pairs):
    """jsd_after_edit compares the predictions whose next token is the first token after the edit."""
    torch.manual_seed(1)
    model = build_model("protot", "tiny", len(tokenizer), **V1).eval()
    row = small_pairs.iloc[0]
    got = rb.score_pairs(model, tokenizer, small_pairs.iloc[:1], bos=None, progress=False).iloc[0]
    o, e = rb.encode(tokenizer, [row.original, row.edited], None)
    n = int(got.tokens_after)
    assert 1 <= n < min(len(o), len(e))
    assert o[len(o) - n:] == e[len(e) - n:] and o[len(o) - n - 1] != e[len(e) - n - 1]   # the longest common suffix
    with torch.no_grad():
        lo = model(torch.tensor([o[:len(o) - n]])).logits[0, -1]
        le = model(torch.tensor([e[:len(e) - n]])).logits[0, -1]
    assert rb.jsd_from_logits(lo, le).item() == pytest.approx(got.jsd_after_edit, abs=1e-6)


# -- the claim's measurement ------------------------------------------------------------------------------
def _synthetic_scores(edit_mean: float, control_mean: float, llama_shift: float, n: int = 60, seed: int = 0):
    """Pairs of every type and JSDs drawn around the given means (ProtoT; LLaMA = ProtoT + shift + noise)."""
    rng = np.random.default_rng(seed)
    types = np.repeat(rb.ALL_TYPES, n)
    pairs = pd.DataFrame({"edit_type": types}, index=pd.RangeIndex(10, 10 + len(types)))
    mean = np.where(types == rb.CONTROL, control_mean, edit_mean)
    p = mean * rng.lognormal(0.0, 0.3, len(types))
    protot = pd.DataFrame({"jsd": p, "route_tv": p * rng.lognormal(0.0, 0.2, len(types))}, index=pairs.index)
    llama = pd.DataFrame({"jsd": p + llama_shift + 0.001 * rng.random(len(types))}, index=pairs.index)
    return pairs, protot, llama


def test_control_separation():
    s = pd.DataFrame({"ci_lo": [0.1, 0.2, 0.5], "ci_hi": [0.3, 0.4, 0.7]}, index=["typos", "synonym", rb.CONTROL])
    assert rb.control_separation(s) == (True, pytest.approx(0.1))
    s.loc[rb.CONTROL, "ci_lo"] = 0.35
    sep, gap = rb.control_separation(s)
    assert not sep and gap == pytest.approx(-0.05)
    with pytest.raises(ValueError, match="control"):
        rb.control_separation(s.drop(index=rb.CONTROL))


def test_spearman_test():
    x = np.arange(50.0)
    rho, p, n = rb.spearman_test(x, x ** 2)
    assert rho == pytest.approx(1.0) and p < 1e-10 and n == 50
    rho, p, _ = rb.spearman_test(x, np.random.default_rng(0).permutation(x))
    assert abs(rho) < 0.35 and p > 0.01
    with pytest.raises(ValueError, match="same length"):
        rb.spearman_test(x, x[:10])


def test_measure_robustness_verdicts():
    from compendium import claims

    claim = claims.get_claim("protot/robustness-jsd")
    # robust ProtoT, JSD a tenth of the control's, below LLaMA's, a model that uses context
    pairs, protot, llama = _synthetic_scores(0.01, 0.1, llama_shift=0.005)
    m = rb.measure_robustness(pairs, protot, llama, replaced_prefix_cost=0.3, n_boot=500)
    v = m.values
    assert v["control_separable"] is True and v["control_separable_protot"] is True
    assert v["max_ratio_to_control"] == pytest.approx(
        max(protot.jsd[pairs.edit_type == t].mean() for t in rb.EDIT_TYPES) / protot.jsd[pairs.edit_type == rb.CONTROL].mean())
    assert v["excess_over_llama_ci_low"] < 0
    assert m.evidence["routing_spearman_n"] == 5 * 60 and m.evidence["routing_spearman_rho"] > 0.5
    assert set(m.tables) == {"robustness_jsd", "robustness_vs_llama"}
    assert claims.evaluate(claim, v, "cpu")[0] == claims.HOLDS
    # ProtoT moves more than LLaMA: does not hold
    pairs, protot, llama = _synthetic_scores(0.01, 0.1, llama_shift=-0.004)
    v = rb.measure_robustness(pairs, protot, llama, replaced_prefix_cost=0.3, n_boot=500).values
    assert v["excess_over_llama_ci_low"] > 0 and claims.evaluate(claim, v, "cpu")[0] == claims.DOES_NOT_HOLD
    # the control is not separable from the edits (a model that ignores the edit's meaning): inconclusive
    pairs, protot, llama = _synthetic_scores(0.01, 0.0105, llama_shift=0.0)
    v = rb.measure_robustness(pairs, protot, llama, replaced_prefix_cost=0.3, n_boot=500).values
    status, _, _, reason = claims.evaluate(claim, v, "cpu")
    assert v["control_separable"] is False and status == claims.INCONCLUSIVE and "control-separable" in reason
    # a model that barely uses context: inconclusive, naming uses-context
    pairs, protot, llama = _synthetic_scores(0.01, 0.1, llama_shift=0.005)
    v = rb.measure_robustness(pairs, protot, llama, replaced_prefix_cost=0.05, n_boot=500).values
    status, _, _, reason = claims.evaluate(claim, v, "cpu")
    assert status == claims.INCONCLUSIVE and "uses-context" in reason and "control-separable" not in reason
    with pytest.raises(ValueError, match="route_tv"):
        rb.measure_robustness(pairs, llama, llama, replaced_prefix_cost=0.3)
    with pytest.raises(ValueError, match="index"):
        rb.measure_robustness(pairs, protot.iloc[1:], llama, replaced_prefix_cost=0.3)
