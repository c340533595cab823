"""The claims ledger.

Each paper folder ``papers/<paper>/`` holds ``claims.yaml``: the numbered claims of the paper
(id, statement, where in the paper, the paper's value and unit, where that value comes from,
the notebook that checks it) and, written down before measuring, each claim's ``check`` (the
test that decides whether it holds at the scale we ran), its power ``preconditions`` and the
dated ``history`` of changes to the check. The schema is described at the top of
``papers/protot/claims.yaml`` and in docs/CONVENTIONS.md.

A notebook states what it measured as a :class:`Measurement` and hands it to :func:`conclude`,
which records it into the notebook's run folder (``compendium.runs``), evaluates the
pre-registered check and returns a :class:`Verdict`:

- *holds*: every precondition and every condition of the check passed;
- *does not hold*: the preconditions passed, a condition of the check failed;
- *inconclusive*: a precondition failed (the measurement had no power to test the claim);
- *measured only*: the claim has no check, or its check does not apply at this profile
  (``measured_only_at``: the result is bound to scale or hardware); the value is still recorded.

*not run* is what a claims table shows for a claim nothing has measured. Only
``compendium run --publish`` copies recorded results into ``papers/<paper>/results`` and rebuilds
``CLAIMS.md`` (:mod:`compendium.publish`, :mod:`compendium.tables`).
"""
from __future__ import annotations

import datetime as _dt
import math
import numbers
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compendium import atomic, paths, profiles, provenance, runs

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
INCONCLUSIVE = "inconclusive"
MEASURED_ONLY = "measured only"
NOT_RUN = "not run"
STATUS_NOT_RUN = NOT_RUN  # older name
VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, MEASURED_ONLY)

#: comparison operators of a check, with the shape of their threshold
OPS = {
    ">=": "a number", ">": "a number", "<=": "a number", "<": "a number",
    "==": "a number or a string", "between": "[lo, hi] with lo <= hi (inclusive)",
    "outside": "[lo, hi] with lo <= hi", "is": "true or false",
}
_NUMERIC_OPS = {">=", ">", "<=", "<", "between", "outside"}
_CONDITION_KEYS = {"quantity", "op", "threshold"}
_CHECK_KEYS = _CONDITION_KEYS | {"all_of", "assert_at", "expect", "measured_only_at", "registered"}
_PRECONDITION_KEYS = _CONDITION_KEYS | {"id", "statement"}
_CLAIM_KEYS = {"id", "statement", "where", "paper_value", "unit", "source", "notebook", "note",
               "check", "preconditions", "history"}


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
        return out


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
    registered: str | None = None

    @property
    def main(self) -> Condition:
        return Condition(self.quantity, self.op, self.threshold)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return (self.main, *self.all_of)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.conditions)

    def as_dict(self) -> dict:
        return {**self.main.as_dict(), "all_of": [c.as_dict() for c in self.all_of],
                "assert_at": list(self.assert_at), "expect": self.expect,
                "measured_only_at": list(self.measured_only_at), "registered": self.registered}


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

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.id}"

    @property
    def quantities(self) -> tuple[str, ...]:
        """Every value name the check and the preconditions read (what a Measurement must have)."""
        conds = (self.check.conditions if self.check else ()) + self.preconditions
        return tuple(dict.fromkeys(c.quantity for c in conds))


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
        err(f"unknown field(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")
    for key in ("quantity", "op", "threshold") + (("id", "statement") if precondition else ()):
        if key not in raw:
            err(f"missing '{key}'")
    if not isinstance(raw["quantity"], str) or not raw["quantity"]:
        err(f"quantity must be a name, got {raw['quantity']!r}")
    op = raw["op"]
    if op not in OPS:
        err(f"unknown op {op!r}; valid ops: {', '.join(repr(o) for o in OPS)}")
    threshold = _threshold(op, raw["threshold"], err)
    if precondition:
        if not isinstance(raw["id"], str) or not raw["id"]:
            err(f"a precondition's id must be a name, got {raw['id']!r}")
        return Condition(raw["quantity"], op, threshold, id=raw["id"], statement=str(raw["statement"]).strip())
    return Condition(raw["quantity"], op, threshold)


