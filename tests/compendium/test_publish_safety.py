"""Bad input to publishing and running, each as a new user might try it: what is refused must be
refused with a message naming the problem, and papers/ must be byte-identical to before every refused
or interrupted publish. A kill at every write step, a full disk (simulated at every step, and a real
small filesystem that fills), two publishers at once, runs that are not complete main runs, outputs
into tracked folders, parameters of the wrong type, bad seeds and damaged JSON files."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compendium import atomic, cli, publish, runs, tables

from ledger_demo import tree_digest
from test_publish import GOOD, _as_notebook, _figure, complete_run

ALL = ["demo/01_good", "demo/02_bad", "demo/03_dies"]


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(publish.STAGE_PREFIX))


@pytest.fixture
def published(run_dir, demo_root, monkeypatch):
    """A first complete run published, and a second complete run (new values, new and replaced
    figures, a stale figure to remove) ready to publish over it. The publish time is fixed, so
    that two publishes of one run give the same bytes."""
    from datetime import datetime, timezone

    monkeypatch.setattr(publish, "_now", lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), raising=False)
    complete_run(run_dir)
    publish.publish(run_dir)
    second = runs.create("cpu", 0, notebooks=ALL)
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(second))

    def good():
        from compendium import claims

        monkeypatch.setenv(runs.NOTEBOOK_ENV, "demo/01_good")
        claims.conclude(claims.Measurement("demo/gain", {**GOOD, "gain": 9.0}), profile="cpu", seed=0)
        _figure("demo/new_curve")

    complete_run(second, good=good)
    monkeypatch.delenv(runs.NOTEBOOK_ENV)
    return {"root": demo_root, "first": run_dir, "second": second, "old": tree_digest(demo_root / "papers")}


def _new_state(published, tmp_path):
    """The digest of papers/ after publishing the second run (done on a copy of the compendium)."""
    copy = tmp_path / "copy"
    shutil.copytree(published["root"], copy, symlinks=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPENDIUM_ROOT", str(copy))
        publish.publish(published["second"])
    return tree_digest(copy / "papers")


# -- 1. only a complete main run publishes ------------------------------------------------------------
def test_a_one_notebook_run_is_refused_by_compendium_publish(demo_root, capsys):
    run = runs.create("cpu", 0, notebooks=["demo/01_good"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPENDIUM_RUN_DIR", str(run))
        _as_notebook(run, "demo/01_good", runs.COMPLETED, lambda: _figure("demo/curve"))
    before = tree_digest(demo_root / "papers")
    assert cli.main(["publish", str(run)]) == 1
    err = capsys.readouterr().err
    assert "is not a complete main run" in err and "it ran 1 of the 3 notebooks; not run: demo/02_bad, demo/03_dies" in err
    assert tree_digest(demo_root / "papers") == before
    assert not (demo_root / "papers" / "demo" / "results").exists()


def test_a_run_with_an_overridden_parameter_is_refused(run_dir, demo_root, capsys):
    complete_run(run_dir)
    params = atomic.read_json(run_dir / "params.json")
    atomic.write_json(run_dir / "params.json", {**params, "parameters": {"LABEL": "other"}})
    before = tree_digest(demo_root / "papers")
    with pytest.raises(publish.NotAMainRun, match=r"parameters away from their defaults \(LABEL='other'\)"):
        publish.publish(run_dir)
    assert tree_digest(demo_root / "papers") == before
    # and the command line refuses the combination before running anything
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--publish", "-p", "LABEL=other"])
    assert info.value.code == 2 and "only a run at default parameters may do" in capsys.readouterr().err


def test_a_smoke_run_is_refused(run_dir, demo_root):
    complete_run(run_dir)
    params = atomic.read_json(run_dir / "params.json")
    atomic.write_json(run_dir / "params.json", {**params, "profile": "smoke"})
    before = tree_digest(demo_root / "papers")
    with pytest.raises(publish.NotAMainRun, match="its profile 'smoke' is for tests only"):
        publish.publish(run_dir)
    assert tree_digest(demo_root / "papers") == before


def test_a_run_from_unrecorded_code_is_refused(run_dir, demo_root):
    complete_run(run_dir)
    params = atomic.read_json(run_dir / "params.json")
    atomic.write_json(run_dir / "params.json", {**params, "git_revision": params["git_revision"] + "+dirty",
                                                "diff_sha256": None})
    with pytest.raises(publish.NotAMainRun, match="fingerprint \\(diff_sha256\\) was not recorded"):
        publish.publish(run_dir)
    atomic.write_json(run_dir / "params.json", {**params, "git_revision": "unknown"})
    with pytest.raises(publish.NotAMainRun, match="its code state is unknown"):
        publish.publish(run_dir)


# -- 2. a kill at any write leaves the complete old or the complete new papers/ ------------------------
def _killed_at(n: int, run: Path, marker: Path, no_exchange: bool = False) -> int:
    """Publish ``run`` in a forked child that SIGKILLs itself at the n-th write step (its label goes
    to ``marker``); the child's exit status (0: it finished before step n)."""
    pid = os.fork()
    if pid == 0:  # the child
        try:
            count = [0]

            def fault(label):
                count[0] += 1
                if count[0] == n:
                    marker.write_text(label)
                    os.kill(os.getpid(), signal.SIGKILL)

            publish._fault = fault
            if no_exchange:
                atomic.exchange = lambda a, b: False
            publish.publish(run)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize("no_exchange", [False, True], ids=["exchange", "two-renames"])
