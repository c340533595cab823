"""Tests of kernels/proto_mixer's Triton kernels: gated linear attention with a constant
per-channel decay.

The Triton chunked and fused recurrent kernels match a float64 reference in outputs, final states
and the gradients of every input (q, k, v, log_decay, initial_state), at odd shapes (T not a
multiple of the chunk, K from 1 to 64, V from 1 to 128 with 60 and 33 among them), in float32 and
float16; bfloat16 only on a GPU (the interpreter's bf16 tl.dot is wrong); decoding with the fused
kernel continues a chunked prefill; the chunked kernel checks its inputs; every kernel compiles
for sm_90; the ProtoT model through the Triton kernels equals the model through the torch forms
(every mixer option, decoding included) and its chunk_size reaches the kernel. Kernel outputs start
as NaN (conftest.py). Under the interpreter the file takes about 1.5 minutes on 2 CPU cores (the
T = 8192 test ~30-45 s of it). The torch forms and the dispatch: test_proto_mixer_forms.py; the
shared inputs, tolerances and reference check: proto_mixer_standins.py.

Dot precision (``kernels.proto_mixer._utils.dot_precision``, checked by test_dot_precision_rule):
every test with float32 inputs runs the kernels' tl.dot with input_precision="ieee", on a GPU and
under the interpreter alike; float16 / bfloat16 inputs use "ieee" under the interpreter and "tf32"
on a GPU. Each kernel test's ``dtype`` parameter (fp32 / fp16 / bf16) thus names its precision.
Launch grids and offsets: every kernel puts batch * heads (times chunks) on grid axis 0, decoded in
int64 (test_launch_grid_limits, test_kernels_decode_axis0_in_int64; on a GPU also
test_more_than_65535_heads and test_offsets_beyond_int32).
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import pytest
import torch

from kernels.proto_mixer import (
    chunk_decay_linear_attn,
    chunk_decay_linear_attn_ref,
    fused_recurrent_decay_linear_attn,
    naive_decay_linear_attn,
    recurrent_decay_linear_attn_ref,
)
from tests.kernels.proto_mixer_standins import (DEVICE, RATIO, assert_close, check_against_reference, cuda_only,
                                                gpu_only, make_inputs, triton_ok)


# -- the chunked Triton kernels ----------------------------------------------------------------
CHUNK_SHAPES = [
    (2, 63, 2, 16, 60),    # T < one chunk, V = 60 (not a power of two), two heads
    (1, 200, 1, 64, 128),  # R = 64 prototypes, value width 128, 4 chunks with a partial one
    (2, 37, 3, 5, 33),     # R = 5 (K padded to a block of 16), odd everything
]


@triton_ok
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", CHUNK_SHAPES, ids=lambda s: "B{}-T{}-H{}-K{}-V{}".format(*s))
def test_chunk_matches_reference(shape, dtype):
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, shape, dtype)


@triton_ok
def test_chunk_normaliser_scan_shape():
    """K = V = 1 with one head per prototype: the ProtoT normaliser n_t = beta n_{t-1} + w_t as the
    same op (q = 1, k = w, v = 1), as protot.mixer.decay_cumsum writes it."""
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, (1, 70, 8, 1, 1), torch.float32)


@triton_ok
def test_chunk_without_initial_state():
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, (1, 70, 2, 16, 24),
                            torch.float32, h0=False)


@triton_ok
@pytest.mark.parametrize("diag_3d", [False, True], ids=["diag-loop", "diag-3d"])
def test_chunk_gpu_tiling(diag_3d):
    """The GPU tiling (sub-chunks of 16 inside chunks of 64: off-diagonal tiles by pivoted tl.dot,
    diagonal tiles by a column loop) gives the same results as the interpreter's default."""
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, (1, 100, 1, 20, 40),
                            torch.float32, chunk_size=64, sub_chunk_size=16, diag_3d=diag_3d)


@triton_ok
@pytest.mark.parametrize("chunk_size", [16, 32, 128])
def test_chunk_sizes(chunk_size):
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, (1, 45, 1, 8, 20),
                            torch.float32, chunk_size=chunk_size)


@triton_ok
@pytest.mark.slow
def test_extreme_decays_long_sequence():
    """T = 8192 with decays from exp(-20) (forgets at once) to exp(-1e-4) (half-life ~6900
    tokens): nothing overflows, outputs, states and all gradients match float64."""
    K = 16
    a = -torch.logspace(-4, torch.log10(torch.tensor(20.0)).item(), K)[None]  # (H=1, K): -1e-4 ... -20
    ref = functools.partial(chunk_decay_linear_attn_ref, chunk_size=64)
    check_against_reference(chunk_decay_linear_attn, ref, (1, 8192, 1, K, 32), torch.float32, log_decay=a)


