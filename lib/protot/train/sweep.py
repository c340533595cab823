"""Running several trainings for a notebook, reading their metrics, fitting scaling trends.

A run folder is reused when it already holds a finished run of the same config (its
``summary.json`` exists and ``config.json`` matches), so re-executing a notebook is cheap.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from protot.train.config import TrainConfig
from protot.train.trainer import read_metrics, train


def run(cfg: TrainConfig, out: str | Path, *, reuse: bool = True, threads: int | None = None,
        device: str | None = None) -> Path:
    """Train ``cfg`` into ``out`` (reusing a finished identical run); return ``out``."""
    out = Path(out)
    if reuse and (out / "summary.json").exists() and (out / "config.json").exists():
        saved = json.loads((out / "config.json").read_text())["train"]
        if TrainConfig.from_dict(saved) == cfg:
            return out
    if out.exists():
        shutil.rmtree(out)
    train(cfg, out, progress=False, threads=threads, device=device)
    return out


def train_curve(out: str | Path) -> dict[str, np.ndarray]:
    """{"step", "tokens", "loss"} arrays of a run's training steps."""
    rows = [m for m in read_metrics(out) if "split" not in m]
    return {k: np.array([r[k] for r in rows]) for k in ("step", "tokens", "loss")}


def val_points(out: str | Path) -> list[dict]:
    """The run's validation evaluations: [{"step", "tokens", "loss", "ppl"}]."""
    cfg = TrainConfig.from_dict(json.loads((Path(out) / "config.json").read_text())["train"])
    return [{"step": m["step"], "tokens": m["step"] * cfg.tokens_per_step, "loss": m["loss"], "ppl": m["ppl"]}
            for m in read_metrics(out) if m.get("split") == "validation"]


def smooth(y: np.ndarray, window: int = 10) -> np.ndarray:
    """Trailing moving average (same length; the first values average what exists)."""
    c = np.cumsum(np.insert(np.asarray(y, float), 0, 0.0))
    n = np.arange(1, len(y) + 1)
    lo = np.maximum(0, n - window)
    return (c[n] - c[lo]) / (n - lo)


def fit_power_law(x, y) -> dict:
    """Least-squares fit of log y = log c + a log x; returns {"exponent": a, "coef": c, "r2"}."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power-law fit needs at least two distinct x values")
    a, b = np.polyfit(lx, ly, 1)
    resid = ly - (a * lx + b)
    ss = float(((ly - ly.mean()) ** 2).sum())
    return {"exponent": float(a), "coef": float(math.exp(b)), "r2": 1.0 - float((resid ** 2).sum()) / ss if ss else 1.0}


def load_run(out: str | Path, device: str = "cpu"):
    """The model of a run's latest checkpoint (float32, eval mode) and its TrainConfig."""
    from protot.train import checkpoint
    from protot.train import tokenizer as tk
    from protot.train.trainer import build_model

    ck = checkpoint.latest(out)
    if ck is None:
        raise FileNotFoundError(f"{out} has no checkpoint")
    cfg = TrainConfig.from_dict(checkpoint.verify(ck)["config"])
    model = build_model(cfg, tk.load_tokenizer().get_vocab_size())
    checkpoint.load(ck, model, None, {"tokenizer_sha256": tk.tokenizer_hash()}, device=device)
    return model.to(device).eval(), cfg
