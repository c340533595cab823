"""The training loop: AdamW, warm-up + cosine, clipping, accumulation, DDP, exact resume.

One entry point, :func:`train`, runs single-process or, under ``torchrun``, as one DDP process
per rank (gloo on CPU, NCCL on GPU). Mixed precision: bfloat16 autocast on a GPU, plain float32
on the CPU. Metrics go to ``<out>/metrics.jsonl`` (one JSON object per line: ``{"step", "tokens",
"loss", "lr", "grad_norm", ...}`` per optimiser step and ``{"step", "split", "loss", "ppl"}`` per
evaluation); checkpoints to ``<out>/checkpoints`` (see :mod:`protot.train.checkpoint`).

Exact resume: the batch of step ``s`` is a pure function of (seed, s) (:class:`packing.BatchSchedule`),
the learning rate is a pure function of ``s``, and the checkpoint restores weights, AdamW moments
and generator states, so on the CPU a run killed at any step and resumed from its last checkpoint
reproduces the uninterrupted run's losses bit for bit. Dropout (the authors' recipe) draws from torch's generator, whose
state the checkpoint restores too; under DDP each rank draws its own masks, so a run with dropout
is the same in distribution, not bit for bit, at another world size. Each step's metrics line records
``batch_sha1``, a fingerprint of the block ids it trained on.

Resume from a snapshot (``snapshot=models/NAME``, when the run folder is gone): the snapshot's
float16 weights, a fresh AdamW, the schedule positioned at the snapshot's step with a linear
re-warm-up over ``rewarm_steps`` steps, and the same data order (batches continue at that step,
none repeats). The event is appended to ``budget_history`` (checkpoints, config.json and the next
snapshot's MANIFEST.json), and later exact resumes keep the re-warm-up's ramp.

``--out`` must be new, empty or a run of this trainer, and outside models/, papers/ and data/
(:func:`check_out_dir`): a run never overwrites committed files.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from compendium import atomic, paths, provenance
from protot.train import checkpoint, evaluate, packing
from protot.train import tokenizer as tk
from protot.train.config import TrainConfig

_HF_LLAMA_SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=160, num_attention_heads=2),
    "small": dict(hidden_size=256, num_hidden_layers=6, intermediate_size=704, num_attention_heads=4),
    "large": dict(hidden_size=512, num_hidden_layers=12, intermediate_size=1376, num_attention_heads=8),
}


class OutDirError(ValueError):
    """The --out folder is not a place a run may write to."""


#: Folders of the repository a run never writes into (committed models, papers' results, data).
PROTECTED_DIRS = ("models", "papers", "data")


def _is_run_dir(out: Path) -> bool:
    """Whether ``out`` holds a run of this trainer (its metrics, checkpoints or run config)."""
    if (out / "metrics.jsonl").is_file() or (out / "checkpoints").is_dir():
        return True
    try:
        conf = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(conf, dict) and "train" in conf and "provenance" in conf


def check_out_dir(out: str | Path) -> None:
    """Refuse an ``out`` that is not a new/empty folder or a run of this trainer (:class:`OutDirError`).

    Also refused: any folder inside the repository's models/, papers/ or data/ (or the folder named by
    PROTOT_MODELS), where a run would overwrite committed files. Only rank 0 checks (under DDP the
    other ranks would race with its first writes).
    """
    if os.environ.get("RANK", "0") != "0":
        return
    out = Path(out)
    target = out.resolve()
    root = paths.repo_root()
    protected = [root / d for d in PROTECTED_DIRS] + [paths.data_dir()]
    if os.environ.get("PROTOT_MODELS"):
        protected.append(Path(os.environ["PROTOT_MODELS"]).resolve())
    for folder in protected:
        if target == folder or folder in target.parents:
            raise OutDirError(
                f"--out {out} is inside {folder.name}/, which holds committed files; a run writes "
                "metrics, checkpoints and config.json there. Use a folder under .cache/runs/ (e.g. "
                f"--out .cache/runs/{target.name}); export a finished run with "
                "`python -m protot.train.pretrained export RUN NAME`.")
    if target.exists() and not target.is_dir():
        raise OutDirError(f"--out {out} is a file, not a folder")
    if target.is_dir() and any(target.iterdir()) and not _is_run_dir(target):
        names = sorted(p.name for p in target.iterdir())
        raise OutDirError(
            f"--out {out} is not empty and is not a training run (no metrics.jsonl or checkpoints/; it "
            f"holds {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); a run would overwrite its "
            "config.json. Use a new folder.")


def build_model(cfg: TrainConfig, vocab_size: int) -> torch.nn.Module:
    """Seeded, freshly initialised model for ``cfg``.

    ``arch="hf-llama"`` is transformers' own LlamaForCausalLM (a reference and test fixture that
    does not depend on protot.models); the four paper architectures come from protot.models.
    Overrides that name no field of the model config (or have the wrong type) raise ValueError.
    """
    from protot.train.config import check_model_overrides, recipe_model_overrides

    check_model_overrides(cfg.arch, cfg.model_overrides)
    torch.manual_seed(cfg.seed)
    overrides = {**recipe_model_overrides(cfg.recipe, cfg.arch), **dict(cfg.model_overrides)}
    overrides.setdefault("max_position_embeddings", cfg.context)
    if cfg.arch == "hf-llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        conf = LlamaConfig(vocab_size=vocab_size, tie_word_embeddings=True,
                           **{**_HF_LLAMA_SIZES[cfg.size], **overrides})
        return LlamaForCausalLM(conf)
    from protot.models import build_model as _build

    return _build(cfg.arch, cfg.size, vocab_size, **overrides)


def lr_at(cfg: TrainConfig, step: int, rewarm: tuple[int, int] | None = None) -> float:
    """Learning rate of optimiser step ``step`` (0-based): linear warm-up, then cosine to
    min_lr_ratio * lr (``schedule="cosine"``) or lr throughout (``schedule="constant"``).

    ``rewarm = (start, n)``: the run continued from a snapshot at step ``start`` with a fresh
    optimiser; the scheduled rate is ramped linearly over steps start .. start + n - 1.
    """
    if step < cfg.warmup_steps:
        lr = cfg.lr * (step + 1) / cfg.warmup_steps
    elif cfg.schedule == "constant":
        lr = cfg.lr
    else:
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        floor = cfg.lr * cfg.min_lr_ratio
        lr = floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))
    if rewarm is not None and step >= rewarm[0]:
        lr *= min(1.0, (step - rewarm[0] + 1) / max(1, rewarm[1]))
    return lr


SNAPSHOT_EVENT = "resumed-from-snapshot"


def rewarm_from(budget_history: list[dict]) -> tuple[int, int] | None:
    """(start step, steps) of the latest re-warm-up recorded in ``budget_history``, if any."""
    events = [h for h in budget_history if h.get("event") == SNAPSHOT_EVENT]
    return (int(events[-1]["step"]), int(events[-1]["rewarm_steps"])) if events else None


def batch_fingerprint(ids: np.ndarray) -> str:
    """Short sha1 of a step's global block ids (in metrics.jsonl: which data a step trained on)."""
    return hashlib.sha1(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest()[:12]


def _snapshot_folder(snapshot: str | Path) -> Path:
    folder = Path(snapshot)
    if (folder / "MANIFEST.json").is_file():
        return folder
    from protot.train import pretrained

    alt = pretrained.models_dir() / folder.name
    if (alt / "MANIFEST.json").is_file():
        return alt
    raise FileNotFoundError(f"snapshot {snapshot} not found (no {folder / 'MANIFEST.json'}); "
                            f"snapshots: {pretrained.available() or 'none'}")


def load_snapshot(snapshot: str | Path, model: torch.nn.Module, cfg: TrainConfig, expect: dict, *,
                  retarget_budget: bool = False, device="cpu") -> dict:
    """Load a snapshot's (float16) weights into ``model`` after checking that it belongs to this run.

    Returns its MANIFEST.json. Raises CheckpointMismatchError when its config identity (tokens
    excepted under ``retarget_budget``), tokenizer or data differ, CorruptCheckpointError when its
    weights do not match the manifest's sha256.
    """
    from safetensors.torch import load_model

    folder = _snapshot_folder(snapshot)
    man = json.loads((folder / "MANIFEST.json").read_text())
    weights = folder / "model.safetensors"
    if not weights.is_file() or checkpoint._sha256(weights) != man.get("weights_sha256"):
        raise checkpoint.CorruptCheckpointError(
            f"snapshot {folder}: model.safetensors is missing or does not match the sha256 in its MANIFEST.json")
    saved = TrainConfig.from_dict(man["train_config"]).identity()
    want = dict(expect["identity"])
    if retarget_budget:
        want["tokens"] = saved.get("tokens")
    problems = [f"identity.{d}" for d in checkpoint._diff(saved, want)]
    if man.get("tokenizer", {}).get("sha256") != expect["tokenizer_sha256"]:
        problems.append("tokenizer_sha256: snapshot and run differ")
    if man.get("data", {}).get("data_key") != expect["data_key"]:
        problems.append(f"data_key: snapshot {man.get('data', {}).get('data_key')!r} != run {expect['data_key']!r}")
    if problems:
        raise checkpoint.CheckpointMismatchError(
            f"snapshot {folder} belongs to a different run:\n  " + "\n  ".join(problems)
            + "\nUse the command in its MANIFEST.json (resume_command).")
    try:
        load_model(model, str(weights), strict=True, device=str(device))
    except (RuntimeError, KeyError) as e:
        raise checkpoint.CheckpointMismatchError(f"snapshot {folder}: weights do not fit this model: {e}") from None
    return {**man, "_folder": str(folder)}


def make_optimizer(cfg: TrainConfig, model: torch.nn.Module) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on norms, biases, gates, nor on parameters marked
    ``_no_weight_decay``: the authors' mixer marks its prototypes and decays)."""
    decay, no_decay, seen = [], [], set()
    for _, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and not getattr(p, "_no_weight_decay", False) else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=False)


