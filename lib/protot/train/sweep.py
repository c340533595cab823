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


def measure_scaling_trend(fits: dict[str, dict], grid, fit_table, baselines, data_tokens: list[int],
                          size_names: list[str], profile: str, config: dict | None = None):
    """Claim protot/scaling-trend: ProtoT's power-law exponents over the baselines' mean.

    ``fits``: {arch: {"params": fit, "tokens": fit}} of :func:`fit_power_law` (perplexity against
    non-embedding parameters at the full budget ``data_tokens[-1]``, and against tokens at the largest
    size), including "protot" and every arch of ``baselines``; ``grid`` and ``fit_table`` are the
    figures' tables. Preconditions read ``min_fit_r2`` and ``max_baseline_exponent``.
    """
    from compendium.claims import Measurement

    baselines = list(baselines)
    missing = [a for a in ("protot", *baselines) if a not in fits]
    if missing or not baselines:
        raise ValueError(f"measure_scaling_trend: no fits for {missing or 'any baseline'} (fits: {sorted(fits)})")
    for a, f in fits.items():
        if set(f) != {"params", "tokens"}:
            raise ValueError(f"measure_scaling_trend: the fits of {a!r} must be 'params' and 'tokens', got {sorted(f)}")
    exponents = {a: {"vs_params": f["params"]["exponent"], "vs_tokens": f["tokens"]["exponent"]} for a, f in fits.items()}
    baseline_mean = {k: float(np.mean([exponents[a][k] for a in baselines])) for k in ("vs_params", "vs_tokens")}
    p = exponents["protot"]
    return Measurement(
        "protot/scaling-trend",
        values={"tokens_exponent_ratio": p["vs_tokens"] / baseline_mean["vs_tokens"],
                "params_exponent_ratio": p["vs_params"] / baseline_mean["vs_params"],
                "protot_exponent_tokens": p["vs_tokens"], "protot_exponent_params": p["vs_params"],
                "min_fit_r2": min(f[k]["r2"] for f in fits.values() for k in f),
                "max_baseline_exponent": max(exponents[a][k] for a in baselines for k in ("vs_params", "vs_tokens"))},
        evidence={"exponents": exponents, "baseline_mean": baseline_mean,
                  "r2": {a: {k: f[k]["r2"] for k in f} for a, f in fits.items()}},
        tables={"03_scaling_grid": grid, "03_scaling_fits": fit_table}, config=dict(config or {}),
        note=(f"ppl = c x^a; vs non-embedding params at {data_tokens[-1]:,} tokens and vs tokens at the largest size; "
              f"{profile} profile: {len(size_names)} sizes {list(size_names)}, our offline corpus and "
              f"12k BPE. ProtoT's exponents: {p['vs_params']:.3f} (params), {p['vs_tokens']:.3f} (tokens); the "
              f"baselines' mean: {baseline_mean['vs_params']:.3f}, {baseline_mean['vs_tokens']:.3f}."))
