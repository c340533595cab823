"""Robustness of next-token distributions to meaning-preserving edits (paper §6, robustness).

The paper reports the Jensen-Shannon divergence (JSD) between a model's next-token distribution on
a text and on a meaning-preserving edit of it, per edit type (abbreviation, punctuation, spelling,
synonym, typos; the values are in ``papers/protot/claims.yaml``, from an aggregator; the paper's
unit, log base and exact protocol are unknown to us). This module rebuilds the measurement:

- Edit generators, one per type in :data:`EDIT_TYPES`: ``abbreviation``, ``punctuation``,
  ``spelling``, ``synonym``, ``typos``, and a meaning-*changing* control :data:`CONTROL`
  (``random_word``: one word replaced by a random unrelated word), the reference for "robust".
  Each is rule based and seeded: ``gen(text, rng)`` returns the edited text, or None when no rule
  applies. :func:`apply_edit` returns an :class:`Edit` with
  the rule used and where it was applied. Edits never touch the last word of the text (the
  continuation point stays the same), and may fall anywhere before it. The word lists below are
  small and hand written; each rule is documented where it is defined.
- :func:`make_contexts`: text contexts from documents (a paragraph piece starting at a sentence
  start and ending just before a word, so the next token is a word); :func:`make_pairs`: (original,
  edited) pairs, ``n`` per edit type, each context used at most once per type.
- :func:`jsd`, :func:`jsd_from_logits`, :func:`total_variation`: divergences along the last axis.
  JSD is in **bits** by default (``base=2``: bounded by 1); ``base=math.e`` gives nats (bounded by
  ln 2). Note that ``scipy.spatial.distance.jensenshannon`` returns the *square root* (the JS
  distance), another possible reading of the paper's numbers.
- :func:`score_pairs`: runs a causal LM on both texts of every pair (batched by token length, no
  padding) and returns, per pair, the JSD of the next-token distributions at the end of the
  context (``jsd``; the last word is never edited, so the continuation point is the same) and just
  after the edit (``jsd_after_edit``: the position whose next token is the first token after the
  edit), and for a ProtoT model the *routing change*: the total-variation distance between the
  read-gate distributions (over the layer's R prototypes) at the final position, per layer and
  their mean. With ``restore_routing=True`` it also measures the JSD when the edited run's
  final-position read gates are replaced by the original run's (all layers; the channel contents
  keep the edit), i.e. how much of the divergence goes through the final-position routing.
- :func:`bootstrap_ci`, :func:`paired_bootstrap_ci`, :func:`unpaired_bootstrap_ci`, :func:`spearman`,
  :func:`spearman_test`, :func:`partial_spearman`, :func:`spearman_ci`: the statistics.
- :func:`type_summary`, :func:`control_separation`, :func:`measure_robustness`: the claim
  ``protot/robustness-jsd`` as a :class:`compendium.claims.Measurement` from scored pairs.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from compendium.stats import bootstrap_diff_ci as unpaired_bootstrap_ci  # noqa: F401  (re-exported)
from compendium.stats import bootstrap_mean_ci as bootstrap_ci  # noqa: F401
from compendium.stats import paired_bootstrap_ci  # noqa: F401

EDIT_TYPES = ("abbreviation", "punctuation", "spelling", "synonym", "typos")
#: A meaning-*changing* control of the same size as a synonym edit: one word (4+ letters, before the
#: last word) replaced by a random unrelated word. "Robust" is judged against it.
CONTROL = "random-word"
ALL_TYPES = EDIT_TYPES + (CONTROL,)


@dataclass(frozen=True)
class Edit:
    """One applied edit: ``text`` is the edited text; ``text[start:start + len(after)]`` replaced
    ``original[start:end]`` (== ``before``)."""
    edit_type: str
    rule: str
    text: str
    start: int
    end: int
    before: str
    after: str


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


# -- typos -------------------------------------------------------------------------------------------
TYPO_OPS = ("swap", "drop", "duplicate")
_WORD = re.compile(r"(?<![\w'-])[A-Za-z]{4,}(?![\w'-])")


def _typo_sites(text: str, limit: int) -> list[re.Match]:
    return [m for m in _WORD.finditer(text) if m.end() <= limit]


# -- the control: a random unrelated word -------------------------------------------------------------
_RANDOM_WORDS = ("banana", "window", "river", "engine", "purple", "guitar", "mountain", "pencil", "ocean",
                 "blanket", "tiger", "castle", "violin", "carpet", "rocket", "garden", "kitchen", "planet",
                 "silver", "bicycle", "island", "coffee", "thunder", "ladder", "mirror", "dragon", "pocket",
                 "candle", "forest", "hammer", "velvet", "orange", "tunnel", "basket", "winter", "monkey",
                 "pepper", "bottle", "camera", "feather")


def _apply_random_word(text: str, rng: np.random.Generator, limit: int) -> Edit | None:
    sites = _typo_sites(text, limit)
    if not sites:
        return None
    m = sites[int(rng.integers(len(sites)))]
    choices = [w for w in _RANDOM_WORDS if w != m.group(0).lower()]
    new_w = _case_like(m.group(0), choices[int(rng.integers(len(choices)))])
    return Edit(CONTROL, "control: random word", text[:m.start()] + new_w + text[m.end():], m.start(), m.end(),
                m.group(0), new_w)


# -- the generators ----------------------------------------------------------------------------------
_RULES: dict[str, list[_Rule]] = {}


def rules(edit_type: str) -> list[_Rule]:
    """The rules of ``edit_type`` (built once)."""
    check_type(edit_type)
    if edit_type in ("typos", CONTROL):
        return []
    if edit_type not in _RULES:
        _RULES[edit_type] = {"abbreviation": _abbreviation_rules, "punctuation": _punctuation_rules,
                             "spelling": _spelling_rules, "synonym": _synonym_rules}[edit_type]()
    return _RULES[edit_type]


def check_type(edit_type: str) -> str:
    """``edit_type`` if it is one of :data:`ALL_TYPES`, else ValueError naming the valid ones."""
    if edit_type not in ALL_TYPES:
        raise ValueError(f"unknown edit type {edit_type!r}; valid: {', '.join(ALL_TYPES)}")
    return edit_type


def protected_start(text: str) -> int:
    """Index where the last word of ``text`` begins: edits must end at or before it."""
    stripped = text.rstrip()
    cut = max(stripped.rfind(" "), stripped.rfind("\n"))
    return cut + 1 if cut >= 0 else 0


def _as_rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def apply_edit(text: str, edit_type: str, rng=None, *, limit: int | None = None) -> Edit | None:
    """Apply one seeded edit of ``edit_type`` to ``text``; None when no rule applies.

    The edit lies entirely before ``limit`` (default: the start of the last word). ``rng`` is a
    ``numpy.random.Generator`` (or an int seed). A rule is drawn among the applicable ones
    (weighted), then a site uniformly.
    """
    check_type(edit_type)
    rng = _as_rng(rng)
    limit = protected_start(text) if limit is None else limit
    if edit_type == "typos":
        return _apply_typo(text, rng, limit)
    if edit_type == CONTROL:
        return _apply_random_word(text, rng, limit)
    cands: list[tuple[_Rule, list[tuple[int, int, str]]]] = []
    low = text.lower()
    for rule in rules(edit_type):
        if rule.literal is not None and rule.literal not in low:
            continue
        sites = []
        for m in rule.pattern.finditer(text):
            if m.end() > limit:
                break
            repl = rule.replace(m)
            if repl is None or repl == m.group(0):
                continue
            start, end = m.start(), m.end()
            if repl.endswith(".") and text[end:end + 1] == ".":   # "U.S." + "." -> one period
                end += 1
            sites.append((start, end, repl))
        if sites:
            cands.append((rule, sites))
    if not cands:
        return None
    w = np.array([r.weight for r, _ in cands], dtype=float)
    rule, sites = cands[int(rng.choice(len(cands), p=w / w.sum()))]
    start, end, repl = sites[int(rng.integers(len(sites)))]
    new = text[:start] + repl + text[end:]
    return Edit(edit_type, rule.name, new, start, end, text[start:end], repl)


def _apply_typo(text: str, rng: np.random.Generator, limit: int) -> Edit | None:
    sites = _typo_sites(text, limit)
    if not sites:
        return None
    op = TYPO_OPS[int(rng.integers(len(TYPO_OPS)))]
    m = sites[int(rng.integers(len(sites)))]
    w = m.group(0)
    if op == "swap":   # swap letters i, i+1 (i >= 1: the first letter stays), choosing a differing pair
        options = [i for i in range(1, len(w) - 1) if w[i] != w[i + 1]]
        if not options:
            op, options = "duplicate", None
        else:
            i = options[int(rng.integers(len(options)))]
            new_w = w[:i] + w[i + 1] + w[i] + w[i + 2:]
    if op == "drop":
        i = 1 + int(rng.integers(len(w) - 1))
        new_w = w[:i] + w[i + 1:]
    if op == "duplicate":
        i = 1 + int(rng.integers(len(w) - 1))
        new_w = w[:i + 1] + w[i] + w[i + 1:]
    new = text[:m.start()] + new_w + text[m.end():]
    return Edit("typos", f"typo: {op}", new, m.start(), m.end(), w, new_w)


def _generator(edit_type: str):
    def gen(text: str, rng=None) -> str | None:
        e = apply_edit(text, edit_type, rng)
        return None if e is None else e.text
    gen.__name__ = edit_type
    gen.__doc__ = f"The edited text (one seeded {edit_type} edit before the last word), or None if none applies."
    return gen


abbreviation = _generator("abbreviation")
punctuation = _generator("punctuation")
spelling = _generator("spelling")
synonym = _generator("synonym")
typos = _generator("typos")
random_word = _generator(CONTROL)
GENERATORS = {"abbreviation": abbreviation, "punctuation": punctuation, "spelling": spelling,
              "synonym": synonym, "typos": typos, CONTROL: random_word}


def generator(edit_type: str):
    """The generator function of ``edit_type`` (ValueError naming the valid types otherwise)."""
    return GENERATORS[check_type(edit_type)]


# -- contexts and pairs --------------------------------------------------------------------------
_SENT_START = re.compile(r"(?:^|(?<=[.!?] ))(?=[A-Z\"\u201c(])")


def make_contexts(texts: Iterable[str], *, min_chars: int = 150, max_chars: int = 400,
                  seed: int = 0, max_contexts: int | None = None) -> list[str]:
    """One context per paragraph (newline-separated piece) of at least ``min_chars`` characters:
    it starts at a sentence start and ends just before a space (the next token begins a word),
    ``min_chars``..``max_chars`` characters long. Seeded; returned in a seeded random order."""
    rng = np.random.default_rng(seed)
    out = []
    for doc in texts:
        for para in doc.split("\n"):
            para = para.strip()
            if len(para) < min_chars + 1:
                continue
            starts = [m.start() for m in _SENT_START.finditer(para) if len(para) - m.start() > min_chars]
            if not starts:
                continue
            s = starts[int(rng.integers(len(starts)))]
            ends = [i for i in range(s + min_chars, min(s + max_chars, len(para) - 1) + 1)
                    if para[i] == " " and para[i - 1] != " " and para[i + 1:i + 2].isalnum()]
            if not ends:
                continue
            out.append(para[s:ends[int(rng.integers(len(ends)))]])
    order = rng.permutation(len(out))
    out = [out[i] for i in order]
    return out[:max_contexts] if max_contexts is not None else out


@dataclass(frozen=True)
class Pair:
    edit_type: str
    rule: str
    original: str
    edited: str
    context_id: int
    chars_after: int      # characters of the original after the edit (its distance from the end)
    before: str
    after: str


def make_pairs(contexts: Sequence[str], n_per_type: int | dict, *, types: Sequence[str] = EDIT_TYPES,
               seed: int = 0) -> pd.DataFrame:
    """Up to ``n_per_type`` (original, edited) pairs per edit type (an int, or {type: n}): contexts
    are visited in a seeded order per type and each used at most once per type. A DataFrame of
    :class:`Pair` rows. The draw for one type does not depend on the other types requested."""
    rows = []
    for t in types:
        check_type(t)
        rng = np.random.default_rng([seed, ALL_TYPES.index(t)])
        n = n_per_type[t] if isinstance(n_per_type, dict) else n_per_type
        if n <= 0:
            continue
        got = 0
        for ci in rng.permutation(len(contexts)):
            e = apply_edit(contexts[ci], t, rng)
            if e is None:
                continue
            rows.append(asdict(Pair(t, e.rule, contexts[ci], e.text, int(ci), len(contexts[ci]) - e.end, e.before, e.after)))
            got += 1
            if got >= n:
                break
    return pd.DataFrame(rows, columns=[f for f in Pair.__dataclass_fields__])


# -- divergences ---------------------------------------------------------------------------------
def _t(x) -> torch.Tensor:
    return x.double() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x), dtype=torch.float64)


def jsd_from_logits(logits_p, logits_q, base: float = 2.0) -> torch.Tensor:
    """Jensen-Shannon divergence between softmax(logits_p) and softmax(logits_q) along the last axis
    (float64). ``base=2``: bits, in [0, 1]; ``base=math.e``: nats, in [0, ln 2]."""
    lp = torch.log_softmax(_t(logits_p), dim=-1)
    lq = torch.log_softmax(_t(logits_q), dim=-1)
    return _jsd_logs(lp, lq, base)


def _jsd_logs(lp: torch.Tensor, lq: torch.Tensor, base: float) -> torch.Tensor:
    lm = torch.logaddexp(lp, lq) - math.log(2.0)
    p, q = lp.exp(), lq.exp()
    kl_pm = torch.where(p > 0, p * (lp - lm), torch.zeros_like(p)).sum(-1)
    kl_qm = torch.where(q > 0, q * (lq - lm), torch.zeros_like(q)).sum(-1)
    return (0.5 * (kl_pm + kl_qm)).clamp(min=0.0) / math.log(base)


def jsd(p, q, base: float = 2.0) -> torch.Tensor:
    """Jensen-Shannon divergence between probability vectors ``p`` and ``q`` (last axis; they are
    normalised to sum 1; zeros allowed). Bits by default (``base=2``)."""
    p, q = _t(p), _t(q)
    if (p < 0).any() or (q < 0).any():
        raise ValueError("probabilities must be non-negative")
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    lp, lq = torch.log(p), torch.log(q)       # -inf where 0: handled in _jsd_logs
    return _jsd_logs(lp, lq, base)


def total_variation(p, q) -> torch.Tensor:
    """Total-variation distance 0.5 * sum |p - q| along the last axis (in [0, 1])."""
    return 0.5 * (_t(p) - _t(q)).abs().sum(-1)


# -- scoring a model ---------------------------------------------------------------------------------
def _is_protot(model) -> bool:
    from protot.models.protot import ProtoMixer
    layers = getattr(model, "layers", None)
    return layers is not None and isinstance(layers[0].mixer, ProtoMixer)


def encode(tokenizer, texts: Sequence[str], bos: int | None) -> list[list[int]]:
    """Token ids of each text (no special tokens), with ``bos`` prepended when not None."""
    pre = [] if bos is None else [int(bos)]
    return [pre + list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def _length_batches(seqs: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_len.setdefault(len(s), []).append(i)
    return [idx[j:j + batch_size] for _, idx in sorted(by_len.items()) for j in range(0, len(idx), batch_size)]


@torch.no_grad()
def _final(model, seqs, batch_size: int, device, gates: bool, *, at=None, read_override=None, desc: str = "",
           progress: bool = True) -> dict:
    """Run ``model`` on token lists ``seqs`` (batched by equal length, no padding). Returns a dict:
    ``logits`` (N, V): final position; ``logits_at`` (N, V): position ``at[i]`` of sequence i (when
    ``at`` is given); for ProtoT ``read`` / ``read_at`` (N, L, R): read gates there, and ``proj``
    (N, L, P): the final-position read projections. ``read_override`` (N, L, P) replaces the
    final-position read projection of every layer (so its read gates become those of the override)."""
    from tqdm.auto import tqdm

    N = len(seqs)
    res: dict[str, torch.Tensor] = {}

    def put(key, i, value):
        if key not in res:
            res[key] = torch.empty(N, *value.shape[1:])
        res[key][i] = value

    mixers = [b.mixer for b in model.layers] if gates else []
    for idx in tqdm(_length_batches(seqs, batch_size), desc=desc, leave=False, disable=not progress):
        ids = torch.tensor([seqs[i] for i in idx], dtype=torch.long, device=device)
        captured: list[torch.Tensor] = []
        originals = []
        for l, mx in enumerate(mixers):
            # Wrap the mixer's gates: capture the final position's read projection (W_r x, or the
            # shared W_k x) and, with an override, recompute only the READ gate there from it (with
            # shared keys the write gate keeps the token's own projection).
            def gates_fn(x, l=l, mx=mx, orig=mx.gates):
                w, r = orig(x)
                proj_layer = mx.key_proj if mx.config.shared_keys else mx.read_proj
                proj = proj_layer(x[:, -1:])                                   # (B, 1, P)
                if read_override is not None:
                    proj = read_override[idx, l].to(proj).unsqueeze(1)
                    r = r.clone()
                    r[:, -1:] = mx.gate(proj, mx.config.read_temperature, mx.mask_read, mx.clamp_read)
                captured.append(proj[:, 0].detach().float().cpu())
                return w, r
            originals.append(mx)
            mx.gates = gates_fn
        kw = {"output_gates": True} if gates else {}
        try:
            out = model(ids, use_cache=False, logits_to_keep=1, output_hidden_states=at is not None, **kw)
        finally:
            for mx in originals:
                del mx.gates   # back to the class's method
        put("logits", idx, out.logits[:, -1].float().cpu())
        rows = torch.arange(len(idx), device=ids.device)
        if at is not None:
            pos = torch.tensor([at[i] for i in idx], device=ids.device)
            h = out.hidden_states[-1][rows, pos]                           # (B, d), before the final norm
            put("logits_at", idx, model.lm_head(model.norm(h)).float().cpu())
        if gates:
            put("read", idx, torch.stack([g["read_gate"][:, -1].float().cpu() for g in out.gates], dim=1))
            put("proj", idx, torch.stack(captured, dim=1))
            if at is not None:
                put("read_at", idx, torch.stack([g["read_gate"][rows, pos].float().cpu() for g in out.gates], dim=1))
    return res


def score_pairs(model, tokenizer, pairs: pd.DataFrame, *, batch_size: int = 32, device="cpu",
                bos: int | None = None, base: float = 2.0, restore_routing: bool = False,
                chunk: int = 512, progress: bool = True, desc: str = "") -> pd.DataFrame:
    """Score every (original, edited) pair of ``pairs`` (columns ``original``, ``edited``).

    Columns returned (one row per pair, same index):

    - ``jsd``: JSD of the next-token distributions at the **end** of original vs edited text (the
      same continuation point: the last word is never edited);
    - ``jsd_after_edit``: JSD at the position just after the edit: the last token before the
      common token suffix, whose next token (the first token after the edit) is the same in both;
    - ``tokens_orig``, ``tokens_edit``, ``tokens_after`` (length of the common token suffix: how
      many tokens the end lies after the edit);
    - ProtoT only: ``route_tv`` (mean over layers of the total-variation distance between the
      read-gate distributions at the final position), ``route_tv_L<l>`` per layer,
      ``route_tv_after_edit`` (the same just after the edit); with ``restore_routing``,
      ``jsd_restored``: the end JSD when the edited run's final-position read gates (all layers)
      are set to the original run's (channel contents keep the edit).

    Sequences are batched by equal length (no padding); ``chunk`` pairs are held in memory at a time.
    """
    gates = _is_protot(model)
    if restore_routing and not gates:
        raise ValueError("restore_routing needs a ProtoT model (read gates)")
    model.eval()
    orig = encode(tokenizer, pairs["original"].tolist(), bos)
    edit = encode(tokenizer, pairs["edited"].tolist(), bos)
    out: dict[str, list] = {"jsd": [], "jsd_after_edit": [], "tokens_orig": [], "tokens_edit": [], "tokens_after": []}
    from tqdm.auto import tqdm
    starts = range(0, len(orig), chunk)
    for s in tqdm(starts, desc=desc or "pairs", disable=not progress or len(starts) < 2):
        o, e = orig[s:s + chunk], edit[s:s + chunk]
        suffix = [_common_suffix(a, b) for a, b in zip(o, e)]
        at_o = [max(len(a) - n - 1, 0) for a, n in zip(o, suffix)]
        at_e = [max(len(b) - n - 1, 0) for b, n in zip(e, suffix)]
        ro = _final(model, o, batch_size, device, gates, at=at_o, desc=f"{desc} original", progress=progress)
        re_ = _final(model, e, batch_size, device, gates, at=at_e, desc=f"{desc} edited", progress=progress)
        out["jsd"] += jsd_from_logits(ro["logits"], re_["logits"], base).tolist()
        out["jsd_after_edit"] += jsd_from_logits(ro["logits_at"], re_["logits_at"], base).tolist()
        out["tokens_orig"] += [len(x) for x in o]
        out["tokens_edit"] += [len(x) for x in e]
        out["tokens_after"] += suffix
        if gates:
            tv = total_variation(ro["read"], re_["read"])                       # (n, L)
            for l in range(tv.shape[1]):
                out.setdefault(f"route_tv_L{l}", []).extend(tv[:, l].tolist())
            out.setdefault("route_tv", []).extend(tv.mean(1).tolist())
            out.setdefault("route_tv_after_edit", []).extend(
                total_variation(ro["read_at"], re_["read_at"]).mean(1).tolist())
        if restore_routing:
            rr = _final(model, e, batch_size, device, gates, read_override=ro["proj"], desc=f"{desc} restored",
                        progress=progress)
            if not torch.allclose(rr["read"], ro["read"], atol=1e-5):
                raise RuntimeError("restoring the read gates failed (final-position gates differ)")
            out.setdefault("jsd_restored", []).extend(jsd_from_logits(ro["logits"], rr["logits"], base).tolist())
    return pd.DataFrame(out, index=pairs.index)


def _common_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


# -- statistics (the bootstrap intervals live in compendium.stats) ---------------------------------
def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    rx = pd.Series(np.asarray(x, dtype=float)).rank().to_numpy()
    ry = pd.Series(np.asarray(y, dtype=float)).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def partial_spearman(x, y, z) -> float:
    """Spearman correlation of ``x`` and ``y`` controlling for ``z`` (partial correlation of the ranks)."""
    rxy, rxz, ryz = spearman(x, y), spearman(x, z), spearman(y, z)
    return float((rxy - rxz * ryz) / math.sqrt(max((1 - rxz ** 2) * (1 - ryz ** 2), 1e-300)))


def spearman_ci(x, y, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the Spearman correlation (pairs resampled)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        i = rng.integers(0, len(x), len(x))
        vals.append(spearman(x[i], y[i]))
    vals = np.asarray(vals)
    vals = vals[np.isfinite(vals)]
    a = (1 - level) / 2
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1 - a))


def spearman_test(x, y) -> tuple[float, float, int]:
    """(rho, two-sided p-value, n) of the Spearman rank correlation (scipy.stats.spearmanr)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or len(x) < 3:
        raise ValueError(f"spearman_test needs two samples of the same length >= 3, got {x.shape} and {y.shape}")
    res = stats.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue), int(len(x))


