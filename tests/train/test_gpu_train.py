"""protot.train.gpu (the one-GPU training command) and the portable uint16 token pack, on the CPU.

The dry run is the GPU command's own code path (the same functions, pack reader, loop, evaluation,
export) at tiny sizes on the CPU; what only a GPU can check (bfloat16 autocast, the Triton mixer,
the time plan) is the GPU session's job (benchmarks/gpu_session.sh).
"""
from __future__ import annotations

import hashlib
import json
import tarfile

import numpy as np
import pytest
import torch

from protot.train import gpu, packing

VOCAB = 97


def make_pack(path, n_train=6000, n_val=600, seed=0):
    rng = np.random.default_rng(seed)
    # a learnable stream (a repeated pattern with noise), so a few steps lower the loss
    base = np.tile(np.arange(VOCAB, dtype=np.uint16), (n_train + n_val) // VOCAB + 1)
    noise = rng.integers(0, VOCAB, base.size).astype(np.uint16)
    stream = np.where(rng.random(base.size) < 0.1, noise, base)
    info = {"vocab_size": VOCAB, "source": "synthetic test stream", "data_key": {"train": "t", "validation": "v"},
            "tokenizer": {"file": "none", "sha256": "0" * 64}}
    return packing.write_u16_pack(path, {"train": stream[:n_train], "validation": stream[n_train:n_train + n_val]},
                                  info)


# -- the pack ------------------------------------------------------------------------------------
def test_pack_round_trip(tmp_path):
    meta = make_pack(tmp_path / "p")
    parts, info = packing.read_u16_pack(tmp_path / "p")
    assert info == meta and set(parts) == {"train", "validation"}
    assert parts["train"].dtype == np.dtype("<u2") and len(parts["train"]) == 6000 and len(parts["validation"]) == 600
    raw = np.fromfile(tmp_path / "p" / packing.PACK_TOKENS, dtype="<u2")
    assert (tmp_path / "p" / packing.PACK_TOKENS).stat().st_size == 2 * 6600
    np.testing.assert_array_equal(parts["validation"], raw[6000:])
    assert meta["sha256"] == hashlib.sha256(raw.tobytes()).hexdigest()


def test_pack_damage_is_refused(tmp_path):
    make_pack(tmp_path / "p")
    f = tmp_path / "p" / packing.PACK_TOKENS
    data = bytearray(f.read_bytes())
    data[10] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(packing.PackError, match="sha256"):
        packing.read_u16_pack(tmp_path / "p")
    f.write_bytes(bytes(data[:-2]))
    with pytest.raises(packing.PackError, match="truncated"):
        packing.read_u16_pack(tmp_path / "p")
    with pytest.raises(packing.PackError, match="not a token pack"):
        packing.read_u16_pack(tmp_path / "missing")
    with pytest.raises(packing.PackError, match="outside uint16"):
        packing.write_u16_pack(tmp_path / "q", {"train": np.array([1, 70000])})


# -- the plan --------------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", gpu.SETTINGS)
def test_plan_fits_its_caps(setting):
    """The token budget of LLaMA and ProtoT, at the stated FLOPs per token and assumed FLOP/s, takes
    less than the model's cap; the caps of the eight models fit the session's training stage."""
    from protot.train.trainer import build_model

    plan = gpu.PLAN[setting]
    for arch in ("llama", "protot"):
        cfg = gpu.train_config(arch, setting, dry_run=False)
        assert cfg.context == 256 and cfg.batch_size == 128
        assert cfg.size == setting and cfg.tokens == cfg.steps * cfg.tokens_per_step
        assert abs(cfg.tokens - plan["tokens"]) < cfg.tokens_per_step
        with torch.device("meta"):
            model = build_model(cfg, 12288)
        seconds = cfg.tokens * gpu.flops_per_token(model, cfg.context) / plan["assumed_flops"]
        assert seconds < plan["cap_s"], (arch, setting, seconds)
        if arch == "protot":
            assert model.config.chunk_size == 64
    # the documented per-token figures (docstring): ~45 MFLOP small, ~0.25 GFLOP large
    with torch.device("meta"):
        m = build_model(gpu.train_config("protot", setting, False), 12288)
    fpt = gpu.flops_per_token(m, 256)
    assert (40e6 < fpt < 50e6) if setting == "small" else (2.2e8 < fpt < 2.8e8), fpt
    assert sum(gpu.PLAN[s]["cap_s"] * len(gpu.FAMILIES) for s in gpu.SETTINGS) <= 330


# -- the dry run -----------------------------------------------------------------------------------
def test_dry_run_trains_exports_and_loads(tmp_path):
    from protot.train.config import TrainConfig
    from protot.train.trainer import build_model
    from safetensors.torch import load

    make_pack(tmp_path / "pack")
    out = tmp_path / "out"
    result = gpu.main(["train", "--dry-run", "--pack", str(tmp_path / "pack"), "--out", str(out),
                       "--archs", "protot", "mamba", "--sizes", "small", "large"])
    assert result["dry_run"] is True
    names = ["protot-small-dry", "mamba-small-dry", "protot-large-dry", "mamba-large-dry"]
    assert list(result["models"]) == names
    assert json.loads((out / "gpu_train.json").read_text())["models"].keys() == set(names)
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([f"{n}.tar" for n in names] + ["gpu_train.json"]), files
    for name in names:
        man = result["models"][name]
        assert man["steps"] == gpu.DRY["steps"] and man["planned_steps"] == gpu.DRY["steps"]
        assert man["gpu_run"]["stopped_by_time_cap"] is False
        assert np.isfinite(man["gpu_run"]["validation"]["loss"])
        assert man["tokens_seen"] == gpu.DRY["steps"] * gpu.DRY["batch_size"] * gpu.DRY["context"]
        with tarfile.open(out / f"{name}.tar") as tar:
            blobs = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}
        assert set(blobs) == {"model.safetensors", "config.json", "MANIFEST.json", "metrics.jsonl"}
        inner = json.loads(blobs["MANIFEST.json"])
        assert inner["weights_sha256"] == hashlib.sha256(blobs["model.safetensors"]).hexdigest()
        # the manifest rebuilds the model and the fp16 weights load into it (protot.train.pretrained's way)
        cfg = TrainConfig.from_dict(inner["train_config"])
        model = build_model(cfg, inner["model_config"]["vocab_size"])
        state = load(blobs["model.safetensors"])
        assert all(t.dtype == torch.float16 for t in state.values())
        model.load_state_dict(state, strict=False)
        missing = set(model.state_dict()) - set(state)
        assert missing <= {"lm_head.weight"}        # tied to the embedding
        assert len(blobs["metrics.jsonl"].decode().splitlines()) >= 2
    assert result["models"]["mamba-small-dry"]["train_config"]["grad_accum"] == 2     # the micro-batch path
    assert gpu.train_config("mamba", "large", False).grad_accum == 2
    assert gpu.train_config("llama", "large", False).grad_accum == 1
    large = build_model(TrainConfig.from_dict(result["models"]["protot-large-dry"]["train_config"]), VOCAB)
    assert large.config.num_hidden_layers == 3


