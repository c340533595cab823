"""Verdicts derived from recorded values and the registered check: one rule, applied when a
notebook concludes (:func:`compendium.claims.conclude`) and again every time a claims table is
built (:func:`derive`), so a table never shows a verdict that a file merely states.

The rule, for a claim with a check at a profile where it applies:

1. a failed power precondition (or ``min_units``, as precondition ``min-units``): *inconclusive*;
2. each condition of the check is decided by its value, or by its interval where it names one
   (``interval: [low, high]``): it *passes* when the whole interval lies on the claim's side of
   every threshold, *fails* when the whole interval lies on the other side, and is *undecided*
   when the interval straddles a threshold;
3. any condition that fails: *does not hold*; otherwise any undecided: *inconclusive: the
   interval straddles <threshold>*; otherwise *holds*.

A value of a check's condition may be recorded as ``None``, *not measured* (e.g. the gap to a model
that does not exist yet), only where a failed precondition makes the verdict *inconclusive* anyway:
that condition is then not decided; with every precondition passing, a value not measured cannot
be judged (UnjudgeableResult). Preconditions are always measured.

A result is judged only against the check and the protocol it was measured for (a claim's
``protocol``: the settings of its measurement, which its notebook reads with
:func:`compendium.claims.protocol`; a result records their hash, ``protocol_sha256``; one recorded
under another protocol is not judged when the claim's history has a dated line about the
change since the result, and refused otherwise): :func:`check_sha256` hashes the whole check at
the result's profile, everything that decides its verdict there (each condition's quantity,
comparator, threshold, interval rule and point reason, ``all_of``, the profiles where the check is
not applied, every precondition, ``min_units`` and the protocol at the profile); a result recorded
under another whole check (other than by its protocol alone, the case above), or before checks
were recorded at all, is *not judged (recorded under an earlier check)*. Results record the hash
scheme (``check_hash_scheme``); one recorded before the whole check was hashed is read by the
check and protocol it lists (:func:`recorded_check_sha256`).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from compendium import profiles
from compendium.checks import (
    DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, MEASURED_ONLY, NOT_JUDGED, _NUMERIC_OPS, Claim, Condition,
    _fmt, _is_number,
)

EARLIER_CHECK = "recorded under an earlier check"


class UnjudgeableResult(ValueError):
    """The recorded values cannot be judged by the registered check (a value of the wrong type,
    a non-finite number, an interval whose low end lies above its high end)."""


@dataclass(frozen=True)
class Outcome:
    """One condition applied to a recorded value (and its interval, where the condition names one).

    ``passed``: the condition holds; ``undecided``: its interval straddles a threshold (then
    ``passed`` is False but the condition has not failed either)."""
    condition: Condition
    value: Any
    passed: bool
    interval: tuple[float, float] | None = None
    undecided: bool = False

    @property
    def id(self) -> str | None:
        return self.condition.id

    @property
    def statement(self) -> str:
        return self.condition.statement

    @property
    def failed(self) -> bool:
        return not self.passed and not self.undecided

    def straddled(self) -> str:
        """The threshold(s) the interval straddles, as text."""
        c, (lo, hi) = self.condition, self.interval
        ends = c.threshold if c.op in ("between", "outside") else (c.threshold,)
        return " and ".join(_fmt(t) for t in ends if lo <= t <= hi) or c.threshold_text()

    def describe(self) -> str:
        c = self.condition
        shown = _fmt(self.value)
        if self.interval is not None:
            shown += f", interval [{_fmt(self.interval[0])}, {_fmt(self.interval[1])}]"
        answer = "yes" if self.passed else (f"undecided: the interval straddles {self.straddled()}"
                                            if self.undecided else "no")
        return f"{c.quantity} = {shown} (needs {c.op} {c.threshold_text()}: {answer})"

    def as_dict(self) -> dict:
        out = {**self.condition.as_dict(), "value": self.value, "passed": self.passed}
        if self.interval is not None:
            out.update(interval_values=list(self.interval), undecided=self.undecided)
        return out


def _lookup(name: str, values: dict, evidence: dict) -> Any:
    """A recorded value by name: from ``values``, else ``evidence``; a dotted name walks into a
    mapping of the evidence (``specificity.corrected.ci_high``)."""
    if name in values:
        return values[name]
    here: Any = evidence
    for part in name.split("."):
        if not isinstance(here, dict) or part not in here:
            raise KeyError(name)
        here = here[part]
    return here


def _decide(c: Condition, value: Any, values: dict, evidence: dict) -> Outcome:
    if c.interval is None:
        return Outcome(c, value, bool(c.test(value)))
    try:
        lo, hi = (_lookup(n, values, evidence) for n in c.interval)
    except KeyError as missing:
        raise LookupError(f"the interval end {missing.args[0]!r}") from None
    for name, end in zip(c.interval, (lo, hi)):
        if not _is_number(end) or not math.isfinite(end):
            raise UnjudgeableResult(f"interval end {name!r} = {end!r} must be a finite number")
    if lo > hi:
        raise UnjudgeableResult(f"interval [{c.interval[0]}, {c.interval[1]}] = [{lo}, {hi}] has its low end above its high end")
    if c.op in ("between", "outside"):
        a, b = c.threshold
        inside, apart = a <= lo and hi <= b, hi < a or lo > b
        passed, failed = (inside, apart) if c.op == "between" else (apart, inside)
    else:
        passed, failed = c.test(lo) and c.test(hi), not c.test(lo) and not c.test(hi)
    return Outcome(c, value, bool(passed), (float(lo), float(hi)), undecided=not passed and not failed)


def not_measured(claim: Claim, values: dict) -> tuple[Condition, ...]:
    """The check's conditions whose value is recorded as None (not measured)."""
    return () if claim.check is None else tuple(c for c in claim.check.conditions if values[c.quantity] is None)


