"""Greater-Than: year tokenization, prompts, the exact year distribution, tracing targets, roles, ablation."""
from __future__ import annotations

import re

import networkx as nx
import pytest
import torch

from accpp import greater_than as gt
from accpp.testing import float64_exact, tiny_model
from accpp.trace import Circuit


class DigitTokenizer:
    """A small word-level tokenizer that writes numbers digit by digit, the way SmolLM2 and Gemma do
    (" 1732" -> " ", "1", "7", "3", "2"); ids stay below the tiny test models' vocabulary of 61."""

    PATTERN = re.compile(r" ?[A-Za-z]+| (?=\d)|\d")

    def __init__(self):
        self.vocab = {str(d): d for d in range(10)}
        self.inverse = dict(enumerate(map(str, range(10))))

    def _id(self, piece: str) -> int:
        if piece not in self.vocab:
            if len(self.vocab) >= 61:
                raise RuntimeError("test vocabulary full")
            self.vocab[piece] = len(self.vocab)
            self.inverse[self.vocab[piece]] = piece
        return self.vocab[piece]

    def __call__(self, text, add_special_tokens=True):
        pieces = self.PATTERN.findall(text)
        assert "".join(pieces) == text, (pieces, text)
        return {"input_ids": [self._id(p) for p in pieces]}

    def decode(self, ids):
        return "".join(self.inverse[int(i)] for i in ids)


class OddTokenizer(DigitTokenizer):
    """Writes " 1732" as " 173", "2": neither digits nor pairs."""

    def __call__(self, text, add_special_tokens=True):
        if text == " 1732":
            return {"input_ids": [self._id(" 173"), self._id("2")]}
        return super().__call__(text, add_special_tokens)


@pytest.fixture(scope="module")
def gpt2_tok():
    from transformers import PreTrainedTokenizerFast

    from compendium import paths

    return PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"))


NOUNS = ["war", "siege", "reign"]


def test_year_modes(gpt2_tok):
    assert gt.year_mode(DigitTokenizer()) == "digits"
    assert gt.year_mode(gpt2_tok) == "pairs"
    with pytest.raises(gt.YearTokenization, match="1732"):
        gt.year_mode(OddTokenizer())


@pytest.mark.parametrize("which", ["digits", "pairs"])
def test_prompt_positions_and_continuation(which, gpt2_tok):
    tok = DigitTokenizer() if which == "digits" else gpt2_tok
    p = gt.make_prompt(tok, "war", 17, 32)
    assert p.mode == which and p.text == "The war lasted from the year 1732 to the year 17"
    assert tok.decode([p.input_ids[i] for i in p.pos["yy"]]).strip() == ("32" if which == "pairs" else "32")
    assert p.pos["end"] == len(p.input_ids) - 1
    assert tok.decode(list(p.input_ids)).endswith("year 17")
    # the prompt followed by the end year's tokens is exactly the tokenization of the full text
    ids, correct, wrong = gt.trace_target(tok, p)
    if which == "digits":
        assert ids.tolist() == list(p.input_ids) + [tok("3")["input_ids"][0]]
        assert correct == [tok(str(d))["input_ids"][0] for d in range(3, 10)]
        assert wrong == [tok(str(d))["input_ids"][0] for d in range(0, 3)]
    else:
        assert ids.tolist() == list(p.input_ids)
        assert len(correct) == 67 and len(wrong) == 33 and not set(correct) & set(wrong)
        assert gpt2_tok.decode([correct[0]]) == "33" and gpt2_tok.decode([wrong[-1]]) == "32"


def test_prompt_sets_are_seeded_and_traceable():
    tok = DigitTokenizer()
    a = gt.gt_prompts(tok, n=40, seed=3, nouns=NOUNS)
    assert [p.text for p in a] == [p.text for p in gt.gt_prompts(tok, n=40, seed=3, nouns=NOUNS)]
    assert [p.text for p in a] != [p.text for p in gt.gt_prompts(tok, n=40, seed=4, nouns=NOUNS)]
    assert all(2 <= p.yy <= 98 and p.yy % 10 != 9 and p.century in gt.CENTURIES for p in a)
    with pytest.raises(ValueError, match="units"):
        gt.trace_target(tok, gt.make_prompt(tok, "war", 17, 39))
    with pytest.raises(ValueError, match="two-digit"):
        gt.make_prompt(tok, "war", 17, 123)