# -- the claim's measurement ---------------------------------------------------------------------------
def type_summary(pairs: pd.DataFrame, scores: pd.DataFrame, col: str = "jsd", *, n_boot: int = 2000,
                 seed: int = 0) -> pd.DataFrame:
    """Per edit type (index; :data:`ALL_TYPES` order, those present): mean, 95% bootstrap interval
    (ci_lo, ci_hi), median and n of ``scores[col]`` over the pairs of that type."""
    rows = {}
    for typ in [t for t in ALL_TYPES if t in set(pairs["edit_type"])]:
        x = scores.loc[pairs.index[pairs["edit_type"] == typ], col]
        lo, hi = bootstrap_ci(x, n_boot=n_boot, seed=seed)
        rows[typ] = {"mean": float(x.mean()), "ci_lo": lo, "ci_hi": hi, "median": float(x.median()), "n": len(x)}
    return pd.DataFrame.from_dict(rows, orient="index")


def control_separation(summary: pd.DataFrame) -> tuple[bool, float]:
    """(separable, gap) from a :func:`type_summary`: separable when the control's interval lies above
    every meaning-preserving type's (control ci_lo > each type's ci_hi); gap = control ci_lo minus
    the largest ci_hi of the types (> 0 iff separable)."""
    if CONTROL not in summary.index:
        raise ValueError(f"the summary has no {CONTROL!r} (meaning-changing control) row")
    types = summary.drop(index=CONTROL)
    if types.empty:
        raise ValueError("the summary has no meaning-preserving edit type")
    gap = float(summary.loc[CONTROL, "ci_lo"] - types["ci_hi"].max())
    return bool(gap > 0), gap


