"""Tests of kernels/proto_mixer's torch forms and its dispatch: gated linear attention with a
constant per-channel decay.

Three torch forms (quadratic, recurrent, chunked) agree in float64 (outputs, final states and
gradients, decays from 1e-6 to 1 - 1e-6, T = 8192 finite), and in float32 and 16-bit inputs against
float64; the one dispatch (backend rule, forms, chunk size, one default chunk size), the Triton
backend through it against the torch backend, the package's import without Triton or CUDA, and the
CPU-safe parts of the GPU benchmark script. The Triton kernels themselves:
test_proto_mixer_kernels.py; the shared inputs, tolerances and reference check:
proto_mixer_standins.py. The file takes about 10-25 s on 2 CPU cores.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import torch

from kernels.proto_mixer import (
    DEFAULT_CHUNK_SIZE,
    chunk_decay_linear_attn,
    chunk_decay_linear_attn_ref,
    decay_linear_attn,
    naive_decay_linear_attn,
    recurrent_decay_linear_attn_ref,
    resolve_backend,
)
from tests.kernels.proto_mixer_standins import RATIO, assert_close, check_against_reference, make_inputs, triton_ok


# -- the torch forms --------------------------------------------------------------------------
TORCH_FORMS = {"quadratic": naive_decay_linear_attn, "recurrent": recurrent_decay_linear_attn_ref,
               "chunk": chunk_decay_linear_attn_ref}


# deliberately nonuniform decays, incl. near 0 and near 1; one row per head
BETAS = [[1e-6, 0.05, 0.5, 0.9, 0.999, 1 - 1e-6, 0.3],
         [0.3, 0.7, 0.99, 0.2, 1 - 1e-4, 1e-3, 0.95]]


def betas_log_decay(H, K, dtype=torch.float64):
    return torch.log(torch.tensor([row[:K] for row in (BETAS * H)[:H]], dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("h0", [True, False])
@pytest.mark.parametrize("shape,chunk_size", [((2, 63, 2, 7, 60), 16), ((1, 1, 1, 3, 4), 16), ((1, 37, 1, 5, 8), 64),
                                              ((3, 64, 2, 4, 6), 32), ((2, 50, 1, 6, 9), 7)])
def test_torch_forms_agree(shape, chunk_size, h0):
    """Quadratic (reference), recurrent and chunked torch forms: same outputs, final states and
    gradients of q, k, v, log_decay and the initial state, in float64, decays from 1e-6 to 1 - 1e-6."""
    B, T, H, K, V = shape
    a = betas_log_decay(H, K)
    chunk = functools.partial(chunk_decay_linear_attn_ref, chunk_size=chunk_size)
    for fn in (recurrent_decay_linear_attn_ref, chunk):
        check_against_reference(fn, naive_decay_linear_attn, shape, torch.float64, log_decay=a, h0=h0)


def test_torch_chunk_ref_chunk_sizes():
    q, k, v, a, s0 = make_inputs(1, 50, 1, 6, 9, torch.float64, device="cpu")
    o_ref, ht_ref = naive_decay_linear_attn(q, k, v, a, s0, True)
    for C in (1, 7, 16, 64):
        o, ht = chunk_decay_linear_attn_ref(q, k, v, a, s0, True, chunk_size=C)
        assert_close(f"o C={C}", o_ref, o, 1e-12)
        assert_close(f"S C={C}", ht_ref, ht, 1e-12)


@pytest.mark.parametrize("form", sorted(TORCH_FORMS))
def test_torch_float32_against_float64(form):
    """float32 torch forms (through the dispatch) against the float64 quadratic reference."""
    q, k, v, a, s0 = make_inputs(2, 63, 2, 7, 60, torch.float64, device="cpu", log_decay=betas_log_decay(2, 7))
    o_ref, S_ref = naive_decay_linear_attn(q, k, v, a, s0, True)
    o, S = decay_linear_attn(q.float(), k.float(), v.float(), a.float(), s0.float(), True,
                             form=form, backend="torch", chunk_size=16)
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    assert_close("o", o_ref, o, RATIO[torch.float32])
    assert_close("S", S_ref, S, RATIO[torch.float32])


def test_torch_chunk_continues_from_state():
    """Two pieces with the carried state (chunked, then recurrent) equal one pass."""
    q, k, v, a, _ = make_inputs(2, 50, 2, 7, 9, torch.float64, device="cpu", h0=False, log_decay=betas_log_decay(2, 7))
    o, S = chunk_decay_linear_attn_ref(q, k, v, a, None, True, chunk_size=16)
    o1, S1 = chunk_decay_linear_attn_ref(q[:, :21], k[:, :21], v[:, :21], a, None, True, chunk_size=16)
    o2, S2 = recurrent_decay_linear_attn_ref(q[:, 21:], k[:, 21:], v[:, 21:], a, S1, True)
    assert_close("o", o, torch.cat([o1, o2], 1), 1e-12)
    assert_close("S", S, S2, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_chunk_long_sequence(dtype):
    """T = 8192 with decays near 0 and near 1: the chunked form stays finite (gradients too) and
    matches the float64 recurrence."""
    q, k, v, a, _ = make_inputs(1, 8192, 1, 7, 8, dtype, device="cpu", h0=False, log_decay=betas_log_decay(1, 7))
    a = a.to(dtype)
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v, a)]
    o, S = chunk_decay_linear_attn_ref(*xs, None, True, chunk_size=64)
    (o.sum() + S.sum()).backward()
    for name, x in [("o", o), ("S", S)] + [(f"d{n}", x.grad) for n, x in zip("qkva", xs)]:
        assert torch.isfinite(x).all(), name
    with torch.no_grad():
        o_rec, S_rec = recurrent_decay_linear_attn_ref(q.double(), k.double(), v.double(), a.double(), None, True)
    assert_close("o", o_rec, o, RATIO[dtype])
    assert_close("S", S_rec, S, RATIO[dtype])
    # the near-1 channel (beta = 1 - 1e-6) holds the whole sequence, the near-0 one its last token
    assert S[0, 0, 5].norm() > 10 * S[0, 0, 0].norm()


def test_torch_forms_half_precision_inputs():
    """16-bit and mixed-dtype inputs (as under autocast) run in float32: the output in the promoted
    input dtype, the state in float32; only the inputs' bf16 rounding remains."""
    q, k, v, a, _ = make_inputs(1, 40, 1, 7, 8, torch.float32, device="cpu", h0=False)
    ref, S_ref = decay_linear_attn(q, k, v, a, output_final_state=True, backend="torch")
    o, S = decay_linear_attn(q, k, v.bfloat16(), a, output_final_state=True, backend="torch")
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    o16, S16 = decay_linear_attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), a, output_final_state=True, backend="torch")
    assert o16.dtype == torch.bfloat16 and S16.dtype == torch.float32
    assert_close("o (bf16 inputs)", ref, o16.float(), RATIO[torch.bfloat16])
    assert_close("S (bf16 inputs)", S_ref, S16, RATIO[torch.bfloat16])