def test_prob_diff_by_hand():
    dist = torch.zeros(3, 100, dtype=torch.float64)
    dist[0, 41] = 1.0  # just above 40
    dist[1, 40] = 1.0  # equal counts as not greater
    dist[2] = 0.01  # uniform: 59 above, 41 at or below
    assert gt.prob_diff(dist, [40, 40, 40]).tolist() == pytest.approx([1.0, -1.0, 0.18])


class LastTokenModel(torch.nn.Module):
    """Logits depend on the last token only: logits[t] = table[input[t]] (a known answer)."""

    def __init__(self, vocab=61, seed=0):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)))

    def forward(self, ids, output_attentions=False, **kwargs):
        return {"logits": self.table[ids]}  # no cache: the batched path


def test_year_distribution_is_the_exact_two_step_product():
    tok, model = DigitTokenizer(), LastTokenModel()
    p = gt.make_prompt(tok, "war", 17, 32)
    dist = gt.year_distribution(model, tok, [p])[0]
    digits = torch.tensor(gt.digit_ids(tok))
    p_tens = torch.softmax(model.table[p.input_ids[-1]].double(), -1)[digits]
    for a in range(10):
        p_units = torch.softmax(model.table[digits[a]].double(), -1)[digits]
        assert torch.allclose(dist[10 * a:10 * a + 10], p_tens[a] * p_units, atol=1e-12)
    assert 0 < float(dist.sum()) <= 1


def test_year_distribution_pairs(gpt2_tok):
    p = gt.make_prompt(gpt2_tok, "war", 17, 32)
    vocab = max(max(p.input_ids), max(gt.pair_ids(gpt2_tok))) + 1

    class Fixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids, **kwargs):
            logits = torch.full((1, ids.shape[1], vocab), -1e9)
            logits[0, -1, gt.pair_ids(gpt2_tok)[45]] = 0.0
            return {"logits": logits}

    dist = gt.year_distribution(Fixed(), gpt2_tok, [p])
    assert float(dist[0, 45]) == pytest.approx(1.0) and float(gt.prob_diff(dist, [32])[0]) == pytest.approx(1.0)


def _graph():
    g = nx.MultiDiGraph()
    g.add_node("LOGITS@20", kind="logits", layer=4, head=-1, dest=20, src=-1)
    for nid, kind, layer, head, dest, src in [("A2.1@20<10", "head", 2, 1, 20, 10), ("A3.0@20<5", "head", 3, 0, 20, 5),
                                               ("A1.3@10<9", "head", 1, 3, 10, 9), ("M3@20", "mlp", 3, -1, 20, -1),
                                               ("M1@20", "mlp", 1, -1, 20, -1)]:
        g.add_node(nid, kind=kind, layer=layer, head=head, dest=dest, src=src)
    for u, a in [("A2.1@20<10", 1.0), ("M3@20", 6.0), ("M1@20", 2.0), ("A3.0@20<5", -1.0)]:
        g.add_edge(u, "LOGITS@20", side="seed", attribution=a)
    return g


def test_year_heads_and_seed_shares():
    g = _graph()
    pos = {"yy": [9, 10], "end": 20}
    assert gt.year_heads(g, pos) == ["A2.1"]  # A1.3 fires at 10, not at the answer; A3.0 reads token 5
    shares = gt.seed_shares(Circuit(g, [], 0.0, 0.0, 0), late_from=3)
    assert shares["mlp_share"] == pytest.approx(8 / 9) and shares["head_share"] == pytest.approx(1 / 9)
    assert shares["late_mlp_of_mlp"] == pytest.approx(6 / 8) and shares["mlp_layers"] == [1, 3]


