"""Resuming an interrupted run: ``compendium run --resume RUN_DIR`` (``make all RESUME=RUN_DIR``).

A run records, when it starts, what its results depend on besides its parameters
(:func:`fingerprint`, in params.json as ``"fingerprint"``): the code (git revision and the fingerprint
of uncommitted changes), the data (data/SHA256SUMS), the committed models (each one's weights sha256)
and the installed library versions. Resuming compares them with the state now, and refuses, naming
each difference, when any changed: the notebooks it kept would then not be what a run of this state
records. Otherwise the completed notebooks whose files still match the hashes status.json recorded
are kept and the others (failed, interrupted, not run) run again, with the run's own profile, seed,
device and parameters. A notebook that keeps a per-item cache in the run folder (traced circuits,
intervention rows) finds it there and does not redo the items it finished. A resumed run that
completes publishes like any complete main run.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from compendium import paths, runs


class ResumeRefused(ValueError):
    """The run cannot be resumed; the message names the run and what stands in the way."""


def library_versions() -> dict[str, str]:
    """{distribution name (lower case): version} of every installed distribution."""
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if name:
            out[name] = dist.version
    return dict(sorted(out.items()))


def model_weights() -> dict[str, str | None]:
    """{committed model: the weights sha256 its MANIFEST.json records} for every models/<name>/."""
    out = {}
    base = paths.repo_root() / "models"
    for man in sorted(base.glob("*/MANIFEST.json")):
        try:
            out[man.parent.name] = json.loads(man.read_text()).get("weights_sha256")
        except (OSError, ValueError):
            out[man.parent.name] = None
    return out


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def fingerprint() -> dict:
    """What a run's results depend on besides its parameters: code, data, models, libraries."""
    from compendium import provenance

    return {"code": provenance.code_state(), "data": _sha256(paths.repo_root() / "data" / "SHA256SUMS"),
            "models": model_weights(), "libraries": library_versions()}


def _differences(then: dict, now: dict) -> list[str]:
    out = []
    if then.get("code") != now["code"]:
        out.append(f"the code (was {then.get('code')}, now {now['code']})")
    if then.get("data") != now["data"]:
        out.append("the data (data/SHA256SUMS)")
    for what in ("models", "libraries"):
        a, b = then.get(what) or {}, now[what]
        changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if changed:
            shown = ", ".join(f"{k} ({a.get(k, 'absent')} -> {b.get(k, 'absent')})" for k in changed[:6])
            more = f" and {len(changed) - 6} more" if len(changed) > 6 else ""
            out.append(f"the {'committed models' if what == 'models' else 'installed libraries'}: {shown}{more}")
    return out


def plan(run_dir: str | Path) -> tuple[dict, list[str], list[str]]:
    """(the run's params.json, the notebooks kept, the notebooks to run again), or ResumeRefused."""
    from compendium import integrity

    run_dir = Path(run_dir)
    shown = paths.display(run_dir)
    if not (run_dir / "params.json").is_file():
        raise ResumeRefused(f"cannot resume {shown}: it is not a run folder (no params.json)")
    params = runs.read_json(run_dir / "params.json")
    if params.get("kind") != "runner" or not params.get("notebooks"):
        raise ResumeRefused(f"cannot resume {shown}: it was not made by compendium run (params.json kind "
                            f"{params.get('kind')!r}, notebooks {params.get('notebooks')!r})")
    if "fingerprint" not in params:
        raise ResumeRefused(f"cannot resume {shown}: it records no fingerprint of its code, data, models and "
                            "libraries (made before runs recorded one), so nothing it holds can be kept")
    if changed := _differences(params["fingerprint"], fingerprint()):
        raise ResumeRefused(f"cannot resume {shown}: since it started, " + "; ".join(changed)
                            + " changed; start a new run")
    status = runs.read_status(run_dir)
    keep, again = [], []
    for name in params["notebooks"]:
        e = status.get(name) or {}
        files = e.get("files") or []
        intact = e.get("status") == runs.COMPLETED and (
            not files or integrity.hash_files(run_dir, files) == e.get("sha256"))
        (keep if intact else again).append(name)
    return params, keep, again


def record(run_dir: Path, keep: list[str], again: list[str]) -> None:
    """Add this resumption to params.json's ``"resumed"`` list."""
    params = runs.read_json(Path(run_dir) / "params.json")
    params.setdefault("resumed", []).append({"time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                             "kept": keep, "run_again": again})
    runs.update_params(Path(run_dir), resumed=params["resumed"])
