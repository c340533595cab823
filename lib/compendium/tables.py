"""The claims tables (``papers/<paper>/CLAIMS.md``), built only from ``claims.yaml`` and the
published results in ``papers/<paper>/results/``.

Every table is built in memory first; a malformed results file raises an error naming the file
and the problem (bad JSON, missing field, unknown claim or profile) before anything is written.
``PUBLISHED.json`` beside the results says which notebooks the publishes ran and how they ended,
so a table marks values whose notebook failed or was not run in the last publish.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compendium import atomic, paths, profiles, provenance
from compendium import claims as _claims

PUBLISHED = "PUBLISHED.json"
_LEGACY_VERDICT = {True: _claims.HOLDS, False: _claims.DOES_NOT_HOLD, None: _claims.MEASURED_ONLY}


class ResultsFileError(ValueError):
    """A recorded result cannot be read; the message names the file and what is wrong."""


def read_entry(path: Path, paper: _claims.Paper) -> dict:
    """Read and check one results file of ``paper``; return the entry with a ``verdict``."""
    shown = paths.display(path)
    try:
        entry = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{shown}: not valid JSON ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"{shown}: cannot be read ({exc})") from None
    if not isinstance(entry, dict):
        raise ResultsFileError(f"{shown}: expected a JSON object, got {type(entry).__name__}")
    for key in ("claim", "profile", "value"):
        if key not in entry:
            raise ResultsFileError(f"{shown}: missing \"{key}\"")
    key = entry["claim"]
    if not isinstance(key, str) or key.count("/") != 1:
        raise ResultsFileError(f"{shown}: \"claim\" must look like '<paper>/<claim-id>', got {key!r}")
    claim_paper, claim_id = key.split("/")
    if claim_paper != paper.id or claim_id not in paper.claims:
        raise ResultsFileError(f"{shown} records claim {key!r}, which papers/{paper.id}/claims.yaml does not define")
    if entry["profile"] not in profiles.PROFILES:
        raise ResultsFileError(f"{shown}: unknown profile {entry['profile']!r}; valid: {', '.join(profiles.PROFILES)}")
    expected_name = f"{claim_id}.{entry['profile']}.json"
    if Path(path).name != expected_name:
        raise ResultsFileError(f"{shown}: records {key} at profile {entry['profile']!r}, so it must be named {expected_name}")
    if "verdict" in entry:
        if entry["verdict"] not in _claims.VERDICTS:
            raise ResultsFileError(f"{shown}: unknown verdict {entry['verdict']!r}; valid: {', '.join(_claims.VERDICTS)}")
    elif "check" in entry and (entry["check"] is None or isinstance(entry["check"], bool)):
        entry = {**entry, "verdict": _LEGACY_VERDICT[entry["check"]]}  # files written before verdicts existed
    else:
        raise ResultsFileError(f"{shown}: missing \"verdict\"")
    return entry


def result_files(paper: str, folder: Path | None = None) -> dict[str, Path]:
    """{file name: path} of the results files of ``paper`` (default: its published folder)."""
    folder = folder or paths.results_dir(paper)
    if not folder.is_dir():
        return {}
    return {p.name: p for p in sorted(folder.glob("*.json")) if p.name != PUBLISHED}


def read_results(paper: str, files: dict[str, Path] | None = None) -> dict[str, dict[str, dict]]:
    """{claim id: {profile: entry}} from ``files`` (default: the published results of ``paper``)."""
    p = _claims.load_paper(paper)
    out: dict[str, dict[str, dict]] = {}
    for path in (files if files is not None else result_files(paper)).values():
        entry = read_entry(path, p)
        out.setdefault(entry["claim"].split("/", 1)[1], {})[entry["profile"]] = entry
    return out


def read_published(paper: str) -> dict:
    path = paths.results_dir(paper) / PUBLISHED
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{paths.display(path)}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{paths.display(path)}: expected a JSON object")
    return data


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _marks(claim: _claims.Claim, profile: str | None, entry: dict | None, published: dict) -> list[str]:
    """What a reader must know about a row: its notebook failed, or was not run, in the last publish."""
    name = claim.notebook
    if not name or not published:
        return []
    marks = []
    last = published.get("last_publish") or {}
    info = (published.get("notebooks") or {}).get(profile or last.get("profile", ""), {}).get(name)
    from_run = f" (value from run {entry.get('run')})" if entry and entry.get("run") else ""
    if last and last.get("profile") == (profile or last.get("profile")) and name not in (last.get("notebooks") or {}):
        marks.append(f"⚠ notebook not run in the last publish ({last.get('run')}){from_run}")
    elif info and info.get("status") != "completed":
        marks.append(f"⚠ notebook {info.get('status')} in run {info.get('run')}{from_run}")
    elif info and entry and entry.get("run") and entry.get("run") != info.get("run"):
        marks.append(f"⚠ not recorded by its notebook's last run ({info.get('run')}){from_run}")
    return marks


def _verdict_cell(entry: dict | None, marks: list[str]) -> str:
    if entry is None:
        text = _claims.NOT_RUN
    else:
        text = f"**{entry['verdict']}**"
        failed = entry.get("failed_preconditions") or []
        if failed:
            # an inconclusive verdict names what failed; a measured-only one (check not applied at
            # this profile) still says which preconditions its measurement did not meet
            lead = ": failed " if entry["verdict"] == _claims.INCONCLUSIVE else "; preconditions not met: "
            text += lead + "; ".join(
                f"`{f.get('id')}` ({f.get('statement', '')}; {f.get('quantity')} = {_claims._fmt(f.get('value'))})"
                for f in failed)
    return "<br>".join([text, *marks])


def table_rows(paper: str, results: dict[str, dict[str, dict]] | None = None,
               published: dict | None = None) -> list[dict[str, str]]:
    p = _claims.load_paper(paper)
    rec = read_results(paper) if results is None else results
    published = read_published(paper) if published is None else published
    rows = []
    for claim in p.claims.values():
        entries = rec.get(claim.id, {})
        shown = [entries[k] for k in profiles.PROFILES if k in entries] or [None]
        for entry in shown:
            profile = entry["profile"] if entry else None
            check = claim.check.describe() if claim.check else "— (no check)"
            if claim.check and profile in claim.check.measured_only_at:
                check += f" (not applied at {profile})"
            if entry and claim.check and entry.get("registered_check") is None:
                check += " (⚠ not applied: this value was judged by its notebook, not by the check)"
            elif entry and claim.check and entry["registered_check"] != claim.check.as_dict():
                check += " (⚠ recorded under an earlier check)"
            rows.append({
                "id": claim.id,
                "statement": claim.statement,
                "where": claim.where,
                "paper": _claims._fmt(claim.paper_value, claim.unit)
                + ("" if claim.source == "paper" else f" ({claim.source})"),
                "ours": "—" if entry is None else _claims._fmt(entry["value"], entry.get("unit") or ""),
                "profile": "—" if entry is None else entry["profile"],
                "check": check,
                "verdict": _verdict_cell(entry, _marks(claim, profile, entry, published)),
                "notebook": claim.notebook or "not yet covered",
                "revision": "—" if entry is None else provenance.short_revision(
                    (entry.get("provenance") or {}).get("git_revision")),
            })
    return rows


LEGEND = """\
Verdicts, decided by the check written in `claims.yaml` before measuring (never by hand):
- **holds**: the preconditions and every condition of the check passed at the profile shown;
- **does not hold**: the preconditions passed and a condition of the check failed;
- **inconclusive**: a power precondition failed (named, with its statement and value), so the
  measurement could not test the claim;