def test_ablation_hook_zeroes_one_head_at_the_answer_position_only():
    from accpp.trace import Tracer

    tok = DigitTokenizer()
    prompts = [gt.make_prompt(tok, n, 17, 32) for n in NOUNS]
    with float64_exact():
        model = tiny_model("llama", seed=2)
        tracer = Tracer(model, tok)
        L, dh = tracer.arch.n_layers, tracer.arch.d_head
        base = gt.units_prob_diff(model, tok, prompts)
        assert torch.equal(gt.units_prob_diff_ablated(tracer, prompts, []), base)
        # a head of the last layer: nothing later reads other positions, so zeroing its output
        # projection columns everywhere gives the same answer-position logits as the hook
        got = gt.units_prob_diff_ablated(tracer, prompts, [(L - 1, 1)])
        o = model.model.layers[L - 1].self_attn.o_proj
        saved = o.weight.detach().clone()
        with torch.no_grad():
            o.weight[:, dh:2 * dh] = 0
        want = gt.units_prob_diff(model, tok, prompts)
        with torch.no_grad():
            o.weight.copy_(saved)
        assert torch.allclose(got, want, atol=1e-12) and not torch.allclose(got, base)
        assert torch.equal(gt.units_prob_diff(model, tok, prompts), base)  # hooks removed


def test_ablation_touches_only_the_last_position():
    from accpp.trace import Tracer

    tok = DigitTokenizer()
    ids = gt.make_prompt(tok, "war", 17, 32).ids()[None]
    with float64_exact():
        model = tiny_model("llama", seed=2)
        tracer = Tracer(model, tok)
        with torch.no_grad():
            base = model(ids).logits
            with gt.heads_ablated_at_last_position(tracer, [(0, 0), (1, 2)]):
                got = model(ids).logits
        assert torch.equal(got[:, :-1], base[:, :-1])  # causal: earlier positions untouched
        assert not torch.allclose(got[:, -1], base[:, -1])
        with pytest.raises(ValueError, match="heads per layer"):
            with gt.heads_ablated_at_last_position(tracer, [(0, 99)]):
                pass


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_cached_year_distribution_equals_full_continuations(family):
    tok = DigitTokenizer()
    prompts = [gt.make_prompt(tok, n, 17, 32) for n in NOUNS]
    with float64_exact():
        model = tiny_model(family, seed=1)
        cached = gt.year_distribution(model, tok, prompts, use_cache=True)
        full = gt.year_distribution(model, tok, prompts, use_cache=False)
    assert torch.allclose(cached, full, atol=1e-12, rtol=0) and float(cached.sum(1).min()) > 0


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_batched_knockouts_equal_one_at_a_time(family):
    from accpp.trace import Tracer

    tok = DigitTokenizer()
    prompts = [gt.make_prompt(tok, n, 13, 45) for n in NOUNS]
    sets = [[], [(0, 1)], [(1, 0), (1, 3), (0, 2)], [(1, 2)]]
    with float64_exact():
        model = tiny_model(family, seed=4)
        tracer = Tracer(model, tok)
        batched = gt.units_prob_diff_knockouts(tracer, prompts, sets)
        single = torch.stack([gt.units_prob_diff_ablated(tracer, prompts, heads) for heads in sets])
        assert torch.equal(single[0], gt.units_prob_diff(model, tok, prompts))
    assert torch.allclose(batched, single, atol=1e-12, rtol=0)
    assert not torch.allclose(single[1], single[0]) and not torch.allclose(single[2], single[0])


def test_split_half_and_top_heads():
    items = list(range(11))
    a, b = gt.split_half(items, seed=3)
    assert len(a) == 5 and len(b) == 6 and sorted(a + b) == items
    assert gt.split_half(items, seed=3) == (a, b) and gt.split_half(items, seed=4) != (a, b)
    with pytest.raises(ValueError, match="at least 2"):
        gt.split_half([1], 0)
    score = torch.tensor([[0.1, 0.5, 0.2], [0.5, -1.0, 0.3]])
    assert gt.top_heads(score, 3) == [(0, 1), (1, 0), (1, 2)]
    assert gt.top_heads(score, 2, exclude=[(0, 1)]) == [(1, 0), (1, 2)]
    assert gt.parse_head("A12.3") == (12, 3)
    with pytest.raises(ValueError, match="not a head label"):
        gt.parse_head("M3")


