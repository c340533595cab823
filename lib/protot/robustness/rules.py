"""The written rules behind the robustness edits: one small rule set per edit type.

A rule finds candidate sites in a sentence (a regular expression) and says what replaces each
site. Seven types preserve the meaning, as in the authors' robustness table (abbreviation,
contraction, morphology, punctuation, spelling, synonym, typo); three change it, as in their
intervention table (gender, negation, number). :func:`rule_table` lists every rule family with
an example; the notebook shows it. Word lists are short and hand written; each family is
documented where it is defined. The typo edits are character operations
(:data:`TYPO_OPS`, applied in :mod:`protot.robustness.edits`), not regular-expression rules.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

#: The meaning-preserving types of the authors' robustness table, in its row order.
PRESERVING = ("abbreviation", "contraction", "morphology", "punctuation", "spelling", "synonym", "typo")
#: The meaning-changing types of the authors' intervention table: the control.
CHANGING = ("gender", "negation", "number")
EDIT_TYPES = PRESERVING + CHANGING
TYPO_OPS = ("swap", "drop", "duplicate")


def check_type(edit_type: str) -> str:
    """``edit_type`` if it is one of :data:`EDIT_TYPES`, else ValueError naming the valid ones."""
    if edit_type not in EDIT_TYPES:
        raise ValueError(f"unknown edit type {edit_type!r}; valid: {', '.join(EDIT_TYPES)}")
    return edit_type


# A rule proposes candidate sites: (start, end, replacement) over the text. The generator picks a
# rule uniformly among the applicable ones (weighted by the rule's weight), then a site uniformly.
@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern
    replace: Callable[[re.Match], str | None]   # the replacement of the whole match, None: skip
    weight: float = 1.0
    literal: str | None = None                  # a lower-case substring every match contains (fast skip)


def _case_like(src: str, repl: str) -> str:
    """``repl`` with the capitalisation of ``src`` (Capitalised or lower; all-caps words stay as given)."""
    if src[:1].isupper() and repl[:1].islower():
        return repl[:1].upper() + repl[1:]
    return repl


def _word_rule(name: str, src: str, dst: str, *, left: str = r"(?<![\w.&'-])", right: str = r"(?![\w&'-])",
               capitalised: bool = True, weight: float = 1.0) -> _Rule:
    """Replace the word/phrase ``src`` by ``dst`` (whole words; also its Capitalised form)."""
    alts = [re.escape(src)]
    if capitalised and src[:1].islower():
        alts.append(re.escape(src[:1].upper() + src[1:]))
    pat = re.compile(left + "(?:" + "|".join(alts) + ")" + right)
    return _Rule(name, pat, lambda m: _case_like(m.group(0), dst), weight, literal=src.lower())


def _both_ways(name: str, a: str, b: str, **kw) -> list[_Rule]:
    return [_word_rule(f"{name}: {a} -> {b}", a, b, **kw), _word_rule(f"{name}: {b} -> {a}", b, a, **kw)]


# -- abbreviation ------------------------------------------------------------------------------------
# (full, abbreviated). Expanding an abbreviation that ends in "." is skipped when the next word is
# Capitalised or the text ends (the "." might also end the sentence), except for titles, which
# only apply before a Capitalised name. Contracting before a "." drops the doubled period.
_ABBREV_GENERAL = [
    ("United States", "U.S."), ("United Kingdom", "U.K."), ("United Nations", "UN"),
    ("European Union", "EU"), ("World War II", "WWII"), ("World War I", "WWI"),
    ("television", "TV"), ("deoxyribonucleic acid", "DNA"), ("New York City", "NYC"),
    ("for example", "e.g."), ("versus", "vs."), ("approximately", "approx."), ("et cetera", "etc."),
    ("and so on", "etc."), ("Corporation", "Corp."), ("Incorporated", "Inc."), ("Figure", "Fig."),
    ("Avenue", "Ave."),
]
_ABBREV_TITLES = [("Doctor", "Dr."), ("Mister", "Mr."), ("Professor", "Prof."), ("Mount", "Mt."),
                  ("Saint", "St."), ("President", "Pres."), ("Senator", "Sen."),
                  ("Governor", "Gov."), ("Captain", "Capt.")]
_MONTHS = [("January", "Jan."), ("February", "Feb."), ("March", "Mar."), ("April", "Apr."),
           ("August", "Aug."), ("September", "Sept."), ("October", "Oct."), ("November", "Nov."),
           ("December", "Dec.")]
_UNITS = [("kilometers", "km"), ("kilometres", "km"), ("kilometer", "km"), ("centimeters", "cm"),
          ("centimetres", "cm"), ("millimeters", "mm"), ("kilograms", "kg"), ("kilogram", "kg"),
          ("grams", "g"), ("miles per hour", "mph"), ("degrees Celsius", "°C"), ("hours", "h")]


def _abbreviation_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    sentence_end = r"(?!\s+[A-Z0-9]|\s*$|[\w&'-])"       # not before a Capitalised word or the end
    for full, short in _ABBREV_GENERAL:
        cap = full[:1].islower()
        rules.append(_word_rule(f"abbr: {full} -> {short}", full, short, capitalised=cap))
        rules.append(_word_rule(f"abbr: {short} -> {full}", short, full, capitalised=False,
                                right=sentence_end if short.endswith(".") else r"(?![\w&'-])"))
    for full, short in _ABBREV_TITLES:   # titles only before a Capitalised name
        rules += _both_ways("title", full, short, right=r"(?=\s+[A-Z][a-z])", capitalised=False)
    for full, short in _MONTHS:          # months only before a day or year
        rules += _both_ways("month", full, short, right=r"(?=\s+\d)", capitalised=False)
    for full, short in _UNITS:           # units only after a number
        rules += _both_ways("unit", full, short, left=r"(?<=\d )", capitalised=False)
    rules.append(_Rule("abbr: N percent -> N%", re.compile(r"(?<=\d) ?percent\b"), lambda m: "%"))
    rules.append(_Rule("abbr: N% -> N percent", re.compile(r"(?<=\d)%(?!\w)"), lambda m: " percent"))
    # "and" -> "&" only between Capitalised words (names, titles: "Johnson and Johnson")
    rules.append(_Rule("abbr: X and Y -> X & Y", re.compile(r"(?<=[A-Z][a-z]) and (?=[A-Z])"), lambda m: " & "))
    rules.append(_Rule("abbr: & -> and", re.compile(r"(?<=\w) & (?=\w)"), lambda m: " and "))
    rules.append(_Rule("abbr: , that is, -> , i.e.,", re.compile(r"(?<=, )that is(?=,)"), lambda m: "i.e."))
    rules.append(_Rule("abbr: i.e. -> that is", re.compile(r"(?<![\w.])i\.e\.(?=,)"), lambda m: "that is"))
    return rules


# -- punctuation -------------------------------------------------------------------------------------
_INTRO = ("However", "Therefore", "Thus", "In addition", "For example", "Finally", "First", "Second",
          "Moreover", "Furthermore", "Instead", "Meanwhile", "Today", "Overall", "In fact", "Historically",
          "In general", "Similarly", "Consequently", "As a result", "Of course", "Nevertheless")
_SENTENCE_STARTERS = ("The", "This", "It", "These", "They", "He", "She", "We", "There", "In", "A", "An", "Its",
                      "Their", "His", "Her", "That", "Such", "Some", "Many", "Most", "Each")
_START = r"(?:^|(?<=[.!?] ))"


def _punctuation_rules() -> list[_Rule]:
    intro = "|".join(re.escape(w) for w in _INTRO)
    starters = "|".join(_SENTENCE_STARTERS)
    return [
        # drop a comma between two words (not in numbers, not before a Capitalised word)
        _Rule("punct: drop comma", re.compile(r"(?<=[a-z]), (?=[a-z])"), lambda m: " "),
        # the Oxford (serial) comma, both ways: "a, b and c" <-> "a, b, and c"
        _Rule("punct: add serial comma", re.compile(r"(?<=, )(\w+) (?=(?:and|or) \w)"), lambda m: m.group(1) + ", "),
        _Rule("punct: drop serial comma", re.compile(r"(?<=, )(\w+), (?=(?:and|or) \w)"), lambda m: m.group(1) + " "),
        # comma after an introductory word at a sentence start, both ways
        _Rule("punct: add intro comma", re.compile(_START + rf"({intro}) (?=[a-z])"), lambda m: m.group(1) + ", "),
        _Rule("punct: drop intro comma", re.compile(_START + rf"({intro}), (?=[a-z])"), lambda m: m.group(1) + " "),
        # two sentences <-> one joined by a semicolon
        _Rule("punct: period -> semicolon", re.compile(rf"(?<=[a-z]{{2}})\. ({starters})(?= )"),
              lambda m: "; " + m.group(1).lower()),
        _Rule("punct: semicolon -> period", re.compile(r"(?<=\w); ([a-z])"), lambda m: ". " + m.group(1).upper()),
        # quote style: straight double <-> single quotes, curly -> straight, straight -> curly
        _Rule("punct: \"..\" -> '..'", re.compile(r"\"([^\"'\n]{1,80})\""), lambda m: f"'{m.group(1)}'"),
        _Rule("punct: '..' -> \"..\"", re.compile(r"(?<![\w'])'([^'\"\n]{1,80})'(?![\w'])"), lambda m: f'"{m.group(1)}"'),
        _Rule("punct: curly -> straight quotes", re.compile("\u201c([^\u201c\u201d\n]{1,80})\u201d"),
              lambda m: f'"{m.group(1)}"'),
        _Rule("punct: straight -> curly quotes", re.compile(r"\"([^\"\n]{1,80})\""),
              lambda m: f"\u201c{m.group(1)}\u201d"),
        # a dash pair / parenthetical: " - " <-> " -- " style is skipped; parentheses <-> commas:
        _Rule("punct: (..) -> , ..,", re.compile(r"(?<=[a-z]) \(([a-z][^()\n]{1,60})\)(?= [a-z])"),
              lambda m: f", {m.group(1)},"),
    ]


# -- spelling (US <-> UK) ----------------------------------------------------------------------------
_OR_OUR = ("col", "hon", "fav", "lab", "neighb", "behavi", "flav", "hum", "harb", "rum", "vap", "tum", "od",
           "arm", "vig", "endeav", "savi", "glam")          # colour, honour, ... (+s, +ed, +ing)
_ER_RE = ("cent", "met", "lit", "fib", "theat", "somb", "lust", "calib", "spect", "sab", "tit")  # centre, metre, ...
_IZE_STEMS = ("organ", "real", "recogn", "emphas", "critic", "minim", "maxim", "character", "special", "summar",
              "apolog", "civil", "util", "standard", "modern", "central", "global", "industrial", "colon",
              "legal", "neutral", "normal", "optim", "symbol", "visual", "stabil", "categor", "memor", "author",
              "capital", "final", "general", "hospital", "ideal", "immun", "ion", "magnet", "mobil", "natural",
              "polar", "privat", "item", "hypothes", "synthes", "organ", "urban", "fertil", "steril", "vapor",
              "crystall", "metabol", "subsid", "famil", "custom", "agon", "sympath", "terror", "colon", "human")
_SPELLING_PAIRS = [
    ("gray", "grey"), ("defense", "defence"), ("offense", "offence"), ("catalog", "catalogue"),
    ("analog", "analogue"), ("dialog", "dialogue"), ("aluminum", "aluminium"), ("sulfur", "sulphur"),
    ("sulfuric", "sulphuric"), ("sulfate", "sulphate"), ("fetus", "foetus"), ("esophagus", "oesophagus"),
    ("estrogen", "oestrogen"), ("hemoglobin", "haemoglobin"), ("anemia", "anaemia"), ("leukemia", "leukaemia"),
    ("pediatric", "paediatric"), ("anesthesia", "anaesthesia"), ("edema", "oedema"), ("diarrhea", "diarrhoea"),
    ("traveled", "travelled"), ("traveling", "travelling"), ("traveler", "traveller"), ("modeling", "modelling"),
    ("modeled", "modelled"), ("labeled", "labelled"), ("labeling", "labelling"), ("canceled", "cancelled"),
    ("fueled", "fuelled"), ("signaling", "signalling"), ("leveled", "levelled"), ("counselor", "counsellor"),
    ("jewelry", "jewellery"), ("plow", "plough"), ("skeptical", "sceptical"), ("skeptic", "sceptic"),
    ("maneuver", "manoeuvre"), ("mustache", "moustache"), ("cozy", "cosy"), ("fulfill", "fulfil"),
    ("enrollment", "enrolment"), ("skillful", "skilful"), ("judgment", "judgement"), ("aging", "ageing"),
    ("acknowledgment", "acknowledgement"), ("artifact", "artefact"), ("percent", "per cent"),
    ("toward", "towards"), ("afterward", "afterwards"), ("centered", "centred"), ("mold", "mould"),
    ("favorite", "favourite"), ("favorable", "favourable"), ("colorful", "colourful"), ("behavioral", "behavioural"),
    ("neighborhood", "neighbourhood"), ("honorable", "honourable"), ("laborer", "labourer"),
    ("analyze", "analyse"), ("analyzed", "analysed"), ("analyzing", "analysing"), ("paralyze", "paralyse"),
    ("catalyze", "catalyse"), ("catalyzed", "catalysed"), ("hydrolyze", "hydrolyse"),
    ("kilometer", "kilometre"), ("centimeter", "centimetre"), ("millimeter", "millimetre"),
    ("milliliter", "millilitre"), ("kilometers", "kilometres"), ("centimeters", "centimetres"),
    ("millimeters", "millimetres"), ("milliliters", "millilitres"),
]


def _spelling_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for stem in _OR_OUR:
        rules += _both_ways("spell", stem + "or", stem + "our") + _both_ways("spell", stem + "ors", stem + "ours")
        rules += _both_ways("spell", stem + "ored", stem + "oured") + _both_ways("spell", stem + "oring", stem + "ouring")
    for stem in _ER_RE:
        rules += _both_ways("spell", stem + "er", stem + "re") + _both_ways("spell", stem + "ers", stem + "res")
    stems = "|".join(sorted(set(_IZE_STEMS), key=len, reverse=True))
    suffixes = r"(e|es|ed|ing|ation|ations|ational|er|ers)"
    rules.append(_Rule("spell: -ize -> -ise", re.compile(rf"(?<![\w-])((?:[Rr]e)?(?:{stems}))iz{suffixes}(?![\w-])", re.I),
                       lambda m: f"{m.group(1)}is{m.group(2)}"))
    rules.append(_Rule("spell: -ise -> -ize", re.compile(rf"(?<![\w-])((?:[Rr]e)?(?:{stems}))is{suffixes}(?![\w-])", re.I),
                       lambda m: f"{m.group(1)}iz{m.group(2)}"))
    for us, uk in _SPELLING_PAIRS:
        rules += _both_ways("spell", us, uk)
    return rules


# -- synonyms ----------------------------------------------------------------------------------------
# Both-way pairs (either word can stand for the other in most contexts) and one-way substitutions
# (safe in one direction only: "difficult" -> "hard" but not every "hard" is "difficult").
_SYNONYMS_BOTH = [
    ("large", "big"), ("often", "frequently"), ("rapidly", "quickly"), ("rapid", "quick"),
    ("usually", "typically"), ("entirely", "completely"), ("nearly", "almost"), ("bought", "purchased"),
    ("method", "technique"), ("methods", "techniques"), ("car", "automobile"), ("cars", "automobiles"),
    ("children", "kids"), ("therefore", "thus"), ("maybe", "perhaps"), ("moreover", "furthermore"),
    ("occur", "happen"), ("occurs", "happens"), ("occurred", "happened"), ("occurring", "happening"),
    ("choose", "select"), ("idea", "notion"), ("ideas", "notions"), ("shows", "demonstrates"),
    ("showed", "demonstrated"), ("huge", "enormous"), ("students", "pupils"), ("student", "pupil"),
    ("mainly", "primarily"), ("currently", "presently"), ("sufficient", "adequate"), ("ill", "sick"),
]
_SYNONYMS_ONE_WAY = [
    ("begin", "start"), ("begins", "starts"), ("began", "started"), ("entire", "whole"), ("buy", "purchase"),
    ("purchase", "buy"), ("goal", "aim"), ("goals", "aims"), ("person", "individual"), ("close to", "near"),
    ("main", "principal"), ("region", "area"), ("regions", "areas"), ("obtain", "get"), ("require", "need"),
    ("requires", "needs"), ("required", "needed"), ("assist", "help"), ("assists", "helps"), ("chose", "selected"),
    ("difficult", "hard"), ("easy", "simple"), ("hence", "therefore"), ("because", "since"),
    ("approximately", "roughly"), ("individuals", "people"), ("various", "different"), ("numerous", "many"),
    ("attempted", "tried"), ("additionally", "also"), ("utilize", "use"), ("utilized", "used"),
    ("demonstrate", "show"), ("reside", "live"), ("extremely", "very"), ("very", "really"), ("said", "stated"),
    ("says", "states"), ("stated", "said"), ("important", "significant"), ("quite", "rather"),
    ("fast", "quick"),
]


def _synonym_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for a, b in _SYNONYMS_BOTH:
        rules += _both_ways("syn", a, b)
    for a, b in _SYNONYMS_ONE_WAY:
        rules.append(_word_rule(f"syn: {a} -> {b}", a, b))
    # a few fixed phrases
    rules.append(_Rule("syn: about N -> approximately N", re.compile(r"(?<![\w-])[Aa]bout(?= \d)"),
                       lambda m: _case_like(m.group(0), "approximately")))
    return rules


# -- contraction ---------------------------------------------------------------------------------------
# (full, contracted), applied both ways. "it's"/"that's"/"there's" are expanded only when the next
# word is not "been" or "got" (there the "'s" stands for "has"). "'d" and "he's"/"she's" are left
# alone (ambiguous: had/would, is/has).
_CONTRACTIONS = [
    ("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"), ("is not", "isn't"),
    ("are not", "aren't"), ("was not", "wasn't"), ("were not", "weren't"), ("have not", "haven't"),
    ("has not", "hasn't"), ("had not", "hadn't"), ("will not", "won't"), ("would not", "wouldn't"),
    ("should not", "shouldn't"), ("could not", "couldn't"), ("cannot", "can't"), ("must not", "mustn't"),
    ("I am", "I'm"), ("you are", "you're"), ("we are", "we're"), ("they are", "they're"),
    ("I have", "I've"), ("you have", "you've"), ("we have", "we've"), ("they have", "they've"),
    ("I will", "I'll"), ("you will", "you'll"), ("we will", "we'll"), ("they will", "they'll"),
    ("it will", "it'll"), ("let us", "let's"),
]
_S_CONTRACTIONS = [("it is", "it's"), ("that is", "that's"), ("there is", "there's"), ("what is", "what's")]


def _contraction_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for full, short in _CONTRACTIONS:
        rules += _both_ways("contract", full, short)
    for full, short in _S_CONTRACTIONS:
        rules.append(_word_rule(f"contract: {full} -> {short}", full, short))
        rules.append(_word_rule(f"contract: {short} -> {full}", short, full,
                                right=r"(?![\w&'-])(?!\s+(?:been|got)\b)"))
    return rules


# -- morphology ----------------------------------------------------------------------------------------
# Another form of the same word with the same meaning: past-tense doublets (learned/learnt),
# -ic/-ical doublets, synthetic vs periphrastic comparison of adjectives that take both
# (simpler/more simple, commonest/most common), and -st/-wise variants (amongst/among).
_PAST_DOUBLETS = [("learned", "learnt"), ("burned", "burnt"), ("dreamed", "dreamt"), ("spelled", "spelt"),
                  ("spilled", "spilt"), ("leaped", "leapt"), ("smelled", "smelt"), ("knelt", "kneeled"),
                  ("dived", "dove"), ("proved", "proven"), ("lighted", "lit"), ("spoiled", "spoilt")]
_IC_ICAL = ("geographic", "geometric", "symmetric", "asymmetric", "hierarchic", "analytic", "acoustic",
            "syntactic", "ecologic", "philosophic", "rhetoric", "theoretic", "morphologic", "biologic",
            "climatologic", "archaeologic", "cyclic", "spheric", "metaphoric", "grammatic")
_COMPARATIVES = ["simple", "common", "quiet", "narrow", "gentle", "subtle", "friendly", "likely", "shallow",
                 "clever", "polite", "healthy", "wealthy", "easy", "happy", "noisy", "lively", "costly",
                 "deadly", "early", "heavy", "busy", "tidy", "empty", "dry"]
_MORPH_WORDS = [("amongst", "among"), ("whilst", "while"), ("upwards", "upward"), ("downwards", "downward"),
                ("onwards", "onward"), ("outwards", "outward"), ("firstly", "first"), ("secondly", "second")]


def _comparative(adj: str, suffix: str) -> str:
    """adj + -er / -est with the spelling rules of the listed adjectives (y -> i, final e kept once)."""
    if adj.endswith("y") and adj not in ("shy", "dry"):
        return adj[:-1] + "i" + suffix
    if adj.endswith("e"):
        return adj + suffix[1:]
    return adj + suffix


def _morphology_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for a, b in _PAST_DOUBLETS:
        rules += _both_ways("morph", a, b)
    for stem in _IC_ICAL:
        rules += _both_ways("morph", stem, stem + "al")
    for adj in _COMPARATIVES:
        rules += _both_ways("morph", "more " + adj, _comparative(adj, "er"))
        rules += _both_ways("morph", "most " + adj, _comparative(adj, "est"))
    for a, b in _MORPH_WORDS:
        rules += _both_ways("morph", a, b, right=r"(?![\w&'-])" if a not in ("firstly", "secondly")
                            else r"(?=,)")
    return rules


# -- gender (meaning-changing) -------------------------------------------------------------------------
# One gendered word swapped for its counterpart ("her" is left alone: him or his is ambiguous).
_GENDER = [("he", "she"), ("his", "her"), ("himself", "herself"), ("man", "woman"), ("men", "women"),
           ("boy", "girl"), ("boys", "girls"), ("father", "mother"), ("fathers", "mothers"), ("son", "daughter"),
           ("sons", "daughters"), ("brother", "sister"), ("brothers", "sisters"), ("husband", "wife"),
           ("king", "queen"), ("kings", "queens"), ("male", "female"), ("males", "females"), ("uncle", "aunt"),
           ("grandfather", "grandmother"), ("gentleman", "lady"), ("gentlemen", "ladies"), ("prince", "princess"),
           ("nephew", "niece"), ("masculine", "feminine")]


def _gender_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for a, b in _GENDER:
        if a == "his":   # "his" -> "her" only; "her" back to "his"/"him" is ambiguous
            rules.append(_word_rule("gender: his -> her", a, b))
            continue
        rules += _both_ways("gender", a, b)
    return rules


# -- negation (meaning-changing) -----------------------------------------------------------------------
# "not" added after an auxiliary or modal (cannot for can), or removed after one.
_AUX = ("is", "are", "was", "were", "will", "would", "should", "could", "must", "may", "might", "does", "do", "did")


def _negation_rules() -> list[_Rule]:
    aux = "|".join(_AUX)
    return [
        _Rule("negation: AUX -> AUX not", re.compile(rf"(?<![\w'-])({aux}) (?!not\b)(?=[a-z])"),
              lambda m: m.group(1) + " not "),
        _Rule("negation: has/have/had + participle -> + not",
              re.compile(r"(?<![\w'-])(has|have|had) (?=been\b|[a-z]+ed\b)"), lambda m: m.group(1) + " not "),
        _Rule("negation: can -> cannot", re.compile(r"(?<![\w'-])([Cc])an (?=[a-z])"), lambda m: m.group(1) + "annot "),
        _Rule("negation: AUX not -> AUX", re.compile(rf"(?<![\w'-])({aux}|has|have|had) not (?=[a-z])"),
              lambda m: m.group(1) + " "),
        _Rule("negation: cannot -> can", re.compile(r"(?<![\w'-])([Cc])annot\b"), lambda m: m.group(1) + "an"),
        _Rule("negation: never -> always", re.compile(r"(?<![\w'-])[Nn]ever\b"),
              lambda m: _case_like(m.group(0), "always")),
    ]


# -- number (meaning-changing) -------------------------------------------------------------------------
# A demonstrative noun phrase changes number, with the verb right after it when it is a form of
# be/have: "this method is" -> "these methods are". Regular nouns only (plural in -s / -es / -ies).
_NOT_NOUNS = {"is", "was", "are", "were", "has", "have", "had", "will", "would", "can", "could", "should",
              "may", "might", "must", "does", "did", "do", "means", "one", "way", "time", "process",
              "analysis", "basis", "series", "species", "news", "mathematics", "physics", "economics",
              "and", "or", "of", "in", "to", "for", "with", "that", "this", "these", "those", "which",
              "also", "not", "new", "same", "kind", "sort", "type"}
_VERB_SG_PL = {"is": "are", "was": "were", "has": "have"}
_VERB_PL_SG = {v: k for k, v in _VERB_SG_PL.items()}


def plural(noun: str) -> str | None:
    """Regular plural of a singular noun; None when it looks irregular, uncountable or plural."""
    n = noun.lower()
    if len(n) < 3 or n in _NOT_NOUNS or n.endswith(("us", "is", "ics")):
        return None
    if n.endswith("s") and not n.endswith("ss"):
        return None
    if n.endswith(("ss", "x", "ch", "sh", "z")):
        return noun + "es"
    if n.endswith("y") and n[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if n.endswith(("man", "fe", "f", "o", "um", "on")):   # irregular candidates: men, wives, data, ...
        return None
    return noun + "s"


def singular(noun: str) -> str | None:
    """Singular of a regular plural (-ies, -ches/-shes/-sses/-xes, -s), None otherwise."""
    n = noun.lower()
    if len(n) < 4 or n in _NOT_NOUNS or not n.endswith("s") or n.endswith(("ss", "us", "is", "ics")):
        return None
    if n.endswith("ies"):
        return noun[:-3] + "y"
    if n.endswith(("ches", "shes", "sses", "xes", "zes")):
        return noun[:-2]
    return noun[:-1]


def _number_sub(m: re.Match) -> str | None:
    det, noun, verb = m.group(1), m.group(2), m.group(3)
    to_plural = det.lower() in ("this", "that")
    new_noun = plural(noun) if to_plural else singular(noun)
    if new_noun is None:
        return None
    new_det = {"this": "these", "that": "those", "these": "this", "those": "that"}[det.lower()]
    new_det = new_det.capitalize() if det[0].isupper() else new_det
    new_verb = ""
    if verb:
        v = verb.strip()
        table = _VERB_SG_PL if to_plural else _VERB_PL_SG
        if v.lower() not in table:
            return None
        new_verb = " " + table[v.lower()]
    return f"{new_det} {new_noun}{new_verb}"


def _number_rules() -> list[_Rule]:
    # the noun must be followed by be/have (which also changes) or by punctuation / "of"-free text end
    pat = re.compile(r"(?<![\w'-])(this|these|those|This|That|These|Those) ([a-z]{3,})"
                     r"(?:( is| was| has| are| were| have)\b|(?=[,;:]))")
    return [_Rule("number: demonstrative NP (+ be/have) swaps number", pat, _number_sub)]


_BUILDERS: dict[str, Callable[[], list[_Rule]]] = {
    "abbreviation": _abbreviation_rules, "contraction": _contraction_rules, "morphology": _morphology_rules,
    "punctuation": _punctuation_rules, "spelling": _spelling_rules, "synonym": _synonym_rules,
    "gender": _gender_rules, "negation": _negation_rules, "number": _number_rules,
}
_RULES: dict[str, list[_Rule]] = {}


def rules(edit_type: str) -> list[_Rule]:
    """The rules of ``edit_type`` (built once; the typo type has none: it edits characters)."""
    check_type(edit_type)
    if edit_type == "typo":
        return []
    if edit_type not in _RULES:
        _RULES[edit_type] = _BUILDERS[edit_type]()
    return _RULES[edit_type]


#: One line per rule family: (type, family, what it does, example before, example after).
_TABLE = [
    ("abbreviation", "names and phrases", "full form <-> abbreviation (United States/U.S., for example/e.g.)", "the United States", "the U.S."),
    ("abbreviation", "titles, months, units", "only before a name / a day or year / after a number", "Doctor Smith", "Dr. Smith"),
    ("abbreviation", "symbols", "N percent <-> N%; X and Y <-> X & Y between names", "10 percent", "10%"),
    ("contraction", "auxiliary + not", "do not/don't, is not/isn't, will not/won't, cannot/can't, ...", "they do not", "they don't"),
    ("contraction", "pronoun + verb", "I am/I'm, they are/they're, we have/we've, it is/it's (not before been/got)", "it is easy", "it's easy"),
    ("morphology", "past-tense doublets", "learned/learnt, burned/burnt, proved/proven, ...", "they learned", "they learnt"),
    ("morphology", "-ic / -ical", "geographic/geographical, analytic/analytical, ...", "geographic area", "geographical area"),
    ("morphology", "comparison", "more simple/simpler, most common/commonest, ...", "more simple", "simpler"),
    ("morphology", "-st / -wards variants", "amongst/among, whilst/while, upwards/upward, firstly,/first,", "amongst them", "among them"),
    ("punctuation", "commas", "drop a comma between words; serial comma; comma after an introductory word", "However the", "However, the"),
    ("punctuation", "quotes and brackets", "double <-> single quotes, straight <-> curly, (x) -> , x,", '"word"', "'word'"),
    ("spelling", "US <-> UK", "-or/-our, -er/-re, -ize/-ise and a list of pairs (gray/grey, ...)", "color", "colour"),
    ("synonym", "word lists", "both-way pairs (large/big) and one-way substitutions (difficult -> hard)", "a large area", "a big area"),
    ("typo", "one character operation", "swap two adjacent letters, drop or double one (never the first letter), in a word of 4+ letters", "between", "bewteen"),
    ("gender", "gendered words", "he/she, his -> her, man/woman, father/mother, king/queen, male/female, ...", "his work", "her work"),
    ("negation", "auxiliaries", "add not after is/are/was/can/should/... (can -> cannot), or remove it; never -> always", "it is easy", "it is not easy"),
    ("number", "demonstrative phrases", "this/that N (is/was/has) <-> these/those Ns (are/were/have)", "this method is", "these methods are"),
]


def rule_table() -> pd.DataFrame:
    """The written rules, one row per family: type, family, rule, example (before -> after)."""
    df = pd.DataFrame(_TABLE, columns=["type", "family", "rule", "before", "after"])
    df["meaning"] = ["preserved" if t in PRESERVING else "changed" for t in df["type"]]
    return df
