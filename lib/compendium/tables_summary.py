"""The summary table that opens each ``papers/<paper>/CLAIMS.md``: one row per claim, short enough
to read at a glance (no row over :data:`ROW_LIMIT` characters): the claim (marked when it is the
compendium's own), its statement shortened, the paper's value, and the verdict at each profile
with the value, the units it rests on, what failed and the marks. The details per claim follow it
(:mod:`compendium.tables`).

A verdict cell here is built from the same derived results as the details and the board
(:func:`compendium.tables.read_results`; what failed from :func:`compendium.basis.failing_short`,
the units from :func:`compendium.basis.units_of`); a cell is marked ``⚠`` when its details row has
a ⚠ mark, and ``≠`` when it is at odds with the other profile's verdict
(:func:`compendium.basis.disagreement`).
"""
from __future__ import annotations

from compendium import basis, profiles
from compendium import claims as _claims

#: the longest a summary row may be, in characters of Markdown
ROW_LIMIT = 300
STATEMENT_LIMIT = 72
CELL_LIMIT = 88
PAPER_LIMIT = 32
UNIT_LIMIT = 14         # a longer unit is left out of the paper's value here (the details give it)
DISAGREES = "\u2260"
WARNING = "\u26a0"

LEGEND = [
    f"- {DISAGREES}: at odds with the other profile's verdict (one holds where the other does not hold, or the "
    "check's main condition passes at one profile and fails at the other); the details say which.",
    f"- {WARNING}: the details row carries a mark to read (below).",
    f"- *{basis.OWN_LABEL}*: a claim of the compendium, not of the paper; n: the units the value rests on.",
]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip(" ,;:") + "\u2026"


def paper_value(claim: _claims.Claim) -> str:
    """The paper's value, with its unit when short (and the source when it is not the paper)."""
    if claim.paper_value is None:
        text = "\u2014"
    else:
        unit = claim.unit if len(claim.unit) <= UNIT_LIMIT else ""
        text = _claims._fmt(claim.paper_value, unit)
    source = "" if basis.is_own(claim) or claim.source == "paper" else f" ({claim.source})"
    return _clip(text, PAPER_LIMIT - len(source)) + source


def verdict_cell(claim: _claims.Claim, profile: str, entry: dict | None, *, marked: bool = False,
                 missing: str = "", disagrees: str = "") -> str:
    """One profile's cell: ``**holds** 0.629 · n 8 circuits``; what failed for a verdict that does not
    hold or is inconclusive; *not judged* with the value recorded under an earlier check."""
    if missing:
        return f"{WARNING} **missing**"
    if entry is None:
        return "not run"
    value = _claims._fmt(entry.get("value"))
    if entry.get("derived_status") == _claims.NOT_JUDGED:
        text = f"*not judged* {value} (earlier check)"
    else:
        text = f"**{entry['derived_status']}** {value}"
    units = basis.units_of(claim, entry, profile)
    if units:
        text += f" \u00b7 n {units.short}"
    failed = basis.failing_short(entry)
    tail = (f" {WARNING}" if marked else "") + (f" {DISAGREES}" if disagrees else "")
    if failed:
        room = CELL_LIMIT - len(text) - len(tail) - 2
        text += f"; {_clip(failed, room)}" if room > 12 else ""
    return _clip(text, CELL_LIMIT - len(tail)) + tail


def summary_lines(paper: _claims.Paper, rec: dict[str, dict[str, dict]], marked: set[tuple[str, str]],
                  missing: dict[tuple[str, str], str]) -> list[str]:
    """The summary table's lines. ``marked``: (claim id, profile) of the details rows with a ⚠ mark;
    ``missing``: (claim id, profile) of published results that are gone, with the reason."""
    names = list(profiles.PROFILES)
    lines = ["| Claim | Statement | Paper's value | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for claim in paper.claims.values():
        entries = rec.get(claim.id, {})
        cells = []
        for prof in names:
            other = next((p for p in names if p != prof), prof)
            cells.append(verdict_cell(claim, prof, entries.get(prof), marked=(claim.id, prof) in marked,
                                      missing=missing.get((claim.id, prof), ""),
                                      disagrees=basis.disagreement(claim, entries.get(prof), entries.get(other), other)))
        own = f" *{basis.OWN_LABEL}*" if basis.is_own(claim) else ""
        head, tail = [f"**{claim.id}**{own}"], [paper_value(claim), *cells]   # bold, not code: it may wrap at a hyphen
        rest = len(_row(head + [""] + tail))            # the statement gets what the row has left
        statement = basis.short_statement(claim.statement, max(24, min(STATEMENT_LIMIT, ROW_LIMIT - rest)))
        lines.append(_row(head + [statement] + tail))
    return lines


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

