"""Run folders: everything one execution produces, in one place, never in ``papers/``.

``compendium run`` makes one folder per invocation and hands it to each notebook's kernel in the
environment variable ``COMPENDIUM_RUN_DIR``; a kernel started any other way (JupyterLab, a plain
``python``) gets its own ``interactive-<time>`` folder the first time it needs one::

    <output>/runs/<UTC time>-<profile>-s<seed>/     e.g. build/runs/20261130T081244Z-cpu-s0/
        params.json              the run's parameters, notebooks (and paper, for a run of one paper's),
                                 git revision (+ diff fingerprint)
        status.json              per notebook: completed / failed / running / not run, seconds, error,
                                 the files it wrote (what --publish copies) with their sha256
        notebooks/<name>.ipynb   the executed notebooks
        results/<paper>/<claim-id>.<profile>.json   what compendium.claims.conclude recorded
        figures/<paper>/<name>.png|.csv             figures and the data behind them

Only ``compendium run --publish`` copies anything from here into ``papers/`` (see
:mod:`compendium.publish`).
"""
from __future__ import annotations

import contextlib
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from compendium import atomic, paths

RUN_ENV = "COMPENDIUM_RUN_DIR"
NOTEBOOK_ENV = "COMPENDIUM_NOTEBOOK"
#: Where the runner's kernel writes its results and figures: the notebook's own lane of the run folder
#: (``<run>/.lanes/<name>/``), moved into the run folder when the notebook ends (:func:`merge_lane`),
#: so notebooks that run at once never see, or claim, each other's files.
LANE_ENV = "COMPENDIUM_LANE_DIR"
LANES = ".lanes"

# status of one notebook in status.json
COMPLETED, FAILED, RUNNING, NOT_RUN = "completed", "failed", "running", "not run"

_interactive: dict[Path, Path] = {}  # output folder -> this process's interactive run folder

#: The largest seed: numpy's ``np.random.seed`` takes 0 .. 2**32 - 1, and a notebook seeds numpy.
MAX_SEED = 2**32 - 1


def check_seed_range(seed: int, what: str = "the seed") -> int:
    """``seed`` (an integer >= 0), or ValueError when it lies above numpy's range (:data:`MAX_SEED`):
    refused before any run folder is made, not in a notebook's set-up cell."""
    if seed > MAX_SEED:
        raise ValueError(f"{what} must be at most 2**32 - 1 = {MAX_SEED} (numpy's seed range), got {seed}")
    return seed


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def _unique(base: Path) -> Path:
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def create(profile: str, seed: int, *, device: str = "cpu", parameters: dict | None = None,
           notebooks: list[str] | None = None, command: list[str] | None = None, paper: str | None = None) -> Path:
    """Make ``<output>/runs/<UTC time>-<profile>-s<seed>/`` with its params.json; return it. ``paper``:
    the run is of every notebook of that paper (``compendium run --paper``), recorded as ``"paper"``."""
    from compendium import profiles, provenance, resume

    profiles.check(profile)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"the seed must be a non-negative integer, got {seed!r}")
    check_seed_range(seed)
    run = _unique(paths.runs_dir() / f"{_stamp()}-{profile}-s{seed}")
    params = {
        "kind": "runner",
        "profile": profile,
        "seed": int(seed),
        "device": device,
        "parameters": parameters or {},
        "notebooks": list(notebooks or []),
        "command": command,
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **provenance.code_state(),
        "fingerprint": resume.fingerprint(),   # what --resume checks before keeping a completed notebook
    }
    if paper is not None:
        params["paper"] = paper
    atomic.write_json(run / "params.json", params)
    return run


def current() -> Path:
    """This process's run folder: ``$COMPENDIUM_RUN_DIR`` when set (the runner sets it for each
    kernel), else an ``interactive-<time>`` folder made on first use and kept for the process."""
    env = os.environ.get(RUN_ENV)
    if env:
        # the same rule as --output: never a folder of sources, committed results or tracked files
        path = paths.check_output(env, what=f"${RUN_ENV}")
        path.mkdir(parents=True, exist_ok=True)
        return path
    out = paths.output_dir()
    run = _interactive.get(out)
    if run is None or not run.is_dir():
        from compendium import provenance

        run = _unique(paths.runs_dir() / f"interactive-{_stamp()}")
        atomic.write_json(run / "params.json", {
            "kind": "interactive",
            "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **provenance.code_state(),
        })
        _interactive[out] = run
    return run


def notebook_name() -> str | None:
    """The notebook the runner is executing in this kernel (None in an interactive kernel)."""
    return os.environ.get(NOTEBOOK_ENV) or None


def _write_base(run: Path | None) -> Path:
    """The folder results and figures of ``run`` (default: this process's) are written under: the
    notebook's lane when the runner gave this kernel one (:data:`LANE_ENV`) and ``run`` is its run."""
    base = Path(run) if run is not None else current()
    lane, own = os.environ.get(LANE_ENV), os.environ.get(RUN_ENV)
    if lane and own and base.resolve() == Path(own).resolve():
        return Path(lane)
    return base


