"""The generic op in three torch forms (quadratic reference, recurrent, chunked): outputs, final
states and the gradients of every input agree, at odd shapes and with decays near 0 and near 1."""


import pytest
import torch

from protot.mixer import (
    decay_cumsum, decay_linear_attn, decay_linear_attn_chunk, decay_linear_attn_quadratic,
    decay_linear_attn_recurrent, half_life_to_log_decay, log_decay_from_param, log_decay_to_half_life,
    param_from_log_decay, resolve_backend,
)
from protot_testing import assert_close

# deliberately nonuniform, incl. near 0 and near 1; one row per head
BETAS = [[1e-6, 0.05, 0.5, 0.9, 0.999, 1 - 1e-6, 0.3],
         [0.3, 0.7, 0.99, 0.2, 1 - 1e-4, 1e-3, 0.95]]


def make_inputs(B, T, H, K, V, dtype, with_state, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.rand(B, T, H, K, generator=gen, dtype=torch.float64).to(dtype)     # write gates are >= 0
    v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64).to(dtype)
    betas = torch.tensor([row[:K] for row in (BETAS * H)[:H]], dtype=torch.float64)
    g = torch.log(betas).to(dtype)
    S0 = torch.randn(B, H, K, V, generator=gen, dtype=torch.float64).to(dtype) if with_state else None
    leaves = [x.requires_grad_() for x in (q, k, v, g) + ((S0,) if with_state else ())]
    return leaves


def run_form(form, inputs, chunk_size, dO, dS):
    q, k, v, g, *rest = inputs
    S0 = rest[0] if rest else None
    if form == "chunk":
        o, S = decay_linear_attn_chunk(q, k, v, g, S0, True, chunk_size=chunk_size)
    elif form == "recurrent":
        o, S = decay_linear_attn_recurrent(q, k, v, g, S0, True)
    else:
        o, S = decay_linear_attn_quadratic(q, k, v, g, S0, True)
    ((o * dO).sum() + (S * dS).sum()).backward()
    grads = [x.grad.clone() for x in inputs]
    for x in inputs:
        x.grad = None
    return o.detach(), S.detach(), grads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B,T,H,K,V,C", [(2, 63, 2, 7, 60, 16), (1, 1, 1, 3, 4, 16), (1, 37, 1, 5, 8, 64),
                                          (3, 64, 2, 4, 6, 32)])
@pytest.mark.parametrize("with_state", [False, True])
def test_forms_agree(dtype, B, T, H, K, V, C, with_state):
    inputs = make_inputs(B, T, H, K, V, dtype, with_state)
    gen = torch.Generator().manual_seed(1)
    dO = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64).to(dtype)
    dS = torch.randn(B, H, K, V, generator=gen, dtype=torch.float64).to(dtype)
    ref_o, ref_S, ref_g = run_form("quadratic", inputs, C, dO, dS)
    names = ["dq", "dk", "dv", "dlog_decay", "dS0"]
    for form in ("recurrent", "chunk"):
        o, S, grads = run_form(form, inputs, C, dO, dS)
        assert_close(f"{form} o", ref_o, o)
        assert_close(f"{form} final state", ref_S, S)
        for name, a, b in zip(names, ref_g, grads):
            assert_close(f"{form} {name}", a, b)


def test_float32_matches_float64_reference():
    """float32 forms against the float64 quadratic reference (not just against each other)."""
    inputs64 = make_inputs(2, 63, 2, 7, 60, torch.float64, True)
    ref_o, ref_S = decay_linear_attn_quadratic(*inputs64, output_final_state=True)
    inputs32 = [x.detach().float() for x in inputs64]
    for form in ("quadratic", "recurrent", "chunk"):
        o, S = decay_linear_attn(*inputs32, output_final_state=True, form=form, backend="torch", chunk_size=16)
        assert_close(f"{form} o", ref_o, o, torch.float32)
        assert_close(f"{form} S", ref_S, S, torch.float32)


def test_chunk_continues_from_state():
    """Running two halves with the carried state equals running the whole sequence."""
    q, k, v, g = (x.detach() for x in make_inputs(2, 50, 2, 7, 9, torch.float64, False))
    o, S = decay_linear_attn_chunk(q, k, v, g, None, True, chunk_size=16)
    o1, S1 = decay_linear_attn_chunk(q[:, :21], k[:, :21], v[:, :21], g, None, True, chunk_size=16)
    o2, S2 = decay_linear_attn_recurrent(q[:, 21:], k[:, 21:], v[:, 21:], g, S1, True)
    assert_close("o", o, torch.cat([o1, o2], 1))
    assert_close("S", S, S2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_sequence_finite(dtype):
    """T = 8192 with decays near 0 and near 1: chunked stays finite and matches the recurrence."""
    B, T, H, K, V = 1, 8192, 1, 7, 8
    q, k, v, g = make_inputs(B, T, H, K, V, dtype, False, seed=3)
    o, S = decay_linear_attn_chunk(q, k, v, g, None, True, chunk_size=64)
    (o.sum() + S.sum()).backward()
    for name, x in [("o", o), ("S", S), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad), ("dg", g.grad)]:
        assert torch.isfinite(x).all(), name
    # reference: the recurrence in float64 (a float32 recurrence itself drifts by ~5e-5 over 8192
    # sequential additions; the chunked form, with 64-term sums, stays at ~1e-6)
    with torch.no_grad():
        o_rec, S_rec = decay_linear_attn_recurrent(q.double(), k.double(), v.double(), g.double(), None, True)
    assert_close("o", o_rec, o, dtype)
    assert_close("S", S_rec, S, dtype)
    # the near-1 channel (beta = 1 - 1e-6) accumulates the whole sequence, the near-0 one
    # (beta = 1e-6) only its last token: the test spans both regimes
    assert S[0, 0, 5].norm() > 10 * S[0, 0, 0].norm()


