"""The claims ledger: what a notebook calls to record a measurement and learn its verdict.

Each paper folder ``papers/<paper>/`` holds ``claims.yaml``: the numbered claims of the paper
(id, statement, where in the paper, the paper's value and unit, where that value comes from,
the notebook that checks it), each claim's registered ``check`` (the test that decides whether
it holds at the scale we ran, with the commit that registered it), its power ``preconditions``
and the dated ``history`` of changes to the check. The schema (:mod:`compendium.checks`) is
described at the top of ``papers/protot/claims.yaml`` and in docs/CONVENTIONS.md.

A notebook states what it measured as a :class:`Measurement` and hands it to :func:`conclude`,
which records it into the notebook's run folder (``compendium.runs``), applies the registered
check (:mod:`compendium.judge`, the rule the claims tables apply again to every published
result) and returns a :class:`Verdict`:

- *holds*: every precondition and every condition of the check passed (by its interval, where
  the condition names one);
- *does not hold*: the preconditions passed, a condition of the check failed;
- *inconclusive*: a precondition failed (the measurement had no power to test the claim), or an
  interval straddles a threshold;
- *measured only*: the claim has no check, or its check does not apply at this profile
  (``measured_only_at``: the result is bound to scale or hardware); the value is still recorded.

*not run* is what a claims table shows for a claim nothing has measured. Only
``compendium run --publish`` copies recorded results into ``papers/<paper>/results`` and rebuilds
``CLAIMS.md`` (:mod:`compendium.publish`, :mod:`compendium.tables`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compendium import atomic, paths, profiles, provenance, runs
from compendium.checks import (  # noqa: F401  (the ledger's names, re-exported for its callers)
    DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, MEASURED_ONLY, NOT_JUDGED, NOT_RUN, OPS, REGISTERED_AFTER, STATUS_NOT_RUN,
    VERDICTS, Check, Claim, ClaimsFileError, Condition, MinUnits, Paper, _fmt, _is_number, get_claim, load_paper,
    paper_ids,
)
from compendium.judge import (  # noqa: F401
    CHECK_HASH_SCHEME, Outcome, UnjudgeableResult, check_sha256, evaluate, protocol_sha256, value_of,
)


# --------------------------------------------------------------------------------------------
# measurements and verdicts
# --------------------------------------------------------------------------------------------
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


def protocol(key: str, profile: str) -> dict:
    """The registered settings of claim ``key``'s measurement at ``profile`` (its ``protocol`` in
    claims.yaml: the settings for every profile, then the profile's own). A notebook reads what it
    measures from here, so that a result records the protocol it was measured under."""
    return get_claim(key).protocol_for(profile)


def _provenance_fields() -> dict:
    return {"run": runs.current().name, "notebook": runs.notebook_name(), "provenance": provenance.describe()}


_TABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def conclude(m: Measurement, *, profile: str, seed: int | None = None) -> Verdict:
    """Record ``m`` into this run's folder, evaluate the claim's pre-registered check, write the
    tables as CSV, assert at the check's ``assert_at`` profiles, and return the :class:`Verdict`.

    Raises ValueError (before recording anything) when ``m`` lacks a quantity the check or the
    preconditions name (or an interval end, in its values or evidence), or a value has the wrong
    type for its test; AssertionError (after
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
    try:
        status, conds, pre, reason = evaluate(claim, values, profile, evidence)
    except LookupError as exc:
        raise ValueError(f"{claim.key}: the Measurement lacks {exc.args[0]} (in its values or evidence), which the "
                         f"check in papers/{claim.paper}/claims.yaml names") from None
    from compendium.plotting import prefixed  # the figure folder's name rule (the notebook's number first)

    table_files = {n: prefixed(f"{n}.csv") for n in m.tables}
    table_names = list(table_files.values())
    entry = {
        "format": 2,
        "claim": claim.key,
        "profile": profile,
        "seed": seed,
        "value": value_of(claim, values),
        "values": values,
        "unit": m.unit if m.unit is not None else claim.unit,
        "verdict": status,
        "reason": reason,
        "failed_preconditions": [o.as_dict() for o in pre if not o.passed],
        "conditions": [o.as_dict() for o in conds],
        "preconditions": [o.as_dict() for o in pre],
        "registered_check": claim.check.as_dict() if claim.check else None,
        "check_sha256": check_sha256(claim, profile),
        "check_hash_scheme": CHECK_HASH_SCHEME,
        "protocol": claim.protocol_for(profile),
        "protocol_sha256": protocol_sha256(claim, profile),
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
    asserted = profiles.base(profile) in check.assert_at and not claim.smaller_for(profile) if check else False
    if asserted and status != check.expect:
        raise AssertionError(
            f"{claim.key} at profile '{profile}': expected '{check.expect}', got '{status}'. {reason} "
            f"Values: {', '.join(f'{k} = {_fmt(v)}' for k, v in values.items())}. (Recorded in {verdict.path}.)")
    return verdict


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
