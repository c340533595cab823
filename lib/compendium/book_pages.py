"""The book's pages made from the ledger: each paper's claims page (CLAIMS.md made to fit a page,
opened by the paper's verdict board, with the claims that CLAIMS.md does not list yet) and the
README as the book's home page.
"""
from __future__ import annotations

import re

from compendium import paths


_ROW = re.compile(r"^\s*\|(.*)\|\s*$")


def _cells(line: str) -> list[str]:
    """Cells of one markdown table row (``\\|`` is a literal bar)."""
    body = _ROW.match(line).group(1)
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _is_rule(cells: list[str]) -> bool:
    return all(re.fullmatch(r":?-{3,}:?", c) for c in cells)


def _link_notebook(value: str, names: set[str], prefix: str) -> str:
    return f"[`{value}`]({prefix}notebooks/{value}.ipynb)" if value in names else value


HISTORY_HEADING = "## Registration and history"   # the section of CLAIMS.md (compendium.tables)


def _split_history(text: str) -> tuple[str, dict[str, tuple[str, list[str]]]]:
    """CLAIMS.md without its registration-and-history section, and that section per claim:
    {claim id: (how its check was registered, [history lines: earlier checks and verdicts])}."""
    start = text.find(f"\n{HISTORY_HEADING}\n")
    if start < 0:
        return text, {}
    end = text.find("\n## ", start + 1)
    section = text[start + 1:end if end >= 0 else len(text)]
    rest = text[:start + 1] + (text[end + 1:] if end >= 0 else "")
    out: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in section.splitlines()[1:]:
        head = re.match(r"- \*\*([^*]+)\*\*: (.*?)\.?$", line)
        if head:
            current = head.group(1)
            out[current] = (head.group(2), [])
        elif current and line.startswith("  - "):
            out[current][1].append(line[4:])
    return rest, out


def claims_page(text: str, names: set[str]) -> str:
    """CLAIMS.md made to fit a page: each table of one row per claim and profile (it has a
    ``profile`` column) becomes one block per claim (its first column), with the values every row
    shares as a field list and the rest (one row per profile) as a small table, then how its check
    was registered and its history (every earlier check and verdict, dated, with the reason);
    notebook names link to their pages. The summary table (one short row per claim, no
    ``profile`` column) stays a table."""
    text, history = _split_history(text)
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and _ROW.match(lines[i]) and _ROW.match(lines[i + 1]) and _is_rule(_cells(lines[i + 1])) \
                and "profile" in _cells(lines[i]):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and _ROW.match(lines[i]):
                cells = _cells(lines[i])
                rows.append(dict(zip(header, cells + [""] * (len(header) - len(cells)))))
                i += 1
            out.extend(_claim_blocks(header, rows, names, history))
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out) + "\n"


def _claim_blocks(header: list[str], rows: list[dict], names: set[str],
                  history: dict[str, tuple[str, list[str]]] | None = None) -> list[str]:
    key, rest = header[0], header[1:]
    text_col = "statement" if "statement" in rest else None
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    out = []
    for claim_id, group in groups.items():
        out += ["", f"## {claim_id}", ""]
        if text_col:
            out += [group[0][text_col], ""]
        shared = [c for c in rest if c != text_col and len({r[c] for r in group}) == 1]
        varying = [c for c in rest if c != text_col and c not in shared]
        for col in shared:
            out.append(f":{col}: {_link_notebook(group[0][col], names, '../')}")
        if varying:
            out += ["", "| " + " | ".join(varying) + " |", "|" + "---|" * len(varying)]
            for row in group:
                out.append("| " + " | ".join(_link_notebook(row[c], names, "../") for c in varying) + " |")
        if history and claim_id in history:
            registration, lines = history[claim_id]
            out += ["", f":registration: {registration}"]
            if lines:
                out += ["", "History (earlier checks and verdicts, dated, with the reasons):", ""]
                out += [f"- {line}" for line in lines]
        out.append("")
    return out


def _readme_page(readme: str, names: set[str], papers: list[str]) -> str:
    """The README as the book's home page: notebook names and claims tables become links, and
    images of published figures (``papers/<paper>/figures/x.png``) point to the book's copies."""
    text = re.sub(r"`((?:[a-z0-9_]+/)?[0-9]{2}_[a-z0-9_]+)`",
                  lambda m: _link_notebook(m.group(1), names, ""), readme)
    for paper in papers:
        text = text.replace(f"`papers/{paper}/CLAIMS.md`", f"[`papers/{paper}/CLAIMS.md`](claims/{paper}.md)")
        text = text.replace(f"](papers/{paper}/figures/", f"](figures/{paper}/")
    return text


def with_board(page: str, paper: str, names: set[str]) -> str:
    """The claims page with the paper's verdict board after its title, its notebook names linked to
    the pages of ``names`` (a note instead when the published results cannot be read: the page says
    which file and why)."""
    from compendium import board, tables

    try:
        block = board.html_for(paper, claims_page="", notebooks_base="../notebooks/", notebooks=names)
    except tables.ResultsFileError as err:
        block = f":::{{warning}}\nNo verdict board: {err}\n:::"
    lines = page.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
    return "\n".join(lines[:at] + ["", block, ""] + lines[at:])


def _toctree(caption: str, entries: list[str]) -> str:
    return "\n".join(["", "```{toctree}", f":caption: {caption}", ":hidden:", "", *entries, "```", ""])


def _claims_yaml(paper: str) -> dict:
    import yaml

    return yaml.safe_load((paths.papers_dir() / paper / "claims.yaml").read_text(encoding="utf-8")) or {}


def _paper_title(paper: str) -> str:
    return str((_claims_yaml(paper).get("paper") or {}).get("title") or paper)


def _missing_claims(page: str, paper: str) -> str:
    """Blocks for the claims of claims.yaml that the page (a CLAIMS.md older than it) lacks."""
    out = []
    for claim in _claims_yaml(paper).get("claims") or []:
        cid = str(claim.get("id", ""))
        if cid and not re.search(rf"^## {re.escape(cid)}\s*$", page, re.M):
            out += ["", f"## {cid}", "", str(claim.get("statement", "")).strip(), "",
                    ":status: not in CLAIMS.md yet (`make claims` rebuilds it from `claims.yaml`)", ""]
    return "\n".join(out)
