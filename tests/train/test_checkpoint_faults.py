"""Damaged or failed checkpoints: the advice in each error works when followed, an empty or bad
LATEST says so, leftovers of killed saves are cleaned (only those of dead processes), and a failed
write (full disk) says so and leaves the previous checkpoint usable."""
import errno
import json
import re
import resource
import shlex
import signal
import subprocess
import sys

import pytest

from protot.train import checkpoint
from protot.train.trainer import read_metrics, train

from train_helpers import tiny_cfg


def _run(tmp_path, steps=8):
    cfg = tiny_cfg()
    out = tmp_path / "run"
    train(cfg, out, progress=False, threads=1, max_steps=steps)
    return cfg, out


def _follow(advice: str):
    """Carry out the advice of an error message: 'delete X and write its name into LATEST (echo N > P)'."""
    m = re.search(r"echo (step-\d+) > (\S+)\)", advice)
    assert m, advice
    d = re.search(r"delete (\S+) and write", advice)
    if d:
        import shutil

        shutil.rmtree(d.group(1))
    subprocess.run(f"echo {m.group(1)} > {shlex.quote(m.group(2))}", shell=True, check=True)
    return m.group(1)


def test_corruption_advice_leads_to_a_working_resume(tmp_path, streams, tracked_unchanged):
    cfg, out = _run(tmp_path)
    ck = checkpoint.latest(out)
    assert ck.name == "step-000008"
    blob = bytearray((ck / "optimizer.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (ck / "optimizer.pt").write_bytes(bytes(blob))
    with pytest.raises(checkpoint.CorruptCheckpointError) as e:
        train(cfg, out, resume=True, progress=False, threads=1, max_steps=10)
    msg = str(e.value)
    assert "optimizer.pt does not match" in msg and "step-000004" in msg
    assert _follow(msg) == "step-000004"
    train(cfg, out, resume=True, progress=False, threads=1, max_steps=10)
    assert checkpoint.latest(out).name == "step-000010"
    assert [m["step"] for m in read_metrics(out) if "split" not in m] == list(range(1, 11))


def test_latest_naming_a_deleted_checkpoint_is_exact_and_repairable(tmp_path, streams, tracked_unchanged):
    cfg, out = _run(tmp_path)
    import shutil

    shutil.rmtree(checkpoint.ckpt_root(out) / "step-000008")  # what the old advice said to do
    with pytest.raises(checkpoint.CorruptCheckpointError) as e:
        checkpoint.latest(out)
    msg = str(e.value)
    assert f"{checkpoint.ckpt_root(out) / 'LATEST'} names step-000008, but " in msg and "does not exist" in msg
    assert "Complete checkpoints here: step-000004." in msg
    assert _follow(msg) == "step-000004"
    assert checkpoint.latest(out).name == "step-000004"


@pytest.mark.parametrize("content, needle", [("", "is empty (corrupt)"), ("\n", "is empty (corrupt)"),
                                             ("\x00\x00garbage", "is corrupt: it holds")])
def test_empty_or_garbled_latest_says_so(tmp_path, streams, content, needle, tracked_unchanged):
    cfg, out = _run(tmp_path)
    (checkpoint.ckpt_root(out) / "LATEST").write_text(content)
    with pytest.raises(checkpoint.CorruptCheckpointError, match=re.escape(needle)) as e:
        train(cfg, out, resume=True, progress=False, threads=1, max_steps=9)
    assert "checksums.json" not in str(e.value)
    assert _follow(str(e.value)) == "step-000008"  # the newest complete one
    train(cfg, out, resume=True, progress=False, threads=1, max_steps=9)
    assert checkpoint.latest(out).name == "step-000009"


def test_no_other_checkpoint_advice(tmp_path, streams, tracked_unchanged):
    cfg = tiny_cfg(keep_checkpoints=1)
    out = tmp_path / "run"
    train(cfg, out, progress=False, threads=1, max_steps=4)
    (checkpoint.latest(out) / "checksums.json").unlink()
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no other complete checkpoint"):
        train(cfg, out, resume=True, progress=False, threads=1)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporary_folders_are_removed_only_for_dead_processes(tmp_path, streams, tracked_unchanged):
    cfg, out = _run(tmp_path, steps=4)
    root = checkpoint.ckpt_root(out)
    dead = root / f".tmp-step-000008-{_dead_pid()}"
    live_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        live = root / f".tmp-step-000008-{live_proc.pid}"
        for d in (dead, live):
            d.mkdir()
            (d / "model.safetensors").write_bytes(b"partial")
        other = root / "notes-tmp"
        other.mkdir()
        train(cfg, out, resume=True, progress=False, threads=1, max_steps=5)  # resume cleans, then saves
        assert not dead.exists()
        assert live.exists() and other.exists()  # another live writer's folder and unrelated files stay
        dead2 = root / f".tmp-step-000009-{_dead_pid()}"
        dead2.mkdir()
        train(cfg, out, resume=True, progress=False, threads=1, max_steps=6)
        assert not dead2.exists() and live.exists()
    finally:
        live_proc.kill()
        live_proc.wait()
    assert checkpoint.clean_stale(out) == [live]


def test_full_disk_on_save_is_reported_and_the_previous_checkpoint_survives(tmp_path, streams, monkeypatch,
                                                                             tracked_unchanged):
    cfg, out = _run(tmp_path, steps=4)
    root = checkpoint.ckpt_root(out)
    before = {p.name for p in root.iterdir()}
    real = checkpoint._write_file

    def full(path, data):
        if path.name == "optimizer.pt":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(checkpoint, "_write_file", full)
    with pytest.raises(checkpoint.CheckpointWriteError) as e:
        train(cfg, out, resume=True, progress=False, threads=1, max_steps=8)
    msg = str(e.value)
    assert "could not write checkpoint step-000008" in msg and "the disk is full" in msg
    assert str(root) in msg and "MiB free" in msg and "step-000004 and LATEST are intact" in msg
    assert "iostream" not in msg
    assert {p.name for p in root.iterdir()} == before  # no temporary folder, no partial step-000008
    monkeypatch.setattr(checkpoint, "_write_file", real)
    train(cfg, out, resume=True, progress=False, threads=1, max_steps=8)
    assert checkpoint.latest(out).name == "step-000008"


def test_real_write_failure_from_the_os_is_reported(tmp_path, streams, tracked_unchanged):
    """A file-size limit makes the OS refuse the writes of safetensors/torch themselves (EFBIG)."""
    cfg, out = _run(tmp_path, steps=4)
    root = checkpoint.ckpt_root(out)
    before = {p.name for p in root.iterdir()}
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))
        with pytest.raises(checkpoint.CheckpointWriteError, match=r"could not write checkpoint step-000008.*too large"):
            train(cfg, out, resume=True, progress=False, threads=1, max_steps=8)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert {p.name for p in root.iterdir()} == before
    assert checkpoint.latest(out).name == "step-000004"
    state = checkpoint.verify(checkpoint.latest(out))
    assert state["step"] == 4 and json.loads((root / "step-000004" / "state.json").read_text())["step"] == 4
