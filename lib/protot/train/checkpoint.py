"""Checkpoints: written atomically, verified on load, refused when they do not match the run.

Layout of ``<out>/checkpoints/``::

    step-000100/
        model.safetensors   weights (float32, shared tensors handled by safetensors.torch.save_model)
        optimizer.pt        AdamW state (loaded with weights_only=True)
        rng.pt              torch CPU (and CUDA) generator states
        state.json          step, tokens seen, the run's config, tokenizer and data hashes
        checksums.json      sha256 of the four files above; written last
    LATEST                  name of the newest complete checkpoint (replaced atomically)

A checkpoint is assembled in a hidden temporary folder (``.tmp-step-NNNNNN-<pid>``) and renamed
into place only when complete, so a run killed mid-write leaves the previous checkpoint intact; the
next save or resume removes such leftovers of processes that no longer run (:func:`clean_stale`).
A write that fails (a full disk, a quota) raises :class:`CheckpointWriteError` naming the folder
and the free space, and leaves the previous checkpoint and LATEST as they were. Loading checks
every checksum (:class:`CorruptCheckpointError`, whose message says which older checkpoint to
resume from and how) and that the checkpoint belongs to this run: same config identity,
tokenizer, data and weight shapes (:class:`CheckpointMismatchError`).
"""
from __future__ import annotations

import errno
import io
import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import torch

from compendium import atomic, data

FORMAT_VERSION = 1
FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")


class CheckpointError(RuntimeError):
    """Base class of checkpoint failures."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is missing, truncated or altered."""


class CheckpointMismatchError(CheckpointError):
    """A valid checkpoint that belongs to a different run (config, tokenizer, data or model)."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, quota, permissions); the previous one is intact."""


_STEP_RE = re.compile(r"^step-\d{6,}$")
_TMP_RE = re.compile(r"^\.tmp-step-\d{6,}-(\d+)$")


_sha256 = data.sha256_of   # the one file hash (compendium.data)


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def ckpt_root(out: str | Path) -> Path:
    return Path(out) / "checkpoints"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def clean_stale(out: str | Path) -> list[Path]:
    """Remove ``.tmp-step-*-<pid>`` folders left by killed saves; returns what was removed.

    Safe with a concurrent writer: only folders whose process no longer runs are removed (a
    folder of this process or of any live process is left alone), and nothing else is touched.
    """
    root = ckpt_root(out)
    removed = []
    if not root.is_dir():
        return removed
    for p in sorted(root.iterdir()):
        m = _TMP_RE.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it (OSError on a full disk)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _free_mib(path: Path) -> float | None:
    try:
        return shutil.disk_usage(path).free / 2**20
    except OSError:
        return None


