"""The verdict board: every claim of a paper (rows) against the profiles (columns), each cell
coloured by the verdict derived from the published results, in one compact view.

    from compendium import board
    b = board.build("accpp")                      # derived from papers/accpp/results + claims.yaml
    board.to_html(b, claims_page="../claims/accpp.html", notebooks_base="")   # for a notebook page
    board.png_bytes(b)                            # the same board as a PNG (papers/<paper>/figures/)

The verdicts are derived exactly as the claims tables derive them (:func:`compendium.tables.read_results`,
which applies :func:`compendium.judge.derive` to every recorded value and never reads a stored
verdict). A cell is one of :data:`STATUSES`: *holds*, *does not hold*, *inconclusive*, *measured
only*, *not judged* (recorded under an earlier check: greyed, its value still shown) or *not run*
(nothing recorded at that profile). Each row names the claim and its short statement, with an
*own claim* badge for the compendium's own claims (``source: compendium``); each cell shows the
value, the units it rests on and the model (:mod:`compendium.basis`), ``⚠`` when a mark is to be
read and ``≠`` when it is at odds with the other profile's verdict. Hovering a cell (its ``title``)
gives the measured value, the 95% interval of the check's main quantity where one was recorded,
the units in full and where their count comes from, the model(s), what failed, the disagreement
and the reason of the verdict; each claim links to its block on the paper's claims page and to its
notebook's page (the narrow last column, by the notebook's number).

The HTML carries its own scoped style (no word is ever split: cells do not wrap, and a board wider
than its column scrolls sideways); it is what the book shows at the top of each claims page and
what the tour notebook displays. The PNG (:func:`png_bytes`) is written by the publish path only
(``compendium run --publish`` and ``compendium claims``) as ``papers/<paper>/figures/verdict_board.png``.
"""
from __future__ import annotations

import html
import io
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from compendium import claims as _claims
from compendium import basis, integrity, profiles, tables

FIGURE_NAME = "verdict_board.png"
SHORT_STATEMENT = 34                             # characters of a row's statement on the board
FIGURE_STATEMENT = 64                            # and on the PNG, which has the room
NOT_JUDGED = _claims.NOT_JUDGED
NOT_RUN = _claims.NOT_RUN
STATUSES = (_claims.HOLDS, _claims.DOES_NOT_HOLD, _claims.INCONCLUSIVE, _claims.MEASURED_ONLY, NOT_JUDGED, NOT_RUN)


@dataclass(frozen=True)
class Look:
    """How a status is drawn: CSS class suffix, a symbol (the colour is never the only cue),
    background and text colours (the same in the HTML and the PNG)."""
    css: str
    symbol: str
    background: str
    text: str


LOOKS = {
    _claims.HOLDS: Look("holds", "\u2713", "#1b7a55", "#ffffff"),
    _claims.DOES_NOT_HOLD: Look("fails", "\u2717", "#b8322a", "#ffffff"),
    _claims.INCONCLUSIVE: Look("inconclusive", "?", "#e8a317", "#1d1d1d"),
    _claims.MEASURED_ONLY: Look("measured", "\u2261", "#4f6f9a", "#ffffff"),
    NOT_JUDGED: Look("not-judged", "\u2013", "#e2e2e2", "#5f5f5f"),   # greyed: its value, under an earlier check
    NOT_RUN: Look("not-run", "\u00b7", "#ffffff", "#6b6b6b"),
}


