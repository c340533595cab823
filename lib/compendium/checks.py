"""The schema of ``papers/<paper>/claims.yaml``: claims, their registered checks and power
preconditions, loaded into frozen dataclasses; a mistake names the file, the claim and the field.

Each claim holds its ``check`` (the test that decides whether it holds at the scale we ran), its
power ``preconditions``, an optional ``min_units`` (the fewest units, e.g. prompts, that the
interval the check needs is computed from) and the dated ``history`` of changes. ``check.registered``
names the commit that registered the check; ``check.registered_after`` is ``"a first measurement"``
for a check that was registered (or last changed) after a result of the claim had been seen.
A condition may name the interval of its quantity (``interval: [low, high]``, two recorded
values): the interval then decides (:mod:`compendium.judge`).
"""
from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from compendium import paths, profiles

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
INCONCLUSIVE = "inconclusive"
MEASURED_ONLY = "measured only"
NOT_RUN = "not run"
NOT_JUDGED = "not judged"  # a table's verdict for a result recorded under an earlier check
STATUS_NOT_RUN = NOT_RUN  # older name
VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, MEASURED_ONLY)

#: comparison operators of a check, with the shape of their threshold
OPS = {
    ">=": "a number", ">": "a number", "<=": "a number", "<": "a number",
    "==": "a number or a string", "between": "[lo, hi] with lo <= hi (inclusive)",
    "outside": "[lo, hi] with lo <= hi", "is": "true or false",
}
_NUMERIC_OPS = {">=", ">", "<=", "<", "between", "outside"}
_CONDITION_KEYS = {"quantity", "op", "threshold", "interval", "point"}
_CHECK_KEYS = _CONDITION_KEYS | {"all_of", "assert_at", "expect", "measured_only_at", "registered",
                                 "registered_after"}
_PRECONDITION_KEYS = {"quantity", "op", "threshold", "id", "statement"}
_MIN_UNITS_KEYS = {"quantity", "at_least", "units", "why"}
#: what ``check.registered_after`` may say (absent: the check was registered before any result)
REGISTERED_AFTER = ("a first measurement", "earlier checks' measurements")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")  # the whole string (fullmatch): no trailing newline
_CLAIM_KEYS = {"id", "statement", "where", "paper_value", "unit", "source", "notebook", "note",
               "check", "preconditions", "min_units", "protocol", "history"}
#: the key of a protocol's settings shared by every profile
PROTOCOL_ALL = "all"


class ClaimsFileError(ValueError):
    """claims.yaml is malformed; the message names the file, the claim and the field."""


# --------------------------------------------------------------------------------------------
# schema
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """``quantity op threshold``: one test on one named value of a Measurement."""
    quantity: str
    op: str
    threshold: Any
    id: str | None = None          # preconditions only
    statement: str = ""            # preconditions only
    interval: tuple[str, str] | None = None   # names of the recorded low and high ends of its interval
    point: str | None = None   # why the condition is judged on its value alone (no units to resample)

    def threshold_text(self) -> str:
        t = self.threshold
        if self.op in ("between", "outside"):
            return f"[{_fmt(t[0])}, {_fmt(t[1])}]"
        return repr(t) if isinstance(t, str) else _fmt(t)

    def describe(self) -> str:
        return f"{self.quantity} {self.op} {self.threshold_text()}"

    def test(self, value: Any) -> bool:
        op, t = self.op, self.threshold
        if op == "is":
            return value is t
        if op == "==":
            return value == t
        if op == ">=":
            return value >= t
        if op == ">":
            return value > t
        if op == "<=":
            return value <= t
        if op == "<":
            return value < t
        if op == "between":
            return t[0] <= value <= t[1]
        if op == "outside":
            return value < t[0] or value > t[1]
        raise AssertionError(op)  # unreachable: validated at load time

    def as_dict(self) -> dict:
        out = {"quantity": self.quantity, "op": self.op,
               "threshold": list(self.threshold) if isinstance(self.threshold, tuple) else self.threshold}
        if self.id is not None:
            out = {"id": self.id, "statement": self.statement, **out}
        if self.interval is not None:
            out["interval"] = list(self.interval)
        if self.point is not None:
            out["point"] = self.point
        return out

    def definition(self) -> dict:
        """What the condition tests (quantity, comparator, threshold, and a precondition's id):
        the part of it that a recorded value must have been measured for."""
        out = {"quantity": self.quantity, "op": self.op,
               "threshold": list(self.threshold) if isinstance(self.threshold, tuple) else self.threshold}
        return out if self.id is None else {"id": self.id, **out}


