"""The committed trained models under ``models/<name>/`` and how notebooks load them.

Each folder holds ``model.safetensors`` (float16 weights, < 20 MB), ``config.json`` (the model
config) and ``MANIFEST.json`` (architecture, training config, tokens seen, data, tokenizer hash,
validation and WikiText-2 perplexity, sha256 of the weights, git revision).

    from protot.train import pretrained
    m = pretrained.load("protot-authors-small")  # verified against its MANIFEST; float32, eval mode
    m.model, m.tokenizer, m.manifest
    print(pretrained.describe("protot-authors-small"))  # one line saying which model a notebook used

Export a finished run (how the committed models were made: models/README.md):
``python -m protot.train.pretrained export .cache/runs/protot-authors-small protot-authors-small`` (an existing
models/<name> is replaced only with ``--force``).

Snapshot a run in progress (float16 weights and MANIFEST.json, no optimiser state, no evaluation):
``python -m protot.train.pretrained snapshot .cache/runs/llama-authors-small llama-authors-small``. A
snapshot always goes to the same models/<name> and replaces the previous one; its manifest says
``"status": "in-progress"`` or ``"final"``, the steps done and planned, the budget history and the
exact command that continues the run from it if the run folder is lost
(``python -m protot.train ... --resume-from-snapshot models/<name>``).

Both are atomic and never destroy what is there: the folder is assembled beside the target
(``models/.tmp-<name>-<pid>``), checked (sha256, size, loaded back into a fresh model), and only
then swapped in by renaming; any failure before the swap leaves models/<name> as it was.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from compendium import paths, provenance
from protot.train import checkpoint, evaluate
from protot.train import tokenizer as tk
from protot.train.config import PROFILES, TrainConfig

MAX_BYTES = 20 * 1024 * 1024


def models_dir() -> Path:
    """<root>/models, or the folder named by the PROTOT_MODELS environment variable."""
    env = os.environ.get("PROTOT_MODELS")
    return Path(env).resolve() if env else paths.repo_root() / "models"


def available() -> list[str]:
    """Names of the committed models (folders of models/ holding a MANIFEST.json)."""
    d = models_dir()
    return sorted(p.parent.name for p in d.glob("*/MANIFEST.json")) if d.is_dir() else []


@dataclass
class Pretrained:
    name: str
    model: torch.nn.Module
    tokenizer: object  # transformers.PreTrainedTokenizerFast
    manifest: dict


def _sha256(path: Path) -> str:
    from compendium.data import sha256_of

    return sha256_of(path)


def manifest(name: str) -> dict:
    path = models_dir() / name / "MANIFEST.json"
    if not path.exists():
        raise FileNotFoundError(f"no committed model {name!r} (looked for {path}); available: {available() or 'none'}")
    from compendium.atomic import read_json

    return read_json(path)      # a damaged manifest: an error naming the file


def describe(name: str) -> str:
    """One line naming the model: arch, size, parameters, tokens seen, perplexities, weight hash."""
    m = manifest(name)
    ev = m.get("eval") or {}
    ppl = "".join(f", {k} ppl {v['ppl']:.1f}" for k, v in ev.items())
    status = (f" [snapshot, {m['status']}: step {m['steps']} of {m['planned_steps']}]"
              if m.get("kind") == "snapshot" else "")
    return (f"models/{name}: {m['arch']} ({m['parameters']['total'] / 1e6:.1f} M params, "
            f"{m['model_config'].get('num_hidden_layers')} layers x {m['model_config'].get('hidden_size')}), "
            f"{m['tokens_seen'] / 1e6:.2f} M tokens{ppl}; sha256 {m['weights_sha256'][:12]}{status}")


def _model_from(cfg: TrainConfig, vocab_size: int):
    from protot.train.trainer import build_model

    return build_model(cfg, vocab_size)


def _load_folder(folder: Path, m: dict, label: str):
    """A float32 model built from ``m["train_config"]`` with ``folder``'s weights (checked against ``m``)."""
    from safetensors.torch import load_model

    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise checkpoint.CorruptCheckpointError(f"{weights} is missing")
    if _sha256(weights) != m["weights_sha256"]:
        raise checkpoint.CorruptCheckpointError(f"{weights} does not match the sha256 in its MANIFEST.json")
    cfg = TrainConfig.from_dict(m["train_config"])
    if cfg.arch in ("protot", "llama", "deltanet", "mamba"):
        # exactly the stored config (fields added since are filled with the values the model was
        # built with: protot.models.legacy_config_dict), not re-derived from today's defaults
        from protot.models import ARCHS as MODEL_ARCHS, config_from_dict

        model = MODEL_ARCHS[cfg.arch][1](config_from_dict(cfg.arch, m["model_config"]))
    else:
        model = _model_from(cfg, m["model_config"]["vocab_size"])
    try:
        load_model(model, str(weights), strict=True)
    except RuntimeError as e:
        raise checkpoint.CheckpointMismatchError(
            f"{label} no longer fits protot.models' {cfg.arch} (the model code changed?): {e}") from None
    return model