def check_types(claim: Claim, values: dict) -> None:
    """Raise UnjudgeableResult for a value of the wrong type (or non-finite) for its test; a check
    condition's value may be None (not measured, see the module docstring), a precondition's may not."""
    skip = not_measured(claim, values)
    for cond in claim.all_conditions():
        if cond in skip:      # a check condition (a precondition differs from it by its id)
            continue
        v = values[cond.quantity]
        where = f"{claim.key}: value {cond.quantity!r} = {v!r}"
        if cond.op in _NUMERIC_OPS and not _is_number(v):
            raise UnjudgeableResult(f"{where} must be a number for op '{cond.op}'")
        if cond.op in _NUMERIC_OPS and not math.isfinite(v):
            raise UnjudgeableResult(f"{where} is not finite")
        if cond.op == "is" and not isinstance(v, bool):
            raise UnjudgeableResult(f"{where} must be true or false for op 'is'")
        if cond.op == "==" and (_is_number(cond.threshold) != _is_number(v) or isinstance(v, bool)):
            raise UnjudgeableResult(f"{where} cannot be compared with {cond.threshold!r} by '=='")


def evaluate(claim: Claim, values: dict, profile: str, evidence: dict | None = None
             ) -> tuple[str, tuple[Outcome, ...], tuple[Outcome, ...], str]:
    """(verdict, outcomes of the check's conditions, outcomes of the preconditions, reason).

    Raises UnjudgeableResult for a value of the wrong type, LookupError naming an interval end
    that neither ``values`` nor ``evidence`` holds."""
    evidence = evidence or {}
    check_types(claim, values)
    pre = tuple(Outcome(c, values[c.quantity], bool(c.test(values[c.quantity]))) for c in claim.all_preconditions())
    unmeasured = not_measured(claim, values)
    conds = () if claim.check is None else tuple(
        _decide(c, values[c.quantity], values, evidence) for c in claim.check.conditions if values[c.quantity] is not None)
    failed_pre = [o for o in pre if not o.passed]
    if claim.check is None:
        return MEASURED_ONLY, conds, pre, "The claim has no registered check."
    # A profile bound to scale or hardware is "measured only" whatever its preconditions say: the
    # check is not applied there, so there is no test whose power could be in question.
    if profiles.base(profile) in claim.check.measured_only_at:
        return (MEASURED_ONLY, conds, pre,
                f"At profile `{profile}` the result is bound to scale or hardware, so the check "
                f"({claim.check.describe()}) is not applied.")
    if failed_pre:
        why = "; ".join(f"{o.id} ({o.statement}): {o.describe()}" for o in failed_pre)
        gaps = f" Not measured: {', '.join(c.quantity for c in unmeasured)}." if unmeasured else ""
        return INCONCLUSIVE, conds, pre, f"Failed precondition(s): {why}.{gaps}"
    if unmeasured:
        raise UnjudgeableResult(
            f"{claim.key}: {', '.join(repr(c.quantity) for c in unmeasured)} not measured (None) although every "
            f"precondition passed; a value may be left unmeasured only where a failed precondition makes the "
            f"verdict inconclusive")
    detail = "; ".join(o.describe() for o in conds)
    reg = f" ({claim.check.registration()})"
    if any(o.failed for o in conds):
        return DOES_NOT_HOLD, conds, pre, f"Check{reg}: {detail}."
    undecided = [o for o in conds if o.undecided]
    if undecided:
        which = "; ".join(f"the interval of {o.condition.quantity} straddles {o.straddled()}" for o in undecided)
        return INCONCLUSIVE, conds, pre, f"Inconclusive: {which}. Check{reg}: {detail}."
    return HOLDS, conds, pre, f"Check{reg}: {detail}."


