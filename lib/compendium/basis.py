"""What a verdict rests on, as the boards and the claims tables show it: the units (prompts,
contexts, blocks) and the model(s) of a result, the conditions that made it fail or left it
undecided, whether the two profiles disagree, and which claims are the compendium's own.

Everything here reads what the ledger already holds: a result entry as
:func:`compendium.tables.read_entry` returns it (the outcomes of :func:`compendium.judge.derive`:
``conditions`` with ``passed`` / ``undecided``, ``failed_preconditions``), the claim's
``min_units`` and ``protocol`` (claims.yaml) and the result's recorded ``config``. Nothing is
judged again, with one exception that is always named as such: a result recorded under an earlier
check has no verdict, but where it recorded the value of the check's main quantity, that value is
compared with the main condition on its own (:func:`leaning`) so that a value at odds with the other
profile's verdict is marked rather than hidden.

- units (:func:`units_of`): the ``min_units`` quantity's recorded value with its registered units
  (``67 validation contexts``); else a count the measurement recorded under a known name
  (:data:`COUNTS`, e.g. ``n_circuits``); else the sample sizes the result's ``config`` or, failing
  that, the claim's protocol at that profile names (every known count, in :data:`COUNTS` order);
- model (:func:`models_of`): the ``model`` / ``models`` the result's config records, else the
  protocol's (``model``, ``models``, ``<arch>_model``), else its ``model_size``;
- own claims (:func:`is_own`): ``source: compendium`` in claims.yaml (a claim this compendium makes,
  not the paper).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from compendium import checks

#: claims.yaml's ``source`` of a claim that is the compendium's own (not the paper's)
OWN_SOURCE = "compendium"
OWN_LABEL = "own claim"

#: recorded counts a result may rest on, by name, with their noun; the first found is shown
#: from a result's values; from its config or protocol, every one found, in this order
COUNTS: dict[str, str] = {
    "n_prompts": "prompts", "n_contexts": "contexts", "n_compared": "prompts", "n_circuits": "circuits",
    "n_parallel_prompts": "parallel prompts", "n_occurrences": "occurrences", "n_signals": "signals",
    "n_dev": "dev sentences", "n_rounds": "rounds", "blocks": "blocks", "n_traced": "traced prompts",
    "n_trace": "traced prompts", "n_traced_per_language": "traced prompts per language",
    "n_behaviour": "behaviour prompts", "prompts": "prompts", "eval_blocks": "blocks", "n_blocks": "blocks",
    "ppl_blocks": "blocks", "rounds": "rounds", "cost_rounds": "rounds", "pairs_per_type": "pairs per type",
    "n_per_type": "pairs per type",
}


def is_own(claim: checks.Claim) -> bool:
    """Whether the claim is the compendium's own (``source: compendium``), not the paper's."""
    return claim.source == OWN_SOURCE


def short_statement(text: str, limit: int = 90) -> str:
    """A claim's statement for a summary row or a board: its first sentence, parenthetical asides
    (`` (...)``) left out, cut at a word boundary to at most ``limit`` characters (``…`` marks a cut)."""
    text = " ".join(str(text).split())
    first = re.split(r"(?<![.\s][a-z]\.)(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0]   # not after "e.g."
    prev = None
    while prev != first:                                   # innermost asides first
        prev, first = first, re.sub(r"\s\([^()]*\)", "", first)
    if " (" in first and first.count("(") > first.count(")"):   # an aside the cut left open
        first = first[:first.rindex(" (")]
    first = re.sub(r"\s+([,.:;])", r"\1", first).strip()
    if len(first) <= limit:
        return first
    cut = first[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "\u2026"


@dataclass(frozen=True)
class Units:
    """What a result rests on: ``items`` are (count, noun, the recorded name); ``source`` is
    ``min_units`` (registered), ``values`` (recorded by the measurement), ``config`` (the sizes the
    run recorded) or ``protocol`` (the sizes registered for the profile)."""
    items: tuple[tuple[Any, str, str], ...]
    source: str

    @property
    def text(self) -> str:
        """All of it: ``67 validation contexts`` or ``8 traced prompts, 48 behaviour prompts``."""
        return ", ".join(f"{_count(n)} {noun}" for n, noun, _ in self.items)

    @property
    def short(self) -> str:
        """For a cell: the first count, with the head word of a registered noun (``67 contexts`` for
        ``67 validation contexts``), and how many more counts the full text names."""
        n, noun, _ = self.items[0]
        more = f" +{len(self.items) - 1}" if len(self.items) > 1 else ""
        return f"{_count(n)} {_head(noun) if self.source == 'min_units' else noun}{more}"

    @property
    def where(self) -> str:
        """Where the counts come from, in words (the hover and the details say it)."""
        names = ", ".join(name for _, _, name in self.items)
        return {"min_units": f"min_units quantity {names}", "values": f"recorded value {names}",
                "config": f"the run's recorded sizes ({names})",
                "protocol": f"the registered protocol's sizes ({names})"}[self.source]


def _count(n: Any) -> str:
    if isinstance(n, dict):                      # one count per model: the fewest
        return f"{min(n.values())}" if len(set(n.values())) == 1 else f"\u2265{min(n.values())}"
    return checks._fmt(n)


def _head(noun: str) -> str:
    """The noun's head word: the last word before any "of"/"per"/"with" (``validation blocks of
    256 tokens`` -> ``blocks``)."""
    words = re.split(r"\s+(?:of|per|with)\s+", noun.strip(), maxsplit=1)[0].split()
    return words[-1] if words else noun


def _is_count(v: Any) -> bool:
    if isinstance(v, dict):
        return bool(v) and all(_is_count(x) for x in v.values())
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def units_of(claim: checks.Claim, entry: dict | None, profile: str) -> Units | None:
    """The units ``entry`` (a result of ``claim`` at ``profile``) rests on (module docstring); None
    when nothing names a count (an exact invariant, a timing over context lengths)."""
    if entry is None:
        return None
    values = entry.get("values") if isinstance(entry.get("values"), dict) else {}
    mu = claim.min_units
    if mu is not None and _is_count(values.get(mu.quantity)):
        return Units(((values[mu.quantity], mu.units, mu.quantity),), "min_units")
    for name, noun in COUNTS.items():
        if _is_count(values.get(name)):
            return Units(((values[name], noun, name),), "values")
    config = entry.get("config") if isinstance(entry.get("config"), dict) else {}
    for source, sizes in (("config", config), ("protocol", claim.protocol_for(profile))):
        found = tuple((sizes[name], noun, name) for name, noun in COUNTS.items() if _is_count(sizes.get(name)))
        if found:
            return Units(found, source)
    return None


def _model_name(raw: Any) -> str:
    """``models/protot-authors-small: protot (10.2 M params ...)`` -> ``protot-authors-small``."""
    text = str(raw).strip()
    text = text[len("models/"):] if text.startswith("models/") else text
    return text.split(":", 1)[0].strip()


def _names(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str) and raw.strip():
        return (_model_name(raw),)
    if isinstance(raw, list):
        return tuple(_model_name(x) for x in raw if isinstance(x, str))
    if isinstance(raw, dict) and isinstance(raw.get("size"), str):   # {size, num_hidden_layers}: a built model
        layers = raw.get("num_hidden_layers")
        return (f"{raw['size']} size" + (f", {layers} layers" if layers else ""),)
    if isinstance(raw, dict):                    # {display name: "models/<name>: description"}
        vals = [v for v in raw.values() if isinstance(v, str)]
        return tuple(_model_name(v) for v in vals) if vals else tuple(str(k) for k in raw)
    return ()


def models_of(claim: checks.Claim, entry: dict | None, profile: str) -> tuple[str, ...]:
    """The model(s) a result was measured on (module docstring); () when none is named."""
    config = entry.get("config") if entry and isinstance(entry.get("config"), dict) else {}
    protocol = claim.protocol_for(profile)
    train = config.get("train")
    if isinstance(train, dict) and isinstance(train.get("arch"), str):   # a model the notebook trained itself
        return (f"{train['arch']} {train.get('size', '')}".strip() + " (trained here)",)
    order = _names(protocol.get("models"))               # the run's models in the protocol's order
    for sizes in (config, protocol):
        for key in ("model", "models"):
            found = tuple(dict.fromkeys(_names(sizes.get(key))))
            if found:
                return tuple(sorted(found, key=lambda m: order.index(m) if m in order else len(order)))
    arch = tuple(_model_name(v) for k, v in protocol.items() if k.endswith("_model") and isinstance(v, str))
    if arch:
        return arch
    size = protocol.get("model_size")
    if isinstance(size, str):
        layers = protocol.get("model_layers")
        return (f"{size} size" + (f", {layers} layers" if layers else ""),)
    return ()


def models_text(models: tuple[str, ...]) -> str:
    """For a cell: the first model, and how many more (``protot-authors-small +3``)."""
    if not models:
        return ""
    return models[0] + (f" +{len(models) - 1}" if len(models) > 1 else "")


# -- failing conditions -----------------------------------------------------------------------------
def threshold_text(c: dict) -> str:
    """The threshold of a condition's outcome (a mapping, as a result entry holds it) as text."""
    t = c.get("threshold")
    if isinstance(t, list) and len(t) == 2:
        return f"[{checks._fmt(t[0])}, {checks._fmt(t[1])}]"
    return repr(t) if isinstance(t, str) else checks._fmt(t)


