"""notebook.start: the one set-up line of every notebook."""
from __future__ import annotations

import json

import pytest

from compendium import notebook


def test_start_sets_up_the_run(demo_root, monkeypatch):
    import torch

    threads = torch.get_num_threads()
    try:
        nb = notebook.start("demo/01_good", "cpu", 3, "cpu", threads=1)
        a = torch.rand(3)
        assert torch.get_num_threads() == 1
        again = notebook.start("demo/01_good", "cpu", 3, "cpu")
        assert torch.equal(torch.rand(3), a)  # seeded
    finally:
        torch.set_num_threads(threads)
    assert (nb.profile, nb.seed, nb.device, nb.paper) == ("cpu", 3, "cpu", "demo")
    assert nb.run_dir == again.run_dir and nb.run_dir.name.startswith("interactive-")
    assert nb.out == nb.run_dir / "figures" / "demo" and nb.out.is_dir()
    params = json.loads((nb.run_dir / "params.json").read_text())
    assert params["notebook"] == "demo/01_good" and params["seed"] == 3 and params["profile"] == "cpu"
    assert "build/runs/interactive-" in nb._repr_markdown_()


@pytest.mark.parametrize("args, error, message", [
    (("demo/01_good", "gpu", 0, "cpu"), ValueError, "unknown profile 'gpu'; valid profiles are 'cpu', 'paper'"),
    (("demo/01_good", "cpu", "0", "cpu"), ValueError, "SEED must be a non-negative integer, got '0'"),
    (("demo/01_good", "cpu", 1.5, "cpu"), ValueError, "SEED must be a non-negative integer, got 1.5"),
    (("demo/01_good", "cpu", True, "cpu"), ValueError, "SEED must be a non-negative integer, got True"),
    (("demo/01_good", "cpu", 0, "gpu"), ValueError, "unknown device 'gpu'; use 'cpu', 'cuda' or 'cuda:N'"),
    (("demo/01_good", "cpu", 0, "cuda:one"), ValueError, "unknown device 'cuda:one'"),
    (("demo/04_none", "cpu", 0, "cpu"), ValueError, "unknown notebook 'demo/04_none'; .*demo/01_good, demo/02_bad"),
])
def test_bad_parameters_are_clear_errors(demo_root, args, error, message):
    with pytest.raises(error, match=message):
        notebook.start(*args)


def test_cuda_without_a_gpu_is_refused(demo_root, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"DEVICE='cuda:0' was requested but torch sees no CUDA GPU .*--device cpu"):
        notebook.start("demo/01_good", "cpu", 0, "cuda:0")


def test_the_name_must_be_the_running_notebooks(demo_root, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_NOTEBOOK", "demo/02_bad")
    with pytest.raises(ValueError, match="runner is executing notebook 'demo/02_bad'"):
        notebook.start("demo/01_good", "cpu", 0, "cpu")


def test_offline_defaults_do_not_override_the_user(monkeypatch):
    from compendium import offline

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    offline.apply_offline_defaults()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "0" and os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_importing_compendium_makes_hugging_face_offline_unless_told_otherwise():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    code = "import os, {mod}; print(os.environ.get('HF_HUB_OFFLINE'), os.environ.get('HF_DATASETS_OFFLINE'))"
    for mod in ("compendium", "protot", "accpp"):
        out = subprocess.run([sys.executable, "-c", code.format(mod=mod)], env=env, capture_output=True, text=True,
                             cwd="/")
        assert out.stdout.split() == ["1", "1"], (mod, out.stderr)
    out = subprocess.run([sys.executable, "-c", code.format(mod="compendium")], env={**env, "HF_HUB_OFFLINE": "0"},
                         capture_output=True, text=True, cwd="/")
    assert out.stdout.split() == ["0", "1"], out.stderr
