"""protot.models.loss.linear_cross_entropy: the loss fused with the output projection equals
F.cross_entropy(h @ W.T, labels) and its gradients (float64: to rounding), at every chunk size
including chunks that do not divide the rows, with ignored rows; and the model's
``return_logits=False`` path gives the same loss and parameter gradients as the plain path."""

import pytest
import torch
import torch.nn.functional as F

from protot.models import build_model
from protot.models.loss import linear_cross_entropy
from protot_testing import assert_close


def _inputs(N=37, d=8, V=29, dtype=torch.float64, seed=0, ignore_every=5):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, d, generator=g, dtype=dtype).requires_grad_()
    W = torch.randn(V, d, generator=g, dtype=dtype).requires_grad_()
    y = torch.randint(0, V, (N,), generator=g)
    if ignore_every:
        y[::ignore_every] = -100
    return h, W, y


def _plain(h, W, y):
    loss = F.cross_entropy(h @ W.T, y, ignore_index=-100)
    return (loss, *torch.autograd.grad(loss, [h, W]))


@pytest.mark.parametrize("chunk_rows", [1, 5, 16, 37, 1000])
@pytest.mark.parametrize("ignore_every", [0, 3])
def test_equals_plain_cross_entropy_float64(chunk_rows, ignore_every):
    h, W, y = _inputs(ignore_every=ignore_every)
    ref = _plain(h, W, y)
    loss = linear_cross_entropy(h, W, y, chunk_rows=chunk_rows)
    got = (loss, *torch.autograd.grad(loss, [h, W]))
    for name, a, b in zip(("loss", "grad h", "grad W"), ref, got):
        assert_close(name, a, b)


def test_scaled_upstream_gradient_and_float32():
    h, W, y = _inputs(dtype=torch.float32)
    ref_loss = F.cross_entropy(h @ W.T, y)
    ref = torch.autograd.grad(3.5 * ref_loss, [h, W])
    got = torch.autograd.grad(3.5 * linear_cross_entropy(h, W, y, chunk_rows=7), [h, W])
    for name, a, b in zip(("grad h", "grad W"), ref, got):
        assert_close(name, a, b)


def test_large_logits_do_not_overflow():
    h, W, y = _inputs()
    h = (h.detach() * 1e3).requires_grad_()                     # logits ~1e4: exp would overflow
    ref = _plain(h, W, y)
    loss = linear_cross_entropy(h, W, y, chunk_rows=4)
    got = (loss, *torch.autograd.grad(loss, [h, W]))
    for name, a, b in zip(("loss", "grad h", "grad W"), ref, got):
        assert torch.isfinite(b).all(), name
        assert_close(name, a, b)


def test_gradcheck():
    h, W, y = _inputs(N=6, d=3, V=5, ignore_every=4)
    assert torch.autograd.gradcheck(lambda a, b: linear_cross_entropy(a, b, y, chunk_rows=4), (h, W))


def test_no_grad_and_all_ignored():
    h, W, y = _inputs()
    with torch.no_grad():
        assert_close("loss", F.cross_entropy(h @ W.T, y), linear_cross_entropy(h, W, y, chunk_rows=8))
    assert torch.isnan(linear_cross_entropy(h, W, torch.full_like(y, -100)))
    assert torch.isnan(F.cross_entropy(h @ W.T, torch.full_like(y, -100)))   # same convention


@pytest.mark.parametrize("bad, match", [
    (dict(labels=torch.tensor([0, 1])), "labels must be"),
    (dict(labels=torch.full((37,), 29)), "outside"),
    (dict(labels=torch.full((37,), -3)), "outside"),
    (dict(labels=torch.zeros(37)), "integer"),
    (dict(weight=torch.zeros(29, 9, dtype=torch.float64)), "same d"),
    (dict(chunk_rows=0), "chunk_rows"),
])
def test_bad_input(bad, match):
    h, W, y = _inputs()
    kw = dict(h=h, weight=W, labels=y, chunk_rows=8)
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        linear_cross_entropy(**kw)


@pytest.mark.parametrize("arch, overrides", [
    ("protot", dict(variant="compendium-v1", shared_keys=True, include_current=False)), ("protot", {}),
    ("llama", {}), ("deltanet", {}), ("mamba", {})])
def test_model_loss_only_path_matches_plain(arch, overrides):
    torch.manual_seed(0)
    model = build_model(arch, "tiny", 97, max_position_embeddings=32, **overrides).double().eval()   # no dropout
    x = torch.randint(0, 97, (3, 32))
    labels = x.clone()
    labels[0, 5:9] = -100
    out = model(input_ids=x, labels=labels)
    ref = torch.autograd.grad(out.loss, list(model.parameters()))
    fused = model(input_ids=x, labels=labels, return_logits=False)
    assert fused.logits is None
    got = torch.autograd.grad(fused.loss, list(model.parameters()))
    assert_close("loss", out.loss, fused.loss)
    for (name, _), a, b in zip(model.named_parameters(), ref, got):
        assert_close(name, a, b)


def test_model_loss_only_needs_labels():
    model = build_model("llama", "tiny", 97, max_position_embeddings=16)
    x = torch.randint(0, 97, (1, 16))
    with pytest.raises(ValueError, match="needs labels"):
        model(input_ids=x, return_logits=False)
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(input_ids=x, labels=x, return_logits=False, logits_to_keep=1)


def test_under_bfloat16_autocast():
    """The GPU trainer runs the loss under bf16 autocast: the fused path must run there too and be no
    less accurate than the plain path, both measured against the float32 loss and gradient (CPU
    autocast stands in for CUDA's)."""
    torch.manual_seed(0)
    model = build_model("protot", "tiny", 97, max_position_embeddings=32).eval()    # eval: no dropout
    x = torch.randint(0, 97, (2, 32))
    params = list(model.parameters())

    def run(return_logits, autocast):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=x, labels=x, return_logits=return_logits).loss
        return loss, torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])

    ref_loss, ref_grad = run(True, False)
    plain_loss, plain_grad = run(True, True)
    fused_loss, fused_grad = run(False, True)
    assert fused_loss.dtype == torch.float32 and torch.isfinite(fused_grad).all()
    plain_err = ((plain_grad - ref_grad).norm() / ref_grad.norm()).item()
    fused_err = ((fused_grad - ref_grad).norm() / ref_grad.norm()).item()
    assert plain_err < 0.05                                        # bf16 noise, not a broken reference
    assert fused_err <= max(2 * plain_err, 1e-3), (fused_err, plain_err)
    assert abs(fused_loss.item() - ref_loss.item()) <= max(2 * abs(plain_loss.item() - ref_loss.item()), 1e-3)