# --------------------------------------------------------------------------------------------
# which check a result was measured for
# --------------------------------------------------------------------------------------------
#: The version of the check hash a result records (``check_hash_scheme``). 2: the whole check at
#: the result's profile (see :func:`check_sha256`); results without the field were recorded under
#: scheme 1 (quantities, comparators, thresholds, measured_only_at and the explicit preconditions
#: only) and are read by :func:`recorded_check_sha256`.
CHECK_HASH_SCHEME = 2


def _sha256(definition: dict) -> str:
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()


def _listed(t: Any) -> Any:
    return list(t) if isinstance(t, (list, tuple)) else t


def _condition_def(quantity: Any, op: Any, threshold: Any, interval: Any = None, point: Any = None) -> dict:
    return {"quantity": quantity, "op": op, "threshold": _listed(threshold),
            "interval": None if interval is None else list(interval),
            "point": point.strip() if isinstance(point, str) else point}


def _precondition_def(p: dict) -> dict:
    return {"id": p["id"], "quantity": p["quantity"], "op": p["op"], "threshold": _listed(p["threshold"])}


def _whole_sha256(conditions: list[dict] | None, measured_only_at: Any, preconditions: list[dict],
                  protocol: dict) -> str:
    return _sha256({"scheme": CHECK_HASH_SCHEME, "check": conditions,
                    "measured_only_at": sorted(measured_only_at or []),
                    "preconditions": preconditions, "protocol": protocol})


def check_sha256(claim: Claim, profile: str) -> str:
    """Hash of the whole check of ``claim`` at ``profile``: everything that decides its verdict
    there. Each condition (the main one and ``all_of``) with its quantity, comparator, threshold,
    interval rule and ``point`` reason; ``measured_only_at``; every precondition (id, quantity,
    comparator, threshold) and ``min_units`` (as precondition ``min-units``); the protocol at the
    profile (the ``all`` settings, then the profile's own). Not in it: what only words or asserts
    (statements, ``assert_at``, ``expect``, ``registered``, the history)."""
    c = claim.check
    conds = None if c is None else [_condition_def(x.quantity, x.op, x.threshold, x.interval, x.point)
                                    for x in c.conditions]
    pre = [_precondition_def(p.as_dict()) for p in claim.all_preconditions()]
    return _whole_sha256(conds, None if c is None else c.measured_only_at, pre, claim.protocol_for(profile))


