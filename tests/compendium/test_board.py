"""The verdict board (compendium.board): one row per claim, one cell per profile, each coloured by
the verdict derived from the recorded values (never the verdict a results file states), with the
value and its interval on hover and links to the claim's block and its notebook; each row's short
statement and the compendium's own claims marked; each cell's value, units and model, what failed,
a value under an earlier check greyed but shown, and a disagreement between the profiles marked;
and the same board as a PNG, written by the publish path."""
from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from compendium import board, claims, publish, tables

from test_publish import complete_run

RANGED = """\
  - id: ranged
    statement: "The effect is positive <b>bold</b> & sure."
    where: "§5"
    paper_value: 0.3
    unit: "nats"
    source: paper
    notebook: demo/01_good
    check: {quantity: effect, op: ">", threshold: 0, interval: [effect_lo, effect_hi]}
"""


@pytest.fixture
def recorded(run_dir, demo_root):
    """A demo paper with a claim judged on an interval; results recorded in ``run_dir`` for every
    verdict: holds, does not hold, inconclusive, measured only, not judged, and claims not run."""
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + RANGED)
    complete_run(run_dir)                                        # gain holds, loss fails, plain measured only
    claims.conclude(claims.Measurement("demo/ranged", {"effect": 0.3, "effect_lo": 0.12, "effect_hi": 0.51}),
                    profile="cpu", seed=0)
    claims.conclude(claims.Measurement("demo/ranged", {"effect": 0.1, "effect_lo": -0.2, "effect_hi": 0.4}),
                    profile="paper", seed=0)                     # the interval straddles 0: inconclusive
    claims.conclude(claims.Measurement("demo/gain", {"gain": 9.0, "ci_low": 0.2, "context_effect": 0.3}),
                    profile="paper", seed=0)
    folder = run_dir / "results" / "demo"
    # a result recorded under another check: not judged; and a stored verdict that says the opposite
    # of what the values give (the board must not read it)
    gain_paper = folder / "gain.paper.json"
    entry = json.loads(gain_paper.read_text())
    gain_paper.write_text(json.dumps({**entry, "check_sha256": "0" * 64, "verdict": "holds"}))
    loss = folder / "loss.cpu.json"
    loss.write_text(json.dumps({**json.loads(loss.read_text()), "verdict": "holds"}))
    return tables.read_results("demo", tables.result_files("demo", folder))


EXPECTED = {("gain", "cpu"): "holds", ("gain", "paper"): "not judged", ("loss", "cpu"): "does not hold",
            ("loss", "paper"): "not run", ("plain", "cpu"): "measured only", ("plain", "paper"): "not run",
            ("flag", "cpu"): "not run", ("flag", "paper"): "not run", ("ranged", "cpu"): "holds",
            ("ranged", "paper"): "inconclusive"}


