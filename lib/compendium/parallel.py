"""Notebooks of one run executed at once: ``compendium run --jobs N`` (``make all JOBS=N``).

Each notebook runs in a worker process of its own (``python -m compendium.parallel RUN NAME ...``),
which executes it exactly as a sequential run does (:func:`compendium.runner.run_notebook`) into the
same run folder: its kernel writes into the notebook's own lane, moved into the run folder when it
ends (:func:`compendium.runs.merge_lane`), and status.json is rewritten under a lock. Every worker,
and so its kernel, runs with one thread for torch and for the BLAS libraries (:data:`ONE_THREAD`), so N
workers use N cores. The notebooks of the compendium are independent of each other (none reads what
another writes in the run), so the values recorded are those of a sequential run; only the timings
differ.

Ctrl-C or SIGTERM stops every worker (each records its notebook as failed: interrupted or terminated);
notebooks not started are "not run".
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from compendium import paths, runs

#: The environment of every worker (and of its kernel): one thread per process.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}


def check_jobs(jobs: Any) -> int:
    """``jobs`` as an int >= 1, or ValueError."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"--jobs must be a whole number >= 1, got {jobs!r}")
    return jobs


def _command(run_dir: Path, name: str, profile: str, seed: int, device: str, parameters: dict,
             output_dir: Path | None, timeout: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "compendium.parallel", str(run_dir), name, "--profile", profile,
           "--seed", str(seed), "--device", device, "--parameters", json.dumps(parameters)]
    if output_dir is not None:
        cmd += ["--output", str(output_dir)]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    return cmd


def run_parallel(todo: list[str], *, jobs: int, run_dir: Path, keep_going: bool = False, profile: str, seed: int,
                 device: str, parameters: dict | None = None, output_dir: Path | None = None,
                 timeout: int | None = None, write=print):
    """Run ``todo`` with at most ``jobs`` workers at once, starting them in order. Returns (results,
    failures) as :func:`compendium.runner.run_many` does; without ``keep_going`` no notebook is started
    after a failure (those left are "not run")."""
    from compendium import runner
    from compendium.runner import NotebookFailed, RunResult

    jobs = check_jobs(jobs)
    env = {**os.environ, **ONE_THREAD}
    waiting = list(todo)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    done, failed = [], []
    stop = False
    out_root = Path(output_dir) if output_dir else Path(run_dir) / "notebooks"

    def finish(name: str, proc: subprocess.Popen, start: float) -> None:
        nonlocal stop
        entry = runs.read_status(run_dir).get(name, {})
        if entry.get("status") == runs.COMPLETED and proc.returncode == 0:
            res = RunResult(name, out_root / f"{name}.ipynb", float(entry.get("seconds") or 0.0), run_dir)
            done.append(res)
            write(f"ok    {name}  ({res.seconds:.0f} s) -> {paths.display(res.output)}")
            return
        detail = entry.get("error") or f"its worker exited with code {proc.returncode} before recording its end"
        if entry.get("status") != runs.FAILED:   # the worker died before it could say why
            runs.set_status(run_dir, name, status=runs.FAILED, error=detail, parameters=entry.get("parameters"),
                            seconds=round(time.monotonic() - start, 1))
        failed.append(NotebookFailed(name, None, detail.splitlines()[0], out_root / f"{name}.ipynb"))
        write(f"FAIL  {name}: {detail.splitlines()[0]}")
        if not keep_going:
            stop = True

    previous = runner._raise_on_sigterm()
    try:
        while waiting or running:
            while waiting and not stop and len(running) < jobs:
                name = waiting.pop(0)
                cmd = _command(run_dir, name, profile, seed, device, dict(parameters or {}), output_dir, timeout)
                running[name] = (subprocess.Popen(cmd, env=env, cwd=paths.repo_root()), time.monotonic())
                write(f"start {name}  ({len(running)} of at most {jobs} running)")
            if stop and not running:
                break
            for name, (proc, start) in list(running.items()):
                if proc.poll() is not None:
                    del running[name]
                    finish(name, proc, start)
            time.sleep(0.2)
    except KeyboardInterrupt:
        for proc, _ in running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)       # each worker records its notebook as terminated
        for proc, _ in running.values():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise
    finally:
        runner._restore_sigterm(previous)
        seen = runs.read_status(run_dir)
        for name in todo:
            if name not in seen:
                runs.set_status(run_dir, name, status=runs.NOT_RUN)
    return done, failed


def main(argv: list[str] | None = None) -> int:
    """The worker: run one notebook into an existing run folder; exit 0 when it completed, 1 when it
    failed (status.json says why), 143 on SIGTERM."""
    from compendium import runner

    p = argparse.ArgumentParser(prog="python -m compendium.parallel")
    p.add_argument("run_dir")
    p.add_argument("name")
    p.add_argument("--profile", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--parameters", default="{}")
    p.add_argument("--output", default=None)
    p.add_argument("--timeout", type=int, default=None)
    a = p.parse_args(argv)
    try:
        runner.run_notebook(a.name, profile=a.profile, seed=a.seed, device=a.device,
                            parameters=json.loads(a.parameters), run_dir=Path(a.run_dir),
                            output_dir=Path(a.output) if a.output else None, progress=False, timeout=a.timeout)
    except runner.NotebookFailed as err:
        print(f"FAIL  {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 143
    return 0


if __name__ == "__main__":
    sys.exit(main())
