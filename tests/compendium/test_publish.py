"""Publishing: a complete main run reaches papers/, and the claims tables are rebuilt all or
nothing (no kernels here: the notebooks' work is done in-process inside a run folder). Refusals,
interruptions, a full disk and concurrent publishers: test_publish_safety.py."""
from __future__ import annotations

import json

import pytest

from compendium import claims, plotting, publish, runs, tables

from ledger_demo import tree_digest, write_published

GOOD = {"gain": 7.5, "ci_low": 0.4, "context_effect": 0.3}


def _as_notebook(run, name, status, work):
    """Do ``work`` as notebook ``name`` of ``run`` and record it in status.json as the runner does."""
    before = runs.snapshot(run)
    try:
        work()
    except AssertionError:
        pass
    runs.set_status(run, name, status=status, files=runs.written_between(before, runs.snapshot(run)))


def _figure(name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1])
    path = plotting.savefig(fig, name, profile="cpu")
    plt.close(fig)
    return path


def _good():
    import pandas as pd

    claims.conclude(claims.Measurement("demo/gain", dict(GOOD), tables={"gain_curve": pd.DataFrame({"a": [1]})}),
                    profile="cpu", seed=0)
    _figure("demo/good")


def _bad():
    claims.conclude(claims.Measurement("demo/loss", {"loss": 2.5}), profile="cpu", seed=0)
    _figure("demo/bad")
    raise AssertionError("the notebook fails after recording")


def _loss():
    claims.conclude(claims.Measurement("demo/loss", {"loss": 2.5}), profile="cpu", seed=0)
    _figure("demo/bad")


def _plain():
    claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile="cpu", seed=0)


def complete_run(run, good=_good, loss=_loss, plain=_plain):
    """Every notebook of the demo compendium run into ``run`` and completed: a complete main run."""
    _as_notebook(run, "demo/01_good", runs.COMPLETED, good)
    _as_notebook(run, "demo/02_bad", runs.COMPLETED, loss)
    _as_notebook(run, "demo/03_dies", runs.COMPLETED, plain)


def test_savefig_returns_a_path_relative_to_the_root(run_dir, demo_root):
    path = _figure("demo/curve")
    assert path == f"build/runs/{run_dir.name}/figures/demo/curve.png" and repr(path) == str(path)
    assert (demo_root / path).is_file() and path.path == demo_root / path
    assert (demo_root / "build" / "figures" / "demo" / "curve.png").is_file()  # the latest-figure mirror
    with pytest.raises(ValueError, match="figure names look like"):
        _figure("../escape")


def test_publish_of_a_complete_main_run(run_dir, demo_root):
    complete_run(run_dir)
    assert not (demo_root / "papers" / "demo" / "results").exists()    # nothing published yet
    out = publish.publish(run_dir)
    results = demo_root / "papers" / "demo" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["PUBLISHED.json", "gain.cpu.json", "loss.cpu.json",
                                                           "plain.cpu.json"]
    figures = demo_root / "papers" / "demo" / "figures"
    assert sorted(p.name for p in figures.iterdir()) == ["bad.png", "gain_curve.csv", "good.png", "verdict_board.png"]
    assert out.completed == ["demo/01_good", "demo/02_bad", "demo/03_dies"]
    info = json.loads((results / "PUBLISHED.json").read_text())
    last = info["last_publish"]["cpu"]  # each profile keeps its own last publish
    assert sorted(info["last_publish"]) == ["cpu"] and "paper" not in last  # a run of every notebook
    assert last["notebooks"] == {n: "completed" for n in out.completed}
    assert last["parameters"] == {} and last["run"] == run_dir.name
    assert last["git_revision"] == json.loads((run_dir / "params.json").read_text())["git_revision"]
    table = (demo_root / "papers" / "demo" / "CLAIMS.md").read_text()
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ") and " | " in line}
    assert "**holds**" in rows["gain"] and "7.5 %" in rows["gain"] and "16.6 % (brief)" in rows["gain"]
    assert not any("⚠" in row for row in rows.values())
    assert "**measured only**" in rows["plain"]
    assert "gain >= 5 and ci_low > 0" in rows["gain"]
    for verdict in ("**holds**", "**does not hold**", "**inconclusive**", "**measured only**", "*not run*"):
        assert verdict in table  # the legend
    # nothing is left beside papers/, and the lock file says nobody holds it
    assert sorted(p.name for p in demo_root.iterdir() if p.name.startswith(".p")) == [".publish.lock"]
    assert (demo_root / ".publish.lock").read_text() == ""


