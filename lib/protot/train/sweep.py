"""Running several trainings for a notebook, reading their metrics, fitting scaling trends.

A run folder is reused when it already holds a finished run of the same config made the same way:
its ``summary.json`` exists, ``config.json`` matches, and its ``reuse.json`` records the same
:func:`reuse_key` (the code that trains and evaluates, the data, the tokenizer, torch's version and
thread count). Training itself is deterministic at a seed on the CPU (a fixed batch order, seeded
initialisation, one thread count), so a reused run holds exactly the numbers a new one would
compute; a run made by other code (before a change to a model, the loss or the trainer) is trained
again instead of being reused, which is what made two runs at one seed record different numbers.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np

from compendium import atomic
from protot.train.config import TrainConfig
from protot.train.trainer import read_metrics, train


#: The modules whose code determines a training's numbers (a package: every .py file in it).
TRAINING_CODE = ("protot.models", "protot.mixer", "kernels.proto_mixer", "protot.train.trainer",
                 "protot.train.packing", "protot.train.evaluate", "protot.train.config",
                 "protot.train.checkpoint", "protot.train.tokenizer")
REUSE_FILE = "reuse.json"


def code_fingerprint(modules: tuple[str, ...] = TRAINING_CODE) -> str:
    """sha256 (16 hex digits) of the source of ``modules``."""
    import importlib

    h = hashlib.sha256()
    for name in modules:
        path = Path(importlib.import_module(name).__file__)
        files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
        for f in files:
            h.update(f"{name}:{f.relative_to(path.parent).as_posix()}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def reuse_key(cfg: TrainConfig, threads: int | None = None, device: str | None = None) -> dict:
    """What besides the config decides a run's numbers: the training code, the data and tokenizer,
    torch's version, the device and the thread count it trains with."""
    import torch

    from protot.train import packing
    from protot.train import tokenizer as tk

    data_key = (f"fineweb-edu:{cfg.tokens}" if cfg.data == "fineweb-edu" else
                packing.source_key("train", cfg.lang)[0] + "+" + packing.source_key("validation", cfg.lang)[0])
    return {"code": code_fingerprint(), "data": data_key, "tokenizer": tk.tokenizer_hash(), "torch": torch.__version__,
            "device": str(device or "cpu"), "threads": int(threads or torch.get_num_threads())}


def reusable(cfg: TrainConfig, out: str | Path, key: dict) -> bool:
    """Whether ``out`` holds a finished run of ``cfg`` made with ``key`` (:func:`reuse_key`)."""
    out = Path(out)
    if not ((out / "summary.json").exists() and (out / "config.json").exists() and (out / REUSE_FILE).exists()):
        return False
    try:
        saved = json.loads((out / "config.json").read_text())["train"]
        return TrainConfig.from_dict(saved) == cfg and json.loads((out / REUSE_FILE).read_text()) == key
    except (OSError, ValueError, KeyError, TypeError):
        return False


def run(cfg: TrainConfig, out: str | Path, *, reuse: bool = True, threads: int | None = None,
        device: str | None = None) -> Path:
    """Train ``cfg`` into ``out`` (reusing a finished run of it made the same way, see the module
    docstring); return ``out``."""
    import torch

    out = Path(out)
    if threads:
        torch.set_num_threads(threads)
    key = reuse_key(cfg, threads, device)
    if reuse and reusable(cfg, out, key):
        return out
    if out.exists():
        shutil.rmtree(out)
    train(cfg, out, progress=False, threads=threads, device=device)
    atomic.write_json(out / REUSE_FILE, key)
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
    """Least-squares fit of log y = log c + a log x; returns {"exponent": a, "coef": c, "r2", "n": the points fitted}."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power-law fit needs at least two distinct x values")
    a, b = np.polyfit(lx, ly, 1)
    resid = ly - (a * lx + b)
    ss = float(((ly - ly.mean()) ** 2).sum())
    return {"exponent": float(a), "coef": float(math.exp(b)), "r2": 1.0 - float((resid ** 2).sum()) / ss if ss else 1.0,
            "n": int(len(lx))}


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
    figures' tables. Preconditions read ``min_fit_r2`` and ``max_baseline_exponent``; min_units reads
    ``min_fit_points`` (the fewest points a power law was fitted to).
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
                "min_fit_points": min(f[k]["n"] for f in fits.values() for k in f),
                "max_baseline_exponent": max(exponents[a][k] for a in baselines for k in ("vs_params", "vs_tokens"))},
        evidence={"exponents": exponents, "baseline_mean": baseline_mean,
                  "r2": {a: {k: f[k]["r2"] for k in f} for a, f in fits.items()}},
        tables={"03_scaling_grid": grid, "03_scaling_fits": fit_table}, config=dict(config or {}),
        unit="ratio of fitted exponents (ProtoT's / the baselines' mean), vs training tokens",
        note=(f"ppl = c x^a; vs non-embedding params at {data_tokens[-1]:,} tokens and vs tokens at the largest size; "
              f"{profile} profile: {len(size_names)} sizes {list(size_names)}, our offline corpus and "
              f"12k BPE. ProtoT's exponents: {p['vs_params']:.3f} (params), {p['vs_tokens']:.3f} (tokens); the "
              f"baselines' mean: {baseline_mean['vs_params']:.3f}, {baseline_mean['vs_tokens']:.3f}."))


# --- the registered protocol of notebook protot/03_scaling ---

def parse_size(spec: str) -> tuple[str, dict]:
    """A model size as claims.yaml writes it: ``"tiny"`` or ``"tiny hidden_size=32 num_hidden_layers=1"``
    (a size name, then whole-number overrides) -> ("tiny", {"hidden_size": 32, "num_hidden_layers": 1})."""
    parts = str(spec).split()
    if not parts:
        raise ValueError("an empty model size")
    over = {}
    for part in parts[1:]:
        key, eq, value = part.partition("=")
        if not eq or not key or not value.isdigit():
            raise ValueError(f"model size {spec!r}: overrides are written key=<whole number>, got {part!r}")
        over[key] = int(value)
    return parts[0], over


def grid_config(protocol: dict, seed: int) -> TrainConfig:
    """A training config from a claim's protocol (the scaling sweep's base, notebook 02's recipe): the
    training profile ``train_profile`` with every ``train_<field>`` entry replacing that field (e.g.
    ``train_context: 64``)."""
    from protot.train.config import profile

    fields = {k[len("train_"):]: v for k, v in protocol.items() if k.startswith("train_") and k != "train_profile"}
    if "train_profile" not in protocol:
        raise ValueError("the protocol names no train_profile")
    try:
        return profile(protocol["train_profile"], **fields, seed=seed)
    except TypeError as exc:
        raise ValueError(f"the protocol sets a field TrainConfig does not have: {exc}") from None
