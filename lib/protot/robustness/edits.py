"""Sentences from the validation split and seeded edits of them (the pairs of the robustness check).

The authors' benchmark pairs a short sentence with an edited copy and compares the two next-token
distributions after the whole text. We rebuild the inputs from our own validation split:

- :func:`make_sentences`: single sentences (a capital letter to a final ``.``, ``?`` or ``!``,
  ``min_words``..``max_words`` words), de-duplicated, in a seeded order;
- :func:`apply_edit`: one edit of a type of :data:`EDIT_TYPES` (rules in
  :mod:`protot.robustness.rules`), drawn with a seeded generator: a rule among the applicable
  ones, then one of its sites. The final punctuation mark is never touched, so both texts end
  with the same character. None when no rule applies (the sentence is refused);
- :func:`make_pairs`: up to ``n`` pairs per type, each sentence used at most once per type.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from protot.robustness.rules import EDIT_TYPES, TYPO_OPS, check_type, rules


@dataclass(frozen=True)
class Edit:
    """One applied edit: ``text`` is the edited text; ``original[start:end]`` (== ``before``) was
    replaced by ``after``."""
    edit_type: str
    rule: str
    text: str
    start: int
    end: int
    before: str
    after: str


def _as_rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def final_mark(text: str) -> int:
    """Index of the final punctuation mark of ``text`` (edits end at or before it); ValueError when
    the text does not end with ``.``, ``?`` or ``!``."""
    t = text.rstrip()
    if not t or t[-1] not in ".?!":
        raise ValueError(f"a sentence must end with '.', '?' or '!': {text[-40:]!r}")
    return len(t) - 1


_WORD = re.compile(r"(?<![\w'-])[A-Za-z]{4,}(?![\w'-])")


def _typo(text: str, rng: np.random.Generator, limit: int) -> Edit | None:
    """Swap two adjacent letters, drop or double one (never the first letter) in a word of 4+ letters."""
    sites = [m for m in _WORD.finditer(text) if m.end() <= limit]
    if not sites:
        return None
    m = sites[int(rng.integers(len(sites)))]
    w = m.group(0)
    op = TYPO_OPS[int(rng.integers(len(TYPO_OPS)))]
    swaps = [i for i in range(1, len(w) - 1) if w[i] != w[i + 1]]
    if op == "swap" and not swaps:
        op = "duplicate"
    if op == "swap":
        i = swaps[int(rng.integers(len(swaps)))]
        new_w = w[:i] + w[i + 1] + w[i] + w[i + 2:]
    elif op == "drop":
        i = 1 + int(rng.integers(len(w) - 1))
        new_w = w[:i] + w[i + 1:]
    else:
        i = 1 + int(rng.integers(len(w) - 1))
        new_w = w[:i + 1] + w[i] + w[i + 1:]
    return Edit("typo", f"typo: {op}", text[:m.start()] + new_w + text[m.end():], m.start(), m.end(), w, new_w)


def sites(text: str, edit_type: str, limit: int | None = None) -> list[tuple[str, int, int, str]]:
    """Every (rule, start, end, replacement) of ``edit_type``'s rules in ``text`` that ends at or
    before ``limit`` (default: the final punctuation mark) and changes the text."""
    limit = final_mark(text) if limit is None else limit
    low, out = text.lower(), []
    for rule in rules(edit_type):
        if rule.literal is not None and rule.literal not in low:
            continue
        for m in rule.pattern.finditer(text):
            start, end = m.start(), m.end()
            repl = rule.replace(m)
            if repl is None or repl == m.group(0):
                continue
            if repl.endswith(".") and text[end:end + 1] == ".":   # "U.S." + "." -> one period
                end += 1
            if end > limit:
                continue
            out.append((rule.name, start, end, repl))
    return out


def apply_edit(text: str, edit_type: str, rng=None, *, limit: int | None = None) -> Edit | None:
    """One seeded edit of ``edit_type`` ending at or before ``limit`` (default: the final
    punctuation mark, so it is kept); None when no rule applies. A rule is drawn uniformly among
    the applicable ones, then one of its sites uniformly."""
    check_type(edit_type)
    rng = _as_rng(rng)
    limit = final_mark(text) if limit is None else limit
    if edit_type == "typo":
        return _typo(text, rng, limit)
    found = sites(text, edit_type, limit)
    if not found:
        return None
    names = sorted({s[0] for s in found})
    name = names[int(rng.integers(len(names)))]
    options = [s for s in found if s[0] == name]
    _, start, end, repl = options[int(rng.integers(len(options)))]
    return Edit(edit_type, name, text[:start] + repl + text[end:], start, end, text[start:end], repl)


_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"\u201c(])")
_SENTENCE = re.compile(r"[A-Z][^\n]*[.!?]")


def make_sentences(texts: Iterable[str], *, min_words: int = 6, max_words: int = 40, seed: int = 0,
                   max_sentences: int | None = None) -> list[str]:
    """Single sentences of ``texts``: paragraphs split after ``.``/``?``/``!`` before a capital
    letter or quote; kept when they start with a capital letter, end with ``.``/``?``/``!``, hold
    ``min_words``..``max_words`` words and are not a bare abbreviation split (the last word is not
    a single capital letter). De-duplicated; returned in a seeded order."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    seen, out = set(), []
    for doc in texts:
        for para in doc.split("\n"):
            for s in _SPLIT.split(para.strip()):
                s = s.strip()
                n = len(s.split())
                if not (min_words <= n <= max_words) or not _SENTENCE.fullmatch(s) or s in seen:
                    continue
                if re.search(r"(?:^|\s)[A-Z]\.$", s) or re.search(r"\b(?:Mr|Mrs|Dr|St|vs|etc|e\.g|i\.e)\.$", s):
                    continue
                seen.add(s)
                out.append(s)
    order = np.random.default_rng(seed).permutation(len(out))
    out = [out[i] for i in order]
    return out[:max_sentences] if max_sentences is not None else out


@dataclass(frozen=True)
class Pair:
    edit_type: str
    rule: str
    original: str
    edited: str
    sentence_id: int
    chars_after: int      # characters of the original after the edit (its distance from the end)
    before: str
    after: str


def make_pairs(sentences: Sequence[str], n_per_type: int | dict, *, types: Sequence[str] = EDIT_TYPES,
               seed: int = 0) -> pd.DataFrame:
    """Up to ``n_per_type`` (an int, or {type: n}) (original, edited) pairs per edit type:
    sentences are visited in a seeded order per type, each used at most once per type. A DataFrame
    of :class:`Pair` rows. The draw for one type does not depend on the other types requested."""
    rows = []
    for t in types:
        check_type(t)
        rng = np.random.default_rng([seed, EDIT_TYPES.index(t)])
        n = n_per_type[t] if isinstance(n_per_type, dict) else n_per_type
        got = 0
        for si in rng.permutation(len(sentences)):
            if got >= n:
                break
            e = apply_edit(sentences[si], t, rng)
            if e is None:
                continue
            rows.append(asdict(Pair(t, e.rule, sentences[si], e.text, int(si), len(sentences[si]) - e.end,
                                    e.before, e.after)))
            got += 1
    return pd.DataFrame(rows, columns=list(Pair.__dataclass_fields__))
