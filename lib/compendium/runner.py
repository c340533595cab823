"""Execute the compendium's notebooks with papermill.

The source of every notebook is its jupytext ``.py`` (percent format); it is read with jupytext
and executed by papermill with the run's parameters (PROFILE, SEED, DEVICE, and any others the
notebook's ``parameters`` cell declares). Each execution belongs to a run folder
(:mod:`compendium.runs`): the executed copy goes to ``<run>/notebooks/<name>.ipynb``, and
``<run>/status.json`` records whether the notebook completed and which files it wrote.

The kernel's environment carries the run folder (``COMPENDIUM_RUN_DIR``), the notebook's name
(``COMPENDIUM_NOTEBOOK``) and switches that keep progress bars out of the saved notebooks
(:data:`KERNEL_ENV`); the runner's own progress goes to the terminal.
"""
from __future__ import annotations

import ast
import errno
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from compendium import paths, profiles, runs

#: Set in every kernel the runner starts: no progress bars or chatty logs in saved outputs.
KERNEL_ENV = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "PYTHONUNBUFFERED": "1",
}
#: Parameters the runner sets itself, from --profile / --seed / --device.
RESERVED = {"PROFILE": "--profile", "SEED": "--seed", "DEVICE": "--device"}


class Terminated(KeyboardInterrupt):
    """The runner received SIGTERM: handled as an interrupt (Ctrl-C) is, the notebook running then
    recorded as failed ("terminated"), those after it as not run."""


def _raise_on_sigterm():
    """Make SIGTERM raise :class:`Terminated` in this process (main thread only); returns what
    :func:`_restore_sigterm` needs to put the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated("terminated (SIGTERM)")

    return (signal.signal(signal.SIGTERM, handler),)


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous[0])


#: errno values of a write that stopped for want of room: the disk, the quota, the file-size limit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _settle_output(output: Path) -> str:
    """Remove the executed copy ``output`` when it is not a whole notebook (a write cut short by a
    full disk or a kill); returns a note for the status entry ("" when it is whole or absent)."""
    import nbformat

    if not output.exists():
        return ""
    try:
        nbformat.read(output, as_version=4)
        return ""
    except Exception:  # noqa: BLE001 (truncated JSON, or not a notebook)
        output.unlink(missing_ok=True)
        return f"\n  the executed copy {paths.display(output)} was cut short and has been removed"


def _record(run_dir: Path, name: str, executed: Path, **entry: Any) -> None:
    """:func:`compendium.runs.set_status`; where that write stops for want of room, the executed copy
    (the largest file this notebook made) is removed and the notebook recorded as failed, "disk
    full" (or "file too large"), so that status.json never keeps saying "running"."""
    try:
        runs.set_status(run_dir, name, **entry)
        return
    except runs.RunFolderError as err:
        if err.errno not in _NO_ROOM:
            raise
        first = err
    removed = executed.exists()
    executed.unlink(missing_ok=True)
    ended = "failed" if entry.get("status") == runs.FAILED else "ran to its end"
    why = "file too large" if first.errno == errno.EFBIG else "disk full"
    entry = {**entry, "status": runs.FAILED, "reason": why, "output": None,
             "error": f"{entry.get('error') or f'notebook {name!r} {ended}'}\n  {why}: its status could not be "
                      "recorded (" + str(first) + ")" + ("; its executed copy was removed to make room" if removed else "")}
    try:
        runs.set_status(run_dir, name, **entry)
    except runs.RunFolderError as again:
        raise runs.RunFolderError(f"{again}: notebook {name!r} {ended}, and status.json could not record it "
                                  "even after its executed copy was removed; free some space", again.errno) from first


class NotebookFailed(RuntimeError):
    """A notebook raised (or its kernel died) while executing; the message names the notebook
    and, when known, the cell."""

    def __init__(self, name: str, cell: int | None, detail: str, output: Path):
        where = f"cell {cell}" if cell is not None else "its kernel" if "kernel" in detail.lower() else "setup"
        super().__init__(f"notebook '{name}' failed in {where}: {detail}\n  executed copy: {paths.display(output)}")
        self.name, self.cell, self.detail, self.output = name, cell, detail, output


@dataclass(frozen=True)
class RunResult:
    name: str
    output: Path
    seconds: float
    run_dir: Path | None = None


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