def _dist_setup(device: str | None):
    """(rank, world_size, device, is_distributed); starts the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            backend = "nccl" if str(device).startswith("cuda") else "gloo"
            dist.init_process_group(backend=backend)
        if str(device).startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
    return rank, world, torch.device(device), world > 1


class MetricsLog:
    """Append-only JSON-lines log; on resume, lines after the checkpoint's step are dropped."""

    def __init__(self, path: Path, resume_step: int | None, enabled: bool):
        self.path, self.enabled = path, enabled
        if not enabled:
            return
        keep = []
        if resume_step is not None and path.exists():
            for line in path.read_text().splitlines():
                try:
                    if json.loads(line)["step"] <= resume_step:
                        keep.append(line)
                except (json.JSONDecodeError, KeyError):
                    pass  # a line cut by a kill
        atomic.write_text(path, "".join(k + "\n" for k in keep))
        self.fh = open(path, "a", encoding="utf-8")

    def write(self, **entry):
        if self.enabled:
            self.fh.write(json.dumps(entry) + "\n")
            self.fh.flush()

    def close(self):
        if self.enabled:
            self.fh.close()


def read_metrics(out: str | Path) -> list[dict]:
    """The metrics.jsonl of a run as a list of dicts."""
    path = Path(out) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class TrainSetup:
    """What :func:`setup` builds for one run: the process's place in the run (rank, world size, device,
    whether distributed), the per-rank and micro-batch sizes, the data streams and their key, the batch
    schedule, the model, its optimiser and what its checkpoints must match (``expect``)."""
    rank: int
    world: int
    dev: torch.device
    distributed: bool
    per_rank: int
    micro: int
    train_stream: np.ndarray
    val_stream: np.ndarray
    data_key: str
    schedule: packing.BatchSchedule
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    expect: dict

    @property
    def master(self) -> bool:
        return self.rank == 0


