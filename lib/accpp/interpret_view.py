"""What a reader is shown of a signal-interpretation study (:mod:`accpp.interpret`,
:mod:`accpp.interpret_judge`): each description beside its judge score, and whether its
describer's own checks passed.

    described = [Described("instruction model", lm_desc, lm_table, describer_check(lm_table)), ...]
    descs = viewer_descriptions(signals, described, found, tok)     # accpp.viewer's descriptions=
    description_table(signals, described, found, tok)               # one row per signal and describer

A description is only text a model wrote; whether it says anything about the signal is what the
judge measures. So a description is never shown alone: it comes with its judge score (the balanced
accuracy of telling the signal's held-out top contexts from random ones with this description, and
with another signal's, from :func:`accpp.interpret_judge.judge_signals`) and with two checks of its
describer; a failed check marks it *not informative*:

1. the describer's check: over all signals, its descriptions beat another signal's with the judge,
   i.e. the bootstrap 95% interval of the mean gap lies above 0 (the claim's criterion, applied to
   this describer's descriptions; the same numbers a notebook records for the claim and for the
   baseline describer);
2. the description does not repeat a context it was shown: its first words (after a list number
   such as ``1.``) do not appear, in order, in one of the describer's contexts (a small instruction
   model often copies its first example instead of describing the contexts).

Nothing here changes what is measured: the checks are computed from the judge's tables and the
describers' inputs, for display.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from accpp.interpret import Signal, TopContexts, render_context
from compendium.stats import bootstrap_mean_ci

__all__ = ["Described", "describer_check", "copies_context", "viewer_descriptions", "description_table",
           "COPY_CHECK"]

COPY_CHECK = "does not repeat one of the contexts it was shown"
_WORDS = re.compile(r"\w+")
_LIST_NUMBER = re.compile(r"^\s*\d+\s*[.)]\s*")


@dataclass(frozen=True)
class Described:
    """One describer's output: its name, a description per signal, the judge's table for them
    (:func:`accpp.interpret_judge.judge_signals`, rows in signal order) and its check
    (:func:`describer_check`)."""
    name: str
    descriptions: Sequence[str]
    table: object   # pandas.DataFrame with ba_own, ba_other, gap
    check: dict


def describer_check(table, n_boot: int = 2000, seed: int = 0) -> dict:
    """``{"check": text, "passed": bool}``: the bootstrap 95% interval (over signals) of the mean gap
    between a signal's own description and another signal's lies above 0."""
    lo, hi = bootstrap_mean_ci(table["gap"].to_numpy(), n_boot=n_boot, seed=seed)
    return {"check": (f"its descriptions, over all {len(table)} signals, beat another signal's with the judge "
                      f"(mean gap 95% interval {lo:+.3f} to {hi:+.3f}, needs to lie above 0)"),
            "passed": bool(lo > 0)}


def copies_context(description: str, contexts: Sequence[str], n_words: int = 3) -> bool:
    """Whether ``description`` repeats one of ``contexts``: its first ``n_words`` words (fewer when it
    has fewer; at least two), list number removed, appear adjacent and in order in one context
    (case and punctuation ignored)."""
    words = _WORDS.findall(_LIST_NUMBER.sub("", description).lower())[:n_words]
    if len(words) < 2:
        return False
    k = len(words)
    for context in contexts:
        seen = _WORDS.findall(context.lower())
        if any(seen[i:i + k] == words for i in range(len(seen) - k + 1)):
            return True
    return False


def _rows(described: Sequence[Described], n: int):
    for d in described:
        if len(d.descriptions) != n or len(d.table) != n:
            raise ValueError(f"describer {d.name!r}: {len(d.descriptions)} descriptions and a judge table of "
                             f"{len(d.table)} rows for {n} signals")


def _entry(d: Described, i: int, shown: list[str]) -> dict:
    row = d.table.iloc[i]
    text = d.descriptions[i]
    return dict(description=text, describer=d.name,
                score={"own": float(row["ba_own"]), "other": float(row["ba_other"])},
                checks=[dict(d.check), {"check": COPY_CHECK, "passed": not copies_context(text, shown)}])


def viewer_descriptions(signals: Sequence[Signal], described: Sequence[Described], found: TopContexts, tokenizer,
                        n_contexts: int = 3) -> dict:
    """The viewer's ``descriptions=``: per signal (its ``(upstream, downstream, side, sing)`` key) the
    first describer's description with its score and checks, the first ``n_contexts`` contexts the
    describers saw, and the other describers' descriptions (``others``)."""
    if not described:
        raise ValueError("viewer_descriptions: no describer")
    _rows(described, len(signals))
    out = {}
    for i, s in enumerate(signals):
        contexts = found.describe(i)
        shown = [render_context(tokenizer, c) for c in contexts]
        first, *rest = [_entry(d, i, shown) for d in described]
        first["contexts"] = [(text, c.value) for text, c in zip(shown, contexts[:n_contexts])]
        if rest:
            first["others"] = rest
        out[s.key] = first
    return out


def description_table(signals: Sequence[Signal], described: Sequence[Described], found: TopContexts, tokenizer):
    """One row per signal and describer: the description, its judge score (own and another signal's
    description) and whether it is informative (both checks passed), and which check failed."""
    import pandas as pd

    _rows(described, len(signals))
    rows = []
    for i, s in enumerate(signals):
        shown = [render_context(tokenizer, c) for c in found.describe(i)]
        for d in described:
            e = _entry(d, i, shown)
            failed = [c["check"] for c in e["checks"] if not c["passed"]]
            rows.append(dict(signal=s.name, describer=d.name, description=e["description"], ba_own=e["score"]["own"],
                             ba_other=e["score"]["other"], informative=not failed,
                             failed="; ".join("describer check" if c != COPY_CHECK else "repeats a context"
                                              for c in failed)))
    return pd.DataFrame(rows)
