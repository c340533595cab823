"""Mamba's chunked selective scan equals the token-by-token reference: outputs, final state and
every gradient, in float64 (1e-10) and float32 (1e-5, the shared tolerance of protot_testing), for
odd lengths, with and without an initial state, at the model's initial step sizes and larger ones;
its hand-written backward passes gradcheck; the Mamba model runs the chunked form by default and
gives the reference form's results, so weights move freely between the two."""
import math

import pytest
import torch

from protot.models import build_model
from protot.models.mamba import MambaMixer
from protot.models.selective_scan import CHUNK_SIZE, selective_scan_chunked, selective_scan_reference
from protot_testing import assert_close

#: dt ranges (log-uniform): the model's initial range (dt_min, dt_max) and larger steps a trained
#: model can reach (dt * |A| up to 160 decays a state to exactly 0 in float32 within one token)
DT_RANGES = {"init": (1e-3, 1e-1), "large": (1e-1, 10.0)}
GRAD_NAMES = ["dx", "ddt", "dA", "dB", "dC", "dD", "dh0"]


def scan_inputs(B, T, E, N, dtype, dt_range="init", h0=True, seed=0):
    """Realistic magnitudes: x, B, C, D ~ N(0, 1); dt log-uniform in ``dt_range``; A the S4D-real
    initialisation -(n + 1) with a random factor in [0.5, 2] per entry (a trained A is no longer
    the same for every channel); h0 ~ N(0, 1) or None."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = (math.log(v) for v in DT_RANGES[dt_range])
    x = torch.randn(B, T, E, generator=g, dtype=torch.float64)
    dt = torch.exp(lo + (hi - lo) * torch.rand(B, T, E, generator=g, dtype=torch.float64))
    A = -torch.arange(1, N + 1, dtype=torch.float64) * 2.0 ** (2 * torch.rand(E, N, generator=g, dtype=torch.float64) - 1)
    Bm = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    Cm = torch.randn(B, T, N, generator=g, dtype=torch.float64)
    D = torch.randn(E, generator=g, dtype=torch.float64)
    h = torch.randn(B, E, N, generator=g, dtype=torch.float64) if h0 else None
    return [None if t is None else t.to(dtype).requires_grad_() for t in (x, dt, A, Bm, Cm, D, h)]


def run(fn, inputs, seed=1):
    """y, h_T and the gradients of every input of sum(y * gy) + sum(h_T * gh) for random gy, gh."""
    y, h = fn(*inputs)
    g = torch.Generator().manual_seed(seed)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(y.dtype)
    gh = torch.randn(h.shape, generator=g, dtype=torch.float64).to(h.dtype)
    wrt = [t for t in inputs if t is not None]
    grads = torch.autograd.grad((y * gy).sum() + (h * gh).sum(), wrt)
    return y.detach(), h.detach(), grads


def assert_matches_reference(inputs, chunk_size, dtype=None):
    ref = run(selective_scan_reference, inputs)
    got = run(lambda *t: selective_scan_chunked(*t, chunk_size=chunk_size), inputs)
    assert_close("y", ref[0], got[0], dtype)
    assert_close("h_T", ref[1], got[1], dtype)
    for name, a, b in zip(GRAD_NAMES, ref[2], got[2]):
        assert_close(name, a, b, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T", [1, 7, 257])
@pytest.mark.parametrize("h0", [False, True])
@pytest.mark.parametrize("dt_range", ["init", "large"])
@pytest.mark.parametrize("chunk_size", [5, CHUNK_SIZE])
def test_chunked_equals_reference(dtype, T, h0, dt_range, chunk_size):
    assert_matches_reference(scan_inputs(2, T, 24, 16, dtype, dt_range, h0), chunk_size)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradients_at_model_size(dtype):
    """The authors-small Mamba's scan shape (E = 512, N = 16; T = 257 so the last chunk is partial),
    two sequences, the model's initial step sizes."""
    assert_matches_reference(scan_inputs(2, 257, 512, 16, dtype), CHUNK_SIZE)


@pytest.mark.parametrize("h0", [False, True])
def test_gradcheck(h0):
    """The hand-written backward against finite differences (float64), over three chunks, the last
    one partial."""
    inputs = [t for t in scan_inputs(2, 5, 3, 2, torch.float64, h0=h0) if t is not None]
    fn = (lambda x, dt, A, Bm, Cm, D, *h: selective_scan_chunked(x, dt, A, Bm, Cm, D, *h, chunk_size=2))
    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("which", ["forward", "backward"])
def test_chunk_boundary_carries_state(which):
    """The state crosses every chunk boundary: T = 10 in chunks of 4, no initial state. The output
    after the first chunk depends on the first chunk's tokens (forward), and the first tokens'
    gradients on the later outputs (backward); a scan that restarted a chunk from zeros (or from
    h0), or dropped the carried gradient, fails here."""
    x, dt, A, Bm, Cm, D, _ = scan_inputs(1, 10, 6, 4, torch.float64, h0=False)
    inputs = [x, dt, A, Bm, Cm, D]
    ref = run(selective_scan_reference, inputs)
    got = run(lambda *t: selective_scan_chunked(*t, chunk_size=4), inputs)
    if which == "forward":
        assert_close("y", ref[0], got[0])
        assert_close("h_T", ref[1], got[1])
    else:
        for name, a, b in zip(GRAD_NAMES, ref[2], got[2]):
            assert_close(name, a, b)
    # the carried part is not negligible here: the last chunk's output moves with the first token
    yl = lambda x0: selective_scan_reference(x0, dt, A, Bm, Cm, D)[0][:, 8:]
    dx0 = torch.zeros_like(x)
    dx0[:, 0] = 1.0
    assert (yl(x + dx0) - yl(x)).abs().max() > 1e-3


def test_chunk_size_must_be_positive():
    inputs = scan_inputs(1, 3, 2, 2, torch.float64)
    with pytest.raises(ValueError, match="chunk_size"):
        selective_scan_chunked(*inputs, chunk_size=0)


def test_model_forms_agree_and_share_weights():
    """A Mamba built with scan="reference" and one with the default (chunked) hold the same
    parameters and give the same loss and parameter gradients on the same weights."""
    torch.manual_seed(0)
    fast = build_model("mamba", "tiny", 50, chunk_size=3).double()
    assert fast.config.scan == "chunked"
    ref = build_model("mamba", "tiny", 50, scan="reference").double()
    ref.load_state_dict(fast.state_dict(), strict=True)
    ids = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(1))
    for m in (fast, ref):
        m(ids, labels=ids).loss.backward()
    assert_close("loss", ref(ids, labels=ids).loss, fast(ids, labels=ids).loss)
    for (n, a), (_, b) in zip(ref.named_parameters(), fast.named_parameters()):
        assert_close(n, a.grad, b.grad)


def test_training_builds_the_chunked_scan(monkeypatch):
    """protot.train's authors-small Mamba runs the chunked scan: with the reference form made to
    fail, its forward and backward still run."""
    from protot.train.config import profile
    from protot.train.trainer import build_model as train_build_model

    def refuse(*a, **k):
        raise AssertionError("the reference scan ran")

    monkeypatch.setattr("protot.models.mamba.selective_scan_reference", refuse)
    model = train_build_model(profile("authors-small", arch="mamba"), 50)
    assert model.config.scan == "chunked"
    assert all(isinstance(block.mixer, MambaMixer) for block in model.layers)
    ids = torch.randint(0, 50, (1, 20))
    model(ids, labels=ids).loss.backward()
