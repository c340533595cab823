"""Every bad input a clear refusal, with nothing left half-written: seeds outside numpy's range, a
full disk or a file-size limit while running, SIGTERM to the runner, a read-only repository at
publish, ``--output`` naming a file. Each test was seen failing on the code before its fix."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compendium import atomic, cli, paths, publish, runner, runs

from ledger_demo import make_root, tree_digest

TOO_BIG = 2**32  # numpy's np.random.seed takes 0 .. 2**32 - 1


def _no_run_folder(root: Path) -> bool:
    folder = root / "build" / "runs"
    return not folder.exists() or not any(folder.iterdir())


# -- seeds --------------------------------------------------------------------------------------------
def test_a_seed_above_numpys_range_is_refused_before_a_run_folder_exists(kernel_root, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "01_good", "--seed", str(TOO_BIG)])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"the seed must be at most 2**32 - 1 = {TOO_BIG - 1} (numpy's seed range), got {TOO_BIG}" in err
    with pytest.raises(ValueError, match="at most 2\\*\\*32 - 1"):
        runs.create("cpu", TOO_BIG)
    with pytest.raises(ValueError, match="at most 2\\*\\*32 - 1"):
        runner.run_notebook("01_good", seed=TOO_BIG)
    with pytest.raises(ValueError, match="at most 2\\*\\*32 - 1"):
        runner.run_many(["01_good"], seed=TOO_BIG)
    assert _no_run_folder(kernel_root)
    assert cli._seed(str(TOO_BIG - 1)) == TOO_BIG - 1  # the largest seed numpy takes is accepted


def test_a_notebook_refuses_a_seed_numpy_cannot_take(kernel_root):
    from compendium import notebook

    with pytest.raises(ValueError, match=f"SEED must be at most 2\\*\\*32 - 1 = {TOO_BIG - 1}"):
        notebook.start("demo/01_good", "cpu", TOO_BIG)


# -- --output naming a file ---------------------------------------------------------------------------
@pytest.mark.parametrize("inside", [True, False])
def test_output_naming_an_existing_file_is_refused_before_a_run_folder_exists(kernel_root, tmp_path, capsys, inside):
    """Before: a run folder, then FileExistsError from inside the runner."""
    target = (kernel_root / "build" / "out.txt") if inside else (tmp_path / "out.txt")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("keep me")
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "01_good", "--output", str(target)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"--output {target} is an existing file, not a folder" in err
    assert _no_run_folder(kernel_root) and target.read_text() == "keep me"
    with pytest.raises(paths.UnsafeOutputError, match="is an existing file"):
        runner.run_notebook("01_good", output_dir=target)
    assert _no_run_folder(kernel_root)


# -- a read-only repository at publish ----------------------------------------------------------------
def _read_only_lock(monkeypatch):
    real = os.open

    def refuse(path, flags, *args, **kwargs):
        if os.fspath(path).endswith(publish.LOCK):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)


def test_a_read_only_repository_is_a_refusal_at_publish_not_a_traceback(run_dir, demo_root, capsys, monkeypatch):
    """Before: the lock was taken outside the CLI's error handler, and OSError came out raw."""
    from test_publish import complete_run

    complete_run(run_dir)
    before = tree_digest(demo_root / "papers")
    _read_only_lock(monkeypatch)
    assert cli.main(["publish", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert ("not published: cannot take the publish lock .publish.lock in the repository root (the file system "
            "is read-only): nothing was done, papers/ is unchanged") in err
    assert cli.main(["claims"]) == 1
    assert "compendium claims: cannot take the publish lock .publish.lock" in capsys.readouterr().err
    assert tree_digest(demo_root / "papers") == before


# -- a full disk during `compendium run` (simulated: no kernel) ----------------------------------------
class _Disk:
    """A disk that fills: ``execute`` stands in for papermill (writes the executed copy, then raises
    ENOSPC when ``cut`` is set, cut short); ``write_json`` stands in for the atomic writer, failing
    with ENOSPC while ``full(disk, path)`` says so."""

    def __init__(self, monkeypatch, *, cut: bool, full):
        import papermill

        self.cut, self.full, self.output = cut, full, None
        real_write = atomic.write_json

        def execute(nb, output, **kw):
            self.output = Path(output)
            text = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
            self.output.write_text(text[: len(text) // 2] if cut else text)
            if cut:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def write_json(path, obj):
            if self.full(self, Path(path)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            return real_write(path, obj)

        monkeypatch.setattr(papermill, "execute_notebook", execute)
        monkeypatch.setattr(runs.atomic, "write_json", write_json)


def _run(capsys, *names):
    code = cli.main(["run", *names])
    out = capsys.readouterr()
    (run,) = sorted((paths.runs_dir()).iterdir())
    return code, out.out, out.err, run


def test_a_disk_full_while_writing_the_executed_notebook(kernel_root, capsys, monkeypatch):
    """Before: a traceback, status.json "running", the .ipynb cut short."""
    disk = _Disk(monkeypatch, cut=True, full=lambda d, path: False)
    code, out, err, run = _run(capsys, "01_good", "02_bad")
    assert code == 1 and "Traceback" not in err
    entry = runs.read_status(run)["demo/01_good"]
    assert entry["status"] == "failed" and entry["reason"] == "disk full" and entry["output"] is None
    assert "disk full (no space left on the device) while writing the executed notebook" in entry["error"]
    assert f"the executed copy build/runs/{run.name}/notebooks/demo/01_good.ipynb was cut short and has been removed" \
        in entry["error"]
    assert not disk.output.exists()
    assert runs.read_status(run)["demo/02_bad"]["status"] == "not run"
    assert "failed: disk full demo/01_good" in out


def test_a_disk_full_when_the_end_is_recorded_frees_the_executed_copy(kernel_root, capsys, monkeypatch):
    """The disk fills with the (whole) executed copy: the status write fails until it is removed."""
    _Disk(monkeypatch, cut=False, full=lambda d, path: d.output is not None and d.output.exists())
    code, out, err, run = _run(capsys, "01_good")
    assert code == 1 and "Traceback" not in err
    entry = runs.read_status(run)["demo/01_good"]
    assert entry["status"] == "failed" and entry["reason"] == "disk full"
    assert "notebook 'demo/01_good' ran to its end\n  disk full: its status could not be recorded (cannot write " \
           f"build/runs/{run.name}/status.json: disk full (no space left on the device)); its executed copy was " \
           "removed to make room" in entry["error"]
    assert "failed: disk full demo/01_good" in out


def test_a_disk_full_before_anything_runs_is_a_message(kernel_root, capsys, monkeypatch):
    _Disk(monkeypatch, cut=False, full=lambda d, path: path.name == "status.json")
    code, out, err, run = _run(capsys, "01_good")
    assert code == 1 and "Traceback" not in err
    assert (f"compendium run: stopped: cannot write build/runs/{run.name}/status.json: disk full (no space left on "
            "the device); nothing published") in err
    assert not (run / "status.json").exists()  # never "running"


def test_a_disk_full_even_for_the_run_folder_is_a_message(kernel_root, capsys, monkeypatch):
    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(runs.atomic, "write_json", full)
    assert cli.main(["run", "01_good"]) == 1
    err = capsys.readouterr().err
    assert "compendium run: cannot make a run folder in build/runs: disk full (no space left on the device)" in err
    assert "Traceback" not in err


def test_a_disk_full_inside_a_cell_says_disk_full(kernel_root, capsys, monkeypatch):
    """A notebook's own write (a figure, a result) stopped by a full disk: failed, "disk full"."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    def execute(nb, output, **kw):
        Path(output).write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        raise PapermillExecutionError(3, 2, "savefig(fig)", "OSError", "[Errno 28] No space left on device: 'a.png'", [])

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    code, out, err, run = _run(capsys, "01_good")
    entry = runs.read_status(run)["demo/01_good"]
    assert code == 1 and entry["status"] == "failed" and entry["reason"] == "disk full"
    assert "disk full: OSError: [Errno 28] No space left on device: 'a.png'" in entry["error"]
    assert entry["output"] == f"build/runs/{run.name}/notebooks/demo/01_good.ipynb"  # whole: kept
    assert "failed: disk full demo/01_good" in out


# -- real kernels: a file-size limit, SIGTERM ---------------------------------------------------------
SLOW = {
    "demo/01_big": """\
        print("x" * 400_000)
        """,
    "demo/02_sleep": """\
        import time

        time.sleep(120)
        """,
    "demo/03_after": """\
        x = 1
        """,
}


@pytest.fixture
def slow_root(tmp_path):
    root = make_root(tmp_path / "root", SLOW)
    env = {**os.environ, "COMPENDIUM_ROOT": str(root), "COMPENDIUM_OUTPUT": str(root / "build"),
           "PYTHONPATH": str(paths.repo_root() / "lib"), "PYTHONDONTWRITEBYTECODE": "1"}
    for key in (runs.RUN_ENV, runs.NOTEBOOK_ENV):
        env.pop(key, None)
    return root, env


def _only_run(root: Path) -> Path:
    (run,) = sorted((root / "build" / "runs").iterdir())
    return run


@pytest.mark.slow
@pytest.mark.notebook
def test_an_executed_notebook_over_the_file_size_limit(slow_root):
    """The runner under RLIMIT_FSIZE (256 KiB): the executed copy of a notebook printing 400 kB
    cannot be written. Before: a traceback, status "running", a truncated .ipynb."""
    root, env = slow_root
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (262144, 262144)); "
              "from compendium import cli; sys.exit(cli.main(['run', '01_big']))")
    out = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    run = _only_run(root)
    entry = runs.read_status(run)["demo/01_big"]
    assert entry["status"] == "failed" and entry["reason"] == "file too large", entry
    assert "file too large (the file-size limit, ulimit -f, was reached) while writing the executed notebook" \
        in entry["error"]
    executed = run / "notebooks" / "demo" / "01_big.ipynb"
    assert not executed.exists() or json.loads(executed.read_text())  # removed, or whole
    assert "failed: file too large demo/01_big" in out.stdout


def _kernels_of(run: Path) -> list[int]:
    """Processes whose environment names ``run`` as their run folder (the notebook kernels)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"{runs.RUN_ENV}={run}".encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.notebook
def test_sigterm_to_the_runner_is_handled_like_an_interrupt(slow_root):
    """Before: the runner died at once, status.json said "running", nothing was printed."""
    root, env = slow_root
    proc = subprocess.Popen([sys.executable, "-m", "compendium", "run", "02_sleep", "03_after"], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        run = None
        while time.monotonic() < deadline:
            runs_dir = root / "build" / "runs"
            run = next(iter(runs_dir.iterdir()), None) if runs_dir.exists() else None
            if run is not None and _kernels_of(run.resolve()) and (run / "notebooks/demo/02_sleep.ipynb").exists():
                break
            time.sleep(0.5)
        else:
            pytest.fail("the kernel did not start")
        time.sleep(2)  # inside the sleeping cell
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the runner's own exception never escapes (the kernel, stopped mid-reply, may log one of its own)
    assert proc.returncode == 143, err
    assert "compendium/runner.py" not in err and "compendium/cli.py" not in err and "Terminated" not in err, err
    assert "terminated (SIGTERM): nothing published" in err
    status = runs.read_status(run)
    assert status["demo/02_sleep"]["status"] == "failed" and status["demo/02_sleep"]["reason"] == "terminated"
    assert status["demo/02_sleep"]["error"].startswith("terminated (SIGTERM)")
    assert status["demo/03_after"]["status"] == "not run"
    assert "failed: terminated demo/02_sleep" in out
    time.sleep(2)
    assert _kernels_of(run.resolve()) == []  # the kernel went with the runner
