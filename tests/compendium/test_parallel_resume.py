"""compendium run --jobs N (notebooks at once, each writing into its own lane) and --resume RUN_DIR
(an interrupted run continued: completed notebooks kept when nothing they depend on changed), on
tiny demo notebooks executed in real kernels."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compendium import cli, resume, runs

from ledger_demo import make_root

# Each records a seeded measurement and writes a table; "slow" ones sleep so that two overlap.
_BODY = """\
import time

import numpy as np
import pandas as pd

from compendium import claims, plotting

rng = np.random.default_rng(SEED + {k})
began = time.time()
time.sleep({sleep})
with open("spans.txt", "a") as f:          # outside the run folder (ignored by git): when it slept
    f.write(f"{k} {{began}} {{time.time()}}\\n")
plotting.save_table(pd.DataFrame({{"x": rng.normal(size=5)}}), "demo/table_{k}", index=False)
claims.conclude(claims.Measurement("demo/gain", {{"gain": 6.0 + float(rng.random()), "ci_low": 0.4,
                                                  "context_effect": 0.3}}), profile=PROFILE, seed=SEED)
"""
GATED = """\
import pathlib

from compendium import claims

if not pathlib.Path("go.txt").exists():
    raise RuntimeError("not yet")
claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile=PROFILE, seed=SEED)
"""


def _root(tmp_path, monkeypatch, notebooks):
    root = make_root(tmp_path / "root", notebooks)
    (root / ".gitignore").write_text((root / ".gitignore").read_text() + "go.txt\nspans.txt\n")
    subprocess.run(["git", "-c", "user.name=d", "-c", "user.email=d@e.org", "commit", "-qam", "ignore go.txt"],
                   cwd=root, check=True)
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
    for var in (runs.RUN_ENV, runs.NOTEBOOK_ENV, runs.LANE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(root)
    return root


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "build" / "runs").iterdir() if p.is_dir())


def _recorded(run: Path) -> dict:
    """{file: its content}: results without their run name, time and timings; tables as text."""
    out = {}
    for f in sorted((run / "results").rglob("*.json")):
        d = json.loads(f.read_text())
        out[f.relative_to(run).as_posix()] = {k: d[k] for k in ("values", "evidence", "claim") if k in d}
    for f in sorted((run / "figures").rglob("*.csv")):
        out[f.relative_to(run).as_posix()] = f.read_text()
    return out


def test_jobs_two_records_exactly_what_a_run_of_one_records(tmp_path, monkeypatch):
    """Two notebooks writing a result of the same claim and a table each: at --jobs 2 both run at once
    (their time spans overlap), each one's files are its own, and every recorded value equals the
    sequential run's."""
    nbs = {"demo/01_a": _BODY.format(k=1, sleep=3), "demo/02_b": _BODY.format(k=2, sleep=3)}
    # one result per claim and profile: the second notebook records another claim of the demo paper
    nbs["demo/02_b"] = nbs["demo/02_b"].replace('"demo/gain", {"gain": 6.0 + float(rng.random()), "ci_low": 0.4,\n'
                                                '                                                  "context_effect": 0.3}',
                                                '"demo/loss", {"loss": 1.0 + float(rng.random())}')
    root = _root(tmp_path, monkeypatch, nbs)
    assert cli.main(["run", "--jobs", "1"]) == 0
    assert cli.main(["run", "--jobs", "2"]) == 0
    one, two = _runs(root)
    assert _recorded(one) == _recorded(two) and len(_recorded(one)) == 4
    s1, s2 = runs.read_status(one), runs.read_status(two)
    for name in nbs:
        assert s1[name]["files"] == s2[name]["files"] and s1[name]["sha256"].keys() == s2[name]["sha256"].keys()
    assert s2["demo/01_a"]["files"] == ["figures/demo/01_table_1.csv", "results/demo/gain.cpu.json"]
    assert s2["demo/02_b"]["files"] == ["figures/demo/02_table_2.csv", "results/demo/loss.cpu.json"]
    assert not (two / runs.LANES).exists() or not any((two / runs.LANES).iterdir())
    # at once: the sequential run slept one notebook after the other, the parallel one side by side
    spans = [line.split() for line in (root / "spans.txt").read_text().splitlines()]
    (a1, b1), (a2, b2) = [(float(s[1]), float(s[2])) for s in spans[:2]], [(float(s[1]), float(s[2])) for s in spans[2:]]
    assert not (a1[0] < b1[1] and b1[0] < a1[1])
    assert a2[0] < b2[1] and b2[0] < a2[1]


