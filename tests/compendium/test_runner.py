"""The runner: names, parameters, run folders, failures of every kind, and publishing from a real
run of three tiny notebooks in kernels (one completes, one records then raises, one kills its
own kernel)."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from compendium import cli, runner

from ledger_demo import KERNEL_NOTEBOOKS, make_root, tree_digest




def test_list_and_resolve(kernel_root):
    assert runner.list_notebooks() == ["demo/01_good", "demo/02_bad", "demo/03_dies"]
    assert runner.resolve("01_good") == "demo/01_good"
    assert runner.resolve("notebooks/demo/02_bad.py") == "demo/02_bad"
    with pytest.raises(ValueError, match="does not exist; available notebooks: demo/01_good, demo/02_bad, demo/03_dies"):
        runner.resolve("04_missing")
    with pytest.raises(ValueError, match="ambiguous"):
        runner.resolve("0")


def test_parameters_are_read_from_the_parameters_cell(kernel_root):
    assert runner.parameter_names("01_good") == ["PROFILE", "SEED", "DEVICE", "LABEL", "N", "RATE", "FLAG"]
    assert runner.parameter_defaults("01_good") == {"PROFILE": "cpu", "SEED": 0, "DEVICE": "cpu", "LABEL": "none",
                                                    "N": 3, "RATE": 0.5, "FLAG": False}
    runner.check_parameters(["demo/01_good"], {"LABEL": "x"})
    with pytest.raises(ValueError, match=r"SEED cannot be set with -p; use --seed"):
        runner.check_parameters(["demo/01_good"], {"SEED": 3})
    with pytest.raises(ValueError, match=r"notebook 'demo/01_good' has no parameter 'LABLE'; its parameters cell "
                                         r"defines LABEL, N, RATE, FLAG \(PROFILE, SEED and DEVICE are set with"):
        runner.check_parameters(["demo/01_good", "demo/02_bad"], {"LABLE": "x"})


@pytest.mark.parametrize("args, message", [
    (["run", "nope"], "does not exist"),
    (["run", "--profile", "huge"], "unknown profile 'huge'"),
    (["run", "--device", "gpu"], "unknown device 'gpu'; use 'cpu', 'cuda' or 'cuda:N'"),
    (["run", "--device", "cuda:x"], "unknown device 'cuda:x'"),
    (["run", "-p", "PROFILE=paper"], "PROFILE cannot be set with -p; use --profile"),
    (["run", "-p", "DEVICE=cuda"], "DEVICE cannot be set with -p; use --device"),
    (["run", "01_good", "-p", "NOPE=1"], "has no parameter 'NOPE'; its parameters cell defines LABEL, N"),
    (["run", "01_good", "--publish"], "only a complete main run may do"),
])
def test_cli_rejects_bad_arguments_before_running_anything(kernel_root, capsys, args, message):
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (kernel_root / "build" / "runs").exists() or not any((kernel_root / "build" / "runs").iterdir())


def test_the_module_entry_point(kernel_root):
    out = subprocess.run([sys.executable, "-m", "compendium", "run", "--profile", "huge"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown profile 'huge'" in out.stderr, out.stderr


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """All three notebooks with --keep-going (one completes, one raises, one kills its kernel), then
    `compendium publish` of that run, which must refuse it; papers/ is fingerprinted at each step."""
    import contextlib
    import io

    root = make_root(tmp_path_factory.mktemp("kernels") / "root", KERNEL_NOTEBOOKS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPENDIUM_ROOT", str(root))
        mp.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
        mp.delenv("COMPENDIUM_RUN_DIR", raising=False)
        mp.delenv("COMPENDIUM_NOTEBOOK", raising=False)
        papers_at_start = tree_digest(root / "papers")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = cli.main(["run", "--keep-going", "--seed", "7", "-p", "LABEL=hello"])
        papers_after_run = tree_digest(root / "papers")
        (run,) = sorted((root / "build" / "runs").iterdir())
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            publish_code = cli.main(["publish", str(run)])
    return {"root": root, "papers_at_start": papers_at_start, "papers_after_run": papers_after_run, "code": code,
            "stdout": buf.getvalue(), "run": run, "publish_code": publish_code, "publish_err": err.getvalue(),
            "papers_after_publish": tree_digest(root / "papers")}


@pytest.mark.slow
@pytest.mark.notebook
def test_running_notebooks_leaves_papers_untouched_until_publish(real_run):
    # 02_bad recorded its claim and then raised; running changed nothing in papers/
    assert real_run["papers_after_run"] == real_run["papers_at_start"]
    assert (real_run["run"] / "results" / "demo" / "loss.cpu.json").exists()  # recorded, in the run folder only
    status = json.loads((real_run["run"] / "status.json").read_text())["notebooks"]
    assert "cell 3: RuntimeError: the notebook fails after recording" in status["demo/02_bad"]["error"]


@pytest.mark.slow
@pytest.mark.notebook
def test_dead_kernel_is_a_failure_and_the_summary_is_printed(real_run):
    out, run = real_run["stdout"], real_run["run"]
    assert real_run["code"] == 1
    assert run.name.endswith("-cpu-s7")
    summary = out[out.index("summary of run"):]
    assert "completed  demo/01_good" in summary and "failed     demo/02_bad" in summary
    assert "failed     demo/03_dies" in summary and "DeadKernelError" in summary
    assert "1 of 3 notebook(s) completed" in summary
    status = json.loads((run / "status.json").read_text())["notebooks"]
    assert {k: v["status"] for k, v in status.items()} == {
        "demo/01_good": "completed", "demo/02_bad": "failed", "demo/03_dies": "failed"}
    assert status["demo/01_good"]["files"] == ["results/demo/gain.cpu.json"]
    params = json.loads((run / "params.json").read_text())
    assert params["seed"] == 7 and params["parameters"] == {"LABEL": "hello"} and "git_revision" in params
    assert (real_run["root"] / "seen.txt").read_text() == "cpu 7 cpu hello"


@pytest.mark.slow
@pytest.mark.notebook
def test_a_run_with_failures_and_a_parameter_is_not_published(real_run):
    err = real_run["publish_err"]
    assert real_run["publish_code"] == 1
    assert f"not published: build/runs/{real_run['run'].name} is not a complete main run" in err
    assert "2 notebook(s) did not complete: demo/02_bad (failed), demo/03_dies (failed)" in err
    assert "it set notebook parameters away from their defaults (LABEL='hello')" in err
    assert real_run["papers_after_publish"] == real_run["papers_at_start"]
    assert not (real_run["root"] / "papers" / "demo" / "results").exists()


@pytest.mark.slow
@pytest.mark.notebook
def test_no_progress_bar_reaches_the_saved_notebook(real_run):
    nb = nbformat.read(real_run["run"] / "notebooks" / "demo" / "01_good.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = json.dumps(outputs)
    assert "loop total 19900" in text  # the loop ran and its print is there
    assert "busy loop" not in text and "it/s" not in text and "%|" not in text
    assert "application/vnd.jupyter.widget-view+json" not in text
    assert str(real_run["root"]) not in text  # no absolute paths of this machine
