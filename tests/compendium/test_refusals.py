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