def _complete(root: Path) -> list[Path]:
    """The complete-looking checkpoint folders (step-NNNNNN with a checksums.json), oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _STEP_RE.match(p.name) and (p / "checksums.json").is_file())


def save(out: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         state: dict, keep: int = 2) -> Path:
    """Write checkpoint ``step`` under ``<out>/checkpoints`` atomically; keep the newest ``keep``.

    On a failed write (disk full, ...) raises :class:`CheckpointWriteError`; the temporary folder is
    removed and the previous checkpoint, LATEST and the older checkpoints stay as they were.
    """
    from safetensors.torch import save_model

    root = ckpt_root(out)
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(out)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        save_model(model, str(tmp / "model.safetensors"))
        _write_file(tmp / "optimizer.pt", _torch_bytes(optimizer.state_dict()))
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        _write_file(tmp / "rng.pt", _torch_bytes(rng))
        full_state = {"format": FORMAT_VERSION, "step": step, "saved_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **state}
        _write_file(tmp / "state.json", json.dumps(full_state, indent=2, sort_keys=True, default=str).encode())
        for name in FILES:
            _fsync(tmp / name)
        sums = {name: _sha256(tmp / name) for name in FILES}
        _write_file(tmp / "checksums.json", json.dumps(sums, indent=2, sort_keys=True).encode())
        if final.exists():  # a re-run of the same step (e.g. after resuming): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        atomic.write_text(root / "LATEST", final.name + "\n")
    except Exception as e:  # OSError from our writes, SafetensorError("I/O error ...") from safetensors
        shutil.rmtree(tmp, ignore_errors=True)
        free = _free_mib(root)
        full = (getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(e)
                or "os error 28" in str(e) or (free is not None and free < 64))
        pointer = root / "LATEST"
        prev = pointer.read_text().strip() if pointer.is_file() else None
        if final.exists() and prev != final.name:  # renamed into place, but LATEST could not be updated
            shutil.rmtree(final, ignore_errors=True)
        intact = (f"the previous checkpoint {prev} and LATEST are intact" if prev
                  else "no earlier checkpoint was written")
        raise CheckpointWriteError(
            f"could not write checkpoint step-{step:06d} in {root}: "
            + ("the disk is full" if full else "the write failed")
            + f" ({type(e).__name__}: {e}; {'%.0f MiB' % free if free is not None else 'unknown space'} free there). "
            f"Nothing of step-{step:06d} was kept; {intact}. Free some space (or move --out to a larger disk) "
            "and continue with --resume."
        ) from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _repair_advice(root: Path, bad: str | None) -> str:
    """How to continue when the checkpoint named ``bad`` (or LATEST) cannot be used."""
    others = [p.name for p in _complete(root) if p.name != bad]
    pointer = root / "LATEST"
    if not others:
        return (f"There is no other complete checkpoint in {root}: start again with a new --out folder "
                f"(or delete {root} to restart this run from step 0).")
    older = others[-1]
    drop = f"delete {root / bad} and " if bad and (root / bad).exists() else ""
    return (f"To resume from the newest other checkpoint, {older}: {drop}write its name into LATEST "
            f"(echo {older} > {pointer}), then run again with --resume. Complete checkpoints here: "
            f"{', '.join(others)}.")


def latest(out: str | Path) -> Path | None:
    """The newest checkpoint folder of a run (from LATEST), or None when the run has none."""
    root = ckpt_root(out)
    pointer = root / "LATEST"
    if pointer.exists():
        name = pointer.read_text(errors="replace").strip()
        if not name:
            raise CorruptCheckpointError(f"{pointer} is empty (corrupt): it should name the newest checkpoint. "
                                         + _repair_advice(root, None))
        if not _STEP_RE.match(name):
            raise CorruptCheckpointError(f"{pointer} is corrupt: it holds {name[:40]!r}, not a checkpoint name "
                                         "(step-NNNNNN). " + _repair_advice(root, None))
        path = root / name
        if not path.is_dir():
            raise CorruptCheckpointError(f"{pointer} names {name}, but {path} does not exist. "
                                         + _repair_advice(root, name))
        return path
    done = sorted(p for p in root.glob("step-*") if p.is_dir()) if root.is_dir() else []
    return done[-1] if done else None


def verify(path: str | Path) -> dict:
    """Check a checkpoint's files against its checksums; return its state.json."""
    path = Path(path)
    sums_file = path / "checksums.json"
    if not path.is_dir():
        raise CorruptCheckpointError(f"checkpoint {path} does not exist")
    if not sums_file.exists():
        raise CorruptCheckpointError(f"checkpoint {path} has no checksums.json: it was not written completely. "
                                     + _repair_advice(path.parent, path.name))
    try:
        sums = json.loads(sums_file.read_text())
    except json.JSONDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint {path}: checksums.json is unreadable ({e}). "
                                     + _repair_advice(path.parent, path.name)) from None
    for name in FILES:
        f = path / name
        if not f.exists():
            raise CorruptCheckpointError(f"checkpoint {path} is missing {name}. " + _repair_advice(path.parent, path.name))
        if _sha256(f) != sums.get(name):
            raise CorruptCheckpointError(
                f"checkpoint {path}: {name} does not match its recorded sha256 (corrupted or modified). "
                + _repair_advice(path.parent, path.name)
            )
    state = json.loads((path / "state.json").read_text())
    if state.get("format") != FORMAT_VERSION:
        raise CheckpointMismatchError(f"checkpoint {path} has format {state.get('format')}, expected {FORMAT_VERSION}")
    return state


def _diff(saved: dict, current: dict) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [f"{k}: checkpoint {saved.get(k)!r} != run {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)]


def load(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
         expect: dict, device: str | torch.device = "cpu") -> dict:
    """Verify and load checkpoint ``path`` into ``model`` (and ``optimizer``); restore the RNG.

    ``expect`` holds what must match: at least ``identity`` (TrainConfig.identity()), and
    typically ``tokenizer_sha256`` and ``data_key``. Returns the checkpoint's state.json.
    """
    from safetensors.torch import load_model

    path = Path(path)
    state = verify(path)
    problems = []
    for key, want in expect.items():
        have = state.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            problems += [f"{key}.{d}" for d in _diff(have, want)]
        elif have != want:
            problems.append(f"{key}: checkpoint {have!r} != run {want!r}")
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {path} belongs to a different run:\n  " + "\n  ".join(problems)
            + "\nUse a new --out folder, or the same settings as the checkpoint."
        )
    try:
        load_model(model, str(path / "model.safetensors"), strict=True, device=str(device))
    except (RuntimeError, KeyError) as e:
        raise CheckpointMismatchError(f"checkpoint {path}: weights do not fit this model: {e}") from None
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    rng = torch.load(path / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