def load(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Pretrained:
    """Load committed model ``name``; the weights are checked against the manifest's sha256."""
    m = manifest(name)
    if tk.tokenizer_hash() != m["tokenizer"]["sha256"]:
        raise checkpoint.CheckpointMismatchError(
            f"models/{name} was trained with tokenizer sha256 {m['tokenizer']['sha256'][:12]}, "
            f"but data/tokenizers/{tk.TOKENIZER_FILE} is {tk.tokenizer_hash()[:12]}")
    model = _load_folder(models_dir() / name, m, f"models/{name}")
    model = model.to(device=device, dtype=dtype).eval()
    return Pretrained(name=name, model=model, tokenizer=tk.load_hf_tokenizer(), manifest=m)


# ---------------------------------------------------------------------------------------------
# Writing models/<name>: assemble beside the target, verify, swap
# ---------------------------------------------------------------------------------------------
def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _recover(target: Path) -> None:
    """Undo a swap that was cut between its two renames: put the previous folder back."""
    if target.exists():
        return
    backups = sorted(target.parent.glob(f".old-{target.name}-*"), key=lambda p: p.stat().st_mtime)
    if backups and (backups[-1] / "MANIFEST.json").is_file():
        os.rename(backups[-1], target)


def _verify_folder(folder: Path, man: dict, half: torch.nn.Module) -> None:
    """Check an assembled folder: size limit, sha256, and that it loads back to the same weights."""
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"model.safetensors would be {size / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB "
                         "limit for committed models")
    if size != man["weights_bytes"]:
        raise checkpoint.CorruptCheckpointError(f"{weights}: {size} bytes written, {man['weights_bytes']} expected")
    back = _load_folder(folder, json.loads((folder / "MANIFEST.json").read_text()), str(folder))
    want = half.state_dict()
    for key, value in back.state_dict().items():
        if not torch.equal(value.to(want[key].dtype), want[key]):
            raise checkpoint.CorruptCheckpointError(f"{weights}: tensor {key} did not load back as written")


def _write_failure(err: BaseException) -> str | None:
    """A failed write in words (a file-size limit, a full disk, ...), or None when ``err`` is no write
    failure. safetensors reports the system's error in its message (``os error 27``)."""
    import errno
    import re

    code = err.errno if isinstance(err, OSError) else None
    if code is None and type(err).__name__ == "SafetensorError":
        found = re.search(r"os error (\d+)", str(err))
        code = int(found.group(1)) if found else None
    if code is None:
        return None
    words = {errno.EFBIG: "the file-size limit was reached (ulimit -f)", errno.ENOSPC: "no space left on the device",
             errno.EDQUOT: "the disk quota is exceeded", errno.EROFS: "the file system is read-only",
             errno.EACCES: "permission denied"}
    return words.get(code, os.strerror(code))


