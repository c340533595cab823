"""The claims tables (``papers/<paper>/CLAIMS.md``), built only from ``claims.yaml`` and the
published results in ``papers/<paper>/results/``: one summary row per claim first
(:mod:`compendium.tables_summary`), then the details, one row per claim and profile (with the
units and model of each result, :mod:`compendium.basis`), the notes, and each claim's registration
and history.

Every verdict a table shows is derived here, from the recorded values and the check registered
in ``claims.yaml`` (:func:`compendium.judge.derive`); a verdict written in a results file is never
read. A result recorded under another check shows *not judged (recorded under an earlier
check)*. Every table is built in memory first; a malformed results file raises an error naming
the file and the problem (bad JSON, a NaN or infinity, missing field, unknown claim or profile,
a value the check cannot judge) before anything is written.
``PUBLISHED.json`` beside the results says, per profile, which run was last published and which
notebooks the publishes ran and how they ended, so a table marks values whose notebook failed or
was not run in the last publish at their profile.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from compendium import atomic, basis, integrity, judge, paths, profiles, provenance, tables_summary
from compendium import claims as _claims

PUBLISHED = "PUBLISHED.json"


class ResultsFileError(ValueError):
    """A recorded result cannot be read; the message names the file and what is wrong."""


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number a result may record")


def read_entry(path: Path, paper: _claims.Paper) -> dict:
    """Read and check one results file of ``paper``; return the entry with the verdict derived
    from its values and the registered check (``verdict``, ``reason``, ``conditions``,
    ``preconditions``, ``failed_preconditions``, ``value`` replaced by what
    :func:`compendium.judge.derive` finds; ``judged`` False for a result not judged;
    ``derived_status`` the derived verdict as one of :data:`compendium.checks.VERDICTS` or
    :data:`compendium.checks.NOT_JUDGED`)."""
    shown = paths.display(path)
    try:
        raw = Path(path).read_bytes()  # hashed as read: what PUBLISHED.json's sha256 is checked against
        entry = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{shown}: not valid JSON ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"{shown}: cannot be read ({exc})") from None
    except ValueError as exc:  # NaN, Infinity or -Infinity (JSON has no such numbers; Python writes them)
        raise ResultsFileError(f"{shown}: {exc}") from None
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
    bad = judge.non_finite({k: entry.get(k) for k in ("value", "values", "evidence")})
    if bad:
        raise ResultsFileError(f"{shown}: {bad} is not finite (NaN or infinity); a result records finite numbers only")
    if "values" in entry and not isinstance(entry["values"], dict):
        raise ResultsFileError(f"{shown}: \"values\" must be a mapping of named quantities")
    try:
        derived = judge.derive(paper.claims[claim_id], entry)
    except judge.UnjudgeableResult as exc:
        raise ResultsFileError(f"{shown}: {exc}") from None
    contradicted = integrity.contradictions(paper.claims[claim_id], entry, [o.as_dict() for o in derived.conditions])
    if contradicted:
        raise ResultsFileError(f"{shown}: " + "; ".join(contradicted))
    return {**entry, "file_name": Path(path).name, "file_sha256": hashlib.sha256(raw).hexdigest(),
            "judged": derived.status != _claims.NOT_JUDGED, "derived_status": derived.status,
            "verdict": derived.text, "reason": derived.reason, "value": derived.value,
            "conditions": [o.as_dict() for o in derived.conditions],
            "preconditions": [o.as_dict() for o in derived.preconditions],
            "failed_preconditions": [o.as_dict() for o in derived.failed_preconditions]}


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
    """``papers/<paper>/results/PUBLISHED.json`` ({} for a paper nothing was published of); a
    paper with results but no PUBLISHED.json is an error naming it (its results cannot be checked
    against what was published, :mod:`compendium.integrity`)."""
    path = paths.results_dir(paper) / PUBLISHED
    if not path.exists():
        if result_files(paper):
            raise ResultsFileError(
                f"{paths.display(path)} is missing, so the results beside it cannot be checked against what was "
                f"published: restore it (`git checkout -- {paths.display(path)}`), or publish a complete main run")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{paths.display(path)}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsFileError(f"{paths.display(path)}: expected a JSON object")
    return data


def last_publishes(published: dict) -> dict[str, dict]:
    """{profile: its last publish} from a PUBLISHED.json (:func:`read_published`). Each profile keeps its
    own last publish (``"last_publish": {profile: {...}}``); a file written before that, whose
    ``last_publish`` is one publish (with its ``profile``), reads as that profile's."""
    last = published.get("last_publish") or {}
    if not isinstance(last, dict):
        raise ResultsFileError(f"PUBLISHED.json: \"last_publish\" must be a mapping, got {type(last).__name__}")
    if "run" in last or isinstance(last.get("profile"), str):  # the older layout: one publish
        return {last.get("profile", profiles.DEFAULT): last}
    return {prof: entry for prof, entry in last.items() if isinstance(entry, dict)}


