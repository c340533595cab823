"""Helpers for the training tests: one tiny, fast configuration and a CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from protot.train.config import profile

ROOT = Path(__file__).resolve().parents[2]

#: A ProtoT of 2 layers x 64 hidden, context 32, 4 sequences per step, 12 steps.
TINY = dict(size="tiny", context=32, batch_size=4, tokens=12 * 4 * 32, warmup_steps=3,
            ckpt_every=4, eval_every=6, eval_blocks=4)


def tiny_cfg(**changes):
    return profile("smoke", **{**TINY, **changes})


def cli_args(cfg, out, *extra) -> list[str]:
    """Command-line arguments reproducing ``tiny_cfg`` for ``python -m protot.train``."""
    return ["--arch", cfg.arch, "--profile", "smoke", "--out", str(out), "--size", cfg.size,
            "--context", str(cfg.context), "--batch-size", str(cfg.batch_size), "--tokens", str(cfg.tokens),
            "--warmup-steps", str(cfg.warmup_steps), "--ckpt-every", str(cfg.ckpt_every),
            "--eval-every", str(cfg.eval_every), "--eval-blocks", str(cfg.eval_blocks),
            "--grad-accum", str(cfg.grad_accum), "--threads", "1", "--no-progress", *extra]


def run_cli(args: list[str], *, module=("-m", "protot.train"), launcher=None, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, *(launcher or []), *module, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


