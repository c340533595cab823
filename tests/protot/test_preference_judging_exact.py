"""protot.preference, value by value, up to the judgements: the seeded prompt windows, the
continuations asked of a model (fake sampling), the items to judge, judging every ordered pair
(a recording judge), and the language-model judge (its template, labels and rendering; its log-odds
on a tiny random language model against a direct forward pass); every refusal word for word.
Outcomes, ratings and the measurement: test_preference_ratings_exact.py."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch

from protot import preference as P
from tests.protot.preference_standins import exactly


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