def _profile_list(raw: Any, err, name: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
        err(f"{name} must be a list of profiles like [cpu], got {raw!r}")
    bad = [p for p in raw if p not in profiles.PROFILES]
    if bad:
        err(f"{name} names unknown profile(s) {', '.join(map(repr, bad))}; "
            f"valid profiles: {', '.join(profiles.PROFILES)}")
    return tuple(raw)


def _parse_check(raw: Any, err) -> Check:
    if not isinstance(raw, dict):
        err(f"check must be a mapping, got {raw!r}")
    unknown = set(raw) - _CHECK_KEYS
    if unknown:
        err(f"unknown field(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_CHECK_KEYS))}")
    main = _condition({k: raw[k] for k in _CONDITION_KEYS if k in raw}, _CONDITION_KEYS, err)
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
    if isinstance(registered, (_dt.date, _dt.datetime)):
        registered = registered.isoformat()
    return Check(main.quantity, main.op, main.threshold, all_of=all_of, assert_at=assert_at,
                 expect=expect, measured_only_at=measured_only_at,
                 registered=None if registered is None else str(registered))


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
            err(f"unknown field(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_CLAIM_KEYS))}")
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
        )
    return Paper(id=paper, title=meta["title"], arxiv=str(meta["arxiv"]), claims=claims)


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