def setup(cfg: TrainConfig, *, device: str | None = None, threads: int | None = None) -> TrainSetup:
    """Set-up: threads, the process group, the batch split, the data (rank 0 builds the caches first;
    the others then memory-map them), the tokenizer, the batch schedule, the model and its optimiser."""
    if threads:
        torch.set_num_threads(threads)
    rank, world, dev, distributed = _dist_setup(device)
    master = rank == 0
    per_rank = cfg.batch_size // world
    if cfg.batch_size % (world * cfg.grad_accum):
        raise ValueError(f"batch_size {cfg.batch_size} must divide by world_size x grad_accum = {world * cfg.grad_accum}")
    micro = per_rank // cfg.grad_accum

    if distributed and not master:
        torch.distributed.barrier()
    if cfg.data == "fineweb-edu":
        train_stream = packing.fineweb_stream("train", cfg.tokens + cfg.tokens_per_step)
        val_stream = packing.fineweb_stream("validation", max(cfg.eval_blocks * cfg.context, 2_000_000))
        data_key = f"fineweb-edu:{cfg.tokens}"
    else:
        train_stream = packing.token_stream("train", cfg.lang)
        val_stream = packing.token_stream("validation", cfg.lang)
        data_key = packing.source_key("train", cfg.lang)[0] + "+" + packing.source_key("validation", cfg.lang)[0]
    if distributed and master:
        torch.distributed.barrier()
    tok = tk.load_tokenizer()
    schedule = packing.BatchSchedule(packing.blocks(train_stream, cfg.context), cfg.batch_size, cfg.seed)

    model = build_model(cfg, tok.get_vocab_size()).to(dev)
    optimizer = make_optimizer(cfg, model)
    expect = {"identity": cfg.identity(), "tokenizer_sha256": tk.tokenizer_hash(), "data_key": data_key,
              "world_size_independent": True}
    return TrainSetup(rank, world, dev, distributed, per_rank, micro, train_stream, val_stream, data_key, schedule,
                      model, optimizer, expect)