def _interval(c: dict) -> str:
    lo, hi = c["interval_values"]
    return f"{checks._fmt(lo)} to {checks._fmt(hi)}"


def failing(entry: dict | None) -> list[str]:
    """What made the verdict of ``entry`` inconclusive or does-not-hold, as judge.derive found it:
    each failed precondition, each failed condition (its value and interval), each interval that
    straddles a threshold; [] for a result that holds, is measured only, or was not judged."""
    if entry is None or entry.get("derived_status") not in (checks.DOES_NOT_HOLD, checks.INCONCLUSIVE):
        return []
    out = [f"precondition {p.get('id')} failed: {p.get('quantity')} = {checks._fmt(p.get('value'))} "
           f"(needs {p.get('op')} {threshold_text(p)})" for p in entry.get("failed_preconditions") or []]
    for c in entry.get("conditions") or []:
        test = f"{c.get('quantity')} {c.get('op')} {threshold_text(c)}"
        if c.get("undecided"):
            out.append(f"{test} undecided: its interval {_interval(c)} straddles the threshold")
        elif not c.get("passed"):
            shown = checks._fmt(c.get("value")) + (f", interval {_interval(c)}" if c.get("interval_values") else "")
            out.append(f"{test} failed ({shown})")
    return out


def failing_short(entry: dict | None) -> str:
    """The first failing condition in a few words, for a summary cell (``fails name_path_share > 0.5``)."""
    if entry is None or entry.get("derived_status") not in (checks.DOES_NOT_HOLD, checks.INCONCLUSIVE):
        return ""
    pre = entry.get("failed_preconditions") or []
    if pre:
        return f"precondition {pre[0].get('id')}" + (f" +{len(pre) - 1}" if len(pre) > 1 else "")
    failed = [c for c in entry.get("conditions") or [] if not c.get("passed") and not c.get("undecided")]
    undecided = [c for c in entry.get("conditions") or [] if c.get("undecided")]
    first, word = (failed, "fails") if failed else (undecided, "undecided")
    if not first:
        return ""
    c = first[0]
    more = len(failed) + len(undecided) - 1
    return f"{word} {c.get('quantity')} {c.get('op')} {threshold_text(c)}" + (f" +{more}" if more else "")