def paper_notebooks(paper: str) -> list[str]:
    """The notebooks of ``paper``, in run order: those under ``notebooks/<paper>/`` and any other
    notebook (a top-level one) that a claim of ``papers/<paper>/claims.yaml`` names. A notebook that
    claims of two papers name belongs to both; a top-level notebook no claim names (the tour)
    belongs to none and runs only in a run of every notebook. ValueError for an unknown paper."""
    from compendium import checks

    papers = checks.paper_ids()
    if paper not in papers:
        raise ValueError(f"unknown paper {paper!r}; the papers are {', '.join(papers) or 'none'} "
                         "(folders of papers/ holding a claims.yaml)")
    named = {c.notebook for c in checks.load_paper(paper).claims.values() if c.notebook}
    out = [n for n in list_notebooks() if ("/" in n and n.split("/", 1)[0] == paper) or n in named]
    if not out:
        raise ValueError(f"paper {paper!r} has no notebooks (none under notebooks/{paper}/, none named by its claims)")
    return out


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


def _parameters_cell(name: str):
    import jupytext

    nb = jupytext.read(source_path(name))
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", ())]
    if len(cells) != 1:
        raise ValueError(f"notebook '{resolve(name)}' needs exactly one cell tagged 'parameters', has {len(cells)}")
    return cells[0].source


def parameter_defaults(name: str) -> dict[str, Any]:
    """{name: default value} of the notebook's ``parameters`` cell, in order. A value that is not a
    literal (an expression) is :data:`NOT_LITERAL`: its type is unknown, so no ``-p`` can set it."""
    out: dict[str, Any] = {}
    for node in ast.parse(_parameters_cell(name)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id not in out:
                try:
                    out[t.id] = ast.literal_eval(node.value) if node.value is not None else NOT_LITERAL
                except ValueError:
                    out[t.id] = NOT_LITERAL
    return out


class _NotLiteral:
    def __repr__(self) -> str:
        return "<an expression>"


NOT_LITERAL = _NotLiteral()


def parameter_names(name: str) -> list[str]:
    """The names the notebook's ``parameters`` cell assigns, in order."""
    return list(parameter_defaults(name))


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def convert_value(key: str, raw: str, default: Any, notebook: str) -> Any:
    """``raw`` (the text of ``-p KEY=raw``) as a value of the type of ``default``, the notebook's own
    value: int, float, bool, str, or a JSON list/dict/tuple; ValueError naming the parameter otherwise."""
    where = f"-p {key}={raw}: notebook '{notebook}' declares {key} = {default!r}"
    if default is NOT_LITERAL:
        raise ValueError(f"{where}, an expression whose type cannot be known, so -p cannot set it")
    if isinstance(default, bool):
        low = raw.strip().lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ValueError(f"{where} (bool); {raw!r} is not true/false (or 1/0, yes/no, on/off)")
    if isinstance(default, int):
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"{where} (int); {raw!r} is not an integer") from None
    if isinstance(default, float):
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"{where} (float); {raw!r} is not a number") from None
        if value != value:
            raise ValueError(f"{where} (float); NaN is not a value a notebook can be run with")
        return value
    if isinstance(default, str):
        return raw
    import json

    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        kind = "a JSON value" if default is None else f"JSON for a {_type_name(default)}"
        raise ValueError(f"{where}; {raw!r} is not {kind}") from None
    if isinstance(default, tuple) and isinstance(value, list):
        value = tuple(value)
    if default is not None and not isinstance(value, type(default)):
        raise ValueError(f"{where} ({_type_name(default)}); {raw!r} is a {_type_name(value)}")
    return value


def _check_type(key: str, value: Any, default: Any, notebook: str) -> None:
    if default is NOT_LITERAL or default is None:
        return
    ok = (isinstance(value, bool) if isinstance(default, bool)
          else isinstance(value, int) and not isinstance(value, bool) if isinstance(default, int)
          else isinstance(value, (int, float)) and not isinstance(value, bool) if isinstance(default, float)
          else isinstance(value, (list, tuple)) if isinstance(default, (list, tuple))
          else isinstance(value, type(default)))
    if not ok:
        raise ValueError(f"parameter {key}={value!r} ({_type_name(value)}): notebook '{notebook}' declares "
                         f"{key} = {default!r} ({_type_name(default)})")


def _check_names(names: Iterable[str], keys: Iterable[str]) -> None:
    keys = list(keys)
    for key in keys:
        if key in RESERVED:
            raise ValueError(f"{key} cannot be set with -p; use {RESERVED[key]}")
    for name in names:
        defaults = parameter_defaults(name)
        unknown = [k for k in keys if k not in defaults]
        if unknown:
            extra = [v for v in defaults if v not in RESERVED]
            raise ValueError(
                f"notebook '{resolve(name)}' has no parameter {', '.join(map(repr, unknown))}; its parameters cell "
                f"defines {', '.join(extra) or 'nothing besides PROFILE, SEED and DEVICE'} "
                f"(PROFILE, SEED and DEVICE are set with --profile, --seed and --device)")


def check_parameters(names: Iterable[str], parameters: dict[str, Any]) -> None:
    """Refuse ``-p`` values the runner sets itself, names a notebook's parameters cell lacks, and
    values whose type differs from the notebook's own value (an int where it has an int, ...)."""
    names = list(names)
    _check_names(names, parameters)
    for name in names:
        defaults = parameter_defaults(name)
        for key, value in parameters.items():
            _check_type(key, value, defaults[key], resolve(name))