- **measured only**: the claim has no check, or its result is bound to scale or hardware at this
  profile; the value is recorded and shown, not judged;
- *not run*: nothing has measured the claim yet.
⚠ marks a value whose notebook failed or was not run in the last publish: the value shown is
from the earlier run named. The revision is the commit that produced the value; `+dirty` means
the code had uncommitted changes (the result file keeps a `diff_sha256` of them)."""


def build_table(paper: str, results: dict[str, dict[str, dict]] | None = None,
                published: dict | None = None) -> str:
    """Markdown claims table for ``paper`` (from the published results unless ``results`` given)."""
    p = _claims.load_paper(paper)
    published = read_published(paper) if published is None else published
    rows = table_rows(paper, results, published)
    last = published.get("last_publish") or {}
    lines = [
        f"# Claims: {p.title} (arXiv {p.arxiv})",
        "",
        "Generated by `compendium run --publish` (`make all`) and `make claims` from `claims.yaml` and the",
        "values the notebooks recorded in `results/`. Do not edit by hand. 'Ours' is what was measured at the",
        "profile shown: the `cpu` profile is a small-scale run and is not the paper's setting. The paper column",
        "marks values that come from a secondary source (a summary or review) rather than the paper itself.",
        "",
        LEGEND,
        "",
    ]
    if last:
        lines += [f"Last publish: run `{last.get('run')}` (profile `{last.get('profile')}`, "
                  f"revision {provenance.short_revision(last.get('git_revision'))}).", ""]
    cols = ("id", "statement", "where", "paper", "ours", "profile", "check", "verdict", "notebook", "revision")
    lines += ["| claim | statement | where | paper | ours | profile | check | verdict | notebook | revision |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[k]) for k in cols) + " |")
    notes = []
    rec = read_results(paper) if results is None else results
    for claim in p.claims.values():
        for prof in profiles.PROFILES:
            e = rec.get(claim.id, {}).get(prof)
            if not e:
                continue
            parts = [str(e.get("note") or "").strip()]
            if e.get("evidence"):
                parts.append("Evidence: " + "; ".join(f"{k} = {_claims._fmt(v)}" for k, v in e["evidence"].items()))
            text = " ".join(x for x in parts if x)
            if text:
                notes.append(f"- **{claim.id}** (`{prof}`, run {e.get('run', '—')}): {text}")
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def write_tables(tables: dict[str, str] | None = None) -> list[Path]:
    """Write every paper's CLAIMS.md; all tables are built before the first is written."""
    tables = tables if tables is not None else {paper: build_table(paper) for paper in _claims.paper_ids()}
    written = []
    for paper, text in tables.items():
        path = paths.papers_dir() / paper / "CLAIMS.md"
        atomic.write_text(path, text)
        written.append(path)
    return written