# -- dispatch and API --------------------------------------------------------------------------
def test_backend_resolution(monkeypatch):
    """One rule: "auto" -> Triton for CUDA tensors, torch elsewhere and for the quadratic reference;
    "triton" needs CUDA (or the interpreter) and a chunk or recurrent form."""
    import kernels.proto_mixer as pm

    assert resolve_backend("auto", torch.device("cpu")) == "torch"
    assert resolve_backend("auto", torch.device("cuda")) == "triton"
    assert resolve_backend("auto", torch.device("cuda"), form="recurrent") == "triton"
    assert resolve_backend("auto", torch.device("cuda"), form="quadratic") == "torch"
    assert resolve_backend("torch", torch.device("cuda")) == "torch"
    assert resolve_backend("triton", torch.device("cuda")) == "triton"
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("cuda", torch.device("cpu"))
    with pytest.raises(ValueError, match="form"):
        resolve_backend("auto", torch.device("cpu"), form="fft")
    with pytest.raises(ValueError, match="quadratic"):
        resolve_backend("triton", torch.device("cuda"), form="quadratic")
    monkeypatch.setattr(pm, "interpreting", lambda: True)
    assert resolve_backend("triton", torch.device("cpu")) == "triton"
    monkeypatch.setattr(pm, "interpreting", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        resolve_backend("triton", torch.device("cpu"))


def test_dispatch_errors():
    q, k, v, a, _ = make_inputs(1, 5, 1, 3, 4, torch.float32, device="cpu", h0=False)
    with pytest.raises(ValueError, match="form"):
        decay_linear_attn(q, k, v, a, form="fft")
    with pytest.raises(ValueError, match="log_decay"):
        decay_linear_attn(q, k, v, a[:, :2], backend="torch")
    with pytest.raises(ValueError, match="v must be"):
        decay_linear_attn(q, k, v[:, :4], a, backend="torch")
    with pytest.raises(ValueError, match="chunk_size"):
        decay_linear_attn(q, k, v, a, backend="torch", chunk_size=0)


def test_one_default_chunk_size():
    """The torch chunked form, the Triton chunked kernel and the dispatch share one default, and so
    does ProtoTConfig.chunk_size."""
    import inspect

    from kernels.proto_mixer import chunk as _  # noqa: F401  (the Triton module, for its signature)
    from kernels.proto_mixer.chunk import chunk_decay_linear_attn as kernel_entry
    from protot.models import ProtoTConfig

    for fn in (chunk_decay_linear_attn_ref, decay_linear_attn, chunk_decay_linear_attn, kernel_entry):
        assert inspect.signature(fn).parameters["chunk_size"].default == DEFAULT_CHUNK_SIZE, fn
    assert ProtoTConfig().chunk_size == DEFAULT_CHUNK_SIZE


def test_auto_backend_on_cpu_is_torch(monkeypatch):
    import kernels.proto_mixer as pm

    def boom(*a, **k):
        raise AssertionError("the Triton path was taken on the CPU with backend='auto'")

    monkeypatch.setattr(pm, "chunk_decay_linear_attn", boom)
    monkeypatch.setattr(pm, "fused_recurrent_decay_linear_attn", boom)
    q, k, v, a, s0 = make_inputs(1, 20, 1, 4, 6, torch.float32, device="cpu")
    o, ht = decay_linear_attn(q, k, v, a, s0, True)
    o_ref, ht_ref = naive_decay_linear_attn(q, k, v, a, s0, True)
    assert_close("o", o_ref, o, 1e-6)


@triton_ok
@pytest.mark.parametrize("T", [3, 40])  # decode-sized (fused recurrent) and chunked
def test_triton_backend_matches_torch_backend(T):
    q, k, v, a, s0 = make_inputs(1, T, 2, 8, 12, torch.float32)
    with torch.no_grad():
        o1, h1 = decay_linear_attn(q, k, v, a, s0, True, backend="triton")
        o2, h2 = decay_linear_attn(q, k, v, a, s0, True, backend="torch")
    assert_close("o", o2, o1, RATIO[torch.float32])
    assert_close("state", h2, h1, RATIO[torch.float32])


def test_import_does_not_need_triton_or_cuda():
    code = ("import sys, kernels.proto_mixer as m; "
            "assert 'triton' not in sys.modules, 'triton imported at package import'; print('ok')")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# -- the GPU benchmark script --------------------------------------------------------------------
def test_gpu_bench_dry_run(tmp_path):
    """benchmarks/gpu_bench.py imports and runs its CPU-safe parts (torch paths, tiny shapes)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    bench.main(["--dry-run", "--sections", "op,decode", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["meta"]["dry_run"] is True
    assert result["op"] and all(r["ok"] for r in result["op"]), result["op"]
    assert {r["impl"] for r in result["op"]} == {"protot_torch", "sdpa"}
    assert result["decode"] and all(r["ok"] for r in result["decode"]), result["decode"]
    assert all(g["met"] is None for g in result["goals"].values())
    # the goal logic itself, on made-up GPU rows
    op = [{"impl": "protot_triton", "mode": "fwd", "T": 1024, "ms": 1.2, "ok": True},
          {"impl": "fla_simple_gla", "mode": "fwd", "T": 1024, "ms": 1.0, "ok": True}]
    train = [{"arch": "protot", "context": 4096, "tokens_per_s": 2.0, "ok": True},
             {"arch": "llama", "context": 4096, "tokens_per_s": 1.0, "ok": True}]
    dec = [{"what": "model_protot", "context": c, "ms_per_token": 1.0, "ok": True} for c in (1024, 32768)]
    goals = bench.check_goals(op, train, dec)
    assert goals["kernel_vs_chunk_simple_gla"]["met"] is True
    assert goals["protot_passes_llama_training"]["first_context_where_protot_is_faster"] == 4096
    assert goals["protot_decode_flat"]["met"] is True
