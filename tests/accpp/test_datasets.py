"""IOI prompt generation and metrics (GPT-2 tokenizer from data/, no model needed)."""
from __future__ import annotations

import pytest
import torch

from accpp.datasets import (MultiTokenName, evaluate, ioi_balanced, ioi_mixed, make_prompt, name_token,
                            single_token_names)


@pytest.fixture(scope="module")
def tok():
    from transformers import PreTrainedTokenizerFast

    from compendium import paths

    return PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"))


def test_mixed_set(tok):
    prompts = ioi_mixed(tok, n=256, seed=0)
    assert len(prompts) == 256
    assert {p.order for p in prompts} == {"ABBA", "BABA"}
    assert ioi_mixed(tok, n=5, seed=0)[0] == prompts[0]  # deterministic given the seed
    for p in prompts[:50]:
        ids = p.input_ids
        assert ids[p.pos["IO"]] == p.io_id and ids[p.pos["S1"]] == p.s_id == ids[p.pos["S2"]]
        assert p.pos["S1"] < p.pos["S2"] < p.pos["END"] == len(ids) - 1
        assert (p.pos["IO"] < p.pos["S1"]) == (p.order == "ABBA")
        assert p.io != p.s and not p.text.endswith(" ")


def test_balanced_set(tok):
    prompts = ioi_balanced(tok, per_order=2)
    assert len(prompts) == 15 * 4
    for t in range(15):
        orders = [p.order for p in prompts if p.template == t]
        assert orders.count("ABBA") == orders.count("BABA") == 2


def test_abba_baba_text(tok):
    baba = make_prompt(tok, 0, "BABA", "Mary", "John", "store", "drink")
    abba = make_prompt(tok, 0, "ABBA", "Mary", "John", "store", "drink")
    assert baba.text == "Then, John and Mary went to the store. John gave a drink to"
    assert abba.text == "Then, Mary and John went to the store. John gave a drink to"


def test_multi_token_name_is_an_error(tok):
    assert "Mary" in single_token_names(tok, ["Mary", "Zxqvbn"])
    with pytest.raises(MultiTokenName, match="Zxqvbn"):
        name_token(tok, "Zxqvbn")
    with pytest.raises(MultiTokenName):
        make_prompt(tok, 0, "BABA", "Zxqvbn", "John", "store", "drink")


def test_metrics_on_a_stub_model(tok):
    prompts = ioi_mixed(tok, n=6, seed=1)

    class Stub(torch.nn.Module):  # puts logit 2 on every IO token, 0 elsewhere
        def forward(self, ids):
            out = torch.zeros(ids.shape[0], ids.shape[1], 50257)
            for p in prompts:
                out[:, -1, p.io_id] = 2.0
            return type("O", (), {"logits": out})

    m = evaluate(Stub(), prompts)
    assert m.accuracy == float((m.logit_diff > 0).double().mean()) > 0
    # each prompt's S is another prompt's IO sometimes; logit diff is 2 unless S also got 2
    assert all(x in (0.0, 2.0) for x in m.logit_diff.tolist())
    assert 0 < float(m.p_io.min()) and float(m.p_io.max()) < 1


NAME_FIRST = {"ioi_baba_templates": ["[B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to [A]"]}


def test_template_beginning_with_a_name(tok):
    """A sentence-initial name has no leading space (another token); roles come from positions."""
    p = make_prompt(tok, 0, "BABA", "Mary", "John", "store", "drink", templates=NAME_FIRST)
    assert p.text == "John and Mary went to the store. John gave a drink to"
    ids = p.input_ids
    assert p.pos["S1"] == 0 and tok.decode([ids[0]]) == "John" and ids[0] != p.s_id  # no leading space
    assert ids[p.pos["S2"]] == p.s_id and ids[p.pos["IO"]] == p.io_id and p.pos["S1+1"] == 1
    assert p.pos["S1"] < p.pos["IO"] < p.pos["S2"] < p.pos["END"] == len(ids) - 1
    abba = make_prompt(tok, 0, "ABBA", "Mary", "John", "store", "drink", templates=NAME_FIRST)
    assert abba.text.startswith("Mary and John") and abba.pos["IO"] == 0 and abba.pos["S1"] == 2


def test_standard_templates_keep_their_positions(tok):
    """Offsets-based positions agree with a token-id search on the standard templates."""
    for p in ioi_balanced(tok, per_order=1):
        ids = p.input_ids
        assert [i for i, x in enumerate(ids) if x == p.io_id] == [p.pos["IO"]]
        assert [i for i, x in enumerate(ids) if x == p.s_id] == [p.pos["S1"], p.pos["S2"]]


def test_sentence_initial_name_of_several_tokens_covers_a_span(tok):
    """A name that is one token only with its leading space is several tokens at the start of the
    prompt: its role covers the span, its position is the span's last token."""
    names = single_token_names(tok)
    split = next(n for n in names if len(tok(n).input_ids) > 1)
    assert split not in single_token_names(tok, names, sentence_initial=True)
    p = make_prompt(tok, 0, "BABA", "Mary", split, "store", "drink", templates=NAME_FIRST)
    a, b = p.spans["S1"]
    assert a == 0 and b == len(tok(split).input_ids) > 1 and tok.decode(list(p.input_ids[a:b])) == split
    assert p.pos["S1"] == b - 1 and p.pos["S1+1"] == b and p.input_ids[p.pos["S2"]] == p.s_id
    assert p.spans["S2"] == (p.pos["S2"], p.pos["S2"] + 1) and p.answer_in_prompt
    # where the same name follows a space it is one token
    q = make_prompt(tok, 0, "BABA", "Mary", split, "store", "drink")
    assert q.spans["S1"][1] - q.spans["S1"][0] == 1


def test_io_equal_to_s_is_refused(tok):
    with pytest.raises(ValueError, match="IO and S are the same name"):
        make_prompt(tok, 0, "BABA", "Mary", "Mary", "store", "drink")