def latest_publish(published: dict) -> dict:
    """The most recent publish of any profile ({} when nothing was published)."""
    lasts = last_publishes(published)
    return max(lasts.values(), key=lambda e: str(e.get("time_utc") or ""), default={})


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _marks(claim: _claims.Claim, profile: str | None, entry: dict | None, published: dict) -> list[str]:
    """What a reader must know about a row: its notebook failed, or was not run, in the last publish
    at the row's profile (each profile has its own, :func:`last_publishes`); its file or its
    provenance does not check out (:func:`compendium.integrity.result_marks`)."""
    checked = integrity.result_marks(claim.key.split("/", 1)[0], entry, published) if entry else []
    name = claim.notebook
    if not name or not published:
        return checked
    marks = checked
    # the last publish at the row's profile (a row with no value: the most recent publish of any)
    last = last_publishes(published).get(profile, {}) if profile else latest_publish(published)
    info = (published.get("notebooks") or {}).get(profile or last.get("profile", ""), {}).get(name)
    from_run = f" (value from run {entry.get('run')})" if entry and entry.get("run") else ""
    if last and name not in (last.get("notebooks") or {}):
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
        undecided = [c for c in entry.get("conditions") or [] if c.get("undecided")]
        if failed:
            # an inconclusive verdict names what failed; a measured-only one (check not applied at
            # this profile) still says which preconditions its measurement did not meet
            lead = ": failed " if entry["verdict"] == _claims.INCONCLUSIVE else "; preconditions not met: "
            text += lead + "; ".join(
                f"`{f.get('id')}` ({f.get('statement', '')}; {f.get('quantity')} = {_claims._fmt(f.get('value'))})"
                for f in failed)
        elif undecided and entry["verdict"] == _claims.INCONCLUSIVE:
            text += ": " + "; ".join(
                f"the interval of {c['quantity']} ({_interval_text(c['interval_values'])}) straddles "
                f"{_straddled(c)}" for c in undecided)
        elif entry["verdict"] == _claims.DOES_NOT_HOLD and any(
                not c.get("passed") and not c.get("undecided") for c in entry.get("conditions") or []):
            # the conditions judge.derive found failed (their whole interval on the other side)
            text += ": failed " + "; ".join(
                f"`{c['quantity']} {c['op']} {basis.threshold_text(c)}` ({_claims._fmt(c.get('value'))}"
                + (f", interval {_interval_text(c['interval_values'])}" if c.get("interval_values") else "") + ")"
                for c in entry.get("conditions") or [] if not c.get("passed") and not c.get("undecided"))
        elif not entry.get("judged", True):
            text += f": {entry.get('reason', '')}"
    return "<br>".join([text, *marks])


def _interval_text(interval) -> str:
    return f"{_claims._fmt(interval[0])} to {_claims._fmt(interval[1])}"


def _straddled(c: dict) -> str:
    lo, hi = c["interval_values"]
    t = c["threshold"]
    ends = t if isinstance(t, list) else [t]
    return " and ".join(_claims._fmt(x) for x in ends if lo <= x <= hi)


