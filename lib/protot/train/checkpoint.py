"""Checkpoints: written atomically, verified on load, refused when they do not match the run.

Layout of ``<out>/checkpoints/``::

    step-000100/
        model.safetensors   weights (float32, shared tensors handled by safetensors.torch.save_model)
        optimizer.pt        AdamW state (loaded with weights_only=True)
        rng.pt              torch CPU (and CUDA) generator states
        state.json          step, tokens seen, the run's config, tokenizer and data hashes
        checksums.json      sha256 of the four files above; written last
    LATEST                  name of the newest complete checkpoint (replaced atomically)

A checkpoint is assembled in a hidden temporary folder and renamed into place only when complete,
so a run killed mid-write leaves the previous checkpoint intact. Loading checks every checksum
(:class:`CorruptCheckpointError`) and that the checkpoint belongs to this run: same config
identity, tokenizer, data and weight shapes (:class:`CheckpointMismatchError`).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import torch

from compendium import atomic

FORMAT_VERSION = 1
FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")


class CheckpointError(RuntimeError):
    """Base class of checkpoint failures."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is missing, truncated or altered."""


class CheckpointMismatchError(CheckpointError):
    """A valid checkpoint that belongs to a different run (config, tokenizer, data or model)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def ckpt_root(out: str | Path) -> Path:
    return Path(out) / "checkpoints"


def save(out: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         state: dict, keep: int = 2) -> Path:
    """Write checkpoint ``step`` under ``<out>/checkpoints`` atomically; keep the newest ``keep``."""
    from safetensors.torch import save_model

    root = ckpt_root(out)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / "rng.pt")
        full_state = {"format": FORMAT_VERSION, "step": step, "saved_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **state}
        (tmp / "state.json").write_text(json.dumps(full_state, indent=2, sort_keys=True, default=str))
        for name in FILES:
            _fsync(tmp / name)
        sums = {name: _sha256(tmp / name) for name in FILES}
        (tmp / "checksums.json").write_text(json.dumps(sums, indent=2, sort_keys=True))
        _fsync(tmp / "checksums.json")
        if final.exists():  # a re-run of the same step (e.g. after resuming): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    atomic.write_text(root / "LATEST", final.name + "\n")
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest(out: str | Path) -> Path | None:
    """The newest checkpoint folder of a run (from LATEST), or None when the run has none."""
    root = ckpt_root(out)
    pointer = root / "LATEST"
    if pointer.exists():
        path = root / pointer.read_text().strip()
        if not path.is_dir():
            raise CorruptCheckpointError(f"{pointer} names {path.name}, which does not exist")
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
        raise CorruptCheckpointError(f"checkpoint {path} has no checksums.json: it was not written completely")
    try:
        sums = json.loads(sums_file.read_text())
    except json.JSONDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint {path}: checksums.json is unreadable ({e})") from None
    for name in FILES:
        f = path / name
        if not f.exists():
            raise CorruptCheckpointError(f"checkpoint {path} is missing {name}")
        if _sha256(f) != sums.get(name):
            raise CorruptCheckpointError(
                f"checkpoint {path}: {name} does not match its recorded sha256 (corrupted or modified); "
                "delete this checkpoint folder to resume from an older one, or start a new run"
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
