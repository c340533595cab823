"""Helpers shared by the tests of kernels/proto_mixer (test_proto_mixer_forms.py,
test_proto_mixer_kernels.py): where the kernels run (a CUDA GPU or Triton's interpreter) and the
skip marks that follow, the tolerances per dtype, ProtoT-like inputs, and the check of an
implementation against a float64 reference in outputs, final states and every gradient.
Without a GPU the conftest files set TRITON_INTERPRET=1 before the tests import this module."""
from __future__ import annotations

import os

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA and not INTERPRET else "cpu"
triton_ok = pytest.mark.skipif(not (INTERPRET or HAS_CUDA), reason="Triton needs a CUDA GPU or TRITON_INTERPRET=1")
gpu_only = pytest.mark.skipif(not HAS_CUDA or INTERPRET, reason="bfloat16 tl.dot needs a real GPU (wrong under the interpreter)")
cuda_only = pytest.mark.skipif(not HAS_CUDA or INTERPRET, reason="needs a CUDA GPU (compiled kernels, large memory)")


# Tolerances per dtype, in one place: the relative RMS error ||x - ref|| / ||ref|| against a
# float64 reference computed from the same (rounded) inputs. The kernels accumulate in float32
# (tl.dot with input_precision="ieee"), so float16 inputs only add the rounding of outputs and
# gradients to float16 (~5e-4 relative) plus float32 accumulation.
RATIO = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def assert_close(name: str, ref: torch.Tensor, tri: torch.Tensor, ratio: float) -> None:
    """Relative RMS error of tri against ref at most ratio; tri must be finite everywhere (so a
    NaN left in an unwritten output fails)."""
    assert tri.shape == ref.shape, f"{name}: shape {tuple(tri.shape)} != {tuple(ref.shape)}"
    tri64, ref64 = tri.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.isfinite(tri64).all(), f"{name}: non-finite values ({(~torch.isfinite(tri64)).sum().item()})"
    err = (tri64 - ref64).pow(2).mean().sqrt() / ref64.pow(2).mean().sqrt().clamp_min(1e-30)
    assert err <= ratio, f"{name}: relative RMS error {err.item():.3e} > {ratio:.1e}"


def make_inputs(B, T, H, K, V, dtype, seed=0, log_decay=None, h0=True, device=DEVICE):
    """ProtoT-like inputs: k a softmax over the K prototypes (the write gate), q positive (read
    gate / normaliser), v Gaussian values, decays spread over [-4, -0.01] unless given."""
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(B, T, H, K, generator=g) * 2
    k = torch.softmax(torch.randn(B, T, H, K, generator=g) * 2, dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    a = -torch.exp(torch.empty(H, K).uniform_(-4.6, 1.4, generator=g)) if log_decay is None else log_decay
    s0 = torch.randn(B, H, K, V, generator=g) if h0 else None
    cast = lambda x, dt: None if x is None else x.to(device=device, dtype=dt)
    state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    return cast(q, dtype), cast(k, dtype), cast(v, dtype), cast(a, state_dtype), cast(s0, state_dtype)


def run_with_grads(fn, q, k, v, a, s0, do, dht, dtype=None, **kw):
    """Runs fn (optionally in another dtype) and returns o, final state and the gradients of
    (sum(o * do) + sum(S_T * dht)) w.r.t. q, k, v, log_decay, initial_state."""
    xs = [None if x is None else x.detach().clone() for x in (q, k, v, a, s0)]
    if dtype is not None:
        xs = [None if x is None else x.to(dtype) for x in xs]
    for x in xs:
        if x is not None:
            x.requires_grad_(True)
    o, ht = fn(*xs, output_final_state=True, **kw)
    loss = (o * do.to(o.dtype)).sum() + (ht * dht.to(ht.dtype)).sum()
    loss.backward()
    return o, ht, [None if x is None else x.grad for x in xs]


def check_against_reference(fn, ref_fn, shape, dtype, seed=0, log_decay=None, h0=True, **kw):
    B, T, H, K, V = shape
    q, k, v, a, s0 = make_inputs(B, T, H, K, V, dtype, seed=seed, log_decay=log_decay, h0=h0)
    g = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(B, T, H, V, generator=g).to(q.device)
    dht = torch.randn(B, H, K, V, generator=g).to(q.device)
    o, ht, grads = run_with_grads(fn, q, k, v, a, s0, do, dht, **kw)
    o_ref, ht_ref, grads_ref = run_with_grads(ref_fn, q, k, v, a, s0, do, dht, dtype=torch.float64)
    assert o.dtype == dtype and ht.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    r = RATIO[dtype]
    assert_close("o", o_ref, o, r)
    assert_close("final_state", ht_ref, ht, r)
    for name, g_ref, g_tri in zip(["dq", "dk", "dv", "dlog_decay", "dh0"], grads_ref, grads):
        if g_ref is None:
            assert g_tri is None, name
            continue
        assert_close(name, g_ref, g_tri, r)
