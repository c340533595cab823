"""Same seed, same numbers.

In the default suite (cheap): a tiny training run twice at one seed records identical metrics, and
a trained run is reused (protot/02_training, 03_scaling keep theirs in .cache/train) only when it
was made by the same training code, data, tokenizer, torch version, device and thread count; a run
made by other code is trained again. Reusing runs keyed by their config alone is what made two main
runs at one seed, and a fresh clone, record different scaling exponents.

Opt-in (``make test-determinism``, marker ``determinism``, deselected otherwise): every notebook of
the main run executed twice at the cpu profile and seed 0, each time with empty caches of computed
results (trainings, SAEs, SVDs, concept and interpretation caches; the token streams, datasets and
converted models are shared inputs), and every recorded value compared: the results files' values,
evidence, conditions and verdicts, and the CSV tables behind the figures. Timings are excluded by
name (:data:`TIMINGS`). It takes about twice the notebooks' own time (one to two hours on 2 cores).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from compendium import paths, runner
from protot.train import config, sweep
from protot.train.trainer import read_metrics


def _tiny(seed: int = 0):
    return config.profile("smoke", arch="llama", size="tiny", context=16, batch_size=2, tokens=16 * 2 * 6, lr=1e-2,
                          warmup_steps=2, eval_every=3, eval_blocks=2, ckpt_every=6, seed=seed,
                          model_overrides=(("hidden_size", 32), ("num_hidden_layers", 1)))


def _metrics(out: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if k != "elapsed_s"} for m in read_metrics(out)]


def test_a_tiny_training_twice_at_one_seed_records_the_same_numbers(tmp_path):
    import torch

    threads = torch.get_num_threads()
    try:
        a = sweep.run(_tiny(), tmp_path / "a", reuse=False, threads=1)
        b = sweep.run(_tiny(), tmp_path / "b", reuse=False, threads=1)
    finally:
        torch.set_num_threads(threads)
    assert _metrics(a) == _metrics(b) and len(_metrics(a)) == 6 + 2
    assert _metrics(sweep.run(_tiny(seed=1), tmp_path / "c", reuse=False, threads=1)) != _metrics(a)


def test_a_trained_run_is_reused_only_when_made_the_same_way(tmp_path, monkeypatch):
    import torch

    threads = torch.get_num_threads()
    out = tmp_path / "run"
    cfg = _tiny()
    sweep.run(cfg, out)
    key = json.loads((out / sweep.REUSE_FILE).read_text())
    assert key == sweep.reuse_key(cfg) and key["threads"] == threads and key["device"] == "cpu"
    assert set(key) == {"code", "data", "tokenizer", "torch", "device", "threads"}
    stamp = (out / "summary.json").stat().st_mtime_ns
    sweep.run(cfg, out)
    assert (out / "summary.json").stat().st_mtime_ns == stamp  # reused
    # a change to the training code: trained again, and the new key recorded
    monkeypatch.setattr(sweep, "code_fingerprint", lambda: "0" * 16)
    sweep.run(cfg, out)
    assert (out / "summary.json").stat().st_mtime_ns != stamp
    assert json.loads((out / sweep.REUSE_FILE).read_text())["code"] == "0" * 16
    # a run made before runs recorded how (no reuse.json): trained again
    (out / sweep.REUSE_FILE).unlink()
    stamp = (out / "summary.json").stat().st_mtime_ns
    sweep.run(cfg, out)
    assert (out / "summary.json").stat().st_mtime_ns != stamp and (out / sweep.REUSE_FILE).exists()
    # another thread count or device is another key
    assert sweep.reuse_key(cfg, threads=threads + 1) != sweep.reuse_key(cfg)
    assert sweep.reuse_key(cfg, device="cuda") != sweep.reuse_key(cfg)


def test_the_code_fingerprint_follows_the_training_code():
    assert re.fullmatch(r"[0-9a-f]{16}", sweep.code_fingerprint())
    assert sweep.code_fingerprint(("protot.train.trainer",)) != sweep.code_fingerprint(("protot.train.packing",))
    assert "protot.models" in sweep.TRAINING_CODE and "kernels.proto_mixer" in sweep.TRAINING_CODE


# -- every notebook twice (opt-in) ----------------------------------------------------------------------
#: Recorded names whose values are timings (or decided by a time budget): not compared.
TIMINGS = re.compile(r"(^|_)(seconds|secs|ms|us|elapsed|time|times|timing|wall|per_s|tokens_per_s|throughput|"
                     r"speed|latency)($|_)|_time_ratio$|^protot_llama_ratio_|_fastest$|^longest_context_")
#: Fields of a results file judged from its values: not compared where a value is a timing.
JUDGED = ("value", "verdict", "conditions", "preconditions", "failed_preconditions", "reason")
#: Fields of a results file that say when, where and with what code, not what was measured.
NOT_VALUES = {"provenance", "run", "time_utc", "note"}
#: Caches of inputs shared by both executions; every other cache (computed results) starts empty.
SHARED_CACHES = ("tokens", "datasets", "models", "gguf")


def _fresh_cache(path: Path) -> Path:
    path.mkdir(parents=True)
    real = paths.cache_dir()
    for name in SHARED_CACHES:
        (real / name).mkdir(exist_ok=True)
        (path / name).symlink_to(real / name)
    return path


def _differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}: keys {sorted(set(a) ^ set(b))} in one run only"] if set(a) != set(b) else []
        for k in sorted(set(a) & set(b)):
            if k in NOT_VALUES or TIMINGS.search(str(k)):
                continue
            out += _differences(a[k], b[k], f"{where}.{k}" if where else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} vs {b!r}"]


def _recorded(run: Path) -> dict:
    """{relative path: content} of the results files and figure tables a run recorded."""
    import pandas as pd

    out = {}
    for f in sorted((run / "results").rglob("*.json")):
        entry = json.loads(f.read_text())
        timed = any(TIMINGS.search(k) for k in (entry.get("values") or {}))
        out[f.relative_to(run).as_posix()] = {k: v for k, v in entry.items() if not (timed and k in JUDGED)}
    for f in sorted((run / "figures").rglob("*.csv")):
        table = pd.read_csv(f)
        out[f.relative_to(run).as_posix()] = {c: table[c].tolist() for c in table.columns}
    return out


@pytest.mark.determinism
@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("name", runner.list_notebooks())
def test_a_notebook_twice_at_one_seed_records_the_same_values(name, tmp_path, monkeypatch):
    recorded = []
    for i in (1, 2):
        run = tmp_path / f"run{i}"
        monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(run))
        monkeypatch.setenv("COMPENDIUM_CACHE", str(_fresh_cache(tmp_path / f"cache{i}")))
        runner.run_notebook(name, profile="cpu", seed=0, output_dir=tmp_path / f"out{i}", progress=False)
        recorded.append(_recorded(run))
    assert recorded[0], f"{name} recorded nothing to compare"
    diffs = _differences(recorded[0], recorded[1])
    assert not diffs, f"{name} at seed 0 recorded different values in two executions:\n  " + "\n  ".join(diffs[:30])


def test_timings_are_excluded_by_name_and_nothing_else():
    for name in ("seconds", "train_seconds", "elapsed_s", "tokens_per_s", "ms_per_token", "llama_time_ratio",
                 "deltanet_fastest",
                 "protot_llama_ratio_8k", "longest_context_all", "time_utc"):
        assert TIMINGS.search(name) or name in NOT_VALUES, name
    for name in ("tokens_exponent_ratio", "min_fit_r2", "val_ppl", "drop_pct", "coverage_sae", "n_signals",
                 "rank1_fraction", "max_abs_diff", "chunk_memory_slope", "ppl"):
        assert not TIMINGS.search(name), name
    assert _differences({"a": 1.0, "elapsed_s": 3, "b": [1, {"c": 2}]}, {"a": 1.0, "elapsed_s": 4, "b": [1, {"c": 3}]}) \
        == ["b[1].c: 2 vs 3"]
    assert _differences({"x": float("nan")}, {"x": float("nan")}) == []