@pytest.mark.parametrize("form", ["quadratic", "recurrent", "chunk"])
def test_decay_cumsum(form):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 45, 5, generator=gen, dtype=torch.float64)
    g = torch.log(torch.tensor([1e-6, 0.5, 0.9, 0.999, 1 - 1e-6], dtype=torch.float64))
    n0 = torch.rand(2, 5, generator=gen, dtype=torch.float64)
    n, nT = decay_cumsum(x, g, n0, form=form, chunk_size=16)
    ref, prev = [], n0
    for t in range(45):
        prev = g.exp() * prev + x[:, t]
        ref.append(prev)
    ref = torch.stack(ref, 1)
    assert_close("n", ref, n)
    assert_close("n_T", ref[:, -1], nT)


def test_decay_parametrisations_roundtrip():
    h = torch.tensor([1.0, 3.0, 64.0, 4096.0], dtype=torch.float64)
    g = half_life_to_log_decay(h)
    assert_close("beta^h = 1/2", torch.full_like(h, 0.5), torch.exp(g * h))
    assert_close("half-life", h, log_decay_to_half_life(g), tol=1e-12 * 4096)
    for p in ("sigmoid", "exp_softplus"):
        assert_close(p, g, log_decay_from_param(param_from_log_decay(g, p), p))
    with pytest.raises(ValueError, match="decay_parametrization"):
        log_decay_from_param(g, "tanh")


def test_dispatch_errors():
    q, k, v, g = (x.detach() for x in make_inputs(1, 5, 1, 3, 4, torch.float32, False))
    with pytest.raises(ValueError, match="form"):
        decay_linear_attn(q, k, v, g, form="fft")
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("cuda", q.device)
    with pytest.raises(RuntimeError, match="triton"):
        decay_linear_attn(q, k, v, g, backend="triton")
    assert resolve_backend("auto", q.device) == "torch"
    with pytest.raises(ValueError, match="log_decay"):
        decay_linear_attn(q, k, v, g[:, :2])
    with pytest.raises(ValueError, match="v must be"):
        decay_linear_attn(q, k, v[:, :4], g)


@pytest.mark.parametrize("normalization", ["write_mass", "count", "none"])
@pytest.mark.parametrize("include_current", [True, False])
@pytest.mark.parametrize("form", ["quadratic", "recurrent", "chunk"])
def test_channel_mix_equals_definition(normalization, include_current, form):
    """The reduction of the mixer to the generic op (q = r / (n + eps), k = w) is exact."""
    from protot.mixer import channel_mix, channel_mix_by_definition
    gen = torch.Generator().manual_seed(5)
    w = torch.softmax(torch.randn(2, 21, 5, generator=gen, dtype=torch.float64) * 2, -1)
    r = torch.softmax(torch.randn(2, 21, 5, generator=gen, dtype=torch.float64) * 2, -1)
    v = torch.randn(2, 21, 6, generator=gen, dtype=torch.float64)
    g = torch.log(torch.tensor([1e-6, 0.5, 0.9, 0.999, 1 - 1e-6], dtype=torch.float64))
    ref = channel_mix_by_definition(w, r, v, g, normalization, include_current, eps=1e-9)
    got = channel_mix(w, r, v, g, normalization, include_current, eps=1e-9, form=form, chunk_size=8)
    assert_close("mix", ref, got)


def test_matches_kernel_package_reference():
    """Our torch forms and kernels/proto_mixer's own torch reference implement the same contract."""
    kp = pytest.importorskip("kernels.proto_mixer")
    q, k, v, g, S0 = (x.detach() for x in make_inputs(2, 45, 2, 7, 12, torch.float64, True))
    ref_o, ref_S = kp.naive_decay_linear_attn(q, k, v, g, initial_state=S0, output_final_state=True)
    o, S = decay_linear_attn_chunk(q, k, v, g, S0, True, chunk_size=16)
    assert_close("o", ref_o.double(), o, torch.float32 if ref_o.dtype == torch.float32 else torch.float64)
    assert_close("S", ref_S.double(), S, torch.float32 if ref_S.dtype == torch.float32 else torch.float64)


def test_half_precision_inputs_compute_in_float32():
    """bf16 / mixed-dtype inputs (as under autocast) run, with decays and state in float32."""
    q, k, v, g = (x.detach() for x in make_inputs(1, 40, 1, 7, 8, torch.float32, False))
    ref, S_ref = decay_linear_attn(q, k, v, g, output_final_state=True)
    o, S = decay_linear_attn(q, k, v.bfloat16(), g, output_final_state=True)   # float32 q, k with bf16 v
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    o16, S16 = decay_linear_attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, output_final_state=True)
    assert o16.dtype == torch.bfloat16 and S16.dtype == torch.float32
    # only the bf16 rounding of the inputs (2^-8 relative) remains
    assert_close("o (bf16 inputs)", ref, o16.float(), tol=3e-2)
    assert_close("S (bf16 inputs)", S_ref, S16, tol=3e-2)