def test_a_file_two_notebooks_write_is_refused_naming_both(tmp_path, monkeypatch):
    _root(tmp_path, monkeypatch, {"demo/01_a": _BODY.format(k=1, sleep=0)})
    run = runs.create("cpu", 0, notebooks=["demo/01_a", "demo/02_b"])
    runs.set_status(run, "demo/01_a", status=runs.COMPLETED, files=["results/demo/x.json"], sha256={})
    lane = runs.open_lane(run, "demo/02_b")
    (lane / "results" / "demo").mkdir(parents=True)
    (lane / "results" / "demo" / "x.json").write_text("{}")
    with pytest.raises(runs.RunFolderError, match=r"notebook 'demo/02_b' wrote files another notebook of the run "
                                                  r"wrote: results/demo/x.json \(also written by demo/01_a\)"):
        runs.merge_lane(run, "demo/02_b")
    assert (lane / "results" / "demo" / "x.json").exists() and not (run / "results" / "demo" / "x.json").exists()


def test_resume_keeps_completed_notebooks_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    root = _root(tmp_path, monkeypatch, {"demo/01_a": _BODY.format(k=1, sleep=0), "demo/03_gated": GATED})
    assert cli.main(["run", "--keep-going"]) == 1                  # 03_gated fails: no go.txt
    (run,) = _runs(root)
    first = runs.read_status(run)
    assert first["demo/01_a"]["status"] == "completed" and first["demo/03_gated"]["status"] == "failed"
    kept_mtime = (run / "results" / "demo" / "gain.cpu.json").stat().st_mtime_ns
    (root / "go.txt").write_text("go")
    assert cli.main(["run", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "1 notebook(s) kept, 1 to run (demo/03_gated)" in out and "2 of 2 notebook(s) completed" in out
    after = runs.read_status(run)
    assert after["demo/01_a"] == first["demo/01_a"]                # not run again
    assert (run / "results" / "demo" / "gain.cpu.json").stat().st_mtime_ns == kept_mtime
    assert after["demo/03_gated"]["status"] == "completed"
    assert json.loads((run / "params.json").read_text())["resumed"][0]["run_again"] == ["demo/03_gated"]
    # a resumed run that is complete has nothing left to do
    assert cli.main(["run", "--resume", str(run)]) == 0
    assert "2 notebook(s) kept, 0 to run" in capsys.readouterr().out


def test_resume_refuses_when_the_code_or_a_kept_file_changed(tmp_path, monkeypatch, capsys):
    root = _root(tmp_path, monkeypatch, {"demo/01_a": _BODY.format(k=1, sleep=0), "demo/03_gated": GATED})
    cli.main(["run", "--keep-going"])
    (run,) = _runs(root)
    # a kept notebook's file edited: it is run again, not kept
    result = run / "results" / "demo" / "gain.cpu.json"
    result.write_text(result.read_text().replace("0.4", "0.5"))
    params, keep, again = resume.plan(run)
    assert keep == [] and again == ["demo/01_a", "demo/03_gated"]
    # the code changed since the run started: refused, naming it, nothing run
    (root / "notebooks" / "demo" / "01_a.py").write_text((root / "notebooks" / "demo" / "01_a.py").read_text() + "\n")
    before = runs.read_status(run)
    assert cli.main(["run", "--resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert f"cannot resume {run.relative_to(root).as_posix()}" in err or "cannot resume" in err
    assert "since it started, the code (was" in err and "changed; start a new run" in err
    assert runs.read_status(run) == before
    # settings of its own are refused with --resume
    with pytest.raises(SystemExit):
        cli.main(["run", "--resume", str(run), "--seed", "3"])
    assert "drop --seed" in capsys.readouterr().err


def test_resume_names_changed_libraries_and_models(monkeypatch):
    then = {"code": {"git_revision": "a"}, "data": "d", "models": {"m": "1"}, "libraries": {"numpy": "2.4.0"}}
    now = {"code": {"git_revision": "a"}, "data": "d", "models": {"m": "2", "n": "3"}, "libraries": {"numpy": "2.5.0"}}
    got = resume._differences(then, now)
    assert got == ["the committed models: m (1 -> 2), n (absent -> 3)", "the installed libraries: numpy (2.4.0 -> 2.5.0)"]
    assert resume._differences(then, then) == []


def test_resume_refuses_what_is_not_a_run(tmp_path, monkeypatch):
    _root(tmp_path, monkeypatch, {"demo/01_a": _BODY.format(k=1, sleep=0)})
    with pytest.raises(resume.ResumeRefused, match="it is not a run folder"):
        resume.plan(tmp_path)
    old = runs.create("cpu", 0, notebooks=["demo/01_a"])
    p = json.loads((old / "params.json").read_text())
    del p["fingerprint"]
    (old / "params.json").write_text(json.dumps(p))
    with pytest.raises(resume.ResumeRefused, match="records no fingerprint"):
        resume.plan(old)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_killed_midway_then_resumed_equals_an_uninterrupted_run(tmp_path, monkeypatch, jobs):
    """SIGTERM to `compendium run` while the second notebook sleeps: the first is kept, the second is
    'failed: terminated', the third 'not run' (or terminated at --jobs 2); the resumed run then records
    every value an uninterrupted run records."""
    nbs = {"demo/01_a": _BODY.format(k=1, sleep=0),
           "demo/02_b": _BODY.format(k=2, sleep=8).replace("demo/gain", "demo/loss")
           .replace('{"gain": 6.0 + float(rng.random()), "ci_low": 0.4,', '{"loss": 1.0 + float(rng.random()),')
           .replace('"context_effect": 0.3}', "}"),
           "demo/03_c": GATED.replace('if not pathlib.Path("go.txt").exists():\n    raise RuntimeError("not yet")\n', "")}
    root = _root(tmp_path, monkeypatch, nbs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "lib"),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "compendium", "run", "--keep-going", "--jobs", jobs], env=env,
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        found = [r for r in (root / "build" / "runs").glob("*") if r.is_dir()] if (root / "build" / "runs").exists() else []
        st = runs.read_status(found[0]) if found else {}
        if st.get("demo/02_b", {}).get("status") == runs.RUNNING and st.get("demo/01_a", {}).get("status") == "completed":
            time.sleep(3)           # inside its sleep
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the run never reached its second notebook: " + proc.communicate()[0][-2000:])
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 143, out
    (run,) = _runs(root)
    st = runs.read_status(run)
    assert st["demo/01_a"]["status"] == "completed"
    assert st["demo/02_b"]["status"] == "failed" and st["demo/02_b"].get("reason") == "terminated"
    assert st["demo/03_c"]["status"] in ("not run", "failed", "completed")
    keep = runs.read_status(run)["demo/01_a"]
    assert cli.main(["run", "--resume", str(run), "--jobs", jobs]) == 0
    assert runs.read_status(run)["demo/01_a"] == keep
    assert cli.main(["run"]) == 0                                  # uninterrupted, from the same code
    resumed, fresh = _runs(root)
    assert _recorded(resumed) == _recorded(fresh)