def _publish(target: Path, half: torch.nn.Module, name: str, make_manifest, config: dict) -> dict:
    """Write weights, config.json and MANIFEST.json into a folder beside ``target``, verify, swap in.

    ``make_manifest(weights_sha256, weights_bytes)`` returns the manifest dict. Any failure before the
    swap leaves ``target`` untouched and removes the temporary folder.
    """
    from safetensors.torch import save_model

    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    _recover(target)
    tmp = parent / f".tmp-{target.name}-{os.getpid()}"
    old = parent / f".old-{target.name}-{os.getpid()}"
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    def guarded(writing: str, write) -> None:  # a write stopped (file-size limit, full disk): say which, and why
        try:
            write()
        except Exception as err:  # OSError, or safetensors' SafetensorError naming the os error
            why = _write_failure(err)
            if why is None:
                raise
            raise checkpoint.CheckpointWriteError(
                f"could not export {name}: writing {writing} stopped ({why}). {_shown(target)} is as it was "
                "(the partial folder was removed); make room, then export again") from err

    def dump(path: Path, obj) -> None:
        path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def settle(path: Path) -> None:
        os.chmod(path, 0o644)
        _fsync_path(path)

    try:
        tmp.mkdir()
        weights = tmp / "model.safetensors"
        guarded("model.safetensors", lambda: save_model(half, str(weights), metadata={"format": "pt", "name": name}))
        man = make_manifest(_sha256(weights), weights.stat().st_size)
        for f, obj in (("config.json", config), ("MANIFEST.json", man)):
            guarded(f, lambda f=f, obj=obj: dump(tmp / f, obj))
        for f in ("model.safetensors", "config.json", "MANIFEST.json"):
            guarded(f, lambda f=f: settle(tmp / f))
        _verify_folder(tmp, man, half)
        if target.exists():
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
        _fsync_path(parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return man


def _from_checkpoint(run: str | Path):
    """(checkpoint folder, its state.json, TrainConfig, float32 model with its weights) of ``run``'s latest."""
    ck = checkpoint.latest(run)
    if ck is None:
        raise FileNotFoundError(f"{run} has no checkpoint (no {checkpoint.ckpt_root(run)}/step-*)")
    state = checkpoint.verify(ck)
    cfg = TrainConfig.from_dict(state["config"])
    model = _model_from(cfg, tk.load_tokenizer().get_vocab_size())
    rng = torch.get_rng_state()
    checkpoint.load(ck, model, None, {"tokenizer_sha256": tk.tokenizer_hash()})
    torch.set_rng_state(rng)  # loading restores the run's generator state; leave the caller's alone
    return ck, state, cfg, model.eval()


def _half(cfg: TrainConfig, model: torch.nn.Module) -> torch.nn.Module:
    half = _model_from(cfg, model.config.vocab_size)
    half.load_state_dict(model.state_dict())
    return half.half().eval()


def _common_manifest(name: str, cfg: TrainConfig, model, state: dict, ck: Path, sha: str, size: int) -> dict:
    from protot.models import count_parameters

    return {
        "name": name,
        "arch": cfg.arch,
        "model_class": type(model).__name__,
        "dtype": "float16",
        "parameters": count_parameters(model),
        "tokens_seen": state["tokens_seen"],
        "steps": state["step"],
        "planned_steps": cfg.steps,
        # re-plans of the token budget on resume ({"step", "from_tokens", "to_tokens"}) and resumes
        # from a snapshot ({"step", "event": "resumed-from-snapshot", "rewarm_steps", ...}), if any
        "budget_history": state.get("budget_history", []),
        "train_config": cfg.to_dict(),
        "model_config": json.loads(model.config.to_json_string()),
        "data": {
            "train": "data/corpus/en, training mix compendium.data.TRAIN_MIX['en'], split 'train' "
                     "(document-level: sha256(id) below 2% of 2**32 goes to validation)",
            "data_key": state["data_key"],
        },
        "tokenizer": {"file": f"data/tokenizers/{tk.TOKENIZER_FILE}", "sha256": tk.tokenizer_hash()},
        "weights_sha256": sha,
        "weights_bytes": size,
        "checkpoint": str(ck.name),
        "provenance": provenance.describe(),
    }


def _target(name: str, dest: Path | None) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"model name {name!r} must be a plain folder name (no '/', not hidden)")
    return Path(dest) if dest is not None else models_dir() / name