@dataclass(frozen=True)
class Cell:
    """One claim at one profile."""
    claim: str
    profile: str
    status: str                                  # one of STATUSES
    value: str = ""                              # the measured value as text ("" when not run)
    interval: tuple[str, str] | None = None      # the 95% interval of the check's main quantity
    point: str = ""                              # why the check's main quantity has no interval
    reason: str = ""
    marks: tuple[str, ...] = ()                  # e.g. the value's notebook failed in the last publish
    plain: str = ""                              # the value without its unit (the cell's text)
    units: str = ""                              # what the value rests on, short ("67 contexts")
    units_full: str = ""                         # in full, with where the count comes from
    models: tuple[str, ...] = ()                 # the model(s) it was measured on
    failing: tuple[str, ...] = ()                # what failed (or is undecided), from judge.derive's outcomes
    odds: str = ""                               # why it is at odds with the other profile's verdict

    @property
    def model(self) -> str:
        """The model for the cell: the first, and how many more."""
        return basis.models_text(self.models)

    @property
    def measured(self) -> str:
        """The value and the units it rests on (``0.629 \u00b7 8 circuits``); "" when not run."""
        if self.status == NOT_RUN:
            return ""
        value = self.plain or self.value
        value = value if len(value) <= 12 else value[:11] + "\u2026"
        return " \u00b7 ".join(x for x in (value, self.units) if x)

    @property
    def detail(self) -> str:
        """Value, units and model on one line (``0.629 \u00b7 8 circuits \u00b7 smollm2-135m``); the HTML
        board puts the model on a line of its own."""
        return " \u00b7 ".join(x for x in (self.measured, self.model if self.measured else "") if x)

    @property
    def flags(self) -> str:
        """The marks after the verdict: \u26a0 (a mark to read), \u2260 (at odds with the other profile)."""
        return ("\u26a0" if self.marks else "") + ("\u2260" if self.odds else "")

    @property
    def look(self) -> Look:
        return LOOKS[self.status]

    @property
    def hover(self) -> str:
        """The cell's hover text: verdict, value, interval, reason."""
        lines = [f"{self.claim} at {self.profile}: {self.status}"]
        if self.status == NOT_RUN:
            lines.append("nothing recorded at this profile yet")
        else:
            lines.append(f"measured: {self.value}")
            lines.append(f"95% interval: {self.interval[0]} to {self.interval[1]}" if self.interval
                         else f"no interval: {self.point}" if self.point else "95% interval: none recorded")
            lines.append(f"rests on: {self.units_full}" if self.units_full else "rests on: no count recorded")
            lines.append(f"model: {', '.join(self.models)}" if self.models else "model: none named")
        lines.extend(self.failing)
        if self.odds:
            lines.append(f"\u2260 {self.odds}")
        if self.reason:
            reason = " ".join(self.reason.replace("`", "").split())
            lines.append(reason if len(reason) <= 600 else reason[:599] + "\u2026")
        lines.extend(self.marks)
        return "\n".join(lines)


@dataclass(frozen=True)
class Row:
    claim: str
    statement: str
    notebook: str | None
    cells: dict[str, Cell]
    own: bool = False                            # the compendium's own claim, not the paper's

    @property
    def short(self) -> str:
        """The statement as the board shows it (:func:`compendium.basis.short_statement`)."""
        return basis.short_statement(self.statement, SHORT_STATEMENT)


@dataclass(frozen=True)
class Board:
    paper: str
    title: str
    profiles: tuple[str, ...]
    rows: tuple[Row, ...] = field(default_factory=tuple)

    def counts(self, profile: str) -> dict[str, int]:
        """{status: number of claims} at ``profile``, in :data:`STATUSES` order, zeros left out."""
        out = {s: 0 for s in STATUSES}
        for r in self.rows:
            out[r.cells[profile].status] += 1
        return {s: n for s, n in out.items() if n}


def status_of(entry: dict | None) -> str:
    """The board's status of a result read by :func:`compendium.tables.read_entry` (None: not run)."""
    if entry is None:
        return NOT_RUN
    status = entry.get("derived_status")
    if status not in STATUSES:
        raise ValueError(f"{entry.get('claim')} at {entry.get('profile')}: no derived verdict ({status!r})")
    return status


def _cell(claim: _claims.Claim, profile: str, entry: dict | None, published: dict,
          other: tuple[str, dict | None] | None = None) -> Cell:
    status = status_of(entry)
    if entry is None:
        # a published result deleted: never "not run" (compendium.integrity)
        gone = integrity.missing_results(claim.key.split("/", 1)[0], {}, published).get((claim.id, profile))
        if gone:
            return Cell(claim.id, profile, NOT_JUDGED, value="missing", reason=gone, marks=(gone,))
        return Cell(claim.id, profile, status)
    # the main quantity's outcome (absent when it was not measured, see compendium.judge)
    main = next((c for c in entry.get("conditions") or [] if claim.check and c.get("quantity") == claim.check.quantity), {})
    interval = main.get("interval_values")
    units = basis.units_of(claim, entry, profile)
    return Cell(claim.id, profile, status, value=_claims._fmt(entry.get("value"), entry.get("unit") or claim.unit or ""),
                plain=_claims._fmt(entry.get("value")),
                interval=None if not interval else (_claims._fmt(interval[0]), _claims._fmt(interval[1])),
                point=(claim.check.point or "") if claim.check else "",
                reason=str(entry.get("reason") or ""),
                marks=tuple(tables._marks(claim, profile, entry, published)),
                units="" if units is None else units.short,
                units_full="" if units is None else f"{units.text} ({units.where})",
                models=basis.models_of(claim, entry, profile), failing=tuple(basis.failing(entry)),
                odds=basis.disagreement(claim, entry, other[1], other[0]) if other else "")