def _ours(claim: _claims.Claim, entry: dict | None) -> str:
    """The measured value, with the interval of the check's main quantity where it has one."""
    if entry is None:
        return "—"
    text = _claims._fmt(entry["value"], entry.get("unit") or "")
    if not entry.get("judged", True) or claim.check is None:
        return text
    # the main quantity's outcome (absent when it was not measured, see compendium.judge)
    main = next((c for c in entry.get("conditions") or [] if c.get("quantity") == claim.check.quantity), {})
    if main.get("interval_values"):
        return f"{text} (95% interval {_interval_text(main['interval_values'])})"
    if entry["verdict"] in (_claims.HOLDS, _claims.DOES_NOT_HOLD, _claims.INCONCLUSIVE):
        if claim.check.point:
            return f"{text} (no interval: {claim.check.point})"
        return f"{text} (no interval)"
    return text


def table_rows(paper: str, results: dict[str, dict[str, dict]] | None = None,
               published: dict | None = None) -> list[dict[str, str]]:
    p = _claims.load_paper(paper)
    rec = read_results(paper) if results is None else results
    published = read_published(paper) if published is None else published
    missing = integrity.missing_results(paper, rec, published)  # published results deleted: rows kept, marked
    rows = []
    for claim in p.claims.values():
        entries = rec.get(claim.id, {})
        shown = [(k, entries.get(k)) for k in profiles.PROFILES
                 if k in entries or (claim.id, k) in missing] or [(None, None)]
        for profile, entry in shown:
            check = claim.check.describe() if claim.check else "— (no check)"
            if claim.check:
                check += f" ({claim.check.registration()})"
            if claim.check and profile in claim.check.measured_only_at:
                check += f" (not applied at {profile})"
            if claim.min_units is not None:
                check += f"; judged on at least {claim.min_units.at_least} {claim.min_units.units}"
            other = next((k for k in profiles.PROFILES if k != profile), None)
            odds = basis.disagreement(claim, entry, entries.get(other), other) if profile and other else ""
            units = basis.units_of(claim, entry, profile) if profile else None
            rows.append({
                "id": claim.id,
                "statement": claim.statement,
                "where": claim.where,
                "paper": _claims._fmt(claim.paper_value, claim.unit)
                + ("" if claim.source == "paper" else f" ({basis.OWN_LABEL})" if basis.is_own(claim)
                   else f" ({claim.source})"),
                "ours": _ours(claim, entry),
                "profile": profile or "—",
                "check": check,
                "verdict": "<br>".join(["**missing**", missing[(claim.id, profile)], *_marks(claim, profile, None, published)])
                if (claim.id, profile) in missing else _verdict_cell(entry, _marks(claim, profile, entry, published))
                + (f"<br>{tables_summary.DISAGREES} {odds}" if odds else ""),
                "units": "—" if units is None else f"{units.text} ({units.where})",
                "model": ", ".join(basis.models_of(claim, entry, profile)) or "—" if entry else "—",
                "notebook": claim.notebook or "not yet covered",
                "revision": "—" if entry is None else provenance.short_revision(
                    (entry.get("provenance") or {}).get("git_revision")),
            })
    return rows


LEGEND = """\
Verdicts are derived when this table is built, from the recorded values and the check registered
in `claims.yaml` (never by hand, and never read from a results file). The check column says
when each check was registered: "before measuring" (the commit named precedes the claim's first
result) or "after a first measurement; see history" (the claim's history in `claims.yaml`
gives the earlier checks, with each verdict and the reason for the change).
- **holds**: the preconditions and every condition of the check passed at the profile shown; a
  condition with an interval passes only when the whole 95% interval lies on the claim's side;
- **does not hold**: the preconditions passed and a condition of the check failed (its whole
  interval on the other side, where it has one);
- **inconclusive**: a power precondition failed (named, with its statement and value), or an
  interval straddles a threshold, so the measurement could not decide the claim;
- **measured only**: the claim has no check, or its result is bound to scale or hardware at this
  profile; the value is recorded and shown, not judged;
- **not judged (recorded under an earlier check)**: the result was measured for another version of
  the check (or judged by its notebook before checks were registered); re-running the notebook
  judges it;
- *not run*: nothing has measured the claim yet.
"(no interval: ...)" marks a value judged on its own, for the reason registered with the check
(an exact invariant over every case, a deterministic measurement): there are no units to
resample. "(no interval)" alone marks a judged value with neither an interval nor such a reason.
⚠ marks a value whose notebook failed or was not run in the last publish at its profile: the value
shown is from the earlier run named. ⚠ also marks a result whose file does not match the sha256 that
`results/PUBLISHED.json` lists for it (changed since published, not listed, or **missing**: listed but
deleted), one published before hashes were recorded (not verifiable), and one whose git revision names
no commit of the repository's history (or cannot be verified there) or is `+dirty` without its
`diff_sha256`. The revision is the commit that produced the value; `+dirty` means
the code had uncommitted changes (the result file keeps a `diff_sha256` of them)."""


