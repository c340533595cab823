"""The book's page checks (page_checks.py) fail on planted pages: a table cell that splits a word or
may, a verdict board taller than one screen or whose own claims lost their mark, a summary table wider
than the text column or marking the wrong claims as own."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compendium.paths import repo_root
from page_checks import check_boards, check_summary, check_words

pytestmark = pytest.mark.browser

ROOT = repo_root()
PAPERS = sorted(p.parent.name for p in (ROOT / "papers").glob("*/claims.yaml"))


def test_a_split_word_and_an_oversized_board_are_caught(watched, tmp_path):
    """check_words and check_boards fail on a page that splits words or has a board over one screen."""
    from compendium import board

    narrow = tmp_path / "narrow.html"
    narrow.write_text('<!DOCTYPE html><html><body><table style="width:40px"><tr><td style="overflow-wrap:anywhere">'
                      "profile 32b4b2634f</td></tr></table></body></html>", encoding="utf-8")
    w = watched("split-words")
    w.page.goto(narrow.as_uri(), wait_until="load")
    with pytest.raises(AssertionError, match="may break inside words"):
        check_words(w.page, "narrow.html")
    w.page.evaluate("() => document.querySelector('td').style.overflowWrap = 'normal'")
    w.page.evaluate("() => document.querySelector('td').style.wordBreak = 'normal'")
    check_words(w.page, "narrow.html")                     # normal wrapping never splits a word
    w.page.evaluate("() => { const t = document.querySelector('td'); t.style.display = 'block'; "
                    "t.style.width = '30px'; t.style.wordBreak = 'break-word'; }")
    with pytest.raises(AssertionError):
        check_words(w.page, "narrow.html")

    tall = tmp_path / "tall.html"
    paper = PAPERS[0]
    block = board.html_for(paper, claims_page="", notebooks_base="")
    tall.write_text('<!DOCTYPE html><html><body><div class="bd-article" style="width:700px">'
                    + block.replace("padding:1px 5px", "padding:30px 5px") + "</div></body></html>", encoding="utf-8")
    w.page.goto(tall.as_uri(), wait_until="load")
    with pytest.raises(AssertionError, match="over one screen"):
        check_boards(w.page, "tall.html")


def test_a_summary_wider_than_the_page_and_a_wrong_own_mark_are_caught(watched, tmp_path):
    """check_summary fails on a summary table wider than the text column and on own-claim marks on
    the wrong rows; check_boards fails on a board whose own claims lost their mark."""
    from compendium import basis, board

    paper = "protot"                                        # it has claims of the compendium's own
    items = yaml.safe_load((ROOT / "papers" / paper / "claims.yaml").read_text())["claims"]
    assert any(c.get("source") == basis.OWN_SOURCE for c in items)

    def page(cell: str, own_for) -> Path:
        rows = "".join(f"<tr><td>{c['id']}{' ' + basis.OWN_LABEL if own_for(c) else ''}</td><td>{cell}</td>"
                       "<td>not run</td></tr>" for c in items)
        path = tmp_path / "summary.html"
        path.write_text('<!DOCTYPE html><html><body><div class="bd-article" style="width:500px">'
                        "<table><thead><tr><th>Claim</th><th>cpu</th><th>paper</th></tr></thead>"
                        f"<tbody>{rows}</tbody></table></div></body></html>", encoding="utf-8")
        return path

    w = watched("summary")
    own = lambda c: c.get("source") == basis.OWN_SOURCE  # noqa: E731
    w.page.goto(page("holds", own).as_uri(), wait_until="load")
    check_summary(w.page, "summary.html", paper)            # fits, marks right
    w.page.goto(page("x" * 120, own).as_uri(), wait_until="load")
    with pytest.raises(AssertionError, match="wider than the text column"):
        check_summary(w.page, "summary.html", paper)
    w.page.goto(page("holds", lambda c: not own(c)).as_uri(), wait_until="load")
    with pytest.raises(AssertionError):
        check_summary(w.page, "summary.html", paper)

    block = board.html_for(paper, claims_page="", notebooks_base="").replace(' data-own="1"', "")
    unmarked = tmp_path / "unmarked.html"
    unmarked.write_text('<!DOCTYPE html><html><body><div class="bd-article" style="width:700px">' + block
                        + "</div></body></html>", encoding="utf-8")
    w.page.goto(unmarked.as_uri(), wait_until="load")
    with pytest.raises(AssertionError, match="marks other claims as own"):
        check_boards(w.page, "unmarked.html")
