"""Publishing one paper, and one ledger per profile: a run of every notebook of one paper publishes
that paper alone (the other paper's files stay byte-identical), a run missing or failing one of its
notebooks is refused with every reason, a profile's figures live in their own folder (a publish at
the paper profile leaves the cpu figures as they were), and CLAIMS.md names each profile's last
publish. Two papers here: the demo paper and `other`, whose claims also name a top-level notebook
(00_shared, which writes a figure for the demo paper too); a third top-level notebook (00_intro)
belongs to no paper."""
from __future__ import annotations

import json
import textwrap

import pytest

from compendium import claims, cli, plotting, publish, runner, runs, tables

from ledger_demo import make_root, tree_digest

OTHER_CLAIMS = textwrap.dedent("""\
    paper:
      title: "Another demo paper"
      arxiv: "0000.00001"
    claims:
      - id: count
        statement: The count is at least 1.
        where: "§1"
        paper_value: 2
        unit: ""
        source: paper
        notebook: other/01_count
        check: {quantity: count, op: ">=", threshold: 1, assert_at: [cpu]}
      - id: shared
        statement: A number a top-level notebook measures.
        where: "§2"
        paper_value: null
        unit: ""
        source: paper
        notebook: 00_shared
    """)
NOTEBOOKS = ["00_intro", "00_shared", "demo/01_good", "demo/02_bad", "demo/03_dies", "other/01_count"]
OTHER = ["00_shared", "other/01_count"]
DEMO = ["demo/01_good", "demo/02_bad", "demo/03_dies"]
DEFAULTS = {"PROFILE": "cpu", "SEED": 0, "DEVICE": "cpu"}


@pytest.fixture
def two_papers(tmp_path, monkeypatch):
    """A compendium with the demo paper, the paper `other` and two top-level notebooks."""
    root = make_root(tmp_path / "root", {n: "x = 1\n" for n in NOTEBOOKS}, papers={"other": OTHER_CLAIMS})
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
    monkeypatch.delenv(runs.RUN_ENV, raising=False)
    monkeypatch.delenv(runs.NOTEBOOK_ENV, raising=False)
    return root


def _figure(name, profile):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1])
    plotting.savefig(fig, name, profile=profile)  # the profile stamped on it: other bytes at each profile
    plt.close(fig)


def _work(name, profile, count):
    """What notebook ``name`` records, at ``profile``."""
    if name == "demo/01_good":
        claims.conclude(claims.Measurement("demo/gain", {"gain": 7.5, "ci_low": 0.4, "context_effect": 0.3}),
                        profile=profile, seed=0)
        _figure("demo/curve", profile)
    elif name == "demo/02_bad":
        claims.conclude(claims.Measurement("demo/loss", {"loss": 2.5}), profile=profile, seed=0)
    elif name == "demo/03_dies":
        claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile=profile, seed=0)
    elif name == "other/01_count":
        claims.conclude(claims.Measurement("other/count", {"count": count}), profile=profile, seed=0)
        _figure("other/count", profile)
    elif name == "00_shared":  # measures a claim of `other` and draws a figure for the demo paper
        claims.conclude(claims.Measurement("other/shared", {"size": 4}), profile=profile, seed=0)
        _figure("demo/shared_view", profile)
    else:
        _figure("tour/intro", profile)