@dataclass(frozen=True)
class Check:
    """The pre-registered test of a claim: the main condition plus ``all_of`` (all must pass)."""
    quantity: str
    op: str
    threshold: Any
    all_of: tuple[Condition, ...] = ()
    assert_at: tuple[str, ...] = ()
    expect: str = HOLDS
    measured_only_at: tuple[str, ...] = ()
    registered: str | None = None          # the commit that registered the check
    registered_after: str | None = None    # "a first measurement" when a result came first
    interval: tuple[str, str] | None = None  # of the main condition's quantity
    point: str | None = None  # of the main condition: why it is judged on its value alone

    @property
    def main(self) -> Condition:
        return Condition(self.quantity, self.op, self.threshold, interval=self.interval, point=self.point)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return (self.main, *self.all_of)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.conditions)

    def as_dict(self) -> dict:
        return {**self.main.as_dict(), "all_of": [c.as_dict() for c in self.all_of],
                "assert_at": list(self.assert_at), "expect": self.expect,
                "measured_only_at": list(self.measured_only_at), "registered": self.registered,
                "registered_after": self.registered_after}

    def registration(self) -> str:
        """How the check came to be, in the words the tables use."""
        commit = f" in {self.registered}" if self.registered else ""
        if self.registered_after:
            return f"registered{commit} after {self.registered_after}; see history"
        return f"registered{commit} before measuring"


@dataclass(frozen=True)
class MinUnits:
    """The fewest units (prompts, contexts, circuits) a result must rest on to be judged: below
    it the interval the check needs is too wide, and the verdict is inconclusive (precondition
    ``min-units``). ``quantity`` names the recorded count."""
    quantity: str
    at_least: int
    units: str
    why: str = ""

    def as_precondition(self) -> Condition:
        why = f" ({self.why})" if self.why else ""
        return Condition(self.quantity, ">=", self.at_least, id="min-units",
                         statement=f"the result rests on at least {self.at_least} {self.units}{why}")


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    statement: str
    where: str
    paper_value: Any
    unit: str
    source: str
    notebook: str | None
    note: str = ""
    check: Check | None = None
    preconditions: tuple[Condition, ...] = ()
    history: tuple[str, ...] = ()
    min_units: MinUnits | None = None
    protocol: dict | None = None     # {"all" | profile: {setting: value}}: what is measured, and how

    def protocol_for(self, profile: str) -> dict:
        """The settings of the measurement at ``profile``: those for every profile, then the profile's own."""
        if not self.protocol:
            return {}
        base = profiles.base(profile)
        own = self.protocol.get(profile, {}) if profile != base else {}
        return {**self.protocol.get(PROTOCOL_ALL, {}), **self.protocol.get(base, {}), **own}

    def smaller_for(self, profile: str) -> bool:
        """Whether a test-only ``profile`` measures this claim with a smaller protocol than its base
        profile (then the base profile's assertions do not apply to it)."""
        return profiles.base(profile) != profile and bool(self.protocol and self.protocol.get(profile))

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.id}"

    @property
    def quantities(self) -> tuple[str, ...]:
        """Every value name the check and the preconditions read (what a Measurement must have)."""
        conds = (self.check.conditions if self.check else ()) + self.preconditions
        return tuple(dict.fromkeys(c.quantity for c in conds + self.all_preconditions()))

    def all_preconditions(self) -> tuple[Condition, ...]:
        """The power preconditions, with ``min_units`` last (as precondition ``min-units``)."""
        return self.preconditions + (() if self.min_units is None else (self.min_units.as_precondition(),))

    def all_conditions(self) -> tuple[Condition, ...]:
        """The check's conditions, then every precondition."""
        return (self.check.conditions if self.check else ()) + self.all_preconditions()