@gpu_only
@pytest.mark.gpu
def test_chunk_bfloat16():
    check_against_reference(chunk_decay_linear_attn, naive_decay_linear_attn, (2, 300, 2, 32, 64), torch.bfloat16)


# -- the fused recurrent kernel ---------------------------------------------------------------
@triton_ok
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_fused_recurrent_matches_reference(dtype):
    check_against_reference(fused_recurrent_decay_linear_attn, naive_decay_linear_attn, (2, 63, 2, 16, 60), dtype)


@triton_ok
def test_fused_recurrent_extreme_decays():
    K = 16
    a = -torch.logspace(-4, torch.log10(torch.tensor(20.0)).item(), K)[None]
    q, k, v, a, s0 = make_inputs(1, 1024, 1, K, 24, torch.float32, log_decay=a)
    o, ht = fused_recurrent_decay_linear_attn(q, k, v, a, s0, True)
    o_ref, ht_ref = chunk_decay_linear_attn_ref(*(x.double() for x in (q, k, v, a, s0)), output_final_state=True)
    assert_close("o", o_ref, o, RATIO[torch.float32])
    assert_close("final_state", ht_ref, ht, RATIO[torch.float32])


@triton_ok
def test_decoding_with_state_continues_prefill():
    """Prefill T0 tokens with the chunked kernel, decode the rest one token at a time with the
    fused recurrent kernel and the carried state: the same outputs as one pass over all tokens."""
    T0, T = 50, 54
    q, k, v, a, s0 = make_inputs(2, T, 1, 16, 20, torch.float32)
    o_full, ht_full = chunk_decay_linear_attn(q, k, v, a, s0, True)
    o0, state = chunk_decay_linear_attn(q[:, :T0], k[:, :T0], v[:, :T0], a, s0, True)
    outs = [o0]
    for t in range(T0, T):
        o_t, state = fused_recurrent_decay_linear_attn(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], a, state, True)
        outs.append(o_t)
    assert_close("o", o_full, torch.cat(outs, 1), RATIO[torch.float32])
    assert_close("state", ht_full, state, RATIO[torch.float32])


# -- input checks ------------------------------------------------------------------------------
@triton_ok
def test_input_validation():
    q, k, v, a, s0 = make_inputs(1, 8, 1, 4, 6, torch.float32)
    with pytest.raises(ValueError):
        chunk_decay_linear_attn(q, k, v, a[:, :3])
    with pytest.raises(ValueError):
        chunk_decay_linear_attn(q, k[:, :5], v, a)
    with pytest.raises(ValueError):
        chunk_decay_linear_attn(q, k, v, a, s0[..., :5])
    with pytest.raises(TypeError):
        chunk_decay_linear_attn(q.double(), k, v, a)
    # mixed dtypes (a float32 softmax gate with float16 values) run in the promoted dtype
    o_mixed, _ = chunk_decay_linear_attn(q, k, v.half(), a)
    o_ref, _ = naive_decay_linear_attn(q, k, v.half().float(), a)
    assert o_mixed.dtype == torch.float32
    assert_close("o mixed dtypes", o_ref, o_mixed, RATIO[torch.float32])
    with pytest.raises(ValueError):
        chunk_decay_linear_attn(q, k, v, a, chunk_size=48)