def results_dir(paper: str, run: Path | None = None) -> Path:
    path = _write_base(run) / "results" / paper
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir(paper: str | None = None, run: Path | None = None) -> Path:
    path = _write_base(run) / "figures"
    if paper:
        path = path / paper
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_json(path: Path) -> dict:
    """A run folder's JSON file ({} when absent); :class:`compendium.atomic.JSONFileError` naming the
    file when it is damaged."""
    return atomic.read_json(path) if Path(path).exists() else {}


def update_params(run: Path, **values: Any) -> None:
    """Add values to a run's params.json (e.g. what an interactive notebook was started with)."""
    params = read_json(run / "params.json")
    params.update(values)
    atomic.write_json(run / "params.json", params)


def read_status(run: Path) -> dict[str, dict]:
    """{notebook name: its entry} from ``<run>/status.json`` (empty when there is none)."""
    return read_json(Path(run) / "status.json").get("notebooks", {})


def set_status(run: Path, name: str, **entry: Any) -> None:
    """Write (atomically) one notebook's entry of ``<run>/status.json``; an entry naming the
    ``files`` the notebook wrote records the sha256 of each (:mod:`compendium.integrity`: what
    ``publish`` checks them against)."""
    if entry.get("files") and "sha256" not in entry:
        from compendium import integrity

        entry["sha256"] = integrity.hash_files(run, entry["files"])
    with status_lock(run):   # notebooks that run at once each rewrite their own entry, one at a time
        status = read_json(Path(run) / "status.json")
        status.setdefault("notebooks", {})[name] = entry
        try:
            atomic.write_json(Path(run) / "status.json", status)
        except OSError as err:  # the old status.json stays whole: the write is atomic
            raise RunFolderError(f"cannot write {paths.display(Path(run) / 'status.json')}: {write_problem(err)}",
                                 err.errno) from err


@contextlib.contextmanager
def status_lock(run: Path):
    """Hold ``<run>/.status.lock`` (flock, blocking) while status.json is read and rewritten."""
    import fcntl

    try:
        fd = os.open(Path(run) / ".status.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise RunFolderError(f"cannot take the status lock in {paths.display(Path(run))}: {write_problem(err)}",
                             err.errno) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock


def _lane_name(name: str) -> str:
    return name.replace("/", "__")


def open_lane(run: Path, name: str) -> Path:
    """A new, empty lane ``<run>/.lanes/<name>/`` for notebook ``name`` (one left by an earlier,
    interrupted attempt is removed first)."""
    import shutil

    lane = Path(run) / LANES / _lane_name(name)
    if lane.exists():
        shutil.rmtree(lane)
    lane.mkdir(parents=True)
    return lane


def merge_lane(run: Path, name: str) -> list[str]:
    """Move every result and figure notebook ``name`` wrote into its lane to the same place in the run
    folder and return their run-relative paths, sorted: the files the notebook wrote. A file another
    notebook of the run already recorded is a :class:`RunFolderError` naming both (nothing is moved)."""
    import shutil

    lane = Path(run) / LANES / _lane_name(name)
    if not lane.is_dir():
        return []
    moved = sorted(snapshot(lane))
    owners = {f: other for other, e in read_status(run).items() if other != name for f in e.get("files") or ()}
    if clash := [f"{f} (also written by {owners[f]})" for f in moved if f in owners]:
        raise RunFolderError(f"notebook '{name}' wrote files another notebook of the run wrote: {', '.join(clash)}")
    for rel in moved:
        dest = Path(run) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(lane / rel, dest)
        except OSError as err:
            raise RunFolderError(f"cannot move {rel} of notebook '{name}' into the run folder: {write_problem(err)}",
                                 err.errno) from err
    shutil.rmtree(lane, ignore_errors=True)
    return moved


class RunFolderError(RuntimeError):
    """A file of a run folder could not be written (a full disk, a file-size limit, a read-only
    folder); the message names the file and the cause, ``errno`` is the system's error number."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


def write_problem(err: OSError) -> str:
    """What stopped a write, in words: ``disk full (...)`` for ENOSPC and EDQUOT."""
    import errno

    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full (" + ("no space left on the device" if err.errno == errno.ENOSPC else "disk quota exceeded") + ")"
    words = {errno.EFBIG: "file too large (the file-size limit, ulimit -f, was reached)",
             errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}
    return words.get(err.errno, f"{type(err).__name__}: {err.strerror or err}")


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of the results and figures in a run folder."""
    out = {}
    for sub in ("results", "figures"):
        base = Path(run) / sub
        if base.is_dir():
            for f in base.rglob("*"):
                if f.is_file() and not f.name.startswith("."):
                    st = f.stat()
                    out[f.relative_to(run).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def written_between(before: dict, after: dict) -> list[str]:
    """Files of ``after`` that are new or changed since ``before``."""
    return sorted(k for k, v in after.items() if before.get(k) != v)