@dataclass(frozen=True)
class Paper:
    id: str
    title: str
    arxiv: str
    claims: dict[str, Claim] = field(default_factory=dict)


def paper_ids() -> list[str]:
    return sorted(p.parent.name for p in paths.papers_dir().glob("*/claims.yaml"))


def _threshold(op: str, raw: Any, err) -> Any:
    if op in ("between", "outside"):
        if (not isinstance(raw, (list, tuple)) or len(raw) != 2
                or not all(_is_number(x) for x in raw)):
            err(f"op '{op}' needs threshold [lo, hi] (two numbers), got {raw!r}")
        lo, hi = raw
        if lo > hi:
            err(f"op '{op}' needs threshold [lo, hi] with lo <= hi, got {raw!r}")
        return (lo, hi)
    if op == "is":
        if not isinstance(raw, bool):
            err(f"op 'is' needs threshold true or false, got {raw!r}")
        return raw
    if op == "==":
        if not (_is_number(raw) or isinstance(raw, str)):
            err(f"op '==' needs a number or a string as threshold, got {raw!r}")
        return raw
    if not _is_number(raw):
        err(f"op '{op}' needs a number as threshold, got {raw!r}")
    return raw


def _condition(raw: Any, allowed: set[str], err, *, precondition: bool = False) -> Condition:
    if not isinstance(raw, dict):
        err(f"expected a mapping with quantity/op/threshold, got {raw!r}")
    unknown = set(raw) - allowed
    if unknown:
        err(f"unknown field(s) {_names(unknown)}; allowed: {_names(allowed)}")
    for key in ("quantity", "op", "threshold") + (("id", "statement") if precondition else ()):
        if key not in raw:
            err(f"missing '{key}'")
    if not isinstance(raw["quantity"], str) or not raw["quantity"]:
        err(f"quantity must be a name, got {raw['quantity']!r}")
    op = raw["op"]
    if not isinstance(op, str) or op not in OPS:
        err(f"unknown op {op!r}; valid ops: {', '.join(repr(o) for o in OPS)}")
    threshold = _threshold(op, raw["threshold"], err)
    interval = _interval(raw.get("interval"), op, err)
    point = _point(raw.get("point"), interval, err)
    if precondition:
        if not isinstance(raw["id"], str) or not raw["id"]:
            err(f"a precondition's id must be a name, got {raw['id']!r}")
        return Condition(raw["quantity"], op, threshold, id=raw["id"], statement=str(raw["statement"]).strip())
    return Condition(raw["quantity"], op, threshold, interval=interval, point=point)


