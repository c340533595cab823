"""Template families: the same task worded in several ways, with behaviour measured per family.

A model may do well on the wording a study's prompts were written in and worse on others. Each
task here ships several families of templates (all ours except IOI's "paper" family and the
pronouns' "authors" family):

IOI (templates in the BABA order; ABBA swaps the first pair, :func:`accpp.datasets.make_prompt`)
    ``"paper"``: the 15 templates of Wang et al. used by the ACC++ authors
    (``data/names/ioi_greaterthan_templates.json``); ``"other"``: five of our own wordings with the
    names inside the sentence; ``"initial"``: five of ours that begin with a name, so that name is
    written without its leading space (and may be several tokens). In the ABBA order of an
    ``"initial"`` template the IO stands only at the start, so the answer token " IO" never occurs
    in the prompt (``answer_in_prompt`` False): behaviour is reported split by that flag.

Gendered pronouns (the answer is " he" / " she" after the tag "isn't")
    ``"authors"``: the five templates of the ACC authors' task (``gp_dataset.py`` of their repository,
    after Mathwin and Corlouer; :mod:`accpp.pronouns`); ``"so"``: :data:`accpp.pronouns.TEMPLATES`
    (ours, "So {name} is ..., isn't"); ``"other"``: five of our own wordings with the name inside the
    sentence; ``"sentence"``: five of ours whose second sentence begins with the name (a short first
    sentence without a person, so the name follows a space and is one token, and does not stand at
    position 0, where a model without a beginning-of-sequence token keeps its attention sink);
    ``"initial"``: our ``"so"`` templates without "So", so that the name begins the prompt (written
    without its leading space, possibly as several tokens, at position 0 for SmolLM2).

Greater-Than (the answer is the end year's YY after "... {XX}")
    ``"paper"``: Hanna et al.'s "The {noun} lasted from the year {XX}{YY} to the year {XX}";
    ``"other"``: five of our wordings; ``"initial"``: five of ours that begin with the noun
    (capitalised there, without "The").

Behaviour tables (:func:`behaviour_table`) give, per group (family, and optionally the IOI order
and ``answer_in_prompt``), the number of prompts, the mean logit difference and the accuracy
(fraction with a positive logit difference).
"""
from __future__ import annotations

import random

import torch

from accpp import datasets
from accpp import pronouns as pr

__all__ = ["IOI_FAMILIES", "PRONOUN_FAMILIES", "GT_FAMILIES", "ioi_templates", "ioi_family_set",
           "pronoun_family_set", "pronoun_families_set", "gt_family_set", "behaviour_table"]

#: Our IOI templates, BABA order ([B] = S, [A] = IO); "paper" is read from the data file.
IOI_FAMILIES: dict[str, tuple[str, ...] | None] = {
    "paper": None,
    "other": (
        "Yesterday [B] and [A] met at the [PLACE]. [B] handed a [OBJECT] to [A]",
        "At the [PLACE], [B] and [A] were talking, and then [B] passed the [OBJECT] to [A]",
        "Later that day [B] and [A] walked to the [PLACE], where [B] showed the [OBJECT] to [A]",
        "On Monday [B] and [A] visited the [PLACE]. In the end [B] sent a [OBJECT] to [A]",
        "Both [B] and [A] stayed at the [PLACE] for a while, so [B] brought a [OBJECT] to [A]",
    ),
    "initial": (
        "[B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to [A]",
        "[B] and [A] were working at the [PLACE], and [B] handed the [OBJECT] to [A]",
        "[B] and [A] got a [OBJECT] at the [PLACE]. Then [B] gave it to [A]",
        "[B] met [A] at the [PLACE], and later [B] gave a [OBJECT] to [A]",
        "[B] and [A] had a long talk at the [PLACE]. Afterwards [B] said goodbye to [A]",
    ),
}

#: Gendered-pronoun templates per family ("{name}" once; the answer follows "isn't").
PRONOUN_FAMILIES: dict[str, tuple[str, ...]] = {
    "authors": (
        "So {name} is a really great friend, isn't",
        "So {name} is such a good cook, isn't",
        "So {name} is a very good athlete, isn't",
        "So {name} is a really nice person, isn't",
        "So {name} is such a funny person, isn't",
    ),
    "so": pr.TEMPLATES,
    "other": (
        "I heard that {name} is a great cook, isn't",
        "My friend {name} is a talented painter, isn't",
        "We all know that {name} is a careful driver, isn't",
        "Honestly, {name} is such a good dancer, isn't",
        "Of course {name} is a very loyal friend, isn't",
    ),
    "sentence": (
        "The party ended late. {name} is a wonderful host, isn't",
        "It was a long week. {name} is such a reliable colleague, isn't",
        "The garden looks lovely. {name} is a very skilled gardener, isn't",
        "Dinner was ready early. {name} is a really organised person, isn't",
        "The exam went well. {name} is such a clever student, isn't",
    ),
    "initial": tuple(t.replace("So {name}", "{name}") for t in pr.TEMPLATES),
}

