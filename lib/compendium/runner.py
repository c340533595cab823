"""Execute the compendium's notebooks with papermill.

The source of every notebook is its jupytext ``.py`` (percent format); it is read with jupytext
and executed by papermill with the run's parameters (PROFILE, SEED, DEVICE, and any others the
notebook's ``parameters`` cell declares). Executed copies land in ``<output>/notebooks/``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from compendium import paths, profiles


class NotebookFailed(RuntimeError):
    """A notebook raised while executing; the message names the notebook and the cell."""

    def __init__(self, name: str, cell: int | None, detail: str, output: Path):
        where = f"cell {cell}" if cell is not None else "setup"
        super().__init__(f"notebook '{name}' failed in {where}: {detail}\n  executed copy: {output}")
        self.name, self.cell, self.detail, self.output = name, cell, detail, output


@dataclass(frozen=True)
class RunResult:
    name: str
    output: Path
    seconds: float


def list_notebooks() -> list[str]:
    """Names of all notebooks: their path under notebooks/ without the suffix, in run order."""
    root = paths.notebooks_dir()
    names = []
    for py in sorted(root.rglob("*.py")):
        if any(part.startswith(".") for part in py.relative_to(root).parts):
            continue
        names.append(py.relative_to(root).with_suffix("").as_posix())
    # the tour first, then each paper's notebooks in number order
    return sorted(names, key=lambda n: (n.count("/"), n))


def resolve(name: str) -> str:
    """Full notebook name from a full name, a unique suffix ("01_ioi") or a unique substring."""
    available = list_notebooks()
    if name in available:
        return name
    clean = name.removesuffix(".py").removesuffix(".ipynb").removeprefix("notebooks/")
    if clean in available:
        return clean
    matches = [n for n in available if n.endswith("/" + clean) or n == clean] or [n for n in available if clean in n]
    if len(matches) == 1:
        return matches[0]
    problem = "is ambiguous" if matches else "does not exist"
    raise ValueError(f"notebook {name!r} {problem}; available notebooks: {', '.join(available)}")


def source_path(name: str) -> Path:
    return paths.notebooks_dir() / f"{resolve(name)}.py"


def run_notebook(
    name: str,
    *,
    profile: str = profiles.DEFAULT,
    seed: int = 0,
    device: str = "cpu",
    parameters: dict[str, Any] | None = None,
    output_dir: Path | None = None,
    progress: bool = True,
    timeout: int | None = None,
) -> RunResult:
    """Execute one notebook with papermill; raise :class:`NotebookFailed` naming the failing cell."""
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

    name = resolve(name)
    profiles.check(profile)
    params = {"PROFILE": profile, "SEED": int(seed), "DEVICE": device, **(parameters or {})}
    out_root = Path(output_dir) if output_dir else paths.output_dir() / "notebooks"
    output = out_root / f"{name}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(source_path(name))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    env_before = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            nb, str(output), parameters=params, kernel_name="python3", progress_bar=progress,
            cwd=str(paths.repo_root()), execution_timeout=timeout, log_output=False,
        )
    except PapermillExecutionError as err:
        cell, first_line = _source_cell(name, output, err.exec_count)
        detail = f"{err.ename}: {err.evalue}" + (f"\n  cell starts: {first_line}" if first_line else "")
        raise NotebookFailed(name, cell, detail, output) from None
    finally:
        if env_before is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = env_before
    return RunResult(name, output, time.perf_counter() - start)


def _source_cell(name: str, executed: Path, exec_count: int | None) -> tuple[int | None, str]:
    """1-based number of the failing cell in the .py source, and its first line.

    Code cells run in order, so the failing cell is the ``exec_count``-th code cell that ran,
    counting papermill's injected parameters cell, which the source does not have.
    """
    import jupytext
    import nbformat

    if exec_count is None:
        return None, ""
    try:
        ran = nbformat.read(executed, as_version=4).cells
    except (OSError, ValueError):
        ran = []
    injected = sum(c.cell_type == "code" and "injected-parameters" in c.metadata.get("tags", ()) for c in ran)
    source = jupytext.read(source_path(name)).cells
    code_positions = [i for i, c in enumerate(source) if c.cell_type == "code"]
    ordinal = exec_count - injected - 1
    if not 0 <= ordinal < len(code_positions):
        return None, ""
    pos = code_positions[ordinal]
    lines = [ln for ln in source[pos].source.splitlines() if ln.strip()]
    return pos + 1, (lines[0][:80] if lines else "")


def run_many(
    names: Iterable[str] | None = None, *, keep_going: bool = False, **kwargs
) -> tuple[list[RunResult], list[NotebookFailed]]:
    """Run several notebooks (default: all) in order, with a progress bar over notebooks."""
    from tqdm.auto import tqdm

    todo = [resolve(n) for n in names] if names else list_notebooks()
    done, failed = [], []
    bar = tqdm(todo, desc="notebooks", unit="nb")
    for name in bar:
        bar.set_postfix_str(name)
        try:
            res = run_notebook(name, **kwargs)
            done.append(res)
            tqdm.write(f"ok    {name}  ({res.seconds:.0f} s) -> {res.output}")
        except NotebookFailed as err:
            failed.append(err)
            tqdm.write(f"FAIL  {err}")
            if not keep_going:
                break
    return done, failed