def measure_robustness(pairs: pd.DataFrame, protot: pd.DataFrame, llama: pd.DataFrame, *,
                       replaced_prefix_cost: float, n_boot: int = 2000, seed: int = 0,
                       config: dict | None = None, evidence: dict | None = None):
    """``protot/robustness-jsd`` as a :class:`compendium.claims.Measurement`.

    ``pairs`` (columns edit_type, ...) and the :func:`score_pairs` results of ProtoT (with
    ``route_tv``) and LLaMA on them (same index). Values (see the claim's check in claims.yaml):

    - max_ratio_to_control: max over the meaning-preserving types of ProtoT's mean end JSD / its mean
      JSD under the meaning-changing control;
    - excess_over_llama_ci_low: max over the types of the lower end of the paired bootstrap interval
      of mean(ProtoT JSD - LLaMA JSD);
    - control_separable (LLaMA) and control_separable_protot (:func:`control_separation`);
    - replaced_prefix_cost_nats: ProtoT's context use (:mod:`protot.context_use`), passed in.

    Evidence: per-type means and intervals for both models, the ratios, the paired differences and
    the Spearman correlation of ProtoT's routing change with its JSD (rho, p-value, n) over the
    meaning-preserving pairs. Tables: robustness_jsd (per type and model), robustness_vs_llama.
    """
    from compendium import claims

    for name, sc in (("protot", protot), ("llama", llama)):
        if not sc.index.equals(pairs.index):
            raise ValueError(f"the {name} scores do not have the pairs' index")
    if "route_tv" not in protot:
        raise ValueError("the ProtoT scores have no route_tv column (score a ProtoT model)")
    types = [t for t in EDIT_TYPES if t in set(pairs["edit_type"])]
    if not types or CONTROL not in set(pairs["edit_type"]):
        raise ValueError(f"the pairs need meaning-preserving types and the control {CONTROL!r}")
    summ = {n: type_summary(pairs, sc, n_boot=n_boot, seed=seed) for n, sc in (("ProtoT", protot), ("LLaMA", llama))}
    sep_llama, gap_llama = control_separation(summ["LLaMA"])
    sep_protot, gap_protot = control_separation(summ["ProtoT"])
    ctrl_mean = summ["ProtoT"].loc[CONTROL, "mean"]
    ratios = {t: float(summ["ProtoT"].loc[t, "mean"] / ctrl_mean) for t in types}
    diff_rows = []
    for t in types + [CONTROL]:
        idx = pairs.index[pairs["edit_type"] == t]
        lo, hi = paired_bootstrap_ci(protot.loc[idx, "jsd"], llama.loc[idx, "jsd"], n_boot=n_boot, seed=seed)
        diff_rows.append({"edit_type": t, "protot_minus_llama": float(protot.loc[idx, "jsd"].mean() - llama.loc[idx, "jsd"].mean()),
                          "ci_lo": lo, "ci_hi": hi, "protot_below_llama_share": float((protot.loc[idx, "jsd"] < llama.loc[idx, "jsd"]).mean())})
    diffs = pd.DataFrame(diff_rows).set_index("edit_type")
    keep = pairs.index[pairs["edit_type"] != CONTROL]
    rho, pval, n = spearman_test(protot.loc[keep, "route_tv"], protot.loc[keep, "jsd"])
    table = pd.concat([s.assign(model=m) for m, s in summ.items()]).rename_axis("edit_type").reset_index()
    values = {"max_ratio_to_control": max(ratios.values()),
              "excess_over_llama_ci_low": float(diffs.loc[types, "ci_lo"].max()),
              "control_separable": sep_llama, "control_separable_protot": sep_protot,
              "replaced_prefix_cost_nats": float(replaced_prefix_cost)}
    ev = {"protot_mean_jsd": {t: float(summ["ProtoT"].loc[t, "mean"]) for t in types + [CONTROL]},
          "llama_mean_jsd": {t: float(summ["LLaMA"].loc[t, "mean"]) for t in types + [CONTROL]},
          "ratio_to_control": ratios, "separation_gap_llama": gap_llama, "separation_gap_protot": gap_protot,
          "protot_minus_llama": {t: float(diffs.loc[t, "protot_minus_llama"]) for t in types},
          "routing_spearman_rho": rho, "routing_spearman_p": pval, "routing_spearman_n": n,
          **(evidence or {})}
    return claims.Measurement(claim="protot/robustness-jsd", values=values, evidence=ev,
                              tables={"robustness_jsd": table, "robustness_vs_llama": diffs.reset_index()},
                              config=dict(config or {}, n_boot=n_boot, seed=seed))
