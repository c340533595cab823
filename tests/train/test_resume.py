"""Killing a run at any step and resuming reproduces the uninterrupted run's losses exactly (CPU);
corrupted or mismatched checkpoints fail with a clear error."""
import json

import pytest
import torch

from protot.train import checkpoint
from protot.train.trainer import lr_at, read_metrics, train

from train_helpers import cli_args, run_cli, tiny_cfg


def _losses(out):
    return {m["step"]: m["loss"] for m in read_metrics(out) if "split" not in m}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [4, 6])  # right after a checkpoint, and between two
def test_kill_and_resume_is_bit_exact(tmp_path, streams, kill_at):
    cfg = tiny_cfg()
    ref = tmp_path / "ref"
    train(cfg, ref, progress=False, threads=1)
    want = _losses(ref)
    assert len(want) == cfg.steps == 12

    run = tmp_path / "run"
    killed = run_cli(cli_args(cfg, run, "--kill-at-step", str(kill_at)))
    assert killed.returncode != 0  # SIGKILL: no cleanup ran
    assert checkpoint.latest(run).name == "step-000004"  # the checkpoint before the kill
    assert max(_losses(run)) == kill_at  # the log ran past the checkpoint...
    resumed = run_cli(cli_args(cfg, run, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = _losses(run)
    assert got == want  # ...and is rewound, then reproduced bit for bit
    assert [m["loss"] for m in read_metrics(run) if "split" in m] == \
           [m["loss"] for m in read_metrics(ref) if "split" in m]


def _checkpointed(tmp_path):
    cfg = tiny_cfg()
    out = tmp_path / "run"
    train(cfg, out, progress=False, threads=1, max_steps=4)
    return cfg, out, checkpoint.latest(out)


def test_corrupted_checkpoint_fails_clearly(tmp_path, streams):
    cfg, out, ck = _checkpointed(tmp_path)
    blob = bytearray((ck / "model.safetensors").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (ck / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(checkpoint.CorruptCheckpointError, match="model.safetensors does not match"):
        train(cfg, out, resume=True, progress=False, threads=1)
    (ck / "checksums.json").unlink()
    with pytest.raises(checkpoint.CorruptCheckpointError, match="not written completely"):
        train(cfg, out, resume=True, progress=False, threads=1)


def test_mismatched_checkpoint_fails_clearly(tmp_path, streams):
    cfg, out, ck = _checkpointed(tmp_path)
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"identity\.lr"):
        train(cfg.replace(lr=1e-3), out, resume=True, progress=False, threads=1)
    with pytest.raises(checkpoint.CheckpointMismatchError, match="arch"):
        train(cfg.replace(arch="llama"), out, resume=True, progress=False, threads=1)
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"identity\.tokens"):
        train(cfg.replace(tokens=8 * 4 * 32), out, resume=True, progress=False, threads=1)
    # a fresh (non-resume) run refuses to overwrite existing checkpoints
    with pytest.raises(checkpoint.CheckpointError, match="already holds checkpoints"):
        train(cfg, out, progress=False, threads=1)
    # settings that do not change the mathematics may change on resume
    train(cfg.replace(eval_every=100), out, resume=True, progress=False, threads=1, max_steps=5)
    state = json.loads((checkpoint.latest(out) / "state.json").read_text())
    assert state["step"] == 5 and state["tokens_seen"] == 5 * cfg.tokens_per_step


def test_schedule_warmup_then_cosine():
    cfg = tiny_cfg(tokens=100 * 4 * 32, warmup_steps=10)
    lrs = [lr_at(cfg, s) for s in range(cfg.steps)]
    assert lrs[0] == pytest.approx(cfg.lr / 10) and lrs[9] == pytest.approx(cfg.lr)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(cfg.lr * cfg.min_lr_ratio, rel=0.01)


def test_export_and_load_pretrained_roundtrip(tmp_path, monkeypatch, streams):
    from protot.train import pretrained

    cfg = tiny_cfg()
    run = tmp_path / "run"
    train(cfg, run, progress=False, threads=1, max_steps=4)
    monkeypatch.setenv("PROTOT_MODELS", str(tmp_path / "models"))
    man = pretrained.export(run, "tiny-test", eval_blocks=4)
    assert pretrained.available() == ["tiny-test"]
    assert man["tokens_seen"] == 4 * cfg.tokens_per_step and man["dtype"] == "float16"
    assert set(man["eval"]) == {"validation", "wikitext2-test"} and man["eval"]["validation"]["ppl"] > 1
    m = pretrained.load("tiny-test")
    assert "tiny-test" in pretrained.describe("tiny-test")
    assert next(m.model.parameters()).dtype == torch.float32
    ids = m.tokenizer(" women", return_tensors="pt")["input_ids"]
    assert ids.shape == (1, 1)
    assert torch.isfinite(m.model(input_ids=ids).logits).all()
    # a modified weights file is refused
    w = tmp_path / "models" / "tiny-test" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="sha256"):
        pretrained.load("tiny-test")


def test_retarget_budget_on_resume_is_recorded(tmp_path, streams):
    cfg, out, ck = _checkpointed(tmp_path)
    short = cfg.replace(tokens=6 * 4 * 32)
    train(short, out, resume=True, retarget_budget=True, progress=False, threads=1)
    state = json.loads((checkpoint.latest(out) / "state.json").read_text())
    assert state["step"] == 6 and state["identity"]["tokens"] == short.tokens
    assert state["budget_history"] == [{"step": 4, "from_tokens": cfg.tokens, "to_tokens": short.tokens}]
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"identity\.lr"):
        train(short.replace(lr=1e-3), out, resume=True, retarget_budget=True, progress=False, threads=1)


def test_mamba_run_started_with_the_reference_scan_resumes(tmp_path, streams, monkeypatch):
    """A Mamba run checkpointed while the model ran the token-by-token scan (the only form before the
    chunked scan) resumes under the chunked scan: the checkpoint's identity and weights fit, and the
    resumed steps' losses equal those of a run that kept the reference scan, to float32 rounding
    (the same maths, the summation order of a few sums apart)."""
    from protot.models.selective_scan import selective_scan_reference

    cfg = tiny_cfg(arch="mamba")
    ref, run = tmp_path / "ref", tmp_path / "run"
    calls = []

    def reference(x, dt, A, Bm, Cm, D, h0, chunk_size):
        calls.append(x.shape)
        return selective_scan_reference(x, dt, A, Bm, Cm, D, h0)

    with monkeypatch.context() as m:
        m.setattr("protot.models.mamba.selective_scan_chunked", reference)
        train(cfg, ref, progress=False, threads=1, max_steps=8)
        train(cfg, run, progress=False, threads=1, max_steps=4)
    assert calls                                                        # the reference scan did run
    assert checkpoint.latest(run).name == "step-000004"
    train(cfg, run, resume=True, progress=False, threads=1, max_steps=8)
    want = {m["step"]: m for m in read_metrics(ref) if "split" not in m}
    got = {m["step"]: m for m in read_metrics(run) if "split" not in m}
    assert sorted(got) == sorted(want) == list(range(1, 9))
    for s in range(1, 9):
        for key in ("loss", "grad_norm"):
            if s <= 4:                                                  # the same code up to the checkpoint
                assert got[s][key] == want[s][key], (s, key)
            else:
                assert abs(got[s][key] - want[s][key]) <= 1e-5 * abs(want[s][key]), (s, key, got[s], want[s])
