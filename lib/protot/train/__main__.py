"""Command line: ``python -m protot.train --arch protot --profile smoke --out DIR [--resume]``.

Under ``torchrun --nproc_per_node N -m protot.train ...`` the same command runs DDP (gloo on CPU).
"""
from __future__ import annotations

import argparse
import ast
import json

from protot.train.config import ARCHS, PROFILES, profile


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m protot.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=ARCHS, default="protot")
    p.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    p.add_argument("--out", required=True, help="run folder (metrics.jsonl, checkpoints/, summary.json)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--size", help="model size (tiny, small, large); default: the profile's")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="model config override, e.g. --set num_hidden_layers=4 (repeatable)")
    p.add_argument("--tokens", type=int, help="token budget (sets the number of steps)")
    p.add_argument("--data", choices=("corpus", "fineweb-edu"), help="training data (fineweb-edu: online, streamed)")
    for name, typ in (("context", int), ("batch-size", int), ("grad-accum", int), ("lr", float),
                      ("warmup-steps", int), ("seed", int), ("eval-every", int), ("eval-blocks", int),
                      ("ckpt-every", int)):
        p.add_argument(f"--{name}", type=typ)
    p.add_argument("--max-steps", type=int, help="stop after this many steps (the schedule is unchanged)")
    p.add_argument("--threads", type=int, help="torch CPU threads per process")
    p.add_argument("--device", help="cpu, cuda, cuda:0 (default: cuda when available)")
    p.add_argument("--final-eval", action="store_true", help="full validation + WikiText-2 perplexity at the end")
    p.add_argument("--retarget-budget", action="store_true",
                   help="with --resume: accept a checkpoint planned for another --tokens budget (re-plans the schedule)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--kill-at-step", type=int, help=argparse.SUPPRESS)  # tests: SIGKILL after this step
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    changes = {"arch": a.arch}
    for field in ("data", "size", "tokens", "context", "batch_size", "grad_accum", "lr", "warmup_steps", "seed",
                  "eval_every", "eval_blocks", "ckpt_every"):
        v = getattr(a, field)
        if v is not None:
            changes[field] = v
    if a.set:
        over = dict(PROFILES[a.profile].model_overrides)
        for item in a.set:
            name, _, value = item.partition("=")
            over[name] = _value(value)
        changes["model_overrides"] = tuple(sorted(over.items()))
    cfg = profile(a.profile, **changes)
    from protot.train.trainer import train

    summary = train(cfg, a.out, resume=a.resume, device=a.device, max_steps=a.max_steps,
                    progress=not a.no_progress, threads=a.threads, final_eval=a.final_eval,
                    retarget_budget=a.retarget_budget,
                    _kill_at_step=a.kill_at_step)
    if summary is not None and summary.get("world_size", 1) >= 1:
        import os

        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