# --------------------------------------------------------------------------------------------
# measurements and verdicts
# --------------------------------------------------------------------------------------------
def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _jsonable(value: Any) -> Any:
    """Turn numpy/torch scalars and containers into plain JSON values; reject NaN and infinities."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"refusing to record a non-finite value ({value})")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise TypeError(f"cannot record a value of type {type(value).__name__}; use numbers, strings, lists or dicts")


@dataclass
class Measurement:
    """What a notebook measured for one claim.

    ``values`` holds the named quantities the claim's check and preconditions read (numbers,
    bools, short lists); ``evidence`` supporting numbers worth keeping; ``tables`` the data
    behind each figure (written as ``<run>/figures/<paper>/<NN>_<name>.csv``, NN the notebook's number); ``config`` the
    parameters of the measurement; ``note`` prose (format measured numbers from ``values``).
    """
    claim: str
    values: dict[str, Any]
    evidence: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    unit: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Outcome:
    """One condition applied to the measured value."""
    condition: Condition
    value: Any
    passed: bool

    @property
    def id(self) -> str | None:
        return self.condition.id

    @property
    def statement(self) -> str:
        return self.condition.statement

    def describe(self) -> str:
        c = self.condition
        return f"{c.quantity} = {_fmt(self.value)} (needs {c.op} {c.threshold_text()}: {'yes' if self.passed else 'no'})"

    def as_dict(self) -> dict:
        return {**self.condition.as_dict(), "value": self.value, "passed": self.passed}


@dataclass(frozen=True, repr=False)
class Verdict:
    """What :func:`conclude` decided. ``status`` is one of :data:`VERDICTS`."""
    claim: Claim
    profile: str
    seed: int | None
    status: str
    value: Any
    values: dict
    conditions: tuple[Outcome, ...] = ()
    preconditions: tuple[Outcome, ...] = ()
    reason: str = ""
    path: str = ""     # where it was recorded, relative to the repository root when inside it

    @property
    def failed_preconditions(self) -> tuple[Outcome, ...]:
        """The preconditions that failed, each with ``.id`` and ``.statement``."""
        return tuple(o for o in self.preconditions if not o.passed)

    @property
    def expected(self) -> str | None:
        c = self.claim.check
        return c.expect if c and self.profile in c.assert_at else None

    @property
    def text(self) -> str:
        c = self.claim
        unit = c.unit
        paper = _fmt(c.paper_value, unit) if c.paper_value is not None else "no number (qualitative)"
        source = "" if c.source == "paper" else f" (source: {c.source})"
        lines = [
            f"**{c.key}** — {c.statement}",
            "",
            f"Paper ({c.where}): {paper}{source}. Ours at profile `{self.profile}`"
            f"{'' if self.seed is None else f', seed {self.seed}'}: {_fmt(self.value, unit)}.",
            "",
            f"Verdict: **{self.status}**. {self.reason}",
        ]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return f"{self.claim.key} at {self.profile}: {self.status}. {self.reason}"

    def __repr__(self) -> str:
        return f"Verdict({self.claim.key!r}, profile={self.profile!r}, status={self.status!r}, value={self.value!r})"


def _check_types(claim: Claim, values: dict) -> None:
    conds = (claim.check.conditions if claim.check else ()) + claim.preconditions
    for cond in conds:
        v = values[cond.quantity]
        where = f"{claim.key}: value {cond.quantity!r} = {v!r}"
        if cond.op in _NUMERIC_OPS and not _is_number(v):
            raise ValueError(f"{where} must be a number for op '{cond.op}'")
        if cond.op == "is" and not isinstance(v, bool):
            raise ValueError(f"{where} must be true or false for op 'is'")
        if cond.op == "==" and (_is_number(cond.threshold) != _is_number(v) or isinstance(v, bool)):
            raise ValueError(f"{where} cannot be compared with {cond.threshold!r} by '=='")


def evaluate(claim: Claim, values: dict, profile: str) -> tuple[str, tuple[Outcome, ...], tuple[Outcome, ...], str]:
    """(verdict, outcomes of the check's conditions, outcomes of the preconditions, reason)."""
    pre = tuple(Outcome(c, values[c.quantity], bool(c.test(values[c.quantity]))) for c in claim.preconditions)
    conds = () if claim.check is None else tuple(
        Outcome(c, values[c.quantity], bool(c.test(values[c.quantity]))) for c in claim.check.conditions)
    failed_pre = [o for o in pre if not o.passed]
    if claim.check is None:
        return MEASURED_ONLY, conds, pre, "The claim has no pre-registered check."
    # A profile bound to scale or hardware is "measured only" whatever its preconditions say: the
    # check is not applied there, so there is no test whose power could be in question.
    if profile in claim.check.measured_only_at:
        return (MEASURED_ONLY, conds, pre,
                f"At profile `{profile}` the result is bound to scale or hardware, so the check "
                f"({claim.check.describe()}) is not applied.")
    if failed_pre:
        why = "; ".join(f"{o.id} ({o.statement}): {o.describe()}" for o in failed_pre)
        return INCONCLUSIVE, conds, pre, f"Failed precondition(s): {why}."
    detail = "; ".join(o.describe() for o in conds)
    status = HOLDS if all(o.passed for o in conds) else DOES_NOT_HOLD
    reg = f" (registered {claim.check.registered})" if claim.check.registered else ""
    return status, conds, pre, f"Check{reg}: {detail}."


def _value_of(claim: Claim, values: dict) -> Any:
    if claim.check is not None:
        return values[claim.check.quantity]
    return next(iter(values.values())) if len(values) == 1 else values


def _provenance_fields() -> dict:
    return {"run": runs.current().name, "notebook": runs.notebook_name(), "provenance": provenance.describe()}


_TABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def conclude(m: Measurement, *, profile: str, seed: int | None = None) -> Verdict:
    """Record ``m`` into this run's folder, evaluate the claim's pre-registered check, write the
    tables as CSV, assert at the check's ``assert_at`` profiles, and return the :class:`Verdict`.

    Raises ValueError (before recording anything) when ``m`` lacks a quantity the check or the
    preconditions name, or a value has the wrong type for its test; AssertionError (after
    recording) when ``profile`` is in ``assert_at`` and the verdict is not the expected one.
    """
    if not isinstance(m, Measurement):
        raise TypeError(f"conclude() takes a claims.Measurement, got {type(m).__name__}")
    claim = get_claim(m.claim)
    profiles.check(profile)
    if not isinstance(m.values, dict):
        raise TypeError(f"{claim.key}: Measurement.values must be a dict of named quantities")
    missing = [q for q in claim.quantities if q not in m.values]
    if missing:
        raise ValueError(f"{claim.key}: the Measurement lacks {', '.join(map(repr, missing))}, which the check or "
                         f"preconditions in papers/{claim.paper}/claims.yaml name; it has "
                         f"{', '.join(map(repr, m.values)) or 'no values'}")
    if not m.values:
        raise ValueError(f"{claim.key}: the Measurement has no values")
    for name, table in m.tables.items():
        if not _TABLE_NAME.match(str(name)) or not hasattr(table, "to_csv"):
            raise ValueError(f"{claim.key}: tables need simple names (letters, digits, _ . -) and DataFrame "
                             f"values; got {name!r}: {type(table).__name__}")
    values = _jsonable(m.values)
    evidence = _jsonable(m.evidence)
    config = _jsonable(m.config)
    _check_types(claim, values)
    status, conds, pre, reason = evaluate(claim, values, profile)
    from compendium.plotting import prefixed  # the figure folder's name rule (the notebook's number first)

    table_files = {n: prefixed(f"{n}.csv") for n in m.tables}
    table_names = list(table_files.values())
    entry = {
        "format": 2,
        "claim": claim.key,
        "profile": profile,
        "seed": seed,
        "value": _value_of(claim, values),
        "values": values,
        "unit": m.unit if m.unit is not None else claim.unit,
        "verdict": status,
        "reason": reason,
        "failed_preconditions": [o.as_dict() for o in pre if not o.passed],
        "conditions": [o.as_dict() for o in conds],
        "preconditions": [o.as_dict() for o in pre],
        "registered_check": claim.check.as_dict() if claim.check else None,
        "evidence": evidence,
        "tables": table_names,
        "config": config,
        "note": m.note,
        **_provenance_fields(),
    }
    # 1. record first (before any assertion can stop the notebook)
    path = runs.results_dir(claim.paper) / f"{claim.id}.{profile}.json"
    atomic.write_json(path, entry)
    # 2. the data behind the figures
    if m.tables:
        folder = runs.figures_dir(claim.paper)
        for name, table in m.tables.items():
            import pandas as pd

            keep_index = not isinstance(table.index, pd.RangeIndex) if hasattr(table, "index") else False
            with atomic.atomic_path(folder / table_files[name]) as tmp:
                table.to_csv(tmp, index=keep_index)
    verdict = Verdict(claim=claim, profile=profile, seed=seed, status=status, value=entry["value"],
                      values=values, conditions=conds, preconditions=pre, reason=reason,
                      path=paths.display(path))
    # 3. assert where the check says so
    check = claim.check
    if check is not None and profile in check.assert_at and status != check.expect:
        raise AssertionError(
            f"{claim.key} at profile '{profile}': expected '{check.expect}', got '{status}'. {reason} "
            f"Values: {', '.join(f'{k} = {_fmt(v)}' for k, v in values.items())}. (Recorded in {verdict.path}.)")
    return verdict


def record(
    key: str,
    value: Any,
    *,
    profile: str,
    unit: str | None = None,
    seed: int | None = None,
    config: dict | None = None,
    check: bool | None = None,
    note: str = "",
) -> Path:
    """Deprecated: use :func:`conclude` with a :class:`Measurement`.

    Records ``value`` for claim ``key`` at ``profile`` into this run's folder (never into
    ``papers/``); ``check`` is the notebook's own outcome (True: holds, False: does not hold,
    None: measured only). Returns the path written.
    """
    warnings.warn("claims.record() is deprecated; use claims.conclude(claims.Measurement(...), profile=, seed=)",
                  DeprecationWarning, stacklevel=2)
    claim = get_claim(key)
    profiles.check(profile)
    verdict = {True: HOLDS, False: DOES_NOT_HOLD, None: MEASURED_ONLY}[None if check is None else bool(check)]
    entry = {
        "format": 2,
        "claim": claim.key,
        "profile": profile,
        "seed": seed,
        "value": _jsonable(value),
        "values": {},
        "unit": unit if unit is not None else claim.unit,
        "verdict": verdict,
        "reason": "Decided by the notebook (claims.record), not by a pre-registered check.",
        "failed_preconditions": [],
        "conditions": [],
        "preconditions": [],
        "registered_check": None,
        "evidence": {},
        "tables": [],
        "config": _jsonable(config or {}),
        "note": note,
        **_provenance_fields(),
    }
    path = runs.results_dir(claim.paper) / f"{claim.id}.{profile}.json"
    return atomic.write_json(path, entry)


# --------------------------------------------------------------------------------------------
# tables (implemented in compendium.tables; kept here for existing callers)
# --------------------------------------------------------------------------------------------
def recorded(paper: str) -> dict[str, dict[str, dict]]:
    """{claim id: {profile: entry}} of the published results of ``paper``."""
    from compendium import tables

    return tables.read_results(paper)


def build_table(paper: str) -> str:
    """Markdown claims table for ``paper`` from claims.yaml and its published results."""
    from compendium import tables

    return tables.build_table(paper)


def write_tables() -> list[Path]:
    """Rebuild every papers/<paper>/CLAIMS.md from the published results, all or nothing."""
    from compendium import tables

    return tables.write_tables()


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


def conclude_all(measurements, *, profile: str, seed: int | None = None) -> list[Verdict]:
    """:func:`conclude` every measurement, recording ALL of them before any assertion fails; then
    raise one AssertionError naming every claim whose asserted check failed. Returns the verdicts."""
    verdicts, failed = [], []
    for m in measurements:
        try:
            verdicts.append(conclude(m, profile=profile, seed=seed))
        except AssertionError as err:
            failed.append(f"{getattr(m, 'claim', m)}: {err}")
    if failed:
        raise AssertionError("; ".join(failed))
    return verdicts