# -- the compiled path ---------------------------------------------------------------------------
@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """The compiled (non-interpreter) path: every kernel builds to a cubin for sm_90 with the
    GPU-default settings, on the CPU (tests/kernels/compile_for_gpu.py); ~25 s on a cold cache."""
    pytest.importorskip("triton")
    script = os.path.join(os.path.dirname(__file__), "compile_for_gpu.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert out.stdout.count("compiled ") == 9, out.stdout


# -- the ProtoT model through the kernels --------------------------------------------------------
def tiny_protot(backend, dtype=torch.float32, **overrides):
    """A tiny ProtoT at odd sizes (R = 5, P = 9, d_v = 7) with large weights (varied gates)."""
    from protot.models import build_model

    torch.manual_seed(0)
    kw = dict(variant="compendium-v1", alpha_init=1.0, init_half_life_min=0.5, init_half_life_max=40.0, num_prototypes=5, proto_dim=9,
              value_dim=7, chunk_size=16, initializer_range=0.3, mixer_backend=backend)
    kw.update(overrides)
    return build_model("protot", "tiny", 50, **kw).to(device=DEVICE, dtype=dtype)


@triton_ok
@pytest.mark.parametrize("shared_keys,include_current,norm_eps,normalization", [
    (False, True, 1e-6, "write_mass"), (True, False, 0.0, "write_mass"), (True, True, 1e-6, "count"),
    (False, False, 1e-6, "none")])
def test_model_triton_matches_torch(shared_keys, include_current, norm_eps, normalization):
    """The ProtoT model with mixer_backend="triton" (chunked kernels for the 45-token forward and
    backward, the fused recurrent kernel when decoding; every kernel output starts as NaN) equals
    the same weights with the torch forms: logits, every parameter gradient, and logits decoded
    token by token from a cached state."""
    kw = dict(shared_keys=shared_keys, include_current=include_current, norm_eps=norm_eps,
              normalization=normalization)
    tri, ref = tiny_protot("triton", **kw), tiny_protot("torch", **kw)
    ref.load_state_dict(tri.state_dict())
    ids = torch.randint(0, 50, (2, 45), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    out_t, out_r = tri(ids, labels=ids, use_cache=False), ref(ids, labels=ids, use_cache=False)
    out_t.loss.backward()
    out_r.loss.backward()
    assert_close("logits", out_r.logits, out_t.logits, RATIO[torch.float32])
    grads_r = dict(ref.named_parameters())
    for name, p in tri.named_parameters():
        assert_close(f"d{name}", grads_r[name].grad, p.grad, RATIO[torch.float32])
    with torch.no_grad():
        out = tri(ids[:, :20], use_cache=True)
        steps = [out.logits]
        for t in range(20, 24):
            out = tri(ids[:, t:t + 1], cache=out.cache, use_cache=True)
            steps.append(out.logits)
    assert_close("decoded logits", out_r.logits[:, :24], torch.cat(steps, 1), RATIO[torch.float32])


@triton_ok
@pytest.mark.parametrize("chunk_size", [16, 32])
def test_model_chunk_size_reaches_kernel(monkeypatch, chunk_size):
    """ProtoTConfig.chunk_size is passed through the dispatch to the Triton chunked kernel."""
    import kernels.proto_mixer as pm

    seen = []
    real = pm.chunk_decay_linear_attn

    def spy(q, k, v, log_decay, initial_state=None, output_final_state=False, chunk_size=None, **kw):
        seen.append(chunk_size)
        return real(q, k, v, log_decay, initial_state, output_final_state, chunk_size, **kw)

    monkeypatch.setattr(pm, "chunk_decay_linear_attn", spy)
    model = tiny_protot("triton", chunk_size=chunk_size)
    ids = torch.randint(0, 50, (1, 40), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    model(ids, labels=ids, use_cache=False).loss.backward()
    assert seen == [chunk_size] * model.config.num_hidden_layers


# -- launch grids, int64 offsets, warps, dot precision -------------------------------------------
def test_launch_grid_limits():
    from kernels.proto_mixer._utils import GRID_X_MAX, GRID_YZ_MAX, launch_grid

    # batch * heads above 65535 (the cap of grid axes 1 and 2) sits on axis 0, which is not capped there
    assert launch_grid(70_000 * 4, 2) == (280_000, 2)
    assert launch_grid(5) == (5, 1)
    assert launch_grid(GRID_X_MAX, GRID_YZ_MAX) == (GRID_X_MAX, GRID_YZ_MAX)
    with pytest.raises(ValueError, match="axis 0"):
        launch_grid(GRID_X_MAX + 1)
    with pytest.raises(ValueError, match="axis 1"):
        launch_grid(4, GRID_YZ_MAX + 1)
    with pytest.raises(ValueError, match=">= 1"):
        launch_grid(0, 1)


def _kernel_sources():
    import inspect

    from kernels.proto_mixer import chunk, fused_recurrent

    out = {}
    for mod in (chunk, fused_recurrent):
        for name, obj in vars(mod).items():
            fn = getattr(obj, "fn", None)
            if name.startswith("_") and callable(fn) and "tl.program_id" in inspect.getsource(fn):
                out[name] = inspect.getsource(fn)
    return out


def test_kernels_decode_axis0_in_int64():
    """Every kernel reads batch * head from grid axis 0, cast to int64 before any offset is formed
    (so B*T*H*V >= 2^31 cannot wrap), and never reads it from axis 1 or 2; the host launches every
    kernel through launch_grid (no literal grid tuple)."""
    import inspect

    from kernels.proto_mixer import chunk, fused_recurrent

    sources = _kernel_sources()
    assert len(sources) == 9, sorted(sources)
    for name, src in sources.items():
        assert src.count("tl.program_id(0).to(tl.int64)") == 1, name
        assert "tl.program_id(2)" not in src, name
        body = src.split("tl.program_id(0).to(tl.int64)", 1)[0]
        assert "p_" not in body.split('"""')[-1], f"{name}: an offset is formed before the int64 cast"
        line = next(ln.strip() for ln in src.splitlines() if "tl.program_id(0).to(tl.int64)" in ln)
        assert line.startswith(("i_bh", "i_x")), f"{name}: {line}"
        if line.startswith("i_x"):   # axis 0 = batch*head x chunk: batch*head is its quotient
            assert re.search(r"i_bh, i_t\w* = i_x // ", src), f"{name}: batch*head is not decoded from axis 0"
    host = inspect.getsource(chunk.chunk_fwd) + inspect.getsource(chunk.chunk_bwd) + \
        inspect.getsource(fused_recurrent.fused_recurrent_fwd)
    assert host.count("[launch_grid(") == 9 and "](" in host
    assert "[(" not in host, "a kernel is launched with a literal grid tuple"


def test_num_warps_rule():
    from kernels.proto_mixer.chunk import NUM_WARPS, num_warps

    assert num_warps("_chunk_fwd_o", 64, torch.bfloat16) == 4         # the GPU default: chunk 64, 16-bit
    assert num_warps("_chunk_bwd_dA", 64, torch.bfloat16) == NUM_WARPS["_chunk_bwd_dA"] == 8
    assert num_warps("_chunk_fwd_o", 64, torch.float32) == 8           # float32 tiles at chunk 64
    assert num_warps("_chunk_fwd_o", 128, torch.bfloat16) == 8         # chunk 128
    assert num_warps("_chunk_fwd_o", 32, torch.float32) == 4


def test_dot_precision_rule(monkeypatch):
    from kernels.proto_mixer import _utils

    for interp in ("0", "1"):
        monkeypatch.setenv("TRITON_INTERPRET", interp)
        assert _utils.dot_precision(torch.float32) == "ieee"           # float32: always exact
        assert _utils.dot_precision(torch.bfloat16) == ("ieee" if interp == "1" else "tf32")
        assert _utils.dot_precision(torch.float16) == ("ieee" if interp == "1" else "tf32")


@cuda_only
@pytest.mark.gpu
def test_more_than_65535_heads():
    """B * H = 70,000 > 65535 programs on what used to be grid axis 2: chunked forward + backward
    (float32, "ieee") against the torch chunked form, and the fused recurrent kernel."""
    shape = (2, 40, 35_000, 4, 4)
    ref = functools.partial(chunk_decay_linear_attn_ref, chunk_size=16)
    check_against_reference(chunk_decay_linear_attn, ref, shape, torch.float32, chunk_size=16)
    q, k, v, a, s0 = make_inputs(*shape, torch.float32)
    o, _ = fused_recurrent_decay_linear_attn(q[:, :8], k[:, :8], v[:, :8], a, s0)
    o_ref, _ = recurrent_decay_linear_attn_ref(q[:, :8].double(), k[:, :8].double(), v[:, :8].double(),
                                               a.double(), s0.double())
    assert_close("fused o", o_ref, o, RATIO[torch.float32])


@cuda_only
@pytest.mark.gpu
def test_offsets_beyond_int32():
    """B*T*H*V = 2^31 (bfloat16, "tf32" dots): the last batch element, whose elements lie beyond
    2^31, gets the same output and value gradient as the same element run alone (small offsets)."""
    B, T, H, K, V = 32768, 64, 1, 16, 1024
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.rand(B, T, H, K, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.softmax(torch.randn(B, T, H, K, device="cuda", generator=g), -1).to(torch.bfloat16)
    v = torch.randn(B, T, H, V, device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_(True)
    a = -torch.rand(H, K, device="cuda", generator=g)
    assert B * T * H * V >= 2**31
    o, _ = chunk_decay_linear_attn(q, k, v, a, chunk_size=64)
    do = torch.zeros_like(o)
    do[-1] = 1
    o.backward(do)
    tail = [x[-1:].detach().clone() for x in (q, k, v)]
    tail[2].requires_grad_(True)
    o1, _ = chunk_decay_linear_attn(tail[0], tail[1], tail[2], a, chunk_size=64)
    o1.backward(torch.ones_like(o1))
    assert torch.equal(o[-1:], o1), "output of the last batch element differs (offset wrap)"
    assert torch.equal(v.grad[-1:], tail[2].grad), "value gradient of the last batch element differs"


def test_interpreter_stack_check(monkeypatch):
    """triton < 3.7 with numpy >= 2.4 under the interpreter is refused with a message naming both."""
    from kernels.proto_mixer._utils import check_interpreter_stack

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match=r"triton 3\.6\.0 .* numpy 2\.4\.1"):
        check_interpreter_stack("3.6.0", "2.4.1")
    check_interpreter_stack("3.6.0", "2.3.5")
    check_interpreter_stack("3.7.1", "2.4.6")
    check_interpreter_stack("3.10.0rc1", "2.5.0")
    check_interpreter_stack()                          # the installed pair is a working one
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    check_interpreter_stack("3.6.0", "2.4.1")          # compiled kernels: numpy is not involved
