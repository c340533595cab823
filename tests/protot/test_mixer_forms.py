"""The mixer's own maths (protot.mixer): the normaliser in its three forms, the read query with its
zero-normaliser rule, the gates, the reduction of the mixer to the op (``channel_mix``) against its
definition by explicit sums. The op's forms themselves are tested in tests/kernels/test_proto_mixer_forms.py."""


import pytest
import torch

from protot.mixer import (
    channel_mix, channel_mix_by_definition, decay_cumsum, gate, gate_logits, half_life_to_log_decay,
    log_decay_from_param, log_decay_to_half_life, param_from_log_decay, read_query,
)
from protot_testing import assert_close

BETAS = [1e-6, 0.05, 0.5, 0.9, 0.999, 1 - 1e-6, 0.3]   # deliberately nonuniform, incl. near 0 and near 1


def scan_by_loop(x, g, n0):
    ref, prev = [], n0
    for t in range(x.shape[1]):
        prev = g.exp() * prev + x[:, t]
        ref.append(prev)
    return torch.stack(ref, 1)


@pytest.mark.parametrize("form", ["quadratic", "recurrent", "chunk"])
@pytest.mark.parametrize("T,C", [(45, 16), (1, 16), (64, 32), (33, 7), (5, 64)])
@pytest.mark.parametrize("with_initial", [True, False])
def test_decay_cumsum(form, T, C, with_initial):
    """n_t = beta n_{t-1} + x_t in every form, at odd lengths and chunk sizes, values and gradients."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, T, 7, generator=gen, dtype=torch.float64).requires_grad_()
    g = torch.log(torch.tensor(BETAS, dtype=torch.float64)).requires_grad_()
    n0 = torch.rand(2, 7, generator=gen, dtype=torch.float64).requires_grad_() if with_initial else None
    leaves = [x, g] + ([n0] if with_initial else [])
    dn = torch.randn(2, T, 7, generator=gen, dtype=torch.float64)
    n, nT = decay_cumsum(x, g, n0, form=form, chunk_size=C)
    ref = scan_by_loop(x, g, n0 if with_initial else torch.zeros(2, 7, dtype=torch.float64))
    assert_close("n", ref, n, tol=1e-12)
    assert_close("n_T", ref[:, -1], nT, tol=1e-12)
    got = torch.autograd.grad((n * dn).sum() + nT.sum(), leaves)
    want = torch.autograd.grad((ref * dn).sum() + ref[:, -1].sum(), leaves)
    for name, a, b in zip(["dx", "dlog_decay", "dn0"], want, got):
        assert_close(name, a, b, tol=1e-12)


def test_decay_cumsum_float32_and_errors():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(1, 300, 7, generator=gen, dtype=torch.float64)
    g = torch.log(torch.tensor(BETAS, dtype=torch.float64))
    ref = scan_by_loop(x, g, torch.zeros(1, 7, dtype=torch.float64))
    n, _ = decay_cumsum(x.float(), g.float(), form="chunk", chunk_size=32)
    assert n.dtype == torch.float32
    assert_close("float32 chunk", ref, n, torch.float32)
    n16, _ = decay_cumsum(x.bfloat16(), g.float(), form="chunk")
    assert n16.dtype == torch.float32                                   # computed in float32
    with pytest.raises(ValueError, match="form"):
        decay_cumsum(x, g, form="fft")
    with pytest.raises(ValueError, match="log_decay"):
        decay_cumsum(x, g[:3])
    with pytest.raises(ValueError, match="initial"):
        decay_cumsum(x, g, torch.zeros(1, 3, dtype=torch.float64))


def test_read_query_zero_normaliser():
    """eps = 0: where n = 0 the query (and so the channel) is 0, with finite gradients; elsewhere r / n.
    eps > 0: the plain r / (n + eps)."""
    r = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64, requires_grad=True)
    n = torch.tensor([[0.0, 2.0, 1e-3]], dtype=torch.float64, requires_grad=True)
    q = read_query(r, n, 0.0)
    assert torch.equal(q.detach(), torch.tensor([[0.0, 0.15, 0.5 / 1e-3]], dtype=torch.float64))
    q[:, :2].sum().backward()
    assert torch.isfinite(r.grad).all() and torch.isfinite(n.grad).all()
    assert r.grad[0, 0] == 0 and n.grad[0, 0] == 0
    assert torch.equal(read_query(r, n, 1e-6), r / (n + 1e-6))


def test_gate_mask_clamp_and_similarity():
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(2, 5, 9, generator=gen, dtype=torch.float64)
    P = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    logits = gate_logits(a, P, "dot")
    assert_close("dot", a @ P.t() / 3.0, logits)
    cos = gate_logits(a, P, "cosine")
    assert cos.abs().max() <= 1 + 1e-12
    w = gate(logits, 0.5, mask={1, 4})
    assert (w[..., [1, 4]] == 0).all()
    assert_close("sums to 1", torch.ones(2, 5, dtype=torch.float64), w.sum(-1))
    assert_close("temperature", torch.softmax(logits / 0.5, -1)[..., 0], gate(logits, 0.5)[..., 0])
    assert (gate(logits, 1.0, clamp={2: 0.25})[..., 2] == 0.25).all()
    with pytest.raises(ValueError, match="all prototypes masked"):
        gate(logits, 1.0, mask=set(range(6)))
    with pytest.raises(ValueError, match="similarity"):
        gate_logits(a, P, "l2")


def test_decay_parametrisations_roundtrip():
    h = torch.tensor([1.0, 3.0, 64.0, 4096.0], dtype=torch.float64)
    g = half_life_to_log_decay(h)
    assert_close("beta^h = 1/2", torch.full_like(h, 0.5), torch.exp(g * h))
    assert_close("half-life", h, log_decay_to_half_life(g), tol=1e-12 * 4096)
    for p in ("sigmoid", "exp_softplus"):
        assert_close(p, g, log_decay_from_param(param_from_log_decay(g, p), p))
    with pytest.raises(ValueError, match="decay_parametrization"):
        log_decay_from_param(g, "tanh")


@pytest.mark.parametrize("normalization", ["write_mass", "count", "none"])
@pytest.mark.parametrize("include_current", [True, False])
@pytest.mark.parametrize("form", ["quadratic", "recurrent", "chunk"])
@pytest.mark.parametrize("eps", [1e-9, 0.0])
def test_channel_mix_equals_definition(normalization, include_current, form, eps):
    """The reduction of the mixer to the op (q = r / (n + eps), k = w) is exact, eps = 0 included
    (then position 0 of the exclusive form, which has no past, reads 0, not 0/0)."""
    gen = torch.Generator().manual_seed(5)
    w = torch.softmax(torch.randn(2, 21, 5, generator=gen, dtype=torch.float64) * 2, -1)
    r = torch.softmax(torch.randn(2, 21, 5, generator=gen, dtype=torch.float64) * 2, -1)
    v = torch.randn(2, 21, 6, generator=gen, dtype=torch.float64)
    g = torch.log(torch.tensor([1e-6, 0.5, 0.9, 0.999, 1 - 1e-6], dtype=torch.float64))
    ref = channel_mix_by_definition(w, r, v, g, normalization, include_current, eps=eps)
    got = channel_mix(w, r, v, g, normalization, include_current, eps=eps, form=form, chunk_size=8)
    assert_close("mix", ref, got, tol=1e-12)
    if not include_current:
        assert (got[:, 0] == 0).all() and (ref[:, 0] == 0).all()


def test_channel_mix_masked_prototype_eps_zero():
    """A prototype that never receives any write (masked: w = 0 exactly) has n = 0 at every
    position; with eps = 0 it reads 0 and the mix stays finite and equal to the definition."""
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(1, 17, 4, generator=gen, dtype=torch.float64)
    w = gate(logits, 1.0, mask={2})
    r = gate(logits, 0.5)
    v = torch.randn(1, 17, 3, generator=gen, dtype=torch.float64)
    g = torch.log(torch.tensor([0.5, 0.9, 0.99, 0.3], dtype=torch.float64))
    for form in ("quadratic", "recurrent", "chunk"):
        got = channel_mix(w, r, v, g, "write_mass", True, eps=0.0, form=form, chunk_size=4)
        assert_close(form, channel_mix_by_definition(w, r, v, g, "write_mass", True, eps=0.0), got, tol=1e-12)


@pytest.mark.parametrize("T,C", [(5, 16), (40, 16), (33, 32), (256, 32)])
def test_decay_cumsum_chunk_batch_invariant(T, C):
    """A sequence's normaliser has the same bits alone as in a batch (float32): robustness and
    ablation comparisons of identical inputs computed in different batches see no rounding noise."""
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(8, T, 8, generator=gen)
    a = -torch.rand(8, generator=gen) * 3
    n, nT = decay_cumsum(x, a, form="chunk", chunk_size=C)
    for b in range(8):
        nb, nTb = decay_cumsum(x[b:b + 1], a, form="chunk", chunk_size=C)
        assert torch.equal(n[b:b + 1], nb) and torch.equal(nT[b:b + 1], nTb)
