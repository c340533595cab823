"""What the book's browser tests check on a page, as functions a test calls with a Playwright page:
no table cell splits a word (:func:`check_words`), every verdict board is complete, fits one screen
and the text column and says what each verdict rests on (:func:`check_boards`), and a claims page
opens with its summary table inside the text column (:func:`check_summary`). Each is shown failing
on planted pages in test_page_checks.py."""
from __future__ import annotations

from pathlib import Path

import yaml

from compendium.paths import repo_root

ROOT = repo_root()

SPLIT_WORDS = """() => {
  // words (runs of letters and digits) of table cells that the browser laid out on two lines, and
  // cells whose style lets the browser break inside words
  const split = [], loose = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const st = getComputedStyle(cell);
    if (st.wordBreak === 'break-all' || st.overflowWrap === 'anywhere') loose.push(cell.textContent.slice(0, 40));
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /[\\p{L}\\p{N}]{2,}/gu;
      for (let m = re.exec(node.textContent); m; m = re.exec(node.textContent)) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
        if (tops.size > 1) split.push(m[0]);
      }
    }
  }
  return {split: split.slice(0, 20), n_split: split.length, loose: loose.slice(0, 5), n_loose: loose.length};
}"""

BOARDS = """() => Array.from(document.querySelectorAll('.verdict-board')).map(b => {
  const box = b.getBoundingClientRect(), art = document.querySelector('.bd-article').getBoundingClientRect();
  const scroll = b.querySelector('.vb-scroll');
  return {paper: b.dataset.paper, height: box.height, right: box.right, article_right: art.right + 1,
          clipped: scroll.scrollWidth - scroll.clientWidth,
          rows: Array.from(b.querySelectorAll('tbody tr')).map(r => r.dataset.claim),
          cells: Array.from(b.querySelectorAll('td.vb-cell')).map(c => ({status: c.dataset.status, cls: c.className,
                                                                      title: c.title, odds: !!c.dataset.odds,
                                                                      verdict: c.querySelector('.vb-verdict').textContent,
                                                                      detail: (c.querySelector('.vb-detail') || {}).textContent || ''})),
          heads: Array.from(b.querySelectorAll('tbody th.vb-claim')).map(h => ({
            own: !!h.closest('tr').dataset.own, badge: (h.querySelector('.vb-own') || {}).textContent || '',
            statement: (h.querySelector('.vb-statement') || {}).textContent || ''})),
          links: Array.from(b.querySelectorAll('a')).map(a => a.href)};
})"""


# the summary table that opens a claims page (its header's first cell is "Claim"): its rows and its fit
SUMMARY = """() => {
  const t = Array.from(document.querySelectorAll('.bd-article table')).find(
    t => (t.querySelector('thead th') || {}).textContent === 'Claim');
  if (!t) return null;
  const box = t.getBoundingClientRect(), art = document.querySelector('.bd-article').getBoundingClientRect();
  let clipped = 0;
  for (let e = t; e && !e.classList.contains('bd-article'); e = e.parentElement)
    clipped = Math.max(clipped, e.scrollWidth - e.clientWidth);
  return {right: box.right, article_right: art.right + 1, clipped: clipped,
          head: Array.from(t.querySelectorAll('thead th')).map(h => h.textContent.trim()),
          rows: Array.from(t.querySelectorAll('tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent.trim()))};
}"""


def check_summary(page, rel: str, paper: str) -> None:
    """The claims page of ``paper`` opens with the summary table: a row per claim of claims.yaml, in
    its order, own claims marked as such alone, a verdict per profile, the whole table inside the
    text column (no sideways scroll)."""
    from compendium import basis, profiles

    found = page.evaluate(SUMMARY)
    assert found, f"{rel}: no summary table (its header starting with 'Claim')"
    items = yaml.safe_load((ROOT / "papers" / paper / "claims.yaml").read_text())["claims"]
    assert found["head"][-len(profiles.PROFILES):] == list(profiles.PROFILES)
    assert [r[0].split()[0] for r in found["rows"]] == [c["id"] for c in items], f"{rel}: summary rows"
    assert [basis.OWN_LABEL in r[0] for r in found["rows"]] == [c.get("source") == basis.OWN_SOURCE for c in items]
    assert found["right"] <= found["article_right"] and found["clipped"] <= 1, \
        f"{rel}: the summary table is wider than the text column ({found})"


def check_words(page, rel: str) -> None:
    """No table cell of ``page`` splits a word across two lines, nor allows it by its style."""
    found = page.evaluate(SPLIT_WORDS)
    assert found["n_loose"] == 0, f"{rel}: {found['n_loose']} table cells may break inside words: {found['loose']}"
    assert found["n_split"] == 0, f"{rel}: {found['n_split']} words split across lines in table cells: {found['split']}"


def _target_exists(url: str) -> bool:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    path = Path(unquote(parsed.path))
    if not path.is_file():
        return False
    return not parsed.fragment or f'id="{parsed.fragment}"' in path.read_text(encoding="utf-8")


def check_boards(page, rel: str) -> list[str]:
    """Every verdict board of ``page``: a row per claim of its paper in claims.yaml order, each with
    its short statement and, for the compendium's own claims (``source: compendium``) alone, the
    own-claim badge; a cell per profile with its verdict's class and hover text; every cell with a
    result shows its value (one recorded under an earlier check too, greyed) and, on hover, the
    units it rests on and its model; a cell marked at odds with the other profile says why; the
    whole board in one screen (under 1000 px high at 1280x900), inside the text column, every link
    leading to an existing page and section. Returns the papers of the boards found."""
    from compendium import basis, board

    found = page.evaluate(BOARDS)
    for b in found:
        items = yaml.safe_load((ROOT / "papers" / b["paper"] / "claims.yaml").read_text())["claims"]
        ids = [c["id"] for c in items]
        assert b["rows"] == ids, f"{rel}: the {b['paper']} board's rows are not the claims of claims.yaml"
        own = [c.get("source") == basis.OWN_SOURCE for c in items]
        assert [h["own"] for h in b["heads"]] == own, f"{rel}: the {b['paper']} board marks other claims as own"
        assert all((h["badge"] == basis.OWN_LABEL) == o for h, o in zip(b["heads"], own))
        assert all(h["statement"].strip() for h in b["heads"]), f"{rel}: a {b['paper']} board row has no statement"
        assert len(b["cells"]) == 2 * len(ids)
        for c in b["cells"]:
            assert c["status"] in board.STATUSES and f"vb-{board.LOOKS[c['status']].css}" in c["cls"].split()
            assert c["title"].split("\n")[0].endswith(c["status"]) and ("measured:" in c["title"] or "nothing recorded" in c["title"])
            if c["status"] != board.NOT_RUN:
                assert c["detail"].strip() and "rests on: " in c["title"] and "model: " in c["title"], c["title"]
            assert c["odds"] == ("\u2260" in c["verdict"]) == ("\u2260 at odds with" in c["title"]), c["title"]
        assert b["height"] < 1000, f"{rel}: the {b['paper']} board is {b['height']:.0f} px high (over one screen)"
        assert b["right"] <= b["article_right"] and b["clipped"] <= 1, f"{rel}: the {b['paper']} board is wider than the page"
        broken = sorted({u for u in b["links"] if not _target_exists(u)})
        assert not broken, f"{rel}: board links to missing pages or sections: {broken[:5]}"
    return [b["paper"] for b in found]
