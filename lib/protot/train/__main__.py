"""Command line: ``python -m protot.train --arch protot --profile smoke --out DIR [--resume]``.

Under ``torchrun --nproc_per_node N -m protot.train ...`` the same command runs DDP (gloo on CPU).

Bad input stops before anything is written: ``--set`` names must be fields of the architecture's
model config and their values of the field's type; sizes, budgets and intervals must be positive;
``--out`` must be a new or empty folder or a run of this trainer, and outside models/, papers/ and
data/ (see :func:`protot.train.trainer.check_out_dir`).

A run whose local folder was lost continues from its last snapshot (``python -m
protot.train.pretrained snapshot RUN NAME`` writes one to models/NAME) with
``--resume-from-snapshot models/NAME``: the snapshot's MANIFEST.json holds the exact command.
"""
from __future__ import annotations

import argparse
import ast
import json

from protot.train.config import ARCHS, PROFILES, SIZES, profile

#: Flags that set TrainConfig fields: (flag, field, type).
_FIELD_FLAGS = (("context", "context", int), ("batch-size", "batch_size", int), ("grad-accum", "grad_accum", int),
                ("lr", "lr", float), ("warmup-steps", "warmup_steps", int), ("seed", "seed", int),
                ("eval-every", "eval_every", int), ("eval-blocks", "eval_blocks", int),
                ("ckpt-every", "ckpt_every", int))


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m protot.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=ARCHS, default="protot")
    p.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    p.add_argument("--out", required=True, help="run folder (metrics.jsonl, checkpoints/, summary.json)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--resume-from-snapshot", metavar="models/NAME",
                   help="when --out holds no checkpoint (the run folder was lost), continue from this snapshot's "
                        "weights at its step (fresh optimiser, short re-warm-up); otherwise resume --out exactly")
    p.add_argument("--rewarm-steps", type=_positive_int, default=50,
                   help="with --resume-from-snapshot: steps over which the learning rate ramps back up (default 50)")
    p.add_argument("--size", choices=SIZES, help="model size; default: the profile's")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="model config override, e.g. --set num_hidden_layers=4 (repeatable)")
    p.add_argument("--tokens", type=int, help="token budget (sets the number of steps)")
    p.add_argument("--data", choices=("corpus", "fineweb-edu"), help="training data (fineweb-edu: online, streamed)")
    for flag, _, typ in _FIELD_FLAGS:
        p.add_argument(f"--{flag}", type=typ)
    p.add_argument("--max-steps", type=_positive_int, help="stop after this many steps (the schedule is unchanged)")
    p.add_argument("--threads", type=_positive_int, help="torch CPU threads per process")
    p.add_argument("--device", help="cpu, cuda, cuda:0 (default: cuda when available)")
    p.add_argument("--final-eval", action="store_true", help="full validation + WikiText-2 perplexity at the end")
    p.add_argument("--retarget-budget", action="store_true",
                   help="with --resume: accept a checkpoint planned for another --tokens budget (re-plans the schedule)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--kill-at-step", type=int, help=argparse.SUPPRESS)  # tests: SIGKILL after this step
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def config_from_args(a, parser: argparse.ArgumentParser):
    """The TrainConfig the arguments ask for; bad values end the program with a message (exit code 2)."""
    from protot.train.config import check_model_overrides

    changes = {"arch": a.arch}
    for field in ("data", "size", "tokens"):
        v = getattr(a, field)
        if v is not None:
            changes[field] = v
    for _, field, _ in _FIELD_FLAGS:
        v = getattr(a, field)
        if v is not None:
            changes[field] = v
    if a.set:
        over = dict(PROFILES[a.profile].model_overrides)
        for item in a.set:
            name, eq, value = item.partition("=")
            name = name.strip()
            if not eq or not name:
                parser.error(f"--set {item!r}: expected NAME=VALUE, e.g. --set num_hidden_layers=4")
            over[name] = _value(value.strip())
        changes["model_overrides"] = tuple(sorted(over.items()))
    try:
        cfg = profile(a.profile, **changes)
        check_model_overrides(cfg.arch, cfg.model_overrides)
    except ValueError as e:
        parser.error(str(e))
    return cfg


def main(argv=None):
    parser = build_parser()
    a = parser.parse_args(argv)
    cfg = config_from_args(a, parser)
    from protot.train.trainer import OutDirError, check_out_dir, train

    try:
        check_out_dir(a.out)
    except OutDirError as e:
        parser.error(str(e))
    summary = train(cfg, a.out, resume=a.resume, device=a.device, max_steps=a.max_steps,
                    progress=not a.no_progress, threads=a.threads, final_eval=a.final_eval,
                    retarget_budget=a.retarget_budget, snapshot=a.resume_from_snapshot,
                    rewarm_steps=a.rewarm_steps, _kill_at_step=a.kill_at_step)
    if summary is not None and summary.get("world_size", 1) >= 1:
        import os

        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