def convert_parameters(names: Iterable[str], raw: dict[str, str]) -> dict[str, Any]:
    """``-p NAME=VALUE`` texts converted to the types of the notebooks' parameters cells and checked
    (:func:`check_parameters`); a parameter two notebooks declare with different types is refused."""
    names = [resolve(n) for n in names]
    _check_names(names, raw)  # names first: reserved or unknown
    out: dict[str, Any] = {}
    for key, text in raw.items():
        seen: dict[str, Any] = {}
        for name in names:
            seen[name] = convert_value(key, text, parameter_defaults(name)[key], name)
        values = list(seen.values())
        if any(type(v) is not type(values[0]) or v != values[0] for v in values[1:]):
            detail = ", ".join(f"{n}: {v!r}" for n, v in seen.items())
            raise ValueError(f"-p {key}={text}: the notebooks declare {key} with different types ({detail}); "
                             "run them separately")
        out[key] = values[0]
    check_parameters(names, out)
    return out


def check_seed(seed: Any) -> int:
    """``seed`` as an int, or ValueError: seeds are integers from 0 to 2**32 - 1 (numpy's range)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"the seed must be a non-negative integer, got {seed!r}")
    return runs.check_seed_range(int(seed))


def _kernel_manager_class(env: dict[str, str]):
    """A kernel manager whose kernels start with ``os.environ`` plus ``env`` (the runner's own
    process environment is left as it is) and run :mod:`compendium._kernel` first."""
    from jupyter_client.manager import AsyncKernelManager

    class CompendiumKernelManager(AsyncKernelManager):
        async def _async_pre_start_kernel(self, **kw):
            from compendium._kernel import KERNEL_SETUP

            base = dict(kw.pop("env", None) or os.environ)
            base.update(env)
            kw["env"] = base
            kw["extra_arguments"] = [*(kw.get("extra_arguments") or []),
                                     f"--IPKernelApp.exec_lines={[KERNEL_SETUP]!r}"]
            return await super()._async_pre_start_kernel(**kw)

    return CompendiumKernelManager


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
    run_dir: Path | None = None,
) -> RunResult:
    """Execute one notebook with papermill into a run folder.

    The run folder is ``run_dir``, else ``$COMPENDIUM_RUN_DIR`` when set, else a new one.
    Raises :class:`NotebookFailed` naming the failing cell; a kernel that dies (or any other
    error of the execution) is a failure of the notebook too. Either way status.json says so.
    """
    import jupytext
    import papermill
    from papermill.exceptions import PapermillExecutionError

    name = resolve(name)
    profiles.check(profile)
    profiles.check_device(device)
    seed = check_seed(seed)
    parameters = dict(parameters or {})
    check_parameters([name], parameters)
    if output_dir is not None:
        output_dir = paths.check_output(output_dir)
    if run_dir is None:
        run_dir = runs.current() if os.environ.get(runs.RUN_ENV) else runs.create(
            profile, seed, device=device, parameters=parameters, notebooks=[name])
    run_dir = Path(run_dir).resolve()
    params = {"PROFILE": profile, "SEED": int(seed), "DEVICE": device, **parameters}
    out_root = Path(output_dir) if output_dir else run_dir / "notebooks"
    output = out_root / f"{name}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(source_path(name))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    lane = runs.open_lane(run_dir, name)   # the kernel writes its results and figures here; merged at the end
    env = {**KERNEL_ENV, runs.RUN_ENV: str(run_dir), runs.NOTEBOOK_ENV: name, runs.LANE_ENV: str(lane)}
    runs.set_status(run_dir, name, status=runs.RUNNING, parameters=params)
    start = time.perf_counter()
    failure: NotebookFailed | None = None
    reason: str | None = None  # "disk full", "terminated", ...: what status.json and the summary say first
    previous = _raise_on_sigterm()
    try:
        papermill.execute_notebook(
            nb, str(output), parameters=params, kernel_name="python3", progress_bar=progress,
            cwd=str(paths.repo_root()), execution_timeout=timeout, log_output=False,
            kernel_manager_class=_kernel_manager_class(env),
        )
    except PapermillExecutionError as err:
        cell, first_line = _source_cell(name, output, err.exec_count)
        detail = f"{err.ename}: {err.evalue}" + (f"\n  cell starts: {first_line}" if first_line else "")
        if any(f"[Errno {code}]" in str(err.evalue) for code in (errno.ENOSPC, errno.EDQUOT)):
            reason, detail = "disk full", f"disk full: {detail}"
        failure = NotebookFailed(name, cell, detail, output)
    except KeyboardInterrupt as err:
        reason = "terminated" if isinstance(err, Terminated) else "interrupted"
        note = _settle_output(output)
        _record(run_dir, name, output, status=runs.FAILED, reason=reason,
                seconds=round(time.perf_counter() - start, 1),
                error=("terminated (SIGTERM)" if reason == "terminated" else "interrupted (KeyboardInterrupt)") + note,
                output=paths.display(output) if output.exists() else None, parameters=params,
                files=runs.merge_lane(run_dir, name))
        raise
    except Exception as err:  # a dead kernel (DeadKernelError, RuntimeError), a timeout, a full disk, ...
        if isinstance(err, OSError) and err.errno in _NO_ROOM:
            problem = runs.write_problem(err)
            reason = "disk full" if problem.startswith("disk full") else problem.split(" (")[0]
            detail = f"{problem} while writing the executed notebook ({type(err).__name__}: {err})"
        else:
            detail = f"{type(err).__name__}: {str(err).strip() or 'no message'}"
        failure = NotebookFailed(name, None, detail, output)
    finally:
        _restore_sigterm(previous)
    seconds = time.perf_counter() - start
    note = _settle_output(output) if failure else ""
    _record(
        run_dir, name, output,
        status=runs.FAILED if failure else runs.COMPLETED,
        **({"reason": reason} if failure and reason else {}),
        seconds=round(seconds, 1),
        error=str(failure) + note if failure else None,
        output=paths.display(output) if output.exists() else None,
        parameters=params,
        files=runs.merge_lane(run_dir, name),
    )
    if failure:
        raise failure
    return RunResult(name, output, seconds, run_dir)


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
    names: Iterable[str] | None = None, *, keep_going: bool = False, run_dir: Path | None = None,
    profile: str = profiles.DEFAULT, seed: int = 0, device: str = "cpu",
    parameters: dict[str, Any] | None = None, jobs: int = 1, **kwargs,
) -> tuple[list[RunResult], list[NotebookFailed]]:
    """Run several notebooks (default: all) in order into one run folder, with a progress bar
    over notebooks on the terminal. Notebooks left out after a failure (without ``keep_going``)
    are marked "not run" in status.json. ``jobs`` > 1: that many at once, each in its own worker
    process with one thread (:mod:`compendium.parallel`)."""
    from tqdm.auto import tqdm

    todo = [resolve(n) for n in names] if names else list_notebooks()
    seed = check_seed(seed)
    check_parameters(todo, dict(parameters or {}))
    if kwargs.get("output_dir") is not None:
        kwargs["output_dir"] = paths.check_output(kwargs["output_dir"])
    if run_dir is None:
        run_dir = runs.create(profile, seed, device=device, parameters=parameters, notebooks=todo)
    if jobs != 1:   # at once, each in a worker process of its own (compendium.parallel)
        from compendium import parallel

        return parallel.run_parallel(todo, jobs=parallel.check_jobs(jobs), run_dir=Path(run_dir), keep_going=keep_going,
                                     profile=profile, seed=seed, device=device, parameters=parameters,
                                     output_dir=kwargs.get("output_dir"), timeout=kwargs.get("timeout"),
                                     write=tqdm.write)
    done: list[RunResult] = []
    failed: list[NotebookFailed] = []
    bar = tqdm(todo, desc="notebooks", unit="nb")
    stopped = False
    previous = _raise_on_sigterm()
    try:
        for name in bar:
            if stopped:
                runs.set_status(run_dir, name, status=runs.NOT_RUN)
                continue
            bar.set_postfix_str(name)
            try:
                res = run_notebook(name, profile=profile, seed=seed, device=device, parameters=parameters,
                                   run_dir=run_dir, **kwargs)
                done.append(res)
                tqdm.write(f"ok    {name}  ({res.seconds:.0f} s) -> {paths.display(res.output)}")
            except NotebookFailed as err:
                failed.append(err)
                tqdm.write(f"FAIL  {err}")
                if not keep_going:
                    stopped = True
    except KeyboardInterrupt as err:
        import contextlib

        seen = runs.read_status(run_dir)
        why = "terminated" if isinstance(err, Terminated) else "interrupted"
        with contextlib.suppress(runs.RunFolderError):  # the interrupt goes on, whatever can be recorded
            for name in todo:
                if name not in seen:
                    runs.set_status(run_dir, name, status=runs.NOT_RUN)
                elif seen[name].get("status") == runs.RUNNING:  # stopped before it could record its end
                    runs.set_status(run_dir, name, status=runs.FAILED, reason=why, parameters=seen[name].get("parameters"),
                                    error=f"{why} ({'SIGTERM' if why == 'terminated' else 'KeyboardInterrupt'})")
        raise
    finally:
        _restore_sigterm(previous)
        bar.close()
    return done, failed