def _from_snapshot(su: TrainSetup, cfg: TrainConfig, snapshot, retarget_budget: bool, rewarm_steps: int):
    """Resume from a snapshot folder: its weights, a fresh AdamW, the budget history with the snapshot
    event; the RNG seeded per step (a snapshot holds no RNG state). Returns (start step, history)."""
    man = load_snapshot(snapshot, su.model, cfg, su.expect, retarget_budget=retarget_budget, device=su.dev)
    start = int(man["steps"])
    old_tokens = man["train_config"]["tokens"]
    budget_history = list(man.get("budget_history", []))
    if old_tokens != cfg.tokens:
        budget_history.append({"step": start, "from_tokens": old_tokens, "to_tokens": cfg.tokens})
    folder = Path(man["_folder"])
    try:
        shown = folder.resolve().relative_to(paths.repo_root()).as_posix()
    except ValueError:
        shown = str(folder)
    budget_history.append({"step": start, "event": SNAPSHOT_EVENT, "snapshot": shown,
                           "snapshot_weights_sha256": man["weights_sha256"], "optimizer": "fresh AdamW",
                           "rewarm_steps": int(rewarm_steps), "from_tokens": cfg.tokens, "to_tokens": cfg.tokens})
    torch.manual_seed(cfg.seed * 1_000_003 + start)  # no RNG state in a snapshot: a fixed one per step
    return start, budget_history


def _from_checkpoint(su: TrainSetup, cfg: TrainConfig, ckpt, retarget_budget: bool):
    """Resume from a checkpoint: weights, optimiser and RNG state as saved; with ``retarget_budget`` a
    different token budget is accepted and recorded. Returns (start step, history)."""
    want = su.expect
    budget_history: list[dict] = []
    if retarget_budget:
        saved = checkpoint.verify(ckpt)
        old_tokens = saved["identity"].get("tokens")
        want = {**su.expect, "identity": {**su.expect["identity"], "tokens": old_tokens}}
        budget_history = list(saved.get("budget_history", []))
        if old_tokens != cfg.tokens:
            budget_history.append({"step": saved["step"], "from_tokens": old_tokens, "to_tokens": cfg.tokens})
    state = checkpoint.load(ckpt, su.model, su.optimizer, want, device=su.dev)
    return state["step"], budget_history or list(state.get("budget_history", []))