#: Greater-Than templates per family ("paper" is read from the data file).
GT_FAMILIES: dict[str, tuple[str, ...] | None] = {
    "paper": None,
    "other": (
        "The {noun} began in the year {XX}{YY} and ended in the year {XX}",
        "The {noun} started in {XX}{YY} and it was over by the year {XX}",
        "Historians say the {noun} ran from the year {XX}{YY} until the year {XX}",
        "The {noun} went on from {XX}{YY} to {XX}",
        "In the year {XX}{YY} the {noun} began and it ended in the year {XX}",
    ),
    "initial": (
        "{noun} lasted from the year {XX}{YY} to the year {XX}",
        "{noun} began in the year {XX}{YY} and ended in the year {XX}",
        "{noun} ran from {XX}{YY} until the year {XX}",
        "{noun} started in the year {XX}{YY} and was over by the year {XX}",
        "{noun} went on from the year {XX}{YY} to the year {XX}",
    ),
}


def gt_family_set(tokenizer, family: str, n: int, seed: int = 0, nouns: list[str] | None = None):
    """``n`` seeded Greater-Than prompts of one family (:func:`accpp.greater_than.gt_prompts`; ``nouns``
    default: the paper's list)."""
    from accpp import greater_than as gt

    if family not in GT_FAMILIES:
        raise ValueError(f"unknown Greater-Than family {family!r}; known: {', '.join(GT_FAMILIES)}")
    return gt.gt_prompts(tokenizer, n=n, seed=seed, nouns=nouns, templates=GT_FAMILIES[family], family=family)


def ioi_templates(family: str) -> dict:
    """The templates dict of an IOI family (as :func:`accpp.datasets.make_prompt` takes it)."""
    if family not in IOI_FAMILIES:
        raise ValueError(f"unknown IOI family {family!r}; known: {', '.join(IOI_FAMILIES)}")
    base = datasets.load_templates()
    if IOI_FAMILIES[family] is None:
        return base
    return dict(base, ioi_baba_templates=list(IOI_FAMILIES[family]))


def ioi_family_set(tokenizer, family: str, n: int, seed: int = 0, names: list[str] | None = None,
                   ) -> list[datasets.IOIPrompt]:
    """``n`` seeded IOI prompts of one family: random template, order (ABBA/BABA), names (distinct,
    one token with a leading space), place and object."""
    templates = ioi_templates(family)
    names = datasets.single_token_names(tokenizer, names)
    if len(names) < 2:
        raise ValueError(f"only {len(names)} usable single-token names for this tokenizer: need 2")
    rng = random.Random(seed)
    k = len(templates["ioi_baba_templates"])
    out = []
    for _ in range(n):
        t, order = rng.randrange(k), rng.choice(("ABBA", "BABA"))
        io, s = rng.sample(names, 2)
        place, obj = rng.choice(templates["ioi_places"]), rng.choice(templates["ioi_objects"])
        out.append(datasets.make_prompt(tokenizer, t, order, io, s, place, obj, templates, family=family))
    return out


def pronoun_families_set(tokenizer, families, male=pr.MALE_NAMES, female=pr.FEMALE_NAMES,
                         min_names: int = 8) -> list[pr.PronounPrompt]:
    """:func:`pronoun_family_set` of each family in ``families``, concatenated in that order."""
    families = list(families)
    if not families:
        raise ValueError("pronoun_families_set: no families")
    return [p for f in families for p in pronoun_family_set(tokenizer, f, male, female, min_names)]


def pronoun_family_set(tokenizer, family: str, male=pr.MALE_NAMES, female=pr.FEMALE_NAMES,
                       min_names: int = 8) -> list[pr.PronounPrompt]:
    """Every template of one pronoun family x every usable name (one token with a leading space)."""
    if family not in PRONOUN_FAMILIES:
        raise ValueError(f"unknown pronoun family {family!r}; known: {', '.join(PRONOUN_FAMILIES)}")
    templates = PRONOUN_FAMILIES[family]
    out = []
    for gender, names in (("male", male), ("female", female)):
        ok = pr.usable_names(tokenizer, names)
        if len(ok) < min_names:
            raise ValueError(f"only {len(ok)} {gender} names are single tokens for this tokenizer ({ok}); "
                             f"need at least {min_names}")
        out += [pr.make_prompt(tokenizer, t, nm, gender, templates, family=family)
                for nm in ok for t in range(len(templates))]
    return out


def behaviour_table(prompts, logit_diff: torch.Tensor, by: tuple[str, ...] = ("family",), *,
                    metric: str = "logit_diff", **extra):
    """One row per group of ``prompts`` (grouped by the attributes named in ``by``): n, the mean of
    the per-prompt metric (a column named ``metric``: the logit difference, or Greater-Than's
    probability difference) and the accuracy (the fraction above 0); ``extra`` columns (e.g.
    model=...) are added to every row."""
    import pandas as pd

    if len(prompts) != len(logit_diff):
        raise ValueError(f"{len(prompts)} prompts but {len(logit_diff)} logit differences")
    if not prompts:
        raise ValueError("behaviour_table: no prompts")
    groups: dict[tuple, list[float]] = {}
    for p, ld in zip(prompts, logit_diff.tolist()):
        groups.setdefault(tuple(getattr(p, k) for k in by), []).append(ld)
    rows = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        v = torch.tensor(groups[key], dtype=torch.float64)
        rows.append(dict(extra, **dict(zip(by, key)), n=len(v), **{metric: float(v.mean())},
                         accuracy=float((v > 0).double().mean())))
    return pd.DataFrame(rows)
