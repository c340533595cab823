from __future__ import annotations

import json

import pytest

from compendium import claims, paths


def test_every_paper_loads_and_ids_are_unique():
    assert set(claims.paper_ids()) >= {"protot", "accpp"}
    for paper in claims.paper_ids():
        p = claims.load_paper(paper)
        assert p.claims, paper
        for c in p.claims.values():
            assert c.source in {"paper", "brief", "aggregator", "reviews", "definition"}, c.key
            assert c.statement and c.where


def test_unknown_claim_id_is_a_clear_error():
    with pytest.raises(ValueError, match="not defined in papers/protot/claims.yaml"):
        claims.record("protot/no-such-claim", 1.0, profile="cpu")
    with pytest.raises(ValueError, match="unknown paper 'nopaper'"):
        claims.record("nopaper/x", 1.0, profile="cpu")
    with pytest.raises(ValueError, match="look like"):
        claims.record("mixer-linear-cost", 1.0, profile="cpu")


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown profile 'gpu'.*'cpu', 'paper'"):
        claims.record("protot/mixer-linear-cost", 1.0, profile="gpu")


def test_record_writes_provenance_and_the_table_shows_it():
    path = claims.record("protot/mixer-linear-cost", 1.03, profile="cpu", seed=3, check=True,
                         config={"T": [256, 512]}, note="unit test")
    entry = json.loads(path.read_text())
    assert entry["value"] == 1.03 and entry["seed"] == 3 and entry["check"] is True
    assert entry["provenance"]["libraries"]["torch"] != "not installed"
    assert len(entry["provenance"]["git_revision"]) >= 7
    table = claims.build_table("protot")
    row = next(line for line in table.splitlines() if line.startswith("| mixer-linear-cost"))
    assert "1.03" in row and "holds at cpu" in row
    other = next(line for line in table.splitlines() if line.startswith("| glue-cola"))
    assert "not run" in other


def test_non_finite_values_are_refused():
    with pytest.raises(ValueError, match="non-finite"):
        claims.record("protot/mixer-linear-cost", float("nan"), profile="cpu")


def test_a_result_for_an_undefined_claim_is_detected(tmp_path):
    bogus = paths.results_dir("accpp") / "ghost.cpu.json"
    bogus.write_text(json.dumps({"claim": "accpp/ghost", "profile": "cpu"}))
    try:
        with pytest.raises(ValueError, match="ghost"):
            claims.recorded("accpp")
    finally:
        bogus.unlink()
