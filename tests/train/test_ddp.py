"""The same entry point runs DDP under torchrun: 2 gloo processes on the CPU, each accumulating
over 2 micro-batches, reproduce the single-process run (same global batch) up to float
summation order."""
import json

import pytest
import torch
from safetensors.torch import load_file

from protot.train import checkpoint
from protot.train.trainer import read_metrics, train

from train_helpers import cli_args, run_cli, tiny_cfg


@pytest.mark.slow
def test_ddp_two_gloo_processes_match_single_process(tmp_path, streams):
    # without dropout: each rank draws its own dropout masks, so with dropout a DDP run matches a
    # single-process run in distribution only
    cfg = tiny_cfg(tokens=6 * 4 * 32, ckpt_every=6, eval_every=100, model_overrides=(("dropout", 0.0),))
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    train(cfg, single, progress=False, threads=1)
    r = run_cli(cli_args(cfg.replace(grad_accum=2), ddp, "--set", "dropout=0.0"), launcher=["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert json.loads((ddp / "config.json").read_text())["world_size"] == 2
    a = [m["loss"] for m in read_metrics(single) if "split" not in m]
    b = [m["loss"] for m in read_metrics(ddp) if "split" not in m]
    assert len(a) == len(b) == cfg.steps
    assert b == pytest.approx(a, rel=1e-4, abs=1e-5)
    wa = load_file(checkpoint.latest(single) / "model.safetensors")
    wb = load_file(checkpoint.latest(ddp) / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-3, atol=1e-4)