def export(run: str | Path, name: str, *, eval_blocks: int | None = 512, dest: Path | None = None,
           force: bool = False) -> dict:
    """Export the latest checkpoint of ``run`` as models/<name> (float16) and evaluate it.

    ``eval_blocks``: blocks of ``context`` tokens evaluated per split (None: the whole split).
    An existing models/<name> is refused unless ``force``; it is replaced only once the new folder
    is complete and verified (a failure leaves it as it was).
    """
    folder = _target(name, dest)
    _recover(folder)
    if folder.exists() and not force:
        raise FileExistsError(f"{folder} already exists; pass force=True (--force) to replace it "
                              "(it is replaced only once the new export is complete and verified)")
    ck, state, cfg, model = _from_checkpoint(run)
    ev = evaluate.evaluate_all(model, cfg.context, max_blocks=eval_blocks)
    half = _half(cfg, model)

    train_cmd, missing = train_command(cfg, run)

    def make(sha, size):
        man = _common_manifest(name, cfg, model, state, ck, sha, size)
        man["data"]["eval_blocks_per_split"] = eval_blocks
        man["eval"] = ev
        man.update({
            "kind": "export",
            "status": "final" if state["step"] >= cfg.steps else "partial",
            "run": _shown(Path(run)),
            # how to make it again: train (the same command continues an interrupted run), then export.
            # Resumes from a snapshot (budget_history) make the original run differ from an
            # uninterrupted one by the re-warm-ups recorded there.
            "reproduce": [train_cmd, " ".join(shlex.quote(a) for a in (
                "python", "-m", "protot.train.pretrained", "export", _shown(Path(run)), name,
                "--eval-blocks", str(eval_blocks or 0), "--force"))],   # 0: the whole split, as the CLI reads it
            "exported_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        if missing:
            man["reproduce_missing_fields"] = missing
        return man

    return _publish(folder, half, name, make, model.config.to_dict())


def _shown(path: Path) -> str:
    """``path`` relative to the repository root when inside it (manifests hold no absolute paths then)."""
    try:
        return path.resolve().relative_to(paths.repo_root()).as_posix()
    except ValueError:
        return str(path)


#: TrainConfig fields the command line can set, with their flags.
_FLAGS = {"size": "--size", "tokens": "--tokens", "data": "--data", "context": "--context",
          "batch_size": "--batch-size", "grad_accum": "--grad-accum", "lr": "--lr", "warmup_steps": "--warmup-steps",
          "seed": "--seed", "eval_every": "--eval-every", "eval_blocks": "--eval-blocks", "ckpt_every": "--ckpt-every"}


def train_command(cfg: TrainConfig, run: str | Path) -> tuple[str, list[str]]:
    """(command, fields it cannot express) that trains ``cfg``'s run in ``run`` from scratch, or
    continues it exactly from the run folder's checkpoints (``--resume``)."""
    return resume_command(cfg, run, None)


def resume_command(cfg: TrainConfig, run: str | Path, snapshot: str | Path | None) -> tuple[str, list[str]]:
    """(command, fields it cannot express) that continues ``cfg``'s run in ``run`` from ``snapshot``
    (None: from the run folder's checkpoints only).

    The profile closest to ``cfg`` is named and every other difference given as a flag; TrainConfig
    fields without a flag are returned (an empty list when the command is exact).
    """
    def diff(p: TrainConfig) -> list[str]:
        a, b = p.replace(arch=cfg.arch).to_dict(), cfg.to_dict()
        return [k for k in b if a[k] != b[k]]

    prof = min(PROFILES, key=lambda n: (len(diff(PROFILES[n])), n))
    base = PROFILES[prof]
    args = ["python", "-m", "protot.train", "--arch", cfg.arch, "--profile", prof]
    missing = []
    for field in diff(base):
        if field == "model_overrides":
            have, want = dict(base.model_overrides), dict(cfg.model_overrides)
            missing += [f"model_overrides.{k}" for k in have if k not in want]
            args += [a for k, v in want.items() if have.get(k, object()) != v for a in ("--set", f"{k}={v!r}")]
        elif field in _FLAGS:
            args += [_FLAGS[field], str(getattr(cfg, field))]
        elif field not in TrainConfig.RESUMABLE_CHANGES:
            missing.append(field)
    args += ["--out", _shown(Path(run)), "--resume"]
    if snapshot is not None:
        args += ["--resume-from-snapshot", _shown(Path(snapshot))]
    args += ["--threads", "1"]
    return " ".join(shlex.quote(a) for a in args), missing


def snapshot(run: str | Path, name: str, *, dest: Path | None = None, force: bool = False) -> dict:
    """Snapshot the latest checkpoint of ``run`` as models/<name>: float16 weights + MANIFEST.json.

    No optimiser state, no evaluation. Replaces an earlier snapshot of the same run atomically;
    refuses (unless ``force``) a folder that is not a snapshot, a snapshot of another run, or one
    that is further along than this checkpoint.
    """
    folder = _target(name, dest)
    _recover(folder)
    ck, state, cfg, model = _from_checkpoint(run)
    if folder.exists() and not force:
        try:
            prev = json.loads((folder / "MANIFEST.json").read_text())
        except (OSError, ValueError):
            prev = None
        if prev is None or prev.get("kind") != "snapshot":
            raise FileExistsError(f"{folder} exists and is not a snapshot (an exported model?); pass --force "
                                  "to replace it, or choose another name")
        prev_cfg = TrainConfig.from_dict(prev["train_config"])
        if prev_cfg.replace(tokens=cfg.tokens).identity() != cfg.identity():
            raise FileExistsError(f"{folder} is a snapshot of another run ({prev.get('run')}); pass --force to "
                                  "replace it, or choose another name")
        if prev["steps"] > state["step"]:
            raise FileExistsError(f"{folder} is at step {prev['steps']}, ahead of {run}'s latest checkpoint "
                                  f"({state['step']}); pass --force to replace it with the older state")
    half = _half(cfg, model)
    command, missing = resume_command(cfg, run, folder)

    def make(sha, size):
        man = _common_manifest(name, cfg, model, state, ck, sha, size)
        man.update({
            "kind": "snapshot",
            "status": "final" if state["step"] >= cfg.steps else "in-progress",
            "tokens_planned": cfg.steps * cfg.tokens_per_step,
            "run": _shown(Path(run)),
            "resume_command": command,
            "eval": {},
            "snapshot_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": ("Weights only (no optimiser state). resume_command continues the run exactly from "
                     "its local checkpoints while they exist; without them, from these weights at step "
                     "`steps` with a fresh optimiser and a short learning-rate re-warm-up (recorded in "
                     "budget_history), the data order continuing at that step."),
        })
        if missing:
            man["resume_command_missing_fields"] = missing
        return man

    return _publish(folder, half, name, make, model.config.to_dict())


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m protot.train.pretrained")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export a run's latest checkpoint to models/<name>")
    e.add_argument("run")
    e.add_argument("name")
    e.add_argument("--eval-blocks", type=int, default=512, help="blocks per split (0: all)")
    e.add_argument("--force", action="store_true", help="replace an existing models/<name> (atomically)")
    s = sub.add_parser("snapshot", help="snapshot a run's latest checkpoint to models/<name> (weights + manifest)")
    s.add_argument("run")
    s.add_argument("name")
    s.add_argument("--force", action="store_true",
                   help="replace models/<name> even if it is not a snapshot of this run or is further along")
    sub.add_parser("list", help="list committed models")
    a = p.parse_args(argv)
    try:
        if a.cmd == "export":
            if a.eval_blocks < 0:
                p.error(f"--eval-blocks must be >= 0, got {a.eval_blocks}")
            export(a.run, a.name, eval_blocks=a.eval_blocks or None, force=a.force)
            print(describe(a.name) if (models_dir() / a.name).exists() else f"exported {a.name}")
        elif a.cmd == "snapshot":
            man = snapshot(a.run, a.name, force=a.force)
            print(f"snapshot {a.name}: step {man['steps']} of {man['planned_steps']} ({man['status']}); "
                  f"continue with:\n  {man['resume_command']}")
        else:
            for n in available():
                print(describe(n))
    except (FileExistsError, FileNotFoundError, ValueError, checkpoint.CheckpointError) as err:
        p.exit(1, f"{p.prog} {a.cmd}: error: {err}\n")


if __name__ == "__main__":
    main()
