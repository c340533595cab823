"""The one set-up line of every notebook::

    nb = notebook.start("protot/06_women_ablation", PROFILE, SEED, DEVICE, threads=1)

checks the parameters (profile name, integer seed, device spelling, and that a requested GPU
exists), seeds ``random``, numpy and torch, sets torch's thread count, applies the plotting
style and the offline defaults, and returns where this run's outputs go.
"""
from __future__ import annotations

import numbers
import os
import random
from dataclasses import dataclass
from pathlib import Path

from compendium import paths, profiles, runs
from compendium.offline import apply_offline_defaults


def current_name() -> str | None:
    """The notebook this process runs: the runner's (``COMPENDIUM_NOTEBOOK``), else, in an
    interactive kernel, the name :func:`start` wrote into its run folder's params.json, else None."""
    name = runs.notebook_name()
    if name or os.environ.get(runs.RUN_ENV):
        return name
    return runs.read_json(runs.current() / "params.json").get("notebook") or None


@dataclass(frozen=True, repr=False)
class Notebook:
    """What :func:`start` set up. Shown as the last line of a cell, it is a one-line summary whose
    folders are named relative to the repository (or to the variable that moved them,
    :func:`compendium.paths.portable`), so no saved output holds an absolute path."""

    name: str
    profile: str
    seed: int
    device: str
    threads: int
    run_dir: Path      # this run's folder (compendium.runs)
    out: Path          # this run's figure folder for the notebook's paper

    @property
    def paper(self) -> str | None:
        return self.name.split("/", 1)[0] if "/" in self.name else None

    def _summary(self, code) -> str:
        try:
            figures = Path(self.out).relative_to(self.run_dir).as_posix()
        except ValueError:
            figures = paths.portable(self.out)
        return (f"{code(self.name)} · profile {code(self.profile)} ({profiles.describe(self.profile)}) · "
                f"seed {self.seed} · device {code(self.device)} · run folder {code(paths.portable(self.run_dir))} "
                f"(figures in {code(figures)})")

    def __repr__(self) -> str:
        return self._summary(str)

    def _repr_markdown_(self) -> str:
        return self._summary(lambda text: f"`{text}`")


def _check_cuda(device: str) -> None:
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"DEVICE={device!r} needs torch, which is not installed") from None
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"DEVICE={device!r} was requested but torch sees no CUDA GPU (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'}); run with DEVICE='cpu' (--device cpu)")
    if ":" in device:
        index = int(device.split(":")[1])
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"DEVICE={device!r}: there are only {torch.cuda.device_count()} CUDA device(s)")


def start(name: str, profile: str, seed: int, device: str = "cpu", *, threads: int | None = 1) -> Notebook:
    """Check the notebook's parameters and set up the run; see the module docstring.

    ``threads`` is torch's intra-op thread count (None leaves it as it is).
    """
    from compendium import runner

    profile = profiles.check(profile)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"SEED must be a non-negative integer, got {seed!r}")
    seed = runs.check_seed_range(int(seed), "SEED")
    device = profiles.check_device(device)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    running = runs.notebook_name()
    if running and running != name:
        raise ValueError(f"notebook.start({name!r}, ...) but the runner is executing notebook {running!r}: "
                         "the name in start() must be the notebook's own")
    known = runner.list_notebooks()
    if name not in known:
        raise ValueError(f"unknown notebook {name!r}; notebooks are named by their path under notebooks/ "
                         f"without the suffix: {', '.join(known)}")
    if device.startswith("cuda"):
        _check_cuda(device)
    apply_offline_defaults()

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    try:
        import torch

        torch.manual_seed(seed)
        if threads is not None:
            torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover
        pass
    try:
        from compendium import plotting

        plotting.use_style()
    except ImportError:  # pragma: no cover - matplotlib/seaborn absent
        pass

    run_dir = runs.current()
    if not os.environ.get(runs.RUN_ENV):  # an interactive kernel: say what it was started with
        runs.update_params(run_dir, notebook=name, profile=profile, seed=seed, device=device)
    paper = name.split("/", 1)[0] if "/" in name else None
    return Notebook(name=name, profile=profile, seed=seed, device=device, threads=threads or 0,
                    run_dir=run_dir, out=runs.figures_dir(paper, run_dir))