def resume_point(su: TrainSetup, cfg: TrainConfig, out: Path, *, resume: bool, snapshot, retarget_budget: bool,
                 rewarm_steps: int):
    """Resume: where the run starts. (0, None, []) for a fresh run; else (the step, the same step as the
    metrics log's resume point, the budget history) from the latest checkpoint in ``out`` or, where
    there is none, from ``snapshot``. A fresh run into a folder holding checkpoints is refused."""
    if not resume and checkpoint.latest(out) is not None:
        raise checkpoint.CheckpointError(f"{out} already holds checkpoints; pass resume=True (--resume) or use a new folder")
    if resume and su.master:
        checkpoint.clean_stale(out)
    ckpt = checkpoint.latest(out) if resume else None
    if ckpt is None and snapshot is not None:
        start, history = _from_snapshot(su, cfg, snapshot, retarget_budget, rewarm_steps)
    elif ckpt is not None:
        start, history = _from_checkpoint(su, cfg, ckpt, retarget_budget)
    else:
        return 0, None, []
    return start, start, history


def train_step(su: TrainSetup, cfg: TrainConfig, net, amp, step: int, rewarm) -> tuple[float, np.ndarray, float, float]:
    """Step: one optimiser step at ``step`` (0-based): the scheduled learning rate, this rank's share of
    the step's blocks in ``grad_accum`` micro-batches (gradients synchronised on the last), clipping
    (``grad_clip`` 0: none, the norm still measured), AdamW. Returns (lr, the step's block ids, the mean
    loss over ranks, the gradient norm); a loss that is not finite is a FloatingPointError."""
    lr = lr_at(cfg, step, rewarm)
    for group in su.optimizer.param_groups:
        group["lr"] = lr
    step_ids = su.schedule.block_ids(step)
    ids = step_ids[su.rank * su.per_rank : (su.rank + 1) * su.per_rank]  # this rank's sequences
    loss_sum = torch.zeros((), device=su.dev)
    for m in range(cfg.grad_accum):
        x = packing.gather(su.train_stream, ids[m * su.micro : (m + 1) * su.micro], cfg.context).to(su.dev)  # (b, T)
        sync = nullcontext() if (not su.distributed or m == cfg.grad_accum - 1) else net.no_sync()
        with sync:
            with amp:
                loss = net(input_ids=x, labels=x, return_logits=False).loss   # fused loss, no logits
            (loss / cfg.grad_accum).backward()
        loss_sum += loss.detach().float()
    # grad_clip 0: no clipping (the authors' recipe), the norm is still measured and logged
    grad_norm = torch.nn.utils.clip_grad_norm_(su.model.parameters(), cfg.grad_clip or float("inf"))
    su.optimizer.step()
    su.optimizer.zero_grad(set_to_none=True)
    step_loss = loss_sum / cfg.grad_accum
    if su.distributed:
        torch.distributed.all_reduce(step_loss, op=torch.distributed.ReduceOp.AVG)
    step_loss = float(step_loss)
    if not math.isfinite(step_loss):
        raise FloatingPointError(f"loss became {step_loss} at step {step + 1}")
    return lr, step_ids, step_loss, float(grad_norm)


def evaluate_subset(su: TrainSetup, cfg: TrainConfig, log: MetricsLog, step: int) -> float | None:
    """Evaluation: the validation loss on ``eval_blocks`` blocks, logged at ``step`` (rank 0 only;
    None elsewhere)."""
    if not su.master:
        return None
    total, count = evaluate.stream_nll(su.model, su.val_stream, cfg.context, max_blocks=cfg.eval_blocks, device=su.dev,
                                       autocast_dtype=torch.bfloat16 if su.dev.type == "cuda" else None)
    loss = total / count
    log.write(step=step, split="validation", loss=loss, ppl=math.exp(loss), blocks=cfg.eval_blocks)
    return loss


def save_checkpoint(su: TrainSetup, cfg: TrainConfig, out: Path, done: int, budget_history: list[dict]) -> None:
    """Checkpoint: rank 0 saves the model, optimiser and RNG state after ``done`` steps with what a resume
    must match; every rank waits for it."""
    if su.master:
        checkpoint.save(out, done, su.model, su.optimizer, {
            **su.expect, "tokens_seen": done * cfg.tokens_per_step, "config": cfg.to_dict(),
            "arch": cfg.arch, "model_class": type(su.model).__name__, "world_size": su.world,
            "budget_history": budget_history,
        }, keep=cfg.keep_checkpoints)
    if su.distributed:
        torch.distributed.barrier()