def test_a_run_with_a_failed_notebook_is_refused_and_the_published_values_stay(run_dir, demo_root, monkeypatch):
    complete_run(run_dir)
    publish.publish(run_dir)
    before = tree_digest(demo_root / "papers")
    second = runs.create("cpu", 0, notebooks=["demo/01_good", "demo/02_bad", "demo/03_dies"])
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(second))

    def fails():
        claims.conclude(claims.Measurement("demo/gain", {**GOOD, "gain": 1.0}), profile="cpu", seed=0)
        raise AssertionError

    complete_run(second)
    _as_notebook(second, "demo/01_good", runs.FAILED, fails)
    with pytest.raises(publish.NotAMainRun, match=r"1 notebook\(s\) did not complete: demo/01_good \(failed\)"):
        publish.publish(second)
    assert tree_digest(demo_root / "papers") == before
    e = json.loads((demo_root / "papers" / "demo" / "results" / "gain.cpu.json").read_text())
    assert e["value"] == 7.5 and e["run"] == run_dir.name  # the failed run's 1.0 was not published


def test_inconclusive_row_names_the_failed_precondition(run_dir, demo_root):
    def work():  # at cpu (asserted) the verdict is recorded, then the assertion raises
        with pytest.raises(AssertionError, match="got 'inconclusive'"):
            claims.conclude(claims.Measurement("demo/gain", {**GOOD, "context_effect": 0.01}), profile="cpu", seed=0)

    complete_run(run_dir, good=work)
    publish.publish(run_dir)
    row = next(l for l in (demo_root / "papers/demo/CLAIMS.md").read_text().splitlines() if l.startswith("| gain "))
    assert "**inconclusive**: failed `uses-context` (the output depends on context beyond the last token; " \
           "context_effect = 0.01)" in row
    assert "| cpu |" in row


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    (json.dumps({"claim": "demo/gain", "value": 1, "verdict": "holds"}), 'missing "profile"'),
    (json.dumps({"claim": "demo/ghost", "profile": "cpu", "value": 1, "verdict": "holds"}),
     "records claim 'demo/ghost', which papers/demo/claims.yaml does not define"),
    ('{"claim": "demo/gain", "profile": "cpu", "value": 1, "values": {"gain": NaN}}', "NaN is not a number"),
])
def test_a_malformed_result_is_named_and_nothing_is_half_written(run_dir, demo_root, monkeypatch, content, problem):
    # a first, good publish
    complete_run(run_dir)
    publish.publish(run_dir)
    before = tree_digest(demo_root / "papers")
    # a second complete run whose notebook left a corrupt result beside a good one
    second = runs.create("cpu", 0, notebooks=["demo/01_good", "demo/02_bad", "demo/03_dies"])

    def work():
        claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile="cpu", seed=0)
        (second / "results" / "demo" / "gain.cpu.json").write_text(content)

    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(second))
    complete_run(second, good=work)
    with pytest.raises(tables.ResultsFileError, match=rf"{second.name}/results/demo/gain.cpu.json.*{problem}"):
        publish.publish(second)
    assert tree_digest(demo_root / "papers") == before, "a failed publish changed papers/"


def test_a_corrupt_published_file_stops_make_claims_before_any_table_is_written(demo_root):
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / "gain.cpu.json").write_text('{"claim": "demo/gain", "profile": "cpu", "value": ')  # cut short
    with pytest.raises(tables.ResultsFileError, match=r"papers/demo/results/gain.cpu.json: not valid JSON"):
        claims.write_tables()
    assert not (demo_root / "papers" / "demo" / "CLAIMS.md").exists()


def test_a_result_judged_by_its_notebook_is_not_judged(demo_root):
    # files written before checks were recorded ("check": true/false/null, no values) are never
    # mapped to a verdict: the table shows them as not judged, with their value and revision
    results = demo_root / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / "gain.cpu.json").write_text(json.dumps({
        "claim": "demo/gain", "profile": "cpu", "value": 3, "unit": "%", "check": True,
        "provenance": {"git_revision": "0123456789abcdef0123+dirty"}}))
    write_published(demo_root)
    row = next(l for l in claims.build_table("demo").splitlines() if l.startswith("| gain "))
    assert "**not judged (recorded under an earlier check)**" in row and "**holds**" not in row
    assert "| 3 % |" in row and "| 0123456789+dirty |" in row