def build(paper: str, results: dict[str, dict[str, dict]] | None = None, published: dict | None = None) -> Board:
    """The board of ``paper`` from its published results (or ``results``, as
    :func:`compendium.tables.read_results` returns them), every verdict derived from the values."""
    p = _claims.load_paper(paper)
    rec = tables.read_results(paper) if results is None else results
    published = tables.read_published(paper) if published is None else published
    names = tuple(profiles.PROFILES)

    def other(claim_id: str, prof: str) -> tuple[str, dict | None] | None:
        there = next((x for x in names if x != prof), None)
        return None if there is None else (there, rec.get(claim_id, {}).get(there))

    rows = tuple(Row(c.id, c.statement, c.notebook,
                     {prof: _cell(c, prof, rec.get(c.id, {}).get(prof), published, other(c.id, prof)) for prof in names},
                     own=basis.is_own(c))
                 for c in p.claims.values())
    return Board(paper=paper, title=p.title, profiles=names, rows=rows)


def anchor(claim_id: str) -> str:
    """The id of a claim's section on its claims page (the heading ``## <claim id>``)."""
    return re.sub(r"[^a-z0-9]+", "-", claim_id.lower()).strip("-")


# -- HTML ------------------------------------------------------------------------------------------
# Selectors carry the board's class twice over the book's and JupyterLab's own table rules, which
# let cells wrap anywhere; here no cell wraps, and a board wider than its column scrolls sideways.
STYLE = """
.verdict-board{margin:.4rem 0 1.2rem;font-size:13px;line-height:1.3;max-width:100%}
.verdict-board .vb-title{font-weight:600;margin:0 0 .25rem}
.verdict-board .vb-summary{margin:0 0 .35rem;font-size:12px}
.verdict-board .vb-legend{display:flex;flex-wrap:wrap;gap:4px 6px;margin:0 0 .4rem;padding:0;list-style:none;font-size:12px}
.verdict-board .vb-legend li{margin:0;padding:1px 6px;border-radius:3px;white-space:nowrap}
.verdict-board .vb-scroll{overflow-x:auto;max-width:100%}
.verdict-board table.vb-table{border-collapse:separate;border-spacing:2px;width:auto;table-layout:auto;margin:0;border:0;font-size:13px}
.verdict-board table.vb-table th,.verdict-board table.vb-table td{white-space:nowrap;word-break:normal;overflow-wrap:normal;
padding:1px 5px;line-height:1.2;border:0;text-align:left;vertical-align:middle;max-width:none}
.verdict-board table.vb-table thead th{font-weight:600;font-size:12px}
.verdict-board table.vb-table th.vb-claim{font-weight:500;font-family:var(--pst-font-family-monospace,ui-monospace,monospace);font-size:11px}
.verdict-board table.vb-table td.vb-notebook{font-family:var(--pst-font-family-monospace,ui-monospace,monospace);font-size:11px}
.verdict-board table.vb-table td.vb-cell{min-width:8.5em;border-radius:3px;font-size:12px}
.verdict-board a{text-underline-offset:.22em}
.verdict-board table.vb-table td.vb-cell a{color:inherit;text-decoration:none;display:block}
.verdict-board table.vb-table td.vb-cell a:hover{text-decoration:underline}
.verdict-board .vb-not-run{outline:1px dashed #9a9a9a;outline-offset:-1px}
.verdict-board .vb-statement,.verdict-board .vb-detail{display:block;font-size:10px;font-weight:400;line-height:1.15}
.verdict-board .vb-statement{font-family:var(--pst-font-family-base,system-ui,sans-serif);opacity:.8}
.verdict-board .vb-detail{opacity:.92}
.verdict-board .vb-verdict{display:block}
.verdict-board .vb-flags{font-weight:700}
.verdict-board .vb-own{font-family:var(--pst-font-family-base,system-ui,sans-serif);font-size:10px;font-weight:600;
padding:0 4px;border-radius:3px;border:1px solid currentColor;margin-left:4px;opacity:.85}
.verdict-board td.vb-cell[data-odds]{box-shadow:inset 0 0 0 2px #6a1b9a}
""".strip().replace("\n", " ")