def test_a_kill_at_every_write_leaves_the_old_or_the_new_state(published, tmp_path, no_exchange):
    root, papers = published["root"], published["root"] / "papers"
    new = _new_state(published, tmp_path)
    assert new != published["old"]
    backup = tmp_path / "old-papers"
    shutil.copytree(papers, backup)
    labels = []
    n = 0
    while True:
        n += 1
        marker = tmp_path / f"step-{n}"
        status = _killed_at(n, published["second"], marker, no_exchange)
        if status == 0:
            break
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"step {n}: exit status {status}"
        label = marker.read_text()
        labels.append(label)
        if label == "between the two renames":
            # the one moment of the fallback without papers/: the next publish puts the old tree back
            assert not papers.exists() and len(_leftovers(root)) == 2
            assert publish._recover()[0].endswith("put back as papers/ (a publish stopped between its two renames)")
            assert tree_digest(papers) == published["old"]
        elif label == "remove the old tree":  # after the switch: the complete new state
            assert tree_digest(papers) == new, f"killed at step {n} ({label}): papers/ is not the new state"
        else:  # staging, fsync, or just before the switch: the complete old state
            assert tree_digest(papers) == published["old"], f"killed at step {n} ({label}): papers/ changed"
        if tree_digest(papers) != published["old"]:  # start the next try from the old state
            shutil.rmtree(papers)
            shutil.copytree(backup, papers)
    assert n > 10 and "switch" in labels and "fsync" in labels
    # the last, uninterrupted publish removed what the killed ones left, and says so
    assert tree_digest(papers) == new and _leftovers(root) == []
    out = publish.publish(published["second"])
    assert out.cleaned == [] and tree_digest(papers) == new


def test_the_next_publish_reports_the_leftovers_it_removes(published, tmp_path):
    marker = tmp_path / "marker"
    status = _killed_at(3, published["second"], marker)
    assert os.WIFSIGNALED(status) and len(_leftovers(published["root"])) == 1
    out = publish.publish(published["second"])
    assert out.cleaned and "removed the leftovers of an interrupted publish" in out.summary()
    assert _leftovers(published["root"]) == []


# -- 3. a full disk ----------------------------------------------------------------------------------
def test_a_full_disk_at_any_step_before_the_switch_changes_nothing(published):
    root, papers = published["root"], published["root"] / "papers"
    n = 0
    while True:
        n += 1
        count = [0]

        def fault(label, count=count, n=n):  # bound to this iteration's counter and fault index
            count[0] += 1
            if count[0] == n:
                if label == "switch":
                    raise StopIteration
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        publish._fault = fault
        try:
            with pytest.raises(publish.PublishError, match=r"no space left on the device\); papers/ is unchanged "
                                                           r"and the staged copy was removed; free some space"):
                publish.publish(published["second"])
        except StopIteration:
            break
        finally:
            publish._fault = None
        assert tree_digest(papers) == published["old"] and _leftovers(root) == []
    assert n > 10


