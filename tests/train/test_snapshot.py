"""Snapshots of a run in progress, and continuing a run whose folder was lost from its snapshot:
the run goes on at the snapshot's step, on the batches the uninterrupted run would have used, with
a fresh optimiser and a re-warm-up recorded in the budget history."""
import json
import math
import shlex
import shutil

import pytest
import torch
from safetensors.torch import load_file

from protot.train import checkpoint, pretrained
from protot.train.__main__ import main
from protot.train.trainer import SNAPSHOT_EVENT, lr_at, read_metrics, train

from train_helpers import run_cli, tiny_cfg


def _steps(out):
    return {m["step"]: m for m in read_metrics(out) if "split" not in m}


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTOT_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


def test_snapshot_delete_resume_from_snapshot(tmp_path, models, streams, tracked_unchanged):
    cfg = tiny_cfg()
    ref = tmp_path / "ref"
    train(cfg, ref, progress=False, threads=1)
    want = _steps(ref)
    assert len(want) == 12 and len({m["batch_sha1"] for m in want.values()}) == 12

    run = tmp_path / "run"
    train(cfg, run, progress=False, threads=1, max_steps=8)
    r = run_cli(["snapshot", str(run), "tiny-snap"], module=("-m", "protot.train.pretrained"))
    assert r.returncode == 0, r.stderr[-3000:]
    folder = models / "tiny-snap"
    assert sorted(p.name for p in folder.iterdir()) == ["MANIFEST.json", "config.json", "model.safetensors"]
    man = json.loads((folder / "MANIFEST.json").read_text())
    assert man["kind"] == "snapshot" and man["status"] == "in-progress"
    assert man["steps"] == 8 and man["planned_steps"] == 12
    assert man["tokens_seen"] == 8 * cfg.tokens_per_step and man["tokens_planned"] == 12 * cfg.tokens_per_step
    assert man["budget_history"] == [] and man["train_config"] == cfg.to_dict() and man["dtype"] == "float16"
    assert "resume_command_missing_fields" not in man
    # float16 copies of the checkpoint's weights, no optimiser state
    ck = load_file(checkpoint.latest(run) / "model.safetensors")
    snap = load_file(folder / "model.safetensors")
    assert all(v.dtype == torch.float16 for v in snap.values())
    for k, v in snap.items():
        torch.testing.assert_close(v, ck[k].half(), rtol=0, atol=0)
    assert pretrained.load("tiny-snap").manifest["steps"] == 8
    assert "snapshot, in-progress: step 8 of 12" in pretrained.describe("tiny-snap")

    shutil.rmtree(run)  # the machine lost the run folder
    cmd = shlex.split(man["resume_command"])
    assert cmd[:3] == ["python", "-m", "protot.train"] and "--resume-from-snapshot" in cmd
    main(cmd[3:] + ["--no-progress", "--max-steps", "10"])  # the exact command from the manifest
    got = _steps(run)
    assert sorted(got) == [9, 10]  # continues at the snapshot's step ...
    # ... on the uninterrupted run's batches (no batch repeats, none skipped)
    assert [got[s]["batch_sha1"] for s in (9, 10)] == [want[s]["batch_sha1"] for s in (9, 10)]
    state = json.loads((checkpoint.latest(run) / "state.json").read_text())
    event = state["budget_history"][-1]
    assert event["event"] == SNAPSHOT_EVENT and event["step"] == 8 and event["rewarm_steps"] == 50
    assert event["optimizer"] == "fresh AdamW" and event["snapshot_weights_sha256"] == man["weights_sha256"]
    # later exact resumes (local checkpoints exist again) keep the re-warm-up ramp
    main(cmd[3:] + ["--no-progress"])
    got = _steps(run)
    assert sorted(got) == [9, 10, 11, 12]
    assert [got[s]["batch_sha1"] for s in got] == [want[s]["batch_sha1"] for s in got]
    for s in got:
        assert got[s]["lr"] == lr_at(cfg, s - 1, (8, 50))
        assert got[s]["lr"] == pytest.approx(lr_at(cfg, s - 1) * (s - 8) / 50, rel=1e-12)
        assert math.isfinite(got[s]["loss"])
    # the weights continued from the snapshot: the first step's loss is the snapshot's, not a fresh model's
    assert abs(got[9]["loss"] - want[9]["loss"]) < 0.05 < abs(want[1]["loss"] - want[9]["loss"])

    # the next snapshot of the continued run says so
    man2 = pretrained.snapshot(run, "tiny-snap")
    assert man2["status"] == "final" and man2["steps"] == 12
    assert man2["budget_history"] == state["budget_history"]
    assert man2["budget_history"][-1]["snapshot"] == str(folder)
    assert json.loads((folder / "MANIFEST.json").read_text()) == json.loads(json.dumps(man2))
    assert sorted(p.name for p in models.iterdir()) == ["tiny-snap"]


def test_resume_from_snapshot_is_only_used_when_the_run_is_gone(tmp_path, models, streams, tracked_unchanged):
    cfg = tiny_cfg()
    run = tmp_path / "run"
    train(cfg, run, progress=False, threads=1, max_steps=4)
    pretrained.snapshot(run, "s")
    train(cfg, run, resume=True, progress=False, threads=1, max_steps=8)
    # the local checkpoint (step 8, exact) wins over the older snapshot (step 4)
    train(cfg, run, progress=False, threads=1, max_steps=10, snapshot=models / "s")
    state = json.loads((checkpoint.latest(run) / "state.json").read_text())
    assert state["step"] == 10 and state["budget_history"] == []


def test_snapshot_refusals(tmp_path, models, streams, tracked_unchanged):
    cfg = tiny_cfg()
    run = tmp_path / "run"
    train(cfg, run, progress=False, threads=1, max_steps=8)
    exported = models / "exported"
    exported.mkdir(parents=True)
    (exported / "MANIFEST.json").write_text('{"name": "exported"}')
    with pytest.raises(FileExistsError, match="is not a snapshot"):
        pretrained.snapshot(run, "exported")
    assert json.loads((exported / "MANIFEST.json").read_text()) == {"name": "exported"}
    pretrained.snapshot(run, "s")
    other = tmp_path / "other"
    train(cfg.replace(lr=1e-3), other, progress=False, threads=1, max_steps=4)
    with pytest.raises(FileExistsError, match="snapshot of another run"):
        pretrained.snapshot(other, "s")
    early = tmp_path / "early"
    train(cfg, early, progress=False, threads=1, max_steps=4)
    with pytest.raises(FileExistsError, match="at step 8, ahead of"):
        pretrained.snapshot(early, "s")
    assert json.loads((models / "s/MANIFEST.json").read_text())["steps"] == 8
    # a snapshot only continues the run it belongs to
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"identity\.lr"):
        train(cfg.replace(lr=1e-3), tmp_path / "new", progress=False, threads=1, snapshot=models / "s")
    with pytest.raises(FileNotFoundError, match="snapshot .*nope not found"):
        train(cfg, tmp_path / "new2", progress=False, threads=1, snapshot=models / "nope")