#: what the marks of a cell and a row say (the legend of the HTML board and of the PNG)
KEYS = ("\u26a0 a mark to read (hover)", "\u2260 at odds with the other profile",
        f"{basis.OWN_LABEL}: the compendium's, not the paper's", "value \u00b7 n units \u00b7 model")


def _style_rules() -> str:
    rules = [STYLE]
    for status, look in LOOKS.items():
        if status == NOT_RUN:  # no fill: readable on the book's light and dark themes alike
            rules.append(f".verdict-board .vb-{look.css}{{background:transparent;color:inherit;opacity:.7}}")
        else:
            rules.append(f".verdict-board .vb-{look.css}{{background:{look.background};color:{look.text}}}")
    return "".join(rules)


def _a(href: str, text: str, title: str = "") -> str:
    t = f' title="{html.escape(title, quote=True)}"' if title else ""
    return f'<a href="{html.escape(href, quote=True)}"{t}>{html.escape(text)}</a>'


def summary_text(b: Board) -> str:
    """One line per profile: how many claims have each verdict."""
    parts = []
    for prof in b.profiles:
        counts = b.counts(prof)
        parts.append(f"{prof}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return "; ".join(parts)


def to_html(b: Board, *, claims_page: str = "", notebooks_base: str = "../notebooks/",
            notebooks: Collection[str] | None = None) -> str:
    """The board as one HTML block (no blank line, so it can stand in a Markdown page as raw HTML).

    Links: a claim goes to ``{claims_page}#{anchor}`` (its block on the claims page; ``""`` on that
    page itself), its notebook to ``{notebooks_base}{notebook}.html`` (the book's notebook pages),
    for the notebooks in ``notebooks`` (default: every one; another is named without a link)."""
    head = "".join(f'<th scope="col" class="vb-profile">{html.escape(p)}</th>' for p in b.profiles)
    out = [f'<div class="verdict-board" data-paper="{html.escape(b.paper, quote=True)}">',
           f"<style>{_style_rules()}</style>",
           f'<p class="vb-title">Verdict board: {html.escape(b.title)}</p>',
           f'<p class="vb-summary">{html.escape(summary_text(b))}</p>',
           '<ul class="vb-legend">' + "".join(
               f'<li class="vb-{LOOKS[s].css}">{LOOKS[s].symbol} {html.escape(s)}</li>' for s in STATUSES)
           + "".join(f'<li class="vb-key">{html.escape(k)}</li>' for k in KEYS) + "</ul>",
           '<div class="vb-scroll"><table class="vb-table">',
           f'<thead><tr><th scope="col" class="vb-claim">claim</th>{head}<th scope="col" title="notebook">nb</th></tr></thead>',
           "<tbody>"]
    for r in b.rows:
        target = f"{claims_page}#{anchor(r.claim)}"
        cells = []
        for prof in b.profiles:
            c = r.cells[prof]
            flags = f' <span class="vb-flags">{c.flags}</span>' if c.flags else ""
            detail = "".join(f'<span class="vb-detail">{html.escape(x)}</span>' for x in (c.measured, c.model if c.measured else "") if x)
            odds = ' data-odds="1"' if c.odds else ""
            cells.append(f'<td class="vb-cell vb-{c.look.css}" data-status="{html.escape(c.status, quote=True)}" '
                         f'data-profile="{html.escape(prof, quote=True)}"{odds} title="{html.escape(c.hover, quote=True)}">'
                         f'<a href="{html.escape(target, quote=True)}"><span class="vb-verdict">'
                         f"{html.escape(f'{c.look.symbol} {c.status}')}{flags}</span>{detail}</a></td>")
        if not r.notebook:
            nb = '<span class="vb-none" title="not yet covered">\u2014</span>'
        elif notebooks is None or r.notebook in notebooks:
            nb = _a(f"{notebooks_base}{r.notebook}.html", notebook_label(r.notebook), r.notebook)
        else:
            nb = f'<span title="{html.escape(r.notebook, quote=True)}">{html.escape(notebook_label(r.notebook))}</span>'
        own = f' <span class="vb-own">{basis.OWN_LABEL}</span>' if r.own else ""
        own_attr = ' data-own="1"' if r.own else ""
        out.append(f'<tr data-claim="{html.escape(r.claim, quote=True)}"{own_attr}>'
                   f'<th scope="row" class="vb-claim">{_a(target, r.claim, r.statement)}{own}'
                   f'<span class="vb-statement">{html.escape(r.short)}</span></th>'
                   + "".join(cells) + f'<td class="vb-notebook">{nb}</td></tr>')
    out += ["</tbody></table></div>", "</div>"]
    return "\n".join(out)


def notebook_label(name: str) -> str:
    """A notebook as the board's narrow column names it: its number (``04`` for
    ``accpp/04_signal_interventions``; the whole name is the link's title), else its name."""
    stem = name.rsplit("/", 1)[-1]
    number = re.match(r"(\d+)_", stem)
    return number.group(1) if number else stem


def html_for(paper: str, **links) -> str:
    """:func:`to_html` of :func:`build` (``paper``'s published results)."""
    return to_html(build(paper), **links)


# -- the static figure -----------------------------------------------------------------------------
def figure(b: Board):
    """The board drawn with matplotlib (no pyplot: no global figure state): one row per claim (its
    id, marked when it is the compendium's own, over its short statement), one column per profile,
    each cell the verdict's colour and word with its marks, over the value, units and model."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    n = len(b.rows)
    width, row, top, bottom = 10.0, 0.42, 0.72, 0.95          # inches: rows, title + profile names, legend
    height = top + row * n + bottom
    fig = Figure(figsize=(width, height), dpi=150)
    left = 0.40
    ax = fig.add_axes((left, bottom / height, 0.985 - left, row * n / height))
    for y, r in enumerate(b.rows):
        own = f"  [{basis.OWN_LABEL}]" if r.own else ""
        ax.text(-0.03, y + 0.36, r.claim + own, ha="right", va="center", fontsize=8.5, family="monospace",
                transform=ax.transData, color="#1d1d1d")
        ax.text(-0.03, y + 0.72, basis.short_statement(r.statement, FIGURE_STATEMENT), ha="right", va="center",
                fontsize=6.8, color="#505050")
        for x, prof in enumerate(b.profiles):
            c = r.cells[prof]
            ax.add_patch(Rectangle((x + 0.03, y + 0.05), 0.94, 0.9, facecolor=c.look.background,
                                   edgecolor="#6a1b9a" if c.odds else "#9a9a9a" if c.status == NOT_RUN else "none",
                                   linestyle="-" if c.odds else "--", linewidth=1.6 if c.odds else 0.8))
            flags = f" {c.flags}" if c.flags else ""
            ax.text(x + 0.5, y + 0.36, f"{c.look.symbol} {c.status}{flags}", ha="center", va="center",
                    fontsize=8.5, color=c.look.text, fontweight="bold" if c.status != NOT_JUDGED else "normal")
            if c.detail:
                ax.text(x + 0.5, y + 0.72, c.detail, ha="center", va="center", fontsize=6.8, color=c.look.text)
    ax.set_xlim(0, len(b.profiles))
    ax.set_ylim(n, 0)
    ax.set_xticks([x + 0.5 for x in range(len(b.profiles))], list(b.profiles), fontsize=9.5)
    ax.xaxis.tick_top()
    ax.set_yticks([])
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.suptitle(f"Verdicts: {b.paper} (derived from the published results)", fontsize=10.5,
                 fontweight="bold", x=0.02, y=1 - 0.12 / height, ha="left", va="top")
    handles = [Patch(facecolor=LOOKS[s].background, edgecolor="#9a9a9a", label=f"{LOOKS[s].symbol} {s}")
               for s in STATUSES]
    handles += [Patch(facecolor="none", edgecolor="none", label=k) for k in KEYS]
    fig.legend(handles=handles, loc="lower center", ncols=5, fontsize=7.5, frameon=False, handlelength=1.2)
    return fig


def png_bytes(b: Board) -> bytes:
    """The figure as PNG bytes, the same for the same board (no time or version in the file)."""
    buf = io.BytesIO()
    figure(b).savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