def raw_check_sha256(item: dict, profile: str) -> str:
    """:func:`check_sha256` of a claim as written in a claims.yaml (a mapping), of any version:
    for checking, against the repository's history, which commit registered a check."""
    c = item.get("check")
    conds = None if c is None else [
        _condition_def(x["quantity"], x["op"], x["threshold"], x.get("interval"), x.get("point"))
        for x in [c, *(c.get("all_of") or [])]]
    pre = [_precondition_def(p) for p in item.get("preconditions") or []]
    mu = item.get("min_units")
    if mu is not None:
        pre.append({"id": "min-units", "quantity": str(mu["quantity"]), "op": ">=", "threshold": mu["at_least"]})
    proto = item.get("protocol") or {}
    base = profiles.base(profile)
    own = proto.get(profile, {}) if profile != base else {}
    settings = {**proto.get("all", {}), **proto.get(base, {}), **own}
    return _whole_sha256(conds, None if c is None else c.get("measured_only_at"), pre, settings)


def _recorded_parts(entry: dict) -> tuple[list[dict] | None, Any, list[dict]] | None:
    """(conditions, measured_only_at, preconditions) as a result recorded them, in the hash's form;
    None for a result that recorded no check."""
    if "registered_check" not in entry or not isinstance(entry.get("preconditions"), list):
        return None
    rc = entry["registered_check"]
    pre = [_precondition_def(p) for p in entry["preconditions"]]
    if rc is None:
        return None, [], pre
    conds = [_condition_def(x["quantity"], x["op"], x["threshold"], x.get("interval"), x.get("point"))
             for x in [rc, *(rc.get("all_of") or [])]]
    return conds, rc.get("measured_only_at") or [], pre


def _scheme1_sha256(conds: list[dict] | None, measured_only_at: Any, pre: list[dict]) -> str:
    """The hash results recorded before scheme 2 (kept to read them): quantities, comparators,
    thresholds, measured_only_at and the explicit preconditions (min_units was not in it)."""
    return _sha256({
        "check": None if conds is None else [{k: x[k] for k in ("quantity", "op", "threshold")} for x in conds],
        "measured_only_at": [] if conds is None else sorted(measured_only_at),
        "preconditions": [p for p in pre if p["id"] != "min-units"],
    })


def recorded_check_sha256(entry: dict, protocol: dict | None = None) -> str | None:
    """The scheme-2 hash of the whole check ``entry`` was recorded under; None for a result that
    recorded no check (judged by its notebook's own test).

    A result of scheme 2 (``check_hash_scheme: 2``) states it (``check_sha256``). An earlier one
    recorded its whole check beside a scheme-1 hash: its check as listed (conditions with their
    interval and point, its preconditions, ``min-units`` among them) and the protocol it ran
    (``protocol``), so its scheme-2 hash is computed from them, provided its scheme-1 hash matches
    what it lists (otherwise the stated hash is returned, and matches no check). ``protocol``, when
    given, replaces the recorded protocol (to ask whether the check alone differs)."""
    parts = _recorded_parts(entry)
    stated = entry.get("check_sha256")
    if entry.get("check_hash_scheme") == CHECK_HASH_SCHEME and stated and protocol is None:
        return str(stated)
    if parts is None:
        return None if not stated else str(stated)
    if entry.get("check_hash_scheme") is None and stated and str(stated) != _scheme1_sha256(*parts):
        return str(stated)
    ran = (entry.get("protocol") or {}) if protocol is None else protocol
    return _whole_sha256(parts[0], parts[1], parts[2], ran)


def protocol_sha256(claim: Claim, profile: str) -> str | None:
    """Hash of the claim's registered protocol at ``profile`` (None for a claim without one)."""
    return None if not claim.protocol else _sha256({"protocol": claim.protocol_for(profile)})


