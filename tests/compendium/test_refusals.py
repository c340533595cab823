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
import textwrap
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