# -- profiles that disagree -------------------------------------------------------------------------
def _main(claim: checks.Claim, entry: dict) -> dict | None:
    return next((c for c in entry.get("conditions") or [] if claim.check and c.get("quantity") == claim.check.quantity), None)


def _testable(cond: checks.Condition, value: Any) -> bool:
    if cond.op == "is":
        return isinstance(value, bool)
    if cond.op == "==":
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return checks._is_number(value)


@dataclass(frozen=True)
class Leaning:
    """Which side of the claim a result lies on: ``verdict`` True (holds) / False (does not hold) /
    None; ``main`` the check's main condition passed (True) / failed (False) / None (undecided or
    unknown); ``alone`` True when ``main`` comes from a result not judged, its value compared with
    the main condition on its own."""
    verdict: bool | None
    main: bool | None
    alone: bool = False


def leaning(claim: checks.Claim, entry: dict | None, other: dict | None = None) -> Leaning:
    """The :class:`Leaning` of ``entry``. A result recorded under an earlier check leans by its value
    alone, and only where it recorded the main quantity: in its values, or (a result of the older
    format, with no values) as its value in the unit the ``other`` profile's judged result records."""
    if entry is None or claim.check is None:
        return Leaning(None, None)
    status = entry.get("derived_status")
    verdict = {checks.HOLDS: True, checks.DOES_NOT_HOLD: False}.get(status)
    if status != checks.NOT_JUDGED:
        main = _main(claim, entry)
        decided = main is not None and not main.get("undecided")
        return Leaning(verdict, bool(main.get("passed")) if decided else None)
    values = entry.get("values") if isinstance(entry.get("values"), dict) else None
    cond = claim.check.main
    if values is not None and cond.quantity in values:
        value = values[cond.quantity]
    elif values is None and other is not None and other.get("derived_status") != checks.NOT_JUDGED \
            and entry.get("unit") and entry.get("unit") == other.get("unit"):
        value = entry.get("value")
    else:
        return Leaning(None, None)
    if not _testable(cond, value):
        return Leaning(None, None)
    return Leaning(None, bool(cond.test(value)), alone=True)


def disagreement(claim: checks.Claim, entry: dict | None, other: dict | None, other_profile: str) -> str:
    """Why ``entry`` is at odds with the verdict at ``other_profile`` (``other``), or "" when it is not:
    one holds where the other does not hold; or, where one has no such verdict (measured only, not
    judged), the check's main condition passes at one profile and fails at the other."""
    if entry is None or other is None or claim.check is None:
        return ""
    mine, theirs = leaning(claim, entry, other), leaning(claim, other, entry)
    if mine.verdict is not None and theirs.verdict is not None:
        if mine.verdict == theirs.verdict:
            return ""
        return f"at odds with {other_profile}, where it {'holds' if theirs.verdict else 'does not hold'}"
    if mine.main is None or theirs.main is None or mine.main == theirs.main:
        return ""
    main = claim.check.main.describe()
    side = "meets" if mine.main else "does not meet"
    alone = " on its value alone (recorded under an earlier check)" if mine.alone else ""
    there = "fails" if mine.main else "passes"
    return f"at odds with {other_profile}: {side} {main}{alone}, which {there} at {other_profile}"