_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})\b")


def protocol_change_recorded(claim: Claim, since: str | None) -> bool:
    """Whether the claim's history has a dated line about its protocol on or after ``since``
    (YYYY-MM-DD; any dated protocol line when unknown)."""
    for line in claim.history:
        m = _DATED.match(line)
        if m and "protocol" in line.lower() and (since is None or m.group(1) >= since):
            return True
    return False


def non_finite(value: Any, where: str = "") -> str | None:
    """The path of the first NaN or infinity inside ``value`` (None when every number is finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "value"
    if isinstance(value, dict):
        for k, v in value.items():
            found = non_finite(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return None


@dataclass(frozen=True)
class Derived:
    """A verdict derived from a recorded result: what a table shows."""
    status: str                        # one of VERDICTS, or NOT_JUDGED
    reason: str
    value: Any
    conditions: tuple[Outcome, ...] = ()
    preconditions: tuple[Outcome, ...] = ()

    @property
    def failed_preconditions(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.preconditions if not o.passed)

    @property
    def text(self) -> str:
        """The verdict as a table shows it (``not judged (recorded under an earlier check)``)."""
        return f"{NOT_JUDGED} ({EARLIER_CHECK})" if self.status == NOT_JUDGED else self.status


def derive(claim: Claim, entry: dict) -> Derived:
    """The verdict of a recorded result, from its values and the claim's registered check; any
    verdict the entry states is not read. Raises UnjudgeableResult for values the check cannot
    judge (the caller names the file)."""
    profile = entry["profile"]
    recorded = recorded_check_sha256(entry)
    values = entry.get("values")
    if recorded is None or not isinstance(values, dict):
        return Derived(NOT_JUDGED, "Recorded by its notebook's own test before the registered check was applied "
                                   "to results; re-run the notebook to judge it.", entry.get("value"))
    protocol = protocol_sha256(claim, profile)
    if recorded != check_sha256(claim, profile):
        # the whole check differs: by its protocol alone (the existing rule for a protocol change,
        # below), or by what it tests or how it is judged (not judged)
        protocol_moved = protocol is not None and entry.get("protocol_sha256") != protocol
        if not protocol_moved or recorded_check_sha256(entry, claim.protocol_for(profile)) != check_sha256(claim, profile):
            return Derived(NOT_JUDGED, "Recorded under an earlier version of the check or its preconditions; "
                                       "re-run the notebook to judge it by the registered check.", entry.get("value"))
    if protocol is not None and entry.get("protocol_sha256") != protocol:
        since = str((entry.get("provenance") or {}).get("time_utc") or "")[:10] or None
        if not protocol_change_recorded(claim, since):
            raise UnjudgeableResult(
                f"recorded under another protocol than the one {claim.key} registers now, and the claim's history "
                f"has no dated line about a protocol change since {since or 'the result'}: add one (with the reason) "
                f"or re-run the notebook")
        return Derived(NOT_JUDGED, "Recorded under an earlier protocol (the claim's history says what changed); "
                                   "re-run the notebook to judge it.", entry.get("value"))
    missing = [q for q in claim.quantities if q not in values]
    if missing:
        return Derived(NOT_JUDGED, f"The result lacks {', '.join(map(repr, missing))}, which the registered "
                                   f"check names.", entry.get("value"))
    evidence = entry.get("evidence") if isinstance(entry.get("evidence"), dict) else {}
    try:
        status, conds, pre, reason = evaluate(claim, values, profile, evidence)
    except LookupError as exc:
        return Derived(NOT_JUDGED, f"The result lacks {exc.args[0]}, which the registered check names.",
                       entry.get("value"))
    return Derived(status, reason, value_of(claim, values), conds, pre)


def value_of(claim: Claim, values: dict) -> Any:
    """The value a table shows: the check's quantity (every value when the claim has no check)."""
    if claim.check is not None:
        return values[claim.check.quantity]
    return next(iter(values.values())) if len(values) == 1 else values