def test_head_dla_by_hand():
    """A head's direct logit attribution equals its o_proj slice output at the last position, divided
    by the final RMSNorm's scale there, times the gain, dotted with the metric's unembedding direction."""
    from accpp.trace import Tracer

    tok = DigitTokenizer()
    p = gt.make_prompt(tok, "war", 17, 32)
    with float64_exact():
        model = tiny_model("llama", seed=2)
        tracer = Tracer(model, tok)
        dla = gt.head_dla(tracer, [p])
        ids, correct, wrong = gt.trace_target(tok, p)
        seen = {}
        hooks = [layer.self_attn.o_proj.register_forward_pre_hook(
            lambda m, a, i=i: seen.__setitem__(i, a[0][0, -1].clone())) for i, layer in enumerate(model.model.layers)]
        hooks.append(model.model.norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0][0, -1])))
        with torch.no_grad():
            model(ids[None])
        for h in hooks:
            h.remove()
    cfg = model.config
    dh = cfg.hidden_size // cfg.num_attention_heads
    x = seen["x"]
    rms = torch.sqrt(x.pow(2).mean() + model.model.norm.variance_epsilon)
    W_U = model.lm_head.weight.detach()
    u = model.model.norm.weight.detach() * (W_U[correct].mean(0) - W_U[wrong].mean(0))
    for layer in range(cfg.num_hidden_layers):
        Wo = model.model.layers[layer].self_attn.o_proj.weight.detach()
        for h in range(cfg.num_attention_heads):
            out = seen[layer][h * dh:(h + 1) * dh] @ Wo[:, h * dh:(h + 1) * dh].T
            assert float(dla[layer, h]) == pytest.approx(float(out @ u / rms), abs=1e-10)


def test_knockout_comparison_counts_random_sets():
    from accpp.trace import Tracer

    tok = DigitTokenizer()
    prompts = [gt.make_prompt(tok, n, 13, 45) for n in NOUNS]
    with float64_exact():
        tracer = Tracer(tiny_model("llama", seed=4), tok)
        named = {"traced": [(0, 1), (1, 2)], "attention": [(1, 0), (0, 3)], "none": []}
        out = gt.knockout_comparison(tracer, prompts, named, n_random=9, seed=0)
        again = gt.knockout_comparison(tracer, prompts, named, n_random=9, seed=0)
        base = gt.units_prob_diff(tracer.model, tok, prompts)
        ko = gt.units_prob_diff_ablated(tracer, prompts, named["traced"])
    assert out == again
    assert out["base"] == pytest.approx(float(base.mean()), abs=1e-12)
    m = out["methods"]["traced"]
    assert m["k"] == 2 and m["drop"] == pytest.approx(float((base - ko).mean()), abs=1e-12)
    assert len(m["random_drops"]) == 9
    assert m["n_extreme"] == sum(r >= m["drop"] for r in m["random_drops"])
    assert m["p"] == (1 + m["n_extreme"]) / 10
    assert out["methods"]["none"] == dict(k=0, drop=0.0, p=1.0, n_extreme=0, random_drops=[])


def test_template_families_build_with_the_noun_anywhere():
    from accpp import families

    tok = DigitTokenizer()
    paper = gt.gt_prompts(tok, n=6, seed=3, nouns=["war"])
    assert [p.text for p in families.gt_family_set(tok, "paper", n=6, seed=3, nouns=["war"])] == [p.text for p in paper]
    for family in families.GT_FAMILIES:
        prompts = families.gt_family_set(tok, family, n=20, seed=1, nouns=["war"])
        assert {p.family for p in prompts} == {family}
        wordings = {p.text.split(" 1")[0] for p in prompts}  # the text before the start year
        assert len(wordings) == (1 if family == "paper" else 5)
        for p in prompts:
            ids = p.input_ids
            yy_text = tok.decode(ids[p.pos["yy"][0]:p.pos["yy"][1] + 1])
            assert p.text.endswith(f" {p.century}") and yy_text == f"{p.yy:02d}"
    initial = gt.make_prompt(tok, "war", 17, 32, template=families.GT_FAMILIES["initial"][0], family="initial")
    assert initial.text == "War lasted from the year 1732 to the year 17"