SMALL_FS = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    mount, root, run = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    subprocess.run(["cp", "-a", str(root), str(mount / "root")], check=True)
    os.environ["COMPENDIUM_ROOT"] = str(mount / "root")
    from compendium import publish
    from ledger_demo import tree_digest
    before = tree_digest(mount / "root" / "papers")
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)   # fill the filesystem
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        os.close(fd)
    try:
        publish.publish(run)
        message = None
    except publish.PublishError as err:
        message = str(err)
    print(json.dumps({"message": message, "same": tree_digest(mount / "root" / "papers") == before,
                      "left": sorted(p.name for p in (mount / "root").iterdir() if p.name.startswith(".papers."))}))
""")


def test_a_small_filesystem_that_fills(published, tmp_path):
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -rm` (user and mount namespaces) to mount a small tmpfs; the simulated "
                    "full disk of test_a_full_disk_at_any_step_before_the_switch_changes_nothing still ran")
    mount = tmp_path / "mnt"
    mount.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}  # this lib/ first
    out = subprocess.run(["unshare", "-rm", sys.executable, "-c", SMALL_FS, str(mount), str(published["root"]),
                          str(published["second"])], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["message"] and "no space left on the device" in result["message"], result
    assert result["same"] and result["left"] == [], result


# -- 4. one publisher at a time ------------------------------------------------------------------------
def test_a_second_publisher_is_refused_naming_the_first(published):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom compendium import publish\n"
         "with publish.lock('run ' + sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n",
         published["first"].name], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(publish.PublishLocked, match=rf"another publish is writing papers/ \(pid {child.pid}, "
                                                        rf"publishing run {published['first'].name}, since "):
            publish.publish(published["second"])
        assert tree_digest(published["root"] / "papers") == published["old"]
    finally:
        child.kill()
        child.wait()
    publish.publish(published["second"])  # the lock is free again
    assert tree_digest(published["root"] / "papers") != published["old"]


# -- 5. outputs never inside the repository's sources or tracked files ------------------------------


def _refused(capsys, argv, *needles):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err}"


def _no_run_folder(root):
    runs_dir = root / "build" / "runs"
    return not runs_dir.exists() or not any(runs_dir.iterdir())


@pytest.mark.parametrize("output, needle", [
    ("notebooks", "resolves to notebooks/, inside notebooks/"),
    ("papers/demo/results", "inside papers/"),
    ("build/../papers", "resolves to papers/, inside papers/"),
    ("build/link", "resolves to notebooks/demo/, inside notebooks/"),        # a link into notebooks/
    (".", "resolves to the repository root, which holds files git tracks"),
    ("tracked", "resolves to tracked/, which holds files git tracks (tracked/a.txt)"),
])
def test_output_into_tracked_folders_is_refused(kernel_root, capsys, monkeypatch, output, needle):
    monkeypatch.chdir(kernel_root)
    (kernel_root / "build").mkdir()
    (kernel_root / "build" / "link").symlink_to(kernel_root / "notebooks" / "demo")
    (kernel_root / "tracked").mkdir()
    (kernel_root / "tracked" / "a.txt").write_text("x")
    subprocess.run(["git", "add", "tracked/a.txt"], cwd=kernel_root, check=True)
    before = tree_digest(kernel_root / "notebooks")
    _refused(capsys, ["run", "01_good", "--output", output], needle)
    assert tree_digest(kernel_root / "notebooks") == before and _no_run_folder(kernel_root)


def test_compendium_output_into_papers_is_refused(kernel_root, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(kernel_root / "papers" / "demo"))
    with pytest.raises(ValueError, match="COMPENDIUM_OUTPUT .* inside papers/"):
        runs.create("cpu", 0)
    assert sorted(p.name for p in (kernel_root / "papers" / "demo").iterdir()) == ["claims.yaml"]


def test_a_run_folder_set_by_hand_inside_papers_is_refused(kernel_root, monkeypatch):
    monkeypatch.setenv(runs.RUN_ENV, str(kernel_root / "papers" / "demo" / "results"))
    with pytest.raises(ValueError, match="COMPENDIUM_RUN_DIR .* inside papers/"):
        runs.current()
    assert not (kernel_root / "papers" / "demo" / "results").exists()


# -- 6. parameters checked before anything runs --------------------------------------------------------
@pytest.mark.parametrize("args, needles", [
    (["-p", "N=abc"], ["-p N=abc: notebook 'demo/01_good' declares N = 3 (int); 'abc' is not an integer"]),
    (["-p", "RATE=fast"], ["RATE = 0.5 (float); 'fast' is not a number"]),
    (["-p", "FLAG=maybe"], ["FLAG = False (bool); 'maybe' is not true/false"]),
    (["-p", "N"], ["parameters look like NAME=VALUE"]),
    (["--seed", "-1"], ["the seed must be a non-negative integer, got '-1'"]),
    (["--seed", "1.5"], ["the seed must be a non-negative integer, got '1.5'"]),
])
def test_bad_parameters_and_seeds_are_refused_before_a_run_folder_exists(kernel_root, capsys, args, needles):
    _refused(capsys, ["run", "01_good", *args], *needles)
    assert _no_run_folder(kernel_root)


def test_parameters_take_the_types_of_the_parameters_cell(kernel_root):
    from compendium import runner

    got = runner.convert_parameters(["01_good"], {"LABEL": "123", "N": "7", "RATE": "2", "FLAG": "yes"})
    assert got == {"LABEL": "123", "N": 7, "RATE": 2.0, "FLAG": True}
    assert [type(v) for v in got.values()] == [str, int, float, bool]
    with pytest.raises(ValueError, match=r"parameter N='7' \(str\): notebook 'demo/01_good' declares N = 3 \(int\)"):
        runner.check_parameters(["demo/01_good"], {"N": "7"})
    with pytest.raises(ValueError, match="the seed must be a non-negative integer, got -1"):
        runner.run_notebook("01_good", seed=-1)
    with pytest.raises(ValueError, match="the seed must be a non-negative integer, got -2"):
        runs.create("cpu", -2)
    assert _no_run_folder(kernel_root)


@pytest.mark.parametrize("damaged", ["params.json", "status.json"])
def test_a_damaged_run_file_is_named(run_dir, demo_root, capsys, damaged):
    complete_run(run_dir)
    text = (run_dir / damaged).read_text()
    (run_dir / damaged).write_text(text[: len(text) // 2])
    assert cli.main(["publish", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"build/runs/{run_dir.name}/{damaged}: not valid JSON" in err and "cut short" in err
    assert not (demo_root / "papers" / "demo" / "results").exists()


def test_a_damaged_published_json_is_named_and_left_alone(published, capsys):
    path = published["root"] / "papers" / "demo" / "results" / tables.PUBLISHED
    path.write_text(path.read_text()[:40])
    before = tree_digest(published["root"] / "papers")
    assert cli.main(["publish", str(published["second"])]) == 1
    assert "papers/demo/results/PUBLISHED.json: not valid JSON" in capsys.readouterr().err
    assert tree_digest(published["root"] / "papers") == before


def test_compendium_claims_rebuilds_the_tables_under_the_lock(published, capsys):
    from compendium import board

    table = published["root"] / "papers" / "demo" / "CLAIMS.md"
    table.write_text("hand-edited\n")
    png = published["root"] / "papers" / "demo" / "figures" / board.FIGURE_NAME
    png.write_bytes(b"hand-drawn")
    assert cli.main(["claims"]) == 0
    assert table.read_text().startswith("# Claims") and _leftovers(published["root"]) == []
    assert png.read_bytes() == board.png_bytes(board.build("demo"))
    with publish.lock("run X"):
        assert cli.main(["claims"]) == 1
    assert f"another publish is writing papers/ (pid {os.getpid()}, publishing run X" in capsys.readouterr().err