def _do(run, names, profile, *, count=2, failed=()):
    """Run ``names`` into ``run`` in-process, recording status.json as the runner does."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(runs.RUN_ENV, str(run))
        for name in names:
            mp.setenv(runs.NOTEBOOK_ENV, name)
            before = runs.snapshot(run)
            _work(name, profile, count)
            runs.set_status(run, name, status=runs.FAILED if name in failed else runs.COMPLETED,
                            parameters={**DEFAULTS, "PROFILE": profile},
                            files=runs.written_between(before, runs.snapshot(run)))


def _run(profile, names, *, paper=None, count=2, failed=(), ran=None):
    run = runs.create(profile, 0, notebooks=list(names), paper=paper)
    _do(run, ran if ran is not None else names, profile, count=count, failed=failed)
    return run


def _published_everything():
    """A complete run of every notebook at cpu, published."""
    run = _run("cpu", NOTEBOOKS)
    publish.publish(run)
    return run


def test_the_notebooks_of_a_paper(two_papers, capsys):
    assert runner.list_notebooks() == NOTEBOOKS
    assert runner.paper_notebooks("demo") == DEMO
    assert runner.paper_notebooks("other") == OTHER      # a top-level notebook its claims name, and its folder
    assert all("00_intro" not in runner.paper_notebooks(p) for p in ("demo", "other"))  # no paper's
    with pytest.raises(ValueError, match="unknown paper 'nope'; the papers are demo, other"):
        runner.paper_notebooks("nope")
    assert cli.main(["list", "--paper", "other"]) == 0
    assert capsys.readouterr().out.split() == OTHER


@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_a_complete_run_of_one_paper_publishes_that_paper_alone(two_papers, profile):
    full = _published_everything()
    demo_before = tree_digest(two_papers / "papers" / "demo")
    run = _run(profile, OTHER, paper="other", count=5)
    out = publish.publish(run)
    assert tree_digest(two_papers / "papers" / "demo") == demo_before   # byte for byte
    entry = json.loads((two_papers / "papers" / "other" / "results" / f"count.{profile}.json").read_text())
    assert entry["value"] == 5 and entry["run"] == run.name
    info = json.loads((two_papers / "papers" / "other" / "results" / tables.PUBLISHED).read_text())
    assert info["last_publish"][profile]["run"] == run.name and info["last_publish"][profile]["paper"] == "other"
    assert info["last_publish"][profile]["notebooks"] == {n: "completed" for n in OTHER}
    if profile == "paper":  # the cpu profile's last publish is still the full run's
        assert info["last_publish"]["cpu"]["run"] == full.name and "paper" not in info["last_publish"]["cpu"]
    # 00_shared's figure for the demo paper waits for a run of the demo paper's notebooks
    assert out.other_papers == ["figures/demo/00_shared_view.png"]
    summary = out.summary()
    assert f"(paper other only, profile {profile})" in summary
    assert "not published: 1 file(s) its notebooks wrote for other papers" in summary


@pytest.mark.parametrize("case, reason", [
    ("missing", r"it ran 1 of the 2 notebooks of paper 'other'; not run: 00_shared"),
    ("failed", r"1 notebook\(s\) of paper 'other' did not complete: other/01_count \(failed\)"),
])
def test_a_paper_run_missing_or_failing_one_of_its_notebooks_is_refused(two_papers, case, reason):
    _published_everything()
    before = tree_digest(two_papers / "papers")
    if case == "missing":
        run = _run("paper", ["other/01_count"], paper="other", count=5)
    else:
        run = _run("paper", OTHER, paper="other", count=5, failed=["other/01_count"])
    with pytest.raises(publish.NotAMainRun, match=rf"is not a complete run of paper 'other'(.|\n)*{reason}"):
        publish.publish(run)
    assert tree_digest(two_papers / "papers") == before


def test_a_paper_run_is_refused_for_every_reason_at_once(two_papers):
    run = _run("smoke", OTHER, paper="other", failed=["00_shared"])
    params = json.loads((run / "params.json").read_text())
    (run / "params.json").write_text(json.dumps({**params, "parameters": {"LABEL": "x"},
                                                  "notebooks": ["00_shared"]}))
    with pytest.raises(publish.NotAMainRun) as info:
        publish.publish(run)
    text = str(info.value)
    for needle in ("its profile 'smoke' is for tests only", "it ran 1 of the 2 notebooks of paper 'other'; not run: "
                   "other/01_count", "1 notebook(s) of paper 'other' did not complete: 00_shared (failed)",
                   "parameters away from their defaults (LABEL='x')", "`make all PAPER=other`"):
        assert needle in text, text
    assert not (two_papers / "papers" / "other" / "results").exists()


def test_a_publish_at_the_paper_profile_leaves_the_cpu_figures(two_papers):
    _published_everything()
    figures = two_papers / "papers" / "demo" / "figures"
    cpu_before = {k: v for k, v in tree_digest(figures).items() if k != "verdict_board.png"}
    assert "01_curve.png" in cpu_before and "00_shared_view.png" in cpu_before
    (figures / "paper").mkdir()
    (figures / "paper" / "01_dropped.png").write_bytes(b"an earlier paper-profile figure of 01_good")
    run = _run("paper", DEMO, paper="demo")
    out = publish.publish(run)
    after = tree_digest(figures)
    assert {k: v for k, v in after.items() if not k.startswith("paper/") and k != "verdict_board.png"} == cpu_before
    assert sorted(k for k in after if k.startswith("paper/")) == ["paper/01_curve.png"]  # the rule, in its folder
    assert [p.name for p in out.removed] == ["01_dropped.png"]
    assert after["paper/01_curve.png"] != cpu_before["01_curve.png"]
    # and a later cpu publish of the paper leaves the paper profile's folder as it is
    publish.publish(_run("cpu", DEMO, paper="demo"))
    assert {k: v for k, v in tree_digest(figures).items() if k.startswith("paper/")} == \
        {k: v for k, v in after.items() if k.startswith("paper/")}


def test_claims_md_names_each_profiles_last_publish(two_papers):
    full = _published_everything()
    run = _run("paper", DEMO, paper="demo")
    publish.publish(run)
    table = (two_papers / "papers" / "demo" / "CLAIMS.md").read_text()
    assert f"- `cpu`: run `{full.name}` (every notebook, revision " in table
    assert f"- `paper`: run `{run.name}` (the notebooks of demo, revision " in table
    assert table.index("- `cpu`: run") < table.index("- `paper`: run") < table.index("| claim |")
    rows = [line for line in table.splitlines() if line.startswith("| gain ")]
    assert len(rows) == 2 and not any("⚠" in row for row in rows)
    # a row's marks come from its own profile's last publish
    info = tables.read_published("demo")
    info["last_publish"]["paper"]["notebooks"].pop("demo/01_good")
    rows = {line.split(" | ")[5]: line for line in tables.build_table("demo", published=info).splitlines()
            if line.startswith("| gain ")}
    assert f"⚠ notebook not run in the last publish ({run.name})" in rows["paper"]
    assert "⚠" not in rows["cpu"]


def test_a_published_json_of_one_publish_reads_as_its_profiles(two_papers):
    results = two_papers / "papers" / "demo" / "results"
    results.mkdir(parents=True)
    (results / tables.PUBLISHED).write_text(json.dumps({
        "last_publish": {"run": "R1", "profile": "cpu", "git_revision": "0123456789abcdef", "notebooks": {},
                         "time_utc": "2026-01-01T00:00:00+00:00"},
        "notebooks": {"cpu": {}}}))
    info = tables.read_published("demo")
    assert tables.last_publishes(info) == {"cpu": info["last_publish"]}
    assert "- `cpu`: run `R1` (every notebook, revision 0123456789, 2026-01-01T00:00:00+00:00)." in \
        tables.build_table("demo")


def _fake_run_many(todo, *, run_dir, profile, **_):
    _do(run_dir, todo, profile, count=3)
    return [], []


def test_cli_runs_and_publishes_one_paper(two_papers, monkeypatch, capsys):
    _published_everything()
    before = tree_digest(two_papers / "papers" / "demo")
    monkeypatch.setattr(runner, "run_many", _fake_run_many)
    assert cli.main(["run", "--paper", "other", "--profile", "paper", "--publish"]) == 0
    out = capsys.readouterr().out
    assert "running 2 notebook(s) of paper other at profile 'paper'" in out and "(paper other only" in out
    run = max((two_papers / "build" / "runs").glob("*-paper-s0"))
    params = json.loads((run / "params.json").read_text())
    assert params["paper"] == "other" and params["notebooks"] == OTHER
    assert json.loads((two_papers / "papers/other/results/count.paper.json").read_text())["value"] == 3
    assert tree_digest(two_papers / "papers" / "demo") == before


@pytest.mark.parametrize("args, message", [
    (["run", "--paper", "nope"], "unknown paper 'nope'; the papers are demo, other"),
    (["run", "--paper", "other", "01_good"], "--paper runs every notebook of paper 'other': drop the notebook names"),
    (["run", "01_good", "--publish"], "or give --paper P to run and publish one paper's notebooks"),
])
def test_cli_refuses_bad_paper_arguments_before_running(two_papers, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (two_papers / "build" / "runs").exists() or not any((two_papers / "build" / "runs").iterdir())


def test_a_full_run_with_one_complete_paper_says_how_to_publish_it(two_papers, capsys):
    run = _run("cpu", NOTEBOOKS, failed=["demo/02_bad"])
    before, demo_before = tree_digest(two_papers / "papers"), tree_digest(two_papers / "papers" / "demo")
    assert cli.main(["publish", str(run)]) == 1
    err = capsys.readouterr().err
    assert "is not a complete main run" in err and "demo/02_bad (failed)" in err
    assert f"Its notebooks of other all completed: `compendium publish build/runs/{run.name} --paper other`" in err
    assert tree_digest(two_papers / "papers") == before
    assert cli.main(["publish", str(run), "--paper", "other"]) == 0
    assert tree_digest(two_papers / "papers" / "demo") == demo_before
    assert (two_papers / "papers" / "other" / "results" / "count.cpu.json").is_file()