def test_answer_in_prompt_says_whether_a_correct_token_is_in_the_traced_input():
    tok = DigitTokenizer()
    # digits: traced input "... 1732 to the year 17" + "3"; correct units digits 3..9 -> "3" and "7" occur
    p = gt.make_prompt(tok, "war", 17, 32)
    assert p.mode == "digits" and p.answer_in_prompt is True
    _, correct, _ = gt.trace_target(tok, p)
    assert set(correct) & set(gt.trace_target(tok, p)[0].tolist())
    # start year 1108 in century 11: traced "... 1108 to the year 11" + "0"; correct digits 9 only -> absent
    q = gt.make_prompt(tok, "war", 11, 8)
    _, correct, _ = gt.trace_target(tok, q)
    assert correct == [gt.digit_ids(tok)[9]] and q.answer_in_prompt is False


@pytest.mark.parametrize("noun, template, match", [
    ("", None, "noun '' is empty"),
    ("w{a}r", None, "placeholder"),
    ("war", "The {noun} lasted from {XX}{YY}", r"must hold \{noun\} and \{XX\}\{YY\} once and end with ' \{XX\}'"),
])
def test_greater_than_builder_refusals(noun, template, match):
    with pytest.raises(ValueError, match=match):
        gt.make_prompt(DigitTokenizer(), noun, 17, 32, template=template)


@pytest.mark.parametrize("seeding", ["linear", "prob"])
def test_trace_gt_traces_the_digit_sets_as_token_sets(seeding):
    """Greater-Than asks for token sets explicitly: linear, the later units digits against the others;
    prob, the later units digits as the support (no counterfactual)."""
    from accpp.trace import TraceConfig, Tracer

    tok = DigitTokenizer()
    p = gt.make_prompt(tok, "war", 17, 32)
    with float64_exact():
        tracer = Tracer(tiny_model("llama", seed=2), tok, config=TraceConfig(seeding=seeding))
        c = gt.trace_gt(tracer, p)
    _, correct, wrong = gt.trace_target(tok, p)
    assert c.meta["correct"] == correct == [tok.vocab[str(d)] for d in range(3, 10)]
    assert c.meta["wrong"] == (wrong if seeding == "linear" else None) and c.meta["seeding"] == seeding
    assert c.status in ("traced", "negative_logit_diff", "nonpositive_completeness", "no_head_seed", "tau_cut")


def test_mean_by_offset_averages_only_the_prompts_that_reach_each_offset():
    import warnings

    g = torch.Generator().manual_seed(3)
    dist = torch.rand(5, 100, generator=g, dtype=torch.float64)
    dist /= dist.sum(1, keepdim=True)
    yy = torch.tensor([2, 40, 40, 71, 98])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Mean of empty slice" or any other warning
        offsets, means, counts = gt.mean_by_offset(dist, yy)
    assert offsets.tolist() == list(range(-99, 100)) and means.shape == counts.shape == (199,)
    for k, o in enumerate(offsets.tolist()):
        reach = [i for i in range(len(yy)) if 0 <= int(yy[i]) + o < 100]
        assert int(counts[k]) == len(reach)
        if reach:
            expected = sum(float(dist[i, int(yy[i]) + o]) for i in reach) / len(reach)
            assert float(means[k]) == pytest.approx(expected, rel=1e-12, abs=0)
        else:
            assert torch.isnan(means[k]), f"offset {o}: no prompt reaches it, the mean is NaN"
    # the extremes: only YY = 98 reaches -98, no prompt reaches -99 (it needs YY = 99) nor +98 (needs YY <= 1)
    assert int(counts[offsets.tolist().index(-98)]) == 1
    assert int(counts[0]) == 0 and int(counts[offsets.tolist().index(98)]) == 0


def test_mean_by_offset_refuses_misshapen_input():
    with pytest.raises(ValueError, match=r"dist must be \(n, 100\) and yy \(n,\)"):
        gt.mean_by_offset(torch.zeros(3, 99), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="start years YY are 0..99"):
        gt.mean_by_offset(torch.zeros(2, 100), torch.tensor([5, 100]))
