"""Prompt builders with names anywhere (sentence-initial names as token spans), what they refuse,
the template families, and behaviour per family (GPT-2 tokenizer from data/, no model needed)."""
from __future__ import annotations

import pytest
import torch

from accpp import families as fam
from accpp import pronouns as pr
from accpp.datasets import MultiTokenName, evaluate, make_prompt, name_token, single_token_names


@pytest.fixture(scope="module")
def tok():
    from transformers import PreTrainedTokenizerFast

    from compendium import paths

    return PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"))


@pytest.fixture(scope="module")
def split_name(tok):
    """A name that is one token with its leading space and several tokens without it."""
    return next(n for n in single_token_names(tok) if len(tok(n).input_ids) > 1)


INITIAL = fam.ioi_templates("initial")


def test_abba_sentence_initial_prompt_is_measured_on_the_answer_token(tok):
    """In ABBA order on a template that begins with the IO, " IO" never occurs in the prompt; the
    metric must still read the token the model predicts (" Mary"), not the one it saw ("Mary")."""
    p = make_prompt(tok, 0, "ABBA", "Mary", "John", "store", "drink", INITIAL, family="initial")
    assert p.text == "Mary and John went to the store. John gave a drink to"
    spaced, bare = tok(" Mary").input_ids[0], tok("Mary").input_ids[0]
    assert spaced != bare and p.io_id == spaced and p.io_id not in p.input_ids and not p.answer_in_prompt
    a, b = p.spans["IO"]
    assert tok.decode(list(p.input_ids[a:b])) == "Mary" and p.pos["IO"] == b - 1 == 0

    class Stub(torch.nn.Module):  # " Mary" 5, "Mary" 9, everything else 0
        def forward(self, ids):
            out = torch.zeros(ids.shape[0], ids.shape[1], 50257)
            out[:, -1, spaced], out[:, -1, bare] = 5.0, 9.0
            return type("O", (), {"logits": out})

    assert evaluate(Stub(), [p]).logit_diff.tolist() == [5.0]
    baba = make_prompt(tok, 0, "BABA", "Mary", "John", "store", "drink", INITIAL, family="initial")
    assert baba.answer_in_prompt and baba.input_ids[baba.pos["IO"]] == baba.io_id


def test_sentence_initial_io_of_several_tokens(tok, split_name):
    p = make_prompt(tok, 0, "ABBA", split_name, "John", "store", "drink", INITIAL, family="initial")
    a, b = p.spans["IO"]
    assert (a, b) == (0, len(tok(split_name).input_ids)) and b > 1 and p.pos["IO"] == b - 1
    assert tok.decode(list(p.input_ids[:b])) == split_name and p.io_id == name_token(tok, split_name)
    assert p.pos["S1"] == b + 1 and not p.answer_in_prompt  # " and", then " John"


@pytest.mark.parametrize("io, s, place, obj, error, match", [
    ("Zxqvbn", "John", "store", "drink", MultiTokenName,
     r"name 'Zxqvbn' is \d+ tokens.*answer \(IO\) of template 0 \(initial\): '\[A\] and \[B\] went"),
    ("Mary", "Zxqvbn", "store", "drink", MultiTokenName, r"'Zxqvbn'.*distractor \(S\) of template 0"),
    ("", "John", "store", "drink", ValueError, r"name \(IO\) '' is empty"),
    ("Mary", "   ", "store", "drink", ValueError, r"name \(S\) '   ' is empty or only whitespace"),
    (" Mary", "John", "store", "drink", ValueError, r"name \(IO\) ' Mary' has surrounding whitespace"),
    ("Mary", "John", "[A] store", "drink", ValueError, r"place '\[A\] store' contains the placeholder"),
    ("Mary", "John", "store", "{name}", ValueError, r"object '\{name\}' contains the placeholder"),
    ("Ma[B]ry", "John", "store", "drink", ValueError, r"name \(IO\) 'Ma\[B\]ry' contains the placeholder"),
    ("Mary", 7, "store", "drink", TypeError, r"name \(S\) must be a string"),
])
def test_ioi_builder_refusals_name_the_problem(tok, io, s, place, obj, error, match):
    with pytest.raises(error, match=match):
        make_prompt(tok, 0, "ABBA", io, s, place, obj, INITIAL, family="initial")


@pytest.mark.parametrize("family", list(fam.IOI_FAMILIES))
def test_every_ioi_family_builds_and_records_the_answer_flag(tok, family):
    prompts = fam.ioi_family_set(tok, family, n=40, seed=1)
    assert {p.family for p in prompts} == {family} and {p.order for p in prompts} == {"ABBA", "BABA"}
    for p in prompts:
        ids = p.input_ids
        assert p.answer_in_prompt == (p.io_id in ids)
        assert ids[p.pos["S2"]] == p.s_id and p.pos["END"] == len(ids) - 1 and not p.text.endswith(" ")
        initial_io = family == "initial" and p.order == "ABBA"
        assert p.answer_in_prompt != initial_io  # only there is " IO" never written
    assert fam.ioi_family_set(tok, family, n=3, seed=1) == prompts[:3]  # seeded


def test_unknown_family_is_named(tok):
    with pytest.raises(ValueError, match="unknown IOI family 'nope'.*paper, other, initial"):
        fam.ioi_templates("nope")
    with pytest.raises(ValueError, match="unknown pronoun family 'nope'"):
        fam.pronoun_family_set(tok, "nope")