def test_bad_input(tmp_path):
    with pytest.raises(SystemExit):
        gpu.main(["train", "--dry-run", "--pack", str(tmp_path), "--out", str(tmp_path / "o"), "--archs", "gpt"])
    with pytest.raises(packing.PackError, match="not a token pack"):
        gpu.main(["train", "--dry-run", "--pack", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    packing.write_u16_pack(tmp_path / "p", {"train": np.arange(500)})
    with pytest.raises(ValueError, match="validation"):
        gpu.main(["train", "--dry-run", "--pack", str(tmp_path / "p"), "--out", str(tmp_path / "o")])


# -- the models' output: the cache under every transformers version --------------------------------
def test_model_output_cache_field():
    """out.cache is the model's RecurrentCache whatever transformers calls the field
    (``past_key_values`` before its rename, ``cache`` after); generate() reuses it."""
    from protot.models import RecurrentCache, build_model
    from protot.models.common import CACHE_RENAMED

    torch.manual_seed(0)
    model = build_model("protot", "tiny", 50).eval()
    ids = torch.randint(0, 50, (1, 6))
    out = model(ids, use_cache=True)
    assert isinstance(out.cache, RecurrentCache) and out.cache.seen_tokens == 6
    assert "cache" in out.keys()
    if not CACHE_RENAMED:
        assert out.past_key_values is out.cache and "past_key_values" in out.keys()
    step = model(ids[:, -1:], cache=out.cache, use_cache=True)
    assert step.cache is out.cache and out.cache.seen_tokens == 7
    seen = []
    real = model.forward

    def spy(*a, **kw):
        seen.append(kw["input_ids"].shape[1])
        return real(*a, **kw)

    model.forward = spy
    gen = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert gen.shape == (1, 9)
    assert seen == [6, 1, 1], seen       # the prompt once, then one token per step: the cache is used


def test_gpu_session_script_dry_run(tmp_path):
    """benchmarks/gpu_session.sh runs end to end (DRY_RUN=1: tiny training and the benchmark's decode
    section on the CPU) and leaves only result files, none above 16 MiB, at most 7 of them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    make_pack(tmp_path / "pack")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PACK": str(tmp_path / "pack"), "DRY_RUN": "1",
           "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(root / "benchmarks" / "gpu_session.sh")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (out / "session.log").read_text()
    assert "training exit: 0" in log and "gpu_bench exit: 0" in log, log[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["gpu_bench.json", "gpu_train.json", "protot-small-dry.tar", "session.log"], files
    assert all((out / f).stat().st_size <= gpu.MAX_FILE_BYTES for f in files)
    bench = json.loads((out / "gpu_bench.json").read_text())
    assert bench["meta"]["dry_run"] and bench["decode"] and all(r["ok"] for r in bench["decode"])