def _point(raw: Any, interval, err) -> str | None:
    """``point``: the registered reason a condition is judged on its value alone (an exact
    invariant over every case, a deterministic measurement, a yes/no outcome), shown in the table."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        err(f"point must say why the condition is judged on its value alone, got {raw!r}")
    if interval is not None:
        err("a condition judged by its interval cannot also be judged on its point value (interval and point both given)")
    return raw.strip()


def _interval(raw: Any, op: str, err) -> tuple[str, str] | None:
    if raw is None:
        return None
    if (not isinstance(raw, (list, tuple)) or len(raw) != 2
            or not all(isinstance(x, str) and x for x in raw)):
        err(f"interval must name two recorded values [low, high], got {raw!r}")
    if op not in _NUMERIC_OPS:
        err(f"op '{op}' compares no numbers, so it takes no interval")
    return (raw[0], raw[1])


def _min_units(raw: Any, err) -> MinUnits:
    if not isinstance(raw, dict):
        err(f"min_units must be a mapping with quantity, at_least and units, got {raw!r}")
    unknown = set(raw) - _MIN_UNITS_KEYS
    if unknown:
        err(f"min_units: unknown field(s) {_names(unknown)}; allowed: {_names(_MIN_UNITS_KEYS)}")
    for key in ("quantity", "at_least", "units"):
        if key not in raw:
            err(f"min_units: missing '{key}'")
    if not isinstance(raw["at_least"], int) or isinstance(raw["at_least"], bool) or raw["at_least"] < 1:
        err(f"min_units: at_least must be a positive whole number, got {raw['at_least']!r}")
    return MinUnits(str(raw["quantity"]), raw["at_least"], str(raw["units"]), str(raw.get("why") or "").strip())


def _protocol(raw: Any, err) -> dict:
    """``protocol``: {"all" and/or profile names: {setting: a number, string, bool or list of them}}."""
    allowed = (PROTOCOL_ALL, *profiles.PROFILES, *profiles.TEST_ONLY)
    if not isinstance(raw, dict) or not raw:
        err(f"protocol must be a mapping of {', '.join(allowed)} to settings, got {raw!r}")
    for key, settings in raw.items():
        if key not in allowed:
            err(f"protocol: unknown key {key!r}; allowed: {', '.join(allowed)}")
        if not isinstance(settings, dict):
            err(f"protocol.{key} must be a mapping of settings, got {settings!r}")
        for name, value in settings.items():
            if not _plain(value):
                err(f"protocol.{key}.{name}: settings are numbers, strings, true/false or lists of them, got {value!r}")
    return {k: dict(v) for k, v in raw.items()}


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, (str, bool, int, float)) and not (isinstance(value, float) and value != value)


def _profile_list(raw: Any, err, name: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
        err(f"{name} must be a list of profiles like [cpu], got {raw!r}")
    bad = [p for p in raw if not isinstance(p, str) or p not in profiles.PROFILES]
    if bad:
        err(f"{name} names unknown profile(s) {', '.join(map(repr, bad))}; "
            f"valid profiles: {', '.join(profiles.PROFILES)}")
    return tuple(raw)


def _parse_check(raw: Any, err) -> Check:
    if not isinstance(raw, dict):
        err(f"check must be a mapping, got {raw!r}")
    unknown = set(raw) - _CHECK_KEYS
    if unknown:
        err(f"unknown field(s) {_names(unknown)}; allowed: {_names(_CHECK_KEYS)}")
    main = _condition({k: raw[k] for k in _CONDITION_KEYS if k in raw}, _CONDITION_KEYS, err)
    registered_after = raw.get("registered_after")
    if registered_after is not None and registered_after not in REGISTERED_AFTER:
        err(f"registered_after must be one of {', '.join(map(repr, REGISTERED_AFTER))}, got {registered_after!r}")
    all_of_raw = raw.get("all_of") or []
    if not isinstance(all_of_raw, list):
        err(f"check.all_of must be a list of conditions, got {all_of_raw!r}")
    all_of = tuple(_condition(c, _CONDITION_KEYS, _sub(err, f"all_of[{i}]")) for i, c in enumerate(all_of_raw))
    expect = raw.get("expect", HOLDS)
    if expect not in VERDICTS:
        err(f"expect must be a verdict ({', '.join(repr(v) for v in VERDICTS)}), got {expect!r}")
    assert_at = _profile_list(raw.get("assert_at"), err, "assert_at")
    measured_only_at = _profile_list(raw.get("measured_only_at"), err, "measured_only_at")
    both = [p for p in assert_at if p in measured_only_at]
    if both and expect != MEASURED_ONLY:
        err(f"profile(s) {', '.join(both)} are in both assert_at and measured_only_at, so the verdict there is "
            f"'measured only' and asserting '{expect}' would always fail")
    registered = raw.get("registered")
    if registered is not None and (not isinstance(registered, str) or not _COMMIT.fullmatch(registered)):
        err(f"registered must name the commit that registered the check (7 to 40 hex digits), got {registered!r}")
    return Check(main.quantity, main.op, main.threshold, all_of=all_of, assert_at=assert_at,
                 expect=expect, measured_only_at=measured_only_at, registered=registered,
                 registered_after=registered_after, interval=main.interval, point=main.point)


def _names(keys) -> str:
    """Field names, sorted, for a message (a YAML key may be a number as well as a string)."""
    return ", ".join(sorted(map(str, keys)))


def _sub(err, prefix: str):
    return lambda msg: err(f"{prefix}: {msg}")


def load_paper(paper: str) -> Paper:
    path = paths.papers_dir() / paper / "claims.yaml"
    if not path.exists():
        raise ValueError(f"unknown paper {paper!r}; papers with claims: {', '.join(paper_ids()) or 'none'}")
    shown = paths.display(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ClaimsFileError(f"{shown}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or "paper" not in raw or not isinstance(raw.get("claims"), list):
        raise ClaimsFileError(f"{shown}: needs a 'paper' mapping and a 'claims' list")
    meta = raw["paper"]
    if not isinstance(meta, dict) or "title" not in meta or "arxiv" not in meta:
        raise ClaimsFileError(f"{shown}: 'paper' must be a mapping with 'title' and 'arxiv', got {meta!r}")
    if not isinstance(meta["arxiv"], str):
        raise ClaimsFileError(f"{shown}: paper.arxiv must be quoted (\"2602.11852\"): unquoted, YAML reads it as a "
                              f"number and drops trailing zeros; got {meta['arxiv']!r}")
    claims: dict[str, Claim] = {}
    for n, item in enumerate(raw["claims"]):
        cid = item.get("id") if isinstance(item, dict) else None

        def err(msg, _cid=cid, _n=n):
            who = f"claim {_cid!r}" if _cid else f"claim #{_n + 1}"
            raise ClaimsFileError(f"{shown}: {who}: {msg}")

        if not isinstance(item, dict) or not isinstance(cid, str) or not cid:
            err("every claim needs an 'id'")
        for key in ("statement", "where"):
            if not item.get(key):
                err(f"missing '{key}'")
        unknown = set(item) - _CLAIM_KEYS
        if unknown:
            err(f"unknown field(s) {_names(unknown)}; allowed: {_names(_CLAIM_KEYS)}")
        if cid in claims:
            err("this id is defined twice")
        check = _parse_check(item["check"], _sub(err, "check")) if item.get("check") is not None else None
        pre_raw = item.get("preconditions") or []
        if not isinstance(pre_raw, list):
            err(f"preconditions must be a list, got {pre_raw!r}")
        pre = tuple(_condition(c, _PRECONDITION_KEYS, _sub(err, f"preconditions[{i}]"), precondition=True)
                    for i, c in enumerate(pre_raw))
        ids = [c.id for c in pre]
        if len(set(ids)) != len(ids):
            err(f"preconditions: ids must be unique, got {ids}")
        min_units = _min_units(item["min_units"], err) if item.get("min_units") is not None else None
        protocol = _protocol(item["protocol"], err) if item.get("protocol") is not None else None
        history = item.get("history") or []
        if not isinstance(history, list) or not all(isinstance(h, str) for h in history):
            err(f"history must be a list of dated strings, got {history!r}")
        claims[cid] = Claim(
            paper=paper,
            id=cid,
            statement=str(item["statement"]).strip(),
            where=str(item["where"]),
            paper_value=item.get("paper_value"),
            unit=item.get("unit", "") or "",
            source=item.get("source", "paper"),
            notebook=item.get("notebook"),
            note=(item.get("note") or "").strip(),
            check=check,
            preconditions=pre,
            history=tuple(history),
            min_units=min_units,
            protocol=protocol,
        )
    return Paper(id=paper, title=meta["title"], arxiv=meta["arxiv"], claims=claims)


def get_claim(key: str) -> Claim:
    """Look up ``"<paper>/<claim-id>"``; an unknown id raises ValueError listing the valid ones."""
    if not isinstance(key, str) or key.count("/") != 1:
        raise ValueError(f"claim ids look like '<paper>/<claim-id>', got {key!r}")
    paper_id, claim_id = key.split("/")
    paper = load_paper(paper_id)
    if claim_id not in paper.claims:
        raise ValueError(
            f"claim {claim_id!r} is not defined in papers/{paper_id}/claims.yaml; "
            f"defined: {', '.join(sorted(paper.claims))}"
        )
    return paper.claims[claim_id]




def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict):
        text = ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_fmt(v) for v in value) + "]"
    else:
        text = str(value)
    return f"{text} {unit}".strip() if unit and _is_number(value) else text