def test_pronoun_families(tok, split_name):
    for family in fam.PRONOUN_FAMILIES:
        prompts = fam.pronoun_family_set(tok, family, min_names=4)
        assert {p.family for p in prompts} == {family} and {p.gender for p in prompts} == {"male", "female"}
        for p in prompts:
            a, b = p.spans["name"]
            assert tok.decode(list(p.input_ids[a:b])).strip() == p.name and p.pos["name"] == b - 1
            assert p.answer_in_prompt == (p.correct_id in p.input_ids)
    ini = pr.make_prompt(tok, 0, split_name, "male", fam.PRONOUN_FAMILIES["initial"], family="initial")
    a, b = ini.spans["name"]
    assert ini.text.startswith(split_name) and a == 0 and b > 1 and ini.pos["name"] == b - 1
    said = pr.make_prompt(tok, 0, "James", "male", ("Mary said he met {name}, who is kind, isn't",))
    assert said.answer_in_prompt and said.correct_id in said.input_ids


def test_pronoun_family_wordings(tok):
    """The authors' family is their five 'So {name} is ..., isn't' templates; ours differ from them; in the
    'sentence' family the name begins the second sentence, after a space (one token, never position 0)."""
    authors = fam.PRONOUN_FAMILIES["authors"]
    assert len(authors) == 5 and all(t.startswith("So {name} is ") and t.endswith(", isn't") for t in authors)
    assert not set(authors) & set(pr.TEMPLATES)
    assert all(len(v) == 5 and len(set(v)) == 5 for v in fam.PRONOUN_FAMILIES.values())
    for t in fam.PRONOUN_FAMILIES["sentence"]:
        first, second = t.split(". ", 1)
        assert second.startswith("{name} is ") and "{name}" not in first and t.endswith(", isn't")
    for p in fam.pronoun_family_set(tok, "sentence", min_names=4):
        a, b = p.spans["name"]
        assert b - a == 1 and a > 0 and p.text[p.text.index(p.name) - 2: p.text.index(p.name)] == ". "
    both = fam.pronoun_families_set(tok, ["authors", "sentence"], min_names=4)
    assert both == fam.pronoun_family_set(tok, "authors", min_names=4) + fam.pronoun_family_set(tok, "sentence",
                                                                                               min_names=4)
    with pytest.raises(ValueError, match="no families"):
        fam.pronoun_families_set(tok, [])


@pytest.mark.models
@pytest.mark.parametrize("model_name", ["smollm2-135m", "gemma-3-270m"])
def test_claims_pronoun_families_on_the_offline_tokenizers(model_name):
    """Every name of ours is one token in the claims' families for both offline tokenizers, and the
    name never stands at position 0 there (it does in 'initial' for SmolLM2, which has no BOS token)."""
    from transformers import AutoTokenizer

    from accpp import models

    folder = models.cached_folder(model_name)
    if not (folder / "config.json").exists():
        models.load_model(model_name)
    tok = AutoTokenizer.from_pretrained(str(folder))
    n_names = len(pr.MALE_NAMES) + len(pr.FEMALE_NAMES)
    for family in ("authors", "so", "other", "sentence"):
        prompts = fam.pronoun_family_set(tok, family)
        assert len(prompts) == 5 * n_names
        assert all(p.spans["name"][1] - p.spans["name"][0] == 1 and p.spans["name"][0] > 0 for p in prompts)


@pytest.mark.parametrize("name, template, error, match", [
    ("", "So {name} is kind, isn't", ValueError, "name '' is empty"),
    ("Ja{x}", "So {name} is kind, isn't", ValueError, "contains the placeholder"),
    ("James", "So {name} is {adj}, isn't", ValueError, "no other placeholder"),
    ("Zxqvbn", "So {name} is kind, isn't", MultiTokenName, "Zxqvbn"),
])
def test_pronoun_builder_refusals(tok, name, template, error, match):
    with pytest.raises(error, match=match):
        pr.make_prompt(tok, 0, name, "male", (template,))


def test_behaviour_table_groups_and_counts(tok):
    prompts = fam.ioi_family_set(tok, "initial", n=12, seed=2)
    ld = torch.tensor([1.0 if p.order == "ABBA" else -2.0 for p in prompts], dtype=torch.float64)
    t = fam.behaviour_table(prompts, ld, by=("family", "order", "answer_in_prompt"), model="m")
    assert list(t.columns) == ["model", "family", "order", "answer_in_prompt", "n", "logit_diff", "accuracy"]
    assert t["n"].sum() == 12 and set(t["model"]) == {"m"}
    abba = t[t["order"] == "ABBA"].iloc[0]
    assert abba["logit_diff"] == 1.0 and abba["accuracy"] == 1.0 and not abba["answer_in_prompt"]
    baba = t[t["order"] == "BABA"].iloc[0]
    assert baba["logit_diff"] == -2.0 and baba["accuracy"] == 0.0 and baba["answer_in_prompt"]
    with pytest.raises(ValueError, match="12 prompts but 3"):
        fam.behaviour_table(prompts, ld[:3])
    named = fam.behaviour_table(prompts, ld, by=("order",), metric="units_prob_diff")
    assert list(named.columns) == ["order", "n", "units_prob_diff", "accuracy"]
    assert named.set_index("order")["units_prob_diff"].to_dict() == {"ABBA": 1.0, "BABA": -2.0}