class _Board(HTMLParser):
    """Rows (claim -> {profile: attributes of its cell}), links and text of a board's HTML."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict] = {}
        self.links: dict[str, list[str]] = {}
        self.text: list[str] = []
        self._claim = None
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-claim" in a:
            self._claim = a["data-claim"]
            self.rows[self._claim] = {"cells": {}}
        if tag == "td" and self._claim and "data-profile" in a:
            self.rows[self._claim]["cells"][a["data-profile"]] = a
        if tag == "a" and self._claim:
            self.links.setdefault(self._claim, []).append(a["href"])
        if tag == "th" and self._claim and a.get("scope") == "row":
            self.rows[self._claim]["th"] = a
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "tr":
            self._claim = None
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if not self._in_style:
            self.text.append(data)


def _parse(text: str) -> _Board:
    p = _Board()
    p.feed(text)
    return p


def test_every_claim_is_a_row_with_the_derived_verdict_at_every_profile(recorded):
    b = board.build("demo", results=recorded, published={})
    assert [r.claim for r in b.rows] == ["gain", "loss", "plain", "flag", "ranged"]   # claims.yaml order
    got = {(r.claim, p): r.cells[p].status for r in b.rows for p in b.profiles}
    assert got == EXPECTED
    assert b.counts("cpu") == {"holds": 2, "does not hold": 1, "measured only": 1, "not run": 1}


def test_the_html_has_a_coloured_cell_per_derived_verdict_with_value_interval_and_links(recorded):
    b = board.build("demo", results=recorded, published={})
    page = board.to_html(b, claims_page="../claims/demo.html", notebooks_base="")
    doc = _parse(page)
    assert set(doc.rows) == {"gain", "loss", "plain", "flag", "ranged"}
    for (claim, profile), status in EXPECTED.items():
        cell = doc.rows[claim]["cells"][profile]
        assert cell["data-status"] == status
        assert f"vb-{board.LOOKS[status].css}" in cell["class"].split()
        assert cell["title"].startswith(f"{claim} at {profile}: {status}")
    hover = doc.rows["ranged"]["cells"]["cpu"]["title"]
    assert "measured: 0.3 nats" in hover and "95% interval: 0.12 to 0.51" in hover
    assert "95% interval: -0.2 to 0.4" in doc.rows["ranged"]["cells"]["paper"]["title"]
    assert "straddles" in doc.rows["ranged"]["cells"]["paper"]["title"]          # the reason
    assert "95% interval: none recorded" in doc.rows["gain"]["cells"]["cpu"]["title"]
    assert "nothing recorded" in doc.rows["flag"]["cells"]["cpu"]["title"]
    assert doc.links["ranged"][0] == "../claims/demo.html#ranged"
    assert "demo/01_good.html" in doc.links["ranged"] and "demo/02_bad.html" in doc.links["loss"]
    assert not any(h.endswith(".html") and "claims" not in h for h in doc.links["flag"])   # no notebook
    assert doc.rows["ranged"]["th"]["class"] == "vb-claim"
    assert 'title="not yet covered"' in page[page.index('<tr data-claim="flag"'):page.index('<tr data-claim="ranged"')]
    assert "**" not in page and "`" not in page                  # HTML, not Markdown
    assert "\n\n" not in page                                    # one raw HTML block in a Markdown page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt; &amp; sure." in page


def test_on_its_claims_page_a_claim_links_to_its_own_section():
    assert board.anchor("women-causal-scan") == "women-causal-scan"
    assert board.anchor("A claim_id.x") == "a-claim-id-x"


def test_no_cell_of_the_board_may_wrap(recorded):
    page = board.to_html(board.build("demo", results=recorded, published={}))
    style = page[page.index("<style>"):page.index("</style>")]
    assert "white-space:nowrap" in style and "overflow-x:auto" in style
    assert "anywhere" not in style and "break-all" not in style


def test_the_png_is_the_same_board_and_the_same_bytes_each_time(recorded):
    b = board.build("demo", results=recorded, published={})
    png = board.png_bytes(b)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and board.png_bytes(b) == png
    texts = [t.get_text() for t in board.figure(b).axes[0].texts]
    for status in EXPECTED.values():
        assert any(t.endswith(status) for t in texts), status
    assert sum(t.endswith("not run") for t in texts) == list(EXPECTED.values()).count("not run")


def test_publish_writes_the_board_beside_the_claims_table(run_dir, demo_root):
    complete_run(run_dir)
    publish.publish(run_dir)
    png = demo_root / "papers" / "demo" / "figures" / board.FIGURE_NAME
    assert png.read_bytes() == board.png_bytes(board.build("demo"))
    statuses = {r.claim: r.cells["cpu"].status for r in board.build("demo").rows}
    assert statuses == {"gain": "holds", "loss": "does not hold", "plain": "measured only", "flag": "not run"}


def test_a_missing_derived_verdict_is_refused():
    with pytest.raises(ValueError, match="no derived verdict"):
        board.status_of({"claim": "demo/gain", "profile": "cpu", "verdict": "holds"})
    assert board.status_of(None) == "not run"


def test_a_registered_point_reason_replaces_none_recorded_on_hover():
    cell = board.Cell("gain", "cpu", "holds", value="7.5 %", point="exact over every case")
    assert "no interval: exact over every case" in cell.hover and "none recorded" not in cell.hover
    ranged = board.Cell("gain", "cpu", "holds", value="7.5 %", interval=("1", "2"), point="exact over every case")
    assert "95% interval: 1 to 2" in ranged.hover and "no interval" not in ranged.hover


# -- what each cell rests on, own claims, disagreements ----------------------------------------------
@pytest.fixture
def ledger(run_dir, demo_root):
    """An own claim with min_units and a protocol naming its model, among the demo claims
    (test_tables_summary.plant says what each verdict is)."""
    import test_tables_summary

    return test_tables_summary.plant(run_dir, demo_root)


def test_each_row_names_its_short_statement_and_marks_the_compendium_s_own_claims(ledger):
    b = board.build("demo", results=ledger, published={})
    rows = {r.claim: r for r in b.rows}
    assert [c for c, r in rows.items() if r.own] == ["counted"]              # source: compendium
    assert rows["counted"].short == "The compendium's own count rises."
    doc = _parse(board.to_html(b))
    assert "The compendium's own count rises." in "".join(doc.text)
    page = board.to_html(b)
    counted = page[page.index('<tr data-claim="counted"'):]
    assert counted.startswith('<tr data-claim="counted" data-own="1">') and 'class="vb-own">own claim<' in counted
    gain = page[page.index('<tr data-claim="gain"'):page.index('<tr data-claim="loss"')]
    assert "data-own" not in gain and "vb-own" not in gain


def test_each_cell_shows_its_value_units_and_model(ledger):
    rows = {r.claim: r for r in board.build("demo", results=ledger, published={}).rows}
    cpu, paper = rows["counted"].cells["cpu"], rows["counted"].cells["paper"]
    assert cpu.detail == "0.3 · 12 prompts · tiny-model" and paper.detail == "0.3 · 3 prompts · big-model"
    assert "rests on: 12 prompts of the test set (min_units quantity n_prompts)" in cpu.hover
    assert "model: tiny-model" in cpu.hover
    assert rows["flag"].cells["cpu"].detail == ""                              # not run: nothing to show
    assert "model: none named" in rows["gain"].cells["cpu"].hover             # the demo names no model


def test_a_result_under_an_earlier_check_shows_its_value_greyed_and_its_disagreement(ledger):
    b = board.build("demo", results=ledger, published={})
    rows = {r.claim: r for r in b.rows}
    earlier = rows["gain"].cells["paper"]
    assert earlier.status == "not judged" and earlier.detail == "3"
    assert board.LOOKS["not judged"].text != board.LOOKS["not judged"].background
    assert earlier.odds.startswith("at odds with cpu: does not meet gain >= 5 on its value alone")
    assert rows["gain"].cells["cpu"].odds.startswith("at odds with paper")
    assert not rows["counted"].cells["cpu"].odds                              # holds against inconclusive
    assert earlier.flags == "≠" and "≠ at odds with cpu" in earlier.hover
    doc = _parse(board.to_html(b))
    assert doc.rows["gain"]["cells"]["paper"].get("data-odds") == "1"
    assert "data-odds" not in doc.rows["counted"]["cells"]["cpu"]
    texts = [t.get_text() for t in board.figure(b).axes[0].texts]
    assert "– not judged ≠" in texts and "3" in texts                          # the PNG says the same


def test_a_failing_or_undecided_condition_is_named_in_the_hover(ledger):
    rows = {r.claim: r for r in board.build("demo", results=ledger, published={}).rows}
    assert rows["loss"].cells["cpu"].failing == ("loss between [0, 2] failed (2.5)",)
    assert "\nloss between [0, 2] failed (2.5)\n" in rows["loss"].cells["cpu"].hover
    assert rows["counted"].cells["paper"].failing == ("precondition min-units failed: n_prompts = 3 (needs >= 5)",)
    assert rows["counted"].cells["cpu"].failing == ()
