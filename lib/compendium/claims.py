"""The claims ledger.

Each paper folder ``papers/<paper>/`` holds ``claims.yaml``: the numbered claims of the paper
(id, statement, where in the paper, the paper's value and unit, where that value comes from,
and the notebook that checks it). Notebooks call :func:`record` to store what they measured;
:func:`build_table` turns the recorded values (never hand-typed ones) into ``CLAIMS.md``.

A recorded value is one JSON file per (claim, profile), written atomically, carrying the value,
the config, the seed, the check's outcome and the provenance (git revision, library versions).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compendium import atomic, paths, profiles, provenance

STATUS_NOT_RUN = "not run"


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

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.id}"


@dataclass(frozen=True)
class Paper:
    id: str
    title: str
    arxiv: str
    claims: dict[str, Claim] = field(default_factory=dict)


def paper_ids() -> list[str]:
    return sorted(p.parent.name for p in paths.papers_dir().glob("*/claims.yaml"))


def load_paper(paper: str) -> Paper:
    path = paths.papers_dir() / paper / "claims.yaml"
    if not path.exists():
        raise ValueError(f"unknown paper {paper!r}; papers with claims: {', '.join(paper_ids()) or 'none'}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    meta = raw["paper"]
    claims: dict[str, Claim] = {}
    for item in raw["claims"]:
        if item["id"] in claims:
            raise ValueError(f"{path}: claim id {item['id']!r} is defined twice")
        claims[item["id"]] = Claim(
            paper=paper,
            id=item["id"],
            statement=item["statement"].strip(),
            where=item["where"],
            paper_value=item.get("paper_value"),
            unit=item.get("unit", ""),
            source=item.get("source", "paper"),
            notebook=item.get("notebook"),
            note=item.get("note", "").strip(),
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


def _jsonable(value: Any) -> Any:
    """Turn numpy/torch scalars and containers into plain JSON values; reject NaN silently stored."""
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
    """Record a measured value for claim ``key`` ("<paper>/<claim-id>") at ``profile``.

    ``check`` is the outcome of the notebook's own test of the claim at this scale
    (True: holds, False: does not hold, None: measured only, not comparable at this scale).
    Returns the path written.
    """
    claim = get_claim(key)
    profiles.check(profile)
    entry = {
        "claim": claim.key,
        "value": _jsonable(value),
        "unit": unit if unit is not None else claim.unit,
        "profile": profile,
        "seed": seed,
        "check": None if check is None else bool(check),
        "note": note,
        "config": _jsonable(config or {}),
        "provenance": provenance.describe(),
    }
    path = paths.results_dir(claim.paper) / f"{claim.id}.{profile}.json"
    return atomic.write_json(path, entry)


def recorded(paper: str) -> dict[str, dict[str, dict]]:
    """{claim id: {profile: entry}} of everything recorded for ``paper``."""
    known = load_paper(paper).claims
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(paths.results_dir(paper).glob("*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        claim_id = entry["claim"].split("/", 1)[1]
        if claim_id not in known:
            raise ValueError(f"{path} records claim {entry['claim']!r}, which claims.yaml does not define")
        out.setdefault(claim_id, {})[entry["profile"]] = entry
    return out


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict):
        text = ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    elif isinstance(value, list):
        text = ", ".join(_fmt(v) for v in value)
    else:
        text = str(value)
    return f"{text} {unit}".strip() if unit and isinstance(value, (int, float)) else text


def status(entry: dict | None) -> str:
    if entry is None:
        return STATUS_NOT_RUN
    outcome = {True: "holds", False: "does not hold", None: "measured only"}[entry["check"]]
    return f"{outcome} at {entry['profile']}"


def table_rows(paper: str) -> list[dict[str, str]]:
    p = load_paper(paper)
    rec = recorded(paper)
    rows = []
    for claim in p.claims.values():
        entries = rec.get(claim.id, {})
        shown = [entries[k] for k in profiles.PROFILES if k in entries] or [None]
        for entry in shown:
            rows.append({
                "id": claim.id,
                "statement": claim.statement,
                "where": claim.where,
                "paper": _fmt(claim.paper_value, claim.unit) + ("" if claim.source == "paper" else f" ({claim.source})"),
                "ours": "—" if entry is None else _fmt(entry["value"], entry["unit"]),
                "profile": "—" if entry is None else entry["profile"],
                "status": status(entry),
                "notebook": claim.notebook or "not yet covered",
                "revision": "—" if entry is None else entry["provenance"]["git_revision"][:10],
            })
    return rows


def build_table(paper: str) -> str:
    """Markdown claims table for ``paper``, built only from claims.yaml and recorded values."""
    p = load_paper(paper)
    lines = [
        f"# Claims: {p.title} (arXiv {p.arxiv})",
        "",
        "Generated by `make claims` from `claims.yaml` and the values the notebooks recorded in",
        "`results/`. Do not edit by hand. 'Ours' is what was measured at the profile shown: the `cpu`",
        "profile is a small-scale run and is not the paper's setting. The paper column marks values",
        "that come from a secondary source (a summary or review) rather than the paper itself.",
        "",
        "| claim | statement | where | paper | ours | profile | status | notebook | revision |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table_rows(paper):
        cells = [r[k].replace("|", "\\|").replace("\n", " ") for k in
                 ("id", "statement", "where", "paper", "ours", "profile", "status", "notebook", "revision")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_tables() -> list[Path]:
    written = []
    for paper in paper_ids():
        path = paths.papers_dir() / paper / "CLAIMS.md"
        atomic.write_text(path, build_table(paper))
        written.append(path)
    return written
