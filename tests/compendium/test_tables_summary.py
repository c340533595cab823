"""CLAIMS.md opens with one summary table (compendium.tables_summary): a row per claim, none over 300
characters, with the claim (its own claims marked), its statement shortened, the paper's value and the
verdict at each profile with its value, the units it rests on and what failed; the details per claim
follow it, each row naming its units, its model, its failing condition and any disagreement between
the profiles (compendium.basis). Checked on demo ledgers whose every verdict is planted."""
from __future__ import annotations

import json

import pytest

from compendium import basis, claims, tables, tables_summary

from test_publish import complete_run

COUNTED = """\
  - id: counted
    statement: "The compendium's own count (an aside here) rises. A second sentence that is not shown."
    where: "§6"
    paper_value: null
    unit: "nats"
    source: compendium
    notebook: demo/01_good
    check: {quantity: effect, op: ">", threshold: 0, interval: [effect_lo, effect_hi]}
    min_units: {quantity: n_prompts, at_least: 5, units: "prompts of the test set"}
    protocol: {all: {model: tiny-model}, paper: {model: big-model}}
"""


@pytest.fixture
def ledger(run_dir, demo_root):
    return plant(run_dir, demo_root)


def plant(run_dir, demo_root):
    """The demo paper plus an own claim with min_units and a protocol naming its model: gain holds at
    cpu and, recorded under an earlier check at paper, has a value on the other side of its main
    condition; loss does not hold at cpu; counted holds at cpu on 12 prompts and is inconclusive at
    paper on 3 (min_units)."""
    path = demo_root / "papers" / "demo" / "claims.yaml"
    path.write_text(path.read_text() + COUNTED)
    complete_run(run_dir)                                        # gain holds, loss fails, plain measured only
    claims.conclude(claims.Measurement("demo/counted", {"effect": 0.3, "effect_lo": 0.1, "effect_hi": 0.5,
                                                        "n_prompts": 12}), profile="cpu", seed=0)
    claims.conclude(claims.Measurement("demo/counted", {"effect": 0.3, "effect_lo": 0.1, "effect_hi": 0.5,
                                                        "n_prompts": 3}), profile="paper", seed=0)
    claims.conclude(claims.Measurement("demo/gain", {"gain": 3.0, "ci_low": 0.2, "context_effect": 0.3}),
                    profile="paper", seed=0)
    folder = run_dir / "results" / "demo"
    gain_paper = folder / "gain.paper.json"                      # recorded under another check: not judged
    gain_paper.write_text(json.dumps({**json.loads(gain_paper.read_text()), "check_sha256": "0" * 64}))
    return tables.read_results("demo", tables.result_files("demo", folder))


def _summary(text: str) -> dict[str, list[str]]:
    """{claim id: cells} of the summary table (the table under ``## Summary``)."""
    part = text[text.index("## Summary"):text.index("## Details per claim")]
    rows = [line for line in part.splitlines() if line.startswith("| **")]
    return {row.split("**")[1]: [c.strip() for c in row.strip("|").split(" | ")] for row in rows}


def _details(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """{(claim id, profile): {column: cell}} of the details table."""
    part = text[text.index("## Details per claim"):]
    lines = [line for line in part.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    out = {}
    for line in lines[1:]:                       # the rule line (|---|) does not start with "| "
        row = dict(zip(header, [c.strip() for c in line.strip().strip("|").split(" | ")]))
        out[(row["claim"], row["profile"])] = row
    return out


def test_the_table_opens_with_one_short_row_per_claim_and_the_details_below(ledger):
    text = tables.build_table("demo", results=ledger, published={})
    assert text.index("## Summary") < text.index("## Details per claim") < text.index("| claim | statement |")
    rows = _summary(text)
    assert list(rows) == ["gain", "loss", "plain", "flag", "counted"]             # claims.yaml order, once each
    part = text[text.index("## Summary"):text.index("## Details per claim")]
    assert all(len(line) <= tables_summary.ROW_LIMIT for line in part.splitlines() if line.startswith("|"))
    claim, statement, paper, cpu, paper_profile = rows["counted"]
    assert claim == "**counted** *own claim*" and rows["gain"][0] == "**gain**"
    assert statement == "The compendium's own count rises."                       # first sentence, aside left out
    assert paper == "—" and rows["gain"][2] == "16.6 % (brief)"
    assert cpu == "**holds** 0.3 · n 12 prompts"
    assert paper_profile == "**inconclusive** 0.3 · n 3 prompts; precondition min-units"
    assert rows["loss"][3] == "**does not hold** 2.5; fails loss between [0, 2]"
    assert rows["flag"][3:] == ["not run", "not run"]


def test_a_value_under_an_earlier_check_shows_and_its_disagreement_is_marked(ledger):
    text = tables.build_table("demo", results=ledger, published={})
    rows = _summary(text)
    assert rows["gain"][4] == "*not judged* 3 (earlier check) ≠"
    assert rows["gain"][3].endswith("≠") and "holds" in rows["gain"][3]
    details = _details(text)
    assert "≠ at odds with cpu: does not meet gain >= 5 on its value alone (recorded under an earlier check)" \
        in details[("gain", "paper")]["verdict"]
    assert "≠ at odds with paper" in details[("gain", "cpu")]["verdict"]
    assert "≠" not in details[("counted", "cpu")]["verdict"]     # holds against inconclusive: no disagreement


def test_each_details_row_names_its_units_model_and_failing_condition(ledger):
    details = _details(tables.build_table("demo", results=ledger, published={}))
    counted = details[("counted", "cpu")]
    assert counted["units"] == "12 prompts of the test set (min_units quantity n_prompts)"
    assert counted["model"] == "tiny-model" and details[("counted", "paper")]["model"] == "big-model"
    assert counted["paper"] == "— (own claim)"
    assert details[("loss", "cpu")]["verdict"].startswith("**does not hold**: failed `loss between [0, 2]` (2.5)")
    assert details[("gain", "cpu")]["units"] == "—" and details[("gain", "cpu")]["model"] == "—"


def test_a_cell_never_grows_past_its_limit():
    entry = {"derived_status": "does not hold", "value": 1.0, "conditions": [
        {"quantity": "a_very_long_quantity_name_" + "x" * 60, "op": ">", "threshold": 0, "value": -1,
         "passed": False}]}

    class Bare:
        min_units = None
        protocol = None

        @staticmethod
        def protocol_for(_):
            return {}

    cell = tables_summary.verdict_cell(Bare, "cpu", entry, marked=True, disagrees="x")
    assert len(cell) <= tables_summary.CELL_LIMIT and cell.endswith("⚠ ≠") and "…" in cell


@pytest.mark.parametrize("text, short", [
    ("The loss lies between 0 and 2 nats.", "The loss lies between 0 and 2 nats."),
    ("A claim (with an aside (nested)) holds: p(\" women\") drops.", "A claim holds: p(\" women\") drops."),
    ("First sentence. Second one.", "First sentence."),
    ("word " * 40, ("word " * 17).strip() + "…"),
])
def test_a_statement_is_shortened_at_a_word(text, short):
    got = basis.short_statement(text, 90)
    assert got == short and len(got) <= 90