def train(cfg: TrainConfig, out: str | Path, *, resume: bool = False, device: str | None = None,
          max_steps: int | None = None, progress: bool = True, threads: int | None = None,
          final_eval: bool = False, retarget_budget: bool = False, snapshot: str | Path | None = None,
          rewarm_steps: int = 50, _kill_at_step: int | None = None) -> dict:
    """Train ``cfg`` into folder ``out``; return a summary dict (also written to ``summary.json``).

    ``resume``: continue from the latest checkpoint in ``out`` (start fresh if there is none).
    ``max_steps``: stop after this many optimiser steps in total without changing the schedule.
    ``final_eval``: evaluate validation and WikiText-2 perplexity in full at the end.
    ``retarget_budget``: on resume, accept a checkpoint whose token budget differs from ``cfg.tokens``
    (the cosine schedule is re-planned for the new budget from the checkpoint's step on; the change
    is recorded as ``budget_history`` in the checkpoints and config.json). Nothing else may differ.
    ``snapshot``: a snapshot folder (models/NAME) to continue from when ``out`` holds no checkpoint
    (implies ``resume``); fresh AdamW, learning rate re-warmed over ``rewarm_steps`` steps.
    ``_kill_at_step``: testing hook, SIGKILLs this process right after that step.

    The steps: :func:`setup`, :func:`resume_point`, then per step :func:`train_step`, with
    :func:`evaluate_subset` and :func:`save_checkpoint` at their intervals and at the last step.
    """
    out = Path(out)
    if snapshot is not None:
        resume = True
        if rewarm_steps < 1:
            raise ValueError(f"rewarm_steps must be at least 1, got {rewarm_steps}")
    check_out_dir(out)
    su = setup(cfg, device=device, threads=threads)
    start, resumed_step, budget_history = resume_point(su, cfg, out, resume=resume, snapshot=snapshot,
                                                       retarget_budget=retarget_budget, rewarm_steps=rewarm_steps)
    rewarm = rewarm_from(budget_history)
    out.mkdir(parents=True, exist_ok=True)
    if su.master:
        atomic.write_json(out / "config.json", {"train": cfg.to_dict(), "model": su.model.config.to_dict(),
                                                "world_size": su.world, "budget_history": budget_history,
                                                "provenance": provenance.describe()})
    log = MetricsLog(out / "metrics.jsonl", resumed_step, enabled=su.master)

    net = su.model
    if su.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(su.model, device_ids=[su.dev.index] if su.dev.type == "cuda" else None)
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if su.dev.type == "cuda" else nullcontext()
    last = min(cfg.steps, max_steps) if max_steps is not None else cfg.steps

    bar = None
    if progress and su.master:
        from tqdm.auto import tqdm

        bar = tqdm(total=last, initial=start, desc=f"{cfg.arch}", unit="step", mininterval=2.0)
    su.model.train()
    t0 = time.time()
    val_loss = None
    for step in range(start, last):
        lr, step_ids, step_loss, grad_norm = train_step(su, cfg, net, amp, step, rewarm)
        done = step + 1
        log.write(step=done, tokens=done * cfg.tokens_per_step, loss=step_loss, lr=lr,
                  grad_norm=grad_norm, elapsed_s=round(time.time() - t0, 3),
                  batch_sha1=batch_fingerprint(step_ids))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{step_loss:.3f}", refresh=False)
        if done % cfg.eval_every == 0 or done == last:
            val_loss = evaluate_subset(su, cfg, log, done)
        if done % cfg.ckpt_every == 0 or done == last:
            save_checkpoint(su, cfg, out, done, budget_history)
        if _kill_at_step is not None and done == _kill_at_step:
            log.close()
            os.kill(os.getpid(), signal.SIGKILL)
    if bar is not None:
        bar.close()
    log.close()
    summary = {"arch": cfg.arch, "steps": last, "tokens_seen": last * cfg.tokens_per_step,
               "train_seconds_this_session": round(time.time() - t0, 2), "val_loss_subset": val_loss,
               "world_size": su.world, "out": str(out)}
    if final_eval and su.master:
        summary["eval"] = evaluate.evaluate_all(su.model, cfg.context, device=su.dev)
    if su.master:
        atomic.write_json(out / "summary.json", summary)
    if su.distributed:
        torch.distributed.barrier()
    return summary