def build_table(paper: str, results: dict[str, dict[str, dict]] | None = None,
                published: dict | None = None) -> str:
    """Markdown claims table for ``paper`` (from the published results unless ``results`` given)."""
    p = _claims.load_paper(paper)
    from_disk = results is None
    results = read_results(paper) if from_disk else results  # a damaged results file is named first
    published = read_published(paper) if published is None else published
    rec = read_results(paper) if results is None else results
    rows = table_rows(paper, rec, published)
    lasts = last_publishes(published)
    lines = [
        f"# Claims: {p.title} (arXiv {p.arxiv})",
        "",
        "Generated by `compendium run --publish` (`make all`) and `make claims` from `claims.yaml` and the",
        "values the notebooks recorded in `results/`. Do not edit by hand. 'Ours' is what was measured at the",
        "profile shown: the `cpu` profile is a small-scale run and is not the paper's setting. The paper column",
        "marks values that come from a secondary source (a summary or review) rather than the paper itself.",
        "",
        "## Summary",
        "",
        *tables_summary.summary_lines(p, rec, {(r["id"], r["profile"]) for r in rows if "⚠" in r["verdict"]},
                                      integrity.missing_results(paper, rec, published)),
        "",
        *tables_summary.LEGEND,
        "",
        "## Details per claim",
        "",
        LEGEND,
        "",
    ]
    figures = integrity.figure_problems(paper, published) if from_disk else []
    if figures:  # checked on the published tree only (a publish checks the run's files itself)
        lines += ["⚠ Figure files that do not match `results/PUBLISHED.json`: " + "; ".join(figures) + ".", ""]
    if lasts:
        lines += ["Last publish at each profile (a row's value and its ⚠ marks come from its own profile's):", ""]
        known = [k for k in profiles.PROFILES if k in lasts]
        for prof in known + sorted(k for k in lasts if k not in known):
            last = lasts[prof]
            scope = f"the notebooks of {last['paper']}" if last.get("paper") else "every notebook"
            revision = provenance.short_revision(last.get("git_revision"))
            lines.append(f"- `{prof}`: run `{last.get('run')}` ({scope}, revision {revision}, "
                         f"{last.get('time_utc', 'time unknown')}).")
        lines.append("")
    cols = ("id", "statement", "where", "paper", "ours", "profile", "check", "verdict", "units", "model", "notebook",
            "revision")
    lines += ["| claim | statement | where | paper | ours | profile | check | verdict | units | model | notebook | "
              "revision |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[k]) for k in cols) + " |")
    notes = []
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
    lines += ["", "## Registration and history", "",
              "Each check's registration and every dated change to it, with the earlier verdicts and the",
              "reasons (from `claims.yaml`).", ""]
    for claim in p.claims.values():
        lines += history_lines(claim)
    return "\n".join(lines) + "\n"


def history_lines(claim: _claims.Claim) -> list[str]:
    """A claim's registration and history as markdown list items (CLAIMS.md and the book)."""
    head = claim.check.registration() if claim.check else "no check"
    out = [f"- **{claim.id}**: {head}."]
    out += [f"  - {_cell(h)}" for h in claim.history]
    return out


def write_tables(tables: dict[str, str] | None = None) -> list[Path]:
    """Write every paper's CLAIMS.md; all tables are built before the first is written."""
    tables = tables if tables is not None else {paper: build_table(paper) for paper in _claims.paper_ids()}
    written = []
    for paper, text in tables.items():
        path = paths.papers_dir() / paper / "CLAIMS.md"
        atomic.write_text(path, text)
        written.append(path)
    return written