def test_cli_publish_of_an_existing_run_folder(run_dir, demo_root, capsys):
    from compendium import cli

    complete_run(run_dir)
    assert cli.main(["publish", str(run_dir)]) == 0
    assert f"published run build/runs/{run_dir.name}: 3 result(s), 3 figure file(s)" in capsys.readouterr().out
    assert (demo_root / "papers" / "demo" / "results" / "gain.cpu.json").exists()
    with pytest.raises(publish.NotAMainRun, match="is not a run folder made by `compendium run`"):
        publish.publish(demo_root / "build")


# -- figure names: the notebook's number first, and publish drops what a notebook replaced ---------
@pytest.mark.parametrize("name, notebook, expected", [
    ("protot/concept_coherence", "protot/05_concept_labels", "protot/05_concept_coherence"),
    ("protot/05_concept_coherence", "protot/05_concept_labels", "protot/05_concept_coherence"),  # not doubled
    ("accpp/00_seeds", "accpp/00_method", "accpp/00_seeds"),
    ("accpp/006_x", "accpp/00_method", "accpp/00_006_x"),         # "00" then "6_...": a different prefix
    ("curve.csv", "demo/12_long", "12_curve.csv"),
    ("protot/concept_coherence", "protot/intro", "protot/concept_coherence"),  # an unnumbered notebook
])
def test_prefixed(name, notebook, expected):
    assert plotting.prefixed(name, notebook) == expected
    assert plotting.prefixed(expected, notebook) == expected      # idempotent


def test_figures_and_tables_carry_the_running_notebooks_number(run_dir, monkeypatch):
    import pandas as pd

    assert _figure("demo/curve").endswith("/figures/demo/curve.png")  # no notebook named: the name as given
    monkeypatch.setenv(runs.NOTEBOOK_ENV, "demo/01_good")
    assert _figure("demo/curve").endswith("/figures/demo/01_curve.png")
    assert _figure("demo/01_other").endswith("/figures/demo/01_other.png")
    claims.conclude(claims.Measurement("demo/gain", dict(GOOD), tables={"gain_curve": pd.DataFrame({"a": [1]})}),
                    profile="cpu", seed=0)
    assert (run_dir / "figures" / "demo" / "01_gain_curve.csv").is_file()
    assert not (run_dir / "figures" / "demo" / "gain_curve.csv").exists()
    entry = json.loads((run_dir / "results" / "demo" / "gain.cpu.json").read_text())
    assert entry["tables"] == ["01_gain_curve.csv"]


def test_an_interactive_kernel_takes_the_number_from_notebook_start(demo_root):
    from compendium import notebook

    notebook.start("demo/02_bad", "cpu", 0, "cpu", threads=None)
    assert _figure("demo/curve").endswith("/figures/demo/02_curve.png")


def test_publish_removes_the_figures_a_republished_notebook_replaced(run_dir, demo_root, monkeypatch):
    published = demo_root / "papers" / "demo" / "figures"
    published.mkdir(parents=True)
    for old in ("curve.png", "gain_curve.csv", "01_dropped.png", "02_theirs.png", "unrelated.png", "curve_b.png"):
        (published / old).write_bytes(b"old")

    def good():
        monkeypatch.setenv(runs.NOTEBOOK_ENV, "demo/01_good")
        _good()
        _figure("demo/curve")

    def loss():  # writes 02_theirs.png again: the new one replaces the old
        monkeypatch.setenv(runs.NOTEBOOK_ENV, "demo/02_bad")
        _loss()
        _figure("demo/theirs")

    complete_run(run_dir, good=good, loss=loss)
    out = publish.publish(run_dir)
    assert sorted(p.name for p in published.iterdir()) == [
        "01_curve.png", "01_gain_curve.csv", "01_good.png", "02_bad.png", "02_theirs.png", "curve_b.png",
        "unrelated.png", "verdict_board.png"]
    assert sorted(p.name for p in out.removed) == ["01_dropped.png", "curve.png", "gain_curve.csv"]
    assert (published / "02_theirs.png").read_bytes() != b"old"
    assert "3 stale figure file(s) removed" in out.summary()
